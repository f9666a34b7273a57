//! Block hashes, bit-compatible with Dynamo's router (`flash_indexer::hash`).

use flash_indexer::LocalHash;
use flash_indexer::hash::{self, Salt};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Local hashes of the full blocks of `tokens`, as Dynamo's `compute_block_hash_for_seq`:
/// XXH3-64 of each block's tokens as little-endian u32, seeded by the LoRA adapter and the
/// cache namespace (`salt`) exactly as Dynamo seeds them. A trailing partial block is dropped.
#[pyfunction]
#[pyo3(signature = (tokens, block_size, salt=None, lora_name=None))]
pub(crate) fn local_hashes(
    py: Python<'_>,
    tokens: Vec<u32>,
    block_size: usize,
    salt: Option<String>,
    lora_name: Option<String>,
) -> PyResult<Vec<u64>> {
    Ok(hash_tokens(
        py,
        &tokens,
        block_size,
        salt.as_deref(),
        lora_name.as_deref(),
    )?
    .into_iter()
    .map(|l| l.0)
    .collect())
}

/// Dynamo's sequence hashes of a chain of local hashes (`compute_seq_hash_for_block`).
#[pyfunction]
pub(crate) fn seq_hashes(py: Python<'_>, local_hashes: Vec<u64>) -> Vec<u64> {
    let locals: Vec<LocalHash> = local_hashes.into_iter().map(LocalHash).collect();
    py.detach(|| hash::seq_hashes(&locals).into_iter().map(|s| s.0).collect())
}

/// The local hashes of `tokens` (the GIL released), checking the block size.
pub(crate) fn hash_tokens(
    py: Python<'_>,
    tokens: &[u32],
    block_size: usize,
    namespace: Option<&str>,
    lora_name: Option<&str>,
) -> PyResult<Vec<LocalHash>> {
    if block_size == 0 {
        return Err(PyValueError::new_err("block_size must be at least 1"));
    }
    let salt = Salt {
        lora_name,
        cache_namespace: namespace,
    };
    Ok(py.detach(|| hash::local_hashes_salted(tokens, block_size, salt)))
}
