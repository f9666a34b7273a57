//! A count-down latch: the writer pool's flush barrier.
//!
//! Public only so that the loom models in `src/loom_tests.rs` can check it; not part of the API.

use crate::sync::{Condvar, Mutex, lock};

/// Counts down from `n` to zero; [`wait`](Latch::wait) returns once it is there.
///
/// Every `count_down` happens before `wait` returns (the count is read under the same lock), so
/// whatever a counting thread did before counting down is visible to the waiter.
#[derive(Debug)]
pub(crate) struct Latch {
    remaining: Mutex<usize>,
    done: Condvar,
}

impl Latch {
    /// A latch that opens after `n` count-downs.
    pub(crate) fn new(n: usize) -> Self {
        Self {
            remaining: Mutex::new(n),
            done: Condvar::new(),
        }
    }

    /// One of the `n` parties is done. Extra count-downs are ignored.
    pub(crate) fn count_down(&self) {
        let mut remaining = lock(&self.remaining);
        *remaining = remaining.saturating_sub(1);
        if *remaining == 0 {
            self.done.notify_all();
        }
    }

    /// Waits until every party has counted down.
    pub(crate) fn wait(&self) {
        let mut remaining = lock(&self.remaining);
        while *remaining > 0 {
            remaining = match self.done.wait(remaining) {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            };
        }
    }
}
