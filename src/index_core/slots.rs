//! Worker slots: a worker's dense index (interned in `worker_table.rs`), and the bit walk that
//! lists the members of a set of slots kept as bits ([`Cover`](super::cover::Cover)'s wide
//! form).

use super::slot_set::slots_of;
use crate::sync::atomic::{AtomicU64, Ordering};

/// A worker's dense index (see `worker_table.rs`).
pub(crate) type Slot = u32;

/// Past this many workers a node's cover becomes a bitset with a cutoff per slot, changed in
/// place: copying a sorted list on every change makes N workers storing one shared prefix cost
/// O(N) per store.
pub(crate) const WIDE: usize = 64;

/// The slots whose bits are set in `words` (about `len` of them), sorted ascending.
pub(crate) fn slots_of_bits(words: &[AtomicU64], len: usize) -> Vec<Slot> {
    let mut out = Vec::with_capacity(len);
    for (i, word) in words.iter().enumerate() {
        // Acquire pairs with the writer's release, after which the slot's name is readable.
        out.extend(slots_of(i as u32, word.load(Ordering::Acquire)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_list_their_slots_in_order() {
        let words: Vec<AtomicU64> = [0b1010u64, 0, 1 << 63]
            .into_iter()
            .map(AtomicU64::new)
            .collect();
        assert_eq!(slots_of_bits(&words, 3), [1, 3, 191]);
    }
}
