//! What the checkpoint indexes of the positional and array layouts share: a papaya map from
//! a key to a node pointer ([`NodeMap`]), its hasher, and its reclamation collector.

use super::tree::NodePtr;
use crate::sync::atomic::{AtomicU64, Ordering};
use core::hash::{BuildHasher, Hash, Hasher};
use papaya::{Compute, HashMap, LocalGuard, Operation, ResizeMode};
use std::sync::Arc; // sync-shim: papaya takes its collector as a std Arc

/// Positions between two checkpoints of the positional and array layouts.
///
/// A longer stride means fewer index entries and probes, fewer nodes cut where no chain
/// branches, and a longer walk (at most `STRIDE - 1` blocks compared contiguously) to finish
/// each drained worker. At 64, the Mooncake trace's deep queries (several hundred to 1,500
/// blocks matched) crossed a node every 64 blocks, and the trace's query p99 and p99.9 were
/// about 1.8 times the radix layout's (one thread, replayed directly: p99 2.2-2.4 us against
/// 1.0-1.3, p99.9 3.4-4.0 against 1.7-2.1); at 128 (the longest run the canonical hash folds
/// in one step, [`MAX_FOLD`](crate::index_core::canon::MAX_FOLD)) they were 1.3-1.7 and
/// 2.3-3.2 us against 1.1-1.3 and 2.0-2.3 in the same session, and on Dynamo's workload,
/// whose sequence tails start at position 64, no tail has a key to store or remove.
pub(crate) const STRIDE: u32 = 128;

/// A hasher for keys made of canonical hashes (and positions). Canonical hashes are already
/// keyed per index, but a polynomial's value is not a mixed hash (it is linear in the blocks),
/// and papaya takes its tag from a hash's top seven bits: one multiply spreads the bits up.
/// SipHash here would cost more than the probe.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct KeyHasher {
    state: u64,
}

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.state
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only reached if a key's `Hash` impl changes; stay correct, if slower.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u32(&mut self, pos: u32) {
        self.state ^= u64::from(pos).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    #[inline]
    fn write_u64(&mut self, canon: u64) {
        self.state = (self.state.rotate_left(23) ^ canon).wrapping_mul(crate::mix::GOLDEN);
    }
}

/// Builds [`KeyHasher`]s.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct BuildKeyHasher;

impl BuildHasher for BuildKeyHasher {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher::default()
    }
}

/// How many retired objects a thread batches before it tries to reclaim them. Every attempt
/// starts with a `membarrier` system call (an interrupt to every core running the process):
/// with seize's default of 32, removes spent about a third of their time there (perf, Dynamo's
/// workload, when every block had an entry).
const RETIRE_BATCH: usize = 1024;

/// The reclamation collector of the indexes.
pub(crate) fn collector() -> seize::Collector {
    seize::Collector::new().batch_size(RETIRE_BATCH)
}

/// A concurrent map from `K` to the node indexed under it, grown about fourfold at a time,
/// ahead of papaya's own doublings, once it is large.
///
/// papaya grows a table when a probe runs too long, doubling it and copying every entry, and a
/// copy reads each entry's boxed key again: on Dynamo's workload, whose 12,800 sequence tails
/// each start a checkpoint, those copies were 3% of the array layout's store and remove profile
/// (perf, one thread), the largest single cost the radix layout does not have. When a map
/// reaches four times the length it had at its last growth, it reserves room for five times
/// its entries: the next power of two above papaya's target load, so each growth is about
/// fourfold, and each entry is copied about a third as often as by doubling. Measured on that
/// workload: the copies' samples halved, and the bytes per held pair went from 15.1 to 15.2.
pub(crate) struct NodeMap<K> {
    map: HashMap<K, NodePtr, BuildKeyHasher>,
    /// The length at which the map next grows ahead.
    grow_at: AtomicU64,
}

/// Below this length papaya's doublings copy little; the map grows ahead only from here.
const GROW_AHEAD_FROM: u64 = 1024;

/// One insert in this many (chosen by the key's hash, so no counter is shared) checks the
/// map's length, which sums a counter sharded over threads.
const CHECK_EVERY: u64 = 64;

impl<K: Hash + Eq + Send + Sync + 'static> NodeMap<K> {
    /// An empty map; maps that must share one guard pass the same `shared` collector, others
    /// get their own ([`collector`]).
    ///
    /// Blocking resizes: writers finish a resize together, so readers always find a single
    /// table (incremental mode can leave a half-copied table that every miss walks through).
    pub(crate) fn new(shared: Option<Arc<seize::Collector>>) -> Self {
        let builder = HashMap::builder()
            .hasher(BuildKeyHasher)
            .resize_mode(ResizeMode::Blocking);
        let map = match shared {
            Some(c) => builder.shared_collector(c).build(),
            None => builder.collector(collector()).build(),
        };
        Self {
            map,
            grow_at: AtomicU64::new(GROW_AHEAD_FROM),
        }
    }

    /// A guard of the map's collector (the array layout's maps share one collector, and it
    /// enters that instead).
    #[inline]
    #[cfg_attr(not(feature = "positional"), allow(dead_code))]
    pub(crate) fn guard(&self) -> LocalGuard<'_> {
        self.map.guard()
    }

    /// The node under `key`.
    #[inline]
    pub(crate) fn get(&self, key: &K, guard: &LocalGuard<'_>) -> Option<NodePtr> {
        self.map.get(key, guard).copied()
    }

    /// Indexed keys.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Indexes `node` under `key`, keeping a node already there (see
    /// [`Checkpoints::insert`](super::tree::Checkpoints::insert)).
    pub(crate) fn insert(&self, key: K, node: NodePtr, guard: &LocalGuard<'_>) {
        let check = BuildKeyHasher.hash_one(&key).is_multiple_of(CHECK_EVERY);
        // Err: a live prefix with the same canonical hash holds the key; it keeps it.
        if self.map.try_insert(key, node, guard).is_ok() && check {
            self.grow_ahead(guard);
        }
    }

    /// Reserves room for five times the entries if the map reached its next growth.
    #[cold]
    fn grow_ahead(&self, guard: &LocalGuard<'_>) {
        let len = self.map.len() as u64;
        if len < self.grow_at.load(Ordering::Relaxed) {
            return;
        }
        // Two writers may both get here: papaya lets them share the one resize.
        self.grow_at.store(len * 4, Ordering::Relaxed);
        // `additional`: room for the entries there and four times as many more.
        self.map.reserve(len as usize * 4, guard);
    }

    /// Drops `key` if it names `node`.
    pub(crate) fn remove(&self, key: K, node: NodePtr, guard: &LocalGuard<'_>) {
        // Aborted: the node was never indexed (its key was taken, see `insert`).
        let _: Compute<'_, K, NodePtr, ()> = self.map.compute(
            key,
            |entry| match entry {
                Some((_, found)) if *found == node => Operation::Remove,
                _ => Operation::Abort(()),
            },
            guard,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_grown_ahead_finds_every_key_and_forgets_removed_ones() {
        let map = NodeMap::<u64>::new(None);
        let guard = map.guard();
        let node = |k: u64| NodePtr::fake(k as usize + 1);
        let n = 50_000;
        for k in 0..n {
            map.insert(k, node(k), &guard);
        }
        let grown_at = map.grow_at.load(Ordering::Relaxed);
        assert!(
            grown_at > 4 * GROW_AHEAD_FROM,
            "grew ahead, last at {grown_at}"
        );
        assert_eq!(map.len(), n as usize);
        assert!((0..n).all(|k| map.get(&k, &guard) == Some(node(k))));
        // A key keeps the node it has; a remove naming another node leaves it.
        map.insert(7, node(99), &guard);
        map.remove(7, node(99), &guard);
        assert_eq!(map.get(&7, &guard), Some(node(7)));
        for k in 0..n {
            map.remove(k, node(k), &guard);
        }
        assert_eq!(map.len(), 0);
        assert_eq!(map.get(&7, &guard), None);
    }
}
