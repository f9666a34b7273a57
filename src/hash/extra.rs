//! Extra keys: what an engine folds into a block's hash besides its tokens.
//!
//! vLLM 0.33 keys a block by its tokens and, per block, the LoRA adapter, every multimodal item
//! whose placeholder tokens overlap the block (its identifier and its start relative to the
//! block's first token), the request's cache salt (first block only) and a digest of the
//! block's prompt embeddings (`generate_block_hash_extra_keys` in
//! `vllm/v1/core/kv_cache_utils.py`). Two blocks with equal tokens and different extra keys are
//! different blocks: matching them would over-count.
//!
//! With speculative decoding's lookahead hashing (`num_hash_lookahead_tokens`, L > 0), vLLM
//! also keys each block by the L tokens after it, and takes its multimodal keys over the block
//! and those tokens (`get_request_block_hasher`, `generate_lookahead_block_hash_extra_keys`);
//! a block is hashed only once those tokens exist. [`Features::lookahead`] follows that rule.
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
    /// The tokens after the block that its hash also covers (vLLM's `lookahead_token_ids`,
    /// published when a speculative drafter reads past each block's end).
    Lookahead(Vec<u32>),
}

/// The most lookahead tokens a request's hashes take ([`Features::lookahead`]): vLLM reads one
/// token ahead for EAGLE drafters and one per speculative token for MTP modules. A bound keeps a
/// request's hashing linear in its length.
pub const MAX_LOOKAHEAD_TOKENS: usize = 64;

/// Appends a field's head: a kind byte and the length in bytes of what follows.
fn tag_and_length(out: &mut Vec<u8>, tag: u8, length: usize) {
    out.push(tag);
    out.extend((length as u64).to_le_bytes());
}

/// Appends a tagged, length-prefixed field: a kind byte, the length, the bytes.
fn tagged(out: &mut Vec<u8>, tag: u8, data: &[u8]) {
    tag_and_length(out, tag, data.len());
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

/// The encoding of a lookahead key (see [`ExtraKey::encode`]): the tokens' little-endian bytes.
fn encode_lookahead(out: &mut Vec<u8>, tokens: &[u32]) {
    tag_and_length(out, 0xf4, tokens.len() * 4);
    out.extend(tokens.iter().flat_map(|t| t.to_le_bytes()));
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
            ExtraKey::Lookahead(tokens) => encode_lookahead(out, tokens),
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
    /// Tokens after each block that the engine's block hashes also cover (vLLM's
    /// `num_hash_lookahead_tokens`, set when a speculative drafter reads ahead; 0, the default,
    /// for none). With `L > 0` a block is hashed only when the `L` tokens after it are in the
    /// request; they are its [`ExtraKey::Lookahead`], and its multimodal keys are those of the
    /// items overlapping the block and those tokens. At most [`MAX_LOOKAHEAD_TOKENS`]: with
    /// more, no block is hashed.
    pub lookahead: usize,
}

/// The extra keys of the block covering tokens `start .. end` of a request with `features`, by
/// vLLM 0.33's rules (`generate_block_hash_extra_keys`): every item whose placeholders overlap
/// the block, with its start relative to the block; the cache salt on the first block.
///
/// `features.lookahead` is not applied here: with lookahead hashing, vLLM takes these keys over
/// `start .. end + L` and adds the `L` tokens as an [`ExtraKey::Lookahead`].
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
/// With [`Features::lookahead`] `L > 0`, only the blocks followed by `L` tokens of the request
/// are hashed, as vLLM hashes them.
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
    let lookahead = features.lookahead;
    if features.mm.is_empty() && features.cache_salt.is_none_or(str::is_empty) && lookahead == 0 {
        return super::local_hashes_with_seed(tokens, block_size, seed);
    }
    // vLLM hashes a block once the tokens its hash covers exist.
    let hashed = tokens.len().saturating_sub(lookahead);
    if block_size == 0 || block_size > hashed || lookahead > MAX_LOOKAHEAD_TOKENS {
        return Vec::new();
    }
    // The bytes `block_local_hash` hashes for `block_extra_keys`, built in two reused buffers
    // (the keys' encodings, then the block's bytes) instead of owned keys a block.
    let (mut bytes, mut encoded, mut spans) = (Vec::new(), Vec::new(), Vec::new());
    let salt = features.cache_salt.filter(|s| !s.is_empty());
    tokens[..hashed]
        .chunks_exact(block_size)
        .enumerate()
        .map(|(i, block)| {
            let (start, end) = (i * block_size, (i + 1) * block_size);
            // The tokens the block's keys cover: the block, and the lookahead after it.
            let window = end + lookahead;
            encoded.clear();
            spans.clear();
            let mut key = |encode: &dyn Fn(&mut Vec<u8>)| {
                let from = encoded.len();
                encode(&mut encoded);
                spans.push(from..encoded.len());
            };
            for item in features.mm {
                if item.overlaps(start, window) {
                    let offset = item.offset as i64 - start as i64;
                    key(&|out| encode_multimodal(out, item.identifier, offset));
                }
            }
            if let Some(salt) = salt.filter(|_| start == 0) {
                key(&|out| encode_salt(out, salt));
            }
            if lookahead > 0 {
                key(&|out| encode_lookahead(out, &tokens[end..window]));
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
    use crate::hash::SEED;

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
                    lookahead: 0,
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

    #[test]
    fn lookahead_keys_each_block_by_the_tokens_after_it() {
        let tokens: Vec<u32> = (0..70).collect();
        let mm = [MmItem {
            identifier: "image",
            offset: 33,
            length: 4,
        }];
        for lookahead in [1, 3, 16] {
            let features = Features {
                mm: &mm,
                cache_salt: Some("tenant"),
                lookahead,
                ..Features::default()
            };
            let request = local_hashes_with_features(&tokens, 16, &features);
            // Only the blocks whose `lookahead` tokens after them are in the request.
            assert_eq!(
                request.len(),
                (70 - lookahead) / 16,
                "lookahead {lookahead}"
            );
            let one_by_one: Vec<LocalHash> = (0..request.len())
                .map(|i| {
                    let (start, end) = (i * 16, (i + 1) * 16);
                    let mut keys = block_extra_keys(&features, start, end + lookahead);
                    keys.push(ExtraKey::Lookahead(tokens[end..end + lookahead].to_vec()));
                    block_local_hash(&tokens[start..end], SEED, &keys)
                })
                .collect();
            assert_eq!(request, one_by_one, "lookahead {lookahead}");
        }
        // A block's hash covers the token after it, and only that one.
        let plain = Features {
            lookahead: 1,
            ..Features::default()
        };
        let a = local_hashes_with_features(&tokens, 16, &plain);
        let mut other = tokens.clone();
        other[32] = 999;
        let b = local_hashes_with_features(&other, 16, &plain);
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        // No lookahead hashes as before; too much hashes nothing.
        let none = Features::default();
        assert_eq!(
            local_hashes_with_features(&tokens, 16, &none),
            super::super::local_hashes(&tokens, 16)
        );
        let too_far = Features {
            lookahead: MAX_LOOKAHEAD_TOKENS + 1,
            ..Features::default()
        };
        assert!(local_hashes_with_features(&tokens, 16, &too_far).is_empty());
    }
}
