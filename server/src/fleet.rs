//! The synthetic fleet the load tools query: Dynamo's workload shape, scaled down. Each worker
//! holds sequences whose first half is one of 4 shared prefixes and whose second half is its own;
//! queries are whole sequences (their worker matches deepest), a shared prefix with a new tail,
//! or tokens nobody holds.

/// Tokens per block of the fleet's model.
pub const BLOCK_SIZE: usize = 16;

/// The fleet's size (command-line arguments of the load tools).
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct Fleet {
    /// Workers in the synthetic fleet.
    #[arg(long, default_value_t = 32)]
    pub workers: u64,
    /// Sequences per worker.
    #[arg(long, default_value_t = 100)]
    pub sequences: u64,
    /// Blocks per sequence (16 tokens each; the first half is one of 4 shared prefixes).
    #[arg(long, default_value_t = 64)]
    pub blocks: usize,
}

impl Fleet {
    /// Tokens of sequence `s` of worker `w`.
    pub fn tokens(&self, w: u64, s: u64) -> Vec<u32> {
        let half = self.blocks / 2 * BLOCK_SIZE;
        let prefix = (s % 4) as u32;
        (0..half as u32)
            .map(|i| prefix * 1_000_000 + i)
            .chain((0..(self.blocks * BLOCK_SIZE - half) as u32).map(|i| {
                let mixed = (w * 1_000 + s).wrapping_mul(0x9e37_79b9) as u32;
                mixed.wrapping_add(i.wrapping_mul(7919))
            }))
            .collect()
    }

    /// The tokens of query `i`, and the worker that must match deepest when one must.
    pub fn query(&self, i: u64) -> (Vec<u32>, Option<u64>) {
        let (w, s) = ((i * 7) % self.workers, (i * 13) % self.sequences);
        let mut tokens = self.tokens(w, s);
        let expect = match i % 4 {
            0 | 1 => Some(w),
            2 => {
                let half = tokens.len() / 2;
                for t in &mut tokens[half..] {
                    *t = t.wrapping_add(1);
                }
                None
            }
            _ => {
                for t in &mut tokens {
                    *t = t.wrapping_add(500_000_000);
                }
                None
            }
        };
        (tokens, expect)
    }
}
