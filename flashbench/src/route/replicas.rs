//! Several router replicas behind a load balancer, each with its own approximate index: the
//! trace's requests go to them in turn, and each replica predicts from its own decisions
//! (isolated) or from every replica's, shared through an in-process decision log that delivers
//! each decision after a delay (the code path a networked log takes too).
//!
//! Every replica sees the fleet's true loads: only the predictions differ between the modes.

use super::policy::{Loads, Policy, Request, least_cost};
use flash_indexer::approx::{MemoryLog, SharedApproximateIndexer};
use flash_indexer::{DefaultIndexer, Retention, Routed, Worker};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How replicas learn of each other's decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    /// Each replica sees only its own decisions.
    Isolated,
    /// Every replica applies every decision, `delay` after it was made.
    Shared { delay: Duration },
}

/// N replicas of an approximate KV-aware router (see [the module](self)).
pub struct Replicated {
    name: String,
    replicas: Vec<SharedApproximateIndexer<DefaultIndexer, Arc<MemoryLog>>>,
    overlap_weight: f64,
    /// Running requests that pinned blocks: the replica that routed each, and its handle.
    running: HashMap<usize, (usize, Routed)>,
}

impl Replicated {
    /// `routers` replicas keeping predictions by `retention`, sharing as `sharing` says.
    pub fn new(
        name: String,
        routers: usize,
        retention: Retention,
        sharing: Sharing,
        overlap_weight: f64,
    ) -> Self {
        // The log keeps what can still be predicted: the time to live, or an hour without one.
        let window = retention.ttl_limit().unwrap_or(Duration::from_secs(3_600));
        let shared = match sharing {
            Sharing::Shared { delay } => Some(Arc::new(MemoryLog::new(delay, window))),
            Sharing::Isolated => None,
        };
        let replicas = (0..routers.max(1))
            .map(|_| {
                let log = shared
                    .clone()
                    .unwrap_or_else(|| Arc::new(MemoryLog::new(Duration::ZERO, window)));
                SharedApproximateIndexer::new(retention, log)
            })
            .collect();
        Self {
            name,
            replicas,
            overlap_weight,
            running: HashMap::new(),
        }
    }
}

impl Policy for Replicated {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn choose(&mut self, request: &Request<'_>, loads: &Loads<'_>) -> u64 {
        let r = request.index % self.replicas.len();
        let replica = &self.replicas[r];
        let now = Duration::from_micros(request.now_us);
        replica.sync(now).expect("an in-process log does not fail");
        let scores = replica.find_matches(request.locals);
        let worker = least_cost(
            request.locals.len(),
            |w| scores.get(Worker::new(w, 0)).unwrap_or(0),
            loads,
            self.overlap_weight,
        );
        let routed = replica.record_routing(Worker::new(worker, 0), request.locals, now);
        if replica.approximate().retention().pins_running() {
            self.running.insert(request.index, (r, routed));
        }
        worker
    }

    fn finished(&mut self, request: usize, _worker: u64, now_us: u64) {
        if let Some((r, routed)) = self.running.remove(&request) {
            let now = Duration::from_micros(now_us);
            let replica = &self.replicas[r];
            replica.sync(now).expect("an in-process log does not fail");
            replica
                .release(routed, now)
                .expect("routed by this replica");
        }
    }
}
