//! The writer pool: a real flush barrier, sticky ordering, counters, ids left uninterpreted.

use flash_indexer::pool::{PoolConfig, SubmitError, WriterPool};
use flash_indexer::{
    Block, DefaultIndexer, Event, KvIndex, LocalHash, NaiveIndexer, SeqHash, Worker,
};
use std::sync::Arc;

fn block(i: u64) -> Block {
    Block::new(LocalHash(i), SeqHash(10_000 + i))
}

fn chain_events(w: Worker, len: u64) -> Vec<Event> {
    (0..len)
        .map(|i| {
            Event::stored(
                w,
                i,
                (i > 0).then(|| SeqHash(10_000 + i - 1)),
                vec![block(i)],
            )
        })
        .collect()
}

#[test]
fn flush_waits_for_every_event_submitted_before_it() {
    let pool = WriterPool::new(
        Arc::new(DefaultIndexer::default()),
        PoolConfig {
            threads: 2,
            queue_capacity: 8,
        },
    );
    let workers: Vec<Worker> = (0..16).map(|i| Worker::new(i, 0)).collect();
    for w in &workers {
        for e in chain_events(*w, 200) {
            pool.submit(e).unwrap();
        }
    }
    pool.flush();
    // Each chain only links up if its 200 events were applied in order.
    let query: Vec<LocalHash> = (0..200).map(LocalHash).collect();
    let scores = pool.find_matches(&query);
    for w in &workers {
        assert_eq!(scores.get(*w), Some(200));
    }
    assert_eq!(pool.stats().applied, 16 * 200);
    assert_eq!(pool.stats().rejected(), 0);
}

#[test]
fn results_equal_the_reference_fed_directly() {
    let index = Arc::new(DefaultIndexer::default());
    let pool = WriterPool::new(index.clone(), PoolConfig::default());
    let reference = NaiveIndexer::new();
    for id in 0..8u64 {
        let w = Worker::new(id, (id % 2) as u32);
        let mut events = chain_events(w, 40);
        events.push(Event::removed(w, 40, vec![SeqHash(10_000 + id)]));
        for e in events {
            let _ = reference.apply(&e);
            pool.submit(e).unwrap();
        }
    }
    pool.remove_worker(3);
    reference.remove_worker(3);
    pool.flush();
    let query: Vec<LocalHash> = (0..40).map(LocalHash).collect();
    assert_eq!(pool.find_matches(&query), reference.find_matches(&query));
}

#[test]
fn rejections_are_counted_by_kind() {
    let pool = WriterPool::new(Arc::new(DefaultIndexer::default()), PoolConfig::default());
    let w = Worker::new(1, 0);
    pool.submit(Event::stored(w, 0, Some(SeqHash(5)), vec![block(1)]))
        .unwrap();
    pool.submit(Event::stored(w, 1, None, vec![block(1), block(1)]))
        .unwrap();
    pool.submit(Event::stored(w, 2, None, vec![block(1)]))
        .unwrap();
    pool.submit(Event::stored(
        w,
        3,
        None,
        vec![Block::new(LocalHash(9), SeqHash(10_001))],
    ))
    .unwrap();
    pool.submit(Event::removed(w, 4, vec![SeqHash(77)]))
        .unwrap();
    pool.flush();
    let stats = pool.stats();
    assert_eq!(
        (
            stats.rejected_unknown_parent,
            stats.rejected_invalid_sequence,
            stats.rejected_conflict
        ),
        (1, 1, 1)
    );
    assert_eq!((stats.applied, stats.warned_unknown_blocks), (1, 1));
}

#[test]
fn event_ids_are_not_interpreted() {
    // Sequencing is the ingest layer's: the pool applies every event in order, whatever its id,
    // so a wild id cannot make it drop the valid events after it.
    let pool = WriterPool::new(Arc::new(DefaultIndexer::default()), PoolConfig::default());
    let w = Worker::new(1, 0);
    pool.submit(Event::stored(w, u64::MAX - 1, None, vec![block(0)]))
        .unwrap();
    pool.submit(Event::stored(w, 0, Some(SeqHash(10_000)), vec![block(1)]))
        .unwrap();
    pool.submit(Event::removed(w, 0, vec![SeqHash(10_001)]))
        .unwrap();
    pool.flush();
    assert_eq!(pool.stats().applied, 3);
    assert_eq!(
        pool.find_matches(&[LocalHash(0), LocalHash(1)]).get(w),
        Some(1)
    );
}

#[test]
fn try_submit_hands_the_event_back_when_full() {
    // One slow writer (a huge first event) and a queue of one: the third event cannot fit.
    let pool = WriterPool::new(
        Arc::new(DefaultIndexer::default()),
        PoolConfig {
            threads: 1,
            queue_capacity: 1,
        },
    );
    let w = Worker::new(1, 0);
    let big: Vec<Block> = (0..200_000).map(block).collect();
    pool.submit(Event::stored(w, 0, None, big)).unwrap();
    let mut handed_back = None;
    for id in 1..1000 {
        match pool.try_submit(Event::cleared(Worker::new(2, 0), id)) {
            Ok(()) => {}
            Err(SubmitError::Full(event)) => {
                handed_back = Some(event);
                break;
            }
            Err(other) => panic!("unexpected {other}"),
        }
    }
    let event = handed_back.expect("a queue of one must fill while its writer is busy");
    assert_eq!(event.worker, Worker::new(2, 0));
    pool.flush();
}

#[test]
fn drop_applies_queued_events() {
    let index = Arc::new(DefaultIndexer::default());
    {
        let pool = WriterPool::new(index.clone(), PoolConfig::default());
        for e in chain_events(Worker::new(9, 0), 100) {
            pool.submit(e).unwrap();
        }
    }
    assert_eq!(index.block_count(Worker::new(9, 0)), 100);
}

/// Copies and owned events, mixed, through a pool of small queues: every layout ends where the
/// reference does. The copies come from one buffer that is refilled for every event, so a copy
/// that still pointed at the buffer would show.
#[test]
fn copied_and_owned_events_apply_in_submission_order_on_every_layout() {
    use flash_indexer::testing::{Op, Profile, enabled_layouts, scaled_cases, steps_strategy};
    use proptest::test_runner::{Config, TestCaseError, TestRunner};

    let profile = Profile::adversarial();
    let config = Config {
        cases: scaled_cases(64),
        failure_persistence: None,
        ..Config::default()
    };
    let strategy = (
        steps_strategy(profile.steps),
        proptest::prelude::any::<u64>(),
    );
    for factory in enabled_layouts().into_iter().filter(|f| f.primary) {
        let mut runner = TestRunner::new(config.clone());
        let result = runner.run(&strategy, |(steps, seed)| {
            let mut universe = profile.universe(seed);
            let ops = universe.ops(&steps);
            let reference = NaiveIndexer::new();
            let pool = WriterPool::new(
                Arc::<dyn KvIndex>::from((factory.make)()),
                PoolConfig {
                    threads: 2,
                    queue_capacity: 4,
                },
            );
            let mut buffer = Event::cleared(Worker::new(0, 0), 0);
            let mut queries = universe.closing_queries();
            for (i, op) in ops.iter().enumerate() {
                match op {
                    Op::Apply(event) => {
                        let _ = reference.apply(event);
                        if i % 3 == 0 {
                            pool.submit(event.clone()).unwrap();
                        } else {
                            buffer.clone_from(event);
                            pool.submit_copy(&buffer).unwrap();
                        }
                    }
                    Op::RemoveWorker(id) => {
                        reference.remove_worker(*id);
                        pool.remove_worker(*id);
                    }
                    Op::RemoveWorkerDpRank(w) => {
                        reference.remove_worker_dp_rank(*w);
                        pool.remove_worker_dp_rank(*w);
                    }
                    Op::Query(query) => queries.push(query.clone()),
                }
            }
            pool.flush();
            for query in &queries {
                let (got, want) = (pool.find_matches(query), reference.find_matches(query));
                if got != want {
                    return Err(TestCaseError::fail(format!(
                        "{}: {query:?}: {got:?}, want {want:?}",
                        factory.name
                    )));
                }
            }
            Ok(())
        });
        if let Err(failure) = result {
            panic!("{failure}");
        }
    }
}
