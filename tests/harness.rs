//! The differential harness checks itself: the reference agrees with itself, and an index with
//! a classic jump-search bug is caught.

use flash_indexer::testing::{Profile, agrees_with_reference, assert_agrees_with_reference};
use flash_indexer::{
    Event, EventError, KvIndex, LocalHash, NaiveIndexer, OverlapScores, SeqHash, Worker,
};

#[test]
fn reference_agrees_with_itself_adversarial() {
    assert_agrees_with_reference::<NaiveIndexer>(&Profile::adversarial().cases(128));
}

#[test]
fn reference_agrees_with_itself_many_workers() {
    assert_agrees_with_reference::<NaiveIndexer>(&Profile::many_workers().cases(4));
}

/// Jump search by 8 that forgets the binary scan-back: a worker that drops out between two
/// landing positions is credited only up to the last landing it passed.
#[derive(Default)]
struct SkipsScanBack(NaiveIndexer);

impl KvIndex for SkipsScanBack {
    fn apply(&self, event: &Event) -> Result<(), EventError> {
        self.0.apply(event)
    }
    fn find_matches(&self, query: &[LocalHash]) -> OverlapScores {
        let exact = self.0.find_matches(query);
        exact
            .iter()
            .map(|(w, d)| {
                if d as usize == query.len() {
                    (w, d)
                } else {
                    (w, d / 8 * 8)
                }
            })
            .collect()
    }
    fn remove_worker(&self, id: u64) {
        self.0.remove_worker(id)
    }
    fn remove_worker_dp_rank(&self, worker: Worker) {
        self.0.remove_worker_dp_rank(worker)
    }
    fn block_count(&self, worker: Worker) -> usize {
        self.0.block_count(worker)
    }
    fn holds(&self, worker: Worker, seq: SeqHash) -> bool {
        self.0.holds(worker, seq)
    }
    fn block_counts(&self) -> Vec<(Worker, usize)> {
        self.0.block_counts()
    }
    fn dump(&self) -> Vec<Event> {
        self.0.dump()
    }
}

#[test]
fn harness_catches_a_divergence_at_a_skipped_position() {
    let report = agrees_with_reference::<SkipsScanBack>(&Profile::adversarial().cases(64))
        .expect_err("the harness must reject an index that skips the scan-back");
    assert!(report.contains("query"), "unexpected report: {report}");
}
