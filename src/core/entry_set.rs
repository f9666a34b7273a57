//! The immutable set of workers stored in one layout entry.
#![cfg_attr(
    not(any(feature = "positional", feature = "array", feature = "radix")),
    allow(dead_code, unreachable_pub)
)]

/// A worker's dense index (see `worker_table.rs`).
pub(crate) type Slot = u32;

/// The workers holding one (position, canonical hash) entry: a sorted, duplicate-free list of
/// slots. Entries are immutable; a writer replaces the whole set atomically (copy on write),
/// so readers never see a half-updated set and need no lock.
///
/// Almost every entry of a real fleet has one worker (a sequence's private suffix), so that
/// case is stored inline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerSet {
    /// Exactly one worker.
    One(Slot),
    /// Two or more workers, sorted ascending.
    Many(Box<[Slot]>),
}

impl WorkerSet {
    /// The slots, sorted ascending.
    #[inline]
    pub fn as_slice(&self) -> &[Slot] {
        match self {
            WorkerSet::One(slot) => core::slice::from_ref(slot),
            WorkerSet::Many(slots) => slots,
        }
    }

    /// Number of workers.
    #[inline]
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Whether `slot` is in the set.
    #[inline]
    pub fn contains(&self, slot: Slot) -> bool {
        match self {
            WorkerSet::One(s) => *s == slot,
            WorkerSet::Many(slots) => slots.binary_search(&slot).is_ok(),
        }
    }

    /// The set with `slot` added, or `None` when it is already there.
    pub fn with(&self, slot: Slot) -> Option<WorkerSet> {
        let slots = self.as_slice();
        let at = slots.binary_search(&slot).err()?;
        let mut out = Vec::with_capacity(slots.len() + 1);
        out.extend_from_slice(&slots[..at]);
        out.push(slot);
        out.extend_from_slice(&slots[at..]);
        Some(WorkerSet::Many(out.into_boxed_slice()))
    }

    /// What remains after removing `slot`: `Err(())` when `slot` is absent, `Ok(None)` when
    /// the set becomes empty.
    #[allow(clippy::result_unit_err)]
    pub fn without(&self, slot: Slot) -> Result<Option<WorkerSet>, ()> {
        let slots = self.as_slice();
        let at = slots.binary_search(&slot).map_err(|_| ())?;
        Ok(match slots.len() {
            1 => None,
            2 => Some(WorkerSet::One(slots[1 - at])),
            _ => {
                let mut out = slots.to_vec();
                out.remove(at);
                Some(WorkerSet::Many(out.into_boxed_slice()))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::WorkerSet;

    #[test]
    fn grows_sorted_and_shrinks_back_to_one() {
        let set = WorkerSet::One(5);
        let set = set.with(2).unwrap().with(9).unwrap();
        assert_eq!(set.as_slice(), &[2, 5, 9]);
        assert!(set.with(5).is_none());
        let set = set.without(5).unwrap().unwrap();
        assert_eq!(set.as_slice(), &[2, 9]);
        let set = set.without(2).unwrap().unwrap();
        assert_eq!(set, WorkerSet::One(9));
        assert_eq!(set.without(9), Ok(None));
        assert_eq!(set.without(1), Err(()));
    }
}
