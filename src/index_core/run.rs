//! One run of a worker: consecutive blocks, each the parent of the next, stored as one record.
//!
//! A `Stored` event is usually one run, and a decode step extends the run it continues, so a
//! worker holds a few records however many blocks it holds. Per block a run keeps the block's
//! seq (8 bytes) and its local hash while the block is unreachable (8 bytes): a reachable block's
//! local hash is in its layout entry, read back through the block's handle, so it is kept once.
//! Handles are kept per stretch, and a canonical hash every [`CHECKPOINT`] blocks; nothing per
//! block is allocated on its own.
//!
//! Removing a block in the middle of a run leaves a *hole*: the block stays in the record, marked
//! in `holes`, so that the blocks after it keep their parent, and storing it again fills the hole
//! in place. Removing the last block shortens the run (and drops the holes that end up last).

use super::canon::{Canon, Key};
use super::handles::Handles;
use super::layout::seam::{Storage, Stretch};
use super::run_keys::RunKeys;
use crate::types::{Block, LocalHash, SeqHash};
use std::collections::BTreeSet;

/// A run keeps the canonical hash of every `CHECKPOINT`-th reachable block; any other block's
/// is folded from the checkpoint before it ([`Canon::extend`]: one product for the at most
/// `CHECKPOINT - 1` blocks between). Stepped block by block, a new run under the middle of an
/// old one cost up to 31 dependent products (paper §6.12).
const CHECKPOINT: usize = 32;

/// The canonical hashes a run keeps of blocks about to be attached (see [`Run::attached`]),
/// taken from their keys first: the keys may borrow the run's own local hashes.
#[derive(Default)]
pub(super) struct KeptCanons {
    first: Option<u64>,
    checkpoints: Vec<u64>,
    tip: Option<u64>,
}

impl KeptCanons {
    /// What a run whose reach is `reach` keeps of the `n` blocks with `keys`: block 0's,
    /// every [`CHECKPOINT`]-th's and the last's canonical hash (none unless keyed).
    pub(super) fn take(&mut self, reach: usize, n: usize, keys: &RunKeys<'_>) {
        self.checkpoints.clear();
        (self.first, self.tip) = (None, None);
        if !keys.keyed() || n == 0 {
            return;
        }
        if reach == 0 {
            self.first = Some(keys.key(0).canon);
        }
        let first_checkpoint = reach.next_multiple_of(CHECKPOINT).max(CHECKPOINT);
        for off in (first_checkpoint..reach + n).step_by(CHECKPOINT) {
            self.checkpoints.push(keys.key(off - reach).canon);
        }
        self.tip = Some(keys.key(n - 1).canon);
    }
}

/// Makes room in a run's seqs for `n` more, growing them by an eighth at least instead of
/// doubling them.
///
/// A run's seqs are most of what a worker keeps a block for, and the run is kept as long as its
/// blocks are held, so room left by doubling stays unused for the run's life. Growing by an
/// eighth still copies a seq a bounded number of times (nine, amortized) while a run grows a
/// block at a time. Measured in paper §6.10.
fn make_room(seqs: &mut Vec<SeqHash>, n: usize) {
    if seqs.capacity() - seqs.len() < n {
        seqs.reserve_exact(n.max(seqs.len() / 8).max(4));
    }
}

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

/// A collection most runs leave empty, behind a pointer: an empty one costs the run record 8
/// bytes instead of the collection's 24, and allocates nothing. Reads see an empty collection
/// when there is none; [`Rare::edit`] boxes it when it fills and frees it when it empties, and
/// [`Rare::get_mut`] keeps room reserved ahead of what is coming.
#[derive(Debug, Default)]
#[allow(clippy::box_collection)] // The box is the point: a pointer in the record.
pub(super) struct Rare<C>(Option<Box<C>>);

/// What a [`Rare`] can hold.
pub(super) trait Collection: Default + 'static {
    /// An empty one, for reads of a `Rare` that holds none.
    fn none() -> &'static Self;
    fn is_empty(&self) -> bool;
}

impl Collection for Vec<LocalHash> {
    fn none() -> &'static Self {
        static NONE: Vec<LocalHash> = Vec::new();
        &NONE
    }
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
}

impl Collection for BTreeSet<u32> {
    fn none() -> &'static Self {
        static NONE: BTreeSet<u32> = BTreeSet::new();
        &NONE
    }
    fn is_empty(&self) -> bool {
        BTreeSet::is_empty(self)
    }
}

impl<C: Collection> Rare<C> {
    /// The collection to add to (made if there was none), or to reserve room in for what is
    /// coming: kept even while empty.
    pub(super) fn get_mut(&mut self) -> &mut C {
        self.0.get_or_insert_default()
    }

    /// Runs `f` on the collection, boxing it only if `f` leaves it non-empty and freeing it if
    /// `f` empties it: an edit that changes nothing (truncating no hashes) allocates nothing.
    pub(super) fn edit<R>(&mut self, f: impl FnOnce(&mut C) -> R) -> R {
        match &mut self.0 {
            Some(collection) => {
                let out = f(collection);
                if collection.is_empty() {
                    self.0 = None;
                }
                out
            }
            None => {
                let mut collection = C::default();
                let out = f(&mut collection);
                if !collection.is_empty() {
                    self.0 = Some(Box::new(collection));
                }
                out
            }
        }
    }
}

impl<C: Collection> From<C> for Rare<C> {
    fn from(collection: C) -> Self {
        let mut rare = Self::default();
        rare.edit(|empty| *empty = collection);
        rare
    }
}

impl<C: Collection> core::ops::Deref for Rare<C> {
    type Target = C;
    fn deref(&self) -> &C {
        self.0.as_deref().unwrap_or_else(|| C::none())
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
    /// The parent of block 0.
    pub(super) parent: Option<SeqHash>,
    /// The seq of every block.
    pub(super) seqs: Vec<SeqHash>,
    /// The local hash of every block from `reach` on (empty, and unallocated, when all are
    /// reachable): the others are in the layout.
    pub(super) unreachable: Rare<Vec<LocalHash>>,
    /// Offsets of holes; never the last block. A tree, not a sorted list, so that punching
    /// holes front to back in a long run costs O(log) each, not a shift of the list.
    pub(super) holes: Rare<BTreeSet<u32>>,
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
    /// Canonical hash of block `reach - 1`, when `reach > 0` and not `tip_stale`.
    tip: u64,
    /// `tip` is not block `reach - 1`'s: the reach went back since it was set, and the tip is
    /// folded again only when a block is next attached after it. A worker's tail is mostly
    /// evicted a few blocks an event, and each eviction folded up to `CHECKPOINT - 1` local
    /// hashes read back from the layout for a tip that the next eviction replaced unread.
    tip_stale: bool,
}

impl<H: Stretch> Run<H> {
    pub(super) fn new(parent: Option<SeqHash>, rooted: bool, anchor: Option<(Key, H)>) -> Self {
        Self {
            parent,
            seqs: Vec::new(),
            unreachable: Rare::default(),
            holes: Rare::default(),
            reach: 0,
            rooted,
            may_branch: false,
            anchor,
            canons: Vec::new(),
            first: 0,
            handles: Handles::new(),
            tip: 0,
            tip_stale: false,
        }
    }

    /// A run slot that holds nothing (its memory freed).
    pub(super) fn vacant() -> Self {
        Self::new(None, false, None)
    }

    pub(super) fn len(&self) -> usize {
        self.seqs.len()
    }

    /// The parent of block `off`.
    pub(super) fn parent_of(&self, off: usize) -> Option<SeqHash> {
        match off {
            0 => self.parent,
            _ => Some(self.seqs[off - 1]),
        }
    }

    /// Makes room for `n` more blocks.
    pub(super) fn reserve(&mut self, n: usize) {
        make_room(&mut self.seqs, n);
        self.unreachable.get_mut().reserve(n);
    }

    /// Appends blocks (unreachable until attached).
    pub(super) fn extend(&mut self, blocks: &[Block]) {
        self.extend_seqs(blocks);
        self.unreachable
            .get_mut()
            .extend(blocks.iter().map(|block| block.local));
    }

    /// Appends the seqs of blocks whose local hashes the caller hands to the layout itself.
    pub(super) fn extend_seqs(&mut self, blocks: &[Block]) {
        make_room(&mut self.seqs, blocks.len());
        self.seqs.extend(blocks.iter().map(|block| block.seq));
    }

    /// Appends the local hashes of blocks `from..to` to `out`: the reachable ones read from the
    /// layout, a stretch at a time, the others from the run.
    pub(super) fn locals<L: Storage<Handle = H>>(
        &self,
        layout: &L,
        guard: &L::Guard<'_>,
        from: usize,
        to: usize,
        out: &mut Vec<LocalHash>,
    ) {
        let reach = self.reach as usize;
        self.handles.stretches(from, to.min(reach), |first, n| {
            // SAFETY: the handles of reachable blocks are kept only while the blocks are
            // reachable, and a reachable block's entry holds its worker's slot (I1).
            out.extend_from_slice(unsafe { layout.stretch_locals(first, n, guard) });
        });
        let (from, to) = (from.max(reach) - reach, to.max(reach) - reach);
        out.extend_from_slice(&self.unreachable[from..to]);
    }

    /// Whether blocks `from..from + blocks.len()` have the local hashes of `blocks`: a
    /// stretch at a time where they are reachable.
    pub(super) fn locals_equal<L: Storage<Handle = H>>(
        &self,
        layout: &L,
        guard: &L::Guard<'_>,
        from: usize,
        blocks: &[Block],
    ) -> bool {
        let reach = self.reach as usize;
        let (mut equal, mut i) = (true, 0);
        self.handles
            .stretches(from, (from + blocks.len()).min(reach), |first, n| {
                if equal {
                    // SAFETY: as in `locals`: these blocks are reachable, so their handles are
                    // live (I1).
                    let locals = unsafe { layout.stretch_locals(first, n, guard) };
                    equal = (locals.iter().zip(&blocks[i..])).all(|(l, b)| *l == b.local);
                }
                i += n as usize;
            });
        let unreachable = &self.unreachable[from.max(reach) - reach..];
        equal && (blocks[i..].iter().zip(unreachable)).all(|(b, l)| b.local == *l)
    }

    /// The local hash of block `off`.
    pub(super) fn local_at<L: Storage<Handle = H>>(
        &self,
        layout: &L,
        guard: &L::Guard<'_>,
        off: usize,
    ) -> LocalHash {
        match off.checked_sub(self.reach as usize) {
            Some(i) => self.unreachable[i],
            // SAFETY: as in `locals`: block `off` is reachable, so its handle is live (I1).
            None => unsafe { layout.stretch_locals(self.handles.get(off), 1, guard)[0] },
        }
    }

    /// Keeps blocks `0..n` only, none of them reachable from `n` on (`n >= reach`).
    pub(super) fn truncate(&mut self, n: usize) {
        let reach = self.reach as usize;
        debug_assert!(n >= reach, "only unreachable blocks are cut off");
        self.seqs.truncate(n);
        self.unreachable
            .edit(|locals| locals.truncate(n.max(reach) - reach));
    }

    /// Cuts the run after block `off` (unreachable) and returns the blocks after it, as the
    /// seqs and local hashes of a run of their own; block `off` stays last.
    pub(super) fn split_off(&mut self, off: usize) -> (Vec<SeqHash>, Vec<LocalHash>) {
        let reach = self.reach as usize;
        debug_assert!(off >= reach, "a run is cut at an unreachable block");
        let seqs = self.seqs.split_off(off + 1);
        let locals = self
            .unreachable
            .edit(|locals| locals.split_off(off + 1 - reach));
        (seqs, locals)
    }

    /// A run of these unreachable blocks, under `parent`, not rooted.
    pub(super) fn unrooted(parent: SeqHash, seqs: Vec<SeqHash>, locals: Vec<LocalHash>) -> Self {
        debug_assert_eq!(seqs.len(), locals.len());
        let mut run = Self::new(Some(parent), false, None);
        run.seqs = seqs;
        run.unreachable = locals.into();
        run
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
    /// block to attach hangs under (`None`: a root). Folds the tip's canonical hash again if
    /// the reach went back since it was kept.
    pub(super) fn tip<L: Storage<Handle = H>>(
        &self,
        layout: &L,
        guard: &L::Guard<'_>,
        canon: &Canon,
    ) -> Option<(Key, H)> {
        let last = match self.reach {
            0 => return self.anchor,
            n => n as usize - 1,
        };
        let key = match self.tip_stale {
            true => self.key_at(layout, guard, canon, last),
            false => Key {
                pos: self.pos0() + last as u32,
                canon: self.tip,
            },
        };
        Some((key, self.handles.get(last)))
    }

    /// Records `n` blocks just attached from offset `reach` on (their handles are already
    /// pushed), with the canonical hashes the run keeps of them (none unless the layout is
    /// keyed). Their local hashes are the layout's from now on; `kept` says the run kept them
    /// till now (else the blocks were attached as they came, and it never did).
    pub(super) fn attached(&mut self, n: usize, canons: &KeptCanons, kept: bool) {
        if kept {
            self.unreachable
                .edit(|locals| locals.drain(..n).for_each(drop));
        }
        if let Some(first) = canons.first {
            self.first = first;
        }
        self.canons.extend_from_slice(&canons.checkpoints);
        if let Some(tip) = canons.tip {
            (self.tip, self.tip_stale) = (tip, false);
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

    /// Keys of the reachable blocks `from..self.reach`, in order, rolled over `locals`, the
    /// local hashes of blocks [`keys_base(from)`](Self::keys_base)`..reach`; none unless `keyed`.
    pub(super) fn keys_from(
        &self,
        canon: &Canon,
        keyed: bool,
        from: usize,
        locals: &[LocalHash],
        out: &mut Vec<Key>,
    ) {
        out.clear();
        let reach = self.reach as usize;
        if from >= reach || !keyed {
            return; // An unkeyed layout's caller makes keys without canonical hashes itself.
        }
        let pos0 = self.pos0();
        let key = |off: usize, canon| Key {
            pos: pos0 + off as u32,
            canon,
        };
        let base = Self::keys_base(from);
        debug_assert_eq!(locals.len(), reach - base);
        let mut c = self.checkpoint(from / CHECKPOINT);
        if base == from {
            out.push(key(base, c));
        }
        for (i, &local) in (base + 1..reach).zip(&locals[1..]) {
            c = canon.step(c, local);
            if i >= from {
                out.push(key(i, c));
            }
        }
    }

    /// Where [`keys_from`](Self::keys_from) needs local hashes from: the checkpoint at or before
    /// `from`.
    pub(super) fn keys_base(from: usize) -> usize {
        from / CHECKPOINT * CHECKPOINT
    }

    /// Key of the reachable block `off` (without its canonical hash unless `keyed`).
    pub(super) fn key_at<L: Storage<Handle = H>>(
        &self,
        layout: &L,
        guard: &L::Guard<'_>,
        canon: &Canon,
        off: usize,
    ) -> Key {
        debug_assert!(off < self.reach as usize);
        if !L::KEYED {
            return Key::unkeyed(self.pos0() + off as u32);
        }
        let base = Self::keys_base(off);
        let mut c = self.checkpoint(off / CHECKPOINT);
        // Stepped through the layout's stretches in place (every block up to `off` is
        // reachable): a list of them cost an allocation per eviction.
        self.handles.stretches(base + 1, off + 1, |first, n| {
            // SAFETY: as in `locals`: these blocks are reachable, so their handles are live (I1).
            let locals = unsafe { layout.stretch_locals(first, n, guard) };
            c = canon.extend(c, locals);
        });
        Key {
            pos: self.pos0() + off as u32,
            canon: c,
        }
    }

    /// Forgets the reachable blocks from `from` on (their layout entries are the caller's, and
    /// still there): their local hashes are `locals`, read from the layout before, or `None`
    /// when the run ends at `from` from now on (the caller drops the blocks after it). With
    /// `keyed`, the tip's canonical hash is folded again when next asked for ([`tip`](Self::tip)).
    pub(super) fn truncate_reach(
        &mut self,
        keyed: bool,
        from: usize,
        locals: Option<&[LocalHash]>,
    ) {
        let reach = self.reach as usize;
        if from >= reach {
            return;
        }
        // An unkeyed layout's tip has no canonical hash to fold.
        self.tip_stale = keyed;
        match locals {
            Some(locals) => {
                debug_assert_eq!(locals.len(), reach - from);
                self.unreachable
                    .edit(|kept| kept.splice(0..0, locals.iter().copied()).for_each(drop));
            }
            None => {
                self.seqs.truncate(from);
                self.unreachable = Rare::default();
            }
        }
        self.reach = from as u32;
        self.handles.truncate(from);
        self.canons
            .truncate(from.div_ceil(CHECKPOINT).saturating_sub(1));
    }
}
