//! The prefix store: tokens of prompts seen before, kept by chunks of their text, so that a
//! prompt extending an earlier one is tokenized only from where the shared text stops.
//!
//! A prompt's text is cut into chunks of [`CHUNK_BYTES`]; chunk k is keyed by a 128-bit hash
//! chained over chunks 1..=k (and the encoding mode). Its entry holds the tokens between two
//! *restart points*: word starts far enough before the chunk's end that no byte after the chunk
//! can change a token before them (a pre-tokenizer's word is decided by its own bytes and the
//! next character; BPE never merges across words). A lookup follows the chain while entries
//! exist, concatenates their tokens and says where tokenizing must resume; an insert stores the
//! chunks a prompt adds. Entries are evicted least recently used first, bounded in bytes.

use lru::LruCache;
use xxhash_rust::xxh3::Xxh3;

/// Bytes of prompt text per chunk (llm-d's prefix store keys 256-character blocks too).
pub const CHUNK_BYTES: usize = 256;

/// A restart point stays this many bytes before its chunk's end: room for the character a
/// pre-tokenizer's pattern may look at after a word, with a margin.
const MARGIN_BYTES: usize = 16;

/// What an entry costs beyond its tokens: the key, the LRU links and the allocation.
const ENTRY_OVERHEAD_BYTES: usize = 96;

/// A prompt's tokens with the tokenizer's word starts: `(token index, byte offset)` of every
/// token that begins a word, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tokenized {
    /// The token ids.
    pub ids: Vec<u32>,
    /// Where words start: the index of their first token and its byte offset in the text.
    pub word_starts: Vec<(usize, usize)>,
}

/// The longest stored prefix of a text: its tokens, and where tokenizing resumes.
#[derive(Debug, Default)]
pub struct Found {
    /// Tokens of the text before `resume`.
    pub ids: Vec<u32>,
    /// Byte offset where the rest of the text must be tokenized (a word start).
    pub resume: usize,
    /// Chunks found.
    chunks: usize,
    /// The chained key of the last chunk found.
    key: u128,
}

struct Entry {
    /// Tokens from the previous chunk's restart point to this chunk's.
    ids: Box<[u32]>,
    /// This chunk's restart point (byte offset).
    restart: usize,
}

impl Entry {
    fn bytes(&self) -> usize {
        self.ids.len() * 4 + ENTRY_OVERHEAD_BYTES
    }
}

/// Chunks of tokenized prompts, least recently used evicted first once over `capacity` bytes.
pub struct PrefixStore {
    entries: LruCache<u128, Entry>,
    capacity: usize,
    used: usize,
}

impl PrefixStore {
    /// An empty store of at most `capacity` bytes (0 keeps nothing).
    pub fn new(capacity: usize) -> PrefixStore {
        PrefixStore {
            entries: LruCache::unbounded(),
            capacity,
            used: 0,
        }
    }

    /// Bytes held.
    pub fn used_bytes(&self) -> usize {
        self.used
    }

    /// Chunks held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tokens of the longest stored prefix of `text` under `mode` (one per way of encoding:
    /// with or without the tokenizer's special tokens).
    pub fn lookup(&mut self, mode: u64, text: &[u8]) -> Found {
        let mut found = Found::default();
        let mut key = 0u128;
        for (k, chunk) in text.chunks_exact(CHUNK_BYTES).enumerate() {
            key = chain(mode, key, chunk);
            let Some(entry) = self.entries.get(&key) else {
                break;
            };
            found.ids.extend_from_slice(&entry.ids);
            found.resume = entry.restart;
            found.chunks = k + 1;
            found.key = key;
        }
        found
    }

    /// Stores the chunks of `text` after those `found` had, given the whole text's tokens
    /// (`found`'s followed by the rest's, word starts in the whole text's offsets).
    pub fn insert(&mut self, mode: u64, text: &[u8], found: &Found, tokens: &Tokenized) {
        if self.capacity == 0 {
            return;
        }
        let (mut key, mut restart, mut first) = (found.key, found.resume, found.ids.len());
        let mut starts = tokens.word_starts.iter().peekable();
        for (k, chunk) in text
            .chunks_exact(CHUNK_BYTES)
            .enumerate()
            .skip(found.chunks)
        {
            key = chain(mode, key, chunk);
            let end = (k + 1) * CHUNK_BYTES;
            // The last word start at least MARGIN_BYTES before the chunk's end.
            let mut point = (first, restart);
            while let Some(&&(index, offset)) = starts.peek() {
                if offset + MARGIN_BYTES > end {
                    break;
                }
                if offset >= restart && index >= first {
                    point = (index, offset);
                }
                starts.next();
            }
            let entry = Entry {
                ids: tokens.ids[first..point.0].into(),
                restart: point.1,
            };
            (first, restart) = point;
            self.used += entry.bytes();
            if let Some((_, old)) = self.entries.push(key, entry) {
                self.used -= old.bytes();
            }
        }
        while self.used > self.capacity {
            match self.entries.pop_lru() {
                Some((_, old)) => self.used -= old.bytes(),
                None => break,
            }
        }
    }
}

/// Chunk k's key: chunk k's bytes hashed with chunk k-1's key and the mode.
fn chain(mode: u64, previous: u128, chunk: &[u8]) -> u128 {
    let mut hasher = Xxh3::with_seed(mode);
    hasher.update(&previous.to_le_bytes());
    hasher.update(chunk);
    hasher.digest128()
}
