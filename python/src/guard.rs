//! The boundary between Python and the crate: no panic crosses it.
//!
//! pyo3 turns a panic into `PanicException`, which derives from `BaseException`, so `except
//! Exception` does not catch it. No input should make the crate panic; if a bug does, the call
//! raises an ordinary `RuntimeError` instead, and the interpreter carries on.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs `work` with the GIL released; a panic inside it becomes a `RuntimeError`.
///
/// Unwind safety: the crate's indexes keep their invariants at every instant (a panicking
/// writer leaves some serial order, the contract's concurrency clause), and the binding's own
/// state is not touched inside `work`.
pub(crate) fn detach<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    F: Send + FnOnce() -> T,
    T: Send,
{
    py.detach(|| catch_unwind(AssertUnwindSafe(work)))
        .map_err(|payload| {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            PyRuntimeError::new_err(format!(
                "flash_indexer internal error (please report it): {what}"
            ))
        })
}
