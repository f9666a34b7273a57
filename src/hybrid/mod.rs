//! Models with several KV-cache groups (hybrid attention): the prefix every group can supply.
//!
//! Models that mix kinds of attention (gpt-oss: full and sliding-window layers; Gemma 3: five
//! sliding-window layers to one full; Llama 4: chunked local attention; Qwen3-Next: full and
//! linear-attention / Mamba layers) keep one KV-cache group per kind, and vLLM publishes each
//! group's events with its `group_idx`. A prefix is reusable only if every group can supply it,
//! by the kind's own rule: [the contract](crate::docs::contract#groups) states the rules, the
//! transcription of vLLM 0.33's `find_longest_cache_hit`.
//!
//! - [`ModelGroups`]: the groups of a model, each a [`GroupSpec`] (a [`GroupKind`] and a block
//!   size), validated.
//! - [`HybridIndex`]: what a hybrid index does: [`apply`](HybridIndex::apply) takes the event's
//!   group.
//! - [`NaiveHybridIndexer`]: the reference, the rules as they read.
//! - [`HybridIndexer`]: any layout for the full-attention group, the other groups' blocks by
//!   path, one walk per query.
//!
//! ```
//! use flash_indexer::hybrid::{GroupKind, GroupSpec, HybridIndex, HybridIndexer, ModelGroups};
//! use flash_indexer::{hash, Block, DefaultIndexer, Event, SeqHash, Worker};
//!
//! // gpt-oss-like: full attention (group 0), a window of 32 tokens (group 1), blocks of 16.
//! let model = ModelGroups::new(vec![
//!     GroupSpec::new(GroupKind::FullAttention, 16),
//!     GroupSpec::new(GroupKind::SlidingWindow { window: 32 }, 16),
//! ])
//! .unwrap();
//! let index: HybridIndexer<DefaultIndexer> = HybridIndexer::new(model);
//! let tokens: Vec<u32> = (0..96).collect();
//! let locals = hash::local_hashes(&tokens, 16);
//! let blocks: Vec<Block> =
//!     locals.iter().zip(0u64..).map(|(&l, i)| Block::new(l, SeqHash(i + 1))).collect();
//! let w = Worker::new(3, 0);
//! index.apply(0, &Event::stored(w, 0, None, blocks.clone())).unwrap();
//! index.apply(1, &Event::stored(w, 1, None, blocks.clone())).unwrap();
//! // The window group evicts what slid out of the window: the hit stays whole.
//! index.apply(1, &Event::removed(w, 2, vec![SeqHash(1), SeqHash(2), SeqHash(3)])).unwrap();
//! assert_eq!(index.find_matches(&locals).get(w), Some(6));
//! // It evicts the last block too: the longest prefix ending in a whole window is 5 blocks.
//! index.apply(1, &Event::removed(w, 3, vec![SeqHash(6)])).unwrap();
//! assert_eq!(index.find_matches(&locals).get(w), Some(5));
//! ```

mod index;
mod model;
mod naive;
mod rules;
mod slots_by_key;
mod table;

pub use index::HybridIndexer;
pub use model::{GroupKind, GroupSpec, GroupsError, ModelGroups};
pub use naive::NaiveHybridIndexer;

use crate::error::EventError;
use crate::scores::OverlapScores;
use crate::types::{Block, Event, LocalHash, SeqHash, Worker};

/// An index of a model with several KV-cache groups (see [the
/// contract](crate::docs::contract#groups)).
///
/// Every implementation gives exactly the answers of [`NaiveHybridIndexer`]. The concurrency
/// rules are [`KvIndex`](crate::KvIndex)'s, with the groups of one worker as one worker.
pub trait HybridIndex: Send + Sync {
    /// The model's groups.
    fn model(&self) -> &ModelGroups;

    /// Applies one event of group `group` (vLLM's `group_idx`). Nothing changes on `Err`, except
    /// for [`EventError::UnknownBlocks`], a warning after the held blocks were removed. A
    /// `Cleared` event clears every group of the worker: an engine drops its whole cache.
    fn apply(&self, group: u32, event: &Event) -> Result<(), EventError>;

    /// Applies `events`, each with its group, in order, with the same effect as
    /// [`apply`](Self::apply) on each (an engine's batch, say); returns each event's result, in
    /// order. An index may publish a worker's consecutive events together, so
    /// that changes a later event of the batch takes back (a sliding window's stores, then its
    /// removals of the blocks that left the window) are never published. A query racing a batch
    /// may see some of it and not the rest.
    fn apply_batch(&self, events: &[(u32, Event)]) -> Vec<Result<(), EventError>> {
        (events.iter())
            .map(|(group, event)| self.apply(*group, event))
            .collect()
    }

    /// How long a prefix of `query` each worker's groups can all supply, by the rules of the
    /// model's kinds. Workers with 0 are absent.
    fn find_matches(&self, query: &[LocalHash]) -> OverlapScores;

    /// Drops every worker with server id `id`, all dp ranks, every group.
    fn remove_worker(&self, id: u64);

    /// Drops one worker (that id and that dp rank only), every group.
    fn remove_worker_dp_rank(&self, worker: Worker);

    /// Blocks `worker`'s group `group` holds, reachable or not.
    fn block_count(&self, worker: Worker, group: u32) -> usize;

    /// Events, each with its group, that applied in order to an empty index of the same model
    /// give identical `find_matches` results for every query: what a snapshot keeps. The chain
    /// group's held-but-unreachable blocks may be left out. Another group's stores name only
    /// sequence hashes (it holds blocks by them): their parents are `None` and their local
    /// hashes mean nothing.
    fn dump(&self) -> Vec<(u32, Event)>;
}

/// The stores of `seqs`, held by `group` of `worker`, as [`HybridIndex::dump`] gives another
/// group's blocks.
fn dump_other(worker: Worker, group: u32, seqs: impl IntoIterator<Item = SeqHash>) -> (u32, Event) {
    let blocks = seqs
        .into_iter()
        .map(|seq| Block::new(LocalHash(0), seq))
        .collect();
    (group, Event::stored(worker, 0, None, blocks))
}

/// `Err` unless `group` is one of `model`'s.
fn check_group(model: &ModelGroups, group: u32) -> Result<(), EventError> {
    if (group as usize) < model.len() {
        Ok(())
    } else {
        Err(EventError::UnknownGroup {
            group,
            groups: model.len() as u32,
        })
    }
}
