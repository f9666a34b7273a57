//! The shortest path from this crate to a working KV-aware router: subscribe to N engines, keep
//! a `DefaultIndexer` current, and answer "which worker should serve these tokens?".
//!
//! ```text
//! cargo run --release --features vllm --example router -- [--block-size 16] [--lora NAME] ENGINE...
//! ```
//!
//! Each `ENGINE` is `[ID=]EVENTS[+REPLAY]`: the engine's event socket (`tcp://` or `ipc://`),
//! optionally `+` its replay socket, optionally preceded by the worker id its events belong to:
//! `3=tcp://10.0.0.5:5557+tcp://10.0.0.5:5558`. Without an id, the worker is named after the
//! pod in the message topic (`kv@<pod>@<model>`); vLLM's and SGLang's default topic is empty, so
//! give ids for them. `--bind ADDR` also listens on ADDR for engines that connect out (they must
//! publish `kv@<pod>@<model>` topics). Then type queries on stdin, one per line: token ids
//! separated by spaces or commas (a JSON array works too). At the end of input it prints the
//! subscriber's counters.
//!
//! Against the test publisher (two engines with two data-parallel ranks each):
//!
//! ```text
//! python3 tests/publisher/vllm_publisher.py --port-base 5557 --batches 100000 --interval 0.01
//! cargo run --release --features vllm --example router -- \
//!     tcp://127.0.0.1:5557+tcp://127.0.0.1:5558 tcp://127.0.0.1:5559+tcp://127.0.0.1:5560
//! ```
//!
//! and paste the publisher's `sample_query`.

use std::collections::HashMap;
use std::io::BufRead;
use std::sync::{Arc, Mutex};

use flash_indexer::ingest::{EngineEndpoint, Subscriber, SubscriberConfig, Topic};
use flash_indexer::pool::{PoolConfig, WriterPool};
use flash_indexer::{DefaultIndexer, hash};

struct Args {
    block_size: usize,
    lora: Option<String>,
    engines: Vec<EngineEndpoint>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        block_size: 16,
        lora: None,
        engines: Vec::new(),
    };
    let mut argv = std::env::args().skip(1);
    while let Some(arg) = argv.next() {
        match arg.as_str() {
            "--block-size" => {
                let value = argv.next().ok_or("--block-size needs a value")?;
                args.block_size = value
                    .parse()
                    .ok()
                    .filter(|&size| size > 0)
                    .ok_or(format!("--block-size: {value:?} is not a positive number"))?;
            }
            "--lora" => args.lora = Some(argv.next().ok_or("--lora needs a name")?),
            "--bind" => {
                let address = argv.next().ok_or("--bind needs an address")?;
                args.engines.push(EngineEndpoint::bind(address));
            }
            "-h" | "--help" => return Err(String::new()),
            engine => args.engines.push(parse_engine(engine)?),
        }
    }
    if args.engines.is_empty() {
        return Err("name at least one engine".into());
    }
    Ok(args)
}

fn parse_engine(engine: &str) -> Result<EngineEndpoint, String> {
    let (worker, sockets) = match engine.split_once('=') {
        Some((id, sockets)) => {
            let id = id
                .parse()
                .map_err(|_| format!("{id:?} is not a worker id"))?;
            (Some(id), sockets)
        }
        None => (None, engine),
    };
    let endpoint = match sockets.split_once('+') {
        Some((events, replay)) => EngineEndpoint::new(events).with_replay(replay),
        None => EngineEndpoint::new(sockets),
    };
    Ok(match worker {
        Some(id) => endpoint.with_worker(id),
        None => endpoint,
    })
}

fn parse_tokens(line: &str) -> Result<Vec<u32>, String> {
    line.split(|c: char| c.is_whitespace() || matches!(c, ',' | '[' | ']'))
        .filter(|t| !t.is_empty())
        .map(|t| t.parse().map_err(|_| format!("{t:?} is not a token id")))
        .collect()
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(problem) => {
            if !problem.is_empty() {
                eprintln!("router: {problem}");
            }
            eprintln!(
                "usage: router [--block-size N] [--lora NAME] [--bind ADDR] [ID=]EVENTS_ENDPOINT[+REPLAY_ENDPOINT]..."
            );
            std::process::exit(2);
        }
    };

    // Engines without an id: worker ids are handed out per pod name, in the order pods are
    // first heard from, after the largest id given on the command line.
    let first_free = args
        .engines
        .iter()
        .filter_map(|e| e.worker)
        .max()
        .map_or(0, |id| id + 1);
    let pods: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let resolver = {
        let pods = Arc::clone(&pods);
        move |topic: &Topic<'_>| {
            let mut pods = pods.lock().unwrap();
            let next = first_free + pods.len() as u64;
            Some(*pods.entry(topic.pod.to_owned()).or_insert(next))
        }
    };

    let index = Arc::new(DefaultIndexer::default());
    let pool = Arc::new(WriterPool::new(index, PoolConfig::default()));
    let subscriber = Subscriber::spawn_with_resolver(
        Arc::clone(&pool),
        args.engines,
        resolver,
        SubscriberConfig::default(),
    )
    .unwrap_or_else(|e| {
        eprintln!("router: {e}");
        std::process::exit(2);
    });
    eprintln!("router: subscribed; type token ids, one query per line");

    for line in std::io::stdin().lock().lines() {
        let line = line.expect("stdin");
        if line.trim().is_empty() {
            continue;
        }
        let tokens = match parse_tokens(&line) {
            Ok(tokens) => tokens,
            Err(problem) => {
                println!("error: {problem}");
                continue;
            }
        };
        let query = match &args.lora {
            Some(name) => hash::local_hashes_lora(&tokens, args.block_size, name),
            None => hash::local_hashes(&tokens, args.block_size),
        };
        let scores = pool.find_matches(&query);
        let names: HashMap<u64, String> = pods
            .lock()
            .unwrap()
            .iter()
            .map(|(name, &id)| (id, name.clone()))
            .collect();
        let name = |id: u64| names.get(&id).cloned().unwrap_or_else(|| id.to_string());
        match scores.best() {
            Some((worker, depth)) => println!(
                "best: {} rank {} ({depth} of {} blocks cached); all: {:?}",
                name(worker.id),
                worker.dp_rank,
                query.len(),
                scores
                    .to_sorted_vec()
                    .iter()
                    .map(|(w, d)| format!("{}/{}={d}", name(w.id), w.dp_rank))
                    .collect::<Vec<_>>()
            ),
            None => println!("best: none of {} blocks cached anywhere", query.len()),
        }
    }
    eprintln!("router: {:?}", subscriber.stats());
    if let Some(problem) = subscriber.last_problem() {
        eprintln!("router: last problem: {problem}");
    }
}
