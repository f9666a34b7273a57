//! The core's searches: a walk from the root for tree layouts ([`Tree`]), and jump search with
//! binary scan-back for trees that index their checkpoints ([`Checkpointed`]).
//!
//! By the reachable-only invariant (`held.rs`), a worker holding a block holds the whole path
//! to it. With checkpoints every `S` positions (`tree/`: the block of any chain there is found
//! by its key, as a node and an offset in its edge), the workers holding the query's block at
//! checkpoint `c` are a subset of those holding it at checkpoint `c - S`. So:
//! 1. Start with the workers of the node at position 0 (the *active* set).
//! 2. Jump `J` positions ahead (a multiple of `S`) and look up the block at that checkpoint by
//!    its key. Workers still holding it held every block in between: nothing to check for them.
//!    (One stride ahead, the walk goes there instead, along the tree's links, which is cheaper
//!    than a probe and scores on the way the workers that stop before the landing.)
//! 3. Each dropped worker's last checkpoint lies in the skipped range: binary search over its
//!    checkpoints. Dropped workers are split at each probe, so a probe serves all of them at
//!    once: at most `min(dropped * log2(J / S), J / S)` probes.
//! 4. From its last checkpoint, each worker's exact depth is at most `S - 1` blocks further:
//!    the walk finishes it, comparing the query's local hashes with the edges contiguously.
//! 5. After a landing where nobody dropped, the next jump doubles (up to 1,024 positions); a
//!    drop returns it to `J`. Long shared prefixes then cost about `log2 D + D / 1024` probes.
//!
//! A probe pays only where a walk would hop from node to node ([`HOPS_TO_GALLOP`]): along
//! long edges, comparing the query with an edge costs less than rolling its canonical hashes.
//! So at the default jump (one stride) the search starts as the radix layout's walk, and stops
//! at the first checkpoint to go on jumping only if the walk went down to a few nodes by
//! then and no worker stopped on the way; otherwise the whole query is that one walk. A
//! configured jump of more than one stride always probes.
//!
//! A query of depth `D` costs at most about `D / J` probes, plus its canonical hashes at the
//! checkpoints: rolled a stride of blocks to a dependent step (`canon.rs`), each checkpoint one
//! of the roll's marks, so a probe computes nothing of its own.
//!
//! Worker sets ([`SlotSet`]) are words of bits over the workers' dense slots: intersecting one
//! with a node's cover, or splitting it at a probe, costs a word operation per 64 slots
//! (`cover.rs`), plus one step per worker that stops there, which the answer needs anyway.
//!
//! Under racing writers every reported depth is `p + 1` for a position `p` where the worker was
//! *observed* holding the query's block (a cutoff read from a node it was in, which the core
//! fills shallowest first and empties deepest first). Landing sets are intersected with the
//! active set (not merely counted), so a worker that appears mid-query never stands in for one
//! that left.

use super::canon::{Canon, Key, MAX_FOLD};
use super::cover::{Cover, Drops};
use super::layout::seam::{Checkpointed, JumpSearch, Search, Tree, Walk};
use super::slot_set::SlotSet;
use super::slots::Slot;
use super::worker_table::{Names, PinnedNames};
use crate::prefetch::prefetch;
use crate::scores::OverlapScores;
use crate::types::LocalHash;

/// The largest jump a search can be configured with.
pub const MAX_JUMP: u32 = 256;

/// How many nodes a stride a walk must go down to before the search jumps ahead with probes
/// instead of walking on (at the default jump).
///
/// A probe waits on two misses (the index's slot, then the anchor) after rolling the skipped
/// blocks' canonical hashes; a walk waits on about one miss a node. So a probe pays where the
/// walk hops nodes, not along long edges. And a walk that went down to that many nodes still
/// walks on if a worker stopped on the way: the scan-back walks that stride again anyway, so a
/// probe saves only where nobody leaves. How the threshold was measured: paper §6.14 and §6.19.
const HOPS_TO_GALLOP: u32 = 2;

/// The largest jump a gallop reaches: past it, a long shared prefix costs one probe per
/// `MAX_GALLOP` blocks (and the window of marks on the stack grows with it).
pub(crate) const MAX_GALLOP: u32 = 1024;

/// The shortest stride of checkpoints a search runs over (the longest is [`MAX_FOLD`], the
/// longest run the canonical hash folds into one step).
const MIN_STRIDE: usize = 8;

/// The most strides one jump covers (a gallop stops at `MAX_GALLOP` or at this many strides,
/// whichever is shorter): the window of marks a query keeps on its stack.
const MAX_WINDOW: u32 = 16;

/// One query's jump search: the layout, the pinned names and the canonical hashes of the
/// current window.
struct ScanBack<'a, 'g, L: Checkpointed> {
    walker: Walker<'a, 'g, L>,
    canon: &'a Canon,
    /// Canonical hashes at `lo` and at every checkpoint after it: `marks[g]` is position
    /// `lo + g * L::STRIDE`.
    marks: [u64; MAX_WINDOW as usize + 1],
    lo: u32,
    /// The canonical hash at position `rolled`: the roll is lazy, since a landing one stride
    /// ahead is walked to and needs no key (in a query of up to two strides, nothing is
    /// rolled at all).
    landing: u64,
    rolled: u32,
    scores: OverlapScores,
}

impl<'a, L: Checkpointed> ScanBack<'a, '_, L> {
    /// Rolls the window on to `lo..=hi`, where `lo` is the last landing, and returns the key at
    /// `hi`, the next landing.
    fn slide(&mut self, lo: u32, hi: u32) -> Key {
        let every = L::STRIDE as usize;
        // Catch up with the landings that were walked to, a window at a time (the marks on the
        // way are not needed: they are written over below).
        while self.rolled < lo {
            let to = lo.min(self.rolled + MAX_WINDOW * L::STRIDE);
            let locals = &self.walker.query[self.rolled as usize + 1..=to as usize];
            self.landing = self
                .canon
                .roll(self.landing, locals, every, &mut self.marks[1..]);
            self.rolled = to;
        }
        self.marks[0] = self.landing;
        self.lo = lo;
        let locals = &self.walker.query[lo as usize + 1..=hi as usize];
        self.landing = self
            .canon
            .roll(self.landing, locals, every, &mut self.marks[1..]);
        self.rolled = hi;
        Key {
            pos: hi,
            canon: self.landing,
        }
    }

    /// The key of the checkpoint `pos` of the window: its mark.
    fn key_at(&self, pos: u32) -> Key {
        debug_assert_eq!((pos - self.lo) % L::STRIDE, 0);
        Key {
            pos,
            canon: self.marks[((pos - self.lo) / L::STRIDE) as usize],
        }
    }

    /// The block at the checkpoint `key`, found by its key (with its lines asked for).
    fn probe(&self, key: Key) -> Option<Block<'a, L::Node>> {
        let (layout, guard) = (self.walker.layout, self.walker.guard);
        let (node, off) = layout.checkpoint(key, guard)?;
        let block = Block { node, off };
        warm(layout, block, guard);
        Some(block)
    }

    /// Splits `set` into the workers holding `block` (left in `set`; `None`: nobody) and the
    /// others (returned).
    fn split(&self, block: Option<Block<'a, L::Node>>, set: &mut SlotSet) -> SlotSet {
        let (layout, guard) = (self.walker.layout, self.walker.guard);
        match block.and_then(|b| Some((b.off, layout.cover(b.node, guard)?))) {
            Some((off, cover)) => cover.split_off_short(set, off + 1),
            None => std::mem::take(set),
        }
    }

    /// `set` held `lo_block`, the query's block at checkpoint `lo`, and not its block at
    /// checkpoint `hi`: find each one's last checkpoint, then its depth past it.
    fn scan_back(&mut self, mut set: SlotSet, lo: u32, lo_block: Block<'a, L::Node>, hi: u32) {
        if set.is_empty() {
            return;
        }
        if hi - lo == L::STRIDE {
            let end = hi.min(self.walker.query.len() as u32);
            self.walker
                .descend(lo_block, lo, end, &mut set, &mut self.scores);
            return;
        }
        let mid = lo + (hi - lo) / L::STRIDE / 2 * L::STRIDE;
        let block = self.probe(self.key_at(mid));
        // Split a word at a time: those present at `mid` go on from there.
        let absent = self.split(block, &mut set);
        if let Some(block) = block {
            self.scan_back(set, mid, block, hi);
        }
        self.scan_back(absent, lo, lo_block, mid);
    }
}

/// What a search needs of the index besides the layout: canonical hashes, worker names, the
/// configured jump.
#[derive(Debug)]
pub struct QueryCtx<'a> {
    pub(crate) names: &'a Names,
    pub(crate) canon: &'a Canon,
    pub(crate) jump: u32,
}

impl Search for JumpSearch {
    fn find<L: Checkpointed>(layout: &L, ctx: &QueryCtx<'_>, query: &[LocalHash]) -> OverlapScores {
        jump_search(layout, ctx.names, ctx.canon, query, ctx.jump)
    }
}

impl Search for Walk {
    fn find<L: Checkpointed>(layout: &L, ctx: &QueryCtx<'_>, query: &[LocalHash]) -> OverlapScores {
        walk(layout, ctx.names, query)
    }
}

/// Walks `query` down a compressed tree, comparing it with each edge's blocks contiguously and
/// narrowing the active set once per node: at a node whose edge the query follows for `m`
/// blocks, a worker holding `c < m` of it stops at `c`, and the others go on to the child where
/// the query leaves the edge. Every reported depth is `base + c` for a cutoff `c` read from a
/// node the worker was in: at that instant it held the whole path to there (the core adds
/// shallowest first and removes deepest first), so no phantom.
fn walk<L: Tree>(layout: &L, names: &Names, query: &[LocalHash]) -> OverlapScores {
    let Some(&first) = query.first() else {
        return OverlapScores::new();
    };
    // Pinned before any slot is read: slots are reused only after every pinned query ends.
    let names = names.pin();
    let guard = layout.guard();
    let Some(node) = layout.child(None, 0, first, &guard) else {
        return OverlapScores::new();
    };
    let Some(cover) = layout.cover(node, &guard) else {
        return OverlapScores::new();
    };
    let mut active = cover.members();
    let mut scores = OverlapScores::with_capacity(active.len());
    let end = u32::try_from(query.len()).unwrap_or(u32::MAX);
    let walker = Walker {
        layout,
        guard: &guard,
        names: &names,
        query,
    };
    walker.descend(Block { node, off: 0 }, 0, end, &mut active, &mut scores);
    scores
}

/// A block of the tree: the node whose edge holds it, and its offset in the edge.
struct Block<'g, N> {
    node: &'g N,
    off: u32,
}

impl<N> Clone for Block<'_, N> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<N> Copy for Block<'_, N> {}

/// Where a walk stopped: in `node`, `off` blocks into its edge, at position `pos` of the query,
/// after going down to a child `hops` times.
struct Reached<'g, N> {
    node: &'g N,
    off: u32,
    pos: u32,
    hops: u32,
    /// The walk stopped at its gate.
    gated: bool,
}

/// Where a walk may stop short of its end: at position `end`, if it went down to
/// [`HOPS_TO_GALLOP`] nodes or more on its way there and still has all of its `members` workers.
#[derive(Clone, Copy, Debug)]
struct Gate {
    end: u32,
    members: usize,
}

/// What a walk down the tree reads: the layout, pinned, the workers' names and the query.
struct Walker<'a, 'g, L: Tree> {
    layout: &'a L,
    guard: &'a L::Guard<'g>,
    names: &'a PinnedNames<'a>,
    query: &'a [LocalHash],
}

impl<'a, L: Tree> Walker<'a, '_, L> {
    /// Scores `set`, workers that hold the query's block at `pos`, which is `from`, walking
    /// down from there to position `end` at most; the workers still holding the query where
    /// the walk stopped are scored there.
    fn descend(
        &self,
        from: Block<'a, L::Node>,
        pos: u32,
        end: u32,
        set: &mut SlotSet,
        scores: &mut OverlapScores,
    ) {
        let at = self.narrow(from, pos, end, None, set, scores);
        self.score_all(set, at.pos, scores);
    }

    /// Walks from `from`, the query's block at `pos`, to the end of the query as
    /// [`descend`](Self::descend) does, unless the walk went down to [`HOPS_TO_GALLOP`] nodes
    /// or more by the time it reaches the query's block at the checkpoint `hi`, and none of the
    /// `members` workers of `set` stopped before the node that holds it: then it stops there, as
    /// [`land`](Self::land) does, and returns that block, leaving in `set` the workers holding
    /// it. `None`: walked to the end, everyone scored and `set` emptied.
    fn walk_unless_hopping(
        &self,
        from: Block<'a, L::Node>,
        pos: u32,
        hi: u32,
        members: usize,
        set: &mut SlotSet,
        scores: &mut OverlapScores,
    ) -> Option<Block<'a, L::Node>> {
        let end = u32::try_from(self.query.len()).unwrap_or(u32::MAX);
        let gate = Gate {
            end: hi + 1,
            members,
        };
        let at = self.narrow(from, pos, end, Some(gate), set, scores);
        self.settle(&at, at.gated, set, scores)
    }

    /// Walks from `from`, the query's block at `pos`, to its block at the checkpoint `hi`,
    /// scoring whoever stops before it. Returns that block (`None`: the query leaves the tree
    /// first, and everyone is scored) and how many nodes the walk went down to on the way,
    /// and leaves in `set` the workers holding the block.
    fn land(
        &self,
        from: Block<'a, L::Node>,
        pos: u32,
        hi: u32,
        set: &mut SlotSet,
        scores: &mut OverlapScores,
    ) -> (Option<Block<'a, L::Node>>, u32) {
        // Through the block at `hi`: the walk keeps exactly those holding it.
        let end = hi + 1;
        let at = self.narrow_out(from, pos, end, None, set, scores);
        (self.settle(&at, at.pos >= end, set, scores), at.hops)
    }

    /// Where a walk that was to stop at a landing did: the landing block, the last one it
    /// compared in the node it stopped in, if it `landed` there and someone holds it; else
    /// `None`, with everyone left scored where the walk stopped and `set` emptied.
    fn settle(
        &self,
        at: &Reached<'a, L::Node>,
        landed: bool,
        set: &mut SlotSet,
        scores: &mut OverlapScores,
    ) -> Option<Block<'a, L::Node>> {
        if landed && !set.is_empty() {
            return Some(Block {
                node: at.node,
                off: at.off - 1,
            });
        }
        self.score_all(set, at.pos, scores);
        set.clear();
        None
    }

    /// Keeps in `set` those holding at least `m` blocks of `cover` (`None`: nobody), scoring
    /// each other worker at `base` plus its cutoff (nothing at depth 0).
    #[inline]
    fn keep(
        &self,
        cover: Option<&Cover>,
        set: &mut SlotSet,
        m: u32,
        base: u32,
        scores: &mut OverlapScores,
    ) {
        match cover {
            Some(cover) => cover.keep(
                set,
                m,
                Scorer {
                    names: self.names,
                    scores,
                    base,
                },
            ),
            None => {
                self.score_all(set, base, scores);
                set.clear();
            }
        }
    }

    /// Scores every worker of `set` at `depth` (nothing at 0).
    fn score_all(&self, set: &SlotSet, depth: u32, scores: &mut OverlapScores) {
        if depth > 0 {
            for w in set.words() {
                self.names.score_word(scores, w.word, w.bits, depth);
            }
        }
    }

    /// [`narrow`](Self::narrow) in one copy, for the landings between checkpoints, which the
    /// search reaches from several places.
    #[inline(never)]
    fn narrow_out(
        &self,
        from: Block<'a, L::Node>,
        pos: u32,
        end: u32,
        gate: Option<Gate>,
        set: &mut SlotSet,
        scores: &mut OverlapScores,
    ) -> Reached<'a, L::Node> {
        self.narrow(from, pos, end, gate, set, scores)
    }

    /// Walks down from `from`, the query's block at `pos`, towards position `end`, keeping in
    /// `set` (workers holding `from`) the workers that still hold the query and scoring the
    /// others: at a node whose edge the query follows up to offset `m`, a worker holding
    /// `c < m` blocks of it stops at `c`, and the others go on to the child where the query
    /// leaves the edge. Every reported depth is `base + c` (`base`: the position of the
    /// edge's start) for a cutoff `c` read from a node the worker was in: at that instant it
    /// held the whole path to there (the core adds shallowest first and removes deepest
    /// first), so no phantom. Stops at `end`, where no worker is left, or where the tree has no
    /// child that continues the query.
    ///
    /// With a `gate`, the walk also stops at `gate.end` if it went down to [`HOPS_TO_GALLOP`]
    /// nodes or more by the node that holds the query's block before it, and nobody in `set`
    /// stopped before that node (`Reached::gated`).
    ///
    /// Inlined where a query walks from the root (the radix layout's walk, the jump search's
    /// first leg, where most queries end, and its descents), so that each copy is specialised
    /// to its gate (instruction counts in paper §6.19).
    #[inline(always)]
    fn narrow(
        &self,
        from: Block<'a, L::Node>,
        mut pos: u32,
        end: u32,
        gate: Option<Gate>,
        set: &mut SlotSet,
        scores: &mut OverlapScores,
    ) -> Reached<'a, L::Node> {
        let (layout, guard, query) = (self.layout, self.guard, self.query);
        let Block { mut node, mut off } = from;
        let mut hops = 0;
        loop {
            let edge = layout.edge(node);
            let base = pos - off;
            // The gate closes in the node that holds the block before it, once the walk went
            // down to enough nodes on its way there, unless a worker stopped on the way (the
            // set is counted last: at most once a walk).
            let stop = match gate {
                Some(g)
                    if hops >= HOPS_TO_GALLOP
                        && pos < g.end
                        && g.end <= base + edge.len() as u32
                        && set.len() == g.members =>
                {
                    g.end.min(end)
                }
                _ => end,
            };
            // Where the query goes next if it follows the whole edge (as a hit does): that
            // child's slot loads while the edge and the workers here are compared.
            if let Some(&next) = query.get(base as usize + edge.len()) {
                layout.warm_child(node, edge.len() as u32, next, guard);
            }
            let rest = &query[pos as usize..stop as usize];
            let m = off + common_prefix(&edge[off as usize..], rest) as u32;
            // The cover is loaded after the edge: an edge grows only while one worker holds all
            // of it (the radix tree's appends), so a grown edge comes with that worker's cover,
            // never with an older one whose members held the whole of a shorter edge.
            self.keep(layout.cover(node, guard), set, m, base, scores);
            let reached = Reached {
                node,
                off: m,
                pos: base + m,
                hops,
                gated: stop < end && base + m >= stop,
            };
            if set.is_empty() || reached.pos >= stop {
                return reached;
            }
            match layout.child(Some(node), m, query[reached.pos as usize], guard) {
                Some(child) => {
                    warm(
                        layout,
                        Block {
                            node: child,
                            off: 0,
                        },
                        guard,
                    );
                    (node, off) = (child, 0);
                    hops += 1;
                }
                None => return reached,
            }
            pos = reached.pos;
        }
    }
}

/// Scores the workers a cover drops at `base` plus their cutoffs (nothing at depth 0).
struct Scorer<'s, 'n> {
    names: &'s PinnedNames<'n>,
    scores: &'s mut OverlapScores,
    base: u32,
}

impl Drops for Scorer<'_, '_> {
    #[inline]
    fn one(&mut self, slot: Slot, cutoff: u32) {
        if self.base + cutoff > 0 {
            self.scores.push(self.names.name(slot), self.base + cutoff);
        }
    }

    #[inline]
    fn word(&mut self, word: u32, bits: u64, cutoff: u32) {
        if self.base + cutoff > 0 && bits != 0 {
            self.names
                .score_word(self.scores, word, bits, self.base + cutoff);
        }
    }
}

/// Asks for the edge from `block` on and the node's cover before the walk reads them, so that
/// their misses overlap instead of adding up: a cover that replaced the node's first one lives
/// in its own allocation, and a node found in a sorted child array or the checkpoint index has
/// not had its lines asked for (one found in a child table has: `child_table.rs`).
#[inline]
fn warm<L: Tree>(layout: &L, block: Block<'_, L::Node>, guard: &L::Guard<'_>) {
    /// The edge's first lines: the hardware's stream prefetcher takes over from there.
    const LINES: usize = 4;
    const PER_LINE: usize = 64 / size_of::<LocalHash>();
    let edge = &layout.edge(block.node)[block.off as usize..];
    for line in edge.chunks(PER_LINE).take(LINES) {
        prefetch(line.as_ptr());
    }
    if let Some(cover) = layout.cover(block.node, guard) {
        prefetch(std::ptr::from_ref(cover));
    }
}

/// How many blocks `edge` and `query` share from their starts: whole chunks first, compared
/// without an early exit so that the compiler compares a chunk's hashes side by side (SIMD),
/// then block by block inside the chunk where they part.
#[inline]
pub(crate) fn common_prefix(edge: &[LocalHash], query: &[LocalHash]) -> usize {
    const CHUNK: usize = 8;
    let n = edge.len().min(query.len());
    let (edge, query) = (&edge[..n], &query[..n]);
    let mut i = 0;
    for (a, b) in edge.chunks_exact(CHUNK).zip(query.chunks_exact(CHUNK)) {
        if !a
            .iter()
            .zip(b)
            .fold(true, |same, (x, y)| same & (x.0 == y.0))
        {
            break;
        }
        i += CHUNK;
    }
    i + edge[i..]
        .iter()
        .zip(&query[i..])
        .take_while(|(a, b)| a == b)
        .count()
}

/// How deep each worker matches `query`, jumping about `jump` positions at a time (whole
/// strides of checkpoints).
fn jump_search<L: Checkpointed>(
    layout: &L,
    names: &Names,
    canon: &Canon,
    query: &[LocalHash],
    jump: u32,
) -> OverlapScores {
    let stride = L::STRIDE;
    const {
        assert!(L::STRIDE as usize >= MIN_STRIDE && L::STRIDE as usize <= MAX_FOLD);
        assert!(MAX_GALLOP.is_multiple_of(L::STRIDE));
    };
    let Some(&first) = query.first() else {
        return OverlapScores::new();
    };
    let n = u32::try_from(query.len()).unwrap_or(u32::MAX);
    if n <= stride {
        // No checkpoint past the root's to land on: the walk alone, with no window of marks
        // set up and no hash rolled.
        return walk(layout, names, query);
    }
    // Pinned before any slot is read: slots are reused only after every pinned query ends.
    let names = names.pin();
    let guard = layout.guard();
    // Position 0 is the root's child: the tree finds it without a probe.
    let Some(node) = layout.child(None, 0, first, &guard) else {
        return OverlapScores::new();
    };
    let Some(cover) = layout.cover(node, &guard) else {
        return OverlapScores::new();
    };
    let mut lo_block = Block { node, off: 0 };
    let mut active = cover.members();
    // Counted once: the scores' room, and whether anybody stopped by the first landing.
    let members = active.len();
    let mut scores = OverlapScores::with_capacity(members);
    let walker = Walker {
        layout,
        guard: &guard,
        names: &names,
        query,
    };
    let gallop = MAX_GALLOP.min(MAX_WINDOW * stride);
    let base_jump = (jump.div_ceil(stride).max(1) * stride).min(gallop);
    let last = (n - 1) / stride * stride;
    let mut jump = base_jump;
    let mut lo = 0u32;
    // Whether the search jumps with probes: asked for by a configured jump of more than one
    // stride, and otherwise only once a walk went down to `HOPS_TO_GALLOP` nodes a stride or
    // more. Along long edges a walk is cheaper than any probe, and it goes on to the last
    // checkpoint in one leg.
    let asked = base_jump > stride;
    let mut probing = asked;
    if !asked {
        // At the default jump the first stride is walked, and the walk goes on to the end of
        // the query unless it went down to `HOPS_TO_GALLOP` nodes by the first checkpoint,
        // where it stops for the search to jump on. So along long edges a query is one walk,
        // as in the radix layout: no landing enters a node twice, and no hash is rolled.
        let landing =
            walker.walk_unless_hopping(lo_block, 0, stride, members, &mut active, &mut scores);
        let Some(landing) = landing else {
            return scores;
        };
        // Probes only if nobody stopped on the way, in the landing's node included; otherwise
        // the search walks on, as below.
        let steady = active.len() == members;
        (lo_block, lo, probing) = (landing, stride, steady);
        if steady {
            jump = (jump * 2).min(gallop);
        }
    }
    let mut search = ScanBack {
        walker,
        canon,
        marks: [0; MAX_WINDOW as usize + 1],
        lo: 0,
        landing: canon.first(first),
        rolled: 0,
        scores,
    };
    while !active.is_empty() && lo < last {
        let hi = match probing {
            true => (lo + jump).min(last),
            false => last,
        };
        let before = active.len();
        let landing = if hi - lo == stride || !probing {
            // One stride ahead, or along long edges, the tree's own links reach the block:
            // the edge is warm from the last landing, where a probe of the index would miss
            // twice (slot, then anchor) after rolling every block in between. The walk there
            // scores whoever stops on the way, so nobody is left to scan back.
            let (landing, hops) =
                search
                    .walker
                    .land(lo_block, lo, hi, &mut active, &mut search.scores);
            probing =
                asked || (hops * stride >= HOPS_TO_GALLOP * (hi - lo) && active.len() == before);
            landing
        } else {
            // Further, through many nodes, one probe replaces the walk.
            let key = search.slide(lo, hi);
            let landing = search.probe(key);
            let dropped = search.split(landing, &mut active);
            search.scan_back(dropped, lo, lo_block, hi);
            landing
        };
        // Gallop: a landing where nobody dropped doubles the next jump (long shared prefixes
        // cost about log2(D) + D / MAX_GALLOP probes); a drop returns to the configured jump.
        jump = if active.len() == before {
            (jump * 2).min(gallop)
        } else {
            base_jump
        };
        match landing {
            Some(landing) if !active.is_empty() => lo_block = landing,
            _ => break,
        }
        lo = hi;
    }
    if !active.is_empty() {
        let end = (lo + stride).min(n);
        search
            .walker
            .descend(lo_block, lo, end, &mut active, &mut search.scores);
    }
    search.scores
}
