//! Per-worker state: what one worker holds, validation, and the reachability cascade.
//!
//! # The reachable-only invariant
//!
//! A worker's slot is in a layout entry exactly while the worker has a *reachable* block (SPEC
//! §3) with that entry's key. Since a reachable block's parent is reachable, presence at position
//! `p` on a query's canonical chain implies presence at every position before `p`: the worker
//! sets along a query shrink monotonically. Jump search and binary scan-back rely on that.
//!
//! Every mutation keeps the invariant *at every instant*, not only between events, so racing
//! queries never see a phantom: a hole detaches its reachable subtree deepest-first (children
//! before their parent), a re-store attaches shallowest-first (parent before its children).
//!
//! Two reachable blocks can share a key (same local hash under the same parent, different engine
//! seqs: SPEC §3's salted twins). The layout holds the slot once; `extra` counts the other
//! blocks, so the slot leaves the entry only with the last of them.

use super::canon::{Canon, Key};
use super::layout::Layout;
use super::worker_set::Slot;
use crate::error::EventError;
use crate::types::{Block, Event, LocalHash, SeqHash, Worker};
use foldhash::fast::RandomState;
use std::collections::{HashMap, HashSet};

type Map<K, V> = HashMap<K, V, RandomState>;

/// One held block.
#[derive(Clone, Copy, Debug)]
struct Held {
    local: LocalHash,
    parent: Option<SeqHash>,
    /// Its key while it is reachable; `None` while it is not.
    reach: Option<Key>,
}

/// What one worker holds. Touched only under the worker's lock.
pub(crate) struct WorkerState {
    slot: Slot,
    blocks: Map<SeqHash, Held>,
    /// Held children of each seq, held or not (a removed block's children keep pointing at it).
    children: Map<SeqHash, Vec<SeqHash>>,
    /// Reachable blocks beyond the first at each key (salted twins).
    extra: Map<Key, u32>,
}

impl WorkerState {
    pub(crate) fn new(slot: Slot) -> Self {
        Self {
            slot,
            blocks: Map::default(),
            children: Map::default(),
            extra: Map::default(),
        }
    }

    pub(crate) fn block_count(&self) -> usize {
        self.blocks.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Applies a `Stored` event: checks in SPEC order, then all or nothing.
    pub(crate) fn store<L: Layout>(
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
                if held.local != block.local || held.parent != block_parent {
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

    fn insert<L: Layout>(
        &mut self,
        layout: &L,
        guard: &L::Guard<'_>,
        canon: &Canon,
        seq: SeqHash,
        local: LocalHash,
        parent: Option<SeqHash>,
    ) {
        self.blocks.insert(
            seq,
            Held {
                local,
                parent,
                reach: None,
            },
        );
        if let Some(p) = parent {
            self.children.entry(p).or_default().push(seq);
        }
        let reachable = match parent {
            None => true,
            Some(p) => self.blocks[&p].reach.is_some(),
        };
        if reachable {
            self.attach(layout, guard, canon, seq);
        }
    }

    /// Makes `root` (whose parent is reachable or `None`) and its held descendants reachable,
    /// parents before children.
    fn attach<L: Layout>(
        &mut self,
        layout: &L,
        guard: &L::Guard<'_>,
        canon: &Canon,
        root: SeqHash,
    ) {
        let mut stack = vec![root];
        while let Some(seq) = stack.pop() {
            let held = self.blocks[&seq];
            if held.reach.is_some() {
                continue; // Cannot happen on a tree; keeps any input from looping.
            }
            let parent_key = held
                .parent
                .map(|p| self.blocks[&p].reach.expect("attach: parent is reachable"));
            let key = canon.child(parent_key, held.local);
            self.blocks.get_mut(&seq).expect("attach: held").reach = Some(key);
            if !layout.add(key, self.slot, guard) {
                *self.extra.entry(key).or_insert(0) += 1;
            }
            if let Some(kids) = self.children.get(&seq) {
                stack.extend(kids.iter().filter(|k| self.blocks.contains_key(k)));
            }
        }
    }

    /// Makes `root` (reachable) and its descendants unreachable, children before parents.
    fn detach<L: Layout>(&mut self, layout: &L, guard: &L::Guard<'_>, root: SeqHash) {
        // Pre-order collection, detached in reverse: every block after all its descendants.
        let mut order = Vec::new();
        let mut stack = vec![root];
        while let Some(seq) = stack.pop() {
            order.push(seq);
            if let Some(kids) = self.children.get(&seq) {
                stack.extend(
                    kids.iter()
                        .filter(|k| self.blocks.get(k).is_some_and(|h| h.reach.is_some())),
                );
            }
        }
        for seq in order.into_iter().rev() {
            let held = self.blocks.get_mut(&seq).expect("detach: held");
            if let Some(key) = held.reach.take() {
                self.unref(layout, guard, key);
            }
        }
    }

    fn unref<L: Layout>(&mut self, layout: &L, guard: &L::Guard<'_>, key: Key) {
        match self.extra.get_mut(&key) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                self.extra.remove(&key);
            }
            None => {
                layout.remove(key, self.slot, guard);
            }
        }
    }

    /// Applies a `Removed` event, in list order.
    pub(crate) fn remove<L: Layout>(
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
            if held.reach.is_some() {
                self.detach(layout, guard, seq);
            }
            self.blocks.remove(&seq);
            if let Some(p) = held.parent {
                if let Some(siblings) = self.children.get_mut(&p) {
                    if let Some(i) = siblings.iter().position(|s| *s == seq) {
                        siblings.swap_remove(i);
                    }
                    if siblings.is_empty() {
                        self.children.remove(&p);
                    }
                }
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(EventError::UnknownBlocks { missing })
        }
    }

    /// Removes every reachable block from the layout, deepest first, and forgets everything.
    pub(crate) fn clear<L: Layout>(&mut self, layout: &L, guard: &L::Guard<'_>) {
        let mut keys: Vec<Key> = self.blocks.values().filter_map(|h| h.reach).collect();
        keys.sort_unstable_by_key(|key| core::cmp::Reverse(key.pos));
        for key in keys {
            self.unref(layout, guard, key);
        }
        debug_assert!(self.extra.is_empty());
        *self = Self::new(self.slot);
    }

    /// Events that rebuild this worker's reachable blocks, parents first.
    pub(crate) fn dump(&self, worker: Worker, out: &mut Vec<Event>) {
        let mut reachable: Vec<(u32, SeqHash, Held)> = self
            .blocks
            .iter()
            .filter_map(|(s, h)| h.reach.map(|k| (k.pos, *s, *h)))
            .collect();
        reachable.sort_unstable_by_key(|(pos, seq, _)| (*pos, *seq));
        for (event_id, (_, seq, held)) in reachable.into_iter().enumerate() {
            out.push(Event::stored(
                worker,
                event_id as u64,
                held.parent,
                vec![Block::new(held.local, seq)],
            ));
        }
    }
}
