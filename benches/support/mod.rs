//! Shared by the benches: a counting allocator and the indexes to compare.
#![allow(dead_code)] // Each bench uses part of it.

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
        out.push(testing::naive_factory());
    }
    out
}

/// The deterministic generator, so that every run measures the same data.
#[allow(unused_imports)] // Not every bench draws random data.
pub(crate) use flash_indexer::testing::SplitMix64 as Rng;
