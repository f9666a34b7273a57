//! A slab's slots found by a key their values hold: a hash table of 4-byte slots, whose keys are
//! read from the slab when a probe needs one. A map from the key would keep a copy of it beside
//! each slot (24 bytes for a path, 16 for a sequence hash), and a hybrid table's writers probe
//! these tables at random for every block they store or evict (paper §6.21).

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use std::hash::{BuildHasher, Hash};

/// Slots by key; every method takes `key_of`, which reads the key of a filed slot.
#[derive(Debug, Default)]
pub(super) struct SlotsByKey {
    table: HashTable<u32>,
    hasher: RandomState,
}

impl SlotsByKey {
    pub(super) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The slot filed under `key`.
    pub(super) fn find<K: Hash + Eq>(&self, key: &K, key_of: impl Fn(u32) -> K) -> Option<u32> {
        let hash = self.hasher.hash_one(key);
        self.table.find(hash, |&slot| key_of(slot) == *key).copied()
    }

    /// Files `slot` under `key`, which no filed slot has.
    pub(super) fn insert<K: Hash>(&mut self, key: &K, slot: u32, key_of: impl Fn(u32) -> K) {
        let hash = self.hasher.hash_one(key);
        let hasher = &self.hasher;
        self.table
            .insert_unique(hash, slot, |&filed| hasher.hash_one(key_of(filed)));
    }

    /// Takes out `slot`, filed under `key`: a probe that compares slots and reads no key.
    pub(super) fn remove<K: Hash>(&mut self, key: &K, slot: u32) {
        let hash = self.hasher.hash_one(key);
        let found = self.table.find_entry(hash, |&filed| filed == slot);
        debug_assert!(found.is_ok(), "slot {slot} is not filed under its key");
        if let Ok(entry) = found {
            entry.remove();
        }
    }

    /// Every filed slot, in no order.
    pub(super) fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.table.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::SlotsByKey;

    #[test]
    fn finds_and_removes_slots_by_the_keys_their_values_hold() {
        let keys: Vec<u64> = (0..1000).map(|i| i * 7919).collect();
        let key_of = |slot: u32| keys[slot as usize];
        let mut slots = SlotsByKey::default();
        assert!(slots.is_empty());
        // Enough inserts to grow the table several times: its rehashes read keys through `key_of`.
        for (slot, key) in (0u32..).zip(&keys) {
            slots.insert(key, slot, key_of);
        }
        for (slot, key) in (0u32..).zip(&keys) {
            assert_eq!(slots.find(key, key_of), Some(slot));
        }
        assert_eq!(slots.find(&1, key_of), None);
        for (slot, key) in (0u32..).zip(&keys).filter(|(s, _)| s % 2 == 0) {
            slots.remove(key, slot);
        }
        let mut left: Vec<u32> = slots.slots().collect();
        left.sort_unstable();
        assert_eq!(left, (1..1000).step_by(2).collect::<Vec<u32>>());
        assert_eq!(slots.find(&keys[2], key_of), None);
        assert_eq!(slots.find(&keys[3], key_of), Some(3));
    }
}
