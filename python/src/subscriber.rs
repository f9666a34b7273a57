//! `Subscriber`: the crate's ZeroMQ ingest of vLLM and SGLang engines, on its own threads.

use crate::hybrid::HybridIndex;
use crate::index::Index;
use flash_indexer::KvIndex;
use flash_indexer::ingest::{self, EngineEndpoint, SubscriberConfig};
use flash_indexer::pool::{PoolConfig, WriterPool};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::{Arc, Mutex};

/// Subscribes to engines' KV event streams and keeps `index` current, on threads of its own (the
/// GIL is not needed), while Python queries the index.
///
/// Each engine is a dict: `{"events": "tcp://host:5557", "worker_id": 1}`, with optional
/// `"replay"` (the engine's replay socket, for gap repair), `"dp_rank"` (a fixed rank; default:
/// each batch's own) and `"bind": True` (listen instead of dialling). `engine` says how hashes
/// sent as bytes become integers: `"vllm"` or `"sglang"`.
///
/// `index` is an `Index` (events queued in a writer pool) or a `HybridIndex` (each event with
/// its `group_idx`, applied on its engine's thread).
#[pyclass(module = "flash_indexer", frozen)]
pub struct Subscriber {
    running: Mutex<Option<Running>>,
}

/// The ingest threads and the writer pool they feed (none for a hybrid index, which they apply
/// events to themselves); gone once closed.
struct Running {
    subscriber: ingest::Subscriber,
    pool: Option<Arc<WriterPool<dyn KvIndex>>>,
}

fn endpoint(engine: &Bound<'_, PyDict>) -> PyResult<EngineEndpoint> {
    let get = |key: &str| engine.get_item(key);
    let events: String = get("events")?
        .ok_or_else(|| {
            PyValueError::new_err("an engine needs \"events\": its publisher's address")
        })?
        .extract()?;
    let bind: bool = match get("bind")? {
        Some(value) => value.extract()?,
        None => false,
    };
    let mut out = if bind {
        EngineEndpoint::bind(events)
    } else {
        EngineEndpoint::new(events)
    };
    if let Some(replay) = get("replay")? {
        out = out.with_replay(replay.extract::<String>()?);
    }
    let worker: u64 = get("worker_id")?
        .ok_or_else(|| PyValueError::new_err("an engine needs \"worker_id\""))?
        .extract()?;
    out = out.with_worker(worker);
    if let Some(rank) = get("dp_rank")? {
        out = out.with_dp_rank(rank.extract()?);
    }
    for key in engine.keys() {
        let key: String = key.extract()?;
        if !["events", "bind", "replay", "worker_id", "dp_rank"].contains(&key.as_str()) {
            return Err(PyValueError::new_err(format!("unknown engine key {key:?}")));
        }
    }
    Ok(out)
}

#[pymethods]
impl Subscriber {
    #[new]
    #[pyo3(signature = (index, engines, engine="vllm"))]
    fn new(
        py: Python<'_>,
        index: &Bound<'_, PyAny>,
        engines: Vec<Bound<'_, PyDict>>,
        engine: &str,
    ) -> PyResult<Self> {
        let endpoints = engines.iter().map(endpoint).collect::<PyResult<Vec<_>>>()?;
        let config = SubscriberConfig {
            engine: crate::convert::engine(engine)?,
            ..SubscriberConfig::default()
        };
        let running = if let Ok(index) = index.cast::<Index>() {
            let shared: Arc<dyn KvIndex> = index.get().index.clone();
            let pool: Arc<WriterPool<dyn KvIndex>> =
                Arc::new(WriterPool::new(shared, PoolConfig::default()));
            let subscriber = crate::guard::detach(py, || {
                ingest::Subscriber::spawn(pool.clone(), endpoints, config)
            })?;
            (subscriber, Some(pool))
        } else if let Ok(index) = index.cast::<HybridIndex>() {
            let shared = index.get().index.clone();
            let subscriber = crate::guard::detach(py, || {
                ingest::Subscriber::spawn_hybrid(shared, endpoints, config)
            })?;
            (subscriber, None)
        } else {
            return Err(PyTypeError::new_err(
                "index must be a flash_indexer.Index or a flash_indexer.HybridIndex",
            ));
        };
        let (subscriber, pool) = running;
        let subscriber = subscriber.map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(Self {
            running: Mutex::new(Some(Running { subscriber, pool })),
        })
    }

    /// The ingest counters (connections, batches, events, gaps, replays, ...) as a dict, plus
    /// `"last_problem"` (the latest connection or decoding problem, or None).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let running = self.running.lock().expect("never poisoned");
        let subscriber = &running
            .as_ref()
            .ok_or_else(|| PyRuntimeError::new_err("the subscriber is closed"))?
            .subscriber;
        let out = PyDict::new(py);
        for (name, value) in subscriber.stats().named() {
            out.set_item(name, value)?;
        }
        out.set_item("last_problem", subscriber.last_problem())?;
        Ok(out)
    }

    /// Waits until every event received so far is applied to the index (a hybrid index's are
    /// applied as they are received).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let pool = match self.running.lock().expect("never poisoned").as_ref() {
            Some(running) => running.pool.clone(),
            None => return Err(PyRuntimeError::new_err("the subscriber is closed")),
        };
        match pool {
            Some(pool) => crate::guard::detach(py, || pool.flush()),
            None => Ok(()),
        }
    }

    /// Stops the threads, applying what was received. Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let running = self.running.lock().expect("never poisoned").take();
        match running {
            Some(Running { subscriber, pool }) => crate::guard::detach(py, || {
                subscriber.shutdown();
                if let Some(pool) = pool {
                    pool.flush();
                }
            }),
            None => Ok(()),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _kind: Option<Bound<'_, PyAny>>,
        _value: Option<Bound<'_, PyAny>>,
        _traceback: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.close(py)
    }
}
