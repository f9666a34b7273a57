//! The workload on which the best public index (Dynamo's kv-router) was measured, replayed on
//! every layout of this build.
//!
//! 64 workers each store 200 sequences of 128 blocks (block size 16). Sequence `s` of every
//! worker starts with the 64-block prefix of group `s % 4` (4 groups, random tokens, shared by
//! all) and ends with 64 blocks unique to that (worker, sequence): 835,584 held (worker, block)
//! pairs. Stores go `for s in 0..200 { for w in 0..64 { store(w, s) } }` as whole 128-block
//! events with no parent, through a 2-thread writer pool, timed until everything is applied.
//! Queries: 50% full hits on a stored sequence, 25% diverging at a random position, 25%
//! first-block misses. Then workers 0..32 remove all their blocks, tail-first, through the pool.
//!
//! Two parts: criterion measures store, query-mix and remove time; then a summary prints, per
//! layout, the medians of 3 runs of store blocks/s, query p50 / p99 (each query timed on its
//! own; the clock read adds ~20 ns), remove blocks/s and bytes per held pair.
//! `NaiveIndexer` is left out: one of its queries rebuilds 835,584 child-list entries.

mod support;

use criterion::Criterion;
use flash_indexer::hash::{local_hashes, seq_hashes};
use flash_indexer::pool::{PoolConfig, WriterPool};
use flash_indexer::testing::IndexFactory;
use flash_indexer::{Block, Event, KvIndex, LocalHash, SeqHash, Worker};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{CountingAlloc, Rng, indexes, live_bytes};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const WORKERS: u64 = 64;
const SEQUENCES: u64 = 200;
const GROUPS: u64 = 4;
const PREFIX: usize = 64;
const BLOCK_SIZE: usize = 16;
const PAIRS: u64 = WORKERS * (GROUPS * PREFIX as u64 + SEQUENCES * PREFIX as u64);
const QUERIES: usize = 20_000;

struct Workload {
    /// Store events in issue order.
    stores: Vec<Event>,
    /// Remove events in issue order (workers 0..32, tail-first).
    removes: Vec<Event>,
    queries: Vec<Vec<LocalHash>>,
    stored_blocks: u64,
    removed_blocks: u64,
}

fn tokens(rng: &mut Rng, blocks: usize) -> Vec<u32> {
    (0..blocks * BLOCK_SIZE)
        .map(|_| rng.next_u64() as u32)
        .collect()
}

fn build() -> Workload {
    let mut rng = Rng(42);
    let prefixes: Vec<Vec<u32>> = (0..GROUPS).map(|_| tokens(&mut rng, PREFIX)).collect();
    // sequences[w][s] = (locals, seqs)
    let mut sequences: Vec<Vec<(Vec<LocalHash>, Vec<SeqHash>)>> = Vec::new();
    for _ in 0..WORKERS {
        let mut of_worker = Vec::new();
        for s in 0..SEQUENCES {
            let mut t = prefixes[(s % GROUPS) as usize].clone();
            t.extend(tokens(&mut rng, PREFIX));
            let locals = local_hashes(&t, BLOCK_SIZE);
            let seqs = seq_hashes(&locals);
            of_worker.push((locals, seqs));
        }
        sequences.push(of_worker);
    }
    let mut stores = Vec::new();
    let mut next_id = vec![0u64; WORKERS as usize];
    for s in 0..SEQUENCES as usize {
        for (w, of_worker) in sequences.iter().enumerate() {
            let (locals, seqs) = &of_worker[s];
            let blocks = locals
                .iter()
                .zip(seqs)
                .map(|(l, q)| Block::new(*l, *q))
                .collect();
            stores.push(Event::stored(
                Worker::new(w as u64, 0),
                next_id[w],
                None,
                blocks,
            ));
            next_id[w] += 1;
        }
    }
    let mut removes = Vec::new();
    let mut removed_blocks = 0;
    for w in 0..(WORKERS / 2) as usize {
        let worker = Worker::new(w as u64, 0);
        // Private suffixes first, newest sequence first, each tail-first; then the 4 prefixes.
        for s in (0..SEQUENCES as usize).rev() {
            let seqs: Vec<SeqHash> = sequences[w][s].1[PREFIX..].iter().rev().copied().collect();
            removed_blocks += seqs.len() as u64;
            removes.push(Event::removed(worker, next_id[w], seqs));
            next_id[w] += 1;
        }
        for g in (0..GROUPS as usize).rev() {
            let seqs: Vec<SeqHash> = sequences[w][g].1[..PREFIX].iter().rev().copied().collect();
            removed_blocks += seqs.len() as u64;
            removes.push(Event::removed(worker, next_id[w], seqs));
            next_id[w] += 1;
        }
    }
    let mut queries = Vec::with_capacity(QUERIES);
    for i in 0..QUERIES {
        let (w, s) = (rng.below(WORKERS) as usize, rng.below(SEQUENCES) as usize);
        let mut q = sequences[w][s].0.clone();
        match i % 4 {
            0 | 1 => {}
            2 => {
                let at = rng.below(q.len() as u64) as usize;
                q[at] = LocalHash(rng.next_u64());
            }
            _ => q[0] = LocalHash(rng.next_u64()),
        }
        queries.push(q);
    }
    let stored_blocks = stores
        .iter()
        .map(|e| match &e.kind {
            flash_indexer::EventKind::Stored { blocks, .. } => blocks.len() as u64,
            _ => 0,
        })
        .sum();
    Workload {
        stores,
        removes,
        queries,
        stored_blocks,
        removed_blocks,
    }
}

/// Applies `events` through a fresh 2-thread pool over `index`; returns the time to flush.
fn through_pool(index: &Arc<dyn KvIndex>, events: &[Event]) -> Duration {
    let pool = WriterPool::new(
        index.clone(),
        PoolConfig {
            threads: 2,
            queue_capacity: 4096,
        },
    );
    let start = Instant::now();
    for e in events {
        pool.submit(e.clone()).expect("writers alive");
    }
    pool.flush();
    let elapsed = start.elapsed();
    assert_eq!(pool.stats().rejected(), 0, "the workload is valid");
    elapsed
}

/// The clone of each event is part of what the caller pays, so it is inside the timed region;
/// it costs about as much as a memcpy of the blocks.
fn stored(make: fn() -> Box<dyn KvIndex>, w: &Workload) -> (Arc<dyn KvIndex>, Duration) {
    let index: Arc<dyn KvIndex> = Arc::from(make());
    let took = through_pool(&index, &w.stores);
    (index, took)
}

fn criterion_part(c: &mut Criterion, w: &Workload) {
    let mut group = c.benchmark_group("dynamo_workload");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8))
        .warm_up_time(Duration::from_secs(1));
    for IndexFactory { name, make, .. } in indexes(false) {
        group.bench_function(format!("store_all/{name}"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| stored(make, w).1).sum())
        });
        let (index, _) = stored(make, w);
        let mut i = 0;
        group.bench_function(format!("query_mix/{name}"), |b| {
            b.iter(|| {
                i = (i + 1) % w.queries.len();
                black_box(index.find_matches(&w.queries[i]))
            })
        });
        group.bench_function(format!("remove_half/{name}"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let (index, _) = stored(make, w);
                        through_pool(&index, &w.removes)
                    })
                    .sum()
            })
        });
    }
    group.finish();
}

/// p50 and p99 of `queries`, each query timed on its own (nanoseconds).
fn query_percentiles(index: &dyn KvIndex, queries: &[Vec<LocalHash>]) -> (f64, f64) {
    let mut lat: Vec<u64> = queries
        .iter()
        .map(|q| {
            let start = Instant::now();
            black_box(index.find_matches(q));
            start.elapsed().as_nanos() as u64
        })
        .collect();
    lat.sort_unstable();
    (lat[lat.len() / 2] as f64, lat[lat.len() * 99 / 100] as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn summary(w: &Workload) {
    println!(
        "\nDynamo workload summary (medians of 3 runs; {PAIRS} held pairs; 2 writer threads; {QUERIES} queries)"
    );
    println!(
        "{:<14} {:>16} {:>12} {:>12} {:>16} {:>15}",
        "layout", "store blocks/s", "query p50", "query p99", "remove blocks/s", "bytes per pair"
    );
    for IndexFactory { name, make, .. } in indexes(false) {
        let (mut store, mut p50, mut p99, mut remove, mut bytes) =
            (vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..3 {
            let before = live_bytes();
            let (index, took) = stored(make, w);
            // Count the live state, not garbage still waiting for an epoch to pass.
            flash_indexer::testing::collect_garbage();
            bytes.push((live_bytes() - before) as f64 / PAIRS as f64);
            store.push(w.stored_blocks as f64 / took.as_secs_f64());
            let (q50, q99) = query_percentiles(&*index, &w.queries);
            p50.push(q50);
            p99.push(q99);
            remove.push(w.removed_blocks as f64 / through_pool(&index, &w.removes).as_secs_f64());
        }
        println!(
            "{:<14} {:>15.2}M {:>9.0} ns {:>9.0} ns {:>15.2}M {:>15.1}",
            name,
            median(store) / 1e6,
            median(p50),
            median(p99),
            median(remove) / 1e6,
            median(bytes)
        );
    }
}

/// Query latency of the positional layout at several jumps on the same data: the measurement
/// behind `DEFAULT_JUMP`.
#[cfg(feature = "positional")]
fn jump_sweep(w: &Workload) {
    use flash_indexer::{Indexer, layouts::PositionalMap};
    println!("\nJump sweep, positional layout (query p50 / p99 of the same {QUERIES} queries)");
    for jump in [4u32, 8, 16, 32, 64, 128] {
        let index: Arc<dyn KvIndex> = Arc::new(Indexer::<PositionalMap>::with_jump(jump));
        through_pool(&index, &w.stores);
        let (mut p50, mut p99) = (vec![], vec![]);
        for _ in 0..3 {
            let (q50, q99) = query_percentiles(&*index, &w.queries);
            p50.push(q50);
            p99.push(q99);
        }
        println!(
            "  jump {jump:>3}: p50 {:>6.0} ns   p99 {:>6.0} ns",
            median(p50),
            median(p99)
        );
    }
}

fn main() {
    let workload = build();
    let mut criterion = Criterion::default().configure_from_args();
    criterion_part(&mut criterion, &workload);
    criterion.final_summary();
    summary(&workload);
    #[cfg(feature = "positional")]
    jump_sweep(&workload);
}
