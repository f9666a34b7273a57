//! Hashing a request: plain tokens against the same tokens keyed by two images (vLLM's extra
//! keys), and hashed over one lookahead token per block (an EAGLE drafter's engine), 1,024 tokens
//! in blocks of 16. Plain tokens take the path they always took; a keyed request pays for keying
//! its blocks.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flash_indexer::hash::{self, Features, MmItem};
use std::hint::black_box;

const TOKENS: usize = 1024;
const BLOCK_SIZE: usize = 16;

fn hashing(c: &mut Criterion) {
    let tokens: Vec<u32> = (0..TOKENS as u32)
        .map(|t| t.wrapping_mul(2_654_435_761))
        .collect();
    // Two images of 256 placeholder tokens each: 32 of the 64 blocks carry a key.
    let images = [
        MmItem {
            identifier: "0f3a5c7e9b1d2f4a6c8e0b2d4f6a8c0e1f3a5c7e9b1d2f4a6c8e0b2d4f6a8c0e",
            offset: 100,
            length: 256,
        },
        MmItem {
            identifier: "9b1d2f4a6c8e0b2d4f6a8c0e1f3a5c7e9b1d2f4a6c8e0b2d4f6a8c0e0f3a5c7e",
            offset: 600,
            length: 256,
        },
    ];
    let mut group = c.benchmark_group("hash_1024_tokens");
    group.throughput(Throughput::Elements(TOKENS as u64));
    group.bench_function("plain", |b| {
        b.iter(|| hash::local_hashes(black_box(&tokens), BLOCK_SIZE))
    });
    group.bench_function("features_none", |b| {
        let features = Features::default();
        b.iter(|| hash::local_hashes_with_features(black_box(&tokens), BLOCK_SIZE, &features))
    });
    group.bench_function("two_images", |b| {
        let features = Features {
            mm: &images,
            ..Features::default()
        };
        b.iter(|| hash::local_hashes_with_features(black_box(&tokens), BLOCK_SIZE, &features))
    });
    group.bench_function("two_images_and_salt", |b| {
        let features = Features {
            mm: &images,
            cache_salt: Some("tenant-a"),
            ..Features::default()
        };
        b.iter(|| hash::local_hashes_with_features(black_box(&tokens), BLOCK_SIZE, &features))
    });
    group.bench_function("lookahead_1", |b| {
        let features = Features {
            lookahead: 1,
            ..Features::default()
        };
        b.iter(|| hash::local_hashes_with_features(black_box(&tokens), BLOCK_SIZE, &features))
    });
    group.finish();
}

criterion_group!(benches, hashing);
criterion_main!(benches);
