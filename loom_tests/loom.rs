//! Loom models of the crate's own concurrent code. Run with
//! `RUSTFLAGS="--cfg loom --cfg crossbeam_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom`.
//! Without `--cfg loom` this file compiles to nothing.
#![cfg(loom)]

use flash_indexer::LocalHash;
use flash_indexer::core::{Key, Layout, Tree};
use flash_indexer::layouts::radix::RadixTree;
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
        let (a, _) = tree.add(KEY, LocalHash(1), None, 7, &guard);
        let (b, _) = tree.add(KEY, LocalHash(2), Some(a), 7, &guard);
        drop(guard);

        let reader = {
            let tree = tree.clone();
            thread::spawn(move || {
                let guard = tree.guard();
                let Some(a) = tree.child(None, LocalHash(1), &guard) else {
                    return;
                };
                let at_a = tree.workers(a, &guard).map(|s| s.as_slice().to_vec());
                assert!(matches!(at_a.as_deref(), None | Some([7])));
                if let Some(b) = tree.child(Some(a), LocalHash(2), &guard) {
                    let at_b = tree.workers(b, &guard).map(|s| s.as_slice().to_vec());
                    assert!(matches!(at_b.as_deref(), None | Some([7])));
                }
            })
        };

        let guard = tree.guard();
        assert!(tree.remove(KEY, b, 7, &guard));
        assert!(tree.remove(KEY, a, 7, &guard));
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
                    tree.add(KEY, LocalHash(9), None, slot, &guard)
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
            tree.workers(node, &guard).map(|s| s.as_slice().to_vec()),
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
        let (a, _) = tree.add(KEY, LocalHash(5), None, 1, &guard);
        drop(guard);
        let joiner = {
            let tree = tree.clone();
            thread::spawn(move || {
                let guard = tree.guard();
                tree.add(KEY, LocalHash(5), None, 2, &guard).0
            })
        };
        let guard = tree.guard();
        assert!(tree.remove(KEY, a, 1, &guard));
        drop(guard);
        let joined = joiner.join().unwrap();
        let guard = tree.guard();
        let node = tree
            .child(None, LocalHash(5), &guard)
            .expect("worker 2's node is linked");
        assert_eq!(node.handle(), joined);
        assert_eq!(
            tree.workers(node, &guard).map(|s| s.as_slice().to_vec()),
            Some(vec![2])
        );
        assert_eq!(tree.entries(), 1);
    });
}
