//! Block lists kept for reuse: a decision under a capacity usually evicts about as many blocks as
//! it adds, so the lists its evictions free are the ones its new nodes need. Kept here, they
//! skip the allocator (lists of a few hundred blocks are past glibc's per-thread caches).

use crate::types::LocalHash;

/// Lists kept at most.
const KEPT: usize = 8;

/// Freed block lists, reused by the next copies that fit them (see [the module](self)).
#[derive(Debug, Default)]
pub(super) struct Spares {
    lists: Vec<Vec<LocalHash>>,
}

impl Spares {
    /// `from` in a list of its own: a kept one whose capacity fits it (at most a quarter more
    /// than its length, so that nodes hold little more room than blocks), else a new one.
    pub(super) fn copy(&mut self, from: &[LocalHash]) -> Vec<LocalHash> {
        let fits = |list: &Vec<LocalHash>| {
            let room = list.capacity();
            room >= from.len() && room <= from.len() + from.len() / 4 + 8
        };
        match self.lists.iter().position(fits) {
            Some(at) => {
                let mut list = self.lists.swap_remove(at);
                list.extend_from_slice(from);
                list
            }
            None => from.to_vec(),
        }
    }

    /// Keeps `list` for a later copy, if there is room.
    pub(super) fn give(&mut self, mut list: Vec<LocalHash>) {
        if list.capacity() > 0 && self.lists.len() < KEPT {
            list.clear();
            self.lists.push(list);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locals(n: u64) -> Vec<LocalHash> {
        (0..n).map(LocalHash).collect()
    }

    #[test]
    fn a_given_list_is_reused_by_a_copy_it_fits() {
        let mut spares = Spares::default();
        let list = locals(100);
        let at = list.as_ptr();
        spares.give(list);
        let small = spares.copy(&locals(3));
        assert_ne!(small.as_ptr(), at, "100 blocks of room for 3 is too much");
        let copy = spares.copy(&locals(90));
        assert_eq!((copy.as_ptr(), copy.as_slice()), (at, &locals(90)[..]));
        assert!(spares.lists.is_empty());
    }

    #[test]
    fn keeps_a_bounded_number_of_lists() {
        let mut spares = Spares::default();
        for _ in 0..3 * KEPT {
            spares.give(locals(10));
        }
        spares.give(Vec::new());
        assert_eq!(spares.lists.len(), KEPT);
        assert!(spares.lists.iter().all(Vec::is_empty));
    }
}
