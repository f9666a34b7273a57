//! Concurrent stress with quiescent checkpoints, for every layout.
//!
//! Writer threads own disjoint workers and apply their events in rounds; between rounds all
//! writers wait at a barrier and the index is compared with `NaiveIndexer` fed the same events
//! (every query, every block count). Reader threads query all the time and check the no-phantom
//! rule of SPEC §4 precisely: a depth reported for a worker never exceeds the largest depth that
//! worker had at any event boundary of the rounds the query overlapped (computed beforehand by
//! replaying each worker's events on the reference).

use flash_indexer::testing::{self, IndexFactory};
use flash_indexer::testing::{Step, Universe};
use flash_indexer::{Event, KvIndex, LocalHash, NaiveIndexer, Worker};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};

const WRITERS: usize = 2;
const READERS: usize = 2;
const ROUNDS: usize = 12;
const EVENTS_PER_ROUND: usize = 40;

struct Plan {
    universe: Universe,
    /// `events[writer][round]`: that writer's events of that round.
    events: Vec<Vec<Vec<Event>>>,
    queries: Vec<Vec<LocalHash>>,
    /// `bound[round][(query, worker)]`: the largest depth the worker had at any event boundary
    /// of the round (start and end included).
    bound: Vec<HashMap<(usize, Worker), u32>>,
}

/// Generates events with the harness's universe (valid chains, holes, re-stores, grafts), and
/// gives each worker to one writer.
fn plan(seed: u64, universe: (u64, u32, u32)) -> Plan {
    let (ids, ranks, max_pos) = universe;
    let mut universe = Universe::new(ids, ranks, max_pos, seed);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let steps: Vec<Step> =
        flash_indexer::testing::steps_strategy(ROUNDS * EVENTS_PER_ROUND * WRITERS)
            .new_tree(&mut runner)
            .expect("strategy")
            .current();
    let workers: Vec<Worker> = universe.workers().collect();
    let owner = |w: &Worker| {
        workers
            .iter()
            .position(|x| x == w)
            .expect("universe worker")
            % WRITERS
    };
    let mut per_writer: Vec<Vec<Event>> = vec![Vec::new(); WRITERS];
    for op in universe.ops(&steps) {
        if let flash_indexer::testing::Op::Apply(event) = op {
            per_writer[owner(&event.worker)].push(event);
        }
    }
    let queries = universe.closing_queries();
    let events: Vec<Vec<Vec<Event>>> = per_writer
        .into_iter()
        .map(|evs| {
            let per_round = evs.len().div_ceil(ROUNDS).max(1);
            let mut rounds: Vec<Vec<Event>> =
                evs.chunks(per_round).map(<[Event]>::to_vec).collect();
            rounds.resize(ROUNDS, Vec::new());
            rounds
        })
        .collect();
    // Bounds: replay worker by worker (workers are independent) and record depths at every
    // event boundary.
    let mut bound: Vec<HashMap<(usize, Worker), u32>> = vec![HashMap::new(); ROUNDS];
    for writer in &events {
        let reference = NaiveIndexer::new();
        let mut record = |round: usize, reference: &NaiveIndexer| {
            for (qi, q) in queries.iter().enumerate() {
                for (w, d) in reference.find_matches(q).iter() {
                    let b = bound[round].entry((qi, w)).or_insert(0);
                    *b = (*b).max(d);
                }
            }
        };
        for (round, evs) in writer.iter().enumerate() {
            record(round, &reference);
            for e in evs {
                let _ = reference.apply(e);
                record(round, &reference);
            }
        }
    }
    Plan {
        universe,
        events,
        queries,
        bound,
    }
}

/// The first failure seen. Threads record failures instead of panicking, so that the barrier
/// protocol always completes and a failing run reports instead of hanging.
struct Failure(Mutex<Option<String>>);

impl Failure {
    fn record(&self, what: String) {
        self.0.lock().unwrap().get_or_insert(what);
    }
}

fn stress(factory: &IndexFactory, plan: &Plan) {
    let index = (factory.make)();
    let round = AtomicUsize::new(0);
    let done = AtomicBool::new(false);
    let barrier = Barrier::new(WRITERS + 1);
    let reference = NaiveIndexer::new();
    let failure = Failure(Mutex::new(None));
    std::thread::scope(|s| {
        for writer in &plan.events {
            let (index, barrier) = (&index, &barrier);
            s.spawn(move || {
                for evs in writer {
                    barrier.wait(); // round starts
                    for e in evs {
                        let _ = index.apply(e);
                    }
                    barrier.wait(); // round ends
                }
            });
        }
        for _ in 0..READERS {
            let (index, round, done, failure) = (&index, &round, &done, &failure);
            s.spawn(move || {
                while !done.load(Ordering::Acquire) {
                    for (qi, q) in plan.queries.iter().enumerate() {
                        let first = round.load(Ordering::Acquire);
                        let scores = index.find_matches(q);
                        let last = round.load(Ordering::Acquire).min(ROUNDS - 1);
                        for (w, d) in scores.iter() {
                            let allowed = (first.min(ROUNDS - 1)..=last)
                                .filter_map(|r| plan.bound[r].get(&(qi, w)))
                                .max()
                                .copied()
                                .unwrap_or(0);
                            if d > allowed {
                                failure.record(format!(
                                    "{}: phantom: {w} at depth {d} on query {qi}, at most {allowed} in rounds {first}..={last}",
                                    factory.name
                                ));
                                return;
                            }
                        }
                    }
                }
            });
        }
        for r in 0..ROUNDS {
            round.store(r, Ordering::Release);
            barrier.wait(); // writers go
            barrier.wait(); // writers done: quiescent checkpoint
            for writer in &plan.events {
                for e in &writer[r] {
                    let _ = reference.apply(e);
                }
            }
            for (qi, q) in plan.queries.iter().enumerate() {
                let (got, want) = (index.find_matches(q), reference.find_matches(q));
                if got != want {
                    let (got, want) = (got.to_sorted_vec(), want.to_sorted_vec());
                    failure.record(format!(
                        "{}: checkpoint {r}, query {qi}: got {got:?}, want {want:?}",
                        factory.name
                    ));
                }
            }
            for w in plan.universe.workers() {
                let (got, want) = (index.block_count(w), reference.block_count(w));
                if got != want {
                    failure.record(format!(
                        "{}: checkpoint {r}, block_count({w}): got {got}, want {want}",
                        factory.name
                    ));
                }
            }
        }
        done.store(true, Ordering::Release);
    });
    if let Some(what) = failure.0.into_inner().unwrap() {
        panic!("{what}");
    }
}

#[test]
fn writers_readers_and_checkpoints_every_layout() {
    let seeds = std::env::var("FLASH_STRESS_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6u64);
    for seed in 0..seeds {
        let plan = plan(seed, (4, 2, 70));
        for factory in testing::enabled_layouts() {
            stress(&factory, &plan);
        }
    }
}

/// The same with 150 workers on short paths: shallow entries hold more workers than a sorted
/// list does, so readers race writers that change wide sets in place. (Replacing a wide set that
/// outgrows its bits or shrinks back is covered single-threaded by `tests/wide_sets.rs`.)
#[test]
fn writers_readers_and_checkpoints_on_wide_sets() {
    for seed in 0..4 {
        let plan = plan(seed, (150, 1, 12));
        for factory in testing::enabled_layouts() {
            stress(&factory, &plan);
        }
    }
}
