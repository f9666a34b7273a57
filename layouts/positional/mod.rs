//! The concurrent positional map: one `papaya` hash map keyed by (position, canonical hash).
//!
//! Reads are lock-free (papaya's epoch-like guards); a write replaces an entry's immutable
//! [`WorkerSet`] with papaya's atomic `compute`, so two writers adding different workers to one
//! new entry both land and a reader sees either set, never a mix. Random access by position is
//! what makes the core's jump search possible.

use crate::core::{Indexer, Key, Layout, Slot, WorkerSet};
use core::hash::{BuildHasher, Hasher};
use papaya::{Compute, HashMap, LocalGuard, Operation, ResizeMode};

/// A hasher for [`Key`]s. Canonical hashes are already uniformly mixed (and keyed per index),
/// so folding the position in is all it takes; SipHash here would cost more than the probe.
#[derive(Clone, Copy, Default, Debug)]
pub struct KeyHasher {
    state: u64,
}

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.state
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only reached if `Key`'s `Hash` impl changes; stay correct, if slower.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u32(&mut self, pos: u32) {
        self.state ^= u64::from(pos).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    #[inline]
    fn write_u64(&mut self, canon: u64) {
        self.state = self.state.rotate_left(23) ^ canon;
    }
}

/// Builds [`KeyHasher`]s.
#[derive(Clone, Copy, Default, Debug)]
pub struct BuildKeyHasher;

impl BuildHasher for BuildKeyHasher {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher::default()
    }
}

/// The positional map layout. See the [module docs](self).
pub struct PositionalMap {
    map: HashMap<Key, WorkerSet, BuildKeyHasher>,
}

impl Default for PositionalMap {
    fn default() -> Self {
        // Blocking resizes: writers finish a resize together, so readers always find a single
        // table (incremental mode can leave a half-copied table that every miss walks through).
        let map = HashMap::builder()
            .hasher(BuildKeyHasher)
            .resize_mode(ResizeMode::Blocking)
            .build();
        Self { map }
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
    /// The set at `key` with `slot` added (`false`: it was already there).
    ///
    /// A new entry goes in with `try_insert`, and `compute` only updates existing ones: in
    /// papaya 0.2.5 a table filled through `compute` does not grow like one filled through
    /// `insert`, and a miss in it probed ~100x longer (1.2 us instead of 13 ns at 800k entries,
    /// measured here).
    pub(crate) fn add_in(
        map: &HashMap<Key, WorkerSet, BuildKeyHasher>,
        key: Key,
        slot: Slot,
        guard: &LocalGuard<'_>,
    ) -> bool {
        if map.try_insert(key, WorkerSet::One(slot), guard).is_ok() {
            return true;
        }
        let result = map.compute(
            key,
            |entry| match entry {
                None => Operation::Insert(WorkerSet::One(slot)),
                Some((_, set)) => match set.with(slot) {
                    Some(grown) => Operation::Insert(grown),
                    None => Operation::Abort(()),
                },
            },
            guard,
        );
        !matches!(result, Compute::Aborted(()))
    }

    /// The set at `key` without `slot`, dropped when empty (`false`: it was not there).
    pub(crate) fn remove_in(
        map: &HashMap<Key, WorkerSet, BuildKeyHasher>,
        key: Key,
        slot: Slot,
        guard: &LocalGuard<'_>,
    ) -> bool {
        let result = map.compute(
            key,
            |entry| match entry {
                None => Operation::Abort(()),
                Some((_, set)) => match set.without(slot) {
                    Err(()) => Operation::Abort(()),
                    Ok(None) => Operation::Remove,
                    Ok(Some(shrunk)) => Operation::Insert(shrunk),
                },
            },
            guard,
        );
        !matches!(result, Compute::Aborted(()))
    }
}

impl Layout for PositionalMap {
    type Guard<'a> = LocalGuard<'a>;

    #[inline]
    fn guard(&self) -> LocalGuard<'_> {
        self.map.guard()
    }

    fn add(&self, key: Key, slot: Slot, guard: &LocalGuard<'_>) -> bool {
        Self::add_in(&self.map, key, slot, guard)
    }

    fn remove(&self, key: Key, slot: Slot, guard: &LocalGuard<'_>) -> bool {
        Self::remove_in(&self.map, key, slot, guard)
    }

    #[inline]
    fn get<'g>(&'g self, key: Key, guard: &'g LocalGuard<'_>) -> Option<&'g WorkerSet> {
        self.map.get(&key, guard)
    }

    fn entries(&self) -> usize {
        self.map.len()
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
            assert!(map.add(*key, 1, &guard));
            assert!(map.add(*key, 2 + (i % 3) as u32, &guard));
        }
        for (i, key) in keys.iter().enumerate() {
            assert!(map.remove(*key, 1, &guard), "key {i} lost slot 1");
            assert!(
                map.remove(*key, 2 + (i % 3) as u32, &guard),
                "key {i} lost its second slot"
            );
            assert!(map.get(*key, &guard).is_none());
        }
        assert_eq!(map.entries(), 0);
    }
}
