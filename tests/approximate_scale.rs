//! Approximate mode's bookkeeping is linear in what a call touches, not in the fleet: expiring
//! 100,000 predicted workers, their first engine events and their removal each take well under a
//! second (a scan of every worker per worker took seconds to minutes). The bounds are loose
//! enough for a loaded machine and tight enough to catch quadratic work; speed itself is
//! measured by `flashbench route`, not here.

use core::time::Duration;
use flash_indexer::{
    ApproximateIndexer, DefaultIndexer, Event, KvIndex, LocalHash, Retention, Worker,
};
use std::time::Instant;

const WORKERS: u64 = 100_000;

/// Wall-clock budget of one phase over all the workers.
fn budget() -> Duration {
    Duration::from_millis(if cfg!(debug_assertions) {
        10_000
    } else {
        1_000
    })
}

/// An index in which every one of [`WORKERS`] workers is predicted to hold one 2-block prompt.
fn predicted_fleet(retention: Retention) -> ApproximateIndexer<DefaultIndexer> {
    let index = ApproximateIndexer::new(retention);
    let prompt = [LocalHash(1), LocalHash(2)];
    for w in 0..WORKERS {
        let routed = index.record_routing(Worker::new(w, 0), &prompt, Duration::ZERO);
        index.release(routed, Duration::ZERO).unwrap();
    }
    index
}

fn timed(what: &str, work: impl FnOnce()) {
    let start = Instant::now();
    work();
    let took = start.elapsed();
    assert!(took < budget(), "{what} took {took:?}");
}

#[test]
fn expiring_every_worker_at_once_is_linear() {
    let index = predicted_fleet(Retention::ttl(Duration::from_secs(10)));
    eprintln!("fleet built");
    timed("expiring 100,000 workers", || {
        index.expire(Duration::from_secs(10))
    });
    assert_eq!(index.find_matches(&[LocalHash(1)]).len(), 0);
    assert_eq!(index.predicted_blocks(Worker::new(7, 0)), 0);
}

#[test]
fn first_events_and_removals_touch_only_their_worker() {
    let index = predicted_fleet(Retention::lru(16));
    timed("100,000 first events", || {
        for w in 0..WORKERS {
            index.apply(&Event::cleared(Worker::new(w, 0), 0)).unwrap();
        }
    });
    assert!(index.is_exact(Worker::new(WORKERS - 1, 0)));
    assert_eq!(index.find_matches(&[LocalHash(1)]).len(), 0);

    let index = predicted_fleet(Retention::lru(16));
    timed("removing 100,000 workers", || {
        for w in 0..WORKERS {
            index.remove_worker(w);
        }
    });
    assert_eq!(index.find_matches(&[LocalHash(1)]).len(), 0);
}
