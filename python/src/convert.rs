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

/// What `apply_engine_batch` returns: `{"applied", "rejected", "filtered"}` event counts of one
/// batch, decoded from `data` and applied by `apply`, which counts what it applied and rejected
/// of the mapped events. ValueError for bytes that do not decode (nothing applied).
pub(crate) fn engine_batch<'py, A>(
    py: Python<'py>,
    data: &[u8],
    engine: &str,
    apply: A,
) -> PyResult<Bound<'py, PyDict>>
where
    A: FnOnce(&flash_indexer::ingest::KvEventBatch) -> (usize, usize, usize) + Send,
{
    let engine = self::engine(engine)?;
    let (applied, rejected, filtered) = crate::guard::detach(py, || {
        let batch = flash_indexer::ingest::decode_batch(data, engine).map_err(|e| e.to_string())?;
        Ok::<_, String>(apply(&batch))
    })?
    .map_err(PyValueError::new_err)?;
    let out = PyDict::new(py);
    out.set_item("applied", applied)?;
    out.set_item("rejected", rejected)?;
    out.set_item("filtered", filtered)?;
    Ok(out)
}

/// Applied and rejected counts of `results`, a warning counting as applied.
pub(crate) fn tally(results: impl Iterator<Item = Result<(), EventError>>) -> (usize, usize) {
    results.fold((0, 0), |(applied, rejected), result| match result {
        Err(e) if !e.is_warning() => (applied, rejected + 1),
        _ => (applied + 1, rejected),
    })
}

/// An event's result as the `apply_*` methods return it: the blocks a removal named that the
/// worker did not hold (the contract's warning), or the refusal as ValueError.
pub(crate) fn missing_or_error(result: Result<(), EventError>) -> PyResult<Vec<u64>> {
    match result {
        Ok(()) => Ok(Vec::new()),
        Err(EventError::UnknownBlocks { missing }) => {
            Ok(missing.into_iter().map(|s| s.0).collect())
        }
        Err(error) => Err(event_error(error)),
    }
}
