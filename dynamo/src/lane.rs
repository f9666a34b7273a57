//! [`SyncIndexer`] for [`FlashIndexer`]: the loop each of `ThreadPoolIndexer`'s writer threads
//! runs, and the queries it runs inline on the caller's thread.
//!
//! The index is shared by every lane (it is concurrent), so lanes keep only what Dynamo asks of
//! them per lane: which workers' events they applied, to answer `Stats` for those workers only
//! (the pool adds the lanes' answers up, and routes each worker's events to one lane).

use super::FlashIndexer;
use super::convert::{
    dynamo_worker, event_error, flash_event, flash_event_in, flash_worker, into_buffers,
    overlap_scores,
};
use dynamo_kv_router::indexer::{
    EventKind, EventWarningKind, KvIndexerMetrics, PreBoundEventCounters, SyncIndexer,
    WorkerLookupStats, WorkerTask,
};
use dynamo_kv_router::protocols::{
    KvCacheEventError, LocalBlockHash, OverlapScores, RouterEvent, WorkerWithDpRank,
};
use flash_indexer::{Block, EventKind as FlashEventKind, KvIndex, LocalHash, SeqHash};
use std::collections::HashSet;
use std::sync::Arc;

impl<I: KvIndex + 'static> SyncIndexer for FlashIndexer<I> {
    fn worker(
        &self,
        event_receiver: flume::Receiver<WorkerTask>,
        metrics: Option<Arc<KvIndexerMetrics>>,
    ) -> anyhow::Result<()> {
        let mut lane = Lane {
            index: &self.index,
            counters: metrics.as_ref().map(|m| m.prebind()),
            workers: HashSet::new(),
            blocks: Vec::new(),
            seqs: Vec::new(),
        };
        while let Ok(task) = event_receiver.recv() {
            if !lane.run(task) {
                break;
            }
        }
        tracing::debug!("flash-indexer lane shutting down");
        Ok(())
    }

    fn find_matches(&self, sequence: &[LocalBlockHash], _early_exit: bool) -> OverlapScores {
        // The query in our types, in a buffer each querying thread keeps: a fresh allocation
        // per call cost a deep query (4,096 blocks, 32 KB) more than the search itself, as the
        // allocator handed the pages back and faulted them in again.
        QUERY.with_borrow_mut(|query| {
            query.clear();
            query.extend(sequence.iter().map(|l| LocalHash(l.0)));
            overlap_scores(&self.index.find_matches(query))
        })
    }

    fn dump_events(&self) -> Option<Vec<RouterEvent>> {
        Some(self.dump_router_events())
    }
}

impl<I: KvIndex> FlashIndexer<I> {
    /// The index as Dynamo's events: one chain of `Stored` events per worker.
    pub(crate) fn dump_router_events(&self) -> Vec<RouterEvent> {
        self.index
            .dump()
            .iter()
            .map(super::convert::router_event)
            .collect()
    }

    /// Applies Dynamo's event; our refusal in Dynamo's terms.
    pub(crate) fn apply_router_event(&self, event: &RouterEvent) -> Result<(), KvCacheEventError> {
        self.index
            .apply(&flash_event(event))
            .map_err(|e| event_error(&e))
    }
}

thread_local! {
    /// The querying thread's buffer for the query in our types.
    static QUERY: std::cell::RefCell<Vec<LocalHash>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One writer thread's state.
struct Lane<'a, I> {
    index: &'a I,
    counters: Option<PreBoundEventCounters>,
    /// Workers (with rank) whose events this lane applied and that were not removed since.
    workers: HashSet<WorkerWithDpRank>,
    /// The buffers events are converted into, reused from one event to the next.
    blocks: Vec<Block>,
    seqs: Vec<SeqHash>,
}

impl<I: KvIndex> Lane<'_, I> {
    /// Runs one task; `false` when the lane must stop.
    fn run(&mut self, task: WorkerTask) -> bool {
        match task {
            WorkerTask::Event(event) => {
                self.apply(&event);
            }
            WorkerTask::EventWithAck { event, resp } => {
                let applied = self.apply(&event);
                let _ = resp.send(applied);
            }
            WorkerTask::RemoveWorker {
                worker_id,
                sweep_tree,
                resp,
            } => {
                self.workers.retain(|w| w.worker_id != worker_id);
                // The pool sends this to every lane and then once more, with `sweep_tree`, to
                // one lane: by then every lane has applied what it had of the worker. The index
                // is shared, so removing it once, then, is enough.
                if sweep_tree {
                    self.index.remove_worker(worker_id);
                }
                let _ = resp.send(());
            }
            WorkerTask::RemoveWorkerDpRank {
                worker_id, dp_rank, ..
            } => {
                let worker = WorkerWithDpRank::new(worker_id, dp_rank);
                self.workers.remove(&worker);
                // Sent to the lane that applies this rank's events, after them.
                self.index.remove_worker_dp_rank(flash_worker(worker));
            }
            WorkerTask::Stats(resp) => {
                let stats =
                    WorkerLookupStats::from_worker_block_counts(self.workers.iter().map(|&w| {
                        let count = self.index.block_count(flash_worker(w));
                        (w, count)
                    }));
                let _ = resp.send(stats);
            }
            WorkerTask::ContainsWorkerBlock {
                worker,
                block_hash,
                resp,
            } => {
                // Every held block counts, reachable or not (the contract's `holds`).
                let holds = self
                    .index
                    .holds(flash_worker(worker), SeqHash(block_hash.0));
                let _ = resp.send(holds);
            }
            // Each lane answers with nothing: the pool dumps through `SyncIndexer::dump_events`,
            // which reads the shared index once.
            WorkerTask::DumpEvents(resp) => {
                let _ = resp.send(Ok(Vec::new()));
            }
            WorkerTask::Flush(resp) => {
                let _ = resp.send(());
            }
            // The index reclaims its own memory; nothing is left to sweep.
            WorkerTask::CleanupStaleChildren => {}
            // Structural anchors (branch-sharded suffix routing) have no counterpart in our
            // contract; Dynamo's backends without anchors refuse them the same way.
            WorkerTask::Anchor { .. } => {
                tracing::warn!("flash-indexer does not support structural anchors");
            }
            WorkerTask::Terminate => return false,
            // Dynamo's approximate LRU tasks carry payloads private to `dynamo-kv-router`: they
            // cannot be applied from outside it. Dropping the task drops its reply channel, so
            // the requester gets Dynamo's "dropped request" error rather than a made-up answer.
            // (Dynamo's TTL approximate mode is built from ordinary events and works.) Tasks
            // of Dynamo's `bench` feature (observation) are dropped the same way.
            #[allow(unreachable_patterns)]
            _ => {
                tracing::warn!("flash-indexer cannot run this Dynamo task; it is dropped");
            }
        }
        true
    }

    /// Applies `event`, counts it in Dynamo's metrics, and notes its worker as this lane's.
    fn apply(&mut self, event: &RouterEvent) -> bool {
        let kind = EventKind::of(&event.event.data);
        let event = flash_event_in(
            event,
            std::mem::take(&mut self.blocks),
            std::mem::take(&mut self.seqs),
        );
        // A store that succeeds without adding a block replayed blocks the worker held already
        // (the same blocks under the same parents: anything else is a conflict): Dynamo counts
        // that as a duplicate-store warning. A worker's events all run on this lane, so its
        // count moves only here. (Only counted when there are metrics to count it in.)
        let held_before = match &event.kind {
            FlashEventKind::Stored { blocks, .. }
                if !blocks.is_empty() && self.counters.is_some() =>
            {
                Some(self.index.block_count(event.worker))
            }
            _ => None,
        };
        let result = self.index.apply(&event).map_err(|e| event_error(&e));
        if result.is_ok()
            && held_before.is_some_and(|n| n == self.index.block_count(event.worker))
            && let Some(counters) = &self.counters
        {
            counters.inc_warning(EventWarningKind::DuplicateStore);
        }
        if let Err(error) = &result {
            tracing::warn!(?error, "Failed to apply event");
        }
        let applied = result.is_ok();
        if let Some(counters) = &self.counters {
            counters.inc(kind, result);
        }
        self.workers.insert(dynamo_worker(event.worker));
        match into_buffers(event) {
            (Some(blocks), _) => self.blocks = blocks,
            (_, Some(seqs)) => self.seqs = seqs,
            _ => {}
        }
        applied
    }
}
