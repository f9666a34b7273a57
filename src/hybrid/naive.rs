//! [`NaiveHybridIndexer`]: the group rules written as literally as possible, the oracle of
//! every hybrid test.

use super::model::ModelGroups;
use super::rules::longest_hit;
use super::{HybridIndex, check_group, dump_other};
use crate::error::EventError;
use crate::naive::{Children, HeldSet, children_of, reachable_in_order, store};
use crate::scores::OverlapScores;
use crate::sync::{Mutex, MutexGuard, lock};
use crate::types::{Block, Event, EventKind, LocalHash, SeqHash, Worker};
use std::collections::{BTreeMap, BTreeSet};

/// One worker's blocks: the chain group's held set (as [`NaiveIndexer`](crate::NaiveIndexer)
/// keeps it) and the sequence hashes every other group holds.
#[derive(Debug, Default)]
struct Holding {
    chain: HeldSet,
    others: BTreeMap<u32, BTreeSet<SeqHash>>,
    /// `children_of(chain)`, built by the first query after a change of the chain group and
    /// dropped by every change: nothing but a cache of a pure function of `chain`.
    children: Option<Children>,
}

impl Holding {
    fn is_empty(&self) -> bool {
        self.chain.is_empty() && self.others.values().all(BTreeSet::is_empty)
    }

    /// The chain group's held set, for a change (which invalidates the child lists).
    fn chain_mut(&mut self) -> &mut HeldSet {
        self.children = None;
        &mut self.chain
    }

    /// For each position `i`, every chain block that continues a reachable chain whose locals are
    /// `query[..=i]`; as many levels as the chain group matches.
    fn levels(&mut self, query: &[LocalHash]) -> Vec<Vec<SeqHash>> {
        let children = self
            .children
            .get_or_insert_with(|| children_of(&self.chain));
        let mut levels: Vec<Vec<SeqHash>> = Vec::new();
        let mut frontier: Vec<Option<SeqHash>> = vec![None];
        for &local in query {
            let mut level: Vec<SeqHash> = Vec::new();
            for &parent in &frontier {
                let first = children.partition_point(|&(p, l, _)| (p, l) < (parent, local));
                let matching = children[first..]
                    .iter()
                    .take_while(|&&(p, l, _)| (p, l) == (parent, local));
                level.extend(matching.map(|&(_, _, seq)| seq));
            }
            if level.is_empty() {
                break;
            }
            frontier = level.iter().copied().map(Some).collect();
            levels.push(level);
        }
        levels
    }
}

/// The reference for models with several KV-cache groups: nested maps under one lock, the
/// rules of [the contract](crate::docs::contract#groups) applied as they read.
///
/// ```
/// use flash_indexer::hybrid::{GroupKind, GroupSpec, HybridIndex, ModelGroups, NaiveHybridIndexer};
/// use flash_indexer::{Block, Event, LocalHash, SeqHash, Worker};
///
/// // Full attention (group 0) and a window of one block (group 1).
/// let model = ModelGroups::new(vec![
///     GroupSpec::new(GroupKind::FullAttention, 16),
///     GroupSpec::new(GroupKind::SlidingWindow { window: 16 }, 16),
/// ])
/// .unwrap();
/// let index = NaiveHybridIndexer::new(model);
/// let w = Worker::new(1, 0);
/// let blocks: Vec<Block> = (0..3).map(|i| Block::new(LocalHash(i), SeqHash(100 + i))).collect();
/// index.apply(0, &Event::stored(w, 0, None, blocks.clone())).unwrap();
/// // The window group kept only the second block: the hit ends there.
/// index.apply(1, &Event::stored(w, 1, Some(SeqHash(100)), blocks[1..2].to_vec())).unwrap();
/// let query = [LocalHash(0), LocalHash(1), LocalHash(2)];
/// assert_eq!(index.find_matches(&query).get(w), Some(2));
/// ```
#[derive(Debug)]
pub struct NaiveHybridIndexer {
    model: ModelGroups,
    workers: Mutex<BTreeMap<Worker, Holding>>,
}

impl NaiveHybridIndexer {
    /// An empty index for `model`'s groups.
    pub fn new(model: ModelGroups) -> Self {
        NaiveHybridIndexer {
            model,
            workers: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Worker, Holding>> {
        // Every mutation below is validated first, so a poisoned lock is still consistent.
        lock(&self.workers)
    }
}

impl HybridIndex for NaiveHybridIndexer {
    fn model(&self) -> &ModelGroups {
        &self.model
    }

    fn apply(&self, group: u32, event: &Event) -> Result<(), EventError> {
        check_group(&self.model, group)?;
        let mut workers = self.lock();
        let holding = workers.entry(event.worker).or_default();
        let chain = group == self.model.chain_group();
        let result = match &event.kind {
            EventKind::Cleared => {
                *holding = Holding::default();
                Ok(())
            }
            EventKind::Stored { parent, blocks } if chain => {
                store(holding.chain_mut(), *parent, blocks)
            }
            EventKind::Stored { blocks, .. } => {
                let set = holding.others.entry(group).or_default();
                set.extend(blocks.iter().map(|b| b.seq));
                Ok(())
            }
            EventKind::Removed { blocks } => {
                let mut missing = Vec::new();
                for seq in blocks {
                    let removed = if chain {
                        holding.chain_mut().remove(seq).is_some()
                    } else {
                        holding
                            .others
                            .get_mut(&group)
                            .is_some_and(|set| set.remove(seq))
                    };
                    if !removed {
                        missing.push(*seq);
                    }
                }
                if missing.is_empty() {
                    Ok(())
                } else {
                    Err(EventError::UnknownBlocks { missing })
                }
            }
        };
        if holding.is_empty() {
            workers.remove(&event.worker);
        }
        result
    }

    fn find_matches(&self, query: &[LocalHash]) -> OverlapScores {
        let mut workers = self.lock();
        let mut scores = OverlapScores::new();
        if query.is_empty() {
            return scores;
        }
        let chain = self.model.chain_group();
        for (worker, holding) in workers.iter_mut() {
            let levels = holding.levels(query);
            let mut held = |group: u32, i: usize| {
                let Some(level) = levels.get(i) else {
                    return false;
                };
                group == chain
                    || holding
                        .others
                        .get(&group)
                        .is_some_and(|set| level.iter().any(|seq| set.contains(seq)))
            };
            let hit = longest_hit(&self.model, query.len(), levels.len(), &mut held);
            if hit > 0 {
                scores.push(*worker, hit as u32);
            }
        }
        scores
    }

    fn remove_worker(&self, id: u64) {
        self.lock().retain(|w, _| w.id != id);
    }

    fn remove_worker_dp_rank(&self, worker: Worker) {
        self.lock().remove(&worker);
    }

    fn block_count(&self, worker: Worker, group: u32) -> usize {
        let workers = self.lock();
        let Some(holding) = workers.get(&worker) else {
            return 0;
        };
        if group == self.model.chain_group() {
            holding.chain.len()
        } else {
            holding.others.get(&group).map_or(0, BTreeSet::len)
        }
    }

    fn dump(&self) -> Vec<(u32, Event)> {
        let workers = self.lock();
        let chain = self.model.chain_group();
        let mut events = Vec::new();
        for (&worker, holding) in workers.iter() {
            for (seq, held) in reachable_in_order(&holding.chain) {
                let block = Block::new(held.local, seq);
                events.push((chain, Event::stored(worker, 0, held.parent, vec![block])));
            }
            for (&group, seqs) in &holding.others {
                if !seqs.is_empty() {
                    events.push(dump_other(worker, group, seqs.iter().copied()));
                }
            }
        }
        events
    }
}
