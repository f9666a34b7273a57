//! Per-worker state: what one worker holds, validation, and the reachability cascade.
//!
//! # The reachable-only invariant
//!
//! A worker's slot is in a layout entry exactly while the worker has a *reachable* block (see
//! [the contract](crate::docs::contract)) with that entry's key. Since a reachable block's parent
//! is reachable, presence at position `p` on a query's canonical chain implies presence at every
//! position before `p`: the worker sets along a query shrink monotonically. Jump search and binary scan-back rely on that.
//!
//! Every mutation keeps the invariant *at every instant*, not only between events, so racing
//! queries never see a phantom: a hole detaches its reachable subtree deepest-first (children
//! before their parent), a re-store attaches shallowest-first (parent before its children).
//!
//! Two reachable blocks can share a key (same local hash under the same parent, different engine
//! seqs: the contract's salted twins). The layout holds the slot once; `extra` counts the other
//! blocks, so the slot leaves the entry only with the last of them.

use super::canon::{Canon, Key};
use super::child_list::ChildList;
use super::entry_set::Slot;
use super::layout::Layout;
use crate::error::EventError;
use crate::types::{Block, Event, LocalHash, SeqHash, Worker};
use foldhash::fast::RandomState;
use std::collections::{HashMap, HashSet};

type Map<K, V> = HashMap<K, V, RandomState>;

/// One held block, packed: a fleet holds millions, so every byte counts (40 bytes, plus the
/// layout's handle: nothing for the maps, a node pointer for the tree).
#[derive(Clone, Copy, Debug)]
struct Held<H> {
    local: LocalHash,
    /// Valid when `HAS_PARENT`.
    parent: SeqHash,
    /// Canonical hash, valid when `REACHABLE`.
    canon: u64,
    /// The first held child, valid when `HAS_CHILD`; further children are in `more_children`.
    child: SeqHash,
    /// Position, valid when `REACHABLE`.
    pos: u32,
    flags: u8,
    /// The layout's handle of the entry, while `REACHABLE`.
    handle: Option<H>,
}

const HAS_PARENT: u8 = 1;
const REACHABLE: u8 = 2;
const HAS_CHILD: u8 = 4;

impl<H: Copy> Held<H> {
    fn parent(&self) -> Option<SeqHash> {
        (self.flags & HAS_PARENT != 0).then_some(self.parent)
    }

    fn reach(&self) -> Option<Key> {
        (self.flags & REACHABLE != 0).then_some(Key {
            pos: self.pos,
            canon: self.canon,
        })
    }

    fn reach_handle(&self) -> Option<(Key, H)> {
        self.reach().zip(self.handle)
    }
}

/// What one worker holds. Touched only under the worker's lock.
pub(crate) struct HeldBlocks<L: Layout> {
    slot: Slot,
    blocks: Map<SeqHash, Held<L::Handle>>,
    /// Held children beyond the first (`Held::child`) of held blocks: only branch points.
    more_children: Map<SeqHash, ChildList>,
    /// Held children of blocks that are not held (removed while their children stayed). They
    /// are adopted again when the block is stored again.
    orphans: Map<SeqHash, ChildList>,
    /// Reachable blocks beyond the first at each key (salted twins).
    extra: Map<Key, u32>,
}

impl<L: Layout> HeldBlocks<L> {
    pub(crate) fn new(slot: Slot) -> Self {
        Self {
            slot,
            blocks: Map::default(),
            more_children: Map::default(),
            orphans: Map::default(),
            extra: Map::default(),
        }
    }

    pub(crate) fn block_count(&self) -> usize {
        self.blocks.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Held children of the held block `seq`.
    fn children(&self, seq: SeqHash, out: &mut Vec<SeqHash>) {
        let held = &self.blocks[&seq];
        if held.flags & HAS_CHILD != 0 {
            out.push(held.child);
            if let Some(more) = self.more_children.get(&seq) {
                out.extend_from_slice(more.as_slice());
            }
        }
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
        if let Some(p) = parent {
            if !self.blocks.contains_key(&p) {
                return Err(EventError::UnknownParent { parent: p });
            }
        }
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
            if let Some(held) = self.blocks.get(&block.seq) {
                if held.local != block.local || held.parent() != block_parent {
                    return Err(EventError::Conflict { seq: block.seq });
                }
            }
            block_parent = Some(block.seq);
        }
        let mut block_parent = parent;
        for block in blocks {
            if !self.blocks.contains_key(&block.seq) {
                self.insert(layout, guard, canon, block.seq, block.local, block_parent);
            }
            block_parent = Some(block.seq);
        }
        Ok(())
    }

    fn insert(
        &mut self,
        layout: &L,
        guard: &L::Guard<'_>,
        canon: &Canon,
        seq: SeqHash,
        local: LocalHash,
        parent: Option<SeqHash>,
    ) {
        let mut held = Held {
            local,
            parent: SeqHash(0),
            canon: 0,
            child: SeqHash(0),
            pos: 0,
            flags: 0,
            handle: None,
        };
        if let Some(p) = parent {
            held.parent = p;
            held.flags |= HAS_PARENT;
        }
        // Children that stayed held while this block was gone come back with it.
        if let Some(mut kids) = self.orphans.remove(&seq) {
            held.child = kids.pop().expect("orphan lists are never empty");
            held.flags |= HAS_CHILD;
            if !kids.is_empty() {
                self.more_children.insert(seq, kids);
            }
        }
        self.blocks.insert(seq, held);
        let reachable = match parent {
            None => true,
            Some(p) => {
                let parent = self.blocks.get_mut(&p).expect("store validated the parent");
                if parent.flags & HAS_CHILD == 0 {
                    parent.child = seq;
                    parent.flags |= HAS_CHILD;
                } else {
                    self.more_children.entry(p).or_default().push(seq);
                }
                parent.flags & REACHABLE != 0
            }
        };
        if reachable {
            self.attach(layout, guard, canon, seq);
        }
    }

    /// Makes `root` (whose parent is reachable or `None`) and its held descendants reachable,
    /// parents before children.
    fn attach(&mut self, layout: &L, guard: &L::Guard<'_>, canon: &Canon, root: SeqHash) {
        let mut stack = vec![root];
        while let Some(seq) = stack.pop() {
            let held = self.blocks[&seq];
            if held.flags & REACHABLE != 0 {
                continue; // Cannot happen on a tree; keeps any input from looping.
            }
            let parent = held.parent().map(|p| {
                self.blocks[&p]
                    .reach_handle()
                    .expect("attach: parent is reachable")
            });
            let key = canon.child(parent.map(|(key, _)| key), held.local);
            // SAFETY: the parent's handle is kept only while the parent is reachable, and a
            // reachable block's entry holds this worker's slot (I1).
            let (handle, new) =
                unsafe { layout.add(key, held.local, parent.map(|(_, h)| h), self.slot, guard) };
            if !new {
                *self.extra.entry(key).or_insert(0) += 1;
            }
            let entry = self.blocks.get_mut(&seq).expect("attach: held");
            entry.pos = key.pos;
            entry.canon = key.canon;
            entry.handle = Some(handle);
            entry.flags |= REACHABLE;
            self.children(seq, &mut stack);
        }
    }

    /// Makes `root` (reachable) and its descendants unreachable, children before parents.
    fn detach(&mut self, layout: &L, guard: &L::Guard<'_>, root: SeqHash) {
        // Pre-order collection, detached in reverse: every block after all its descendants.
        // Held descendants of a reachable block are all reachable.
        let mut order = vec![root];
        let mut i = 0;
        while i < order.len() {
            let seq = order[i];
            self.children(seq, &mut order);
            i += 1;
        }
        for seq in order.into_iter().rev() {
            let held = self.blocks.get_mut(&seq).expect("detach: held");
            if let Some((key, handle)) = held.reach_handle() {
                held.flags &= !REACHABLE;
                held.handle = None;
                self.unref(layout, guard, key, handle);
            }
        }
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
        seqs: &[SeqHash],
    ) -> Result<(), EventError> {
        let mut missing = Vec::new();
        for &seq in seqs {
            let Some(held) = self.blocks.get(&seq).copied() else {
                missing.push(seq);
                continue;
            };
            if held.flags & REACHABLE != 0 {
                self.detach(layout, guard, seq);
            }
            // Its children stay held (the contract) and wait for it as orphans: the list moves
            // as a whole, however many there are.
            if held.flags & HAS_CHILD != 0 {
                let mut kids = self.more_children.remove(&seq).unwrap_or_default();
                kids.push(held.child);
                self.orphans.insert(seq, kids);
            }
            self.blocks.remove(&seq);
            if let Some(p) = held.parent() {
                self.unlink_child(p, seq);
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(EventError::UnknownBlocks { missing })
        }
    }

    /// Forgets that `seq` is a child of `parent`.
    fn unlink_child(&mut self, parent: SeqHash, seq: SeqHash) {
        let Some(p) = self.blocks.get_mut(&parent) else {
            let siblings = self
                .orphans
                .get_mut(&parent)
                .expect("a held block is linked to its parent");
            siblings.remove(seq);
            if siblings.is_empty() {
                self.orphans.remove(&parent);
            }
            return;
        };
        let more = self.more_children.get_mut(&parent);
        if p.flags & HAS_CHILD != 0 && p.child == seq {
            match more.and_then(ChildList::pop) {
                Some(next) => p.child = next,
                None => p.flags &= !HAS_CHILD,
            }
        } else if let Some(more) = more {
            more.remove(seq);
        }
        if self
            .more_children
            .get(&parent)
            .is_some_and(ChildList::is_empty)
        {
            self.more_children.remove(&parent);
        }
    }

    /// Removes every reachable block from the layout, deepest first, and forgets everything.
    pub(crate) fn clear(&mut self, layout: &L, guard: &L::Guard<'_>) {
        let mut entries: Vec<(Key, L::Handle)> = self
            .blocks
            .values()
            .filter_map(Held::reach_handle)
            .collect();
        entries.sort_unstable_by_key(|(key, _)| core::cmp::Reverse(key.pos));
        for (key, handle) in entries {
            self.unref(layout, guard, key, handle);
        }
        debug_assert!(self.extra.is_empty());
        *self = Self::new(self.slot);
    }

    /// Events that rebuild this worker's reachable blocks, parents first.
    pub(crate) fn dump(&self, worker: Worker, out: &mut Vec<Event>) {
        let mut reachable: Vec<(u32, SeqHash, Held<L::Handle>)> = self
            .blocks
            .iter()
            .filter_map(|(s, h)| h.reach().map(|k| (k.pos, *s, *h)))
            .collect();
        reachable.sort_unstable_by_key(|(pos, seq, _)| (*pos, *seq));
        for (event_id, (_, seq, held)) in reachable.into_iter().enumerate() {
            out.push(Event::stored(
                worker,
                event_id as u64,
                held.parent(),
                vec![Block::new(held.local, seq)],
            ));
        }
    }
}
