//! What the map-based layouts share: a papaya map from a key to an immutable [`WorkerSet`], its
//! hasher, and the two writes (add a slot, remove a slot): atomic read-modify-writes of the
//! entry, or in-place changes of a wide set under its lock.

use crate::index_core::{Slot, WideSet, WideWriter, WorkerSet};
use core::hash::{BuildHasher, Hash, Hasher};
use papaya::{Compute, HashMap, LocalGuard, Operation, ResizeMode};
use std::sync::Arc; // sync-shim: papaya takes its collector as a std Arc

/// A hasher for keys made of canonical hashes (and positions). Canonical hashes are already
/// uniform and keyed per index, but below `2^61`, and papaya takes its tag from a hash's top
/// seven bits: one multiply spreads the low bits up. SipHash here would cost more than the
/// probe.
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
        self.state = (self.state.rotate_left(23) ^ canon).wrapping_mul(crate::mix::GOLDEN);
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

/// How many retired objects a thread batches before it tries to reclaim them. Every attempt
/// starts with a `membarrier` system call (an interrupt to every core running the process):
/// with seize's default of 32, a remove of one entry per block spent about a third of its time
/// there (perf, Dynamo's workload). 1,024 entries are some 64 KB a thread waiting for an epoch.
const RETIRE_BATCH: usize = 1024;

/// The reclamation collector of the map layouts.
pub(crate) fn collector() -> seize::Collector {
    seize::Collector::new().batch_size(RETIRE_BATCH)
}

/// An empty map; maps that must share one guard pass the same `shared` collector, others get
/// their own ([`collector`]).
///
/// Blocking resizes: writers finish a resize together, so readers always find a single table
/// (incremental mode can leave a half-copied table that every miss walks through).
pub(crate) fn entry_map<K: Hash + Eq + Send + Sync + 'static>(
    shared: Option<Arc<seize::Collector>>,
) -> EntryMap<K> {
    let builder = HashMap::builder()
        .hasher(BuildKeyHasher)
        .resize_mode(ResizeMode::Blocking);
    match shared {
        Some(c) => builder.shared_collector(c).build(),
        None => builder.collector(collector()).build(),
    }
}

/// What a `compute` closure found at a key.
enum Found {
    /// Nothing to do (the slot was already there, or was not there to remove).
    Unchanged,
    /// A wide set, which changes in place, not through `compute`.
    Wide,
}

/// Adds `slot` to the set at `key` (`false`: it was already there).
///
/// A new entry goes in with `try_insert`, and `compute` only updates existing ones: in papaya
/// 0.2.5 a table filled through `compute` does not grow like one filled through `insert`, and a
/// miss in it probed ~100x longer (1.2 us instead of 13 ns at 800k entries, measured here).
/// Wide sets change in place under their own lock ([`WorkerSet`]). A new key costs one probe,
/// an existing one two.
pub(crate) fn add<K: Hash + Eq + Clone + Send + Sync + 'static>(
    map: &EntryMap<K>,
    key: K,
    slot: Slot,
    guard: &LocalGuard<'_>,
) -> bool {
    loop {
        let current = match map.try_insert(key.clone(), WorkerSet::One(slot), guard) {
            Ok(_) => return true,
            Err(occupied) => occupied.current,
        };
        if let Some(wide) = current.wide() {
            match change_wide(map, &key, wide, |w| w.insert(slot), guard) {
                Some(added) => return added,
                None => continue, // Replaced meanwhile: look again.
            }
        }
        let result = map.compute(
            key.clone(),
            |entry| match entry {
                None => Operation::Insert(WorkerSet::One(slot)),
                Some((_, WorkerSet::Wide(_))) => Operation::Abort(Found::Wide),
                Some((_, set)) => match set.with(slot) {
                    Some(grown) => Operation::Insert(grown),
                    None => Operation::Abort(Found::Unchanged),
                },
            },
            guard,
        );
        match result {
            Compute::Aborted(Found::Wide) => continue,
            Compute::Aborted(Found::Unchanged) => return false,
            _ => return true,
        }
    }
}

/// Removes `slot` from the set at `key`, dropping the entry when empty (`false`: not there).
/// One probe, two when the set is wide.
pub(crate) fn remove<K: Hash + Eq + Clone + Send + Sync + 'static>(
    map: &EntryMap<K>,
    key: K,
    slot: Slot,
    guard: &LocalGuard<'_>,
) -> bool {
    loop {
        let result = map.compute(
            key.clone(),
            |entry| match entry {
                None => Operation::Abort(Found::Unchanged),
                Some((_, WorkerSet::Wide(_))) => Operation::Abort(Found::Wide),
                Some((_, set)) => match set.without(slot) {
                    Err(()) => Operation::Abort(Found::Unchanged),
                    Ok(None) => Operation::Remove,
                    Ok(Some(shrunk)) => Operation::Insert(shrunk),
                },
            },
            guard,
        );
        match result {
            Compute::Aborted(Found::Unchanged) => return false,
            Compute::Aborted(Found::Wide) => {
                let Some(wide) = map.get(&key, guard).and_then(WorkerSet::wide) else {
                    continue; // Narrowed meanwhile: compute again.
                };
                if let Some(removed) = change_wide(map, &key, wide, |w| w.remove(slot), guard) {
                    return removed;
                }
            }
            _ => return true,
        }
    }
}

/// Changes the wide set `wide` found at `key` in place with `change`, or replaces it with the
/// set `change` hands back. `None`: the set was replaced before we locked it; look again.
fn change_wide<K: Hash + Eq + Clone + Send + Sync + 'static>(
    map: &EntryMap<K>,
    key: &K,
    wide: &WideSet,
    change: impl FnOnce(&mut WideWriter<'_>) -> Result<bool, WorkerSet>,
    guard: &LocalGuard<'_>,
) -> Option<bool> {
    let mut writer = wide.write()?;
    Some(match change(&mut writer) {
        Ok(changed) => changed,
        Err(replacement) => {
            // The entry cannot change while we hold its wide set's lock.
            map.insert(key.clone(), replacement, guard);
            writer.retire();
            true
        }
    })
}
