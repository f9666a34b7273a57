//! One worker's blocks as the hybrid index's writers see them: the chain group's links, each
//! reachable block's path, and which other groups hold each block.
//!
//! A block of another group counts at the position of the chain block with the same sequence
//! hash, so a reachable chain block's *path* (its position and the canonical hash of the locals
//! from the first block to it, the layouts' own [`Key`]) is what queries look up: a query rolls
//! the same keys for itself. Paths follow the contract's re-stores: a block's path is defined
//! exactly while it is reachable, and a change of a block's link recomputes its held descendants.

use crate::index_core::canon::{Canon, Key};
use crate::types::{Block, LocalHash, SeqHash};
use foldhash::fast::RandomState;
use std::collections::HashMap;

/// A change of the (group, path) pairs a worker's blocks hold: `+1` or `-1` of one pair.
pub(super) type Delta = (u32, Key, i32);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Link {
    local: LocalHash,
    parent: Option<SeqHash>,
}

#[derive(Debug, Default)]
struct Entry {
    /// The chain group's link, while the chain group holds the block.
    link: Option<Link>,
    /// The path, while the block is reachable in the chain group.
    path: Option<Key>,
    /// The other groups that hold the block, one bit each.
    groups: u32,
}

/// One worker's table.
#[derive(Debug, Default)]
pub(super) struct Table {
    blocks: HashMap<SeqHash, Entry, RandomState>,
    /// The chain group's held blocks by parent: whom a change of a block's path reaches.
    children: HashMap<SeqHash, Vec<SeqHash>, RandomState>,
}

/// The path of a block with local `local` after a block at `parent` (`None`: first); `None`
/// past the last position a `u32` counts.
fn next_path(canon: &Canon, parent: Option<Key>, local: LocalHash) -> Option<Key> {
    let pos = match parent {
        None => 0,
        Some(p) => p.pos.checked_add(1)?,
    };
    Some(Key {
        pos,
        canon: canon.step(canon.parent_of(parent), local),
    })
}

impl Table {
    pub(super) fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The chain group stored `blocks` after `parent` (the index already accepted the event).
    pub(super) fn store_chain(
        &mut self,
        canon: &Canon,
        parent: Option<SeqHash>,
        blocks: &[Block],
        out: &mut Vec<Delta>,
    ) {
        let mut parent = parent;
        for block in blocks {
            let link = Link {
                local: block.local,
                parent,
            };
            let entry = self.blocks.entry(block.seq).or_default();
            let old = entry.link.replace(link);
            if old != Some(link) {
                if let Some(old) = old {
                    self.unlink_child(old.parent, block.seq);
                }
                if let Some(p) = parent {
                    self.children.entry(p).or_default().push(block.seq);
                }
                self.refresh(canon, block.seq, out);
            }
            parent = Some(block.seq);
        }
    }

    /// The chain group dropped `seq`; `false` if it did not hold it.
    pub(super) fn remove_chain(
        &mut self,
        canon: &Canon,
        seq: SeqHash,
        out: &mut Vec<Delta>,
    ) -> bool {
        let Some(link) = self.blocks.get_mut(&seq).and_then(|e| e.link.take()) else {
            return false;
        };
        self.unlink_child(link.parent, seq);
        self.refresh(canon, seq, out);
        self.drop_if_unused(seq);
        true
    }

    /// Group `group` (not the chain group) holds `seq`.
    pub(super) fn store_other(&mut self, group: u32, seq: SeqHash, out: &mut Vec<Delta>) {
        let entry = self.blocks.entry(seq).or_default();
        let bit = 1 << group;
        if entry.groups & bit == 0 {
            entry.groups |= bit;
            if let Some(path) = entry.path {
                out.push((group, path, 1));
            }
        }
    }

    /// Group `group` (not the chain group) dropped `seq`; `false` if it did not hold it.
    pub(super) fn remove_other(&mut self, group: u32, seq: SeqHash, out: &mut Vec<Delta>) -> bool {
        let bit = 1 << group;
        let Some(entry) = self.blocks.get_mut(&seq).filter(|e| e.groups & bit != 0) else {
            return false;
        };
        entry.groups &= !bit;
        if let Some(path) = entry.path {
            out.push((group, path, -1));
        }
        self.drop_if_unused(seq);
        true
    }

    /// Every (group, path) pair the table holds, once per holding block: what to take back
    /// when the worker goes.
    pub(super) fn held_pairs(&self) -> impl Iterator<Item = (u32, Key)> + '_ {
        self.blocks.values().flat_map(|entry| {
            let groups = entry.groups;
            entry.path.into_iter().flat_map(move |path| {
                (0..32u32)
                    .filter(move |g| groups & (1 << g) != 0)
                    .map(move |g| (g, path))
            })
        })
    }

    /// How many blocks `group` (not the chain group) holds.
    pub(super) fn count_other(&self, group: u32) -> usize {
        let bit = 1 << group;
        self.blocks.values().filter(|e| e.groups & bit != 0).count()
    }

    fn unlink_child(&mut self, parent: Option<SeqHash>, seq: SeqHash) {
        let Some(p) = parent else { return };
        if let Some(kids) = self.children.get_mut(&p) {
            if let Some(at) = kids.iter().position(|&k| k == seq) {
                kids.swap_remove(at);
            }
            if kids.is_empty() {
                self.children.remove(&p);
            }
        }
    }

    fn drop_if_unused(&mut self, seq: SeqHash) {
        if self
            .blocks
            .get(&seq)
            .is_some_and(|e| e.link.is_none() && e.groups == 0)
        {
            self.blocks.remove(&seq);
        }
    }

    /// Recomputes `seq`'s path from its link and its parent's path, and, where it changed,
    /// its groups' pairs and its children's paths (a walk that stops where nothing changes,
    /// so a cycle of parents, whose paths are all undefined, ends it).
    fn refresh(&mut self, canon: &Canon, seq: SeqHash, out: &mut Vec<Delta>) {
        let mut stack = vec![seq];
        while let Some(seq) = stack.pop() {
            let Some(entry) = self.blocks.get(&seq) else {
                continue;
            };
            let path = entry.link.and_then(|link| match link.parent {
                None => next_path(canon, None, link.local),
                Some(p) => {
                    let parent = self.blocks.get(&p).and_then(|e| e.path)?;
                    next_path(canon, Some(parent), link.local)
                }
            });
            let Some(entry) = self.blocks.get_mut(&seq) else {
                continue;
            };
            if entry.path == path {
                continue;
            }
            let old = core::mem::replace(&mut entry.path, path);
            for group in (0..32u32).filter(|g| entry.groups & (1 << g) != 0) {
                if let Some(old) = old {
                    out.push((group, old, -1));
                }
                if let Some(new) = path {
                    out.push((group, new, 1));
                }
            }
            if let Some(kids) = self.children.get(&seq) {
                stack.extend_from_slice(kids);
            }
        }
    }
}
