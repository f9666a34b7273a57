// Included once per index type by `tests/scenarios.rs`, where `index()` makes a fresh index.

const W: Worker = Worker::new(1, 0);
const W_RANK1: Worker = Worker::new(1, 1);
const OTHER: Worker = Worker::new(2, 0);

fn l(i: u64) -> LocalHash {
    LocalHash(1000 + i)
}

fn s(i: u64) -> SeqHash {
    SeqHash(9000 + i)
}

/// Blocks with locals `l(i)` and seqs `s(i)` for `i` in `range`.
fn chain(range: std::ops::Range<u64>) -> Vec<Block> {
    range.map(|i| Block::new(l(i), s(i))).collect()
}

fn query(range: std::ops::Range<u64>) -> Vec<LocalHash> {
    range.map(l).collect()
}

fn store(ix: &dyn KvIndex, w: Worker, parent: Option<u64>, blocks: Vec<Block>) -> Result<(), EventError> {
    ix.apply(&Event::stored(w, 0, parent.map(s), blocks))
}

fn remove(ix: &dyn KvIndex, w: Worker, seqs: &[u64]) -> Result<(), EventError> {
    ix.apply(&Event::removed(w, 0, seqs.iter().map(|&i| s(i)).collect()))
}

fn depth(ix: &dyn KvIndex, w: Worker, q: &[LocalHash]) -> Option<u32> {
    ix.find_matches(q).get(w)
}

// ---- SPEC §2: Stored ----

#[test]
fn stored_chain_links_each_block_to_the_previous() {
    let ix = index();
    store(&ix, W, None, chain(0..3)).unwrap();
    // Continuing from the last block works only because s(2) is the parent of a new block.
    store(&ix, W, Some(2), chain(3..5)).unwrap();
    assert_eq!(depth(&ix, W, &query(0..5)), Some(5));
}

#[test]
fn stored_blocks_are_held_and_counted() {
    let ix = index();
    store(&ix, W, None, chain(0..4)).unwrap();
    assert_eq!(ix.block_count(W), 4);
    assert_eq!(depth(&ix, W, &query(0..4)), Some(4));
}

#[test]
fn rejected_store_changes_nothing() {
    let ix = index();
    store(&ix, W, None, chain(0..3)).unwrap();
    // Blocks 3 and 4 are new, block 1 conflicts: nothing of the event may apply.
    let mut blocks = chain(3..5);
    blocks.push(Block::new(LocalHash(77), s(1)));
    assert_eq!(store(&ix, W, Some(2), blocks), Err(EventError::Conflict { seq: s(1) }));
    assert_eq!(ix.block_count(W), 3);
    assert_eq!(depth(&ix, W, &query(0..5)), Some(3));
}

#[test]
fn rejected_store_leaves_none_of_its_new_blocks() {
    let ix = index();
    store(&ix, W, None, chain(0..2)).unwrap();
    // A replayed prefix, two new blocks, then a repeat of the first new one.
    let mut blocks = chain(0..4);
    blocks.push(Block::new(l(2), s(2)));
    assert_eq!(store(&ix, W, None, blocks), Err(EventError::InvalidSequence { seq: s(2) }));
    assert_eq!(ix.block_count(W), 2);
    // Seq 2 is not held: storing it under another parent and local is no conflict.
    store(&ix, W, None, vec![Block::new(LocalHash(9), s(2))]).unwrap();
    assert_eq!(ix.block_count(W), 3);
    assert_eq!(depth(&ix, W, &query(0..4)), Some(2));
}

#[test]
fn store_under_unknown_parent_is_rejected() {
    let ix = index();
    assert_eq!(store(&ix, W, Some(99), chain(0..2)), Err(EventError::UnknownParent { parent: s(99) }));
    assert_eq!(ix.block_count(W), 0);
}

#[test]
fn parent_held_by_another_worker_is_unknown() {
    let ix = index();
    store(&ix, OTHER, None, chain(0..1)).unwrap();
    assert_eq!(store(&ix, W, Some(0), chain(1..2)), Err(EventError::UnknownParent { parent: s(0) }));
}

#[test]
fn store_with_repeated_seq_is_rejected() {
    let ix = index();
    let blocks = vec![Block::new(l(0), s(0)), Block::new(l(1), s(0))];
    assert_eq!(store(&ix, W, None, blocks), Err(EventError::InvalidSequence { seq: s(0) }));
    assert_eq!(ix.block_count(W), 0);
}

#[test]
fn store_whose_block_is_its_own_parent_is_rejected() {
    let ix = index();
    store(&ix, W, None, chain(0..1)).unwrap();
    assert_eq!(store(&ix, W, Some(0), chain(0..1)), Err(EventError::InvalidSequence { seq: s(0) }));
    assert_eq!(ix.block_count(W), 1);
}

#[test]
fn restore_with_other_local_conflicts() {
    let ix = index();
    store(&ix, W, None, chain(0..2)).unwrap();
    let blocks = vec![Block::new(l(0), s(0)), Block::new(LocalHash(5), s(1))];
    assert_eq!(store(&ix, W, None, blocks), Err(EventError::Conflict { seq: s(1) }));
    assert_eq!(depth(&ix, W, &query(0..2)), Some(2));
}

#[test]
fn restore_under_other_parent_conflicts() {
    let ix = index();
    store(&ix, W, None, chain(0..2)).unwrap();
    store(&ix, W, None, vec![Block::new(l(7), s(7))]).unwrap();
    assert_eq!(store(&ix, W, Some(7), vec![Block::new(l(1), s(1))]), Err(EventError::Conflict { seq: s(1) }));
}

#[test]
fn checks_run_in_spec_order() {
    let ix = index();
    store(&ix, W, None, chain(0..2)).unwrap();
    // Unknown parent and a repeated seq: the parent check comes first.
    let repeated = vec![Block::new(l(5), s(5)), Block::new(l(6), s(5))];
    assert_eq!(store(&ix, W, Some(42), repeated.clone()), Err(EventError::UnknownParent { parent: s(42) }));
    // A conflict and a repeated seq: the repeated seq comes first, even listed later.
    let mut blocks = vec![Block::new(LocalHash(3), s(1))];
    blocks.extend(repeated);
    assert_eq!(store(&ix, W, Some(0), blocks), Err(EventError::InvalidSequence { seq: s(5) }));
    // Two conflicts: the first block in event order is reported.
    let blocks = vec![Block::new(LocalHash(3), s(0)), Block::new(LocalHash(4), s(1))];
    assert_eq!(store(&ix, W, None, blocks), Err(EventError::Conflict { seq: s(0) }));
}

#[test]
fn replayed_store_is_idempotent() {
    let ix = index();
    store(&ix, W, None, chain(0..3)).unwrap();
    store(&ix, W, None, chain(0..3)).unwrap();
    store(&ix, W, Some(0), chain(1..4)).unwrap();
    assert_eq!(ix.block_count(W), 4);
    assert_eq!(depth(&ix, W, &query(0..4)), Some(4));
}

#[test]
fn empty_store_is_a_no_op() {
    let ix = index();
    assert_eq!(store(&ix, W, None, vec![]), Ok(()));
    assert_eq!(ix.block_count(W), 0);
    assert!(ix.dump().is_empty());
}

#[test]
fn store_under_unreachable_parent_is_accepted() {
    let ix = index();
    store(&ix, W, None, chain(0..3)).unwrap();
    remove(&ix, W, &[0]).unwrap();
    // s(2) is held but unreachable; storing under it is accepted and stays unreachable.
    store(&ix, W, Some(2), chain(3..5)).unwrap();
    assert_eq!(ix.block_count(W), 4);
    assert_eq!(depth(&ix, W, &query(0..5)), None);
    store(&ix, W, None, chain(0..1)).unwrap();
    assert_eq!(depth(&ix, W, &query(0..5)), Some(5));
}

// ---- SPEC §2: Removed ----

#[test]
fn removed_blocks_are_dropped() {
    let ix = index();
    store(&ix, W, None, chain(0..4)).unwrap();
    remove(&ix, W, &[3, 2]).unwrap();
    assert_eq!(ix.block_count(W), 2);
    assert_eq!(depth(&ix, W, &query(0..4)), Some(2));
}

#[test]
fn remove_listing_a_seq_twice_reports_it_missing_once() {
    let ix = index();
    store(&ix, W, None, chain(0..2)).unwrap();
    assert_eq!(remove(&ix, W, &[1, 1]), Err(EventError::UnknownBlocks { missing: vec![s(1)] }));
    assert_eq!(ix.block_count(W), 1);
}

#[test]
fn remove_of_unknown_blocks_applies_the_rest_and_warns() {
    let ix = index();
    store(&ix, W, None, chain(0..3)).unwrap();
    let err = remove(&ix, W, &[50, 2, 51]).unwrap_err();
    assert_eq!(err, EventError::UnknownBlocks { missing: vec![s(50), s(51)] });
    assert!(err.is_warning());
    assert_eq!(ix.block_count(W), 2);
    assert_eq!(depth(&ix, W, &query(0..3)), Some(2));
}

#[test]
fn remove_on_a_worker_with_nothing_reports_every_block() {
    let ix = index();
    assert_eq!(remove(&ix, W, &[1]), Err(EventError::UnknownBlocks { missing: vec![s(1)] }));
}

#[test]
fn removed_block_keeps_descendants_held_but_unreachable() {
    let ix = index();
    store(&ix, W, None, chain(0..6)).unwrap();
    remove(&ix, W, &[2]).unwrap();
    assert_eq!(ix.block_count(W), 5);
    assert_eq!(depth(&ix, W, &query(0..6)), Some(2));
    // The held descendants are still the worker's: removing them works without warnings.
    remove(&ix, W, &[5, 4]).unwrap();
    assert_eq!(ix.block_count(W), 3);
}

#[test]
fn restoring_a_hole_restores_full_depth() {
    let ix = index();
    store(&ix, W, None, chain(0..40)).unwrap();
    remove(&ix, W, &[17]).unwrap();
    assert_eq!(depth(&ix, W, &query(0..40)), Some(17));
    store(&ix, W, Some(16), chain(17..18)).unwrap();
    assert_eq!(depth(&ix, W, &query(0..40)), Some(40));
}

#[test]
fn restored_under_new_parent_moves_descendants() {
    let ix = index();
    store(&ix, W, None, chain(0..5)).unwrap();
    // Move block 2 (and so 3, 4) from under block 1 to the root.
    remove(&ix, W, &[2]).unwrap();
    store(&ix, W, None, chain(2..3)).unwrap();
    let moved = [l(2), l(3), l(4)];
    assert_eq!(depth(&ix, W, &moved), Some(3));
    assert_eq!(depth(&ix, W, &query(0..5)), Some(2));
}

#[test]
fn restored_with_new_local_changes_descendant_positions_and_keys() {
    let ix = index();
    store(&ix, W, None, chain(0..4)).unwrap();
    remove(&ix, W, &[1]).unwrap();
    store(&ix, W, Some(0), vec![Block::new(LocalHash(55), s(1))]).unwrap();
    assert_eq!(depth(&ix, W, &[l(0), LocalHash(55), l(2), l(3)]), Some(4));
    assert_eq!(depth(&ix, W, &query(0..4)), Some(1));
}

#[test]
fn cycle_of_parents_is_unreachable_and_terminates() {
    let ix = index();
    store(&ix, W, None, chain(0..3)).unwrap();
    // Remove block 0, then store it again under its own descendant: 0 -> 2 -> 1 -> 0.
    remove(&ix, W, &[0]).unwrap();
    store(&ix, W, Some(2), chain(0..1)).unwrap();
    assert_eq!(ix.block_count(W), 3);
    assert_eq!(depth(&ix, W, &query(0..3)), None);
    assert_eq!(depth(&ix, W, &[l(1), l(2), l(0), l(1)]), None);
    // Breaking the cycle at block 1 and re-rooting it makes 1 -> 2 -> 0 reachable.
    remove(&ix, W, &[1]).unwrap();
    store(&ix, W, None, chain(1..2)).unwrap();
    assert_eq!(depth(&ix, W, &[l(1), l(2), l(0)]), Some(3));
}

#[test]
fn restore_under_another_parent_brings_branches_off_the_rest_of_the_chain() {
    let ix = index();
    store(&ix, W, None, chain(0..5)).unwrap();
    // A branch under block 3, then a hole at block 1.
    store(&ix, W, Some(3), vec![Block::new(l(50), s(50))]).unwrap();
    remove(&ix, W, &[1]).unwrap();
    assert_eq!(depth(&ix, W, &[l(0), l(1), l(2), l(3), l(50)]), Some(1));
    // Block 1 comes back as a root: 2, 3, 4 and the branch under 3 follow it.
    store(&ix, W, None, chain(1..2)).unwrap();
    assert_eq!(depth(&ix, W, &[l(1), l(2), l(3), l(50)]), Some(4));
    assert_eq!(depth(&ix, W, &query(1..5)), Some(4));
    assert_eq!(depth(&ix, W, &query(0..5)), Some(1));
    // And back under block 0: everything counts from the root again.
    remove(&ix, W, &[1]).unwrap();
    store(&ix, W, Some(0), chain(1..2)).unwrap();
    assert_eq!(depth(&ix, W, &[l(0), l(1), l(2), l(3), l(50)]), Some(5));
    assert_eq!(ix.block_count(W), 6);
}

// ---- SPEC §2: Cleared and worker removal ----

#[test]
fn clear_drops_only_that_dp_rank() {
    let ix = index();
    store(&ix, W, None, chain(0..3)).unwrap();
    store(&ix, W_RANK1, None, chain(0..3)).unwrap();
    ix.apply(&Event::cleared(W, 0)).unwrap();
    assert_eq!(ix.block_count(W), 0);
    assert_eq!(ix.block_count(W_RANK1), 3);
    let scores = ix.find_matches(&query(0..3));
    assert_eq!((scores.get(W), scores.get(W_RANK1)), (None, Some(3)));
}

#[test]
fn remove_worker_drops_every_dp_rank() {
    let ix = index();
    for w in [W, W_RANK1, OTHER] {
        store(&ix, w, None, chain(0..3)).unwrap();
    }
    ix.remove_worker(W.id);
    let scores = ix.find_matches(&query(0..3));
    assert_eq!(scores.to_sorted_vec(), vec![(OTHER, 3)]);
    assert_eq!(ix.block_count(W_RANK1), 0);
}

#[test]
fn remove_worker_dp_rank_drops_one_rank() {
    let ix = index();
    store(&ix, W, None, chain(0..3)).unwrap();
    store(&ix, W_RANK1, None, chain(0..2)).unwrap();
    ix.remove_worker_dp_rank(W_RANK1);
    assert_eq!(ix.find_matches(&query(0..3)).to_sorted_vec(), vec![(W, 3)]);
}

#[test]
fn worker_removed_then_stored_again_starts_empty() {
    let ix = index();
    store(&ix, W, None, chain(0..3)).unwrap();
    ix.remove_worker(W.id);
    store(&ix, W, None, chain(5..6)).unwrap();
    assert_eq!(ix.block_count(W), 1);
    assert_eq!(depth(&ix, W, &query(0..3)), None);
}

#[test]
fn event_id_is_ignored_by_the_index() {
    let ix = index();
    ix.apply(&Event::stored(W, 900, None, chain(0..2))).unwrap();
    ix.apply(&Event::stored(W, 3, Some(s(1)), chain(2..3))).unwrap();
    assert_eq!(depth(&ix, W, &query(0..3)), Some(3));
}

#[test]
fn errors_name_the_offending_hash() {
    let ix = index();
    let err = store(&ix, W, Some(99), chain(0..1)).unwrap_err();
    assert!(err.to_string().contains(&s(99).to_string()), "{err}");
    let boxed: Box<dyn std::error::Error> = Box::new(err);
    assert!(!boxed.to_string().is_empty());
}

// ---- SPEC §3: queries ----

#[test]
fn depth_is_longest_matching_chain_from_root() {
    let ix = index();
    store(&ix, W, None, chain(0..5)).unwrap();
    store(&ix, OTHER, None, chain(0..2)).unwrap();
    let scores = ix.find_matches(&query(0..8));
    assert_eq!(scores.to_sorted_vec(), vec![(W, 5), (OTHER, 2)]);
}

#[test]
fn chains_not_starting_at_a_root_do_not_match() {
    let ix = index();
    store(&ix, W, None, chain(0..3)).unwrap();
    assert_eq!(depth(&ix, W, &query(1..3)), None);
}

#[test]
fn workers_without_match_are_absent() {
    let ix = index();
    store(&ix, W, None, chain(0..2)).unwrap();
    store(&ix, OTHER, None, chain(10..12)).unwrap();
    let scores = ix.find_matches(&query(0..2));
    assert_eq!(scores.len(), 1);
    assert_eq!(scores.get(OTHER), None);
}

#[test]
fn empty_query_returns_no_scores() {
    let ix = index();
    store(&ix, W, None, chain(0..2)).unwrap();
    assert!(ix.find_matches(&[]).is_empty());
}

#[test]
fn diverged_worker_never_scores_past_divergence() {
    let ix = index();
    // W holds l0 l1 X l3 .. l39: the same locals at the same positions after a divergence.
    let mut blocks = chain(0..40);
    blocks[2] = Block::new(LocalHash(4242), s(2));
    store(&ix, W, None, blocks).unwrap();
    assert_eq!(depth(&ix, W, &query(0..40)), Some(2));
}

#[test]
fn divergence_at_every_position_around_jump_boundaries() {
    let ix = index();
    store(&ix, W, None, chain(0..140)).unwrap();
    for d in [1u64, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129] {
        let mut q = query(0..140);
        q[d as usize] = LocalHash(1);
        assert_eq!(depth(&ix, W, &q), Some(d as u32), "diverging at {d}");
    }
}

#[test]
fn hole_stops_the_chain_exactly_there() {
    let ix = index();
    store(&ix, W, None, chain(0..100)).unwrap();
    for hole in [64u64, 33, 8] {
        remove(&ix, W, &[hole]).unwrap();
        assert_eq!(depth(&ix, W, &query(0..100)), Some(hole as u32));
    }
}

#[test]
fn salted_twins_both_count() {
    let ix = index();
    store(&ix, W, None, chain(0..3)).unwrap();
    // A second block with local l(1) under s(0), with another seq, and a child under it.
    let twin = vec![Block::new(l(1), SeqHash(1)), Block::new(l(2), SeqHash(2))];
    store(&ix, W, Some(0), twin).unwrap();
    assert_eq!(depth(&ix, W, &query(0..3)), Some(3));
    remove(&ix, W, &[1]).unwrap();
    assert_eq!(depth(&ix, W, &query(0..3)), Some(3), "the twin keeps the chain alive");
    ix.apply(&Event::removed(W, 0, vec![SeqHash(1)])).unwrap();
    assert_eq!(depth(&ix, W, &query(0..3)), Some(1));
}

#[test]
fn sequences_of_100k_blocks_work() {
    let ix = index();
    store(&ix, W, None, chain(0..100_000)).unwrap();
    assert_eq!(depth(&ix, W, &query(0..100_000)), Some(100_000));
    remove(&ix, W, &[77_777]).unwrap();
    assert_eq!(depth(&ix, W, &query(0..100_000)), Some(77_777));
    store(&ix, W, Some(77_776), chain(77_777..77_778)).unwrap();
    assert_eq!(depth(&ix, W, &query(0..100_000)), Some(100_000));
}

/// 70,000 runs and a run of 40,000 blocks in one worker: more places than 32 bits can name with
/// room to double, so the core's table of places widens its narrow format as the runs come and
/// then takes the wide one; every block must stay found through that, evictions and re-stores.
#[test]
fn a_worker_with_many_runs_and_a_long_one_keeps_every_block() {
    const ROOTS: u64 = 70_000;
    let root = |i: u64| Block::new(LocalHash(1 << 40 | i), SeqHash(1 << 40 | i));
    let ix = index();
    for i in 0..ROOTS {
        ix.apply(&Event::stored(W, 0, None, vec![root(i)])).unwrap();
    }
    store(&ix, W, None, chain(0..40_000)).unwrap();
    assert_eq!(ix.block_count(W), 110_000);
    assert_eq!(depth(&ix, W, &query(0..40_000)), Some(40_000));
    assert_eq!(depth(&ix, W, &[root(69_999).local]), Some(1));
    // A hole, and the block stored again.
    remove(&ix, W, &[30_000]).unwrap();
    assert_eq!(depth(&ix, W, &query(0..40_000)), Some(30_000));
    store(&ix, W, Some(29_999), chain(30_000..30_001)).unwrap();
    assert_eq!(depth(&ix, W, &query(0..40_000)), Some(40_000));
    // Most roots and the chain's second half evicted: what is left answers.
    for i in 0..ROOTS - 10 {
        ix.apply(&Event::removed(W, 0, vec![root(i).seq])).unwrap();
    }
    let tail: Vec<u64> = (20_000..40_000).rev().collect();
    remove(&ix, W, &tail).unwrap();
    assert_eq!(ix.block_count(W), 20_010);
    assert_eq!(depth(&ix, W, &query(0..40_000)), Some(20_000));
    assert_eq!(depth(&ix, W, &[root(69_995).local]), Some(1));
    assert_eq!(depth(&ix, W, &[root(5).local]), None);
    // The chain grows back past where it was cut.
    store(&ix, W, Some(19_999), chain(20_000..40_000)).unwrap();
    assert_eq!(depth(&ix, W, &query(0..40_000)), Some(40_000));
    assert_eq!(ix.block_count(W), 40_010);
}

#[test]
fn hundred_thousand_workers_work() {
    let ix = index();
    for id in 0..100_000u64 {
        let w = Worker::new(id / 2, (id % 2) as u32);
        store(&ix, w, None, chain(0..1 + id % 3)).unwrap();
    }
    let scores = ix.find_matches(&query(0..3));
    assert_eq!(scores.len(), 100_000);
    assert_eq!(scores.iter().filter(|&(_, d)| d == 3).count(), 33_333);
    assert_eq!(scores.get(Worker::new(49_999, 0)), Some(3));
}

// ---- SPEC §4: block_count and dump ----

#[test]
fn block_count_includes_unreachable_blocks() {
    let ix = index();
    store(&ix, W, None, chain(0..5)).unwrap();
    remove(&ix, W, &[0]).unwrap();
    assert_eq!(ix.block_count(W), 4);
    assert_eq!(ix.block_count(OTHER), 0);
}

#[test]
fn dump_replays_to_identical_answers() {
    let ix = index();
    store(&ix, W, None, chain(0..20)).unwrap();
    store(&ix, OTHER, None, chain(0..5)).unwrap();
    remove(&ix, W, &[10]).unwrap();
    store(&ix, W, Some(3), vec![Block::new(LocalHash(8), SeqHash(8))]).unwrap();
    let rebuilt = NaiveIndexer::new();
    for event in ix.dump() {
        rebuilt.apply(&event).unwrap();
    }
    for q in [query(0..20), query(0..5), vec![l(0), l(1), l(2), l(3), LocalHash(8)]] {
        assert_eq!(rebuilt.find_matches(&q), ix.find_matches(&q));
    }
}

#[test]
fn index_is_usable_as_a_trait_object() {
    let ix: Box<dyn KvIndex> = Box::new(index());
    ix.apply(&Event::stored(W, 0, None, chain(0..1))).unwrap();
    assert_eq!(ix.find_matches(&query(0..1)).get(W), Some(1));
}

#[test]
fn wide_fan_out_under_one_parent() {
    let ix = index();
    // 200 sequences share 3 blocks, then fork: one parent with 200 children.
    store(&ix, W, None, chain(0..3)).unwrap();
    for branch in 0..200u64 {
        let blocks = vec![Block::new(LocalHash(50_000 + branch), SeqHash(50_000 + branch))];
        store(&ix, W, Some(2), blocks).unwrap();
    }
    let fork = |branch: u64| [l(0), l(1), l(2), LocalHash(50_000 + branch)];
    assert_eq!(depth(&ix, W, &fork(137)), Some(4));
    for branch in (0..200u64).filter(|b| b % 3 != 0) {
        ix.apply(&Event::removed(W, 0, vec![SeqHash(50_000 + branch)])).unwrap();
    }
    assert_eq!(depth(&ix, W, &fork(137)), Some(3));
    assert_eq!(depth(&ix, W, &fork(138)), Some(4));
    for branch in (0..200u64).filter(|b| b % 3 == 0) {
        ix.apply(&Event::removed(W, 0, vec![SeqHash(50_000 + branch)])).unwrap();
    }
    assert_eq!(depth(&ix, W, &fork(138)), Some(3));
    assert_eq!(ix.block_count(W), 3);
}
