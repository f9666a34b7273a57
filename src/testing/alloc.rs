//! A counting global allocator, for tests and benches that show memory follows the live state.

use crate::sync::atomic::{AtomicIsize, Ordering};
use std::alloc::{GlobalAlloc, Layout, System};

/// The system allocator, counting live heap bytes. Install it in a test or bench binary:
///
/// ```ignore
/// #[global_allocator]
/// static ALLOC: flash_indexer::testing::CountingAlloc = flash_indexer::testing::CountingAlloc;
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAlloc;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

impl CountingAlloc {
    /// Heap bytes allocated and not yet freed, process-wide.
    pub fn live_bytes() -> isize {
        LIVE.load(Ordering::Relaxed)
    }

    /// The most live bytes seen since the last [`reset_peak`](Self::reset_peak).
    pub fn peak_bytes() -> isize {
        PEAK.load(Ordering::Relaxed)
    }

    /// Starts a new peak measurement from the current live bytes.
    pub fn reset_peak() {
        PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    fn grew(by: isize) {
        let live = LIVE.fetch_add(by, Ordering::Relaxed) + by;
        PEAK.fetch_max(live, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call to the system allocator unchanged; it only counts sizes.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::grew(layout.size() as isize);
        // SAFETY: the caller's contract is passed through unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: the caller's contract is passed through unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Runs deferred frees (crossbeam-epoch's, for the trees, their checkpoint indexes and the
/// worker slots) as far as this thread can push them, so that a memory reading is not inflated
/// by garbage that is merely waiting for an epoch to pass.
pub fn collect_garbage() {
    flush_epochs(64);
}

/// Flushes crossbeam-epoch `rounds` times, each round with a no-op deferred so that it always
/// seals a bag: crossbeam frees a popped queue node through the next bag, so flushing an empty
/// bag leaves the queue one node longer or shorter at random, and the heap's size after the
/// call with it. Each round advances the epoch once and frees up to 8 expired bags. What this
/// thread's tree writes retired is handed over first, and the tree's objects whose grace period
/// passed are freed last (writers free those, never a query: `src/layouts/tree/graveyard.rs`).
pub(crate) fn flush_epochs(rounds: usize) {
    #[cfg(any(feature = "positional", feature = "array", feature = "radix"))]
    crate::layouts::tree::graveyard::flush(&crossbeam_epoch::pin());
    for _ in 0..rounds {
        let guard = crossbeam_epoch::pin();
        guard.defer(|| ());
        guard.flush();
    }
    #[cfg(all(
        not(loom),
        any(feature = "positional", feature = "array", feature = "radix")
    ))]
    crate::layouts::tree::graveyard::free_buried();
}
