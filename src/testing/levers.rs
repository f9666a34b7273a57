//! The search's levers, one at a time, for the `levers` benchmark: each can be timed apart
//! from the layouts and the rest of a query.

use crate::index_core::canon::{Canon, MAX_FOLD};
use crate::index_core::search::MAX_GALLOP;
use crate::types::LocalHash;

/// The canonical hash of a query prefix, rolled as the search rolls it (a stride of blocks to
/// a dependent step), as the write side rolls a chain (every block's hash, four blocks to a
/// dependent step) or one block a step. All give the same value.
///
/// ```
/// use flash_indexer::{LocalHash, testing::CanonicalRoll};
///
/// let roll = CanonicalRoll::new(7);
/// let query: Vec<LocalHash> = (0..100).map(LocalHash).collect();
/// assert_eq!(roll.by_groups(&query), roll.block_by_block(&query));
/// assert_eq!(roll.every_block(&query), roll.block_by_block(&query));
/// ```
#[derive(Clone, Debug)]
pub struct CanonicalRoll {
    canon: Canon,
}

impl CanonicalRoll {
    /// The polynomial keyed by `seed`, as [`Indexer::with_seed`](crate::Indexer::with_seed)
    /// keys it.
    pub fn new(seed: u64) -> Self {
        Self {
            canon: Canon::new(seed),
        }
    }

    /// The canonical hash of `query`'s last block, one dependent step a block.
    pub fn block_by_block(&self, query: &[LocalHash]) -> u64 {
        let Some((&first, rest)) = query.split_first() else {
            return 0;
        };
        rest.iter().fold(self.canon.first(first), |c, &local| {
            self.canon.step(c, local)
        })
    }

    /// The canonical hash of `query`'s last block as the write side rolls a stored chain, every
    /// block's hash on the way (four blocks a dependent step).
    pub fn every_block(&self, query: &[LocalHash]) -> u64 {
        let mut keys = Vec::with_capacity(query.len());
        self.canon.children(None, query.iter().copied(), &mut keys);
        keys.last().map_or(0, |key| key.canon)
    }

    /// The canonical hash of `query`'s last block, 64 blocks a dependent step (a stride of the
    /// positional layout's checkpoints), with the search's marks written on the way (windows of
    /// its longest jump, 1,024 blocks).
    pub fn by_groups(&self, query: &[LocalHash]) -> u64 {
        const WINDOW: usize = MAX_GALLOP as usize;
        let Some((&first, rest)) = query.split_first() else {
            return 0;
        };
        let mut marks = [0; WINDOW / MAX_FOLD];
        rest.chunks(WINDOW)
            .fold(self.canon.first(first), |c, window| {
                self.canon.roll(c, window, MAX_FOLD, &mut marks)
            })
    }
}
