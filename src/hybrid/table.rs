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

use super::model::ModelGroups;
use crate::index_core::canon::{Canon, Key};
use crate::types::{Block, LocalHash, SeqHash};
use foldhash::fast::RandomState;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// What a table publishes of one event.
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

/// One path of the worker's: the blocks that end it, and the run rules' state there.
#[derive(Debug)]
struct PathNode {
    /// The worker's reachable blocks with this path (salted twins share one).
    refs: u32,
    parent: Option<Key>,
    children: Vec<Key>,
    /// Per group: how many of those blocks it holds.
    held: Box<[u32]>,
    /// Per run spec: the run of blocks every member holds ending here (at most the spec's
    /// length), and the rule's answer for a hit ending here.
    runs: Box<[(u32, u32)]>,
}

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
    /// The worker's paths: each reachable block's, while one holds it.
    paths: HashMap<Key, PathNode, RandomState>,
    /// Paths whose run state may have changed, shallowest first.
    dirty: BinaryHeap<Reverse<Key>>,
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
        runs: &Runs,
        parent: Option<SeqHash>,
        blocks: &[Block],
        out: &mut Changes,
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
                self.refresh(canon, runs, block.seq, out);
            }
            parent = Some(block.seq);
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
        let Some(link) = self.blocks.get_mut(&seq).and_then(|e| e.link.take()) else {
            return false;
        };
        self.unlink_child(link.parent, seq);
        self.refresh(canon, runs, seq, out);
        self.drop_if_unused(seq);
        true
    }

    /// Group `group` (not the chain group) holds `seq`.
    pub(super) fn store_other(&mut self, runs: &Runs, group: u32, seq: SeqHash, out: &mut Changes) {
        let entry = self.blocks.entry(seq).or_default();
        let bit = 1 << group;
        if entry.groups & bit == 0 {
            entry.groups |= bit;
            if let Some(path) = entry.path {
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
        let Some(entry) = self.blocks.get_mut(&seq).filter(|e| e.groups & bit != 0) else {
            return false;
        };
        entry.groups &= !bit;
        if let Some(path) = entry.path {
            self.count(runs, group, path, -1, out);
        }
        self.drop_if_unused(seq);
        true
    }

    /// Every published (group, path) pair the table holds, once per holding block, and every
    /// (spec, path) with an answer, as changes that take them back: what goes when the worker
    /// goes.
    pub(super) fn retraction(&self, runs: &Runs) -> Changes {
        let held = self
            .blocks
            .values()
            .flat_map(|entry| {
                let groups = entry.groups & !runs.watched;
                entry.path.into_iter().flat_map(move |path| {
                    (0..32u32)
                        .filter(move |g| groups & (1 << g) != 0)
                        .map(move |g| (g, path, -1))
                })
            })
            .collect();
        let answers = self
            .paths
            .iter()
            .flat_map(|(&path, node)| {
                runs.specs
                    .iter()
                    .zip(node.runs.iter())
                    .filter(|(_, (_, answer))| *answer > 0)
                    .map(move |(spec, _)| (spec.spec, path, 0))
            })
            .collect();
        Changes { held, answers }
    }

    /// The blocks each group but the chain group holds, by group (groups holding none left out).
    pub(super) fn others(&self) -> Vec<(u32, Vec<SeqHash>)> {
        let mut by_group: Vec<(u32, Vec<SeqHash>)> = Vec::new();
        for (&seq, entry) in &self.blocks {
            for group in (0..32u32).filter(|g| entry.groups & (1 << g) != 0) {
                match by_group.iter_mut().find(|(g, _)| *g == group) {
                    Some((_, seqs)) => seqs.push(seq),
                    None => by_group.push((group, vec![seq])),
                }
            }
        }
        by_group
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

    /// One more (`change` 1) or one fewer (-1) of `group`'s blocks holds `path`.
    fn count(&mut self, runs: &Runs, group: u32, path: Key, change: i32, out: &mut Changes) {
        if runs.watched & (1 << group) == 0 {
            out.held.push((group, path, change));
            return;
        }
        if let Some(node) = self.paths.get_mut(&path) {
            let held = &mut node.held[group as usize];
            *held = held.saturating_add_signed(change);
            self.dirty.push(Reverse(path));
        }
    }

    /// One more block ends `path`, whose parent path is `parent`.
    fn attach(&mut self, runs: &Runs, path: Key, parent: Option<Key>) {
        use std::collections::hash_map::Entry as Slot;
        match self.paths.entry(path) {
            Slot::Occupied(mut node) => node.get_mut().refs += 1,
            Slot::Vacant(slot) => {
                slot.insert(PathNode {
                    refs: 1,
                    parent,
                    children: Vec::new(),
                    held: vec![0; runs.groups].into_boxed_slice(),
                    runs: vec![(0, 0); runs.specs.len()].into_boxed_slice(),
                });
                if let Some(parent) = parent.and_then(|p| self.paths.get_mut(&p)) {
                    parent.children.push(path);
                }
                if !runs.specs.is_empty() {
                    self.dirty.push(Reverse(path));
                }
            }
        }
    }

    /// One fewer block ends `path`; a path without blocks or children goes, and so may its
    /// parent, with their published answers.
    fn detach(&mut self, runs: &Runs, path: Key, out: &mut Changes) {
        if let Some(node) = self.paths.get_mut(&path) {
            node.refs -= 1;
        }
        let mut at = path;
        while let Some(node) = self.paths.get(&at) {
            if node.refs > 0 || !node.children.is_empty() {
                break;
            }
            let node = self.paths.remove(&at).expect("looked up above");
            for (spec, &(_, answer)) in runs.specs.iter().zip(node.runs.iter()) {
                if answer > 0 {
                    out.answers.push((spec.spec, at, 0));
                }
            }
            let Some(parent) = node.parent else { break };
            if let Some(p) = self.paths.get_mut(&parent)
                && let Some(i) = p.children.iter().position(|&c| c == at)
            {
                p.children.swap_remove(i);
            }
            at = parent;
        }
    }

    /// Recomputes the run state of every dirty path, parents before children, and publishes
    /// the answers that changed: once per event, after its blocks.
    pub(super) fn settle(&mut self, runs: &Runs, out: &mut Changes) {
        while let Some(Reverse(path)) = self.dirty.pop() {
            let Some(node) = self.paths.get(&path) else {
                continue;
            };
            let above = node.parent.and_then(|p| self.paths.get(&p));
            let ends = path.pos + 1;
            let mut changed = false;
            let mut next = node.runs.clone();
            for (at, spec) in runs.specs.iter().enumerate() {
                let (parent_run, parent_answer) = above.map_or((0, 0), |a| a.runs[at]);
                let all_hold = (0..runs.groups)
                    .filter(|&g| spec.members & (1 << g) != 0)
                    .all(|g| node.held[g] > 0);
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
                if next[at] != (run, answer) {
                    if next[at].1 != answer {
                        out.answers.push((spec.spec, path, answer));
                    }
                    next[at] = (run, answer);
                    changed = true;
                }
            }
            if changed {
                let node = self.paths.get_mut(&path).expect("looked up above");
                node.runs = next;
                self.dirty.extend(node.children.iter().map(|&c| Reverse(c)));
            }
        }
    }

    /// Recomputes `seq`'s path from its link and its parent's path, and, where it changed,
    /// its groups' pairs and its children's paths (a walk that stops where nothing changes,
    /// so a cycle of parents, whose paths are all undefined, ends it).
    fn refresh(&mut self, canon: &Canon, runs: &Runs, seq: SeqHash, out: &mut Changes) {
        let mut stack = vec![seq];
        while let Some(seq) = stack.pop() {
            let Some(entry) = self.blocks.get(&seq) else {
                continue;
            };
            // The new path, and its parent path.
            let placed = entry.link.and_then(|link| match link.parent {
                None => Some((next_path(canon, None, link.local)?, None)),
                Some(p) => {
                    let parent = self.blocks.get(&p).and_then(|e| e.path)?;
                    Some((next_path(canon, Some(parent), link.local)?, Some(parent)))
                }
            });
            let path = placed.map(|(path, _)| path);
            let Some(entry) = self.blocks.get_mut(&seq) else {
                continue;
            };
            if entry.path == path {
                continue;
            }
            let old = core::mem::replace(&mut entry.path, path);
            let groups = entry.groups;
            let held = (0..32u32).filter(|g| groups & (1 << g) != 0);
            if let Some(old) = old {
                for group in held.clone() {
                    self.count(runs, group, old, -1, out);
                }
                self.detach(runs, old, out);
            }
            if let Some((new, parent)) = placed {
                self.attach(runs, new, parent);
                for group in held {
                    self.count(runs, group, new, 1, out);
                }
            }
            if let Some(kids) = self.children.get(&seq) {
                stack.extend_from_slice(kids);
            }
        }
    }
}
