//! Loom models of the crate's own concurrent code, compiled into the crate (so that they reach
//! its internals without making them public) under `cfg(all(test, loom))`. Run with
//! `RUSTFLAGS="--cfg loom --cfg crossbeam_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --lib loom`.

use crate::index_core::{Key, RunKeys, Storage, Tree};
use crate::layouts::RadixTree;
use crate::{Block, LocalHash, SeqHash};

// The models call the seam directly, keeping its contract (I1) by hand: a parent handle is
// passed only while its slot is in the parent, and a slot is removed once from the blocks
// `add_run` returned for it. Each `unsafe` below is one such call.
use loom::sync::Arc;
use loom::thread;

fn run(locals: &[u64]) -> (Vec<Key>, Vec<LocalHash>) {
    let keys = vec![Key { pos: 0, canon: 0 }; locals.len()];
    (keys, locals.iter().map(|&l| LocalHash(l)).collect())
}

/// Adds `slot` to the run `locals` from the root; returns its handles.
fn add(tree: &RadixTree, locals: &[u64], slot: u32) -> Vec<<RadixTree as Storage>::Handle> {
    let (keys, blocks) = run(locals);
    add_keyed(tree, &keys, &blocks, slot)
}

/// Adds `slot` to the run of `blocks` with `keys` from the root; returns its handles.
fn add_keyed<S: Storage>(
    tree: &S,
    keys: &[Key],
    blocks: &[LocalHash],
    slot: u32,
) -> Vec<S::Handle> {
    let guard = tree.guard();
    let mut handles = Vec::new();
    // SAFETY: the seam contract (I1) as kept by hand, see the top of the file.
    unsafe {
        tree.add_run(
            None,
            &RunKeys::listed(keys),
            blocks,
            slot,
            &guard,
            &mut handles,
        )
    };
    handles
}

/// Removes `slot` from the blocks `handles`.
fn remove<S: Storage>(tree: &S, handles: &[S::Handle], slot: u32) {
    let guard = tree.guard();
    // SAFETY: the seam contract (I1) as kept by hand, see the top of the file.
    unsafe { tree.remove_run(handles, slot, &guard) };
}

/// What `slot` holds of the edge starting with `local` under the root, and of its child at
/// (`at`, `child`), read the way the walk reads them.
fn seen(tree: &RadixTree, local: u64, at: u32, child: u64, slot: u32) -> (u32, u32) {
    let guard = tree.guard();
    let Some(node) = tree.child(None, 0, LocalHash(local), &guard) else {
        return (0, 0);
    };
    let top = tree.cover(node, &guard).map_or(0, |c| c.cutoff(slot));
    let below = tree
        .child(Some(node), at, LocalHash(child), &guard)
        .and_then(|c| tree.cover(c, &guard))
        .map_or(0, |c| c.cutoff(slot));
    (top, below)
}

/// A reader walks root -> A -> a child of A at offset 1 while both workers leave, so that the
/// writer unlinks and retires both nodes. The reader must never touch freed memory (loom tracks
/// every access through crossbeam-epoch's loom atomics) and sees each cutoff whole or nothing.
#[test]
fn radix_reader_walks_through_nodes_being_unlinked() {
    loom::model(|| {
        let tree = Arc::new(RadixTree::default());
        let a = add(&tree, &[1, 2], 7);
        let b = add(&tree, &[1, 5], 8);
        assert_eq!(tree.entries(), 2, "a child at offset 1, no split");
        let reader = {
            let tree = tree.clone();
            thread::spawn(move || {
                let (top, below) = seen(&tree, 1, 1, 5, 8);
                assert!(matches!((top, below), (0 | 1, 0) | (1, 1)), "{top} {below}");
                let (top, _) = seen(&tree, 1, 1, 5, 7);
                assert!(matches!(top, 0 | 2), "{top}");
            })
        };
        remove(&*tree, &b, 8);
        remove(&*tree, &a, 7);
        reader.join().unwrap();
        assert_eq!(tree.entries(), 0);
    });
}

/// Two writers add different workers to the same child that does not exist yet: each may build
/// the node before it takes the parent's lock, one links its node, the other drops its own and
/// finds the linked one, and both workers end up in the one node.
#[test]
fn radix_two_writers_create_the_same_child() {
    loom::model(|| {
        let tree = Arc::new(RadixTree::default());
        // The second writer is the model's own thread: the same race, one thread fewer to
        // schedule (a third, idle thread made this the longest model by far).
        let first = {
            let tree = tree.clone();
            thread::spawn(move || add(&tree, &[9, 10], 1))
        };
        let second = add(&tree, &[9, 10], 2);
        let handles = [first.join().unwrap(), second];
        assert_eq!(
            handles[0], handles[1],
            "one edge for one run under one parent"
        );
        assert_eq!(tree.entries(), 1);
        let guard = tree.guard();
        let node = tree.child(None, 0, LocalHash(9), &guard).expect("linked");
        let cover = tree.cover(node, &guard).expect("held");
        assert_eq!(
            (cover.slots(), cover.cutoff(1), cover.cutoff(2)),
            (vec![1, 2], 2, 2)
        );
    });
}

/// One writer leaves a node (unlinking it) while another joins it: the joining worker must end
/// up in a linked node, never in a retired one.
#[test]
fn radix_join_races_unlink() {
    loom::model(|| {
        let tree = Arc::new(RadixTree::default());
        let a = add(&tree, &[5], 1);
        let joiner = {
            let tree = tree.clone();
            thread::spawn(move || add(&tree, &[5], 2))
        };
        remove(&*tree, &a, 1);
        let joined = joiner.join().unwrap();
        let guard = tree.guard();
        let node = tree
            .child(None, 0, LocalHash(5), &guard)
            .expect("worker 2's node is linked");
        assert_eq!(tree.cover(node, &guard).map(|c| c.slots()), Some(vec![2]));
        assert_eq!(tree.entries(), 1);
        remove(&*tree, &joined, 2);
        assert_eq!(tree.entries(), 0);
    });
}

/// A second worker joins a node while a reader reads its cover: the `One -> Many` upgrade is
/// one atomic replacement, so the reader sees the old cover or the new one, never a mix or a
/// freed one.
#[test]
fn radix_cover_upgrade_against_a_reader() {
    loom::model(|| {
        let tree = Arc::new(RadixTree::default());
        add(&tree, &[3], 4);
        let reader = {
            let tree = tree.clone();
            thread::spawn(move || {
                let guard = tree.guard();
                let node = tree.child(None, 0, LocalHash(3), &guard).expect("linked");
                let seen = tree.cover(node, &guard).map(|c| c.slots());
                assert!(
                    matches!(seen.as_deref(), Some([4]) | Some([2, 4])),
                    "{seen:?}"
                );
            })
        };
        add(&tree, &[3], 2);
        reader.join().unwrap();
    });
}

/// A run longer than a stride is one edge with two anchors (positions 0 and 128). A reader
/// probes the second while a writer adds the run and then removes it, unlinking the node and
/// taking its anchors out of the index before retiring it: the reader finds nothing, or the
/// node with the checkpoint at offset 128, whose cover it reads whole or not at all.
#[test]
#[cfg(feature = "positional")]
fn positional_probe_lands_mid_edge_while_the_node_comes_and_goes() {
    use crate::index_core::Checkpointed;
    use crate::layouts::PositionalMap;
    const LEN: u32 = 130;
    let key = |pos: u32| Key {
        pos,
        canon: 1000 + u64::from(pos),
    };
    loom::model(move || {
        let tree = Arc::new(PositionalMap::default());
        let reader = {
            let tree = tree.clone();
            thread::spawn(move || {
                let guard = tree.guard();
                if let Some((node, off)) = tree.checkpoint(key(128), &guard) {
                    assert_eq!(off, 128, "the checkpoint's offset in the edge");
                    assert_eq!(tree.edge(node)[off as usize], LocalHash(128));
                    let held = tree.cover(node, &guard).map_or(0, |c| c.cutoff(3));
                    assert!(matches!(held, 0 | LEN), "{held}");
                }
            })
        };
        let keys: Vec<Key> = (0..LEN).map(key).collect();
        let blocks: Vec<LocalHash> = (0..u64::from(LEN)).map(LocalHash).collect();
        let handles = add_keyed(&*tree, &keys, &blocks, 3);
        assert_eq!(tree.entries(), 1, "one edge, not cut at the checkpoint");
        remove(&*tree, &handles, 3);
        reader.join().unwrap();
        assert_eq!(tree.entries(), 0);
        assert!(tree.checkpoint(key(128), &tree.guard()).is_none());
    });
}

/// Evicts the last two blocks of `w`'s chain of blocks 0..4 (local `i`, seq `10 + i`).
fn evict_tail(index: &crate::RadixIndexer, w: crate::Worker) {
    use crate::{Event, KvIndex};
    index
        .apply(&Event::removed(w, 1, vec![SeqHash(13), SeqHash(12)]))
        .unwrap();
}

/// Stores them again.
fn restore_tail(index: &crate::RadixIndexer, w: crate::Worker) {
    use crate::{Event, KvIndex};
    let block = |i: u64| Block::new(LocalHash(i), SeqHash(10 + i));
    let tail = vec![block(2), block(3)];
    index
        .apply(&Event::stored(w, 2, Some(SeqHash(11)), tail))
        .unwrap();
}

/// A worker's cutoff moves down (a tail eviction: an atomic store, no entry rewritten) and
/// back up (the tail re-stored) while a query walks the edge: the query never sees more than
/// the edge nor less than the blocks that stay.
#[test]
fn core_cutoff_move_against_a_query() {
    use crate::{Event, KvIndex, RadixIndexer, Worker};
    loom::model(|| {
        let index = Arc::new(RadixIndexer::default());
        let w = Worker::new(1, 0);
        let block = |i: u64| Block::new(LocalHash(i), SeqHash(10 + i));
        let query = [LocalHash(0), LocalHash(1), LocalHash(2), LocalHash(3)];
        let chain = (0..4).map(block).collect();
        index.apply(&Event::stored(w, 0, None, chain)).unwrap();
        let reader = {
            let index = index.clone();
            thread::spawn(move || {
                let depth = index.find_matches(&query).get(w);
                assert!(matches!(depth, Some(2..=4)), "{depth:?}");
            })
        };
        evict_tail(&index, w);
        restore_tail(&index, w);
        reader.join().unwrap();
        assert_eq!(index.find_matches(&query).get(w), Some(4));
        assert_eq!(index.entries(), 1, "one edge throughout");
    });
}

/// A worker's decode steps (one block each, after its chain's end) grow the edge it holds
/// alone in place while a query walks it: the query sees the edge as it was before or after
/// each append, and the worker at a depth it held, never more than the edge it read.
#[test]
fn core_append_against_a_query() {
    use crate::{Event, KvIndex, RadixIndexer, Worker};
    loom::model(|| {
        let index = Arc::new(RadixIndexer::default());
        let w = Worker::new(1, 0);
        let block = |i: u64| Block::new(LocalHash(i), SeqHash(10 + i));
        let query = [LocalHash(0), LocalHash(1), LocalHash(2), LocalHash(3)];
        index
            .apply(&Event::stored(w, 0, None, vec![block(0), block(1)]))
            .unwrap();
        let reader = {
            let index = index.clone();
            thread::spawn(move || {
                let depth = index.find_matches(&query).get(w);
                assert!(matches!(depth, Some(2..=4)), "{depth:?}");
            })
        };
        for i in 2..4 {
            let parent = Some(SeqHash(10 + i - 1));
            index
                .apply(&Event::stored(w, i, parent, vec![block(i)]))
                .unwrap();
        }
        reader.join().unwrap();
        assert_eq!(index.find_matches(&query).get(w), Some(4));
        assert_eq!(index.entries(), 1, "appended in place: one edge throughout");
    });
}

/// A second worker joins an edge (its cover becomes one of two) while the first appends a
/// decode block to it: whichever goes first, the append happens only while the first worker
/// holds the edge alone (else the block gets a node of its own), and the second worker is
/// never credited with the appended block.
#[test]
fn core_append_races_a_joining_worker() {
    use crate::{Event, KvIndex, RadixIndexer, Worker};
    loom::model(|| {
        let index = Arc::new(RadixIndexer::default());
        let (a, b) = (Worker::new(1, 0), Worker::new(2, 0));
        let block = |i: u64| Block::new(LocalHash(i), SeqHash(10 + i));
        let query = [LocalHash(0), LocalHash(1), LocalHash(2)];
        index
            .apply(&Event::stored(a, 0, None, vec![block(0), block(1)]))
            .unwrap();
        let joiner = {
            let index = index.clone();
            thread::spawn(move || {
                index
                    .apply(&Event::stored(b, 0, None, vec![block(0), block(1)]))
                    .unwrap();
                let scores = index.find_matches(&query);
                assert_eq!(scores.get(b), Some(2), "{scores:?}");
            })
        };
        index
            .apply(&Event::stored(a, 1, Some(SeqHash(11)), vec![block(2)]))
            .unwrap();
        joiner.join().unwrap();
        let scores = index.find_matches(&query);
        assert_eq!((scores.get(a), scores.get(b)), (Some(3), Some(2)));
        assert!(matches!(index.entries(), 1 | 2), "{}", index.entries());
    });
}

/// The same move on an edge two workers hold (a cover that keeps which members hold the
/// whole edge as bits): the bit of the worker whose tail is evicted is cleared before its
/// cutoff moves down and set again after it moves back up, so the query, which keeps workers
/// by that bit when it follows the whole edge, never reports more than the edge, nor less
/// than the blocks that stay, and the other worker always the whole edge.
#[test]
fn core_full_bits_against_a_query() {
    use crate::{Event, KvIndex, RadixIndexer, Worker};
    loom::model(|| {
        let index = Arc::new(RadixIndexer::default());
        let (a, b) = (Worker::new(1, 0), Worker::new(2, 0));
        let block = |i: u64| Block::new(LocalHash(i), SeqHash(10 + i));
        let query = [LocalHash(0), LocalHash(1), LocalHash(2), LocalHash(3)];
        for w in [a, b] {
            let chain = (0..4).map(block).collect();
            index.apply(&Event::stored(w, 0, None, chain)).unwrap();
        }
        let reader = {
            let index = index.clone();
            thread::spawn(move || {
                let scores = index.find_matches(&query);
                assert!(matches!(scores.get(a), Some(2..=4)), "{scores:?}");
                assert_eq!(scores.get(b), Some(4), "{scores:?}");
            })
        };
        evict_tail(&index, a);
        let scores = index.find_matches(&query);
        assert_eq!((scores.get(a), scores.get(b)), (Some(2), Some(4)));
        restore_tail(&index, a);
        reader.join().unwrap();
        let scores = index.find_matches(&query);
        assert_eq!((scores.get(a), scores.get(b)), (Some(4), Some(4)));
        assert_eq!(index.entries(), 1, "one edge throughout");
    });
}

/// The same move on an edge whose members, but one, hold only a prefix of it (the edge runs
/// on into the first worker's private tail): the query leaves the edge where they stop and
/// keeps them all by the cover's floor, the lowest cutoff, without reading theirs. The floor
/// goes down before the evicted worker's cutoff does and back up after it is raised, so the
/// query never reports that worker past what it held, nor the other prefix holder short.
#[test]
fn core_floor_against_a_query() {
    use crate::{Event, KvIndex, RadixIndexer, Worker};
    loom::model(|| {
        let index = Arc::new(RadixIndexer::default());
        let (a, b, c) = (Worker::new(1, 0), Worker::new(2, 0), Worker::new(3, 0));
        let block = |i: u64| Block::new(LocalHash(i), SeqHash(10 + i));
        index
            .apply(&Event::stored(c, 0, None, (0..5).map(block).collect()))
            .unwrap();
        for w in [a, b] {
            let prefix = (0..3).map(block).collect();
            index.apply(&Event::stored(w, 0, None, prefix)).unwrap();
        }
        let query = [LocalHash(0), LocalHash(1), LocalHash(2), LocalHash(9)];
        let reader = {
            let index = index.clone();
            thread::spawn(move || {
                let scores = index.find_matches(&query);
                assert!(matches!(scores.get(a), Some(1..=3)), "{scores:?}");
                assert_eq!((scores.get(b), scores.get(c)), (Some(3), Some(3)));
            })
        };
        index
            .apply(&Event::removed(a, 1, vec![SeqHash(12), SeqHash(11)]))
            .unwrap();
        assert_eq!(index.find_matches(&query).get(a), Some(1));
        let tail = vec![block(1), block(2)];
        index
            .apply(&Event::stored(a, 2, Some(SeqHash(10)), tail))
            .unwrap();
        reader.join().unwrap();
        let scores = index.find_matches(&query);
        assert_eq!((scores.get(a), scores.get(b)), (Some(3), Some(3)));
        assert_eq!(index.entries(), 1, "one edge throughout");
    });
}

/// Where the design has no split: a second worker leaves the first one's edge midway, which
/// adds a child at that offset (and the second worker to the edge's cover) while a query walks
/// the second worker's path. The first worker's depth never changes; the second's is absent,
/// the shared prefix, or all of it, never more.
#[test]
fn core_branch_midway_against_a_query() {
    use crate::{Event, KvIndex, RadixIndexer, Worker};
    loom::model(|| {
        let index = Arc::new(RadixIndexer::default());
        let (a, b) = (Worker::new(1, 0), Worker::new(2, 0));
        let block = |i: u64| Block::new(LocalHash(i), SeqHash(10 + i));
        let chain = (0..4).map(block).collect();
        index.apply(&Event::stored(a, 0, None, chain)).unwrap();
        let query = [LocalHash(0), LocalHash(1), LocalHash(9)];
        let reader = {
            let index = index.clone();
            thread::spawn(move || {
                let scores = index.find_matches(&query);
                assert_eq!(scores.get(a), Some(2));
                assert!(matches!(scores.get(b), None | Some(2 | 3)), "{scores:?}");
            })
        };
        let fork = vec![block(0), block(1), block(9)];
        index.apply(&Event::stored(b, 0, None, fork)).unwrap();
        reader.join().unwrap();
        assert_eq!(index.find_matches(&query).get(b), Some(3));
        assert_eq!(index.entries(), 2);
    });
}

/// The core's hole cascade on the radix index: a hole in the middle of a worker's chain is
/// detached deepest-first and re-stored shallowest-first while a query walks the chain. The
/// query never sees more than the chain's 3 blocks nor loses block 0 (never removed), and no
/// interleaving touches freed memory while nodes are pruned and re-created.
#[test]
fn core_hole_cascade_against_a_query() {
    use crate::{Event, KvIndex, RadixIndexer, Worker};
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
        assert_eq!(index.entries(), 1, "the chain is one edge");
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

/// The writer pool's queue ([`crate::inbox`]): messages reach a writer that naps or sleeps,
/// in order, before the queue closes, and what the writer gives back reaches the sender. Loom's
/// timed waits never time out, so a writer that a sender fails to wake hangs the model, which
/// loom reports as a deadlock: with `naps == 0` the writer sleeps and an ordinary message must
/// wake it; with `naps == 1` it may be napping and only the urgent message wakes it.
fn inbox_model(naps: u32) {
    use crate::inbox::Inbox;
    use loom::sync::{Condvar, Mutex};
    loom::model(move || {
        let inbox = Arc::new(Inbox::<Vec<u32>, u32>::with_naps(2, naps));
        let seen = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let writer = {
            let (inbox, seen) = (inbox.clone(), seen.clone());
            thread::spawn(move || {
                let (mut batch, mut spent) = (Vec::new(), Vec::new());
                while inbox.take(&mut batch, &mut spent) {
                    for msg in batch.drain(..) {
                        seen.0.lock().unwrap().push(msg);
                        seen.1.notify_one();
                        spent.push(msg);
                    }
                    inbox.give_back(&mut spent);
                }
            })
        };
        let sent: Vec<u32> = match naps {
            0 => vec![1],
            _ => vec![1, 2],
        };
        for (i, &msg) in sent.iter().enumerate() {
            inbox.send(msg, i == 1).unwrap();
        }
        // Taken before the close, whose wake would hide a missing one.
        let mut got = seen.0.lock().unwrap();
        while got.len() < sent.len() {
            got = seen.1.wait(got).unwrap();
        }
        assert_eq!(*got, sent);
        drop(got);
        inbox.close();
        writer.join().unwrap();
        inbox.reclaim();
    });
}

#[test]
fn inbox_wakes_a_sleeping_writer() {
    inbox_model(0);
}

#[test]
fn inbox_wakes_a_napping_writer_for_urgent_messages() {
    inbox_model(1);
}
