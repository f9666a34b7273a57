//! The jump search's levers, each timed on its own (issue 16): how a query's canonical hashes
//! are rolled, how a child is found by key, and how the set of matching workers is narrowed
//! at a node. `cargo bench --bench levers`.
//!
//! Roll:
//! - `roll/fold_mix`: the mix the crate rolled before the polynomial (a folded 64x64->128
//!   multiply of the parent and the local, one dependent step a block), written out here as
//!   the baseline;
//! - `roll/block_by_block`: the polynomial one step a block;
//! - `roll/every_block`: every block's value, four blocks to a dependent step, as the write side
//!   keys a stored chain;
//! - `roll/by_groups`: the polynomial 64 blocks to a dependent step, as a query rolls.
//!
//! Probe (one lookup of a child by key, in random order over 256 parents x 4,096 children of a
//! cache line each, 64 MiB of children: a lookup misses the caches as a query's does; each
//! lookup waits for the last one's result, as a walk's next lookup waits for the node it
//! found):
//! - `probe/papaya`: the concurrent map the tree kept large child sets in before (the entry
//!   behind the bucket's pointer: two dependent misses, then the child);
//! - `probe/child_table`: the tree's table of the child pointers themselves (one miss, then the
//!   child, whose lines are asked for together as soon as the slot names it);
//! - `probe/child_table_overlapped`: the same, with each lookup's slot asked for one lookup
//!   ahead, as a walk asks for the next child's slot when it reaches a node: the slot's miss
//!   overlaps the previous lookup instead of adding to it.
//!
//! Sets (N active workers, words of bits over their slots; up to 64 the cover is a sorted list
//! with its members as words of bits, beyond that a bit and a cutoff per slot; both know which
//! members hold the whole edge):
//! - `sets/keep_all/N`: narrowing them to those holding a node's whole edge, which all do: a
//!   word operation per 64 workers;
//! - `sets/keep_half/N`: the same where half of them hold one block: those are scored one by
//!   one, as the answer needs;
//! - `sets/split/N`: splitting them into those in a node and the others, as a scan-back does
//!   at a probe.
//!
//! Reclaim (a writer thread retires 512 node-sized blocks and ends; the measuring thread's pins
//! then collect them, as a query's pin collects every 128th time; the time is the collecting
//! thread's only):
//! - `reclaim/epoch_frees`: each block a deferred free of crossbeam-epoch's, as the tree
//!   retired before its graveyard: the collecting thread frees the writer's allocations;
//! - `reclaim/graveyard`: the tree's graveyard (`src/layouts/tree/graveyard.rs`): the writer hands
//!   its batch to the epoch as one deferred function, and the collecting thread only moves it
//!   onto a list that writers free.

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main,
};
use flash_indexer::LocalHash;
use flash_indexer::testing::{CanonicalRoll, ChildProbe, CoverSets, Reclaim, SplitMix64};
use std::hint::black_box;
use std::time::Duration;

/// A group of one lever's benches: short warm-up, 30 samples over `measure`.
fn lever_group<'a>(
    c: &'a mut Criterion,
    name: &str,
    measure: Duration,
) -> BenchmarkGroup<'a, WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(measure)
        .sample_size(30);
    group
}

/// The previous canonical step: `fold((parent ^ k0) * (local ^ k1))`.
fn fold_mix(query: &[LocalHash], k0: u64, k1: u64) -> u64 {
    query.iter().fold(k0, |parent, local| {
        let product = u128::from(parent ^ k0) * u128::from(local.0 ^ k1);
        (product as u64) ^ ((product >> 64) as u64)
    })
}

fn roll(c: &mut Criterion) {
    let mut group = lever_group(c, "roll", Duration::from_secs(1));
    let roll = CanonicalRoll::new(1);
    let mut rng = SplitMix64(2);
    let (k0, k1) = (rng.next_u64(), rng.next_u64() | 1);
    for depth in [128usize, 1024, 4096] {
        let query: Vec<LocalHash> = (0..depth).map(|_| LocalHash(rng.next_u64())).collect();
        group.throughput(Throughput::Elements(depth as u64));
        group.bench_with_input(BenchmarkId::new("fold_mix", depth), &query, |b, q| {
            b.iter(|| fold_mix(black_box(q), k0, k1))
        });
        group.bench_with_input(BenchmarkId::new("block_by_block", depth), &query, |b, q| {
            b.iter(|| roll.block_by_block(black_box(q)))
        });
        group.bench_with_input(BenchmarkId::new("every_block", depth), &query, |b, q| {
            b.iter(|| roll.every_block(black_box(q)))
        });
        group.bench_with_input(BenchmarkId::new("by_groups", depth), &query, |b, q| {
            b.iter(|| roll.by_groups(black_box(q)))
        });
    }
    group.finish();
}

fn probe(c: &mut Criterion) {
    let mut group = lever_group(c, "probe", Duration::from_secs(2));
    let probe = ChildProbe::new(256, 4096, 3);
    // Each lookup's index depends on the last one's result (through a zero the compiler cannot
    // see), as a walk's next lookup depends on the node it found: the time is a lookup's
    // latency, not how many independent lookups the CPU overlaps.
    let zero = black_box(0u64);
    let mut i = 0usize;
    let next = |found: u64, i: &mut usize| *i += 1 + (found & zero) as usize;
    group.bench_function("papaya", |b| {
        b.iter(|| {
            let found = probe.in_map(i);
            next(found, &mut i)
        })
    });
    group.bench_function("child_table", |b| {
        b.iter(|| {
            let found = probe.in_table(i);
            next(found, &mut i)
        })
    });
    group.bench_function("child_table_overlapped", |b| {
        b.iter(|| {
            probe.warm(i + 1);
            let found = probe.in_table(i);
            next(found, &mut i)
        })
    });
    group.finish();
}

fn sets(c: &mut Criterion) {
    let mut group = lever_group(c, "sets", Duration::from_secs(1));
    for workers in [64u32, 1024, 4096] {
        group.throughput(Throughput::Elements(u64::from(workers)));
        let all = CoverSets::new(workers, 0);
        let half = CoverSets::new(workers, 2);
        group.bench_function(BenchmarkId::new("keep_all", workers), |b| {
            b.iter(|| black_box(&all).keep())
        });
        group.bench_function(BenchmarkId::new("keep_half", workers), |b| {
            b.iter(|| black_box(&half).keep())
        });
        group.bench_function(BenchmarkId::new("split", workers), |b| {
            b.iter(|| black_box(&half).split())
        });
    }
    group.finish();
}

fn reclaim(c: &mut Criterion) {
    let mut group = lever_group(c, "reclaim", Duration::from_secs(2));
    let lever = Reclaim::new(512);
    for (name, graveyard) in [("epoch_frees", false), ("graveyard", true)] {
        group.bench_function(name, |b| {
            b.iter_custom(|rounds| (0..rounds).map(|_| lever.collect(graveyard)).sum())
        });
    }
    group.finish();
}

criterion_group!(benches, roll, probe, sets, reclaim);
criterion_main!(benches);
