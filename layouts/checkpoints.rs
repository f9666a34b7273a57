//! What the checkpoint indexes of the positional and array layouts share: a papaya map from
//! a key to a node pointer, its hasher, and the index's three operations on it.

use super::tree::NodePtr;
use core::hash::{BuildHasher, Hash, Hasher};
use papaya::{Compute, HashMap, LocalGuard, Operation, ResizeMode};
use std::sync::Arc; // sync-shim: papaya takes its collector as a std Arc

/// Positions between two checkpoints of the positional and array layouts.
///
/// Measured with `flashbench compare --presets dynamo,depth` (2 cores): see the layouts' docs.
/// A longer stride means fewer index entries and probes, and a longer walk (at most
/// `STRIDE - 1` blocks compared contiguously) to finish each drained worker.
pub(crate) const STRIDE: u32 = 64;

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

/// A concurrent map from `K` to the node indexed under it.
pub(crate) type NodeMap<K> = HashMap<K, NodePtr, BuildKeyHasher>;

/// How many retired objects a thread batches before it tries to reclaim them. Every attempt
/// starts with a `membarrier` system call (an interrupt to every core running the process):
/// with seize's default of 32, removes spent about a third of their time there (perf, Dynamo's
/// workload, when every block had an entry).
const RETIRE_BATCH: usize = 1024;

/// The reclamation collector of the indexes.
pub(crate) fn collector() -> seize::Collector {
    seize::Collector::new().batch_size(RETIRE_BATCH)
}

/// An empty map; maps that must share one guard pass the same `shared` collector, others get
/// their own ([`collector`]).
///
/// Blocking resizes: writers finish a resize together, so readers always find a single table
/// (incremental mode can leave a half-copied table that every miss walks through).
pub(crate) fn node_map<K: Hash + Eq + Send + Sync + 'static>(
    shared: Option<Arc<seize::Collector>>,
) -> NodeMap<K> {
    let builder = HashMap::builder()
        .hasher(BuildKeyHasher)
        .resize_mode(ResizeMode::Blocking);
    match shared {
        Some(c) => builder.shared_collector(c).build(),
        None => builder.collector(collector()).build(),
    }
}

/// Indexes `node` under `key`, keeping a node already there (see
/// [`Checkpoints::insert`](super::tree::Checkpoints::insert)).
pub(crate) fn insert<K: Hash + Eq + Send + Sync + 'static>(
    map: &NodeMap<K>,
    key: K,
    node: NodePtr,
    guard: &LocalGuard<'_>,
) {
    // Err: a live prefix with the same canonical hash holds the key; it keeps it.
    let _ = map.try_insert(key, node, guard);
}

/// Drops `key` if it names `node`.
pub(crate) fn remove<K: Hash + Eq + Clone + Send + Sync + 'static>(
    map: &NodeMap<K>,
    key: K,
    node: NodePtr,
    guard: &LocalGuard<'_>,
) {
    // Aborted: the node was never indexed (its key was taken, see `insert`).
    let _: Compute<'_, K, NodePtr, ()> = map.compute(
        key,
        |entry| match entry {
            Some((_, found)) if *found == node => Operation::Remove,
            _ => Operation::Abort(()),
        },
        guard,
    );
}
