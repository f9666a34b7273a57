//! [`HybridIndexer`]: any layout for the chain group, and the other groups' blocks by path, so
//! that a query is one walk of the layout plus a lookup per position the rules ask about.

use super::model::ModelGroups;
use super::rules::longest_hit;
use super::table::{Delta, Table};
use super::{HybridIndex, check_group};
use crate::error::EventError;
use crate::index::KvIndex;
use crate::index_core::canon::{Canon, Key};
use crate::scores::OverlapScores;
use crate::sync::{Mutex, MutexGuard, lock};
use crate::types::{Event, EventKind, LocalHash, Worker};
use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;

/// One group's path: the key of the map queries read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PathKey {
    group: u32,
    path: Key,
}

/// The workers whose group holds a path, sorted, each with how many of its blocks do (salted
/// twins share a path). Replaced whole on every change, so readers never see one half-made.
type Holders = Box<[(Worker, u32)]>;

/// Shards of the writers' tables; all ranks of one worker id share a shard.
const SHARDS: usize = 64;
/// Locks that order the writers of one path (of different workers).
const STRIPES: usize = 256;

/// An index of a model with several KV-cache groups, over any layout.
///
/// The chain group (the first full-attention group) is stored in the layout `I` exactly as a
/// [`KvIndex`] stores a model's only group, and its walk gives each worker's full-attention
/// depth. Every other group's blocks are kept as the paths they end (position, and the layouts'
/// canonical hash of the locals up to them, keyed by this index's own secret) in one
/// concurrent map from path to the workers that hold it. A query rolls its own paths once, and
/// the rules of [the contract](crate::docs::contract#groups) ask the map about a position only
/// when a worker needs it, once per position whatever the number of workers: a sliding window a
/// few blocks below each depth, a Mamba group down to its last state. A model with one group is
/// the layout alone.
///
/// Writers of one worker serialize on its shard's lock (the table of paths must follow the
/// layout's events in order); queries take no lock: the layout and the map are both read
/// lock-free. A query racing a writer may see the layout and the map at different instants,
/// but never a depth the chain group did not have at some instant of the query.
///
/// ```
/// use flash_indexer::hybrid::{GroupKind, GroupSpec, HybridIndex, HybridIndexer, ModelGroups};
/// use flash_indexer::{Block, Event, LocalHash, RadixIndexer, SeqHash, Worker};
///
/// // Full attention (group 0) and Mamba (group 1).
/// let model = ModelGroups::new(vec![
///     GroupSpec::new(GroupKind::FullAttention, 16),
///     GroupSpec::new(GroupKind::Mamba, 16),
/// ])
/// .unwrap();
/// let index: HybridIndexer<RadixIndexer> = HybridIndexer::new(model);
/// let w = Worker::new(1, 0);
/// let blocks: Vec<Block> = (0..4).map(|i| Block::new(LocalHash(i), SeqHash(100 + i))).collect();
/// index.apply(0, &Event::stored(w, 0, None, blocks.clone())).unwrap();
/// // The Mamba group kept the state after the third block only.
/// index.apply(1, &Event::stored(w, 1, Some(SeqHash(101)), blocks[2..3].to_vec())).unwrap();
/// let query: Vec<LocalHash> = (0..4).map(LocalHash).collect();
/// assert_eq!(index.find_matches(&query).get(w), Some(3));
/// ```
#[derive(Debug)]
pub struct HybridIndexer<I> {
    model: ModelGroups,
    chain: I,
    tables: Box<[Mutex<HashMap<Worker, Table, RandomState>>]>,
    members: papaya::HashMap<PathKey, Holders, RandomState>,
    stripes: Box<[Mutex<()>]>,
    canon: Canon,
    shard_of: RandomState,
}

impl<I: KvIndex + Default> HybridIndexer<I> {
    /// An empty index for `model`'s groups, over a default layout `I`.
    pub fn new(model: ModelGroups) -> Self {
        Self::with_layout(model, I::default())
    }
}

impl<I: KvIndex> HybridIndexer<I> {
    /// An empty index for `model`'s groups over `chain`, an empty layout.
    pub fn with_layout(model: ModelGroups, chain: I) -> Self {
        HybridIndexer {
            model,
            chain,
            tables: (0..SHARDS).map(|_| Mutex::default()).collect(),
            members: papaya::HashMap::builder()
                .hasher(RandomState::default())
                .build(),
            stripes: (0..STRIPES).map(|_| Mutex::default()).collect(),
            canon: Canon::random(),
            shard_of: RandomState::default(),
        }
    }

    /// Worker tables and group paths held: both 0 once every worker is removed.
    #[cfg(feature = "arbitrary")]
    pub(crate) fn residue(&self) -> (usize, usize) {
        let tables = self.tables.iter().map(|t| lock(t).len()).sum();
        (tables, self.members.len())
    }

    /// The layout holding the chain group.
    pub fn chain(&self) -> &I {
        &self.chain
    }

    fn shard(&self, id: u64) -> MutexGuard<'_, HashMap<Worker, Table, RandomState>> {
        let at = self.shard_of.hash_one(id) as usize % SHARDS;
        lock(&self.tables[at])
    }

    fn commit(&self, worker: Worker, deltas: &[Delta]) {
        let members = self.members.pin();
        for &(group, path, change) in deltas {
            let key = PathKey { group, path };
            // Writers of other workers may change the same path: one at a time per stripe.
            let _stripe = lock(&self.stripes[self.shard_of.hash_one(key) as usize % STRIPES]);
            let mut holders = members.get(&key).map_or_else(Vec::new, |h| h.to_vec());
            match holders.binary_search_by_key(&worker, |&(w, _)| w) {
                Ok(at) => {
                    let count = holders[at].1.saturating_add_signed(change);
                    if count == 0 {
                        holders.remove(at);
                    } else {
                        holders[at].1 = count;
                    }
                }
                Err(at) if change > 0 => holders.insert(at, (worker, change.unsigned_abs())),
                Err(_) => continue,
            }
            if holders.is_empty() {
                members.remove(&key);
            } else {
                members.insert(key, holders.into_boxed_slice());
            }
        }
    }

    /// Drops every block of `worker` from the map (the layout is the caller's).
    fn forget(&self, worker: Worker, table: Table) {
        let gone: Vec<Delta> = table
            .held_pairs()
            .map(|(group, path)| (group, path, -1))
            .collect();
        self.commit(worker, &gone);
    }
}

impl<I: KvIndex> HybridIndex for HybridIndexer<I> {
    fn model(&self) -> &ModelGroups {
        &self.model
    }

    fn apply(&self, group: u32, event: &Event) -> Result<(), EventError> {
        check_group(&self.model, group)?;
        if !self.model.is_hybrid() {
            return self.chain.apply(event);
        }
        let worker = event.worker;
        let mut tables = self.shard(worker.id);
        if let EventKind::Cleared = event.kind {
            let result = self.chain.apply(event);
            if let Some(table) = tables.remove(&worker) {
                self.forget(worker, table);
            }
            return result;
        }
        let chain = group == self.model.chain_group();
        let result = if chain {
            self.chain.apply(event)
        } else {
            Ok(())
        };
        if matches!(&result, Err(e) if !e.is_warning()) {
            return result;
        }
        let table = tables.entry(worker).or_default();
        let mut deltas = Vec::new();
        let mut missing = Vec::new();
        match &event.kind {
            EventKind::Stored { parent, blocks } if chain => {
                table.store_chain(&self.canon, *parent, blocks, &mut deltas)
            }
            EventKind::Stored { blocks, .. } => {
                for block in blocks {
                    table.store_other(group, block.seq, &mut deltas);
                }
            }
            EventKind::Removed { blocks } => {
                for &seq in blocks {
                    let removed = if chain {
                        table.remove_chain(&self.canon, seq, &mut deltas)
                    } else {
                        table.remove_other(group, seq, &mut deltas)
                    };
                    if !removed {
                        missing.push(seq);
                    }
                }
            }
            EventKind::Cleared => {}
        }
        if table.is_empty() {
            tables.remove(&worker);
        }
        self.commit(worker, &deltas);
        match result {
            Ok(()) if !chain && !missing.is_empty() => Err(EventError::UnknownBlocks { missing }),
            other => other,
        }
    }

    fn find_matches(&self, query: &[LocalHash]) -> OverlapScores {
        let scores = self.chain.find_matches(query);
        if !self.model.is_hybrid() || scores.is_empty() {
            return scores;
        }
        let deepest = scores.iter().map(|(_, d)| d as usize).max().unwrap_or(0);
        // The query's paths up to the deepest worker, rolled as the writers rolled theirs.
        let mut paths = Vec::with_capacity(deepest);
        let rolled = query[..deepest.min(query.len())].iter().copied();
        self.canon.children(None, rolled, &mut paths);
        let members = self.members.pin();
        // Each (group, position)'s holders, looked up the first time a worker needs them.
        let groups = self.model.len();
        let mut looked: Vec<Option<Option<&Holders>>> = vec![None; groups * paths.len()];
        let mut out = OverlapScores::with_capacity(scores.len());
        for (worker, depth) in scores.iter() {
            let mut held = |group: u32, i: usize| {
                // The rules ask only below the worker's depth, which the paths cover.
                let (Some(&path), Some(slot)) =
                    (paths.get(i), looked.get_mut(i * groups + group as usize))
                else {
                    return false;
                };
                let holders = *slot.get_or_insert_with(|| members.get(&PathKey { group, path }));
                holders.is_some_and(|h| h.binary_search_by_key(&worker, |&(w, _)| w).is_ok())
            };
            let hit = longest_hit(&self.model, query.len(), depth as usize, &mut held);
            if hit > 0 {
                out.push(worker, hit as u32);
            }
        }
        out
    }

    fn remove_worker(&self, id: u64) {
        let mut tables = self.shard(id);
        self.chain.remove_worker(id);
        let gone: Vec<Worker> = tables.keys().filter(|w| w.id == id).copied().collect();
        for worker in gone {
            if let Some(table) = tables.remove(&worker) {
                self.forget(worker, table);
            }
        }
    }

    fn remove_worker_dp_rank(&self, worker: Worker) {
        let mut tables = self.shard(worker.id);
        self.chain.remove_worker_dp_rank(worker);
        if let Some(table) = tables.remove(&worker) {
            self.forget(worker, table);
        }
    }

    fn block_count(&self, worker: Worker, group: u32) -> usize {
        if group == self.model.chain_group() {
            return self.chain.block_count(worker);
        }
        self.shard(worker.id)
            .get(&worker)
            .map_or(0, |table| table.count_other(group))
    }
}
