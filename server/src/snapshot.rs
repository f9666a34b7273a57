//! Snapshots: the whole index as bytes, on disk and over `GET /dump`.
//!
//! Layout, little-endian:
//!
//! | bytes | what |
//! |---|---|
//! | 8 | magic `FLASHIDX` |
//! | 4 | format version (1) |
//! | 8 | XXH3-64 of the body |
//! | 8 | body length |
//! | n | body: JSON, [`Contents`] |
//!
//! The body is every index's [`KvIndex::dump`](flash_indexer::KvIndex::dump): events that,
//! applied to an empty index, answer every query as the index did (with each event's group, for
//! a model with several KV-cache groups). A file is written to a
//! temporary name, synced, then renamed over the old one, so a crash leaves the old snapshot or
//! the new one, never half of one; a reader checks magic, version, length and checksum before it
//! parses anything.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use flash_indexer::Event;
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

/// The first bytes of every snapshot.
pub const MAGIC: &[u8; 8] = b"FLASHIDX";
/// The format this build writes and reads.
pub const VERSION: u32 = 1;
/// The snapshot's file name inside the snapshot directory.
pub const FILE_NAME: &str = "index.snapshot";
const HEADER: usize = 8 + 4 + 8 + 8;

/// What a snapshot holds.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Contents {
    /// When it was taken, in milliseconds since the Unix epoch.
    pub taken_unix_ms: u64,
    /// One entry per index (model and tier).
    pub indexes: Vec<IndexDump>,
}

/// One index of a snapshot.
#[derive(Debug, Serialize, Deserialize)]
pub struct IndexDump {
    /// The model.
    pub model: String,
    /// The storage tier.
    pub tier: String,
    /// Events that rebuild it.
    pub events: Vec<Event>,
    /// For a model with several KV-cache groups, each event's group (`HybridIndex::dump`);
    /// empty for other models.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<u32>,
}

/// Why a snapshot was not read.
#[derive(Debug)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The file could not be read or written.
    Io(std::io::Error),
    /// Not a snapshot at all (another file, or the start of one is lost).
    NotASnapshot,
    /// A snapshot of a format this build does not read.
    Version(u32),
    /// Shorter or longer than its header says: cut off, or appended to.
    Length {
        /// What the header says.
        expected: u64,
        /// What is there.
        found: u64,
    },
    /// The body does not match its checksum: corrupt.
    Checksum,
    /// The checksum matches but the body does not parse (written by a broken build).
    Body(String),
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Io(error) => write!(f, "{error}"),
            SnapshotError::NotASnapshot => write!(f, "not a flash-indexer snapshot (bad magic)"),
            SnapshotError::Version(v) => {
                write!(f, "snapshot format {v}, this build reads format {VERSION}")
            }
            SnapshotError::Length { expected, found } => write!(
                f,
                "truncated or padded: the header says {expected} body bytes, {found} are there"
            ),
            SnapshotError::Checksum => write!(f, "corrupt: the body does not match its checksum"),
            SnapshotError::Body(why) => write!(f, "unreadable body: {why}"),
        }
    }
}

impl std::error::Error for SnapshotError {}

impl From<std::io::Error> for SnapshotError {
    fn from(error: std::io::Error) -> Self {
        SnapshotError::Io(error)
    }
}

/// `contents` as snapshot bytes.
pub fn encode(contents: &Contents) -> Vec<u8> {
    let body = serde_json::to_vec(contents).expect("events serialize to JSON");
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&xxh3_64(&body).to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Checks and parses snapshot bytes.
pub fn decode(bytes: &[u8]) -> Result<Contents, SnapshotError> {
    if bytes.len() < 8 || &bytes[..8] != MAGIC {
        return Err(SnapshotError::NotASnapshot);
    }
    if bytes.len() < HEADER {
        return Err(SnapshotError::Length {
            expected: HEADER as u64,
            found: bytes.len() as u64,
        });
    }
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(SnapshotError::Version(version));
    }
    let (checksum, length) = (word(12), word(20));
    let body = &bytes[HEADER..];
    if body.len() as u64 != length {
        return Err(SnapshotError::Length {
            expected: length,
            found: body.len() as u64,
        });
    }
    if xxh3_64(body) != checksum {
        return Err(SnapshotError::Checksum);
    }
    serde_json::from_slice(body).map_err(|e| SnapshotError::Body(e.to_string()))
}

/// The snapshot file of `dir`.
pub fn path_in(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Writes `bytes` as the snapshot of `dir`, atomically: a temporary file, synced, renamed over
/// the old snapshot, and the directory synced.
pub fn write_atomic(dir: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let temp = dir.join(format!("{FILE_NAME}.tmp-{}", std::process::id()));
    let mut file = std::fs::File::create(&temp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temp, path_in(dir))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Reads the snapshot of `dir`: `Ok(None)` when there is none.
pub fn read(dir: &Path) -> Result<Option<Contents>, SnapshotError> {
    match std::fs::read(path_in(dir)) {
        Ok(bytes) => decode(&bytes).map(Some),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash_indexer::{Block, LocalHash, SeqHash, Worker};

    fn sample() -> Contents {
        let blocks = vec![
            Block::new(LocalHash(1), SeqHash(10)),
            Block::new(LocalHash(2), SeqHash(20)),
        ];
        Contents {
            taken_unix_ms: 7,
            indexes: vec![IndexDump {
                model: "m".into(),
                tier: "GPU".into(),
                events: vec![Event::stored(Worker::new(3, 1), 0, None, blocks)],
                groups: Vec::new(),
            }],
        }
    }

    #[test]
    fn round_trip() {
        let bytes = encode(&sample());
        let back = decode(&bytes).unwrap();
        assert_eq!(back.taken_unix_ms, 7);
        assert_eq!(back.indexes[0].events, sample().indexes[0].events);
    }

    #[test]
    fn every_damage_is_named() {
        let bytes = encode(&sample());
        assert!(matches!(decode(b"hello"), Err(SnapshotError::NotASnapshot)));
        assert!(matches!(
            decode(&bytes[..HEADER - 1]),
            Err(SnapshotError::Length { .. })
        ));
        assert!(matches!(
            decode(&bytes[..bytes.len() - 1]),
            Err(SnapshotError::Length { .. })
        ));
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(matches!(decode(&flipped), Err(SnapshotError::Checksum)));
        let mut future = bytes.clone();
        future[8] = 9;
        assert!(matches!(decode(&future), Err(SnapshotError::Version(9))));
    }

    #[test]
    fn atomic_write_replaces_and_reads_back() {
        let dir = std::env::temp_dir().join(format!("fis-snap-{}", std::process::id()));
        assert!(read(&dir).unwrap().is_none());
        write_atomic(&dir, &encode(&Contents::default())).unwrap();
        write_atomic(&dir, &encode(&sample())).unwrap();
        assert_eq!(read(&dir).unwrap().unwrap().indexes.len(), 1);
        let leftovers = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file is left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
