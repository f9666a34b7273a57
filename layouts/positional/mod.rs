//! The concurrent positional map: one `papaya` hash map keyed by (position, canonical hash).
//!
//! Reads are lock-free (papaya's epoch-like guards); a write replaces an entry's immutable
//! [`WorkerSet`] with papaya's atomic `compute`, so two writers adding different workers to one
//! new entry both land and a reader sees either set, never a mix. Random access by position is
//! what makes the core's jump search possible.

use super::entries::{self, EntryMap, entry_map};
use crate::index_core::{ByPosition, Indexer, JumpSearch, Key, Slot, Storage, WorkerSet};
use crate::types::LocalHash;
use papaya::{Guard as _, LocalGuard};
use std::sync::Arc; // sync-shim: papaya takes its collector as a std Arc

/// The positional map layout: one concurrent map keyed by (position, canonical hash), read
/// lock-free; queries jump search it with binary scan-back.
pub struct PositionalMap {
    map: EntryMap<Key>,
}

impl Default for PositionalMap {
    fn default() -> Self {
        Self {
            map: entry_map(None),
        }
    }
}

impl core::fmt::Debug for PositionalMap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PositionalMap")
            .field("entries", &self.map.len())
            .finish()
    }
}

impl PositionalMap {
    /// A map whose guards come from `collector`, so that a layout holding several maps needs one
    /// guard for all of them.
    #[cfg_attr(not(feature = "array"), allow(dead_code))] // Only the array layout shares maps.
    pub(crate) fn with_collector(collector: Arc<seize::Collector>) -> Self {
        Self {
            map: entry_map(Some(collector)),
        }
    }
}

impl Storage for PositionalMap {
    type Search = JumpSearch;
    type Guard<'a> = LocalGuard<'a>;
    type Handle = ();

    #[inline]
    fn guard(&self) -> LocalGuard<'_> {
        self.map.guard()
    }

    unsafe fn add(
        &self,
        key: Key,
        _: LocalHash,
        _: Option<()>,
        slot: Slot,
        guard: &LocalGuard<'_>,
    ) -> ((), bool) {
        ((), entries::add(&self.map, key, slot, guard))
    }

    unsafe fn remove(&self, key: Key, (): (), slot: Slot, guard: &LocalGuard<'_>) -> bool {
        entries::remove(&self.map, key, slot, guard)
    }

    fn entries(&self) -> usize {
        self.map.len()
    }

    fn flush_retired(&self) {
        self.guard().flush();
    }
}

impl ByPosition for PositionalMap {
    #[inline]
    fn get<'g>(&'g self, key: Key, guard: &'g LocalGuard<'_>) -> Option<&'g WorkerSet> {
        self.map.get(&key, guard)
    }
}

/// The exact index over the concurrent positional map, with jump search and binary scan-back.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_added_are_removed_across_resizes() {
        let map = PositionalMap::default();
        let guard = map.guard();
        let keys: Vec<Key> = (0..50_000u64)
            .map(|i| Key {
                pos: (i % 100) as u32,
                canon: i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            })
            .collect();
        for (i, key) in keys.iter().enumerate() {
            // SAFETY: this layout's handles are `()`: it trusts nothing passed back.
            assert!(unsafe { map.add(*key, LocalHash(0), None, 1, &guard) }.1);
            assert!(
                // SAFETY: this layout's handles are `()`: it trusts nothing passed back.
                unsafe { map.add(*key, LocalHash(0), None, 2 + (i % 3) as u32, &guard) }.1
            );
        }
        for (i, key) in keys.iter().enumerate() {
            // SAFETY: this layout's handles are `()`: it trusts nothing passed back.
            assert!(
                unsafe { map.remove(*key, (), 1, &guard) },
                "key {i} lost slot 1"
            );
            assert!(
                // SAFETY: this layout's handles are `()`: it trusts nothing passed back.
                unsafe { map.remove(*key, (), 2 + (i % 3) as u32, &guard) },
                "key {i} lost its second slot"
            );
            assert!(map.get(*key, &guard).is_none());
        }
        assert_eq!(map.entries(), 0);
    }
}
