//! Every enabled layout against `NaiveIndexer` on arbitrary step sequences.
//!
//! The input picks a small universe (how many workers, how deep), then a sequence of the
//! harness's abstract steps; both are mapped to concrete ops exactly as the proptest suite maps
//! them, so fuzzing and property testing explore the same vocabulary.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use flash_indexer::layouts;
use flash_indexer::testing::{Step, Universe, check_ops};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let universe = match (
        u.int_in_range(1..=6u64),
        u.int_in_range(1..=3u32),
        u.int_in_range(0..=160u32),
        u64::arbitrary(&mut u),
    ) {
        (Ok(ids), Ok(ranks), Ok(max_pos), Ok(seed)) => Universe::new(ids, ranks, max_pos, seed),
        _ => return,
    };
    let Ok(mut steps) = Vec::<Step>::arbitrary(&mut u) else {
        return;
    };
    steps.truncate(256);
    for layout in layouts::enabled() {
        let mut universe = universe.clone();
        let ops = universe.ops(&steps);
        let workers: Vec<_> = universe.workers().collect();
        let index = (layout.make)();
        if let Err(divergence) = check_ops(&*index, &ops, &universe.closing_queries(), &workers) {
            panic!("{}: {divergence}", layout.name);
        }
    }
});
