//! Dynamo's routing indexes as policies (feature `dynamo`), under the same cost rule as ours.
//!
//! - `dynamo/kv-crtc`: `ThreadPoolIndexer<ConcurrentRadixTreeCompressed>` fed the engines'
//!   events, flushed before a query when events arrived since the last one (the router of a
//!   quiet moment sees every delivered event, as ours does).
//! - `dynamo/kv-approx-ttl`: `KvIndexer` with approximate TTL retention (`PruneConfig`),
//!   told each decision through `process_routing_decision_for_request` with the request's
//!   tokens. Its TTL runs on Tokio's clock in a thread of its own, which a simulation cannot
//!   drive, so this policy's run is paced on the wall clock at `speed` times trace time and its
//!   TTL is 120 s of trace time divided by `speed`. Dynamo rounds expiries up to 100 ms buckets:
//!   at the default speed of 200 that is up to 20 s of trace time more than 120 s.
//! - `dynamo/kv-approx-unpaced`: the same indexer with a TTL of a day, so nothing expires during
//!   a run and nothing needs pacing: its decisions as fast as it takes them, to set beside ours.

use super::PolicyFactory;
use super::policy::{Loads, Policy, Request, least_cost};
use crate::compare::dynamo::router_event;
use dynamo_kv_router::indexer::concurrent_radix_tree_compressed::ConcurrentRadixTreeCompressed;
use dynamo_kv_router::indexer::pruning::PruneConfig;
use dynamo_kv_router::indexer::{
    ApproximateRetentionConfig, KvIndexer, KvIndexerInterface, KvIndexerMetrics, SyncIndexer,
    ThreadPoolIndexer,
};
use dynamo_kv_router::protocols::{
    LocalBlockHash, OverlapScores, TokensWithHashes, WorkerWithDpRank,
};
use flash_indexer::Event;
use std::sync::Arc;

use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

/// Writer threads of the CRTC pool, as in `flashbench compare`.
const THREADS: usize = 2;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread Tokio runtime")
}

fn locals(request: &Request<'_>) -> Vec<LocalBlockHash> {
    request.locals.iter().map(|l| LocalBlockHash(l.0)).collect()
}

fn overlap(scores: &OverlapScores, w: u64) -> u32 {
    scores
        .scores
        .get(&WorkerWithDpRank::new(w, 0))
        .copied()
        .unwrap_or(0)
}

struct Crtc {
    indexer: ThreadPoolIndexer<ConcurrentRadixTreeCompressed>,
    rt: Runtime,
    dirty: bool,
    overlap_weight: f64,
}

impl Policy for Crtc {
    fn name(&self) -> String {
        "dynamo/kv-crtc".into()
    }
    fn observe(&mut self, event: &Event) {
        self.indexer
            .enqueue_event(router_event(event))
            .expect("Dynamo's writer threads outlive the run");
        self.dirty = true;
    }
    fn choose(&mut self, request: &Request<'_>, loads: &Loads<'_>) -> u64 {
        if std::mem::take(&mut self.dirty) {
            self.rt
                .block_on(self.indexer.flush_and_wait())
                .expect("Dynamo's writer threads answer the flush");
        }
        let scores = self.indexer.backend().find_matches(&locals(request), false);
        least_cost(
            request.locals.len(),
            |w| overlap(&scores, w),
            loads,
            self.overlap_weight,
        )
    }
}

struct ApproxTtl {
    indexer: KvIndexer,
    rt: Runtime,
    block_size: u32,
    overlap_weight: f64,
    /// Trace time per wall-clock time, or `None` for the unpaced variant.
    speed: Option<f64>,
}

impl Policy for ApproxTtl {
    fn name(&self) -> String {
        match self.speed {
            Some(_) => "dynamo/kv-approx-ttl".into(),
            None => "dynamo/kv-approx-unpaced".into(),
        }
    }
    fn choose(&mut self, request: &Request<'_>, loads: &Loads<'_>) -> u64 {
        let scores = self
            .rt
            .block_on(self.indexer.find_matches(locals(request)))
            .expect("Dynamo's indexer thread answers");
        let worker = least_cost(
            request.locals.len(),
            |w| overlap(&scores, w),
            loads,
            self.overlap_weight,
        );
        let mut tokens = TokensWithHashes::new((request.tokens)(), self.block_size);
        self.rt
            .block_on(self.indexer.process_routing_decision_for_request(
                &mut tokens,
                WorkerWithDpRank::new(worker, 0),
            ))
            .expect("Dynamo's indexer takes the routing decision");
        worker
    }
    fn pace(&self) -> Option<f64> {
        self.speed
    }
}

/// Dynamo's routing policies; `speed` paces the approximate TTL one (see the module docs).
pub fn policies(speed: f64) -> Vec<PolicyFactory> {
    vec![
        PolicyFactory {
            name: "dynamo/kv-crtc".into(),
            make: Box::new(|cfg| {
                Box::new(Crtc {
                    indexer: ThreadPoolIndexer::new(
                        ConcurrentRadixTreeCompressed::new(),
                        THREADS,
                        cfg.block_size as u32,
                    ),
                    rt: runtime(),
                    dirty: false,
                    overlap_weight: cfg.overlap_weight,
                })
            }),
        },
        approx("dynamo/kv-approx-ttl", Some(speed)),
        approx("dynamo/kv-approx-unpaced", None),
    ]
}

/// Dynamo's approximate `KvIndexer`: TTL 120 s of trace time paced at `speed`, or unpaced with a
/// TTL of a day (`None`).
fn approx(name: &str, speed: Option<f64>) -> PolicyFactory {
    PolicyFactory {
        name: name.into(),
        make: Box::new(move |cfg| {
            let ttl = match speed {
                Some(speed) => PruneConfig::default().ttl.div_f64(speed),
                None => std::time::Duration::from_secs(24 * 3600),
            };
            Box::new(ApproxTtl {
                indexer: KvIndexer::new_with_approximate_retention(
                    CancellationToken::new(),
                    cfg.block_size as u32,
                    Arc::new(KvIndexerMetrics::new_unregistered()),
                    Some(ApproximateRetentionConfig::Ttl(PruneConfig { ttl })),
                ),
                rt: runtime(),
                block_size: cfg.block_size as u32,
                overlap_weight: cfg.overlap_weight,
                speed,
            })
        }),
    }
}
