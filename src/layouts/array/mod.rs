//! Fixed-depth position arrays: the edge tree (`tree/`) with its checkpoints indexed by one
//! table per checkpoint for the first `DEPTH` positions, and one overflow table beyond them.
//!
//! Compared with the [positional map](super::positional), a probe indexes an array by position
//! before it hashes, and each checkpoint's table is smaller. Positions at or beyond `DEPTH` go
//! to the overflow table, so chains of any length stay exact. Every table is reclaimed through
//! the epoch that also keeps the nodes, so one pin covers a whole query.
//!
//! # When to pick it
//!
//! Both layouts share the tree, the search and the nodes; they differ only in the checkpoint index,
//! one entry per distinct prefix at every 128th position. Side by side (`flashbench compare`,
//! paper §6.1) the array holds the same memory, answers queries about as fast and writes a
//! little faster: with a checkpoint every 128 positions a query probes the index only a few
//! times, so hashing the position into the key costs nothing the array saves on the read side.
//! The positional map is the default; `default-array` picks the array for routers that write
//! more than they read, or want each checkpoint's map to stay small.

use super::checkpoints::{AnchorIndex, STRIDE};
use super::tree::child_table::Keyed;
use super::tree::{Anchor, AsTree, Checkpoints, EdgeTree};
use crate::index_core::{Indexer, JumpSearch, Key};
use crossbeam_epoch::Guard;
use std::sync::OnceLock; // sync-shim: loom has no OnceLock

/// The depth of [`ArrayIndexer`]: 1024 positions cover 64k tokens at block size 64 (16k at
/// block size 16), the contexts of the traces this crate is measured on; deeper checkpoints
/// fall back to the overflow map. A checkpoint's map is created on its first entry; until then
/// it is an empty cell the size of a map.
pub const DEFAULT_DEPTH: usize = 1024;

/// The position-array layout: the edge tree with a fixed array of per-checkpoint maps for the
/// first `DEPTH` positions (no hashing of the position), and one map beyond them; queries jump
/// search it.
#[derive(Default)]
pub struct PositionArray<const DEPTH: usize> {
    tree: EdgeTree<CheckpointArray<DEPTH>>,
}

impl<const DEPTH: usize> PositionArray<DEPTH> {
    /// An empty layout.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<const DEPTH: usize> core::fmt::Debug for PositionArray<DEPTH> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PositionArray")
            .field("depth", &DEPTH)
            .field("nodes", &self.tree.nodes())
            .field("checkpoints", &self.tree.index().len())
            .finish()
    }
}

impl<const DEPTH: usize> AsTree for PositionArray<DEPTH> {
    type Index = CheckpointArray<DEPTH>;

    #[inline]
    fn tree(&self) -> &EdgeTree<CheckpointArray<DEPTH>> {
        &self.tree
    }
}

/// One table per checkpoint below `DEPTH`, and an overflow table beyond.
#[allow(unreachable_pub)] // Named by a public layout's sealed impls.
pub struct CheckpointArray<const DEPTH: usize> {
    /// One table per checkpoint (position / [`STRIDE`]), created on its first entry.
    checkpoints: Box<[OnceLock<AnchorIndex>]>,
    overflow: AnchorIndex,
}

impl<const DEPTH: usize> core::fmt::Debug for CheckpointArray<DEPTH> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CheckpointArray")
            .field("len", &self.len())
            .finish()
    }
}

impl<const DEPTH: usize> Default for CheckpointArray<DEPTH> {
    fn default() -> Self {
        let slots = DEPTH.div_ceil(STRIDE as usize);
        Self {
            checkpoints: (0..slots).map(|_| OnceLock::new()).collect(),
            overflow: AnchorIndex::default(),
        }
    }
}

impl<const DEPTH: usize> CheckpointArray<DEPTH> {
    /// The table of the checkpoint at `pos`, if it is in the array.
    fn cell(&self, pos: u32) -> Option<&OnceLock<AnchorIndex>> {
        self.checkpoints.get((pos / STRIDE) as usize)
    }

    /// Indexed checkpoints.
    fn len(&self) -> usize {
        self.checkpoints
            .iter()
            .filter_map(OnceLock::get)
            .map(AnchorIndex::len)
            .sum::<usize>()
            + self.overflow.len()
    }
}

impl<const DEPTH: usize> Checkpoints for CheckpointArray<DEPTH> {
    type Search = JumpSearch;
    const STRIDE: u32 = STRIDE;

    fn insert(&self, anchor: &Anchor, guard: &Guard) {
        match self.cell(anchor.key().pos) {
            Some(cell) => cell.get_or_init(AnchorIndex::default).insert(anchor, guard),
            None => self.overflow.insert(anchor, guard),
        }
    }

    fn remove(&self, anchor: &Anchor, guard: &Guard) {
        match self.cell(anchor.key().pos) {
            Some(cell) => {
                if let Some(table) = cell.get() {
                    table.remove(anchor, guard);
                }
            }
            None => self.overflow.remove(anchor, guard),
        }
    }

    #[inline]
    fn get(&self, key: Key, guard: &Guard) -> Option<*const Anchor> {
        match self.cell(key.pos) {
            Some(cell) => cell.get()?.get(key, guard),
            None => self.overflow.get(key, guard),
        }
    }
}

/// The exact index over position arrays of [`DEFAULT_DEPTH`] positions.
///
/// ```
/// use flash_indexer::{ArrayIndexer, Block, Event, KvIndex, LocalHash, SeqHash, Worker};
///
/// let index = ArrayIndexer::default();
/// let w = Worker::new(0, 0);
/// // 1500 blocks: the last 476 live in the overflow map, and still answer exactly.
/// let blocks: Vec<Block> = (0..1500).map(|i| Block::new(LocalHash(i), SeqHash(i))).collect();
/// index.apply(&Event::stored(w, 0, None, blocks)).unwrap();
/// let query: Vec<LocalHash> = (0..1500).map(LocalHash).collect();
/// assert_eq!(index.find_matches(&query).get(w), Some(1500));
/// ```
pub type ArrayIndexer = Indexer<PositionArray<DEFAULT_DEPTH>>;

/// An array index with another depth, e.g. `ArrayIndexerOf<4096>` for 256k-token contexts at
/// block size 64.
pub type ArrayIndexerOf<const DEPTH: usize> = Indexer<PositionArray<DEPTH>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index_core::{Checkpointed, RunKeys, Storage, Tree};
    use crate::types::LocalHash;

    #[test]
    fn checkpoints_below_and_beyond_the_depth_find_their_nodes() {
        // Two checkpoints in the array, the rest in the overflow map.
        let layout = PositionArray::<{ 2 * STRIDE as usize }>::new();
        let guard = layout.guard();
        let n = 5 * STRIDE as usize + 3;
        let blocks: Vec<LocalHash> = (0..n as u64).map(LocalHash).collect();
        let keys: Vec<Key> = (0..n as u32)
            .map(|pos| Key {
                pos,
                canon: 1000 + u64::from(pos),
            })
            .collect();
        let mut handles = Vec::new();
        // SAFETY: I1 by hand: no parent; the slot is removed once, from what was returned.
        unsafe {
            layout.add_run(
                None,
                &RunKeys::listed(&keys),
                &blocks,
                5,
                &guard,
                &mut handles,
            )
        };
        // One edge for the run, anchored at each of its six checkpoints.
        assert_eq!(layout.entries(), 1);
        assert_eq!(layout.tree.index().len(), 6);
        for pos in (0..n).step_by(STRIDE as usize) {
            let (node, off) = layout.checkpoint(keys[pos], &guard).expect("indexed");
            assert_eq!(off as usize, pos);
            assert_eq!(layout.edge(node)[off as usize], LocalHash(pos as u64));
            let held = layout.cover(node, &guard).map(|c| c.cutoff(5));
            assert_eq!(held, Some(n as u32));
        }
        let wrong = Key {
            pos: STRIDE,
            canon: 7,
        };
        assert!(layout.checkpoint(wrong, &guard).is_none());
        // SAFETY: as above.
        unsafe { layout.remove_run(&handles, 5, &guard) };
        assert_eq!((layout.entries(), layout.tree.index().len()), (0, 0));
        assert!(
            layout
                .checkpoint(keys[3 * STRIDE as usize], &guard)
                .is_none()
        );
    }
}
