//! `RadixTree`: a drop-in for `dynamo._core.RadixTree` (ai-dynamo-runtime 1.6), over any layout.
//!
//! Same constructor, methods, event bytes (Dynamo's `KvCacheEvent` JSON) and result shape
//! (`OverlapScores` with `.scores` keyed by `(worker_id, dp_rank)`), so that a Python router swaps
//! by changing one import. Where our contract differs from Dynamo's tree, answers differ too
//! (README, "Python"): a re-stored block makes its held descendants reachable again, as it does
//! in the engines' own prefix caches; Dynamo's tree leaves them out.

use crate::convert::scores as scores_dict;
use crate::index::make_layout;
use flash_indexer::{Event, EventError, KvIndex, Worker};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};
/// The result of `RadixTree.find_matches`: `.scores` maps `(worker_id, dp_rank)` to the number of
/// matched blocks; `.frequencies` is always empty (block access frequencies are not tracked;
/// Dynamo's `RadixTree` also returns an empty list unless its frequency tracking is on).
///
/// The dict is built on the first read of `.scores` and kept: a router that only counts or
/// skips results pays nothing for it, and reading it twice costs one build.
#[pyclass(module = "flash_indexer", frozen)]
pub struct OverlapScores {
    found: flash_indexer::OverlapScores,
    scores: PyOnceLock<Py<PyDict>>,
}

#[pymethods]
impl OverlapScores {
    /// `{(worker_id, dp_rank): matched blocks}`.
    #[getter]
    fn scores(&self, py: Python<'_>) -> PyResult<Py<PyDict>> {
        let dict = self
            .scores
            .get_or_try_init(py, || scores_dict(py, &self.found).map(Bound::unbind))?;
        Ok(dict.clone_ref(py))
    }

    fn __len__(&self) -> usize {
        self.found.len()
    }

    /// Always `[]` (see the class docs).
    #[getter]
    fn frequencies<'py>(&self, py: Python<'py>) -> Bound<'py, PyList> {
        PyList::empty(py)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "OverlapScores(scores={})",
            self.scores(py)?.bind(py)
        ))
    }
}

/// A drop-in for `dynamo._core.RadixTree`: the same methods and event bytes, over any layout of
/// flash-indexer (`layout`, default the positional one). Thread-safe; every call that does work
/// releases the GIL.
#[pyclass(module = "flash_indexer", frozen)]
pub struct RadixTree {
    index: Box<dyn KvIndex>,
}

#[pymethods]
impl RadixTree {
    #[new]
    #[pyo3(signature = (layout="positional"))]
    fn new(layout: &str) -> PyResult<Self> {
        Ok(Self {
            index: make_layout(layout)?,
        })
    }

    /// Matched blocks per worker for the block hashes `sequence`. `early_exit` is accepted for
    /// compatibility; answers are the same either way.
    #[pyo3(signature = (sequence, early_exit=false))]
    fn find_matches(
        &self,
        py: Python<'_>,
        sequence: &Bound<'_, PyAny>,
        early_exit: bool,
    ) -> PyResult<OverlapScores> {
        let _ = early_exit;
        let query = crate::convert::local_hashes(sequence)?;
        let index = &self.index;
        let found = crate::guard::detach(py, || index.find_matches(&query))?;
        Ok(OverlapScores {
            found,
            scores: PyOnceLock::new(),
        })
    }

    /// Applies one of Dynamo's `KvCacheEvent`s (JSON bytes) of `worker_id`. Raises ValueError
    /// for bytes that do not deserialize and RuntimeError for an event the index refuses
    /// (unknown parent, conflicting hashes), changing nothing, as Dynamo's does. A removal that
    /// names blocks the worker does not hold removes the others and then raises
    /// `UnknownBlocksError` (a RuntimeError, as Dynamo's raises), the contract's warning.
    fn apply_event(
        &self,
        py: Python<'_>,
        worker_id: u64,
        kv_cache_event_bytes: &[u8],
    ) -> PyResult<()> {
        let index = &self.index;
        crate::guard::detach(py, || {
            let event = crate::dynamo_event::parse(kv_cache_event_bytes).map_err(|e| {
                PyValueError::new_err(format!("Failed to deserialize KvCacheEvent: {e}"))
            })?;
            let event = Event {
                worker: Worker::new(worker_id, event.dp_rank),
                event_id: event.event_id,
                kind: event.data,
            };
            index.apply(&event).map_err(|e: EventError| match e {
                EventError::UnknownBlocks { .. } => crate::convert::unknown_blocks(&e),
                e => PyRuntimeError::new_err(format!("Failed to apply event: {e}")),
            })
        })?
    }

    /// Removes every block of `worker_id`, all ranks.
    fn remove_worker(&self, py: Python<'_>, worker_id: u64) -> PyResult<()> {
        let index = &self.index;
        crate::guard::detach(py, || index.remove_worker(worker_id))
    }

    /// Clears every block of `worker_id`, all ranks (as Dynamo's does).
    fn clear_all_blocks(&self, py: Python<'_>, worker_id: u64) -> PyResult<()> {
        let index = &self.index;
        crate::guard::detach(py, || index.remove_worker(worker_id))
    }

    /// The index as Dynamo's JSON `RouterEvent`s, one string per event: applied in order to an
    /// empty tree they give the same answers.
    fn dump_tree_as_events(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let index = &self.index;
        crate::guard::detach(py, || {
            index
                .dump()
                .into_iter()
                .map(|event| {
                    let data = match event.kind {
                        flash_indexer::EventKind::Stored { parent, blocks } => {
                            serde_json::json!({ "stored": {
                                "parent_hash": parent.map(|p| p.0),
                                "start_position": null,
                                "blocks": blocks.iter().map(|b| serde_json::json!({
                                    "block_hash": b.seq.0,
                                    "tokens_hash": b.local.0,
                                    "mm_extra_info": null,
                                })).collect::<Vec<_>>(),
                            }})
                        }
                        flash_indexer::EventKind::Removed { blocks } => serde_json::json!({
                            "removed": { "block_hashes": blocks.iter().map(|s| s.0).collect::<Vec<_>>() }
                        }),
                        flash_indexer::EventKind::Cleared => serde_json::json!("cleared"),
                    };
                    serde_json::json!({
                        "worker_id": event.worker.id,
                        "storage_tier": "device",
                        "residency_domain": "worker",
                        "event": {
                            "event_id": event.event_id,
                            "data": data,
                            "dp_rank": event.worker.dp_rank,
                        },
                    })
                    .to_string()
                })
                .collect()
        })
    }
}
