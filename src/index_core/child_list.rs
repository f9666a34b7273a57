//! The runs that hang under one block: an unordered list whose every operation costs O(1),
//! however wide the fan-out.
//!
//! Most blocks have no runs under them (their child is the next block of their own run),
//! branch points a few, and a shared system prompt can have hundreds of thousands. A plain list
//! makes removing one of `n` siblings cost O(n) (a scan); past [`FEW`] children the list keeps
//! each child's index too, so a removal is a `swap_remove` plus one fix-up.

use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::hash::Hash;

/// Children up to this many are found by scanning (cheaper than hashing at this size).
const FEW: usize = 16;

/// An unordered list of distinct elements with O(1) push and remove.
#[derive(Debug)]
pub(crate) struct ChildList<T> {
    list: Vec<T>,
    /// Index of each element of `list`, once it is longer than [`FEW`].
    at: Option<HashMap<T, u32, RandomState>>,
}

impl<T> Default for ChildList<T> {
    fn default() -> Self {
        Self {
            list: Vec::new(),
            at: None,
        }
    }
}

impl<T: Copy + Eq + Hash> ChildList<T> {
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        &self.list
    }

    /// Adds `seq`, which the caller knows is not in the list.
    pub(crate) fn push(&mut self, seq: T) {
        let index = self.list.len();
        self.list.push(seq);
        match &mut self.at {
            Some(at) => {
                at.insert(seq, index as u32);
            }
            None if self.list.len() > FEW => {
                let at = self
                    .list
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (*s, i as u32))
                    .collect();
                self.at = Some(at);
            }
            None => {}
        }
    }

    /// Removes `seq`; `false` if it was not there.
    pub(crate) fn remove(&mut self, seq: T) -> bool {
        let index = match &mut self.at {
            Some(at) => match at.remove(&seq) {
                Some(i) => i as usize,
                None => return false,
            },
            None => match self.list.iter().position(|s| *s == seq) {
                Some(i) => i,
                None => return false,
            },
        };
        self.list.swap_remove(index);
        if let (Some(at), Some(moved)) = (&mut self.at, self.list.get(index)) {
            at.insert(*moved, index as u32);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::{ChildList, FEW};
    use crate::types::SeqHash;
    use std::collections::BTreeSet;

    #[test]
    fn behaves_like_a_set_across_the_index_threshold() {
        let mut list = ChildList::default();
        let mut model = BTreeSet::new();
        let mut x = 7u64;
        for step in 0..5_000u64 {
            x = crate::mix::splitmix64(x);
            let seq = SeqHash(x % (4 * FEW as u64));
            match step % 3 {
                0 | 1 if !model.contains(&seq) => {
                    list.push(seq);
                    model.insert(seq);
                }
                0 | 1 => assert!(list.remove(seq) && model.remove(&seq)),
                // The first element: a removal that moves the last one into its place.
                _ => match list.as_slice().first().copied() {
                    Some(s) => assert!(list.remove(s) && model.remove(&s)),
                    None => assert!(model.is_empty()),
                },
            }
            assert!(!list.remove(SeqHash(u64::MAX)));
            let mut seen: Vec<_> = list.as_slice().to_vec();
            seen.sort_unstable();
            assert_eq!(seen, model.iter().copied().collect::<Vec<_>>());
        }
    }
}
