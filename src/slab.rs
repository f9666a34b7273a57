//! Slots of values with a free list, named by `u32` index: the node store of the approximate
//! mode's tries and of the hybrid index's tables, where following a link is an index, not a
//! hash lookup, and a freed node's slot goes to the next one.

/// The fewest slots a slab grows by.
const MIN_GROWTH: usize = 16;

/// Slots of values; a freed slot is reused by the next [`insert`](Slab::insert).
///
/// A freed slot keeps its value until it is reused: the caller marks it dead (an empty node)
/// if anything may still read it.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    items: Vec<T>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    /// Stores `item` in a free slot, or a new one, and returns the slot.
    pub(crate) fn insert(&mut self, item: T) -> u32 {
        match self.free.pop() {
            Some(at) => {
                self.items[at as usize] = item;
                at
            }
            None => {
                if self.items.len() == self.items.capacity() {
                    // A quarter more, not twice: a slab that just passes a power of two (a
                    // worker's capacity, say) keeps less than a quarter of its room idle (paper
                    // §6.21).
                    let more = (self.items.len() / 4).max(MIN_GROWTH);
                    self.items.reserve_exact(more);
                }
                self.items.push(item);
                u32::try_from(self.items.len() - 1).expect("fewer than 2^32 slots")
            }
        }
    }

    /// Frees `at` for the next insert.
    pub(crate) fn free(&mut self, at: u32) {
        debug_assert!((at as usize) < self.items.len());
        self.free.push(at);
    }

    /// The slots in use.
    #[cfg_attr(not(feature = "approximate"), allow(dead_code))]
    pub(crate) fn live(&self) -> usize {
        self.items.len() - self.free.len()
    }

    /// Every slot with its value, freed ones too.
    #[cfg_attr(not(feature = "approximate"), allow(dead_code))]
    pub(crate) fn slots(&self) -> impl Iterator<Item = (u32, &T)> {
        (0u32..).zip(&self.items)
    }

    /// Gives back the room of every slot after the first `keep` once they are all free (the
    /// first `keep` are never freed: a trie's root).
    #[cfg_attr(not(feature = "approximate"), allow(dead_code))]
    pub(crate) fn shrink_to_first(&mut self, keep: usize) {
        if self.live() == keep && self.items.len() > keep {
            self.items.truncate(keep);
            self.items.shrink_to_fit();
            self.free = Vec::new();
        }
    }
}

impl<T> core::ops::Index<u32> for Slab<T> {
    type Output = T;
    fn index(&self, at: u32) -> &T {
        &self.items[at as usize]
    }
}

impl<T> core::ops::IndexMut<u32> for Slab<T> {
    fn index_mut(&mut self, at: u32) -> &mut T {
        &mut self.items[at as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::Slab;

    #[test]
    fn a_freed_slot_goes_to_the_next_insert() {
        let mut slab = Slab::default();
        let (a, b) = (slab.insert("a"), slab.insert("b"));
        assert_eq!((a, b, slab.live()), (0, 1, 2));
        slab.free(a);
        assert_eq!(slab.live(), 1);
        assert_eq!(slab.insert("c"), a);
        assert_eq!((slab[a], slab[b]), ("c", "b"));
        slab[b] = "d";
        let all: Vec<_> = slab.slots().map(|(at, v)| (at, *v)).collect();
        assert_eq!(all, [(0, "c"), (1, "d")]);
    }

    #[test]
    fn a_full_slab_grows_by_a_quarter() {
        let mut slab = Slab::default();
        for i in 0..10_000u32 {
            slab.insert(i);
            let (len, room) = (slab.items.len(), slab.items.capacity());
            assert!(
                room <= len + (len / 4).max(super::MIN_GROWTH),
                "{room} for {len}"
            );
        }
    }

    #[test]
    fn room_goes_back_once_all_but_the_first_are_free() {
        let mut slab = Slab::default();
        let slots: Vec<u32> = (0..100).map(|i| slab.insert(i)).collect();
        for &at in &slots[2..] {
            slab.free(at);
        }
        slab.shrink_to_first(1);
        assert_eq!(slab.slots().count(), 100, "slot 1 is still in use");
        slab.free(slots[1]);
        slab.shrink_to_first(1);
        assert_eq!((slab.slots().count(), slab.live()), (1, 1));
        assert_eq!(slab.insert(7), 1);
    }
}
