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
use core::time::Duration;
use foldhash::fast::RandomState;
use std::collections::{BTreeMap, HashMap, HashSet};

/// A routed request, as [`ApproximateIndexer::record_routing`](super::ApproximateIndexer::record_routing)
/// returns it: pass it to [`release`](super::ApproximateIndexer::release) when the request
/// finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Routed {
    worker: Worker,
    id: u64,
}

impl Routed {
    pub(crate) fn new(worker: Worker, id: u64) -> Self {
        Self { worker, id }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The worker the request was routed to.
    pub fn worker(&self) -> Worker {
        self.worker
    }
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
    /// Unpinned blocks by tick: the front is evicted first.
    lru: BTreeMap<u64, SeqHash>,
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
    next_request: u64,
    workers: HashMap<Worker, WorkerCache, RandomState>,
    exact: HashSet<Worker, RandomState>,
    /// Unpinned blocks of every worker by tick, when blocks expire with time (ticks and touch
    /// times grow together, so the front expires first).
    expiry: Expiry,
    running: HashMap<u64, Running, RandomState>,
}

/// Unpinned blocks of every worker by tick, for expiry.
type Expiry = BTreeMap<u64, (Worker, SeqHash)>;

impl WorkerCache {
    /// Lists an unpinned block in the eviction order (and the expiry order, if kept).
    fn list(&mut self, expiry: Option<&mut Expiry>, worker: Worker, seq: SeqHash, tick: u64) {
        self.lru.insert(tick, seq);
        if let Some(expiry) = expiry {
            expiry.insert(tick, (worker, seq));
        }
    }

    fn unlist(&mut self, expiry: Option<&mut Expiry>, tick: u64) {
        self.lru.remove(&tick);
        if let Some(expiry) = expiry {
            expiry.remove(&tick);
        }
    }

    /// Adds `seq` with `pins` pins, touched at `at`.
    fn insert(
        &mut self,
        expiry: Option<&mut Expiry>,
        worker: Worker,
        seq: SeqHash,
        tick: u64,
        at: Duration,
        pins: u32,
    ) {
        self.blocks.insert(seq, Predicted { tick, at, pins });
        if pins == 0 {
            self.list(expiry, worker, seq, tick);
        }
    }

    /// Gives `seq` a new tick and touch time and its pins as `pins` says, keeping the orders
    /// (which list unpinned blocks only) in step. `false` if the worker does not hold it.
    fn touch(
        &mut self,
        mut expiry: Option<&mut Expiry>,
        worker: Worker,
        seq: SeqHash,
        tick: u64,
        at: Duration,
        pins: impl FnOnce(u32) -> u32,
    ) -> bool {
        let Some(block) = self.blocks.get(&seq) else {
            return false;
        };
        let (old_tick, old_pins) = (block.tick, block.pins);
        if old_pins == 0 {
            self.unlist(expiry.as_deref_mut(), old_tick);
        }
        let block = self.blocks.get_mut(&seq).expect("just found");
        *block = Predicted {
            tick,
            at,
            pins: pins(old_pins),
        };
        if block.pins == 0 {
            self.list(expiry, worker, seq, tick);
        }
        true
    }
}

impl Predictions {
    pub(crate) fn new(retention: Retention) -> Self {
        Self {
            retention,
            now: Duration::ZERO,
            tick: 0,
            next_request: 0,
            workers: HashMap::default(),
            exact: HashSet::default(),
            expiry: BTreeMap::new(),
            running: HashMap::default(),
        }
    }

    pub(crate) fn retention(&self) -> Retention {
        self.retention
    }

    fn expiry(&mut self) -> Option<&mut Expiry> {
        self.retention.ttl_limit().map(|_| &mut self.expiry)
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
        let mut removed: Vec<(Worker, Vec<SeqHash>)> = Vec::new();
        while let Some((&tick, &(worker, seq))) = self.expiry.first_key_value() {
            let cache = self
                .workers
                .get_mut(&worker)
                .expect("an expiring block's worker is predicted");
            let at = cache.blocks[&seq].at;
            if at.saturating_add(ttl) > self.now {
                break;
            }
            self.expiry.pop_first();
            cache.lru.remove(&tick);
            cache.blocks.remove(&seq);
            match removed.iter_mut().find(|(w, _)| *w == worker) {
                Some((_, seqs)) => seqs.push(seq),
                None => removed.push((worker, vec![seq])),
            }
        }
        out.extend(
            removed
                .into_iter()
                .map(|(worker, seqs)| Event::removed(worker, 0, seqs)),
        );
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
        let routed = Routed {
            worker,
            id: self.next_request,
        };
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
        let mut expiry = self.retention.ttl_limit().map(|_| &mut self.expiry);
        let cache = self.workers.entry(worker).or_default();

        let mut held = 0;
        while held < n
            && cache.touch(
                expiry.as_deref_mut(),
                worker,
                seqs[held],
                tick_of(held),
                now,
                |p| p + u32::from(pin),
            )
        {
            held += 1;
        }

        let first_new = held;
        let mut evicted = Vec::new();
        while held < n {
            if cache.blocks.len() >= capacity {
                // Only blocks older than this request are victims: it never evicts itself.
                match cache.lru.first_key_value() {
                    Some((&tick, &victim)) if tick < base => {
                        cache.unlist(expiry.as_deref_mut(), tick);
                        cache.blocks.remove(&victim);
                        evicted.push(victim);
                    }
                    _ => break,
                }
            }
            let pins = u32::from(pin);
            cache.insert(
                expiry.as_deref_mut(),
                worker,
                seqs[held],
                tick_of(held),
                now,
                pins,
            );
            held += 1;
        }

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
        if pin && held > 0 {
            let mut seqs = seqs;
            seqs.truncate(held);
            self.running.insert(routed.id, Running { worker, seqs });
        }
        routed
    }

    /// The request `routed` finished: its chain is touched again (the engine frees it now, tail
    /// first) and unpinned.
    pub(crate) fn release(&mut self, routed: Routed, now: Duration, out: &mut Vec<Event>) {
        self.advance(now, out);
        let Some(run) = self.running.remove(&routed.id) else {
            return;
        };
        let n = run.seqs.len();
        let base = self.take_ticks(n);
        let now = self.now;
        let mut expiry = self.retention.ttl_limit().map(|_| &mut self.expiry);
        let Some(cache) = self.workers.get_mut(&run.worker) else {
            return;
        };
        for (i, seq) in run.seqs.iter().enumerate() {
            let tick = base + (n - 1 - i) as u64;
            cache.touch(expiry.as_deref_mut(), run.worker, *seq, tick, now, |p| {
                p.saturating_sub(1)
            });
        }
    }

    /// `worker` publishes events from now on: its predictions are dropped. Returns the event
    /// that clears them from the index, if it had any.
    pub(crate) fn make_exact(&mut self, worker: Worker) -> Option<Event> {
        self.exact.insert(worker);
        let had = self.drop_predictions(|w| w == worker);
        had.then(|| Event::cleared(worker, 0))
    }

    /// Forgets the workers `matches` selects: predictions, pins, and whether they were exact.
    pub(crate) fn forget(&mut self, matches: impl Fn(Worker) -> bool) {
        self.exact.retain(|w| !matches(*w));
        self.drop_predictions(matches);
    }

    /// Drops the predicted blocks and running requests of the workers `matches` selects;
    /// `true` if any block was dropped.
    fn drop_predictions(&mut self, matches: impl Fn(Worker) -> bool) -> bool {
        let mut dropped = false;
        let mut ticks = Vec::new();
        let workers: Vec<Worker> = self
            .workers
            .keys()
            .copied()
            .filter(|w| matches(*w))
            .collect();
        for worker in workers {
            let cache = self.workers.remove(&worker).expect("listed");
            dropped |= !cache.blocks.is_empty();
            ticks.extend(cache.lru.keys().copied());
        }
        if let Some(expiry) = self.expiry() {
            for tick in ticks {
                expiry.remove(&tick);
            }
        }
        self.running.retain(|_, run| !matches(run.worker));
        dropped
    }
}
