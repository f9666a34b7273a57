//! [`NaiveApproximateIndexer`]: approximate mode's semantics written as plainly as possible.

use super::retention::Retention;
use super::routed::{ForeignRouted, Routed, index_tag};
use crate::error::EventError;
use crate::hash;
use crate::index::KvIndex;
use crate::naive::NaiveIndexer;
use crate::scores::OverlapScores;
use crate::sync::{Mutex, lock};
use crate::types::{Block, Event, LocalHash, Worker};
use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet};

/// One predicted block: the whole prompt prefix it ends.
#[derive(Debug)]
struct Entry {
    prefix: Vec<LocalHash>,
    tick: u64,
    at: Duration,
    pins: u32,
}

#[derive(Debug)]
struct State {
    retention: Retention,
    now: Duration,
    tick: u64,
    /// Tags this index's [`Routed`]s.
    tag: u64,
    next_request: u64,
    exact: NaiveIndexer,
    exact_workers: BTreeSet<Worker>,
    predicted: BTreeMap<Worker, Vec<Entry>>,
    /// Running requests: their worker and the prefixes they pinned.
    running: BTreeMap<u64, (Worker, Vec<Vec<LocalHash>>)>,
}

/// The reference of approximate mode: predicted prefixes in plain lists, exact workers in a
/// [`NaiveIndexer`], one lock. Every [`ApproximateIndexer`](super::ApproximateIndexer) must give
/// exactly its answers.
///
/// The rules, literally:
/// - a routing decision of chain `c` at `now` first expires, then gives the prefixes of `c`
///   ticks from a counter, the longest the oldest; the prefixes the worker holds, from the
///   shortest until the first it lacks, are touched (tick, time `now`, pinned under
///   [`Retention::lru`]); the rest are added in order while the worker has room, where making
///   room removes the unpinned prefix of the smallest tick older than this decision;
/// - a release touches the request's prefixes the same way and unpins them (a request routed
///   by another index is refused);
/// - expiry removes every unpinned prefix touched at least the time to live before `now`;
/// - a worker's depth for a query is the number of its leading prefixes the worker holds;
/// - a worker's first event makes it exact: its predictions go, and routing ignores it.
#[derive(Debug)]
pub struct NaiveApproximateIndexer {
    state: Mutex<State>,
}

impl Default for NaiveApproximateIndexer {
    fn default() -> Self {
        Self::new(Retention::default())
    }
}

fn holds(entries: &[Entry], prefix: &[LocalHash]) -> Option<usize> {
    entries.iter().position(|e| e.prefix == prefix)
}

impl State {
    fn advance(&mut self, now: Duration) {
        self.now = self.now.max(now);
        if let Some(ttl) = self.retention.ttl_limit() {
            let now = self.now;
            for entries in self.predicted.values_mut() {
                entries.retain(|e| e.pins > 0 || e.at.saturating_add(ttl) > now);
            }
        }
    }

    fn route(&mut self, worker: Worker, chain: &[LocalHash], now: Duration) -> u64 {
        self.advance(now);
        let id = self.next_request;
        self.next_request += 1;
        if chain.is_empty() || self.exact_workers.contains(&worker) {
            return id;
        }
        let n = chain.len();
        let base = self.tick;
        self.tick += n as u64;
        let pin = u32::from(self.retention.pins_running());
        let capacity = self.retention.capacity_blocks();
        let now = self.now;
        let entries = self.predicted.entry(worker).or_default();
        let mut i = 0;
        while i < n {
            let Some(at) = holds(entries, &chain[..=i]) else {
                break;
            };
            let entry = &mut entries[at];
            entry.tick = base + (n - 1 - i) as u64;
            entry.at = now;
            entry.pins += pin;
            i += 1;
        }
        while i < n {
            if entries.len() >= capacity {
                let victim = (0..entries.len())
                    .filter(|&v| entries[v].pins == 0 && entries[v].tick < base)
                    .min_by_key(|&v| entries[v].tick);
                match victim {
                    Some(v) => drop(entries.remove(v)),
                    None => break,
                }
            }
            entries.push(Entry {
                prefix: chain[..=i].to_vec(),
                tick: base + (n - 1 - i) as u64,
                at: now,
                pins: pin,
            });
            i += 1;
        }
        if pin > 0 && i > 0 {
            let prefixes = (1..=i).map(|len| chain[..len].to_vec()).collect();
            self.running.insert(id, (worker, prefixes));
        }
        id
    }

    fn release(&mut self, id: u64, now: Duration) {
        self.advance(now);
        let Some((worker, prefixes)) = self.running.remove(&id) else {
            return;
        };
        let n = prefixes.len();
        let base = self.tick;
        self.tick += n as u64;
        let now = self.now;
        let entries = self.predicted.entry(worker).or_default();
        for (i, prefix) in prefixes.iter().enumerate() {
            if let Some(at) = holds(entries, prefix) {
                let entry = &mut entries[at];
                entry.tick = base + (n - 1 - i) as u64;
                entry.at = now;
                entry.pins = entry.pins.saturating_sub(1);
            }
        }
    }

    fn forget(&mut self, matches: impl Fn(Worker) -> bool) {
        self.predicted.retain(|w, _| !matches(*w));
        self.running.retain(|_, (w, _)| !matches(*w));
    }
}

impl NaiveApproximateIndexer {
    /// An empty reference keeping predictions by `retention`.
    pub fn new(retention: Retention) -> Self {
        Self {
            state: Mutex::new(State {
                retention,
                now: Duration::ZERO,
                tick: 0,
                tag: index_tag(),
                next_request: 0,
                exact: NaiveIndexer::new(),
                exact_workers: BTreeSet::new(),
                predicted: BTreeMap::new(),
                running: BTreeMap::new(),
            }),
        }
    }

    /// See [`ApproximateIndexer::record_routing`](super::ApproximateIndexer::record_routing).
    pub fn record_routing(&self, worker: Worker, locals: &[LocalHash], now: Duration) -> Routed {
        let mut state = lock(&self.state);
        let id = state.route(worker, locals, now);
        Routed::new(worker, state.tag, id)
    }

    /// See [`ApproximateIndexer::route`](super::ApproximateIndexer::route): the query's scores,
    /// the worker `choose` picks, and the decision recorded.
    pub fn route(
        &self,
        query: &[LocalHash],
        now: Duration,
        choose: impl FnOnce(&OverlapScores) -> Worker,
    ) -> (Worker, Routed) {
        let worker = choose(&self.find_matches(query));
        (worker, self.record_routing(worker, query, now))
    }

    /// See [`ApproximateIndexer::release`](super::ApproximateIndexer::release).
    pub fn release(&self, routed: Routed, now: Duration) -> Result<(), ForeignRouted> {
        let mut state = lock(&self.state);
        let id = routed.id_in(state.tag)?;
        state.release(id, now);
        Ok(())
    }

    /// See [`ApproximateIndexer::expire`](super::ApproximateIndexer::expire).
    pub fn expire(&self, now: Duration) {
        lock(&self.state).advance(now);
    }

    /// See [`ApproximateIndexer::is_exact`](super::ApproximateIndexer::is_exact).
    pub fn is_exact(&self, worker: Worker) -> bool {
        lock(&self.state).exact_workers.contains(&worker)
    }

    /// See [`ApproximateIndexer::predicted_blocks`](super::ApproximateIndexer::predicted_blocks).
    pub fn predicted_blocks(&self, worker: Worker) -> usize {
        lock(&self.state).predicted.get(&worker).map_or(0, Vec::len)
    }
}

impl KvIndex for NaiveApproximateIndexer {
    fn apply(&self, event: &Event) -> Result<(), EventError> {
        let mut state = lock(&self.state);
        if state.exact_workers.insert(event.worker) {
            state.forget(|w| w == event.worker);
        }
        state.exact.apply(event)
    }

    fn find_matches(&self, query: &[LocalHash]) -> OverlapScores {
        let state = lock(&self.state);
        let mut scores = state.exact.find_matches(query);
        for (worker, entries) in &state.predicted {
            let depth = (1..=query.len())
                .take_while(|&len| holds(entries, &query[..len]).is_some())
                .count();
            if depth > 0 {
                scores.push(*worker, depth as u32);
            }
        }
        scores
    }

    fn remove_worker(&self, id: u64) {
        let mut state = lock(&self.state);
        state.forget(|w| w.id == id);
        state.exact_workers.retain(|w| w.id != id);
        state.exact.remove_worker(id);
    }

    fn remove_worker_dp_rank(&self, worker: Worker) {
        let mut state = lock(&self.state);
        state.forget(|w| w == worker);
        state.exact_workers.remove(&worker);
        state.exact.remove_worker_dp_rank(worker);
    }

    fn block_count(&self, worker: Worker) -> usize {
        let state = lock(&self.state);
        match state.predicted.get(&worker) {
            Some(entries) => entries.len(),
            None => state.exact.block_count(worker),
        }
    }

    /// The exact workers' dump, then each predicted prefix as a store of its whole chain.
    fn dump(&self) -> Vec<Event> {
        let state = lock(&self.state);
        let mut out = state.exact.dump();
        for (worker, entries) in &state.predicted {
            for entry in entries {
                let seqs = hash::seq_hashes(&entry.prefix);
                let blocks = entry
                    .prefix
                    .iter()
                    .zip(&seqs)
                    .map(|(l, s)| Block::new(*l, *s))
                    .collect();
                out.push(Event::stored(*worker, 0, None, blocks));
            }
        }
        out
    }
}
