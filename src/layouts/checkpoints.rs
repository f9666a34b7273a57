//! What the checkpoint indexes of the positional and array layouts share: their stride, and a
//! table of the checkpoints by key ([`AnchorIndex`]) with its hasher.

use super::tree::child_table::Keyed;
use super::tree::{Anchor, AnchorTable};
use crate::index_core::Key;
use core::hash::{BuildHasher, Hasher};
use crossbeam_epoch::Guard;

/// Positions between two checkpoints of the positional and array layouts.
///
/// A longer stride means fewer index entries and probes, and a longer walk (at most
/// `STRIDE - 1` blocks compared contiguously) to finish each drained worker. 128 is the longest
/// run the canonical hash folds in one step ([`MAX_FOLD`](crate::index_core::canon::MAX_FOLD)),
/// halved the trace's deep-query tail against 64, and leaves Dynamo's sequence tails (from
/// position 64) without a key to store or remove (paper §6.12).
pub(crate) const STRIDE: u32 = 128;

/// A hasher for keys made of canonical hashes (and positions). Canonical hashes are already
/// keyed per index, but a polynomial's value is not a mixed hash (it is linear in the blocks),
/// and a table takes its slot from a hash's low bits and its tag from the top three
/// (`child_table.rs`): one multiply spreads the bits up. SipHash here would cost more than the
/// probe.
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

/// The checkpoints by key: an [`AnchorTable`] of the nodes' anchors, each keyed by its own key.
pub(crate) struct AnchorIndex {
    table: AnchorTable<Anchor, BuildKeyHasher>,
}

impl Default for AnchorIndex {
    fn default() -> Self {
        Self {
            table: AnchorTable::new(BuildKeyHasher),
        }
    }
}

impl AnchorIndex {
    /// The anchor under `key`.
    #[inline]
    pub(crate) fn get(&self, key: Key, guard: &Guard) -> Option<*const Anchor> {
        // SAFETY: the tree removes a node's anchors from its index before it retires the node,
        // in whose allocation they are (`tree/mod.rs`).
        unsafe { self.table.get(key, guard) }
    }

    /// Indexed keys.
    pub(crate) fn len(&self) -> usize {
        self.table.len(&crossbeam_epoch::pin())
    }

    /// Indexes `anchor` under its key, keeping an anchor already there (see
    /// [`Checkpoints::insert`](super::tree::Checkpoints::insert)).
    pub(crate) fn insert(&self, anchor: &Anchor, guard: &Guard) {
        // SAFETY: the tree indexes the anchors of a node it has just linked, and removes them
        // before it retires the node (`tree/mod.rs`).
        unsafe { self.table.insert(anchor, guard) };
    }

    /// Drops `anchor`'s key if it names `anchor`.
    pub(crate) fn remove(&self, anchor: &Anchor, guard: &Guard) {
        self.table.remove(anchor.key(), anchor, guard);
    }
}
