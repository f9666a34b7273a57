//! The sorted set of workers that hold a [`Fleet`](super::fleet) node.
//!
//! Most nodes have one holder (a decision's new blocks), kept inline; a handful are kept in a
//! sorted `Vec` (one allocation, merged by a query at memory speed). A node that every worker of a large fleet holds (one system
//! prompt routed to 100,000 workers) would make each worker's removal move the whole `Vec`, so
//! past [`MANY`] holders the set becomes a `BTreeSet`, and back below [`FEW`].

use crate::types::Worker;
use std::collections::BTreeSet;
use std::collections::btree_set;

/// Holders past which the set becomes a tree.
const MANY: usize = 64;
/// Holders below which a tree becomes a `Vec` again (below [`MANY`], so that a node at the
/// threshold does not switch back and forth).
const FEW: usize = 32;

#[derive(Clone, Debug)]
pub(super) enum Holders {
    One(Worker),
    Few(Vec<Worker>),
    Many(BTreeSet<Worker>),
}

impl Default for Holders {
    fn default() -> Self {
        Holders::Few(Vec::new())
    }
}

impl Holders {
    /// A set of one worker.
    pub(super) fn one(worker: Worker) -> Self {
        Holders::One(worker)
    }

    pub(super) fn is_empty(&self) -> bool {
        match self {
            Holders::One(_) => false,
            Holders::Few(v) => v.is_empty(),
            Holders::Many(s) => s.is_empty(),
        }
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Holders::One(_) => 1,
            Holders::Few(v) => v.len(),
            Holders::Many(s) => s.len(),
        }
    }

    /// Adds `worker`; returns whether it was new.
    pub(super) fn insert(&mut self, worker: Worker) -> bool {
        match self {
            Holders::One(one) => {
                let one = *one;
                if one == worker {
                    return false;
                }
                *self = Holders::Few(vec![one.min(worker), one.max(worker)]);
                true
            }
            Holders::Few(v) if v.is_empty() => {
                *self = Holders::One(worker);
                true
            }
            Holders::Few(v) => {
                let Err(slot) = v.binary_search(&worker) else {
                    return false;
                };
                v.insert(slot, worker);
                if v.len() > MANY {
                    *self = Holders::Many(v.drain(..).collect());
                }
                true
            }
            Holders::Many(s) => s.insert(worker),
        }
    }

    /// Removes `worker`; returns whether it was there.
    pub(super) fn remove(&mut self, worker: Worker) -> bool {
        match self {
            Holders::One(one) => {
                if *one != worker {
                    return false;
                }
                *self = Holders::default();
                true
            }
            Holders::Few(v) => {
                let Ok(slot) = v.binary_search(&worker) else {
                    return false;
                };
                v.remove(slot);
                if let [last] = v[..] {
                    *self = Holders::One(last);
                }
                true
            }
            Holders::Many(s) => {
                let was = s.remove(&worker);
                if s.len() < FEW {
                    *self = Holders::Few(core::mem::take(s).into_iter().collect());
                }
                was
            }
        }
    }

    /// Whether `worker` is one.
    pub(super) fn contains(&self, worker: Worker) -> bool {
        match self {
            Holders::One(one) => *one == worker,
            Holders::Few(v) => v.binary_search(&worker).is_ok(),
            Holders::Many(s) => s.contains(&worker),
        }
    }

    /// The holders, in order.
    pub(super) fn iter(&self) -> Iter<'_> {
        match self {
            Holders::One(one) => Iter::One(Some(*one)),
            Holders::Few(v) => Iter::Few(v.iter()),
            Holders::Many(s) => Iter::Many(s.iter()),
        }
    }
}

impl PartialEq for Holders {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

/// [`Holders::iter`].
pub(super) enum Iter<'a> {
    One(Option<Worker>),
    Few(core::slice::Iter<'a, Worker>),
    Many(btree_set::Iter<'a, Worker>),
}

impl Iterator for Iter<'_> {
    type Item = Worker;

    fn next(&mut self) -> Option<Worker> {
        match self {
            Iter::One(one) => one.take(),
            Iter::Few(it) => it.next().copied(),
            Iter::Many(it) => it.next().copied(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Iter::One(one) => (usize::from(one.is_some()), Some(usize::from(one.is_some()))),
            Iter::Few(it) => it.size_hint(),
            Iter::Many(it) => it.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(id: u64) -> Worker {
        Worker::new(id, 0)
    }

    #[test]
    fn one_holder_is_inline_and_two_are_a_vec() {
        let mut holders = Holders::default();
        assert!(holders.is_empty() && !holders.remove(w(3)));
        assert!(holders.insert(w(3)));
        assert!(matches!(holders, Holders::One(_)) && !holders.insert(w(3)));
        assert!(holders.insert(w(1)));
        assert!(matches!(holders, Holders::Few(_)));
        assert!(holders.contains(w(1)) && holders.contains(w(3)) && !holders.contains(w(2)));
        assert_eq!(holders.iter().map(|w| w.id).collect::<Vec<_>>(), [1, 3]);
        assert!(holders.remove(w(1)));
        assert!(matches!(holders, Holders::One(one) if one == w(3)));
        assert!(!holders.remove(w(1)) && holders.remove(w(3)));
        assert!(holders.is_empty() && holders.iter().next().is_none());
        assert_eq!(holders, Holders::default());
    }

    #[test]
    fn stays_sorted_across_every_form() {
        let mut holders = Holders::default();
        for id in (0..200).rev() {
            assert!(holders.insert(w(id)));
        }
        assert!(!holders.insert(w(5)));
        assert!(matches!(holders, Holders::Many(_)));
        assert!(holders.contains(w(199)) && !holders.contains(w(200)));
        let ids: Vec<u64> = holders.iter().map(|w| w.id).collect();
        assert_eq!(ids, (0..200).collect::<Vec<_>>());
        for id in (0..200).filter(|id| id % 10 != 0) {
            assert!(holders.remove(w(id)));
        }
        assert!(!holders.remove(w(1)));
        assert!(matches!(holders, Holders::Few(_)));
        let ids: Vec<u64> = holders.iter().map(|w| w.id).collect();
        assert_eq!(ids, (0..200).step_by(10).collect::<Vec<_>>());
        assert_eq!(holders, {
            let mut other = Holders::default();
            (0..200).step_by(10).for_each(|id| _ = other.insert(w(id)));
            other
        });
    }
}
