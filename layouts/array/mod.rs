//! Fixed-depth position arrays: one concurrent map per position for the first `DEPTH`
//! positions, keyed by canonical hash alone, and an exact overflow for deeper positions.
//!
//! Compared with the [positional map](super::positional), a probe indexes an array by position
//! instead of hashing it into one big key space, and each position's map is smaller. Positions
//! at or beyond `DEPTH` go to a [`PositionalMap`], so chains of any length stay exact. All maps
//! share one `seize` collector, so one guard covers a whole query.
//!
//! # When to pick it
//!
//! Measured side by side with the positional map and Dynamo's indexes (`flashbench compare`, 2
//! cores, commit d33a48c, medians of 3 rounds; `papers/figures/compare.md`):
//! - on Dynamo's published workload it held 85.8 bytes per pair instead of 93.5 and answered at
//!   p50 1.15 us instead of 1.36 (p99 2.16 against 2.25); stores and removes were within the
//!   noise of one another (13.3M and 8.2M stores per second in that run, 10.5M and 11.3M in the
//!   one before, removes 13.1M and 13.0M);
//! - on the depth preset (full hits to 4,096 blocks) and the trace the two are the same within
//!   the noise: the cost there is the query's canonical hashes, which both layouts share.
//!
//! So it earns its place by a little: pick it (feature `default-array`) when memory matters and
//! the deepest position you care about is known (context length / block size); the positional
//! map otherwise. Both stay behind the radix layout on every column of those runs.

use super::entries::{self, EntryMap, entry_map};
use super::positional::PositionalMap;
use crate::index_core::{ByPosition, Indexer, JumpSearch, Key, Slot, Storage, WorkerSet};
use crate::types::LocalHash;
use papaya::{Guard as _, LocalGuard};
use std::sync::{Arc, OnceLock}; // sync-shim: papaya takes a std Arc; loom has no OnceLock

/// The depth of [`ArrayIndexer`]: 1024 positions cover 64k tokens at block size 64 (16k at
/// block size 16), the contexts of the traces this crate is measured on; deeper positions fall
/// back to the overflow map. A position's map is created on its first entry; until then the
/// position is an empty cell the size of a map, so an empty index holds about 100 KB (measured
/// with a counting allocator: 102 KB allocated to build one, a seize collector included).
pub const DEFAULT_DEPTH: usize = 1024;

/// The position-array layout: a fixed array of per-position maps for the first `DEPTH`
/// positions (no hashing of the position), and the positional map beyond them; queries jump
/// search it.
pub struct PositionArray<const DEPTH: usize> {
    collector: Arc<seize::Collector>,
    /// One map per position, created on the position's first entry.
    positions: Box<[OnceLock<EntryMap<u64>>]>,
    overflow: PositionalMap,
}

impl<const DEPTH: usize> PositionArray<DEPTH> {
    /// An empty layout.
    pub fn new() -> Self {
        let collector = Arc::new(entries::collector());
        let positions = (0..DEPTH).map(|_| OnceLock::new()).collect();
        let overflow = PositionalMap::with_collector(collector.clone());
        Self {
            collector,
            positions,
            overflow,
        }
    }

    /// The map of an array position, created if needed; `None` beyond the array.
    fn position_or_create(&self, pos: u32) -> Option<&EntryMap<u64>> {
        let cell = self.positions.get(pos as usize)?;
        Some(cell.get_or_init(|| entry_map(Some(self.collector.clone()))))
    }
}

impl<const DEPTH: usize> Default for PositionArray<DEPTH> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const DEPTH: usize> core::fmt::Debug for PositionArray<DEPTH> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PositionArray")
            .field("depth", &DEPTH)
            .field("entries", &self.entries())
            .finish()
    }
}

impl<const DEPTH: usize> Storage for PositionArray<DEPTH> {
    type Search = JumpSearch;
    type Guard<'a> = LocalGuard<'a>;
    type Handle = ();

    #[inline]
    fn guard(&self) -> LocalGuard<'_> {
        self.collector.enter()
    }

    unsafe fn add(
        &self,
        key: Key,
        local: LocalHash,
        parent: Option<()>,
        slot: Slot,
        guard: &LocalGuard<'_>,
    ) -> ((), bool) {
        match self.position_or_create(key.pos) {
            Some(map) => ((), entries::add(map, key.canon, slot, guard)),
            // SAFETY: the positional map's handles are `()`: it trusts nothing we pass.
            None => unsafe { self.overflow.add(key, local, parent, slot, guard) },
        }
    }

    unsafe fn remove(&self, key: Key, (): (), slot: Slot, guard: &LocalGuard<'_>) -> bool {
        match self.positions.get(key.pos as usize) {
            Some(cell) => cell
                .get()
                .is_some_and(|map| entries::remove(map, key.canon, slot, guard)),
            // SAFETY: as in `add`.
            None => unsafe { self.overflow.remove(key, (), slot, guard) },
        }
    }

    fn entries(&self) -> usize {
        self.positions
            .iter()
            .filter_map(OnceLock::get)
            .map(|m| m.len())
            .sum::<usize>()
            + self.overflow.entries()
    }

    fn flush_retired(&self) {
        // One collector serves the positions and the overflow.
        self.guard().flush();
    }
}

impl<const DEPTH: usize> ByPosition for PositionArray<DEPTH> {
    #[inline]
    fn get<'g>(&'g self, key: Key, guard: &'g LocalGuard<'_>) -> Option<&'g WorkerSet> {
        match self.positions.get(key.pos as usize) {
            Some(cell) => cell.get()?.get(&key.canon, guard),
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

    #[test]
    fn keys_below_and_beyond_the_depth_round_trip() {
        let layout = PositionArray::<4>::new();
        let guard = layout.guard();
        let keys = [
            Key { pos: 0, canon: 1 },
            Key { pos: 3, canon: 1 },
            Key { pos: 4, canon: 1 },
            Key { pos: 900, canon: 7 },
        ];
        for key in keys {
            // SAFETY: this layout's handles are `()`: it trusts nothing passed back.
            assert!(unsafe { layout.add(key, LocalHash(0), None, 5, &guard) }.1);
            // SAFETY: this layout's handles are `()`: it trusts nothing passed back.
            assert!(!unsafe { layout.add(key, LocalHash(0), None, 5, &guard) }.1);
        }
        assert_eq!(layout.entries(), 4);
        for key in keys {
            assert_eq!(
                layout.get(key, &guard).map(WorkerSet::to_vec),
                Some(vec![5])
            );
            // SAFETY: this layout's handles are `()`: it trusts nothing passed back.
            assert!(unsafe { layout.remove(key, (), 5, &guard) });
            assert!(layout.get(key, &guard).is_none());
        }
        assert_eq!(layout.entries(), 0);
    }
}
