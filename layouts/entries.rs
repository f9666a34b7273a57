//! What the map-based layouts share: a papaya map from a key to an immutable [`WorkerSet`], its
//! hasher, and the two writes (add a slot, remove a slot) as atomic read-modify-writes.

use crate::index_core::{Slot, WorkerSet};
use core::hash::{BuildHasher, Hash, Hasher};
use papaya::{Compute, HashMap, LocalGuard, Operation, ResizeMode};
use std::sync::Arc; // sync-shim: papaya takes its collector as a std Arc

/// A hasher for keys made of canonical hashes (and positions). Canonical hashes are already
/// uniformly mixed and keyed per index, so folding the position in is all it takes; SipHash
/// here would cost more than the probe.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct KeyHasher {
    state: u64,
}

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.state
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only reached if a key's `Hash` impl changes; stay correct, if slower.
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
pub(crate) struct BuildKeyHasher;

impl BuildHasher for BuildKeyHasher {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher::default()
    }
}

/// A concurrent map from `K` to the workers holding it.
pub(crate) type EntryMap<K> = HashMap<K, WorkerSet, BuildKeyHasher>;

/// An empty map; maps that must share one guard share `collector`.
///
/// Blocking resizes: writers finish a resize together, so readers always find a single table
/// (incremental mode can leave a half-copied table that every miss walks through).
pub(crate) fn entry_map<K: Hash + Eq + Send + Sync + 'static>(
    collector: Option<Arc<seize::Collector>>,
) -> EntryMap<K> {
    let builder = HashMap::builder()
        .hasher(BuildKeyHasher)
        .resize_mode(ResizeMode::Blocking);
    match collector {
        Some(c) => builder.shared_collector(c).build(),
        None => builder.build(),
    }
}

/// Adds `slot` to the set at `key` (`false`: it was already there).
///
/// A new entry goes in with `try_insert`, and `compute` only updates existing ones: in papaya
/// 0.2.5 a table filled through `compute` does not grow like one filled through `insert`, and a
/// miss in it probed ~100x longer (1.2 us instead of 13 ns at 800k entries, measured here).
pub(crate) fn add<K: Hash + Eq + Clone + Send + Sync + 'static>(
    map: &EntryMap<K>,
    key: K,
    slot: Slot,
    guard: &LocalGuard<'_>,
) -> bool {
    if map
        .try_insert(key.clone(), WorkerSet::One(slot), guard)
        .is_ok()
    {
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

/// Removes `slot` from the set at `key`, dropping the entry when empty (`false`: not there).
pub(crate) fn remove<K: Hash + Eq + Send + Sync + 'static>(
    map: &EntryMap<K>,
    key: K,
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
