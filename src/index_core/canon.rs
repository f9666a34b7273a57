//! Canonical sequence hashes: the core's own identity of a prefix, independent of the engine.
//!
//! Engines' sequence hashes are opaque (see [the contract](crate::docs::contract)), so layouts
//! cannot key on them: a query has only local hashes. The core names the prefix `q[..=i]` by a
//! keyed polynomial over the binary field GF(2^64) (`gf64.rs`), whose elements are the 64-bit
//! local hashes themselves:
//!
//! ```text
//! canon(q[..=i]) = root * r^(i+1) + q[0] * r^i + ... + q[i]      (in GF(2^64))
//!                = canon(q[..i]) * r + q[i]
//! ```
//!
//! with two secrets drawn per index: `r` uniform among the nonzero elements, and `root`. The
//! second line is how the write side rolls a child from its parent (one step). The first is
//! why a query does not have to: a polynomial *combines across ranges* (`canon(a ++ b) =
//! canon(a) * r^|b| + poly(b)`), so [`Canon::roll`] folds up to [`MAX_FOLD`] blocks into one
//! step, `acc * r^n + q[j] * r^(n-1) + ... + q[j+n-1]`: products that do not wait for `acc` or
//! for each other, summed by XOR (no carries) and reduced once, and one dependent product per
//! run of blocks. Where the
//! processor multiplies carry-less in one instruction (PCLMULQDQ on x86-64), a product costs
//! about what an integer multiply does, and there is one a block instead of the two a prime
//! field needs (its elements are narrower than a local hash, so each hash must be mapped into
//! the field first).
//!
//! # Why it stays exact
//!
//! Two different prefixes `a != b` of the same length `n` (keys carry the position, so only equal
//! lengths meet) get the same canonical hash only if `r` is a root of
//! `sum (a[j] + b[j]) * r^(n-1-j)`: a polynomial over the field of degree below `n`, and not the
//! zero polynomial since `a[j] != b[j]` for some `j` (addition is XOR, so `a[j] + b[j]` is
//! nonzero exactly where they differ). It has at most `n - 1` roots, so over the draw of `r`
//! the probability is at most `(n - 1) / (2^64 - 1)`: about `2^-51` at `n = 8192`, whatever the
//! engine's hashes are, since the secrets are drawn after them and never leave the process. With
//! `m` live prefixes at a position, a union bound over their pairs. The tests below pin the
//! properties the argument needs (`r = 1` would make the hash blind to order; `r = 0` would see
//! only the last block), and `gf64.rs` tests that the modulus is irreducible (otherwise the
//! ring has zero divisors and the root count fails).

use super::gf64::{Multiplier, Powers};
use crate::types::LocalHash;

pub(crate) use super::gf64::MAX_FOLD;

/// A canonical prefix hash: where a reachable block sits, as layouts see it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Key {
    /// Position of the block in its sequence (0 for the first).
    pub pos: u32,
    /// Canonical hash of the block's whole prefix (an element of GF(2^64)).
    pub canon: u64,
}

impl Key {
    /// The key a layout that does not find entries by key gets: the position alone.
    pub(crate) fn unkeyed(pos: u32) -> Self {
        Self { pos, canon: 0 }
    }
}

/// The keyed polynomial that names prefixes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Canon {
    /// The powers of the secret point `r`, and how this processor multiplies them.
    powers: Powers,
    /// The value of the empty prefix.
    root: u64,
}

impl Canon {
    /// A polynomial keyed by `seed` (expanded with splitmix64 into the secrets).
    pub(crate) fn new(seed: u64) -> Self {
        let mut rng = crate::mix::SplitMix64(seed);
        let r = loop {
            let r = rng.next_u64();
            // 0 and 1 are the two useless points (see the module docs); neither is drawn but
            // with probability 2^-63, and then the next number is taken.
            if r > 1 {
                break r;
            }
        };
        let root = rng.next_u64();
        Self {
            powers: Powers::new(r, Multiplier::detect()),
            root,
        }
    }

    /// A polynomial keyed from the operating system's randomness (through std's `RandomState`).
    pub(crate) fn random() -> Self {
        use std::hash::{BuildHasher, RandomState};
        Self::new(RandomState::new().hash_one(0x5eed_u64))
    }

    /// The canonical hash of a prefix `parent` extended by one block `local`.
    #[inline(always)]
    pub(crate) fn step(&self, parent: u64, local: LocalHash) -> u64 {
        self.powers.step(parent, local)
    }

    /// The canonical hash of a prefix `from` extended by `locals`, equal to `step` applied block
    /// by block, but with one dependent product per [`MAX_FOLD`] blocks at most. After each
    /// whole group of `every` blocks (1 to [`MAX_FOLD`]), the value so far is written to
    /// `marks` (`marks[g]`: after `g + 1` groups), which must hold `locals.len() / every`
    /// values.
    #[inline]
    pub(crate) fn roll(
        &self,
        from: u64,
        locals: &[LocalHash],
        every: usize,
        marks: &mut [u64],
    ) -> u64 {
        self.powers.roll(from, locals, every, marks)
    }

    /// The canonical hash of a prefix `from` extended by `locals`: [`Canon::roll`] without
    /// marks, for any number of blocks. Stepping to a block 31 blocks past a kept hash block by
    /// block was 31 dependent products; this is one product for up to [`MAX_FOLD`] blocks.
    #[inline]
    pub(crate) fn extend(&self, from: u64, locals: &[LocalHash]) -> u64 {
        let mut mark = [0; 1];
        locals.chunks(MAX_FOLD).fold(from, |acc, run| {
            // A whole group of `MAX_FOLD` writes one mark; a shorter one none.
            self.roll(acc, run, MAX_FOLD, &mut mark[..run.len() / MAX_FOLD])
        })
    }

    /// The canonical hash of the block `parent`, or of the empty prefix for `None`.
    #[inline]
    pub(crate) fn parent_of(&self, parent: Option<Key>) -> u64 {
        parent.map_or(self.root, |p| p.canon)
    }

    /// The keys of a chain of blocks with local hashes `locals` under a parent at `parent`
    /// (`None`: a root), in order, appended to `out`: [`Canon::step`] block by block, but with
    /// one dependent product per four blocks. (The write side asks
    /// [`RunKeys`](super::run_keys::RunKeys) for the few keys it needs instead.)
    #[inline]
    #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
    pub(crate) fn children(
        &self,
        parent: Option<Key>,
        locals: impl Iterator<Item = LocalHash>,
        out: &mut Vec<Key>,
    ) {
        let (mut pos, from) = parent.map_or((0, self.root), |p| (p.pos + 1, p.canon));
        self.powers.each(from, locals, |canon| {
            out.push(Key { pos, canon });
            pos += 1;
        });
    }

    /// The canonical hash of position 0 of a query starting with `local`.
    #[inline]
    #[cfg_attr(not(any(feature = "positional", feature = "array")), allow(dead_code))]
    pub(crate) fn first(&self, local: LocalHash) -> u64 {
        self.step(self.root, local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mix::SplitMix64;

    fn serial(canon: &Canon, locals: &[LocalHash]) -> Vec<u64> {
        let mut c = canon.root;
        locals
            .iter()
            .map(|&l| {
                c = canon.step(c, l);
                c
            })
            .collect()
    }

    #[test]
    fn rolling_by_groups_equals_stepping_block_by_block() {
        const EVERY: usize = 8;
        let mut rng = SplitMix64(11);
        for seed in 0..20 {
            let canon = Canon::new(seed);
            for len in [0usize, 1, 7, 8, 9, 16, 63, 64, 100, 1000] {
                let locals: Vec<LocalHash> = (0..len).map(|_| LocalHash(rng.next_u64())).collect();
                let expected = serial(&canon, &locals);
                let mut marks = vec![0; len / EVERY];
                let rolled = canon.roll(canon.root, &locals, EVERY, &mut marks);
                assert_eq!(rolled, expected.last().copied().unwrap_or(canon.root));
                for (g, mark) in marks.iter().enumerate() {
                    assert_eq!(*mark, expected[(g + 1) * EVERY - 1], "len {len} group {g}");
                }
                // From the middle of a chain too.
                if len > 3 {
                    let mut marks = vec![0; (len - 3) / EVERY];
                    let tail = canon.roll(expected[2], &locals[3..], EVERY, &mut marks);
                    assert_eq!(tail, expected[len - 1]);
                }
                for cut in [0, len / 3, len.saturating_sub(1)] {
                    let from = cut.checked_sub(1).map_or(canon.root, |i| expected[i]);
                    let extended = canon.extend(from, &locals[cut..]);
                    assert_eq!(extended, expected.last().copied().unwrap_or(canon.root));
                }
            }
        }
    }

    #[test]
    fn order_matters() {
        // With r = 1 the polynomial would be a sum, blind to order.
        let canon = Canon::new(5);
        let (a, b) = (LocalHash(1), LocalHash(2));
        assert_ne!(serial(&canon, &[a, b])[1], serial(&canon, &[b, a])[1]);
    }

    #[test]
    fn every_bit_of_a_local_hash_counts() {
        // The field's elements are the hashes themselves: flipping any one bit of any block
        // changes the prefix's hash (the difference is that bit times a nonzero power of r).
        let canon = Canon::new(9);
        let mut rng = SplitMix64(13);
        let base: Vec<LocalHash> = (0..20).map(|_| LocalHash(rng.next_u64())).collect();
        let hash = serial(&canon, &base)[19];
        for block in 0..20 {
            for bit in 0..64 {
                let mut q = base.clone();
                q[block].0 ^= 1 << bit;
                assert_ne!(serial(&canon, &q)[19], hash, "block {block} bit {bit}");
            }
        }
    }

    #[test]
    fn no_collisions_among_many_prefixes_of_one_position() {
        // 200,000 prefixes of length 64 differing in one block at a random place: with a
        // collision chance near 2^-60 + 2^-55 a pair, none is expected (a broken combination of
        // lanes or a degenerate key collides at once).
        let canon = Canon::new(17);
        let mut rng = SplitMix64(23);
        let base: Vec<LocalHash> = (0..64).map(|_| LocalHash(rng.next_u64())).collect();
        let mut seen = std::collections::HashSet::new();
        let mut marks = [0; 8];
        for i in 0..200_000u64 {
            let mut q = base.clone();
            q[(i % 64) as usize] = LocalHash(i);
            seen.insert(canon.roll(canon.root, &q, 8, &mut marks));
        }
        assert_eq!(seen.len(), 200_000);
    }
}
