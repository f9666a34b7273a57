//! [`HybridIndexer`]: any layout for the chain group, and the other groups' blocks by path, so
//! that a query is one walk of the layout plus a lookup per worker depth.

use super::model::ModelGroups;
use super::rules::{Holdings, longest_hit};
use super::table::{Changes, Runs, Table};
use super::{HybridIndex, check_group, dump_other};
use crate::error::EventError;
use crate::index::KvIndex;
use crate::index_core::canon::{Canon, Key};
use crate::scores::OverlapScores;
use crate::sync::{Mutex, MutexGuard, lock};
use crate::types::{Event, EventKind, LocalHash, Worker};
use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;

/// The key of the map queries read: a group's path (how many of each worker's blocks the group
/// holds there), or with [`ANSWER`] set a spec's (each worker's answer to the spec's run rule
/// for a hit ending there).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PathKey {
    group: u32,
    path: Key,
}

/// The bit of [`PathKey::group`] that makes it a spec's answers (groups and specs are < 32).
const ANSWER: u32 = 1 << 31;

/// Per key, the workers sorted, each with its number (salted twins share a path, so a count).
/// Replaced whole on every change, so readers never see one half-made. Most paths have one
/// holder, kept inline: a query reads it with the map's entry instead of one more cache miss.
#[derive(Debug)]
enum Holders {
    One((Worker, u32)),
    Many(Box<[(Worker, u32)]>),
}

impl Holders {
    fn new(mut holders: Vec<(Worker, u32)>) -> Self {
        match holders.len() {
            1 => Holders::One(holders.pop().expect("one holder")),
            _ => Holders::Many(holders.into_boxed_slice()),
        }
    }

    fn as_slice(&self) -> &[(Worker, u32)] {
        match self {
            Holders::One(one) => std::slice::from_ref(one),
            Holders::Many(many) => many,
        }
    }
}

/// One shard of the writers' tables, with the buffer its events' changes are collected in.
#[derive(Debug, Default)]
struct Shard {
    tables: HashMap<Worker, Table, RandomState>,
    changes: Changes,
}

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
/// concurrent map from path to the workers that hold it. The sliding-window and Mamba rules,
/// which scan down from a hit's end, are kept answered: the writers keep each path's answer
/// (for a hit ending there) in the same map, so a query reads one answer per distinct worker
/// depth, whatever the number of workers. The other rules ask the map about a position when a
/// worker needs it, once per position. A model with one group is the layout alone.
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
    runs: Runs,
    tables: Box<[Mutex<Shard>]>,
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
            runs: Runs::new(&model),
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

    /// Worker tables, and group paths held or answered: both 0 once every worker is removed.
    #[cfg(feature = "arbitrary")]
    pub(crate) fn residue(&self) -> (usize, usize) {
        let tables = self.tables.iter().map(|t| lock(t).tables.len()).sum();
        (tables, self.members.len())
    }

    /// The layout holding the chain group.
    pub fn chain(&self) -> &I {
        &self.chain
    }

    fn shard(&self, id: u64) -> MutexGuard<'_, Shard> {
        let at = self.shard_of.hash_one(id) as usize % SHARDS;
        lock(&self.tables[at])
    }

    /// Publishes one event's changes of `worker`'s table.
    fn commit(&self, worker: Worker, changes: &Changes) {
        let members = self.members.pin();
        for &(group, path, change) in &changes.held {
            self.update(&members, PathKey { group, path }, worker, |count| {
                count.saturating_add_signed(change)
            });
        }
        for &(spec, path, answer) in &changes.answers {
            let key = PathKey {
                group: ANSWER | spec,
                path,
            };
            self.update(&members, key, worker, |_| answer);
        }
    }

    /// Sets `worker`'s number at `key` to `f` of its old one (0 when absent; 0 removes it).
    fn update(
        &self,
        map: &papaya::HashMapRef<'_, PathKey, Holders, RandomState, impl papaya::Guard>,
        key: PathKey,
        worker: Worker,
        f: impl FnOnce(u32) -> u32,
    ) {
        // Writers of other workers may change the same path: one at a time per stripe.
        let _stripe = lock(&self.stripes[self.shard_of.hash_one(key) as usize % STRIPES]);
        let old = map.get(&key).map_or(&[][..], Holders::as_slice);
        let (at, count) = match old.binary_search_by_key(&worker, |&(w, _)| w) {
            Ok(at) => (Ok(at), old[at].1),
            Err(at) => (Err(at), 0),
        };
        let count_now = f(count);
        if count_now == count {
            return;
        }
        let holders: Vec<(Worker, u32)> = match at {
            // The common cases, a path of one worker's: no list to copy.
            Err(_) if old.is_empty() => {
                map.insert(key, Holders::One((worker, count_now)));
                return;
            }
            Ok(_) if old.len() == 1 && count_now == 0 => {
                map.remove(&key);
                return;
            }
            Ok(_) if old.len() == 1 => {
                map.insert(key, Holders::One((worker, count_now)));
                return;
            }
            Ok(at) => {
                let mut holders = old.to_vec();
                match count_now {
                    0 => {
                        holders.remove(at);
                    }
                    n => holders[at].1 = n,
                }
                holders
            }
            Err(at) => {
                let mut holders = old.to_vec();
                holders.insert(at, (worker, count_now));
                holders
            }
        };
        map.insert(key, Holders::new(holders));
    }

    /// Applies one event of a hybrid model to the layout and to its worker's table, under the
    /// worker's shard lock. The table's changes wait in the shard's buffer for
    /// [`publish`](Self::publish), so that a batch's events settle and publish once.
    fn apply_unpublished(
        &self,
        shard: &mut Shard,
        group: u32,
        event: &Event,
    ) -> Result<(), EventError> {
        let worker = event.worker;
        if let EventKind::Cleared = event.kind {
            // The retraction reads the answers the table has published: the batch's earlier
            // changes go out first.
            self.publish(shard, worker);
            let result = self.chain.apply(event);
            if let Some(table) = shard.tables.remove(&worker) {
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
        let Shard { tables, changes } = shard;
        let table = tables.entry(worker).or_default();
        let runs = &self.runs;
        let mut missing = Vec::new();
        match &event.kind {
            EventKind::Stored { parent, blocks } if chain => {
                table.store_chain(&self.canon, runs, *parent, blocks, changes)
            }
            EventKind::Stored { blocks, .. } => {
                for block in blocks {
                    table.store_other(runs, group, block.seq, changes);
                }
            }
            EventKind::Removed { blocks } => {
                for &seq in blocks {
                    let removed = if chain {
                        table.remove_chain(&self.canon, runs, seq, changes)
                    } else {
                        table.remove_other(runs, group, seq, changes)
                    };
                    if !removed {
                        missing.push(seq);
                    }
                }
            }
            EventKind::Cleared => {}
        }
        // An empty table has no paths left to settle: every one it had went with a retraction.
        if table.is_empty() {
            tables.remove(&worker);
        }
        match result {
            Ok(()) if !chain && !missing.is_empty() => Err(EventError::UnknownBlocks { missing }),
            other => other,
        }
    }

    /// Settles `worker`'s table and publishes what its events changed since the last publish.
    fn publish(&self, shard: &mut Shard, worker: Worker) {
        let Shard { tables, changes } = shard;
        if let Some(table) = tables.get_mut(&worker) {
            table.settle(&self.runs, changes);
        }
        self.commit(worker, changes);
        changes.clear();
    }

    /// Drops every block of `worker` from the maps (the layout is the caller's).
    fn forget(&self, worker: Worker, table: Table) {
        self.commit(worker, &table.retraction(&self.runs));
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
        let mut shard = self.shard(event.worker.id);
        let result = self.apply_unpublished(&mut shard, group, event);
        self.publish(&mut shard, event.worker);
        result
    }

    fn apply_batch(&self, events: &[(u32, Event)]) -> Vec<Result<(), EventError>> {
        let mut results = Vec::with_capacity(events.len());
        let mut at = 0;
        while at < events.len() {
            // A worker's consecutive events under one lock, published once.
            let worker = events[at].1.worker;
            let end = at
                + (events[at..].iter())
                    .take_while(|(_, event)| event.worker == worker)
                    .count();
            let mut shard = self.model.is_hybrid().then(|| self.shard(worker.id));
            for (group, event) in &events[at..end] {
                results.push(
                    check_group(&self.model, *group).and_then(|()| match &mut shard {
                        Some(shard) => self.apply_unpublished(shard, *group, event),
                        None => self.chain.apply(event),
                    }),
                );
            }
            if let Some(shard) = &mut shard {
                self.publish(shard, worker);
            }
            at = end;
        }
        results
    }

    fn find_matches(&self, query: &[LocalHash]) -> OverlapScores {
        let mut scores = self.chain.find_matches(query);
        if !self.model.is_hybrid() || scores.is_empty() {
            return scores;
        }
        let members = self.members.pin();
        if let Some(spec) = self.runs.simple() {
            refine_by_depth(&self.canon, &members, spec, query, &mut scores);
            return scores;
        }
        let deepest = scores.iter().map(|(_, d)| d as usize).max().unwrap_or(0);
        let mut view = QueryView {
            paths: Paths::new(&self.canon, &query[..deepest.min(query.len())]),
            groups: self.model.len(),
            runs: &self.runs,
            members: &members,
            looked: Vec::new(),
        };
        scores.refine(|worker, depth| {
            let mut holdings = WorkerView {
                view: &mut view,
                worker,
            };
            longest_hit(&self.model, query.len(), depth as usize, &mut holdings) as u32
        });
        scores
    }

    fn remove_worker(&self, id: u64) {
        let tables = &mut self.shard(id).tables;
        self.chain.remove_worker(id);
        let gone: Vec<Worker> = tables.keys().filter(|w| w.id == id).copied().collect();
        for worker in gone {
            if let Some(table) = tables.remove(&worker) {
                self.forget(worker, table);
            }
        }
    }

    fn remove_worker_dp_rank(&self, worker: Worker) {
        let tables = &mut self.shard(worker.id).tables;
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
            .tables
            .get(&worker)
            .map_or(0, |table| table.count_other(group))
    }

    /// The layout's dump for the chain group, then each worker's other groups, a shard at a
    /// time (a worker's groups are read at one instant, the layout at another).
    fn dump(&self) -> Vec<(u32, Event)> {
        let chain = self.model.chain_group();
        let mut events: Vec<(u32, Event)> = (self.chain.dump().into_iter())
            .map(|e| (chain, e))
            .collect();
        for shard in self.tables.iter() {
            for (&worker, table) in lock(shard).tables.iter() {
                for (group, seqs) in table.others() {
                    events.push(dump_other(worker, group, seqs));
                }
            }
        }
        events
    }
}

type MapRef<'a> = papaya::HashMapRef<'a, PathKey, Holders, RandomState, papaya::LocalGuard<'a>>;

/// A query's paths, rolled on demand: the rules ask about a few positions, mostly near the
/// workers' depths.
struct Paths<'a> {
    canon: &'a Canon,
    query: &'a [LocalHash],
    /// Paths computed so far: the first [`FEW`] in no order (most queries ask about one or two
    /// positions, and then ask no allocator), the rest in `more`, by position.
    few: [Key; FEW],
    len: usize,
    more: Vec<Key>,
}

/// Paths a query keeps without allocating.
const FEW: usize = 4;

impl<'a> Paths<'a> {
    fn new(canon: &'a Canon, query: &'a [LocalHash]) -> Self {
        Paths {
            canon,
            query,
            few: [Key::unkeyed(0); FEW],
            len: 0,
            more: Vec::new(),
        }
    }

    /// The deepest path known at or before position `i`.
    fn known_below(&self, i: usize) -> Option<Key> {
        let few = self.few[..self.len].iter().copied();
        let below = self.more.partition_point(|k| (k.pos as usize) <= i);
        let more = below.checked_sub(1).map(|b| self.more[b]);
        few.chain(more)
            .filter(|k| k.pos as usize <= i)
            .max_by_key(|k| k.pos)
    }

    /// The path of the query's block `i`; `None` past the query.
    fn at(&mut self, i: usize) -> Option<Key> {
        if i >= self.query.len() {
            return None;
        }
        let from = self.known_below(i);
        if let Some(key) = from.filter(|k| k.pos as usize == i) {
            return Some(key);
        }
        let start = from.map_or(0, |k| k.pos as usize + 1);
        let key = Key {
            pos: i as u32,
            canon: self
                .canon
                .extend(self.canon.parent_of(from), &self.query[start..=i]),
        };
        if self.len < FEW {
            self.few[self.len] = key;
            self.len += 1;
        } else {
            let at = self.more.partition_point(|k| k.pos < key.pos);
            self.more.insert(at, key);
        }
        Some(key)
    }
}

/// The most workers whose depths [`refine_by_depth`] keeps on the stack (more take the heap).
const KNOWN_DEPTHS: usize = 64;

/// A model of full attention and one run spec `spec`: each worker's hit is the run rule's
/// answer at its full-attention depth. Each distinct depth is looked up once, shallowest first,
/// its path rolled on from the one before, so the query's blocks are rolled once in all.
fn refine_by_depth(
    canon: &Canon,
    members: &MapRef<'_>,
    spec: usize,
    query: &[LocalHash],
    scores: &mut OverlapScores,
) {
    let n = scores.len();
    let (mut few_depths, mut few_answers) = ([0u32; KNOWN_DEPTHS], [None; KNOWN_DEPTHS]);
    let (mut many_depths, mut many_answers) = (Vec::new(), Vec::new());
    let (depths, answers): (&mut [u32], &mut [Option<&Holders>]) = if n <= KNOWN_DEPTHS {
        (&mut few_depths[..n], &mut few_answers[..n])
    } else {
        many_depths.resize(n, 0);
        many_answers.resize(n, None);
        (&mut many_depths, &mut many_answers)
    };
    for (depth, (_, d)) in depths.iter_mut().zip(scores.iter()) {
        *depth = d;
    }
    let depths = distinct(depths);
    let mut path: Option<Key> = None;
    for (answer, &depth) in answers.iter_mut().zip(depths) {
        let (from, last) = (path.map_or(0, |p| p.pos as usize + 1), depth as usize - 1);
        let key = Key {
            pos: last as u32,
            canon: canon.extend(canon.parent_of(path), &query[from..=last]),
        };
        path = Some(key);
        let group = ANSWER | spec as u32;
        *answer = members.get(&PathKey { group, path: key });
    }
    scores.refine(|worker, depth| {
        let at = depths
            .binary_search(&depth)
            .expect("every depth was looked up");
        number_of(answers[at], worker).unwrap_or(0)
    });
}

/// `depths` sorted, each once.
fn distinct(depths: &mut [u32]) -> &[u32] {
    depths.sort_unstable();
    let mut kept = 0;
    for at in 0..depths.len() {
        if kept == 0 || depths[at] != depths[kept - 1] {
            depths[kept] = depths[at];
            kept += 1;
        }
    }
    &depths[..kept]
}

/// One query's reads of the map, each key looked up once whatever the number of workers.
struct QueryView<'a> {
    paths: Paths<'a>,
    groups: usize,
    runs: &'a Runs,
    members: &'a MapRef<'a>,
    /// Per (position, group), its holders once looked up (allocated on the first lookup).
    looked: Vec<Option<Option<&'a Holders>>>,
}

impl<'a> QueryView<'a> {
    /// Every worker's answer to spec `spec`'s run rule for a hit of `max_blocks` (kept at the
    /// path of its last block; workers without one answer 0).
    fn answers_at(&mut self, spec: usize, max_blocks: usize) -> Option<&'a Holders> {
        let path = self.paths.at(max_blocks.checked_sub(1)?)?;
        let group = ANSWER | spec as u32;
        self.members.get(&PathKey { group, path })
    }
}

/// The rules' questions about one worker, answered from a [`QueryView`].
struct WorkerView<'v, 'a> {
    view: &'v mut QueryView<'a>,
    worker: Worker,
}

fn number_of(holders: Option<&Holders>, worker: Worker) -> Option<u32> {
    let holders = holders?.as_slice();
    let at = holders.binary_search_by_key(&worker, |&(w, _)| w).ok()?;
    Some(holders[at].1)
}

impl Holdings for WorkerView<'_, '_> {
    fn held(&mut self, group: u32, i: usize) -> bool {
        let view = &mut *self.view;
        let Some(path) = view.paths.at(i) else {
            return false;
        };
        if view.looked.is_empty() {
            view.looked = vec![None; view.groups * view.paths.query.len()];
        }
        let slot = &mut view.looked[i * view.groups + group as usize];
        let holders = *slot.get_or_insert_with(|| view.members.get(&PathKey { group, path }));
        number_of(holders, self.worker).is_some()
    }

    fn run_answer(&mut self, spec: usize, max_blocks: usize) -> Option<usize> {
        if !self.view.runs.keeps(spec) {
            return None;
        }
        let holders = self.view.answers_at(spec, max_blocks);
        Some(number_of(holders, self.worker).unwrap_or(0) as usize)
    }
}
