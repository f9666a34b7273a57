//! A routing decision as router replicas share it, and its bytes on the wire.
//!
//! A transport (the in-process [`MemoryLog`](super::MemoryLog), a Redis stream) carries opaque
//! bytes; every replica decodes and validates each entry once, so a malformed entry is refused
//! with a reason wherever it came from. The layout is fixed and little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 1 | format version, [`FORMAT`] |
//! | 1 | kind: 1 routed, 2 released |
//! | 8 | origin: the replica that decided |
//! | 8 | seq: the entry's number among its origin's entries, from 1, increasing |
//! | 8 | time of the decision, nanoseconds since the replicas' common origin of time |
//! | 8 | request: the routed request's number in its origin |
//! | routed only: 8 + 4 | the worker's id and data-parallel rank |
//! | routed only: 4 + 8 × n | n, then the request's n local block hashes |

use crate::types::{LocalHash, Worker};
use core::fmt;
use core::time::Duration;

/// The version byte that starts every entry this crate writes.
pub const FORMAT: u8 = 1;

/// The most blocks one routed entry may carry (a 1M-token prompt in blocks of 16).
pub const MAX_BLOCKS: usize = 1 << 16;

const KIND_ROUTED: u8 = 1;
const KIND_RELEASED: u8 = 2;
const HEADER: usize = 1 + 1 + 8 + 8 + 8 + 8;
const ROUTED_HEADER: usize = HEADER + 8 + 4 + 4;

/// What a replica decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The replica sent request `request`, whose chain of local hashes is `locals`, to `worker`.
    Routed {
        /// The request's number in its origin (what a later release names).
        request: u64,
        /// The worker it was sent to.
        worker: Worker,
        /// The request's local block hashes, first block first.
        locals: Vec<LocalHash>,
    },
    /// Request `request` of the same origin finished.
    Released {
        /// The finished request's number in its origin.
        request: u64,
    },
}

/// One shared decision: who decided, its place among that replica's entries, and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The replica that decided (its random tag).
    pub origin: u64,
    /// The entry's number among its origin's entries: from 1, increasing by one.
    pub seq: u64,
    /// When it was decided, on the clock every replica passes as `now`.
    pub at: Duration,
    /// What was decided.
    pub decision: Decision,
}

/// Why bytes are not an [`Entry`]: the entry is refused and counted, never applied in part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MalformedEntry {
    /// Fewer bytes than the entry's kind needs.
    Truncated,
    /// A version byte other than [`FORMAT`].
    UnknownFormat(u8),
    /// A kind byte that is neither routed (1) nor released (2).
    UnknownKind(u8),
    /// A sequence number of 0 (they start at 1).
    ZeroSeq,
    /// More blocks than [`MAX_BLOCKS`].
    TooManyBlocks(u32),
    /// Bytes after the entry's last field.
    TrailingBytes(usize),
}

impl fmt::Display for MalformedEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("decision entry is truncated"),
            Self::UnknownFormat(v) => write!(f, "decision entry has unknown format version {v}"),
            Self::UnknownKind(k) => write!(f, "decision entry has unknown kind {k}"),
            Self::ZeroSeq => f.write_str("decision entry has sequence number 0"),
            Self::TooManyBlocks(n) => {
                write!(
                    f,
                    "decision entry carries {n} blocks (at most {MAX_BLOCKS})"
                )
            }
            Self::TrailingBytes(n) => write!(f, "decision entry has {n} trailing bytes"),
        }
    }
}

impl std::error::Error for MalformedEntry {}

impl Entry {
    /// The entry's bytes (see [the module](self)).
    pub fn encode(&self) -> Vec<u8> {
        let (kind, request) = match &self.decision {
            Decision::Routed { request, .. } => (KIND_ROUTED, *request),
            Decision::Released { request } => (KIND_RELEASED, *request),
        };
        let blocks = match &self.decision {
            Decision::Routed { locals, .. } => locals.len(),
            Decision::Released { .. } => 0,
        };
        let mut out = Vec::with_capacity(ROUTED_HEADER + 8 * blocks);
        out.push(FORMAT);
        out.push(kind);
        out.extend_from_slice(&self.origin.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        let nanos = u64::try_from(self.at.as_nanos()).unwrap_or(u64::MAX);
        out.extend_from_slice(&nanos.to_le_bytes());
        out.extend_from_slice(&request.to_le_bytes());
        if let Decision::Routed { worker, locals, .. } = &self.decision {
            out.extend_from_slice(&worker.id.to_le_bytes());
            out.extend_from_slice(&worker.dp_rank.to_le_bytes());
            // Entries are made from requests the router holds; a longer chain than `u32` counts
            // cannot be one, and `decode` refuses more than `MAX_BLOCKS` anyway.
            out.extend_from_slice(&(locals.len() as u32).to_le_bytes());
            for local in locals {
                out.extend_from_slice(&local.0.to_le_bytes());
            }
        }
        out
    }

    /// Reads an entry, refusing anything but exactly one well-formed entry.
    pub fn decode(bytes: &[u8]) -> Result<Self, MalformedEntry> {
        let mut r = Reader(bytes);
        let format = r.u8()?;
        if format != FORMAT {
            return Err(MalformedEntry::UnknownFormat(format));
        }
        let kind = r.u8()?;
        if kind != KIND_ROUTED && kind != KIND_RELEASED {
            return Err(MalformedEntry::UnknownKind(kind));
        }
        let origin = r.u64()?;
        let seq = r.u64()?;
        if seq == 0 {
            return Err(MalformedEntry::ZeroSeq);
        }
        let at = Duration::from_nanos(r.u64()?);
        let request = r.u64()?;
        let decision = if kind == KIND_ROUTED {
            let worker = Worker::new(r.u64()?, r.u32()?);
            let n = r.u32()?;
            if n as usize > MAX_BLOCKS {
                return Err(MalformedEntry::TooManyBlocks(n));
            }
            if r.0.len() < 8 * n as usize {
                return Err(MalformedEntry::Truncated);
            }
            let locals = (0..n)
                .map(|_| r.u64().map(LocalHash))
                .collect::<Result<_, _>>()?;
            Decision::Routed {
                request,
                worker,
                locals,
            }
        } else {
            Decision::Released { request }
        };
        if !r.0.is_empty() {
            return Err(MalformedEntry::TrailingBytes(r.0.len()));
        }
        Ok(Self {
            origin,
            seq,
            at,
            decision,
        })
    }
}

/// Little-endian fields off the front of a byte slice.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], MalformedEntry> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(MalformedEntry::Truncated)?;
        self.0 = rest;
        Ok(*head)
    }
    fn u8(&mut self) -> Result<u8, MalformedEntry> {
        Ok(self.take::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32, MalformedEntry> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, MalformedEntry> {
        Ok(u64::from_le_bytes(self.take()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::{any, prop_assert_eq};

    fn routed() -> Entry {
        Entry {
            origin: 7,
            seq: 3,
            at: Duration::from_micros(1_500),
            decision: Decision::Routed {
                request: 2,
                worker: Worker::new(4, 1),
                locals: vec![LocalHash(10), LocalHash(u64::MAX)],
            },
        }
    }

    #[test]
    fn entries_round_trip() {
        let released = Entry {
            decision: Decision::Released { request: 2 },
            ..routed()
        };
        for entry in [routed(), released] {
            assert_eq!(Entry::decode(&entry.encode()), Ok(entry));
        }
    }

    proptest::proptest! {
        /// An entry with one byte changed (or none): refused, or an entry whose encoding is
        /// exactly those bytes.
        #[test]
        fn changed_bytes_decode_to_nothing_or_to_themselves(
            (origin, seq, nanos, request) in (any::<u64>(), 1..u64::MAX, any::<u64>(), any::<u64>()),
            routed in proptest::option::of((any::<u64>(), any::<u32>(), vec(any::<u64>(), 0..6))),
            change in proptest::option::of((any::<proptest::sample::Index>(), any::<u8>())),
        ) {
            let decision = match routed {
                Some((id, rank, locals)) => Decision::Routed {
                    request,
                    worker: Worker::new(id, rank),
                    locals: locals.into_iter().map(LocalHash).collect(),
                },
                None => Decision::Released { request },
            };
            let at = Duration::from_nanos(nanos);
            let mut bytes = Entry { origin, seq, at, decision }.encode();
            if let Some((at, value)) = change {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
            if let Ok(entry) = Entry::decode(&bytes) {
                prop_assert_eq!(entry.encode(), bytes);
            }
        }
    }

    #[test]
    fn every_malformed_shape_is_refused_with_its_reason() {
        let bytes = routed().encode();
        for cut in 0..bytes.len() {
            assert_eq!(
                Entry::decode(&bytes[..cut]),
                Err(MalformedEntry::Truncated),
                "{cut}"
            );
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(Entry::decode(&long), Err(MalformedEntry::TrailingBytes(1)));
        let with = |at: usize, value: u8| {
            let mut b = bytes.clone();
            b[at] = value;
            Entry::decode(&b)
        };
        assert_eq!(with(0, 9), Err(MalformedEntry::UnknownFormat(9)));
        assert_eq!(with(1, 3), Err(MalformedEntry::UnknownKind(3)));
        let mut zero = bytes.clone();
        zero[10..18].fill(0);
        assert_eq!(Entry::decode(&zero), Err(MalformedEntry::ZeroSeq));
        let mut huge = bytes.clone();
        huge[HEADER + 12..ROUTED_HEADER].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            Entry::decode(&huge),
            Err(MalformedEntry::TooManyBlocks(u32::MAX))
        );
    }
}
