//! Writers on disjoint workers and readers at once; the end state equals the reference, and no
//! reader ever sees a depth a worker never had.

use flash_indexer::{Block, Event, KvIndex, LocalHash, NaiveIndexer, SeqHash, Worker};
use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering};

const DEPTH: u64 = 96;
const ROUNDS: u64 = 60;

fn local(i: u64) -> LocalHash {
    LocalHash(i * 7 + 1)
}

/// Worker `w` stores the shared chain to a depth that depends on the round, punches holes and
/// refills them, and clears now and then. Its depth never exceeds `limit(w)`.
fn limit(w: u64) -> u64 {
    DEPTH - 8 * w
}

fn events_of(w: Worker) -> Vec<Event> {
    let salt = (w.id + 1) << 32;
    let seq = |i: u64| SeqHash(salt + i);
    let mut events = Vec::new();
    let mut id = 0;
    for round in 0..ROUNDS {
        let depth = 1 + (round * 13 + w.id * 5) % limit(w.id);
        let blocks: Vec<Block> = (0..depth).map(|i| Block::new(local(i), seq(i))).collect();
        events.push(Event::stored(w, id, None, blocks));
        id += 1;
        let hole = (round * 31) % depth;
        events.push(Event::removed(w, id, vec![seq(hole)]));
        id += 1;
        if round % 3 == 0 {
            let parent = hole.checked_sub(1).map(seq);
            events.push(Event::stored(
                w,
                id,
                parent,
                vec![Block::new(local(hole), seq(hole))],
            ));
            id += 1;
        }
        if round % 7 == 6 {
            events.push(Event::cleared(w, id));
            id += 1;
        }
    }
    events
}

fn stress<I: KvIndex + Default>() {
    let index = I::default();
    let workers: Vec<Worker> = (0..4).map(|i| Worker::new(i, 0)).collect();
    let query: Vec<LocalHash> = (0..DEPTH).map(local).collect();
    let writing = AtomicUsize::new(workers.len());
    let start = Barrier::new(workers.len() + 2);
    std::thread::scope(|s| {
        for &w in &workers {
            let (index, start, writing) = (&index, &start, &writing);
            s.spawn(move || {
                start.wait();
                for e in events_of(w) {
                    let _ = index.apply(&e);
                }
                writing.fetch_sub(1, Ordering::Release);
            });
        }
        for _ in 0..2 {
            let (index, start, writing, query) = (&index, &start, &writing, &query);
            s.spawn(move || {
                start.wait();
                while writing.load(Ordering::Acquire) > 0 {
                    for (w, d) in index.find_matches(query).iter() {
                        assert!(
                            u64::from(d) <= limit(w.id),
                            "phantom: {w} reported at {d} > {}",
                            limit(w.id)
                        );
                    }
                }
            });
        }
    });
    let reference = NaiveIndexer::new();
    for &w in &workers {
        for e in events_of(w) {
            let _ = reference.apply(&e);
        }
    }
    for len in [1, 7, 8, 9, 33, 64, DEPTH] {
        assert_eq!(
            index.find_matches(&query[..len as usize]),
            reference.find_matches(&query[..len as usize])
        );
    }
    for &w in &workers {
        assert_eq!(index.block_count(w), reference.block_count(w));
    }
}

#[cfg(feature = "positional")]
#[test]
fn positional_writers_and_readers() {
    for _ in 0..5 {
        stress::<flash_indexer::PositionalIndexer>();
    }
}

#[cfg(feature = "array")]
#[test]
fn array_writers_and_readers() {
    for _ in 0..5 {
        stress::<flash_indexer::ArrayIndexer>();
    }
}

#[cfg(feature = "array")]
#[test]
fn shallow_array_writers_and_readers() {
    for _ in 0..5 {
        stress::<flash_indexer::layouts::ArrayIndexerOf<16>>();
    }
}

#[cfg(feature = "radix")]
#[test]
fn radix_writers_and_readers() {
    for _ in 0..5 {
        stress::<flash_indexer::RadixIndexer>();
    }
}
