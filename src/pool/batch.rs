//! A writer's batch: the messages taken at once, and the blocks of the events copied into it.
//!
//! [`WriterPool::submit_copy`](super::WriterPool::submit_copy) appends an event's blocks to the
//! batch's list of their kind and queues a header that names where they are; the writer applies
//! the event in place, through an [`EventView`]. Once a batch is applied it is cleared, keeping
//! its room, and goes back to the queue as the next batch's: a steady stream of copied events
//! allocates and frees nothing. Submitting owned events instead costs the submitting thread an
//! allocation for every event and a free for every event the writers give back; with glibc's
//! allocator that was two thirds of its time on the Mooncake trace replay (the given-back lists
//! come back a batch at a time, more of one size than its thread cache holds).

use super::Msg;
use crate::inbox::Messages;
use crate::types::{Block, EventKindView, EventView, SeqHash, Worker};
use core::ops::Range;

/// An event copied into a batch: its block list is `blocks` of the batch's list of its kind.
pub(super) struct Copied {
    worker: Worker,
    event_id: u64,
    kind: CopiedKind,
}

enum CopiedKind {
    Stored {
        parent: Option<SeqHash>,
        blocks: Range<usize>,
    },
    Removed {
        blocks: Range<usize>,
    },
    Cleared,
}

/// Blocks of a copied event that count as one message towards the queue's capacity.
const BLOCKS_PER_MESSAGE: usize = 16;

/// Messages taken together, and the block lists of the copied events among them.
#[derive(Default)]
pub(super) struct Batch {
    msgs: Vec<Msg>,
    buffers: Buffers,
    /// What the batch counts for against the queue's capacity: a message each, and a copied
    /// event one more for every [`BLOCKS_PER_MESSAGE`] blocks, so that a full queue's buffers
    /// hold at most `capacity * BLOCKS_PER_MESSAGE` blocks, however long the events (paper
    /// §6.11).
    load: usize,
}

/// The block lists of a batch's copied events, by kind.
#[derive(Default)]
pub(super) struct Buffers {
    stored: Vec<Block>,
    removed: Vec<SeqHash>,
}

impl Messages for Batch {
    type Msg = Msg;

    fn len(&self) -> usize {
        self.load
    }

    fn push(&mut self, msg: Msg) {
        self.msgs.push(msg);
        self.load += 1;
    }
}

impl Batch {
    /// Queues a copy of `event`.
    pub(super) fn copy(&mut self, event: EventView<'_>) {
        let kind = match event.kind {
            EventKindView::Stored { parent, blocks } => CopiedKind::Stored {
                parent,
                blocks: append(&mut self.buffers.stored, blocks),
            },
            EventKindView::Removed { blocks } => CopiedKind::Removed {
                blocks: append(&mut self.buffers.removed, blocks),
            },
            EventKindView::Cleared => CopiedKind::Cleared,
        };
        let blocks = match &kind {
            CopiedKind::Stored { blocks, .. } | CopiedKind::Removed { blocks } => blocks.len(),
            CopiedKind::Cleared => 0,
        };
        self.push(Msg::Copied(Copied {
            worker: event.worker,
            event_id: event.event_id,
            kind,
        }));
        self.load += blocks / BLOCKS_PER_MESSAGE;
    }

    /// Hands every message to `each`, oldest first, with the buffers its copies' blocks are in
    /// ([`Copied::view`]), and leaves the batch empty, with its room.
    pub(super) fn drain(&mut self, mut each: impl FnMut(Msg, &Buffers)) {
        for msg in self.msgs.drain(..) {
            each(msg, &self.buffers);
        }
        self.buffers.stored.clear();
        self.buffers.removed.clear();
        self.load = 0;
    }
}

impl Copied {
    /// The event, its blocks read in place from the `buffers` of its batch.
    pub(super) fn view<'a>(&self, buffers: &'a Buffers) -> EventView<'a> {
        let kind = match &self.kind {
            CopiedKind::Stored { parent, blocks } => EventKindView::Stored {
                parent: *parent,
                blocks: &buffers.stored[blocks.clone()],
            },
            CopiedKind::Removed { blocks } => EventKindView::Removed {
                blocks: &buffers.removed[blocks.clone()],
            },
            CopiedKind::Cleared => EventKindView::Cleared,
        };
        EventView {
            worker: self.worker,
            event_id: self.event_id,
            kind,
        }
    }
}

fn append<T: Copy>(list: &mut Vec<T>, items: &[T]) -> Range<usize> {
    let start = list.len();
    list.extend_from_slice(items);
    start..list.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Event, LocalHash};

    fn events() -> Vec<Event> {
        let w = Worker::new(5, 1);
        let blocks = |from: u64, n: u64| {
            (from..from + n)
                .map(|i| Block::new(LocalHash(i), SeqHash(1000 + i)))
                .collect()
        };
        vec![
            Event::stored(w, 1, None, blocks(0, 3)),
            Event::removed(w, 2, vec![SeqHash(1002)]),
            Event::cleared(w, 3),
            Event::stored(w, 4, Some(SeqHash(1001)), blocks(10, 2)),
            Event::stored(w, 5, None, Vec::new()),
            Event::removed(w, 6, vec![SeqHash(1000), SeqHash(1001)]),
        ]
    }

    fn taken(batch: &mut Batch) -> Vec<Event> {
        let mut out = Vec::new();
        batch.drain(|msg, buffers| match msg {
            Msg::Copied(copied) => out.push(copied.view(buffers).to_event()),
            _ => panic!("only copies were queued"),
        });
        out
    }

    #[test]
    fn copies_come_out_as_they_went_in_and_the_batch_keeps_its_room() {
        let mut batch = Batch::default();
        for event in &events() {
            batch.copy(event.into());
        }
        assert_eq!(batch.len(), 6);
        assert_eq!(taken(&mut batch), events());
        assert!(batch.is_empty());
        let room = (
            batch.buffers.stored.capacity(),
            batch.buffers.removed.capacity(),
        );
        assert!(room.0 >= 5 && room.1 >= 3);
        // The second round fills the same room.
        for event in &events() {
            batch.copy(event.into());
        }
        assert_eq!(taken(&mut batch), events());
        assert_eq!(
            (
                batch.buffers.stored.capacity(),
                batch.buffers.removed.capacity()
            ),
            room
        );
    }
}
