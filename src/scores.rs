//! The answer to a query: how deep each worker matches.

use crate::types::Worker;

/// Per-worker match depths returned by [`KvIndex::find_matches`](crate::KvIndex::find_matches).
///
/// Holds only workers with a depth of at least one. Entries are in no particular order: building
/// the scores is on every query's hot path, so nothing is sorted or hashed. [`get`](Self::get)
/// is a linear scan; a router that looks up many workers should [`iter`](Self::iter) once.
/// Equality ignores order.
#[derive(Clone, Debug, Default)]
pub struct OverlapScores {
    entries: Vec<Entry>,
}

/// One worker's depth, packed into 16 bytes (a `(Worker, u32)` takes 24): a query that scores
/// 64 workers writes 1 KiB, which the allocator serves from its per-thread cache.
#[derive(Clone, Copy, Debug)]
struct Entry {
    id: u64,
    dp_rank: u32,
    depth: u32,
}

impl Entry {
    #[inline]
    fn worker(self) -> Worker {
        Worker::new(self.id, self.dp_rank)
    }
}

impl OverlapScores {
    /// No scores.
    pub fn new() -> Self {
        Self::default()
    }

    /// Room for `n` workers.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            entries: Vec::with_capacity(n),
        }
    }

    /// Room for `n` more workers.
    #[inline]
    pub(crate) fn reserve(&mut self, n: usize) {
        self.entries.reserve(n);
    }

    /// Records `depth` for `worker`. Depth 0 is not recorded. The caller must not record a worker
    /// twice.
    #[inline]
    pub fn push(&mut self, worker: Worker, depth: u32) {
        if depth > 0 {
            debug_assert!(self.get(worker).is_none(), "{worker} scored twice");
            self.entries.push(Entry {
                id: worker.id,
                dp_rank: worker.dp_rank,
                depth,
            });
        }
    }

    /// Empties the scores for reuse, keeping their room unless they had far more than they
    /// held (see [`crate::room::shrunk`]).
    #[cfg(feature = "approximate")]
    pub(crate) fn recycle(&mut self) {
        if let Some(to) = crate::room::shrunk(self.entries.len(), self.entries.capacity()) {
            self.entries.shrink_to(to);
        }
        self.entries.clear();
    }

    /// Replaces each worker's depth with `f(worker, depth)`, dropping the workers it maps to 0.
    /// Keeps the allocation: an index that refines another's scores answers without a new one.
    #[cfg(feature = "hybrid")]
    pub(crate) fn refine(&mut self, mut f: impl FnMut(Worker, u32) -> u32) {
        self.entries.retain_mut(|e| {
            e.depth = f(e.worker(), e.depth);
            e.depth > 0
        });
    }

    /// The depth `worker` matched, or `None` when it matched nothing.
    pub fn get(&self, worker: Worker) -> Option<u32> {
        self.entries
            .iter()
            .find(|e| e.id == worker.id && e.dp_rank == worker.dp_rank)
            .map(|e| e.depth)
    }

    /// Every `(worker, depth)` with depth ≥ 1, in no particular order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (Worker, u32)> + '_ {
        self.entries.iter().map(|e| (e.worker(), e.depth))
    }

    /// Number of workers with depth ≥ 1.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// `true` when no worker matched.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The deepest match, ties broken by the smaller worker (a deterministic router default).
    pub fn best(&self) -> Option<(Worker, u32)> {
        self.iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
    }

    /// The scores sorted by worker (for display and comparison).
    pub fn to_sorted_vec(&self) -> Vec<(Worker, u32)> {
        let mut v: Vec<(Worker, u32)> = self.iter().collect();
        v.sort_unstable();
        v
    }
}

impl PartialEq for OverlapScores {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(w, d)| other.get(w) == Some(d))
    }
}

impl Eq for OverlapScores {}

impl FromIterator<(Worker, u32)> for OverlapScores {
    fn from_iter<T: IntoIterator<Item = (Worker, u32)>>(iter: T) -> Self {
        let mut scores = Self::new();
        for (w, d) in iter {
            scores.push(w, d);
        }
        scores
    }
}
