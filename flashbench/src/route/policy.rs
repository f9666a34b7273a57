//! Routing policies: how a router picks a worker for each request.
//!
//! Every KV-aware policy scores workers the same way, as Dynamo's scheduler does at temperature
//! 0: cost = overlap weight × the prompt blocks a worker would have to prefill + the blocks its
//! running requests hold; the lowest cost wins, ties to the lowest worker id. Only where the
//! overlaps come from differs (an exact index fed the engines' events, or predictions), so two
//! exact indexes must route identically.

use flash_indexer::testing::splitmix64;
use flash_indexer::{ApproximateIndexer, Event, KvIndex, LocalHash, Retention, Worker};
use std::time::Duration;

/// What the router knows of a request when it picks a worker.
pub struct Request<'a> {
    /// Its position in the trace (the same request in every policy's run).
    pub index: usize,
    /// Trace time of its arrival, microseconds.
    pub now_us: u64,
    pub locals: &'a [LocalHash],
    /// The request's prompt tokens, for routers that hash tokens themselves (made on demand).
    pub tokens: &'a dyn Fn() -> Vec<u32>,
}

/// What the router knows of the workers: the load it put on them.
pub struct Loads<'a> {
    /// Requests running on each worker.
    pub running: &'a [u32],
    /// Blocks the running requests of each worker hold.
    pub active_blocks: &'a [u64],
}

/// A routing policy.
pub trait Policy {
    fn name(&self) -> String;
    /// An engine's KV event reaches the router (after the configured delay).
    fn observe(&mut self, _event: &Event) {}
    /// Picks the worker for `request`.
    fn choose(&mut self, request: &Request<'_>, loads: &Loads<'_>) -> u64;
    /// The request routed to `worker` finished at `now_us`.
    fn finished(&mut self, _request: usize, _worker: u64, _now_us: u64) {}
    /// `Some(speed)`: the run must be paced at `speed` times trace time on the wall clock
    /// (the policy keeps time by the wall clock, not by the trace's).
    fn pace(&self) -> Option<f64> {
        None
    }
    /// Heap bytes the policy keeps beside its index for the router's own bookkeeping (a
    /// router keeps those with its requests): not counted as the index's.
    fn bookkeeping_bytes(&self) -> usize {
        0
    }
}

/// The KV-aware cost rule (see the module docs): the worker of least cost, ties to the lowest id.
pub fn least_cost(
    prompt_blocks: usize,
    overlap: impl Fn(u64) -> u32,
    loads: &Loads<'_>,
    overlap_weight: f64,
) -> u64 {
    let mut best = (f64::INFINITY, 0u64);
    for w in 0..loads.running.len() as u64 {
        let uncached = prompt_blocks.saturating_sub(overlap(w) as usize) as f64;
        let cost = overlap_weight * uncached + loads.active_blocks[w as usize] as f64;
        if cost < best.0 {
            best = (cost, w);
        }
    }
    best.1
}

/// Uniformly random workers (seeded).
pub struct Random(pub u64);

impl Policy for Random {
    fn name(&self) -> String {
        "random".into()
    }
    fn choose(&mut self, request: &Request<'_>, loads: &Loads<'_>) -> u64 {
        splitmix64(self.0 ^ request.index as u64) % loads.running.len() as u64
    }
}

/// Workers in turn.
pub struct RoundRobin;

impl Policy for RoundRobin {
    fn name(&self) -> String {
        "round-robin".into()
    }
    fn choose(&mut self, request: &Request<'_>, loads: &Loads<'_>) -> u64 {
        request.index as u64 % loads.running.len() as u64
    }
}

/// The worker with the fewest running requests, ties to the lowest id.
pub struct LeastLoaded;

impl Policy for LeastLoaded {
    fn name(&self) -> String {
        "least-loaded".into()
    }
    fn choose(&mut self, _request: &Request<'_>, loads: &Loads<'_>) -> u64 {
        (0..loads.running.len())
            .min_by_key(|&w| (loads.running[w], w))
            .unwrap_or(0) as u64
    }
}

/// KV-aware over an exact index of the engines' events (any layout, or the reference).
pub struct ExactKv {
    pub name: String,
    pub index: Box<dyn KvIndex>,
    pub overlap_weight: f64,
}

impl Policy for ExactKv {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn observe(&mut self, event: &Event) {
        // The engines' events are valid by construction; a rejection would show as lost hits.
        let _ = self.index.apply(event);
    }
    fn choose(&mut self, request: &Request<'_>, loads: &Loads<'_>) -> u64 {
        let scores = self.index.find_matches(request.locals);
        least_cost(
            request.locals.len(),
            |w| scores.get(Worker::new(w, 0)).unwrap_or(0),
            loads,
            self.overlap_weight,
        )
    }
}

/// KV-aware over predictions of our approximate mode: no events, only routing decisions.
pub struct ApproximateKv {
    pub name: String,
    pub index: ApproximateIndexer<flash_indexer::DefaultIndexer>,
    pub overlap_weight: f64,
    /// The routed requests still running, by trace position (released when they finish): a
    /// router keeps each ticket with its request, and a slot per request stands in for that.
    pub routed: Vec<Option<flash_indexer::Routed>>,
}

impl ApproximateKv {
    pub fn new(name: &str, retention: Retention, overlap_weight: f64) -> Self {
        Self {
            name: name.into(),
            index: ApproximateIndexer::new(retention),
            overlap_weight,
            routed: Vec::new(),
        }
    }
}

fn at(now_us: u64) -> Duration {
    Duration::from_micros(now_us)
}

impl Policy for ApproximateKv {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn choose(&mut self, request: &Request<'_>, loads: &Loads<'_>) -> u64 {
        let overlap_weight = self.overlap_weight;
        let (worker, routed) = self
            .index
            .route(request.locals, at(request.now_us), |scores| {
                let w = least_cost(
                    request.locals.len(),
                    |w| scores.get(Worker::new(w, 0)).unwrap_or(0),
                    loads,
                    overlap_weight,
                );
                Worker::new(w, 0)
            });
        if self.index.retention().pins_running() {
            if self.routed.len() <= request.index {
                self.routed.resize(request.index + 1, None);
            }
            self.routed[request.index] = Some(routed);
        }
        worker.id
    }
    fn bookkeeping_bytes(&self) -> usize {
        self.routed.capacity() * std::mem::size_of::<Option<flash_indexer::Routed>>()
    }
    fn finished(&mut self, request: usize, _worker: u64, now_us: u64) {
        if let Some(routed) = self.routed.get_mut(request).and_then(Option::take) {
            self.index
                .release(routed, at(now_us))
                .expect("routed by this index");
        }
    }
}
