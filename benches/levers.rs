//! The jump search's levers, each timed on its own (issue 16): how a query's canonical hashes
//! are rolled. `cargo bench --bench levers`.
//!
//! - `roll/fold_mix`: the mix the crate rolled before the polynomial (a folded 64x64->128
//!   multiply of the parent and the local, one dependent step a block), written out here as
//!   the baseline;
//! - `roll/block_by_block`: the polynomial one step a block;
//! - `roll/every_block`: every block's value, four blocks to a dependent step, as the write side
//!   keys a stored chain;
//! - `roll/by_groups`: the polynomial 64 blocks to a dependent step, as a query rolls.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use flash_indexer::LocalHash;
use flash_indexer::testing::{CanonicalRoll, SplitMix64};
use std::hint::black_box;
use std::time::Duration;

/// The previous canonical step: `fold((parent ^ k0) * (local ^ k1))`.
fn fold_mix(query: &[LocalHash], k0: u64, k1: u64) -> u64 {
    query.iter().fold(k0, |parent, local| {
        let product = u128::from(parent ^ k0) * u128::from(local.0 ^ k1);
        (product as u64) ^ ((product >> 64) as u64)
    })
}

fn roll(c: &mut Criterion) {
    let mut group = c.benchmark_group("roll");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(30);
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

criterion_group!(benches, roll);
criterion_main!(benches);
