//! The trait every index implements (see [the contract](crate::docs::contract)).

use crate::error::EventError;
use crate::scores::OverlapScores;
use crate::types::{Event, EventView, LocalHash, SeqHash, Worker};

/// A global index of which worker holds which KV blocks.
///
/// Every implementation gives exactly the answers of [`NaiveIndexer`](crate::NaiveIndexer), the
/// literal translation of the contract. The trait is object-safe.
///
/// Concurrency: `apply` may be called from many threads at once. Events of different workers may
/// be applied concurrently and all take effect; events of one worker take effect in call order
/// when the calls are sequential, and concurrent calls for one worker leave the index in some
/// serial order. `find_matches` never blocks on a writer, and never reports a depth larger than
/// the largest depth a worker had at some instant during the query.
pub trait KvIndex: Send + Sync {
    /// Applies one event. Nothing changes on `Err`, except for
    /// [`EventError::UnknownBlocks`], a warning after the held blocks were removed.
    fn apply(&self, event: &Event) -> Result<(), EventError>;

    /// Applies an event whose block list is borrowed, exactly as [`apply`](Self::apply) applies
    /// the same event owned. The default copies it into an [`Event`]; this crate's indexes read
    /// it in place (the [`WriterPool`](crate::pool::WriterPool) applies the copies of
    /// [`submit_copy`](crate::pool::WriterPool::submit_copy) from its own buffers).
    fn apply_view(&self, event: EventView<'_>) -> Result<(), EventError> {
        self.apply(&event.to_event())
    }

    /// How deep each worker matches the chain of local hashes `query`, from its first block.
    fn find_matches(&self, query: &[LocalHash]) -> OverlapScores;

    /// Drops every worker with server id `id`, all dp ranks.
    fn remove_worker(&self, id: u64);

    /// Drops one worker (that id and that dp rank only).
    fn remove_worker_dp_rank(&self, worker: Worker);

    /// Blocks `worker` holds, reachable or not (the router's tie-breaker).
    fn block_count(&self, worker: Worker) -> usize;

    /// Whether `worker` holds the block `seq`, reachable or not (Dynamo's
    /// `ContainsWorkerBlock`).
    ///
    /// Every index of this crate answers from its own per-worker state, without a scan. The
    /// default, for indexes outside the crate, scans [`dump`](Self::dump), which may leave out
    /// held blocks that are unreachable: override it where that matters.
    fn holds(&self, worker: Worker, seq: SeqHash) -> bool {
        self.dump().iter().any(|event| {
            event.worker == worker
                && matches!(&event.kind, crate::EventKind::Stored { blocks, .. }
                    if blocks.iter().any(|b| b.seq == seq))
        })
    }

    /// Every worker that holds a block, with [`block_count`](Self::block_count) blocks, in no
    /// particular order.
    ///
    /// Every index of this crate answers from its table of workers. The default, for indexes
    /// outside the crate, counts the blocks of [`dump`](Self::dump), which may leave out held
    /// blocks that are unreachable: override it where that matters.
    fn block_counts(&self) -> Vec<(Worker, usize)> {
        let mut counts: std::collections::BTreeMap<Worker, usize> = Default::default();
        for event in self.dump() {
            if let crate::EventKind::Stored { blocks, .. } = &event.kind {
                *counts.entry(event.worker).or_default() += blocks.len();
            }
        }
        counts.into_iter().collect()
    }

    /// Events that, applied in order to an empty index, give identical `find_matches` results
    /// for every query. Held-but-unreachable blocks may be left out.
    fn dump(&self) -> Vec<Event>;

    /// Frees what this thread retired and still batches, once no reader can see it, instead of
    /// when the batch fills up. The map layouts batch 1,024 retired entries per writing thread
    /// (and the tables a resize replaced), so a writer that goes quiet can call this to give
    /// them back; [`WriterPool::flush`](crate::pool::WriterPool::flush) does it on every writer.
    /// Answers never change. Does nothing where nothing is batched (the default).
    fn flush_retired(&self) {}
}

macro_rules! forward_kv_index {
    ($($pointer:ident),*) => {$(
        /// Forwards to the pointee, so that boxed and shared indexes plug in anywhere.
        impl<T: KvIndex + ?Sized> KvIndex for $pointer<T> {
            fn apply(&self, event: &Event) -> Result<(), EventError> {
                (**self).apply(event)
            }
            fn apply_view(&self, event: EventView<'_>) -> Result<(), EventError> {
                (**self).apply_view(event)
            }
            fn find_matches(&self, query: &[LocalHash]) -> OverlapScores {
                (**self).find_matches(query)
            }
            fn remove_worker(&self, id: u64) {
                (**self).remove_worker(id)
            }
            fn remove_worker_dp_rank(&self, worker: Worker) {
                (**self).remove_worker_dp_rank(worker)
            }
            fn block_count(&self, worker: Worker) -> usize {
                (**self).block_count(worker)
            }
            fn holds(&self, worker: Worker, seq: SeqHash) -> bool {
                (**self).holds(worker, seq)
            }
            fn block_counts(&self) -> Vec<(Worker, usize)> {
                (**self).block_counts()
            }
            fn dump(&self) -> Vec<Event> {
                (**self).dump()
            }
            fn flush_retired(&self) {
                (**self).flush_retired()
            }
        }
    )*};
}

use std::sync::Arc; // sync-shim: KvIndex for the std Arc users hold
forward_kv_index!(Box, Arc);
