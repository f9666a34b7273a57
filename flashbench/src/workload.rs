//! The workload file format (`WORKLOAD.md` in the project's shared folder): JSON Lines, a header
//! then one operation a line, sorted by `t`.

use flash_indexer::{Block, Event, EventKind, LocalHash, SeqHash, Worker};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};

/// The `format` every workload file declares.
pub const FORMAT: &str = "flash-indexer-workload";
/// The newest version this build reads and writes.
pub const VERSION: u32 = 1;

/// The first line of a workload file. Fields beyond `format`, `version` and `block_size` are
/// informational.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u32,
    pub block_size: usize,
    #[serde(default)]
    pub workers: Option<u64>,
    #[serde(default)]
    pub capacity_blocks: Option<usize>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub seed: Option<u64>,
}

/// One operation of a workload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Op {
    /// A router query for a request sent to worker (`w`, `r`).
    Match { t: u64, w: u64, r: u32, q: Vec<u64> },
    /// Blocks stored, `[local, seq]` pairs.
    Store {
        t: u64,
        w: u64,
        r: u32,
        id: u64,
        parent: Option<u64>,
        blocks: Vec<[u64; 2]>,
    },
    /// Blocks evicted.
    Remove {
        t: u64,
        w: u64,
        r: u32,
        id: u64,
        blocks: Vec<u64>,
    },
    /// Every block of the worker dropped.
    Clear { t: u64, w: u64, r: u32, id: u64 },
}

impl Op {
    /// Microseconds since the start of the trace.
    pub fn t(&self) -> u64 {
        match self {
            Op::Match { t, .. }
            | Op::Store { t, .. }
            | Op::Remove { t, .. }
            | Op::Clear { t, .. } => *t,
        }
    }

    /// The index event of a store, remove or clear; `None` for a match.
    pub fn event(&self) -> Option<Event> {
        Some(match self {
            Op::Match { .. } => return None,
            Op::Store {
                w,
                r,
                id,
                parent,
                blocks,
                ..
            } => Event::stored(
                Worker::new(*w, *r),
                *id,
                parent.map(SeqHash),
                blocks
                    .iter()
                    .map(|[l, s]| Block::new(LocalHash(*l), SeqHash(*s)))
                    .collect(),
            ),
            Op::Remove {
                w, r, id, blocks, ..
            } => Event::removed(
                Worker::new(*w, *r),
                *id,
                blocks.iter().copied().map(SeqHash).collect(),
            ),
            Op::Clear { w, r, id, .. } => Event::cleared(Worker::new(*w, *r), *id),
        })
    }

    /// Blocks the operation names (query length for a match).
    pub fn blocks(&self) -> usize {
        match self {
            Op::Match { q, .. } => q.len(),
            Op::Store { blocks, .. } => blocks.len(),
            Op::Remove { blocks, .. } => blocks.len(),
            Op::Clear { .. } => 0,
        }
    }
}

/// Converts an index event back to a workload op at time `t`.
pub fn op_of_event(t: u64, event: &Event) -> Op {
    let (w, r, id) = (event.worker.id, event.worker.dp_rank, event.event_id);
    match &event.kind {
        EventKind::Stored { parent, blocks } => Op::Store {
            t,
            w,
            r,
            id,
            parent: parent.map(|p| p.0),
            blocks: blocks.iter().map(|b| [b.local.0, b.seq.0]).collect(),
        },
        EventKind::Removed { blocks } => Op::Remove {
            t,
            w,
            r,
            id,
            blocks: blocks.iter().map(|s| s.0).collect(),
        },
        EventKind::Cleared => Op::Clear { t, w, r, id },
    }
}

/// A whole workload in memory.
#[derive(Clone, Debug)]
pub struct Workload {
    pub header: Header,
    pub ops: Vec<Op>,
}

impl Workload {
    /// Writes the workload as JSON Lines.
    pub fn write(&self, out: impl Write) -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(out);
        serde_json::to_writer(&mut out, &self.header)?;
        out.write_all(b"\n")?;
        for op in &self.ops {
            serde_json::to_writer(&mut out, op)?;
            out.write_all(b"\n")?;
        }
        out.flush()
    }

    /// Reads a workload, rejecting another format, a newer version, or unsorted operations with
    /// an error that says which line.
    pub fn read(input: impl BufRead) -> Result<Self, String> {
        let mut lines = input.lines().enumerate();
        let (_, first) = lines
            .next()
            .ok_or("empty workload file: expected a header line")?;
        let first = first.map_err(|e| format!("line 1: {e}"))?;
        let header: Header =
            serde_json::from_str(&first).map_err(|e| format!("line 1 (header): {e}"))?;
        if header.format != FORMAT {
            return Err(format!(
                "line 1: format is {:?}, expected {FORMAT:?}",
                header.format
            ));
        }
        if header.version > VERSION {
            return Err(format!(
                "line 1: workload version {} is newer than this flashbench reads ({VERSION})",
                header.version
            ));
        }
        let mut ops = Vec::new();
        let mut last_t = 0;
        for (i, line) in lines {
            let line = line.map_err(|e| format!("line {}: {e}", i + 1))?;
            if line.trim().is_empty() {
                continue;
            }
            let op: Op = serde_json::from_str(&line).map_err(|e| format!("line {}: {e}", i + 1))?;
            if op.t() < last_t {
                return Err(format!(
                    "line {}: t = {} goes back in time (previous {last_t})",
                    i + 1,
                    op.t()
                ));
            }
            last_t = op.t();
            ops.push(op);
        }
        Ok(Self { header, ops })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_matches_the_documented_shape() {
        let text = r#"{"format":"flash-indexer-workload","version":1,"block_size":64,"workers":16,"capacity_blocks":4096,"source":"x","seed":42}
{"t":1200,"w":3,"r":0,"op":"match","q":[17289,998]}
{"t":1300,"w":3,"r":0,"op":"store","id":17,"parent":null,"blocks":[[1,2],[3,4]]}
{"t":1450,"w":3,"r":0,"op":"remove","id":18,"blocks":[4,2]}
{"t":1500,"w":3,"r":0,"op":"clear","id":19}
"#;
        let w = Workload::read(text.as_bytes()).unwrap();
        assert_eq!(w.ops.len(), 4);
        assert_eq!(
            w.ops[1],
            Op::Store {
                t: 1300,
                w: 3,
                r: 0,
                id: 17,
                parent: None,
                blocks: vec![[1, 2], [3, 4]]
            }
        );
        let mut out = Vec::new();
        w.write(&mut out).unwrap();
        let again = Workload::read(out.as_slice()).unwrap();
        assert_eq!(again.ops, w.ops);
    }

    #[test]
    fn rejects_other_formats_newer_versions_and_time_travel() {
        let bad_format = r#"{"format":"other","version":1,"block_size":64}"#;
        assert!(
            Workload::read(bad_format.as_bytes())
                .unwrap_err()
                .contains("format")
        );
        let newer = r#"{"format":"flash-indexer-workload","version":9,"block_size":64}"#;
        assert!(
            Workload::read(newer.as_bytes())
                .unwrap_err()
                .contains("newer")
        );
        let unsorted = "{\"format\":\"flash-indexer-workload\",\"version\":1,\"block_size\":64}\n{\"t\":5,\"w\":0,\"r\":0,\"op\":\"clear\",\"id\":0}\n{\"t\":4,\"w\":0,\"r\":0,\"op\":\"clear\",\"id\":1}\n";
        assert!(
            Workload::read(unsorted.as_bytes())
                .unwrap_err()
                .contains("line 3")
        );
    }
}
