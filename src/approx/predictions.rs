//! The predicted caches: which blocks each worker is believed to hold, and the [`Fleet`] trie
//! that queries walk, kept in step with that belief. Nothing here touches an index.
//!
//! The semantics are per block (the naive model states them): a routed chain of `n` blocks
//! takes the ticks `base .. base + n`, tail first, and touch time `now`; a capacity evicts the
//! unpinned block with the oldest tick; a time to live expires unpinned blocks touched too long
//! ago; a running request pins its chain. Kept block by block, a decision whose chain the
//! worker mostly holds already (a conversation's next turn) pays for every block again. So each
//! worker's blocks are kept as a compressed trie of the routed chains, split wherever a chain
//! ends, and a decision touches *nodes*: each node on its path records it as the latest
//! decision through the node. That determines every block's state:
//!
//! - every chain through a block of a node goes through all of the node's blocks (chains end at
//!   node boundaries), so the block at position `p` of a node whose latest decision is
//!   `(base, n)` has tick `base + n - 1 - p`, that decision's time, and the node's pins;
//! - a parent's latest decision is at least as new as its children's, and pins cover a chain's
//!   whole prefix, so the oldest unpinned block is the last block of the unpinned leaf with the
//!   oldest latest decision (a lazy heap of leaves finds it), and a node expires after its
//!   subtree;
//! - each decision has one expiry entry, due at its time plus the time to live; while it is
//!   still the latest decision of some node, [`Trie::owners`] names the deepest such node, which
//!   is where its expiry starts.
//!
//! A trie node keeps no locals of its own: they are the fleet's, on the chain down to the fleet
//! node it ends. A decision reads how deep its worker holds the chain from the fleet (the walk
//! the query before it made, over the same memory), then steps down the trie by node lengths,
//! one lookup per node on the path, and does the work of its new blocks. How it was measured
//! against the per-block bookkeeping it replaced: paper, sections 6.25 and 6.28.

use super::fleet::{FLEET_ROOT, Fleet};
use super::retention::Retention;
use super::routed::{ForeignRouted, Routed, index_tag};
use crate::hash;
use crate::scores::OverlapScores;
use crate::slab::Slab;
use crate::types::{Block, Event, LocalHash, SeqHash, Worker};
use core::time::Duration;
use foldhash::fast::RandomState;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};

/// The root of every trie: no blocks, never removed.
const ROOT: u32 = 0;

/// The latest decision that went through a node.
///
/// Its time is kept as seconds and nanoseconds side by side rather than as a [`Duration`], whose
/// padding would take [`Node`] past one cache line.
#[derive(Clone, Copy, Debug)]
struct Touch {
    /// Its first tick (its chain's last block has it).
    base: u64,
    secs: u64,
    /// Its chain's length in blocks.
    len: u32,
    nanos: u32,
}

impl Touch {
    fn new(base: u64, len: u32, at: Duration) -> Self {
        Touch {
            base,
            secs: at.as_secs(),
            len,
            nanos: at.subsec_nanos(),
        }
    }

    /// The decision's time.
    fn at(&self) -> Duration {
        Duration::new(self.secs, self.nanos)
    }
}

/// One line of cache each: a decision reads and writes a node's fields together.
#[derive(Debug)]
#[repr(align(64))]
struct Node {
    parent: u32,
    /// Position of the first block.
    start: u32,
    /// Its blocks (their locals are the fleet's, on the chain down to [`Node::fleet`]).
    len: u32,
    /// The fleet node this node's last block ends (see [`Fleet`]).
    fleet: u32,
    /// Its children, listed in [`Trie::kids`].
    kids: u32,
    /// The local of its first block: its key under its parent (kept while its blocks go).
    first: LocalHash,
    latest: Touch,
    /// Running requests whose chains go through the node (a pinned node is never evicted nor
    /// expired).
    pins: u32,
    /// Tells a reused slot from the node an old heap entry named.
    serial: u64,
}

const _: () = assert!(size_of::<Node>() == 64);

impl Node {
    /// The tick of the node's last block.
    fn last_tick(&self) -> u64 {
        let last = u64::from(self.start) + u64::from(self.len) - 1;
        self.latest.base + u64::from(self.latest.len) - 1 - last
    }
}

/// One worker's predicted blocks.
#[derive(Debug)]
struct Trie {
    worker: Worker,
    nodes: Slab<Node>,
    blocks: usize,
    /// Leaves by the tick of their last block, oldest first (lazy: an entry is current while
    /// its node has that serial, no children and that tick).
    leaves: BinaryHeap<Reverse<(u64, u32, u64)>>,
    /// Per decision still the latest of some node, the deepest such node: where its expiry
    /// starts, so kept only when blocks expire (empty otherwise, and every lookup misses).
    owners: HashMap<u64, u32, RandomState>,
    /// Whether blocks expire (a time to live).
    expires: bool,
    /// The worker's running requests (pinning their chains), by number: a release finds its
    /// request through its worker.
    running: HashMap<u64, Running, RandomState>,
    /// `(parent, first local of the child) -> child`: a step down is one lookup, however many
    /// children a node has (a shared first block has one for every conversation).
    kids: HashMap<(u32, LocalHash), u32, RandomState>,
}

impl Trie {
    fn new(worker: Worker, expires: bool, serial: &mut u64) -> Self {
        *serial += 1;
        let mut nodes = Slab::default();
        let root = nodes.insert(Node {
            parent: ROOT,
            start: 0,
            len: 0,
            fleet: FLEET_ROOT,
            kids: 0,
            first: LocalHash(0),
            latest: Touch::new(0, 0, Duration::ZERO),
            pins: 0,
            serial: *serial,
        });
        debug_assert_eq!(root, ROOT);
        Trie {
            worker,
            nodes,
            blocks: 0,
            leaves: BinaryHeap::new(),
            owners: HashMap::default(),
            expires,
            running: HashMap::default(),
            kids: HashMap::default(),
        }
    }

    fn node(&self, at: u32) -> &Node {
        &self.nodes[at]
    }

    fn node_mut(&mut self, at: u32) -> &mut Node {
        &mut self.nodes[at]
    }

    /// The child of `at` whose first block has local `local`.
    fn child(&self, at: u32, local: LocalHash) -> Option<u32> {
        self.kids.get(&(at, local)).copied()
    }

    /// Splits `at` after its first `keep` blocks: a new node takes them, between `at` and its
    /// parent, so that `at` keeps its identity (its owners and heap entries stay current).
    fn split(&mut self, at: u32, keep: usize, serial: &mut u64, fleet: &mut Fleet) -> u32 {
        let node = &mut self.nodes[at];
        let keep = keep as u32;
        debug_assert!(0 < keep && keep < node.len);
        let (parent, start, latest, first) = (node.parent, node.start, node.latest, node.first);
        let tail_first = fleet.local_at(node.fleet, start + keep);
        node.first = tail_first;
        node.start += keep;
        node.len -= keep;
        let head_fleet = fleet.boundary(node.fleet, node.start);
        fleet.end(head_fleet);
        *serial += 1;
        let head = self.nodes.insert(Node {
            parent,
            start,
            len: keep,
            fleet: head_fleet,
            kids: 1,
            first,
            latest,
            pins: self.node(at).pins,
            serial: *serial,
        });
        self.node_mut(at).parent = head;
        self.kids.insert((parent, first), head);
        self.kids.insert((head, tail_first), at);
        head
    }

    /// Lists leaf `at` in the heap, if it is an unpinned one.
    fn list_leaf(&mut self, at: u32) {
        let node = self.node(at);
        if at != ROOT && node.kids == 0 && node.pins == 0 {
            let entry = (node.last_tick(), at, node.serial);
            self.leaves.push(Reverse(entry));
        }
    }

    /// Whether a heap entry is current: node `at` is still the one of serial `serial`, an
    /// unpinned leaf, and its last block has tick `tick`.
    fn is_leaf_at(&self, at: u32, serial: u64, tick: u64) -> bool {
        let node = self.node(at);
        node.serial == serial
            && node.kids == 0
            && node.pins == 0
            && node.len > 0
            && node.last_tick() == tick
    }

    /// The oldest leaf, as `(tick, node)`, stale heap entries dropped on the way.
    fn oldest(&mut self) -> Option<(u64, u32)> {
        while let Some(&Reverse((tick, at, serial))) = self.leaves.peek() {
            if self.is_leaf_at(at, serial, tick) {
                return Some((tick, at));
            }
            self.leaves.pop();
        }
        None
    }

    /// Unlinks and frees `at` (no children, no blocks left to report).
    fn drop_node(&mut self, at: u32) -> u32 {
        let Node {
            parent,
            first,
            latest: Touch { base, .. },
            ..
        } = *self.node(at);
        debug_assert_eq!(self.node(at).kids, 0);
        self.kids.remove(&(parent, first));
        shrink(&mut self.kids);
        self.node_mut(parent).kids -= 1;
        // The decision it ended now ends at its parent, if it went through it.
        if self.owners.get(&base) == Some(&at) {
            if parent != ROOT && self.node(parent).latest.base == base {
                self.owners.insert(base, parent);
            } else {
                self.owners.remove(&base);
            }
        }
        let node = self.node_mut(at);
        // No heap entry names serial 0 (serials start at 1).
        node.serial = 0;
        self.nodes.free(at);
        parent
    }

    /// Drops the blocks of `at` after its first `keep`, from the fleet too.
    fn shorten(&mut self, at: u32, keep: usize, fleet: &mut Fleet) {
        let worker = self.worker;
        let node = &mut self.nodes[at];
        let (old, pos) = (node.fleet, node.start + keep as u32);
        self.blocks -= node.len as usize - keep;
        node.len = keep as u32;
        if keep > 0 && fleet.truncate_alone(worker, old, pos) {
            return;
        }
        let boundary = fleet.boundary(old, pos);
        if keep > 0 {
            fleet.end(boundary);
            self.node_mut(at).fleet = boundary;
        }
        fleet.cut(worker, old, pos);
    }

    /// Evicts up to `count` blocks, least recently touched first, of those with a tick below
    /// `below`; returns how many.
    ///
    /// The oldest leaf's blocks all come from its latest decision's range of ticks, which no
    /// other leaf's tick is in: they go one after the other with no other leaf's in between.
    fn evict(&mut self, count: usize, below: u64, fleet: &mut Fleet) -> usize {
        let mut done = 0;
        while done < count {
            let Some((tick, at)) = self.oldest() else {
                break;
            };
            if tick >= below {
                break;
            }
            self.leaves.pop();
            let len = self.node(at).len as usize;
            let take = (count - done).min(len);
            let keep = len - take;
            self.shorten(at, keep, fleet);
            done += take;
            if keep == 0 {
                let parent = self.drop_node(at);
                self.list_leaf(parent);
            } else {
                self.list_leaf(at);
            }
        }
        done
    }

    /// Makes `touch` the latest decision of `at`; the decision it replaces no longer ends here.
    fn touch(&mut self, at: u32, touch: Touch) {
        let old = core::mem::replace(&mut self.node_mut(at).latest, touch);
        if self.owners.get(&old.base) == Some(&at) {
            self.owners.remove(&old.base);
        }
    }

    /// Decision `touch` ends at `end`, touched already: where its expiry starts, and a leaf
    /// whose tick changed.
    fn end_decision(&mut self, end: u32, touch: Touch) {
        if self.expires {
            self.owners.insert(touch.base, end);
        }
        self.list_leaf(end);
        self.compact();
    }

    /// Calls `visit` with each node's blocks and its parent's last sequence hash, parents
    /// first.
    fn walk(&self, fleet: &Fleet, mut visit: impl FnMut(Option<SeqHash>, &[Block])) {
        let mut children: HashMap<u32, Vec<u32>, RandomState> = HashMap::default();
        for (&(parent, _), &child) in &self.kids {
            children.entry(parent).or_default().push(child);
        }
        let mut stack: Vec<(u32, Option<SeqHash>)> = vec![(ROOT, None)];
        while let Some((at, parent)) = stack.pop() {
            for &child in children.get(&at).into_iter().flatten() {
                let node = self.node(child);
                let locals = fleet.locals(node.fleet, node.start);
                let blocks: Vec<Block> =
                    (locals.iter().zip(hash::seq_hashes_after(parent, &locals)))
                        .map(|(&local, seq)| Block::new(local, seq))
                        .collect();
                visit(parent, &blocks);
                stack.push((child, blocks.last().map(|b| b.seq)));
            }
        }
    }

    /// Drops stale heap entries once they outnumber the nodes.
    fn compact(&mut self) {
        let live = self.nodes.live();
        if self.leaves.len() > 2 * live + 64 {
            let mut leaves = core::mem::take(&mut self.leaves).into_vec();
            leaves.retain(|&Reverse((tick, at, serial))| self.is_leaf_at(at, serial, tick));
            self.leaves = leaves.into();
        }
    }
}

/// A decision's expiry entry: its time, its first tick, its worker.
type Due = (Duration, u64, Worker);

/// A running request: where its chain ends, and how many blocks it has.
#[derive(Debug)]
struct Running {
    end: u32,
    len: u32,
}

#[derive(Debug)]
pub(crate) struct Predictions {
    retention: Retention,
    ttl: Option<Duration>,
    now: Duration,
    tick: u64,
    serial: u64,
    tag: u64,
    next_request: u64,
    workers: HashMap<Worker, Trie, RandomState>,
    /// Every worker's predicted chains in one trie, for queries.
    pub(super) fleet: Fleet,
    exact: HashSet<Worker, RandomState>,
    ranks: HashMap<u64, Vec<u32>, RandomState>,
    /// One entry per decision, in time order (lazy: current while its decision owns a node).
    expiry: VecDeque<Due>,
    /// Owned decisions over every worker: what bounds the stale entries of `expiry`.
    owned: usize,
    /// The scores of the last [`route`](super::ApproximateIndexer::route), emptied: the next
    /// one fills them without an allocation.
    pub(super) scores: OverlapScores,
}

impl Predictions {
    pub(crate) fn new(retention: Retention) -> Self {
        Self {
            retention,
            ttl: retention.ttl_limit(),
            now: Duration::ZERO,
            tick: 0,
            serial: 0,
            tag: index_tag(),
            next_request: 0,
            workers: HashMap::default(),
            fleet: Fleet::default(),
            exact: HashSet::default(),
            ranks: HashMap::default(),
            expiry: VecDeque::new(),
            owned: 0,
            scores: OverlapScores::new(),
        }
    }

    pub(crate) fn retention(&self) -> Retention {
        self.retention
    }

    pub(crate) fn is_exact(&self, worker: Worker) -> bool {
        self.exact.contains(&worker)
    }

    pub(crate) fn predicted_blocks(&self, worker: Worker) -> usize {
        self.workers.get(&worker).map_or(0, |t| t.blocks)
    }

    /// Every predicted worker's blocks, as stores of each trie node under its parent, with the
    /// XXH3 sequence hashes of their chains (predicted blocks have no engine's hashes).
    pub(crate) fn dump(&self, out: &mut Vec<Event>) {
        for trie in self.workers.values() {
            trie.walk(&self.fleet, |parent, blocks| {
                out.push(Event::stored(trie.worker, 0, parent, blocks.to_vec()));
            });
        }
    }

    /// Whether `worker` is predicted to hold the block of sequence hash `seq` (as [`dump`]
    /// names it). Walks the worker's whole trie: for inspection, not for routing.
    pub(crate) fn holds(&self, worker: Worker, seq: SeqHash) -> bool {
        let mut found = false;
        if let Some(trie) = self.workers.get(&worker) {
            trie.walk(&self.fleet, |_, blocks| {
                found |= blocks.iter().any(|b| b.seq == seq)
            });
        }
        found
    }

    /// Each predicted worker's block count, for those with blocks.
    pub(crate) fn block_counts(&self) -> impl Iterator<Item = (Worker, usize)> + '_ {
        (self.workers.iter())
            .filter(|(_, t)| t.blocks > 0)
            .map(|(w, t)| (*w, t.blocks))
    }

    /// The ranks of worker `id` that are predicted or exact.
    pub(crate) fn ranks(&self, id: u64) -> &[u32] {
        self.ranks.get(&id).map_or(&[], Vec::as_slice)
    }

    /// Moves the clock to `now` (never backwards) and expires what its time to live has passed.
    /// Returns whether any predicted block went.
    pub(crate) fn advance(&mut self, now: Duration) -> bool {
        self.now = self.now.max(now);
        let Some(ttl) = self.ttl else {
            return false;
        };
        let mut dropped = false;
        let now = self.now;
        let expired = |t: &Touch| t.at().saturating_add(ttl) <= now;
        while let Some(&(at, base, worker)) = self.expiry.front() {
            if at.saturating_add(ttl) > now {
                break;
            }
            self.expiry.pop_front();
            let Some(trie) = self.workers.get_mut(&worker) else {
                continue;
            };
            let owned_before = trie.owners.len();
            let Some(mut node) = trie.owners.remove(&base) else {
                continue;
            };
            if trie.node(node).pins > 0 {
                // A running request's chain expires only once released, which touches it.
                self.owned -= 1;
                continue;
            }
            // Deeper decisions are older and expired first (or are pinned, and so is this).
            debug_assert_eq!(trie.node(node).kids, 0);
            dropped = true;
            loop {
                trie.shorten(node, 0, &mut self.fleet);
                let parent = trie.drop_node(node);
                let p = trie.node(parent);
                if parent == ROOT || p.kids > 0 || p.pins > 0 || !expired(&p.latest) {
                    trie.list_leaf(parent);
                    break;
                }
                // The parent's own decision (if it owns it) goes with it.
                let base = p.latest.base;
                if trie.owners.get(&base) == Some(&parent) {
                    trie.owners.remove(&base);
                }
                node = parent;
            }
            self.owned -= owned_before - trie.owners.len();
            self.drop_if_empty(worker);
        }
        dropped
    }

    /// Forgets `worker`'s trie once it predicts nothing.
    fn drop_if_empty(&mut self, worker: Worker) {
        if self.workers.get(&worker).is_some_and(|t| t.blocks == 0) {
            self.drop_trie(worker);
            self.unregister_if_gone(worker);
        }
    }

    fn drop_trie(&mut self, worker: Worker) -> bool {
        let Some(mut trie) = self.workers.remove(&worker) else {
            return false;
        };
        // Out of the fleet deepest first, so that each node is a leaf of the worker's when cut.
        let mut live: Vec<(u32, u32)> = (trie.nodes.slots())
            .filter(|&(at, n)| at != ROOT && n.len > 0)
            .map(|(at, n)| (n.start, at))
            .collect();
        live.sort_unstable_by(|a, b| b.cmp(a));
        for (start, at) in live {
            self.fleet.cut(worker, trie.node(at).fleet, start);
        }
        trie.nodes = Slab::default();
        shrink(&mut self.workers);
        // Its expiry entries go stale by themselves (their worker has no trie, or a new one
        // whose decisions have other ticks).
        self.owned -= trie.owners.len();
        trie.blocks > 0
    }

    fn unregister_if_gone(&mut self, worker: Worker) {
        if self.workers.contains_key(&worker) || self.exact.contains(&worker) {
            return;
        }
        if let Some(ranks) = self.ranks.get_mut(&worker.id) {
            ranks.retain(|&r| r != worker.dp_rank);
            if ranks.is_empty() {
                self.ranks.remove(&worker.id);
                shrink(&mut self.ranks);
            }
        }
    }

    /// Predicts that `worker` now caches the chain `locals`: touches what it already holds,
    /// adds the rest as far as its capacity allows (evicting least recently used unpinned blocks
    /// of other requests), and pins the chain when running requests are pinned. `held`, when
    /// known, is how deep the fleet listed `worker` on `locals` before `now`'s expiry (a query's
    /// walk just found it).
    pub(crate) fn route(
        &mut self,
        worker: Worker,
        locals: &[LocalHash],
        now: Duration,
        held: Option<usize>,
    ) -> Routed {
        let held = if self.advance(now) { None } else { held };
        let routed = Routed::new(worker, self.tag, self.next_request);
        self.next_request += 1;
        if locals.is_empty() || self.exact.contains(&worker) {
            return routed;
        }
        let n = locals.len();
        let touch = Touch::new(self.tick, n as u32, self.now);
        self.tick += n as u64;
        let capacity = self.retention.capacity_blocks();
        let expires = self.ttl.is_some();
        let (ranks, serial, fleet) = (&mut self.ranks, &mut self.serial, &mut self.fleet);
        let trie = self.workers.entry(worker).or_insert_with(|| {
            register(ranks, worker);
            Trie::new(worker, expires, serial)
        });
        let owned_before = trie.owners.len();

        // The held prefix, as deep as the fleet lists the worker on the chain (the blocks the
        // query just read), and down the trie by lengths: each node on the way touched.
        let depth = held.unwrap_or_else(|| fleet.held(worker, locals));
        debug_assert_eq!(depth, fleet.held(worker, locals));
        let (mut at, mut held) = (ROOT, 0);
        while held < depth {
            let Some(child) = trie.child(at, locals[held]) else {
                debug_assert!(false, "the fleet lists {worker} for blocks its trie lacks");
                break;
            };
            let len = trie.node(child).len as usize;
            let common = len.min(depth - held);
            at = if common == len {
                child
            } else {
                trie.split(child, common, serial, fleet)
            };
            trie.touch(at, touch);
            held += common;
        }

        // The rest, as far as capacity allows, evicting older leaves' blocks.
        let want = n - held;
        let room = capacity.saturating_sub(trie.blocks);
        let freed = trie.evict(want.saturating_sub(room), touch.base, fleet);
        let added = &locals[held..held + want.min(room + freed)];
        trie.blocks += added.len();
        if !added.is_empty() {
            *serial += 1;
            let end = fleet.add(worker, trie.node(at).fleet, added);
            let node = trie.nodes.insert(Node {
                parent: at,
                start: held as u32,
                len: added.len() as u32,
                fleet: end,
                kids: 0,
                first: added[0],
                latest: touch,
                pins: 0,
                serial: *serial,
            });
            trie.kids.insert((at, added[0]), node);
            trie.node_mut(at).kids += 1;
            at = node;
        }
        if at != ROOT {
            if self.retention.pins_running() {
                let mut node = at;
                while node != ROOT {
                    trie.node_mut(node).pins += 1;
                    node = trie.node(node).parent;
                }
                let len = (held + added.len()) as u32;
                trie.running
                    .insert(routed.number(), Running { end: at, len });
            }
            trie.end_decision(at, touch);
            if self.ttl.is_some() {
                self.expiry.push_back((touch.at(), touch.base, worker));
            }
        }
        self.owned = self.owned + trie.owners.len() - owned_before;
        self.compact_expiry();
        self.drop_if_empty(worker);
        routed
    }

    /// Drops stale expiry entries once they outnumber the owned decisions.
    fn compact_expiry(&mut self) {
        if self.expiry.len() > 2 * self.owned + 64 {
            let workers = &self.workers;
            self.expiry.retain(|(_, base, worker)| {
                workers
                    .get(worker)
                    .is_some_and(|t| t.owners.contains_key(base))
            });
            if let Some(to) = crate::room::shrunk(self.expiry.len(), self.expiry.capacity()) {
                self.expiry.shrink_to(to);
            }
        }
    }

    /// The request `routed` finished at `now`: its chain is touched again (the engine frees it
    /// now, tail first) and unpinned.
    pub(crate) fn release(&mut self, routed: Routed, now: Duration) -> Result<(), ForeignRouted> {
        let id = routed.id_in(self.tag)?;
        self.advance(now);
        let worker = routed.worker();
        let Some(trie) = self.workers.get_mut(&worker) else {
            return Ok(());
        };
        let Some(run) = trie.running.remove(&id) else {
            return Ok(());
        };
        shrink(&mut trie.running);
        let touch = Touch::new(self.tick, run.len, self.now);
        self.tick += u64::from(run.len);
        let owned_before = trie.owners.len();
        let mut node = run.end;
        while node != ROOT {
            trie.touch(node, touch);
            trie.node_mut(node).pins -= 1;
            node = trie.node(node).parent;
        }
        trie.end_decision(run.end, touch);
        self.owned = self.owned + trie.owners.len() - owned_before;
        if self.ttl.is_some() {
            self.expiry.push_back((touch.at(), touch.base, worker));
        }
        self.compact_expiry();
        self.drop_if_empty(worker);
        Ok(())
    }

    /// `worker` publishes events from now on: its predictions are dropped.
    pub(crate) fn make_exact(&mut self, worker: Worker) {
        if self.exact.insert(worker) {
            register(&mut self.ranks, worker);
        }
        self.drop_trie(worker);
    }

    /// Forgets `worker`: its predictions, pins, and whether it was exact.
    pub(crate) fn forget(&mut self, worker: Worker) {
        self.exact.remove(&worker);
        shrink_set(&mut self.exact);
        self.drop_trie(worker);
        self.unregister_if_gone(worker);
    }

    /// Forgets every rank of worker `id`.
    pub(crate) fn forget_id(&mut self, id: u64) {
        for rank in self.ranks.get(&id).cloned().unwrap_or_default() {
            self.forget(Worker::new(id, rank));
        }
    }
}

/// Lists `worker`'s rank under its id.
pub(super) fn register(ranks: &mut HashMap<u64, Vec<u32>, RandomState>, worker: Worker) {
    let listed = ranks.entry(worker.id).or_default();
    if !listed.contains(&worker.dp_rank) {
        listed.push(worker.dp_rank);
    }
}

/// Gives a map's room back when [`crate::room::shrunk`] says so.
pub(super) fn shrink<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V, RandomState>) {
    if let Some(to) = crate::room::shrunk(map.len(), map.capacity()) {
        map.shrink_to(to);
    }
}

/// [`shrink`] for a set.
pub(super) fn shrink_set<K: Eq + std::hash::Hash>(set: &mut HashSet<K, RandomState>) {
    if let Some(to) = crate::room::shrunk(set.len(), set.capacity()) {
        set.shrink_to(to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    impl Predictions {
        /// Checks that the fleet trie is the union of the workers' tries.
        fn check(&self) {
            let (mut blocks, mut ends) = (0, 0);
            for trie in self.workers.values() {
                let mut kids = HashMap::<u32, u32>::new();
                for (at, node) in trie.nodes.slots() {
                    if at == ROOT || node.len == 0 {
                        continue;
                    }
                    assert_eq!(node.first, self.fleet.local_at(node.fleet, node.start));
                    assert_eq!(trie.kids.get(&(node.parent, node.first)), Some(&at));
                    *kids.entry(node.parent).or_default() += 1;
                    let end = node.start + node.len;
                    assert!(self.fleet.ends_at(node.fleet, end, trie.worker));
                    blocks += node.len as usize;
                    ends += 1;
                }
                assert!(trie.blocks > 0, "an empty trie is dropped");
                assert_eq!(trie.kids.len(), kids.values().sum::<u32>() as usize);
                for (at, node) in trie.nodes.slots() {
                    if at == ROOT || node.len > 0 {
                        let count = kids.get(&at).copied().unwrap_or(0);
                        assert_eq!(node.kids, count, "node {at}'s children");
                    }
                }
            }
            assert_eq!(self.fleet.check(), (blocks, ends));
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Route(u8, Vec<u8>),
        Release(u8),
        Advance(u16),
        MakeExact(u8),
        Forget(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u8..4, proptest::collection::vec(0u8..3, 0..9))
                .prop_map(|(w, chain)| Op::Route(w, chain)),
            3 => any::<u8>().prop_map(Op::Release),
            2 => (0u16..300).prop_map(Op::Advance),
            1 => (0u8..4).prop_map(Op::MakeExact),
            1 => (0u8..4).prop_map(Op::Forget),
        ]
    }

    fn retention() -> impl Strategy<Value = Retention> {
        prop_oneof![
            (1u64..400, 0usize..12)
                .prop_map(|(ms, cap)| Retention::ttl(Duration::from_millis(ms)).with_capacity(cap)),
            (0usize..12).prop_map(Retention::lru),
            (1u64..300, 0usize..12)
                .prop_map(|(ms, cap)| Retention::lru(cap).with_ttl(Duration::from_millis(ms))),
        ]
    }

    proptest! {
        #[test]
        fn the_fleet_is_the_union_of_the_workers_tries(
            retention in retention(),
            ops in proptest::collection::vec(op(), 0..150),
        ) {
            let mut predictions = Predictions::new(retention);
            let mut routed = Vec::new();
            let mut now = Duration::ZERO;
            for op in ops {
                match op {
                    Op::Route(w, chain) => {
                        let locals: Vec<LocalHash> =
                            chain.iter().map(|&l| LocalHash(u64::from(l))).collect();
                        routed.push(predictions.route(Worker::new(u64::from(w), 0), &locals, now, None));
                    }
                    Op::Release(i) => {
                        if !routed.is_empty() {
                            let r = routed.swap_remove(usize::from(i) % routed.len());
                            predictions.release(r, now).unwrap();
                        }
                    }
                    Op::Advance(ms) => {
                        now += Duration::from_millis(u64::from(ms));
                        predictions.advance(now);
                    }
                    Op::MakeExact(w) => predictions.make_exact(Worker::new(u64::from(w), 0)),
                    Op::Forget(w) => predictions.forget(Worker::new(u64::from(w), 0)),
                }
                predictions.check();
            }
            for w in 0..4 {
                predictions.forget(Worker::new(w, 0));
            }
            predictions.check();
            assert_eq!(predictions.fleet.check(), (0, 0));
        }
    }
}
