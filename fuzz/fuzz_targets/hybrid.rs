//! Hybrid models: every enabled layout under `HybridIndexer` against `NaiveHybridIndexer`, on
//! models of one to four KV-cache groups and arbitrary steps, decoded exactly as the proptest
//! suite decodes its byte inputs (`flash_indexer::testing::run_hybrid_input`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(divergence) = flash_indexer::testing::run_hybrid_input(data) {
        panic!("{divergence}");
    }
});
