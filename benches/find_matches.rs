//! Microbenchmarks: `find_matches` at depths 16 / 128 / 1024 / 8192 and 4 / 64 / 512 workers
//! (full hit, divergence mid-way, first-block miss), and store / remove cost per block. Every
//! enabled layout and `NaiveIndexer` side by side in one run (the reference only where a run
//! finishes in reasonable time: it rebuilds every worker's child lists on each query).
//!
//! Data: worker `w` of `W` holds the first `depth * (w + 1) / W` blocks of one shared chain
//! under its own opaque seq hashes, so drain points are spread over the whole depth and the
//! binary scan-back is exercised.

mod support;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use flash_indexer::{Block, Event, KvIndex, LocalHash, SeqHash, Worker};
use std::hint::black_box;
use std::time::Duration;
use support::{Rng, indexes};

fn chain(depth: u64) -> Vec<LocalHash> {
    let mut rng = Rng(depth);
    (0..depth).map(|_| LocalHash(rng.next_u64())).collect()
}

fn blocks(locals: &[LocalHash], salt: u64) -> Vec<Block> {
    locals
        .iter()
        .enumerate()
        .map(|(i, l)| Block::new(*l, SeqHash((salt << 40) ^ i as u64)))
        .collect()
}

fn fill(index: &dyn KvIndex, locals: &[LocalHash], workers: u64) {
    let depth = locals.len() as u64;
    for w in 0..workers {
        let held = (depth * (w + 1) / workers).max(1) as usize;
        let event = Event::stored(Worker::new(w, 0), 0, None, blocks(&locals[..held], w + 1));
        index.apply(&event).expect("bench data is valid");
    }
}

fn find_matches(c: &mut Criterion) {
    let mut group = c.benchmark_group("find_matches");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    for depth in [16u64, 128, 1024, 8192] {
        let locals = chain(depth);
        let mut diverging = locals.clone();
        diverging[depth as usize / 2 + 1] = LocalHash(1);
        let mut missing = locals.clone();
        missing[0] = LocalHash(2);
        for workers in [4u64, 64, 512] {
            for factory in indexes(depth * workers <= 128 * 64) {
                let (name, index) = (factory.name, (factory.make)());
                fill(&*index, &locals, workers);
                for (case, query) in [
                    ("full_hit", &locals),
                    ("diverge_mid", &diverging),
                    ("first_miss", &missing),
                ] {
                    let id = BenchmarkId::new(
                        format!("{case}/{name}"),
                        format!("depth={depth}/workers={workers}"),
                    );
                    group.bench_with_input(id, query, |b, q| {
                        b.iter(|| black_box(index.find_matches(black_box(q))))
                    });
                }
            }
        }
    }
    group.finish();
}

fn store_and_remove(c: &mut Criterion) {
    const BLOCKS: u64 = 128;
    let locals = chain(BLOCKS);
    let mut group = c.benchmark_group("per_block");
    group
        .throughput(Throughput::Elements(BLOCKS))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    for factory in indexes(true) {
        let (name, make) = (factory.name, factory.make);
        // Each iteration stores a 128-block chain for one of 64 extra workers (cleared first,
        // untimed) into an index that holds 64 workers' chains: shared prefix entries exist,
        // like in a fleet, and their sets stay at 64-128 workers however long criterion runs.
        // One setup per iteration: within a batch, a recurring worker would store a no-op.
        let index = make();
        fill(&*index, &locals, 64);
        let mut next = 0u64;
        group.bench_function(BenchmarkId::new("store", name), |b| {
            b.iter_batched(
                || {
                    next += 1;
                    let w = Worker::new(1_000 + next % 64, 0);
                    index.remove_worker(w.id);
                    Event::stored(w, 0, None, blocks(&locals, w.id))
                },
                |event| index.apply(&event).expect("valid"),
                BatchSize::PerIteration,
            )
        });
        let mut next = 1_000_000u64;
        group.bench_function(BenchmarkId::new("remove_tail_first", name), |b| {
            b.iter_batched(
                || {
                    next += 1;
                    let w = Worker::new(next, 0);
                    index
                        .apply(&Event::stored(w, 0, None, blocks(&locals, next)))
                        .expect("valid");
                    let seqs: Vec<SeqHash> =
                        blocks(&locals, next).iter().rev().map(|b| b.seq).collect();
                    Event::removed(w, 1, seqs)
                },
                |event| index.apply(&event).expect("held"),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, find_matches, store_and_remove);
criterion_main!(benches);
