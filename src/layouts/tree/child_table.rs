//! A node's children past a few: an open-addressed table of pointers to the children
//! themselves, the slot computed from the key.
//!
//! A lookup loads the slot's cache line, then reads the child it points to, which the walk
//! reads next anyway, to confirm the key; the child's first [`Keyed::LINES`] lines are asked
//! for together as soon as the slot names it, so that its key and what the walk reads after
//! it arrive in one wait. A walk can also ask for a slot ahead of the lookup ([`warm`]), so
//! that the slot's miss overlaps its work at the parent.
//!
//! A general concurrent map (papaya, which this replaces) keeps each entry behind the bucket's
//! pointer: a lookup there misses twice before it reaches the child, and in Dynamo's workload
//! (3,200 children under each shared prefix) that second miss was three quarters of the child
//! lookup's time.
//!
//! One writer at a time (the parent's lock); readers never lock. A slot goes from empty to a
//! child, from a child to a tombstone, and from a tombstone to a child, never back to empty:
//! a reader's probe, which stops at the first empty slot, passes every slot a child present
//! for the whole probe could be in. Growing, and clearing tombstones, build a new table that
//! the parent publishes in place of this one and retires through the epoch.
//!
//! Each slot's pointer carries [`TAG_BITS`] bits of the key's hash in its alignment bits, so a
//! probe dereferences a child whose key differs about once in `2^TAG_BITS` slots it passes.
//!
//! [`warm`]: ChildTable::warm

use crate::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::hash::{BuildHasher, Hash};

/// Hash bits kept in a slot's pointer (its alignment leaves them zero).
const TAG_BITS: u32 = 3;
const TAG_MASK: usize = (1 << TAG_BITS) - 1;

/// The smallest table: 8 cache lines of slots.
#[cfg(not(loom))]
pub(super) const MIN_SLOTS: usize = 64;
/// Small under loom, where every slot is a modelled atomic.
#[cfg(loom)]
pub(super) const MIN_SLOTS: usize = 4;

/// What a table points to: something that knows its own key.
pub(crate) trait Keyed {
    type Key: Copy + Eq + Hash;
    /// Cache lines from its start that a reader reads right after finding it (asked for
    /// together with the line of its key).
    const LINES: usize = 1;
    fn key(&self) -> Self::Key;
}

/// A slot's tombstone: no address, a nonzero tag.
fn tombstone<T>() -> *mut T {
    std::ptr::without_provenance_mut(1)
}

/// Children of one node, by key. Slots hold `*const T` tagged in their low bits.
pub(crate) struct ChildTable<T, S> {
    slots: Box<[AtomicPtr<T>]>,
    /// Children in the table (writer side).
    live: AtomicU32,
    /// Slots that are not empty: children and tombstones (writer side).
    used: AtomicU32,
    hasher: S,
}

impl<T, S> std::fmt::Debug for ChildTable<T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildTable")
            .field("slots", &self.slots.len())
            .field("live", &self.live.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<T: Keyed, S: BuildHasher + Clone> ChildTable<T, S> {
    /// A table of `children` (distinct keys), with room to grow.
    pub(crate) fn new(children: impl ExactSizeIterator<Item = *const T>, hasher: S) -> Self {
        const { assert!(align_of::<T>() > TAG_MASK) };
        let slots = (children.len() * 2).next_power_of_two().max(MIN_SLOTS);
        let table = Self {
            slots: (0..slots)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            live: AtomicU32::new(0),
            used: AtomicU32::new(0),
            hasher,
        };
        for child in children {
            // SAFETY: the caller passes children it has linked and that are live (I1-I3).
            let key = unsafe { &*child }.key();
            table.put(key, child);
        }
        table
    }

    /// How many children the table holds.
    pub(crate) fn len(&self) -> usize {
        self.live.load(Ordering::Relaxed) as usize
    }

    /// How many slots it has.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The first slot of `key`'s probe, and its tag.
    #[inline]
    fn home(&self, key: T::Key) -> (usize, usize) {
        let hash = self.hasher.hash_one(key);
        let mask = self.slots.len() - 1;
        (hash as usize & mask, (hash >> (64 - TAG_BITS)) as usize)
    }

    /// The child at `key`, lock-free.
    ///
    /// # Safety
    /// Every child in the table stays allocated while the caller is pinned: a child is
    /// tombstoned before it is retired (I3 in `node.rs`).
    #[inline]
    pub(crate) unsafe fn get(&self, key: T::Key) -> Option<*const T> {
        // SAFETY: the caller's contract.
        unsafe { self.find(key) }.map(|(_, child)| child)
    }

    /// Starts loading the first slot of `key`'s probe.
    #[inline]
    pub(crate) fn warm(&self, key: T::Key) {
        let (at, _) = self.home(key);
        crate::prefetch::prefetch(std::ptr::from_ref(&self.slots[at]));
    }

    /// The slot holding the child at `key`, and the child.
    ///
    /// # Safety
    /// As [`get`](Self::get).
    #[inline]
    unsafe fn find(&self, key: T::Key) -> Option<(usize, *const T)> {
        let (mut at, tag) = self.home(key);
        let mask = self.slots.len() - 1;
        for _ in 0..self.slots.len() {
            // Acquire pairs with the writer's release: the child's key is readable.
            let word = self.slots[at].load(Ordering::Acquire);
            if word.is_null() {
                return None;
            }
            if word.addr() & TAG_MASK == tag {
                let child = word.map_addr(|a| a & !TAG_MASK);
                if !child.is_null() {
                    crate::prefetch::prefetch_lines(child, T::LINES);
                    // SAFETY: a child pointer in a slot was linked when loaded; the caller's
                    // pin keeps it allocated (see above).
                    if unsafe { &*child }.key() == key {
                        return Some((at, child.cast_const()));
                    }
                }
            }
            at = (at + 1) & mask;
        }
        None
    }

    /// Whether `child` (absent) fits without growing the table or clearing its tombstones.
    pub(crate) fn has_room(&self) -> bool {
        let used = self.used.load(Ordering::Relaxed) as usize;
        (used + 1) * 4 <= self.slots.len() * 3
    }

    /// Adds `child`, whose key is absent. Caller: the writer, after [`has_room`](Self::has_room).
    pub(crate) fn insert(&self, child: *const T) {
        debug_assert!(self.has_room());
        // SAFETY: the writer passes a child it has just created and not yet linked.
        let key = unsafe { &*child }.key();
        self.put(key, child);
    }

    fn put(&self, key: T::Key, child: *const T) {
        let (mut at, tag) = self.home(key);
        let mask = self.slots.len() - 1;
        loop {
            let word = self.slots[at].load(Ordering::Relaxed);
            if word.addr() & !TAG_MASK == 0 {
                if word.is_null() {
                    self.used.fetch_add(1, Ordering::Relaxed);
                }
                let tagged = child.cast_mut().map_addr(|a| a | tag);
                // Release: a reader that loads the pointer sees the child's contents.
                self.slots[at].store(tagged, Ordering::Release);
                self.live.fetch_add(1, Ordering::Relaxed);
                return;
            }
            debug_assert!(
                // SAFETY: the writer's table holds only live children.
                unsafe { &*word.map_addr(|a| a & !TAG_MASK) }.key() != key,
                "a child is linked once"
            );
            at = (at + 1) & mask;
        }
    }

    /// Tombstones the child at `key`; `false` if there is none. Caller: the writer.
    pub(crate) fn remove(&self, key: T::Key) -> bool {
        self.remove_if(key, |_| true)
    }

    /// Tombstones the child at `key` if it is `child`; `false` otherwise. Caller: the writer.
    #[cfg_attr(not(any(feature = "positional", feature = "array")), allow(dead_code))]
    pub(crate) fn remove_exact(&self, key: T::Key, child: *const T) -> bool {
        self.remove_if(key, |found| found == child)
    }

    fn remove_if(&self, key: T::Key, this: impl FnOnce(*const T) -> bool) -> bool {
        // SAFETY: the writer's table holds only live children.
        let Some((at, found)) = (unsafe { self.find(key) }) else {
            return false;
        };
        if !this(found) {
            return false;
        }
        self.slots[at].store(tombstone(), Ordering::Release);
        self.live.fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// Every child, in no order.
    pub(crate) fn children(&self) -> impl Iterator<Item = *const T> + '_ {
        self.slots.iter().filter_map(|slot| {
            let child = slot.load(Ordering::Acquire).map_addr(|a| a & !TAG_MASK);
            (!child.is_null()).then_some(child.cast_const())
        })
    }

    /// The hasher, for the table that replaces this one.
    pub(crate) fn hasher(&self) -> &S {
        &self.hasher
    }
}

/// A child type and a hasher for the tests and the loom models (this table's and
/// `anchor_table.rs`'s).
#[cfg(test)]
pub(super) mod fixtures {
    use super::*;

    #[derive(Debug)]
    #[repr(align(8))]
    pub(in super::super) struct Child(pub(in super::super) u64);

    impl Keyed for Child {
        type Key = u64;
        fn key(&self) -> u64 {
            self.0
        }
    }

    /// A hasher that sends every key to the same few slots, so probes run long and wrap.
    #[derive(Clone, Default)]
    pub(in super::super) struct Crowded;

    impl BuildHasher for Crowded {
        type Hasher = CrowdedHasher;
        fn build_hasher(&self) -> CrowdedHasher {
            CrowdedHasher(0)
        }
    }

    pub(in super::super) struct CrowdedHasher(u64);

    impl std::hash::Hasher for CrowdedHasher {
        fn finish(&self) -> u64 {
            // The last two slots, whatever the size (the probe wraps); the tag from the key's
            // low bits.
            (u64::MAX - 1 + (self.0 & 1)) & !(7 << 61) | (self.0 << 61)
        }
        fn write(&mut self, bytes: &[u8]) {
            for &b in bytes {
                self.0 = self.0.wrapping_mul(31) + u64::from(b);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::fixtures::{Child, Crowded};
    use super::*;
    use std::collections::BTreeSet;

    /// Drives a table the way a node's writer does (growing by rebuilding) against a model.
    fn agrees_with_a_model<S: BuildHasher + Clone>(hasher: S, keys: u64, steps: usize) {
        let children: Vec<Box<Child>> = (0..keys).map(|k| Box::new(Child(k))).collect();
        let ptr = |k: u64| &*children[k as usize] as *const Child;
        let mut table = ChildTable::new(std::iter::empty(), hasher);
        let mut model = BTreeSet::new();
        let mut x = 5u64;
        for step in 0..steps {
            x = crate::mix::splitmix64(x);
            let k = x % keys;
            if model.remove(&k) {
                assert!(table.remove(k));
            } else {
                assert!(!table.remove(k));
                if !table.has_room() {
                    let live: Vec<*const Child> = table.children().collect();
                    table = ChildTable::new(live.into_iter(), table.hasher().clone());
                }
                table.insert(ptr(k));
                model.insert(k);
            }
            assert_eq!(table.len(), model.len(), "step {step}");
            for q in 0..keys {
                // SAFETY: every child outlives the table.
                let found = unsafe { table.get(q) };
                assert_eq!(found, model.contains(&q).then(|| ptr(q)), "step {step}");
            }
        }
        let mut listed: Vec<u64> = table.children().map(|c| unsafe { &*c }.0).collect();
        listed.sort_unstable();
        assert_eq!(listed, model.iter().copied().collect::<Vec<_>>());
    }

    #[test]
    fn a_table_agrees_with_a_model_through_inserts_removes_and_rebuilds() {
        agrees_with_a_model(foldhash::fast::RandomState::default(), 300, 5_000);
    }

    #[test]
    fn colliding_keys_probe_past_each_other_and_wrap_around() {
        agrees_with_a_model(Crowded, 40, 2_000);
    }

    #[test]
    fn tombstones_do_not_hide_later_children() {
        let children: Vec<Box<Child>> = (0..4).map(|k| Box::new(Child(k))).collect();
        let table = ChildTable::new(children.iter().map(|c| &**c as *const Child), Crowded);
        assert!(table.remove(0) && table.remove(1));
        for k in 2..4 {
            // SAFETY: every child outlives the table.
            assert!(unsafe { table.get(k) }.is_some());
        }
        table.insert(&*children[0]);
        // SAFETY: as above.
        assert!(unsafe { table.get(0) }.is_some() && unsafe { table.get(1) }.is_none());
        assert_eq!(table.capacity(), MIN_SLOTS);
    }
}

/// A reader looks children up while the writer tombstones one and puts another in its slot.
#[cfg(all(test, loom))]
mod loom_model {
    use super::fixtures::{Child, Crowded};
    use super::*;
    use loom::sync::Arc;

    #[test]
    fn loom_child_table_reader_against_a_slot_reused() {
        loom::model(|| {
            // Keys 0, 2 and 4 share their first slot: 2 sits after 0, and 4 takes 0's tombstone.
            let children: Arc<Vec<Box<Child>>> =
                Arc::new((0..5).map(|k| Box::new(Child(k))).collect());
            let ptr = |k: usize| &*children[k] as *const Child;
            let table = Arc::new(ChildTable::new([ptr(0), ptr(2)].into_iter(), Crowded));
            let writer = {
                let (table, children) = (table.clone(), children.clone());
                loom::thread::spawn(move || {
                    assert!(table.remove(0));
                    table.insert(&*children[4]);
                })
            };
            // SAFETY: every child outlives the table.
            let (stable, gone, new) = unsafe { (table.get(2), table.get(0), table.get(4)) };
            assert_eq!(
                stable,
                Some(ptr(2)),
                "a child present throughout is always found"
            );
            assert!(gone.is_none() || gone == Some(ptr(0)));
            assert!(new.is_none() || new == Some(ptr(4)));
            writer.join().unwrap();
            // SAFETY: as above.
            assert_eq!(unsafe { table.get(4) }, Some(ptr(4)));
        });
    }
}
