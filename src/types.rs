//! The vocabulary of [the contract](crate::docs::contract): hashes, workers, blocks and events.

use core::fmt;

/// Hash of the tokens inside one block only (see [the contract](crate::docs::contract)).
///
/// The router computes it from tokens on the query side ([`crate::hash::local_hashes`]); the
/// engine's publisher computes the same value for its events.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(transparent)
)]
pub struct LocalHash(pub u64);

/// The engine's identity for a block *and its whole prefix*, opaque to the index (see [the
/// contract](crate::docs::contract)).
///
/// Opaque: the index never assumes how an engine computed it. It is only a handle, used as the
/// parent of stores and to name the blocks of removes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(transparent)
)]
pub struct SeqHash(pub u64);

impl fmt::Debug for LocalHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LocalHash({:#018x})", self.0)
    }
}

impl fmt::Debug for SeqHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SeqHash({:#018x})", self.0)
    }
}

impl fmt::Display for LocalHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#018x}", self.0)
    }
}

impl fmt::Display for SeqHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#018x}", self.0)
    }
}

/// One cache: one data-parallel rank of one inference server.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Worker {
    /// The inference server.
    pub id: u64,
    /// The data-parallel rank inside that server.
    pub dp_rank: u32,
}

impl Worker {
    /// The worker for rank `dp_rank` of server `id`.
    pub const fn new(id: u64, dp_rank: u32) -> Self {
        Self { id, dp_rank }
    }
}

impl fmt::Display for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "worker {} (dp rank {})", self.id, self.dp_rank)
    }
}

/// One stored block: its local hash and the engine's sequence hash for it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Block {
    /// Hash of the block's own tokens.
    pub local: LocalHash,
    /// The engine's opaque hash of the block and its prefix.
    pub seq: SeqHash,
}

impl Block {
    /// A block with the given local and sequence hash.
    pub const fn new(local: LocalHash, seq: SeqHash) -> Self {
        Self { local, seq }
    }
}

/// One KV event published by a worker (see [the contract](crate::docs::contract)).
#[derive(Clone, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Event {
    /// The cache the event is about.
    pub worker: Worker,
    /// Carried for gap detection by the ingest layer; the index itself ignores it.
    pub event_id: u64,
    /// What happened.
    pub kind: EventKind,
}

/// What an [`Event`] reports.
#[derive(Clone, PartialEq, Eq, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum EventKind {
    /// `blocks` were stored as a chain: the parent of `blocks[0]` is `parent`, the parent of
    /// `blocks[i]` is `blocks[i - 1].seq`.
    Stored {
        /// The held block the chain continues, or `None` for a chain from the start.
        parent: Option<SeqHash>,
        /// The new blocks, shallowest first.
        blocks: Vec<Block>,
    },
    /// The listed blocks were evicted, in list order.
    Removed {
        /// Sequence hashes of the evicted blocks.
        blocks: Vec<SeqHash>,
    },
    /// Every block of the worker was dropped.
    Cleared,
}

impl Event {
    /// A [`EventKind::Stored`] event.
    pub fn stored(
        worker: Worker,
        event_id: u64,
        parent: Option<SeqHash>,
        blocks: Vec<Block>,
    ) -> Self {
        Self {
            worker,
            event_id,
            kind: EventKind::Stored { parent, blocks },
        }
    }

    /// A [`EventKind::Removed`] event.
    pub fn removed(worker: Worker, event_id: u64, blocks: Vec<SeqHash>) -> Self {
        Self {
            worker,
            event_id,
            kind: EventKind::Removed { blocks },
        }
    }

    /// A [`EventKind::Cleared`] event.
    pub fn cleared(worker: Worker, event_id: u64) -> Self {
        Self {
            worker,
            event_id,
            kind: EventKind::Cleared,
        }
    }

    /// The event, borrowing its block list.
    pub fn view(&self) -> EventView<'_> {
        let kind = match &self.kind {
            EventKind::Stored { parent, blocks } => EventKindView::Stored {
                parent: *parent,
                blocks,
            },
            EventKind::Removed { blocks } => EventKindView::Removed { blocks },
            EventKind::Cleared => EventKindView::Cleared,
        };
        EventView {
            worker: self.worker,
            event_id: self.event_id,
            kind,
        }
    }
}

/// An [`Event`] that borrows its block list, for [`KvIndex::apply_view`]: an event kept in a
/// buffer its owner reuses is applied without copying it into an [`Event`] of its own.
///
/// [`KvIndex::apply_view`]: crate::KvIndex::apply_view
///
/// ```
/// use flash_indexer::{Block, Event, EventKindView, EventView, LocalHash, SeqHash, Worker};
///
/// let blocks = [Block::new(LocalHash(1), SeqHash(11))];
/// let kind = EventKindView::Stored { parent: None, blocks: &blocks };
/// let view = EventView { worker: Worker::new(1, 0), event_id: 7, kind };
/// let event = view.to_event();
/// assert_eq!(event, Event::stored(Worker::new(1, 0), 7, None, blocks.to_vec()));
/// assert_eq!(event.view(), view);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct EventView<'a> {
    /// The cache the event is about.
    pub worker: Worker,
    /// As [`Event::event_id`].
    pub event_id: u64,
    /// What happened.
    pub kind: EventKindView<'a>,
}

/// What an [`EventView`] reports: [`EventKind`], with borrowed block lists.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EventKindView<'a> {
    /// As [`EventKind::Stored`].
    Stored {
        /// The held block the chain continues, or `None` for a chain from the start.
        parent: Option<SeqHash>,
        /// The new blocks, shallowest first.
        blocks: &'a [Block],
    },
    /// As [`EventKind::Removed`].
    Removed {
        /// Sequence hashes of the evicted blocks.
        blocks: &'a [SeqHash],
    },
    /// As [`EventKind::Cleared`].
    Cleared,
}

impl<'a> From<&'a Event> for EventView<'a> {
    fn from(event: &'a Event) -> Self {
        event.view()
    }
}

impl EventView<'_> {
    /// The event, owning a copy of its block list.
    pub fn to_event(&self) -> Event {
        let kind = match self.kind {
            EventKindView::Stored { parent, blocks } => EventKind::Stored {
                parent,
                blocks: blocks.to_vec(),
            },
            EventKindView::Removed { blocks } => EventKind::Removed {
                blocks: blocks.to_vec(),
            },
            EventKindView::Cleared => EventKind::Cleared,
        };
        Event {
            worker: self.worker,
            event_id: self.event_id,
            kind,
        }
    }
}
