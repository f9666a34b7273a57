//! The real server binary fed by the test publisher (`tests/publisher/vllm_publisher.py` of the
//! library: vLLM's event structs, sockets, sequence numbers and replay protocol over loopback
//! ZeroMQ). Two replicas must answer 1,000 queries identically and as the engines' caches say;
//! a server killed with SIGKILL must restore from its snapshot and catch up.
//!
//! They need `python3` with `pyzmq` and `msgspec`, so they are ignored by default; `.ci/run`
//! runs them with `--ignored`.

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use flash_indexer_server::service::pod_worker_id;
use serde_json::{Value, json};
use support::{Server, temp_dir};

/// The Python stand-in for vLLM engines.
struct Publisher {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    /// Each pod's event and replay addresses.
    pods: Vec<(String, String)>,
}

impl Publisher {
    fn start(args: &[&str]) -> Publisher {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/publisher/vllm_publisher.py"
        );
        let mut child = Command::new("python3")
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 must run (with pyzmq and msgspec installed)");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        let pods = first["pods"]
            .as_array()
            .unwrap()
            .iter()
            .map(|pod| {
                let address = |key: &str| pod[key].as_str().unwrap().to_owned();
                (address("events"), address("replay"))
            })
            .collect();
        Publisher { child, lines, pods }
    }

    /// Waits for the end of publishing: what every rank holds, pod `i` as worker `worker(i)`.
    fn done(&mut self, worker: impl Fn(u64) -> u64) -> Caches {
        for line in self.lines.by_ref() {
            let message: Value = serde_json::from_str(&line.unwrap()).unwrap();
            if let Some(done) = message.get("done") {
                return Caches::from_held(&done["held"], worker);
            }
        }
        panic!("the publisher ended without saying it was done");
    }

    /// `--engine` arguments naming pod `i` worker `i + 1`.
    fn engine_args(&self) -> Vec<String> {
        (self.pods.iter().enumerate())
            .flat_map(|(i, (events, replay))| {
                [
                    "--engine".to_owned(),
                    format!("{}={events}+{replay}", i + 1),
                ]
            })
            .collect()
    }

    /// `--engine` arguments leaving worker and model to the topics.
    fn topic_engine_args(&self) -> Vec<String> {
        (self.pods.iter())
            .flat_map(|(events, replay)| ["--engine".to_owned(), format!("{events}+{replay}")])
            .collect()
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        drop(self.child.stdin.take()); // Closing stdin ends its replay service.
        let _ = self.child.wait();
    }
}

/// What one block is: its parent's hash, its tokens, its LoRA adapter, its other extra keys.
type BlockKey = (Option<u64>, Vec<u32>, Option<String>, Vec<Value>);

/// What besides its tokens and LoRA adapter keys a request: an image and a cache salt.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Features {
    /// `(identifier, first placeholder, placeholders)`.
    image: Option<(String, u64, u64)>,
    cache_salt: Option<String>,
}

impl Features {
    /// Block `i`'s extra keys besides the LoRA name, by vLLM 0.33's rules: the image's
    /// `(identifier, start relative to the block)` if its placeholders overlap the block, then
    /// the salt on the first block.
    fn block_keys(&self, i: u64) -> Vec<Value> {
        let (start, end) = (16 * i, 16 * (i + 1));
        let mut keys = Vec::new();
        if let Some((id, offset, length)) = &self.image
            && *offset < end
            && offset + length > start
        {
            keys.push(json!([id, *offset as i64 - start as i64]));
        }
        if let (0, Some(salt)) = (i, &self.cache_salt) {
            keys.push(json!(salt));
        }
        keys
    }

    /// The features read back from a chain's per-block keys: the image spans from its start to
    /// the end of the last block it keys, which hashes the chain's blocks alike.
    fn of_chain(keys: &[Vec<Value>]) -> Features {
        let mut features = Features::default();
        for (i, block) in keys.iter().enumerate() {
            for key in block {
                match key {
                    Value::String(salt) => features.cache_salt = Some(salt.clone()),
                    Value::Array(pair) => {
                        let id = pair[0].as_str().unwrap().to_owned();
                        let start = (16 * i as i64 + pair[1].as_i64().unwrap()) as u64;
                        features.image = Some((id, start, 16 * (i as u64 + 1) - start));
                    }
                    other => panic!("an extra key of an unknown shape: {other}"),
                }
            }
        }
        features
    }

    /// The features that key blocks apart from these: another image or another salt.
    fn other(&self) -> Features {
        match (&self.image, &self.cache_salt) {
            (Some((id, offset, length)), _) => Features {
                image: Some((format!("{id}-other"), *offset, *length)),
                cache_salt: None,
            },
            (None, Some(salt)) => Features {
                image: None,
                cache_salt: Some(format!("{salt}-other")),
            },
            (None, None) => Features {
                image: None,
                cache_salt: Some("tenant-0".to_owned()),
            },
        }
    }

    /// Adds the features to a `POST /query` body.
    fn add_to(&self, query: &mut Value) {
        if let Some((id, offset, length)) = &self.image {
            query["mm"] = json!([{ "identifier": id, "offset": offset, "length": length }]);
        }
        if let Some(salt) = &self.cache_salt {
            query["cache_salt"] = json!(salt);
        }
    }

    fn of_query(query: &Value) -> Features {
        let image = query.get("mm").map(|mm| {
            let item = &mm[0];
            let number = |key: &str| item[key].as_u64().unwrap();
            let id = item["identifier"].as_str().unwrap().to_owned();
            (id, number("offset"), number("length"))
        });
        let cache_salt = query
            .get("cache_salt")
            .map(|s| s.as_str().unwrap().to_owned());
        Features { image, cache_salt }
    }
}

/// The engines' caches as the publisher reported them at the end.
struct Caches {
    /// Per worker `(id, rank)`: held blocks by what they are, to their hash.
    ranks: Vec<((u64, u32), HashMap<BlockKey, u64>)>,
    /// Every held block's chain from the root, as a query (tokens, LoRA, features).
    chains: Vec<(Vec<u32>, Option<String>, Features)>,
}

impl Caches {
    fn from_held(held: &Value, worker: impl Fn(u64) -> u64) -> Caches {
        let mut ranks = Vec::new();
        let mut chains = Vec::new();
        for (key, blocks) in held.as_object().unwrap() {
            let (pod, rank) = key.split_once('/').unwrap();
            let worker = (worker(pod.parse().unwrap()), rank.parse::<u32>().unwrap());
            let mut by_seq: HashMap<u64, BlockKey> = HashMap::new();
            for block in blocks.as_array().unwrap() {
                let tokens: Vec<u32> = serde_json::from_value(block[2].clone()).unwrap();
                let lora = block[3].as_str().map(str::to_owned);
                let keys = block[4].as_array().cloned().unwrap_or_default();
                by_seq.insert(
                    block[0].as_u64().unwrap(),
                    (block[1].as_u64(), tokens, lora, keys),
                );
            }
            for &seq in by_seq.keys() {
                let (mut parts, mut at, mut lora) = (Vec::new(), Some(seq), None);
                while let Some(s) = at {
                    let Some((parent, block, l, keys)) = by_seq.get(&s) else {
                        break;
                    };
                    parts.push((block.clone(), keys.clone()));
                    lora = l.clone();
                    at = *parent;
                }
                parts.reverse();
                let tokens = parts.iter().flat_map(|(block, _)| block.clone()).collect();
                let keys: Vec<Vec<Value>> = parts.into_iter().map(|(_, keys)| keys).collect();
                chains.push((tokens, lora, Features::of_chain(&keys)));
            }
            let index = by_seq.into_iter().map(|(seq, key)| (key, seq)).collect();
            ranks.push((worker, index));
        }
        chains.sort();
        Caches { ranks, chains }
    }

    /// Every worker's depth for `tokens` (blocks of 16) under `lora` and `features`, deepest
    /// first.
    fn expected(
        &self,
        tokens: &[u32],
        lora: &Option<String>,
        features: &Features,
    ) -> Vec<(u64, u32, u64)> {
        let mut out = Vec::new();
        for ((id, rank), held) in &self.ranks {
            let (mut parent, mut depth) = (None, 0u64);
            for block in tokens.chunks_exact(16) {
                let key = (
                    parent,
                    block.to_vec(),
                    lora.clone(),
                    features.block_keys(depth),
                );
                match held.get(&key) {
                    Some(&seq) => {
                        parent = Some(seq);
                        depth += 1;
                    }
                    None => break,
                }
            }
            if depth > 0 {
                out.push((*id, *rank, depth));
            }
        }
        out.sort_by(|a, b| b.2.cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
        out
    }

    /// `n` queries: every chain, and chains cut short or run on past what anyone holds; after
    /// the first pass, a third of them without the chain's features and a third with others.
    fn queries(&self, n: usize, model: &str) -> Vec<Value> {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let (tokens, lora, features) = &self.chains[out.len() % self.chains.len()];
            let mut tokens = tokens.clone();
            let pass = out.len() / self.chains.len();
            match pass {
                0 => {}
                k if k % 2 == 1 => {
                    tokens.truncate(16 * (next() as usize % (tokens.len() / 16 + 1)))
                }
                _ => tokens.extend((0..16).map(|_| next() as u32 % 50_000)),
            }
            let mut query = json!({ "model": model, "tokens": tokens });
            if let Some(lora) = lora {
                query["lora"] = json!(lora);
            }
            match (pass > 0).then(|| next() % 3) {
                Some(1) => {}
                Some(2) => features.other().add_to(&mut query),
                _ => features.add_to(&mut query),
            }
            out.push(query);
        }
        out
    }
}

/// The workers of an answer as (id, rank, depth), in the answer's order.
fn depths(answer: &Value) -> Vec<(u64, u32, u64)> {
    answer["workers"]
        .as_array()
        .unwrap_or_else(|| panic!("not an answer: {answer}"))
        .iter()
        .map(|w| {
            let id = w["worker"].as_u64().unwrap();
            (
                id,
                w["dp_rank"].as_u64().unwrap() as u32,
                w["depth"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn expected_for(caches: &Caches, query: &Value) -> Vec<(u64, u32, u64)> {
    let tokens: Vec<u32> = serde_json::from_value(query["tokens"].clone()).unwrap();
    let lora = query.get("lora").and_then(Value::as_str).map(str::to_owned);
    caches.expected(&tokens, &lora, &Features::of_query(query))
}

/// Waits until `server` answers every query as the caches say.
fn settle(server: &Server, caches: &Caches, queries: &[Value], name: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let wrong = queries.iter().find_map(|query| {
            let (status, answer) = server.post("/query", query);
            assert_eq!(status, 200, "{name}: {answer}");
            let expected = expected_for(caches, query);
            (depths(&answer) != expected).then(|| (query.clone(), answer, expected))
        });
        let Some((query, answer, expected)) = wrong else {
            return;
        };
        assert!(
            Instant::now() < deadline,
            "{name}: still wrong after 90 s: {query} got {answer}, expected {expected:?}; workers: {}",
            server.get("/workers").1
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
#[ignore = "needs python3 with pyzmq and msgspec (pip install pyzmq msgspec); .ci/run runs it"]
fn two_replicas_agree_on_1000_queries_and_with_the_engines() {
    let dir = temp_dir("replicas");
    let mut publisher = Publisher::start(&[
        "--pods",
        "2",
        "--batches",
        "400",
        "--interval",
        "0.004",
        "--topic",
        "empty",
    ]);
    let engines = publisher.engine_args();
    let engines: Vec<&str> = engines.iter().map(String::as_str).collect();
    let first = Server::start(&dir, "first", &engines);
    first.wait_ready();
    // The second bootstraps from the first while the engines publish, then follows them itself.
    std::thread::sleep(Duration::from_millis(500));
    let mut args = vec!["--peer", first.url.as_str()];
    args.extend(&engines);
    let second = Server::start(&dir, "second", &args);
    second.wait_ready();
    assert!(second.log().contains("index restored"), "{}", second.log());
    let caches = publisher.done(|pod| pod + 1);
    let queries = caches.queries(1000, "default");
    settle(&first, &caches, &queries, "first");
    settle(&second, &caches, &queries, "second");
    for query in &queries {
        assert_eq!(
            first.post("/query", query),
            second.post("/query", query),
            "{query}"
        );
    }
    let hits = queries
        .iter()
        .filter(|q| !expected_for(&caches, q).is_empty())
        .count();
    assert!(hits > 500, "most queries should hit something: {hits}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[ignore = "needs python3 with pyzmq and msgspec (pip install pyzmq msgspec); .ci/run runs it"]
fn after_kill_9_a_restart_restores_the_snapshot_and_catches_up() {
    let dir = temp_dir("kill9");
    let snapshots = dir.join("snapshots");
    let mut publisher = Publisher::start(&[
        "--pods",
        "2",
        "--batches",
        "700",
        "--interval",
        "0.01",
        "--topic",
        "empty",
    ]);
    let mut args = vec![
        "--snapshot-dir",
        snapshots.to_str().unwrap(),
        "--snapshot-interval",
        "1",
    ];
    let engines = publisher.engine_args();
    args.extend(engines.iter().map(String::as_str));
    let server = Server::start(&dir, "before", &args);
    server.wait_ready();
    // Wait for a periodic snapshot with something in it, then kill without warning.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let saved = flash_indexer_server::snapshot::read(&snapshots)
            .ok()
            .flatten();
        if saved.is_some_and(|s| s.indexes.iter().any(|i| !i.events.is_empty())) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no snapshot after 30 s: {}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server.kill_9();
    let server = Server::start(&dir, "after", &args);
    let log = server.log();
    let restored = log
        .lines()
        .find(|l| l.contains("index restored"))
        .unwrap_or_else(|| panic!("no restore in the log: {log}"));
    assert!(
        !restored.contains("applied=0 "),
        "restored nothing: {restored}"
    );
    server.wait_ready();
    let caches = publisher.done(|pod| pod + 1);
    let queries = caches.queries(1000, "default");
    settle(&server, &caches, &queries, "restarted");
    let (_, metrics) = server.get("/metrics");
    assert!(
        metrics.contains("flash_indexer_snapshot_age_seconds"),
        "{metrics}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[ignore = "needs python3 with pyzmq and msgspec (pip install pyzmq msgspec); .ci/run runs it"]
fn topics_name_the_worker_and_the_model() {
    let dir = temp_dir("topics");
    let mut publisher =
        Publisher::start(&["--pods", "2", "--batches", "300", "--interval", "0.004"]);
    let engines = publisher.topic_engine_args();
    let engines: Vec<&str> = engines.iter().map(String::as_str).collect();
    let server = Server::start(&dir, "server", &engines);
    server.wait_ready();
    let caches = publisher.done(|pod| pod_worker_id(&format!("pod-{pod}")));
    let queries = caches.queries(300, "test-model");
    settle(&server, &caches, &queries, "topics");
    let (_, workers) = server.get_json("/workers");
    let pod = &workers["pods"][pod_worker_id("pod-0").to_string()];
    assert_eq!(
        *pod,
        json!({ "pod": "pod-0", "model": "test-model" }),
        "{workers}"
    );
    let (status, answer) = server.post("/query", &json!({ "model": "default", "tokens": [1] }));
    assert_eq!(
        status, 404,
        "events went to the topics' model only: {answer}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[ignore = "needs python3 with pyzmq and msgspec (pip install pyzmq msgspec); .ci/run runs it"]
fn image_and_salted_requests_match_only_their_own_features() {
    let dir = temp_dir("features");
    let args = "--pods 2 --batches 400 --interval 0.004 --features 0.5";
    let mut publisher = Publisher::start(&args.split_whitespace().collect::<Vec<_>>());
    let engines = publisher.engine_args();
    let engines: Vec<&str> = engines.iter().map(String::as_str).collect();
    let server = Server::start(&dir, "server", &engines);
    server.wait_ready();
    let caches = publisher.done(|pod| pod + 1);
    let queries = caches.queries(1000, "default");
    // Every keyed block the engines hold is indexed as they keyed it (`settle` compares every
    // answer with the engines' caches), ...
    settle(&server, &caches, &queries, "features");
    // ... and the features decide how deep a query matches: without them or with others, no
    // deeper than the blocks before the first keyed block.
    let keyed: Vec<_> = (caches.chains.iter())
        .filter(|(_, _, features)| *features != Features::default())
        .collect();
    let decided = keyed
        .iter()
        .filter(|(tokens, lora, features)| {
            let same = caches.expected(tokens, lora, features);
            let none = caches.expected(tokens, lora, &Features::default());
            let other = caches.expected(tokens, lora, &features.other());
            same != none && same != other
        })
        .count();
    assert!(decided > 20, "{decided} of {} keyed chains", keyed.len());
    std::fs::remove_dir_all(&dir).unwrap();
}
