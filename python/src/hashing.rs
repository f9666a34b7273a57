//! Block hashes, bit-compatible with Dynamo's router (`flash_indexer::hash`).

use flash_indexer::LocalHash;
use flash_indexer::hash::{self, Features, MmItem, Salt};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// A request's multimodal items as Python passes them: `(identifier, offset, length)`.
pub(crate) type PyMmItem = (String, usize, usize);

/// Local hashes of the full blocks of `tokens`, as Dynamo's `compute_block_hash_for_seq`:
/// XXH3-64 of each block's tokens as little-endian u32, seeded by the LoRA adapter and the
/// cache namespace (`salt`) exactly as Dynamo seeds them; with vLLM's `cache_salt` on the first
/// block and the multimodal items `mm` on the blocks their placeholders overlap, as vLLM keys
/// blocks (`flash_indexer::hash::local_hashes_with_features`); with `lookahead` tokens, each
/// block is keyed by the tokens after it as vLLM's lookahead hashing keys it, and only blocks
/// followed by that many tokens are hashed. A trailing partial block is dropped.
#[pyfunction]
#[pyo3(signature = (tokens, block_size, salt=None, lora_name=None, cache_salt=None, mm=None, lookahead=0))]
#[allow(clippy::too_many_arguments)] // Python keywords, each with a default
pub(crate) fn local_hashes(
    py: Python<'_>,
    tokens: Vec<u32>,
    block_size: usize,
    salt: Option<String>,
    lora_name: Option<String>,
    cache_salt: Option<String>,
    mm: Option<Vec<PyMmItem>>,
    lookahead: usize,
) -> PyResult<Vec<u64>> {
    let request = Request {
        namespace: salt.as_deref(),
        lora_name: lora_name.as_deref(),
        cache_salt: cache_salt.as_deref(),
        mm: mm.as_deref().unwrap_or_default(),
        lookahead,
    };
    Ok(hash_tokens(py, &tokens, block_size, &request)?
        .into_iter()
        .map(|l| l.0)
        .collect())
}

/// Dynamo's sequence hashes of a chain of local hashes (`compute_seq_hash_for_block`).
#[pyfunction]
pub(crate) fn seq_hashes(py: Python<'_>, local_hashes: Vec<u64>) -> PyResult<Vec<u64>> {
    let locals: Vec<LocalHash> = local_hashes.into_iter().map(LocalHash).collect();
    crate::guard::detach(py, || {
        hash::seq_hashes(&locals).into_iter().map(|s| s.0).collect()
    })
}

/// vLLM's block hashes of the full blocks of `tokens` with its default `sha256_cbor` prefix
/// caching hash, as its KV events publish them (`flash_indexer::hash::vllm_block_hashes`).
#[pyfunction]
#[pyo3(signature = (tokens, block_size, hash_seed, lora_name=None))]
pub(crate) fn vllm_block_hashes(
    py: Python<'_>,
    tokens: Vec<u32>,
    block_size: usize,
    hash_seed: &str,
    lora_name: Option<String>,
) -> PyResult<Vec<u64>> {
    check_block_size(block_size)?;
    crate::guard::detach(py, || {
        hash::vllm_block_hashes(&tokens, block_size, hash_seed, lora_name.as_deref())
    })
}

/// What keys a request's blocks besides its tokens, as the Python keywords give it.
#[derive(Default)]
pub(crate) struct Request<'a> {
    pub(crate) namespace: Option<&'a str>,
    pub(crate) lora_name: Option<&'a str>,
    pub(crate) cache_salt: Option<&'a str>,
    pub(crate) mm: &'a [PyMmItem],
    /// Tokens after each block that its hash covers (vLLM's `num_hash_lookahead_tokens`).
    pub(crate) lookahead: usize,
}

/// The local hashes of `tokens` (the GIL released), checking the block size.
pub(crate) fn hash_tokens(
    py: Python<'_>,
    tokens: &[u32],
    block_size: usize,
    request: &Request<'_>,
) -> PyResult<Vec<LocalHash>> {
    check_block_size(block_size)?;
    if request.lookahead > hash::MAX_LOOKAHEAD_TOKENS {
        return Err(PyValueError::new_err(format!(
            "lookahead must be 0 to {} tokens, not {}",
            hash::MAX_LOOKAHEAD_TOKENS,
            request.lookahead
        )));
    }
    let mm: Vec<MmItem<'_>> = request
        .mm
        .iter()
        .map(|(identifier, offset, length)| MmItem {
            identifier,
            offset: *offset,
            length: *length,
        })
        .collect();
    let features = Features {
        salt: Salt {
            lora_name: request.lora_name,
            cache_namespace: request.namespace,
        },
        cache_salt: request.cache_salt,
        mm: &mm,
        lookahead: request.lookahead,
    };
    crate::guard::detach(py, || {
        hash::local_hashes_with_features(tokens, block_size, &features)
    })
}

/// A block size from Python: 1 to [`hash::MAX_BLOCK_SIZE`] tokens.
pub(crate) fn check_block_size(block_size: usize) -> PyResult<()> {
    if block_size == 0 || block_size > hash::MAX_BLOCK_SIZE {
        return Err(PyValueError::new_err(format!(
            "block_size must be 1 to {} tokens, not {block_size}",
            hash::MAX_BLOCK_SIZE
        )));
    }
    Ok(())
}
