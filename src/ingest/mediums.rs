//! Blocks an engine holds on several kept mediums at once: a block stays indexed while any of
//! them holds it.
//!
//! An engine that offloads publishes a block once per tier it lands on (stored on the GPU, then
//! stored again in host memory) and removes it per tier. Kept together in one index, the
//! removal from one tier must not drop a block another tier still holds. Each worker's first
//! medium needs no record: a block without one is held by that medium alone. A block stored on
//! another medium gets a mask of the mediums known to hold it; when the mask empties, the
//! removal goes on to the index. Where the record cannot know (a block the first medium stored
//! before any other medium was seen), it assumes the first medium does not hold it, so that a
//! mistake removes a block early (an under-count) and never keeps one too long.

use std::collections::HashMap;
use std::sync::Mutex; // sync-shim: a mapper's own state; ingest is never built under loom

use crate::{EventKind, SeqHash, Worker};

/// One worker's record.
#[derive(Clone, Debug, Default)]
struct WorkerMediums {
    /// The medium of its first event: blocks without a mask are held by it alone.
    first: Option<usize>,
    /// Mediums (bit `i` for kept medium `i`) of blocks a medium other than `first` stored.
    masks: HashMap<SeqHash, u64>,
}

/// The record of every worker of one engine.
#[derive(Clone, Debug, Default)]
pub(super) struct MediumUnion {
    workers: HashMap<Worker, WorkerMediums>,
}

impl MediumUnion {
    /// `worker` stored `seqs` on kept medium `medium` (below 64).
    pub(super) fn stored(
        &mut self,
        worker: Worker,
        medium: usize,
        seqs: impl Iterator<Item = SeqHash>,
    ) {
        let record = self.workers.entry(worker).or_default();
        let first = *record.first.get_or_insert(medium);
        for seq in seqs {
            if medium == first {
                if let Some(mask) = record.masks.get_mut(&seq) {
                    *mask |= 1 << medium;
                }
            } else {
                *record.masks.entry(seq).or_default() |= 1 << medium;
            }
        }
    }

    /// `worker` removed `seqs` from kept medium `medium`: the blocks no kept medium holds now.
    pub(super) fn removed(
        &mut self,
        worker: Worker,
        medium: usize,
        seqs: &[SeqHash],
    ) -> Vec<SeqHash> {
        let Some(record) = self.workers.get_mut(&worker) else {
            return seqs.to_vec();
        };
        seqs.iter()
            .copied()
            .filter(|seq| match record.masks.get_mut(seq) {
                None => true,
                Some(mask) => {
                    *mask &= !(1 << medium);
                    let gone = *mask == 0;
                    if gone {
                        record.masks.remove(seq);
                    }
                    gone
                }
            })
            .collect()
    }

    /// What of `kind`, an event of `worker` on kept medium `medium` (`None` for a clear), goes
    /// on to the index: `None` when nothing does.
    pub(super) fn settle(
        &mut self,
        worker: Worker,
        medium: Option<usize>,
        kind: EventKind,
    ) -> Option<EventKind> {
        match (kind, medium) {
            (EventKind::Stored { parent, blocks }, Some(medium)) => {
                self.stored(worker, medium, blocks.iter().map(|b| b.seq));
                Some(EventKind::Stored { parent, blocks })
            }
            (EventKind::Removed { blocks }, Some(medium)) => {
                let blocks = self.removed(worker, medium, &blocks);
                (!blocks.is_empty()).then_some(EventKind::Removed { blocks })
            }
            (kind, _) => {
                self.cleared(worker);
                Some(kind)
            }
        }
    }

    /// `worker` holds nothing any more.
    pub(super) fn cleared(&mut self, worker: Worker) {
        self.workers.remove(&worker);
    }

    /// Every worker holds nothing any more (the subscriber cleared them).
    pub(super) fn clear_all(&mut self) {
        self.workers.clear();
    }
}

/// A [`MediumUnion`] a mapper mutates behind `&self` (uncontended: one engine's thread).
#[derive(Debug, Default)]
pub(super) struct UnionCell(Mutex<MediumUnion>);

impl UnionCell {
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut MediumUnion) -> R) -> R {
        f(&mut self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}

impl Clone for UnionCell {
    fn clone(&self) -> Self {
        UnionCell(Mutex::new(self.with(|union| union.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: usize = 0;
    const CPU: usize = 1;

    fn seqs(s: &[u64]) -> Vec<SeqHash> {
        s.iter().map(|&s| SeqHash(s)).collect()
    }

    #[test]
    fn a_block_leaves_with_the_last_medium_holding_it() {
        let w = Worker::new(1, 0);
        let mut union = MediumUnion::default();
        union.stored(w, GPU, seqs(&[1, 2]).into_iter());
        union.stored(w, CPU, seqs(&[2, 3]).into_iter());
        union.stored(w, GPU, seqs(&[3]).into_iter());
        assert_eq!(union.removed(w, GPU, &seqs(&[2, 3])), seqs(&[]));
        assert_eq!(union.removed(w, CPU, &seqs(&[2])), seqs(&[2]));
        assert_eq!(union.removed(w, CPU, &seqs(&[3])), seqs(&[3]));
        // Held by the first medium alone: no record, removed at once.
        assert_eq!(union.removed(w, GPU, &seqs(&[1])), seqs(&[1]));
        assert!(union.workers[&w].masks.is_empty());
    }

    #[test]
    fn what_the_record_cannot_know_is_removed_early_never_late() {
        let w = Worker::new(1, 0);
        let mut union = MediumUnion::default();
        union.stored(w, GPU, seqs(&[5]).into_iter());
        union.stored(w, CPU, seqs(&[5]).into_iter());
        // The GPU still holds 5, but the record only knows of the CPU's copy.
        assert_eq!(union.removed(w, CPU, &seqs(&[5])), seqs(&[5]));
        union.cleared(w);
        assert_eq!(union.removed(w, CPU, &seqs(&[5])), seqs(&[5]));
    }
}
