//! What single events cost in the shapes that make naive bookkeeping blow up, per layout:
//!
//! - `wide_fanout`: one root block with 200,000 held children (one worker); an iteration
//!   removes one child and stores it again.
//! - `hole_at_root`: one worker holds a 200,000-block chain; an iteration removes the root
//!   block (a hole that makes the whole chain unreachable) and stores it again.
//! - `remove_worker`: 100,000 workers hold one block each; the measured part removes them one by
//!   one with `remove_worker` (reported per removal).
//! - `shared_prefix`: `N` workers hold the same 16-block prefix (a system prompt); an iteration
//!   stores it for one more worker and removes it again (per-store cost as `N` grows).
//!
//! `cargo bench --bench event_shapes`; every figure is per event.

mod support;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use flash_indexer::{Block, Event, KvIndex, LocalHash, SeqHash, Worker};
use std::time::{Duration, Instant};
use support::indexes;

const FANOUT: u64 = 200_000;
const CHAIN: u64 = 200_000;
const WORKERS: u64 = 100_000;
const PREFIX: u64 = 16;

fn block(i: u64) -> Block {
    Block::new(LocalHash(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)), SeqHash(i))
}

fn apply(index: &dyn KvIndex, event: Event) {
    index.apply(&event).expect("bench events are valid");
}

fn wide_fanout(c: &mut Criterion) {
    let mut group = c.benchmark_group("wide_fanout");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(2));
    let w = Worker::new(0, 0);
    for factory in indexes(false) {
        let index = (factory.make)();
        apply(&*index, Event::stored(w, 0, None, vec![block(0)]));
        for i in 1..=FANOUT {
            apply(
                &*index,
                Event::stored(w, 0, Some(SeqHash(0)), vec![block(i)]),
            );
        }
        let mut next = 0;
        group.bench_function(
            BenchmarkId::new("remove_restore_child", factory.name),
            |b| {
                b.iter(|| {
                    next = next % FANOUT + 1;
                    apply(&*index, Event::removed(w, 0, vec![SeqHash(next)]));
                    apply(
                        &*index,
                        Event::stored(w, 0, Some(SeqHash(0)), vec![block(next)]),
                    );
                });
            },
        );
    }
    group.finish();
}

fn hole_at_root(c: &mut Criterion) {
    let mut group = c.benchmark_group("hole_at_root");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(2));
    let w = Worker::new(0, 0);
    for factory in indexes(false) {
        let index = (factory.make)();
        apply(
            &*index,
            Event::stored(w, 0, None, (0..CHAIN).map(block).collect()),
        );
        group.bench_function(BenchmarkId::new("remove_restore_root", factory.name), |b| {
            b.iter(|| {
                apply(&*index, Event::removed(w, 0, vec![SeqHash(0)]));
                apply(&*index, Event::stored(w, 0, None, vec![block(0)]));
            });
        });
    }
    group.finish();
}

fn remove_worker(c: &mut Criterion) {
    let mut group = c.benchmark_group("remove_worker");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Elements(WORKERS));
    for factory in indexes(false) {
        group.bench_function(BenchmarkId::new("each_of_100000", factory.name), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let index = (factory.make)();
                    for id in 0..WORKERS {
                        let w = Worker::new(id, 0);
                        apply(&*index, Event::stored(w, 0, None, vec![block(id)]));
                    }
                    let start = Instant::now();
                    for id in 0..WORKERS {
                        index.remove_worker(id);
                    }
                    total += start.elapsed();
                }
                total
            });
        });
    }
    group.finish();
}

fn shared_prefix(c: &mut Criterion) {
    let mut group = c.benchmark_group("shared_prefix");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(2));
    let prefix: Vec<Block> = (0..PREFIX).map(block).collect();
    for workers in [1_000u64, 10_000, 100_000] {
        for factory in indexes(false) {
            let index = (factory.make)();
            for id in 0..workers {
                apply(
                    &*index,
                    Event::stored(Worker::new(id, 0), 0, None, prefix.clone()),
                );
            }
            let extra = Worker::new(workers, 0);
            let seqs: Vec<SeqHash> = prefix.iter().map(|b| b.seq).collect();
            let id = BenchmarkId::new(factory.name, workers);
            group.bench_function(id, |b| {
                b.iter(|| {
                    apply(&*index, Event::stored(extra, 0, None, prefix.clone()));
                    apply(&*index, Event::removed(extra, 0, seqs.clone()));
                });
            });
        }
    }
    group.finish();
}

criterion_group!(
    benches,
    wide_fanout,
    hole_at_root,
    remove_worker,
    shared_prefix
);
criterion_main!(benches);
