//! The whole ingest path after the socket on arbitrary bytes: sequence numbers, decoding,
//! mapping and a writer pool in front of every layout, as a subscriber runs them. It must never
//! panic, never reserve memory out of proportion to its input (run under cargo-fuzz's default
//! memory limit, so a huge reservation is a finding), and every layout must agree with the
//! reference.
#![no_main]

use flash_indexer::testing::run_ingest_input;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(divergence) = run_ingest_input(data) {
        panic!("{divergence}");
    }
});
