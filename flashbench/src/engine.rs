//! Mock inference engines: turn a request trace into the exact stream of queries and KV events
//! a router would see.
//!
//! Each worker has a fixed number of KV block slots with prefix caching: a request reuses the
//! longest cached prefix of its blocks, allocates the rest (evicting unreferenced blocks in LRU
//! order, one `remove` event per allocation burst), publishes them in a `store` event when its
//! prefill is done, stores decode blocks as output fills them, and releases all its blocks when
//! it finishes, tail first, so that eviction takes tails before the prefixes they extend.
//! Stores are never published before their parent: a request that reuses blocks another request
//! is still computing publishes after them.

use crate::trace::{Request, TOKENS_PER_HASH_ID};
use crate::workload::{FORMAT, Header, Op, VERSION, Workload, op_of_event};
use flash_indexer::hash::local_hashes;
use flash_indexer::testing::{GOLDEN, splitmix64};
use flash_indexer::{Block, Event, LocalHash, SeqHash, Worker};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// How the mock engines behave.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub workers: u64,
    pub capacity_blocks: usize,
    pub block_size: usize,
    pub seed: u64,
    /// Trace time is divided by this (2.0 replays twice as fast: twice the load).
    pub time_scale: f64,
    /// Each request is sent this many times, with disjoint hash ids (more load, same shape).
    pub duplicate: usize,
    /// Prefill speed of one request, tokens per second.
    pub prefill_tokens_per_s: f64,
    /// Decode speed of one request, tokens per second.
    pub decode_tokens_per_s: f64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            workers: 16,
            capacity_blocks: 4096,
            block_size: 64,
            seed: 42,
            time_scale: 1.0,
            duplicate: 1,
            prefill_tokens_per_s: 20_000.0,
            decode_tokens_per_s: 60.0,
        }
    }
}

fn mix(a: u64, b: u64) -> u64 {
    splitmix64(a ^ b.rotate_left(32) ^ GOLDEN)
}

/// One cached block of one engine.
struct Cached {
    refs: u32,
    /// Its place in the LRU while `refs == 0`.
    tick: u64,
    /// When its store is published.
    ready_at: u64,
}

/// One engine's prefix cache: block slots with LRU eviction of unreferenced blocks.
#[derive(Default)]
pub(crate) struct Engine {
    cache: HashMap<u64, Cached>,
    lru: BTreeMap<u64, u64>,
    tick: u64,
}

impl Engine {
    /// Takes a reference on a cached block; `None` if it is not cached. Returns when its store
    /// is published.
    pub(crate) fn pin(&mut self, seq: u64) -> Option<u64> {
        let cached = self.cache.get_mut(&seq)?;
        if cached.refs == 0 {
            self.lru.remove(&cached.tick);
        }
        cached.refs += 1;
        Some(cached.ready_at)
    }

    /// Drops a reference; an unreferenced block joins the LRU.
    pub(crate) fn release(&mut self, seq: u64) {
        let Some(cached) = self.cache.get_mut(&seq) else {
            return;
        };
        cached.refs -= 1;
        if cached.refs == 0 {
            self.tick += 1;
            cached.tick = self.tick;
            self.lru.insert(self.tick, seq);
        }
    }

    /// Takes a slot for `seq`, evicting the least recently used unreferenced block if full.
    pub(crate) fn allocate(
        &mut self,
        seq: u64,
        ready_at: u64,
        capacity: usize,
        evicted: &mut Vec<u64>,
    ) -> bool {
        if self.cache.len() >= capacity {
            let Some((_, victim)) = self.lru.pop_first() else {
                return false; // Everything is in use: the request cannot cache more.
            };
            self.cache.remove(&victim);
            evicted.push(victim);
        }
        self.cache.insert(
            seq,
            Cached {
                refs: 1,
                tick: 0,
                ready_at,
            },
        );
        true
    }
}

/// A request in flight.
struct Running {
    worker: u64,
    locals: Vec<LocalHash>,
    seqs: Vec<u64>,
    /// Blocks `0 .. held` are pinned.
    held: usize,
    /// When its latest store is published.
    last_store: u64,
    /// Decode stopped caching (no free slot).
    truncated: bool,
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Action {
    Arrive(usize),
    Decode(usize, usize),
    Finish(usize),
}

/// What the simulation emits: ops with a sequence number that orders ties in time.
struct Emitter {
    ops: Vec<(u64, u64, Emitted)>,
    seq: u64,
}

enum Emitted {
    Match { w: u64, q: Vec<u64> },
    Event(Event),
}

impl Emitter {
    fn push(&mut self, t: u64, what: Emitted) {
        self.ops.push((t, self.seq, what));
        self.seq += 1;
    }
}

/// The prompt's tokens: each hash id stands for 512 distinct tokens, and copies get disjoint
/// ids. The hash ids give at most 512 tokens each: a longer `input_length` is cut to them, a
/// shorter one cuts them (a prompt may be shorter than one block).
pub fn prompt_tokens(request: &Request, copy: u64) -> Vec<u32> {
    let mut tokens: Vec<u32> = Vec::with_capacity(
        request
            .input_length
            .min(request.hash_ids.len() * TOKENS_PER_HASH_ID)
            + request.output_length,
    );
    'ids: for id in &request.hash_ids {
        let id = id ^ (copy << 48);
        for j in 0..TOKENS_PER_HASH_ID as u64 {
            if tokens.len() == request.input_length {
                break 'ids;
            }
            tokens.push(mix(id, j) as u32);
        }
    }
    tokens
}

/// Runs the mock engines over `trace` and returns the workload a router would see.
pub fn generate(trace: &[Request], cfg: &EngineConfig, source: &str) -> Workload {
    let bs = cfg.block_size.max(1);
    let salt = mix(cfg.seed, 0x5eed);
    let mut engines: Vec<Engine> = (0..cfg.workers.max(1)).map(|_| Engine::default()).collect();
    let mut running: Vec<Option<Running>> = Vec::new();
    let mut queue: BinaryHeap<Reverse<(u64, u64, Action)>> = BinaryHeap::new();
    let mut order = 0u64;
    let mut requests: Vec<(&Request, u64)> = Vec::new();
    for copy in 0..cfg.duplicate.max(1) as u64 {
        for r in trace {
            let t = (r.timestamp as f64 * 1000.0 / cfg.time_scale.max(1e-9)) as u64;
            requests.push((r, copy));
            queue.push(Reverse((t, order, Action::Arrive(requests.len() - 1))));
            order += 1;
        }
    }
    running.resize_with(requests.len(), || None);
    let mut out = Emitter {
        ops: Vec::new(),
        seq: 0,
    };
    let us_per_prefill_token = 1e6 / cfg.prefill_tokens_per_s.max(1e-9);
    let us_per_decode_token = 1e6 / cfg.decode_tokens_per_s.max(1e-9);

    while let Some(Reverse((now, _, action))) = queue.pop() {
        match action {
            Action::Arrive(i) => {
                let (request, copy) = requests[i];
                let worker = mix(salt ^ 0x77, i as u64) % cfg.workers.max(1);
                let mut tokens = prompt_tokens(request, copy);
                let prompt_tokens = tokens.len();
                let prompt_blocks = prompt_tokens / bs;
                tokens.extend(
                    (0..request.output_length as u64).map(|j| mix(salt ^ i as u64, j) as u32),
                );
                let locals = local_hashes(&tokens, bs);
                let mut seqs = Vec::with_capacity(locals.len());
                let mut prev = 0u64;
                for (k, l) in locals.iter().enumerate() {
                    let mut bytes = [0u8; 16];
                    bytes[..8].copy_from_slice(&if k == 0 { 0 } else { prev }.to_le_bytes());
                    bytes[8..].copy_from_slice(&l.0.to_le_bytes());
                    prev = xxh3_64_with_seed(&bytes, salt);
                    seqs.push(prev);
                }
                let q = locals[..prompt_blocks].iter().map(|l| l.0).collect();
                out.push(now, Emitted::Match { w: worker, q });

                let engine = &mut engines[worker as usize];
                let prefill_done = now + (prompt_tokens as f64 * us_per_prefill_token) as u64;
                let mut held = 0;
                let mut ready = 0;
                while held < prompt_blocks {
                    match engine.pin(seqs[held]) {
                        Some(at) => ready = ready.max(at),
                        None => break,
                    }
                    held += 1;
                }
                let store_at = prefill_done.max(ready);
                let first_new = held;
                let mut evicted = Vec::new();
                while held < prompt_blocks
                    && engine.allocate(seqs[held], store_at, cfg.capacity_blocks, &mut evicted)
                {
                    held += 1;
                }
                let w = Worker::new(worker, 0);
                if !evicted.is_empty() {
                    out.push(
                        now,
                        Emitted::Event(Event::removed(
                            w,
                            0,
                            evicted.into_iter().map(SeqHash).collect(),
                        )),
                    );
                }
                if held > first_new {
                    let parent = first_new.checked_sub(1).map(|p| SeqHash(seqs[p]));
                    let blocks = (first_new..held)
                        .map(|k| Block::new(locals[k], SeqHash(seqs[k])))
                        .collect();
                    out.push(
                        store_at,
                        Emitted::Event(Event::stored(w, 0, parent, blocks)),
                    );
                }
                let truncated = held < prompt_blocks;
                let decode_blocks = locals.len() - prompt_blocks;
                if !truncated {
                    for k in 1..=decode_blocks {
                        let filled = (k * bs).saturating_sub(prompt_tokens % bs);
                        let at = prefill_done + (filled as f64 * us_per_decode_token) as u64;
                        queue.push(Reverse((
                            at,
                            order,
                            Action::Decode(i, prompt_blocks + k - 1),
                        )));
                        order += 1;
                    }
                }
                let finish =
                    prefill_done + (request.output_length as f64 * us_per_decode_token) as u64;
                queue.push(Reverse((finish.max(store_at), order, Action::Finish(i))));
                order += 1;
                running[i] = Some(Running {
                    worker,
                    locals,
                    seqs,
                    held,
                    last_store: store_at,
                    truncated,
                });
            }
            Action::Decode(i, block) => {
                let Some(run) = running[i].as_mut() else {
                    continue;
                };
                if run.truncated || run.held != block {
                    continue;
                }
                let engine = &mut engines[run.worker as usize];
                let w = Worker::new(run.worker, 0);
                let at = now.max(run.last_store);
                let mut evicted = Vec::new();
                let fresh = engine.pin(run.seqs[block]).is_none();
                if fresh && !engine.allocate(run.seqs[block], at, cfg.capacity_blocks, &mut evicted)
                {
                    run.truncated = true;
                    continue;
                }
                if !evicted.is_empty() {
                    out.push(
                        now,
                        Emitted::Event(Event::removed(
                            w,
                            0,
                            evicted.into_iter().map(SeqHash).collect(),
                        )),
                    );
                }
                if fresh {
                    // Block 0 comes from decode when the prompt is shorter than a block.
                    let parent = block.checked_sub(1).map(|p| SeqHash(run.seqs[p]));
                    let b = Block::new(run.locals[block], SeqHash(run.seqs[block]));
                    out.push(at, Emitted::Event(Event::stored(w, 0, parent, vec![b])));
                }
                run.held += 1;
                run.last_store = at;
            }
            Action::Finish(i) => {
                let Some(run) = running[i].take() else {
                    continue;
                };
                let engine = &mut engines[run.worker as usize];
                for k in (0..run.held).rev() {
                    engine.release(run.seqs[k]);
                }
            }
        }
    }

    // Sort by time (ties in emission order), then number each worker's events from 0.
    out.ops.sort_by_key(|(t, seq, _)| (*t, *seq));
    let mut next_id: HashMap<Worker, u64> = HashMap::new();
    let ops = out
        .ops
        .into_iter()
        .map(|(t, _, what)| match what {
            Emitted::Match { w, q } => Op::Match { t, w, r: 0, q },
            Emitted::Event(mut event) => {
                let id = next_id.entry(event.worker).or_insert(0);
                event.event_id = *id;
                *id += 1;
                op_of_event(t, &event)
            }
        })
        .collect();
    Workload {
        header: Header {
            format: FORMAT.into(),
            version: VERSION,
            block_size: bs,
            workers: Some(cfg.workers),
            capacity_blocks: Some(cfg.capacity_blocks),
            source: Some(source.into()),
            seed: Some(cfg.seed),
        },
        ops,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{any_request, synthetic};
    use flash_indexer::{KvIndex, NaiveIndexer};
    use proptest::prelude::*;

    #[test]
    fn generated_events_are_all_valid_and_capacity_is_respected() {
        let trace = synthetic(400, 3);
        let cfg = EngineConfig {
            workers: 4,
            capacity_blocks: 300,
            ..EngineConfig::default()
        };
        let workload = generate(&trace, &cfg, "synthetic");
        let index = NaiveIndexer::new();
        let (mut stores, mut removes, mut matches) = (0, 0, 0);
        for op in &workload.ops {
            match op.event() {
                Some(event) => {
                    index
                        .apply(&event)
                        .unwrap_or_else(|e| panic!("{op:?}: {e}"));
                    let held = index.block_count(event.worker);
                    assert!(held <= cfg.capacity_blocks, "{} holds {held}", event.worker);
                    if matches!(op, Op::Store { .. }) {
                        stores += 1
                    } else {
                        removes += 1
                    }
                }
                None => matches += 1,
            }
        }
        assert_eq!(matches, 400);
        // Small caches: evictions must have happened, and most requests stored something.
        assert!(
            stores > 200 && removes > 0,
            "stores {stores}, removes {removes}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn every_trace_shape_generates_a_workload_every_layout_replays(
            trace in proptest::collection::vec(any_request(), 0..24),
            workers in 1u64..4,
            capacity_blocks in 1usize..64,
            block_size in prop_oneof![Just(1usize), Just(16), Just(64), Just(512)],
            duplicate in 1usize..3,
        ) {
            let cfg = EngineConfig {
                workers,
                capacity_blocks,
                block_size,
                duplicate,
                ..EngineConfig::default()
            };
            let workload = generate(&trace, &cfg, "proptest");
            let matches = workload.ops.iter().filter(|op| op.event().is_none()).count();
            prop_assert_eq!(matches, trace.len() * duplicate);
            let mut indexes: Vec<(&str, Box<dyn KvIndex>)> =
                vec![("naive", Box::new(NaiveIndexer::new()))];
            for factory in flash_indexer::testing::enabled_layouts() {
                indexes.push((factory.name, (factory.make)()));
            }
            for op in &workload.ops {
                if let Some(event) = op.event() {
                    for (name, index) in &indexes {
                        let applied = index.apply(&event);
                        prop_assert!(applied.is_ok(), "{}: {:?}: {:?}", name, op, applied);
                    }
                }
            }
        }
    }
}
