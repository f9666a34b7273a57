//! Approximate mode on every enabled layout against `NaiveApproximateIndexer`, on arbitrary
//! step sequences (routing decisions, releases, clock moves, engine events, removals), decoded
//! exactly as the proptest suite decodes its byte inputs
//! (`flash_indexer::testing::run_approximate_input`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(divergence) = flash_indexer::testing::run_approximate_input(data) {
        panic!("{divergence}");
    }
});
