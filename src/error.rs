//! Why an event was rejected (see [the contract](crate::docs::contract)).

use crate::types::SeqHash;
use core::fmt;

/// Why [`KvIndex::apply`](crate::KvIndex::apply) did not apply an event, or applied only part
/// of it.
///
/// Every variant but [`UnknownBlocks`](EventError::UnknownBlocks) means *nothing changed*.
/// `UnknownBlocks` is a warning: the blocks the worker held were removed, the others named here
/// were ignored.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum EventError {
    /// A `Stored` event continues a block the worker does not hold.
    UnknownParent {
        /// The parent named by the event.
        parent: SeqHash,
    },
    /// A `Stored` event names one sequence hash twice, or names its own parent as a block.
    InvalidSequence {
        /// The repeated sequence hash.
        seq: SeqHash,
    },
    /// A `Stored` event names a block the worker already holds, but with another local hash or
    /// another parent: a sequence hash names one prefix, so the input is corrupt.
    Conflict {
        /// The sequence hash stored twice with different meanings.
        seq: SeqHash,
    },
    /// An event of a KV-cache group the model does not have
    /// ([`HybridIndex::apply`](crate::hybrid::HybridIndex::apply)).
    UnknownGroup {
        /// The event's group.
        group: u32,
        /// How many groups the model has.
        groups: u32,
    },
    /// A `Removed` event named blocks the worker did not hold. The rest was applied.
    UnknownBlocks {
        /// The ignored sequence hashes, in event order.
        missing: Vec<SeqHash>,
    },
}

impl EventError {
    /// A stable, short name of the variant (for counters and logs).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Self::UnknownParent { .. } => "unknown_parent",
            Self::InvalidSequence { .. } => "invalid_sequence",
            Self::Conflict { .. } => "conflict",
            Self::UnknownGroup { .. } => "unknown_group",
            Self::UnknownBlocks { .. } => "unknown_blocks",
        }
    }

    /// `true` when the event was applied in part (only [`EventError::UnknownBlocks`]); `false`
    /// when nothing changed.
    pub fn is_warning(&self) -> bool {
        matches!(self, Self::UnknownBlocks { .. })
    }
}

impl fmt::Display for EventError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownParent { parent } => write!(
                f,
                "stored event rejected: parent block {parent} is not held by this worker"
            ),
            Self::InvalidSequence { seq } => write!(
                f,
                "stored event rejected: sequence hash {seq} appears twice in the chain (or is its own parent)"
            ),
            Self::Conflict { seq } => write!(
                f,
                "stored event rejected: block {seq} is already held with a different local hash or parent"
            ),
            Self::UnknownGroup { group, groups } => write!(
                f,
                "event rejected: group {group} is not one of the model's {groups} KV-cache groups"
            ),
            Self::UnknownBlocks { missing } => {
                write!(
                    f,
                    "removed event named {} block(s) this worker does not hold: ",
                    missing.len()
                )?;
                for (i, seq) in missing.iter().take(8).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{seq}")?;
                }
                if missing.len() > 8 {
                    write!(f, ", ... ({} more)", missing.len() - 8)?;
                }
                f.write_str("; the held ones were removed")
            }
        }
    }
}

impl std::error::Error for EventError {}
