//! Tree nodes: what readers see lock-free, and the writer-side protocol that keeps them valid.
//!
//! A node is an *edge*: the local hashes of consecutive blocks. Children hang at any offset of
//! it (keyed by the offset and the first local hash of their own edge), so a store that leaves an
//! edge in its middle adds a child there and never splits the edge: nodes never move, and a
//! handle (node, offset) stays valid while its worker holds the block. Which workers hold how
//! much of the edge is the node's [`Cover`].
//!
//! An edge never changes below its length, and grows only at its end, in room its allocation
//! kept for that ([`Node::append`]): a block stored right after the end of an edge that its one
//! worker holds all of (a decode step's block, after the prompt's) goes there instead of into a
//! node of its own. Readers load the length with acquire ordering after the append wrote the
//! blocks, so they see an edge as it was at some instant; only the tree without checkpoints
//! appends (an appended block would need an anchor its allocation has no room for).
//!
//! # Memory safety
//!
//! Covers and child arrays are read through `crossbeam-epoch` guards; their membership is
//! replaced, never mutated in place (read-copy-update), while cutoffs are atomics; large child
//! sets are tables of child pointers changed in place by one writer (`child_table.rs`).
//! Whatever is replaced or unlinked is retired through the epoch, so it is freed only after
//! every reader that could have loaded it has unpinned.
//!
//! A node is one allocation with its edge after it and the cover it was created with inside
//! it (`Node::create`): a walk that reaches a private suffix reads its edge and its worker in
//! the node's own lines. That first cover is published once; replaced, it stays unused in the
//! node until the node is freed, which no reader that could still hold it outlives (I3).
//!
//! Writers lock a node's `unlinked` to change it, always a parent before its child. A node is
//! unlinked from its parent (under both locks) only when it has no workers and no children;
//! then `unlinked` is set. From that follow the invariants the `// SAFETY:` comments name:
//! - **I1 (held nodes live)**: a node that has a worker is linked; the core keeps a node's
//!   pointer (a [`Spot`]) only while its worker is in the node, so the pointer is live.
//! - **I2 (parents outlive children)**: a node with a linked child is not unlinked, so a linked
//!   node's `parent` pointer is live.
//! - **I3 (pinned memory stays)**: a node reached while pinned (through its parent's children
//!   or a parent pointer) stays allocated until the pin ends, even if unlinked meanwhile;
//!   `unlinked` tells a writer that it was.

use super::child_table::{ChildTable, Keyed};
use super::graveyard;
use crate::index_core::{Cover, Key, Slot, Stretch};
use crate::sync::atomic::AtomicU32;
use crate::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use crate::sync::{Mutex, lock};
use crate::types::LocalHash;
use crossbeam_epoch::{Atomic, Guard, Owned, Shared};
use std::alloc::{self, Layout};
use std::ptr::NonNull;

/// Children beyond this many move from a sorted array to a table changed in place: copying the
/// array on every insert is quadratic at a fan-out of thousands (the last shared block of a
/// system prompt, under which every conversation forks).
const SMALL: usize = 16;

/// A table that shrinks to this many children becomes a sorted array again.
const FEW: usize = SMALL / 2;

/// Where a child hangs: the offset in its parent's edge that its own edge continues from, and
/// its edge's first local hash (which differs from the parent's block at that offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ChildKey {
    pub(super) at: u32,
    pub(super) local: LocalHash,
}

/// The room a short new edge gets in a tree without checkpoints: a decode step stores one block
/// at a time at the end of its request's chain, and this many of them share a node instead of
/// taking one each (paper §6.26 measured it on the trace replay).
pub(super) const APPEND_ROOM: u32 = 8;

/// The bit of [`Node`]'s anchor count that says its edge may grow ([`Node::cap`]).
const GROWS: u32 = 1 << 31;

/// Blocks an edge of `len` blocks has room for: with `grows` ([`GROWS`] or 0) at least
/// [`APPEND_ROOM`], else exactly `len`.
fn room(grows: u32, len: u32) -> u32 {
    match grows {
        0 => len,
        _ => len.max(APPEND_ROOM),
    }
}

/// A node of the compressed tree: an edge of consecutive blocks of one prefix, and the workers
/// holding a prefix of it.
///
/// Opaque: layouts hand nodes to the core's walk, which only passes them back.
pub struct Node {
    /// The local hashes of the edge's blocks, right after the node in its allocation
    /// ([`Node::create`]), so that reaching a node brings its edge along instead of a second
    /// miss; dangling at the root, whose edge is empty.
    edge: *const LocalHash,
    /// Blocks in the edge: raised only by [`Node::append`], under the node's lock.
    len: AtomicU32,
    /// Its key in the parent's children.
    key: ChildKey,
    parent: *const Node,
    /// Null when no worker holds any of the edge. Points to `first` until the cover is first
    /// replaced, to a cover of its own after that.
    cover: Atomic<Cover>,
    /// The cover the node was created with, in place: a private suffix (one worker, the common
    /// case) keeps it for life, so a walk reads it in the node's own lines. Published once:
    /// once replaced it is never pointed to again, and it is freed with the node, which
    /// outlives every reader that could still hold it (I3).
    first: Option<Cover>,
    /// Null when there are none.
    children: Atomic<Children>,
    /// How many checkpoints of a layout that indexes them (`mod.rs`) the edge holds: their
    /// [`Anchor`]s follow the edge's room in the node's allocation, and are in the layout's
    /// checkpoint index while the node is linked. With [`GROWS`] set (and no anchors), the
    /// allocation has room for [`APPEND_ROOM`] blocks or the edge's, if more ([`Node::cap`]):
    /// a bit here, not a field, keeps the node at 112 bytes.
    anchors: u32,
    /// Writers' lock over the node; what it guards is whether the node is unlinked.
    unlinked: Mutex<bool>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("key", &self.key)
            .field("edge", &self.edge().len())
            .finish_non_exhaustive()
    }
}

/// A node's children. Changed only under the node's lock; read lock-free.
enum Children {
    /// One child, in place: most nodes of a chain have one, and a walk then reaches the child
    /// in one miss fewer than through a boxed array.
    One(ChildKey, NodePtr),
    /// Two to [`SMALL`] children sorted by key, replaced as a whole on every change.
    Small(Box<[(ChildKey, NodePtr)]>),
    /// More: a table changed in place, holding more than [`FEW`].
    Large(ChildTable<Node, foldhash::fast::RandomState>),
}

impl Keyed for Node {
    type Key = ChildKey;
    /// The node (about two lines) and the first 64 blocks of its edge (eight lines), which
    /// follows it, with a line of slack for where the node starts in its first line: a walk
    /// compares the edge right after it finds the child. Asked for together, they arrive in
    /// one wait (with 8 lines the last ones waited on the stream prefetcher: paper §3.5).
    /// A longer edge's rest is the stream prefetcher's.
    const LINES: usize = 12;
    fn key(&self) -> ChildKey {
        self.key
    }
}

/// A checkpoint inside a node's edge, as the layout's checkpoint index holds it
/// (`anchor_table.rs`): the key of the block at offset `off` (its position and the canonical
/// hash of its prefix), and the node.
///
/// A node's anchors follow its edge in its allocation, written once when it is created, so an
/// anchor lives exactly as long as its node: the tree takes them out of the index before it
/// retires the node (`mod.rs`). An edge is never cut at a checkpoint: a node holds as many
/// anchors as its edge crosses checkpoints, and a query lands in the middle of an edge as well
/// as at its start.
#[derive(Debug)]
#[allow(unreachable_pub)] // Named by the sealed checkpoint index.
pub struct Anchor {
    canon: u64,
    node: *const Node,
    pos: u32,
    off: u32,
}

impl Keyed for Anchor {
    type Key = Key;
    /// The anchor alone: the node it names is asked for by the search once it has it.
    const LINES: usize = 1;
    fn key(&self) -> Key {
        Key {
            pos: self.pos,
            canon: self.canon,
        }
    }
}

#[cfg_attr(not(any(feature = "positional", feature = "array")), allow(dead_code))]
impl Anchor {
    /// The node whose edge holds the checkpoint, and the checkpoint's offset in it.
    ///
    /// # Safety
    /// The anchor was found where it is published (the checkpoint index) by a caller pinned
    /// since: it leaves the index before its node is retired, so the node is allocated while
    /// the pin lasts (I3).
    pub(crate) unsafe fn node<'g>(&self) -> (&'g Node, u32) {
        // SAFETY: the caller's contract.
        (unsafe { &*self.node }, self.off)
    }
}

// SAFETY: written once before the node is published, then only read; the node it names is
// shared under the protocol of the module docs.
unsafe impl Send for Anchor {}
// SAFETY: as above.
unsafe impl Sync for Anchor {}

/// A node pointer stored where readers find a node's children ([`Children`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct NodePtr(pub(super) *const Node);

// SAFETY: the pointee is shared between threads under the protocol of the module docs.
unsafe impl Send for NodePtr {}
// SAFETY: as above.
unsafe impl Sync for NodePtr {}

// SAFETY: the raw pointers are shared read-only between threads under the protocol of the
// module docs (I1-I3); every mutation goes through atomics or the node's lock.
unsafe impl Send for Node {}
// SAFETY: as above.
unsafe impl Sync for Node {}

/// Where a reachable block is: a node and an offset in its edge (the layout's `Handle`). Only
/// [`Spot::new`] makes one, from a node the worker is in, so it never dangles while I1 holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Spot {
    node: NonNull<Node>,
    pub(super) off: u32,
}

/// A stretch is one node's edge: the next block's spot is the next offset.
impl Stretch for Spot {
    #[inline]
    fn follows(self, next: Spot) -> bool {
        next.node == self.node && next.off == self.off + 1
    }

    #[inline]
    fn advance(self, k: u32) -> Spot {
        Spot {
            node: self.node,
            off: self.off + k,
        }
    }
}

// SAFETY: a `Spot` is only dereferenced under I1 (its worker is in the node), on whichever
// thread applies that worker's events.
unsafe impl Send for Spot {}
// SAFETY: as above; it is never dereferenced through a shared reference concurrently with a free.
unsafe impl Sync for Spot {}

impl Spot {
    pub(super) fn new(node: &Node, off: u32) -> Self {
        Self {
            node: NonNull::from(node),
            off,
        }
    }

    /// # Safety
    /// The caller's worker is in the node (I1).
    pub(super) unsafe fn node<'a>(self) -> &'a Node {
        // SAFETY: the caller upholds I1, so the node is linked and allocated.
        unsafe { self.node.as_ref() }
    }
}

/// A node made by [`Node::create`] that nobody else has seen yet: built before its parent's
/// lock is taken, so the lock is held for the link alone, and destroyed if a racing writer
/// linked the same child first. Why: paper §6.16.
struct Prebuilt(*const Node);

impl Prebuilt {
    /// A node whose edge is `edge` and whose worker is `slot`, holding all of it, with room
    /// to grow when it `grows` ([`Node::create`]).
    fn new(
        edge: &[LocalHash],
        grows: bool,
        key: ChildKey,
        parent: &Node,
        slot: Slot,
        anchors: impl ExactSizeIterator<Item = (u32, Key)>,
    ) -> Self {
        let held = edge.len() as u32;
        Self(Node::create(
            edge,
            grows,
            key,
            parent,
            Cover::one(slot, held),
            anchors,
        ))
    }

    /// Hands the node over, to be linked.
    fn publish(self) -> *const Node {
        let node = self.0;
        std::mem::forget(self);
        node
    }
}

impl Drop for Prebuilt {
    fn drop(&mut self) {
        // SAFETY: made by `create` and never published (`publish` forgets it), so nobody else
        // can reach it; dropped once.
        unsafe { Node::destroy(self.0) };
    }
}

impl Children {
    fn get(&self, key: ChildKey) -> Option<*const Node> {
        match self {
            Children::One(k, child) => (*k == key).then_some(child.0),
            Children::Small(entries) => {
                let at = entries.binary_search_by_key(&key, |(k, _)| *k).ok()?;
                Some(entries[at].1.0)
            }
            // SAFETY: a child is tombstoned in its parent's table before it is retired, and
            // every reader of children is pinned (I3).
            Children::Large(table) => unsafe { table.get(key) },
        }
    }

    /// A few children, sorted by key, in the variant their count takes (`None`: no children).
    fn sorted(entries: Vec<(ChildKey, NodePtr)>) -> Option<Self> {
        match entries[..] {
            [] => None,
            [(key, child)] => Some(Children::One(key, child)),
            _ => Some(Children::Small(entries.into_boxed_slice())),
        }
    }

    fn pointers(&self) -> Vec<*const Node> {
        match self {
            Children::One(_, child) => vec![child.0],
            Children::Small(entries) => entries.iter().map(|(_, p)| p.0).collect(),
            Children::Large(table) => table.children().collect(),
        }
    }
}

impl Node {
    pub(super) fn root() -> Self {
        Self {
            edge: std::ptr::NonNull::dangling().as_ptr(),
            len: AtomicU32::new(0),
            key: ChildKey {
                at: 0,
                local: LocalHash(0),
            },
            parent: std::ptr::null(),
            cover: Atomic::null(),
            first: None,
            children: Atomic::null(),
            anchors: 0,
            unlinked: Mutex::new(false),
        }
    }

    /// The layout of a node with room for an edge of `cap` blocks that crosses `anchors`
    /// checkpoints, where in it the edge starts, and how far past the edge's start its anchors
    /// start.
    fn layout(cap: usize, anchors: usize) -> (Layout, usize, usize) {
        const FITS: &str = "an edge fits in memory";
        let edge = Layout::array::<LocalHash>(cap).expect(FITS);
        let (layout, at) = Layout::new::<Node>().extend(edge).expect(FITS);
        let anchored = Layout::array::<Anchor>(anchors).expect(FITS);
        let (layout, anchors_at) = layout.extend(anchored).expect(FITS);
        (layout.pad_to_align(), at, anchors_at - at)
    }

    /// Allocates a node with its edge after it (with room for [`APPEND_ROOM`] blocks when it
    /// `grows`, or the edge's if more), `cover` in place, and an [`Anchor`] after the room for
    /// each of `anchors` (the offset of a checkpoint in the edge, and its key); free it with
    /// [`destroy`](Self::destroy).
    fn create(
        edge: &[LocalHash],
        grows: bool,
        key: ChildKey,
        parent: *const Node,
        cover: Cover,
        anchors: impl ExactSizeIterator<Item = (u32, Key)>,
    ) -> *const Node {
        let count = anchors.len();
        assert!(
            count < GROWS as usize,
            "fewer anchors than the flag's bit counts"
        );
        assert!(!grows || count == 0, "an anchored edge never grows");
        let len = u32::try_from(edge.len()).expect("an edge's positions are u32s");
        let flags = if grows { GROWS } else { 0 };
        let cap = room(flags, len) as usize;
        let (layout, at, anchors_at) = Self::layout(cap, count);
        // SAFETY: the layout has a nonzero size (it holds a node).
        let base = unsafe { alloc::alloc(layout) };
        if base.is_null() {
            alloc::handle_alloc_error(layout);
        }
        let node = base.cast::<Node>();
        // SAFETY: `base` is a fresh allocation of `layout`: a node at its start, room for `cap`
        // local hashes from `at` (the edge's written first), then `count` anchors, all aligned (Layout::extend); the
        // node's pointers are made from `base`, so they may reach the whole allocation.
        unsafe {
            let blocks = base.add(at).cast::<LocalHash>();
            blocks.copy_from_nonoverlapping(edge.as_ptr(), edge.len());
            let anchored = base.add(at + anchors_at).cast::<Anchor>();
            let mut written = 0;
            for (off, key) in anchors.take(count) {
                debug_assert!((off as usize) < edge.len(), "a checkpoint in the edge");
                anchored.add(written).write(Anchor {
                    canon: key.canon,
                    node,
                    pos: key.pos,
                    off,
                });
                written += 1;
            }
            // Every anchor the node will read is written (before the node, which names them).
            assert_eq!(written, count, "the anchors' iterator yields its length");
            node.write(Self {
                edge: blocks,
                len: AtomicU32::new(len),
                key,
                parent,
                cover: Atomic::null(),
                first: Some(cover),
                children: Atomic::null(),
                anchors: count as u32 | flags,
                unlinked: Mutex::new(false),
            });
            let first = std::ptr::addr_of!((*node).first).cast::<Cover>();
            (*node).cover.store(Shared::from(first), Relaxed);
        }
        node
    }

    /// Frees a node made by [`create`](Self::create) (with whatever covers and children it
    /// still owns).
    ///
    /// # Safety
    /// Nobody can reach `node` any more, and it is freed once.
    unsafe fn destroy(node: *const Node) {
        // SAFETY: made by `create` with this room, reachable by nobody (the caller).
        unsafe {
            let (layout, ..) = Self::layout((*node).cap() as usize, (*node).anchor_count());
            std::ptr::drop_in_place(node.cast_mut());
            alloc::dealloc(node.cast_mut().cast(), layout);
        }
    }

    /// The cover in place, as the published pointer would name it.
    fn first_cover(&self) -> *const Cover {
        self.first
            .as_ref()
            .map_or(std::ptr::null(), std::ptr::from_ref)
    }

    /// Blocks the allocation has room for: `create`'s room for the edge it was made with. An
    /// edge grows only while it is shorter than that room, and `room` of any length from the
    /// first to the room's is the room (the room is the larger of the first length and
    /// [`APPEND_ROOM`]), so the length now gives it.
    fn cap(&self) -> u32 {
        room(self.anchors & GROWS, self.len.load(Relaxed))
    }

    fn anchor_count(&self) -> usize {
        (self.anchors & !GROWS) as usize
    }

    /// The checkpoints the edge holds, under which the node is indexed while linked.
    pub(super) fn anchors(&self) -> &[Anchor] {
        let count = self.anchor_count();
        if count == 0 {
            return &[];
        }
        let (_, _, anchors_at) = Self::layout(self.cap() as usize, count);
        // SAFETY: `create` wrote `anchors` anchors `anchors_at` bytes past the edge's start,
        // in the allocation `edge` was made from; never written after, freed with the node.
        unsafe {
            let first = self.edge.cast::<u8>().add(anchors_at).cast::<Anchor>();
            std::slice::from_raw_parts(first, count)
        }
    }

    pub(super) fn is_root(&self) -> bool {
        self.parent.is_null()
    }

    pub(super) fn edge(&self) -> &[LocalHash] {
        // Acquire: the blocks an append wrote before it raised the length are seen with it.
        let len = self.len.load(Acquire) as usize;
        // SAFETY: `edge` points to `len` initialized hashes (written by `create` or by an
        // `append` that raised `len` after writing them) that live as long as the node and are
        // never written again (dangling with 0 at the root).
        unsafe { std::slice::from_raw_parts(self.edge, len) }
    }

    /// Blocks in the edge, for a writer holding the node's lock (the only one that changes it).
    fn len_locked(&self) -> u32 {
        self.len.load(Relaxed)
    }

    /// Appends the first of `locals` that fit to the end of the edge, in the room its
    /// allocation kept, when `slot` is the node's one worker and holds the whole edge, and no
    /// child continues the edge's end with `locals[0]` (a prefix has one path): returns how
    /// many were appended (0 when any of that is not so, or the room is full), all now held by
    /// `slot`. A cover of several workers records the edge's length (which of them hold all of
    /// it), so an edge grows only under a cover of one.
    ///
    /// Readers see the edge of before or after (its length is raised after the blocks are
    /// written), and `slot`'s cutoff is raised after that, so a reader never credits `slot` with
    /// a block the edge it read does not have. `slot` is in `self` (I1).
    pub(super) fn append(&self, slot: Slot, locals: &[LocalHash], guard: &Guard) -> u32 {
        let Some(&local) = locals.first() else {
            return 0;
        };
        // A full edge (the root's, and every edge made with no room) stays full: no lock taken.
        if self.len.load(Relaxed) == self.cap() {
            return 0;
        }
        let state = lock(&self.unlinked);
        debug_assert!(!*state, "a node with a worker is linked (I1)");
        let len = self.len_locked();
        let n = (self.cap() - len).min(u32::try_from(locals.len()).unwrap_or(u32::MAX));
        let alone = matches!(self.cover(guard), Some(c) if c.only(slot) == Some(len));
        let key = ChildKey { at: len, local };
        if n == 0 || !alone || self.child(key, guard).is_some() {
            return 0;
        }
        // SAFETY: `len + n <= cap()`, so the room is inside the allocation `edge` was made from;
        // no reader reads past `len`, which is raised below, after the writes; the lock keeps
        // other writers out.
        unsafe {
            let end = self.edge.cast_mut().add(len as usize);
            end.copy_from_nonoverlapping(locals.as_ptr(), n as usize);
        }
        self.len.store(len + n, Release);
        self.raise(slot, len + n, guard);
        drop(state);
        n
    }

    fn children<'g>(&self, guard: &'g Guard) -> Option<&'g Children> {
        // SAFETY: children are only freed through the epoch after being replaced (I3).
        unsafe { self.children.load(Acquire, guard).as_ref() }
    }

    /// The child at `key`, lock-free.
    pub(super) fn child<'g>(&self, key: ChildKey, guard: &'g Guard) -> Option<&'g Node> {
        let ptr = self.children(guard)?.get(key)?;
        // SAFETY: the pointer was linked when we loaded it; I3 keeps it allocated.
        Some(unsafe { &*ptr })
    }

    /// Starts loading where [`child`](Self::child) looks for `key`.
    pub(super) fn warm_child(&self, key: ChildKey, guard: &Guard) {
        match self.children(guard) {
            Some(Children::Large(table)) => table.warm(key),
            Some(Children::Small(entries)) => crate::prefetch::prefetch(entries.as_ptr()),
            Some(Children::One(k, child)) if *k == key => {
                crate::prefetch::prefetch_lines(child.0, <Node as Keyed>::LINES);
            }
            Some(Children::One(..)) | None => {}
        }
    }

    /// The node's cover, lock-free.
    pub(super) fn cover<'g>(&self, guard: &'g Guard) -> Option<&'g Cover> {
        // SAFETY: covers are only freed through the epoch after being replaced, or with the
        // node (the one in place), which outlives the pin (I3).
        unsafe { self.cover.load(Acquire, guard).as_ref() }
    }

    /// Replaces the cover. Caller holds `self.unlinked`.
    fn set_cover(&self, cover: Option<Cover>, guard: &Guard) {
        let new = cover.map_or(Shared::null(), |c| Owned::new(c).into_shared(guard));
        let old = self.cover.swap(new, AcqRel, guard);
        // The cover in place is freed with the node, never on its own.
        if old.as_raw() != self.first_cover() {
            retire(old, guard);
        }
    }

    /// Replaces the children. Caller holds `self.unlinked`.
    fn set_children(&self, children: Option<Children>, guard: &Guard) {
        let new = children.map_or(Shared::null(), |c| Owned::new(c).into_shared(guard));
        retire(self.children.swap(new, AcqRel, guard), guard);
    }

    /// Links `child` at `key`. Caller holds `self.unlinked`.
    fn link(&self, key: ChildKey, child: *const Node, guard: &Guard) {
        match self.children(guard) {
            Some(Children::Large(table)) if table.has_room() => table.insert(child),
            Some(Children::Large(table)) => {
                let all = table.children().chain([child]).collect::<Vec<_>>();
                let grown = ChildTable::new(all.into_iter(), table.hasher().clone());
                self.set_children(Some(Children::Large(grown)), guard);
            }
            Some(Children::Small(entries)) if entries.len() >= SMALL => {
                let all = entries.iter().map(|(_, p)| p.0).chain([child]);
                let table =
                    ChildTable::new(all.collect::<Vec<_>>().into_iter(), Default::default());
                self.set_children(Some(Children::Large(table)), guard);
            }
            None => self.set_children(Some(Children::One(key, NodePtr(child))), guard),
            Some(Children::One(k, p)) => self.link_among(vec![(*k, *p)], key, child, guard),
            Some(Children::Small(entries)) => self.link_among(entries.to_vec(), key, child, guard),
        }
    }

    /// Links `child` at `key` among `entries`, a few children sorted by key. Caller holds
    /// `self.unlinked`.
    fn link_among(
        &self,
        mut entries: Vec<(ChildKey, NodePtr)>,
        key: ChildKey,
        child: *const Node,
        guard: &Guard,
    ) {
        let at = entries.binary_search_by_key(&key, |(k, _)| *k).unwrap_err();
        entries.insert(at, (key, NodePtr(child)));
        self.set_children(Children::sorted(entries), guard);
    }

    /// Unlinks the child at `key`. Caller holds `self.unlinked`.
    fn unlink(&self, key: ChildKey, guard: &Guard) {
        match self.children(guard) {
            Some(Children::Large(table)) => {
                table.remove(key);
                if table.len() <= FEW {
                    let mut entries: Vec<(ChildKey, NodePtr)> = table
                        .children()
                        // SAFETY: the writer's table holds only linked children (I1-I3).
                        .map(|p| (unsafe { &*p }.key, NodePtr(p)))
                        .collect();
                    entries.sort_unstable_by_key(|(k, _)| *k);
                    self.set_children(Children::sorted(entries), guard);
                } else if table.len() * 8 < table.capacity() {
                    // Mostly empty after a wave of removals: memory follows the live children.
                    let live = table.children().collect::<Vec<_>>();
                    let shrunk = ChildTable::new(live.into_iter(), table.hasher().clone());
                    self.set_children(Some(Children::Large(shrunk)), guard);
                }
            }
            Some(Children::Small(entries)) => {
                let rest: Vec<_> = entries.iter().filter(|(k, _)| *k != key).copied().collect();
                self.set_children(Children::sorted(rest), guard);
            }
            Some(Children::One(k, _)) if *k == key => self.set_children(None, guard),
            Some(Children::One(..)) | None => {}
        }
    }

    /// Raises `slot`'s cutoff to `to` (adding it); returns the cutoff before. Caller holds
    /// `self.unlinked`, and the node is linked.
    fn raise(&self, slot: Slot, to: u32, guard: &Guard) -> u32 {
        match self.cover(guard) {
            None => {
                self.set_cover(Some(Cover::one(slot, to)), guard);
                0
            }
            Some(cover) => match cover.raise(slot, to, self.len_locked()) {
                Ok(old) => old,
                Err((replacement, old)) => {
                    self.set_cover(replacement, guard);
                    old
                }
            },
        }
    }

    /// Raises `slot`'s cutoff in `self`, a node it is in (I1), to `to`; returns the cutoff
    /// before.
    pub(super) fn raise_own(&self, slot: Slot, to: u32, guard: &Guard) -> u32 {
        let state = lock(&self.unlinked);
        debug_assert!(!*state, "a node with a worker is linked (I1)");
        let old = self.raise(slot, to, guard);
        drop(state);
        old
    }

    /// Adds `slot` to the child of `self` at `key`, holding `follow(child's edge)` blocks of it;
    /// creates the child, with edge `edge` (and room for `cap` blocks, see [`Node::append`])
    /// and the checkpoints `anchors()` (offsets in the edge and keys), when there is none,
    /// and then calls `index(child)` before anyone else can reach it through `self` (under
    /// `self`'s lock, so that a writer that finds the child finds it indexed too). Returns the
    /// child, how many blocks `slot` holds there now, the cutoff it had there before, and
    /// whether the child was created. `self` holds `slot` (I1), or is the root.
    #[allow(clippy::too_many_arguments)] // Each closure is one decision of the caller's.
    pub(super) fn enter_child<'g, A: ExactSizeIterator<Item = (u32, Key)>>(
        &'g self,
        key: ChildKey,
        slot: Slot,
        follow: impl FnOnce(&[LocalHash]) -> u32,
        edge: &[LocalHash],
        grows: bool,
        anchors: impl FnOnce() -> A,
        index: impl FnOnce(&'g Node),
        guard: &'g Guard,
    ) -> (&'g Node, u32, u32, bool) {
        // A child that is not there yet is built before the lock is taken, so that the lock is
        // held for the link alone: every conversation of a system prompt forks under the same
        // node, and two writers storing under it took turns on its lock with an allocation and
        // a copy of the edge inside (see `Prebuilt`).
        let mut anchors = Some(anchors);
        let mut build = || {
            let anchors = anchors.take().expect("one node is built at most");
            Prebuilt::new(edge, grows, key, self, slot, anchors())
        };
        let mut prebuilt = match self.child(key, guard) {
            Some(_) => None,
            None => Some(build()),
        };
        let parent_state = lock(&self.unlinked);
        debug_assert!(
            !*parent_state,
            "a node with a worker's reachable child is linked (I1, I2)"
        );
        let out = match self.child(key, guard) {
            Some(child) => {
                // Linked by another writer since the look above: the prebuilt node, which
                // nobody else has seen, is dropped with `prebuilt`.
                let held = follow(child.edge());
                debug_assert!(held > 0, "a child's edge starts with its key's local hash");
                let child_state = lock(&child.unlinked);
                // Linked under our lock, so not unlinked: that needs the parent's lock.
                debug_assert!(!*child_state);
                let old = child.raise(slot, held, guard);
                drop(child_state);
                (child, held, old, false)
            }
            None => {
                // Unlinked by another writer since the look above, if nothing was prebuilt.
                let child = prebuilt.take().unwrap_or_else(build).publish();
                self.link(key, child, guard);
                // SAFETY: just allocated and linked; it stays allocated while we are pinned (I3).
                let child = unsafe { &*child };
                index(child);
                (child, edge.len() as u32, 0, true)
            }
        };
        drop(parent_state);
        drop(prebuilt);
        out
    }

    /// Cuts `slot`'s cutoff in `self` down to `to` (0: removes it), then unlinks `self` and
    /// its ancestors while they have neither workers nor children, calling `unindex(node)` for
    /// each under its parent's lock, before it is retired. Returns how many nodes were
    /// unlinked.
    ///
    /// # Safety
    /// The caller's worker (`slot`) is in `self`, holding more than `to` blocks (I1), and the
    /// caller is pinned by `guard`.
    pub(super) unsafe fn cut(
        &self,
        slot: Slot,
        to: u32,
        unindex: impl FnMut(&Node),
        guard: &Guard,
    ) -> usize {
        let state = lock(&self.unlinked);
        debug_assert!(!*state, "a node with a worker is linked (I1)");
        let cover = self.cover(guard).expect("a node with a worker has a cover");
        let emptied = match cover.cut(slot, to, self.len_locked()) {
            Ok(()) => false,
            Err(replacement) => {
                let emptied = replacement.is_none();
                self.set_cover(replacement, guard);
                emptied
            }
        };
        drop(state);
        if emptied {
            self.prune(unindex, guard)
        } else {
            0
        }
    }

    /// Unlinks `self`, then its ancestors, while they have neither workers nor children.
    fn prune(&self, mut unindex: impl FnMut(&Node), guard: &Guard) -> usize {
        let mut node = self;
        let mut unlinked = 0;
        while !node.is_root() {
            // SAFETY: I3: `node` was reached while pinned; its parent pointer was set at
            // creation and the parent stays allocated while we are pinned.
            let parent = unsafe { &*node.parent };
            let parent_state = lock(&parent.unlinked);
            let mut state = lock(&node.unlinked);
            if *state || node.cover(guard).is_some() || node.children(guard).is_some() {
                return unlinked; // Already unlinked by another writer, or needed again.
            }
            parent.unlink(node.key, guard);
            unindex(node);
            *state = true;
            drop(state);
            drop(parent_state);
            let node_ptr = std::ptr::from_ref(node);
            // SAFETY: unlinked from its parent and out of the checkpoint index, the only places
            // that published it; readers and writers that reached it are pinned (I3) and see
            // `unlinked`; freed once, after they unpin. Made by `create` (the root is never
            // unlinked).
            unsafe { graveyard::retire(node_ptr.cast_mut().cast(), destroy_erased, guard) };
            unlinked += 1;
            node = parent;
        }
        unlinked
    }

    /// Frees every node below `self` (not `self`), iteratively: chains are 100,000 deep.
    ///
    /// # Safety
    /// No other thread can reach the tree (the caller has it by `&mut`).
    pub(super) unsafe fn free_descendants(&mut self) {
        // SAFETY: exclusive access, so nothing is concurrently retired or read.
        let guard = unsafe { crossbeam_epoch::unprotected() };
        let mut stack = self
            .children(guard)
            .map_or_else(Vec::new, Children::pointers);
        while let Some(ptr) = stack.pop() {
            // SAFETY: every linked node was made by `create` in `enter_child` and is linked
            // from exactly one parent, so it is read here, then freed, exactly once.
            unsafe {
                if let Some(children) = (*ptr).children(guard) {
                    stack.extend(children.pointers());
                }
                Node::destroy(ptr);
            }
        }
    }
}

/// Retires `old` (if any) through the epoch (freed on a writer's thread: `graveyard.rs`).
pub(super) fn retire<T: Send>(old: Shared<'_, T>, guard: &Guard) {
    if !old.is_null() {
        // SAFETY: `old` was just swapped out of the only place that published it; readers
        // that loaded it are pinned, and it is freed after they unpin, by `free_owned::<T>`
        // (it was made by `Owned::new`).
        unsafe { graveyard::retire(old.as_raw().cast_mut().cast(), free_owned::<T>, guard) };
    }
}

/// Frees an object made by `Owned::new`, by its erased address.
///
/// # Safety
/// `ptr` is such an object of type `T`, reachable by nobody, freed once.
unsafe fn free_owned<T>(ptr: *mut ()) {
    // SAFETY: the caller's contract.
    drop(unsafe { Owned::<T>::from_raw(ptr.cast()) });
}

/// [`Node::destroy`] by the node's erased address.
///
/// # Safety
/// As for `Node::destroy`.
unsafe fn destroy_erased(ptr: *mut ()) {
    // SAFETY: the caller's contract.
    unsafe { Node::destroy(ptr.cast_const().cast()) };
}

impl Drop for Node {
    fn drop(&mut self) {
        // SAFETY: a node is dropped by `free_descendants` (exclusive access) or by the epoch
        // after no reader can reach it; its own cover and children are reachable only from it.
        unsafe {
            let guard = crossbeam_epoch::unprotected();
            let cover = self.cover.load(Relaxed, guard);
            // The cover in place goes with the node's other fields.
            if !cover.is_null() && cover.as_raw() != self.first_cover() {
                drop(cover.into_owned());
            }
            let children = self.children.load(Relaxed, guard);
            if !children.is_null() {
                drop(children.into_owned());
            }
        }
    }
}

#[cfg(all(test, not(loom), target_os = "linux", target_pointer_width = "64"))]
mod tests {
    /// Every edge pays for a node: a field more is 8 bytes more on every edge of every index
    /// (the node's room bit lives in `anchors` for that reason).
    #[test]
    fn a_node_takes_112_bytes() {
        assert_eq!(std::mem::size_of::<super::Node>(), 112);
    }
}
