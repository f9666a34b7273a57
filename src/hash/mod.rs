//! Block hashing compatible with Dynamo's router (see [the contract](crate::docs::contract)),
//! and a block's extra keys (multimodal items, cache salts, prompt embeddings) as vLLM keys
//! blocks by them ([`local_hashes_with_features`]).
//!
//! ```
//! use flash_indexer::hash::{local_hashes, seq_hashes};
//!
//! let tokens: Vec<u32> = (1..=48).collect();
//! let locals = local_hashes(&tokens, 16);
//! assert_eq!(locals[0].0, 16863443419780771464);
//! assert_eq!(seq_hashes(&locals)[2].0, 960926348267535642);
//! ```

use crate::types::{LocalHash, SeqHash};
use xxhash_rust::xxh3::xxh3_64_with_seed;

mod extra;
#[cfg(feature = "vllm-hash")]
mod vllm;

pub use extra::{
    ExtraKey, Features, MAX_LOOKAHEAD_TOKENS, MmItem, block_extra_keys, block_local_hash,
    local_hashes_dynamo_mm, local_hashes_with_features,
};
#[cfg(feature = "vllm-hash")]
pub use vllm::vllm_block_hashes;

/// The XXH3 seed of local and sequence hashes when no LoRA adapter is involved.
pub const SEED: u64 = 1337;

/// The largest block size any API of the crate accepts from outside (engine events, requests,
/// bindings): 2^20 tokens. Engines use 16 to a few thousand; a larger value is refused with a
/// reason before anything is reserved for it.
pub const MAX_BLOCK_SIZE: usize = 1 << 20;

/// The seed of local hashes for tokens run through LoRA adapter `lora_name`:
/// `1337 + XXH3-64(lora_name, seed 0)`, wrapping. An empty name means no LoRA ([`SEED`]).
pub fn lora_seed(lora_name: &str) -> u64 {
    Salt::lora(lora_name).seed()
}

/// What keeps caches apart: a LoRA adapter and a cache namespace (a tenant, a model tag),
/// folded into the seed of the local hashes exactly as `dynamo-kv-router` 1.6 folds them
/// (`compute_salt_hash`), so that two requests share cached blocks only when they share both.
///
/// The seed is `1337`, plus `XXH3-64(lora_name, seed 0)` with a LoRA, plus
/// `XXH3-64(cache_namespace, seed 1)` with a namespace (wrapping); an empty string counts as
/// none. Sequence hashes ([`seq_hashes`]) are unsalted: they chain salted local hashes.
///
/// ```
/// use flash_indexer::hash::{Salt, local_hashes, local_hashes_salted};
///
/// let tokens: Vec<u32> = (1..=48).collect();
/// assert_eq!(local_hashes_salted(&tokens, 16, Salt::NONE), local_hashes(&tokens, 16));
/// let tenant = Salt::namespace("tenant-a");
/// assert_eq!(local_hashes_salted(&tokens, 16, tenant)[0].0, 8175209796170318505);
/// assert_ne!(local_hashes_salted(&tokens, 16, tenant), local_hashes(&tokens, 16));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Salt<'a> {
    /// The LoRA adapter the tokens run through.
    pub lora_name: Option<&'a str>,
    /// The cache namespace the request belongs to.
    pub cache_namespace: Option<&'a str>,
}

impl<'a> Salt<'a> {
    /// No LoRA, no namespace: the seed is [`SEED`].
    pub const NONE: Salt<'static> = Salt {
        lora_name: None,
        cache_namespace: None,
    };

    /// A LoRA adapter only.
    pub fn lora(lora_name: &'a str) -> Self {
        Self {
            lora_name: Some(lora_name),
            cache_namespace: None,
        }
    }

    /// A cache namespace only.
    pub fn namespace(cache_namespace: &'a str) -> Self {
        Self {
            lora_name: None,
            cache_namespace: Some(cache_namespace),
        }
    }

    /// The XXH3 seed of local hashes under this salt (Dynamo's salt hash).
    pub fn seed(&self) -> u64 {
        let mut seed = SEED;
        if let Some(lora) = self.lora_name.filter(|s| !s.is_empty()) {
            seed = seed.wrapping_add(xxh3_64_with_seed(lora.as_bytes(), 0));
        }
        if let Some(namespace) = self.cache_namespace.filter(|s| !s.is_empty()) {
            seed = seed.wrapping_add(xxh3_64_with_seed(namespace.as_bytes(), 1));
        }
        seed
    }
}

/// [`local_hashes`] under a [`Salt`] (LoRA adapter, cache namespace).
pub fn local_hashes_salted(tokens: &[u32], block_size: usize, salt: Salt<'_>) -> Vec<LocalHash> {
    local_hashes_with_seed(tokens, block_size, salt.seed())
}

/// Local hashes of the full blocks of `tokens` (a trailing partial block is dropped).
///
/// Each block is XXH3-64 with seed 1337 over its tokens as little-endian `u32` bytes. A
/// `block_size` of 0 has no full blocks and gives an empty vector.
pub fn local_hashes(tokens: &[u32], block_size: usize) -> Vec<LocalHash> {
    local_hashes_with_seed(tokens, block_size, SEED)
}

/// [`local_hashes`] for tokens run through LoRA adapter `lora_name` (see [`lora_seed`]).
pub fn local_hashes_lora(tokens: &[u32], block_size: usize, lora_name: &str) -> Vec<LocalHash> {
    local_hashes_with_seed(tokens, block_size, lora_seed(lora_name))
}

/// [`local_hashes`] with an explicit XXH3 seed.
///
/// Memory is proportional to `tokens`, whatever `block_size` says: a block size larger than
/// the tokens has no full block and reserves nothing.
pub fn local_hashes_with_seed(tokens: &[u32], block_size: usize, seed: u64) -> Vec<LocalHash> {
    if block_size == 0 || block_size > tokens.len() {
        return Vec::new();
    }
    // `block_size <= tokens.len()`, so this is at most the tokens' own size in bytes.
    let mut bytes = Vec::with_capacity(block_size * 4);
    tokens
        .chunks_exact(block_size)
        .map(|block| {
            bytes.clear();
            bytes.extend(block.iter().flat_map(|t| t.to_le_bytes()));
            LocalHash(xxh3_64_with_seed(&bytes, seed))
        })
        .collect()
}

/// Dynamo's sequence hashes of a chain of local hashes: `seq[0] = local[0]`,
/// `seq[i] = XXH3-64(le(seq[i-1]) ++ le(local[i]), seed 1337)`.
pub fn seq_hashes(locals: &[LocalHash]) -> Vec<SeqHash> {
    seq_hashes_after(None, locals).collect()
}

/// The sequence hashes of `locals` continuing the block `parent` (`None`: a chain's first
/// blocks), as [`seq_hashes`] of the whole chain has them.
pub(crate) fn seq_hashes_after(
    parent: Option<SeqHash>,
    locals: &[LocalHash],
) -> impl Iterator<Item = SeqHash> + '_ {
    locals.iter().scan(parent, |prev, &local| {
        let seq = prev.map_or(SeqHash(local.0), |p| next_seq_hash(p, local));
        *prev = Some(seq);
        Some(seq)
    })
}

/// The sequence hash of a block with local hash `local` continuing `parent` (Dynamo's chain).
pub fn next_seq_hash(parent: SeqHash, local: LocalHash) -> SeqHash {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&parent.0.to_le_bytes());
    bytes[8..].copy_from_slice(&local.0.to_le_bytes());
    SeqHash(xxh3_64_with_seed(&bytes, SEED))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_block_sizes_reserve_nothing() {
        // Nothing is reserved for blocks the tokens cannot fill.
        for block_size in [1 << 32, 1 << 33, 1 << 61, usize::MAX] {
            assert!(local_hashes(&[1, 2, 3], block_size).is_empty());
            assert!(local_hashes(&[], block_size).is_empty());
        }
        assert_eq!(local_hashes(&[1, 2, 3], 3).len(), 1);
    }
}
