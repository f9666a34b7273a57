//! vLLM's own block hashes (feature `vllm-hash`): the engine-side identity of a block, for
//! tests and tools that stand in for a vLLM engine. The index never needs them: it takes
//! engine hashes as opaque handles.

use sha2::{Digest, Sha256};

/// vLLM's block hashes of the full blocks of `tokens` with its default `sha256_cbor` prefix
/// caching hash, as the 64-bit values its KV events publish:
/// `h_i = sha256(cbor([h_{i-1}, tokens_i, extra]))` from `h_{-1} = sha256(cbor(hash_seed))`,
/// where `hash_seed` is the engine's `PYTHONHASHSEED` and `extra` is `[lora_name]` or null
/// (vLLM's keys before it tagged them); each value is the digest's low 64 bits, big-endian. A
/// trailing partial block is dropped; a `block_size` of 0 has no blocks.
///
/// ```
/// use flash_indexer::hash::vllm_block_hashes;
///
/// let tokens: Vec<u32> = (0..48).collect();
/// let hashes = vllm_block_hashes(&tokens, 16, "0", None);
/// assert_eq!(hashes.len(), 3);
/// assert_ne!(hashes, vllm_block_hashes(&tokens, 16, "0", Some("my-lora")));
/// ```
pub fn vllm_block_hashes(
    tokens: &[u32],
    block_size: usize,
    hash_seed: &str,
    lora_name: Option<&str>,
) -> Vec<u64> {
    use ciborium::Value;
    if block_size == 0 || block_size > tokens.len() {
        return Vec::new();
    }
    let digest = |value: &Value| -> [u8; 32] {
        let mut bytes = Vec::new();
        // Writing CBOR into a Vec fails only if the Vec cannot grow, which aborts anyway.
        let _ = ciborium::into_writer(value, &mut bytes);
        Sha256::digest(&bytes).into()
    };
    let mut previous = digest(&Value::Text(hash_seed.to_owned()));
    tokens
        .chunks_exact(block_size)
        .map(|block| {
            let extra = match lora_name {
                Some(name) => Value::Array(vec![Value::Text(name.to_owned())]),
                None => Value::Null,
            };
            let tokens = block.iter().map(|&t| Value::Integer(t.into())).collect();
            let key = Value::Array(vec![
                Value::Bytes(previous.to_vec()),
                Value::Array(tokens),
                extra,
            ]);
            previous = digest(&key);
            let [.., a, b, c, d, e, f, g, h] = previous;
            u64::from_be_bytes([a, b, c, d, e, f, g, h])
        })
        .collect()
}
