//! The compressed, epoch-reclaimed radix tree: the edge tree (`tree/`) without a checkpoint
//! index, reached from its root only.
//!
//! A stored run becomes, at most, one new node: its blocks' local hashes contiguous in one
//! edge (no checkpoint caps its length). Queries walk from the root, comparing the query with
//! each edge's local hashes contiguously and narrowing the active workers once per node (the
//! core's walk, `search.rs`). A node is unlinked as soon as it has neither workers nor
//! children, so memory follows the live state under any churn.

use super::tree::{AsTree, EdgeTree, Unindexed};
use crate::index_core::Indexer;

/// The compressed radix tree layout: edges of consecutive blocks with one cutoff per worker,
/// read lock-free and reclaimed through `crossbeam-epoch`, pruned as soon as they are empty;
/// queries walk it from the root.
#[derive(Default)]
pub struct RadixTree {
    tree: EdgeTree<Unindexed>,
}

impl core::fmt::Debug for RadixTree {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RadixTree")
            .field("nodes", &self.tree.nodes())
            .finish()
    }
}

impl AsTree for RadixTree {
    type Index = Unindexed;

    #[inline]
    fn tree(&self) -> &EdgeTree<Unindexed> {
        &self.tree
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
    use crate::index_core::{Key, RunKeys, Storage, Tree};
    use crate::types::LocalHash;

    fn blocks(locals: &[u64]) -> Vec<LocalHash> {
        locals.iter().map(|&l| LocalHash(l)).collect()
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
        let twins =
            unsafe { tree.add_run(None, &RunKeys::listed(&keys(4)), &run, 7, &guard, &mut a) };
        assert_eq!((twins, tree.entries()), (0, 1), "one run, one node");
        let fork = blocks(&[1, 2, 9]);
        // SAFETY: as above.
        let twins =
            unsafe { tree.add_run(None, &RunKeys::listed(&keys(3)), &fork, 8, &guard, &mut b) };
        assert_eq!(
            (twins, tree.entries()),
            (0, 2),
            "a child at offset 2, no split"
        );
        assert!(a[..2] == b[..2] && a[2] != b[2]);
        let node = tree.child(None, 0, LocalHash(1), &guard).expect("linked");
        assert_eq!(tree.edge(node).len(), 4);
        let cover = tree.cover(node, &guard).expect("held");
        assert_eq!((cover.cutoff(7), cover.cutoff(8)), (4, 2));
        let child = tree
            .child(Some(node), 2, LocalHash(9), &guard)
            .expect("linked");
        assert_eq!(tree.cover(child, &guard).map(|c| c.cutoff(8)), Some(1));
        // The same blocks again under the same worker: all of them already held (twins).
        let mut again = Vec::new();
        // SAFETY: as above.
        let twins = unsafe {
            tree.add_run(
                None,
                &RunKeys::listed(&keys(4)),
                &run,
                7,
                &guard,
                &mut again,
            )
        };
        assert_eq!((twins, again), (4, a.clone()));
        // A tail eviction moves the cutoff; the last worker out unlinks the nodes.
        // SAFETY: as above.
        unsafe { tree.remove_run(&a[2..], 7, &guard) };
        assert_eq!(tree.cover(node, &guard).map(|c| c.cutoff(7)), Some(2));
        // SAFETY: as above.
        unsafe { tree.remove_run(&b, 8, &guard) };
        assert_eq!(tree.entries(), 1, "worker 7 keeps the first node");
        // SAFETY: as above.
        unsafe { tree.remove_run(&a[..2], 7, &guard) };
        assert_eq!(tree.entries(), 0);
        assert!(tree.child(None, 0, LocalHash(1), &guard).is_none());
    }

    #[test]
    fn children_stay_reachable_from_one_to_a_table_and_back() {
        // A node's children go from one in place to a sorted array (2 to 16) to a table and
        // back as they come and go; every linked child must be found at every count.
        let tree = RadixTree::default();
        let guard = tree.guard();
        let mut stem = Vec::new();
        // SAFETY: I1 by hand: parents passed while their slot is in them; slots removed once.
        unsafe {
            tree.add_run(
                None,
                &RunKeys::listed(&keys(1)),
                &blocks(&[1]),
                0,
                &guard,
                &mut stem,
            )
        };
        let node = tree.child(None, 0, LocalHash(1), &guard).expect("linked");
        let reachable = |live: &[u64]| {
            (100..140).all(|l| {
                let found = tree.child(Some(node), 1, LocalHash(l), &guard).is_some();
                found == live.contains(&l)
            })
        };
        let mut forks = Vec::new();
        for (slot, local) in (1..).zip(100..140u64) {
            let mut handles = Vec::new();
            // SAFETY: as above.
            unsafe {
                tree.add_run(
                    Some(stem[0]),
                    &RunKeys::listed(&keys(1)),
                    &blocks(&[local]),
                    slot,
                    &guard,
                    &mut handles,
                )
            };
            forks.push((slot, local, handles));
            let live: Vec<u64> = forks.iter().map(|f| f.1).collect();
            assert!(reachable(&live), "after linking {} children", live.len());
        }
        // Out in an order that is neither the keys' nor the links'.
        forks.sort_by_key(|f| (f.1 * 7) % 40);
        while let Some((slot, _, handles)) = forks.pop() {
            // SAFETY: as above.
            unsafe { tree.remove_run(&handles, slot, &guard) };
            let live: Vec<u64> = forks.iter().map(|f| f.1).collect();
            assert!(reachable(&live), "after unlinking down to {}", live.len());
        }
        assert_eq!(tree.entries(), 1, "the stem alone");
    }
}
