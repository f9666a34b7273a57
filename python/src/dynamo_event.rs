//! Dynamo's `KvCacheEvent` JSON, as `dynamo._core.RadixTree.apply_event` takes it.
//!
//! [`parse`] is the only entry point. `serde_json` is the authority on what the bytes mean; in
//! front of it sits [`fast`], a scanner for the shape the publishers write (known keys, plain
//! unsigned integers, no escapes), which answers only when it is sure and otherwise hands the
//! bytes to `serde_json`. Parsing was half of `apply_event`'s time on Dynamo's workload, and
//! almost all of that went to `serde_json`'s general machinery for keys and numbers; the scanner
//! reads the same events about three times as fast. The tests below hold it to one rule: whenever
//! it answers, `serde_json` gives the same event.

mod fast;

use flash_indexer::{Block, EventKind, LocalHash, SeqHash};
use serde::Deserialize;

/// One event of a worker, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DynamoEvent {
    pub event_id: u64,
    pub dp_rank: u32,
    pub data: EventKind,
}

/// Decodes one event; the error is `serde_json`'s, for bytes it refuses.
pub(crate) fn parse(bytes: &[u8]) -> Result<DynamoEvent, serde_json::Error> {
    match fast::parse(bytes) {
        Some(event) => Ok(event),
        None => serde_json::from_slice::<KvCacheEvent>(bytes).map(DynamoEvent::from),
    }
}

/// The serde form of Dynamo's `KvCacheEvent` (field names and defaults as in
/// `dynamo-kv-router` 1.6; fields it does not use are ignored, as Dynamo's own tree ignores them).
#[derive(Deserialize)]
struct KvCacheEvent {
    #[serde(default)]
    event_id: u64,
    data: KvCacheEventData,
    #[serde(default)]
    dp_rank: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum KvCacheEventData {
    Stored(StoreData),
    Removed(RemoveData),
    Cleared,
}

#[derive(Deserialize)]
struct StoreData {
    parent_hash: Option<u64>,
    blocks: Vec<StoredBlock>,
}

#[derive(Deserialize)]
struct StoredBlock {
    block_hash: u64,
    tokens_hash: u64,
}

#[derive(Deserialize)]
struct RemoveData {
    block_hashes: Vec<u64>,
}

impl From<KvCacheEvent> for DynamoEvent {
    fn from(event: KvCacheEvent) -> Self {
        let data = match event.data {
            KvCacheEventData::Stored(stored) => EventKind::Stored {
                parent: stored.parent_hash.map(SeqHash),
                blocks: stored
                    .blocks
                    .iter()
                    .map(|b| Block::new(LocalHash(b.tokens_hash), SeqHash(b.block_hash)))
                    .collect(),
            },
            KvCacheEventData::Removed(removed) => EventKind::Removed {
                blocks: removed.block_hashes.into_iter().map(SeqHash).collect(),
            },
            KvCacheEventData::Cleared => EventKind::Cleared,
        };
        Self {
            event_id: event.event_id,
            dp_rank: event.dp_rank,
            data,
        }
    }
}

#[cfg(test)]
mod tests;
