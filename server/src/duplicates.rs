//! Stores that change nothing: every block of the event already held by its worker. The
//! contract applies them as no-ops (engines replay), and Dynamo's router counts each as a
//! `duplicate_store` warning; this server counts them on each model's heaviest tier.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use flash_indexer::{
    Event, EventError, EventKindView, EventView, KvIndex, LocalHash, OverlapScores, SeqHash, Worker,
};

use crate::service::ServedIndex;

/// An index that counts the stores that change nothing in it.
pub struct DuplicateStores {
    inner: Arc<dyn ServedIndex>,
    duplicates: AtomicU64,
}

impl DuplicateStores {
    /// Counts the duplicate stores applied to `inner`.
    pub fn new(inner: Arc<dyn ServedIndex>) -> DuplicateStores {
        DuplicateStores {
            inner,
            duplicates: AtomicU64::new(0),
        }
    }
}

impl KvIndex for DuplicateStores {
    fn apply(&self, event: &Event) -> Result<(), EventError> {
        self.apply_view(event.view())
    }

    fn apply_view(&self, event: EventView<'_>) -> Result<(), EventError> {
        let duplicate = match event.kind {
            EventKindView::Stored { blocks, .. } => {
                !blocks.is_empty() && blocks.iter().all(|b| self.inner.holds(event.worker, b.seq))
            }
            _ => false,
        };
        let result = self.inner.apply_view(event);
        if duplicate && result.is_ok() {
            self.duplicates.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn find_matches(&self, query: &[LocalHash]) -> OverlapScores {
        self.inner.find_matches(query)
    }

    fn remove_worker(&self, id: u64) {
        self.inner.remove_worker(id)
    }

    fn remove_worker_dp_rank(&self, worker: Worker) {
        self.inner.remove_worker_dp_rank(worker)
    }

    fn block_count(&self, worker: Worker) -> usize {
        self.inner.block_count(worker)
    }

    fn holds(&self, worker: Worker, seq: SeqHash) -> bool {
        self.inner.holds(worker, seq)
    }

    fn block_counts(&self) -> Vec<(Worker, usize)> {
        self.inner.block_counts()
    }

    fn dump(&self) -> Vec<Event> {
        self.inner.dump()
    }

    fn flush_retired(&self) {
        self.inner.flush_retired()
    }
}

impl ServedIndex for DuplicateStores {
    fn entries(&self) -> usize {
        self.inner.entries()
    }

    fn worker_count(&self) -> usize {
        self.inner.worker_count()
    }

    fn duplicate_stores(&self) -> u64 {
        self.duplicates.load(Ordering::Relaxed)
    }
}
