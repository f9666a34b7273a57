//! Approximate mode: a model's GPU tier also predicts the caches of workers that publish no
//! events, from the routing decisions posted to `POST /route`, optionally shared with the other
//! replicas through one Redis stream per model (`--share`).
//!
//! Time is the wall clock since the Unix epoch, so that replicas on synchronized machines expire
//! shared decisions alike.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flash_indexer::approx::{DecisionLog, MemoryLog, RedisLog, SharedApproximateIndexer};
use flash_indexer::{LocalHash, Routed, Worker};

use crate::config::ApproximateSettings;
use crate::service::ServedIndex;

/// A model's GPU tier in approximate mode: exact for workers that publish events, predicted for
/// the others.
pub type PredictedIndex = SharedApproximateIndexer<Arc<dyn ServedIndex>, Box<dyn DecisionLog>>;

impl ServedIndex for PredictedIndex {
    fn entries(&self) -> usize {
        self.approximate().index().entries()
    }
    fn worker_count(&self) -> usize {
        self.approximate().index().worker_count()
    }
    fn duplicate_stores(&self) -> u64 {
        self.approximate().index().duplicate_stores()
    }
}

/// The routing side of one model in approximate mode.
pub struct Predictions {
    /// The model's GPU-tier index (its writer pool holds the same one).
    pub index: Arc<PredictedIndex>,
    /// Requests routed here and not released, by the number `POST /route` answered (only
    /// under a retention that pins running requests).
    running: Mutex<HashMap<u64, Routed>>,
    next_request: AtomicU64,
    /// Whether other replicas share the log (without them, there is nothing to sync).
    shared: bool,
}

/// The Redis stream a model's decisions are shared on.
pub fn stream_key(model: &str) -> String {
    format!("flash-indexer:decisions:{model}")
}

/// The wall clock as approximate mode reads it.
fn now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

impl Predictions {
    /// Approximate mode over `index` (the model's GPU tier) for `model`.
    pub fn new(index: Arc<dyn ServedIndex>, settings: &ApproximateSettings, model: &str) -> Self {
        let retention = settings.retention;
        let log: Box<dyn DecisionLog> = match &settings.share {
            Some(url) => {
                // The log keeps what can still be predicted: the time to live, or an hour.
                let window = retention.ttl_limit().unwrap_or(Duration::from_secs(3_600));
                Box::new(
                    RedisLog::open(url, &stream_key(model), window)
                        .expect("the URL was checked with the settings"),
                )
            }
            // Not shared: a log nobody else reads, keeping nothing older than its last entry.
            None => Box::new(MemoryLog::new(Duration::ZERO, Duration::ZERO)),
        };
        let approximate = flash_indexer::ApproximateIndexer::with_index(index, retention);
        Self {
            index: Arc::new(SharedApproximateIndexer::with_index(approximate, log)),
            running: Mutex::default(),
            next_request: AtomicU64::new(1),
            shared: settings.share.is_some(),
        }
    }

    /// Applies the other replicas' decisions (a failure is counted in the share stats and the
    /// model answers from what it has). Unshared, there are none: a query takes no lock here.
    pub fn sync(&self) {
        if self.shared {
            let _ = self.index.sync(now());
        }
    }

    /// The router sent a request with these blocks to `worker`: returns its number for
    /// [`release`](Self::release).
    pub fn route(&self, worker: Worker, locals: &[LocalHash]) -> u64 {
        self.sync();
        let now = now();
        let routed = self.index.record_routing(worker, locals, now);
        let request = self.next_request.fetch_add(1, Ordering::Relaxed);
        if self.index.approximate().retention().pins_running() {
            self.running.lock().unwrap().insert(request, routed);
        }
        request
    }

    /// Request `request` finished. `false` if no running request has that number (released
    /// already, or never routed here); under a time to live, where releases change nothing,
    /// `false` only for a number this model never answered.
    pub fn release(&self, request: u64) -> bool {
        if !self.index.approximate().retention().pins_running() {
            return request > 0 && request < self.next_request.load(Ordering::Relaxed);
        }
        let Some(routed) = self.running.lock().unwrap().remove(&request) else {
            return false;
        };
        // Routed by this model's own index.
        let _ = self.index.release(routed, now());
        true
    }
}
