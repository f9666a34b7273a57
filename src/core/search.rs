//! The core's searches: jump search with binary scan-back for layouts with random access by
//! position ([`ByPosition`]), and a walk from the root for tree layouts ([`Tree`]).
//!
//! By the reachable-only invariant (`held.rs`), the workers present at position `p` of the
//! query's canonical chain are a subset of those present at `p - 1`. So:
//! 1. Start with the workers at position 0 (the *active* set).
//! 2. Jump `J` positions ahead and look at the landing entry. Workers still present there were
//!    present at every position in between: nothing to check for them.
//! 3. Each dropped worker's depth lies in the skipped range: binary search over it. Dropped
//!    workers are partitioned in place at each probe, so a probe serves all of them at once:
//!    at most `min(dropped * log2 J, J)` probes, never a linear scan.
//! 4. After a landing where nobody dropped, the next jump doubles (up to 1,024 positions); a
//!    drop returns it to `J`. Long shared prefixes then cost about `log2 D + D / 1024` probes.
//!
//! A query of depth `D` costs at most about `D / J` probes, plus its canonical hashes: rolled
//! eight blocks to a dependent step (`canon.rs`), with a mark every eight positions, so that a
//! scan-back probe is at most seven single steps from a known hash.
//!
//! Under racing writers every reported depth is `p + 1` for a position `p` where the worker was
//! *observed* present; presence at `p` at that instant means the worker then had depth > `p`.
//! Landing sets are intersected with the active set (not merely counted), so a worker that
//! appears mid-query never stands in for one that left.

use super::canon::{Canon, Key, LANES};
use super::entry_set::Slot;
use super::layout::seam::{ByPosition, JumpSearch, Search, Tree, Walk};
use super::worker_table::{Names, PinnedNames};
use crate::scores::OverlapScores;
use crate::types::LocalHash;

/// The largest jump a search can be configured with.
pub const MAX_JUMP: u32 = 256;

/// The largest jump a gallop reaches: past it, a long shared prefix costs one probe per
/// `MAX_GALLOP` blocks (and the window of marks on the stack grows with it).
pub(crate) const MAX_GALLOP: u32 = 1024;

/// One query's jump search: the layout, the pinned names and the canonical hashes of the
/// current window.
struct ScanBack<'a, 'g, L: ByPosition> {
    layout: &'a L,
    guard: &'a L::Guard<'g>,
    names: &'a PinnedNames<'a>,
    canon: &'a Canon,
    query: &'a [LocalHash],
    /// Canonical hashes at `lo` and every [`LANES`] positions after it: `marks[g]` is position
    /// `lo + g * LANES`. Any position of the window is at most `LANES - 1` steps from a mark.
    marks: [u64; MAX_GALLOP as usize / LANES + 1],
    lo: u32,
    /// The canonical hash at the last landing, where the next window starts.
    landing: u64,
    scores: OverlapScores,
    /// Absent slots during a partition (reused, so a query allocates it at most once).
    scratch: Vec<Slot>,
}

impl<L: ByPosition> ScanBack<'_, '_, L> {
    /// Rolls the window on to `lo..=hi`, where `lo` is the last landing, and returns the key at
    /// `hi`, the next landing.
    fn slide(&mut self, lo: u32, hi: u32) -> Key {
        self.marks[0] = self.landing;
        self.lo = lo;
        let locals = &self.query[lo as usize + 1..=hi as usize];
        self.landing = self.canon.roll(self.landing, locals, &mut self.marks[1..]);
        Key {
            pos: hi,
            canon: self.landing,
        }
    }

    /// The canonical hash at `pos` of the window: from the mark at or before it.
    fn canon_at(&self, pos: u32) -> u64 {
        let g = (pos - self.lo) as usize / LANES;
        let from = self.lo as usize + g * LANES;
        self.query[from + 1..=pos as usize]
            .iter()
            .fold(self.marks[g], |c, &local| self.canon.step(c, local))
    }

    /// `slots` were present at `lo` and absent at `hi`: find each one's last position.
    fn scan_back(&mut self, slots: &mut [Slot], lo: u32, hi: u32) {
        if slots.is_empty() {
            return;
        }
        if hi - lo == 1 {
            for &slot in slots.iter() {
                self.scores.push(self.names.name(slot), lo + 1);
            }
            return;
        }
        let mid = lo + (hi - lo) / 2;
        let key = Key {
            pos: mid,
            canon: self.canon_at(mid),
        };
        // Partition in place, present at `mid` first; both parts stay sorted for the next merge.
        let split = match self.layout.get(key, self.guard) {
            None => 0,
            Some(set) => set.partition(slots, &mut self.scratch),
        };
        let (present, absent) = slots.split_at_mut(split);
        self.scan_back(present, mid, hi);
        self.scan_back(absent, lo, mid);
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

impl<L: ByPosition> Search<L> for JumpSearch {
    fn find(layout: &L, ctx: &QueryCtx<'_>, query: &[LocalHash]) -> OverlapScores {
        jump_search(layout, ctx.names, ctx.canon, query, ctx.jump)
    }
}

impl<L: Tree> Search<L> for Walk {
    fn find(layout: &L, ctx: &QueryCtx<'_>, query: &[LocalHash]) -> OverlapScores {
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
    let mut scores = OverlapScores::new();
    let Some(&first) = query.first() else {
        return scores;
    };
    // Pinned before any slot is read: slots are reused only after every pinned query ends.
    let names = names.pin();
    let guard = layout.guard();
    let Some(mut node) = layout.child(None, 0, first, &guard) else {
        return scores;
    };
    let Some(cover) = layout.cover(node, &guard) else {
        return scores;
    };
    let mut active: Vec<Slot> = cover.slots();
    scores = OverlapScores::with_capacity(active.len());
    let mut base = 0u32;
    loop {
        let edge = layout.edge(node);
        let rest = &query[base as usize..];
        let m = common_prefix(edge, rest) as u32;
        let still = match layout.cover(node, &guard) {
            Some(cover) => cover.keep_at_least(&mut active, m, |slot, c| {
                if base + c > 0 {
                    scores.push(names.name(slot), base + c);
                }
            }),
            None => {
                if base > 0 {
                    for &slot in &active {
                        scores.push(names.name(slot), base);
                    }
                }
                0
            }
        };
        active.truncate(still);
        base += m;
        if active.is_empty() {
            return scores;
        }
        let Some(&next) = query.get(base as usize) else {
            break;
        };
        match layout.child(Some(node), m, next, &guard) {
            Some(child) => node = child,
            None => break,
        }
    }
    for slot in active {
        scores.push(names.name(slot), base);
    }
    scores
}

/// How many blocks `edge` and `query` share from their starts: whole chunks first, compared
/// without an early exit so that the compiler compares a chunk's hashes side by side (SIMD),
/// then block by block inside the chunk where they part.
#[inline]
fn common_prefix(edge: &[LocalHash], query: &[LocalHash]) -> usize {
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

/// How deep each worker matches `query`, jumping `jump` positions at a time.
fn jump_search<L: ByPosition>(
    layout: &L,
    names: &Names,
    canon: &Canon,
    query: &[LocalHash],
    jump: u32,
) -> OverlapScores {
    let Some(&first) = query.first() else {
        return OverlapScores::new();
    };
    let n = u32::try_from(query.len()).unwrap_or(u32::MAX);
    // Pinned before any slot is read: slots are reused only after every pinned query ends.
    let names = names.pin();
    let guard = layout.guard();
    let mut search = ScanBack {
        layout,
        guard: &guard,
        names: &names,
        canon,
        query,
        marks: [0; MAX_GALLOP as usize / LANES + 1],
        lo: 0,
        landing: canon.first(first),
        scores: OverlapScores::new(),
        scratch: Vec::new(),
    };
    let Some(set) = layout.get(
        Key {
            pos: 0,
            canon: search.landing,
        },
        &guard,
    ) else {
        return search.scores;
    };
    let mut active: Vec<Slot> = set.to_vec();
    search.scores = OverlapScores::with_capacity(active.len());
    let mut dropped: Vec<Slot> = Vec::new();
    let base_jump = jump.clamp(1, MAX_JUMP);
    let mut jump = base_jump;
    let mut lo = 0u32;
    while !active.is_empty() && lo + 1 < n {
        let hi = (lo + jump).min(n - 1);
        dropped.clear();
        let key = search.slide(lo, hi);
        match layout.get(key, &guard) {
            Some(set) if set.is_exactly(&active) => {}
            Some(set) => {
                let still = set.partition(&mut active, &mut search.scratch);
                dropped.extend_from_slice(&active[still..]);
                active.truncate(still);
            }
            None => dropped.append(&mut active),
        }
        // Gallop: a landing where nobody dropped doubles the next jump (long shared prefixes
        // cost about log2(D) + D / MAX_GALLOP probes); a drop returns to the configured jump.
        if dropped.is_empty() {
            jump = (jump * 2).min(MAX_GALLOP);
        } else {
            search.scan_back(&mut dropped, lo, hi);
            jump = base_jump;
        }
        lo = hi;
    }
    for slot in active {
        search.scores.push(names.name(slot), lo + 1);
    }
    search.scores
}
