//! Microbenchmark: a hybrid model's `find_matches` beside the same fleet with one group, on
//! every enabled layout.
//!
//! Model: full attention and a sliding window of 2 blocks (gpt-oss-like), blocks of 16 tokens.
//! Worker `w` of `W` holds the first `depth * (w + 1) / W` blocks of one shared chain, and its
//! window group holds the last 2 of them (what is left after a store once vLLM evicts the
//! blocks that slid out of the window): every worker has a depth of its own. The query is the
//! whole chain.

mod support;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use flash_indexer::hybrid::{GroupKind, GroupSpec, HybridIndex, HybridIndexer, ModelGroups};
use flash_indexer::{Block, Event, KvIndex, LocalHash, SeqHash, Worker};
use std::hint::black_box;
use std::time::Duration;
use support::{Rng, indexes};

fn chain(depth: u64) -> Vec<LocalHash> {
    let mut rng = Rng(depth);
    (0..depth).map(|_| LocalHash(rng.next_u64())).collect()
}

fn model(groups: usize) -> ModelGroups {
    let mut specs = vec![GroupSpec::new(GroupKind::FullAttention, 16)];
    if groups == 2 {
        specs.push(GroupSpec::new(GroupKind::SlidingWindow { window: 32 }, 16));
    }
    ModelGroups::new(specs).expect("a valid model")
}

fn fill(index: &dyn HybridIndex, locals: &[LocalHash], workers: u64) {
    let depth = locals.len() as u64;
    for w in 0..workers {
        let held = (depth * (w + 1) / workers).max(1) as usize;
        let worker = Worker::new(w, 0);
        let blocks: Vec<Block> = (locals[..held].iter().zip(0u64..))
            .map(|(&l, i)| Block::new(l, SeqHash(((w + 1) << 40) | i)))
            .collect();
        let window = blocks[held.saturating_sub(2)..].to_vec();
        let mut events = vec![(0, Event::stored(worker, 0, None, blocks.clone()))];
        if index.model().len() == 2 {
            let parent = (held > 2).then(|| blocks[held - 3].seq);
            events.push((1, Event::stored(worker, 1, parent, window)));
        }
        for result in index.apply_batch(&events) {
            result.expect("bench data is valid");
        }
    }
}

fn hybrid_query(c: &mut Criterion) {
    let mut group = c.benchmark_group("hybrid_query");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    for depth in [128u64, 1024] {
        let locals = chain(depth);
        for workers in [4u64, 16, 64] {
            for factory in indexes(false) {
                for groups in [1, 2] {
                    let layout: Box<dyn KvIndex> = (factory.make)();
                    let index = HybridIndexer::with_layout(model(groups), layout);
                    fill(&index, &locals, workers);
                    let id = BenchmarkId::new(
                        format!("{}/groups={groups}", factory.name),
                        format!("depth={depth}/workers={workers}"),
                    );
                    group.bench_with_input(id, &locals, |b, q| {
                        b.iter(|| black_box(index.find_matches(black_box(q))))
                    });
                }
            }
        }
    }
    group.finish();
}

criterion_group!(benches, hybrid_query);
criterion_main!(benches);
