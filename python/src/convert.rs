//! Python values to the crate's types and back.

use flash_indexer::LocalHash;
use flash_indexer::{EventError, OverlapScores, Worker};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

/// A worker as Python passes it: `(worker_id, dp_rank)`, or a bare `worker_id` (rank 0).
pub(crate) fn worker(value: &Bound<'_, PyAny>) -> PyResult<Worker> {
    if let Ok(tuple) = value.cast::<PyTuple>() {
        let (id, rank): (u64, u32) = tuple.extract().map_err(|_| {
            PyValueError::new_err("a worker is (worker_id, dp_rank): two non-negative integers")
        })?;
        return Ok(Worker::new(id, rank));
    }
    let id: u64 = value.extract().map_err(|_| {
        PyValueError::new_err("a worker is (worker_id, dp_rank) or a non-negative worker_id")
    })?;
    Ok(Worker::new(id, 0))
}

/// Scores as `{(worker_id, dp_rank): depth}`.
pub(crate) fn scores<'py>(py: Python<'py>, scores: &OverlapScores) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (w, depth) in scores.iter() {
        dict.set_item((w.id, w.dp_rank), depth)?;
    }
    Ok(dict)
}

pyo3::create_exception!(
    flash_indexer,
    UnknownBlocksError,
    pyo3::exceptions::PyRuntimeError,
    "A removal named blocks the worker did not hold: the others were removed (the contract's \
     warning, not a refusal). A RuntimeError, as Dynamo's RadixTree raises for it."
);

/// The warning of a removal that named blocks the worker did not hold, as `UnknownBlocksError`.
pub(crate) fn unknown_blocks(error: &EventError) -> PyErr {
    UnknownBlocksError::new_err(format!(
        "Failed to apply event: {error} (the other blocks were removed)"
    ))
}

/// An event the index refused, as the `ValueError` the crate's message explains.
pub(crate) fn event_error(error: EventError) -> PyErr {
    PyValueError::new_err(error.to_string())
}

/// A chain of local hashes from a Python list (read item by item: the limited API has no faster
/// path) or any other sequence of integers.
pub(crate) fn local_hashes(value: &Bound<'_, PyAny>) -> PyResult<Vec<LocalHash>> {
    match value.cast::<PyList>() {
        Ok(list) => {
            let mut out = Vec::with_capacity(list.len());
            for item in list.iter() {
                out.push(LocalHash(item.extract()?));
            }
            Ok(out)
        }
        Err(_) => Ok(value
            .extract::<Vec<u64>>()?
            .into_iter()
            .map(LocalHash)
            .collect()),
    }
}

/// An engine's name, for how its hashes sent as bytes become integers.
pub(crate) fn engine(name: &str) -> PyResult<flash_indexer::ingest::Engine> {
    match name {
        "vllm" => Ok(flash_indexer::ingest::Engine::Vllm),
        "sglang" => Ok(flash_indexer::ingest::Engine::Sglang),
        other => Err(PyValueError::new_err(format!(
            "unknown engine {other:?}; \"vllm\" or \"sglang\""
        ))),
    }
}
