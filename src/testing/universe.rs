//! The world the steps talk about: workers, paths with shared prefixes, and engine hashes.

use super::check::Op;
use super::step::Step;
use crate::hash::{ExtraKey, SEED, block_local_hash, next_seq_hash};
use crate::types::{Block, Event, LocalHash, SeqHash, Worker};
use std::collections::HashMap;

/// Positions where paths fork and where ranges start or end most often: right before, at and
/// after multiples of the common jump sizes 8, 16, 32 and 64, and of 128, the positional and
/// array layouts' checkpoint stride.
const BOUNDARIES: [u32; 19] = [
    0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 3, 127, 128, 129,
];

/// Number of paths. Path `p > 0` forks from path `p / 2` at `FORK[p]`.
const PATHS: usize = 16;
const FORK: [u32; PATHS] = [0, 8, 17, 16, 33, 7, 1, 64, 31, 63, 65, 15, 32, 9, 128, 2];

/// Maps abstract [`Step`]s to concrete [`Op`]s.
///
/// Paths form a tree: path `p > 0` shares path `p / 2`'s local hashes before its fork position.
/// Odd paths differ from their parent *only* at the fork and rejoin its local hashes after it, so
/// an index that matches positions by local hash alone over-counts on them.
///
/// Local hashes are real block hashes ([`block_local_hash`]) of a few tokens and the block's
/// extra keys. Half the forks are made of keys alone, over the parent's very tokens: paths
/// `4k + 2` add a key to every block from their fork on (an image starting at the fork, the same
/// image one token later, a prompt-embeddings digest, a cache salt), paths `4k + 3` to the fork
/// block only (a key on some blocks only) before they rejoin.
#[derive(Clone, Debug)]
pub struct Universe {
    /// Distinct worker ids.
    pub ids: u64,
    /// Dp ranks per worker id.
    pub ranks: u32,
    /// The deepest position a step names (chains are up to `max_pos + 1` blocks).
    pub max_pos: u32,
    /// Varies every hash of the universe.
    pub seed: u64,
    /// The next event id of each worker.
    next_event_id: HashMap<Worker, u64>,
    /// Where each (worker, path, salt) chain was last stored up to, so that steps can continue
    /// chains and evict their tails instead of naming parents nobody stored.
    frontier: HashMap<(Worker, usize, u8), u32>,
    /// The path most recently stored, which queries favour.
    last_path: usize,
}

impl Universe {
    /// A universe of `ids * ranks` workers and chains of up to `max_pos + 1` blocks.
    pub fn new(ids: u64, ranks: u32, max_pos: u32, seed: u64) -> Self {
        Self {
            ids: ids.max(1),
            ranks: ranks.max(1),
            max_pos,
            seed,
            next_event_id: HashMap::new(),
            frontier: HashMap::new(),
            last_path: 0,
        }
    }

    /// Every worker of the universe.
    pub fn workers(&self) -> impl Iterator<Item = Worker> + '_ {
        (0..self.ids).flat_map(move |id| (0..self.ranks).map(move |r| Worker::new(id, r)))
    }

    /// The worker a raw step number names.
    pub fn worker(&self, raw: u16) -> Worker {
        let raw = u64::from(raw);
        Worker::new(
            raw % self.ids,
            ((raw / self.ids) % u64::from(self.ranks)) as u32,
        )
    }

    /// A position, biased towards jump boundaries: even raw values pick a boundary, odd ones any
    /// position up to `max_pos`.
    pub fn position(&self, raw: u16) -> u32 {
        let v = u32::from(raw >> 1);
        if raw & 1 == 0 {
            let b = BOUNDARIES[v as usize % BOUNDARIES.len()];
            // Deep universes also get boundaries near their far end.
            if v as usize / BOUNDARIES.len() % 4 == 3 {
                self.max_pos.saturating_sub(b)
            } else {
                b.min(self.max_pos)
            }
        } else {
            v % (self.max_pos + 1)
        }
    }

    fn path(raw: u8) -> usize {
        usize::from(raw) % PATHS
    }

    /// Salts 0 (Dynamo's hashes) half the time, opaque salts 1 and 2 otherwise.
    fn salt(raw: u8) -> u8 {
        (raw % 4).saturating_sub(1)
    }

    fn frontier(&self, w: Worker, p: usize, salt: u8) -> u32 {
        self.frontier.get(&(w, p, salt)).copied().unwrap_or(0)
    }

    /// Where a store starts: the root, the chain's frontier (a continuation), or anywhere
    /// (usually a refill of a hole).
    fn store_start(&self, raw: u16, w: Worker, p: usize, salt: u8) -> u32 {
        match raw % 4 {
            0 | 3 => 0,
            1 => self.frontier(w, p, salt).min(self.max_pos),
            _ => self.position(raw / 4),
        }
    }

    /// A position inside the stored part of the chain when there is one, else anywhere.
    fn held_position(&self, raw: u16, w: Worker, p: usize, salt: u8) -> u32 {
        match self.frontier(w, p, salt) {
            0 => self.position(raw),
            end if raw.is_multiple_of(2) => end - 1,
            end => self.position(raw / 2) % end,
        }
    }

    fn forget_worker(&mut self, gone: impl Fn(Worker) -> bool) {
        self.frontier.retain(|(w, _, _), _| !gone(*w));
    }

    fn mix(&self, a: u64, b: u64) -> u64 {
        // Only needs to be deterministic and spread.
        crate::mix::splitmix64(a ^ b.rotate_left(29) ^ self.seed.wrapping_mul(crate::mix::GOLDEN))
    }

    /// The local hash of block `pos` of path `p`.
    pub fn local(&self, p: usize, pos: u32) -> LocalHash {
        let mut keys = Vec::new();
        let tokens_of = self.identity(p % PATHS, pos, &mut keys);
        let mix = self.mix(tokens_of as u64, u64::from(pos));
        let tokens = [mix as u32, (mix >> 32) as u32, pos, tokens_of as u32];
        block_local_hash(&tokens, SEED, &keys)
    }

    /// Whose tokens block `pos` of path `p` has, with its extra keys pushed onto `keys`.
    fn identity(&self, mut p: usize, pos: u32, keys: &mut Vec<ExtraKey>) -> usize {
        loop {
            if p == 0 {
                return 0;
            }
            let fork = FORK[p];
            let rejoins = p % 2 == 1;
            if pos < fork || (pos > fork && rejoins) {
                p /= 2;
                continue;
            }
            if p % 4 < 2 {
                return p; // A fork of tokens.
            }
            // A fork of keys: the parent's tokens (and keys), and one key of this path's own.
            keys.push(Self::key(p, fork, pos));
            p /= 2;
        }
    }

    /// The extra key path `p` (forking at `fork` by keys) gives block `pos`.
    fn key(p: usize, fork: u32, pos: u32) -> ExtraKey {
        let from_fork = i64::from(fork) - i64::from(pos);
        match p / 4 {
            // One image starting at the fork, and the same image a token later.
            0 => ExtraKey::Multimodal {
                identifier: "image-a".into(),
                offset: from_fork,
            },
            1 => ExtraKey::Multimodal {
                identifier: "image-a".into(),
                offset: from_fork + 1,
            },
            2 if p.is_multiple_of(2) => ExtraKey::PromptEmbeds(vec![p as u8; 32]),
            // The same tokens hashed over another token after the block (lookahead hashing).
            2 => ExtraKey::Lookahead(vec![p as u32]),
            _ => ExtraKey::CacheSalt(format!("tenant-{}", p % 4)),
        }
    }

    /// Local hashes of blocks `0 .. len` of path `p`.
    pub fn locals(&self, p: usize, len: u32) -> Vec<LocalHash> {
        (0..len).map(|i| self.local(p, i)).collect()
    }

    /// The engine's sequence hash of block `pos` of path `p`: Dynamo's chain for salt 0, an
    /// opaque salted value otherwise (a function of the prefix and the salt only).
    pub fn seq(&self, p: usize, pos: u32, salt: u8) -> SeqHash {
        self.chain(p, pos, pos + 1, salt)[0].seq
    }

    /// Blocks `start .. start + len` of path `p`, cut at the universe's depth.
    fn blocks(&self, p: usize, start: u32, len: u32, salt: u8) -> Vec<Block> {
        self.chain(
            p,
            start,
            start.saturating_add(len).min(self.max_pos + 1),
            salt,
        )
    }

    /// Blocks `start .. end` of path `p` with their engine hashes. The chain is rolled once from
    /// the root (deep chains would make a `seq` call per block quadratic).
    fn chain(&self, p: usize, start: u32, end: u32, salt: u8) -> Vec<Block> {
        let mut out = Vec::with_capacity(end.saturating_sub(start) as usize);
        let mut seq = SeqHash(self.local(p, 0).0);
        for i in 0..end {
            if i > 0 {
                seq = next_seq_hash(seq, self.local(p, i));
            }
            if i >= start {
                let engine = if salt == 0 {
                    seq
                } else {
                    SeqHash(self.mix(seq.0, 0x5a17 + u64::from(salt)))
                };
                out.push(Block::new(self.local(p, i), engine));
            }
        }
        out
    }

    fn event_id(&mut self, worker: Worker) -> u64 {
        let next = self.next_event_id.entry(worker).or_insert(0);
        *next += 1;
        *next - 1
    }

    /// The concrete op of one step.
    pub fn op(&mut self, step: &Step) -> Op {
        match *step {
            Step::Store {
                worker,
                path,
                start,
                len,
                salt,
            } => {
                let (w, p, salt) = (self.worker(worker), Self::path(path), Self::salt(salt));
                let start = self.store_start(start, w, p, salt);
                let blocks = self.blocks(p, start, self.position(len), salt);
                let parent = start.checked_sub(1).map(|i| self.seq(p, i, salt));
                let end = start + blocks.len() as u32;
                if end > self.frontier(w, p, salt) {
                    self.frontier.insert((w, p, salt), end);
                }
                self.last_path = p;
                Op::Apply(Event::stored(w, self.event_id(w), parent, blocks))
            }
            Step::Remove {
                worker,
                path,
                start,
                len,
                salt,
                tail_first,
            } => {
                let (w, p, salt) = (self.worker(worker), Self::path(path), Self::salt(salt));
                let len = self.position(len).max(1);
                let end = self.frontier(w, p, salt);
                // Mostly evict the chain's tail (what engines do), sometimes punch a hole.
                let start = if start % 3 != 0 && end > 0 {
                    end.saturating_sub(len)
                } else {
                    self.held_position(start, w, p, salt)
                };
                if start < end && start + len >= end {
                    self.frontier.insert((w, p, salt), start);
                }
                let mut seqs: Vec<SeqHash> = self
                    .blocks(p, start, len, salt)
                    .iter()
                    .map(|b| b.seq)
                    .collect();
                if tail_first {
                    seqs.reverse();
                }
                Op::Apply(Event::removed(w, self.event_id(w), seqs))
            }
            Step::Graft {
                worker,
                path,
                pos,
                salt,
                onto,
                onto_pos,
                onto_salt,
            } => {
                let w = self.worker(worker);
                let (p, salt, onto, onto_salt) = (
                    Self::path(path),
                    Self::salt(salt),
                    Self::path(onto),
                    Self::salt(onto_salt),
                );
                let pos = self.held_position(pos, w, p, salt);
                let block = Block::new(self.local(p, pos), self.seq(p, pos, salt));
                let parent = self.seq(
                    onto,
                    self.held_position(onto_pos, w, onto, onto_salt),
                    onto_salt,
                );
                Op::Apply(Event::stored(
                    w,
                    self.event_id(w),
                    Some(parent),
                    vec![block],
                ))
            }
            Step::Corrupt {
                worker,
                kind,
                path,
                pos,
                salt,
            } => {
                let w = self.worker(worker);
                let (p, salt) = (Self::path(path), Self::salt(salt));
                let pos = self.held_position(pos, w, p, salt);
                let parent = pos.checked_sub(1).map(|i| self.seq(p, i, salt));
                let block = Block::new(self.local(p, pos), self.seq(p, pos, salt));
                let (parent, blocks) = match kind % 4 {
                    // A parent nobody stored.
                    0 => (Some(SeqHash(self.mix(0xdead, u64::from(pos)))), vec![block]),
                    // The same block twice in one event.
                    1 => (parent, vec![block, block]),
                    // A block that is its own parent.
                    2 => (Some(block.seq), vec![block]),
                    // A known seq hash with another local hash.
                    _ => (
                        parent,
                        vec![Block::new(LocalHash(!block.local.0), block.seq)],
                    ),
                };
                Op::Apply(Event::stored(w, self.event_id(w), parent, blocks))
            }
            Step::Clear { worker } => {
                let w = self.worker(worker);
                self.forget_worker(|x| x == w);
                Op::Apply(Event::cleared(w, self.event_id(w)))
            }
            Step::RemoveWorker { worker } => {
                let id = self.worker(worker).id;
                self.forget_worker(|x| x.id == id);
                Op::RemoveWorker(id)
            }
            Step::RemoveDpRank { worker } => {
                let w = self.worker(worker);
                self.forget_worker(|x| x == w);
                Op::RemoveWorkerDpRank(w)
            }
            Step::Query { path, len, tweak } => {
                let p = if path % 2 == 0 {
                    self.last_path
                } else {
                    Self::path(path / 2)
                };
                let len = self.position(len) + u32::from(tweak % 3 == 0);
                let mut q = self.locals(p, len);
                match (tweak % 5, q.len()) {
                    (1, n) if n > 0 => q[n - 1] = LocalHash(self.mix(0xbeef, u64::from(tweak))),
                    (2, n) if n > 0 => q[0] = LocalHash(self.mix(0xf00d, u64::from(tweak))),
                    _ => {}
                }
                Op::Query(q)
            }
        }
    }

    /// The concrete ops of a step sequence.
    pub fn ops(&mut self, steps: &[Step]) -> Vec<Op> {
        steps.iter().map(|s| self.op(s)).collect()
    }

    /// Queries that cover the universe's final state: every path at full depth.
    pub fn closing_queries(&self) -> Vec<Vec<LocalHash>> {
        (0..PATHS)
            .map(|p| self.locals(p, self.max_pos + 1))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn some_forks_are_made_of_extra_keys_alone() {
        let universe = Universe::new(1, 1, 160, 7);
        let mut keys = Vec::new();
        // Path 2 forks from path 1 at 17 by an image: its parent's tokens there (path 1 has
        // rejoined path 0's), and a key of its own.
        assert_eq!(universe.identity(2, 17, &mut keys), 0);
        assert_eq!(
            keys,
            [ExtraKey::Multimodal {
                identifier: "image-a".into(),
                offset: 0
            }]
        );
        assert_ne!(universe.local(2, 17), universe.local(1, 17));
        assert_eq!(universe.local(2, 16), universe.local(1, 16));
        // Path 6 holds the same image one token later; path 3 keys its fork block only.
        keys.clear();
        universe.identity(6, 3, &mut keys);
        assert_eq!(
            keys,
            [ExtraKey::Multimodal {
                identifier: "image-a".into(),
                offset: -1
            }]
        );
        assert_ne!(universe.local(3, 16), universe.local(1, 16));
        assert_eq!(universe.local(3, 17), universe.local(1, 17));
    }
}
