//! Block hashing compatible with Dynamo's router (see [the contract](crate::docs::contract)).
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

/// The XXH3 seed of local and sequence hashes when no LoRA adapter is involved.
pub const SEED: u64 = 1337;

/// The seed of local hashes for tokens run through LoRA adapter `lora_name`:
/// `1337 + XXH3-64(lora_name, seed 0)`, wrapping. An empty name means no LoRA ([`SEED`]).
pub fn lora_seed(lora_name: &str) -> u64 {
    if lora_name.is_empty() {
        SEED
    } else {
        SEED.wrapping_add(xxh3_64_with_seed(lora_name.as_bytes(), 0))
    }
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
pub fn local_hashes_with_seed(tokens: &[u32], block_size: usize, seed: u64) -> Vec<LocalHash> {
    if block_size == 0 {
        return Vec::new();
    }
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
    let mut out = Vec::with_capacity(locals.len());
    let mut prev: Option<u64> = None;
    for local in locals {
        let seq = match prev {
            None => local.0,
            Some(p) => next_seq_hash(SeqHash(p), *local).0,
        };
        out.push(SeqHash(seq));
        prev = Some(seq);
    }
    out
}

/// The sequence hash of a block with local hash `local` continuing `parent` (Dynamo's chain).
pub fn next_seq_hash(parent: SeqHash, local: LocalHash) -> SeqHash {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&parent.0.to_le_bytes());
    bytes[8..].copy_from_slice(&local.0.to_le_bytes());
    SeqHash(xxh3_64_with_seed(&bytes, SEED))
}
