//! `HybridIndex`: a model of several KV-cache groups (sliding window, chunked local attention,
//! Mamba beside full attention) over any layout, scored by vLLM's reuse rules.

use crate::convert::{event_error, scores, tally};
use crate::index::make_layout;
use flash_indexer::hybrid::{GroupKind, GroupSpec, HybridIndex as _, HybridIndexer, ModelGroups};
use flash_indexer::ingest::{EventMapper, MapConfig};
use flash_indexer::{Block, Event, EventError, EventKind, KvIndex, LocalHash, SeqHash};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Arc;

/// One `apply_stored` call of a dump: `(group, (worker_id, dp_rank), parent, [(local, seq)])`.
type DumpedStore = (u32, (u64, u32), Option<u64>, Vec<(u64, u64)>);

/// A group as Python gives it: `(kind, block_size)` or `(kind, block_size, window)`.
fn group_spec(group: &Bound<'_, PyAny>) -> PyResult<GroupSpec> {
    let (kind, block_size, window) = match group.extract::<(String, u32, u32)>() {
        Ok((kind, block_size, window)) => (kind, block_size, Some(window)),
        Err(_) => {
            let (kind, block_size) = group.extract::<(String, u32)>().map_err(|_| {
                PyValueError::new_err(format!(
                    "a group is (kind, block_size) or (kind, block_size, window), not {group}"
                ))
            })?;
            (kind, block_size, None)
        }
    };
    let kind = GroupKind::from_vllm(&kind, window).map_err(PyValueError::new_err)?;
    Ok(GroupSpec::new(kind, block_size))
}

/// A group as Python reads it back: `(kind, block_size, window or chunk or None)`.
fn group_tuple(spec: &GroupSpec) -> (&'static str, u32, Option<u32>) {
    let (kind, window) = match spec.kind {
        GroupKind::FullAttention => ("full_attention", None),
        GroupKind::SlidingWindow { window } => ("sliding_window", Some(window)),
        GroupKind::ChunkedLocal { chunk } => ("chunked_local_attention", Some(chunk)),
        GroupKind::Mamba => ("mamba", None),
        // `GroupKind` is non-exhaustive: a kind added later without a name here.
        _ => ("unknown", None),
    };
    (kind, spec.block_size, window)
}

/// The exact index of a fleet serving a model with several KV-cache groups (vLLM's
/// `group_idx`): gpt-oss (full attention and a sliding window), Gemma 3, Llama 4 (chunked local
/// attention), Qwen3-Next (Mamba). A worker's score is the longest prefix every group of the
/// model can supply, by vLLM 0.33's rules.
///
/// `HybridIndex(groups, layout="positional")`: `groups` indexed by `group_idx`, each
/// `(kind, block_size)` or `(kind, block_size, window)`, kinds `"full_attention"`,
/// `"sliding_window"` (window in tokens), `"chunked_local_attention"` (chunk in tokens),
/// `"mamba"`. At least one full-attention group; one block size for all.
#[pyclass(module = "flash_indexer", frozen)]
pub struct HybridIndex {
    /// Shared with a [`Subscriber`](crate::subscriber::Subscriber)'s threads.
    pub(crate) index: Arc<HybridIndexer<Box<dyn KvIndex>>>,
    layout: String,
}

#[pymethods]
impl HybridIndex {
    #[new]
    #[pyo3(signature = (groups, layout="positional"))]
    fn new(groups: Vec<Bound<'_, PyAny>>, layout: &str) -> PyResult<Self> {
        let specs = groups
            .iter()
            .map(group_spec)
            .collect::<PyResult<Vec<_>>>()?;
        let model = ModelGroups::new(specs).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let chain = make_layout(layout)?;
        Ok(Self {
            index: Arc::new(HybridIndexer::with_layout(model, chain)),
            layout: layout.to_owned(),
        })
    }

    /// The layout's name (one of `"positional"`, `"array"`, `"radix"`).
    #[getter]
    fn layout(&self) -> &str {
        &self.layout
    }

    /// The model's groups, by `group_idx`: `(kind, block_size, window or chunk or None)`.
    #[getter]
    fn groups(&self) -> Vec<(&'static str, u32, Option<u32>)> {
        self.index
            .model()
            .groups()
            .iter()
            .map(group_tuple)
            .collect()
    }

    /// Group `group` of `worker` stored `blocks`, a list of `(local_hash, seq_hash)`, after
    /// `parent`. The full-attention group's events say which prefix each block continues; the
    /// other groups' blocks count where the full-attention group has the same seq hash. Raises
    /// ValueError, changing nothing, for an unknown group, parent, repeated block or conflict.
    #[pyo3(signature = (group, worker, parent, blocks))]
    fn apply_stored(
        &self,
        py: Python<'_>,
        group: u32,
        worker: &Bound<'_, PyAny>,
        parent: Option<u64>,
        blocks: Vec<(u64, u64)>,
    ) -> PyResult<()> {
        let blocks = blocks
            .into_iter()
            .map(|(local, seq)| Block::new(LocalHash(local), SeqHash(seq)))
            .collect();
        let event = Event::stored(
            crate::convert::worker(worker)?,
            0,
            parent.map(SeqHash),
            blocks,
        );
        self.apply(py, group, event).map(drop)
    }

    /// Group `group` of `worker` evicted `seq_hashes`. Returns those it did not hold (ignored;
    /// the rest were removed).
    fn apply_removed(
        &self,
        py: Python<'_>,
        group: u32,
        worker: &Bound<'_, PyAny>,
        seq_hashes: Vec<u64>,
    ) -> PyResult<Vec<u64>> {
        let seqs = seq_hashes.into_iter().map(SeqHash).collect();
        let event = Event::removed(crate::convert::worker(worker)?, 0, seqs);
        self.apply(py, group, event)
    }

    /// `worker` (that rank only) dropped every block of every group.
    fn apply_cleared(&self, py: Python<'_>, worker: &Bound<'_, PyAny>) -> PyResult<()> {
        let event = Event::cleared(crate::convert::worker(worker)?, 0);
        let chain = self.index.model().chain_group();
        self.apply(py, chain, event).map(drop)
    }

    /// A batch of KV events exactly as a vLLM engine publishes it over ZeroMQ (msgpack), from
    /// the engine `worker_id`, each event applied to its `group_idx`. Returns `{"applied",
    /// "rejected", "filtered"}` event counts: events of a group the model lacks, or naming
    /// another kind or window than the model's, are rejected and counted, never merged. Raises
    /// ValueError for bytes that do not decode (nothing applied).
    #[pyo3(signature = (worker_id, data, engine="vllm"))]
    fn apply_engine_batch<'py>(
        &self,
        py: Python<'py>,
        worker_id: u64,
        data: &[u8],
        engine: &str,
    ) -> PyResult<Bound<'py, PyDict>> {
        let index = &self.index;
        crate::convert::engine_batch(py, data, engine, |batch| {
            let mapper = EventMapper::new(worker_id, MapConfig::default());
            let mapped = mapper.map_groups(batch, 0, index.model());
            // One batch: the index publishes each worker's changes of it once.
            let (applied, rejected) = tally(index.apply_batch(&mapped.events).into_iter());
            (applied, rejected + mapped.rejected.len(), mapped.filtered)
        })
    }

    /// How long a prefix of the chain `local_hashes` every group of each worker can supply:
    /// `{(worker_id, dp_rank): blocks}`, workers with 0 left out.
    fn find_matches<'py>(
        &self,
        py: Python<'py>,
        local_hashes: Vec<u64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let query: Vec<LocalHash> = local_hashes.into_iter().map(LocalHash).collect();
        let index = &self.index;
        let found = crate::guard::detach(py, || index.find_matches(&query))?;
        scores(py, &found)
    }

    /// Drops every worker with `worker_id`, all ranks, every group.
    fn remove_worker(&self, py: Python<'_>, worker_id: u64) -> PyResult<()> {
        let index = &self.index;
        crate::guard::detach(py, || index.remove_worker(worker_id))
    }

    /// Drops one worker, `(worker_id, dp_rank)`, every group.
    fn remove_worker_dp_rank(&self, py: Python<'_>, worker: &Bound<'_, PyAny>) -> PyResult<()> {
        let w = crate::convert::worker(worker)?;
        let index = &self.index;
        crate::guard::detach(py, || index.remove_worker_dp_rank(w))
    }

    /// Blocks group `group` of `worker` holds, reachable or not.
    fn block_count(
        &self,
        py: Python<'_>,
        worker: &Bound<'_, PyAny>,
        group: u32,
    ) -> PyResult<usize> {
        let w = crate::convert::worker(worker)?;
        if group as usize >= self.index.model().len() {
            return Err(event_error(EventError::UnknownGroup {
                group,
                groups: self.index.model().len() as u32,
            }));
        }
        let index = &self.index;
        crate::guard::detach(py, || index.block_count(w, group))
    }

    /// The `apply_stored` calls, `(group, worker, parent, blocks)`, that rebuild the index's
    /// answers in an empty `HybridIndex` of the same groups: what a snapshot keeps.
    fn dump(&self, py: Python<'_>) -> PyResult<Vec<DumpedStore>> {
        let index = &self.index;
        let events = crate::guard::detach(py, || index.dump())?;
        (events.into_iter())
            .map(|(group, event)| match event.kind {
                EventKind::Stored { parent, blocks } => {
                    let w = (event.worker.id, event.worker.dp_rank);
                    let blocks = blocks.iter().map(|b| (b.local.0, b.seq.0)).collect();
                    Ok((group, w, parent.map(|p| p.0), blocks))
                }
                EventKind::Removed { .. } | EventKind::Cleared => Err(PyRuntimeError::new_err(
                    "a hybrid index's dump held another event than a store",
                )),
            })
            .collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "HybridIndex(groups={:?}, layout={:?})",
            self.groups(),
            self.layout
        )
    }
}

impl HybridIndex {
    fn apply(&self, py: Python<'_>, group: u32, event: Event) -> PyResult<Vec<u64>> {
        let index = &self.index;
        crate::convert::missing_or_error(crate::guard::detach(py, || index.apply(group, &event))?)
    }
}
