//! Approximate mode's memory is bounded by the configured capacity times the workers, however
//! many routing decisions it sees: a counting allocator reads the live heap after filling every
//! worker's capacity and again after routing twenty times as many blocks, under both retention
//! models and over every layout; and workers that come and go leave nothing behind once their
//! predictions expire or they are removed. One test function runs them in turn (tests in one
//! binary run on parallel threads, whose allocations would blur the counts).

use core::time::Duration;
use flash_indexer::testing::{self, CountingAlloc, collect_garbage};
use flash_indexer::{ApproximateIndexer, KvIndex, LocalHash, Retention, Worker};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const WORKERS: u64 = 16;
const CAPACITY: usize = 512;
/// Live bytes a predicted block may cost at most, index and predictions together.
const MAX_BYTES_PER_BLOCK: isize = 1_024;

fn mix(x: u64) -> u64 {
    testing::splitmix64(x.wrapping_add(testing::GOLDEN))
}

/// Routes fresh prompts (a shared 8-block system prompt, then a private tail of 8-40 blocks) to
/// every worker in turn, `blocks` blocks in all, releasing each request two decisions later.
fn route(index: &ApproximateIndexer<Box<dyn KvIndex>>, from: u64, blocks: usize) {
    let system: Vec<LocalHash> = (0..8).map(|i| LocalHash(mix(i))).collect();
    let mut routed = 0;
    let mut running = std::collections::VecDeque::new();
    let mut n = from;
    while routed < blocks {
        n += 1;
        let tail = 8 + mix(n) % 33;
        let prompt: Vec<LocalHash> = system
            .iter()
            .copied()
            .chain((0..tail).map(|i| LocalHash(mix(n << 20 | i))))
            .collect();
        let worker = Worker::new(n % WORKERS, 0);
        running.push_back(index.record_routing(worker, &prompt, Duration::from_millis(n)));
        if running.len() > 2 {
            index
                .release(running.pop_front().unwrap(), Duration::from_millis(n))
                .unwrap();
        }
        routed += prompt.len();
        assert!(index.predicted_blocks(worker) <= CAPACITY);
    }
    for r in running {
        index.release(r, Duration::from_millis(n)).unwrap();
    }
}

/// 100,000 workers from `first` on each get one request, which finishes; then their predictions
/// expire (TTL) or they are removed.
fn short_lived_workers(
    index: &ApproximateIndexer<Box<dyn KvIndex>>,
    retention: Retention,
    first: u64,
) {
    let prompt = [LocalHash(mix(1)), LocalHash(mix(2))];
    let at = Duration::from_secs(first << 20); // later than anything routed before
    for n in first..first + 100_000 {
        let routed = index.record_routing(Worker::new(n, 0), &prompt, at);
        index.release(routed, at).unwrap();
    }
    match retention.ttl_limit() {
        Some(ttl) => index.expire(at + ttl),
        None => (first..first + 100_000).for_each(|n| index.remove_worker(n)),
    }
}

fn live() -> isize {
    collect_garbage();
    CountingAlloc::live_bytes()
}

#[test]
fn memory_is_bounded_by_capacity_times_workers() {
    let bound = CAPACITY * WORKERS as usize;
    for retention in [
        Retention::lru(CAPACITY),
        Retention::ttl(Duration::from_secs(3_600)).with_capacity(CAPACITY),
    ] {
        for layout in testing::enabled_layouts().into_iter().filter(|l| l.primary) {
            let before = live();
            let index = ApproximateIndexer::with_index((layout.make)(), retention);
            // Tables reach their steady sizes within the first twenty fills.
            route(&index, 0, 20 * bound);
            let full = live();
            route(&index, 1 << 30, 40 * bound);
            let after = live();
            let held: usize = (0..WORKERS)
                .map(|w| index.predicted_blocks(Worker::new(w, 0)))
                .sum();
            println!(
                "{} {retention:?}: {held} blocks predicted; {} B after 20 fills, {} B after 40 more",
                layout.name,
                full - before,
                after - before
            );
            assert!(held <= bound, "{}: {held} > {bound}", layout.name);
            assert!(
                after - before <= bound as isize * MAX_BYTES_PER_BLOCK,
                "{}: {} bytes for at most {bound} blocks",
                layout.name,
                after - before
            );
            // Routing forty times the capacity more grows nothing (5% for table slack).
            assert!(
                after <= full + (full - before) / 20,
                "{}: {} B after 20 fills, {} B after 40 more",
                layout.name,
                full - before,
                after - before
            );
            // Waves of 100,000 short-lived workers, each routed one request: once their
            // predictions expire, or they are removed, they leave behind only the index's
            // tables of worker slots, sized by the most workers live at once, which the next
            // wave reuses.
            let steady = live();
            let mut after = Vec::new();
            for wave in 0..3u64 {
                short_lived_workers(&index, retention, 1_000 + wave * 100_000);
                after.push(live() - steady);
            }
            println!("{} {retention:?}: waves leave {after:?} B", layout.name);
            assert!(
                after[0] < 100 * 100_000,
                "{}: {} B left by the first wave",
                layout.name,
                after[0]
            );
            assert!(
                after[2] - after[0] < 64 << 10,
                "{}: waves of workers that are gone leave {after:?} B",
                layout.name
            );
            drop(index);
            let end = live();
            assert!(
                end - before < 64 << 10,
                "{}: {} B left after the index is dropped",
                layout.name,
                end - before
            );
        }
    }
}
