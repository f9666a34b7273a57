//! The positional layout: the edge tree (`tree/`) with its checkpoints indexed in one table
//! keyed by (position, canonical hash).
//!
//! Every [`STRIDE`] positions, the table finds the block of any chain there by its key, as the
//! node whose edge holds it and its offset there: random access by position, which is what the
//! core's jump search with binary scan-back needs. Keys exist only at checkpoints, one table
//! entry per distinct prefix there (not per block, nor per worker); between checkpoints a
//! query's local hashes are compared with an edge's contiguously. Reads are lock-free: the
//! table and the nodes are both reclaimed through the epoch (`tree/anchor_table.rs`).

use super::checkpoints::{AnchorIndex, STRIDE};
use super::tree::{Anchor, AsTree, Checkpoints, EdgeTree};
use crate::index_core::{Indexer, JumpSearch, Key};
use crossbeam_epoch::Guard;

/// The positional map layout: the edge tree with a concurrent map from each checkpoint's key
/// (position, canonical hash) to its block (a node and an offset in its edge); queries jump
/// search it with binary scan-back.
#[derive(Default)]
pub struct PositionalMap {
    tree: EdgeTree<CheckpointMap<STRIDE>>,
}

impl core::fmt::Debug for PositionalMap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PositionalMap")
            .field("nodes", &self.tree.nodes())
            .field("checkpoints", &self.tree.index().map.len())
            .finish()
    }
}

impl AsTree for PositionalMap {
    type Index = CheckpointMap<STRIDE>;

    #[inline]
    fn tree(&self) -> &EdgeTree<CheckpointMap<STRIDE>> {
        &self.tree
    }
}

/// The positional layout with checkpoints every 8 positions instead of 64, for tests:
/// generated chains are short, and at this stride they cross many checkpoints, so the binary
/// scan-back and the walk past each checkpoint are exercised on every case.
///
/// ```
/// use flash_indexer::{Indexer, KvIndex, LocalHash, Block, Event, SeqHash, Worker};
/// use flash_indexer::testing::NarrowPositionalMap;
///
/// let index = Indexer::<NarrowPositionalMap>::with_jump(1);
/// let w = Worker::new(0, 0);
/// let blocks: Vec<Block> = (0..20).map(|i| Block::new(LocalHash(i), SeqHash(i))).collect();
/// index.apply(&Event::stored(w, 0, None, blocks)).unwrap();
/// assert_eq!(index.entries(), 1, "one edge, anchored at positions 0, 8 and 16");
/// let query: Vec<LocalHash> = (0..12).map(LocalHash).collect();
/// assert_eq!(index.find_matches(&query).get(w), Some(12));
/// ```
#[cfg(feature = "testing")]
#[derive(Debug, Default)]
pub struct NarrowPositionalMap {
    tree: EdgeTree<CheckpointMap<8>>,
}

#[cfg(feature = "testing")]
impl AsTree for NarrowPositionalMap {
    type Index = CheckpointMap<8>;

    fn tree(&self) -> &EdgeTree<CheckpointMap<8>> {
        &self.tree
    }
}

/// One table of every checkpoint (every `S` positions), keyed by position and canonical hash.
#[allow(unreachable_pub)] // Named by a public layout's sealed impls.
#[derive(Default)]
pub struct CheckpointMap<const S: u32> {
    map: AnchorIndex,
}

impl<const S: u32> core::fmt::Debug for CheckpointMap<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CheckpointMap")
            .field("len", &self.map.len())
            .finish()
    }
}

impl<const S: u32> Checkpoints for CheckpointMap<S> {
    type Search = JumpSearch;
    const STRIDE: u32 = S;

    fn insert(&self, anchor: &Anchor, guard: &Guard) {
        self.map.insert(anchor, guard);
    }

    fn remove(&self, anchor: &Anchor, guard: &Guard) {
        self.map.remove(anchor, guard);
    }

    #[inline]
    fn get(&self, key: Key, guard: &Guard) -> Option<*const Anchor> {
        self.map.get(key, guard)
    }
}

/// The exact index over the positional layout, with jump search and binary scan-back.
///
/// ```
/// use flash_indexer::{Block, Event, KvIndex, LocalHash, PositionalIndexer, SeqHash, Worker};
///
/// let index = PositionalIndexer::default();
/// let w = Worker::new(0, 0);
/// let blocks: Vec<Block> = (0..100).map(|i| Block::new(LocalHash(i), SeqHash(1000 + i))).collect();
/// index.apply(&Event::stored(w, 0, None, blocks)).unwrap();
/// // A hole at block 70 stops the chain exactly there (found by binary scan-back).
/// index.apply(&Event::removed(w, 1, vec![SeqHash(1070)])).unwrap();
/// let query: Vec<LocalHash> = (0..100).map(LocalHash).collect();
/// assert_eq!(index.find_matches(&query).get(w), Some(70));
/// ```
#[cfg_attr(not(feature = "positional"), allow(dead_code, unreachable_pub))]
pub type PositionalIndexer = Indexer<PositionalMap>;

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::{Block, Event, KvIndex, LocalHash, NaiveIndexer, SeqHash, Worker};

    /// A chain stored two blocks an event is a node every two blocks: the search's first stride
    /// (8 positions here) goes down to 3 nodes, so it probes on from there, and a worker that
    /// holds the chain up to a checkpoint exactly (its cutoff one past the landing's offset) is
    /// still at that checkpoint, not one before it.
    #[test]
    fn a_search_through_short_nodes_probes_and_keeps_who_holds_the_checkpoint() {
        let index = Indexer::<NarrowPositionalMap>::with_jump(1);
        let reference = NaiveIndexer::default();
        let block = |i: u64| Block::new(LocalHash(i), SeqHash(1000 + i));
        let (a, b) = (Worker::new(1, 0), Worker::new(2, 0));
        let mut events = Vec::new();
        for (worker, len) in [(a, 64_u64), (b, 41)] {
            for (id, start) in (0..len).step_by(2).enumerate() {
                let parent = start.checked_sub(1).map(|p| SeqHash(1000 + p));
                let blocks = (start..(start + 2).min(len)).map(block).collect();
                events.push(Event::stored(worker, id as u64, parent, blocks));
            }
        }
        for event in &events {
            index.apply(event).unwrap();
            reference.apply(event).unwrap();
        }
        assert_eq!(index.entries(), 32, "a node every two blocks");
        let query: Vec<LocalHash> = (0..64).map(LocalHash).collect();
        let scores = index.find_matches(&query);
        assert_eq!((scores.get(a), scores.get(b)), (Some(64), Some(41)));
        assert_eq!(scores, reference.find_matches(&query));
    }
}
