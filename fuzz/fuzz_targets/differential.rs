//! Every enabled layout against `NaiveIndexer` on arbitrary step sequences.
//!
//! The input picks a small universe (how many workers, how deep), then a sequence of the
//! harness's abstract steps; both are mapped to concrete ops exactly as the proptest suite maps
//! them (`flash_indexer::testing::run_fuzz_input`), so fuzzing and property testing explore the
//! same vocabulary, and `tests/fuzz_corpus.rs` replays the committed corpus the same way.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(divergence) = flash_indexer::testing::run_fuzz_input(data) {
        panic!("{divergence}");
    }
});
