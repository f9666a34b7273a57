//! flash-indexer inside NVIDIA Dynamo's KV router (`dynamo-kv-router` 1.6).
//!
//! [`FlashIndexer`] is a Dynamo backend over any flash-indexer layout:
//!
//! - it implements Dynamo's [`SyncIndexer`], so a Dynamo router that wrote
//!   `ThreadPoolIndexer<ConcurrentRadixTreeCompressed>` writes
//!   `ThreadPoolIndexer<DefaultFlashIndexer>` and everything that takes a `ThreadPoolIndexer`
//!   (its router, its standalone indexer service, its TTL-pruned approximate mode) runs on our
//!   index, with Dynamo's own threads and queues;
//! - it implements [`KvIndexerInterface`] directly, for code that holds one without a thread
//!   pool: events are applied on the caller's thread.
//!
//! KV-cache groups: Dynamo 1.6's router delivers events without a group and drops those it knows
//! to be of another kind than full attention, so this backend indexes a hybrid model's
//! full-attention group as a model of one group, exactly as Dynamo's own indexes do: it
//! over-counts where a sliding window or a Mamba state was evicted. Hybrid models are scored by
//! their rules in `flash_indexer::hybrid`, outside Dynamo's interfaces.
//!
//! ```
//! use dynamo_kv_router::indexer::{KvIndexerInterface, ThreadPoolIndexer};
//! use dynamo_kv_router::protocols::{
//!     ExternalSequenceBlockHash, KvCacheEvent, KvCacheEventData, KvCacheStoreData,
//!     KvCacheStoredBlockData, LocalBlockHash, RouterEvent, WorkerWithDpRank,
//! };
//! use flash_indexer_dynamo::DefaultFlashIndexer;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! // Four writer threads, block size 16: as for Dynamo's default backend.
//! let index = ThreadPoolIndexer::new(DefaultFlashIndexer::new(), 4, 16);
//! let block = |n: u64| KvCacheStoredBlockData {
//!     block_hash: ExternalSequenceBlockHash(100 + n),
//!     tokens_hash: LocalBlockHash(n),
//!     mm_extra_info: None,
//! };
//! let stored = KvCacheEventData::Stored(KvCacheStoreData {
//!     parent_hash: None,
//!     start_position: None,
//!     blocks: vec![block(1), block(2)],
//! });
//! let event = KvCacheEvent { event_id: 1, data: stored, dp_rank: 0 };
//! index.apply_event(RouterEvent::new(7, event)).await;
//! index.flush().await;
//!
//! let query = vec![LocalBlockHash(1), LocalBlockHash(2), LocalBlockHash(3)];
//! let scores = index.find_matches(query).await.unwrap();
//! assert_eq!(scores.scores[&WorkerWithDpRank::new(7, 0)], 2);
//! index.shutdown();
//! # });
//! ```
//!
//! # What differs from Dynamo's backends, and why
//!
//! Answers follow flash-indexer's contract (the `flash_indexer::docs::contract` page), which follows the engines:
//!
//! - A block stored again makes its still-held descendants reachable again, as it does in vLLM's
//!   and SGLang's own prefix caches (their children stay cached when a parent is evicted and
//!   re-computed). Dynamo's trees drop those descendants from lookups.
//! - A worker's block count counts every block it holds, reachable or not; Dynamo's lookup stops
//!   counting blocks it can no longer reach.
//! - A dump is one chain of `Stored` events per worker (replaying it rebuilds the same answers);
//!   Dynamo dumps one event per tree edge.
//!
//! What cannot be answered honestly is refused, never faked: Dynamo's structural anchors
//! (branch-sharded suffix routing) are not supported (`apply_anchor` fails, as for Dynamo's
//! backends without anchors), and neither is the approximate LRU retention of
//! `ThreadPoolIndexer` (its tasks' payloads are private to `dynamo-kv-router`; a request gets
//! Dynamo's "dropped request" error). Dynamo's TTL approximate mode works: it is built from
//! ordinary events, which this backend applies.
//!
//! # Layouts
//!
//! `FlashIndexer<I>` runs over any index of the library: [`DefaultFlashIndexer`] over
//! [`flash_indexer::DefaultIndexer`], which the cargo features pick as in the library
//! (`positional`, `array`, `radix`, `default-array`, `default-radix`).
//!
//! [`SyncIndexer`]: dynamo_kv_router::indexer::SyncIndexer
//! [`KvIndexerInterface`]: dynamo_kv_router::indexer::KvIndexerInterface

#![warn(missing_docs)]

pub mod convert;
mod interface;
mod lane;

use flash_indexer::KvIndex;

/// A Dynamo backend over the flash-indexer index `I` (any layout).
///
/// Construct it with [`FlashIndexer::new`] (the layout's defaults) or [`FlashIndexer::from_index`],
/// then hand it to `ThreadPoolIndexer::new` (or use it directly as a `KvIndexerInterface`).
#[derive(Debug)]
pub struct FlashIndexer<I> {
    index: I,
    /// Block size for `find_matches_for_request` when used directly (the thread pool hashes
    /// tokens itself, with its own block size).
    kv_block_size: u32,
}

/// [`FlashIndexer`] over [`flash_indexer::DefaultIndexer`]: the layout the cargo features pick.
/// (Absent when no layout feature is on; `FlashIndexer<I>` then takes any [`KvIndex`].)
#[cfg(any(feature = "positional", feature = "array", feature = "radix"))]
pub type DefaultFlashIndexer = FlashIndexer<flash_indexer::DefaultIndexer>;

/// Block size a [`FlashIndexer`] hashes request tokens with when none is given (Dynamo's
/// default `kv_block_size`).
pub const DEFAULT_BLOCK_SIZE: u32 = 16;

impl<I: KvIndex + Default> FlashIndexer<I> {
    /// An empty index of layout `I`, hashing request tokens in blocks of
    /// [`DEFAULT_BLOCK_SIZE`].
    pub fn new() -> Self {
        Self::from_index(I::default())
    }
}

impl<I: KvIndex + Default> Default for FlashIndexer<I> {
    fn default() -> Self {
        Self::new()
    }
}

impl<I: KvIndex> FlashIndexer<I> {
    /// A backend over `index` (for a layout built with other settings, e.g. another jump).
    pub fn from_index(index: I) -> Self {
        Self {
            index,
            kv_block_size: DEFAULT_BLOCK_SIZE,
        }
    }

    /// The same backend hashing request tokens in blocks of `kv_block_size` tokens when used
    /// directly as a `KvIndexerInterface` (`ThreadPoolIndexer` uses the block size it is given).
    ///
    /// # Panics
    ///
    /// If `kv_block_size` is 0.
    pub fn with_block_size(mut self, kv_block_size: u32) -> Self {
        assert!(kv_block_size > 0, "a block holds at least one token");
        self.kv_block_size = kv_block_size;
        self
    }

    /// The flash-indexer index inside.
    pub fn index(&self) -> &I {
        &self.index
    }
}
