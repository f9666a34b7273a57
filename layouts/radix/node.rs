//! Tree nodes: what readers see lock-free, and the writer-side protocol that keeps them valid.
//!
//! # Memory safety
//!
//! Nodes, worker sets and child arrays are read through `crossbeam-epoch` guards and replaced,
//! never mutated in place (read-copy-update); large child sets are papaya maps, which are
//! concurrent themselves. Whatever is replaced or unlinked is retired through the epoch, so it is
//! freed only after every reader that could have loaded it has unpinned.
//!
//! Writers lock a node's `lock` to change it, always a parent before its child. A node is
//! unlinked from its parent (under both locks) only when it has no workers and no children;
//! then `dead` is set. From that follow the invariants the `// SAFETY:` comments name:
//! - **I1 (held nodes live)**: a node that has a worker is linked; the core keeps a node's
//!   pointer (a [`NodeRef`]) only while its worker is in the node, so the pointer is live.
//! - **I2 (parents outlive children)**: a node with a linked child is not unlinked, so a linked
//!   node's `parent` pointer is live.
//! - **I3 (pinned memory stays)**: a node reached while pinned (through its parent's children
//!   or a parent pointer) stays allocated until the pin ends, even if unlinked meanwhile;
//!   `dead` tells a writer that it was.

use crate::index_core::{Slot, WorkerSet};
use crate::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use crate::sync::{Mutex, lock};
use crate::types::LocalHash;
use crossbeam_epoch::{Atomic, Guard, Owned, Shared};
use std::ptr::NonNull;

/// A node's wide worker set is changed (in place, or replaced) only under the node's lock, so a
/// writer holding that lock never finds it retired.
const WIDE_UNDER_NODE_LOCK: &str = "a node's wide set is replaced only under the node's lock";

/// Children beyond this many move from a sorted array to a concurrent map: copying the array
/// on every insert is quadratic at a fan-out of thousands (the last shared block of a system
/// prompt, under which every conversation forks).
const SMALL: usize = 16;

/// A node of the radix tree: one block position of one prefix, and the workers holding it.
///
/// Opaque: layouts hand nodes to the core's walk, which only passes them back.
pub struct Node {
    /// Its key in the parent's children.
    local: LocalHash,
    parent: *const Node,
    workers: Atomic<WorkerSet>,
    /// Null when there are none.
    children: Atomic<Children>,
    /// Writers' lock over the node; what it guards is whether the node is unlinked.
    unlinked: Mutex<bool>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

/// A node's children. Changed only under the node's lock; read lock-free.
enum Children {
    /// Up to [`SMALL`] children sorted by local hash, replaced as a whole on every change.
    Small(Box<[(LocalHash, NodePtr)]>),
    /// More: a concurrent map changed in place. Never empty: an emptied map is replaced by null.
    Large(papaya::HashMap<LocalHash, NodePtr, foldhash::fast::RandomState>),
}

/// A child pointer stored in [`Children`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct NodePtr(*const Node);

// SAFETY: the pointee is shared between threads under the protocol of the module docs.
unsafe impl Send for NodePtr {}
// SAFETY: as above.
unsafe impl Sync for NodePtr {}

// SAFETY: the raw pointers are shared read-only between threads under the protocol of the
// module docs (I1-I3); every mutation goes through atomics, papaya, or the node's lock.
unsafe impl Send for Node {}
// SAFETY: as above.
unsafe impl Sync for Node {}

/// A node pointer the core keeps for a reachable block (the layout's `Handle`). Only
/// [`Node::handle`] makes one, so it never dangles while I1 holds, and it is never null.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeRef(NonNull<Node>);

// SAFETY: a `NodeRef` is only dereferenced under I1 (its worker is in the node), on whichever
// thread applies that worker's events.
unsafe impl Send for NodeRef {}
// SAFETY: as above; it is never dereferenced through a shared reference concurrently with a free.
unsafe impl Sync for NodeRef {}

impl NodeRef {
    /// # Safety
    /// The caller's worker is in the node (I1).
    pub(super) unsafe fn node<'a>(self) -> &'a Node {
        // SAFETY: the caller upholds I1, so the node is linked and allocated.
        unsafe { self.0.as_ref() }
    }
}

impl Children {
    fn get(&self, local: LocalHash) -> Option<*const Node> {
        match self {
            Children::Small(entries) => {
                let at = entries.binary_search_by_key(&local, |(l, _)| *l).ok()?;
                Some(entries[at].1.0)
            }
            Children::Large(map) => map.pin().get(&local).map(|p| p.0),
        }
    }

    fn pointers(&self) -> Vec<*const Node> {
        match self {
            Children::Small(entries) => entries.iter().map(|(_, p)| p.0).collect(),
            Children::Large(map) => map.pin().values().map(|p| p.0).collect(),
        }
    }
}

impl Node {
    pub(super) fn root() -> Self {
        Self::new(LocalHash(0), std::ptr::null())
    }

    fn new(local: LocalHash, parent: *const Node) -> Self {
        Self {
            local,
            parent,
            workers: Atomic::null(),
            children: Atomic::null(),
            unlinked: Mutex::new(false),
        }
    }

    pub(super) fn is_root(&self) -> bool {
        self.parent.is_null()
    }

    /// The handle the layout gives the core for this node.
    pub(crate) fn handle(&self) -> NodeRef {
        NodeRef(NonNull::from(self))
    }

    fn children<'g>(&self, guard: &'g Guard) -> Option<&'g Children> {
        // SAFETY: children are only freed through the epoch after being replaced (I3).
        unsafe { self.children.load(Acquire, guard).as_ref() }
    }

    /// The child with local hash `local`, lock-free.
    pub(super) fn child<'g>(&self, local: LocalHash, guard: &'g Guard) -> Option<&'g Node> {
        let ptr = self.children(guard)?.get(local)?;
        // SAFETY: the pointer was linked when we loaded it; I3 keeps it allocated.
        Some(unsafe { &*ptr })
    }

    /// The node's workers, lock-free.
    pub(super) fn workers<'g>(&self, guard: &'g Guard) -> Option<&'g WorkerSet> {
        // SAFETY: worker sets are only freed through the epoch after being replaced (I3).
        unsafe { self.workers.load(Acquire, guard).as_ref() }
    }

    /// Replaces the worker set. Caller holds `self.unlinked`.
    fn set_workers(&self, set: Option<WorkerSet>, guard: &Guard) {
        let new = set.map_or(Shared::null(), |s| Owned::new(s).into_shared(guard));
        self.retire(self.workers.swap(new, AcqRel, guard), guard);
    }

    /// Replaces the children. Caller holds `self.unlinked`.
    fn set_children(&self, children: Option<Children>, guard: &Guard) {
        let new = children.map_or(Shared::null(), |c| Owned::new(c).into_shared(guard));
        self.retire(self.children.swap(new, AcqRel, guard), guard);
    }

    fn retire<T>(&self, old: Shared<'_, T>, guard: &Guard) {
        if !old.is_null() {
            // SAFETY: `old` was just swapped out of the only place that published it; readers
            // that loaded it are pinned, and the epoch frees it after they unpin.
            unsafe { guard.defer_destroy(old) };
        }
    }

    /// Links `child` under `local`. Caller holds `self.unlinked`.
    fn link(&self, local: LocalHash, child: *const Node, guard: &Guard) {
        match self.children(guard) {
            Some(Children::Large(map)) => {
                map.pin().insert(local, NodePtr(child));
            }
            Some(Children::Small(entries)) if entries.len() >= SMALL => {
                let map = papaya::HashMap::with_capacity_and_hasher(2 * SMALL, Default::default());
                {
                    let pinned = map.pin();
                    for (l, p) in entries.iter() {
                        pinned.insert(*l, *p);
                    }
                    pinned.insert(local, NodePtr(child));
                }
                self.set_children(Some(Children::Large(map)), guard);
            }
            small => {
                let mut entries = match small {
                    Some(Children::Small(entries)) => entries.to_vec(),
                    _ => Vec::with_capacity(1),
                };
                let at = entries
                    .binary_search_by_key(&local, |(l, _)| *l)
                    .unwrap_err();
                entries.insert(at, (local, NodePtr(child)));
                self.set_children(Some(Children::Small(entries.into_boxed_slice())), guard);
            }
        }
    }

    /// Unlinks `child` (key `local`). Caller holds `self.unlinked`.
    fn unlink(&self, local: LocalHash, guard: &Guard) {
        match self.children(guard) {
            Some(Children::Large(map)) => {
                let pinned = map.pin();
                pinned.remove(&local);
                if pinned.is_empty() {
                    drop(pinned);
                    self.set_children(None, guard);
                }
            }
            Some(Children::Small(entries)) => {
                let rest: Vec<_> = entries
                    .iter()
                    .filter(|(l, _)| *l != local)
                    .copied()
                    .collect();
                let rest = (!rest.is_empty()).then(|| Children::Small(rest.into_boxed_slice()));
                self.set_children(rest, guard);
            }
            None => {}
        }
    }

    /// Adds `slot` to the child `local` of `self`, creating it. Returns the child, whether
    /// `slot` was new there, and whether a node was created.
    pub(super) fn add_to_child<'g>(
        &'g self,
        local: LocalHash,
        slot: Slot,
        guard: &'g Guard,
    ) -> (&'g Node, bool, bool) {
        let parent_state = lock(&self.unlinked);
        debug_assert!(
            !*parent_state,
            "a node with a worker's reachable child is linked (I1, I2)"
        );
        let (child, created) = match self.child(local, guard) {
            Some(child) => (child, false),
            None => {
                let child = Box::into_raw(Box::new(Node::new(local, self)));
                self.link(local, child, guard);
                // SAFETY: just allocated and linked; it stays allocated while we are pinned (I3).
                (unsafe { &*child }, true)
            }
        };
        let child_state = lock(&child.unlinked);
        // Linked under our lock, so not dead: unlinking needs the parent's lock, which we hold.
        debug_assert!(!*child_state);
        let new = match child.workers(guard) {
            None => {
                child.set_workers(Some(WorkerSet::One(slot)), guard);
                true
            }
            Some(set) => match set.wide() {
                Some(wide) => {
                    let mut writer = wide.write().expect(WIDE_UNDER_NODE_LOCK);
                    match writer.insert(slot) {
                        Ok(added) => added,
                        Err(wider) => {
                            child.set_workers(Some(wider), guard);
                            writer.retire();
                            true
                        }
                    }
                }
                None => match set.with(slot) {
                    Some(grown) => {
                        child.set_workers(Some(grown), guard);
                        true
                    }
                    None => false,
                },
            },
        };
        drop(child_state);
        drop(parent_state);
        (child, new, created)
    }

    /// Removes `slot` from `self`, then unlinks `self` and its ancestors while they have
    /// neither workers nor children. Returns whether `slot` was there and how many nodes were
    /// unlinked.
    ///
    /// # Safety
    /// The caller's worker (`slot`) is in `self` (I1) and the caller is pinned by `guard`.
    pub(super) unsafe fn remove_from(&self, slot: Slot, guard: &Guard) -> (bool, usize) {
        // SAFETY: I2: `self` is linked (it has our worker), so its parent is live.
        let parent = unsafe { &*self.parent };
        let parent_state = lock(&parent.unlinked);
        let state = lock(&self.unlinked);
        let Some(set) = self.workers(guard) else {
            return (false, 0);
        };
        let empty = match set.wide() {
            Some(wide) => {
                let mut writer = wide.write().expect(WIDE_UNDER_NODE_LOCK);
                match writer.remove(slot) {
                    Ok(false) => return (false, 0),
                    Ok(true) => false,
                    Err(narrow) => {
                        self.set_workers(Some(narrow), guard);
                        writer.retire();
                        false
                    }
                }
            }
            None => {
                let Ok(rest) = set.without(slot) else {
                    return (false, 0);
                };
                let empty = rest.is_none();
                self.set_workers(rest, guard);
                empty
            }
        };
        drop(state);
        drop(parent_state);
        let unlinked = if empty { self.prune(guard) } else { 0 };
        (true, unlinked)
    }

    /// Unlinks `self`, then its ancestors, while they have neither workers nor children.
    fn prune(&self, guard: &Guard) -> usize {
        let mut node = self;
        let mut unlinked = 0;
        while !node.is_root() {
            // SAFETY: I3: `node` was reached while pinned; its parent pointer was set at
            // creation and the parent stays allocated while we are pinned.
            let parent = unsafe { &*node.parent };
            let parent_state = lock(&parent.unlinked);
            let mut state = lock(&node.unlinked);
            if *state || node.workers(guard).is_some() || node.children(guard).is_some() {
                return unlinked; // Already unlinked by another writer, or needed again.
            }
            parent.unlink(node.local, guard);
            *state = true;
            drop(state);
            drop(parent_state);
            // SAFETY: unlinked from the only place that published it; readers and writers
            // that reached it are pinned (I3) and see `dead`; freed after they unpin.
            unsafe { guard.defer_destroy(Shared::from(node as *const Node)) };
            unlinked += 1;
            node = parent;
        }
        unlinked
    }

    /// Frees every node below `self` (not `self`), iteratively: chains are 100,000 deep.
    ///
    /// # Safety
    /// No other thread can reach the tree (the caller has it by `&mut`).
    pub(super) unsafe fn free_descendants(&mut self) {
        // SAFETY: exclusive access, so nothing is concurrently retired or read.
        let guard = unsafe { crossbeam_epoch::unprotected() };
        let mut stack = self
            .children(guard)
            .map_or_else(Vec::new, Children::pointers);
        while let Some(ptr) = stack.pop() {
            // SAFETY: every linked node was allocated by `Box::new` in `add_to_child` and is
            // linked from exactly one parent, so it is freed exactly once.
            let node = unsafe { Box::from_raw(ptr as *mut Node) };
            if let Some(children) = node.children(guard) {
                stack.extend(children.pointers());
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // SAFETY: a node is dropped by `free_descendants` (exclusive access) or by the epoch
        // after no reader can reach it; its own set and children are reachable only from it.
        unsafe {
            let guard = crossbeam_epoch::unprotected();
            let workers = self.workers.load(Relaxed, guard);
            if !workers.is_null() {
                drop(workers.into_owned());
            }
            let children = self.children.load(Relaxed, guard);
            if !children.is_null() {
                drop(children.into_owned());
            }
        }
    }
}
