//! Shared by the benches: a counting allocator and the indexes to compare.
#![allow(dead_code)] // Each bench uses part of it.

use flash_indexer::NaiveIndexer;
use flash_indexer::testing::{self, IndexFactory};

pub(crate) use flash_indexer::testing::CountingAlloc;

/// Live heap bytes right now (with `CountingAlloc` installed).
pub(crate) fn live_bytes() -> isize {
    CountingAlloc::live_bytes()
}

/// Every primary layout of this build, then the reference when `with_naive`.
pub(crate) fn indexes(with_naive: bool) -> Vec<IndexFactory> {
    let mut out: Vec<IndexFactory> = testing::enabled_layouts()
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
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
