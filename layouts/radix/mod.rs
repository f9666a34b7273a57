//! The epoch-reclaimed radix tree: nodes keyed by local hash under their parent.
//!
//! Queries walk from the root, one child per query block, narrowing the active worker set at
//! each node ([`QueryCtx::walk`], in the core). Children and worker sets are read lock-free;
//! writers lock a parent before its child, replace sets and child arrays as a whole, and retire
//! what they replace through `crossbeam-epoch`. A node is unlinked as soon as it has neither
//! workers nor children, so memory follows the live state under any churn: nothing per worker
//! or per block outlives the blocks. The protocol and the invariants behind every `unsafe`
//! block are in `node.rs`.
//!
//! Unlike the map layouts, a query costs one pointer chase per matched block (no jumps), but
//! needs no canonical hashes and no hash-map probes.

mod node;

use node::{Node, NodeRef};

use crate::index_core::{Indexer, Key, Slot, Storage, Tree, Walk, WorkerSet};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::types::LocalHash;
use crossbeam_epoch::Guard;
#[cfg(not(loom))]
use std::cell::Cell;

/// Mutations between two pushes of this thread's retired objects to the global collector.
///
/// crossbeam-epoch collects at most a few hundred objects every 128 pins, and the core pins once
/// per event while a radix event retires an object per node it touches, so without this, garbage
/// outgrows collection under sustained writes (measured: 1.8 KB per held pair instead of ~0.2).
#[cfg(not(loom))]
const MUTATIONS_PER_FLUSH: u32 = 64;

#[cfg(not(loom))]
thread_local! {
    static MUTATIONS: Cell<u32> = const { Cell::new(0) };
}

/// Under loom the counter would survive from one explored execution to the next and make the
/// model nondeterministic; the flush only bounds garbage, it plays no part in correctness.
#[cfg(loom)]
fn mutated(_: &Guard) {}

/// Counts a mutation; every [`MUTATIONS_PER_FLUSH`], hands this thread's garbage to the collector
/// and lets it collect.
#[cfg(not(loom))]
fn mutated(guard: &Guard) {
    let n = MUTATIONS.with(|m| {
        let n = m.get() + 1;
        m.set(n % MUTATIONS_PER_FLUSH);
        n
    });
    if n == MUTATIONS_PER_FLUSH {
        guard.flush();
    }
}

/// The radix tree layout: nodes keyed by local hash under their parent, read lock-free and
/// reclaimed through `crossbeam-epoch`, pruned as soon as they are empty; queries walk it from
/// the root.
pub struct RadixTree {
    root: Node,
    /// Linked nodes, the root excluded.
    nodes: AtomicU64,
}

impl Default for RadixTree {
    fn default() -> Self {
        Self {
            root: Node::root(),
            nodes: AtomicU64::new(0),
        }
    }
}

impl core::fmt::Debug for RadixTree {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RadixTree")
            .field("nodes", &self.entries())
            .finish()
    }
}

impl Drop for RadixTree {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader or writer can reach the tree any more.
        unsafe { self.root.free_descendants() };
    }
}

impl Storage for RadixTree {
    type Search = Walk;
    type Guard<'a> = Guard;
    type Handle = NodeRef;

    fn guard(&self) -> Guard {
        crossbeam_epoch::pin()
    }

    unsafe fn add(
        &self,
        _: Key,
        local: LocalHash,
        parent: Option<NodeRef>,
        slot: Slot,
        guard: &Guard,
    ) -> (NodeRef, bool) {
        let parent = match parent {
            // SAFETY: the core passes the handle of its worker's reachable parent block, so the
            // worker is in that node (I1).
            Some(handle) => unsafe { handle.node() },
            None => &self.root,
        };
        let (child, new, created) = parent.add_to_child(local, slot, guard);
        mutated(guard);
        if created {
            self.nodes.fetch_add(1, Ordering::Relaxed);
        }
        (child.handle(), new)
    }

    unsafe fn remove(&self, _: Key, handle: NodeRef, slot: Slot, guard: &Guard) -> bool {
        // SAFETY: the core removes a slot only from the node it added it to and has not removed
        // it from since, so the worker is in the node (I1); `guard` pins the caller.
        let (removed, unlinked) = unsafe { handle.node().remove_from(slot, guard) };
        mutated(guard);
        if unlinked > 0 {
            self.nodes.fetch_sub(unlinked as u64, Ordering::Relaxed);
        }
        removed
    }

    fn entries(&self) -> usize {
        self.nodes.load(Ordering::Relaxed) as usize
    }
}

impl Tree for RadixTree {
    type Node = Node;

    #[inline]
    fn child<'g>(
        &'g self,
        parent: Option<&'g Node>,
        local: LocalHash,
        guard: &'g Guard,
    ) -> Option<&'g Node> {
        parent.unwrap_or(&self.root).child(local, guard)
    }

    #[inline]
    fn workers<'g>(&'g self, node: &'g Node, guard: &'g Guard) -> Option<&'g WorkerSet> {
        node.workers(guard)
    }
}

/// The exact index over the epoch-reclaimed radix tree.
///
/// ```
/// use flash_indexer::{Block, Event, KvIndex, LocalHash, RadixIndexer, SeqHash, Worker};
///
/// let index = RadixIndexer::default();
/// let w = Worker::new(0, 0);
/// let blocks: Vec<Block> = (0..10).map(|i| Block::new(LocalHash(i), SeqHash(100 + i))).collect();
/// index.apply(&Event::stored(w, 0, None, blocks)).unwrap();
/// assert_eq!(index.entries(), 10);
/// // Removing the blocks unlinks their nodes: memory follows the live state.
/// index.apply(&Event::removed(w, 1, (0..10).rev().map(|i| SeqHash(100 + i)).collect())).unwrap();
/// assert_eq!(index.entries(), 0);
/// ```
pub type RadixIndexer = Indexer<RadixTree>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_created_shared_and_unlinked() {
        let tree = RadixTree::default();
        let guard = tree.guard();
        let key = Key { pos: 0, canon: 0 };
        // SAFETY: I1 by hand: parents passed while their slot is in them; slots removed once.
        let (a, new) = unsafe { tree.add(key, LocalHash(1), None, 7, &guard) };
        assert!(new);
        // SAFETY: I1 by hand: parents passed while their slot is in them; slots removed once.
        let (a2, new) = unsafe { tree.add(key, LocalHash(1), None, 8, &guard) };
        assert!(new && a == a2, "one node per local hash under a parent");
        // SAFETY: I1 by hand: parents passed while their slot is in them; slots removed once.
        let (b, _) = unsafe { tree.add(key, LocalHash(2), Some(a), 7, &guard) };
        assert_eq!(tree.entries(), 2);
        assert!(
            tree.child(None, LocalHash(1), &guard)
                .is_some_and(|n| n.handle() == a)
        );
        // SAFETY: I1 by hand: parents passed while their slot is in them; slots removed once.
        assert!(unsafe { tree.remove(key, b, 7, &guard) });
        assert_eq!(tree.entries(), 1);
        // SAFETY: I1 by hand: parents passed while their slot is in them; slots removed once.
        assert!(unsafe { tree.remove(key, a, 7, &guard) });
        assert_eq!(tree.entries(), 1, "slot 8 keeps the node");
        // SAFETY: I1 by hand: parents passed while their slot is in them; slots removed once.
        assert!(unsafe { tree.remove(key, a, 8, &guard) });
        assert_eq!(tree.entries(), 0);
        assert!(tree.child(None, LocalHash(1), &guard).is_none());
    }
}
