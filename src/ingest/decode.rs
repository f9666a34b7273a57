//! msgpack bytes to [`KvEventBatch`]: vLLM's `KVEventBatch` and SGLang's equivalent, in both
//! encodings engines publish today.
//!
//! - Positional arrays (msgspec `array_like=True, tag=True`): the batch is
//!   `[ts, events, data_parallel_rank?]` and each event is `[tag, field, field, ...]`.
//! - Maps (msgspec's default struct encoding, vLLM since mid-2026): the batch is
//!   `{"ts": .., "events": [..], "data_parallel_rank": ..}` and each event carries its tag under
//!   `"type"`.
//!
//! Decoding is strict about what it needs and lenient about what it does not: trailing fields a
//! newer engine adds are ignored, fields engines added over time (`lora_id`, `medium`,
//! `lora_name`, `extra_keys`, `group_idx`) may be absent, unknown event types are skipped and counted, and a
//! missing required field or a value of the wrong kind fails the whole batch with an error that
//! says where. Nothing panics, and memory stays proportional to the input: arrays grow as their
//! elements are read (a length prefix alone allocates nothing) and nesting is capped.

use std::fmt;

use rmpv::ValueRef;

use crate::SeqHash;

/// Nesting deeper than this is rejected: events need four levels (batch, events, event, hash
/// list); the rest leaves room for `extra_keys` and fields not invented yet.
const MAX_DEPTH: usize = 32;

/// Which engine's convention turns a block hash sent as msgpack bytes into 64 bits. Hashes sent
/// as integers are the same for every engine: their two's-complement low 64 bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Engine {
    /// vLLM: the low 64 bits of the digest, big-endian (its last 8 bytes).
    #[default]
    Vllm,
    /// SGLang: the first 8 bytes of the digest, big-endian, as a signed integer.
    Sglang,
}

impl Engine {
    /// The 64-bit block hash this engine publishes for `digest` (at least 8 bytes).
    pub fn hash_from_bytes(self, digest: &[u8]) -> Option<SeqHash> {
        let bytes: [u8; 8] = match self {
            Engine::Vllm => digest.last_chunk::<8>().copied()?,
            Engine::Sglang => digest.first_chunk::<8>().copied()?,
        };
        Some(SeqHash(u64::from_be_bytes(bytes)))
    }
}

/// One decoded batch of engine events.
#[derive(Clone, Debug, PartialEq)]
pub struct KvEventBatch {
    /// The engine's timestamp (seconds).
    pub ts: f64,
    /// The events of known types, in order.
    pub events: Vec<EngineEvent>,
    /// The data-parallel rank that published the batch; `None` is rank 0.
    pub data_parallel_rank: Option<u32>,
    /// Events of types this decoder does not know, skipped.
    pub unknown_events: usize,
}

/// One engine event, as the engine sent it (hashes already reduced to 64 bits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EngineEvent {
    /// `BlockStored`.
    BlockStored(BlockStored),
    /// `BlockRemoved`.
    BlockRemoved(BlockRemoved),
    /// `AllBlocksCleared`.
    AllBlocksCleared,
}

/// vLLM's `BlockStored`: blocks added to the cache, each the child of the one before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockStored {
    /// The engine's hash of each block (with its whole prefix).
    pub block_hashes: Vec<SeqHash>,
    /// The block the first one extends; `None` for the start of a sequence.
    pub parent_block_hash: Option<SeqHash>,
    /// The tokens of every block, concatenated.
    pub token_ids: Vec<u32>,
    /// Tokens per block.
    pub block_size: u32,
    /// The LoRA adapter's id, if any.
    pub lora_id: Option<i64>,
    /// The storage tier (`"GPU"`, `"CPU"`, ...); absent in older engines, meaning GPU.
    pub medium: Option<String>,
    /// The LoRA adapter's name, which seeds the local hashes.
    pub lora_name: Option<String>,
    /// The KV-cache group (hybrid models), if the engine sends one.
    pub group_idx: Option<u32>,
    /// The group's kind as vLLM names it (`kv_cache_spec_kind`), if the engine sends one
    /// (vLLM 0.33 declares the field and leaves it unset).
    pub kv_cache_spec_kind: Option<String>,
    /// The group's sliding window in tokens (`kv_cache_spec_sliding_window`), if sent.
    pub kv_cache_spec_sliding_window: Option<u32>,
    /// vLLM's per-block extra keys, one entry per block hash (`None` for a block without):
    /// as published, untagged; [`EventMapper`](super::EventMapper) says what each one is.
    pub extra_keys: Option<Vec<Option<Vec<RawExtraKey>>>>,
    /// SGLang's request-wide cache salt (a top-level field of its `BlockStored`).
    pub cache_salt: Option<String>,
    /// The tokens after each block that vLLM hashed it over too (`lookahead_token_ids`, one
    /// list per block hash, when speculative decoding's drafter reads ahead); `None` without
    /// lookahead hashing.
    pub lookahead_token_ids: Option<Vec<Vec<u32>>>,
}

/// One item of a block's `extra_keys` as vLLM publishes it (`to_event_extra_keys`): untagged,
/// so what a string is depends on its place (see [`EventMapper`](super::EventMapper)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawExtraKey {
    /// A bare string: the LoRA adapter's name, or the request's cache salt.
    Text(String),
    /// `(mm_identifier, offset)`: a multimodal item and where it starts relative to the block.
    Multimodal(String, i64),
    /// Bytes: a digest of the block's prompt embeddings.
    Bytes(Vec<u8>),
    /// Anything else, described: the mapper rejects the event rather than guess.
    Unknown(String),
}

/// vLLM's `BlockRemoved`: blocks evicted from the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRemoved {
    /// The engine's hashes of the evicted blocks.
    pub block_hashes: Vec<SeqHash>,
    /// The storage tier they were evicted from.
    pub medium: Option<String>,
    /// The KV-cache group, if the engine sends one.
    pub group_idx: Option<u32>,
}

/// Why a payload could not be decoded. Nothing of the batch is used.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// Not msgpack, cut short, or nested deeper than any batch is.
    Malformed {
        /// What the msgpack reader said.
        reason: String,
    },
    /// Bytes after the end of the batch.
    TrailingBytes {
        /// How many.
        count: usize,
    },
    /// A required field is absent.
    Missing {
        /// Where, e.g. `events[3]`.
        at: String,
        /// The field.
        field: &'static str,
    },
    /// A value of the wrong kind or out of range.
    Invalid {
        /// Where, e.g. `events[3].block_hashes[0]`.
        at: String,
        /// What was expected there.
        expected: &'static str,
        /// What was found.
        found: String,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Malformed { reason } => write!(f, "malformed msgpack: {reason}"),
            DecodeError::TrailingBytes { count } => {
                write!(f, "{count} bytes after the end of the batch")
            }
            DecodeError::Missing { at, field } => {
                write!(f, "{at}: required field `{field}` is missing")
            }
            DecodeError::Invalid {
                at,
                expected,
                found,
            } => {
                write!(f, "{at}: expected {expected}, found {found}")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// Decodes one msgpack payload: a whole batch, in either encoding.
///
/// ```
/// use flash_indexer::ingest::{decode_batch, EngineEvent, Engine};
///
/// // msgpack of ["ts", events, dp_rank] = [1.5, [["AllBlocksCleared"]], 2]
/// let bytes = b"\x93\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00\x91\x91\xb0AllBlocksCleared\x02";
/// let batch = decode_batch(bytes, Engine::Vllm).unwrap();
/// assert_eq!(batch.events, vec![EngineEvent::AllBlocksCleared]);
/// assert_eq!(batch.data_parallel_rank, Some(2));
///
/// assert!(decode_batch(b"\x93\xc0", Engine::Vllm).is_err());
/// ```
pub fn decode_batch(bytes: &[u8], engine: Engine) -> Result<KvEventBatch, DecodeError> {
    let mut rest = bytes;
    let value = rmpv::decode::read_value_ref_with_max_depth(&mut rest, MAX_DEPTH).map_err(|e| {
        DecodeError::Malformed {
            reason: e.to_string(),
        }
    })?;
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes { count: rest.len() });
    }
    Decoder { engine }.batch(&value)
}

/// A place in the batch, built on the stack as decoding descends and printed only for errors.
#[derive(Clone, Copy)]
enum Loc<'p> {
    Root,
    Field(&'p Loc<'p>, &'static str),
    Index(&'p Loc<'p>, usize),
}

impl fmt::Display for Loc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loc::Root => f.write_str("batch"),
            Loc::Field(Loc::Root, name) => f.write_str(name),
            Loc::Field(parent, name) => write!(f, "{parent}.{name}"),
            Loc::Index(Loc::Root, i) => write!(f, "[{i}]"),
            Loc::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

/// A struct's fields, positional or named.
enum Fields<'v, 'a> {
    /// The values after the tag, in declaration order.
    Array(&'v [ValueRef<'a>]),
    Map(&'v [(ValueRef<'a>, ValueRef<'a>)]),
}

impl<'v, 'a> Fields<'v, 'a> {
    /// The field at `pos` (positional) or named `name`. `nil` counts as present.
    fn get(&self, pos: usize, name: &str) -> Option<&'v ValueRef<'a>> {
        match self {
            Fields::Array(values) => values.get(pos),
            Fields::Map(pairs) => pairs
                .iter()
                .find(|(key, _)| matches!(key, ValueRef::String(s) if s.as_str() == Some(name)))
                .map(|(_, value)| value),
        }
    }
}

struct Decoder {
    engine: Engine,
}

impl Decoder {
    fn batch(&self, value: &ValueRef<'_>) -> Result<KvEventBatch, DecodeError> {
        let loc = Loc::Root;
        let fields = match value {
            ValueRef::Array(values) => Fields::Array(values),
            ValueRef::Map(pairs) => Fields::Map(pairs),
            other => return Err(invalid(loc, "an array or a map", other)),
        };
        let ts_value = required(&fields, 0, "ts", loc)?;
        let ts = match ts_value {
            ValueRef::F64(v) => *v,
            ValueRef::F32(v) => f64::from(*v),
            ValueRef::Integer(i) => i.as_f64().unwrap_or_default(),
            other => return Err(invalid(Loc::Field(&loc, "ts"), "a number", other)),
        };
        let events_loc = Loc::Field(&loc, "events");
        let events_value = required(&fields, 1, "events", loc)?;
        let ValueRef::Array(raw_events) = events_value else {
            return Err(invalid(events_loc, "an array", events_value));
        };
        let data_parallel_rank = optional_u32(&fields, 2, "data_parallel_rank", loc)?;

        let mut events = Vec::with_capacity(raw_events.len());
        let mut unknown_events = 0;
        for (i, raw) in raw_events.iter().enumerate() {
            match self.event(raw, Loc::Index(&events_loc, i))? {
                Some(event) => events.push(event),
                None => unknown_events += 1,
            }
        }
        Ok(KvEventBatch {
            ts,
            events,
            data_parallel_rank,
            unknown_events,
        })
    }

    /// One event; `None` for a type this decoder does not know.
    fn event(
        &self,
        value: &ValueRef<'_>,
        loc: Loc<'_>,
    ) -> Result<Option<EngineEvent>, DecodeError> {
        let (tag, fields) = match value {
            ValueRef::Array(values) => {
                let Some((tag, rest)) = values.split_first() else {
                    return Err(DecodeError::Missing {
                        at: loc.to_string(),
                        field: "type",
                    });
                };
                (tag, Fields::Array(rest))
            }
            ValueRef::Map(pairs) => {
                let fields = Fields::Map(pairs);
                let Some(tag) = fields.get(0, "type") else {
                    return Err(DecodeError::Missing {
                        at: loc.to_string(),
                        field: "type",
                    });
                };
                (tag, fields)
            }
            other => return Err(invalid(loc, "an array or a map", other)),
        };
        let tag = match tag {
            ValueRef::String(s) => s.as_str().unwrap_or_default(),
            other => return Err(invalid(Loc::Field(&loc, "type"), "a string", other)),
        };
        let event = match tag {
            "BlockStored" => EngineEvent::BlockStored(BlockStored {
                block_hashes: self.hashes(
                    required(&fields, 0, "block_hashes", loc)?,
                    Loc::Field(&loc, "block_hashes"),
                )?,
                parent_block_hash: match required(&fields, 1, "parent_block_hash", loc)? {
                    ValueRef::Nil => None,
                    value => Some(self.hash(value, Loc::Field(&loc, "parent_block_hash"))?),
                },
                token_ids: tokens(
                    required(&fields, 2, "token_ids", loc)?,
                    Loc::Field(&loc, "token_ids"),
                )?,
                block_size: block_size(
                    required(&fields, 3, "block_size", loc)?,
                    Loc::Field(&loc, "block_size"),
                )?,
                lora_id: optional_with(
                    &fields,
                    4,
                    "lora_id",
                    loc,
                    "a 64-bit signed integer",
                    |v| integer(v)?.as_i64(),
                )?,
                medium: optional_string(&fields, 5, "medium", loc)?,
                lora_name: optional_string(&fields, 6, "lora_name", loc)?,
                extra_keys: extra_keys(&fields, loc)?,
                group_idx: optional_u32(&fields, 8, "group_idx", loc)?,
                kv_cache_spec_kind: optional_string(&fields, 9, "kv_cache_spec_kind", loc)?,
                kv_cache_spec_sliding_window: optional_u32(
                    &fields,
                    10,
                    "kv_cache_spec_sliding_window",
                    loc,
                )?,
                // SGLang's field; it has no place in vLLM's positional encoding.
                cache_salt: optional_string(&fields, usize::MAX, "cache_salt", loc)?,
                lookahead_token_ids: lookahead_token_ids(&fields, loc)?,
            }),
            "BlockRemoved" => EngineEvent::BlockRemoved(BlockRemoved {
                block_hashes: self.hashes(
                    required(&fields, 0, "block_hashes", loc)?,
                    Loc::Field(&loc, "block_hashes"),
                )?,
                medium: optional_string(&fields, 1, "medium", loc)?,
                group_idx: optional_u32(&fields, 2, "group_idx", loc)?,
            }),
            "AllBlocksCleared" => EngineEvent::AllBlocksCleared,
            _ => return Ok(None),
        };
        Ok(Some(event))
    }

    fn hashes(&self, value: &ValueRef<'_>, loc: Loc<'_>) -> Result<Vec<SeqHash>, DecodeError> {
        let ValueRef::Array(values) = value else {
            return Err(invalid(loc, "an array of block hashes", value));
        };
        values
            .iter()
            .enumerate()
            .map(|(i, v)| self.hash(v, Loc::Index(&loc, i)))
            .collect()
    }

    fn hash(&self, value: &ValueRef<'_>, loc: Loc<'_>) -> Result<SeqHash, DecodeError> {
        match value {
            ValueRef::Integer(i) => match (i.as_u64(), i.as_i64()) {
                (Some(u), _) => Ok(SeqHash(u)),
                // Negative: signed 64-bit hashes (SGLang, Python's `hash`) keep their bits.
                (None, Some(s)) => Ok(SeqHash(s as u64)),
                (None, None) => Err(invalid(loc, "a 64-bit block hash", value)),
            },
            ValueRef::Binary(digest) => self
                .engine
                .hash_from_bytes(digest)
                .ok_or_else(|| invalid(loc, "a block hash digest of at least 8 bytes", value)),
            other => Err(invalid(loc, "a block hash (an integer or bytes)", other)),
        }
    }
}

fn required<'v, 'a>(
    fields: &Fields<'v, 'a>,
    pos: usize,
    name: &'static str,
    loc: Loc<'_>,
) -> Result<&'v ValueRef<'a>, DecodeError> {
    fields.get(pos, name).ok_or_else(|| DecodeError::Missing {
        at: loc.to_string(),
        field: name,
    })
}

/// A field that may be absent; absent and `nil` are both `None`.
fn optional<'v, 'a>(fields: &Fields<'v, 'a>, pos: usize, name: &str) -> Option<&'v ValueRef<'a>> {
    fields
        .get(pos, name)
        .filter(|v| !matches!(v, ValueRef::Nil))
}

/// An optional field converted by `convert`; a value it refuses is an error naming `expected`.
fn optional_with<T>(
    fields: &Fields<'_, '_>,
    pos: usize,
    name: &'static str,
    loc: Loc<'_>,
    expected: &'static str,
    convert: impl Fn(&ValueRef<'_>) -> Option<T>,
) -> Result<Option<T>, DecodeError> {
    optional(fields, pos, name)
        .map(|v| convert(v).ok_or_else(|| invalid(Loc::Field(&loc, name), expected, v)))
        .transpose()
}

fn optional_u32(
    fields: &Fields<'_, '_>,
    pos: usize,
    name: &'static str,
    loc: Loc<'_>,
) -> Result<Option<u32>, DecodeError> {
    optional_with(fields, pos, name, loc, "an integer in 0..2^32", as_u32)
}

fn optional_string(
    fields: &Fields<'_, '_>,
    pos: usize,
    name: &'static str,
    loc: Loc<'_>,
) -> Result<Option<String>, DecodeError> {
    optional_with(fields, pos, name, loc, "a UTF-8 string", |v| match v {
        ValueRef::String(s) => s.as_str().map(str::to_owned),
        _ => None,
    })
}

fn as_u32(value: &ValueRef<'_>) -> Option<u32> {
    value.as_u64().and_then(|u| u32::try_from(u).ok())
}

fn integer(value: &ValueRef<'_>) -> Option<rmpv::Integer> {
    match value {
        ValueRef::Integer(i) => Some(*i),
        _ => None,
    }
}

fn tokens(value: &ValueRef<'_>, loc: Loc<'_>) -> Result<Vec<u32>, DecodeError> {
    let ValueRef::Array(values) = value else {
        return Err(invalid(loc, "an array of token ids", value));
    };
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            as_u32(v).ok_or_else(|| invalid(Loc::Index(&loc, i), "a token id in 0..2^32", v))
        })
        .collect()
}

/// `extra_keys` (position 7): `nil`, or one entry per block, each `nil` or a list of items.
/// Items of shapes vLLM does not publish decode as [`RawExtraKey::Unknown`], for the mapper to
/// refuse with a reason.
fn extra_keys(
    fields: &Fields<'_, '_>,
    loc: Loc<'_>,
) -> Result<Option<Vec<Option<Vec<RawExtraKey>>>>, DecodeError> {
    let Some(value) = optional(fields, 7, "extra_keys") else {
        return Ok(None);
    };
    let loc = Loc::Field(&loc, "extra_keys");
    let ValueRef::Array(blocks) = value else {
        return Err(invalid(loc, "an array of per-block extra keys", value));
    };
    let block = |(i, entry): (usize, &ValueRef<'_>)| match entry {
        ValueRef::Nil => Ok(None),
        ValueRef::Array(items) => Ok(Some(items.iter().map(raw_extra_key).collect())),
        other => Err(invalid(
            Loc::Index(&loc, i),
            "nil or an array of extra keys",
            other,
        )),
    };
    blocks
        .iter()
        .enumerate()
        .map(block)
        .collect::<Result<_, _>>()
        .map(Some)
}

/// `lookahead_token_ids` (position 14): `nil`, or one list of token ids per block.
fn lookahead_token_ids(
    fields: &Fields<'_, '_>,
    loc: Loc<'_>,
) -> Result<Option<Vec<Vec<u32>>>, DecodeError> {
    let Some(value) = optional(fields, 14, "lookahead_token_ids") else {
        return Ok(None);
    };
    let loc = Loc::Field(&loc, "lookahead_token_ids");
    let ValueRef::Array(blocks) = value else {
        return Err(invalid(loc, "an array of per-block token lists", value));
    };
    blocks
        .iter()
        .enumerate()
        .map(|(i, list)| tokens(list, Loc::Index(&loc, i)))
        .collect::<Result<_, _>>()
        .map(Some)
}

fn raw_extra_key(value: &ValueRef<'_>) -> RawExtraKey {
    match value {
        ValueRef::String(s) => match s.as_str() {
            Some(text) => RawExtraKey::Text(text.to_owned()),
            None => RawExtraKey::Unknown(describe(value)),
        },
        ValueRef::Binary(bytes) => RawExtraKey::Bytes(bytes.to_vec()),
        ValueRef::Array(pair) => match pair.as_slice() {
            [ValueRef::String(id), ValueRef::Integer(offset)] => {
                match (id.as_str(), offset.as_i64()) {
                    (Some(id), Some(offset)) => RawExtraKey::Multimodal(id.to_owned(), offset),
                    _ => RawExtraKey::Unknown(describe(value)),
                }
            }
            _ => RawExtraKey::Unknown(describe(value)),
        },
        other => RawExtraKey::Unknown(describe(other)),
    }
}

fn block_size(value: &ValueRef<'_>, loc: Loc<'_>) -> Result<u32, DecodeError> {
    as_u32(value)
        .filter(|&size| size > 0)
        .ok_or_else(|| invalid(loc, "a block size in 1..2^32", value))
}

fn invalid(loc: Loc<'_>, expected: &'static str, found: &ValueRef<'_>) -> DecodeError {
    DecodeError::Invalid {
        at: loc.to_string(),
        expected,
        found: describe(found),
    }
}

/// A short description of a value for error messages (never the whole value: it may be huge).
fn describe(value: &ValueRef<'_>) -> String {
    match value {
        ValueRef::Nil => "nil".into(),
        ValueRef::Boolean(b) => format!("the boolean {b}"),
        ValueRef::Integer(i) => format!("the integer {i}"),
        ValueRef::F32(v) => format!("the float {v}"),
        ValueRef::F64(v) => format!("the float {v}"),
        ValueRef::String(s) => match s.as_str() {
            Some(s) if s.len() <= 32 => format!("the string {s:?}"),
            _ => format!("a string of {} bytes", s.as_bytes().len()),
        },
        ValueRef::Binary(b) => format!("{} bytes", b.len()),
        ValueRef::Array(a) => format!("an array of {}", a.len()),
        ValueRef::Map(m) => format!("a map of {}", m.len()),
        ValueRef::Ext(ty, b) => format!("an extension (type {ty}, {} bytes)", b.len()),
    }
}
