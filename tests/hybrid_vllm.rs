//! Hybrid models' events as vLLM 0.33 publishes them, through the decoder and
//! `EventMapper::map_groups` into every layout's `HybridIndexer`: the scores must be the prefix
//! vLLM's `HybridKVCacheCoordinator` would reuse, worked out by hand below from its rules.
//!
//! The engine stand-in does what `BlockPool.cache_full_blocks` does: one `BlockStored` per group
//! and step, `group_idx` set, `token_ids` over the step's whole range while `block_hashes` skips
//! the blocks a group does not keep (null or masked: out of a sliding window, between Mamba
//! states), and `parent_block_hash` the hash of the block before the range, whether or not the
//! group keeps it. Evictions are `BlockRemoved` with the group.

use flash_indexer::hybrid::{
    GroupKind, GroupSpec, HybridIndex, HybridIndexer, ModelGroups, NaiveHybridIndexer,
};
use flash_indexer::ingest::{Engine, EventMapper, MapConfig, MapError, decode_batch};
use flash_indexer::testing;
use flash_indexer::{KvIndex, LocalHash, Worker, hash};
use rmpv::Value;

const BLOCK: usize = 16;

/// A request's tokens, blocks of distinct tokens after `shared` blocks of request `from`.
fn tokens(request: u32, blocks: usize, shared: usize, from: u32) -> Vec<u32> {
    (0..blocks * BLOCK)
        .map(|t| {
            let owner = if t < shared * BLOCK { from } else { request };
            owner * 100_000 + t as u32
        })
        .collect()
}

/// The engine's block hashes of `tokens` (opaque to the index: a chain keyed apart from ours).
fn engine_hashes(tokens: &[u32]) -> Vec<u64> {
    let locals = hash::local_hashes(tokens, BLOCK);
    hash::seq_hashes(&locals)
        .into_iter()
        .map(|s| s.0 ^ 0x9e37_79b9_7f4a_7c15)
        .collect()
}

/// vLLM 0.33's `BlockStored`, positional: blocks `from..to` of `tokens`, of which `keep` are
/// published.
fn stored(
    group: u32,
    tokens: &[u32],
    range: core::ops::Range<usize>,
    keep: impl Fn(usize) -> bool,
    kind: Option<(&str, Option<u32>)>,
) -> Value {
    let hashes = engine_hashes(tokens);
    let parent = range
        .start
        .checked_sub(1)
        .map_or(Value::Nil, |p| Value::from(hashes[p]));
    let published: Vec<Value> = range
        .clone()
        .filter(|&b| keep(b))
        .map(|b| Value::from(hashes[b]))
        .collect();
    let token_ids = tokens[range.start * BLOCK..range.end * BLOCK]
        .iter()
        .map(|&t| Value::from(t))
        .collect();
    let (kind, window) = kind.map_or((Value::Nil, Value::Nil), |(k, w)| {
        (Value::from(k), w.map_or(Value::Nil, Value::from))
    });
    Value::Array(vec![
        Value::from("BlockStored"),
        Value::Array(published),
        parent,
        Value::Array(token_ids),
        Value::from(BLOCK as u32),
        Value::Nil,               // lora_id
        Value::from("GPU"),       // medium
        Value::Nil,               // lora_name
        Value::Nil,               // extra_keys
        Value::from(group),       // group_idx
        kind,                     // kv_cache_spec_kind
        window,                   // kv_cache_spec_sliding_window
        Value::Nil,               // locality
        Value::Nil,               // ownership
        Value::from("session-1"), // session_id
        Value::Nil,               // lookahead_token_ids
    ])
}

/// vLLM 0.33's `BlockRemoved`, positional.
fn removed(group: u32, tokens: &[u32], blocks: core::ops::Range<usize>) -> Value {
    let hashes = engine_hashes(tokens);
    Value::Array(vec![
        Value::from("BlockRemoved"),
        Value::Array(blocks.map(|b| Value::from(hashes[b])).collect()),
        Value::from("GPU"),
        Value::from(group),
        Value::Nil,
        Value::Nil,
    ])
}

/// The reference and every layout, fed one engine's batches through the decoder and mapper.
struct Fleet {
    model: ModelGroups,
    indexes: Vec<(&'static str, Box<dyn HybridIndex>)>,
    mapper: EventMapper,
    next: u64,
}

impl Fleet {
    fn new(model: ModelGroups) -> Self {
        let mut indexes: Vec<(&'static str, Box<dyn HybridIndex>)> =
            vec![("naive", Box::new(NaiveHybridIndexer::new(model.clone())))];
        for layout in testing::enabled_layouts() {
            let index: HybridIndexer<Box<dyn KvIndex>> =
                HybridIndexer::with_layout(model.clone(), (layout.make)());
            indexes.push((layout.name, Box::new(index)));
        }
        Fleet {
            model,
            indexes,
            mapper: EventMapper::new(1, MapConfig::default()),
            next: 0,
        }
    }

    /// Sends one batch; returns what the mapper rejected.
    fn send(&mut self, events: Vec<Value>) -> Vec<MapError> {
        let batch = Value::Array(vec![Value::from(1.0), Value::Array(events), Value::Nil]);
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &batch).unwrap();
        let batch = decode_batch(&bytes, Engine::Vllm).unwrap();
        let mapped = self.mapper.map_groups(&batch, self.next, &self.model);
        self.next += 1;
        for (group, event) in &mapped.events {
            for (name, index) in &self.indexes {
                let result = index.apply(*group, event);
                assert!(
                    result.is_ok(),
                    "{name}: {event:?} of group {group}: {result:?}"
                );
            }
        }
        mapped.rejected
    }

    /// Every index's score for the first `blocks` blocks of `tokens`.
    fn assert_score(&self, tokens: &[u32], blocks: usize, expected: Option<u32>) {
        let query: Vec<LocalHash> = hash::local_hashes(&tokens[..blocks * BLOCK], BLOCK);
        for (name, index) in &self.indexes {
            let got = index.find_matches(&query).get(Worker::new(1, 0));
            assert_eq!(got, expected, "{name}: {blocks} blocks");
        }
    }
}

/// gpt-oss's groups: full attention and a sliding window of 128 tokens, in blocks of [`BLOCK`].
fn gpt_oss_like() -> ModelGroups {
    ModelGroups::new(vec![
        GroupSpec::new(GroupKind::FullAttention, BLOCK as u32),
        GroupSpec::new(GroupKind::SlidingWindow { window: 128 }, BLOCK as u32),
    ])
    .unwrap()
}

#[test]
fn gpt_oss_like_full_attention_and_a_window_of_128_tokens() {
    // Window 128 over blocks of 16: a hit needs the cdiv(127, 16) = 8 blocks before its end.
    let model = gpt_oss_like();
    let mut fleet = Fleet::new(model);
    let a = tokens(1, 40, 0, 0);
    let all = |_| true;
    // Request A prefills 40 blocks: both groups cache them all (the window group names its
    // kind, as the field allows).
    let rejected = fleet.send(vec![
        stored(0, &a, 0..40, all, None),
        stored(1, &a, 0..40, all, Some(("sliding_window", Some(128)))),
    ]);
    assert!(rejected.is_empty(), "{rejected:?}");
    fleet.assert_score(&a, 40, Some(40));
    fleet.assert_score(&a, 30, Some(30));
    // The window group frees and evicts what slid out of the window: blocks 0..32.
    fleet.send(vec![removed(1, &a, 0..32)]);
    // All 40: blocks 32..40 are the window before 40. Any shorter prefix of A has no
    // window left, nor a run from block 0: vLLM reuses nothing (the old code said 30).
    fleet.assert_score(&a, 40, Some(40));
    fleet.assert_score(&a, 39, None);
    fleet.assert_score(&a, 30, None);
    // Request B shares A's first 20 blocks and adds 20; its window group keeps a masked
    // tail (blocks 32..40 of B): fewer hashes than blocks, parent A's block 19 all the same.
    let b = tokens(2, 40, 20, 1);
    fleet.send(vec![
        stored(0, &b, 20..40, all, None),
        stored(1, &b, 20..40, |i| i >= 32, None),
    ]);
    fleet.assert_score(&b, 40, Some(40));
    // 36 blocks: 32..36 is only four blocks of window, and no run from block 0.
    fleet.assert_score(&b, 36, None);
    // The full-attention group evicts B's block 38: the hit ends at 38, whose window
    // (30..38) the window group no longer has either.
    fleet.send(vec![removed(0, &b, 38..39)]);
    fleet.assert_score(&b, 40, None);
    // A is untouched by B's events.
    fleet.assert_score(&a, 40, Some(40));
}

#[test]
fn gpt_oss_like_with_lookahead_hashing_keys_both_groups_blocks_by_the_next_token() {
    // The same model served with an EAGLE drafter: vLLM hashes each block over the token after
    // it, and both groups' events carry `lookahead_token_ids` for the blocks they publish.
    let model = gpt_oss_like();
    let mut fleet = Fleet::new(model);
    // 40 blocks and the first token after them.
    let request = tokens(3, 41, 0, 0);
    let a = &request[..40 * BLOCK];
    let with_lookahead = |event: Value, published: &[usize]| {
        let Value::Array(mut fields) = event else {
            unreachable!()
        };
        let lists = published
            .iter()
            .map(|&b| Value::Array(vec![Value::from(request[(b + 1) * BLOCK])]));
        *fields.last_mut().unwrap() = Value::Array(lists.collect());
        Value::Array(fields)
    };
    let every: Vec<usize> = (0..40).collect();
    let window: Vec<usize> = (32..40).collect();
    let rejected = fleet.send(vec![
        with_lookahead(stored(0, a, 0..40, |_| true, None), &every),
        with_lookahead(stored(1, a, 0..40, |i| i >= 32, None), &window),
    ]);
    assert!(rejected.is_empty(), "{rejected:?}");
    let score = |tokens: &[u32], lookahead: usize| {
        let features = hash::Features {
            lookahead,
            ..hash::Features::default()
        };
        let query = hash::local_hashes_with_features(tokens, BLOCK, &features);
        let scores: Vec<Option<u32>> = (fleet.indexes.iter())
            .map(|(_, index)| index.find_matches(&query).get(Worker::new(1, 0)))
            .collect();
        assert!(scores.windows(2).all(|w| w[0] == w[1]), "{scores:?}");
        scores[0]
    };
    // Hashed as the engine hashes it: all 40 blocks, their window held.
    assert_eq!(score(&request[..40 * BLOCK + 1], 1), Some(40));
    // Another token after block 39 is another block 39: the hit ends at 39, whose window
    // (31..39) the window group does not hold.
    let mut other = request[..40 * BLOCK + 1].to_vec();
    other[40 * BLOCK] = 7;
    assert_eq!(score(&other, 1), None);
    // A router that hashes without the lookahead matches nothing.
    assert_eq!(score(&request[..40 * BLOCK + 1], 0), None);
}

#[test]
fn qwen3_next_like_full_attention_and_mamba_states_per_step() {
    let model = ModelGroups::new(vec![
        GroupSpec::new(GroupKind::FullAttention, BLOCK as u32),
        GroupSpec::new(GroupKind::Mamba, BLOCK as u32),
    ])
    .unwrap();
    let mut fleet = Fleet::new(model);
    let a = tokens(1, 40, 0, 0);
    // A prefills in three steps of 16, 16 and 8 blocks. Full attention caches every block;
    // Mamba (prefix caching in "align" mode) the state after each step's last block only.
    for step in [0..16, 16..32, 32..40] {
        let last = step.end - 1;
        fleet.send(vec![
            stored(0, &a, step.clone(), |_| true, None),
            stored(1, &a, step, move |i| i == last, Some(("mamba", None))),
        ]);
    }
    fleet.assert_score(&a, 40, Some(40));
    fleet.assert_score(&a, 35, Some(32));
    fleet.assert_score(&a, 20, Some(16));
    fleet.assert_score(&a, 10, None);
    // The state after block 31 is evicted: 35 blocks fall back to the state after 15.
    fleet.send(vec![removed(1, &a, 31..32)]);
    fleet.assert_score(&a, 35, Some(16));
    fleet.assert_score(&a, 40, Some(40));
    // The engine clears its cache (prefix-cache reset): every group goes.
    let cleared = Value::Array(vec![Value::from("AllBlocksCleared")]);
    fleet.send(vec![cleared]);
    fleet.assert_score(&a, 40, None);
}

#[test]
fn unknown_groups_and_kinds_are_refused_and_counted_never_merged() {
    let model = gpt_oss_like();
    let mut fleet = Fleet::new(model);
    let a = tokens(1, 20, 0, 0);
    let all = |_| true;
    let rejected = fleet.send(vec![
        stored(0, &a, 0..20, all, None),
        // A third group the model does not have.
        stored(2, &a, 0..20, all, None),
        // A kind without a reuse rule here.
        stored(1, &a, 0..20, all, Some(("cross_attention", None))),
        // A kind other than the configuration's.
        stored(1, &a, 0..20, all, Some(("mamba", None))),
        // A window other than the configuration's.
        stored(1, &a, 0..20, all, Some(("sliding_window", Some(4096)))),
    ]);
    assert_eq!(rejected.len(), 4, "{rejected:?}");
    assert!(rejected.iter().all(|e| matches!(e, MapError::Group { .. })));
    for error in &rejected {
        assert!(error.to_string().contains("event rejected"), "{error}");
    }
    // Only the full-attention group holds A: no window, no hit.
    fleet.assert_score(&a, 20, None);
}

/// A vLLM engine's event socket for one test: batches are published as vLLM 0.33 frames them
/// (`[topic, seq, payload]`), with sequence numbers counting from 0.
struct Engine0 {
    socket: zmq::Socket,
    address: String,
    seq: u64,
}

impl Engine0 {
    fn bind() -> Self {
        let socket = zmq::Context::new().socket(zmq::PUB).unwrap();
        socket.bind("tcp://127.0.0.1:*").unwrap();
        let address = socket.get_last_endpoint().unwrap().unwrap();
        Engine0 {
            socket,
            address,
            seq: 0,
        }
    }

    fn publish(&mut self, events: Vec<Value>) {
        let batch = Value::Array(vec![Value::from(1.0), Value::Array(events), Value::Nil]);
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &batch).unwrap();
        let frames: [&[u8]; 3] = [b"", &self.seq.to_be_bytes(), &bytes];
        self.socket.send_multipart(frames, 0).unwrap();
        self.seq += 1;
    }
}

/// Waits until `done` holds, for at most 10 s.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn the_subscriber_follows_a_hybrid_engine_over_zeromq() {
    use flash_indexer::ingest::{EngineEndpoint, Subscriber, SubscriberConfig};
    use std::sync::Arc;

    let model = gpt_oss_like();
    for layout in testing::enabled_layouts() {
        let name = layout.name;
        let index: Arc<HybridIndexer<Box<dyn KvIndex>>> =
            Arc::new(HybridIndexer::with_layout(model.clone(), (layout.make)()));
        let mut engine = Engine0::bind();
        let endpoint = EngineEndpoint::new(&engine.address).with_worker(1);
        let subscriber =
            Subscriber::spawn_hybrid(Arc::clone(&index), [endpoint], SubscriberConfig::default())
                .unwrap();
        let score = |tokens: &[u32], blocks: usize| {
            let query = hash::local_hashes(&tokens[..blocks * BLOCK], BLOCK);
            index.find_matches(&query).get(Worker::new(1, 0))
        };
        let all = |_| true;

        // A probe request, published until the subscription is up (a PUB socket drops what it
        // sends before then): both groups store its 10 blocks, again and again.
        let probe = tokens(9, 10, 0, 0);
        eventually(&format!("{name}: the probe"), || {
            engine.publish(vec![
                stored(0, &probe, 0..10, all, None),
                stored(1, &probe, 0..10, all, None),
            ]);
            std::thread::sleep(std::time::Duration::from_millis(20));
            score(&probe, 10) == Some(10)
        });

        // The gpt-oss scenario: A in both groups, then the window group's evictions.
        let a = tokens(1, 40, 0, 0);
        engine.publish(vec![
            stored(0, &a, 0..40, all, None),
            stored(1, &a, 0..40, all, Some(("sliding_window", Some(128)))),
        ]);
        engine.publish(vec![removed(1, &a, 0..32)]);
        // A group the model lacks (refused by the mapping); a store continuing a block the
        // worker does not hold (refused by the index); a removal of blocks it does not hold (a
        // warning).
        let stray = tokens(3, 4, 0, 0);
        engine.publish(vec![
            stored(2, &a, 0..4, all, None),
            stored(0, &stray, 1..4, all, None),
            removed(0, &stray, 0..2),
        ]);
        // Batches are applied in order: the last one's warning says all three were.
        eventually(&format!("{name}: the third batch"), || {
            subscriber.stats().index_warnings >= 1
        });
        assert_eq!(score(&a, 40), Some(40), "{name}");
        assert_eq!(score(&a, 39), None, "{name}: no window before block 39");
        assert_eq!(score(&a, 30), None, "{name}");
        let stats = subscriber.stats();
        assert_eq!(stats.rejected_events, 1, "{name}: {stats:?}");
        assert_eq!(stats.index_refused, 1, "{name}: {stats:?}");
        assert_eq!(stats.index_warnings, 1, "{name}: {stats:?}");
        assert!(
            subscriber
                .last_problem()
                .is_some_and(|p| p.contains(&engine.address)),
            "{name}: {:?}",
            subscriber.last_problem()
        );
        assert_eq!(index.block_count(Worker::new(1, 0), 1), 10 + 8, "{name}");
        subscriber.shutdown();
    }
}
