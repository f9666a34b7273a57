//! Every predicted worker's chains in one compressed trie: what a query walks.
//!
//! Each node is a run of local hashes (one block each) and lists, sorted, the workers predicted
//! to hold every block of it. A worker that holds a node holds its parent, so the lists shrink
//! down every path, and a query is one walk of its chain: a worker's depth is the end of the
//! deepest node on the path that lists it (or, on the last node, how far the query matched it).
//!
//! The per-worker tries of [`Predictions`](super::predictions) decide what each worker holds;
//! every node of theirs names the fleet node its last block ends ([`Fleet::end`]), and the
//! fleet splits wherever some worker's node ends. A split keeps the tail's identity, so those
//! names stay good; a node that no worker's node ends at and that has one child is merged into
//! the child, so the trie has about as many nodes as the workers' tries have ends. Changes touch
//! nodes, never one block at a time: a decision's new blocks are one copy of its locals.

use super::holders::Holders;
use super::spares::Spares;
use crate::index_core::search::common_prefix;
use crate::scores::OverlapScores;
use crate::slab::Slab;
use crate::types::{LocalHash, Worker};
use foldhash::fast::RandomState;
use std::collections::HashMap;

/// The root: no blocks, never removed.
pub(super) const FLEET_ROOT: u32 = 0;

#[derive(Debug, Default)]
struct FleetNode {
    parent: u32,
    /// Position of the first block in its chains.
    start: u32,
    locals: Vec<LocalHash>,
    /// The local of its first block, its key under its parent: unlinking a node reads no block
    /// list.
    first: LocalHash,
    /// Workers holding every block.
    holders: Holders,
    /// Children, listed in [`Fleet::kids`] by their first local.
    kids: u32,
    /// The children's ids XORed: with one child, its id.
    kid_xor: u32,
    /// Per-worker nodes whose last block is this node's last (while there are, it is kept).
    ends: u32,
}

impl FleetNode {
    fn end(&self) -> u32 {
        self.start + self.locals.len() as u32
    }
}

/// The fleet's trie (see [the module](self)).
#[derive(Debug)]
pub(super) struct Fleet {
    nodes: Slab<FleetNode>,
    /// `(parent, first local of the child) -> child`.
    kids: HashMap<(u32, LocalHash), u32, RandomState>,
    /// Freed block lists, for new nodes.
    spares: Spares,
}

impl Default for Fleet {
    fn default() -> Self {
        let mut nodes = Slab::default();
        let root = nodes.insert(FleetNode::default());
        debug_assert_eq!(root, FLEET_ROOT);
        Self {
            nodes,
            kids: HashMap::default(),
            spares: Spares::default(),
        }
    }
}

impl Fleet {
    fn node(&self, at: u32) -> &FleetNode {
        &self.nodes[at]
    }

    fn node_mut(&mut self, at: u32) -> &mut FleetNode {
        &mut self.nodes[at]
    }

    fn child(&self, at: u32, local: LocalHash) -> Option<u32> {
        self.kids.get(&(at, local)).copied()
    }

    /// Links `child` (its parent and locals set) under its parent.
    fn link(&mut self, child: u32) {
        let node = self.node(child);
        let (parent, first) = (node.parent, node.first);
        self.kids.insert((parent, first), child);
        let parent = self.node_mut(parent);
        parent.kids += 1;
        parent.kid_xor ^= child;
    }

    /// Splits `at` after its first `keep` blocks (`0 < keep < len`): a new node takes them,
    /// between `at` and its parent, so that `at` keeps its identity.
    fn split(&mut self, at: u32, keep: usize) -> u32 {
        let node = &mut self.nodes[at];
        let tail = self.spares.copy(&node.locals[keep..]);
        node.locals.truncate(keep);
        let head_locals = core::mem::replace(&mut node.locals, tail);
        let (parent, start, first) = (node.parent, node.start, node.first);
        let holders = node.holders.clone();
        node.start += keep as u32;
        let tail_first = node.locals[0];
        node.first = tail_first;
        let head = self.nodes.insert(FleetNode {
            parent,
            start,
            locals: head_locals,
            first,
            holders,
            kids: 1,
            kid_xor: at,
            ends: 0,
        });
        self.kids.insert((parent, first), head);
        self.node_mut(parent).kid_xor ^= at ^ head;
        self.kids.insert((head, tail_first), at);
        self.node_mut(at).parent = head;
        head
    }

    /// The node that ends at position `pos` on the path down to `at` (which ends at `pos` or
    /// deeper), split there if none does yet.
    pub(super) fn boundary(&mut self, mut at: u32, pos: u32) -> u32 {
        while at != FLEET_ROOT && self.node(at).start >= pos {
            at = self.node(at).parent;
        }
        let node = self.node(at);
        if at == FLEET_ROOT || node.end() == pos {
            debug_assert!(at != FLEET_ROOT || pos == 0);
            return at;
        }
        let keep = (pos - node.start) as usize;
        self.split(at, keep)
    }

    /// One more per-worker node ends at `at`.
    pub(super) fn end(&mut self, at: u32) {
        if at != FLEET_ROOT {
            self.node_mut(at).ends += 1;
        }
    }

    /// `worker`, which holds the chain down to `from` (the end of one of its nodes, or the
    /// root), now also holds `locals` after it. Returns the node its last block ends, where the
    /// caller's new per-worker node ends (counted: the caller does not call [`end`](Self::end)).
    pub(super) fn add(&mut self, worker: Worker, from: u32, locals: &[LocalHash]) -> u32 {
        let (mut at, mut done) = (from, 0);
        while done < locals.len() {
            let rest = &locals[done..];
            let Some(child) = self.child(at, rest[0]) else {
                let start = self.node(at).end();
                let node = self.nodes.insert(FleetNode {
                    parent: at,
                    start,
                    locals: self.spares.copy(rest),
                    first: rest[0],
                    holders: Holders::one(worker),
                    kids: 0,
                    kid_xor: 0,
                    ends: 0,
                });
                self.link(node);
                at = node;
                break;
            };
            let edge = &self.node(child).locals;
            let common = common_prefix(edge, rest);
            at = if common < edge.len() {
                self.split(child, common)
            } else {
                child
            };
            let new = self.node_mut(at).holders.insert(worker);
            debug_assert!(new, "a worker adds only blocks it does not hold");
            done += common;
        }
        self.end(at);
        at
    }

    /// One of `worker`'s nodes, which ends at `at`, now ends at position `pos` inside `at`: when
    /// `worker` alone holds `at` (so no node hangs below it), `at` is cut short in place and
    /// still ends that node. Returns whether it was; if not, nothing changed.
    pub(super) fn truncate_alone(&mut self, worker: Worker, at: u32, pos: u32) -> bool {
        let node = self.node_mut(at);
        if at == FLEET_ROOT || node.start >= pos || node.kids != 0 || node.holders.len() != 1 {
            return false;
        }
        debug_assert!(node.holders.iter().eq([worker]) && node.ends == 1);
        node.locals.truncate((pos - node.start) as usize);
        true
    }

    /// One of `worker`'s nodes, which ended at `at`, now ends at position `pos` (or is gone, when
    /// `pos` is its start): `worker` no longer holds the blocks from `pos` to `at`'s end. The
    /// caller has made the boundary at `pos` (and [`end`](Self::end)ed it, if the node stays).
    /// Nodes no worker holds any more go.
    pub(super) fn cut(&mut self, worker: Worker, mut at: u32, pos: u32) {
        if at == FLEET_ROOT {
            return;
        }
        self.node_mut(at).ends -= 1;
        while at != FLEET_ROOT && self.node(at).start >= pos {
            let node = self.node_mut(at);
            node.holders.remove(worker);
            if !node.holders.is_empty() {
                // Every node above holds it too: only this one lost an end or a child.
                break;
            }
            debug_assert_eq!((node.kids, node.ends), (0, 0));
            let (parent, first) = (node.parent, node.first);
            self.kids.remove(&(parent, first));
            let above = self.node_mut(parent);
            above.kids -= 1;
            above.kid_xor ^= at;
            let gone = core::mem::take(self.node_mut(at));
            self.spares.give(gone.locals);
            self.nodes.free(at);
            at = parent;
        }
        // Nodes above the range still hold `worker`: they keep their holders.
        let mut node = at;
        while node != FLEET_ROOT && self.node(node).start >= pos {
            let n = self.node_mut(node);
            n.holders.remove(worker);
            node = n.parent;
        }
        self.try_merge(at);
        self.tidy();
    }

    /// Merges `at` into its only child when no per-worker node ends at it (then both have the
    /// same holders: a worker holding `at` and not the child would end a node there).
    fn try_merge(&mut self, at: u32) {
        let node = self.node(at);
        if at == FLEET_ROOT || node.ends != 0 || node.kids != 1 || node.locals.is_empty() {
            return;
        }
        let child = node.kid_xor;
        debug_assert_eq!(self.node(child).start, node.end());
        debug_assert_eq!(self.node(child).holders, node.holders);
        let head = core::mem::take(self.node_mut(at));
        let child_first = self.node(child).first;
        self.kids.remove(&(at, child_first));
        let node = &mut self.nodes[child];
        let mut locals = head.locals;
        locals.extend_from_slice(&node.locals);
        let tail = core::mem::replace(&mut node.locals, locals);
        self.spares.give(tail);
        node.start = head.start;
        node.parent = head.parent;
        node.first = head.first;
        self.kids.insert((head.parent, head.first), child);
        self.node_mut(head.parent).kid_xor ^= at ^ child;
        self.nodes.free(at);
    }

    /// Gives room back once the trie is mostly empty.
    fn tidy(&mut self) {
        self.nodes.shrink_to_first(1);
        if let Some(to) = crate::room::shrunk(self.kids.len(), self.kids.capacity()) {
            self.kids.shrink_to(to);
        }
    }

    /// How deep `worker` holds `query`: the walk of [`find`](Self::find) for one worker (a
    /// decision makes it right after the query's, over the same nodes).
    pub(super) fn held(&self, worker: Worker, query: &[LocalHash]) -> usize {
        let (mut at, mut pos) = (FLEET_ROOT, 0usize);
        while pos < query.len() {
            let Some(child) = self.child(at, query[pos]) else {
                break;
            };
            let node = self.node(child);
            if !node.holders.contains(worker) {
                break;
            }
            let common = common_prefix(&node.locals, &query[pos..]);
            pos += common;
            if common < node.locals.len() {
                break;
            }
            at = child;
        }
        pos
    }

    /// The local of the block at position `pos` of the chain down to `at` (which ends deeper).
    pub(super) fn local_at(&self, mut at: u32, pos: u32) -> LocalHash {
        while self.node(at).start > pos {
            at = self.node(at).parent;
        }
        let node = self.node(at);
        node.locals[(pos - node.start) as usize]
    }

    /// The locals of the blocks from position `from` to the end of `at`, on the chain down to
    /// `at` (for inspection: a walk up the chain).
    pub(super) fn locals(&self, mut at: u32, from: u32) -> Vec<LocalHash> {
        let mut runs = Vec::new();
        while at != FLEET_ROOT && self.node(at).end() > from {
            let node = self.node(at);
            let skip = from.saturating_sub(node.start) as usize;
            runs.push(&node.locals[skip..]);
            at = node.parent;
        }
        runs.iter()
            .rev()
            .flat_map(|run| run.iter().copied())
            .collect()
    }

    /// Adds each predicted worker's depth for `query` to `scores`.
    pub(super) fn find(&self, query: &[LocalHash], scores: &mut OverlapScores) {
        let (mut at, mut pos) = (FLEET_ROOT, 0usize);
        while pos < query.len() {
            let Some(child) = self.child(at, query[pos]) else {
                break;
            };
            let edge = &self.node(child).locals;
            let common = common_prefix(edge, &query[pos..]);
            if at == FLEET_ROOT {
                scores.reserve(self.node(child).holders.len());
            } else {
                // The workers that hold `at` but not its child stop at `at`'s end.
                let mut deeper = self.node(child).holders.iter().peekable();
                for worker in self.node(at).holders.iter() {
                    if deeper.peek() == Some(&worker) {
                        deeper.next();
                    } else {
                        scores.push(worker, pos as u32);
                    }
                }
            }
            pos += common;
            at = child;
            if common < edge.len() {
                break;
            }
        }
        if at != FLEET_ROOT {
            for worker in self.node(at).holders.iter() {
                scores.push(worker, pos as u32);
            }
        }
    }
}

#[cfg(test)]
impl Fleet {
    /// Checks the trie's shape and returns `(held blocks, ends)`: the sum over live nodes of
    /// blocks times holders, and of per-worker nodes ending at them.
    pub(super) fn check(&self) -> (usize, usize) {
        let (mut held, mut ends) = (0, 0);
        let mut kids = vec![(0u32, 0u32); self.nodes.slots().count()];
        let live = |at: u32| at == FLEET_ROOT || !self.node(at).locals.is_empty();
        for (at, node) in self.nodes.slots() {
            if at == FLEET_ROOT || !live(at) {
                continue;
            }
            let parent = self.node(node.parent);
            assert!(live(node.parent), "node {at} under a freed node");
            assert_eq!(node.first, node.locals[0]);
            assert_eq!(self.child(node.parent, node.first), Some(at));
            assert_eq!(
                node.start,
                parent.end(),
                "node {at} starts where its parent ends"
            );
            assert!(!node.holders.is_empty(), "node {at} has no holders");
            if node.parent != FLEET_ROOT {
                assert!(
                    node.holders
                        .iter()
                        .all(|w| parent.holders.iter().any(|p| p == w)),
                    "node {at} holders outside its parent's"
                );
            }
            let entry = &mut kids[node.parent as usize];
            entry.0 += 1;
            entry.1 ^= at;
            held += node.locals.len() * node.holders.len();
            ends += node.ends as usize;
        }
        for (at, node) in self.nodes.slots() {
            if live(at) {
                assert_eq!(
                    (node.kids, node.kid_xor),
                    kids[at as usize],
                    "node {at}'s children"
                );
                if at != FLEET_ROOT {
                    assert!(node.ends > 0 || node.kids != 1, "node {at} is mergeable");
                    assert!(node.ends > 0 || node.kids > 0, "node {at} ends nothing");
                }
            }
        }
        assert_eq!(self.kids.len() + 1, self.nodes.live());
        (held, ends)
    }
}

#[cfg(test)]
impl Fleet {
    /// Whether `at` is a live node ending at `end` that `worker` holds.
    pub(super) fn ends_at(&self, at: u32, end: u32, worker: Worker) -> bool {
        let node = self.node(at);
        at != FLEET_ROOT
            && !node.locals.is_empty()
            && node.end() == end
            && node.holders.iter().any(|w| w == worker)
    }
}
