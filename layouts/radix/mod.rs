//! The compressed, epoch-reclaimed radix tree: nodes are edges of consecutive blocks, and
//! what a worker holds of an edge is one cutoff.
//!
//! A stored run becomes, at most, one new node: its blocks' local hashes contiguous in one
//! edge. A run that follows existing edges raises the worker's cutoff once per edge; a removal
//! cuts it once per edge. So a 128-block store or a 64-block tail eviction costs a few node
//! operations, not 128 or 64 entry rewrites. Children hang at any offset of an edge, so a
//! store that leaves an edge midway adds a child there and never splits the edge: nodes never
//! move, and the core's handles (node, offset) stay valid (see `node.rs`).
//!
//! Queries walk from the root, comparing the query with each edge's local hashes contiguously
//! and narrowing the active workers once per node (the core's walk, `search.rs`). Covers and
//! children are read lock-free; writers lock a parent before its child, replace covers'
//! membership and child arrays as a whole, change cutoffs in place, and retire what they
//! replace through `crossbeam-epoch`. A node is unlinked as soon as it has neither workers nor
//! children, so memory follows the live state under any churn. The protocol and the
//! invariants behind every `unsafe` block are in `node.rs`.

mod node;

use node::{ChildKey, Node, Spot};

use crate::index_core::{Cover, Indexer, Key, Slot, Storage, Tree, Walk};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::types::{Block, LocalHash};
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

/// The compressed radix tree layout: edges of consecutive blocks with one cutoff per worker,
/// read lock-free and reclaimed through `crossbeam-epoch`, pruned as soon as they are empty;
/// queries walk it from the root.
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
    type Handle = Spot;
    const KEYED: bool = false;

    fn guard(&self) -> Guard {
        crossbeam_epoch::pin()
    }

    unsafe fn add(
        &self,
        key: Key,
        local: LocalHash,
        parent: Option<Spot>,
        slot: Slot,
        guard: &Guard,
    ) -> (Spot, bool) {
        let mut handle = Vec::with_capacity(1);
        let block = Block::new(local, crate::types::SeqHash(0));
        // SAFETY: the caller's contract, for a run of one block.
        let twins = unsafe { self.add_run(parent, &[key], &[block], slot, guard, &mut handle) };
        (handle[0], twins == 0)
    }

    unsafe fn remove(&self, key: Key, handle: Spot, slot: Slot, guard: &Guard) -> bool {
        // SAFETY: the caller's contract, for a run of one block.
        unsafe { self.remove_run(&[key], &[handle], slot, guard) };
        true
    }

    unsafe fn add_run(
        &self,
        parent: Option<Spot>,
        _: &[Key],
        blocks: &[Block],
        slot: Slot,
        guard: &Guard,
        handles: &mut Vec<Spot>,
    ) -> usize {
        let (mut node, mut off) = match parent {
            // SAFETY: the core passes the handle of its worker's reachable parent block, so the
            // worker is in that node (I1).
            Some(spot) => (unsafe { spot.node() }, spot.off + 1),
            None => (&self.root, 0),
        };
        // Blocks this worker already held at the front of the run (salted twins).
        let (mut twins, mut all_held) = (0usize, true);
        let mut held_before = |from: u32, to: u32, old: u32| {
            if all_held {
                let held = old.min(to).saturating_sub(from);
                twins += held as usize;
                all_held = held == to - from;
            }
        };
        handles.reserve(blocks.len());
        let mut rest = blocks;
        while let Some(first) = rest.first() {
            let (at, to) = if node.edge().get(off as usize) == Some(&first.local) {
                // On along an edge this worker is in (I1): it stays linked, one cutoff to raise.
                let to = off + follow(&node.edge()[off as usize..], rest);
                held_before(off, to, node.raise_own(slot, to, guard));
                (off, to)
            } else {
                let key = ChildKey {
                    at: off,
                    local: first.local,
                };
                let (child, to, old, created) = node.enter_child(
                    key,
                    slot,
                    |edge| follow(edge, rest),
                    || rest.iter().map(|b| b.local).collect(),
                    guard,
                );
                if created {
                    self.nodes.fetch_add(1, Ordering::Relaxed);
                }
                held_before(0, to, old);
                node = child;
                (0, to)
            };
            handles.extend((at..to).map(|o| Spot::new(node, o)));
            rest = &rest[(to - at) as usize..];
            off = to;
            mutated(guard);
        }
        twins
    }

    unsafe fn remove_run(&self, _: &[Key], handles: &[Spot], slot: Slot, guard: &Guard) {
        // One cut per node, the deepest first: a run's blocks in one node are consecutive.
        let mut end = handles.len();
        while end > 0 {
            let last = handles[end - 1];
            let mut start = end - 1;
            while start > 0 && handles[start - 1].same_node(last) {
                start -= 1;
            }
            debug_assert_eq!(last.off - handles[start].off, (end - 1 - start) as u32);
            // SAFETY: the core removes a slot only from the nodes it added it to and has not
            // removed it from since, so the worker is in the node, holding up to `last` (I1);
            // `guard` pins the caller.
            let unlinked = unsafe { last.node().cut(slot, handles[start].off, guard) };
            if unlinked > 0 {
                self.nodes.fetch_sub(unlinked as u64, Ordering::Relaxed);
            }
            mutated(guard);
            end = start;
        }
    }

    fn entries(&self) -> usize {
        self.nodes.load(Ordering::Relaxed) as usize
    }
}

/// How many of `blocks` follow `edge` from its start.
fn follow(edge: &[LocalHash], blocks: &[Block]) -> u32 {
    edge.iter()
        .zip(blocks)
        .take_while(|(local, block)| **local == block.local)
        .count() as u32
}

impl Tree for RadixTree {
    type Node = Node;

    #[inline]
    fn child<'g>(
        &'g self,
        parent: Option<&'g Node>,
        at: u32,
        local: LocalHash,
        guard: &'g Guard,
    ) -> Option<&'g Node> {
        parent
            .unwrap_or(&self.root)
            .child(ChildKey { at, local }, guard)
    }

    #[inline]
    fn edge<'g>(&'g self, node: &'g Node) -> &'g [LocalHash] {
        node.edge()
    }

    #[inline]
    fn cover<'g>(&'g self, node: &'g Node, guard: &'g Guard) -> Option<&'g Cover> {
        node.cover(guard)
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
/// // One run, one node: its ten blocks' local hashes in one edge.
/// assert_eq!(index.entries(), 1);
/// // Another worker leaves that edge after four blocks: a child hangs at offset 4.
/// let v = Worker::new(1, 0);
/// let fork: Vec<Block> = (0..4).chain([99]).map(|i| Block::new(LocalHash(i), SeqHash(200 + i))).collect();
/// index.apply(&Event::stored(v, 0, None, fork)).unwrap();
/// assert_eq!(index.entries(), 2);
/// assert_eq!(index.find_matches(&[LocalHash(0), LocalHash(1), LocalHash(2)]).len(), 2);
/// // Removing the blocks unlinks their nodes: memory follows the live state.
/// index.apply(&Event::removed(v, 1, vec![SeqHash(299), SeqHash(203), SeqHash(202), SeqHash(201), SeqHash(200)])).unwrap();
/// index.apply(&Event::removed(w, 1, (0..10).rev().map(|i| SeqHash(100 + i)).collect())).unwrap();
/// assert_eq!(index.entries(), 0);
/// ```
pub type RadixIndexer = Indexer<RadixTree>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::SeqHash;

    fn blocks(locals: &[u64]) -> Vec<Block> {
        locals
            .iter()
            .map(|&l| Block::new(LocalHash(l), SeqHash(l)))
            .collect()
    }

    fn keys(n: usize) -> Vec<Key> {
        vec![Key { pos: 0, canon: 0 }; n]
    }

    #[test]
    fn runs_share_edges_and_branch_midway_without_splitting() {
        let tree = RadixTree::default();
        let guard = tree.guard();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let run = blocks(&[1, 2, 3, 4]);
        // SAFETY: I1 by hand: parents passed while their slot is in them; slots removed once.
        let twins = unsafe { tree.add_run(None, &keys(4), &run, 7, &guard, &mut a) };
        assert_eq!((twins, tree.entries()), (0, 1), "one run, one node");
        let fork = blocks(&[1, 2, 9]);
        // SAFETY: as above.
        let twins = unsafe { tree.add_run(None, &keys(3), &fork, 8, &guard, &mut b) };
        assert_eq!(
            (twins, tree.entries()),
            (0, 2),
            "a child at offset 2, no split"
        );
        assert!(a[..2] == b[..2] && a[2] != b[2]);
        let node = tree.child(None, 0, LocalHash(1), &guard).expect("linked");
        assert_eq!(node.edge().len(), 4);
        let cover = tree.cover(node, &guard).expect("held");
        assert_eq!((cover.cutoff(7), cover.cutoff(8)), (4, 2));
        let child = tree
            .child(Some(node), 2, LocalHash(9), &guard)
            .expect("linked");
        assert_eq!(tree.cover(child, &guard).map(|c| c.cutoff(8)), Some(1));
        // The same blocks again under the same worker: all of them already held (twins).
        let mut again = Vec::new();
        // SAFETY: as above.
        let twins = unsafe { tree.add_run(None, &keys(4), &run, 7, &guard, &mut again) };
        assert_eq!((twins, again), (4, a.clone()));
        // A tail eviction moves the cutoff; the last worker out unlinks the nodes.
        // SAFETY: as above.
        unsafe { tree.remove_run(&keys(2), &a[2..], 7, &guard) };
        assert_eq!(tree.cover(node, &guard).map(|c| c.cutoff(7)), Some(2));
        // SAFETY: as above.
        unsafe { tree.remove_run(&keys(3), &b, 8, &guard) };
        assert_eq!(tree.entries(), 1, "worker 7 keeps the first node");
        // SAFETY: as above.
        unsafe { tree.remove_run(&keys(2), &a[..2], 7, &guard) };
        assert_eq!(tree.entries(), 0);
        assert!(tree.child(None, 0, LocalHash(1), &guard).is_none());
    }
}
