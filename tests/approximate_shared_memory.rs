//! Router replicas sharing decisions keep memory flat at the retention bound: the log keeps its
//! window, each replica its predictions (bounded by capacity), the other replicas' running
//! requests until their releases, and one number per origin. A counting allocator reads the
//! live heap once the log's window is full and again after four times as many decisions. One
//! test function (tests in one binary run on parallel threads, whose allocations would blur
//! the counts).

use core::time::Duration;
use flash_indexer::approx::{MemoryLog, SharedApproximateIndexer};
use flash_indexer::testing::{self, CountingAlloc, collect_garbage};
use flash_indexer::{DefaultIndexer, LocalHash, Retention, Routed, Worker};
use std::collections::VecDeque;
use std::sync::Arc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const REPLICAS: usize = 3;
const WORKERS: u64 = 8;
const CAPACITY: usize = 256;
/// The log keeps ten minutes; a decision every 100 ms fills it with 6,000 entries.
const WINDOW: Duration = Duration::from_secs(600);
const STEP_MS: u64 = 100;

type Replica = SharedApproximateIndexer<DefaultIndexer, Arc<MemoryLog>>;

fn mix(x: u64) -> u64 {
    testing::splitmix64(x.wrapping_add(testing::GOLDEN))
}

/// Decisions `from..to`, dealt to the replicas in turn (each syncs first); every request is
/// released by its replica three decisions later.
fn route(replicas: &[Replica], running: &mut VecDeque<(usize, Routed)>, from: u64, to: u64) {
    let system: Vec<LocalHash> = (0..4).map(|i| LocalHash(mix(i))).collect();
    for n in from..to {
        let now = Duration::from_millis(n * STEP_MS);
        let r = n as usize % REPLICAS;
        replicas[r].sync(now).unwrap();
        let prompt: Vec<LocalHash> = system
            .iter()
            .copied()
            .chain((0..4 + mix(n) % 12).map(|i| LocalHash(mix(n << 20 | i))))
            .collect();
        let worker = Worker::new(mix(n) % WORKERS, 0);
        running.push_back((r, replicas[r].record_routing(worker, &prompt, now)));
        if running.len() > 3 {
            let (r, routed) = running.pop_front().unwrap();
            replicas[r].release(routed, now).unwrap();
        }
    }
}

fn live() -> isize {
    collect_garbage();
    CountingAlloc::live_bytes()
}

#[test]
fn shared_replicas_stay_flat_at_the_retention_bound() {
    for retention in [
        Retention::ttl(Duration::from_secs(120)).with_capacity(CAPACITY),
        Retention::lru(CAPACITY),
    ] {
        let before = live();
        let log = Arc::new(MemoryLog::new(Duration::ZERO, WINDOW));
        let replicas: Vec<Replica> = (0..REPLICAS)
            .map(|_| SharedApproximateIndexer::new(retention, log.clone()))
            .collect();
        let mut running = VecDeque::new();
        // Three windows, so that the log and every table reach their steady sizes.
        let warm = 3 * WINDOW.as_millis() as u64 / STEP_MS;
        route(&replicas, &mut running, 0, warm);
        let full = live();
        route(&replicas, &mut running, warm, 5 * warm);
        let after = live();
        let kept = log.len();
        println!(
            "{retention:?}: {} B after {warm} decisions, {} B after {} more; the log keeps {kept}",
            full - before,
            after - before,
            4 * warm
        );
        // A decision and, under LRU, its release: at most two entries a step in the window.
        let steps = (WINDOW.as_millis() as u64 / STEP_MS) as usize;
        assert!(kept <= 2 * steps + 8, "{kept} entries kept");
        for r in &replicas {
            let stats = r.stats();
            assert_eq!((stats.malformed, stats.duplicates), (0, 0));
            assert!(stats.applied > 0);
        }
        // Four times as many decisions grow nothing (10% for table slack).
        assert!(
            after <= full + (full - before) / 10,
            "{retention:?}: {} B after warming, {} B after four times as many decisions",
            full - before,
            after - before
        );
        drop((replicas, running, log));
        let end = live();
        assert!(end - before < 64 << 10, "{} B left", end - before);
    }
}
