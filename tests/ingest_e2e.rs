//! End to end over real ZeroMQ on loopback (feature `vllm`): engines publish, the real
//! [`Subscriber`] follows them into every layout, and at the end the index must hold exactly
//! what the engines say their caches hold (where the engines' buffers could tell it everything),
//! or nothing the engines no longer hold (where they could not).
//!
//! The engines are `tests/publisher/vllm_publisher.py` (vLLM's msgspec structs, sockets, sequence
//! numbers and replay protocol) and, for attacks no engine would make, small impostors written
//! here: a frame header announcing 2^40 bytes, a replay socket that never stops talking.
//!
//! The Python tests need `python3` with `pyzmq` and `msgspec` (`pip install pyzmq msgspec`), so
//! they are ignored by default; `.ci/run` installs both and runs them with `--ignored`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Lines, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use flash_indexer::ingest::{EngineEndpoint, IngestStats, Subscriber, SubscriberConfig, Topic};
use flash_indexer::pool::{PoolConfig, WriterPool};
use flash_indexer::testing::{self, CountingAlloc};
use flash_indexer::{
    Block, Event, EventError, EventKind, KvIndex, LocalHash, NaiveIndexer, OverlapScores, SeqHash,
    Worker, hash,
};
use serde_json::Value;

// Counts live heap bytes, for the pool's memory test; every test of this file holds `serial()`
// so that the count is that test's alone.
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

const BLOCK_SIZE: usize = 16;

/// Worker ids: pod `i` is worker `i + 1`.
fn pod_worker(pod: usize) -> u64 {
    pod as u64 + 1
}

fn resolve(topic: &Topic<'_>) -> Option<u64> {
    Some(pod_worker(topic.pod.strip_prefix("pod-")?.parse().ok()?))
}

/// The Python stand-in for vLLM engines, and what it said.
struct Publisher {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    pods: Vec<Value>,
}

impl Publisher {
    fn start(args: &[&str]) -> Self {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/publisher/vllm_publisher.py"
        );
        let mut child = Command::new("python3")
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 must run (with pyzmq and msgspec installed)");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut publisher = Publisher {
            child,
            lines,
            pods: Vec::new(),
        };
        publisher.pods = publisher.next_message()["pods"].as_array().unwrap().clone();
        publisher
    }

    fn next_message(&mut self) -> Value {
        let line = self
            .lines
            .next()
            .expect("the publisher exited early (is pyzmq/msgspec installed? see its stderr)")
            .unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("publisher said {line:?}: {e}"))
    }

    /// Waits for the end of publishing: what every engine's cache holds then.
    fn done(&mut self) -> Engines {
        let done = self.next_message();
        Engines::from_done(&done["done"])
    }

    /// Each pod as an endpoint, naming its worker (the topic may be vLLM's default, "").
    fn endpoints(&self) -> Vec<EngineEndpoint> {
        self.pods
            .iter()
            .enumerate()
            .map(|(i, pod)| {
                let endpoint = EngineEndpoint::new(pod["events"].as_str().unwrap());
                let endpoint = match pod["replay"].as_str() {
                    Some(replay) => endpoint.with_replay(replay),
                    None => endpoint,
                };
                endpoint.with_worker(pod_worker(i))
            })
            .collect()
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        drop(self.child.stdin.take()); // closing stdin ends it
        let _ = self.child.wait();
    }
}

/// What the engines say they hold at the end: `(worker, seq) -> (local, parent)`.
struct Engines {
    batches: u64,
    published_at: f64,
    held: HashMap<(Worker, SeqHash), (LocalHash, Option<SeqHash>)>,
    workers: Vec<Worker>,
}

impl Engines {
    fn from_done(done: &Value) -> Engines {
        let mut held = HashMap::new();
        let mut workers = Vec::new();
        for (key, blocks) in done["held"].as_object().unwrap() {
            let (pod, rank) = key.split_once('/').unwrap();
            let worker = Worker::new(pod_worker(pod.parse().unwrap()), rank.parse().unwrap());
            workers.push(worker);
            for block in blocks.as_array().unwrap() {
                let tokens: Vec<u32> = serde_json::from_value(block[2].clone()).unwrap();
                let locals = match block[3].as_str() {
                    Some(lora) => hash::local_hashes_lora(&tokens, BLOCK_SIZE, lora),
                    None => hash::local_hashes(&tokens, BLOCK_SIZE),
                };
                let parent = block[1].as_u64().map(SeqHash);
                let seq = SeqHash(block[0].as_u64().unwrap());
                held.insert((worker, seq), (locals[0], parent));
            }
        }
        workers.sort();
        Engines {
            batches: done["batches"].as_u64().unwrap(),
            published_at: done["time"].as_f64().unwrap(),
            held,
            workers,
        }
    }

    fn count(&self, worker: Worker) -> usize {
        self.held.keys().filter(|(w, _)| *w == worker).count()
    }

    /// The engines' caches as an index: every held block stored, parents first.
    fn reference(&self) -> NaiveIndexer {
        let naive = NaiveIndexer::default();
        let mut pending: Vec<_> = self.held.iter().collect();
        while !pending.is_empty() {
            let before = pending.len();
            pending.retain(|&(&(worker, seq), &(local, parent))| {
                let event = Event::stored(worker, 0, parent, vec![Block::new(local, seq)]);
                naive.apply(&event).is_err()
            });
            assert!(
                pending.len() < before,
                "an engine holds a block without its parent"
            );
        }
        naive
    }

    /// The index holds exactly what the engines hold.
    fn assert_equals(&self, index: &dyn KvIndex, name: &str) {
        let reference = self.reference();
        for &worker in &self.workers {
            assert_eq!(
                index.block_count(worker),
                self.count(worker),
                "{name}: {worker:?}"
            );
        }
        let mut queries = chain_queries(&reference);
        queries.extend(chain_queries(index));
        assert!(queries.len() > 20, "{name}: too few chains to compare");
        for query in &queries {
            assert_eq!(
                index.find_matches(query).to_sorted_vec(),
                reference.find_matches(query).to_sorted_vec(),
                "{name}: query of {} blocks",
                query.len()
            );
        }
    }

    /// The index holds nothing the engines no longer hold (it may hold less).
    fn assert_covers(&self, index: &dyn KvIndex, name: &str) {
        for event in index.dump() {
            if let EventKind::Stored { parent, blocks } = &event.kind {
                let mut parent = *parent;
                for block in blocks {
                    assert_eq!(
                        self.held.get(&(event.worker, block.seq)),
                        Some(&(block.local, parent)),
                        "{name}: {:?} holds {:?}, which its engine does not",
                        event.worker,
                        block.seq
                    );
                    parent = Some(block.seq);
                }
            }
        }
        let reference = self.reference();
        for &worker in &self.workers {
            assert!(index.block_count(worker) <= self.count(worker), "{name}");
        }
        for query in chain_queries(&reference) {
            let engines = reference.find_matches(&query);
            for (worker, depth) in index.find_matches(&query).iter() {
                assert!(
                    depth <= engines.get(worker).unwrap_or(0),
                    "{name}: {worker:?} over-counted"
                );
            }
        }
    }
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

/// One layout behind a writer pool.
struct Router {
    index: Arc<dyn KvIndex>,
    pool: Arc<WriterPool<dyn KvIndex>>,
}

impl Router {
    fn new(make: fn() -> Box<dyn KvIndex>) -> Router {
        let index: Arc<dyn KvIndex> = Arc::from(make());
        let pool = Arc::new(WriterPool::new(Arc::clone(&index), PoolConfig::default()));
        Router { index, pool }
    }

    fn subscribe(&self, endpoints: Vec<EngineEndpoint>) -> Subscriber {
        Subscriber::spawn(
            Arc::clone(&self.pool),
            endpoints,
            SubscriberConfig::default(),
        )
        .unwrap()
    }

    /// Waits until the index holds as many blocks per worker as the engines (`exact`) or at
    /// most as many, and the subscriber has gone quiet.
    fn settle(&self, subscriber: &Subscriber, engines: &Engines, exact: bool, name: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last: Option<IngestStats> = None;
        loop {
            self.pool.flush();
            let stats = subscriber.stats();
            let counts = engines.workers.iter().all(|&w| {
                let (ours, theirs) = (self.index.block_count(w), engines.count(w));
                if exact {
                    ours == theirs
                } else {
                    ours <= theirs
                }
            });
            if counts && last == Some(stats) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: not settled after 60 s; {stats:?}; last problem: {:?}",
                subscriber.last_problem()
            );
            last = Some(stats);
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// Runs `case` once per primary layout, each with a fresh router, holding `serial()`.
fn each_layout(case: impl Fn(&'static str, Router)) {
    let _serial = serial();
    for layout in primary_layouts() {
        case(layout.name, Router::new(layout.make));
    }
}

fn primary_layouts() -> Vec<testing::IndexFactory> {
    testing::enabled_layouts()
        .into_iter()
        .filter(|f| f.primary)
        .collect()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
#[ignore = "needs python3 with pyzmq and msgspec (pip install pyzmq msgspec); .ci/run runs it"]
fn topic_resolver_gaps_short_restart_and_an_engine_that_never_comes_up() {
    each_layout(|name, router| {
        let mut publisher = Publisher::start(&[
            "--batches",
            "300",
            "--gap-every",
            "37",
            "--restart-at",
            "150",
            "--seed",
            "11",
        ]);
        // Workers named by the topic this time, plus an engine that never comes up: it must
        // hold up nobody.
        let endpoints = publisher
            .pods
            .iter()
            .map(|p| {
                EngineEndpoint::new(p["events"].as_str().unwrap())
                    .with_replay(p["replay"].as_str().unwrap())
            })
            .chain([EngineEndpoint::new(format!(
                "tcp://127.0.0.1:{}",
                free_port()
            ))]);
        let subscriber = Subscriber::spawn_with_resolver(
            Arc::clone(&router.pool),
            endpoints,
            resolve,
            SubscriberConfig::default(),
        )
        .unwrap();
        let engines = publisher.done();
        assert_eq!(engines.batches, 600);
        router.settle(&subscriber, &engines, true, name);
        let stats = subscriber.stats();
        assert!(stats.gaps >= 2 && stats.replayed >= 2, "{name}: {stats:?}");
        assert!(
            stats.resyncs >= 3,
            "{name}: two connections and a restart: {stats:?}"
        );
        assert!(
            stats.unknown_events > 0 && stats.filtered_events > 0 && stats.rejected_events > 0,
            "{name}: {stats:?}"
        );
        assert_eq!(
            (
                stats.decode_errors,
                stats.bad_frames,
                stats.unresolved_topics
            ),
            (0, 0, 0),
            "{name}: {stats:?}"
        );
        engines.assert_equals(router.index.as_ref(), name);
        subscriber.shutdown();
        eprintln!("{name}: {stats:?}");
    });
}

#[test]
#[ignore = "needs python3 with pyzmq and msgspec (pip install pyzmq msgspec); .ci/run runs it"]
fn empty_topic_and_a_restart_that_overtakes_the_old_sequence_before_the_reconnect() {
    each_layout(|name, router| {
        // The restarted engine stays down 2.5 s (zmq's backoff grows meanwhile), then publishes
        // 121 batches before it binds: when the router reconnects, the new engine is past the
        // old one's last number (99), so sequence numbers alone would see a gap, not a restart.
        let mut publisher = Publisher::start(&[
            "--topic",
            "empty",
            "--batches",
            "300",
            "--gap-every",
            "41",
            "--restart-at",
            "100",
            "--restart-down",
            "2.5",
            "--restart-advance",
            "120",
            "--seed",
            "12",
        ]);
        let subscriber = router.subscribe(publisher.endpoints());
        let engines = publisher.done();
        router.settle(&subscriber, &engines, true, name);
        let stats = subscriber.stats();
        assert_eq!(stats.unresolved_topics, 0, "{name}: {stats:?}");
        assert!(
            stats.resyncs >= 3 && stats.disconnects >= 1,
            "{name}: {stats:?}"
        );
        engines.assert_equals(router.index.as_ref(), name);
        subscriber.shutdown();
        eprintln!("{name}: {stats:?}");
    });
}

#[test]
#[ignore = "needs python3 with pyzmq and msgspec (pip install pyzmq msgspec); .ci/run runs it"]
fn a_router_started_after_its_engines_recovers_their_buffers() {
    each_layout(|name, router| {
        let mut publisher =
            Publisher::start(&["--no-wait", "--batches", "300", "--topic", "empty"]);
        let engines = publisher.done();
        let subscriber = router.subscribe(publisher.endpoints());
        router.settle(&subscriber, &engines, true, name);
        let stats = subscriber.stats();
        assert_eq!(stats.resync_batches, engines.batches, "{name}: {stats:?}");
        engines.assert_equals(router.index.as_ref(), name);
        subscriber.shutdown();
    });
}

#[test]
#[ignore = "needs python3 with pyzmq and msgspec (pip install pyzmq msgspec); .ci/run runs it"]
fn state_from_before_the_subscriber_does_not_outlive_the_engine() {
    // What a restored snapshot leaves: blocks of the engines' worker ids on ranks and chains the
    // engines no longer hold. The first resynchronization must drop every rank of those ids.
    each_layout(|name, router| {
        let mut publisher =
            Publisher::start(&["--no-wait", "--batches", "300", "--topic", "empty"]);
        let engines = publisher.done();
        let endpoints = publisher.endpoints();
        let stale: Vec<Worker> = endpoints
            .iter()
            .flat_map(|e| {
                [
                    Worker::new(e.worker.unwrap(), 0),
                    Worker::new(e.worker.unwrap(), 7),
                ]
            })
            .collect();
        for &worker in &stale {
            let blocks = vec![Block::new(LocalHash(99), SeqHash(0xdead_0000 + worker.id))];
            router
                .index
                .apply(&Event::stored(worker, 0, None, blocks))
                .unwrap();
        }
        let subscriber = router.subscribe(endpoints);
        router.settle(&subscriber, &engines, true, name);
        assert_eq!(router.index.block_count(stale[1]), 0, "{name}: rank 7 kept");
        let scores = router.index.find_matches(&[LocalHash(99)]);
        assert!(
            scores.is_empty(),
            "{name}: a stale chain outlived the resync: {scores:?}"
        );
        engines.assert_equals(router.index.as_ref(), name);
        subscriber.shutdown();
    });
}

#[test]
#[ignore = "needs python3 with pyzmq and msgspec (pip install pyzmq msgspec); .ci/run runs it"]
fn forty_gaps_without_a_replay_socket_keep_the_router_live() {
    each_layout(|name, router| {
        let mut publisher = Publisher::start(&[
            "--pods",
            "1",
            "--no-replay",
            "--batches",
            "401",
            "--gap-every",
            "10",
            "--interval",
            "0.002",
        ]);
        let subscriber = router.subscribe(publisher.endpoints());
        let engines = publisher.done();
        // Every live message that was sent is applied soon after the last one was published.
        let live = engines.batches - 40;
        while subscriber.stats().batches < live {
            let behind = now() - engines.published_at;
            assert!(
                behind < 1.0,
                "{name}: {behind:.2} s behind live; {:?}",
                subscriber.stats()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let behind = now() - engines.published_at;
        assert!(behind < 1.0, "{name}: {behind:.2} s behind live");
        router.settle(&subscriber, &engines, false, name);
        let stats = subscriber.stats();
        assert_eq!((stats.gaps, stats.lost), (40, 40), "{name}: {stats:?}");
        engines.assert_covers(router.index.as_ref(), name);
        subscriber.shutdown();
        eprintln!("{name}: caught up {behind:.3} s after the last publish; {stats:?}");
    });
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
#[ignore = "needs python3 with pyzmq and msgspec (pip install pyzmq msgspec); .ci/run runs it"]
fn a_gap_beyond_the_replay_buffer_leaves_no_block_the_engine_dropped() {
    each_layout(|name, router| {
        // Gaps of 20 messages against a buffer of 8: never repairable. The stream ends live, so
        // that every gap is seen.
        let mut publisher = Publisher::start(&[
            "--batches",
            "270",
            "--buffer",
            "8",
            "--gap-every",
            "60",
            "--gap-len",
            "20",
            "--capacity",
            "25",
        ]);
        let subscriber = router.subscribe(publisher.endpoints());
        let engines = publisher.done();
        router.settle(&subscriber, &engines, false, name);
        let stats = subscriber.stats();
        assert!(stats.lost > 0 && stats.resyncs >= 4, "{name}: {stats:?}");
        engines.assert_covers(router.index.as_ref(), name);
        let held: usize = engines
            .workers
            .iter()
            .map(|&w| router.index.block_count(w))
            .sum();
        assert!(
            held > 0,
            "{name}: rebuilt from the buffer, not merely emptied"
        );
        subscriber.shutdown();
        eprintln!("{name}: {stats:?}");
    });
}

#[test]
#[ignore = "needs python3 with pyzmq and msgspec (pip install pyzmq msgspec); .ci/run runs it"]
fn a_router_that_binds_while_engines_connect() {
    each_layout(|name, router| {
        let address = format!("tcp://127.0.0.1:{}", free_port());
        let subscriber = Subscriber::spawn_with_resolver(
            Arc::clone(&router.pool),
            [EngineEndpoint::bind(address.clone())],
            resolve,
            SubscriberConfig::default(),
        )
        .unwrap();
        let mut publisher =
            Publisher::start(&["--connect", &address, "--no-replay", "--batches", "200"]);
        let engines = publisher.done();
        router.settle(&subscriber, &engines, true, name);
        assert_eq!(
            subscriber.stats().connected,
            2,
            "{name}: both engines dialled in"
        );
        engines.assert_equals(router.index.as_ref(), name);
        subscriber.shutdown();
    });
}

#[test]
#[ignore = "needs python3 with pyzmq and msgspec (pip install pyzmq msgspec); .ci/run runs it"]
fn an_ipc_engine() {
    each_layout(|name, router| {
        let dir = std::env::temp_dir().join(format!("flash-ipc-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut publisher = Publisher::start(&[
            "--ipc",
            dir.to_str().unwrap(),
            "--topic",
            "empty",
            "--gap-every",
            "29",
            "--batches",
            "200",
        ]);
        assert!(
            publisher.pods[0]["events"]
                .as_str()
                .unwrap()
                .starts_with("ipc://")
        );
        let subscriber = router.subscribe(publisher.endpoints());
        let engines = publisher.done();
        router.settle(&subscriber, &engines, true, name);
        assert!(subscriber.stats().replayed > 0, "{name}");
        engines.assert_equals(router.index.as_ref(), name);
        subscriber.shutdown();
        drop(publisher);
        let _ = std::fs::remove_dir_all(&dir);
    });
}

// ---------------------------------------------------------------------------------------------
// Impostors: engines no engine would be, written here (no Python needed).

/// A vLLM batch storing one root block of tokens `first .. first + 16`, as msgpack.
fn batch_storing(first: u32, seq_hash: u64) -> Vec<u8> {
    use rmpv::Value as V;
    let tokens = (first..first + BLOCK_SIZE as u32).map(V::from).collect();
    let stored = V::Array(vec![
        V::from("BlockStored"),
        V::Array(vec![V::from(seq_hash)]),
        V::Nil,
        V::Array(tokens),
        V::from(BLOCK_SIZE as u32),
        V::Nil,
        V::from("GPU"),
        V::Nil,
    ]);
    let batch = V::Array(vec![V::F64(0.0), V::Array(vec![stored])]);
    let mut bytes = Vec::new();
    rmpv::encode::write_value(&mut bytes, &batch).unwrap();
    bytes
}

fn query_for(first: u32) -> Vec<LocalHash> {
    let tokens: Vec<u32> = (first..first + BLOCK_SIZE as u32).collect();
    hash::local_hashes(&tokens, BLOCK_SIZE)
}

/// Speaks just enough ZMTP 3.0 as a PUB peer: greeting, READY, then whatever frames are asked.
fn zmtp_pub_handshake(stream: &mut TcpStream) {
    let mut greeting = vec![0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 0];
    greeting.extend(b"NULL");
    greeting.resize(64, 0);
    stream.write_all(&greeting).unwrap();
    let mut theirs = [0u8; 64];
    stream.read_exact(&mut theirs).unwrap();
    let mut ready = vec![5];
    ready.extend(b"READY");
    ready.push(11);
    ready.extend(b"Socket-Type");
    ready.extend(3u32.to_be_bytes());
    ready.extend(b"PUB");
    stream.write_all(&[0x04, ready.len() as u8]).unwrap();
    stream.write_all(&ready).unwrap();
    // Their READY and subscription are read (and ignored) in the background.
    let mut reader = stream.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut sink = [0u8; 4096];
        while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
    });
}

fn zmtp_frame(stream: &mut TcpStream, body: &[u8], more: bool) {
    let flags = u8::from(more);
    if body.len() < 256 {
        stream.write_all(&[flags, body.len() as u8]).unwrap();
    } else {
        stream.write_all(&[flags | 0x02]).unwrap();
        stream
            .write_all(&(body.len() as u64).to_be_bytes())
            .unwrap();
    }
    stream.write_all(body).unwrap();
}

#[test]
fn a_frame_header_announcing_a_terabyte_is_refused_and_counted() {
    each_layout(|name, router| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = format!("tcp://{}", listener.local_addr().unwrap());
        let subscriber = router.subscribe(vec![EngineEndpoint::new(address).with_worker(1)]);

        // First connection: a message whose first frame claims 2^40 bytes.
        let (mut first, _) = listener.accept().unwrap();
        zmtp_pub_handshake(&mut first);
        // A long frame, more to come; the subscriber may hang up at any byte of it.
        let mut header = vec![0x03];
        header.extend((1u64 << 40).to_be_bytes());
        header.extend([0; 64]);
        let _ = first.write_all(&header);
        // The subscriber drops that connection and dials again: an honest engine this time.
        let (mut second, _) = listener.accept().unwrap();
        zmtp_pub_handshake(&mut second);
        let deadline = Instant::now() + Duration::from_secs(10);
        let worker = Worker::new(1, 0);
        let mut seq = 0u64;
        while router.pool.find_matches(&query_for(0)).get(worker) != Some(1) {
            assert!(
                Instant::now() < deadline,
                "{name}: {:?}",
                subscriber.stats()
            );
            zmtp_frame(&mut second, b"", true);
            zmtp_frame(&mut second, &seq.to_be_bytes(), true);
            zmtp_frame(&mut second, &batch_storing(0, 7), false);
            seq += 1;
            std::thread::sleep(Duration::from_millis(20));
            router.pool.flush();
        }
        let stats = subscriber.stats();
        assert!(
            stats.disconnects >= 1 && stats.connected >= 2,
            "{name}: {stats:?}"
        );
        subscriber.shutdown();
    });
}

#[test]
fn wild_sequence_numbers_are_counted_not_summed() {
    // Issue 54: after a jump from 0 to 2^64 - 2, `lost` read 18446744073709551615.
    each_layout(|name, router| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = format!("tcp://{}", listener.local_addr().unwrap());
        let subscriber = router.subscribe(vec![EngineEndpoint::new(address).with_worker(1)]);
        let (mut engine, _) = listener.accept().unwrap();
        zmtp_pub_handshake(&mut engine);
        let worker = Worker::new(1, 0);
        // Each message stores its own root block; the last one must be applied.
        let seqs = [
            0,
            u64::MAX - 1,
            3,
            3 + (1 << 33),
            4 + (1 << 33),
            10 + (1 << 33),
        ];
        let deadline = Instant::now() + Duration::from_secs(10);
        for (k, &seq) in seqs.iter().enumerate() {
            let first = 16 * k as u32;
            // PUB drops messages sent before the subscription reaches it: send until applied.
            while router.pool.find_matches(&query_for(first)).get(worker) != Some(1) {
                assert!(
                    Instant::now() < deadline,
                    "{name}: {:?}",
                    subscriber.stats()
                );
                zmtp_frame(&mut engine, b"", true);
                zmtp_frame(&mut engine, &seq.to_be_bytes(), true);
                zmtp_frame(&mut engine, &batch_storing(first, 100 + k as u64), false);
                std::thread::sleep(Duration::from_millis(20));
                router.pool.flush();
                if k > 0 {
                    // Resent copies of one message are behind it: only the first counts.
                    break;
                }
            }
        }
        let wait = Instant::now() + Duration::from_secs(10);
        while router.pool.find_matches(&query_for(16 * 5)).get(worker) != Some(1) {
            assert!(Instant::now() < wait, "{name}: {:?}", subscriber.stats());
            std::thread::sleep(Duration::from_millis(10));
            router.pool.flush();
        }
        let stats = subscriber.stats();
        assert_eq!(stats.jumps, 2, "{name}: {stats:?}");
        assert_eq!(
            stats.lost, 5,
            "{name}: the gap from 4 + 2^33 to 10 + 2^33; {stats:?}"
        );
        assert!(stats.restarts >= 1, "{name}: {stats:?}");
        subscriber.shutdown();
    });
}

/// An engine whose replay socket answers every request with an endless stream of numbers that
/// are never the ones asked for, and never an end marker. Live messages store the root block of
/// tokens `16 k ..` for message `k`, skipping some numbers so that there are gaps to repair.
struct EndlessReplayEngine {
    events: String,
    replay: String,
    published: Arc<std::sync::Mutex<Vec<(u32, Instant)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EndlessReplayEngine {
    fn start() -> Self {
        let context = zmq::Context::new();
        let publisher = context.socket(zmq::PUB).unwrap();
        publisher.bind("tcp://127.0.0.1:*").unwrap();
        let router = context.socket(zmq::ROUTER).unwrap();
        router.bind("tcp://127.0.0.1:*").unwrap();
        let events = publisher.get_last_endpoint().unwrap().unwrap();
        let replay = router.get_last_endpoint().unwrap().unwrap();
        let published = Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (published, stop) = (Arc::clone(&published), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut clients: Vec<Vec<u8>> = Vec::new();
                let (mut seq, mut next_live, mut endless) = (0u64, Instant::now(), 1_000_000u64);
                while !stop.load(Ordering::Relaxed) {
                    while let Ok(request) = router.recv_multipart(zmq::DONTWAIT) {
                        clients.push(request[0].clone());
                    }
                    for client in &clients {
                        let reply: [&[u8]; 4] = [client, b"", &endless.to_be_bytes(), b"junk"];
                        let _ = router.send_multipart(reply, zmq::DONTWAIT);
                        endless += 1;
                    }
                    if Instant::now() >= next_live {
                        let block = seq as u32 * BLOCK_SIZE as u32;
                        let frames: [&[u8]; 3] =
                            [b"", &seq.to_be_bytes(), &batch_storing(block, 1000 + seq)];
                        publisher.send_multipart(frames, 0).unwrap();
                        published.lock().unwrap().push((block, Instant::now()));
                        // Gaps early on only, so that the last block published stays.
                        seq += if seq < 30 && seq % 10 == 9 { 3 } else { 1 };
                        next_live = Instant::now() + Duration::from_millis(20);
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        EndlessReplayEngine {
            events,
            replay,
            published,
            stop,
            thread: Some(thread),
        }
    }

    fn endpoint(&self) -> EngineEndpoint {
        EngineEndpoint::new(&self.events)
            .with_replay(&self.replay)
            .with_worker(1)
    }
}

impl Drop for EndlessReplayEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn an_endless_replay_stream_neither_stalls_live_ingest_nor_delays_shutdown() {
    each_layout(|name, router| {
        let engine = EndlessReplayEngine::start();
        let subscriber = router.subscribe(vec![engine.endpoint()]);
        // Live messages keep arriving through the replays' stalls: each is applied within the
        // replay timeout (1 s) plus slack.
        std::thread::sleep(Duration::from_secs(3));
        let (block, at) = *engine.published.lock().unwrap().last().unwrap();
        let worker = Worker::new(1, 0);
        while router.pool.find_matches(&query_for(block)).get(worker) != Some(1) {
            let late = at.elapsed();
            assert!(
                late < Duration::from_millis(2500),
                "{name}: {late:?}; {:?}",
                subscriber.stats()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let stats = subscriber.stats();
        assert!(
            stats.gaps >= 1 && stats.replays_abandoned >= 1,
            "{name}: {stats:?}"
        );
        subscriber.shutdown();

        // A subscriber that would wait a minute for the end marker stops within a second.
        let patient = SubscriberConfig {
            replay_timeout: Duration::from_secs(60),
            ..SubscriberConfig::default()
        };
        let subscriber =
            Subscriber::spawn(Arc::clone(&router.pool), [engine.endpoint()], patient).unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let started = Instant::now();
        subscriber.shutdown();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{name}: {:?}",
            started.elapsed()
        );
    });
}

/// An index that keeps nothing, so that only the pool's own memory is measured.
struct Discard;

impl KvIndex for Discard {
    fn apply(&self, _: &Event) -> Result<(), EventError> {
        Ok(())
    }
    fn find_matches(&self, _: &[LocalHash]) -> OverlapScores {
        OverlapScores::new()
    }
    fn remove_worker(&self, _: u64) {}
    fn remove_worker_dp_rank(&self, _: Worker) {}
    fn block_count(&self, _: Worker) -> usize {
        0
    }
    fn dump(&self) -> Vec<Event> {
        Vec::new()
    }
}

#[test]
fn the_pool_keeps_nothing_of_a_million_workers_that_came_and_went() {
    let _serial = serial();
    let pool = WriterPool::new(Arc::new(Discard), PoolConfig::default());
    pool.flush();
    let before = CountingAlloc::live_bytes();
    for id in 0..1_000_000u64 {
        let worker = Worker::new(id, (id % 4) as u32);
        let block = Block::new(LocalHash(id), SeqHash(id));
        pool.submit(Event::stored(worker, id, None, vec![block]))
            .unwrap();
        // Wild ids too: the pool does not interpret them.
        pool.submit(Event::removed(worker, u64::MAX - id, vec![SeqHash(id)]))
            .unwrap();
        match id % 3 {
            0 => pool.remove_worker(id),
            1 => pool.submit(Event::cleared(worker, 0)).unwrap(),
            _ => {} // a worker that merely emptied itself
        }
    }
    pool.flush();
    let after = CountingAlloc::live_bytes();
    assert_eq!(pool.stats().applied, 2_333_333);
    assert!(
        after - before < 4096,
        "the pool grew by {} bytes over a million workers",
        after - before
    );
}
