//! `flash_indexer` for Python: the exact KV-cache index of the `flash-indexer` crate, for routers
//! written in Python.
//!
//! - [`index::Index`]: any layout (or approximate mode), events in, scores out;
//! - [`hybrid::HybridIndex`]: a model of several KV-cache groups (sliding window, Mamba ...),
//!   each event with its group, scores by vLLM's reuse rules;
//! - [`radix_tree::RadixTree`]: a drop-in for `dynamo._core.RadixTree` (same constructor,
//!   methods, JSON event bytes and result shape);
//! - [`subscriber::Subscriber`]: the crate's ZeroMQ ingest of vLLM and SGLang engines, on its
//!   own threads, feeding an `Index` while Python queries it;
//! - [`hashing`]: block hashes bit-compatible with Dynamo's (LoRA and cache namespaces too) and
//!   vLLM's (`sha256_cbor` chains).
//!
//! Every call that does work releases the GIL; every error a caller can cause is a Python
//! exception, never a crash.

use pyo3::prelude::*;

mod convert;
mod dynamo_event;
mod guard;
mod hashing;
mod hybrid;
mod index;
mod radix_tree;
mod subscriber;

#[pymodule]
fn flash_indexer(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<index::Index>()?;
    m.add_class::<index::PyRouted>()?;
    m.add_class::<hybrid::HybridIndex>()?;
    m.add_class::<radix_tree::RadixTree>()?;
    m.add_class::<radix_tree::OverlapScores>()?;
    m.add_class::<subscriber::Subscriber>()?;
    m.add(
        "UnknownBlocksError",
        m.py().get_type::<convert::UnknownBlocksError>(),
    )?;
    m.add_function(wrap_pyfunction!(hashing::local_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(hashing::seq_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(hashing::vllm_block_hashes, m)?)?;
    Ok(())
}
