//! NVIDIA Dynamo's KV-router indexes (`dynamo-kv-router` on crates.io), each in its production
//! wrapper, as comparison subjects. Built only with the `dynamo` feature of flashbench; the
//! flash-indexer library never depends on it.
//!
//! - `dynamo-crtc`: `ThreadPoolIndexer<ConcurrentRadixTreeCompressed>`, Dynamo's default.
//! - `dynamo-positional`: `ThreadPoolIndexer<PositionalIndexer>` with jump 32. It keys blocks by
//!   sequence hashes it computes itself, so it is exact only when the engine's seq hashes are
//!   Dynamo's XXH3 chain; with opaque engine hashes (the trace) it answers wrongly, and the
//!   comparison shows it.
//! - `dynamo-branch-sharded`: `BranchShardedIndexer` over two `ThreadPoolIndexer<CRTC>` shards.
//! - `pooled-<layout>`: each of our layouts inside Dynamo's `ThreadPoolIndexer`, through
//!   `flash-indexer-dynamo`'s `FlashIndexer` (Dynamo's writer threads, queues and scores): what a
//!   Dynamo router sees after swapping its backend for ours, beside CRTC in the same pool.
//!
//! Writes go through `enqueue_event` (the wrappers' `apply_event`). Queries call the backend's
//! `find_matches` on the calling thread, which is what `ThreadPoolIndexer::find_matches` does
//! inline (the branch-sharded wrapper's async `find_matches` is driven by a current-thread Tokio
//! runtime, its only production entry point).
//!
//! [`Subject::barrier`] must include the last apply, not only the last dequeue. In 1.6.1,
//! `ThreadPoolIndexer::flush_and_wait` sends each writer thread a `WorkerTask::Flush` sentinel,
//! which a writer thread answers only after applying everything queued before it, in order; the
//! wrappers' `flush()` calls it (the branch-sharded one on every shard). The comparison's exact
//! answers right after each barrier confirm it.

use super::presets::Step;
use super::subject::{Scores, Subject, SubjectFactory, native_replay};
use dynamo_kv_router::indexer::concurrent_radix_tree_compressed::ConcurrentRadixTreeCompressed;
use dynamo_kv_router::indexer::positional::PositionalIndexer;
use dynamo_kv_router::indexer::{
    BranchShardedIndexer, KvIndexerInterface, SyncIndexer, ThreadPoolIndexer,
};
use dynamo_kv_router::protocols::{LocalBlockHash, OverlapScores};
use flash_indexer::{Event, LocalHash, Worker};
use flash_indexer_dynamo::FlashIndexer;
use hdrhistogram::Histogram;
use std::time::Instant;
use tokio::runtime::Runtime;

/// Block size the wrappers are told (they only use it to hash tokens, which we never send).
const BLOCK_SIZE: u32 = 16;
/// `PositionalIndexer`'s jump, as Dynamo configures it by default.
const POSITIONAL_JUMP: usize = 32;
/// The branch-sharded wrapper's routing depth (blocks) above its shards.
const BRANCH_ROUTING_DEPTH: usize = 2;

/// Our event in Dynamo's types: same worker, ids, hashes and parent.
pub use flash_indexer_dynamo::convert::router_event;

fn to_locals(query: &[LocalHash]) -> Vec<LocalBlockHash> {
    query.iter().map(|l| LocalBlockHash(l.0)).collect()
}

fn to_scores(scores: &OverlapScores) -> Scores {
    let mut out: Scores = scores
        .scores
        .iter()
        .filter(|(_, depth)| **depth > 0)
        .map(|(w, depth)| (Worker::new(w.worker_id, w.dp_rank), *depth))
        .collect();
    out.sort_unstable();
    out
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread Tokio runtime")
}

/// A `ThreadPoolIndexer` over one of Dynamo's backends.
struct Pooled<T: SyncIndexer> {
    indexer: ThreadPoolIndexer<T>,
    rt: Runtime,
}

impl<T: SyncIndexer> Subject for Pooled<T> {
    fn submit(&self, event: &Event) {
        self.indexer
            .enqueue_event(router_event(event))
            .expect("Dynamo's writer threads outlive the comparison");
    }

    fn barrier(&self) {
        self.rt
            .block_on(self.indexer.flush_and_wait())
            .expect("Dynamo's writer threads answer the flush sentinel");
    }

    fn query(&self, query: &[LocalHash]) -> (u64, Scores) {
        let locals = to_locals(query);
        let t0 = Instant::now();
        let scores = self.indexer.backend().find_matches(&locals, false);
        let ns = t0.elapsed().as_nanos() as u64;
        (ns, to_scores(&scores))
    }

    fn rejected(&self) -> Option<u64> {
        None
    }

    fn replay_native(&self, steps: &[(u64, Step)]) -> (f64, Histogram<u64>) {
        native_replay(
            steps,
            router_event,
            to_locals,
            |e| {
                self.indexer
                    .enqueue_event(e)
                    .expect("Dynamo's writer threads outlive the comparison")
            },
            |q| self.indexer.backend().find_matches(q, false),
            || self.barrier(),
        )
    }
}

impl<T: SyncIndexer> Drop for Pooled<T> {
    fn drop(&mut self) {
        KvIndexerInterface::shutdown(&self.indexer);
    }
}

/// `BranchShardedIndexer` over CRTC shards of one writer thread each.
struct BranchSharded {
    indexer: BranchShardedIndexer<ThreadPoolIndexer<ConcurrentRadixTreeCompressed>>,
    rt: Runtime,
}

impl Subject for BranchSharded {
    fn submit(&self, event: &Event) {
        // Routing happens in the call; the shard writes are enqueued before it returns.
        self.rt.block_on(KvIndexerInterface::apply_event(
            &self.indexer,
            router_event(event),
        ));
    }

    fn barrier(&self) {
        // Every shard's `flush` is its `flush_and_wait`: a sentinel through each writer thread.
        self.rt.block_on(KvIndexerInterface::flush(&self.indexer));
    }

    fn query(&self, query: &[LocalHash]) -> (u64, Scores) {
        let locals = to_locals(query);
        let t0 = Instant::now();
        let scores = self
            .rt
            .block_on(KvIndexerInterface::find_matches(&self.indexer, locals))
            .expect("an in-process branch-sharded query");
        let ns = t0.elapsed().as_nanos() as u64;
        (ns, to_scores(&scores))
    }

    fn rejected(&self) -> Option<u64> {
        None
    }

    fn replay_native(&self, steps: &[(u64, Step)]) -> (f64, Histogram<u64>) {
        native_replay(
            steps,
            router_event,
            to_locals,
            |e| {
                self.rt
                    .block_on(KvIndexerInterface::apply_event(&self.indexer, e))
            },
            // Its only entry point takes the query by value: the copy is part of the call.
            |q| {
                self.rt
                    .block_on(KvIndexerInterface::find_matches(&self.indexer, q.clone()))
                    .expect("an in-process branch-sharded query")
            },
            || self.barrier(),
        )
    }
}

impl Drop for BranchSharded {
    fn drop(&mut self) {
        KvIndexerInterface::shutdown(&self.indexer);
    }
}

/// Dynamo's indexes, each with `threads` writer threads in all.
pub fn subjects() -> Vec<crate::compare::subject::SubjectFactory> {
    vec![
        SubjectFactory {
            name: super::subject::BASELINE,
            ours: false,
            make: Box::new(|threads| {
                Box::new(Pooled {
                    indexer: ThreadPoolIndexer::new(
                        ConcurrentRadixTreeCompressed::new(),
                        threads,
                        BLOCK_SIZE,
                    ),
                    rt: runtime(),
                })
            }),
        },
        SubjectFactory {
            name: "dynamo-positional",
            ours: false,
            make: Box::new(|threads| {
                Box::new(Pooled {
                    indexer: ThreadPoolIndexer::new(
                        PositionalIndexer::new(POSITIONAL_JUMP),
                        threads,
                        BLOCK_SIZE,
                    ),
                    rt: runtime(),
                })
            }),
        },
        SubjectFactory {
            name: "dynamo-branch-sharded",
            ours: false,
            make: Box::new(|threads| {
                let shards = (0..threads.max(1))
                    .map(|_| {
                        ThreadPoolIndexer::new(ConcurrentRadixTreeCompressed::new(), 1, BLOCK_SIZE)
                    })
                    .collect();
                Box::new(BranchSharded {
                    indexer: BranchShardedIndexer::new(shards, BRANCH_ROUTING_DEPTH, BLOCK_SIZE),
                    rt: runtime(),
                })
            }),
        },
    ]
    .into_iter()
    .chain(pooled())
    .collect()
}

/// Each of our layouts inside `ThreadPoolIndexer`, as a Dynamo router runs it after the swap.
fn pooled() -> Vec<SubjectFactory> {
    flash_indexer::testing::enabled_layouts()
        .into_iter()
        .filter(|f| f.primary)
        .map(|layout| {
            let make = layout.make;
            SubjectFactory {
                // Leaked once per layout and run: a few bytes, for a `&'static` row name.
                name: Box::leak(format!("pooled-{}", layout.name).into_boxed_str()),
                ours: true,
                make: Box::new(move |threads| {
                    Box::new(Pooled {
                        indexer: ThreadPoolIndexer::new(
                            FlashIndexer::from_index(make()),
                            threads,
                            BLOCK_SIZE,
                        ),
                        rt: runtime(),
                    })
                }),
            }
        })
        .collect()
}

/// Dynamo's hashing is ours: the same local and sequence hashes for the same tokens (the
/// comparison feeds both the same events; a mismatch would make the comparison meaningless).
pub fn check_hashes_coincide() -> Result<(), String> {
    use dynamo_kv_router::protocols::{
        BlockHashOptions, compute_block_hash_for_seq, compute_seq_hash_for_block,
    };
    let mut rng = flash_indexer::testing::SplitMix64(7);
    for (len, block_size) in [(48usize, 16usize), (1000, 16), (4096, 64), (5, 16)] {
        let tokens: Vec<u32> = (0..len).map(|_| rng.next_u64() as u32).collect();
        let ours = flash_indexer::hash::local_hashes(&tokens, block_size);
        let theirs =
            compute_block_hash_for_seq(&tokens, block_size as u32, BlockHashOptions::default());
        if ours.iter().map(|l| l.0).ne(theirs.iter().map(|l| l.0)) {
            return Err(format!(
                "local hashes differ from Dynamo's ({len} tokens, block size {block_size})"
            ));
        }
        let our_seqs = flash_indexer::hash::seq_hashes(&ours);
        let their_seqs = compute_seq_hash_for_block(&theirs);
        if our_seqs.iter().map(|s| s.0).ne(their_seqs.iter().copied()) {
            return Err(format!(
                "sequence hashes differ from Dynamo's ({len} tokens, block size {block_size})"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::compare::subject::{BASELINE, ours};
    use flash_indexer::{Block, SeqHash};

    #[test]
    fn hashes_coincide_with_dynamo() {
        check_hashes_coincide().unwrap();
    }

    fn subject(name: &str) -> Box<dyn Subject> {
        let all = subjects();
        let factory = all
            .iter()
            .find(|s| s.name == name)
            .expect("a Dynamo subject");
        (factory.make)(2)
    }

    /// A chain of `len` blocks with Dynamo's own hashes (`opaque: false`) or engine hashes it
    /// cannot recompute.
    fn chain(len: u64, opaque: bool) -> (Vec<LocalHash>, Vec<Block>) {
        let locals: Vec<LocalHash> = (0..len).map(|i| LocalHash(1000 + i)).collect();
        let seqs = flash_indexer::hash::seq_hashes(&locals);
        let blocks = locals
            .iter()
            .zip(seqs)
            .map(|(l, s)| Block::new(*l, if opaque { SeqHash(s.0 ^ 0xabcd) } else { s }))
            .collect();
        (locals, blocks)
    }

    fn depth(s: &dyn Subject, q: &[LocalHash]) -> u32 {
        s.query(q).1.first().map_or(0, |(_, d)| *d)
    }

    /// The contract's re-store rule, where Dynamo's default and ours part ways: a removed
    /// mid-chain block stored again revives its held descendants at once. CRTC scrubs the worker's
    /// coverage past the hole on removal, so it under-counts after the re-store.
    #[test]
    fn a_re_store_revives_descendants_in_ours_not_in_crtc() {
        let w = Worker::new(1, 0);
        let (locals, blocks) = chain(8, false);
        let events = [
            Event::stored(w, 1, None, blocks.clone()),
            Event::removed(w, 2, vec![blocks[3].seq]),
            Event::stored(w, 3, Some(blocks[2].seq), vec![blocks[3]]),
        ];
        let mut subjects: Vec<(&str, Box<dyn Subject>)> =
            ours().into_iter().map(|f| (f.name, (f.make)(2))).collect();
        subjects.push((BASELINE, subject(BASELINE)));
        for (name, s) in &subjects {
            s.submit(&events[0]);
            s.submit(&events[1]);
            s.barrier();
            assert_eq!(depth(&**s, &locals), 3, "{name}: the hole stops the chain");
            s.submit(&events[2]);
            s.barrier();
            let want = if *name == BASELINE { 4 } else { 8 };
            assert_eq!(depth(&**s, &locals), want, "{name} after the re-store");
        }
    }

    #[test]
    fn the_outsiders_replay_drives_every_dynamo_subject() {
        for factory in subjects() {
            crate::compare::subject::tests::check_native_replay(&*(factory.make)(2));
        }
    }

    /// Dynamo's `PositionalIndexer` recomputes seq hashes with its own hasher, so engine hashes
    /// it cannot recompute (vLLM's SHA-256, SGLang's) break it; every layout of ours takes them.
    #[test]
    fn opaque_engine_hashes_work_in_ours_not_in_dynamo_positional() {
        let w = Worker::new(1, 0);
        for opaque in [false, true] {
            let (locals, blocks) = chain(64, opaque);
            let event = Event::stored(w, 1, None, blocks);
            let positional = subject("dynamo-positional");
            positional.submit(&event);
            positional.barrier();
            let want = if opaque { 0..64 } else { 64..65 };
            assert!(
                want.contains(&depth(&*positional, &locals)),
                "dynamo-positional, opaque {opaque}"
            );
            for f in ours() {
                let s = (f.make)(2);
                s.submit(&event);
                s.barrier();
                assert_eq!(depth(&*s, &locals), 64, "{}, opaque {opaque}", f.name);
            }
        }
    }
}
