//! Canonical sequence hashes: the core's own identity of a prefix, independent of the engine.
//!
//! Engines' sequence hashes are opaque (see [the contract](crate::docs::contract)), so layouts
//! cannot key on them: a query has only local hashes. The core names the prefix `q[..=i]` by a
//! keyed polynomial over the prime field of `P = 2^61 - 1`:
//!
//! ```text
//! canon(q[..=i]) = root * r^(i+1) + phi(q[0]) * r^i + ... + phi(q[i])      (mod P)
//!                = canon(q[..i]) * r + phi(q[i])
//! ```
//!
//! with `phi(x) = (k * x mod 2^64) >> 3` (multiply-shift) and three secrets drawn per index:
//! `r` uniform in `[1, P)`, `k` odd, `root`. The second line is how the write side rolls a
//! child from its parent (one step). The first is why a query does not have to: a polynomial
//! *combines across ranges* (`canon(a ++ b) = canon(a) * r^|b| + poly(b)`), so
//! [`Canon::roll`] folds [`LANES`] blocks into one step, `acc * r^8 + phi(q[j]) * r^7 + ... +
//! phi(q[j+7])`: eight independent products summed without reduction, and one dependent
//! multiply per eight blocks instead of one per block.
//!
//! # Why it stays exact
//!
//! Two different prefixes `a != b` of the same length `n` (keys carry the position, so only equal
//! lengths meet) get the same canonical hash only if
//! - `phi(a[j]) == phi(b[j])` at every `j` where they differ: multiply-shift is 2-universal up to
//!   a factor 2 (Dietzfelbinger et al., 1997), so for one such `j` this has probability at most
//!   `2^-60` over `k`; or
//! - otherwise, `r` is a root of the nonzero polynomial `sum (phi(a[j]) - phi(b[j])) * r^(n-1-j)`
//!   of degree below `n`: at most `n - 1` roots, probability at most `n / 2^61` over `r`.
//!
//! So a pair of live chains at one position collides with probability below `2^-60 + n / 2^61`
//! (about `2^-47` at `n = 8192`), whatever the engine's hashes are, since the secrets are drawn
//! after them and never leave the process; with `m` live prefixes at a position, a union bound
//! over their pairs. The tests below pin the properties the argument needs (a weak key, `r = 1`
//! or an identity `phi`, would fail them).

use crate::types::LocalHash;

/// The field's prime, `2^61 - 1` (a Mersenne prime: reduction is shifts and adds).
const P: u64 = (1 << 61) - 1;

/// Blocks folded into one dependent step by [`Canon::roll`].
pub(crate) const LANES: usize = 8;

/// A canonical prefix hash: where a reachable block sits, as layouts see it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Key {
    /// Position of the block in its sequence (0 for the first).
    pub pos: u32,
    /// Canonical hash of the block's whole prefix (an element of the field, below `2^61 - 1`).
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
    /// Multiplier of `phi` (odd).
    k: u64,
    /// `r^1 ..= r^LANES`: `powers[i]` is `r^(i + 1)`.
    powers: [u64; LANES],
    /// The value of the empty prefix.
    root: u64,
}

/// `x mod P`, fully reduced, for any `x < 2^125`.
#[inline(always)]
fn reduce(x: u128) -> u64 {
    let high = (x >> 61) as u64; // Below 2^64: fold it again.
    let sum = (x as u64 & P) + (high & P) + (high >> 61); // Below 2^62 + 8.
    let sum = (sum & P) + (sum >> 61); // Below P + 4.
    if sum >= P { sum - P } else { sum }
}

#[inline(always)]
fn mul(a: u64, b: u64) -> u128 {
    u128::from(a) * u128::from(b)
}

impl Canon {
    /// A polynomial keyed by `seed` (expanded with splitmix64 into the secrets).
    pub(crate) fn new(seed: u64) -> Self {
        let mut rng = crate::mix::SplitMix64(seed);
        let k = rng.next_u64() | 1;
        let r = 1 + rng.next_u64() % (P - 1);
        let root = rng.next_u64() % P;
        let mut powers = [r; LANES];
        for i in 1..LANES {
            powers[i] = reduce(mul(powers[i - 1], r));
        }
        Self { k, powers, root }
    }

    /// A polynomial keyed from the operating system's randomness (through std's `RandomState`).
    pub(crate) fn random() -> Self {
        use std::hash::{BuildHasher, RandomState};
        Self::new(RandomState::new().hash_one(0x5eed_u64))
    }

    /// The local hash as a field element (below `2^61`, not necessarily reduced).
    #[inline(always)]
    fn phi(&self, local: LocalHash) -> u64 {
        local.0.wrapping_mul(self.k) >> 3
    }

    /// The canonical hash of a prefix `parent` extended by one block `local`.
    #[inline(always)]
    pub(crate) fn step(&self, parent: u64, local: LocalHash) -> u64 {
        reduce(mul(parent, self.powers[0]) + u128::from(self.phi(local)))
    }

    /// The canonical hash of a prefix `from` extended by `locals`, equal to `step` applied block
    /// by block. Whole groups of [`LANES`] blocks cost one dependent multiply each; after each,
    /// the value so far is written to `marks` (`marks[g]`: after `g + 1` groups), which must
    /// hold `locals.len() / LANES` values.
    #[inline]
    pub(crate) fn roll(&self, from: u64, locals: &[LocalHash], marks: &mut [u64]) -> u64 {
        let [r1, r2, r3, r4, r5, r6, r7, r8] = self.powers;
        let groups = locals.chunks_exact(LANES);
        let rest = groups.remainder();
        let mut acc = from;
        for (group, mark) in groups.zip(marks.iter_mut()) {
            let f = |i: usize| self.phi(group[i]);
            // Eight products below 2^122 each, and one term below 2^61: the sum stays below
            // 2^125, so one reduction serves the group.
            let sum = mul(acc, r8)
                + mul(f(0), r7)
                + mul(f(1), r6)
                + mul(f(2), r5)
                + mul(f(3), r4)
                + mul(f(4), r3)
                + mul(f(5), r2)
                + mul(f(6), r1)
                + u128::from(f(7));
            acc = reduce(sum);
            *mark = acc;
        }
        rest.iter().fold(acc, |c, &local| self.step(c, local))
    }

    /// The key of a block with local hash `local` under a parent at `parent` (`None`: a root).
    #[inline]
    pub(crate) fn child(&self, parent: Option<Key>, local: LocalHash) -> Key {
        match parent {
            None => Key {
                pos: 0,
                canon: self.step(self.root, local),
            },
            Some(p) => Key {
                pos: p.pos + 1,
                canon: self.step(p.canon, local),
            },
        }
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
    fn reduce_is_exact_at_the_edges() {
        for x in [
            0u128,
            1,
            P as u128 - 1,
            P as u128,
            P as u128 + 1,
            (1 << 125) - 1,
        ] {
            assert_eq!(u128::from(reduce(x)), x % u128::from(P), "{x}");
        }
        let mut rng = SplitMix64(3);
        for _ in 0..10_000 {
            let x = (u128::from(rng.next_u64()) << 61 | u128::from(rng.next_u64())) >> 3;
            assert_eq!(u128::from(reduce(x)), x % u128::from(P));
        }
    }

    #[test]
    fn rolling_by_groups_equals_stepping_block_by_block() {
        let mut rng = SplitMix64(11);
        for seed in 0..20 {
            let canon = Canon::new(seed);
            for len in [0usize, 1, 7, 8, 9, 16, 63, 64, 100, 1000] {
                let locals: Vec<LocalHash> = (0..len).map(|_| LocalHash(rng.next_u64())).collect();
                let expected = serial(&canon, &locals);
                let mut marks = vec![0; len / LANES];
                let rolled = canon.roll(canon.root, &locals, &mut marks);
                assert_eq!(rolled, expected.last().copied().unwrap_or(canon.root));
                for (g, mark) in marks.iter().enumerate() {
                    assert_eq!(*mark, expected[(g + 1) * LANES - 1], "len {len} group {g}");
                }
                // From the middle of a chain too.
                if len > 3 {
                    let mut marks = vec![0; (len - 3) / LANES];
                    let tail = canon.roll(expected[2], &locals[3..], &mut marks);
                    assert_eq!(tail, expected[len - 1]);
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
    fn locals_congruent_mod_the_prime_stay_apart() {
        // The field has fewer elements than there are local hashes: an identity phi would send
        // x and x + P (or x with bit 63 set and x + 4) to one element.
        let canon = Canon::new(9);
        for x in [0u64, 1, 12_345] {
            for y in [x + P, x | 1 << 63, x + 2 * P] {
                assert_ne!(
                    canon.first(LocalHash(x)),
                    canon.first(LocalHash(y)),
                    "{x} {y}"
                );
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
            seen.insert(canon.roll(canon.root, &q, &mut marks));
        }
        assert_eq!(seen.len(), 200_000);
    }
}
