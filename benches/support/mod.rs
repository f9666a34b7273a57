//! Shared by the benches: a counting allocator and the indexes to compare.
#![allow(dead_code)] // Each bench uses part of it.

use flash_indexer::NaiveIndexer;
use flash_indexer::layouts::{self, IndexFactory};

pub use flash_indexer::testing::CountingAlloc;

/// Live heap bytes right now (with `CountingAlloc` installed).
pub fn live_bytes() -> isize {
    CountingAlloc::live_bytes()
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
