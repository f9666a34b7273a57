//! How fuzz inputs become differential cases: shared by the cargo-fuzz target and by the test
//! that replays the committed corpus and regressions, so both run exactly the same case.

use super::check::{Divergence, check_ops_on_each};
use super::enabled_layouts;
use super::layouts::{Inspect, Residue};
use super::step::Step;
use super::universe::Universe;
use crate::index::KvIndex;
use crate::types::Worker;
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

/// Runs one fuzz input on every enabled layout against the reference, all in lockstep (the
/// reference answers each op once). `Err` names the layout and the divergence.
///
/// The layouts' indexes are kept, per thread, from one input to the next: building them (a
/// position map, a collector, a root) costs more than a short input. So each input ends by
/// removing every worker it used, and an index that still holds entries or workers then is a
/// divergence of *this* input, found before the next one could trip over it; a failed index is
/// dropped, never reused. What libFuzzer reproduces from a crash file is therefore the same case
/// on fresh indexes, which hold nothing either.
///
/// Deferred reclamation is run before returning, so that libFuzzer's leak detection sees as many
/// frees as mallocs (once the kept indexes' tables have grown to the inputs' size) and does not
/// rerun the input under a full leak scan.
pub fn run_fuzz_input(data: &[u8]) -> Result<(), String> {
    let Some((mut universe, steps)) = decode_fuzz_input(data) else {
        return Ok(());
    };
    let ops = universe.ops(&steps);
    let workers: Vec<_> = universe.workers().collect();
    let layouts = enabled_layouts();
    let indexes = KEPT
        .with(|kept| kept.take())
        .unwrap_or_else(|| layouts.iter().map(|l| (l.inspectable)()).collect());
    let refs: Vec<&dyn KvIndex> = indexes.iter().map(|i| i.as_index()).collect();
    let result = check_ops_on_each(&refs, &ops, &universe.closing_queries(), &workers)
        .and_then(|()| empty_each(&refs, &indexes, &workers, ops.len()))
        .map_err(|(i, d)| format!("{}: {d}", layouts[i].name));
    drop(refs);
    if result.is_ok() {
        indexes.iter().for_each(|index| index.flush_retired());
        KEPT.with(|kept| kept.set(Some(indexes)));
    } else {
        drop(indexes);
    }
    // An input defers a few bags at most: 8 rounds free them, and cost 56 fewer node
    // allocations than `collect_garbage`'s 64 (a tenth of an input's time under ASan).
    #[cfg(not(loom))]
    super::alloc::flush_epochs(8);
    result
}

std::thread_local! {
    /// The indexes [`run_fuzz_input`] reuses, empty between inputs.
    static KEPT: core::cell::Cell<Option<Vec<Box<dyn Inspect>>>> = const { core::cell::Cell::new(None) };
}

/// Removes every worker of the case from every index and checks that nothing is left.
/// A failure is reported at `at`, the closing checks' op number.
fn empty_each(
    refs: &[&dyn KvIndex],
    indexes: &[Box<dyn Inspect>],
    workers: &[Worker],
    at: usize,
) -> Result<(), (usize, Divergence)> {
    for (i, (index, inspect)) in refs.iter().zip(indexes).enumerate() {
        for w in workers {
            index.remove_worker(w.id);
        }
        let left = inspect.residue();
        if left != Residue::default() {
            let what = format!("after removing every worker: {left:?} left");
            return Err((i, Divergence { at, what }));
        }
    }
    Ok(())
}

/// Runs one input of the `decode` fuzz target: the bytes go through the ingest decoder (both
/// engines' conventions) and, if they decode, the mapper; the events are applied to the reference
/// and every enabled layout, which must answer alike. `Err` says where they differed. Panics
/// (and allocations out of proportion, under `-malloc_limit_mb`) are the fuzzer's to catch.
#[cfg(all(feature = "vllm", not(loom)))]
pub fn run_decode_input(data: &[u8]) -> Result<(), String> {
    use crate::ingest::{Engine, EventMapper, MapConfig, decode_batch};
    use crate::{KvIndex, NaiveIndexer};

    for engine in [Engine::Vllm, Engine::Sglang] {
        let Ok(batch) = decode_batch(data, engine) else {
            continue;
        };
        let mapped = EventMapper::new(1, MapConfig::default()).map(&batch, 0);
        let naive = NaiveIndexer::default();
        let layouts: Vec<_> = enabled_layouts()
            .iter()
            .map(|l| (l.name, (l.make)()))
            .collect();
        for event in &mapped.events {
            let expected = naive.apply(event);
            for (name, index) in &layouts {
                let got = index.apply(event);
                if got != expected {
                    return Err(format!(
                        "{name}: {event:?} gave {got:?}, reference {expected:?}"
                    ));
                }
                let worker = event.worker;
                if index.block_count(worker) != naive.block_count(worker) {
                    return Err(format!("{name}: block count of {worker:?} after {event:?}"));
                }
            }
        }
    }
    Ok(())
}
