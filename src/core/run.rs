//! One run of a worker: consecutive blocks, each the parent of the next, stored as one record.
//!
//! A `Stored` event is usually one run, and a decode step extends the run it continues, so a
//! worker holds a few records however many blocks it holds. Per block a run keeps the block
//! itself (16 bytes), the layout's handle while the block is reachable (nothing for the map
//! layouts) and, every [`CHECKPOINT`] blocks, a canonical hash; nothing per block is allocated on
//! its own.
//!
//! Removing a block in the middle of a run leaves a *hole*: the block stays in the record, marked
//! in `holes`, so that the blocks after it keep their parent, and storing it again fills the hole
//! in place. Removing the last block shortens the run (and drops the holes that end up last).

use super::canon::{Canon, Key};
use super::handles::Handles;
use super::layout::seam::Stretch;
use crate::types::{Block, SeqHash};
use std::collections::BTreeSet;

/// A run keeps the canonical hash of every `CHECKPOINT`-th reachable block; any other block's
/// is rolled from the checkpoint before it, at most `CHECKPOINT - 1` steps of about a
/// nanosecond.
const CHECKPOINT: usize = 32;

/// Index of a run in its worker's run table.
pub(super) type RunId = u32;

/// Where a seq lives: a run and an offset in it, and whether it is a hole there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Loc {
    pub(super) run: RunId,
    /// The offset, with [`HOLE`] set when the block was removed.
    off: u32,
}

/// Marks a hole in [`Loc::off`]. Runs are far shorter than 2^31 blocks: a block costs more than
/// 16 bytes of the event that stored it.
const HOLE: u32 = 1 << 31;

impl Loc {
    pub(super) fn new(run: RunId, off: usize) -> Self {
        Self {
            run,
            off: off as u32,
        }
    }

    pub(super) fn off(self) -> usize {
        (self.off & !HOLE) as usize
    }

    pub(super) fn is_hole(self) -> bool {
        self.off & HOLE != 0
    }

    pub(super) fn as_hole(self) -> Self {
        Self {
            run: self.run,
            off: self.off | HOLE,
        }
    }

    pub(super) fn as_held(self) -> Self {
        Self {
            run: self.run,
            off: self.off & !HOLE,
        }
    }
}

/// A run of blocks; see the module docs.
///
/// Blocks `0..reach` are reachable and in the layout (with their handles); `rooted` says that
/// the run's parent is reachable (or that it has none). The core keeps, at every instant
/// between its calls: `reach == 0` unless `rooted`, and when `rooted`, `reach` is the first hole
/// or the length.
#[derive(Debug)]
pub(super) struct Run<H> {
    /// The parent of `blocks[0]`.
    pub(super) parent: Option<SeqHash>,
    pub(super) blocks: Vec<Block>,
    /// Offsets of holes; never the last block. A tree, not a sorted list, so that punching
    /// holes front to back in a long run costs O(log) each, not a shift of the list.
    pub(super) holes: BTreeSet<u32>,
    pub(super) reach: u32,
    pub(super) rooted: bool,
    /// Some run hangs under one of these blocks (or did): the cascades look them up only then.
    pub(super) may_branch: bool,
    /// The parent block's key and handle, while `rooted` and the run has a parent.
    pub(super) anchor: Option<(Key, H)>,
    /// Canonical hash of every [`CHECKPOINT`]-th block below `reach` but the first (which is
    /// `first`: a short run allocates no list).
    canons: Vec<u64>,
    /// Canonical hash of block 0, when `reach > 0`.
    first: u64,
    /// The layout's handle of every block below `reach`, per stretch.
    pub(super) handles: Handles<H>,
    /// Canonical hash of block `reach - 1`, when `reach > 0`.
    pub(super) tip: u64,
}

impl<H: Stretch> Run<H> {
    pub(super) fn new(parent: Option<SeqHash>, rooted: bool, anchor: Option<(Key, H)>) -> Self {
        Self {
            parent,
            blocks: Vec::new(),
            holes: BTreeSet::new(),
            reach: 0,
            rooted,
            may_branch: false,
            anchor,
            canons: Vec::new(),
            first: 0,
            handles: Handles::new(),
            tip: 0,
        }
    }

    /// A run slot that holds nothing (its memory freed).
    pub(super) fn vacant() -> Self {
        Self::new(None, false, None)
    }

    pub(super) fn len(&self) -> usize {
        self.blocks.len()
    }

    /// The parent of block `off`.
    pub(super) fn parent_of(&self, off: usize) -> Option<SeqHash> {
        match off {
            0 => self.parent,
            _ => Some(self.blocks[off - 1].seq),
        }
    }

    /// Where reachability stops when the run is rooted: the first hole, or the end.
    pub(super) fn end(&self) -> usize {
        self.holes.first().map_or(self.len(), |&h| h as usize)
    }

    /// Position of block 0 (valid while rooted).
    pub(super) fn pos0(&self) -> u32 {
        self.anchor.map_or(0, |(key, _)| key.pos + 1)
    }

    /// Key and handle of the last reachable block, or of the parent when none is: what the next
    /// block to attach hangs under (`None`: a root).
    pub(super) fn tip(&self) -> Option<(Key, H)> {
        match self.reach {
            0 => self.anchor,
            n => Some((
                Key {
                    pos: self.pos0() + n - 1,
                    canon: self.tip,
                },
                self.handles.get(n as usize - 1),
            )),
        }
    }

    /// Records `n` blocks just attached from offset `reach` on (their handles are already
    /// pushed), with their keys unless the layout is not keyed (`keys` empty).
    pub(super) fn attached(&mut self, n: usize, keys: &[Key]) {
        let from = self.reach as usize;
        for (i, key) in keys.iter().enumerate() {
            match from + i {
                0 => self.first = key.canon,
                off if off % CHECKPOINT == 0 => self.canons.push(key.canon),
                _ => {}
            }
        }
        if let Some(last) = keys.last() {
            self.tip = last.canon;
        }
        self.reach += n as u32;
        debug_assert_eq!(self.handles.len(), self.reach as usize);
    }

    /// Canonical hash of block `k * CHECKPOINT` (reachable).
    fn checkpoint(&self, k: usize) -> u64 {
        match k {
            0 => self.first,
            _ => self.canons[k - 1],
        }
    }

    /// Keys of the reachable blocks `from..self.reach`, in order; none unless `keyed`.
    pub(super) fn keys_from(&self, canon: &Canon, keyed: bool, from: usize, out: &mut Vec<Key>) {
        out.clear();
        let reach = self.reach as usize;
        if from >= reach {
            return;
        }
        let pos0 = self.pos0();
        let key = |off: usize, canon| Key {
            pos: pos0 + off as u32,
            canon,
        };
        if !keyed {
            return; // The caller makes keys without canonical hashes itself.
        }
        let base = from / CHECKPOINT * CHECKPOINT;
        let mut c = self.checkpoint(from / CHECKPOINT);
        if base == from {
            out.push(key(base, c));
        }
        for i in base + 1..reach {
            c = canon.step(c, self.blocks[i].local);
            if i >= from {
                out.push(key(i, c));
            }
        }
    }

    /// Key of the reachable block `off` (without its canonical hash unless `keyed`).
    pub(super) fn key_at(&self, canon: &Canon, keyed: bool, off: usize) -> Key {
        debug_assert!(off < self.reach as usize);
        if !keyed {
            return Key::unkeyed(self.pos0() + off as u32);
        }
        let base = off / CHECKPOINT * CHECKPOINT;
        let mut c = self.checkpoint(off / CHECKPOINT);
        for block in &self.blocks[base + 1..=off] {
            c = canon.step(c, block.local);
        }
        Key {
            pos: self.pos0() + off as u32,
            canon: c,
        }
    }

    /// Forgets the reachable blocks from `from` on (their layout entries are the caller's).
    pub(super) fn truncate_reach(&mut self, canon: &Canon, keyed: bool, from: usize) {
        if from > 0 && from < self.reach as usize {
            self.tip = self.key_at(canon, keyed, from - 1).canon;
        }
        self.reach = self.reach.min(from as u32);
        self.handles.truncate(from);
        self.canons
            .truncate(from.div_ceil(CHECKPOINT).saturating_sub(1));
    }
}
