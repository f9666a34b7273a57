//! Approximate mode: an index of what workers are *predicted* to cache, from the router's own
//! routing decisions, for engines that publish no KV events (feature `approximate`).
//!
//! Many deployments have no KV events: switched off, engines without them, managed endpoints.
//! A router can still route by prefix if it remembers where it sent each request: the worker
//! that served a prompt has probably cached it, for a while. [`ApproximateIndexer`] keeps those
//! predictions beside any [`KvIndex`] (which indexes the workers that do publish events), in one
//! compressed trie of every predicted worker's chains that a query walks once, so that a
//! decision costs a few times an exact query (paper, section 6.28):
//!
//! - [`record_routing`](ApproximateIndexer::record_routing) predicts that a worker now caches a
//!   request's chain of local hashes, and [`release`](ApproximateIndexer::release) says the
//!   request finished;
//! - a [`Retention`] decides how long predictions live: a time to live (Dynamo's default,
//!   120 s), or an LRU model of each worker's capacity with running requests pinned;
//! - a worker that publishes events ([`KvIndex::apply`]) is indexed exactly from its first event
//!   on, and its predictions are dropped, so a fleet can mix both kinds of engines.
//!
//! Time is whatever the caller says it is (`now`, a [`Duration`] since any origin it picks, never
//! read from a clock here): predictions change only in calls that carry `now`, and a simulator
//! or a test drives time exactly. [`expire`](ApproximateIndexer::expire) lets a router expire
//! predictions between decisions.
//!
//! Router replicas behind a load balancer each see only their share of the decisions.
//! [`SharedApproximateIndexer`] shares them through a [`DecisionLog`] (in process,
//! [`MemoryLog`]; a Redis or Valkey stream, `RedisLog` with feature `redis`), so that every
//! replica predicts from the whole fleet's decisions.
//!
//! [`NaiveApproximateIndexer`] states the same semantics as plainly as possible; every layout
//! is checked against it.
//!
//! Approximate mode has no KV-cache groups: a prediction is a chain of blocks, as a model with one
//! full-attention group caches it. For a hybrid model (see [`hybrid`](crate::hybrid)) it predicts
//! the full-attention group only, so it over-counts wherever a sliding window or a Mamba state
//! has been evicted; no engine publishes what it evicts in approximate mode anyway.
//!
//! ```
//! use core::time::Duration;
//! use flash_indexer::{hash, ApproximateIndexer, KvIndex, Retention, Worker};
//!
//! let index: ApproximateIndexer<flash_indexer::DefaultIndexer> =
//!     ApproximateIndexer::new(Retention::lru(1_000));
//! let prompt = hash::local_hashes(&(0..256).collect::<Vec<u32>>(), 64);
//! let worker = Worker::new(3, 0);
//!
//! // The router sent the prompt to worker 3: its 4 blocks are predicted there.
//! let routed = index.record_routing(worker, &prompt, Duration::from_secs(1));
//! assert_eq!(index.find_matches(&prompt).best(), Some((worker, 4)));
//! // The request finished: its blocks stay predicted until the capacity model evicts them.
//! index.release(routed, Duration::from_secs(2)).unwrap();
//! assert_eq!(index.find_matches(&prompt[..2]).get(worker), Some(2));
//! ```

pub mod decision;
mod fleet;
mod holders;
mod log;
mod naive;
mod predictions;
#[cfg(feature = "redis")]
mod redis_log;
mod retention;
mod routed;
mod share;
mod spares;

pub use log::{DecisionLog, LogError, LogPosition, MemoryLog};
pub use naive::NaiveApproximateIndexer;
#[cfg(feature = "redis")]
pub use redis_log::RedisLog;
pub use retention::Retention;
pub use routed::{ForeignRouted, Routed};
pub use share::{DEFAULT_PIN_LEASE, ShareStats, SharedApproximateIndexer};

use crate::error::EventError;
use crate::index::KvIndex;
use crate::scores::OverlapScores;
use crate::sync::{RwLock, read, write};
use crate::types::{Event, EventView, LocalHash, SeqHash, Worker};
use core::time::Duration;
use foldhash::fast::RandomState;
use predictions::Predictions;
use std::collections::HashSet;

/// An index of predicted caches over any [`KvIndex`] (see [the module](self)).
///
/// `I` holds the blocks of workers that publish events; the predictions, with the trie of
/// predicted chains, are behind one read-write lock. A query asks `I` (lock-free as ever) and
/// walks the predicted chains under the read lock; routing decisions and releases take the
/// write lock. Engines' events of workers already exact only read a set of them, so they never
/// wait on decisions.
#[derive(Debug)]
pub struct ApproximateIndexer<I> {
    index: I,
    predictions: RwLock<Predictions>,
    /// The exact workers, as in `predictions`: written under its lock, read without it.
    exact: RwLock<HashSet<Worker, RandomState>>,
}

impl<I: KvIndex + Default> ApproximateIndexer<I> {
    /// An empty approximate index over an empty `I`.
    pub fn new(retention: Retention) -> Self {
        Self::with_index(I::default(), retention)
    }
}

impl<I: KvIndex + Default> Default for ApproximateIndexer<I> {
    /// [`Retention::default`]: a 120 s time to live.
    fn default() -> Self {
        Self::new(Retention::default())
    }
}

impl<I: KvIndex> ApproximateIndexer<I> {
    /// An approximate index over `index`, which should be empty: blocks it already holds are
    /// taken as exact blocks of their workers only once those workers publish an event.
    pub fn with_index(index: I, retention: Retention) -> Self {
        Self {
            index,
            predictions: RwLock::new(Predictions::new(retention)),
            exact: RwLock::default(),
        }
    }

    /// The index underneath, holding the exact workers' blocks (predicted ones are not in it).
    pub fn index(&self) -> &I {
        &self.index
    }

    /// How predictions are kept.
    pub fn retention(&self) -> Retention {
        read(&self.predictions).retention()
    }

    /// Predicts that `worker` caches the chain `locals` from `now` on: the router has just sent
    /// it a request with that prompt. Expires what `now` ends first. Blocks the worker is
    /// already predicted to hold are touched (and pinned, under [`Retention::lru`]); the rest
    /// are added, evicting least recently used unpinned blocks of other requests when the worker
    /// is at capacity, as far as capacity allows.
    ///
    /// Does nothing but move the clock for a worker that publishes events (it is exact), or for
    /// an empty chain. The returned [`Routed`] is for [`release`](Self::release).
    pub fn record_routing(&self, worker: Worker, locals: &[LocalHash], now: Duration) -> Routed {
        write(&self.predictions).route(worker, locals, now, None)
    }

    /// A whole routing decision: the scores of `query` (as
    /// [`find_matches`](KvIndex::find_matches) answers them), the worker `choose` picks from
    /// them, and [`record_routing`](Self::record_routing) of `query` to that worker at `now`.
    /// Returns the worker and the decision's [`Routed`].
    ///
    /// The same as those three calls one after the other, except that no other decision comes
    /// between them (one lock is held throughout, so `choose` should be quick and must not call
    /// this index) and the query's walk of the predicted chains is not made twice.
    ///
    /// ```
    /// use core::time::Duration;
    /// use flash_indexer::{hash, ApproximateIndexer, Retention, Worker};
    ///
    /// let index: ApproximateIndexer<flash_indexer::DefaultIndexer> =
    ///     ApproximateIndexer::new(Retention::lru(1_000));
    /// let prompt = hash::local_hashes(&(0..256).collect::<Vec<u32>>(), 64);
    /// let at = Duration::from_secs(1);
    /// // Nothing is predicted yet: the scores are empty and worker 2 gets the request.
    /// let (worker, _) = index.route(&prompt, at, |scores| {
    ///     scores.best().map_or(Worker::new(2, 0), |(w, _)| w)
    /// });
    /// assert_eq!(worker, Worker::new(2, 0));
    /// // The next request with that prompt finds it there.
    /// let (worker, _) = index.route(&prompt, at, |scores| {
    ///     assert_eq!(scores.get(Worker::new(2, 0)), Some(4));
    ///     scores.best().map_or(Worker::new(0, 0), |(w, _)| w)
    /// });
    /// assert_eq!(worker, Worker::new(2, 0));
    /// ```
    pub fn route(
        &self,
        query: &[LocalHash],
        now: Duration,
        choose: impl FnOnce(&OverlapScores) -> Worker,
    ) -> (Worker, Routed) {
        let mut predictions = write(&self.predictions);
        let mut scores = if read(&self.exact).is_empty() {
            core::mem::take(&mut predictions.scores)
        } else {
            self.index.find_matches(query)
        };
        let exact_entries = scores.len();
        predictions.fleet.find(query, &mut scores);
        let worker = choose(&scores);
        // The chosen worker's depth on the predicted chains, which the walk just found.
        let held = (scores.iter().skip(exact_entries))
            .find(|&(w, _)| w == worker)
            .map_or(0, |(_, depth)| depth as usize);
        let routed = predictions.route(worker, query, now, Some(held));
        scores.recycle();
        predictions.scores = scores;
        (worker, routed)
    }

    /// The request `routed` finished at `now`: its blocks stop being pinned and become
    /// evictable, newest last, tails first (as an engine frees them). Expires what `now` ends
    /// first. Releasing twice, or a request that pinned nothing, does nothing more.
    ///
    /// # Errors
    ///
    /// [`ForeignRouted`], changing nothing, if another index routed the request.
    pub fn release(&self, routed: Routed, now: Duration) -> Result<(), ForeignRouted> {
        write(&self.predictions).release(routed, now)
    }

    /// Moves the clock to `now` and drops predictions whose time to live has passed. Time never
    /// goes backwards: an earlier `now` than one already seen counts as that one.
    pub fn expire(&self, now: Duration) {
        write(&self.predictions).advance(now);
    }

    /// Whether `worker` has published an event, and so is indexed exactly.
    pub fn is_exact(&self, worker: Worker) -> bool {
        read(&self.predictions).is_exact(worker)
    }

    /// Blocks `worker` is predicted to hold (0 for an exact worker).
    pub fn predicted_blocks(&self, worker: Worker) -> usize {
        read(&self.predictions).predicted_blocks(worker)
    }
}

impl<I: KvIndex> ApproximateIndexer<I> {
    /// Before each engine event of `worker`: the first drops its predictions and marks it
    /// exact; later ones only see that it is.
    fn make_exact(&self, worker: Worker) {
        if read(&self.exact).contains(&worker) {
            return;
        }
        let mut predictions = write(&self.predictions);
        if !predictions.is_exact(worker) {
            predictions.make_exact(worker);
        }
        write(&self.exact).insert(worker);
    }
}

impl<I: KvIndex> KvIndex for ApproximateIndexer<I> {
    /// Applies an engine's event exactly. The first event of a worker drops its predictions and
    /// marks it exact: routing decisions no longer change it.
    fn apply(&self, event: &Event) -> Result<(), EventError> {
        self.make_exact(event.worker);
        self.index.apply(event)
    }

    fn apply_view(&self, event: EventView<'_>) -> Result<(), EventError> {
        self.make_exact(event.worker);
        self.index.apply_view(event)
    }

    /// The exact workers' depths from the index (skipped while no worker is exact: it is
    /// empty), then the predicted workers' from one walk of their chains.
    fn find_matches(&self, query: &[LocalHash]) -> OverlapScores {
        let any_exact = !read(&self.exact).is_empty();
        let mut scores = if any_exact {
            self.index.find_matches(query)
        } else {
            OverlapScores::new()
        };
        read(&self.predictions).fleet.find(query, &mut scores);
        scores
    }

    /// Drops every worker with that id, predicted or exact; a worker that comes back starts
    /// predicted again.
    fn remove_worker(&self, id: u64) {
        let mut predictions = write(&self.predictions);
        {
            let mut exact = write(&self.exact);
            for &rank in predictions.ranks(id) {
                exact.remove(&Worker::new(id, rank));
            }
            predictions::shrink_set(&mut exact);
        }
        predictions.forget_id(id);
        self.index.remove_worker(id);
    }

    fn remove_worker_dp_rank(&self, worker: Worker) {
        let mut predictions = write(&self.predictions);
        {
            let mut exact = write(&self.exact);
            exact.remove(&worker);
            predictions::shrink_set(&mut exact);
        }
        predictions.forget(worker);
        self.index.remove_worker_dp_rank(worker);
    }

    fn block_count(&self, worker: Worker) -> usize {
        self.index.block_count(worker) + read(&self.predictions).predicted_blocks(worker)
    }

    /// For a predicted worker, `seq` names a block as [`dump`](KvIndex::dump) does (the XXH3
    /// sequence hash of its chain); this walks the worker's predictions, for inspection only.
    fn holds(&self, worker: Worker, seq: SeqHash) -> bool {
        self.index.holds(worker, seq) || read(&self.predictions).holds(worker, seq)
    }

    fn block_counts(&self) -> Vec<(Worker, usize)> {
        let mut counts = self.index.block_counts();
        counts.extend(read(&self.predictions).block_counts());
        counts
    }

    /// The index's dump (the exact workers), then every predicted worker's blocks as stores,
    /// named by the XXH3 sequence hashes of their chains.
    fn dump(&self) -> Vec<Event> {
        let mut events = self.index.dump();
        read(&self.predictions).dump(&mut events);
        events
    }

    fn flush_retired(&self) {
        self.index.flush_retired()
    }
}

/// What an approximate index answers beyond [`KvIndex`]: the routing side. Implemented by
/// [`ApproximateIndexer`] over any index and by [`NaiveApproximateIndexer`], so that tests and
/// tools drive either through one object-safe trait.
pub trait ApproximateIndex: KvIndex {
    /// See [`ApproximateIndexer::record_routing`].
    fn record_routing(&self, worker: Worker, locals: &[LocalHash], now: Duration) -> Routed;
    /// See [`ApproximateIndexer::route`]: by default, [`find_matches`](KvIndex::find_matches),
    /// `choose`, then [`record_routing`](Self::record_routing).
    fn route(
        &self,
        query: &[LocalHash],
        now: Duration,
        choose: &mut dyn FnMut(&OverlapScores) -> Worker,
    ) -> (Worker, Routed) {
        let worker = choose(&self.find_matches(query));
        (worker, self.record_routing(worker, query, now))
    }
    /// See [`ApproximateIndexer::release`].
    fn release(&self, routed: Routed, now: Duration) -> Result<(), ForeignRouted>;
    /// See [`ApproximateIndexer::expire`].
    fn expire(&self, now: Duration);
    /// See [`ApproximateIndexer::is_exact`].
    fn is_exact(&self, worker: Worker) -> bool;
    /// See [`ApproximateIndexer::predicted_blocks`].
    fn predicted_blocks(&self, worker: Worker) -> usize;
}

macro_rules! approximate_index_by_inherent_methods {
    ($($ty:ty $(where $param:ident)?),*) => {$(
        impl$(<$param: KvIndex>)? ApproximateIndex for $ty {
            fn record_routing(&self, worker: Worker, locals: &[LocalHash], now: Duration) -> Routed {
                Self::record_routing(self, worker, locals, now)
            }
            fn route(
                &self,
                query: &[LocalHash],
                now: Duration,
                choose: &mut dyn FnMut(&OverlapScores) -> Worker,
            ) -> (Worker, Routed) {
                Self::route(self, query, now, choose)
            }
            fn release(&self, routed: Routed, now: Duration) -> Result<(), ForeignRouted> {
                Self::release(self, routed, now)
            }
            fn expire(&self, now: Duration) {
                Self::expire(self, now)
            }
            fn is_exact(&self, worker: Worker) -> bool {
                Self::is_exact(self, worker)
            }
            fn predicted_blocks(&self, worker: Worker) -> usize {
                Self::predicted_blocks(self, worker)
            }
        }
    )*};
}

approximate_index_by_inherent_methods!(ApproximateIndexer<I> where I, NaiveApproximateIndexer);
