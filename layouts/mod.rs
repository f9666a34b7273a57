//! Storage layouts, each behind its cargo feature. A layout implements
//! [`Layout`](crate::core::Layout) and knows only where entries live; everything an index means
//! is in the core.

#[cfg(feature = "positional")]
pub mod positional;
