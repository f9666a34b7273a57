//! The seam between the core and a storage layout.
//!
//! A layout knows only *where* entries live: a map from [`Key`] (position, canonical hash) to a
//! [`WorkerSet`]. It never sees engine hashes, events or errors; the core decides what to add
//! and remove, and in which order (see the reachable-only invariant in `workers.rs`).

pub use super::canon::Key;
pub use super::worker_set::{Slot, WorkerSet};

/// Storage of (position, canonical hash) -> workers, with lock-free reads.
///
/// Writers for *different* slots may call `add` and `remove` on the same key concurrently;
/// calls for one slot are serialised by the core. `get` never blocks.
pub trait Layout: Default + Send + Sync + 'static {
    /// Keeps what `get` returns alive (an epoch or hazard guard).
    type Guard<'a>
    where
        Self: 'a;

    /// Enters a read-side critical section.
    fn guard(&self) -> Self::Guard<'_>;

    /// Adds `slot` to the entry at `key`, creating it. Returns `false` when it was already there.
    fn add(&self, key: Key, slot: Slot, guard: &Self::Guard<'_>) -> bool;

    /// Removes `slot` from the entry at `key`, dropping the entry when it becomes empty.
    /// Returns `false` when it was not there.
    fn remove(&self, key: Key, slot: Slot, guard: &Self::Guard<'_>) -> bool;

    /// The workers at `key`.
    fn get<'g>(&'g self, key: Key, guard: &'g Self::Guard<'_>) -> Option<&'g WorkerSet>;

    /// Number of entries (for memory accounting and leak tests).
    fn entries(&self) -> usize;
}
