//! Per-worker state: what one worker holds, in runs; validation; the reachability cascade.
//!
//! A worker's blocks live in [runs](super::run): a stored event extends the run its parent ends,
//! or starts one. A table of [places](super::places) finds every held seq's run and offset in one
//! probe (4 or 8 bytes a block: it stores places, not seqs, and checks a place against its run);
//! runs that hang under a block in the middle of a run, or under a block that is not held
//! (removed while its descendants stayed), are listed under that block's seq in `kids`, so a
//! block that comes back finds its descendants in one lookup.
//!
//! An eviction (blocks removed from the end of a run) only shortens the run: the evicted
//! blocks' entries stay in the table, as garbage that no lookup accepts, because a random write
//! per block is most of what an eviction would cost otherwise; the table drops them when it
//! rebuilds.
//!
//! # The reachable-only invariant
//!
//! A worker's slot is in a layout entry exactly while the worker has a *reachable* block (see
//! [the contract](crate::docs::contract)) with that entry's key. Since a reachable block's parent
//! is reachable, presence at position `p` on a query's canonical chain implies presence at every
//! position before `p`: the worker sets along a query shrink monotonically. Jump search and
//! binary scan-back rely on that.
//!
//! At run granularity: a run's blocks `0..reach` are reachable, where `reach` is the run's first
//! hole (or its length) when its parent is reachable (`rooted`) and 0 otherwise. Every mutation
//! keeps the invariant *at every instant*, not only between events, so racing queries never see
//! a phantom: a hole detaches what it cuts off deepest-first (a run's blocks from its end, runs
//! below before the run above them), a repair attaches shallowest-first.
//!
//! Two reachable blocks can share a key (same local hash under the same parent, different engine
//! seqs: the contract's salted twins). The layout holds the slot once; `extra` counts the other
//! blocks, so the slot leaves the entry only with the last of them.

use super::canon::{Canon, Key};
use super::handles;
use super::kids::Kids;
use super::layout::Layout;
use super::places::Places;
use super::run::{KeptCanons, Loc, Run, RunId};
use super::run_keys::RunKeys;
use super::slots::Slot;
use crate::error::EventError;
use crate::prefetch::prefetch_slice;
use crate::types::{Block, Event, LocalHash, SeqHash, Worker};
use foldhash::fast::RandomState;
use std::collections::{BTreeSet, HashMap, HashSet};

type Map<K, V> = HashMap<K, V, RandomState>;

// Per-event scratch of the writing thread, not of the worker: a thread applies the events of
// many workers in turn, and a buffer of its own stays in its cache between them (one per worker
// was a cache miss a block). Each is taken out for an event and put back, never borrowed across
// a call that could take it again.
std::thread_local! {
    /// The seqs of the event being validated.
    static SEEN: core::cell::Cell<HashSet<SeqHash, RandomState>> = core::cell::Cell::default();
    /// Where the blocks of the event being stored were when it was validated.
    static FOUND: core::cell::Cell<Vec<Option<Loc>>> = core::cell::Cell::default();
    /// Local hashes of blocks being detached, read from the layout; or of the new blocks of an
    /// event being attached at once (see `HeldBlocks::store_fresh`).
    static LOCALS: core::cell::Cell<Vec<LocalHash>> = core::cell::Cell::default();
}

/// Key `i` of the detached blocks from position `pos` on: `keys[i]` for a layout that finds
/// entries by key (the core rolled their canonical hashes into `keys`), the position alone
/// otherwise.
fn key_of<L: Layout>(keys: &[Key], pos: u32, i: usize) -> Key {
    match L::KEYED {
        true => keys[i],
        false => Key::unkeyed(pos + i as u32),
    }
}

/// What one worker holds. Touched only under the worker's lock.
pub(crate) struct HeldBlocks<L: Layout> {
    slot: Slot,
    /// Where every held seq is, and every hole's (see the module docs).
    places: Places,
    /// Indexed by [`RunId`]; vacant slots are listed in `free`.
    runs: Vec<Run<L::Handle>>,
    free: Vec<RunId>,
    /// Runs whose first block's parent is this seq, when that parent is not the previous block
    /// of their own run: branches, and runs left under a block that is not held any more.
    kids: Kids,
    /// Reachable blocks beyond the first at each key and handle (salted twins).
    extra: Map<(Key, L::Handle), u32>,
    /// Holes in the runs.
    holes: usize,
    /// Keys being detached, kept between events so that events allocate nothing.
    scratch: Vec<Key>,
    /// The same for the canonical hashes rolled for a run being attached ([`RunKeys`]) ...
    marks: Vec<u64>,
    /// ... and for what the run keeps of them.
    kept: KeptCanons,
    /// Runs of the event being stored that have blocks to attach once it is all in.
    pending: Vec<RunId>,
}

impl<L: Layout> HeldBlocks<L> {
    pub(crate) fn new(slot: Slot) -> Self {
        Self {
            slot,
            places: Places::new(),
            runs: Vec::new(),
            free: Vec::new(),
            kids: Kids::default(),
            extra: Map::default(),
            holes: 0,
            scratch: Vec::new(),
            marks: Vec::new(),
            kept: KeptCanons::default(),
            pending: Vec::new(),
        }
    }

    pub(crate) fn block_count(&self) -> usize {
        self.places.live() - self.holes
    }

    /// Holds nothing. (A hole is never last in its run, so then it has no hole either.)
    pub(crate) fn is_empty(&self) -> bool {
        self.block_count() == 0
    }

    /// Where the held block or hole `seq` is.
    fn place(&self, seq: SeqHash) -> Option<Loc> {
        let loc = self.places.find(&self.runs, seq)?;
        Some(self.hole_marked(loc))
    }

    /// `loc`, marked as a hole if its block is one.
    fn hole_marked(&self, loc: Loc) -> Loc {
        let holes = &self.runs[loc.run as usize].holes;
        match !holes.is_empty() && holes.contains(&(loc.off() as u32)) {
            true => loc.as_hole(),
            false => loc,
        }
    }

    /// Whether the block `seq` is held (a hole is not).
    pub(crate) fn holds(&self, seq: SeqHash) -> bool {
        self.held(seq).is_some()
    }

    /// Where the held block `seq` is.
    fn held(&self, seq: SeqHash) -> Option<Loc> {
        self.place(seq).filter(|loc| !loc.is_hole())
    }

    /// Applies a `Stored` event: checks in the contract's order, then all or nothing.
    pub(crate) fn store(
        &mut self,
        layout: &L,
        guard: &L::Guard<'_>,
        canon: &Canon,
        parent: Option<SeqHash>,
        blocks: &[Block],
    ) -> Result<(), EventError> {
        if blocks.is_empty() {
            return Ok(());
        }
        let mut cursor = match parent {
            None => None,
            Some(p) => match self.held(p) {
                Some(loc) => Some(loc),
                None => return Err(EventError::UnknownParent { parent: p }),
            },
        };
        if self.store_fresh(layout, guard, canon, cursor, parent, blocks) {
            self.attach_pending(layout, guard, canon);
            return Ok(());
        }
        if let Some(seq) = Self::repeated(parent, blocks) {
            return Err(EventError::InvalidSequence { seq });
        }
        // Where each block is now, kept for `put`. A replayed prefix follows the run of the
        // block before it, so it is read off the run's blocks without a probe.
        let mut found = FOUND.take();
        found.clear();
        let mut block_parent = parent;
        let mut after = cursor;
        for block in blocks {
            let loc = match after.and_then(|prev| self.next_in_run(prev, block.seq)) {
                Some(loc) => Some(loc),
                None => self.place(block.seq),
            };
            after = loc.filter(|loc| !loc.is_hole());
            if let Some(loc) = after {
                let run = &self.runs[loc.run as usize];
                if run.local_at(layout, guard, loc.off()) != block.local
                    || run.parent_of(loc.off()) != block_parent
                {
                    FOUND.set(found);
                    return Err(EventError::Conflict { seq: block.seq });
                }
            }
            found.push(loc);
            block_parent = Some(block.seq);
        }
        self.reserve(blocks.len());
        let mut block_parent = parent;
        let mut moved = false;
        for (i, (block, &loc)) in blocks.iter().zip(&found).enumerate() {
            // A cut moves the blocks after a hole: probe again after one.
            let loc = match moved {
                false => loc,
                true => self.place(block.seq),
            };
            let rest = blocks.len() - i;
            let (at, cut) = self.put(canon, block, block_parent, loc, rest, cursor, layout, guard);
            cursor = Some(at);
            moved |= cut;
            block_parent = Some(block.seq);
        }
        FOUND.set(found);
        self.attach_pending(layout, guard, canon);
        Ok(())
    }

    /// Attaches the runs the event extended or started: once per run, not per block (the
    /// layout pays per run). In event order, so parents before children; a run that an earlier
    /// one rooted is attached with it.
    fn attach_pending(&mut self, layout: &L, guard: &L::Guard<'_>, canon: &Canon) {
        let mut pending = std::mem::take(&mut self.pending);
        for id in pending.drain(..) {
            let run = &self.runs[id as usize];
            if run.rooted && (run.reach as usize) < run.end() {
                self.attach(layout, guard, canon, id, None);
            }
        }
        self.pending = pending;
    }

    /// Stores the common shape of event at one probe per new block: a replayed prefix (held
    /// blocks, each the next of its run) followed by blocks this worker has never seen. Returns
    /// `false`, having changed nothing, on any other shape (a repeat, a conflict, a hole, a
    /// block held elsewhere), which the exact path then takes with the contract's error order.
    ///
    /// Why no other check is needed when it returns `true`: the prefix's blocks are distinct
    /// and differ from `parent` (they are consecutive offsets of one run, and a seq has one
    /// place), each new block had no place and was claimed by no earlier new block when it was
    /// filed, so it repeats neither the parent, nor the prefix, nor a new block before it; and
    /// no block conflicts.
    fn store_fresh(
        &mut self,
        layout: &L,
        guard: &L::Guard<'_>,
        canon: &Canon,
        cursor: Option<Loc>,
        parent: Option<SeqHash>,
        blocks: &[Block],
    ) -> bool {
        // The replayed prefix: blocks the worker holds, each the next of one run, so found with
        // one probe at most (a root event's first block) and read off the run.
        let first = match cursor {
            Some(prev) => self.next_in_run(prev, blocks[0].seq),
            None => match self.place(blocks[0].seq) {
                Some(loc) if loc.off() == 0 && self.runs[loc.run as usize].parent.is_none() => {
                    Some(loc)
                }
                Some(_) => return false,
                None => None,
            },
        };
        let mut after = cursor;
        let mut replayed = 0;
        if let Some(first) = first {
            let run = &self.runs[first.run as usize];
            let off = first.off();
            // The prefix is compared block by block against the run's seqs: their lines are
            // asked for at once rather than one miss after another (paper §6.16).
            let span = (run.seqs.len() - off).min(blocks.len());
            if span > 8 {
                prefetch_slice(&run.seqs[off..off + span]);
                prefetch_slice(&blocks[..span]);
            }
            replayed = (blocks.iter().zip(&run.seqs[off..]))
                .take_while(|(block, seq)| block.seq == **seq)
                .count();
            let range = off as u32..(off + replayed) as u32;
            if (!run.holes.is_empty() && run.holes.range(range).next().is_some())
                || !run.locals_equal(layout, guard, off, &blocks[..replayed])
            {
                return false;
            }
            after = Some(Loc::new(first.run, off + replayed - 1));
        }
        let fresh = &blocks[replayed..];
        if fresh.is_empty() {
            return true;
        }
        // Where the new blocks go: after the prefix when it ends its run (a decode step), else
        // a new run, whose id `vacant_run` is about to hand out.
        let extends = after.filter(|c| c.off() + 1 == self.runs[c.run as usize].len());
        let (id, off0) = match extends {
            Some(c) => (c.run, c.off() + 1),
            None => (
                self.free
                    .last()
                    .copied()
                    .unwrap_or(self.runs.len() as RunId),
                0,
            ),
        };
        self.reserve(fresh.len());
        if !self.places.claim_all(&self.runs, fresh, id, off0) {
            return false;
        }
        let block_parent = match replayed {
            0 => parent,
            n => Some(blocks[n - 1].seq),
        };
        if extends.is_none() {
            let new = self.new_run(layout, guard, canon, block_parent, after);
            debug_assert_eq!(new, id, "the run id `at` was given");
        }
        let run = &mut self.runs[id as usize];
        // All of a rooted run reachable: the new blocks are attached now, their local hashes
        // handed to the layout from a buffer of the thread's instead of through the run's list
        // of unreachable ones (an allocation and a free an event).
        let at_once = run.rooted && run.reach as usize == run.len();
        match at_once {
            true => run.extend_seqs(fresh),
            false => run.extend(fresh),
        }
        if !self.kids.is_empty() && fresh.iter().any(|b| self.kids.contains(b.seq)) {
            // Runs that stayed held while one of these blocks was gone come back with it.
            run.may_branch = true;
        }
        if at_once {
            let mut locals = LOCALS.take();
            locals.clear();
            locals.extend(fresh.iter().map(|block| block.local));
            self.attach(layout, guard, canon, id, Some(&locals));
            LOCALS.set(locals);
        } else if run.rooted {
            self.pending.push(id);
        }
        true
    }

    /// The first block of an event whose seq is its parent's or an earlier block's.
    fn repeated(parent: Option<SeqHash>, blocks: &[Block]) -> Option<SeqHash> {
        /// Up to this many blocks, comparing every pair is cheaper than hashing.
        const PAIRWISE: usize = 16;
        if blocks.len() <= PAIRWISE {
            return blocks.iter().enumerate().find_map(|(i, block)| {
                let earlier = &blocks[..i];
                (Some(block.seq) == parent || earlier.iter().any(|b| b.seq == block.seq))
                    .then_some(block.seq)
            });
        }
        let mut seen = SEEN.take();
        // Cleared per event: a set left large by one long event would make every clear cost.
        if seen.capacity() > (4 * blocks.len()).max(1024) {
            seen = HashSet::default();
        }
        seen.clear();
        let repeated = blocks
            .iter()
            .find(|block| Some(block.seq) == parent || !seen.insert(block.seq))
            .map(|block| block.seq);
        SEEN.set(seen);
        repeated
    }

    /// Where `seq` is when it is the block after the held `prev` in `prev`'s run (`at` has it
    /// there, as every block of a run).
    fn next_in_run(&self, prev: Loc, seq: SeqHash) -> Option<Loc> {
        let run = &self.runs[prev.run as usize];
        let off = prev.off() + 1;
        if *run.seqs.get(off)? != seq {
            return None;
        }
        let loc = Loc::new(prev.run, off);
        debug_assert_eq!(
            self.places.find(&self.runs, seq),
            Some(loc),
            "every block of a run has its place"
        );
        Some(self.hole_marked(loc))
    }

    /// Stores one validated block whose parent is `parent`, held at `cursor`, and which is at
    /// `found` now (`None`: not held, nor a hole); `rest` blocks of the event are left, this one
    /// included. Returns where the block is, and whether a run was cut (which moves blocks). A
    /// block that extends or starts a rooted run is attached at the end of the event
    /// (`pending`); a filled hole at once.
    #[allow(clippy::too_many_arguments)]
    fn put(
        &mut self,
        canon: &Canon,
        block: &Block,
        parent: Option<SeqHash>,
        found: Option<Loc>,
        rest: usize,
        mut cursor: Option<Loc>,
        layout: &L,
        guard: &L::Guard<'_>,
    ) -> (Loc, bool) {
        let mut cut = false;
        if let Some(loc) = found {
            if !loc.is_hole() {
                return (loc, false); // Held already, validated as the same block: a replay.
            }
            let run = &self.runs[loc.run as usize];
            if run.local_at(layout, guard, loc.off()) == block.local
                && run.parent_of(loc.off()) == parent
            {
                self.fill_hole(layout, guard, canon, loc);
                return (loc.as_held(), false);
            }
            cut = true;
            // Back under another parent or local: the blocks after the hole are its
            // descendants, and follow it to where it is stored now.
            self.split_at_hole(loc, block.seq);
            // The cut may have moved the parent into the new run: look it up again.
            cursor = parent.and_then(|p| self.held(p));
        }
        let loc = match cursor {
            Some(c) if c.off() + 1 == self.runs[c.run as usize].len() => {
                // The parent ends its run: the block extends it (a decode step).
                Loc::new(c.run, c.off() + 1)
            }
            _ => Loc::new(self.new_run(layout, guard, canon, parent, cursor), 0),
        };
        // A run grows by the rest of its event at once, not by doubling from empty.
        let run = &mut self.runs[loc.run as usize];
        run.reserve(rest);
        run.extend(core::slice::from_ref(block));
        self.places.insert(&self.runs, block.seq, loc);
        if self.kids.contains(block.seq) {
            // Runs that stayed held while this block was gone come back with it.
            self.runs[loc.run as usize].may_branch = true;
        }
        if self.runs[loc.run as usize].rooted && self.pending.last() != Some(&loc.run) {
            self.pending.push(loc.run);
        }
        (loc, cut)
    }

    /// A new, empty run under `parent`, which is held at `cursor` (`None`: a root run).
    fn new_run(
        &mut self,
        layout: &L,
        guard: &L::Guard<'_>,
        canon: &Canon,
        parent: Option<SeqHash>,
        cursor: Option<Loc>,
    ) -> RunId {
        let (rooted, anchor) = match cursor {
            None => (true, None),
            Some(c) => {
                let under = &mut self.runs[c.run as usize];
                under.may_branch = true;
                if c.off() < under.reach as usize {
                    let key = under.key_at(layout, guard, canon, c.off());
                    (true, Some((key, under.handles.get(c.off()))))
                } else {
                    (false, None)
                }
            }
        };
        let id = self.vacant_run();
        self.runs[id as usize] = Run::new(parent, rooted, anchor);
        if let Some(p) = parent {
            self.kids.push(p, id);
        }
        id
    }

    fn vacant_run(&mut self) -> RunId {
        self.free.pop().unwrap_or_else(|| {
            self.runs.push(Run::vacant());
            (self.runs.len() - 1) as RunId
        })
    }

    /// Frees the empty run `id`.
    fn delete_run(&mut self, id: RunId) {
        let run = std::mem::replace(&mut self.runs[id as usize], Run::vacant());
        debug_assert_eq!(run.len(), 0);
        if let Some(p) = run.parent {
            self.kids.remove(p, id);
        }
        self.free.push(id);
    }

    /// Stores the hole `loc` back in place.
    fn fill_hole(&mut self, layout: &L, guard: &L::Guard<'_>, canon: &Canon, loc: Loc) {
        let run = &mut self.runs[loc.run as usize];
        let was_hole = run.holes.edit(|holes| holes.remove(&(loc.off() as u32)));
        debug_assert!(was_hole, "a hole's offset is in its run's holes");
        self.holes -= 1;
        if run.rooted && run.reach as usize == loc.off() {
            self.attach(layout, guard, canon, loc.run, None);
        }
    }

    /// Cuts the run of the hole `loc` (of `seq`) in two: the blocks after the hole become a run
    /// under `seq`, waiting for it in `kids`, and the hole is forgotten.
    fn split_at_hole(&mut self, loc: Loc, seq: SeqHash) {
        let tail_id = self.vacant_run();
        let off = loc.off();
        let run = &mut self.runs[loc.run as usize];
        debug_assert!(run.reach as usize <= off, "a hole is not reachable");
        let (tail_seqs, tail_locals) = run.split_off(off);
        run.truncate(off);
        let tail_holes: BTreeSet<u32> = run
            .holes
            .edit(|holes| holes.split_off(&(off as u32 + 1)))
            .into_iter()
            .map(|h| h - off as u32 - 1)
            .collect();
        run.holes.edit(|holes| holes.remove(&(off as u32)));
        let mut tail = Run::unrooted(seq, tail_seqs, tail_locals);
        tail.may_branch = run.may_branch;
        tail.holes = tail_holes.into();
        self.runs[tail_id as usize] = tail;
        for (i, &moved) in self.runs[tail_id as usize].seqs.iter().enumerate() {
            let (from, to) = (Loc::new(loc.run, off + 1 + i), Loc::new(tail_id, i));
            self.places.moved(&self.runs, moved, from, to);
        }
        self.kids.push(seq, tail_id);
        self.places.vacated(1);
        self.holes -= 1;
        self.drop_trailing_holes(loc.run);
    }

    /// Drops the holes that end run `id`, and the run if nothing is left.
    fn drop_trailing_holes(&mut self, id: RunId) {
        let run = &mut self.runs[id as usize];
        while run
            .holes
            .last()
            .is_some_and(|&h| h as usize + 1 == run.len())
        {
            run.holes.edit(BTreeSet::pop_last);
            run.truncate(run.len() - 1);
            self.places.vacated(1);
            self.holes -= 1;
        }
        if run.len() == 0 {
            self.delete_run(id);
        }
    }

    /// Attaches the rooted run `root` from its reach to its first hole, then the runs under the
    /// blocks it attached, parents before children: one layout call per run. The root's blocks'
    /// local hashes are `staged` when given (the run keeps none), else the run's.
    fn attach(
        &mut self,
        layout: &L,
        guard: &L::Guard<'_>,
        canon: &Canon,
        root: RunId,
        staged: Option<&[LocalHash]>,
    ) {
        // Neither list allocates unless runs hang under the attached blocks.
        let mut stack = Vec::new();
        let mut rooted: Vec<(RunId, Key, L::Handle)> = Vec::new();
        let mut marks = std::mem::take(&mut self.marks);
        let mut next = Some(root);
        while let Some(id) = next.take().or_else(|| stack.pop()) {
            let run = &mut self.runs[id as usize];
            debug_assert!(run.rooted, "attach: the run's parent is reachable");
            let (from, end) = (run.reach as usize, run.end());
            if from < end {
                let tip = run.tip(layout, guard, canon);
                // The blocks from `reach` on are unreachable: their local hashes are the run's.
                let staged = staged.filter(|_| id == root);
                let locals = match staged {
                    Some(staged) => &staged[..end - from],
                    None => &run.unreachable[..end - from],
                };
                // A layout that ignores keys gets positions alone: the core then rolls no
                // canonical hashes.
                let keys =
                    RunKeys::roll(canon, L::KEYED, tip.map(|(key, _)| key), locals, &mut marks);
                self.kept.take(from, end - from, &keys);
                handles::with_scratch(|added: &mut Vec<L::Handle>| {
                    // SAFETY: the tip's handle is kept only while its block is reachable, and a
                    // reachable block's entry holds this worker's slot (I1).
                    let twins = unsafe {
                        layout.add_run(tip.map(|(_, h)| h), &keys, locals, self.slot, guard, added)
                    };
                    run.handles.extend(added);
                    for (i, handle) in added.iter().enumerate().take(twins) {
                        *self.extra.entry((keys.key(i), *handle)).or_insert(0) += 1;
                    }
                    if run.may_branch {
                        for (i, seq) in run.seqs[from..end].iter().enumerate() {
                            if let Some(list) = self.kids.get(*seq) {
                                let handle = added[i];
                                let key = keys.key(i);
                                rooted.extend(list.as_slice().iter().map(|&k| (k, key, handle)));
                            }
                        }
                    }
                });
                run.attached(end - from, &self.kept, staged.is_none());
            }
            for (k, key, handle) in rooted.drain(..) {
                let kid = &mut self.runs[k as usize];
                // A run under its own block would sit on a cycle, which is never reachable.
                if k != id && !kid.rooted {
                    kid.rooted = true;
                    kid.anchor = Some((key, handle));
                    stack.push(k);
                }
            }
        }
        self.marks = marks;
    }

    /// Detaches the reachable blocks of run `root` from `from` on, and every run under them:
    /// runs below before the runs above them, each from its end, one layout call per run.
    /// With `keep_root` false, the root's blocks from `from` on are dropped with their reach
    /// (an eviction, or a clear), so their local hashes are not read back from the layout.
    fn detach(
        &mut self,
        layout: &L,
        guard: &L::Guard<'_>,
        canon: &Canon,
        root: RunId,
        from: usize,
        keep_root: bool,
    ) {
        // The runs below, in pre-order (each after the run it hangs under); detached in reverse,
        // then the root. Nothing is allocated when no run hangs below.
        let mut below: Vec<RunId> = Vec::new();
        let mut next = Some((root, from));
        let mut i = 0;
        while let Some((id, from)) = next {
            let run = &self.runs[id as usize];
            if run.may_branch {
                for seq in &run.seqs[from..run.reach as usize] {
                    if let Some(list) = self.kids.get(*seq) {
                        below.extend_from_slice(list.as_slice());
                    }
                }
            }
            next = below.get(i).map(|&k| (k, 0));
            i += 1;
        }
        let mut keys = std::mem::take(&mut self.scratch);
        let mut locals = LOCALS.take();
        // Keys are rolled only to find salted twins: a layout removes by handle.
        let keyed = L::KEYED && !self.extra.is_empty();
        for (id, from) in below
            .into_iter()
            .rev()
            .map(|k| (k, 0))
            .chain([(root, from)])
        {
            let keep = id != root || keep_root;
            let run = &mut self.runs[id as usize];
            let reach = run.reach as usize;
            // The detached blocks' local hashes, read from the layout while their entries hold
            // the slot: for their keys (rolled from the checkpoint before them) and to keep.
            let base = match keyed {
                true => Run::<L::Handle>::keys_base(from),
                false => from,
            };
            locals.clear();
            if from < reach && (keyed || keep) {
                run.locals(layout, guard, base, reach, &mut locals);
            }
            run.keys_from(canon, keyed, from, &locals, &mut keys);
            if from < reach {
                let pos = run.pos0() + from as u32;
                // Blocks whose key another reachable block of this worker shares (a salted
                // twin) stay in the layout. They are a prefix: a twin's parent is at the key
                // before, so it is shared too.
                let mut shared = 0;
                while !self.extra.is_empty() && from + shared < reach {
                    let at = (
                        key_of::<L>(&keys, pos, shared),
                        run.handles.get(from + shared),
                    );
                    match self.extra.get_mut(&at) {
                        Some(n) if *n > 1 => *n -= 1,
                        Some(_) => {
                            self.extra.remove(&at);
                        }
                        None => break,
                    }
                    shared += 1;
                }
                // Straight from the stretches the run keeps, the last first: no handle a block
                // is made, to be grouped by node again (paper §6.18).
                let slot = self.slot;
                run.handles.stretches_rev(from + shared, reach, |first, n| {
                    // SAFETY: the stretches hold what `add_run` returned for these blocks when
                    // they became reachable, and the slot leaves those entries only here, once
                    // (I1); detached last first, nothing holds the slot below each stretch.
                    unsafe { layout.remove_stretch(first, n, slot, guard) };
                });
            }
            let kept = keep.then(|| locals.get(from - base..).unwrap_or_default());
            run.truncate_reach(L::KEYED, from, kept);
            if id != root {
                run.rooted = false;
                run.anchor = None;
            }
        }
        LOCALS.set(locals);
        self.scratch = keys;
    }

    /// Applies a `Removed` event, in list order.
    pub(crate) fn remove(
        &mut self,
        layout: &L,
        guard: &L::Guard<'_>,
        canon: &Canon,
        seqs: &[SeqHash],
    ) -> Result<(), EventError> {
        let mut missing = Vec::new();
        let mut next = 0;
        while let Some(&seq) = seqs.get(next) {
            next += 1;
            let Some(loc) = self.held(seq) else {
                missing.push(seq);
                continue;
            };
            let (id, off) = (loc.run, loc.off());
            if off + 1 != self.runs[id as usize].len() {
                // Its descendants stay held (the contract): the rest of its run after the hole,
                // and the runs under it in `kids`, waiting for it.
                if off < self.runs[id as usize].reach as usize {
                    self.detach(layout, guard, canon, id, off, true);
                }
                self.runs[id as usize]
                    .holes
                    .edit(|holes| holes.insert(off as u32));
                self.holes += 1;
                continue;
            }
            // The run's last block. An eviction lists a tail last block first: take the seqs
            // that each remove the next last block of this run with it, and detach them in one
            // call (the same end state as one at a time, and deepest first all the same).
            let run = &self.runs[id as usize];
            // The blocks this walk may compare, asked for at once: the run's seqs before the
            // last one (read backwards) and the event's seqs after this one, which read cold one
            // line after another held up most of the walk (paper §6.16).
            let span = off.min(seqs.len() - next);
            if off < run.reach as usize {
                // Read when the walk is done; asked for first, its miss overlaps the walk's
                // (paper §6.18).
                run.handles.warm();
            }
            if span > 8 {
                prefetch_slice(&run.seqs[off - span..off]);
                prefetch_slice(&seqs[next..next + span]);
            }
            // The walk stops at a hole: the blocks after the last hole before `off`.
            let floor = match run.holes.is_empty() {
                true => 0,
                false => run
                    .holes
                    .range(..off as u32)
                    .next_back()
                    .map_or(0, |&h| h + 1),
            };
            // Two slices compared (the run's read backwards), not a block and a hole set at a
            // time: fewer branches a block (paper §6.18).
            let taken = (seqs[next..].iter())
                .zip(run.seqs[floor as usize..off].iter().rev())
                .take_while(|(a, b)| a == b)
                .count();
            let from = off - taken;
            next += taken;
            // The evicted blocks' entries stay, as garbage (see the module docs).
            self.places.vacated(run.len() - from);
            if from < run.reach as usize {
                self.detach(layout, guard, canon, id, from, false);
            }
            self.runs[id as usize].truncate(from);
            self.drop_trailing_holes(id);
        }
        self.places.shrink_if_sparse(&self.runs);
        if missing.is_empty() {
            Ok(())
        } else {
            Err(EventError::UnknownBlocks { missing })
        }
    }

    /// Makes room for `n` more places.
    fn reserve(&mut self, n: usize) {
        self.places.reserve(&self.runs, n);
    }

    /// Removes every reachable block from the layout, deepest first, and forgets everything.
    pub(crate) fn clear(&mut self, layout: &L, guard: &L::Guard<'_>, canon: &Canon) {
        // Every reachable run hangs, through `kids`, below a reachable run with no parent:
        // detaching those detaches everything, each run from its end and below first.
        for id in 0..self.runs.len() {
            let run = &self.runs[id];
            if run.reach > 0 && run.anchor.is_none() {
                self.detach(layout, guard, canon, id as RunId, 0, false);
            }
        }
        debug_assert!(self.runs.iter().all(|run| run.reach == 0));
        debug_assert!(self.extra.is_empty());
        *self = Self::new(self.slot);
    }

    /// Events that rebuild this worker's reachable blocks, parents first: one per run.
    pub(crate) fn dump(
        &self,
        layout: &L,
        guard: &L::Guard<'_>,
        worker: Worker,
        out: &mut Vec<Event>,
    ) {
        let mut reachable: Vec<&Run<L::Handle>> =
            self.runs.iter().filter(|run| run.reach > 0).collect();
        reachable.sort_unstable_by_key(|run| (run.pos0(), run.seqs[0]));
        let mut locals = Vec::new();
        for (event_id, run) in reachable.into_iter().enumerate() {
            let reach = run.reach as usize;
            locals.clear();
            run.locals(layout, guard, 0, reach, &mut locals);
            let blocks = (locals.iter().zip(&run.seqs[..reach]))
                .map(|(&local, &seq)| Block::new(local, seq))
                .collect();
            out.push(Event::stored(worker, event_id as u64, run.parent, blocks));
        }
    }
}
