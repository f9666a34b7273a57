//! Every layout against the reference on long runs evicted and stored again, over and over.
//!
//! An eviction leaves the evicted blocks' entries in the core's per-worker table of places, as
//! garbage that a lookup must refuse even once another seq fills the same place, and a rebuild
//! drops them later: once garbage far outnumbers held blocks, or when the table would otherwise
//! grow (see `core/places.rs`). The generated cases here hold hundreds of blocks per worker and
//! evict most of them often, so both rebuilds run many times in every case (about 550 and 2,200
//! times in all, counted once by hand), between re-stores of the same seqs at the same places,
//! re-stores elsewhere, holes and grafts. The differential suite's short chains rarely reach a
//! rebuild.

use flash_indexer::testing::{self, Op, SplitMix64, check_ops_on_each, splitmix64};
use flash_indexer::{Block, Event, KvIndex, LocalHash, SeqHash, Worker};

const WORKERS: u64 = 2;
const PATHS: u64 = 4;
/// Blocks per path. Paths 1.. share path 0's blocks before their fork.
const DEPTH: u64 = 600;
const OPS: usize = 1_500;

/// Where path `p` leaves path 0.
fn fork(p: u64) -> u64 {
    [DEPTH, 0, 64, 200][p as usize]
}

/// Block `i` of path `p` for a worker; `salt` 1 is a second seq for the same block (a salted
/// twin).
fn block(w: u64, p: u64, i: u64, salt: u64) -> Block {
    let own = if i < fork(p) { 0 } else { p };
    let local = splitmix64(own << 40 | i);
    let seq = splitmix64(w << 56 | salt << 48 | own << 40 | i | 1 << 63);
    Block::new(LocalHash(local), SeqHash(seq))
}

fn locals(p: u64, len: u64) -> Vec<LocalHash> {
    (0..len).map(|i| block(0, p, i, 0).local).collect()
}

/// One case: stores that continue a path (or restart it), tail evictions of up to 300 blocks,
/// holes, grafts and clears, with a query after every event.
fn ops(seed: u64) -> Vec<Op> {
    let mut rng = SplitMix64(seed);
    // How far each (worker, path, salt) chain was stored, as the generator believes.
    let mut frontier = [[[0u64; 2]; PATHS as usize]; WORKERS as usize];
    let mut out = Vec::with_capacity(2 * OPS);
    for id in 0..OPS as u64 {
        let w = rng.below(WORKERS);
        let p = rng.below(PATHS);
        let salt = u64::from(rng.below(8) == 0);
        let worker = Worker::new(w, 0);
        let end = &mut frontier[w as usize][p as usize][salt as usize];
        let event = match rng.below(20) {
            // Continue the chain (after an eviction: the same seqs where they were before).
            0..=8 => {
                let start = if rng.below(6) == 0 {
                    rng.below(*end + 1)
                } else {
                    *end
                };
                let len = (1 + rng.below(160)).min(DEPTH - start.min(DEPTH));
                let parent = start.checked_sub(1).map(|i| block(w, p, i, salt).seq);
                let blocks = (start..start + len).map(|i| block(w, p, i, salt)).collect();
                *end = (*end).max(start + len);
                Event::stored(worker, id, parent, blocks)
            }
            // Evict the tail, last block first.
            9..=15 => {
                let len = rng.below(300).min(*end);
                let seqs = (*end - len..*end).rev().map(|i| block(w, p, i, salt).seq);
                *end -= len;
                Event::removed(worker, id, seqs.collect())
            }
            // A hole somewhere in the chain.
            16 | 17 => {
                let i = rng.below(*end + 1);
                Event::removed(worker, id, vec![block(w, p, i, salt).seq])
            }
            // A block stored under another path's block: a re-parenting, a conflict, or a
            // rejected unknown parent.
            18 => {
                let (q, j) = (rng.below(PATHS), rng.below(DEPTH));
                let i = rng.below(DEPTH);
                let parent = Some(block(w, q, j, 0).seq);
                Event::stored(worker, id, parent, vec![block(w, p, i, salt)])
            }
            _ => {
                frontier[w as usize] = [[0; 2]; PATHS as usize];
                Event::cleared(worker, id)
            }
        };
        out.push(Op::Apply(event));
        out.push(Op::Query(locals(rng.below(PATHS), rng.below(DEPTH + 1))));
    }
    out
}

#[test]
fn evictions_and_restores_agree_with_the_reference() {
    let factories = testing::enabled_layouts();
    let workers: Vec<Worker> = (0..WORKERS).map(|w| Worker::new(w, 0)).collect();
    let closing: Vec<Vec<LocalHash>> = (0..PATHS).map(|p| locals(p, DEPTH)).collect();
    for seed in 0..8 {
        let indexes: Vec<Box<dyn KvIndex>> = factories.iter().map(|f| (f.make)()).collect();
        let refs: Vec<&dyn KvIndex> = indexes.iter().map(|b| &**b).collect();
        if let Err((i, divergence)) = check_ops_on_each(&refs, &ops(seed), &closing, &workers) {
            panic!(
                "{} disagrees with NaiveIndexer (seed {seed}): {divergence}",
                factories[i].name
            );
        }
    }
}
