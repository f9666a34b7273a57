//! The set of workers stored in one layout entry, and the set operations the searches need.
// The tree keeps covers (`cover.rs`), which share only the slot type, the width and the bit
// walk with these sets.
#![cfg_attr(
    not(any(feature = "positional", feature = "array")),
    allow(dead_code, unreachable_pub)
)]

use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use crate::sync::{Mutex, MutexGuard, lock};

/// A worker's dense index (see `worker_table.rs`).
pub(crate) type Slot = u32;

/// Past this many workers an entry's set becomes a [`WideSet`], changed in place: copying a
/// sorted list on every change makes N workers storing one shared prefix cost O(N) per block.
pub(crate) const WIDE: usize = 64;

/// A wide set goes back to a sorted list when it shrinks to this many (half of [`WIDE`], so
/// that a set hovering at the threshold does not flip on every change).
const NARROW: usize = WIDE / 2;

/// The workers holding one entry.
///
/// Almost every entry of a real fleet has one worker (a sequence's private suffix), so that
/// case is stored inline; up to [`WIDE`] workers are a sorted list that a writer replaces as a
/// whole (copy on write), so readers never see it half-updated and need no lock. Wider sets (a
/// system prompt shared by thousands of workers) are bitsets over slots that writers change in
/// place, one bit at a time, under the set's own lock; readers test bits without a lock.
///
/// A reader of a wide set may see some writers' bits and not others', but each bit it reads
/// is the worker's presence at that instant, which is all the searches need: every depth they
/// report is one position past a position where the worker was observed present.
#[derive(Debug)]
pub enum WorkerSet {
    /// Exactly one worker.
    One(Slot),
    /// 2 to [`WIDE`] workers, sorted ascending.
    Many(Box<[Slot]>),
    /// More than [`WIDE`] workers (until it shrinks to [`NARROW`]).
    Wide(Box<WideSet>),
}

impl WorkerSet {
    /// Whether `slot` is in the set.
    #[inline]
    pub fn contains(&self, slot: Slot) -> bool {
        match self {
            WorkerSet::One(s) => *s == slot,
            WorkerSet::Many(slots) => slots.binary_search(&slot).is_ok(),
            WorkerSet::Wide(wide) => wide.contains(slot),
        }
    }

    /// The slots, sorted ascending.
    pub fn to_vec(&self) -> Vec<Slot> {
        match self {
            WorkerSet::One(slot) => vec![*slot],
            WorkerSet::Many(slots) => slots.to_vec(),
            WorkerSet::Wide(wide) => wide.to_vec(),
        }
    }

    /// Whether the set is exactly `slots` (sorted): a shortcut for the search's common case,
    /// where nobody left. `false` is always safe (the caller then partitions).
    #[inline]
    pub fn is_exactly(&self, slots: &[Slot]) -> bool {
        match self {
            WorkerSet::One(slot) => slots == [*slot],
            WorkerSet::Many(set) => **set == *slots,
            WorkerSet::Wide(_) => false,
        }
    }

    /// Moves the slots of `slots` (sorted) that are in the set to the front, keeping both parts
    /// sorted; returns how many are present.
    #[inline]
    pub fn partition(&self, slots: &mut [Slot], scratch: &mut Vec<Slot>) -> usize {
        match self {
            WorkerSet::One(slot) => partition_sorted(slots, core::slice::from_ref(slot), scratch),
            WorkerSet::Many(set) => partition_sorted(slots, set, scratch),
            WorkerSet::Wide(wide) => partition_by(slots, scratch, |slot| wide.contains(slot)),
        }
    }

    /// The set with `slot` added, or `None` when it is already there. Not for wide sets,
    /// which change in place ([`WideSet::write`]).
    pub fn with(&self, slot: Slot) -> Option<WorkerSet> {
        let slots: &[Slot] = match self {
            WorkerSet::One(s) => core::slice::from_ref(s),
            WorkerSet::Many(slots) => slots,
            WorkerSet::Wide(_) => unreachable!("wide sets change in place"),
        };
        let at = slots.binary_search(&slot).err()?;
        let mut out = Vec::with_capacity(slots.len() + 1);
        out.extend_from_slice(&slots[..at]);
        out.push(slot);
        out.extend_from_slice(&slots[at..]);
        Some(if out.len() > WIDE {
            WorkerSet::Wide(Box::new(WideSet::from_sorted(&out)))
        } else {
            WorkerSet::Many(out.into_boxed_slice())
        })
    }

    /// What remains after removing `slot`: `Err(())` when `slot` is absent, `Ok(None)` when
    /// the set becomes empty. Not for wide sets.
    #[allow(clippy::result_unit_err)]
    pub fn without(&self, slot: Slot) -> Result<Option<WorkerSet>, ()> {
        let slots: &[Slot] = match self {
            WorkerSet::One(s) => core::slice::from_ref(s),
            WorkerSet::Many(slots) => slots,
            WorkerSet::Wide(_) => unreachable!("wide sets change in place"),
        };
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

    /// The wide set, if this is one.
    #[inline]
    pub fn wide(&self) -> Option<&WideSet> {
        match self {
            WorkerSet::Wide(wide) => Some(wide),
            _ => None,
        }
    }
}

/// A set of more than [`WIDE`] workers: one bit per slot, changed in place.
///
/// Writers take the set's lock. A change the set cannot make in place (a slot beyond its
/// bits, or shrinking to [`NARROW`]) is returned as a replacement set, which the writer
/// publishes in the entry before it [retires](WideWriter::retire) this one: writers that
/// find a retired set look the entry up again.
pub struct WideSet {
    /// Serialises writers; `true` once the set was replaced in its entry.
    retired: Mutex<bool>,
    len: AtomicU32,
    words: Box<[AtomicU64]>,
}

impl core::fmt::Debug for WideSet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WideSet")
            .field("len", &self.len.load(Ordering::Relaxed))
            .field("bits", &(self.words.len() * 64))
            .finish()
    }
}

impl WideSet {
    /// A set of `slots` (sorted, not empty), with room for slots up to twice the largest.
    fn from_sorted(slots: &[Slot]) -> Self {
        let last = *slots.last().expect("wide sets are not empty") as usize;
        let words = (last / 64 + 1).next_power_of_two() * 2;
        let set = Self {
            retired: Mutex::new(false),
            len: AtomicU32::new(slots.len() as u32),
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
        };
        for &slot in slots {
            set.words[slot as usize / 64].fetch_or(1 << (slot % 64), Ordering::Relaxed);
        }
        set
    }

    /// Whether `slot` is in the set (its bit, read now).
    #[inline]
    pub fn contains(&self, slot: Slot) -> bool {
        // Acquire pairs with the writer's release, after which the slot's name is readable.
        self.words
            .get(slot as usize / 64)
            .is_some_and(|w| w.load(Ordering::Acquire) & (1 << (slot % 64)) != 0)
    }

    /// The slots, sorted ascending.
    pub fn to_vec(&self) -> Vec<Slot> {
        slots_of_bits(&self.words, self.len.load(Ordering::Relaxed) as usize)
    }

    /// Locks the set for a change; `None` when it was retired (look the entry up again).
    pub fn write(&self) -> Option<WideWriter<'_>> {
        let retired = lock(&self.retired);
        (!*retired).then_some(WideWriter { set: self, retired })
    }
}

/// The slots whose bits are set in `words` (about `len` of them), sorted ascending.
pub(crate) fn slots_of_bits(words: &[AtomicU64], len: usize) -> Vec<Slot> {
    let mut out = Vec::with_capacity(len);
    for (i, word) in words.iter().enumerate() {
        // Acquire pairs with the writer's release, after which the slot's name is readable.
        let mut bits = word.load(Ordering::Acquire);
        while bits != 0 {
            out.push(i as Slot * 64 + bits.trailing_zeros());
            bits &= bits - 1;
        }
    }
    out
}

/// A writer's hold on a [`WideSet`].
pub struct WideWriter<'a> {
    set: &'a WideSet,
    retired: MutexGuard<'a, bool>,
}

impl core::fmt::Debug for WideWriter<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("WideWriter").field("set", self.set).finish()
    }
}

impl WideWriter<'_> {
    /// Adds `slot`: `Ok(true)` added in place, `Ok(false)` already there, `Err(wider)` when the
    /// slot is beyond the set's bits: publish `wider` (which has it) and retire this set.
    pub fn insert(&mut self, slot: Slot) -> Result<bool, WorkerSet> {
        let Some(word) = self.set.words.get(slot as usize / 64) else {
            let mut slots = self.set.to_vec();
            slots.push(slot);
            return Err(WorkerSet::Wide(Box::new(WideSet::from_sorted(&slots))));
        };
        let bit = 1 << (slot % 64);
        // Release: a reader that sees the bit also sees the slot's name (see `Names::set`).
        let before = word.fetch_or(bit, Ordering::Release);
        if before & bit != 0 {
            return Ok(false);
        }
        self.set.len.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Removes `slot`: `Ok(true)` removed in place, `Ok(false)` not there, `Err(narrow)` when
    /// the set would shrink to [`NARROW`]: publish `narrow` (which lacks it) and retire this set.
    pub fn remove(&mut self, slot: Slot) -> Result<bool, WorkerSet> {
        if !self.set.contains(slot) {
            return Ok(false);
        }
        if self.set.len.load(Ordering::Relaxed) as usize <= NARROW + 1 {
            let mut slots = self.set.to_vec();
            slots.retain(|s| *s != slot);
            return Err(WorkerSet::Many(slots.into_boxed_slice()));
        }
        let bit = 1 << (slot % 64);
        self.set.words[slot as usize / 64].fetch_and(!bit, Ordering::Release);
        self.set.len.fetch_sub(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Marks the set replaced: writers waiting for it look the entry up again.
    pub fn retire(mut self) {
        *self.retired = true;
    }
}

/// Moves the slots of `slots` (sorted) for which `present` holds to the front, keeping both
/// parts sorted; returns how many are present.
fn partition_by(
    slots: &mut [Slot],
    scratch: &mut Vec<Slot>,
    mut present: impl FnMut(Slot) -> bool,
) -> usize {
    scratch.clear();
    let mut write = 0;
    for read in 0..slots.len() {
        let slot = slots[read];
        if present(slot) {
            slots[write] = slot;
            write += 1;
        } else {
            scratch.push(slot);
        }
    }
    slots[write..].copy_from_slice(scratch);
    write
}

/// Moves the slots of `slots` (sorted) that are in `set` (sorted) to the front, keeping both
/// parts sorted; returns how many are present. One merge walk: O(|slots| + |set|).
fn partition_sorted(slots: &mut [Slot], set: &[Slot], scratch: &mut Vec<Slot>) -> usize {
    if is_subset(slots, set) {
        return slots.len();
    }
    // `slots` is sorted, so one pointer walks `set` forward: a merge, O(|slots| + |set|).
    let mut j = 0;
    partition_by(slots, scratch, |slot| {
        while j < set.len() && set[j] < slot {
            j += 1;
        }
        j < set.len() && set[j] == slot
    })
}

/// Length of the common prefix of two slices, comparing 16 slots at a time (`memcmp`).
fn common_prefix(a: &[Slot], b: &[Slot]) -> usize {
    const CHUNK: usize = 16;
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + CHUNK <= n && a[i..i + CHUNK] == b[i..i + CHUNK] {
        i += CHUNK;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// Whether sorted `small` is a subset of sorted `big`. Fast when `big` has few extra slots (the
/// usual case: the workers that drained plus the few that go on): equal runs are compared
/// with `memcmp`, and each extra slot costs one binary search.
fn is_subset(mut small: &[Slot], mut big: &[Slot]) -> bool {
    loop {
        if small.len() > big.len() {
            return false;
        }
        let common = common_prefix(small, big);
        small = &small[common..];
        big = &big[common..];
        let Some(&next) = small.first() else {
            return true;
        };
        if big[0] > next {
            return false;
        }
        big = &big[big.partition_point(|&s| s < next)..];
    }
}

#[cfg(test)]
mod tests {
    use super::{WIDE, WorkerSet, is_subset, partition_sorted};

    #[test]
    fn grows_sorted_and_shrinks_back_to_one() {
        let set = WorkerSet::One(5);
        let set = set.with(2).unwrap().with(9).unwrap();
        assert_eq!(set.to_vec(), [2, 5, 9]);
        assert!(set.with(5).is_none());
        let set = set.without(5).unwrap().unwrap();
        assert_eq!(set.to_vec(), [2, 9]);
        let set = set.without(2).unwrap().unwrap();
        assert!(matches!(set, WorkerSet::One(9)));
        assert!(set.without(9).unwrap().is_none());
        assert!(set.without(1).is_err());
    }

    /// Applies `slot`'s insertion or removal the way the layouts do: in place for wide sets,
    /// by replacement otherwise.
    fn change(set: Option<WorkerSet>, slot: u32, add: bool) -> (Option<WorkerSet>, bool) {
        let Some(set) = set else {
            return (add.then_some(WorkerSet::One(slot)), add);
        };
        if let Some(wide) = set.wide() {
            let mut writer = wide.write().expect("not retired");
            let result = if add {
                writer.insert(slot)
            } else {
                writer.remove(slot)
            };
            let replacement = match result {
                Ok(changed) => {
                    drop(writer);
                    return (Some(set), changed);
                }
                Err(replacement) => replacement,
            };
            writer.retire();
            assert!(wide.write().is_none(), "a retired set takes no writer");
            return (Some(replacement), true);
        }
        if add {
            match set.with(slot) {
                Some(grown) => (Some(grown), true),
                None => (Some(set), false),
            }
        } else {
            match set.without(slot) {
                Ok(rest) => (rest, true),
                Err(()) => (Some(set), false),
            }
        }
    }

    #[test]
    fn wide_sets_agree_with_a_model_through_every_transition() {
        let mut set = None;
        let mut model = std::collections::BTreeSet::new();
        let mut x = 3u64;
        let (mut wide_seen, mut was_wide, mut narrowed) = (false, false, false);
        for step in 0..20_000u64 {
            x = crate::mix::splitmix64(x);
            // Grow for a while, then shrink, so the set crosses WIDE and NARROW both ways, with
            // slots that outgrow the bits of the set they land in.
            let growing = (step / 2_000) % 2 == 0;
            let add = if growing { x % 4 != 0 } else { x % 32 == 0 };
            let slot = (x >> 8) as u32 % (WIDE as u32 * (1 + (step / 4_000) as u32) * 8);
            let (next, changed) = change(set, slot, add);
            let expected = if add {
                model.insert(slot)
            } else {
                model.remove(&slot)
            };
            assert_eq!(changed, expected, "step {step}");
            set = next;
            let slots: Vec<u32> = model.iter().copied().collect();
            match &set {
                None => {
                    assert!(slots.is_empty());
                    was_wide = false;
                }
                Some(s) => {
                    assert_eq!(s.to_vec(), slots, "step {step}");
                    assert!(slots.iter().all(|slot| s.contains(*slot)));
                    let is_wide = s.wide().is_some();
                    narrowed |= was_wide && !is_wide;
                    wide_seen |= is_wide;
                    was_wide = is_wide;
                    let mut probe: Vec<u32> = (0..40).map(|i| i * 7).collect();
                    let mut scratch = Vec::new();
                    let present = s.partition(&mut probe, &mut scratch);
                    let (inside, outside) = probe.split_at(present);
                    assert!(inside.is_sorted() && outside.is_sorted());
                    assert!(inside.iter().all(|p| model.contains(p)));
                    assert!(outside.iter().all(|p| !model.contains(p)));
                }
            }
        }
        assert!(
            wide_seen && narrowed,
            "the walk never crossed both thresholds: {wide_seen} {narrowed}"
        );
    }

    #[test]
    fn subset_of_sorted_slices() {
        let big: Vec<u32> = (0..100).filter(|s| s % 7 != 3).collect();
        assert!(is_subset(&big, &big));
        assert!(is_subset(&[], &big));
        assert!(is_subset(&big[5..60], &big));
        let sparse: Vec<u32> = big.iter().copied().filter(|s| s % 2 == 0).collect();
        assert!(is_subset(&sparse, &big));
        assert!(!is_subset(&[3], &big));
        assert!(!is_subset(&[0, 1, 2, 3], &big));
        assert!(!is_subset(&[99, 100], &big));
        assert!(!is_subset(&big, &big[1..]));
    }

    #[test]
    fn partition_keeps_both_parts_sorted() {
        let mut slots = vec![1, 3, 4, 7, 9, 12];
        let mut scratch = Vec::new();
        assert_eq!(
            partition_sorted(&mut slots, &[0, 3, 5, 9, 12, 40], &mut scratch),
            3
        );
        assert_eq!(slots, [3, 9, 12, 1, 4, 7]);
        assert_eq!(
            partition_sorted(&mut slots[..3], &[3, 9, 12], &mut scratch),
            3
        );
        assert_eq!(partition_sorted(&mut slots[3..], &[2], &mut scratch), 0);
        assert_eq!(slots[3..], [1, 4, 7]);
    }
}
