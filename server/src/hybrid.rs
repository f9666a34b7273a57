//! Models with several KV-cache groups (`groups` in a model's configuration): each tier's index
//! is a [`HybridIndexer`] over the server's layout, which the engines' subscribers feed with
//! every event's group, and which answers the server's queries by vLLM's reuse rules.
//!
//! The tier keeps its writer pool, so that queries, worker removals and the metrics reach a
//! hybrid tier as they reach any other; only events do not pass through it (an event without
//! its group cannot be placed), and [`HybridTier::apply`] refuses them.

use std::sync::Arc;

use flash_indexer::hybrid::{HybridIndex, HybridIndexer, ModelGroups};
use flash_indexer::{
    ArrayIndexer, Event, EventError, Indexer, KvIndex, Layout, LocalHash, OverlapScores,
    PositionalIndexer, RadixIndexer, SeqHash, Worker,
};

use crate::config::LayoutChoice;
use crate::service::ServedIndex;

/// One tier of a hybrid model, as the server's pools and queries see it.
pub struct HybridTier<L: Layout> {
    index: Arc<HybridIndexer<Indexer<L>>>,
}

/// A hybrid tier of `model`'s groups over `layout`: the tier's index, and the same index as the
/// subscribers apply each event with its group.
pub fn new_hybrid_tier(
    layout: LayoutChoice,
    model: &ModelGroups,
) -> (Arc<dyn ServedIndex>, Arc<dyn HybridIndex>) {
    fn tier<L: Layout + Default>(
        model: &ModelGroups,
    ) -> (Arc<dyn ServedIndex>, Arc<dyn HybridIndex>) {
        let index = Arc::new(HybridIndexer::<Indexer<L>>::new(model.clone()));
        (
            Arc::new(HybridTier {
                index: index.clone(),
            }),
            index,
        )
    }
    match layout {
        LayoutChoice::Radix => tier::<<RadixIndexer as Served>::Layout>(model),
        LayoutChoice::Positional => tier::<<PositionalIndexer as Served>::Layout>(model),
        LayoutChoice::Array => tier::<<ArrayIndexer as Served>::Layout>(model),
    }
}

/// The layout of one of the crate's indexer aliases.
trait Served {
    type Layout: Layout + Default;
}

impl<L: Layout + Default> Served for Indexer<L> {
    type Layout = L;
}

impl<L: Layout> KvIndex for HybridTier<L> {
    /// Refuses every event: a hybrid tier takes each event with its group, from its engines'
    /// subscribers. (Engines whose topics name the model are refused before they get here.)
    fn apply(&self, _event: &Event) -> Result<(), EventError> {
        let groups = self.index.model().len() as u32;
        Err(EventError::UnknownGroup {
            group: u32::MAX,
            groups,
        })
    }

    fn find_matches(&self, query: &[LocalHash]) -> OverlapScores {
        self.index.find_matches(query)
    }

    fn remove_worker(&self, id: u64) {
        self.index.remove_worker(id);
    }

    fn remove_worker_dp_rank(&self, worker: Worker) {
        self.index.remove_worker_dp_rank(worker);
    }

    /// Blocks of the full-attention group.
    fn block_count(&self, worker: Worker) -> usize {
        self.index
            .block_count(worker, self.index.model().chain_group())
    }

    /// Whether the full-attention group holds `seq`.
    fn holds(&self, worker: Worker, seq: SeqHash) -> bool {
        self.index.chain().holds(worker, seq)
    }

    fn block_counts(&self) -> Vec<(Worker, usize)> {
        self.index.chain().block_counts()
    }

    /// Nothing: a dump of the full-attention group alone would answer other queries than the
    /// groups together (the settings refuse snapshots and peers for hybrid models).
    fn dump(&self) -> Vec<Event> {
        Vec::new()
    }
}

impl<L: Layout> ServedIndex for HybridTier<L> {
    /// Entries of the full-attention group's layout.
    fn entries(&self) -> usize {
        self.index.chain().entries()
    }

    fn worker_count(&self) -> usize {
        self.index.chain().worker_count()
    }
}
