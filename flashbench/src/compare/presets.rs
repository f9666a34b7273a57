//! The named workloads of the comparison, each a list of phases run on a fresh index.

use crate::engine::{self, EngineConfig};
use crate::trace::Request;
use crate::workload::Op;
use flash_indexer::hash::{local_hashes, seq_hashes};
use flash_indexer::testing::SplitMix64;
use flash_indexer::{Block, Event, EventKind, LocalHash, SeqHash, Worker};

/// One step of a replayed trace.
pub enum Step {
    Event(Event),
    Query(Vec<LocalHash>),
}

/// What a phase does to the index under test.
pub enum Phase {
    /// Events submitted as fast as the index takes them, then a barrier: blocks per second.
    Write {
        label: &'static str,
        events: Vec<Event>,
        /// Measure heap bytes per held pair once this phase is applied.
        bytes_after: bool,
    },
    /// Queries, each timed on its own: p50 and p99, and each answer checked.
    Query {
        label: &'static str,
        queries: Vec<Vec<LocalHash>>,
    },
    /// A trace's events and queries in order, as fast as possible (`speed` 0) or paced at `speed`
    /// times trace time; `t` in microseconds of trace time.
    Replay {
        label: &'static str,
        steps: Vec<(u64, Step)>,
        speed: f64,
    },
}

impl Phase {
    pub fn label(&self) -> &'static str {
        match self {
            Phase::Write { label, .. }
            | Phase::Query { label, .. }
            | Phase::Replay { label, .. } => label,
        }
    }
}

/// A named workload.
pub struct Preset {
    pub name: &'static str,
    /// One paragraph: what it is and what it shows.
    pub about: String,
    pub phases: Vec<Phase>,
    /// Columns (`"{phase} {metric}"`) of the summary table, in order.
    pub columns: Vec<String>,
    /// Interleaved rounds the preset runs at least, whatever `--rounds` says: a phase that
    /// lasts a few tens of milliseconds needs more samples than one that lasts seconds for
    /// its median to mean anything.
    pub min_rounds: usize,
}

/// The names `--presets` accepts, in the order they run.
pub const NAMES: [&str; 6] = [
    "dynamo",
    "shared-prefix",
    "depth",
    "trace",
    "trace-paced",
    "fleet",
];

fn blocks_of(events: &[Event]) -> u64 {
    events
        .iter()
        .map(|e| match &e.kind {
            EventKind::Stored { blocks, .. } => blocks.len() as u64,
            EventKind::Removed { blocks } => blocks.len() as u64,
            EventKind::Cleared => 0,
        })
        .sum()
}

/// Blocks named by a write phase's events.
pub fn write_blocks(phase: &Phase) -> u64 {
    match phase {
        Phase::Write { events, .. } => blocks_of(events),
        _ => 0,
    }
}

/// The local and sequence hashes of `tokens` in blocks of `block_size`.
fn hashed(tokens: &[u32], block_size: usize) -> (Vec<LocalHash>, Vec<SeqHash>) {
    let locals = local_hashes(tokens, block_size);
    let seqs = seq_hashes(&locals);
    (locals, seqs)
}

fn tokens(rng: &mut SplitMix64, n: usize) -> Vec<u32> {
    (0..n).map(|_| rng.next_u64() as u32).collect()
}

/// Dynamo's published indexer workload: 64 workers each store 200 sequences of 128 blocks
/// (block size 16), sequence `s` opening with the 64-block prefix of group `s % 4`; queries are
/// 50% full hits, 25% diverging at a random block, 25% first-block misses; then workers 0..32
/// remove everything tail-first. A churn phase follows on workers 32..64: a block in the middle
/// of every tenth sequence is removed (a hole: the chain must stop there) and stored again (the
/// held descendants must count again at once).
pub fn dynamo() -> Preset {
    const WORKERS: u64 = 64;
    const SEQUENCES: usize = 200;
    const GROUPS: usize = 4;
    const PREFIX: usize = 64;
    const BLOCK_SIZE: usize = 16;
    const QUERIES: usize = 20_000;
    const HOLE: usize = 96;
    let mut rng = SplitMix64(42);
    let prefixes: Vec<Vec<u32>> = (0..GROUPS)
        .map(|_| tokens(&mut rng, PREFIX * BLOCK_SIZE))
        .collect();
    // chains[w][s] = (locals, seqs)
    let chains: Vec<Vec<(Vec<LocalHash>, Vec<SeqHash>)>> = (0..WORKERS)
        .map(|_| {
            (0..SEQUENCES)
                .map(|s| {
                    let mut t = prefixes[s % GROUPS].clone();
                    t.extend(tokens(&mut rng, PREFIX * BLOCK_SIZE));
                    hashed(&t, BLOCK_SIZE)
                })
                .collect()
        })
        .collect();
    let mut next_id = vec![0u64; WORKERS as usize];
    let mut event = |w: usize, make: &dyn Fn(Worker, u64) -> Event| {
        next_id[w] += 1;
        make(Worker::new(w as u64, 0), next_id[w])
    };
    let mut stores = Vec::new();
    for s in 0..SEQUENCES {
        for (w, of_worker) in chains.iter().enumerate() {
            let (locals, seqs) = &of_worker[s];
            let blocks = locals.iter().zip(seqs).map(|(l, q)| Block::new(*l, *q));
            let blocks: Vec<Block> = blocks.collect();
            stores.push(event(w, &|w, id| {
                Event::stored(w, id, None, blocks.clone())
            }));
        }
    }
    let mut removes = Vec::new();
    for (w, of_worker) in chains.iter().enumerate().take(WORKERS as usize / 2) {
        // Private suffixes first, newest sequence first, each tail-first; then the prefixes.
        for s in (0..SEQUENCES).rev() {
            let seqs: Vec<SeqHash> = of_worker[s].1[PREFIX..].iter().rev().copied().collect();
            removes.push(event(w, &|w, id| Event::removed(w, id, seqs.clone())));
        }
        for g in (0..GROUPS).rev() {
            let seqs: Vec<SeqHash> = of_worker[g].1[..PREFIX].iter().rev().copied().collect();
            removes.push(event(w, &|w, id| Event::removed(w, id, seqs.clone())));
        }
    }
    let query = |rng: &mut SplitMix64, i: usize| {
        let (w, s) = (
            rng.below(WORKERS) as usize,
            rng.below(SEQUENCES as u64) as usize,
        );
        let mut q = chains[w][s].0.clone();
        match i % 4 {
            0 | 1 => {}
            2 => {
                let at = rng.below(q.len() as u64) as usize;
                q[at] = LocalHash(rng.next_u64());
            }
            _ => q[0] = LocalHash(rng.next_u64()),
        }
        q
    };
    let mix: Vec<Vec<LocalHash>> = (0..QUERIES).map(|i| query(&mut rng, i)).collect();
    let after_remove: Vec<Vec<LocalHash>> = (0..QUERIES / 4).map(|i| query(&mut rng, i)).collect();
    let churned: Vec<(usize, usize)> = (WORKERS as usize / 2..WORKERS as usize)
        .flat_map(|w| (0..SEQUENCES).step_by(10).map(move |s| (w, s)))
        .collect();
    let holes: Vec<Event> = churned
        .iter()
        .map(|&(w, s)| {
            let seq = chains[w][s].1[HOLE];
            event(w, &|w, id| Event::removed(w, id, vec![seq]))
        })
        .collect();
    let restores: Vec<Event> = churned
        .iter()
        .map(|&(w, s)| {
            let (locals, seqs) = &chains[w][s];
            let block = Block::new(locals[HOLE], seqs[HOLE]);
            let parent = Some(seqs[HOLE - 1]);
            event(w, &|w, id| Event::stored(w, id, parent, vec![block]))
        })
        .collect();
    let churn_queries: Vec<Vec<LocalHash>> = churned
        .iter()
        .map(|&(w, s)| chains[w][s].0.clone())
        .collect();
    Preset {
        name: "dynamo",
        about: format!(
            "Dynamo's published indexer workload: {WORKERS} workers x {SEQUENCES} sequences x 128 blocks (block size {BLOCK_SIZE}; 4 shared 64-block prefixes), {QUERIES} mixed queries (50% full hits, 25% diverging, 25% first-block misses), then workers 0..32 remove everything tail-first. Churn on workers 32..64: block {HOLE} of every tenth sequence removed (the chain must stop there), then stored again (its held descendants must count again at once); {} queries after each step, checked but not in the table.",
            churn_queries.len()
        ),
        phases: vec![
            Phase::Write {
                label: "store",
                events: stores,
                bytes_after: true,
            },
            Phase::Query {
                label: "query",
                queries: mix,
            },
            Phase::Write {
                label: "remove",
                events: removes,
                bytes_after: false,
            },
            Phase::Query {
                label: "after-remove",
                queries: after_remove,
            },
            Phase::Write {
                label: "hole",
                events: holes,
                bytes_after: false,
            },
            Phase::Query {
                label: "holes",
                queries: churn_queries.clone(),
            },
            Phase::Write {
                label: "re-store",
                events: restores,
                bytes_after: false,
            },
            Phase::Query {
                label: "revived",
                queries: churn_queries,
            },
        ],
        columns: [
            "store blocks/s",
            "bytes/pair",
            "query p50 us",
            "query p99 us",
            "query p99.9 us",
            "query max us",
            "remove blocks/s",
        ]
        .map(String::from)
        .to_vec(),
        // The phases last tens of milliseconds, so a median of few rounds moves from run to run
        // (paper §6.12).
        min_rounds: 15,
    }
}

/// The depths of the depth preset.
pub const DEPTHS: [usize; 4] = [64, 256, 1024, 4096];

/// The shape of a real fleet: hundreds of workers serving one model, a few long system prompts
/// that every worker holds, and short private tails (each worker's own conversations) under
/// them. Engines of one model hash a prompt to the same sequence hashes, so every worker's copy
/// of a prompt names the same blocks: memory that indexes shared content once wins here.
/// Queries: half extend a prompt with a tail some worker holds, a quarter with a tail nobody
/// holds (the prompt alone matches, on every worker), a quarter miss at the first block.
pub fn shared_prefix() -> Preset {
    const WORKERS: u64 = 256;
    const PROMPTS: usize = 4;
    const PROMPT_BLOCKS: usize = 256;
    const TAILS: usize = 32;
    const TAIL_BLOCKS: usize = 8;
    const BLOCK_SIZE: usize = 16;
    const QUERIES: usize = 8_000;
    let mut rng = SplitMix64(7);
    let prompts: Vec<Vec<u32>> = (0..PROMPTS)
        .map(|_| tokens(&mut rng, PROMPT_BLOCKS * BLOCK_SIZE))
        .collect();
    let prompt_chains: Vec<(Vec<LocalHash>, Vec<SeqHash>)> =
        prompts.iter().map(|t| hashed(t, BLOCK_SIZE)).collect();
    /// A private conversation under prompt `prompt`: the whole chain's hashes.
    struct Tail {
        prompt: usize,
        locals: Vec<LocalHash>,
        seqs: Vec<SeqHash>,
    }
    let tails: Vec<Vec<Tail>> = (0..WORKERS)
        .map(|_| {
            (0..TAILS)
                .map(|i| {
                    let prompt = i % PROMPTS;
                    let mut t = prompts[prompt].clone();
                    t.extend(tokens(&mut rng, TAIL_BLOCKS * BLOCK_SIZE));
                    let (locals, seqs) = hashed(&t, BLOCK_SIZE);
                    Tail {
                        prompt,
                        locals,
                        seqs,
                    }
                })
                .collect()
        })
        .collect();
    let mut stores = Vec::new();
    let mut ids = vec![0u64; WORKERS as usize];
    for (locals, seqs) in &prompt_chains {
        for (w, id) in ids.iter_mut().enumerate() {
            *id += 1;
            let blocks = locals.iter().zip(seqs).map(|(l, q)| Block::new(*l, *q));
            stores.push(Event::stored(
                Worker::new(w as u64, 0),
                *id,
                None,
                blocks.collect(),
            ));
        }
    }
    for i in 0..TAILS {
        for (w, of_worker) in tails.iter().enumerate() {
            let Tail { locals, seqs, .. } = &of_worker[i];
            ids[w] += 1;
            let blocks = locals[PROMPT_BLOCKS..]
                .iter()
                .zip(&seqs[PROMPT_BLOCKS..])
                .map(|(l, q)| Block::new(*l, *q));
            stores.push(Event::stored(
                Worker::new(w as u64, 0),
                ids[w],
                Some(seqs[PROMPT_BLOCKS - 1]),
                blocks.collect(),
            ));
        }
    }
    let queries: Vec<Vec<LocalHash>> = (0..QUERIES)
        .map(|i| {
            let w = rng.below(WORKERS) as usize;
            let tail = &tails[w][rng.below(TAILS as u64) as usize];
            let locals = &tail.locals;
            match i % 4 {
                0 | 1 => locals.clone(),
                2 => {
                    let mut q = prompt_chains[tail.prompt].0.clone();
                    q.extend((0..TAIL_BLOCKS).map(|_| LocalHash(rng.next_u64())));
                    q
                }
                _ => {
                    let mut q = locals.clone();
                    q[0] = LocalHash(rng.next_u64());
                    q
                }
            }
        })
        .collect();
    Preset {
        name: "shared-prefix",
        about: format!(
            "A fleet's shape: {WORKERS} workers all hold the same {PROMPTS} system prompts of {PROMPT_BLOCKS} blocks (the same sequence hashes on every worker, as engines of one model compute them), and {TAILS} private tails of {TAIL_BLOCKS} blocks each under them; {QUERIES} queries (50% a prompt with a held tail, 25% a prompt with an unknown tail, 25% first-block misses)."
        ),
        phases: vec![
            Phase::Write {
                label: "store",
                events: stores,
                bytes_after: true,
            },
            Phase::Query {
                label: "query",
                queries,
            },
        ],
        columns: [
            "store blocks/s",
            "bytes/pair",
            "query p50 us",
            "query p99 us",
            "query p99.9 us",
            "query max us",
        ]
        .map(String::from)
        .to_vec(),
        min_rounds: 1,
    }
}

/// Query cost against depth: 16 workers each hold the same 4 sequences at each depth (stored in
/// events of 256 blocks, each naming its parent); every query is a full hit on all 16.
pub fn depth() -> Preset {
    const WORKERS: u64 = 16;
    const PER_DEPTH: usize = 4;
    const CHUNK: usize = 256;
    const QUERIES: usize = 1_000;
    let mut rng = SplitMix64(4096);
    let mut stores = Vec::new();
    let mut phases = Vec::new();
    let mut next_id = vec![0u64; WORKERS as usize];
    let mut queries_at = Vec::new();
    for depth in DEPTHS {
        let chains: Vec<(Vec<LocalHash>, Vec<SeqHash>)> = (0..PER_DEPTH)
            .map(|_| {
                let locals: Vec<LocalHash> =
                    (0..depth).map(|_| LocalHash(rng.next_u64())).collect();
                let seqs = seq_hashes(&locals);
                (locals, seqs)
            })
            .collect();
        for (locals, seqs) in &chains {
            for w in 0..WORKERS {
                for start in (0..depth).step_by(CHUNK) {
                    let end = (start + CHUNK).min(depth);
                    let parent = start.checked_sub(1).map(|p| seqs[p]);
                    let blocks = (start..end)
                        .map(|i| Block::new(locals[i], seqs[i]))
                        .collect();
                    next_id[w as usize] += 1;
                    stores.push(Event::stored(
                        Worker::new(w, 0),
                        next_id[w as usize],
                        parent,
                        blocks,
                    ));
                }
            }
        }
        let queries: Vec<Vec<LocalHash>> = (0..QUERIES)
            .map(|_| chains[rng.below(PER_DEPTH as u64) as usize].0.clone())
            .collect();
        queries_at.push((depth, queries));
    }
    phases.push(Phase::Write {
        label: "store",
        events: stores,
        bytes_after: true,
    });
    let labels = ["hit@64", "hit@256", "hit@1024", "hit@4096"];
    for ((_, queries), label) in queries_at.into_iter().zip(labels) {
        phases.push(Phase::Query { label, queries });
    }
    let mut columns: Vec<String> = ["store blocks/s", "bytes/pair"].map(String::from).to_vec();
    for label in ["hit@1024", "hit@4096"] {
        for stat in ["p50", "p99", "p99.9", "max"] {
            columns.push(format!("{label} {stat} us"));
        }
    }
    columns.push("ns per block".into());
    Preset {
        name: "depth",
        about: format!(
            "Query cost against depth: {WORKERS} workers hold the same {PER_DEPTH} sequences at each depth of {DEPTHS:?} blocks (stored in events of {CHUNK} blocks naming their parent); {QUERIES} full-hit queries per depth. `ns per block` is (p50 at 4096 - p50 at 1024) / 3072."
        ),
        phases,
        columns,
        min_rounds: 1,
    }
}

pub(super) fn steps_of(ops: &[Op]) -> Vec<(u64, Step)> {
    ops.iter()
        .map(|op| {
            let step = match (op, op.event()) {
                (Op::Match { q, .. }, _) => Step::Query(q.iter().copied().map(LocalHash).collect()),
                (_, Some(event)) => Step::Event(event),
                (_, None) => unreachable!("every op but a match is an event"),
            };
            (op.t(), step)
        })
        .collect()
}

/// A trace replayed as fast as the index goes: the writer threads take events as fast as they
/// can; queries run between them on the replaying thread.
pub fn trace(trace: &[Request], source: &str, cfg: &EngineConfig) -> Preset {
    let workload = engine::generate(trace, cfg, source);
    let steps = steps_of(&workload.ops);
    Preset {
        name: "trace",
        about: format!(
            "{source} through the mock engines ({} workers x {} blocks, block size {}): {} stores, removes and queries replayed in order as fast as possible.",
            cfg.workers,
            cfg.capacity_blocks,
            cfg.block_size,
            steps.len()
        ),
        phases: vec![Phase::Replay {
            label: "replay",
            steps,
            speed: 0.0,
        }],
        columns: [
            "replay ops/s",
            "replay p50 us",
            "replay p99 us",
            "replay p99.9 us",
            "replay max us",
        ]
        .map(String::from)
        .to_vec(),
        // A replay lasts tens of milliseconds and its p99.9 is a round's 12th slowest query:
        // its median settles at 45 rounds (paper §6.19).
        min_rounds: 45,
    }
}

/// The start of the same trace paced at `speed` times its real rate, for `seconds` of wall time:
/// query latency at a realistic load, where caches are cold between queries.
pub fn trace_paced(
    trace: &[Request],
    source: &str,
    cfg: &EngineConfig,
    speed: f64,
    seconds: f64,
) -> Preset {
    let workload = engine::generate(trace, cfg, source);
    let until = (seconds * speed * 1e6) as u64;
    let ops: Vec<Op> = workload
        .ops
        .into_iter()
        .take_while(|op| op.t() <= until)
        .collect();
    let steps = steps_of(&ops);
    Preset {
        name: "trace-paced",
        about: format!(
            "The first {:.0} s of the same trace, paced at {speed}x its real rate ({} steps in about {seconds} s of wall time).",
            seconds * speed,
            steps.len()
        ),
        phases: vec![Phase::Replay {
            label: "paced",
            steps,
            speed,
        }],
        columns: [
            "paced p50 us",
            "paced p99 us",
            "paced p99.9 us",
            "paced max us",
        ]
        .map(String::from)
        .to_vec(),
        min_rounds: 1,
    }
}

/// The trace spread over a fleet of workers, each request sent `duplicate` times with disjoint
/// hash ids: what each additional worker costs.
pub fn fleet(trace: &[Request], source: &str, cfg: &EngineConfig) -> Preset {
    let workload = engine::generate(trace, cfg, source);
    let steps = steps_of(&workload.ops);
    Preset {
        name: "fleet",
        about: format!(
            "{source} over a fleet of {} workers ({} blocks each, block size {}), every request sent {} times with disjoint hash ids: {} steps replayed as fast as possible.",
            cfg.workers,
            cfg.capacity_blocks,
            cfg.block_size,
            cfg.duplicate,
            steps.len()
        ),
        phases: vec![Phase::Replay {
            label: "fleet",
            steps,
            speed: 0.0,
        }],
        columns: [
            "fleet ops/s",
            "fleet p50 us",
            "fleet p99 us",
            "fleet p99.9 us",
            "fleet max us",
        ]
        .map(String::from)
        .to_vec(),
        min_rounds: 1,
    }
}
