//! Engine events of hybrid models to index events, each with its KV-cache group.

use super::decode::{BlockStored, EngineEvent, KvEventBatch};
use super::map::{EventMapper, MapError, stored_kind};
use crate::hybrid::{GroupKind, ModelGroups};
use crate::{Block, Event, EventKind, LocalHash};

/// What one batch of a hybrid model's engine became.
#[derive(Debug, Default)]
pub struct MappedGroups {
    /// Index events with their group (vLLM's `group_idx`), in the engine's order, each with the
    /// batch's sequence number as its id: for [`HybridIndex::apply`](crate::hybrid::HybridIndex::apply).
    pub events: Vec<(u32, Event)>,
    /// Events of filtered-out tiers (or of groups [`MapConfig::group`](super::MapConfig::group)
    /// leaves out).
    pub filtered: usize,
    /// Events rejected, with the reason.
    pub rejected: Vec<MapError>,
}

impl EventMapper {
    /// Maps a decoded batch of an engine serving `model`; its events get `event_id`.
    ///
    /// - The chain group's events (the first full-attention group) are mapped as
    ///   [`map`](Self::map) maps every event: whole blocks, local hashes from the tokens and
    ///   extra keys.
    /// - Another group's stored blocks are named by their sequence hashes alone, with
    ///   `LocalHash(0)`: vLLM leaves the blocks such a group skipped (out of its window, between
    ///   Mamba states) out of `block_hashes` but not out of `token_ids`, and the index places
    ///   them by the chain group's block of the same hash anyway.
    /// - An event without `group_idx` is group 0. An event whose group is not the model's, or
    ///   whose `kv_cache_spec_kind` is a kind without a reuse rule here or another kind than the
    ///   model's group, is rejected with the reason ([`MapError::Group`]).
    /// - `AllBlocksCleared` clears the chain group, which clears every group of the worker.
    ///
    /// ```
    /// use flash_indexer::hybrid::{GroupKind, GroupSpec, HybridIndex, HybridIndexer, ModelGroups};
    /// use flash_indexer::ingest::{BlockStored, EngineEvent, EventMapper, KvEventBatch, MapConfig};
    /// use flash_indexer::{hash, DefaultIndexer, SeqHash, Worker};
    ///
    /// let model = ModelGroups::new(vec![
    ///     GroupSpec::new(GroupKind::FullAttention, 16),
    ///     GroupSpec::new(GroupKind::Mamba, 16),
    /// ])
    /// .unwrap();
    /// let tokens: Vec<u32> = (0..48).collect();
    /// let stored = |group: u32, hashes: Vec<SeqHash>| {
    ///     EngineEvent::BlockStored(BlockStored {
    ///         block_hashes: hashes,
    ///         parent_block_hash: None,
    ///         token_ids: tokens.clone(),
    ///         block_size: 16,
    ///         lora_id: None,
    ///         medium: Some("GPU".into()),
    ///         lora_name: None,
    ///         group_idx: Some(group),
    ///         kv_cache_spec_kind: None,
    ///         kv_cache_spec_sliding_window: None,
    ///         extra_keys: None,
    ///         cache_salt: None,
    ///         lookahead_token_ids: None,
    ///     })
    /// };
    /// // Full attention stores all three blocks; Mamba keeps the state after the last only.
    /// let batch = KvEventBatch {
    ///     ts: 0.0,
    ///     events: vec![
    ///         stored(0, vec![SeqHash(1), SeqHash(2), SeqHash(3)]),
    ///         stored(1, vec![SeqHash(3)]),
    ///     ],
    ///     data_parallel_rank: None,
    ///     unknown_events: 0,
    /// };
    /// let index: HybridIndexer<DefaultIndexer> = HybridIndexer::new(model.clone());
    /// let mapped = EventMapper::new(7, MapConfig::default()).map_groups(&batch, 0, &model);
    /// for (group, event) in &mapped.events {
    ///     index.apply(*group, event).unwrap();
    /// }
    /// let query = hash::local_hashes(&tokens, 16);
    /// assert_eq!(index.find_matches(&query).get(Worker::new(7, 0)), Some(3));
    /// assert_eq!(index.find_matches(&query[..2]).get(Worker::new(7, 0)), None);
    /// ```
    pub fn map_groups(
        &self,
        batch: &KvEventBatch,
        event_id: u64,
        model: &ModelGroups,
    ) -> MappedGroups {
        let worker = self.worker(batch);
        let chain = model.chain_group();
        let mut mapped = MappedGroups::default();
        for event in &batch.events {
            let (medium, group) = match event {
                EngineEvent::BlockStored(e) => (e.medium.as_deref(), e.group_idx),
                EngineEvent::BlockRemoved(e) => (e.medium.as_deref(), e.group_idx),
                EngineEvent::AllBlocksCleared => {
                    mapped
                        .events
                        .push((chain, Event::cleared(worker, event_id)));
                    continue;
                }
            };
            if !self.config.keeps(medium, group) {
                mapped.filtered += 1;
                continue;
            }
            let group = group.unwrap_or(0);
            let kind = match event_kind(event, group, model) {
                Ok(kind) => kind,
                Err(error) => {
                    mapped.rejected.push(error);
                    continue;
                }
            };
            mapped.events.push((
                group,
                Event {
                    worker,
                    event_id,
                    kind,
                },
            ));
        }
        mapped
    }
}

fn event_kind(event: &EngineEvent, group: u32, model: &ModelGroups) -> Result<EventKind, MapError> {
    let Some(spec) = model.groups().get(group as usize) else {
        return Err(MapError::Group {
            group,
            reason: format!("the model has {} KV-cache groups", model.len()),
        });
    };
    match event {
        EngineEvent::BlockStored(stored) => {
            check_kind(stored, group, spec.kind)?;
            if group == model.chain_group() {
                stored_kind(stored)
            } else {
                let blocks = stored
                    .block_hashes
                    .iter()
                    .map(|&seq| Block::new(LocalHash(0), seq))
                    .collect();
                Ok(EventKind::Stored {
                    parent: stored.parent_block_hash,
                    blocks,
                })
            }
        }
        EngineEvent::BlockRemoved(removed) => Ok(EventKind::Removed {
            blocks: removed.block_hashes.clone(),
        }),
        EngineEvent::AllBlocksCleared => Ok(EventKind::Cleared),
    }
}

/// `Err` when the event names its group's kind, and it is not the model's.
fn check_kind(stored: &BlockStored, group: u32, configured: GroupKind) -> Result<(), MapError> {
    let Some(named) = stored.kv_cache_spec_kind.as_deref() else {
        return Ok(());
    };
    let window = stored.kv_cache_spec_sliding_window;
    let kind =
        GroupKind::from_vllm(named, window).map_err(|reason| MapError::Group { group, reason })?;
    if kind == configured {
        Ok(())
    } else {
        Err(MapError::Group {
            group,
            reason: format!("the engine says {kind:?}, the model's configuration {configured:?}"),
        })
    }
}
