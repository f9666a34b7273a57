//! End to end over real ZeroMQ (feature `vllm`): a Python publisher declares vLLM's msgspec
//! structs and publishes batches in both encodings on loopback, drops messages (recovered
//! through replay) and restarts an engine, while a third engine never comes up; the subscriber's
//! index must end up exactly equal to `NaiveIndexer` fed the same batches, for every layout.
//!
//! Needs `python3` with `pyzmq` and `msgspec` (`pip install pyzmq msgspec`), so it is ignored by
//! default; `.ci/run` installs both and runs it with `--ignored`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Lines};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flash_indexer::ingest::{
    EngineEndpoint, EventMapper, MapConfig, Subscriber, SubscriberConfig, Topic, decode_batch,
};
use flash_indexer::pool::{PoolConfig, WriterPool};
use flash_indexer::{EventKind, KvIndex, LocalHash, NaiveIndexer, SeqHash, Worker, layouts};

const PODS: u64 = 2;
const BATCHES: u64 = 300;

/// Worker ids: `pod-<i>` is worker `i + 1`.
fn resolve(topic: &Topic<'_>) -> Option<u64> {
    Some(topic.pod.strip_prefix("pod-")?.parse::<u64>().ok()? + 1)
}

struct Publisher {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    log: PathBuf,
}

impl Publisher {
    fn start(name: &str) -> Self {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/publisher/vllm_publisher.py"
        );
        let log = std::env::temp_dir().join(format!(
            "flash-ingest-{}-{}.jsonl",
            std::process::id(),
            name.replace('/', "-")
        ));
        let mut child = Command::new("python3")
            .arg(script)
            .args([
                "--pods",
                &PODS.to_string(),
                "--batches",
                &BATCHES.to_string(),
            ])
            .args(["--gap-every", "37", "--restart-at", "150", "--seed", "11"])
            .arg("--log")
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 must run (with pyzmq and msgspec installed)");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Publisher { child, lines, log }
    }

    fn next_message(&mut self) -> serde_json::Value {
        let line = self
            .lines
            .next()
            .expect("the publisher exited early (is pyzmq/msgspec installed? see its stderr)")
            .unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("publisher said {line:?}: {e}"))
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        drop(self.child.stdin.take()); // closing stdin ends it
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The reference: the publisher's log decoded, mapped and applied to `NaiveIndexer`, with a
/// restart clearing the pod's ranks the way the subscriber must.
fn reference(log: &PathBuf, endpoints: &[serde_json::Value]) -> NaiveIndexer {
    let naive = NaiveIndexer::default();
    let mut mappers: HashMap<u64, EventMapper> = HashMap::new();
    for line in std::fs::read_to_string(log).unwrap().lines() {
        let record: serde_json::Value = serde_json::from_str(line).unwrap();
        let pod = record["pod"].as_u64().unwrap() as usize;
        let topic = endpoints[pod]["topic"].as_str().unwrap();
        let worker_id = resolve(&Topic::parse(topic.as_bytes()).unwrap()).unwrap();
        let mapper = mappers
            .entry(worker_id)
            .or_insert_with(|| EventMapper::new(worker_id, MapConfig::default()));
        let mut events = Vec::new();
        if record["restart"].as_bool().unwrap() {
            events.extend(mapper.restart());
        }
        let payload = hex(record["payload"].as_str().unwrap());
        let batch = decode_batch(&payload, SubscriberConfig::default().engine).unwrap();
        events.extend(mapper.map(&batch).events);
        for event in events {
            let _ = naive.apply(&event); // warnings and rejections are part of the reference
        }
    }
    naive
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// Every chain `index` can score, as a query: the locals from a root to each dumped block.
fn chain_queries(index: &dyn KvIndex) -> Vec<Vec<LocalHash>> {
    let mut blocks: HashMap<(Worker, SeqHash), (LocalHash, Option<SeqHash>)> = HashMap::new();
    for event in index.dump() {
        if let EventKind::Stored {
            parent,
            blocks: stored,
        } = &event.kind
        {
            let mut parent = *parent;
            for block in stored {
                blocks.insert((event.worker, block.seq), (block.local, parent));
                parent = Some(block.seq);
            }
        }
    }
    let mut queries = Vec::new();
    for &(worker, seq) in blocks.keys() {
        let mut chain = Vec::new();
        let mut at = Some(seq);
        while let Some(seq) = at {
            let Some(&(local, parent)) = blocks.get(&(worker, seq)) else {
                break;
            };
            chain.push(local);
            at = parent;
            assert!(chain.len() <= blocks.len(), "a dumped cycle");
        }
        chain.reverse();
        queries.push(chain);
    }
    queries
}

fn wait_for_batches(subscriber: &Subscriber, batches: u64, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while subscriber.stats().batches < batches {
        assert!(
            Instant::now() < deadline,
            "{name}: {} of {batches} batches after 60 s; {:?}; last problem: {:?}",
            subscriber.stats().batches,
            subscriber.stats(),
            subscriber.last_problem()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[ignore = "needs python3 with pyzmq and msgspec (pip install pyzmq msgspec); .ci/run runs it"]
fn subscriber_index_equals_reference_after_gaps_and_a_restart() {
    for factory in layouts::enabled().into_iter().filter(|f| f.primary) {
        let name = factory.name;
        let mut publisher = Publisher::start(name);
        let hello = publisher.next_message();
        let endpoints = hello["pods"].as_array().unwrap().clone();
        assert_eq!(endpoints.len() as u64, PODS);

        let index: Arc<dyn KvIndex> = Arc::from((factory.make)());
        let pool = Arc::new(WriterPool::new(Arc::clone(&index), PoolConfig::default()));
        // Plus an engine that never comes up: it must hold up nobody.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let silent_port = silent.local_addr().unwrap().port();
        drop(silent);
        let engines = endpoints
            .iter()
            .map(|p| {
                EngineEndpoint::new(p["events"].as_str().unwrap())
                    .with_replay(p["replay"].as_str().unwrap())
            })
            .chain([EngineEndpoint::new(format!(
                "tcp://127.0.0.1:{silent_port}"
            ))]);
        let subscriber = Subscriber::spawn(
            Arc::clone(&pool),
            engines,
            resolve,
            SubscriberConfig::default(),
        )
        .unwrap();

        let done = publisher.next_message();
        let batches = done["done"]["batches"].as_u64().unwrap();
        assert_eq!(batches, PODS * BATCHES);
        wait_for_batches(&subscriber, batches, name);
        pool.flush();
        let stats = subscriber.stats();

        // Every fault happened and was handled.
        assert!(stats.gaps >= 2, "{name}: {stats:?}");
        assert_eq!(
            stats.lost,
            0,
            "{name}: {stats:?}; {:?}",
            subscriber.last_problem()
        );
        assert_eq!(
            stats.replayed, stats.gaps,
            "{name}: one message per gap: {stats:?}"
        );
        assert_eq!(stats.restarts, 1, "{name}: {stats:?}");
        assert!(
            stats.unknown_events > 0 && stats.filtered_events > 0,
            "{name}: {stats:?}"
        );
        assert!(
            stats.rejected_events > 0,
            "{name}: partial blocks are rejected: {stats:?}"
        );
        assert_eq!(
            (
                stats.decode_errors,
                stats.bad_frames,
                stats.unresolved_topics
            ),
            (0, 0, 0)
        );

        // Exactly the reference: same blocks per worker, same scores for every chain either
        // index holds.
        let naive = reference(&publisher.log, &endpoints);
        for id in 1..=PODS {
            for rank in 0..2 {
                let worker = Worker::new(id, rank);
                assert_eq!(
                    index.block_count(worker),
                    naive.block_count(worker),
                    "{name}: {worker:?}"
                );
                // And the engine's own cache, block for block.
                let engine = &done["done"]["blocks"][format!("{}/{rank}", id - 1)];
                assert_eq!(
                    index.block_count(worker) as u64,
                    engine.as_u64().unwrap(),
                    "{name}"
                );
            }
        }
        let mut queries = chain_queries(&naive);
        queries.extend(chain_queries(index.as_ref()));
        assert!(queries.len() > 50, "{name}: too few chains to compare");
        for query in &queries {
            assert_eq!(
                index.find_matches(query).to_sorted_vec(),
                naive.find_matches(query).to_sorted_vec(),
                "{name}: query of {} blocks",
                query.len()
            );
        }
        subscriber.shutdown();
        eprintln!("{name}: {stats:?}, {} chains compared", queries.len());
    }
}
