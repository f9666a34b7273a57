//! `Index`: any layout of the crate, or approximate mode, behind one Python class.

use crate::convert::{scores, tally};
use crate::hashing::{PyMmItem, Request, hash_tokens};
use flash_indexer::approx::{RedisLog, SharedApproximateIndexer};
use flash_indexer::ingest::{EventMapper, MapConfig};
use flash_indexer::{
    ApproximateIndexer, ArrayIndexer, Block, Event, EventKind, KvIndex, LocalHash,
    PositionalIndexer, RadixIndexer, Retention, Routed, SeqHash,
};
use pyo3::exceptions::{PyConnectionError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::sync::Arc;
use std::time::Duration;

/// The layouts `Index(layout=...)` accepts.
pub(crate) const LAYOUTS: [&str; 3] = ["positional", "array", "radix"];

/// An empty index of the layout `name`.
pub(crate) fn make_layout(name: &str) -> PyResult<Box<dyn KvIndex>> {
    Ok(match name {
        "positional" => Box::new(PositionalIndexer::default()),
        "array" => Box::new(ArrayIndexer::default()),
        "radix" => Box::new(RadixIndexer::default()),
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown layout {other:?}; one of {LAYOUTS:?}"
            )));
        }
    })
}

type Approximate = ApproximateIndexer<Box<dyn KvIndex>>;
type Shared = SharedApproximateIndexer<Box<dyn KvIndex>, RedisLog>;

/// How long a shared log keeps decisions without a time to live: an hour.
const UNTIMED_WINDOW: Duration = Duration::from_secs(3_600);

/// The exact KV-cache index of a fleet: engines' events in, each worker's cached prefix depth
/// out.
///
/// `Index(layout="positional" | "array" | "radix")` indexes the events it is given exactly.
/// `Index(approximate="ttl" | "lru", ...)` also predicts the caches of workers that publish no
/// events from `record_routing`: blocks live `ttl_seconds` after they were last routed to
/// (default 120), or follow an LRU model of `capacity_blocks` per worker with running requests
/// pinned until `release`. A worker's first event makes it exact.
///
/// `share="redis://host:port/"` makes it one replica of several routers that share their routing
/// decisions through the Redis (or Valkey) stream `share_key`: each call of `sync(now)` applies
/// the other replicas' decisions, at the times they were made.
///
/// Workers are `(worker_id, dp_rank)` tuples (a bare `worker_id` means rank 0). Hashes are
/// unsigned 64-bit integers. Every method that does work releases the GIL.
#[pyclass(module = "flash_indexer", frozen)]
pub struct Index {
    pub(crate) index: Arc<dyn KvIndex>,
    approximate: Option<Arc<Approximate>>,
    shared: Option<Arc<Shared>>,
    layout: String,
}

/// A request routed in approximate mode, as `Index.record_routing` returns it: pass it to
/// `Index.release` when the request finishes (releasing twice does nothing more).
#[pyclass(module = "flash_indexer", name = "Routed", frozen)]
pub struct PyRouted(Routed);

#[pymethods]
impl PyRouted {
    /// The worker the request went to, `(worker_id, dp_rank)`.
    #[getter]
    fn worker(&self) -> (u64, u32) {
        let worker = self.0.worker();
        (worker.id, worker.dp_rank)
    }

    fn __repr__(&self) -> String {
        let (id, rank) = self.worker();
        format!("Routed(worker=({id}, {rank}))")
    }
}

fn blocks_of(blocks: Vec<(u64, u64)>) -> Vec<Block> {
    blocks
        .into_iter()
        .map(|(local, seq)| Block::new(LocalHash(local), SeqHash(seq)))
        .collect()
}

fn seconds(now: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(now)
        .map_err(|_| PyValueError::new_err(format!("now must be non-negative seconds, not {now}")))
}

impl Index {
    fn apply(&self, py: Python<'_>, event: Event) -> PyResult<Vec<u64>> {
        let index = &self.index;
        crate::convert::missing_or_error(crate::guard::detach(py, || index.apply(&event))?)
    }

    fn approximate(&self) -> PyResult<&Approximate> {
        if let Some(shared) = &self.shared {
            return Ok(shared.approximate());
        }
        self.approximate.as_deref().ok_or_else(|| {
            PyRuntimeError::new_err("an exact Index has no routing decisions: build it with approximate=\"ttl\" or \"lru\"")
        })
    }

    fn shared(&self) -> PyResult<&Shared> {
        self.shared.as_deref().ok_or_else(|| {
            PyRuntimeError::new_err(
                "this Index shares no decisions: build it with share=\"redis://...\"",
            )
        })
    }
}

#[pymethods]
impl Index {
    #[new]
    #[pyo3(signature = (layout="positional", approximate=None, ttl_seconds=None, capacity_blocks=None, share=None, share_key="flash-indexer:decisions"))]
    fn new(
        layout: &str,
        approximate: Option<&str>,
        ttl_seconds: Option<f64>,
        capacity_blocks: Option<usize>,
        share: Option<&str>,
        share_key: &str,
    ) -> PyResult<Self> {
        if share.is_some() && approximate.is_none() {
            return Err(PyValueError::new_err(
                "share is for approximate=\"ttl\" or \"lru\" (exact replicas follow the engines)",
            ));
        }
        let inner = make_layout(layout)?;
        let ttl = ttl_seconds.map(seconds).transpose()?;
        let retention = match approximate {
            None if ttl.is_some() || capacity_blocks.is_some() => {
                return Err(PyValueError::new_err(
                    "ttl_seconds and capacity_blocks are for approximate=\"ttl\" or \"lru\"",
                ));
            }
            None => None,
            Some("ttl") => {
                let retention = Retention::ttl(ttl.unwrap_or(Retention::DEFAULT_TTL));
                Some(match capacity_blocks {
                    Some(blocks) => retention.with_capacity(blocks),
                    None => retention,
                })
            }
            Some("lru") => {
                let blocks = capacity_blocks.ok_or_else(|| {
                    PyValueError::new_err("approximate=\"lru\" needs capacity_blocks per worker")
                })?;
                let retention = Retention::lru(blocks);
                Some(match ttl {
                    Some(ttl) => retention.with_ttl(ttl),
                    None => retention,
                })
            }
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "unknown approximate mode {other:?}; \"ttl\" or \"lru\""
                )));
            }
        };
        let (index, approximate, shared): (Arc<dyn KvIndex>, _, _) = match (retention, share) {
            (Some(retention), Some(url)) => {
                let window = retention.ttl_limit().unwrap_or(UNTIMED_WINDOW);
                let log = RedisLog::open(url, share_key, window)
                    .map_err(|e| PyValueError::new_err(e.to_string()))?;
                let approximate = ApproximateIndexer::with_index(inner, retention);
                let shared = Arc::new(SharedApproximateIndexer::with_index(approximate, log));
                (shared.clone(), None, Some(shared))
            }
            (Some(retention), None) => {
                let approximate = Arc::new(ApproximateIndexer::with_index(inner, retention));
                (approximate.clone(), Some(approximate), None)
            }
            (None, _) => (Arc::from(inner), None, None),
        };
        Ok(Self {
            index,
            approximate,
            shared,
            layout: layout.to_owned(),
        })
    }

    /// The layout's name.
    #[getter]
    fn layout(&self) -> &str {
        &self.layout
    }

    /// `worker` stored `blocks`, a list of `(local_hash, seq_hash)`, continuing `parent` (a seq
    /// hash it holds, or None). Raises ValueError, changing nothing, for an unknown parent, a
    /// repeated block or a conflict.
    #[pyo3(signature = (worker, parent, blocks))]
    fn apply_stored(
        &self,
        py: Python<'_>,
        worker: &Bound<'_, PyAny>,
        parent: Option<u64>,
        blocks: Vec<(u64, u64)>,
    ) -> PyResult<()> {
        let event = Event::stored(
            crate::convert::worker(worker)?,
            0,
            parent.map(SeqHash),
            blocks_of(blocks),
        );
        self.apply(py, event).map(drop)
    }

    /// `worker` evicted the blocks `seq_hashes`. Returns those it did not hold (ignored; the
    /// rest were removed).
    fn apply_removed(
        &self,
        py: Python<'_>,
        worker: &Bound<'_, PyAny>,
        seq_hashes: Vec<u64>,
    ) -> PyResult<Vec<u64>> {
        let seqs = seq_hashes.into_iter().map(SeqHash).collect();
        self.apply(py, Event::removed(crate::convert::worker(worker)?, 0, seqs))
    }

    /// `worker` (that rank only) dropped every block.
    fn apply_cleared(&self, py: Python<'_>, worker: &Bound<'_, PyAny>) -> PyResult<()> {
        self.apply(py, Event::cleared(crate::convert::worker(worker)?, 0))
            .map(drop)
    }

    /// A batch of KV events exactly as a vLLM or SGLang engine publishes it over ZeroMQ
    /// (msgpack), from the engine `worker_id` (ranks from the batch). Returns
    /// `{"applied", "rejected", "filtered"}` event counts. Raises ValueError for bytes that do
    /// not decode (nothing applied).
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
            let mapped = EventMapper::new(worker_id, MapConfig::default()).map(batch, 0);
            let (applied, rejected) = tally(mapped.events.iter().map(|e| index.apply(e)));
            (applied, rejected + mapped.rejected.len(), mapped.filtered)
        })
    }

    /// How deep each worker matches the chain `local_hashes`: `{(worker_id, dp_rank): depth}`,
    /// workers with depth 0 left out.
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

    /// `find_matches` of the local hashes of `tokens` (see `local_hashes`): `cache_salt` is
    /// vLLM's (first block only), `mm` a list of `(identifier, offset, length)`, `lookahead`
    /// vLLM's `num_hash_lookahead_tokens`.
    #[pyo3(signature = (tokens, block_size, salt=None, lora_name=None, cache_salt=None, mm=None, lookahead=0))]
    #[allow(clippy::too_many_arguments)] // Python keywords, each with a default
    fn find_matches_for_tokens<'py>(
        &self,
        py: Python<'py>,
        tokens: Vec<u32>,
        block_size: usize,
        salt: Option<String>,
        lora_name: Option<String>,
        cache_salt: Option<String>,
        mm: Option<Vec<PyMmItem>>,
        lookahead: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let request = Request {
            namespace: salt.as_deref(),
            lora_name: lora_name.as_deref(),
            cache_salt: cache_salt.as_deref(),
            mm: mm.as_deref().unwrap_or_default(),
            lookahead,
        };
        let query = hash_tokens(py, &tokens, block_size, &request)?;
        let index = &self.index;
        let found = crate::guard::detach(py, || index.find_matches(&query))?;
        scores(py, &found)
    }

    /// The deepest match of `local_hashes`: `((worker_id, dp_rank), depth)`, or None.
    fn best(&self, py: Python<'_>, local_hashes: Vec<u64>) -> PyResult<Option<((u64, u32), u32)>> {
        let query: Vec<LocalHash> = local_hashes.into_iter().map(LocalHash).collect();
        let index = &self.index;
        let best = crate::guard::detach(py, || index.find_matches(&query).best())?;
        Ok(best.map(|(w, depth)| ((w.id, w.dp_rank), depth)))
    }

    /// Drops every worker with `worker_id`, all ranks.
    fn remove_worker(&self, py: Python<'_>, worker_id: u64) -> PyResult<()> {
        let index = &self.index;
        crate::guard::detach(py, || index.remove_worker(worker_id))
    }

    /// Drops one worker: `(worker_id, dp_rank)`.
    fn remove_worker_dp_rank(&self, py: Python<'_>, worker: &Bound<'_, PyAny>) -> PyResult<()> {
        let w = crate::convert::worker(worker)?;
        let index = &self.index;
        crate::guard::detach(py, || index.remove_worker_dp_rank(w))
    }

    /// Blocks `worker` holds, reachable or not.
    fn block_count(&self, py: Python<'_>, worker: &Bound<'_, PyAny>) -> PyResult<usize> {
        let w = crate::convert::worker(worker)?;
        let index = &self.index;
        crate::guard::detach(py, || index.block_count(w))
    }

    /// Events that rebuild the index's answers: a list of `("stored", worker, parent,
    /// [(local, seq), ...])`, `("removed", worker, [seq, ...])` and `("cleared", worker)`.
    fn dump<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let index = &self.index;
        let events = crate::guard::detach(py, || index.dump())?;
        let out = PyList::empty(py);
        for event in events {
            let w = (event.worker.id, event.worker.dp_rank);
            match event.kind {
                EventKind::Stored { parent, blocks } => {
                    let blocks: Vec<(u64, u64)> =
                        blocks.iter().map(|b| (b.local.0, b.seq.0)).collect();
                    out.append(("stored", w, parent.map(|p| p.0), blocks))?
                }
                EventKind::Removed { blocks } => {
                    let seqs: Vec<u64> = blocks.iter().map(|s| s.0).collect();
                    out.append(("removed", w, seqs))?
                }
                EventKind::Cleared => out.append(("cleared", w))?,
            }
        }
        Ok(out)
    }

    /// Approximate mode: the router sent a request with prompt `local_hashes` to `worker` at
    /// `now` (seconds since any origin you keep). Returns the request, for `release`.
    fn record_routing(
        &self,
        py: Python<'_>,
        worker: &Bound<'_, PyAny>,
        local_hashes: Vec<u64>,
        now: f64,
    ) -> PyResult<PyRouted> {
        let approximate = self.approximate()?;
        let (w, now) = (crate::convert::worker(worker)?, seconds(now)?);
        let locals: Vec<LocalHash> = local_hashes.into_iter().map(LocalHash).collect();
        let shared = self.shared.as_deref();
        let routed = crate::guard::detach(py, || match shared {
            Some(shared) => shared.record_routing(w, &locals, now),
            None => approximate.record_routing(w, &locals, now),
        })?;
        Ok(PyRouted(routed))
    }

    /// Approximate mode: the request `routed` finished at `now`. ValueError if another Index
    /// routed it.
    fn release(&self, py: Python<'_>, routed: &PyRouted, now: f64) -> PyResult<()> {
        let approximate = self.approximate()?;
        let (routed, now) = (routed.0, seconds(now)?);
        let shared = self.shared.as_deref();
        crate::guard::detach(py, || match shared {
            Some(shared) => shared.release(routed, now),
            None => approximate.release(routed, now),
        })?
        .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Shared mode: applies the other replicas' decisions not applied yet, each at its own
    /// time; returns how many. ConnectionError if Redis cannot be read (routing goes on with
    /// what this replica has; the next call resumes where this one stopped).
    fn sync(&self, py: Python<'_>, now: f64) -> PyResult<usize> {
        let shared = self.shared()?;
        let now = seconds(now)?;
        crate::guard::detach(py, || shared.sync(now))?
            .map_err(|e| PyConnectionError::new_err(e.to_string()))
    }

    /// Shared mode: what this replica did with the log, as a dict of counters (`published`,
    /// `publish_failures`, `applied`, `duplicates`, `malformed`, `unmatched_releases`,
    /// `read_failures`, `expired_pins`).
    fn share_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.shared()?.stats();
        let out = PyDict::new(py);
        out.set_item("published", s.published)?;
        out.set_item("publish_failures", s.publish_failures)?;
        out.set_item("applied", s.applied)?;
        out.set_item("duplicates", s.duplicates)?;
        out.set_item("malformed", s.malformed)?;
        out.set_item("unmatched_releases", s.unmatched_releases)?;
        out.set_item("read_failures", s.read_failures)?;
        out.set_item("expired_pins", s.expired_pins)?;
        Ok(out)
    }

    /// Approximate mode: expire predictions whose time to live has passed at `now`.
    fn expire(&self, py: Python<'_>, now: f64) -> PyResult<()> {
        let approximate = self.approximate()?;
        let now = seconds(now)?;
        crate::guard::detach(py, || approximate.expire(now))
    }

    fn __repr__(&self) -> String {
        match (self.approximate(), &self.shared) {
            (Ok(a), Some(s)) => format!(
                "Index(layout={:?}, approximate={:?}, share_key={:?})",
                self.layout,
                a.retention(),
                s.log().key()
            ),
            (Ok(a), None) => format!(
                "Index(layout={:?}, approximate={:?})",
                self.layout,
                a.retention()
            ),
            (Err(_), _) => format!("Index(layout={:?})", self.layout),
        }
    }
}
