//! Loom models of the crate's own concurrent code, compiled into the crate (so that they reach
//! its internals without making them public) under `cfg(all(test, loom))`. Run with
//! `RUSTFLAGS="--cfg loom --cfg crossbeam_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --lib loom`.

use crate::LocalHash;
use crate::index_core::{Key, Storage, Tree};
use crate::layouts::RadixTree;

// The models call the seam directly, keeping its contract (I1) by hand: a parent handle is
// passed only while its slot is in the parent, and a slot is removed once from the node `add`
// returned for it. Each `unsafe` below is one such call.
use loom::sync::Arc;
use loom::thread;

const KEY: Key = Key { pos: 0, canon: 0 };

/// A reader walks root -> A -> B while the only worker leaves B then A, so that the writer
/// unlinks and retires both nodes. The reader must never touch freed memory (loom tracks
/// every access through crossbeam-epoch's loom atomics) and sees either the worker or nothing.
#[test]
fn radix_reader_walks_through_nodes_being_unlinked() {
    loom::model(|| {
        let tree = Arc::new(RadixTree::default());
        let guard = tree.guard();
        // SAFETY: the seam contract (I1) as kept by hand, see the top of the file.
        let (a, _) = unsafe { tree.add(KEY, LocalHash(1), None, 7, &guard) };
        // SAFETY: the seam contract (I1) as kept by hand, see the top of the file.
        let (b, _) = unsafe { tree.add(KEY, LocalHash(2), Some(a), 7, &guard) };
        drop(guard);

        let reader = {
            let tree = tree.clone();
            thread::spawn(move || {
                let guard = tree.guard();
                let Some(a) = tree.child(None, LocalHash(1), &guard) else {
                    return;
                };
                let at_a = tree.workers(a, &guard).map(|s| s.to_vec());
                assert!(matches!(at_a.as_deref(), None | Some([7])));
                if let Some(b) = tree.child(Some(a), LocalHash(2), &guard) {
                    let at_b = tree.workers(b, &guard).map(|s| s.to_vec());
                    assert!(matches!(at_b.as_deref(), None | Some([7])));
                }
            })
        };

        let guard = tree.guard();
        // SAFETY: the seam contract (I1) as kept by hand, see the top of the file.
        assert!(unsafe { tree.remove(KEY, b, 7, &guard) });
        // SAFETY: the seam contract (I1) as kept by hand, see the top of the file.
        assert!(unsafe { tree.remove(KEY, a, 7, &guard) });
        drop(guard);
        reader.join().unwrap();
        assert_eq!(tree.entries(), 0);
    });
}

/// Two writers add different workers to the same child that does not exist yet: one creates
/// it, the other finds it, and both workers end up in the one node.
#[test]
fn radix_two_writers_create_the_same_child() {
    loom::model(|| {
        let tree = Arc::new(RadixTree::default());
        let writers: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|slot| {
                let tree = tree.clone();
                thread::spawn(move || {
                    let guard = tree.guard();
                    // SAFETY: the seam contract (I1) as kept by hand, see the top of the file.
                    unsafe { tree.add(KEY, LocalHash(9), None, slot, &guard) }
                })
            })
            .collect();
        let handles: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        assert!(handles.iter().all(|(_, new)| *new));
        assert_eq!(
            handles[0].0, handles[1].0,
            "one node for one local hash under one parent"
        );
        assert_eq!(tree.entries(), 1);
        let guard = tree.guard();
        let node = tree.child(None, LocalHash(9), &guard).expect("linked");
        assert_eq!(
            tree.workers(node, &guard).map(|s| s.to_vec()),
            Some(vec![1, 2])
        );
    });
}

/// One writer leaves a node (unlinking it) while another joins it: the joining worker must end
/// up in a linked node, never in a retired one.
#[test]
fn radix_join_races_unlink() {
    loom::model(|| {
        let tree = Arc::new(RadixTree::default());
        let guard = tree.guard();
        // SAFETY: the seam contract (I1) as kept by hand, see the top of the file.
        let (a, _) = unsafe { tree.add(KEY, LocalHash(5), None, 1, &guard) };
        drop(guard);
        let joiner = {
            let tree = tree.clone();
            thread::spawn(move || {
                let guard = tree.guard();
                // SAFETY: the seam contract (I1) as kept by hand, see the top of the file.
                unsafe { tree.add(KEY, LocalHash(5), None, 2, &guard) }.0
            })
        };
        let guard = tree.guard();
        // SAFETY: the seam contract (I1) as kept by hand, see the top of the file.
        assert!(unsafe { tree.remove(KEY, a, 1, &guard) });
        drop(guard);
        let joined = joiner.join().unwrap();
        let guard = tree.guard();
        let node = tree
            .child(None, LocalHash(5), &guard)
            .expect("worker 2's node is linked");
        assert_eq!(node.handle(), joined);
        assert_eq!(
            tree.workers(node, &guard).map(|s| s.to_vec()),
            Some(vec![2])
        );
        assert_eq!(tree.entries(), 1);
    });
}

/// A second worker joins a node while a reader reads its set: the `One -> Many` upgrade is one
/// atomic replacement, so the reader sees the old set or the new one, never a mix or a freed one.
#[test]
fn radix_worker_set_upgrade_against_a_reader() {
    loom::model(|| {
        let tree = Arc::new(RadixTree::default());
        let guard = tree.guard();
        // SAFETY: the seam contract (I1) as kept by hand, see the top of the file.
        unsafe { tree.add(KEY, LocalHash(3), None, 4, &guard) };
        drop(guard);
        let reader = {
            let tree = tree.clone();
            thread::spawn(move || {
                let guard = tree.guard();
                let node = tree.child(None, LocalHash(3), &guard).expect("linked");
                let seen = tree.workers(node, &guard).map(|s| s.to_vec());
                assert!(
                    matches!(seen.as_deref(), Some([4]) | Some([2, 4])),
                    "{seen:?}"
                );
            })
        };
        let guard = tree.guard();
        // SAFETY: the seam contract (I1) as kept by hand, see the top of the file.
        unsafe { tree.add(KEY, LocalHash(3), None, 2, &guard) };
        drop(guard);
        reader.join().unwrap();
    });
}

/// The core's hole cascade on the radix index: a hole in the middle of a worker's chain is
/// detached deepest-first and re-stored shallowest-first while a query walks the chain. The
/// query never sees more than the chain's 3 blocks nor loses block 0 (never removed), and no
/// interleaving touches freed memory while nodes are pruned and re-created.
#[test]
fn core_hole_cascade_against_a_query() {
    use crate::{Block, Event, KvIndex, RadixIndexer, SeqHash, Worker};
    loom::model(|| {
        let index = Arc::new(RadixIndexer::default());
        let w = Worker::new(1, 0);
        let block = |i: u64| Block::new(LocalHash(i), SeqHash(10 + i));
        index
            .apply(&Event::stored(
                w,
                0,
                None,
                vec![block(0), block(1), block(2)],
            ))
            .unwrap();
        let reader = {
            let index = index.clone();
            thread::spawn(move || {
                let depth = index
                    .find_matches(&[LocalHash(0), LocalHash(1), LocalHash(2)])
                    .get(w);
                assert!(matches!(depth, Some(1..=3)), "{depth:?}");
            })
        };
        index
            .apply(&Event::removed(w, 1, vec![SeqHash(11)]))
            .unwrap();
        index
            .apply(&Event::stored(w, 2, Some(SeqHash(10)), vec![block(1)]))
            .unwrap();
        reader.join().unwrap();
        assert_eq!(
            index
                .find_matches(&[LocalHash(0), LocalHash(1), LocalHash(2)])
                .get(w),
            Some(3)
        );
        assert_eq!(index.entries(), 3);
    });
}

/// The writer pool's flush barrier: whatever each writer did before counting down is visible
/// once `wait` returns.
#[test]
fn flush_latch_waits_for_every_writer() {
    use crate::latch::Latch;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    loom::model(|| {
        let latch = Arc::new(Latch::new(2));
        let applied = Arc::new(AtomicUsize::new(0));
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (latch, applied) = (latch.clone(), applied.clone());
                thread::spawn(move || {
                    applied.fetch_add(1, Ordering::Relaxed);
                    latch.count_down();
                })
            })
            .collect();
        latch.wait();
        assert_eq!(applied.load(Ordering::Relaxed), 2);
        for w in writers {
            w.join().unwrap();
        }
    });
}
