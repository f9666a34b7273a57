//! Canonical sequence hashes: the core's own identity of a prefix, independent of the engine.
//!
//! Engines' sequence hashes are opaque (see [the contract](crate::docs::contract)), so layouts
//! cannot key on them: a query has only local hashes. The core names the prefix `query[..=i]` by `canon_i = mix(canon_{i-1},
//! query[i])`, computed the same way on the write side from a block's parent. The mix is a
//! folded 64x64->128 multiply (about one nanosecond a step) keyed by two secrets drawn per
//! index, so that nobody outside the process can aim two prefixes at one canonical hash.
//! Exactness therefore rests on the absence of 64-bit collisions between live prefixes at one
//! position: with `n` live prefixes at a position the chance of any collision is about
//! `n^2 / 2^65`.

use crate::types::LocalHash;

/// A canonical prefix hash: where a reachable block sits, as layouts see it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct Key {
    /// Position of the block in its sequence (0 for the first).
    pub pos: u32,
    /// Canonical hash of the block's whole prefix.
    pub canon: u64,
}

impl Key {
    /// The key a layout that does not find entries by key gets: the position alone.
    pub(crate) fn unkeyed(pos: u32) -> Self {
        Self { pos, canon: 0 }
    }
}

/// The keyed mix that rolls canonical hashes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Canon {
    k0: u64,
    k1: u64,
    root: u64,
}

impl Canon {
    /// A mix keyed by `seed` (expanded with splitmix64 into the two secrets and the root).
    pub(crate) fn new(seed: u64) -> Self {
        let mut rng = crate::mix::SplitMix64(seed);
        Self {
            k0: rng.next_u64(),
            k1: rng.next_u64() | 1,
            root: rng.next_u64(),
        }
    }

    /// A mix keyed from the operating system's randomness (through std's `RandomState`).
    pub(crate) fn random() -> Self {
        use std::hash::{BuildHasher, RandomState};
        Self::new(RandomState::new().hash_one(0x5eed_u64))
    }

    #[inline(always)]
    pub(crate) fn step(&self, parent: u64, local: LocalHash) -> u64 {
        let product = u128::from(parent ^ self.k0) * u128::from(local.0 ^ self.k1);
        (product as u64) ^ ((product >> 64) as u64)
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
