//! The synthetic fleet the load tools query: Dynamo's workload shape, scaled down. Each worker
//! holds sequences whose first half is one of 4 shared prefixes and whose second half is its own;
//! queries are whole sequences (their worker matches deepest), a shared prefix with a new tail,
//! or tokens nobody holds. The same shapes exist as text, for the prompt API: words in place of
//! tokens, tokenized by the model's tokenizer.

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

    /// The text of sequence `s` of worker `w`: half of one of 4 shared prefixes, half its own.
    pub fn text(&self, w: u64, s: u64) -> String {
        let half = self.blocks * BLOCK_SIZE / 2;
        let mut text = words(s % 4, half);
        text.push_str(&words(1_000 + w * 1_000 + s, half));
        text
    }

    /// The text of query `i`, and the worker that must match deepest when one must (the shapes
    /// of [`Fleet::query`]).
    pub fn query_text(&self, i: u64) -> (String, Option<u64>) {
        let (w, s) = ((i * 7) % self.workers, (i * 13) % self.sequences);
        let half = self.blocks * BLOCK_SIZE / 2;
        match i % 4 {
            0 | 1 => (self.text(w, s), Some(w)),
            2 => (words(s % 4, half) + &words(u64::MAX - i, half), None),
            _ => (words(u64::MAX / 2 - i, 2 * half), None),
        }
    }
}

/// `n` words drawn by `seed` from a vocabulary of made-up words, each followed by a space.
pub fn words(seed: u64, n: usize) -> String {
    const SYLLABLES: [&str; 16] = [
        "ka", "ro", "mi", "te", "su", "na", "lo", "pi", "ve", "do", "ra", "ne", "zu", "ho", "ya",
        "ge",
    ];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = String::with_capacity(n * 6);
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for k in 0..1 + (x >> 60) % 3 {
            out.push_str(SYLLABLES[((x >> (4 * k)) % 16) as usize]);
        }
        out.push(' ');
    }
    out
}
