//! The seam between the core and a storage layout.
//!
//! A layout knows only *where* entries live: entries named by [`Key`] (position, canonical
//! hash), each holding a [`WorkerSet`]. It never sees engine hashes, events or errors; the core
//! decides what to add and remove, and in which order (see the reachable-only invariant in
//! `workers.rs`). Searches live in the core too: a layout only says which one fits it, by
//! implementing [`ByPosition`] (random access: jump search) or [`Tree`] (a walk from the root).

pub use super::canon::Key;
pub use super::search::QueryCtx;
pub use super::worker_set::{Slot, WorkerSet};
use crate::scores::OverlapScores;
use crate::types::LocalHash;

/// Storage of entries -> workers, with lock-free reads.
///
/// Writers for *different* slots may call `add` and `remove` concurrently, on the same entry
/// too; calls for one slot are serialised by the core. Reads never block.
pub trait Layout: Default + Send + Sync + 'static {
    /// Keeps what readers see alive (an epoch or hazard guard).
    type Guard<'a>
    where
        Self: 'a;

    /// What `add` returns and `remove` wants back: the entry itself for layouts that can hand
    /// one out (a tree node), `()` for layouts that find entries by key. The core keeps it with
    /// the block while the block is reachable, and passes a parent's handle when adding a child.
    type Handle: Copy + Default + Send + Sync + 'static;

    /// Enters a read-side critical section.
    fn guard(&self) -> Self::Guard<'_>;

    /// Adds `slot` to the entry at `key`, whose block has local hash `local` and whose parent
    /// entry is `parent` (`None`: position 0), creating the entry. Returns its handle and
    /// whether `slot` was new there.
    fn add(
        &self,
        key: Key,
        local: LocalHash,
        parent: Option<Self::Handle>,
        slot: Slot,
        guard: &Self::Guard<'_>,
    ) -> (Self::Handle, bool);

    /// Removes `slot` from the entry at `key` (with the handle `add` returned), dropping the
    /// entry when nothing needs it any more. Returns `false` when `slot` was not there.
    fn remove(&self, key: Key, handle: Self::Handle, slot: Slot, guard: &Self::Guard<'_>) -> bool;

    /// Answers a query with the core's search that fits this layout:
    /// [`QueryCtx::jump_search`] or [`QueryCtx::walk`].
    fn find(&self, ctx: &QueryCtx<'_>, query: &[LocalHash]) -> OverlapScores;

    /// Number of entries (for memory accounting and leak tests).
    fn entries(&self) -> usize;
}

/// A layout with random access by key: the core's jump search with binary scan-back fits it.
pub trait ByPosition: Layout {
    /// The workers at `key`.
    fn get<'g>(&'g self, key: Key, guard: &'g Self::Guard<'_>) -> Option<&'g WorkerSet>;
}

/// A layout that is a tree of entries keyed by local hash under their parent: the core walks it
/// from the root.
pub trait Tree: Layout {
    /// A node of the tree.
    type Node;

    /// The child of `parent` (`None`: the root) with local hash `local`.
    fn child<'g>(
        &'g self,
        parent: Option<&'g Self::Node>,
        local: LocalHash,
        guard: &'g Self::Guard<'_>,
    ) -> Option<&'g Self::Node>;

    /// The workers of `node`.
    fn workers<'g>(
        &'g self,
        node: &'g Self::Node,
        guard: &'g Self::Guard<'_>,
    ) -> Option<&'g WorkerSet>;
}
