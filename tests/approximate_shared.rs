//! Router replicas sharing decisions (`SharedApproximateIndexer`): they converge to the
//! predictions of one index that made every decision, apply each entry once, and survive
//! malformed entries, late starts and a failing transport. Time is injected; nothing sleeps.

use core::time::Duration;
use flash_indexer::approx::decision::{Entry, MalformedEntry};
use flash_indexer::approx::{
    DecisionLog, LogError, LogPosition, MemoryLog, ShareStats, SharedApproximateIndexer,
};
use flash_indexer::testing::scaled_cases;
use flash_indexer::{
    ApproximateIndexer, DefaultIndexer, KvIndex, LocalHash, Retention, Routed, Worker,
};
use proptest::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

type Replica<L> = SharedApproximateIndexer<DefaultIndexer, L>;

const WORKERS: u64 = 4;

/// Prompts sharing prefixes: chain `k` is `k % 3` blocks of a common system prompt then its own.
fn chain(k: u64) -> Vec<LocalHash> {
    let shared = (0..k % 3).map(|i| LocalHash(1_000 + i));
    let own = (0..1 + k % 4).map(|i| LocalHash(k * 100 + i));
    shared.chain(own).collect()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Every worker's score for every chain, and its predicted blocks.
fn view(
    find: impl Fn(&[LocalHash]) -> flash_indexer::OverlapScores,
    predicted: impl Fn(Worker) -> usize,
) -> Vec<Vec<Option<u32>>> {
    let mut out: Vec<Vec<Option<u32>>> = (0..12)
        .map(|k| {
            let scores = find(&chain(k));
            (0..WORKERS)
                .map(|w| scores.get(Worker::new(w, 0)))
                .collect()
        })
        .collect();
    out.push(
        (0..WORKERS)
            .map(|w| Some(predicted(Worker::new(w, 0)) as u32))
            .collect(),
    );
    out
}

fn replica_view<L: DecisionLog>(r: &Replica<L>) -> Vec<Vec<Option<u32>>> {
    view(
        |q| r.find_matches(q),
        |w| r.approximate().predicted_blocks(w),
    )
}

#[derive(Clone, Debug)]
enum Op {
    Route {
        replica: usize,
        worker: u64,
        chain: u64,
    },
    Release {
        replica: usize,
        nth: usize,
    },
}

fn op() -> impl Strategy<Value = (u64, Op)> {
    let route = (0..3usize, 0..WORKERS, 0..12u64).prop_map(|(replica, worker, chain)| Op::Route {
        replica,
        worker,
        chain,
    });
    let release = (0..3usize, 0..4usize).prop_map(|(replica, nth)| Op::Release { replica, nth });
    (0..40u64, prop_oneof![3 => route, 2 => release])
}

fn retention() -> impl Strategy<Value = Retention> {
    prop_oneof![
        Just(Retention::ttl(secs(60))),
        (1..12usize).prop_map(|c| Retention::default().with_capacity(c)),
        (1..12usize).prop_map(Retention::lru),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(scaled_cases(128)))]

    /// Replicas that sync before each decision apply every decision in the log's order, so
    /// each holds exactly what one index that made every decision holds.
    #[test]
    fn synced_replicas_hold_what_one_index_holds(
        retention in retention(),
        ops in proptest::collection::vec(op(), 0..60),
    ) {
        let log = Arc::new(MemoryLog::new(Duration::ZERO, secs(3_600)));
        let replicas: Vec<Replica<_>> =
            (0..3).map(|_| SharedApproximateIndexer::new(retention, log.clone())).collect();
        let one: ApproximateIndexer<DefaultIndexer> = ApproximateIndexer::new(retention);
        let mut running: Vec<Vec<(Routed, Routed)>> = vec![Vec::new(); 3];
        let mut now = 0;
        for (step, op) in ops {
            now += step;
            let now = secs(now);
            match op {
                Op::Route { replica, worker, chain: k } => {
                    replicas[replica].sync(now).unwrap();
                    let worker = Worker::new(worker, 0);
                    let shared = replicas[replica].record_routing(worker, &chain(k), now);
                    let alone = one.record_routing(worker, &chain(k), now);
                    running[replica].push((shared, alone));
                }
                Op::Release { replica, nth } => {
                    if nth < running[replica].len() {
                        replicas[replica].sync(now).unwrap();
                        let (shared, alone) = running[replica].remove(nth);
                        replicas[replica].release(shared, now).unwrap();
                        one.release(alone, now).unwrap();
                    }
                }
            }
        }
        // Expiry runs on each replica's own clock: brought to the same time, they agree.
        one.expire(secs(now));
        let expected = view(|q| one.find_matches(q), |w| one.predicted_blocks(w));
        for r in &replicas {
            r.sync(secs(now)).unwrap();
            r.expire(secs(now));
            prop_assert_eq!(&replica_view(r), &expected);
            let stats = r.stats();
            prop_assert_eq!((stats.malformed, stats.duplicates, stats.unmatched_releases), (0, 0, 0));
        }
    }
}

/// A log that hands every entry out twice (as a transport that re-delivers would).
struct Twice(MemoryLog);

impl DecisionLog for Twice {
    fn append(&self, at: Duration, entry: &[u8]) -> Result<(), LogError> {
        self.0.append(at, entry)
    }
    fn read(
        &self,
        after: Option<LogPosition>,
        now: Duration,
        max: usize,
    ) -> Result<Vec<(LogPosition, Vec<u8>)>, LogError> {
        let entries = self.0.read(after, now, max)?;
        Ok(entries
            .iter()
            .flat_map(|e| [e.clone(), e.clone()])
            .collect())
    }
}

#[test]
fn a_replayed_entry_is_applied_once() {
    let log = Arc::new(Twice(MemoryLog::new(Duration::ZERO, secs(3_600))));
    let a: Replica<_> = SharedApproximateIndexer::new(Retention::lru(8), log.clone());
    let b: Replica<_> = SharedApproximateIndexer::new(Retention::lru(8), log.clone());
    let routed = a.record_routing(Worker::new(1, 0), &chain(5), secs(1));
    a.release(routed, secs(2)).unwrap();
    assert_eq!(b.sync(secs(2)), Ok(2));
    let stats = b.stats();
    assert_eq!((stats.applied, stats.duplicates), (2, 2));
    assert_eq!(replica_view(&b), replica_view(&a));
}

#[test]
fn malformed_entries_are_refused_and_counted_and_the_rest_applied() {
    let log = Arc::new(MemoryLog::new(Duration::ZERO, secs(3_600)));
    let a: Replica<_> = SharedApproximateIndexer::new(Retention::default(), log.clone());
    let b: Replica<_> = SharedApproximateIndexer::new(Retention::default(), log.clone());
    log.append(secs(0), b"not an entry").unwrap();
    let mut truncated = Entry::decode(&{
        a.record_routing(Worker::new(2, 0), &chain(7), secs(1));
        log.read(None, secs(1), 16).unwrap()[1].1.clone()
    })
    .unwrap()
    .encode();
    truncated.pop();
    assert_eq!(Entry::decode(&truncated), Err(MalformedEntry::Truncated));
    log.append(secs(1), &truncated).unwrap();
    log.append(secs(1), &[]).unwrap();
    assert_eq!(b.sync(secs(1)), Ok(1));
    assert_eq!(b.stats().malformed, 3);
    assert_eq!(
        b.find_matches(&chain(7)).best(),
        Some((Worker::new(2, 0), chain(7).len() as u32))
    );
}

#[test]
fn a_late_replica_catches_up_from_the_kept_window() {
    // Entries older than 10 s behind the newest are trimmed.
    let log = Arc::new(MemoryLog::new(Duration::ZERO, secs(10)));
    let a: Replica<_> = SharedApproximateIndexer::new(Retention::lru(64), log.clone());
    let old = a.record_routing(Worker::new(0, 0), &chain(1), secs(0));
    let recent = a.record_routing(Worker::new(1, 0), &chain(2), secs(30));
    assert_eq!(log.len(), 1, "the routing at 0 s was trimmed");
    a.release(old, secs(31)).unwrap();
    a.release(recent, secs(31)).unwrap();

    let late: Replica<_> = SharedApproximateIndexer::new(Retention::lru(64), log.clone());
    assert_eq!(late.sync(secs(31)), Ok(2));
    assert_eq!(late.stats().unmatched_releases, 1);
    assert_eq!(
        late.find_matches(&chain(2)).best(),
        Some((Worker::new(1, 0), chain(2).len() as u32))
    );
    assert_eq!(late.find_matches(&chain(1)).get(Worker::new(0, 0)), None);
}

/// A log whose transport can be switched off.
struct Flaky {
    log: MemoryLog,
    down: AtomicBool,
}

impl DecisionLog for Flaky {
    fn append(&self, at: Duration, entry: &[u8]) -> Result<(), LogError> {
        if self.down.load(Ordering::Relaxed) {
            return Err(LogError("connection refused".into()));
        }
        self.log.append(at, entry)
    }
    fn read(
        &self,
        after: Option<LogPosition>,
        now: Duration,
        max: usize,
    ) -> Result<Vec<(LogPosition, Vec<u8>)>, LogError> {
        if self.down.load(Ordering::Relaxed) {
            return Err(LogError("connection refused".into()));
        }
        self.log.read(after, now, max)
    }
}

#[test]
fn replicas_keep_routing_while_the_log_is_down_and_share_again_after() {
    let log = Arc::new(Flaky {
        log: MemoryLog::new(Duration::ZERO, secs(3_600)),
        down: AtomicBool::new(true),
    });
    let a: Replica<_> = SharedApproximateIndexer::new(Retention::default(), log.clone());
    let b: Replica<_> = SharedApproximateIndexer::new(Retention::default(), log.clone());
    a.record_routing(Worker::new(3, 0), &chain(4), secs(1));
    assert_eq!(
        a.find_matches(&chain(4)).best().map(|b| b.0),
        Some(Worker::new(3, 0))
    );
    assert!(b.sync(secs(1)).is_err());
    assert_eq!(b.find_matches(&chain(4)).best(), None);

    log.down.store(false, Ordering::Relaxed);
    a.record_routing(Worker::new(1, 0), &chain(9), secs(2));
    assert_eq!(b.sync(secs(2)), Ok(1));
    assert_eq!(
        b.find_matches(&chain(9)).best().map(|b| b.0),
        Some(Worker::new(1, 0))
    );
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sa.published, sa.publish_failures), (1, 1));
    assert_eq!((sb.applied, sb.read_failures), (1, 1));
    assert_eq!(ShareStats::default().applied, 0);
}

#[test]
fn a_delayed_log_shows_decisions_only_after_the_delay() {
    let log = Arc::new(MemoryLog::new(Duration::from_millis(20), secs(3_600)));
    let a: Replica<_> = SharedApproximateIndexer::new(Retention::default(), log.clone());
    let b: Replica<_> = SharedApproximateIndexer::new(Retention::default(), log.clone());
    let t = secs(5);
    a.record_routing(Worker::new(0, 0), &chain(3), t);
    assert_eq!(b.sync(t + Duration::from_millis(19)), Ok(0));
    assert_eq!(b.sync(t + Duration::from_millis(20)), Ok(1));
    // Expiry counts from the decision's own time, not from when b heard of it.
    b.expire(t + secs(120));
    assert_eq!(b.find_matches(&chain(3)).best(), None);
}

#[test]
fn a_foreign_routed_is_refused_and_not_published() {
    let log = Arc::new(MemoryLog::new(Duration::ZERO, secs(3_600)));
    let a: Replica<_> = SharedApproximateIndexer::new(Retention::lru(8), log.clone());
    let b: Replica<_> = SharedApproximateIndexer::new(Retention::lru(8), log.clone());
    let routed = a.record_routing(Worker::new(0, 0), &chain(1), secs(1));
    assert!(b.release(routed, secs(2)).is_err());
    assert_eq!(b.stats().published, 0);
}

#[test]
fn a_stopped_replicas_running_requests_are_released_when_their_lease_ends() {
    let log = Arc::new(MemoryLog::new(Duration::ZERO, secs(3_600)));
    // Worker 0 holds 4 blocks.
    let a: Replica<_> = SharedApproximateIndexer::new(Retention::lru(4), log.clone());
    let b: Replica<_> =
        SharedApproximateIndexer::new(Retention::lru(4), log.clone()).with_pin_lease(secs(60));
    let first: Vec<LocalHash> = (0..4).map(LocalHash).collect();
    let second: Vec<LocalHash> = (10..14).map(LocalHash).collect();
    a.record_routing(Worker::new(0, 0), &first, secs(1));
    drop(a); // stops without releasing
    b.sync(secs(1)).unwrap();
    // Pinned by a's running request: b's own decision finds no room.
    b.record_routing(Worker::new(0, 0), &second, secs(30));
    assert_eq!(b.find_matches(&second).best(), None);
    b.sync(secs(61)).unwrap();
    assert_eq!(b.stats().expired_pins, 1);
    b.record_routing(Worker::new(0, 0), &second, secs(62));
    assert_eq!(b.find_matches(&second).best(), Some((Worker::new(0, 0), 4)));
    assert_eq!(b.find_matches(&first).best(), None);
}
