//! [`KvIndexerInterface`] for [`FlashIndexer`] directly, without a thread pool: every call runs
//! on the caller's thread, so an event is visible to queries as soon as `apply_event` returns.

use super::FlashIndexer;
use super::convert::{flash_worker, local_hashes, overlap_scores};
use async_trait::async_trait;
use dynamo_kv_router::indexer::{KvIndexerInterface, KvRouterError, ShardSizeSnapshot};
use dynamo_kv_router::protocols::{
    BlockHashOptions, DpRank, LocalBlockHash, OverlapScores, RouterEvent, TokensWithHashes,
    WorkerId, WorkerWithDpRank, compute_block_hash_for_seq,
};
use flash_indexer::KvIndex;

#[async_trait]
impl<I: KvIndex> KvIndexerInterface for FlashIndexer<I> {
    async fn find_matches(
        &self,
        sequence: Vec<LocalBlockHash>,
    ) -> Result<OverlapScores, KvRouterError> {
        Ok(overlap_scores(
            &self.index.find_matches(&local_hashes(&sequence)),
        ))
    }

    /// Hashes `tokens` with Dynamo's own function (block size, LoRA name, cache namespace and
    /// Eagle windows as Dynamo's indexers hash them), then matches.
    async fn find_matches_for_request(
        &self,
        tokens: &[u32],
        lora_name: Option<&str>,
        cache_namespace: Option<&str>,
        is_eagle: Option<bool>,
    ) -> Result<OverlapScores, KvRouterError> {
        let sequence = compute_block_hash_for_seq(
            tokens,
            self.kv_block_size,
            BlockHashOptions {
                lora_name,
                cache_namespace,
                is_eagle,
                ..Default::default()
            },
        );
        self.find_matches(sequence).await
    }

    /// Applies the event at once; a refused event is logged, as Dynamo's indexers log it.
    async fn apply_event(&self, event: RouterEvent) {
        if let Err(error) = self.apply_router_event(&event) {
            tracing::warn!(?error, "Failed to apply event");
        }
    }

    async fn remove_worker(&self, worker: WorkerId) {
        self.index.remove_worker(worker);
    }

    async fn remove_worker_dp_rank(&self, worker: WorkerId, dp_rank: DpRank) {
        self.index
            .remove_worker_dp_rank(flash_worker(WorkerWithDpRank::new(worker, dp_rank)));
    }

    /// The removal is visible when the call returns: nothing is queued.
    async fn reset_worker_dp_rank_and_wait(
        &self,
        worker: WorkerId,
        dp_rank: DpRank,
    ) -> Result<(), KvRouterError> {
        self.index
            .remove_worker_dp_rank(flash_worker(WorkerWithDpRank::new(worker, dp_rank)));
        Ok(())
    }

    fn shutdown(&self) {}

    async fn dump_events(&self) -> Result<Vec<RouterEvent>, KvRouterError> {
        Ok(self.dump_router_events())
    }

    /// Predicting caches from routing decisions needs retention (when a predicted block is
    /// forgotten): use `ThreadPoolIndexer::new_with_pruning` over this backend (Dynamo's TTL
    /// mode), or flash-indexer's `ApproximateIndexer`. Without either it is refused.
    async fn process_routing_decision_for_request(
        &self,
        _tokens_with_hashes: &mut TokensWithHashes,
        _worker: WorkerWithDpRank,
    ) -> Result<(), KvRouterError> {
        Err(KvRouterError::Unsupported(
            "routing decisions need retention: wrap FlashIndexer in \
             ThreadPoolIndexer::new_with_pruning, or use flash_indexer::ApproximateIndexer"
                .to_string(),
        ))
    }

    /// Nothing is ever queued: 0.
    async fn flush(&self) -> usize {
        0
    }

    /// One shard: the workers holding blocks and every block they hold, reachable or not (the
    /// contract's `block_count`), from the index's table of workers.
    async fn shard_sizes(&self) -> Vec<ShardSizeSnapshot> {
        let counts = self.index.block_counts();
        vec![ShardSizeSnapshot {
            shard_idx: 0,
            worker_count: counts.len(),
            block_count: counts.iter().map(|&(_, n)| n).sum(),
            node_count: 0,
        }]
    }
}
