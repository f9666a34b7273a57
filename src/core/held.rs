//! Per-worker state: what one worker holds, in runs; validation; the reachability cascade.
//!
//! A worker's blocks live in [runs](super::run): a stored event extends the run its parent ends,
//! or starts one. One map names every held seq's run and offset (16 bytes a block); runs that
//! hang under a block in the middle of a run, or under a block that is not held (removed while
//! its descendants stayed), are listed under that block's seq in `kids`, so a block that comes
//! back finds its descendants in one lookup.
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
use super::child_list::ChildList;
use super::entry_set::Slot;
use super::layout::Layout;
use super::run::{Loc, Run, RunId};
use crate::error::EventError;
use crate::types::{Block, Event, SeqHash, Worker};
use foldhash::fast::RandomState;
use std::collections::{BTreeSet, HashMap, HashSet};

type Map<K, V> = HashMap<K, V, RandomState>;

/// What one worker holds. Touched only under the worker's lock.
pub(crate) struct HeldBlocks<L: Layout> {
    slot: Slot,
    /// Every held seq, and every hole's, to its run and offset.
    at: Map<SeqHash, Loc>,
    /// Indexed by [`RunId`]; vacant slots are listed in `free`.
    runs: Vec<Run<L::Handle>>,
    free: Vec<RunId>,
    /// Runs whose first block's parent is this seq, when that parent is not the previous block
    /// of their own run: branches, and runs left under a block that is not held any more.
    kids: Map<SeqHash, ChildList<RunId>>,
    /// Reachable blocks beyond the first at each key (salted twins).
    extra: Map<Key, u32>,
    /// Holes in `at`.
    holes: usize,
    /// Keys being detached, kept between events so that a removal allocates nothing.
    scratch: Vec<Key>,
}

impl<L: Layout> HeldBlocks<L> {
    pub(crate) fn new(slot: Slot) -> Self {
        Self {
            slot,
            at: Map::default(),
            runs: Vec::new(),
            free: Vec::new(),
            kids: Map::default(),
            extra: Map::default(),
            holes: 0,
            scratch: Vec::new(),
        }
    }

    pub(crate) fn block_count(&self) -> usize {
        self.at.len() - self.holes
    }

    /// Holds nothing. (A hole is never last in its run, so then `at` is empty too.)
    pub(crate) fn is_empty(&self) -> bool {
        self.block_count() == 0
    }

    /// Where the held block `seq` is.
    fn held(&self, seq: SeqHash) -> Option<Loc> {
        self.at.get(&seq).copied().filter(|loc| !loc.is_hole())
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
        if blocks.len() > 1 || parent.is_some() {
            let mut seen = HashSet::with_capacity_and_hasher(blocks.len(), RandomState::default());
            for block in blocks {
                if Some(block.seq) == parent || !seen.insert(block.seq) {
                    return Err(EventError::InvalidSequence { seq: block.seq });
                }
            }
        }
        let mut block_parent = parent;
        for block in blocks {
            if let Some(loc) = self.held(block.seq) {
                let run = &self.runs[loc.run as usize];
                if run.blocks[loc.off()].local != block.local
                    || run.parent_of(loc.off()) != block_parent
                {
                    return Err(EventError::Conflict { seq: block.seq });
                }
            }
            block_parent = Some(block.seq);
        }
        let mut block_parent = parent;
        for block in blocks {
            cursor = Some(self.put(layout, guard, canon, block, block_parent, cursor));
            block_parent = Some(block.seq);
        }
        Ok(())
    }

    /// Stores one validated block whose parent is `parent`, held at `cursor`; returns where the
    /// block is.
    fn put(
        &mut self,
        layout: &L,
        guard: &L::Guard<'_>,
        canon: &Canon,
        block: &Block,
        parent: Option<SeqHash>,
        mut cursor: Option<Loc>,
    ) -> Loc {
        if let Some(&loc) = self.at.get(&block.seq) {
            if !loc.is_hole() {
                return loc; // Held already, validated as the same block: a replay.
            }
            let run = &self.runs[loc.run as usize];
            if run.blocks[loc.off()].local == block.local && run.parent_of(loc.off()) == parent {
                self.fill_hole(layout, guard, canon, loc, block.seq);
                return loc.as_held();
            }
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
            _ => Loc::new(self.new_run(canon, parent, cursor), 0),
        };
        self.runs[loc.run as usize].blocks.push(*block);
        self.at.insert(block.seq, loc);
        if self.kids.contains_key(&block.seq) {
            // Runs that stayed held while this block was gone come back with it.
            self.runs[loc.run as usize].may_branch = true;
        }
        let run = &self.runs[loc.run as usize];
        if run.rooted && run.reach as usize == loc.off() {
            self.attach(layout, guard, canon, loc.run);
        }
        loc
    }

    /// A new, empty run under `parent`, which is held at `cursor` (`None`: a root run).
    fn new_run(&mut self, canon: &Canon, parent: Option<SeqHash>, cursor: Option<Loc>) -> RunId {
        let (rooted, anchor) = match cursor {
            None => (true, None),
            Some(c) => {
                let under = &mut self.runs[c.run as usize];
                under.may_branch = true;
                if c.off() < under.reach as usize {
                    let key = under.key_at(canon, c.off());
                    (true, Some((key, under.handles[c.off()])))
                } else {
                    (false, None)
                }
            }
        };
        let id = self.vacant_run();
        self.runs[id as usize] = Run::new(parent, rooted, anchor);
        if let Some(p) = parent {
            self.kids.entry(p).or_default().push(id);
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
        debug_assert!(run.blocks.is_empty());
        if let Some(p) = run.parent {
            if let Some(list) = self.kids.get_mut(&p) {
                list.remove(id);
                if list.is_empty() {
                    self.kids.remove(&p);
                }
            }
        }
        self.free.push(id);
    }

    /// Stores the hole `loc` (of `seq`) back in place.
    fn fill_hole(
        &mut self,
        layout: &L,
        guard: &L::Guard<'_>,
        canon: &Canon,
        loc: Loc,
        seq: SeqHash,
    ) {
        let run = &mut self.runs[loc.run as usize];
        let was_hole = run.holes.remove(&(loc.off() as u32));
        debug_assert!(was_hole, "a hole's offset is in its run's holes");
        self.holes -= 1;
        self.at.insert(seq, loc.as_held());
        if run.rooted && run.reach as usize == loc.off() {
            self.attach(layout, guard, canon, loc.run);
        }
    }

    /// Cuts the run of the hole `loc` (of `seq`) in two: the blocks after the hole become a run
    /// under `seq`, waiting for it in `kids`, and the hole is forgotten.
    fn split_at_hole(&mut self, loc: Loc, seq: SeqHash) {
        let tail_id = self.vacant_run();
        let off = loc.off();
        let run = &mut self.runs[loc.run as usize];
        debug_assert!(run.reach as usize <= off, "a hole is not reachable");
        let tail_blocks = run.blocks.split_off(off + 1);
        run.blocks.pop();
        let tail_holes: BTreeSet<u32> = run
            .holes
            .split_off(&(off as u32 + 1))
            .into_iter()
            .map(|h| h - off as u32 - 1)
            .collect();
        run.holes.remove(&(off as u32));
        let mut tail = Run::new(Some(seq), false, None);
        tail.may_branch = run.may_branch;
        for (i, block) in tail_blocks.iter().enumerate() {
            let moved = Loc::new(tail_id, i);
            let moved = if tail_holes.contains(&(i as u32)) {
                moved.as_hole()
            } else {
                moved
            };
            self.at.insert(block.seq, moved);
        }
        tail.blocks = tail_blocks;
        tail.holes = tail_holes;
        self.runs[tail_id as usize] = tail;
        self.kids.entry(seq).or_default().push(tail_id);
        self.at.remove(&seq);
        self.holes -= 1;
        self.drop_trailing_holes(loc.run);
    }

    /// Drops the holes that end run `id`, and the run if nothing is left.
    fn drop_trailing_holes(&mut self, id: RunId) {
        let run = &mut self.runs[id as usize];
        while run
            .holes
            .last()
            .is_some_and(|&h| h as usize + 1 == run.blocks.len())
        {
            run.holes.pop_last();
            let block = run.blocks.pop().expect("a hole is a block of its run");
            self.at.remove(&block.seq);
            self.holes -= 1;
        }
        if run.blocks.is_empty() {
            self.delete_run(id);
        }
    }

    /// Attaches the rooted run `root` from its reach to its first hole, then the runs under the
    /// blocks it attached, parents before children.
    fn attach(&mut self, layout: &L, guard: &L::Guard<'_>, canon: &Canon, root: RunId) {
        // Neither list allocates unless runs hang under the attached blocks.
        let mut stack = Vec::new();
        let mut rooted: Vec<(RunId, Key, L::Handle)> = Vec::new();
        let mut next = Some(root);
        while let Some(id) = next.take().or_else(|| stack.pop()) {
            let run = &mut self.runs[id as usize];
            debug_assert!(run.rooted, "attach: the run's parent is reachable");
            let mut tip = run.tip();
            for i in run.reach as usize..run.end() {
                let block = run.blocks[i];
                let key = canon.child(tip.map(|(key, _)| key), block.local);
                // SAFETY: the tip's handle is kept only while its block is reachable, and a
                // reachable block's entry holds this worker's slot (I1).
                let (handle, new) =
                    unsafe { layout.add(key, block.local, tip.map(|(_, h)| h), self.slot, guard) };
                if !new {
                    *self.extra.entry(key).or_insert(0) += 1;
                }
                run.attached(i, key, handle);
                tip = Some((key, handle));
                if run.may_branch {
                    if let Some(list) = self.kids.get(&block.seq) {
                        rooted.extend(list.as_slice().iter().map(|&k| (k, key, handle)));
                    }
                }
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
    }

    /// Detaches the reachable blocks of run `root` from `from` on, and every run under them:
    /// runs below before the runs above them, each from its end.
    fn detach(
        &mut self,
        layout: &L,
        guard: &L::Guard<'_>,
        canon: &Canon,
        root: RunId,
        from: usize,
    ) {
        // The runs below, in pre-order (each after the run it hangs under); detached in reverse,
        // then the root. Nothing is allocated when no run hangs below.
        let mut below: Vec<RunId> = Vec::new();
        let mut next = Some((root, from));
        let mut i = 0;
        while let Some((id, from)) = next {
            let run = &self.runs[id as usize];
            if run.may_branch {
                for block in &run.blocks[from..run.reach as usize] {
                    if let Some(list) = self.kids.get(&block.seq) {
                        below.extend_from_slice(list.as_slice());
                    }
                }
            }
            next = below.get(i).map(|&k| (k, 0));
            i += 1;
        }
        let mut keys = std::mem::take(&mut self.scratch);
        for (id, from) in below
            .into_iter()
            .rev()
            .map(|k| (k, 0))
            .chain([(root, from)])
        {
            self.runs[id as usize].keys_from(canon, from, &mut keys);
            for (i, &key) in keys.iter().enumerate().rev() {
                let handle = self.runs[id as usize].handles[from + i];
                self.unref(layout, guard, key, handle);
            }
            let run = &mut self.runs[id as usize];
            run.truncate_reach(canon, from);
            if id != root {
                run.rooted = false;
                run.anchor = None;
            }
        }
        self.scratch = keys;
    }

    fn unref(&mut self, layout: &L, guard: &L::Guard<'_>, key: Key, handle: L::Handle) {
        match self.extra.get_mut(&key) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                self.extra.remove(&key);
            }
            None => {
                // SAFETY: `handle` is what `add` returned for `key` when the block became
                // reachable, and the slot leaves that entry only here, once (I1).
                unsafe { layout.remove(key, handle, self.slot, guard) };
            }
        }
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
        for &seq in seqs {
            let Some(loc) = self.held(seq) else {
                missing.push(seq);
                continue;
            };
            let (id, off) = (loc.run, loc.off());
            if off < self.runs[id as usize].reach as usize {
                self.detach(layout, guard, canon, id, off);
            }
            // Its descendants stay held (the contract): the rest of its run after a hole, and
            // the runs under it in `kids`, waiting for it.
            let run = &mut self.runs[id as usize];
            if off + 1 == run.len() {
                run.blocks.pop();
                self.at.remove(&seq);
                self.drop_trailing_holes(id);
            } else {
                run.holes.insert(off as u32);
                self.at.insert(seq, loc.as_hole());
                self.holes += 1;
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(EventError::UnknownBlocks { missing })
        }
    }

    /// Removes every reachable block from the layout, deepest first, and forgets everything.
    pub(crate) fn clear(&mut self, layout: &L, guard: &L::Guard<'_>, canon: &Canon) {
        let mut reachable = self
            .runs
            .iter()
            .enumerate()
            .filter(|(_, run)| run.reach > 0);
        match (reachable.next(), reachable.next()) {
            (None, _) => {}
            // One run (a worker with one sequence): its own order, from the end, is deepest first.
            (Some((id, _)), None) => self.detach(layout, guard, canon, id as RunId, 0),
            _ => {
                let mut entries: Vec<(Key, L::Handle)> = Vec::new();
                let mut keys = std::mem::take(&mut self.scratch);
                for run in &self.runs {
                    run.keys_from(canon, 0, &mut keys);
                    entries.extend(keys.iter().copied().zip(run.handles.iter().copied()));
                }
                entries.sort_unstable_by_key(|(key, _)| core::cmp::Reverse(key.pos));
                for (key, handle) in entries {
                    self.unref(layout, guard, key, handle);
                }
            }
        }
        debug_assert!(self.extra.is_empty());
        *self = Self::new(self.slot);
    }

    /// Events that rebuild this worker's reachable blocks, parents first: one per run.
    pub(crate) fn dump(&self, worker: Worker, out: &mut Vec<Event>) {
        let mut reachable: Vec<&Run<L::Handle>> =
            self.runs.iter().filter(|run| run.reach > 0).collect();
        reachable.sort_unstable_by_key(|run| (run.pos0(), run.blocks[0].seq));
        for (event_id, run) in reachable.into_iter().enumerate() {
            out.push(Event::stored(
                worker,
                event_id as u64,
                run.parent,
                run.blocks[..run.reach as usize].to_vec(),
            ));
        }
    }
}
