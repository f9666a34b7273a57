//! One worker's blocks as the hybrid index's writers see them: the chain group's links, each
//! reachable block's path, which other groups hold each block, and what the window and Mamba
//! rules answer at each path.
//!
//! A block of another group counts at the position of the chain block with the same sequence
//! hash, so a reachable chain block's *path* (its position and the canonical hash of the locals
//! from the first block to it, the layouts' own [`Key`]) is what queries look up: a query rolls
//! the same keys for itself. Paths follow the contract's re-stores: a block's path is defined
//! exactly while it is reachable, and a change of a block's link recomputes its held descendants.
//!
//! The sliding-window and Mamba rules scan down from a hit's end for the last run of held
//! blocks, which a query would pay in lookups per position. A path's answer to that rule (for a
//! hit ending at the path) depends only on the path's ancestors, so the table keeps it per path
//! (the tree of its paths, with each path's run of held blocks and answer) and publishes every
//! change: a query reads one answer per worker depth instead of scanning.
//!
//! Blocks and paths live in two slabs linked by slot, children in intrusive sibling lists, and
//! the per-path counters in flat arrays: following a link is an index, not a hash lookup, and a
//! block costs no allocation of its own. The two tables that find a slot by its key keep slots
//! only, four bytes each (paper §6.21).

use super::model::ModelGroups;
use super::slots_by_key::SlotsByKey;
use crate::index_core::canon::{Canon, Key};
use crate::slab::Slab;
use crate::types::{Block, LocalHash, SeqHash};

/// What a table publishes of its worker's events since the last publish.
#[derive(Debug, Default)]
pub(super) struct Changes {
    /// `(group, path, ±1)`: a block of the group started or stopped holding the path. Only
    /// groups whose rule queries ask block by block: a run spec's groups are read through its
    /// answers.
    pub(super) held: Vec<(u32, Key, i32)>,
    /// `(spec, path, answer)`: the run rule of spec `spec` (an index into the model's specs)
    /// for a hit ending at `path` is now `answer` blocks (0: none).
    pub(super) answers: Vec<(u32, Key, u32)>,
}

/// Changes a reused [`Changes`] keeps room for; a larger event's room goes back after it.
const KEPT_CHANGES: usize = 1024;

impl Changes {
    /// Empties both lists for the next publish, keeping room for [`KEPT_CHANGES`] of each.
    pub(super) fn clear(&mut self) {
        self.held.clear();
        self.answers.clear();
        self.held.shrink_to(KEPT_CHANGES);
        self.answers.shrink_to(KEPT_CHANGES);
    }
}

/// A spec whose hit ends at the last run of held blocks (a sliding window, Mamba).
#[derive(Clone, Debug)]
struct RunSpec {
    /// Its index in the model's specs.
    spec: u32,
    /// Its member groups, one bit each.
    members: u32,
    /// The run's length in blocks.
    blocks: u32,
}

/// The model as a table needs it: the groups and the specs it keeps answers for.
#[derive(Clone, Debug)]
pub(super) struct Runs {
    groups: usize,
    specs: Vec<RunSpec>,
    /// The groups of every run spec, one bit each.
    watched: u32,
    /// The run spec, if the model is the chain group alone and one run spec.
    simple: Option<usize>,
}

impl Runs {
    pub(super) fn new(model: &ModelGroups) -> Self {
        let specs: Vec<RunSpec> = (0u32..)
            .zip(model.specs())
            .filter_map(|(spec, s)| {
                let blocks = s.run_blocks(model.block_size())?;
                let members = s.members.iter().fold(0, |m, &g| m | 1 << g);
                Some(RunSpec {
                    spec,
                    members,
                    blocks,
                })
            })
            .collect();
        let watched = specs.iter().fold(0, |m, s| m | s.members);
        let simple = match (model.specs(), specs.as_slice()) {
            ([full, _], [run]) if full.members == [model.chain_group()] => Some(run.spec as usize),
            _ => None,
        };
        Runs {
            groups: model.len(),
            specs,
            watched,
            simple,
        }
    }

    /// The run spec of a model of the chain group and one run spec: there, vLLM's coordinator
    /// is a single round, and a worker's hit is the run rule's answer at its chain depth.
    pub(super) fn simple(&self) -> Option<usize> {
        self.simple
    }

    /// Whether spec `spec` keeps its answers per path.
    pub(super) fn keeps(&self, spec: usize) -> bool {
        self.specs.iter().any(|s| s.spec as usize == spec)
    }
}

/// No slot.
const NONE: u32 = u32::MAX;

/// The groups set in `bits`, lowest first: one step a set bit (most blocks are held by one
/// group or two), not one a possible group.
fn groups_in(bits: u32) -> impl Iterator<Item = u32> + Clone {
    let mut rest = bits;
    core::iter::from_fn(move || {
        let group = (rest != 0).then(|| rest.trailing_zeros())?;
        rest &= rest - 1;
        Some(group)
    })
}

/// Links of an intrusive list of children: a node's first child, and its own neighbours
/// among its parent's children.
#[derive(Clone, Copy, Debug)]
struct Links {
    first: u32,
    next: u32,
    prev: u32,
}

impl Default for Links {
    fn default() -> Self {
        Links {
            first: NONE,
            next: NONE,
            prev: NONE,
        }
    }
}

/// Slab values with [`Links`] (blocks, and paths).
trait Linked {
    fn links(&mut self) -> &mut Links;
}

/// Puts `kid` first among `parent`'s children.
fn link_kid<T: Linked>(slab: &mut Slab<T>, parent: u32, kid: u32) {
    let first = slab[parent].links().first;
    *slab[kid].links() = Links {
        first: slab[kid].links().first,
        next: first,
        prev: NONE,
    };
    if first != NONE {
        slab[first].links().prev = kid;
    }
    slab[parent].links().first = kid;
}

/// Takes `kid` out of `parent`'s children.
fn unlink_kid<T: Linked>(slab: &mut Slab<T>, parent: u32, kid: u32) {
    let Links { next, prev, .. } = *slab[kid].links();
    if prev == NONE {
        slab[parent].links().first = next;
    } else {
        slab[prev].links().next = next;
    }
    if next != NONE {
        slab[next].links().prev = prev;
    }
    let links = slab[kid].links();
    links.next = NONE;
    links.prev = NONE;
}

/// One path of the worker's: the blocks that end it, and its place in the tree of paths. Its
/// counters are in [`Table::held`] and [`Table::runs`], at its slot.
#[derive(Debug)]
struct PathNode {
    key: Key,
    /// The worker's reachable blocks with this path (salted twins share one).
    refs: u32,
    /// The parent path's slot ([`NONE`] at position 0).
    parent: u32,
    kids: Links,
    /// Whether the slot holds a path (a freed one may still be queued as dirty).
    live: bool,
    /// Whether it is queued in [`Table::dirty`].
    dirty: bool,
}

impl Linked for PathNode {
    fn links(&mut self) -> &mut Links {
        &mut self.kids
    }
}

/// A block the worker holds in some group, or whose held children name it.
#[derive(Debug)]
struct Entry {
    seq: SeqHash,
    /// The block's local hash, while the chain group holds it.
    local: Option<LocalHash>,
    /// While the chain group holds the block, the slot of its parent block ([`NONE`] for a
    /// first block). A held block keeps its parent's entry, so a slot names one parent.
    parent: u32,
    /// The slot of its path, while the block is reachable in the chain group.
    path: u32,
    /// The other groups that hold the block, one bit each.
    groups: u32,
    /// The chain group's held blocks whose link names this one: whom a change of its path
    /// reaches.
    kids: Links,
}

// Entries are most of a table's bytes (paper §6.21): a block's parent is its slot, not a hash.
const _: () = assert!(size_of::<Entry>() == 48);

impl Linked for Entry {
    fn links(&mut self) -> &mut Links {
        &mut self.kids
    }
}

/// One worker's table.
#[derive(Debug, Default)]
pub(super) struct Table {
    /// Block slots by sequence hash.
    slot_of: SlotsByKey,
    blocks: Slab<Entry>,
    /// Path slots by path.
    path_of: SlotsByKey,
    paths: Slab<PathNode>,
    /// Per path slot, per group: how many of the path's blocks the group holds.
    held: Vec<u32>,
    /// Per path slot, per run spec: the run of blocks every member holds ending there (at most
    /// the spec's length), and the rule's answer for a hit ending there.
    runs: Vec<(u32, u32)>,
    /// Paths whose run state may have changed, as (position, slot), in the order they were
    /// found: no order while events apply; by position while a settle runs (see
    /// [`settle`](Table::settle)).
    dirty: Vec<(u32, u32)>,
    /// The list a settle sorts, kept to reuse its allocation.
    sorting: Vec<(u32, u32)>,
    /// The blocks a refresh has yet to visit (kept to reuse its allocation).
    stack: Vec<u32>,
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
        self.slot_of.is_empty()
    }

    /// `seq`'s slot, if it has one.
    fn find_slot(&self, seq: SeqHash) -> Option<u32> {
        let blocks = &self.blocks;
        self.slot_of.find(&seq, |at| blocks[at].seq)
    }

    /// `seq`'s slot, made empty if it has none.
    fn slot(&mut self, seq: SeqHash) -> u32 {
        if let Some(at) = self.find_slot(seq) {
            return at;
        }
        let at = self.blocks.insert(Entry {
            seq,
            local: None,
            parent: NONE,
            path: NONE,
            groups: 0,
            kids: Links::default(),
        });
        let blocks = &self.blocks;
        self.slot_of.insert(&seq, at, |at| blocks[at].seq);
        at
    }

    /// The chain group stored `blocks` after `parent` (the index already accepted the event).
    pub(super) fn store_chain(
        &mut self,
        canon: &Canon,
        runs: &Runs,
        parent: Option<SeqHash>,
        blocks: &[Block],
        out: &mut Changes,
    ) {
        if blocks.is_empty() {
            return;
        }
        let mut new_parent = parent.map_or(NONE, |p| self.slot(p));
        for block in blocks {
            let at = self.slot(block.seq);
            let entry = &mut self.blocks[at];
            let old_local = entry.local.replace(block.local);
            let old_parent = entry.parent;
            if old_local != Some(block.local) || old_parent != new_parent {
                if old_parent != NONE {
                    unlink_kid(&mut self.blocks, old_parent, at);
                }
                if new_parent != NONE {
                    link_kid(&mut self.blocks, new_parent, at);
                }
                self.blocks[at].parent = new_parent;
                self.refresh(canon, runs, at, out);
                if old_parent != NONE && old_parent != new_parent {
                    self.drop_if_unused(old_parent);
                }
            }
            new_parent = at;
        }
    }

    /// The chain group dropped `seq`; `false` if it did not hold it.
    pub(super) fn remove_chain(
        &mut self,
        canon: &Canon,
        runs: &Runs,
        seq: SeqHash,
        out: &mut Changes,
    ) -> bool {
        let Some(at) = self.find_slot(seq) else {
            return false;
        };
        if self.blocks[at].local.take().is_none() {
            return false;
        }
        let parent = core::mem::replace(&mut self.blocks[at].parent, NONE);
        if parent != NONE {
            unlink_kid(&mut self.blocks, parent, at);
        }
        self.refresh(canon, runs, at, out);
        self.drop_if_unused(at);
        if parent != NONE {
            self.drop_if_unused(parent);
        }
        true
    }

    /// Group `group` (not the chain group) holds `seq`.
    pub(super) fn store_other(&mut self, runs: &Runs, group: u32, seq: SeqHash, out: &mut Changes) {
        let at = self.slot(seq);
        let entry = &mut self.blocks[at];
        let bit = 1 << group;
        if entry.groups & bit == 0 {
            entry.groups |= bit;
            let path = entry.path;
            if path != NONE {
                self.count(runs, group, path, 1, out);
            }
        }
    }

    /// Group `group` (not the chain group) dropped `seq`; `false` if it did not hold it.
    pub(super) fn remove_other(
        &mut self,
        runs: &Runs,
        group: u32,
        seq: SeqHash,
        out: &mut Changes,
    ) -> bool {
        let bit = 1 << group;
        let Some(at) = self.find_slot(seq) else {
            return false;
        };
        let entry = &mut self.blocks[at];
        if entry.groups & bit == 0 {
            return false;
        }
        entry.groups &= !bit;
        let path = entry.path;
        if path != NONE {
            self.count(runs, group, path, -1, out);
        }
        self.drop_if_unused(at);
        true
    }

    /// Every published (group, path) pair the table holds, once per holding block, and every
    /// (spec, path) with an answer, as changes that take them back: what goes when the worker
    /// goes.
    pub(super) fn retraction(&self, runs: &Runs) -> Changes {
        let held = (self.slot_of.slots())
            .map(|at| &self.blocks[at])
            .filter(|entry| entry.path != NONE)
            .flat_map(|entry| {
                let path = self.paths[entry.path].key;
                groups_in(entry.groups & !runs.watched).map(move |g| (g, path, -1))
            })
            .collect();
        let specs = runs.specs.len();
        let answers = (self.path_of.slots())
            .flat_map(|at| {
                let path = self.paths[at].key;
                let node_runs = &self.runs[at as usize * specs..][..specs];
                runs.specs
                    .iter()
                    .zip(node_runs)
                    .filter(|(_, (_, answer))| *answer > 0)
                    .map(move |(spec, _)| (spec.spec, path, 0))
            })
            .collect();
        Changes { held, answers }
    }

    /// The blocks each group but the chain group holds, by group (groups holding none left out).
    pub(super) fn others(&self) -> Vec<(u32, Vec<SeqHash>)> {
        let mut by_group: Vec<(u32, Vec<SeqHash>)> = Vec::new();
        for at in self.slot_of.slots() {
            let entry = &self.blocks[at];
            for group in groups_in(entry.groups) {
                match by_group.iter_mut().find(|(g, _)| *g == group) {
                    Some((_, seqs)) => seqs.push(entry.seq),
                    None => by_group.push((group, vec![entry.seq])),
                }
            }
        }
        by_group
    }

    /// How many blocks `group` (not the chain group) holds.
    pub(super) fn count_other(&self, group: u32) -> usize {
        let bit = 1 << group;
        (self.slot_of.slots())
            .filter(|&at| self.blocks[at].groups & bit != 0)
            .count()
    }

    /// Frees `at` when no group holds it and no held block names it.
    fn drop_if_unused(&mut self, at: u32) {
        let entry = &self.blocks[at];
        if entry.local.is_none() && entry.groups == 0 && entry.kids.first == NONE {
            self.slot_of.remove(&entry.seq, at);
            self.blocks.free(at);
        }
    }

    /// One more (`change` 1) or one fewer (-1) of `group`'s blocks holds path slot `path`.
    fn count(&mut self, runs: &Runs, group: u32, path: u32, change: i32, out: &mut Changes) {
        if runs.watched & (1 << group) == 0 {
            out.held.push((group, self.paths[path].key, change));
            return;
        }
        let held = &mut self.held[path as usize * runs.groups + group as usize];
        *held = held.saturating_add_signed(change);
        self.mark_dirty(path);
    }

    fn mark_dirty(&mut self, path: u32) {
        let node = &mut self.paths[path];
        if !node.dirty {
            node.dirty = true;
            self.dirty.push((node.key.pos, path));
        }
    }

    /// One more block ends `path`, whose parent path has slot `parent`; returns its slot.
    fn attach(&mut self, runs: &Runs, path: Key, parent: u32) -> u32 {
        let paths = &self.paths;
        if let Some(at) = self.path_of.find(&path, |at| paths[at].key) {
            self.paths[at].refs += 1;
            return at;
        }
        let at = self.paths.insert(PathNode {
            key: path,
            refs: 1,
            parent,
            kids: Links::default(),
            live: true,
            dirty: false,
        });
        let paths = &self.paths;
        self.path_of.insert(&path, at, |at| paths[at].key);
        let (groups, specs) = (runs.groups, runs.specs.len());
        let end = (at as usize + 1) * groups;
        if self.held.len() < end {
            self.held.resize(end, 0);
        }
        self.held[at as usize * groups..end].fill(0);
        let end = (at as usize + 1) * specs;
        if self.runs.len() < end {
            self.runs.resize(end, (0, 0));
        }
        self.runs[at as usize * specs..end].fill((0, 0));
        if parent != NONE {
            link_kid(&mut self.paths, parent, at);
        }
        if specs > 0 {
            self.mark_dirty(at);
        }
        at
    }

    /// One fewer block ends path slot `path`; a path without blocks or children goes, and so
    /// may its parent, with their published answers.
    fn detach(&mut self, runs: &Runs, path: u32, out: &mut Changes) {
        self.paths[path].refs -= 1;
        let specs = runs.specs.len();
        let mut at = path;
        loop {
            let node = &self.paths[at];
            if node.refs > 0 || node.kids.first != NONE {
                break;
            }
            let (key, parent) = (node.key, node.parent);
            let node_runs = &self.runs[at as usize * specs..][..specs];
            for (spec, &(_, answer)) in runs.specs.iter().zip(node_runs) {
                if answer > 0 {
                    out.answers.push((spec.spec, key, 0));
                }
            }
            self.path_of.remove(&key, at);
            self.paths[at].live = false;
            self.paths[at].dirty = false;
            self.paths.free(at);
            if parent == NONE {
                break;
            }
            unlink_kid(&mut self.paths, parent, at);
            at = parent;
        }
    }

    /// Recomputes the run state of every dirty path, parents before children, and publishes
    /// the answers that changed: once per publish (an event, or a batch of the worker's), after
    /// its blocks, so an answer a batch changes and changes back is never published.
    ///
    /// The paths the events dirtied are sorted by position once (stores go down a chain, so
    /// mostly in order already). The paths the settle itself dirties are children of paths it
    /// settles shallowest first, so they come in order of position: the settle takes the
    /// shallower head of the two lists each time, and needs no heap.
    pub(super) fn settle(&mut self, runs: &Runs, out: &mut Changes) {
        let (groups, specs) = (runs.groups, runs.specs.len());
        let mut sorted = core::mem::replace(&mut self.dirty, core::mem::take(&mut self.sorting));
        sorted.sort_unstable();
        let (mut next_sorted, mut next_found) = (0, 0);
        loop {
            let (pos, at) = match (sorted.get(next_sorted), self.dirty.get(next_found)) {
                (Some(&s), Some(&f)) if f.0 < s.0 => {
                    next_found += 1;
                    f
                }
                (Some(&s), _) => {
                    next_sorted += 1;
                    s
                }
                (None, Some(&f)) => {
                    next_found += 1;
                    f
                }
                (None, None) => break,
            };
            let node = &mut self.paths[at];
            // A slot freed after it was queued may hold another path now, queued on its own.
            if !node.live || !node.dirty || node.key.pos != pos {
                continue;
            }
            node.dirty = false;
            let (key, parent) = (node.key, node.parent);
            let ends = key.pos + 1;
            let held = &self.held[at as usize * groups..][..groups];
            let mut changed = false;
            for (s, spec) in runs.specs.iter().enumerate() {
                let (parent_run, parent_answer) = match parent {
                    NONE => (0, 0),
                    p => self.runs[p as usize * specs + s],
                };
                let all_hold = groups_in(spec.members).all(|g| held[g as usize] > 0);
                let run = if all_hold {
                    (parent_run + 1).min(spec.blocks)
                } else {
                    0
                };
                // vLLM's scan from the right: the last run of `blocks` ends the hit; without
                // one, the run from the first block does (shorter than `blocks`).
                let answer = if run >= spec.blocks || run == ends {
                    ends
                } else {
                    parent_answer
                };
                let slot = &mut self.runs[at as usize * specs + s];
                if *slot != (run, answer) {
                    if slot.1 != answer {
                        out.answers.push((spec.spec, key, answer));
                    }
                    *slot = (run, answer);
                    changed = true;
                }
            }
            if changed {
                let mut kid = self.paths[at].kids.first;
                while kid != NONE {
                    self.mark_dirty(kid);
                    kid = self.paths[kid].kids.next;
                }
            }
            debug_assert!(self.dirty.get(next_found).is_none_or(|f| f.0 >= pos));
        }
        self.dirty.clear();
        sorted.clear();
        self.dirty.shrink_to(KEPT_CHANGES);
        sorted.shrink_to(KEPT_CHANGES);
        self.sorting = sorted;
    }

    /// Recomputes block slot `at`'s path from its link and its parent's path, and, where it
    /// changed, its groups' pairs and its children's paths (a walk that stops where nothing
    /// changes, so a cycle of parents, whose paths are all undefined, ends it).
    fn refresh(&mut self, canon: &Canon, runs: &Runs, at: u32, out: &mut Changes) {
        let mut stack = core::mem::take(&mut self.stack);
        stack.push(at);
        while let Some(at) = stack.pop() {
            let entry = &self.blocks[at];
            // The new path, and its parent path's slot.
            let placed = entry.local.and_then(|local| match entry.parent {
                NONE => Some((next_path(canon, None, local)?, NONE)),
                parent => {
                    let parent = self.blocks[parent].path;
                    if parent == NONE {
                        return None;
                    }
                    let key = self.paths[parent].key;
                    Some((next_path(canon, Some(key), local)?, parent))
                }
            });
            let old = entry.path;
            let unchanged = match placed {
                None => old == NONE,
                Some((key, _)) => old != NONE && self.paths[old].key == key,
            };
            if unchanged {
                continue;
            }
            let held = groups_in(entry.groups);
            if old != NONE {
                for group in held.clone() {
                    self.count(runs, group, old, -1, out);
                }
                self.detach(runs, old, out);
            }
            let new = match placed {
                Some((key, parent)) => {
                    let new = self.attach(runs, key, parent);
                    for group in held {
                        self.count(runs, group, new, 1, out);
                    }
                    new
                }
                None => NONE,
            };
            self.blocks[at].path = new;
            let mut kid = self.blocks[at].kids.first;
            while kid != NONE {
                stack.push(kid);
                kid = self.blocks[kid].kids.next;
            }
        }
        self.stack = stack;
    }
}

#[cfg(test)]
mod tests {
    use super::groups_in;

    #[test]
    fn groups_in_lists_the_set_bits_lowest_first() {
        assert_eq!(groups_in(0).count(), 0);
        assert_eq!(groups_in(0b1011).collect::<Vec<_>>(), [0, 1, 3]);
        assert_eq!(groups_in(1 << 31).collect::<Vec<_>>(), [31]);
        assert!(groups_in(u32::MAX).eq(0..32));
        // A clone taken part way resumes where the original was.
        let mut groups = groups_in(0b10_0110);
        groups.next();
        assert_eq!(groups.clone().collect::<Vec<_>>(), [2, 5]);
        assert_eq!(groups.collect::<Vec<_>>(), [2, 5]);
    }
}
