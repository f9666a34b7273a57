//! The generic core: [`Indexer<L>`] over any storage [`Layout`].
//!
//! The core knows *what* the index means; a layout knows only *where* entries live. The core
//! owns per-worker state and validation (`held.rs`, so every layout rejects exactly the same
//! inputs), canonical hashes (`canon.rs`), worker interning (`worker_table.rs`) and the search
//! (`search.rs`).

pub(crate) mod canon;
mod child_list;
mod cover;
mod gf64;
mod handles;
mod held;
mod kids;
pub(crate) mod layout;
mod places;
mod run;
pub(crate) mod run_keys;
pub(crate) mod search;
mod slot_set;
mod slots;
mod worker_table;

pub use layout::Layout;
pub use search::MAX_JUMP;
// What layouts implement the seam with; each feature combination uses a different subset.
#[allow(unused_imports)]
pub(crate) use {
    canon::Key,
    cover::Cover,
    layout::QueryCtx,
    layout::seam::{Checkpointed, JumpSearch, Search, Storage, Stretch, Tree, Walk},
    run_keys::RunKeys,
    slot_set::SlotSet,
    slots::Slot,
};

use crate::error::EventError;
use crate::index::KvIndex;
use crate::scores::OverlapScores;
use crate::sync::{Arc, lock};
use crate::types::{Event, EventKindView, EventView, LocalHash, SeqHash, Worker};
use canon::Canon;
use held::HeldBlocks;
use worker_table::{WorkerCell, WorkerTable};

/// The jump of the search when none is configured, in positions.
///
/// The jump search lands on checkpoints only (every 128 positions in the positional and array
/// layouts), so a jump is rounded up to whole strides: 32 means one stride, after which the
/// search gallops (doubling) while nobody drops and the path goes through several nodes. The
/// radix layout walks and ignores it.
pub const DEFAULT_JUMP: u32 = 32;

/// An exact index over storage layout `L`.
///
/// `PositionalIndexer` and the other layouts' indexers are aliases of this type.
pub struct Indexer<L: Layout> {
    layout: L,
    workers: WorkerTable<L>,
    canon: Canon,
    jump: u32,
}

impl<L: Layout> Default for Indexer<L> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: Layout> core::fmt::Debug for Indexer<L> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Indexer")
            .field("layout", &core::any::type_name::<L>())
            .field("workers", &self.workers.len())
            .field("entries", &self.layout.entries())
            .field("jump", &self.jump)
            .finish()
    }
}

impl<L: Layout> Indexer<L> {
    /// An empty index with the default jump and a random canonical-hash key.
    pub fn new() -> Self {
        Self::with_canon(Canon::random(), DEFAULT_JUMP)
    }

    /// An empty index whose search jumps `jump` positions at a time (clamped to
    /// `1..=`[`MAX_JUMP`]).
    pub fn with_jump(jump: u32) -> Self {
        Self::with_canon(Canon::random(), jump)
    }

    /// An empty index with a fixed canonical-hash key (and the default jump), for reproducible
    /// experiments.
    pub fn with_seed(seed: u64) -> Self {
        Self::with_canon(Canon::new(seed), DEFAULT_JUMP)
    }

    /// The same index with its search jumping `jump` positions at a time (clamped to
    /// `1..=`[`MAX_JUMP`]).
    ///
    /// ```
    /// use flash_indexer::PositionalIndexer;
    ///
    /// assert_eq!(PositionalIndexer::with_seed(7).jumping(8).jump(), 8);
    /// ```
    pub fn jumping(mut self, jump: u32) -> Self {
        self.jump = jump.clamp(1, MAX_JUMP);
        self
    }

    fn with_canon(canon: Canon, jump: u32) -> Self {
        Self {
            layout: L::default(),
            workers: WorkerTable::default(),
            canon,
            jump: jump.clamp(1, MAX_JUMP),
        }
    }

    /// The search's jump.
    pub fn jump(&self) -> u32 {
        self.jump
    }

    /// Entries of the layout (map entries, or tree nodes): what memory follows.
    pub fn entries(&self) -> usize {
        self.layout.entries()
    }

    /// Live workers (workers holding at least one block).
    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// Runs `f` on `worker`'s state under its lock, retrying if the cell was retired meanwhile.
    /// Retires the worker when it ends up holding nothing.
    fn with_worker<T>(
        &self,
        worker: Worker,
        mut f: impl FnMut(&mut HeldBlocks<L>, &L::Guard<'_>) -> T,
    ) -> T {
        loop {
            let cell = self.workers.cell_or_create(worker);
            if let Some(out) = self.with_cell(worker, &cell, &mut f) {
                return out;
            }
            // Retired between lookup and lock: look it up again.
        }
    }

    /// Runs `f` on the state of `worker`'s `cell` under its lock; `None` when the cell was
    /// retired. Retires the worker when it ends up holding nothing.
    fn with_cell<T>(
        &self,
        worker: Worker,
        cell: &Arc<WorkerCell<L>>,
        f: impl FnOnce(&mut HeldBlocks<L>, &L::Guard<'_>) -> T,
    ) -> Option<T> {
        let mut state = lock(&cell.state);
        let st = state.as_mut()?;
        let guard = self.layout.guard();
        let out = f(st, &guard);
        if st.is_empty() {
            *state = None;
            self.workers.retire(worker, cell);
        }
        Some(out)
    }

    /// Clears and retires one worker's cell.
    fn drop_worker(&self, worker: Worker, cell: &Arc<WorkerCell<L>>) {
        let mut state = lock(&cell.state);
        if let Some(st) = state.as_mut() {
            st.clear(&self.layout, &self.layout.guard(), &self.canon);
            *state = None;
            self.workers.retire(worker, cell);
        }
    }
}

impl<L: Layout> KvIndex for Indexer<L> {
    fn apply(&self, event: &Event) -> Result<(), EventError> {
        self.apply_view(event.view())
    }

    fn apply_view(&self, event: EventView<'_>) -> Result<(), EventError> {
        match event.kind {
            EventKindView::Stored { parent, blocks } => {
                if blocks.is_empty() {
                    return Ok(());
                }
                self.with_worker(event.worker, |st, guard| {
                    st.store(&self.layout, guard, &self.canon, parent, blocks)
                })
            }
            EventKindView::Removed { blocks } => {
                // A worker with no cell (or one retired meanwhile) holds nothing.
                let removed = self.workers.cell(event.worker).and_then(|cell| {
                    self.with_cell(event.worker, &cell, |st, guard| {
                        st.remove(&self.layout, guard, &self.canon, blocks)
                    })
                });
                match removed {
                    Some(out) => out,
                    None if blocks.is_empty() => Ok(()),
                    None => Err(EventError::UnknownBlocks {
                        missing: blocks.to_vec(),
                    }),
                }
            }
            EventKindView::Cleared => {
                if let Some(cell) = self.workers.cell(event.worker) {
                    self.drop_worker(event.worker, &cell);
                }
                Ok(())
            }
        }
    }

    fn find_matches(&self, query: &[LocalHash]) -> OverlapScores {
        let ctx = QueryCtx {
            names: &self.workers.names,
            canon: &self.canon,
            jump: self.jump,
        };
        L::Search::find(&self.layout, &ctx, query)
    }

    fn remove_worker(&self, id: u64) {
        for (worker, cell) in self.workers.cells_of(id) {
            self.drop_worker(worker, &cell);
        }
    }

    fn remove_worker_dp_rank(&self, worker: Worker) {
        if let Some(cell) = self.workers.cell(worker) {
            self.drop_worker(worker, &cell);
        }
    }

    fn block_count(&self, worker: Worker) -> usize {
        self.workers.cell(worker).map_or(0, |cell| {
            lock(&cell.state)
                .as_ref()
                .map_or(0, HeldBlocks::block_count)
        })
    }

    fn holds(&self, worker: Worker, seq: SeqHash) -> bool {
        self.workers
            .cell(worker)
            .is_some_and(|cell| lock(&cell.state).as_ref().is_some_and(|st| st.holds(seq)))
    }

    fn block_counts(&self) -> Vec<(Worker, usize)> {
        self.workers
            .all_cells()
            .into_iter()
            .map(|(worker, cell)| {
                let count = lock(&cell.state)
                    .as_ref()
                    .map_or(0, HeldBlocks::block_count);
                (worker, count)
            })
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    fn dump(&self) -> Vec<Event> {
        let mut events = Vec::new();
        for (worker, cell) in self.workers.all_cells() {
            if let Some(st) = lock(&cell.state).as_ref() {
                st.dump(&self.layout, &self.layout.guard(), worker, &mut events);
            }
        }
        events
    }

    fn flush_retired(&self) {
        self.layout.flush_retired();
    }
}
