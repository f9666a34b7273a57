//! Worker interning: every live [`Worker`] gets a dense `u32` slot, so layout entries hold small
//! sorted slot arrays instead of 12-byte workers, and a query maps slots back to workers by
//! indexing an array (no hashing per scored worker).
//!
//! A slot is reused only after every query that could have seen it has finished: a retired
//! worker's slot goes back to the free list through `crossbeam-epoch`, and queries stay pinned
//! while they read slots. Without that, a query that saw worker A's slot at shallow positions and
//! the same slot, now worker B's, deeper would credit B with A's depth.

use super::held::HeldBlocks;
use super::layout::Layout;
use super::slot_set::slots_of;
use super::slots::Slot;
use crate::scores::OverlapScores;
use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use crate::sync::{Arc, Mutex, lock};
use crate::types::Worker;
use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::sync::OnceLock; // sync-shim: loom has no OnceLock; segments are written once

/// Slots per segment of the name table grow geometrically from this.
#[cfg(not(loom))]
const FIRST_SEGMENT: usize = 1024;
/// Small under loom, so that models do not create thousands of modelled atomics.
#[cfg(loom)]
const FIRST_SEGMENT: usize = 4;
/// Enough segments for `u32::MAX` slots.
const SEGMENTS: usize = 33 - FIRST_SEGMENT.trailing_zeros() as usize;

/// One worker's state, behind its own lock so that events of different workers apply in
/// parallel. `None` once the worker was retired (emptied, cleared or removed): a writer that
/// finds it retired looks the worker up again.
pub(crate) struct WorkerCell<L: Layout> {
    pub(crate) slot: Slot,
    pub(crate) state: Mutex<Option<HeldBlocks<L>>>,
}

/// One slot's worker, as an id and a dp rank readable without locks.
type Name = (AtomicU64, AtomicU32);

/// A segment of `len` unnamed slots.
fn segment_of(len: usize) -> Box<[Name]> {
    (0..len)
        .map(|_| (AtomicU64::new(0), AtomicU32::new(0)))
        .collect()
}

/// slot -> worker, readable without locks.
pub(crate) struct Names {
    /// The first segment, made with the table: most indexes never name more workers, and
    /// their lookups skip the segment search.
    first: Box<[Name]>,
    /// The others, made on first use (`segments[0]` stays empty).
    segments: [OnceLock<Box<[Name]>>; SEGMENTS],
}

impl Names {
    #[inline]
    fn locate(slot: Slot) -> (usize, usize) {
        let block = slot as usize / FIRST_SEGMENT + 1;
        let segment = (usize::BITS - 1 - block.leading_zeros()) as usize;
        (
            segment,
            slot as usize - FIRST_SEGMENT * ((1 << segment) - 1),
        )
    }

    /// The cells of the 64 slots of word `word`, when one segment has them all: always, but
    /// under loom, whose segments are shorter than a word (the others' bounds are multiples of
    /// `FIRST_SEGMENT`, itself a multiple of 64).
    #[inline]
    fn word_cells(&self, word: u32) -> Option<&[Name]> {
        let first = word as usize * 64;
        if let Some(cells) = self.first.get(first..first + 64) {
            return Some(cells);
        }
        if first < FIRST_SEGMENT {
            return None; // The word runs past the first segment.
        }
        let (segment, offset) = Self::locate(first as Slot);
        self.segment(segment).get(offset..offset + 64)
    }

    /// The cell of `slot`, its segment made on first use.
    #[inline]
    fn cell(&self, slot: Slot) -> &Name {
        if let Some(name) = self.first.get(slot as usize) {
            return name;
        }
        let (segment, offset) = Self::locate(slot);
        &self.segment(segment)[offset]
    }

    /// Segment `segment`, made on first use.
    #[inline]
    fn segment(&self, segment: usize) -> &[Name] {
        // A slot read from a layout was named first, so its segment exists: one load.
        match self.segments[segment].get() {
            Some(seg) => seg,
            None => self.make_segment(segment),
        }
    }

    #[cold]
    fn make_segment(&self, segment: usize) -> &[Name] {
        self.segments[segment].get_or_init(|| segment_of(FIRST_SEGMENT << segment))
    }

    fn set(&self, slot: Slot, worker: Worker) {
        let (id, rank) = self.cell(slot);
        // Relaxed is enough: a reader learns of the slot only from a layout entry, which the
        // layout publishes with release semantics after these stores.
        id.store(worker.id, Ordering::Relaxed);
        rank.store(worker.dp_rank, Ordering::Relaxed);
    }

    /// Pins the epoch, so that no slot read from a layout from now on is reused (and renamed)
    /// before the returned guard is dropped: names can only be read through it.
    pub(crate) fn pin(&self) -> PinnedNames<'_> {
        PinnedNames {
            names: self,
            _epoch: crossbeam_epoch::pin(),
        }
    }
}

impl std::fmt::Debug for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let segments = 1 + self.segments.iter().filter(|s| s.get().is_some()).count();
        f.debug_struct("Names")
            .field("segments", &segments)
            .finish()
    }
}

/// Slot names under a pinned epoch: a slot read from a layout while this guard lives names the
/// same worker until the guard is dropped, because retired slots return to the free list only
/// through the epoch.
pub(crate) struct PinnedNames<'a> {
    names: &'a Names,
    _epoch: crossbeam_epoch::Guard,
}

impl PinnedNames<'_> {
    /// The worker `slot` names.
    #[inline]
    pub(crate) fn name(&self, slot: Slot) -> Worker {
        let (id, rank) = self.names.cell(slot);
        Worker::new(id.load(Ordering::Relaxed), rank.load(Ordering::Relaxed))
    }

    /// Scores at `depth` (at least 1) the workers of the slots `bits` of word `word`: their
    /// names read from one run of cells, room made once.
    #[inline]
    pub(crate) fn score_word(&self, scores: &mut OverlapScores, word: u32, bits: u64, depth: u32) {
        scores.reserve(bits.count_ones() as usize);
        let Some(cells) = self.names.word_cells(word) else {
            for slot in slots_of(word, bits) {
                scores.push(self.name(slot), depth);
            }
            return;
        };
        let mut rest = bits;
        while rest != 0 {
            let (id, rank) = &cells[rest.trailing_zeros() as usize % 64];
            rest &= rest - 1;
            scores.push(
                Worker::new(id.load(Ordering::Relaxed), rank.load(Ordering::Relaxed)),
                depth,
            );
        }
    }
}

/// Slots that are free to hand out again.
#[derive(Default)]
struct FreeSlots {
    free: Vec<Slot>,
    next: Slot,
}

/// Shards of the cell table: a worker's event locks only its shard, for one lookup.
#[cfg(not(loom))]
const SHARDS: usize = 64;
/// Two under loom, so that models can still see two workers share a shard.
#[cfg(loom)]
const SHARDS: usize = 2;

/// One shard's live workers: dp ranks and cells by worker id, so that `remove_worker(id)` finds
/// an id's ranks without looking at anybody else.
type Shard<L> = HashMap<u64, Vec<(u32, Arc<WorkerCell<L>>)>, RandomState>;

/// The live workers, their cells and slots.
///
/// Every event looks its worker up here, and the set of workers changes rarely (a worker's first
/// event, its last). The cells are sharded by worker id under small locks, each taken for one
/// hash lookup: events of different workers do not wait on one global lock, and a worker's dp
/// ranks sit together, so removing a worker costs its own ranks, not a scan of the fleet. (A
/// snapshot swapped with `arc-swap` would make lookups lock-free too, but copies the whole table
/// on every new worker: quadratic when 100,000 workers arrive.)
pub(crate) struct WorkerTable<L: Layout> {
    shards: Box<[Mutex<Shard<L>>]>,
    pub(crate) names: Names,
    free: Arc<Mutex<FreeSlots>>,
}

impl<L: Layout> Default for WorkerTable<L> {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            names: Names {
                first: segment_of(FIRST_SEGMENT),
                segments: std::array::from_fn(|_| OnceLock::new()),
            },
            free: Arc::new(Mutex::new(FreeSlots::default())),
        }
    }
}

impl<L: Layout> WorkerTable<L> {
    fn shard(&self, id: u64) -> &Mutex<Shard<L>> {
        &self.shards[(crate::mix::splitmix64(id) % SHARDS as u64) as usize]
    }

    /// The cell of `worker`, created (with a fresh slot) when the worker is new.
    pub(crate) fn cell_or_create(&self, worker: Worker) -> Arc<WorkerCell<L>> {
        let mut shard = lock(self.shard(worker.id));
        let ranks = shard.entry(worker.id).or_default();
        if let Some((_, cell)) = ranks.iter().find(|(r, _)| *r == worker.dp_rank) {
            return cell.clone();
        }
        let slot = {
            let mut free = lock(&self.free);
            free.free.pop().unwrap_or_else(|| {
                free.next += 1;
                free.next - 1
            })
        };
        self.names.set(slot, worker);
        let cell = Arc::new(WorkerCell {
            slot,
            state: Mutex::new(Some(HeldBlocks::new(slot))),
        });
        ranks.push((worker.dp_rank, cell.clone()));
        cell
    }

    /// The cell of `worker`, if it is live.
    pub(crate) fn cell(&self, worker: Worker) -> Option<Arc<WorkerCell<L>>> {
        let shard = lock(self.shard(worker.id));
        let ranks = shard.get(&worker.id)?;
        let (_, cell) = ranks.iter().find(|(r, _)| *r == worker.dp_rank)?;
        Some(cell.clone())
    }

    /// The live dp ranks of worker `id`, with their cells, by rank.
    pub(crate) fn cells_of(&self, id: u64) -> Vec<(Worker, Arc<WorkerCell<L>>)> {
        let shard = lock(self.shard(id));
        let mut out: Vec<_> = shard.get(&id).map_or_else(Vec::new, |ranks| {
            ranks
                .iter()
                .map(|(rank, cell)| (Worker::new(id, *rank), cell.clone()))
                .collect()
        });
        out.sort_unstable_by_key(|(w, _)| *w);
        out
    }

    /// Every live worker with its cell, in `Worker` order.
    pub(crate) fn all_cells(&self) -> Vec<(Worker, Arc<WorkerCell<L>>)> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            for (id, ranks) in lock(shard).iter() {
                out.extend(
                    ranks
                        .iter()
                        .map(|(rank, cell)| (Worker::new(*id, *rank), cell.clone())),
                );
            }
        }
        out.sort_unstable_by_key(|(w, _)| *w);
        out
    }

    /// Retires `worker`'s cell. The caller holds the cell's state lock, has set the state to
    /// `None` and removed every layout entry of the slot. The slot is freed once no query that
    /// started before this call can still be reading it.
    pub(crate) fn retire(&self, worker: Worker, cell: &Arc<WorkerCell<L>>) {
        let mut shard = lock(self.shard(worker.id));
        if let Some(ranks) = shard.get_mut(&worker.id) {
            ranks.retain(|(rank, c)| *rank != worker.dp_rank || !Arc::ptr_eq(c, cell));
            if ranks.is_empty() {
                shard.remove(&worker.id);
                // A fleet that shrinks does not keep its largest table.
                if let Some(to) = crate::room::shrunk(shard.len(), shard.capacity()) {
                    shard.shrink_to(to);
                }
            }
        }
        drop(shard);
        let free = self.free.clone();
        let slot = cell.slot;
        let guard = crossbeam_epoch::pin();
        guard.defer(move || lock(&free).free.push(slot));
    }

    /// Live workers.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| lock(shard).values().map(Vec::len).sum::<usize>())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::{FIRST_SEGMENT, Names, OnceLock, segment_of};
    use crate::scores::OverlapScores;
    use crate::types::Worker;

    /// A word's workers are scored from the word's own cells, in the first segment and beyond.
    #[test]
    fn words_score_the_workers_their_slots_name() {
        let names = Names {
            first: segment_of(FIRST_SEGMENT),
            segments: std::array::from_fn(|_| OnceLock::new()),
        };
        let name = |slot: u32| Worker::new(u64::from(slot) * 7 + 1, slot % 3);
        for slot in 0..3 * FIRST_SEGMENT as u32 + 200 {
            names.set(slot, name(slot));
        }
        let pinned = names.pin();
        for word in [0, 15, 16, 17, 47, 48, 50] {
            let bits = 0x8000_0000_0000_0001 | (0x1234_5678 << (word % 7));
            let mut scores = OverlapScores::new();
            pinned.score_word(&mut scores, word, bits, 9);
            let want: Vec<(Worker, u32)> = (0..64)
                .filter(|i| bits >> i & 1 == 1)
                .map(|i| (name(word * 64 + i), 9))
                .collect();
            let mut got = scores.to_sorted_vec();
            got.sort_by_key(|(w, _)| w.id);
            assert_eq!(got, want, "word {word}");
        }
    }

    #[test]
    fn segments_cover_slots_without_gaps() {
        assert_eq!(Names::locate(0), (0, 0));
        assert_eq!(Names::locate(1023), (0, 1023));
        assert_eq!(Names::locate(1024), (1, 0));
        assert_eq!(Names::locate(3071), (1, 2047));
        assert_eq!(Names::locate(3072), (2, 0));
        let (segment, offset) = Names::locate(u32::MAX);
        assert!(segment < super::SEGMENTS && offset < super::FIRST_SEGMENT << segment);
    }
}
