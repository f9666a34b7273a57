//! The storage layouts, each behind its cargo feature: the types that name them in
//! [`Indexer<L>`](crate::Indexer). A layout knows only where entries live; everything an index
//! means is in the core, and the seam between them is sealed ([`Layout`](crate::Layout)).

#[cfg(any(feature = "positional", feature = "array"))]
mod entries;

#[cfg(feature = "array")]
pub(crate) mod array;
#[cfg(any(feature = "positional", feature = "array"))]
pub(crate) mod positional;
#[cfg(feature = "radix")]
pub(crate) mod radix;

#[cfg(feature = "array")]
pub use array::{ArrayIndexerOf, DEFAULT_DEPTH, PositionArray};
#[cfg(any(feature = "positional", feature = "array"))]
pub use positional::PositionalMap;
#[cfg(feature = "radix")]
pub use radix::RadixTree;
