//! Extra keys: what an engine folds into a block's hash besides its tokens.
//!
//! vLLM 0.33 keys a block by its tokens and, per block, the LoRA adapter, every multimodal item
//! whose placeholder tokens overlap the block (its identifier and its start relative to the
//! block's first token), the request's cache salt (first block only) and a digest of the
//! block's prompt embeddings (`generate_block_hash_extra_keys` in
//! `vllm/v1/core/kv_cache_utils.py`). Two blocks with equal tokens and different extra keys are
//! different blocks: matching them would over-count.
//!
//! The LoRA adapter stays in the seed ([`Salt`]), as it always has. The other keys are
//! appended to the block's token bytes, each tagged by kind and sorted, so that kinds never
//! collide and the order an engine lists them in does not matter. A block without extra keys
//! hashes exactly as [`local_hashes`](super::local_hashes) does.

use super::Salt;
use crate::types::LocalHash;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// One extra key of a block (the LoRA adapter is not one: it seeds the hash, see [`Salt`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum ExtraKey {
    /// A multimodal item whose placeholder tokens overlap the block.
    Multimodal {
        /// The item's identifier (vLLM's `mm_feature.identifier`: a content hash, or the
        /// request's own UUID for the item).
        identifier: String,
        /// Where the item starts, relative to the block's first token: negative when it began
        /// in an earlier block.
        offset: i64,
    },
    /// The request's cache salt: vLLM keys the first block of a salted request with it.
    CacheSalt(String),
    /// A digest of the block's prompt embeddings (vLLM: SHA-256 of the block's slice).
    PromptEmbeds(Vec<u8>),
}

/// Appends a tagged, length-prefixed field: a kind byte, the length, the bytes.
fn tagged(out: &mut Vec<u8>, tag: u8, data: &[u8]) {
    out.push(tag);
    out.extend((data.len() as u64).to_le_bytes());
    out.extend(data);
}

/// The encoding of a multimodal key (see [`ExtraKey::encode`]).
fn encode_multimodal(out: &mut Vec<u8>, identifier: &str, offset: i64) {
    tagged(out, 0xf1, identifier.as_bytes());
    out.extend(offset.to_le_bytes());
}

/// The encoding of a cache-salt key (see [`ExtraKey::encode`]).
fn encode_salt(out: &mut Vec<u8>, salt: &str) {
    tagged(out, 0xf2, salt.as_bytes());
}

impl ExtraKey {
    /// Appends the key's tagged encoding: a kind byte, then length-prefixed fields.
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ExtraKey::Multimodal { identifier, offset } => {
                encode_multimodal(out, identifier, *offset)
            }
            ExtraKey::CacheSalt(salt) => encode_salt(out, salt),
            ExtraKey::PromptEmbeds(digest) => tagged(out, 0xf3, digest),
        }
    }
}

/// The local hash of one block: its tokens under `seed`, and its extra keys.
///
/// Without extra keys this is exactly the block's hash in
/// [`local_hashes_with_seed`](super::local_hashes_with_seed). With some, the hash covers the tokens' bytes followed by
/// every key's tagged encoding, keys sorted by encoding.
///
/// ```
/// use flash_indexer::hash::{self, ExtraKey, SEED, block_local_hash};
///
/// let tokens: Vec<u32> = (1..=16).collect();
/// assert_eq!(block_local_hash(&tokens, SEED, &[]), hash::local_hashes(&tokens, 16)[0]);
/// let salted = block_local_hash(&tokens, SEED, &[ExtraKey::CacheSalt("tenant-a".into())]);
/// assert_ne!(salted, hash::local_hashes(&tokens, 16)[0]);
/// ```
pub fn block_local_hash(tokens: &[u32], seed: u64, extra: &[ExtraKey]) -> LocalHash {
    let mut bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    match extra {
        [] => {}
        [key] => key.encode(&mut bytes),
        keys => {
            let mut encoded: Vec<Vec<u8>> = keys
                .iter()
                .map(|key| {
                    let mut one = Vec::new();
                    key.encode(&mut one);
                    one
                })
                .collect();
            encoded.sort_unstable();
            encoded.iter().for_each(|one| bytes.extend(one));
        }
    }
    LocalHash(xxh3_64_with_seed(&bytes, seed))
}

/// A multimodal item of a request: its identifier and the tokens its placeholders cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MmItem<'a> {
    /// The identifier the engine keys the item by (vLLM's `mm_feature.identifier`).
    pub identifier: &'a str,
    /// The first placeholder token's index in the request.
    pub offset: usize,
    /// How many placeholder tokens the item covers.
    pub length: usize,
}

impl MmItem<'_> {
    /// Whether the item's placeholders overlap tokens `start .. end` (vLLM's rule, so an empty
    /// item strictly inside the range counts).
    fn overlaps(&self, start: usize, end: usize) -> bool {
        self.offset < end && self.offset.saturating_add(self.length) > start
    }
}

/// What besides its tokens keys a request's blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Features<'a> {
    /// The LoRA adapter and Dynamo's cache namespace, which seed every block's hash.
    pub salt: Salt<'a>,
    /// The request's cache salt (vLLM's `cache_salt`): a key of the first block only. Empty
    /// means none, as in vLLM.
    pub cache_salt: Option<&'a str>,
    /// The request's multimodal items; each keys every block its placeholders overlap.
    pub mm: &'a [MmItem<'a>],
}

/// The extra keys of the block covering tokens `start .. end` of a request with `features`, by
/// vLLM 0.33's rules (`generate_block_hash_extra_keys`): every item whose placeholders overlap
/// the block, with its start relative to the block; the cache salt on the first block.
pub fn block_extra_keys(features: &Features<'_>, start: usize, end: usize) -> Vec<ExtraKey> {
    let mut keys: Vec<ExtraKey> = features
        .mm
        .iter()
        .filter(|item| item.overlaps(start, end))
        .map(|item| ExtraKey::Multimodal {
            identifier: item.identifier.to_owned(),
            offset: item.offset as i64 - start as i64,
        })
        .collect();
    if start == 0
        && let Some(salt) = features.cache_salt.filter(|s| !s.is_empty())
    {
        keys.push(ExtraKey::CacheSalt(salt.to_owned()));
    }
    keys
}

/// Local hashes of the full blocks of a request's `tokens` with its `features`: what an engine
/// that keys blocks by vLLM 0.33's rules publishes for them, so that the index finds them.
///
/// A request without features hashes as [`local_hashes_salted`](super::local_hashes_salted).
///
/// ```
/// use flash_indexer::hash::{self, Features, MmItem};
///
/// let tokens: Vec<u32> = (0..64).collect();
/// let image = [MmItem { identifier: "image-a", offset: 20, length: 24 }];
/// let a = hash::local_hashes_with_features(&tokens, 16, &Features { mm: &image, ..Features::default() });
/// let plain = hash::local_hashes(&tokens, 16);
/// // Blocks 1 and 2 hold the image's placeholders; blocks 0 and 3 do not.
/// assert_eq!((a[0], a[3]), (plain[0], plain[3]));
/// assert!(a[1] != plain[1] && a[2] != plain[2]);
/// ```
pub fn local_hashes_with_features(
    tokens: &[u32],
    block_size: usize,
    features: &Features<'_>,
) -> Vec<LocalHash> {
    let seed = features.salt.seed();
    if features.mm.is_empty() && features.cache_salt.is_none_or(str::is_empty) {
        return super::local_hashes_with_seed(tokens, block_size, seed);
    }
    if block_size == 0 || block_size > tokens.len() {
        return Vec::new();
    }
    // The bytes `block_local_hash` hashes for `block_extra_keys`, built in two reused buffers
    // (the keys' encodings, then the block's bytes) instead of owned keys a block.
    let (mut bytes, mut encoded, mut spans) = (Vec::new(), Vec::new(), Vec::new());
    let salt = features.cache_salt.filter(|s| !s.is_empty());
    tokens
        .chunks_exact(block_size)
        .enumerate()
        .map(|(i, block)| {
            let (start, end) = (i * block_size, (i + 1) * block_size);
            encoded.clear();
            spans.clear();
            let mut key = |encode: &dyn Fn(&mut Vec<u8>)| {
                let from = encoded.len();
                encode(&mut encoded);
                spans.push(from..encoded.len());
            };
            for item in features.mm {
                if item.overlaps(start, end) {
                    let offset = item.offset as i64 - start as i64;
                    key(&|out| encode_multimodal(out, item.identifier, offset));
                }
            }
            if let Some(salt) = salt.filter(|_| start == 0) {
                key(&|out| encode_salt(out, salt));
            }
            spans.sort_unstable_by(|a, b| encoded[a.clone()].cmp(&encoded[b.clone()]));
            bytes.clear();
            bytes.extend(block.iter().flat_map(|t| t.to_le_bytes()));
            for span in &spans {
                bytes.extend_from_slice(&encoded[span.clone()]);
            }
            LocalHash(xxh3_64_with_seed(&bytes, seed))
        })
        .collect()
}

/// Local hashes as Dynamo's router computes them for a request with multimodal objects
/// (`compute_block_hash_for_seq` with `block_mm_infos`, `dynamo-kv-router` 1.6): a block with
/// objects hashes its tokens' bytes followed by the objects' 64-bit hashes, sorted, little-endian,
/// under the seed of `salt`; a block without hashes as
/// [`local_hashes_salted`](super::local_hashes_salted) does. `block_mm_hashes[i]` lists block `i`'s objects (Dynamo's
/// `BlockMmObjectInfo::mm_hash`; their offsets do not enter Dynamo's hash).
///
/// This is Dynamo's identity of a multimodal block, for routers whose engines publish Dynamo's
/// hashes; vLLM's own keys are [`local_hashes_with_features`].
///
/// ```
/// use flash_indexer::hash::{self, Salt};
///
/// let tokens: Vec<u32> = (0..32).collect();
/// let mm = [None, Some(vec![7u64, 3])];
/// let locals = hash::local_hashes_dynamo_mm(&tokens, 16, Salt::NONE, &mm);
/// assert_eq!(locals[0], hash::local_hashes(&tokens, 16)[0]);
/// assert_ne!(locals[1], hash::local_hashes(&tokens, 16)[1]);
/// ```
pub fn local_hashes_dynamo_mm(
    tokens: &[u32],
    block_size: usize,
    salt: Salt<'_>,
    block_mm_hashes: &[Option<Vec<u64>>],
) -> Vec<LocalHash> {
    let seed = salt.seed();
    if block_size == 0 || block_size > tokens.len() {
        return Vec::new();
    }
    let mut bytes = Vec::with_capacity(block_size * 4);
    let mut sorted = Vec::new();
    tokens
        .chunks_exact(block_size)
        .enumerate()
        .map(|(i, block)| {
            bytes.clear();
            bytes.extend(block.iter().flat_map(|t| t.to_le_bytes()));
            if let Some(Some(objects)) = block_mm_hashes.get(i) {
                sorted.clear();
                sorted.extend_from_slice(objects);
                sorted.sort_unstable();
                bytes.extend(sorted.iter().flat_map(|h| h.to_le_bytes()));
            }
            LocalHash(xxh3_64_with_seed(&bytes, seed))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_hashes_as_its_blocks_keyed_one_by_one() {
        let tokens: Vec<u32> = (0..200).collect();
        let mm = [
            MmItem {
                identifier: "b",
                offset: 5,
                length: 40,
            },
            MmItem {
                identifier: "a",
                offset: 20,
                length: 0,
            },
            MmItem {
                identifier: "a",
                offset: 44,
                length: 90,
            },
            MmItem {
                identifier: "c",
                offset: 150,
                length: 1,
            },
        ];
        for block_size in [1, 7, 16, 64] {
            for cache_salt in [None, Some(""), Some("tenant")] {
                let features = Features {
                    salt: Salt::lora("adapter"),
                    cache_salt,
                    mm: &mm,
                };
                let one_by_one: Vec<LocalHash> = tokens
                    .chunks_exact(block_size)
                    .enumerate()
                    .map(|(i, block)| {
                        let (start, end) = (i * block_size, (i + 1) * block_size);
                        let keys = block_extra_keys(&features, start, end);
                        block_local_hash(block, features.salt.seed(), &keys)
                    })
                    .collect();
                let request = local_hashes_with_features(&tokens, block_size, &features);
                assert_eq!(
                    request, one_by_one,
                    "block size {block_size}, {cache_salt:?}"
                );
            }
        }
    }
}
