//! The seam between the core and a storage layout.
//!
//! A layout knows only *where* entries live: blocks added to and removed from a worker, found
//! again by the handle the layout returned, and by [`Key`] (position, canonical hash) where the
//! layout indexes them. It never sees engine hashes, events or errors; the core decides what to
//! add and remove, and in which order (the reachable-only invariant in `held.rs`). Searches
//! live in the core too: a layout names the one that fits it ([`seam::Storage::Search`]:
//! [`seam::Walk`] over a [`seam::Tree`], or [`seam::JumpSearch`] over a tree with checkpoints,
//! [`seam::Checkpointed`]), and the core calls the layout only for nodes.
//!
//! The seam is sealed: [`Layout`] is public so that [`Indexer<L>`](crate::Indexer) can be named,
//! but its methods live on [`seam::Storage`], which outside code cannot name. A layout's
//! handles (a tree node's address, say) are trusted by the layout, so the methods that take one
//! are `unsafe fn`s whose contract is the core's invariant I1.

pub(crate) use super::canon::Key;
pub(crate) use super::cover::Cover;
pub(crate) use super::run_keys::RunKeys;
pub(crate) use super::search::QueryCtx;
pub(crate) use super::slots::Slot;

/// A storage layout: where the entries of an [`Indexer`](crate::Indexer) live.
///
/// Sealed: implemented by this crate's layouts ([`RadixTree`](crate::layouts::RadixTree),
/// [`PositionalMap`](crate::layouts::PositionalMap),
/// [`PositionArray`](crate::layouts::PositionArray)) and by nothing else, and with no methods
/// that outside code can call.
///
/// ```
/// use flash_indexer::layouts::RadixTree;
///
/// let tree = RadixTree::default();
/// assert!(format!("{tree:?}").contains("RadixTree"));
/// ```
///
/// Outside code cannot reach a node handle, nor call the seam's methods:
///
/// ```compile_fail
/// use flash_indexer::layouts::radix::NodeRef;
/// ```
///
/// ```compile_fail
/// use flash_indexer::layouts::RadixTree;
///
/// let tree = RadixTree::default();
/// let guard = tree.guard();
/// ```
///
/// Through a generic bound `L: Layout` the seam's harmless methods (`guard`, `entries`) are
/// visible, but the two that trust a handle, `add` and `remove`, are `unsafe fn`s whose safety
/// contract only the core's per-worker state can keep.
pub trait Layout: seam::Checkpointed {}

impl<T: seam::Checkpointed> Layout for T {}

/// The seam itself, crate-private behind [`Layout`]. Its items are `pub` inside a private
/// module (the sealed pattern: they may appear in [`Layout`]'s interface, outside code cannot
/// name them); which of them the enabled layouts reach depends on the features.
#[allow(unreachable_pub)]
pub(crate) mod seam {
    use super::{Cover, Key, QueryCtx, RunKeys, Slot};
    use crate::scores::OverlapScores;
    use crate::types::LocalHash;

    /// A handle whose successors in a stretch of blocks (the offsets of one tree node's edge)
    /// follow from it: the core keeps a run's handles per stretch, not per block.
    pub trait Stretch: Copy {
        /// Whether `next` is the handle one block after `self` in the same stretch.
        fn follows(self, next: Self) -> bool;

        /// The handle `k` blocks after `self` in its stretch.
        fn advance(self, k: u32) -> Self;
    }

    /// Storage of entries -> workers, with lock-free reads.
    ///
    /// Writers for *different* slots may call `add` and `remove` concurrently, on the same entry
    /// too; calls for one slot are serialised by the core. Reads never block.
    pub trait Storage: Default + Send + Sync + 'static {
        /// Keeps what readers see alive (an epoch or hazard guard).
        type Guard<'a>
        where
            Self: 'a;

        /// Where a block is: what `add` returns and `remove` wants back. `()` for layouts
        /// that find entries by key; a tree node and an offset in its edge for the tree. The
        /// core keeps it with the block while the block is reachable, passes a parent's when
        /// adding children, and the layout trusts it.
        type Handle: Stretch + Eq + core::hash::Hash + Send + Sync + 'static;

        /// The core's search that fits this layout.
        type Search: Search;

        /// Whether the layout finds entries by [`Key`]. When it does not, the core rolls no
        /// canonical hashes and passes no keys to [`add_run`](Self::add_run) (an empty slice;
        /// the layout must override it). Removals never take keys: a handle leads to everything
        /// a layout must undo (a tree node keeps the keys it is indexed under), so an eviction
        /// neither reads the evicted blocks' local hashes back nor rolls their keys.
        const KEYED: bool = true;

        /// Enters a read-side critical section.
        fn guard(&self) -> Self::Guard<'_>;

        /// Adds `slot` to the entry at `key`, whose block has local hash `local` and whose
        /// parent entry is `parent` (`None`: position 0), creating the entry. Returns its handle
        /// and whether `slot` was new there.
        ///
        /// # Safety
        /// `parent`, if any, is a handle this layout returned for an entry that holds `slot`
        /// now (I1: a worker is in its reachable blocks' entries), so the entry is live.
        unsafe fn add(
            &self,
            key: Key,
            local: LocalHash,
            parent: Option<Self::Handle>,
            slot: Slot,
            guard: &Self::Guard<'_>,
        ) -> (Self::Handle, bool);

        /// The local hashes of `n` consecutive blocks of one stretch (see [`Stretch`]), the
        /// first at `first`: the core keeps a reachable block's local hash only in its entry.
        ///
        /// # Safety
        /// `first` and the `n - 1` handles after it in its stretch are handles this layout
        /// returned for entries that hold the caller's slot now (I1), so they are live.
        unsafe fn stretch_locals<'g>(
            &'g self,
            first: Self::Handle,
            n: u32,
            guard: &'g Self::Guard<'_>,
        ) -> &'g [LocalHash];

        /// Adds `slot` to a run: blocks with local hashes `locals`, each the parent of the next,
        /// at `keys` (computed as asked for), the first under `parent`. Pushes each block's handle to `handles`, in order, and returns how
        /// many blocks at the front already held `slot` (salted twins: a block already there
        /// has its parent there, so they are always a prefix). One call per run lets a layout
        /// pay per run, not per block (a tree's edge, a worker's cutoff).
        ///
        /// # Safety
        /// As [`add`](Self::add), for `parent`.
        unsafe fn add_run(
            &self,
            parent: Option<Self::Handle>,
            keys: &RunKeys<'_>,
            locals: &[LocalHash],
            slot: Slot,
            guard: &Self::Guard<'_>,
            handles: &mut Vec<Self::Handle>,
        ) -> usize {
            let (mut parent, mut twins, mut fresh) = (parent, 0, false);
            for (i, &local) in locals.iter().enumerate() {
                // SAFETY: the caller's contract for the first parent; each later parent is the
                // entry just given `slot`.
                let (handle, new) = unsafe { self.add(keys.key(i), local, parent, slot, guard) };
                handles.push(handle);
                if new {
                    fresh = true;
                } else {
                    debug_assert!(!fresh, "blocks already held are a prefix of a run");
                    twins += 1;
                }
                parent = Some(handle);
            }
            twins
        }

        /// Removes `slot` from the `n` consecutive blocks of one stretch (see [`Stretch`]), the
        /// first at `first`, the last block first, so that what readers see stays
        /// prefix-closed. The core detaches a run a stretch at a time, the last stretch first,
        /// straight from the handles it keeps per stretch: a tree node's cut is one call, not
        /// one handle a block made and grouped again.
        ///
        /// # Safety
        /// `first` and the `n - 1` handles after it are what this layout returned for `slot`'s
        /// blocks, and `slot` has not been removed from those entries since (I1), so they are
        /// live; nothing holds `slot` below the last of them.
        unsafe fn remove_stretch(
            &self,
            first: Self::Handle,
            n: u32,
            slot: Slot,
            guard: &Self::Guard<'_>,
        );

        /// Removes `slot` from the entries of a run's blocks `handles` (in run order), the last
        /// block first, so that what readers see stays prefix-closed: one
        /// [`remove_stretch`](Self::remove_stretch) a stretch, the last first.
        ///
        /// # Safety
        /// As [`remove_stretch`](Self::remove_stretch), for every block; nothing holds `slot`
        /// below the last.
        unsafe fn remove_run(&self, handles: &[Self::Handle], slot: Slot, guard: &Self::Guard<'_>) {
            let mut end = handles.len();
            while end > 0 {
                let mut start = end - 1;
                while start > 0 && handles[start - 1].follows(handles[start]) {
                    start -= 1;
                }
                // SAFETY: the caller's contract, for the blocks `start..end`, one stretch.
                unsafe { self.remove_stretch(handles[start], (end - start) as u32, slot, guard) };
                end = start;
            }
        }

        /// Number of entries (for memory accounting and leak tests).
        fn entries(&self) -> usize;

        /// Lets go of what this thread retired and still batches, so that it is freed once no
        /// reader can see it, instead of when the batch fills up.
        fn flush_retired(&self) {}
    }

    /// A search of the core (over the layouts whose `Search` it is).
    pub trait Search {
        /// Every worker's matched depth for `query`.
        fn find<L: Checkpointed>(
            layout: &L,
            ctx: &QueryCtx<'_>,
            query: &[LocalHash],
        ) -> OverlapScores;
    }

    /// Jump search with binary scan-back over checkpoints, for trees that index them
    /// ([`Checkpointed`]).
    #[derive(Debug)]
    #[cfg_attr(not(any(feature = "positional", feature = "array")), allow(dead_code))]
    pub enum JumpSearch {}

    /// A walk from the root, for trees.
    #[derive(Debug)]
    #[cfg_attr(not(feature = "radix"), allow(dead_code))]
    pub enum Walk {}

    /// A layout that is a compressed tree: each node an edge of consecutive blocks, children
    /// hanging at any offset of their parent's edge, and per node one cutoff per worker
    /// ([`Cover`]). The core walks it from the root.
    pub trait Tree: Storage {
        /// A node of the tree.
        type Node;

        /// The child of `parent` (`None`: the root) whose edge continues `parent`'s first `at`
        /// blocks with `local`.
        fn child<'g>(
            &'g self,
            parent: Option<&'g Self::Node>,
            at: u32,
            local: LocalHash,
            guard: &'g Self::Guard<'_>,
        ) -> Option<&'g Self::Node>;

        /// Starts loading where [`child`](Self::child) would look for this child, without
        /// waiting: a hint, so that the lookup's miss overlaps the work done before it.
        fn warm_child(
            &self,
            parent: &Self::Node,
            at: u32,
            local: LocalHash,
            guard: &Self::Guard<'_>,
        );

        /// The local hashes of `node`'s edge (never empty, never changed).
        fn edge<'g>(&'g self, node: &'g Self::Node) -> &'g [LocalHash];

        /// Which workers hold how much of `node`'s edge.
        fn cover<'g>(
            &'g self,
            node: &'g Self::Node,
            guard: &'g Self::Guard<'_>,
        ) -> Option<&'g Cover>;
    }

    /// A tree that also finds blocks by key at checkpoints: every `STRIDE` positions,
    /// [`checkpoint`](Self::checkpoint) finds the block of any chain there by its key, as the
    /// node whose edge holds it and its offset in that edge. The core's jump search lands on
    /// checkpoints with it.
    pub trait Checkpointed: Tree {
        /// Positions between checkpoints (a multiple of the canonical roll's lanes); 0 when
        /// the tree indexes none.
        const STRIDE: u32;

        /// The node whose edge holds the block at `key` (a checkpoint position), and the
        /// block's offset in the edge.
        fn checkpoint<'g>(
            &'g self,
            key: Key,
            guard: &'g Self::Guard<'_>,
        ) -> Option<(&'g Self::Node, u32)>;
    }
}
