//! Approximate mode: every layout under `ApproximateIndexer` against `NaiveApproximateIndexer`
//! on generated cases, and the semantics it promises, one scenario each. Time is injected
//! (`now` arguments); nothing sleeps.

use core::time::Duration;
use flash_indexer::testing::{
    self, approx_case_strategy, approximate_case_on_every_layout, run_approximate_input,
    scaled_cases,
};
use flash_indexer::{
    ApproximateIndex, ApproximateIndexer, Block, Event, KvIndex, LocalHash,
    NaiveApproximateIndexer, Retention, Worker, hash,
};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(scaled_cases(256)))]

    #[test]
    fn every_layout_agrees_with_the_reference(case in approx_case_strategy()) {
        if let Err(divergence) = approximate_case_on_every_layout(&case) {
            prop_assert!(false, "{}", divergence);
        }
    }

    /// The fuzz target's decoding of raw bytes, so that its vocabulary stays exercised here.
    #[test]
    fn fuzz_inputs_agree_with_the_reference(data in proptest::collection::vec(any::<u8>(), 0..1_500)) {
        if let Err(divergence) = run_approximate_input(&data) {
            prop_assert!(false, "{}", divergence);
        }
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn chain(first: u64, len: u64) -> Vec<LocalHash> {
    (first..first + len).map(LocalHash).collect()
}

/// Every approximate index this build has: each layout, and the reference.
fn subjects(retention: Retention) -> Vec<(&'static str, Box<dyn ApproximateIndex>)> {
    let mut out: Vec<(&'static str, Box<dyn ApproximateIndex>)> =
        vec![("naive", Box::new(NaiveApproximateIndexer::new(retention)))];
    for layout in testing::enabled_layouts() {
        out.push((
            layout.name,
            Box::new(ApproximateIndexer::with_index((layout.make)(), retention)),
        ));
    }
    out
}

#[test]
fn ttl_expires_at_exactly_the_time_to_live_after_the_last_routing() {
    for (name, index) in subjects(Retention::default()) {
        let w = Worker::new(1, 0);
        let prompt = chain(10, 4);
        index.record_routing(w, &prompt, secs(0));
        index.expire(secs(60));
        assert_eq!(index.find_matches(&prompt).get(w), Some(4), "{name}");
        // Routed again at 60 s: the shared prefix lives until 180 s, the rest until 120 s.
        index.record_routing(w, &prompt[..2], secs(60));
        index.expire(secs(119));
        assert_eq!(index.find_matches(&prompt).get(w), Some(4), "{name}");
        index.expire(secs(120));
        assert_eq!(index.find_matches(&prompt).get(w), Some(2), "{name}");
        assert_eq!(index.predicted_blocks(w), 2, "{name}");
        index.expire(secs(179));
        assert_eq!(index.find_matches(&prompt).get(w), Some(2), "{name}");
        index.expire(secs(180));
        assert!(index.find_matches(&prompt).is_empty(), "{name}");
        assert_eq!(index.block_count(w), 0, "{name}");
    }
}

#[test]
fn a_clock_that_goes_back_does_not_bring_predictions_back_or_keep_them() {
    for (name, index) in subjects(Retention::ttl(secs(10))) {
        let w = Worker::new(1, 0);
        index.record_routing(w, &chain(1, 3), secs(100));
        index.expire(secs(50)); // earlier than already seen: counts as 100 s
        assert_eq!(index.find_matches(&chain(1, 3)).get(w), Some(3), "{name}");
        index.expire(secs(110));
        assert!(index.find_matches(&chain(1, 3)).is_empty(), "{name}");
    }
}

#[test]
fn lru_pins_running_requests_and_evicts_released_tails_first() {
    for (name, index) in subjects(Retention::lru(6)) {
        let w = Worker::new(2, 0);
        let a = index.record_routing(w, &chain(100, 4), secs(0));
        // Full but for 2 blocks: the second request gets 2 of its 4 (the rest is pinned).
        let b = index.record_routing(w, &chain(200, 4), secs(1));
        assert_eq!(index.find_matches(&chain(200, 4)).get(w), Some(2), "{name}");
        assert_eq!(index.find_matches(&chain(100, 4)).get(w), Some(4), "{name}");
        index.release(a, secs(2)).unwrap();
        index.release(b, secs(2)).unwrap();
        // A third request of 3 blocks evicts a's tail first: a keeps its first block.
        index.record_routing(w, &chain(300, 3), secs(3));
        assert_eq!(index.find_matches(&chain(100, 4)).get(w), Some(1), "{name}");
        assert_eq!(index.find_matches(&chain(200, 4)).get(w), Some(2), "{name}");
        assert_eq!(index.predicted_blocks(w), 6, "{name}");
    }
}

#[test]
fn a_worker_that_publishes_events_is_exact_and_its_predictions_go() {
    for (name, index) in subjects(Retention::default()) {
        let (predicted, exact) = (Worker::new(1, 0), Worker::new(2, 0));
        let prompt = chain(7, 3);
        index.record_routing(predicted, &prompt, secs(0));
        index.record_routing(exact, &prompt, secs(0));
        // Worker 2's engine publishes: it holds only what it says it holds.
        let seqs = hash::seq_hashes(&prompt);
        let stored = Event::stored(exact, 0, None, vec![Block::new(prompt[0], seqs[0])]);
        index.apply(&stored).unwrap();
        assert!(
            index.is_exact(exact) && !index.is_exact(predicted),
            "{name}"
        );
        let scores = index.find_matches(&prompt);
        assert_eq!(
            (scores.get(predicted), scores.get(exact)),
            (Some(3), Some(1)),
            "{name}"
        );
        // Routing decisions no longer change an exact worker.
        index.record_routing(exact, &chain(50, 2), secs(1));
        assert!(index.find_matches(&chain(50, 2)).is_empty(), "{name}");
        // A removed worker comes back predicted.
        index.remove_worker(exact.id);
        index.record_routing(exact, &chain(50, 2), secs(2));
        assert_eq!(
            index.find_matches(&chain(50, 2)).get(exact),
            Some(2),
            "{name}"
        );
    }
}

#[test]
fn capacity_zero_predicts_nothing_and_empty_chains_do_nothing() {
    for (name, index) in subjects(Retention::lru(0)) {
        let w = Worker::new(1, 0);
        let routed = index.record_routing(w, &chain(1, 5), secs(0));
        index.release(routed, secs(1)).unwrap();
        index.record_routing(w, &[], secs(2));
        assert!(index.find_matches(&chain(1, 5)).is_empty(), "{name}");
        assert_eq!(index.block_count(w), 0, "{name}");
    }
}

#[test]
fn a_request_longer_than_the_capacity_is_predicted_as_far_as_it_fits() {
    for (name, index) in subjects(Retention::ttl(secs(60)).with_capacity(3)) {
        let w = Worker::new(1, 0);
        index.record_routing(w, &chain(1, 8), secs(0));
        assert_eq!(index.find_matches(&chain(1, 8)).get(w), Some(3), "{name}");
        // A new request takes the room of the older one, tail first.
        index.record_routing(w, &chain(20, 2), secs(1));
        assert_eq!(index.find_matches(&chain(1, 8)).get(w), Some(1), "{name}");
        assert_eq!(index.find_matches(&chain(20, 2)).get(w), Some(2), "{name}");
    }
}

#[test]
fn a_removed_workers_requests_release_nothing_of_its_next_life() {
    for (name, index) in subjects(Retention::lru(1)) {
        let w = Worker::new(0, 1);
        let old = index.record_routing(w, &chain(1, 1), secs(0));
        index.remove_worker_dp_rank(w);
        // The worker comes back; its new request pins the only block it has room for.
        index.record_routing(w, &chain(2, 1), secs(1));
        index.release(old, secs(2)).unwrap();
        // Still pinned: a third request finds no room and predicts nothing.
        index.record_routing(w, &chain(3, 1), secs(3));
        assert_eq!(index.find_matches(&chain(2, 1)).get(w), Some(1), "{name}");
        assert!(index.find_matches(&chain(3, 1)).is_empty(), "{name}");
    }
}

#[test]
fn a_chain_split_where_another_ends_keeps_each_blocks_recency() {
    // Capacity 6: a chain of 6, then its first 2 again, then 2 new blocks evict the older
    // chain's tail (its last 2 blocks, untouched since), not the prefix touched since.
    for (name, index) in subjects(Retention::ttl(secs(60)).with_capacity(6)) {
        let w = Worker::new(1, 0);
        index.record_routing(w, &chain(1, 6), secs(0));
        index.record_routing(w, &chain(1, 2), secs(1));
        index.record_routing(w, &chain(50, 2), secs(2));
        assert_eq!(index.find_matches(&chain(1, 6)).get(w), Some(4), "{name}");
        // Expiry follows the same split: the prefix lives a second longer than the rest.
        index.expire(secs(60));
        assert_eq!(index.find_matches(&chain(1, 6)).get(w), Some(2), "{name}");
        index.expire(secs(61));
        assert!(index.find_matches(&chain(1, 6)).is_empty(), "{name}");
        assert_eq!(index.find_matches(&chain(50, 2)).get(w), Some(2), "{name}");
    }
}
