//! The search's levers, one at a time, for the `levers` benchmark: each can be timed apart
//! from the layouts and the rest of a query.

use crate::index_core::canon::{Canon, MAX_FOLD};
use crate::index_core::search::MAX_GALLOP;
use crate::index_core::{Cover, Slot, SlotSet};
#[cfg(any(feature = "positional", feature = "array", feature = "radix"))]
use crate::layouts::tree::child_table::{ChildTable, Keyed};
#[cfg(any(feature = "positional", feature = "array", feature = "radix"))]
use crate::mix::SplitMix64;
use crate::types::LocalHash;

/// The canonical hash of a query prefix, rolled as the search rolls it (a stride of blocks to
/// a dependent step), as the write side rolls a chain (every block's hash, four blocks to a
/// dependent step) or one block a step. All give the same value.
///
/// ```
/// use flash_indexer::{LocalHash, testing::CanonicalRoll};
///
/// let roll = CanonicalRoll::new(7);
/// let query: Vec<LocalHash> = (0..100).map(LocalHash).collect();
/// assert_eq!(roll.by_groups(&query), roll.block_by_block(&query));
/// assert_eq!(roll.every_block(&query), roll.block_by_block(&query));
/// ```
#[derive(Clone, Debug)]
pub struct CanonicalRoll {
    canon: Canon,
}

impl CanonicalRoll {
    /// The polynomial keyed by `seed`, as [`Indexer::with_seed`](crate::Indexer::with_seed)
    /// keys it.
    pub fn new(seed: u64) -> Self {
        Self {
            canon: Canon::new(seed),
        }
    }

    /// The canonical hash of `query`'s last block, one dependent step a block.
    pub fn block_by_block(&self, query: &[LocalHash]) -> u64 {
        let Some((&first, rest)) = query.split_first() else {
            return 0;
        };
        rest.iter().fold(self.canon.first(first), |c, &local| {
            self.canon.step(c, local)
        })
    }

    /// The canonical hash of `query`'s last block as the write side rolls a stored chain, every
    /// block's hash on the way (four blocks a dependent step).
    pub fn every_block(&self, query: &[LocalHash]) -> u64 {
        let mut keys = Vec::with_capacity(query.len());
        self.canon.children(None, query.iter().copied(), &mut keys);
        keys.last().map_or(0, |key| key.canon)
    }

    /// The canonical hash of `query`'s last block, 128 blocks a dependent step (a stride of the
    /// positional layout's checkpoints), with the search's marks written on the way (windows of
    /// its longest jump, 1,024 blocks).
    pub fn by_groups(&self, query: &[LocalHash]) -> u64 {
        const WINDOW: usize = MAX_GALLOP as usize;
        let Some((&first, rest)) = query.split_first() else {
            return 0;
        };
        let mut marks = [0; WINDOW / MAX_FOLD];
        rest.chunks(WINDOW)
            .fold(self.canon.first(first), |c, window| {
                self.canon.roll(c, window, MAX_FOLD, &mut marks)
            })
    }
}

/// The probe lever: finding one of a parent's many children by key, in the table the tree
/// keeps them in (the child pointers themselves, slot computed from the key) or in the
/// concurrent map it used before (papaya, whose entries sit behind the bucket's pointer).
/// Children are a cache line each, and there are enough of them (`parents * children`) that
/// a lookup in random order misses the caches, as a query's does.
///
/// ```
/// use flash_indexer::testing::ChildProbe;
///
/// let probe = ChildProbe::new(4, 100, 1);
/// assert_eq!(probe.in_table(17), probe.in_map(17));
/// ```
#[cfg(any(feature = "positional", feature = "array", feature = "radix"))]
pub struct ChildProbe {
    tables: Vec<ChildTable<ProbeChild, foldhash::fast::RandomState>>,
    maps: Vec<papaya::HashMap<u64, ProbeChildPtr, foldhash::fast::RandomState>>,
    /// (parent, key) in the order lookups take them.
    order: Vec<(u32, u64)>,
    _children: Vec<ProbeChild>,
}

#[cfg(any(feature = "positional", feature = "array", feature = "radix"))]
#[repr(align(64))]
struct ProbeChild {
    key: u64,
    payload: u64,
}

#[cfg(any(feature = "positional", feature = "array", feature = "radix"))]
impl Keyed for ProbeChild {
    type Key = u64;
    fn key(&self) -> u64 {
        self.key
    }
}

/// A child pointer the map can hold (papaya needs `Send + Sync` values).
#[cfg(any(feature = "positional", feature = "array", feature = "radix"))]
#[derive(Clone, Copy)]
struct ProbeChildPtr(*const ProbeChild);

// SAFETY: the pointee is only read, and outlives every map that holds the pointer (the
// children's Vec is never pushed to after the maps are built, so it never moves them).
#[cfg(any(feature = "positional", feature = "array", feature = "radix"))]
unsafe impl Send for ProbeChildPtr {}
// SAFETY: as above.
#[cfg(any(feature = "positional", feature = "array", feature = "radix"))]
unsafe impl Sync for ProbeChildPtr {}

#[cfg(any(feature = "positional", feature = "array", feature = "radix"))]
impl std::fmt::Debug for ChildProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildProbe")
            .field("parents", &self.tables.len())
            .field("lookups", &self.order.len())
            .finish_non_exhaustive()
    }
}

#[cfg(any(feature = "positional", feature = "array", feature = "radix"))]
impl ChildProbe {
    /// `children` children with random keys under each of `parents` parents, in both
    /// structures, and every (parent, key) once in a random order.
    pub fn new(parents: usize, children: usize, seed: u64) -> Self {
        let mut rng = SplitMix64(seed);
        let all: Vec<ProbeChild> = (0..parents * children)
            .map(|_| {
                let key = rng.next_u64();
                ProbeChild {
                    key,
                    payload: key.rotate_left(17),
                }
            })
            .collect();
        let mut tables = Vec::with_capacity(parents);
        let mut maps = Vec::with_capacity(parents);
        for mine in all.chunks(children.max(1)) {
            let pointers = || mine.iter().map(|c| c as *const ProbeChild);
            tables.push(ChildTable::new(
                pointers().collect::<Vec<_>>().into_iter(),
                Default::default(),
            ));
            let map = papaya::HashMap::with_capacity_and_hasher(children, Default::default());
            for (child, pointer) in mine.iter().zip(pointers()) {
                map.pin().insert(child.key, ProbeChildPtr(pointer));
            }
            maps.push(map);
        }
        let mut order: Vec<(u32, u64)> = all
            .iter()
            .enumerate()
            .map(|(i, c)| ((i / children.max(1)) as u32, c.key))
            .collect();
        for i in (1..order.len()).rev() {
            order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        Self {
            tables,
            maps,
            order,
            _children: all,
        }
    }

    /// The payload of the `i`-th child of the order (modulo its length), found in its parent's
    /// table.
    pub fn in_table(&self, i: usize) -> u64 {
        let (parent, key) = self.order[i % self.order.len()];
        // SAFETY: the children outlive the tables, and nothing is ever removed.
        let child = unsafe { self.tables[parent as usize].get(key) };
        // SAFETY: as above.
        child.map_or(0, |c| unsafe { &*c }.payload)
    }

    /// Starts loading the table slot where [`in_table`](Self::in_table) will look for the
    /// `i`-th child, as a walk does for the next node's child while it works at this one.
    pub fn warm(&self, i: usize) {
        let (parent, key) = self.order[i % self.order.len()];
        self.tables[parent as usize].warm(key);
    }

    /// The same, found in its parent's papaya map.
    pub fn in_map(&self, i: usize) -> u64 {
        let (parent, key) = self.order[i % self.order.len()];
        let map = self.maps[parent as usize].pin();
        // SAFETY: the children outlive the maps.
        map.get(&key).map_or(0, |c| unsafe { &*c.0 }.payload)
    }
}

/// The set lever: the step of a search where the workers still matching (`active`, words of
/// bits over their slots) are narrowed to those holding at least `m` blocks of a node, read
/// from the node's cover (a sorted list with its members as words of bits up to 64 workers, a
/// bit and a cutoff per slot beyond; both know which members hold the whole edge), and the step
/// of a scan-back where they are split into those in a node and the others.
///
/// ```
/// use flash_indexer::testing::CoverSets;
///
/// let sets = CoverSets::new(1_000, 2);
/// assert_eq!(sets.keep(), 500);
/// assert_eq!(sets.split(), 1_000);
/// assert_eq!(CoverSets::new(1_000, 0).keep(), 1_000);
/// ```
pub struct CoverSets {
    cover: Cover,
    active: SlotSet,
    scratch: std::cell::RefCell<SlotSet>,
}

impl std::fmt::Debug for CoverSets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoverSets")
            .field("active", &self.active.len())
            .finish_non_exhaustive()
    }
}

impl CoverSets {
    /// The edge the cover is on.
    const EDGE: u32 = 64;

    /// A cover of `workers` slots, where one in `stop_every` (none when 0) holds a single block
    /// and the others the whole edge; every worker is active.
    pub fn new(workers: u32, stop_every: u32) -> Self {
        let cutoff = |s: Slot| {
            if stop_every > 0 && s.is_multiple_of(stop_every) {
                1
            } else {
                Self::EDGE
            }
        };
        let mut cover = Cover::one(0, cutoff(0));
        for slot in 1..workers {
            if let Err((Some(bigger), _)) = cover.raise(slot, cutoff(slot), Self::EDGE) {
                cover = bigger;
            }
        }
        Self {
            cover,
            active: SlotSet::from_sorted(0..workers),
            scratch: Default::default(),
        }
    }

    /// Narrows every active worker to those holding the whole edge, counting the others as a
    /// search scores them; returns how many are kept.
    pub fn keep(&self) -> usize {
        let mut set = self.scratch.borrow_mut();
        set.copy_from(&self.active);
        let mut dropped = 0u64;
        self.cover
            .keep(&mut set, Self::EDGE, |_, c| dropped += u64::from(c));
        std::hint::black_box(dropped);
        set.len()
    }

    /// Splits every active worker into those in the cover and the others, as a scan-back does
    /// at a probe; returns how many are in.
    pub fn split(&self) -> usize {
        let mut set = self.scratch.borrow_mut();
        set.copy_from(&self.active);
        let absent = self.cover.split_off_absent(&mut set);
        std::hint::black_box(absent);
        set.len()
    }
}

/// A block the size of a small tree node with a stride of its edge, retired by [`Reclaim`].
#[cfg(all(
    not(loom),
    any(feature = "positional", feature = "array", feature = "radix")
))]
type Retiree = [u8; 256];

/// Frees a [`Retiree`].
///
/// # Safety
/// `ptr` came from `Box::<Retiree>::into_raw` and nobody else can reach it.
#[cfg(all(
    not(loom),
    any(feature = "positional", feature = "array", feature = "radix")
))]
unsafe fn free_retiree(ptr: *mut ()) {
    // SAFETY: the caller's contract.
    drop(unsafe { Box::from_raw(ptr.cast::<Retiree>()) });
}

/// The reclamation lever: what a query's pin pays when it collects what a writer retired.
///
/// A writer thread allocates `objects` node-sized blocks and retires them, then ends; this
/// thread then pins and flushes until the epoch has moved past them, as a query's pin collects
/// every 128th time. Retired the way the tree did before its graveyard (each block a deferred
/// free of the epoch's), the collecting thread frees all of them, which are the writer's
/// allocations; through the graveyard (the tree now), it only moves the writer's batch onto
/// the graveyard's list, and a writer frees it later (here: after the timing).
///
/// ```
/// use flash_indexer::testing::Reclaim;
///
/// let reclaim = Reclaim::new(512);
/// assert!(reclaim.collect(true) > std::time::Duration::ZERO);
/// assert!(reclaim.collect(false) > std::time::Duration::ZERO);
/// ```
///
/// Not under loom, where the tree's retiring defers each object to the epoch directly.
#[cfg(all(
    not(loom),
    any(feature = "positional", feature = "array", feature = "radix")
))]
#[derive(Debug)]
pub struct Reclaim {
    objects: usize,
}

#[cfg(all(
    not(loom),
    any(feature = "positional", feature = "array", feature = "radix")
))]
impl Reclaim {
    /// Pins and flushes this many times: the epoch moves one step a flush, and a bag is freed two
    /// steps after it was sealed.
    const COLLECTS: usize = 4;

    /// A lever that retires `objects` blocks a round (up to 512 are collected by one flush).
    pub fn new(objects: usize) -> Self {
        Self { objects }
    }

    /// One round: a writer retires the blocks (through the graveyard or, with `graveyard`
    /// false, each to the epoch), then this thread's pins collect them. Returns how long the
    /// collecting took on this thread.
    pub fn collect(&self, graveyard: bool) -> std::time::Duration {
        use crate::layouts::tree::graveyard as yard;
        let objects = self.objects;
        std::thread::scope(|s| {
            s.spawn(move || {
                let guard = crossbeam_epoch::pin();
                for _ in 0..objects {
                    let ptr = Box::into_raw(Box::new([0u8; 256])).cast::<()>();
                    if graveyard {
                        // SAFETY: the block is this thread's alone and retired once;
                        // `free_retiree` frees it.
                        unsafe { yard::retire(ptr, free_retiree, &guard) };
                    } else {
                        let free = move || {
                            // SAFETY: as above.
                            unsafe { free_retiree(ptr) }
                        };
                        // SAFETY: nobody else can reach the block; `free` is the only owner.
                        unsafe { guard.defer_unchecked(free) };
                    }
                }
                if graveyard {
                    yard::flush(&guard);
                }
                guard.flush();
            });
        });
        let start = std::time::Instant::now();
        for _ in 0..Self::COLLECTS {
            crossbeam_epoch::pin().flush();
        }
        let took = start.elapsed();
        yard::free_buried();
        took
    }
}
