//! Long-form documentation: no code, only text.
//!
//! - [`contract`]: what every index of this crate guarantees, the naive reference first — events,
//!   reachability, exact scores, concurrency — and the invariants the implementation keeps to
//!   get there.

pub mod contract;
