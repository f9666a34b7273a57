//! The predicted caches: which blocks each worker is believed to hold, and the events that keep
//! the index in step with that belief. Pure bookkeeping; nothing here touches an index.
//!
//! Invariants (what makes every eviction a leaf, so the index's chains stay whole):
//! - every touch of a block touches its whole prefix in the same call, and gives the prefix
//!   newer ticks than the block (ticks are handed out tail first), so a parent's tick is always
//!   newer than its children's;
//! - a pinned block's prefix is pinned too (a request pins its whole chain);
//! - so the least recently touched unpinned block, the one evicted or expired first, has no
//!   predicted children, and each worker's predicted blocks are closed under prefixes.

use super::retention::Retention;
use crate::hash;
use crate::types::{Block, Event, LocalHash, SeqHash, Worker};
use core::fmt;
use core::time::Duration;
use foldhash::fast::RandomState;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::BuildHasher;

/// A routed request, as [`ApproximateIndexer::record_routing`](super::ApproximateIndexer::record_routing)
/// returns it: pass it to [`release`](super::ApproximateIndexer::release) of the same index when
/// the request finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Routed {
    worker: Worker,
    /// The index that routed it ([`index_tag`]).
    index: u64,
    id: u64,
}

impl Routed {
    pub(crate) fn new(worker: Worker, index: u64, id: u64) -> Self {
        Self { worker, index, id }
    }

    /// The request's number in the index that routed it, if that index is `index`.
    pub(crate) fn id_in(&self, index: u64) -> Result<u64, ForeignRouted> {
        (self.index == index)
            .then_some(self.id)
            .ok_or(ForeignRouted)
    }

    /// The request's number in the index that routed it (what a shared decision names).
    pub(crate) fn number(&self) -> u64 {
        self.id
    }

    /// The worker the request was routed to.
    pub fn worker(&self) -> Worker {
        self.worker
    }
}

/// A [`Routed`] handed to another index's `release` than the one that routed it: refused, so
/// that it cannot unpin that index's own request of the same number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForeignRouted;

impl fmt::Display for ForeignRouted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("this request was routed by another approximate index")
    }
}

impl std::error::Error for ForeignRouted {}

/// A tag for a new index's [`Routed`]s: random, so that no two indexes share one (but with
/// probability 2^-64).
pub(crate) fn index_tag() -> u64 {
    std::hash::RandomState::new().hash_one(0u8)
}

/// One predicted block of one worker.
#[derive(Debug)]
struct Predicted {
    /// Its place in the LRU order: newer is larger; unique across workers.
    tick: u64,
    /// When it was last touched.
    at: Duration,
    /// Running requests that hold it.
    pins: u32,
}

#[derive(Debug, Default)]
struct WorkerCache {
    blocks: HashMap<SeqHash, Predicted, RandomState>,
    /// Unpinned blocks by tick, oldest first: the front is evicted first. Lazy: an entry is
    /// current while its block still has that tick and no pins ([`current`]); a touch lists
    /// the block again at the back instead of moving it, and stale entries are skipped, and
    /// dropped once they outnumber the blocks.
    lru: VecDeque<(u64, SeqHash)>,
    /// The running requests that pinned blocks here.
    running: HashSet<u64, RandomState>,
}

/// Whether a lazy order's entry `(tick, seq)` still stands for an unpinned block of `blocks`.
fn current(blocks: &HashMap<SeqHash, Predicted, RandomState>, tick: u64, seq: SeqHash) -> bool {
    blocks
        .get(&seq)
        .is_some_and(|b| b.tick == tick && b.pins == 0)
}

/// The chain a running request pinned.
#[derive(Debug)]
struct Running {
    worker: Worker,
    seqs: Vec<SeqHash>,
}

#[derive(Debug)]
pub(crate) struct Predictions {
    retention: Retention,
    now: Duration,
    tick: u64,
    /// Tags this index's [`Routed`]s.
    tag: u64,
    next_request: u64,
    /// Predicted workers with at least one predicted block or running request.
    workers: HashMap<Worker, WorkerCache, RandomState>,
    exact: HashSet<Worker, RandomState>,
    /// The ranks of every worker id in `workers` or `exact`, so that a worker id is forgotten
    /// without a scan of every worker.
    ranks: HashMap<u64, Vec<u32>, RandomState>,
    /// Unpinned blocks of every worker by tick, when blocks expire with time (ticks and touch
    /// times grow together, so the front expires first). Lazy, as each worker's LRU order is.
    expiry: Expiry,
    /// Predicted blocks over every worker: what bounds the stale entries of `expiry`.
    predicted: usize,
    running: HashMap<u64, Running, RandomState>,
}

/// Unpinned blocks of every worker by tick, for expiry (lazy).
type Expiry = VecDeque<(u64, Worker, SeqHash)>;

/// Drops the stale entries of a lazy order once it holds more than twice `live` (plus a
/// little): each compaction follows as many pushes as it keeps entries, so its cost is spread
/// over them.
fn compact<T>(order: &mut VecDeque<T>, live: usize, mut current: impl FnMut(&T) -> bool) {
    if order.len() > 2 * live + 64 {
        order.retain(|entry| current(entry));
        if let Some(to) = crate::room::shrunk(order.len(), order.capacity()) {
            order.shrink_to(to);
        }
    }
}

impl WorkerCache {
    /// Adds `seq` with `pins` pins, touched at `at`; `true` if it is to be listed (unpinned).
    fn insert(&mut self, seq: SeqHash, tick: u64, at: Duration, pins: u32) -> bool {
        self.blocks.insert(seq, Predicted { tick, at, pins });
        pins == 0
    }

    /// Gives `seq` a new tick and touch time and its pins as `pins` says; `None` if the worker
    /// does not hold it, else whether it is to be listed (unpinned). Its old entries in the
    /// orders go stale by themselves.
    fn touch(
        &mut self,
        seq: SeqHash,
        tick: u64,
        at: Duration,
        pins: impl FnOnce(u32) -> u32,
    ) -> Option<bool> {
        let block = self.blocks.get_mut(&seq)?;
        *block = Predicted {
            tick,
            at,
            pins: pins(block.pins),
        };
        Some(block.pins == 0)
    }

    /// The least recently touched unpinned block, stale entries dropped on the way.
    fn oldest(&mut self) -> Option<(u64, SeqHash)> {
        while let Some(&(tick, seq)) = self.lru.front() {
            if current(&self.blocks, tick, seq) {
                return Some((tick, seq));
            }
            self.lru.pop_front();
        }
        None
    }
}

impl Predictions {
    pub(crate) fn new(retention: Retention) -> Self {
        Self {
            retention,
            now: Duration::ZERO,
            tick: 0,
            tag: index_tag(),
            next_request: 0,
            workers: HashMap::default(),
            exact: HashSet::default(),
            ranks: HashMap::default(),
            expiry: VecDeque::new(),
            predicted: 0,
            running: HashMap::default(),
        }
    }

    pub(crate) fn retention(&self) -> Retention {
        self.retention
    }

    fn take_ticks(&mut self, n: usize) -> u64 {
        let base = self.tick;
        self.tick += n as u64;
        base
    }

    pub(crate) fn is_exact(&self, worker: Worker) -> bool {
        self.exact.contains(&worker)
    }

    pub(crate) fn predicted_blocks(&self, worker: Worker) -> usize {
        self.workers.get(&worker).map_or(0, |c| c.blocks.len())
    }

    /// Moves the clock to `now` (never backwards) and expires what its time to live has passed.
    pub(crate) fn advance(&mut self, now: Duration, out: &mut Vec<Event>) {
        self.now = self.now.max(now);
        let Some(ttl) = self.retention.ttl_limit() else {
            return;
        };
        // Expired blocks by worker, each worker's in expiry order (its leaves first).
        let mut removed: HashMap<Worker, Vec<SeqHash>, RandomState> = HashMap::default();
        while let Some(&(tick, worker, seq)) = self.expiry.front() {
            // One lookup per entry: a stale one is dropped, a current one expires or ends the pass.
            if let Some(cache) = self.workers.get_mut(&worker)
                && let Entry::Occupied(block) = cache.blocks.entry(seq)
                && block.get().tick == tick
                && block.get().pins == 0
            {
                if block.get().at.saturating_add(ttl) > self.now {
                    break;
                }
                block.remove();
                self.predicted -= 1;
                removed.entry(worker).or_default().push(seq);
            }
            self.expiry.pop_front();
        }
        for (worker, seqs) in removed {
            self.drop_if_empty(worker);
            out.push(Event::removed(worker, 0, seqs));
        }
    }

    /// Lists `listed` (this call's unpinned blocks of `worker`, newest first) at the back of
    /// the lazy orders, oldest first, and drops stale entries where they pile up.
    fn list(&mut self, worker: Worker, listed: &[(u64, SeqHash)]) {
        let keep_expiry = self.retention.ttl_limit().is_some();
        let Some(cache) = self.workers.get_mut(&worker) else {
            return;
        };
        for &(tick, seq) in listed.iter().rev() {
            cache.lru.push_back((tick, seq));
            if keep_expiry {
                self.expiry.push_back((tick, worker, seq));
            }
        }
        let blocks = &cache.blocks;
        compact(&mut cache.lru, blocks.len(), |&(t, s)| {
            current(blocks, t, s)
        });
        let workers = &self.workers;
        compact(&mut self.expiry, self.predicted, |&(t, w, s)| {
            workers.get(&w).is_some_and(|c| current(&c.blocks, t, s))
        });
    }

    /// Forgets `worker`'s cache once it predicts nothing and pins nothing, so that workers that
    /// come and go leave nothing behind.
    fn drop_if_empty(&mut self, worker: Worker) {
        if let Some(cache) = self.workers.get(&worker)
            && cache.blocks.is_empty()
            && cache.running.is_empty()
        {
            self.workers.remove(&worker);
            shrink(&mut self.workers);
            self.unregister_if_gone(worker);
        }
    }

    /// Forgets `worker`'s rank in [`Predictions::ranks`] if it is neither predicted nor exact.
    fn unregister_if_gone(&mut self, worker: Worker) {
        if self.workers.contains_key(&worker) || self.exact.contains(&worker) {
            return;
        }
        if let Some(ranks) = self.ranks.get_mut(&worker.id) {
            ranks.retain(|&r| r != worker.dp_rank);
            if ranks.is_empty() {
                self.ranks.remove(&worker.id);
                shrink(&mut self.ranks);
            }
        }
    }

    /// Predicts that `worker` now caches the chain `locals`: touches what it already holds,
    /// adds the rest as far as its capacity allows (evicting least recently used unpinned blocks
    /// of other requests), and pins the chain when running requests are pinned.
    pub(crate) fn route(
        &mut self,
        worker: Worker,
        locals: &[LocalHash],
        now: Duration,
        out: &mut Vec<Event>,
    ) -> Routed {
        self.advance(now, out);
        let routed = Routed::new(worker, self.tag, self.next_request);
        self.next_request += 1;
        if locals.is_empty() || self.exact.contains(&worker) {
            return routed;
        }
        let seqs = hash::seq_hashes(locals);
        let n = seqs.len();
        let base = self.take_ticks(n);
        let tick_of = |i: usize| base + (n - 1 - i) as u64;
        let (pin, capacity, now) = (
            self.retention.pins_running(),
            self.retention.capacity_blocks(),
            self.now,
        );
        let ranks = &mut self.ranks;
        let cache = self.workers.entry(worker).or_insert_with(|| {
            register(ranks, worker);
            WorkerCache::default()
        });

        // This call's unpinned blocks, to list once it is done (newest first, as ticks go).
        let mut listed = Vec::new();
        let mut held = 0;
        while held < n {
            let tick = tick_of(held);
            match cache.touch(seqs[held], tick, now, |p| p + u32::from(pin)) {
                Some(unpinned) => {
                    if unpinned {
                        listed.push((tick, seqs[held]));
                    }
                    held += 1;
                }
                None => break,
            }
        }

        let first_new = held;
        let mut evicted = Vec::new();
        while held < n {
            if cache.blocks.len() >= capacity {
                // Only blocks older than this request are victims: it never evicts itself.
                match cache.oldest() {
                    Some((tick, victim)) if tick < base => {
                        cache.lru.pop_front();
                        cache.blocks.remove(&victim);
                        self.predicted -= 1;
                        evicted.push(victim);
                    }
                    _ => break,
                }
            }
            let tick = tick_of(held);
            if cache.insert(seqs[held], tick, now, u32::from(pin)) {
                listed.push((tick, seqs[held]));
            }
            self.predicted += 1;
            held += 1;
        }
        self.list(worker, &listed);

        if !evicted.is_empty() {
            out.push(Event::removed(worker, 0, evicted));
        }
        if held > first_new {
            let parent = first_new.checked_sub(1).map(|p| seqs[p]);
            let blocks = (first_new..held)
                .map(|i| Block::new(locals[i], seqs[i]))
                .collect();
            out.push(Event::stored(worker, 0, parent, blocks));
        }
        if pin
            && held > 0
            && let Some(cache) = self.workers.get_mut(&worker)
        {
            cache.running.insert(routed.id);
            let mut seqs = seqs;
            seqs.truncate(held);
            self.running.insert(routed.id, Running { worker, seqs });
        }
        self.drop_if_empty(worker);
        routed
    }

    /// The request `routed` finished: its chain is touched again (the engine frees it now, tail
    /// first) and unpinned.
    pub(crate) fn release(
        &mut self,
        routed: Routed,
        now: Duration,
        out: &mut Vec<Event>,
    ) -> Result<(), ForeignRouted> {
        let id = routed.id_in(self.tag)?;
        self.advance(now, out);
        let Some(run) = self.running.remove(&id) else {
            return Ok(());
        };
        shrink(&mut self.running);
        let n = run.seqs.len();
        let base = self.take_ticks(n);
        let now = self.now;
        let Some(cache) = self.workers.get_mut(&run.worker) else {
            return Ok(());
        };
        cache.running.remove(&id);
        let mut listed = Vec::new();
        for (i, &seq) in run.seqs.iter().enumerate() {
            let tick = base + (n - 1 - i) as u64;
            if cache.touch(seq, tick, now, |p| p.saturating_sub(1)) == Some(true) {
                listed.push((tick, seq));
            }
        }
        self.list(run.worker, &listed);
        self.drop_if_empty(run.worker);
        Ok(())
    }

    /// `worker` publishes events from now on: its predictions are dropped. Returns the event
    /// that clears them from the index, if it had any.
    pub(crate) fn make_exact(&mut self, worker: Worker) -> Option<Event> {
        if self.exact.insert(worker) {
            register(&mut self.ranks, worker);
        }
        let had = self.drop_predictions(worker);
        had.then(|| Event::cleared(worker, 0))
    }

    /// Forgets `worker`: its predictions, pins, and whether it was exact.
    pub(crate) fn forget(&mut self, worker: Worker) {
        self.exact.remove(&worker);
        shrink_set(&mut self.exact);
        self.drop_predictions(worker);
        self.unregister_if_gone(worker);
    }

    /// Forgets every rank of worker `id`.
    pub(crate) fn forget_id(&mut self, id: u64) {
        for rank in self.ranks.get(&id).cloned().unwrap_or_default() {
            self.forget(Worker::new(id, rank));
        }
    }

    /// The ranks of worker `id` that are predicted or exact.
    pub(crate) fn ranks(&self, id: u64) -> &[u32] {
        self.ranks.get(&id).map_or(&[], Vec::as_slice)
    }

    /// Drops `worker`'s predicted blocks and running requests; `true` if it had blocks.
    fn drop_predictions(&mut self, worker: Worker) -> bool {
        let Some(cache) = self.workers.remove(&worker) else {
            return false;
        };
        shrink(&mut self.workers);
        // Its entries in the expiry order go stale by themselves (ticks are never reused).
        self.predicted -= cache.blocks.len();
        for id in &cache.running {
            self.running.remove(id);
        }
        shrink(&mut self.running);
        !cache.blocks.is_empty()
    }
}

/// Lists `worker`'s rank under its id.
fn register(ranks: &mut HashMap<u64, Vec<u32>, RandomState>, worker: Worker) {
    let listed = ranks.entry(worker.id).or_default();
    if !listed.contains(&worker.dp_rank) {
        listed.push(worker.dp_rank);
    }
}

/// Gives a map's room back when [`crate::room::shrunk`] says so.
fn shrink<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V, RandomState>) {
    if let Some(to) = crate::room::shrunk(map.len(), map.capacity()) {
        map.shrink_to(to);
    }
}

/// [`shrink`] for a set.
pub(super) fn shrink_set<K: Eq + std::hash::Hash>(set: &mut HashSet<K, RandomState>) {
    if let Some(to) = crate::room::shrunk(set.len(), set.capacity()) {
        set.shrink_to(to);
    }
}
