//! Engines whose topics name the model: their events go to the model each message names.
//!
//! A subscriber feeds one writer pool. For an engine without a fixed model, that pool's index is
//! a [`TopicRouter`]: it looks up the model the worker's topic named (recorded by the
//! subscriber's topic resolver) and hands the event on to that model's pool for the same tier.
//! Per worker, events keep their order: the router's pool applies them in order, and the model's
//! pool queues them behind that worker's earlier events.
//!
//! Events reach the router without their KV-cache group, so those of a model with several
//! groups are refused here and counted in its tier's
//! [`ungrouped`](crate::service::TierIndex::ungrouped): a hybrid model's engines name their
//! model in the configuration.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use flash_indexer::{Event, EventError, EventView, KvIndex, LocalHash, OverlapScores, Worker};

use crate::service::{ServedIndex, Service};

/// Hands each event on to the pool of the model its worker's topic named, tier `tier`.
pub struct TopicRouter {
    service: Weak<Service>,
    tier: usize,
}

impl TopicRouter {
    /// A router into `service`'s models, for the tier at index `tier` of the settings.
    pub fn new(service: &Arc<Service>, tier: usize) -> TopicRouter {
        TopicRouter {
            service: Arc::downgrade(service),
            tier,
        }
    }

    /// Runs `f` on the pool of worker `id`'s model, if its topic named one.
    fn with_pool(
        &self,
        id: u64,
        f: impl FnOnce(&flash_indexer::pool::WriterPool<dyn ServedIndex>),
    ) {
        let Some(service) = self.service.upgrade() else {
            return; // Shutting down.
        };
        if let Some(model) = service.topic_model(id) {
            f(&service.model_or_create(&model).tiers[self.tier].pool);
        }
    }

    /// Whether worker `id`'s topic named a model with several KV-cache groups; if so, counts one
    /// refused event there (the first one is logged).
    fn refused_as_ungrouped(&self, id: u64) -> bool {
        let Some(service) = self.service.upgrade() else {
            return false;
        };
        let Some(name) = service.topic_model(id) else {
            return false;
        };
        let model = service.model_or_create(&name);
        let tier = &model.tiers[self.tier];
        if tier.hybrid.is_none() {
            return false;
        }
        if tier.ungrouped.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!(
                model = %name,
                worker = id,
                "events of a model with several KV-cache groups from an engine named by its \
                 topic are refused: give the engine's model in the configuration"
            );
        }
        true
    }
}

impl KvIndex for TopicRouter {
    /// Queues the event on its model's pool; what that pool's writer makes of it shows in that
    /// index's counters.
    fn apply(&self, event: &Event) -> Result<(), EventError> {
        self.apply_view(event.view())
    }

    /// As `apply`: the pool keeps a copy in its own buffers, so the event is not cloned.
    fn apply_view(&self, event: EventView<'_>) -> Result<(), EventError> {
        if self.refused_as_ungrouped(event.worker.id) {
            return Ok(());
        }
        self.with_pool(event.worker.id, |pool| {
            let _ = pool.submit_copy(event);
        });
        Ok(())
    }

    /// Queries go to the models' own indexes; the router holds nothing.
    fn find_matches(&self, _query: &[LocalHash]) -> OverlapScores {
        OverlapScores::new()
    }

    fn remove_worker(&self, id: u64) {
        self.with_pool(id, |pool| pool.remove_worker(id));
    }

    fn remove_worker_dp_rank(&self, worker: Worker) {
        self.with_pool(worker.id, |pool| pool.remove_worker_dp_rank(worker));
    }

    fn block_count(&self, _worker: Worker) -> usize {
        0
    }

    fn dump(&self) -> Vec<Event> {
        Vec::new()
    }
}

impl ServedIndex for TopicRouter {
    fn entries(&self) -> usize {
        0
    }
    fn worker_count(&self) -> usize {
        0
    }
}
