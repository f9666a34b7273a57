//! Memory follows the live state: cycles of store-then-evict with fresh hashes return every
//! layout to zero entries and zero workers, and live heap bytes stop growing.
//!
//! One test function runs every layout in turn: tests in one binary run on parallel threads,
//! and their allocations would blur the byte counts. `FLASH_CHURN_CYCLES` lengthens the run
//! (the `long_churn` test, ignored by default, runs 2000 cycles).

use flash_indexer::Layout;
use flash_indexer::testing::{CountingAlloc, collect_garbage};
use flash_indexer::{Block, Event, Indexer, KvIndex, LocalHash, SeqHash, Worker};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const WORKERS: u64 = 8;
const GROUPS: u64 = 4;
const PREFIX: u64 = 32;
const SUFFIX: u64 = 16;

fn mix(x: u64) -> u64 {
    flash_indexer::testing::splitmix64(x.wrapping_add(flash_indexer::testing::GOLDEN))
}

/// One cycle: every worker stores the shared prefixes (same local hashes for all, its own seq
/// hashes) plus a fresh private suffix under each, queries, then evicts everything tail-first.
fn cycle(index: &dyn KvIndex, round: u64) {
    let mut evictions = Vec::new();
    for w in 0..WORKERS {
        let worker = Worker::new(w, (w % 2) as u32);
        let mut seqs = Vec::new();
        for g in 0..GROUPS {
            let prefix: Vec<Block> = (0..PREFIX)
                .map(|i| {
                    Block::new(
                        LocalHash(mix(g << 32 | i)),
                        SeqHash(mix(w << 48 | g << 32 | i)),
                    )
                })
                .collect();
            let suffix: Vec<Block> = (0..SUFFIX)
                .map(|i| {
                    let fresh = mix(round << 40 ^ w << 32 ^ g << 16 ^ i ^ 0xabc);
                    Block::new(LocalHash(fresh), SeqHash(mix(fresh)))
                })
                .collect();
            let parent = prefix.last().map(|b| b.seq);
            index
                .apply(&Event::stored(worker, 0, None, prefix.clone()))
                .expect("valid");
            index
                .apply(&Event::stored(worker, 0, parent, suffix.clone()))
                .expect("valid");
            let query: Vec<LocalHash> = prefix.iter().chain(&suffix).map(|b| b.local).collect();
            assert_eq!(
                index.find_matches(&query).get(worker),
                Some((PREFIX + SUFFIX) as u32)
            );
            seqs.extend(suffix.iter().rev().map(|b| b.seq));
            seqs.extend(prefix.iter().rev().map(|b| b.seq));
        }
        evictions.push(Event::removed(worker, 1, seqs));
    }
    for event in evictions {
        // Suffixes first, then the shared prefixes: duplicates of prefix seqs are warnings.
        let _ = index.apply(&event);
    }
}

/// Runs `cycles` cycles; returns live heap bytes after each.
fn churn<L: Layout>(cycles: u64) -> Vec<isize> {
    let index = Indexer::<L>::default();
    let mut readings = Vec::new();
    for round in 0..cycles {
        cycle(&index, round);
        assert_eq!(
            index.entries(),
            0,
            "{}: entries left after cycle {round}",
            core::any::type_name::<L>()
        );
        assert_eq!(index.worker_count(), 0, "workers left after cycle {round}");
        collect_garbage();
        readings.push(CountingAlloc::live_bytes());
    }
    readings
}

/// After a warm-up (tables reach their working size), live bytes must not grow.
fn assert_flat<L: Layout>(cycles: u64) {
    let readings = churn::<L>(cycles);
    let warm = readings[readings.len() / 4];
    let max_after = *readings[readings.len() / 4..]
        .iter()
        .max()
        .expect("cycles > 0");
    let name = core::any::type_name::<L>();
    eprintln!(
        "{name}: live bytes after warm-up {warm}, max later {max_after}, last {}",
        readings.last().unwrap()
    );
    // Slack for garbage still waiting in reclamation batches (a few KiB per thread).
    assert!(
        max_after - warm < 256 * 1024,
        "{name}: live bytes grew from {warm} to {max_after} under churn"
    );
}

fn every_layout(cycles: u64) {
    #[cfg(feature = "positional")]
    assert_flat::<flash_indexer::layouts::PositionalMap>(cycles);
    #[cfg(feature = "array")]
    assert_flat::<flash_indexer::layouts::PositionArray<{ flash_indexer::layouts::DEFAULT_DEPTH }>>(
        cycles,
    );
    #[cfg(feature = "radix")]
    assert_flat::<flash_indexer::layouts::RadixTree>(cycles);
}

#[test]
fn memory_is_flat_under_churn() {
    let cycles = std::env::var("FLASH_CHURN_CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(60);
    every_layout(cycles);
}

#[test]
#[ignore = "long: run with --ignored (CI runs it for a bounded time)"]
fn long_churn() {
    every_layout(2000);
}
