//! Entries shared by more workers than a sorted list holds (wide sets, changed in place): every
//! layout against the reference while hundreds of workers store one prefix in waves, leave in a
//! shuffled order (holes, tail evictions, clears, worker removal) and come back, so that sets
//! cross the wide threshold both ways and outgrow their bits as new slots arrive.

use flash_indexer::testing::{Op, SplitMix64, check_ops_on_each, enabled_layouts};
use flash_indexer::{Block, Event, KvIndex, LocalHash, SeqHash, Worker};

const WORKERS: u64 = 300;
const PREFIX: u64 = 24;

fn local(pos: u64) -> LocalHash {
    LocalHash(pos.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xabcd)
}

/// Worker `w`'s seq hash at `pos`: opaque, its own per worker.
fn seq(w: u64, pos: u64) -> SeqHash {
    SeqHash((w << 32) | pos)
}

fn store(w: u64, len: u64) -> Op {
    let blocks = (0..len).map(|p| Block::new(local(p), seq(w, p))).collect();
    Op::Apply(Event::stored(Worker::new(w, 0), 0, None, blocks))
}

fn ops(seed: u64) -> Vec<Op> {
    let mut rng = SplitMix64(seed);
    let query: Vec<LocalHash> = (0..PREFIX + 2).map(local).collect();
    let mut out = Vec::new();
    let mut order: Vec<u64> = (0..WORKERS).collect();
    for wave in 0..3 {
        // Arrive in a shuffled order, each with a prefix of its own length.
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for (n, &w) in order.iter().enumerate() {
            out.push(store(w, 1 + rng.below(PREFIX)));
            if n % 16 == 0 {
                out.push(Op::Query(query.clone()));
            }
        }
        // Leave, in another order, in every way a worker can.
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for (n, &w) in order.iter().enumerate() {
            let worker = Worker::new(w, 0);
            let keep = if wave == 2 { 0 } else { WORKERS / 8 };
            if n as u64 >= WORKERS - keep {
                break; // Some stay into the next wave.
            }
            out.push(match rng.below(4) {
                0 => Op::Apply(Event::cleared(worker, 0)),
                1 => Op::RemoveWorker(w),
                2 => Op::Apply(Event::removed(worker, 0, vec![seq(w, rng.below(3))])),
                _ => Op::Apply(Event::removed(
                    worker,
                    0,
                    (0..PREFIX).rev().map(|p| seq(w, p)).collect(),
                )),
            });
            if n % 16 == 0 {
                out.push(Op::Query(query.clone()));
            }
        }
    }
    out
}

#[test]
fn every_layout_agrees_with_the_reference_on_wide_sets() {
    let layouts = enabled_layouts();
    let closing: Vec<Vec<LocalHash>> = (1..=PREFIX + 1)
        .map(|n| (0..n).map(local).collect())
        .collect();
    let workers: Vec<Worker> = (0..WORKERS).map(|w| Worker::new(w, 0)).collect();
    for seed in 0..4 {
        let indexes: Vec<Box<dyn KvIndex>> = layouts.iter().map(|l| (l.make)()).collect();
        let refs: Vec<&dyn KvIndex> = indexes.iter().map(|i| &**i).collect();
        if let Err((i, divergence)) = check_ops_on_each(&refs, &ops(seed), &closing, &workers) {
            panic!("{} (seed {seed}): {divergence}", layouts[i].name);
        }
    }
}
