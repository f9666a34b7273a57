//! [`Routed`]: the receipt of a routing decision, which only the index that made it accepts.

use crate::types::Worker;
use core::fmt;
use std::hash::BuildHasher;

/// A routed request, as [`ApproximateIndexer::record_routing`](super::ApproximateIndexer::record_routing)
/// returns it: pass it to [`release`](super::ApproximateIndexer::release) of the same index when
/// the request finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Routed {
    worker: Worker,
    /// The index that routed it ([`index_tag`]).
    index: u64,
    id: u64,
}

impl Routed {
    pub(crate) fn new(worker: Worker, index: u64, id: u64) -> Self {
        Self { worker, index, id }
    }

    /// The request's number in the index that routed it, if that index is `index`.
    pub(crate) fn id_in(&self, index: u64) -> Result<u64, ForeignRouted> {
        (self.index == index)
            .then_some(self.id)
            .ok_or(ForeignRouted)
    }

    /// The request's number in the index that routed it (what a shared decision names).
    pub(crate) fn number(&self) -> u64 {
        self.id
    }

    /// The worker the request was routed to.
    pub fn worker(&self) -> Worker {
        self.worker
    }
}

/// A [`Routed`] handed to another index's `release` than the one that routed it: refused, so
/// that it cannot unpin that index's own request of the same number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForeignRouted;

impl fmt::Display for ForeignRouted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("this request was routed by another approximate index")
    }
}

impl std::error::Error for ForeignRouted {}

/// A tag for a new index's [`Routed`]s: random, so that no two indexes share one (but with
/// probability 2^-64).
pub(crate) fn index_tag() -> u64 {
    std::hash::RandomState::new().hash_one(0u8)
}
