//! The fast path of [`super::parse`]: a scanner for the events publishers write.
//!
//! It accepts objects whose keys are the known ones (in any order, each once, no escapes), whose
//! numbers are plain unsigned integers that fit, and JSON whitespace anywhere between tokens.
//! Anything else (an unknown or repeated key, an escape, a sign, a fraction, an exponent, an
//! overflow, a syntax error) makes it answer `None` and leaves the bytes to `serde_json`, which
//! either decodes them its general way or says what is wrong with them. So it never has to
//! produce an error message, and never decides alone that bytes are bad.

use super::DynamoEvent;
use flash_indexer::EventKind;
use flash_indexer::{Block, LocalHash, SeqHash};

/// The event in `bytes`, if they have the publishers' shape; `None` otherwise.
pub(super) fn parse(bytes: &[u8]) -> Option<DynamoEvent> {
    let mut scanner = Scanner { bytes, at: 0 };
    let event = scanner.event()?;
    scanner.skip_whitespace();
    (scanner.at == bytes.len()).then_some(event)
}

/// A position in the event's bytes.
struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// Fills an empty `slot`; `None` for a second value, since a repeated key is `serde_json`'s
/// to judge.
fn fill<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    match slot {
        Some(_) => None,
        None => {
            *slot = Some(value);
            Some(())
        }
    }
}

impl Scanner<'_> {
    fn event(&mut self) -> Option<DynamoEvent> {
        let (mut event_id, mut dp_rank, mut data) = (None, None, None);
        self.object(&[b"event_id", b"dp_rank", b"data"], |s, key| match key {
            0 => fill(&mut event_id, s.unsigned()?),
            1 => fill(&mut dp_rank, u32::try_from(s.unsigned()?).ok()?),
            _ => fill(&mut data, s.data()?),
        })?;
        Some(DynamoEvent {
            event_id: event_id.unwrap_or(0),
            dp_rank: dp_rank.unwrap_or(0),
            data: data?,
        })
    }

    /// `"cleared"`, `{"stored": {...}}` or `{"removed": {...}}`.
    fn data(&mut self) -> Option<EventKind> {
        self.skip_whitespace();
        if self.peek()? == b'"' {
            self.known_key(&[b"cleared"])?;
            return Some(EventKind::Cleared);
        }
        let mut data = None;
        self.object(&[b"stored", b"removed"], |s, key| match key {
            0 => fill(&mut data, s.stored()?),
            _ => fill(&mut data, s.removed()?),
        })?;
        data
    }

    fn stored(&mut self) -> Option<EventKind> {
        let (mut parent, mut blocks) = (None, None);
        self.object(&[b"parent_hash", b"blocks"], |s, key| match key {
            0 => fill(&mut parent, s.unsigned_or_null()?),
            _ => fill(&mut blocks, s.blocks()?),
        })?;
        Some(EventKind::Stored {
            // A missing `parent_hash` is `None`, as serde reads a missing `Option` field.
            parent: parent.flatten().map(SeqHash),
            blocks: blocks?,
        })
    }

    fn blocks(&mut self) -> Option<Vec<Block>> {
        let mut blocks = Vec::new();
        self.array(|s| {
            blocks.push(s.block()?);
            Some(())
        })?;
        Some(blocks)
    }

    fn block(&mut self) -> Option<Block> {
        let (mut seq, mut local) = (None, None);
        self.object(&[b"block_hash", b"tokens_hash"], |s, key| match key {
            0 => fill(&mut seq, s.unsigned()?),
            _ => fill(&mut local, s.unsigned()?),
        })?;
        Some(Block::new(LocalHash(local?), SeqHash(seq?)))
    }

    fn removed(&mut self) -> Option<EventKind> {
        let mut hashes = None;
        self.object(&[b"block_hashes"], |s, _| {
            let mut seqs = Vec::new();
            s.array(|s| {
                seqs.push(SeqHash(s.unsigned()?));
                Some(())
            })?;
            fill(&mut hashes, seqs)
        })?;
        Some(EventKind::Removed { blocks: hashes? })
    }

    /// An object whose keys are among `keys`: each member's key, as its place in `keys`, is
    /// handed to `member`, which reads the value.
    fn object(
        &mut self,
        keys: &[&[u8]],
        mut member: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<()> {
        self.expect(b'{')?;
        if self.next_is(b'}') {
            return Some(());
        }
        loop {
            let key = self.known_key(keys)?;
            self.expect(b':')?;
            member(self, key)?;
            if self.next_is(b'}') {
                return Some(());
            }
            self.expect(b',')?;
        }
    }

    /// An array, `element` reading each element.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(b'[')?;
        if self.next_is(b']') {
            return Some(());
        }
        loop {
            element(self)?;
            if self.next_is(b']') {
                return Some(());
            }
            self.expect(b',')?;
        }
    }

    /// A string that is one of `keys` (plain ASCII names): its place in `keys`.
    ///
    /// Comparing the bytes after the opening quote with each name and its closing quote is exact,
    /// since a name holds no quote, backslash or control character: the string is that name and
    /// nothing else.
    fn known_key(&mut self, keys: &[&[u8]]) -> Option<usize> {
        self.expect(b'"')?;
        let rest = &self.bytes[self.at..];
        let found = keys.iter().position(|key| {
            rest.len() > key.len() && rest.starts_with(key) && rest[key.len()] == b'"'
        })?;
        self.at += keys[found].len() + 1;
        Some(found)
    }

    /// A JSON integer in `0..=u64::MAX`: digits without a sign or leading zeros, not followed by
    /// a fraction or an exponent.
    fn unsigned(&mut self) -> Option<u64> {
        self.skip_whitespace();
        let rest = &self.bytes[self.at..];
        let (mut value, mut digits) = (0u64, 0);
        // Eight digits a step while the value stays below 10^16; a digit a step to nineteen
        // (below 10^19 < u64::MAX, so neither can overflow); checked steps beyond.
        while digits < 16
            && let Some(chunk) = rest.get(digits..digits + 8)
            && let Some(eight) = eight_digits(chunk)
        {
            value = value * 100_000_000 + eight;
            digits += 8;
        }
        while let Some(digit) = rest.get(digits).and_then(|&b| digit(b)) {
            value = if digits < 19 {
                value * 10 + digit
            } else {
                value.checked_mul(10)?.checked_add(digit)?
            };
            digits += 1;
        }
        if digits == 0 || (digits > 1 && rest[0] == b'0') {
            return None;
        }
        if matches!(rest.get(digits), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        self.at += digits;
        Some(value)
    }

    fn unsigned_or_null(&mut self) -> Option<Option<u64>> {
        self.skip_whitespace();
        if self.bytes[self.at..].starts_with(b"null") {
            self.at += 4;
            return Some(None);
        }
        self.unsigned().map(Some)
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    /// Consumes `byte`, after any whitespace; `None` if something else comes.
    fn expect(&mut self, byte: u8) -> Option<()> {
        self.next_is(byte).then_some(())
    }

    /// Consumes `byte` if it comes next, after any whitespace.
    fn next_is(&mut self, byte: u8) -> bool {
        self.skip_whitespace();
        let found = self.peek() == Some(byte);
        self.at += usize::from(found);
        found
    }
}

fn digit(byte: u8) -> Option<u64> {
    byte.is_ascii_digit().then(|| u64::from(byte - b'0'))
}

/// The value of eight ASCII digits, or `None` if any of the eight bytes is not a digit.
///
/// The bytes are read as one little-endian word and combined in three multiplications (pairs,
/// then fours, then the eight), instead of eight dependent multiply-adds: the numbers of an
/// event are most of its bytes.
fn eight_digits(chunk: &[u8]) -> Option<u64> {
    let word = u64::from_le_bytes(chunk.try_into().ok()?);
    let values = word.wrapping_sub(0x3030_3030_3030_3030);
    // Every byte is a digit iff each is at least b'0' (no borrow set a high nibble) and adding
    // six keeps it below 0x10 (it was at most b'9').
    let all_digits = (word & 0xF0F0_F0F0_F0F0_F0F0) == 0x3030_3030_3030_3030
        && (values.wrapping_add(0x0606_0606_0606_0606) & 0xF0F0_F0F0_F0F0_F0F0) == 0;
    if !all_digits {
        return None;
    }
    // The first digit is the lowest byte: pairs `10 * d0 + d1` in every other byte ...
    let pairs = (values.wrapping_mul(10) + (values >> 8)) & 0x00FF_00FF_00FF_00FF;
    // ... fours `100 * p0 + p1` in the low 16 bits of each half ...
    let fours = (pairs.wrapping_mul(100) + (pairs >> 16)) & 0x0000_FFFF_0000_FFFF;
    // ... and the eight, `10_000 * f0 + f1`.
    Some((fours.wrapping_mul(10_000) + (fours >> 32)) & 0xFFFF_FFFF)
}
