//! The workers a search still follows: a set of slots kept as words of bits, so that narrowing
//! it at a node costs a word operation per 64 slots, not a step per worker.
//!
//! Slots are dense (interned in `worker_table.rs`), so the workers under one prefix fill few
//! words. Only the words that have a member are kept, sorted: a set of a few workers with far
//! apart slots stays a few words, however large the slots.

use super::slots::Slot;

/// One word of a set: the members among slots `64 * word .. 64 * word + 64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Word {
    pub(crate) word: u32,
    pub(crate) bits: u64,
}

impl Word {
    /// The word of `slot`, and its bit there.
    #[inline]
    pub(crate) fn of(slot: Slot) -> (u32, u64) {
        (slot / 64, 1 << (slot % 64))
    }
}

/// A set of slots: its nonempty words, sorted by word.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlotSet {
    words: Vec<Word>,
}

impl SlotSet {
    /// The set of `slots`, sorted ascending.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn from_sorted(slots: impl IntoIterator<Item = Slot>) -> Self {
        let mut set = Self::default();
        for slot in slots {
            let (word, bit) = Word::of(slot);
            set.push_bits(word, bit);
        }
        set
    }

    /// The set of the words `words` (sorted by word; empty ones are left out).
    pub(crate) fn from_words(words: impl IntoIterator<Item = Word>) -> Self {
        Self {
            words: words.into_iter().filter(|w| w.bits != 0).collect(),
        }
    }

    /// The set of `slot` alone.
    pub(crate) fn one(slot: Slot) -> Self {
        let (word, bits) = Word::of(slot);
        Self {
            words: vec![Word { word, bits }],
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// How many slots: a population count per word.
    pub(crate) fn len(&self) -> usize {
        self.words
            .iter()
            .map(|w| w.bits.count_ones() as usize)
            .sum()
    }

    /// The words, sorted by word, none empty.
    pub(crate) fn words(&self) -> &[Word] {
        &self.words
    }

    /// Keeps of each word the bits `kept(word)` returns (a subset of its bits), dropping the
    /// words left empty.
    #[inline]
    pub(crate) fn retain_bits(&mut self, mut kept: impl FnMut(Word) -> u64) {
        self.words.retain_mut(|w| {
            w.bits = kept(*w);
            w.bits != 0
        });
    }

    /// Splits off the slots whose bits `present(word)` leaves out: `self` keeps the others,
    /// the returned set has these.
    pub(crate) fn split_off(&mut self, mut present: impl FnMut(Word) -> u64) -> SlotSet {
        let mut absent = SlotSet::default();
        self.retain_bits(|w| {
            let stays = present(w) & w.bits;
            let leaves = w.bits & !stays;
            if leaves != 0 {
                absent.words.push(Word {
                    word: w.word,
                    bits: leaves,
                });
            }
            stays
        });
        absent
    }

    /// Adds the slots `bits` of word `word`, which is no lower than any word of the set.
    #[inline]
    pub(crate) fn push_bits(&mut self, word: u32, bits: u64) {
        if bits == 0 {
            return;
        }
        match self.words.last_mut() {
            Some(last) if last.word == word => last.bits |= bits,
            last => {
                debug_assert!(last.is_none_or(|l| l.word < word), "words pushed in order");
                self.words.push(Word { word, bits });
            }
        }
    }

    /// Every slot, ascending.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = Slot> + '_ {
        self.words.iter().flat_map(|w| slots_of(w.word, w.bits))
    }

    /// Makes `self` a copy of `other`, in the room it has.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn copy_from(&mut self, other: &SlotSet) {
        self.words.clone_from(&other.words);
    }

    pub(crate) fn clear(&mut self) {
        self.words.clear();
    }
}

/// The slots of the bits `bits` of word `word`, ascending.
#[inline]
pub(crate) fn slots_of(word: u32, mut bits: u64) -> impl Iterator<Item = Slot> {
    std::iter::from_fn(move || {
        (bits != 0).then(|| {
            let slot = word * 64 + bits.trailing_zeros();
            bits &= bits - 1;
            slot
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn model(set: &SlotSet) -> BTreeSet<Slot> {
        set.iter().collect()
    }

    #[test]
    fn sets_agree_with_a_model() {
        let mut x = 5u64;
        for round in 0..500 {
            let spread = [64u32, 300, 100_000][round % 3];
            let mut slots = BTreeSet::new();
            for _ in 0..(round % 70) {
                x = crate::mix::splitmix64(x);
                slots.insert((x % u64::from(spread)) as Slot);
            }
            let mut set = SlotSet::from_sorted(slots.iter().copied());
            assert_eq!(model(&set), slots);
            assert_eq!(set.len(), slots.len());
            assert_eq!(set.is_empty(), slots.is_empty());
            assert!(set.words().windows(2).all(|w| w[0].word < w[1].word));
            assert!(set.words().iter().all(|w| w.bits != 0));
            // Split by a mask that keeps the slots whose bit index is even.
            let absent = set.split_off(|_| 0x5555_5555_5555_5555);
            let (even, odd): (BTreeSet<Slot>, BTreeSet<Slot>) =
                slots.iter().partition(|&&s| s % 2 == 0);
            assert_eq!(model(&set), even);
            assert_eq!(model(&absent), odd);
            assert!(set.words().iter().all(|w| w.bits != 0));
            assert!(absent.words().iter().all(|w| w.bits != 0));
        }
    }

    #[test]
    fn one_and_words_make_the_same_sets() {
        assert_eq!(SlotSet::one(130), SlotSet::from_sorted([130]));
        let words = [
            Word { word: 0, bits: 0 },
            Word {
                word: 2,
                bits: 0b101,
            },
        ];
        assert_eq!(SlotSet::from_words(words), SlotSet::from_sorted([128, 130]));
        assert_eq!(slots_of(1, 1 << 63 | 1).collect::<Vec<_>>(), [64, 127]);
    }
}
