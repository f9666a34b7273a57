//! The differential harness: any [`KvIndex`](crate::KvIndex) against [`NaiveIndexer`](crate::NaiveIndexer).
//!
//! Enabled by the `testing` feature. Three pieces, each in its own file:
//! - [`Step`] (`step.rs`): a small abstract instruction ("store 40 blocks of path 3 on worker 2
//!   with opaque salt 1"). proptest strategies and the cargo-fuzz target both produce steps, so
//!   shrinking and fuzzing work on the same vocabulary.
//! - [`Universe`] (`universe.rs`): turns steps into concrete [`Op`]s. Its paths share prefixes
//!   and fork right before, at and after multiples of the common jump sizes; some paths rejoin
//!   their parent's local hashes after the fork (the over-count trap).
//! - [`check_ops`] (`check.rs`): applies ops to the index under test and to the reference, and
//!   compares every result, every query, block counts and `dump`.
//!
//! Plugging a new index in is one line:
//!
//! ```
//! use flash_indexer::{NaiveIndexer, testing::{assert_agrees_with_reference, Profile}};
//! assert_agrees_with_reference::<NaiveIndexer>(&Profile::adversarial().cases(8));
//! ```

#[cfg(not(loom))]
mod alloc;
#[cfg(all(feature = "arbitrary", feature = "approximate"))]
mod approx;
mod check;
#[cfg(feature = "arbitrary")]
mod fuzz_input;
#[cfg(all(feature = "arbitrary", feature = "hybrid"))]
mod hybrid;
#[cfg(all(feature = "arbitrary", feature = "vllm", not(loom)))]
mod ingest_input;
mod layouts;
mod levers;
mod runner;
mod step;
mod universe;

#[cfg(feature = "positional")]
pub use crate::layouts::positional::NarrowPositionalMap;
pub use crate::mix::{GOLDEN, SplitMix64, splitmix64};
#[cfg(not(loom))]
pub use alloc::{CountingAlloc, collect_garbage};
#[cfg(all(feature = "arbitrary", feature = "approximate"))]
pub use approx::{
    ApproxCase, ApproxStep, MAX_APPROX_STEPS, approx_case_strategy,
    approximate_case_on_every_layout, check_approximate, decode_approx_input,
    run_approximate_input,
};
pub use check::{Divergence, Op, check_ops, check_ops_on_each};
#[cfg(all(feature = "arbitrary", feature = "vllm", not(loom)))]
pub use fuzz_input::run_decode_input;
#[cfg(feature = "arbitrary")]
pub use fuzz_input::{MAX_FUZZ_STEPS, decode_fuzz_input, run_fuzz_input};
#[cfg(all(feature = "arbitrary", feature = "hybrid"))]
pub use hybrid::{
    HybridCase, HybridStep, MAX_HYBRID_STEPS, check_hybrid_case, decode_hybrid_input,
    hybrid_case_strategy, run_hybrid_input,
};
#[cfg(all(feature = "arbitrary", feature = "vllm", not(loom)))]
pub use ingest_input::run_ingest_input;
pub use layouts::{IndexFactory, Inspect, Residue, enabled_layouts, naive_factory};
#[cfg(any(feature = "positional", feature = "array", feature = "radix"))]
pub use levers::ChildProbe;
#[cfg(all(
    not(loom),
    any(feature = "positional", feature = "array", feature = "radix")
))]
pub use levers::Reclaim;
pub use levers::{CanonicalRoll, CoverSets};
pub use runner::{
    Profile, agrees_with_reference, agrees_with_reference_using, assert_agrees_with_reference,
    assert_agrees_with_reference_using, scaled_cases,
};
pub use step::{Step, step_strategy, steps_strategy};
pub use universe::Universe;
