//! The runs of a worker that hang under a block other than the previous block of their own run,
//! listed under that block's seq, with a filter that rules most seqs out without a probe.
//!
//! A store asks whether any of its new blocks has runs waiting under it, and a worker on
//! Dynamo's workload always has some listed (a conversation branches off its system prompt), so
//! that was a probe of the map per stored block (paper §6.16). Most workers
//! list a few seqs, so a filter of 256 bits, one per seq, answers "none" for all but a few
//! percent of the seqs asked about. A bit stays set when its seqs leave the list (it cannot
//! tell whether another seq shares it), so the filter is built again from the list once it
//! has a quarter more bits set than seqs listed; it is never wrong, only less sharp.

use super::child_list::ChildList;
use super::run::RunId;
use crate::types::SeqHash;
use foldhash::fast::RandomState;
use std::collections::HashMap;

/// Bits in the filter.
const BITS: usize = 256;

/// The filter is rebuilt once more bits are set than [`most_bits`] allows.
const SLACK: usize = 4;

/// The most bits the filter keeps set for `listed` seqs: a quarter more than the seqs, and a
/// few. A rebuild leaves at most one bit a seq, so the next one is at least a fifth of the
/// seqs' removals away: rebuilds cost O(1) a removal, amortized, and 4 seqs (Dynamo's
/// workload) keep at most 9 bits set, letting through 1 seq in 28 at most.
fn most_bits(listed: usize) -> usize {
    listed + listed / 4 + SLACK
}

#[derive(Debug, Default)]
pub(super) struct Kids {
    lists: HashMap<SeqHash, ChildList<RunId>, RandomState>,
    /// Bit [`bit`]`(seq)` is set for every seq in `lists` (and perhaps for seqs that left).
    filter: [u64; BITS / 64],
}

/// The filter bit of `seq`: seqs are hashes, but an engine's may be anything (small integers in
/// tests), so they are mixed first.
#[inline]
fn bit(seq: SeqHash) -> (usize, u64) {
    let mixed = seq.0.wrapping_mul(crate::mix::GOLDEN) >> (64 - BITS.trailing_zeros());
    ((mixed / 64) as usize, 1 << (mixed % 64))
}

impl Kids {
    pub(super) fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }

    /// Whether runs are listed under `seq`.
    #[inline]
    pub(super) fn contains(&self, seq: SeqHash) -> bool {
        self.get(seq).is_some()
    }

    /// The runs listed under `seq`, if any.
    #[inline]
    pub(super) fn get(&self, seq: SeqHash) -> Option<&ChildList<RunId>> {
        match self.may_contain(seq) {
            true => self.lists.get(&seq),
            false => None,
        }
    }

    /// Whether `seq` passes the filter. A worker with no runs listed (the common case) answers
    /// before mixing the seq: a detach or attach asks about every block of a run (paper §6.16).
    #[inline]
    fn may_contain(&self, seq: SeqHash) -> bool {
        if self.lists.is_empty() {
            return false;
        }
        let (word, mask) = bit(seq);
        self.filter[word] & mask != 0
    }

    /// Lists run `id` under `seq` (where it is not listed yet).
    pub(super) fn push(&mut self, seq: SeqHash, id: RunId) {
        let (word, mask) = bit(seq);
        self.filter[word] |= mask;
        self.lists.entry(seq).or_default().push(id);
    }

    /// Takes run `id` off the list under `seq`, if it is there.
    pub(super) fn remove(&mut self, seq: SeqHash, id: RunId) {
        let Some(list) = self.lists.get_mut(&seq) else {
            return;
        };
        list.remove(id);
        if !list.is_empty() {
            return;
        }
        self.lists.remove(&seq);
        let set: u32 = self.filter.iter().map(|w| w.count_ones()).sum();
        if set as usize > most_bits(self.lists.len()) {
            self.filter = [0; BITS / 64];
            for &seq in self.lists.keys() {
                let (word, mask) = bit(seq);
                self.filter[word] |= mask;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_exactly_whatever_the_filter_holds() {
        let mut kids = Kids::default();
        let mut listed = std::collections::HashSet::new();
        // Enough seqs to fill the filter, then most of them taken off again: every answer must
        // agree with the lists, before and after the rebuilds.
        for seq in 0..1_000u64 {
            kids.push(SeqHash(seq), seq as RunId);
            listed.insert(seq);
        }
        for seq in (0..1_000u64).filter(|s| s % 50 != 0) {
            kids.remove(SeqHash(seq), seq as RunId);
            listed.remove(&seq);
        }
        for seq in 0..2_000u64 {
            let want = listed.contains(&seq);
            assert_eq!(kids.contains(SeqHash(seq)), want, "seq {seq}");
            assert_eq!(kids.get(SeqHash(seq)).is_some(), want, "seq {seq}");
        }
        // 20 seqs left: the filter was rebuilt, and rules out most seqs without a probe.
        let set: u32 = kids.filter.iter().map(|w| w.count_ones()).sum();
        assert!(set as usize <= most_bits(listed.len()), "{set} bits set");
        let passed = (10_000..20_000u64)
            .filter(|&s| kids.may_contain(SeqHash(s)))
            .count();
        assert!(passed < 1_500, "{passed} of 10,000 pass the filter");
    }

    #[test]
    fn a_list_of_several_runs_stays_until_its_last_run_leaves() {
        let mut kids = Kids::default();
        kids.push(SeqHash(7), 1);
        kids.push(SeqHash(7), 2);
        kids.remove(SeqHash(7), 1);
        assert_eq!(kids.get(SeqHash(7)).map(|l| l.as_slice()), Some(&[2][..]));
        kids.remove(SeqHash(7), 2);
        assert!(kids.is_empty() && !kids.contains(SeqHash(7)));
        // Taking off what is not listed changes nothing.
        kids.remove(SeqHash(8), 3);
        assert!(kids.is_empty());
    }
}
