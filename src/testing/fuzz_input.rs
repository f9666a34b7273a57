//! How fuzz inputs become differential cases: shared by the cargo-fuzz target and by the test
//! that replays the committed corpus and regressions, so both run exactly the same case.

use super::check::check_ops;
use super::step::Step;
use super::universe::Universe;
use crate::layouts;
use arbitrary::{Arbitrary, Unstructured};

/// Steps beyond this many are ignored (keeps each fuzz run short).
pub const MAX_FUZZ_STEPS: usize = 256;

/// The universe (workers, depth, seed) and steps an input encodes; `None` if it is too short.
pub fn decode_fuzz_input(data: &[u8]) -> Option<(Universe, Vec<Step>)> {
    let mut u = Unstructured::new(data);
    let ids = u.int_in_range(1..=6u64).ok()?;
    let ranks = u.int_in_range(1..=3u32).ok()?;
    let max_pos = u.int_in_range(0..=160u32).ok()?;
    let seed = u64::arbitrary(&mut u).ok()?;
    let mut steps = Vec::<Step>::arbitrary(&mut u).ok()?;
    steps.truncate(MAX_FUZZ_STEPS);
    Some((Universe::new(ids, ranks, max_pos, seed), steps))
}

/// Runs one fuzz input on every enabled layout against the reference. `Err` names the layout
/// and the divergence.
pub fn run_fuzz_input(data: &[u8]) -> Result<(), String> {
    let Some((universe, steps)) = decode_fuzz_input(data) else {
        return Ok(());
    };
    for layout in layouts::enabled() {
        let mut universe = universe.clone();
        let ops = universe.ops(&steps);
        let workers: Vec<_> = universe.workers().collect();
        let index = (layout.make)();
        check_ops(&*index, &ops, &universe.closing_queries(), &workers)
            .map_err(|d| format!("{}: {d}", layout.name))?;
    }
    Ok(())
}
