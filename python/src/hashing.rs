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

/// vLLM's block hashes of the full blocks of `tokens` with its default `sha256_cbor` prefix
/// caching hash, as the 64-bit values its KV events publish: `h_i = sha256(cbor([h_{i-1},
/// tokens_i, extra]))` from `h_{-1} = sha256(cbor(hash_seed))`, where `hash_seed` is the engine's
/// `PYTHONHASHSEED` and `extra` is `[lora_name]` or null; each value is the digest's low 64 bits.
#[pyfunction]
#[pyo3(signature = (tokens, block_size, hash_seed, lora_name=None))]
pub(crate) fn vllm_block_hashes(
    py: Python<'_>,
    tokens: Vec<u32>,
    block_size: usize,
    hash_seed: &str,
    lora_name: Option<String>,
) -> PyResult<Vec<u64>> {
    use ciborium::Value;
    use sha2::{Digest, Sha256};
    if block_size == 0 {
        return Err(PyValueError::new_err("block_size must be at least 1"));
    }
    let digest = |value: &Value| -> [u8; 32] {
        let mut bytes = Vec::new();
        ciborium::into_writer(value, &mut bytes).expect("CBOR of plain values into a Vec");
        Sha256::digest(&bytes).into()
    };
    let seed = hash_seed.to_owned();
    Ok(py.detach(|| {
        let mut previous = digest(&Value::Text(seed));
        tokens
            .chunks_exact(block_size)
            .map(|block| {
                let extra = match &lora_name {
                    Some(name) => Value::Array(vec![Value::Text(name.clone())]),
                    None => Value::Null,
                };
                let tokens = block.iter().map(|&t| Value::Integer(t.into())).collect();
                let key = Value::Array(vec![
                    Value::Bytes(previous.to_vec()),
                    Value::Array(tokens),
                    extra,
                ]);
                previous = digest(&key);
                u64::from_be_bytes(previous[24..].try_into().expect("32-byte digest"))
            })
            .collect()
    }))
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
