//! A checkpoint index in one [`ChildTable`]: the nodes themselves, by their anchor key, behind
//! one pointer that writers replace when the table grows or shrinks.
//!
//! A probe loads the slot's line, then the node it names, which the search reads next anyway
//! (its cover, its edge), to confirm the key: one miss of its own. A general concurrent map
//! keeps each entry behind the bucket's pointer, and papaya's probe waited on three lines (the
//! tag byte, the entry pointer, the entry's key; perf on cold 1,024-block chains) before it
//! reached the node.
//!
//! Writers take the table's lock (at most one insert or remove per checkpoint node, a few per
//! thousand blocks, so two writer threads rarely meet there); readers never lock. The table
//! under the lock is changed in place while it has room, as a node's children are; past that,
//! the writer builds one sized for the live entries (dropping tombstones), publishes it, and
//! retires the old one through the epoch. A reader still probing the old table finds what it
//! held when it was replaced: entries added since are the racing writes a query may miss or
//! see; an entry removed since names a node that is retired only after its removal, so the
//! reader's pin keeps it allocated (I3 in `node.rs`).

use super::child_table::{ChildTable, Keyed};
use super::node::retire;
use crate::sync::atomic::Ordering::{AcqRel, Acquire};
use crate::sync::{Mutex, lock};
use crossbeam_epoch::{Atomic, Guard, Owned, Shared};
use std::hash::BuildHasher;

/// Nodes of type `T` by key, read lock-free, written one writer at a time.
pub(crate) struct AnchorTable<T, S> {
    /// Null while empty.
    table: Atomic<ChildTable<T, S>>,
    /// Serializes writers; what it guards is the table the pointer names.
    writer: Mutex<()>,
    hasher: S,
}

impl<T, S> std::fmt::Debug for AnchorTable<T, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnchorTable").finish_non_exhaustive()
    }
}

impl<T: Keyed + Send + Sync, S: BuildHasher + Clone + Send + Sync> AnchorTable<T, S> {
    /// An empty table.
    pub(crate) fn new(hasher: S) -> Self {
        Self {
            table: Atomic::null(),
            writer: Mutex::new(()),
            hasher,
        }
    }

    fn current<'g>(&self, guard: &'g Guard) -> Option<&'g ChildTable<T, S>> {
        // SAFETY: a table is retired only after it is replaced here, and freed after every
        // reader pinned when it was replaced has unpinned; `guard` pins us.
        unsafe { self.table.load(Acquire, guard).as_ref() }
    }

    /// The entry under `key`, lock-free.
    ///
    /// # Safety
    /// An entry stays allocated until it has been removed and every reader pinned before its
    /// removal has unpinned (for nodes: they leave the index before they are retired, I3).
    #[inline]
    pub(crate) unsafe fn get(&self, key: T::Key, guard: &Guard) -> Option<*const T> {
        // SAFETY: the caller's contract is the table's.
        unsafe { self.current(guard)?.get(key) }
    }

    /// Entries held.
    pub(crate) fn len(&self, guard: &Guard) -> usize {
        self.current(guard).map_or(0, ChildTable::len)
    }

    /// Indexes `entry` under its key, keeping an entry already there (see
    /// [`Checkpoints::insert`](super::Checkpoints::insert)).
    ///
    /// # Safety
    /// `entry` is allocated and stays so until [`remove`](Self::remove)d, under the
    /// contract of [`get`](Self::get).
    pub(crate) unsafe fn insert(&self, entry: *const T, guard: &Guard) {
        let _writer = lock(&self.writer);
        // SAFETY: the caller's contract.
        let key = unsafe { &*entry }.key();
        match self.current(guard) {
            // SAFETY: every entry of the table is live (the callers' contract).
            Some(table) if unsafe { table.get(key) }.is_some() => {}
            Some(table) if table.has_room() => table.insert(entry),
            Some(table) => {
                let all: Vec<_> = table.children().chain([entry]).collect();
                self.publish(
                    Some(ChildTable::new(all.into_iter(), self.hasher.clone())),
                    guard,
                );
            }
            None => self.publish(
                Some(ChildTable::new([entry].into_iter(), self.hasher.clone())),
                guard,
            ),
        }
    }

    /// Drops the entry under `key` if it is `entry`.
    pub(crate) fn remove(&self, key: T::Key, entry: *const T, guard: &Guard) {
        let _writer = lock(&self.writer);
        let Some(table) = self.current(guard) else {
            return;
        };
        if !table.remove_exact(key, entry) {
            // Never indexed: its key was taken (see `insert`).
            return;
        }
        if table.len() == 0 {
            self.publish(None, guard);
        } else if table.len() * 8 < table.capacity() {
            // Mostly empty after a wave of removals: memory follows the live entries.
            let live: Vec<_> = table.children().collect();
            self.publish(
                Some(ChildTable::new(live.into_iter(), self.hasher.clone())),
                guard,
            );
        }
    }

    /// Replaces the table (the writer's lock held) and retires the old one.
    fn publish(&self, table: Option<ChildTable<T, S>>, guard: &Guard) {
        let new = table.map_or(Shared::null(), |t| Owned::new(t).into_shared(guard));
        retire(self.table.swap(new, AcqRel, guard), guard);
    }
}

impl<T, S> Drop for AnchorTable<T, S> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: nobody else can reach the table, which owns no entry.
        unsafe {
            let table = self.table.load(Acquire, crossbeam_epoch::unprotected());
            if !table.is_null() {
                drop(table.into_owned());
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::child_table::fixtures::{Child, Crowded};
    use super::*;

    #[test]
    fn a_table_grows_keeps_the_first_entry_of_a_key_and_shrinks_to_nothing() {
        let entries: Vec<Box<Child>> = (0..2_000).map(|k| Box::new(Child(k))).collect();
        let twin = Box::new(Child(7));
        let ptr = |k: u64| &*entries[k as usize] as *const Child;
        let table = AnchorTable::new(Crowded);
        let guard = crossbeam_epoch::pin();
        for k in 0..2_000 {
            // SAFETY: every entry outlives the table.
            unsafe { table.insert(ptr(k), &guard) };
        }
        assert_eq!(table.len(&guard), 2_000);
        // SAFETY: as above.
        assert!((0..2_000).all(|k| unsafe { table.get(k, &guard) } == Some(ptr(k))));
        // A key keeps the entry it has; a remove naming another entry leaves it.
        // SAFETY: as above.
        unsafe { table.insert(&*twin, &guard) };
        table.remove(7, &*twin, &guard);
        // SAFETY: as above.
        assert_eq!(unsafe { table.get(7, &guard) }, Some(ptr(7)));
        for k in 0..2_000 {
            table.remove(k, ptr(k), &guard);
            if k == 1_900 {
                // Shrunk on the way down, and every entry left still found.
                let slots = table.current(&guard).map(ChildTable::capacity);
                assert!(
                    slots.is_some_and(|s| s < 1024),
                    "{slots:?} slots for 99 entries"
                );
                // SAFETY: as above.
                assert!((1_901..2_000).all(|k| unsafe { table.get(k, &guard) } == Some(ptr(k))));
            }
        }
        assert_eq!(table.len(&guard), 0);
        assert!(
            table.current(&guard).is_none(),
            "an empty index holds no table"
        );
        // SAFETY: as above.
        assert_eq!(unsafe { table.get(7, &guard) }, None);
    }
}

/// A reader finds an entry present throughout while a writer's inserts outgrow the table and
/// replace it, and a remove tombstones another.
#[cfg(all(test, loom))]
mod loom_model {
    use super::super::child_table::fixtures::{Child, Crowded};
    use super::*;
    use loom::sync::Arc;

    #[test]
    fn loom_anchor_table_reader_against_a_replaced_table() {
        loom::model(|| {
            let entries: Arc<Vec<Box<Child>>> =
                Arc::new((0..5).map(|k| Box::new(Child(k))).collect());
            let ptr = |k: usize| &*entries[k] as *const Child;
            let table = Arc::new(AnchorTable::new(Crowded));
            {
                let guard = crossbeam_epoch::pin();
                for k in [0, 1] {
                    // SAFETY: every entry outlives the table.
                    unsafe { table.insert(ptr(k), &guard) };
                }
            }
            let writer = {
                let (table, entries) = (table.clone(), entries.clone());
                loom::thread::spawn(move || {
                    let guard = crossbeam_epoch::pin();
                    // The table of 4 slots has room for 3: the fourth entry replaces it.
                    for k in 2..5 {
                        // SAFETY: as above.
                        unsafe { table.insert(&*entries[k], &guard) };
                    }
                    table.remove(0, &*entries[0], &guard);
                })
            };
            let guard = crossbeam_epoch::pin();
            // SAFETY: as above.
            let (stable, gone, new) = unsafe {
                (
                    table.get(1, &guard),
                    table.get(0, &guard),
                    table.get(4, &guard),
                )
            };
            drop(guard);
            assert_eq!(stable, Some(ptr(1)), "an entry present throughout is found");
            assert!(gone.is_none() || gone == Some(ptr(0)));
            assert!(new.is_none() || new == Some(ptr(4)));
            writer.join().unwrap();
            let guard = crossbeam_epoch::pin();
            // SAFETY: as above.
            assert_eq!(unsafe { table.get(4, &guard) }, Some(ptr(4)));
            assert_eq!(unsafe { table.get(0, &guard) }, None);
        });
    }
}
