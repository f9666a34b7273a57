//! An exact, lock-free global index of which LLM inference worker holds which KV-cache blocks.
//!
//! A router keeps one index over its whole fleet: engines publish KV events ([`Event`]: blocks
//! stored, removed, cleared), and on every request the router asks how deep each worker matches
//! the request's chain of block hashes ([`KvIndex::find_matches`]), then sends the request to the
//! worker with the longest cached prefix.
//!
//! # Contents
//! - [`docs::contract`]: what every index guarantees, and the invariants behind it.
//! - [`KvIndex`]: the trait every index implements; [`Event`], [`EventError`], [`OverlapScores`].
//! - [`hash`]: block hashing compatible with Dynamo's router.
//! - [`NaiveIndexer`]: the contract written literally; the oracle of every test.
//! - `approx` (feature `approximate`): approximate mode, an index of predicted caches built from
//!   routing decisions, for engines that publish no KV events.
//! - [`pool`]: writer threads in front of any index, with per-worker ordering.
//! - `ingest` (feature `vllm`): vLLM and SGLang KV events over ZeroMQ, into a pool.
//! - [`testing`] (feature `testing`): the differential harness that checks any [`KvIndex`]
//!   against [`NaiveIndexer`].
//!
//! # Example
//!
//! ```
//! use flash_indexer::{hash, Block, Event, KvIndex, NaiveIndexer, Worker};
//!
//! let index = NaiveIndexer::default();
//! let tokens: Vec<u32> = (0..64).collect();
//! let locals = hash::local_hashes(&tokens, 16);
//! let seqs = hash::seq_hashes(&locals);
//! let blocks = locals.iter().zip(&seqs).map(|(l, s)| Block::new(*l, *s)).collect();
//!
//! let worker = Worker::new(7, 0);
//! index.apply(&Event::stored(worker, 0, None, blocks)).unwrap();
//! assert_eq!(index.find_matches(&locals[..3]).get(worker), Some(3));
//! ```
#![warn(missing_docs)]

#[cfg(feature = "approximate")]
pub mod approx;
// The generic core; named apart from `::core`, which it would shadow.
#[cfg(not(loom))]
mod counters;
pub mod docs;
mod error;
pub mod hash;
#[cfg(feature = "hybrid")]
pub mod hybrid;
#[cfg_attr(loom, allow(dead_code))]
mod inbox;
mod index;
mod index_core;
#[cfg(all(feature = "vllm", not(loom)))]
pub mod ingest;
mod latch;
mod mix;
mod naive;
#[cfg(not(loom))]
pub mod pool;
mod prefetch;
mod room;
mod scores;
#[cfg(any(feature = "approximate", feature = "hybrid"))]
mod slab;
mod sync;
mod types;

pub mod layouts;

#[cfg(feature = "testing")]
pub mod testing;

// The loom models of our own concurrent code (`cfg(loom)` builds only).
#[cfg(all(test, loom))]
mod loom_tests;

#[cfg(feature = "approximate")]
pub use approx::{
    ApproximateIndex, ApproximateIndexer, ForeignRouted, NaiveApproximateIndexer, Retention, Routed,
};
pub use error::EventError;
pub use index::KvIndex;
pub use naive::NaiveIndexer;
pub use scores::OverlapScores;
pub use types::{Block, Event, EventKind, EventKindView, EventView, LocalHash, SeqHash, Worker};

pub use crate::index_core::{DEFAULT_JUMP, Indexer, Layout, MAX_JUMP};
#[cfg(feature = "array")]
pub use layouts::array::ArrayIndexer;
#[cfg(feature = "positional")]
pub use layouts::positional::PositionalIndexer;
#[cfg(feature = "radix")]
pub use layouts::radix::RadixIndexer;

/// The index routers get: the first enabled of `positional`, `array`, `radix`, unless the
/// `default-radix` or `default-array` feature picks one (`default-radix` wins if both are set).
/// Switch layouts with cargo features, not code.
#[cfg(all(
    feature = "positional",
    not(any(feature = "default-radix", feature = "default-array"))
))]
pub type DefaultIndexer = PositionalIndexer;
/// The index routers get: here the array layout (`default-array`, or the first layout enabled).
#[cfg(all(
    feature = "array",
    not(feature = "default-radix"),
    any(feature = "default-array", not(feature = "positional"))
))]
pub type DefaultIndexer = ArrayIndexer;
/// The index routers get: here the radix tree (`default-radix`, or the only layout enabled).
#[cfg(all(
    feature = "radix",
    any(
        feature = "default-radix",
        not(any(feature = "positional", feature = "array"))
    )
))]
pub type DefaultIndexer = RadixIndexer;

// The README's examples run as doctests (the ingest one needs the `vllm` feature; the README's
// test command enables every feature).
#[cfg(all(doctest, feature = "vllm"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
