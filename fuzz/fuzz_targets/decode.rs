//! The ingest decoder on arbitrary bytes: it must never panic, and (run with
//! `-malloc_limit_mb`) never allocate more than the input justifies. Whatever decodes is mapped
//! and applied to the reference and every layout, which must agree.
#![no_main]

use flash_indexer::testing::run_decode_input;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(divergence) = run_decode_input(data) {
        panic!("{divergence}");
    }
});
