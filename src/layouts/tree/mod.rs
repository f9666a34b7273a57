//! The compressed, epoch-reclaimed edge tree under every layout: nodes are edges of consecutive
//! blocks, and what a worker holds of an edge is one cutoff. The layouts differ in how a query
//! reaches a node: the radix tree only from the root, the positional and array layouts also
//! by key, at checkpoints.
//!
//! A stored run becomes a few new nodes at most: its blocks' local hashes contiguous in each
//! edge. A run that follows existing edges raises the worker's cutoff once per edge; a removal
//! cuts it once per edge. So a 128-block store or a 64-block tail eviction costs a few node
//! operations, not 128 or 64 entry rewrites. Children hang at any offset of an edge, so a
//! store that leaves an edge midway adds a child there and never splits the edge: nodes never
//! move, and the core's handles (node, offset) stay valid (see `node.rs`).
//!
//! # Checkpoints
//!
//! A layout with a checkpoint index ([`Checkpoints`] with a nonzero `STRIDE`) indexes the block
//! at each checkpoint position `c * STRIDE` of any chain under its key (position, canonical
//! hash of the prefix): an [`Anchor`] in the node whose edge holds it names the node and the
//! block's offset there. A query then lands on any checkpoint of its own chain with one probe,
//! without walking there, in the middle of an edge as well as at its start: the core's jump
//! search with binary scan-back runs over checkpoints, and the tree walk finishes the last few
//! blocks. Keys exist only at checkpoints (one index entry per distinct prefix there, whatever
//! the number of workers holding it), and between them the query's local hashes are compared
//! with an edge's contiguously.
//!
//! Edges are not cut at checkpoints: the keyed layouts' trees are the radix layout's, node for
//! node, so a walk crosses no more nodes in them. Cutting every edge at each checkpoint, as
//! the keyed layouts did before, made the node at a checkpoint start there and the index hold
//! the nodes themselves, and cost the trace's deep queries a node per 128 blocks (paper §6.14).
//!
//! A node's anchors enter the index when it is created, under its parent's lock, and leave it
//! when it is unlinked, under the same lock and before it is retired. So an anchor found in
//! the index names a node that was linked when it was found, and that stays allocated while the
//! finder is pinned (I3 in `node.rs`).
//!
//! Covers and children are read lock-free; writers lock a parent before its child, replace
//! covers' membership and child arrays as a whole, change cutoffs in place, and retire what they
//! replace through `crossbeam-epoch`. A node is unlinked as soon as it has neither workers nor
//! children, so memory follows the live state under any churn. The protocol and the
//! invariants behind every `unsafe` block are in `node.rs`.

#[cfg_attr(not(any(feature = "positional", feature = "array")), allow(dead_code))]
mod anchor_table;
pub(crate) mod child_table;
pub(crate) mod graveyard;
mod node;

#[cfg(any(feature = "positional", feature = "array"))]
pub(crate) use anchor_table::AnchorTable;
pub(crate) use node::Anchor;
use node::ChildKey;
pub(crate) use node::{Node, Spot};

use crate::index_core::{Checkpointed, Cover, Key, RunKeys, Search, Slot, Storage, Tree};
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::types::LocalHash;
use crossbeam_epoch::Guard;
#[cfg(not(loom))]
use std::cell::Cell;

/// Mutations between two pushes of this thread's retired objects to the global collector.
///
/// crossbeam-epoch collects at most a few hundred objects every 128 pins, and the core pins once
/// per event while a tree event retires an object per node it touches, so without this, garbage
/// outgrows collection under sustained writes (paper §4).
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
        graveyard::flush(guard);
    }
}

/// Where a tree's checkpoints are found by key.
///
/// The index holds pointers to the nodes' [`Anchor`]s only; the tree decides what enters and
/// leaves it (see the module docs), so an implementation is a concurrent map and nothing more.
#[allow(unreachable_pub)] // Sealed: public in a private module, as the seam.
pub trait Checkpoints: Default + Send + Sync + 'static {
    /// The core's search over a tree with this index.
    type Search: Search;

    /// Positions between checkpoints: a multiple of the canonical roll's lanes, so that a
    /// query's rolled marks land on every checkpoint; 0 for a tree without an index.
    const STRIDE: u32;

    /// Indexes `anchor` under its key. Keeps the anchor already there if any: two live
    /// prefixes with one canonical hash (see `canon.rs` for how unlikely) leave the second
    /// unindexed, never a pointer that outlives its node.
    fn insert(&self, anchor: &Anchor, guard: &Guard);

    /// Drops `anchor`'s key from the index if it names `anchor`.
    fn remove(&self, anchor: &Anchor, guard: &Guard);

    /// The anchor indexed under `key`. The index is read under the same epoch pin as the nodes.
    fn get(&self, key: Key, guard: &Guard) -> Option<*const Anchor>;
}

/// No index: the radix tree, reached from its root only.
#[derive(Debug, Default)]
#[cfg_attr(not(feature = "radix"), allow(dead_code))]
#[allow(unreachable_pub)] // Named by a public layout's sealed impls.
pub struct Unindexed;

impl Checkpoints for Unindexed {
    type Search = crate::index_core::Walk;
    const STRIDE: u32 = 0;

    fn insert(&self, _: &Anchor, _: &Guard) {
        unreachable!("a tree without checkpoints has no anchor")
    }

    fn remove(&self, _: &Anchor, _: &Guard) {}

    fn get(&self, _: Key, _: &Guard) -> Option<*const Anchor> {
        None
    }
}

/// The tree itself, with its checkpoint index `I`; the public layouts wrap one ([`AsTree`]).
#[allow(unreachable_pub)] // Named by a public layout's sealed impls.
pub struct EdgeTree<I> {
    /// Boxed, so that it stays where its children's parent pointers point when the tree (and
    /// the index that owns it) is moved.
    root: Box<Node>,
    /// Linked nodes, the root excluded.
    nodes: AtomicU64,
    index: I,
}

impl<I> core::fmt::Debug for EdgeTree<I> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("EdgeTree")
            .field("nodes", &self.nodes())
            .finish_non_exhaustive()
    }
}

impl<I: Default> Default for EdgeTree<I> {
    fn default() -> Self {
        Self {
            root: Box::new(Node::root()),
            nodes: AtomicU64::new(0),
            index: I::default(),
        }
    }
}

impl<I> Drop for EdgeTree<I> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader or writer can reach the tree any more.
        unsafe { self.root.free_descendants() };
    }
}

impl<I> EdgeTree<I> {
    /// Linked nodes.
    pub(crate) fn nodes(&self) -> usize {
        self.nodes.load(Ordering::Relaxed) as usize
    }

    /// The checkpoint index.
    #[cfg_attr(not(any(feature = "positional", feature = "array")), allow(dead_code))]
    pub(crate) fn index(&self) -> &I {
        &self.index
    }
}

/// A public layout that is an edge tree: the seam's impls below serve all of them.
#[allow(unreachable_pub)] // Sealed: public in a private module, as the seam.
pub trait AsTree: Default + Send + Sync + 'static {
    /// Where checkpoint nodes are indexed.
    type Index: Checkpoints;

    /// The tree.
    fn tree(&self) -> &EdgeTree<Self::Index>;
}

impl<T: AsTree> Storage for T {
    type Search = <T::Index as Checkpoints>::Search;
    type Guard<'a> = Guard;
    type Handle = Spot;
    const KEYED: bool = T::Index::STRIDE > 0;

    #[inline]
    fn guard(&self) -> Guard {
        crossbeam_epoch::pin()
    }

    unsafe fn add(
        &self,
        key: Key,
        local: LocalHash,
        parent: Option<Spot>,
        slot: Slot,
        guard: &Self::Guard<'_>,
    ) -> (Spot, bool) {
        let mut handle = Vec::with_capacity(1);
        // SAFETY: the caller's contract, for a run of one block.
        let keys = RunKeys::listed(core::slice::from_ref(&key));
        let twins = unsafe { self.add_run(parent, &keys, &[local], slot, guard, &mut handle) };
        (handle[0], twins == 0)
    }

    unsafe fn stretch_locals<'g>(
        &'g self,
        first: Spot,
        n: u32,
        _: &'g Self::Guard<'_>,
    ) -> &'g [LocalHash] {
        // SAFETY: the caller's worker is in the node (I1), so it is linked and allocated while
        // the guard is.
        let node = unsafe { first.node() };
        &node.edge()[first.off as usize..(first.off + n) as usize]
    }

    unsafe fn add_run(
        &self,
        parent: Option<Spot>,
        keys: &RunKeys<'_>,
        locals: &[LocalHash],
        slot: Slot,
        guard: &Self::Guard<'_>,
        handles: &mut Vec<Spot>,
    ) -> usize {
        let tree = self.tree();
        let (mut node, mut off) = match parent {
            // SAFETY: the core passes the handle of its worker's reachable parent block, so the
            // worker is in that node (I1).
            Some(spot) => (unsafe { spot.node() }, spot.off + 1),
            None => (&*tree.root, 0),
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
        handles.reserve(locals.len());
        let mut rest = locals;
        while let Some(first) = rest.first() {
            let edge = node.edge();
            // At the end of the edge (so holding all of it), the worker may grow it in place.
            let appended = match T::Index::STRIDE == 0 && off as usize == edge.len() {
                true => node.append(slot, rest, guard),
                false => 0,
            };
            let (at, to) = if appended > 0 {
                held_before(off, off + appended, off);
                (off, off + appended)
            } else if edge.get(off as usize) == Some(first) {
                // On along an edge this worker is in (I1): it stays linked, one cutoff to raise.
                let to = off + follow(&edge[off as usize..], rest);
                held_before(off, to, node.raise_own(slot, to, guard));
                (off, to)
            } else {
                let key = ChildKey {
                    at: off,
                    local: *first,
                };
                // A new edge takes the rest of the run, and is indexed under the key of each
                // checkpoint it holds.
                let first = locals.len() - rest.len();
                let (child, to, old, created) = node.enter_child(
                    key,
                    slot,
                    |edge| follow(edge, rest),
                    rest,
                    // Only a tree without checkpoints appends (an appended block could need an
                    // anchor), so only its edges keep room to grow.
                    T::Index::STRIDE == 0,
                    || checkpoints(T::Index::STRIDE, keys, first, rest.len()),
                    |child| {
                        for anchor in child.anchors() {
                            tree.index.insert(anchor, guard);
                        }
                    },
                    guard,
                );
                if created {
                    tree.nodes.fetch_add(1, Ordering::Relaxed);
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

    unsafe fn remove_stretch(&self, first: Spot, n: u32, slot: Slot, guard: &Self::Guard<'_>) {
        debug_assert!(n > 0, "a stretch has blocks");
        let tree = self.tree();
        let unindex = |node: &Node| {
            for anchor in node.anchors() {
                tree.index.remove(anchor, guard);
            }
        };
        // SAFETY: the core removes a slot only from the nodes it added it to and has not
        // removed it from since, so the worker is in the node, holding up to the stretch's last
        // block and nothing below it (I1); `guard` pins the caller.
        let unlinked = unsafe { first.node().cut(slot, first.off, unindex, guard) };
        if unlinked > 0 {
            tree.nodes.fetch_sub(unlinked as u64, Ordering::Relaxed);
        }
        mutated(guard);
    }

    fn entries(&self) -> usize {
        self.tree().nodes()
    }

    fn flush_retired(&self) {
        graveyard::flush(&crossbeam_epoch::pin());
    }
}

impl<T: AsTree> Tree for T {
    type Node = Node;

    #[inline]
    fn child<'g>(
        &'g self,
        parent: Option<&'g Node>,
        at: u32,
        local: LocalHash,
        guard: &'g Self::Guard<'_>,
    ) -> Option<&'g Node> {
        parent
            .unwrap_or(&*self.tree().root)
            .child(ChildKey { at, local }, guard)
    }

    #[inline]
    fn warm_child(&self, parent: &Node, at: u32, local: LocalHash, guard: &Self::Guard<'_>) {
        parent.warm_child(ChildKey { at, local }, guard);
    }

    #[inline]
    fn edge<'g>(&'g self, node: &'g Node) -> &'g [LocalHash] {
        node.edge()
    }

    #[inline]
    fn cover<'g>(&'g self, node: &'g Node, guard: &'g Self::Guard<'_>) -> Option<&'g Cover> {
        node.cover(guard)
    }
}

impl<T: AsTree> Checkpointed for T {
    const STRIDE: u32 = T::Index::STRIDE;

    #[inline]
    fn checkpoint<'g>(&'g self, key: Key, guard: &'g Self::Guard<'_>) -> Option<(&'g Node, u32)> {
        let anchor = self.tree().index.get(key, guard)?;
        // SAFETY: an anchor is in the index only while its node is linked, and leaves it
        // before the node is retired (module docs); we are pinned by `guard`, so the node and
        // the anchor in its allocation stay allocated (I3).
        Some(unsafe { (*anchor).node() })
    }
}

/// The checkpoints among the `len` blocks of `keys` from block `first`, every `stride`
/// positions (none when `stride` is 0): each one's offset from `first`, and its key.
fn checkpoints<'k>(
    stride: u32,
    keys: &'k RunKeys<'_>,
    first: usize,
    len: usize,
) -> impl ExactSizeIterator<Item = (u32, Key)> + 'k {
    let (start, len) = (keys.pos(first), len as u32);
    // The first checkpoint at or after `start`, as an offset from it.
    let (lead, count) = match stride {
        0 => (0, 0),
        stride => {
            let lead = (stride - start % stride) % stride;
            (lead, len.saturating_sub(lead).div_ceil(stride))
        }
    };
    (0..count).map(move |k| {
        let off = lead + k * stride;
        let key = keys.key(first + off as usize);
        debug_assert_eq!(key.pos, start + off, "a run's positions are consecutive");
        (off, key)
    })
}

/// How many of `locals` follow `edge` from its start.
fn follow(edge: &[LocalHash], locals: &[LocalHash]) -> u32 {
    edge.iter()
        .zip(locals)
        .take_while(|(edge, local)| edge == local)
        .count() as u32
}

#[cfg(all(test, not(loom), feature = "radix"))]
mod tests {
    use super::node::APPEND_ROOM;
    use crate::{Block, Event, KvIndex, LocalHash, RadixIndexer, SeqHash, Worker};

    fn block(i: u64) -> Block {
        Block::new(LocalHash(i), SeqHash(100 + i))
    }

    /// Stores block `i` of the chain 0, 1, ... for `w`, after block `i - 1`.
    fn decode(index: &RadixIndexer, w: Worker, i: u64) {
        let parent = i.checked_sub(1).map(|p| SeqHash(100 + p));
        index
            .apply(&Event::stored(w, i, parent, vec![block(i)]))
            .unwrap();
    }

    fn chain(n: u64) -> Vec<LocalHash> {
        (0..n).map(LocalHash).collect()
    }

    #[test]
    fn a_decode_block_grows_the_edge_its_worker_holds_alone() {
        let index = RadixIndexer::default();
        let w = Worker::new(1, 0);
        index
            .apply(&Event::stored(w, 0, None, vec![block(0), block(1)]))
            .unwrap();
        decode(&index, w, 2);
        decode(&index, w, 3);
        assert_eq!(index.entries(), 1, "both appended to the first edge");
        assert_eq!(index.find_matches(&chain(4)).get(w), Some(4));
        // The tail evicted and stored again: the cutoff moves, the edge stays.
        index
            .apply(&Event::removed(w, 4, vec![SeqHash(103)]))
            .unwrap();
        assert_eq!(index.find_matches(&chain(4)).get(w), Some(3));
        decode(&index, w, 3);
        assert_eq!(index.find_matches(&chain(4)).get(w), Some(4));
        assert_eq!(index.entries(), 1);
    }

    #[test]
    fn an_edge_two_workers_hold_does_not_grow() {
        let index = RadixIndexer::default();
        let (a, b) = (Worker::new(1, 0), Worker::new(2, 0));
        for w in [a, b] {
            index
                .apply(&Event::stored(w, 0, None, vec![block(0), block(1)]))
                .unwrap();
        }
        decode(&index, a, 2);
        assert_eq!(index.entries(), 2, "the block has a node of its own");
        let scores = index.find_matches(&chain(3));
        assert_eq!((scores.get(a), scores.get(b)), (Some(3), Some(2)));
    }

    #[test]
    fn an_edge_grows_only_into_its_room() {
        let index = RadixIndexer::default();
        let w = Worker::new(1, 0);
        let n = 2 * APPEND_ROOM as u64 + 1;
        for i in 0..n {
            decode(&index, w, i);
        }
        assert_eq!(index.entries(), 3, "{n} blocks in edges of {APPEND_ROOM}");
        assert_eq!(index.find_matches(&chain(n)).get(w), Some(n as u32));
    }
}
