//! The keys of a run of blocks being attached, computed only where someone asks.
//!
//! A keyed layout needs the key of a block only where a new edge starts at one of its
//! checkpoints (one block in 128), and the core keeps the canonical hash of a run's first block,
//! of every 32nd and of its last; salted twins and branching runs ask for a few more. Rolling
//! every block's canonical hash one by one ([`Canon::children`]), with a product and a
//! reduction a block and a 16-byte key written for each, was a tenth of the array and
//! positional layouts' store time (perf, Dynamo's workload and the Mooncake trace). Here the
//! run is rolled in groups of [`EVERY`] blocks ([`Canon::roll`]: one reduction a group), the
//! value after each group is kept, and a key is folded from the group before it when asked
//! ([`Canon::extend`]: one product for the at most `EVERY` blocks). Each group's reduction
//! waits for the one before it, so fewer, longer groups roll faster (paper §6.12).

use super::canon::{Canon, Key};
use crate::types::LocalHash;

/// Blocks between two kept canonical hashes: the core keeps every 32nd block's, so most keys
/// asked for are one block past a kept one.
const EVERY: usize = 32;

/// The keys of the blocks `locals` of a run, the first at position `pos0`.
#[allow(unreachable_pub)] // Named by the sealed layout seam's `add_run`.
#[derive(Debug)]
pub struct RunKeys<'a> {
    pos0: u32,
    how: How<'a>,
}

#[derive(Debug)]
enum How<'a> {
    /// The layout finds nothing by key: positions alone.
    Unkeyed,
    /// Rolled from `from`, the canonical hash of the first block's parent.
    Rolled {
        canon: &'a Canon,
        from: u64,
        locals: &'a [LocalHash],
        /// `marks[g]`: the canonical hash of block `(g + 1) * EVERY - 1`.
        marks: &'a [u64],
        /// The canonical hash of the last block.
        last: u64,
    },
    /// Given one by one (a single block, and tests).
    #[cfg_attr(
        not(any(feature = "positional", feature = "array", feature = "radix")),
        allow(dead_code)
    )]
    Listed(&'a [Key]),
}

impl<'a> RunKeys<'a> {
    /// The keys of `locals` under the block `parent` (`None`: from the root), rolled into
    /// `marks` unless the layout is not `keyed`.
    pub(crate) fn roll(
        canon: &'a Canon,
        keyed: bool,
        parent: Option<Key>,
        locals: &'a [LocalHash],
        marks: &'a mut Vec<u64>,
    ) -> Self {
        let pos0 = parent.map_or(0, |p| p.pos + 1);
        if !keyed {
            return Self {
                pos0,
                how: How::Unkeyed,
            };
        }
        let from = canon.parent_of(parent);
        marks.clear();
        marks.resize(locals.len() / EVERY, 0);
        let last = canon.roll(from, locals, EVERY, marks);
        Self {
            pos0,
            how: How::Rolled {
                canon,
                from,
                locals,
                marks,
                last,
            },
        }
    }

    /// Keys given one by one, in order.
    #[cfg_attr(
        not(any(feature = "positional", feature = "array", feature = "radix")),
        allow(dead_code)
    )]
    pub(crate) fn listed(keys: &'a [Key]) -> Self {
        Self {
            pos0: keys.first().map_or(0, |k| k.pos),
            how: How::Listed(keys),
        }
    }

    /// Whether the keys carry canonical hashes.
    pub(crate) fn keyed(&self) -> bool {
        !matches!(self.how, How::Unkeyed)
    }

    /// The position of block `i`.
    #[inline]
    pub(crate) fn pos(&self, i: usize) -> u32 {
        match self.how {
            How::Listed(keys) => keys[i].pos,
            _ => self.pos0 + i as u32,
        }
    }

    /// The key of block `i`: folded from the kept value before it, over at most `EVERY` blocks.
    pub(crate) fn key(&self, i: usize) -> Key {
        let canon = match self.how {
            How::Unkeyed => 0,
            How::Listed(keys) => return keys[i],
            How::Rolled {
                canon,
                from,
                locals,
                marks,
                last,
            } => {
                debug_assert!(i < locals.len());
                if i + 1 == locals.len() {
                    last
                } else {
                    let group = (i + 1) / EVERY;
                    let start = match group {
                        0 => from,
                        g => marks[g - 1],
                    };
                    canon.extend(start, &locals[group * EVERY..=i])
                }
            }
        };
        Key {
            pos: self.pos(i),
            canon,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locals(n: u64) -> Vec<LocalHash> {
        (0..n)
            .map(|i| LocalHash(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 77))
            .collect()
    }

    #[test]
    fn every_key_equals_the_one_rolled_block_by_block() {
        let canon = Canon::new(3);
        for n in [1, 2, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 130] {
            let locals = locals(n);
            for parent in [
                None,
                Some(Key {
                    pos: 40,
                    canon: 0xabc,
                }),
            ] {
                let mut want = Vec::new();
                canon.children(parent, locals.iter().copied(), &mut want);
                let mut marks = Vec::new();
                let keys = RunKeys::roll(&canon, true, parent, &locals, &mut marks);
                let got: Vec<Key> = (0..locals.len()).map(|i| keys.key(i)).collect();
                assert_eq!(got, want, "{n} blocks under {parent:?}");
            }
        }
    }

    #[test]
    fn unkeyed_runs_get_positions_alone() {
        let canon = Canon::new(3);
        let locals = locals(5);
        let parent = Some(Key { pos: 9, canon: 1 });
        let mut marks = Vec::new();
        let keys = RunKeys::roll(&canon, false, parent, &locals, &mut marks);
        assert!(!keys.keyed());
        assert_eq!(keys.key(3), Key::unkeyed(13));
        assert!(marks.is_empty(), "nothing rolled");
    }
}
