//! The storage layouts, each behind its cargo feature: the types that name them in
//! [`Indexer<L>`](crate::Indexer). A layout knows only where entries live; everything an index
//! means is in the core, and the seam between them is sealed ([`Layout`](crate::Layout)).
//!
//! All three are the same compressed edge tree (`tree/`); they differ in how a query reaches
//! its nodes: the radix tree walks from the root, the positional and array layouts also land
//! on checkpoints by key (`checkpoints.rs`).

#[cfg(any(feature = "positional", feature = "array"))]
mod checkpoints;
#[cfg(any(feature = "positional", feature = "array", feature = "radix"))]
pub(crate) mod tree;

#[cfg(feature = "array")]
pub(crate) mod array;
#[cfg(feature = "positional")]
pub(crate) mod positional;
#[cfg(feature = "radix")]
pub(crate) mod radix;

#[cfg(feature = "array")]
pub use array::{ArrayIndexerOf, DEFAULT_DEPTH, PositionArray};
#[cfg(feature = "positional")]
pub use positional::PositionalMap;
#[cfg(feature = "radix")]
pub use radix::RadixTree;
