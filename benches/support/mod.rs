//! Shared by the benches: a counting allocator and the indexes to compare.
#![allow(dead_code)] // Each bench uses part of it.

use flash_indexer::NaiveIndexer;
use flash_indexer::layouts::{self, IndexFactory};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// Counts live heap bytes, so that a bench can report bytes per held (worker, block) pair.
pub struct CountingAlloc;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours, passed through.
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
        // SAFETY: same contract as ours, passed through.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Live heap bytes right now.
pub fn live_bytes() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Every primary layout of this build, then the reference when `with_naive`.
pub fn indexes(with_naive: bool) -> Vec<IndexFactory> {
    let mut out: Vec<IndexFactory> = layouts::enabled()
        .into_iter()
        .filter(|f| f.primary)
        .collect();
    if with_naive {
        out.push(IndexFactory {
            name: "naive",
            make: || Box::new(NaiveIndexer::new()),
            primary: true,
        });
    }
    out
}

/// A small deterministic generator (splitmix64), so that every run measures the same data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
