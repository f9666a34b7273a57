//! Engine events to index [`Event`]s.
//!
//! - `token_ids` become local hashes with [`crate::hash`] at the event's `block_size`, seeded by
//!   the LoRA adapter's name when there is one, so that a router hashing a request's tokens the
//!   same way finds them.
//! - Each block's `extra_keys` (vLLM) are folded into its local hash
//!   ([`hash::block_local_hash`]): the first bare string is the LoRA adapter's name when the
//!   event has a `lora_name` (it seeds the hash instead), a bare string after it is the cache
//!   salt, `(identifier, offset)` pairs are multimodal items, bytes are a prompt-embeddings
//!   digest. SGLang's top-level `cache_salt` keys the first block of a sequence. A key of any
//!   other shape rejects the event with a reason: it is never hashed as plain text.
//! - A cache salt `dynamo-cache-salt:NAMESPACE` on an event's first block is Dynamo's cache
//!   namespace, marked so by its frontend: it seeds every block of the event
//!   ([`hash::Salt::cache_namespace`]), as Dynamo's router hashes it, instead of keying the
//!   first block as vLLM's salt.
//! - Blocks vLLM hashed over the tokens after them too (`lookahead_token_ids`, speculative
//!   decoding) are keyed by those tokens ([`hash::ExtraKey::Lookahead`]), as a router keys a
//!   request's blocks with [`hash::Features::lookahead`]. Lists that are not one per block
//!   reject the event.
//! - Engine block hashes become opaque [`SeqHash`]es, unchanged.
//! - `data_parallel_rank` becomes [`Worker::dp_rank`] (or a fixed rank); the worker id is the
//!   caller's (the subscriber's endpoint names it, or its resolver maps the message topic).
//! - Events of other storage tiers (CPU offload, disk, ...) are filtered out, GPU by default.
//! - An event whose tokens do not make whole blocks, one per block hash, is rejected with a
//!   reason and nothing of it is applied.

use std::fmt;

use super::decode::{BlockStored, EngineEvent, KvEventBatch, RawExtraKey};
use super::endpoint::DpRank;
use super::mediums::{MediumUnion, UnionCell};
use crate::hash::ExtraKey;
use crate::{Block, Event, EventKind, Worker, hash};

/// Which events an [`EventMapper`] keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapConfig {
    /// Storage tiers to index, compared case-insensitively. An event without a medium (engines
    /// older than the field) is GPU. Default: `["GPU"]`. With several, a block stays indexed
    /// while any of them holds it: a removal from one tier does not drop what another still
    /// holds (see [`EventMapper`] for what it remembers to know that).
    pub mediums: Vec<String>,
    /// Keep only this KV-cache group of hybrid models (events without a group are always kept).
    /// Default: every group. [`EventMapper::map`] merges the groups it keeps into one worker,
    /// which is exact only for a model with one group: map a hybrid model's events with
    /// [`EventMapper::map_groups`] into a [`HybridIndex`](crate::hybrid::HybridIndex) instead.
    pub group: Option<u32>,
}

impl Default for MapConfig {
    fn default() -> Self {
        MapConfig {
            mediums: vec!["GPU".to_owned()],
            group: None,
        }
    }
}

impl MapConfig {
    pub(super) fn keeps(&self, medium: Option<&str>, group: Option<u32>) -> bool {
        let medium = medium.unwrap_or("GPU");
        let medium_ok = self.mediums.iter().any(|m| m.eq_ignore_ascii_case(medium));
        let group_ok = match (self.group, group) {
            (Some(wanted), Some(group)) => wanted == group,
            _ => true,
        };
        medium_ok && group_ok
    }
}

/// Why an engine event was not turned into an index event. Nothing of it was applied.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MapError {
    /// The tokens are not exactly one block of `block_size` per block hash.
    PartialBlocks {
        /// Tokens in the event.
        tokens: usize,
        /// Block hashes in the event.
        blocks: usize,
        /// The event's block size.
        block_size: u32,
    },
    /// A block size over [`hash::MAX_BLOCK_SIZE`]: no engine uses one, and nothing is reserved
    /// for it.
    BlockSizeTooLarge {
        /// The event's block size.
        block_size: u32,
    },
    /// `extra_keys` or `lookahead_token_ids` that are not one entry per block, or an item of a
    /// shape vLLM does not publish.
    ExtraKeys {
        /// The block whose keys are wrong (its index in the event), or the number of entries
        /// when they do not match the blocks.
        block: usize,
        /// What is wrong.
        reason: String,
    },
    /// A LoRA adapter id without the adapter's name, which the local hashes are seeded with.
    LoraWithoutName {
        /// The adapter's id.
        lora_id: i64,
    },
    /// An event of a KV-cache group that is not one of the model's, or whose kind the engine
    /// names as something else than the model's configuration, or as a kind this crate has no
    /// reuse rule for ([`EventMapper::map_groups`]). Never merged into another group.
    Group {
        /// The event's `group_idx`.
        group: u32,
        /// What is wrong.
        reason: String,
    },
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::PartialBlocks {
                tokens,
                blocks,
                block_size,
            } => write!(
                f,
                "{tokens} tokens are not {blocks} whole blocks of {block_size}: event rejected"
            ),
            MapError::BlockSizeTooLarge { block_size } => write!(
                f,
                "block size {block_size} is over the largest accepted, {}: event rejected",
                hash::MAX_BLOCK_SIZE
            ),
            MapError::ExtraKeys { block, reason } => {
                write!(f, "extra keys of block {block}: {reason}: event rejected")
            }
            MapError::LoraWithoutName { lora_id } => write!(
                f,
                "LoRA adapter {lora_id} without lora_name: its local hashes cannot be computed"
            ),
            MapError::Group { group, reason } => {
                write!(f, "KV-cache group {group}: {reason}: event rejected")
            }
        }
    }
}

impl std::error::Error for MapError {}

/// What one batch became.
#[derive(Debug, Default)]
pub struct Mapped {
    /// Index events, in the engine's order, each with the batch's sequence number as its id.
    pub events: Vec<Event>,
    /// Events of filtered-out tiers or groups.
    pub filtered: usize,
    /// Events rejected, with the reason.
    pub rejected: Vec<MapError>,
}

/// Turns one engine's batches into index events for one worker id.
///
/// Sequencing is not the mapper's business: every event of a batch carries the id it is given,
/// the batch's sequence number, and the [`Subscriber`](super::Subscriber) is the one place that
/// checks sequence numbers.
///
/// ```
/// use flash_indexer::ingest::{BlockStored, EngineEvent, EventMapper, KvEventBatch, MapConfig};
/// use flash_indexer::{hash, KvIndex, NaiveIndexer, SeqHash, Worker};
///
/// let tokens: Vec<u32> = (0..32).collect();
/// let batch = KvEventBatch {
///     ts: 0.0,
///     events: vec![EngineEvent::BlockStored(BlockStored {
///         block_hashes: vec![SeqHash(11), SeqHash(12)],
///         parent_block_hash: None,
///         token_ids: tokens.clone(),
///         block_size: 16,
///         lora_id: None,
///         medium: Some("GPU".into()),
///         lora_name: None,
///         group_idx: None,
///         kv_cache_spec_kind: None,
///         kv_cache_spec_sliding_window: None,
///         extra_keys: None,
///         cache_salt: None,
///         lookahead_token_ids: None,
///     })],
///     data_parallel_rank: Some(1),
///     unknown_events: 0,
/// };
/// let mapper = EventMapper::new(7, MapConfig::default());
/// let index = NaiveIndexer::default();
/// for event in mapper.map(&batch, 0).events {
///     index.apply(&event).unwrap();
/// }
/// let scores = index.find_matches(&hash::local_hashes(&tokens, 16));
/// assert_eq!(scores.get(Worker::new(7, 1)), Some(2));
/// ```
#[derive(Clone, Debug)]
pub struct EventMapper {
    worker_id: u64,
    dp_rank: DpRank,
    pub(super) config: MapConfig,
    /// Which kept mediums hold which blocks, with more than one medium kept.
    union: Option<UnionCell>,
}

impl EventMapper {
    /// A mapper for the engine whose events belong to worker `worker_id`, with the batches'
    /// data-parallel ranks.
    pub fn new(worker_id: u64, config: MapConfig) -> Self {
        EventMapper {
            worker_id,
            dp_rank: DpRank::FromBatch,
            union: (config.mediums.len() > 1).then(UnionCell::default),
            config,
        }
    }

    /// Forgets which mediums held what: the index was cleared of every worker of this mapper
    /// (a subscriber's resynchronization).
    pub(super) fn forget_mediums(&self) {
        if let Some(union) = &self.union {
            union.with(MediumUnion::clear_all);
        }
    }

    /// The index of the kept medium `medium` (`None` is GPU) in the configuration.
    fn medium_index(&self, medium: Option<&str>) -> usize {
        let medium = medium.unwrap_or("GPU");
        (self.config.mediums.iter())
            .position(|m| m.eq_ignore_ascii_case(medium))
            .unwrap_or(0)
            .min(63)
    }

    /// The same, with data-parallel ranks decided by `dp_rank`.
    pub fn with_dp_rank(mut self, dp_rank: DpRank) -> Self {
        self.dp_rank = dp_rank;
        self
    }

    /// The worker id this mapper's events carry.
    pub fn worker_id(&self) -> u64 {
        self.worker_id
    }

    /// The worker (id and rank) `batch`'s events belong to.
    pub fn worker(&self, batch: &KvEventBatch) -> Worker {
        let rank = match self.dp_rank {
            DpRank::FromBatch => batch.data_parallel_rank.unwrap_or(0),
            DpRank::Fixed(rank) => rank,
            DpRank::FromBatchOr(rank) => batch.data_parallel_rank.unwrap_or(rank),
        };
        Worker::new(self.worker_id, rank)
    }

    /// Maps a decoded batch; its events get `event_id`.
    pub fn map(&self, batch: &KvEventBatch, event_id: u64) -> Mapped {
        let worker = self.worker(batch);
        let mut mapped = Mapped::default();
        for event in &batch.events {
            // A clear applies to whatever the index holds of the worker, whatever its tier.
            let tier = match event {
                EngineEvent::BlockStored(e) => Some((e.medium.as_deref(), e.group_idx)),
                EngineEvent::BlockRemoved(e) => Some((e.medium.as_deref(), e.group_idx)),
                EngineEvent::AllBlocksCleared => None,
            };
            if let Some((medium, group)) = tier
                && !self.config.keeps(medium, group)
            {
                mapped.filtered += 1;
                continue;
            }
            let medium = tier.map(|(medium, _)| self.medium_index(medium));
            let kind = match event {
                EngineEvent::BlockStored(stored) => match stored_kind(stored) {
                    Ok(kind) => kind,
                    Err(error) => {
                        mapped.rejected.push(error);
                        continue;
                    }
                },
                EngineEvent::BlockRemoved(removed) => EventKind::Removed {
                    blocks: removed.block_hashes.clone(),
                },
                EngineEvent::AllBlocksCleared => EventKind::Cleared,
            };
            let kind = match (&self.union, medium) {
                (Some(union), medium) => match union.with(|u| u.settle(worker, medium, kind)) {
                    Some(kind) => kind,
                    None => continue, // Another kept medium still holds every block removed.
                },
                (None, _) => kind,
            };
            mapped.events.push(Event {
                worker,
                event_id,
                kind,
            });
        }
        mapped
    }
}

pub(super) fn stored_kind(stored: &BlockStored) -> Result<EventKind, MapError> {
    let block_size = stored.block_size as usize;
    if block_size > hash::MAX_BLOCK_SIZE {
        return Err(MapError::BlockSizeTooLarge {
            block_size: stored.block_size,
        });
    }
    let whole = block_size > 0
        && stored.token_ids.len().is_multiple_of(block_size)
        && stored.token_ids.len() / block_size == stored.block_hashes.len();
    if !whole {
        return Err(MapError::PartialBlocks {
            tokens: stored.token_ids.len(),
            blocks: stored.block_hashes.len(),
            block_size: stored.block_size,
        });
    }
    if let (None, Some(lora_id)) = (&stored.lora_name, stored.lora_id) {
        return Err(MapError::LoraWithoutName { lora_id });
    }
    let (keys, namespace) = block_keys(stored)?;
    let seed = hash::Salt {
        lora_name: stored.lora_name.as_deref(),
        cache_namespace: namespace.as_deref(),
    }
    .seed();
    let locals = if keys.iter().all(Vec::is_empty) {
        hash::local_hashes_with_seed(&stored.token_ids, block_size, seed)
    } else {
        stored
            .token_ids
            .chunks_exact(block_size)
            .zip(&keys)
            .map(|(tokens, keys)| hash::block_local_hash(tokens, seed, keys))
            .collect()
    };
    let blocks = locals
        .into_iter()
        .zip(&stored.block_hashes)
        .map(|(local, &seq)| Block::new(local, seq))
        .collect();
    Ok(EventKind::Stored {
        parent: stored.parent_block_hash,
        blocks,
    })
}

/// The mark of Dynamo's cache namespace among vLLM's `extra_keys`: Dynamo's frontend passes a
/// request's namespace to vLLM as the cache salt `dynamo-cache-salt:NAMESPACE`.
const DYNAMO_CACHE_SALT_PREFIX: &str = "dynamo-cache-salt:";

/// Each block's extra keys, from vLLM's per-block `extra_keys` and SGLang's `cache_salt`, and
/// the cache namespace Dynamo's frontend marked on the event's first block.
fn block_keys(stored: &BlockStored) -> Result<(Vec<Vec<ExtraKey>>, Option<String>), MapError> {
    let blocks = stored.block_hashes.len();
    let mut keys: Vec<Vec<ExtraKey>> = match &stored.extra_keys {
        None => vec![Vec::new(); blocks],
        Some(entries) if entries.len() != blocks => {
            return Err(MapError::ExtraKeys {
                block: entries.len(),
                reason: format!("{} entries for {blocks} blocks", entries.len()),
            });
        }
        Some(entries) => entries
            .iter()
            .enumerate()
            .map(|(block, entry)| {
                let items = entry.as_deref().unwrap_or_default();
                one_block_keys(items, stored.lora_name.as_deref())
                    .map_err(|reason| MapError::ExtraKeys { block, reason })
            })
            .collect::<Result<_, _>>()?,
    };
    // With lookahead hashing, each block is keyed by the tokens after it too.
    if let Some(lists) = &stored.lookahead_token_ids {
        if lists.len() != blocks {
            return Err(MapError::ExtraKeys {
                block: lists.len(),
                reason: format!(
                    "{} lookahead_token_ids lists for {blocks} blocks",
                    lists.len()
                ),
            });
        }
        for (keys, list) in keys.iter_mut().zip(lists) {
            keys.push(ExtraKey::Lookahead(list.clone()));
        }
    }
    // Dynamo's router seeds every block of the event with a namespace marked on its first block
    // (`extra_keys_to_cache_namespace`), and hashes nothing else of the mark.
    let mut namespace = None;
    if let Some(first) = keys.first_mut()
        && let Some(at) = first.iter().position(|key| {
            matches!(key, ExtraKey::CacheSalt(salt)
                if salt.len() > DYNAMO_CACHE_SALT_PREFIX.len()
                    && salt.starts_with(DYNAMO_CACHE_SALT_PREFIX))
        })
        && let ExtraKey::CacheSalt(salt) = first.remove(at)
    {
        namespace = Some(salt[DYNAMO_CACHE_SALT_PREFIX.len()..].to_owned());
    }
    if let Some(salt) = stored.cache_salt.as_deref().filter(|s| !s.is_empty())
        && stored.parent_block_hash.is_none()
        && let Some(first) = keys.first_mut()
    {
        let salt = ExtraKey::CacheSalt(salt.to_owned());
        if !first.contains(&salt) {
            first.push(salt);
        }
    }
    Ok((keys, namespace))
}

/// One block's items, in vLLM's order: the LoRA name (when the event has one), multimodal
/// pairs, the cache salt, prompt-embeddings digests (`to_event_extra_keys`).
fn one_block_keys(items: &[RawExtraKey], lora_name: Option<&str>) -> Result<Vec<ExtraKey>, String> {
    let mut lora = lora_name.filter(|name| !name.is_empty());
    let mut salt_seen = false;
    let mut keys = Vec::with_capacity(items.len());
    for item in items {
        match item {
            RawExtraKey::Text(text) => {
                if let Some(name) = lora.take() {
                    if text != name {
                        return Err(format!(
                            "the first bare string {text:?} is not the event's lora_name {name:?}"
                        ));
                    }
                } else if !salt_seen {
                    salt_seen = true;
                    keys.push(ExtraKey::CacheSalt(text.clone()));
                } else {
                    return Err(format!(
                        "a second bare string {text:?} after the cache salt (no such key)"
                    ));
                }
            }
            RawExtraKey::Multimodal(identifier, offset) => keys.push(ExtraKey::Multimodal {
                identifier: identifier.clone(),
                offset: *offset,
            }),
            RawExtraKey::Bytes(digest) => keys.push(ExtraKey::PromptEmbeds(digest.clone())),
            RawExtraKey::Unknown(what) => {
                return Err(format!("{what} is not a key vLLM publishes"));
            }
        }
    }
    Ok(keys)
}
