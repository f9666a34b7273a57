//! An index is an ordinary Rust value: moving it after it holds blocks (returning it from a
//! function, wrapping it in `ApproximateIndexer::with_index`, taking it out of a `Box`) must not
//! leave anything inside it pointing at where it was. Each layout is filled inside a `Box`,
//! moved out (the `Box` freed and its memory overwritten), then emptied and filled again, and
//! must answer as the reference does throughout.

use flash_indexer::{
    ArrayIndexer, Block, Event, KvIndex, LocalHash, NaiveIndexer, PositionalIndexer, RadixIndexer,
    SeqHash, Worker, hash,
};
use std::sync::mpsc;
use std::time::Duration;

/// Worker `w`'s chain: a shared first block, then `1 + w % 3` blocks of its own.
fn chain(w: u64) -> Vec<Block> {
    let locals: Vec<LocalHash> = std::iter::once(LocalHash(7))
        .chain((0..=w % 3).map(|i| LocalHash(1000 * w + i)))
        .collect();
    let seqs: Vec<SeqHash> = hash::seq_hashes(&locals);
    locals
        .iter()
        .zip(&seqs)
        .map(|(&l, &s)| Block::new(l, s))
        .collect()
}

fn fill(index: &dyn KvIndex, workers: u64) {
    for w in 0..workers {
        index
            .apply(&Event::stored(Worker::new(w, 0), 0, None, chain(w)))
            .unwrap();
    }
}

/// Removes every worker's chain tail first, so every node empties and is pruned to the root.
fn empty(index: &dyn KvIndex, workers: u64) {
    for w in 0..workers {
        let seqs = chain(w).iter().rev().map(|b| b.seq).collect();
        index
            .apply(&Event::removed(Worker::new(w, 0), 1, seqs))
            .unwrap();
    }
}

fn agrees(index: &dyn KvIndex, reference: &NaiveIndexer, workers: u64, when: &str) {
    for w in 0..workers {
        let query: Vec<LocalHash> = chain(w).iter().map(|b| b.local).collect();
        assert_eq!(
            index.find_matches(&query).to_sorted_vec(),
            reference.find_matches(&query).to_sorted_vec(),
            "{when}, worker {w}"
        );
    }
}

fn moved_out_of_a_box<I: KvIndex + Default + Send + 'static>(name: &str) {
    const WORKERS: u64 = 64;
    let boxed = Box::new(I::default());
    fill(&*boxed, WORKERS);
    let index: I = *boxed;
    // Whatever the freed box held is overwritten before the index is used again.
    let junk: Vec<Vec<u8>> = (0..64)
        .map(|_| vec![0xff; std::mem::size_of::<I>()])
        .collect();
    // On its own thread, so that a lock read from freed memory fails the test instead of
    // hanging it.
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let reference = NaiveIndexer::new();
        fill(&reference, WORKERS);
        agrees(&index, &reference, WORKERS, "moved");
        empty(&index, WORKERS);
        empty(&reference, WORKERS);
        agrees(&index, &reference, WORKERS, "emptied");
        fill(&index, WORKERS);
        fill(&reference, WORKERS);
        agrees(&index, &reference, WORKERS, "filled again");
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{name}: the moved index did not finish: {e}"));
    drop(junk);
}

#[test]
fn every_layout_can_be_moved_after_it_holds_blocks() {
    moved_out_of_a_box::<PositionalIndexer>("positional");
    moved_out_of_a_box::<ArrayIndexer>("array");
    moved_out_of_a_box::<RadixIndexer>("radix");
}
