//! What the comparison measures: an index behind its production write path.
//!
//! Every subject takes events from one thread into its own writer threads (ours: a
//! [`WriterPool`]; Dynamo's: its `ThreadPoolIndexer`), and answers queries on the calling thread.
//! [`Subject::barrier`] returns only once every submitted event has been applied, so that a timed
//! write phase includes the last apply, not just the last enqueue.

use super::presets::Step;
use flash_indexer::pool::{PoolConfig, WriterPool};
use flash_indexer::testing::IndexFactory;
use flash_indexer::{Event, KvIndex, LocalHash, Worker};
use hdrhistogram::Histogram;
use std::sync::Arc;
use std::time::Instant;

/// Per-worker depths, sorted by worker, depth-0 workers left out.
pub type Scores = Vec<(Worker, u32)>;

/// One index under test.
pub trait Subject {
    /// Hands `event` to the index's writer threads (may return before it is applied).
    fn submit(&self, event: &Event);
    /// Returns once every event submitted so far has been applied and is visible to queries.
    fn barrier(&self);
    /// Asks the index; returns the nanoseconds spent in the index's own query call (converting
    /// the query and the answer to and from the index's types is not timed) and the answer.
    fn query(&self, query: &[LocalHash]) -> (u64, Scores);
    /// Events the index refused so far, where it reports them (ours do; Dynamo's only log).
    fn rejected(&self) -> Option<u64>;
    /// The outsider's replay (see [`Method::Outsider`]): every step converted to the index's own
    /// types before the clock starts, then submitted or asked in order, as fast as the index
    /// goes; ops/s up to the final barrier, and each query's latency in nanoseconds.
    fn replay_native(&self, steps: &[(u64, Step)]) -> (f64, Histogram<u64>);
}

/// How an unpaced replay is driven and timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Method {
    /// Each step converted as it is replayed: events copied into the index's writer queues,
    /// each query a fresh copy (untimed); every subject's first round preceded by a checked
    /// replay; at least the preset's rounds.
    Compare,
    /// As an outsider drives the indexes: every step converted up front, events handed over
    /// owned, queries asked straight from the converted trace, no checked replay before a timed
    /// one, exactly `--rounds`.
    Outsider,
}

impl Method {
    /// Whether a replay paced at `speed` (0: as fast as possible) runs the outsider's way:
    /// only unpaced replays do; paced ones run as [`Method::Compare`] runs them.
    pub fn outsider_replay(self, speed: f64) -> bool {
        self == Method::Outsider && speed == 0.0
    }
}

/// A step in an index's own types.
enum NativeStep<E, Q> {
    Event(E),
    Query(Q),
}

/// Converts `steps` up front with `event` and `query`, then replays them: `submit` each event,
/// `ask` each query (timed), `barrier` at the end (on the clock).
pub fn native_replay<E, Q, A>(
    steps: &[(u64, Step)],
    event: impl Fn(&Event) -> E,
    query: impl Fn(&[LocalHash]) -> Q,
    mut submit: impl FnMut(E),
    mut ask: impl FnMut(&Q) -> A,
    barrier: impl FnOnce(),
) -> (f64, Histogram<u64>) {
    let native: Vec<NativeStep<E, Q>> = steps
        .iter()
        .map(|(_, step)| match step {
            Step::Event(e) => NativeStep::Event(event(e)),
            Step::Query(q) => NativeStep::Query(query(q)),
        })
        .collect();
    let mut h = super::measure::latency_histogram();
    let start = Instant::now();
    for step in native {
        match step {
            NativeStep::Event(e) => submit(e),
            NativeStep::Query(q) => {
                let t0 = Instant::now();
                std::hint::black_box(ask(&q));
                h.saturating_record((t0.elapsed().as_nanos() as u64).max(1));
            }
        }
    }
    barrier();
    (steps.len() as f64 / start.elapsed().as_secs_f64(), h)
}

/// How to build a fresh subject.
pub struct SubjectFactory {
    pub name: &'static str,
    /// One of this crate's layouts (the ratio rows are ours / CRTC).
    pub ours: bool,
    pub make: Box<dyn Fn(usize) -> Box<dyn Subject>>,
}

/// The name of Dynamo's default index: every ratio is against it.
pub const BASELINE: &str = "dynamo-crtc";

/// One of our layouts behind a [`WriterPool`] of `threads` writers.
struct Ours {
    pool: WriterPool<dyn KvIndex>,
}

impl Subject for Ours {
    fn submit(&self, event: &Event) {
        // A copy, as Dynamo's subjects convert theirs; written into the room of applied events.
        self.pool
            .submit_copy(event)
            .expect("the writer threads outlive the comparison");
    }

    fn barrier(&self) {
        self.pool.flush();
    }

    fn query(&self, query: &[LocalHash]) -> (u64, Scores) {
        // A fresh copy, untimed, as Dynamo's subjects convert theirs: every index starts from a
        // query just written (in cache), as a router's is right after hashing the tokens.
        // Reading the preset's own copy instead cost ours a trip to memory per block that the
        // others did not pay (1.09x CRTC at 4,096 blocks; the same walk is 0.9 us warm).
        let query = query.to_vec();
        let t0 = Instant::now();
        let scores = self.pool.find_matches(&query);
        let ns = t0.elapsed().as_nanos() as u64;
        (ns, scores.to_sorted_vec())
    }

    fn rejected(&self) -> Option<u64> {
        Some(self.pool.stats().rejected())
    }

    fn replay_native(&self, steps: &[(u64, Step)]) -> (f64, Histogram<u64>) {
        native_replay(
            steps,
            Event::clone,
            <[LocalHash]>::to_vec,
            |e| {
                self.pool
                    .submit(e)
                    .expect("the writer threads outlive the comparison")
            },
            |q| self.pool.find_matches(q),
            || self.pool.flush(),
        )
    }
}

/// Every primary layout of this build, each behind a writer pool.
pub fn ours() -> Vec<SubjectFactory> {
    flash_indexer::testing::enabled_layouts()
        .into_iter()
        .filter(|f| f.primary)
        .map(|IndexFactory { name, make, .. }| SubjectFactory {
            name,
            ours: true,
            make: Box::new(move |threads| {
                let index: Arc<dyn KvIndex> = Arc::from(make());
                let pool = WriterPool::new(
                    index,
                    PoolConfig {
                        threads,
                        queue_capacity: 8192,
                    },
                );
                Box::new(Ours { pool }) as Box<dyn Subject>
            }),
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flash_indexer::{Block, SeqHash};

    /// A chain of 8 blocks stored, queried after each store, then half of it removed.
    pub(crate) fn small_replay() -> (Vec<(u64, Step)>, Vec<LocalHash>) {
        let w = Worker::new(3, 0);
        let locals: Vec<LocalHash> = (0..8).map(|i| LocalHash(500 + i)).collect();
        let seqs = flash_indexer::hash::seq_hashes(&locals);
        let block = |i: usize| Block::new(locals[i], seqs[i]);
        let mut steps = Vec::new();
        for i in 0..8usize {
            let parent = i.checked_sub(1).map(|p| seqs[p]);
            let event = Event::stored(w, i as u64, parent, vec![block(i)]);
            steps.push((i as u64, Step::Event(event)));
            steps.push((i as u64, Step::Query(locals.clone())));
        }
        let tail: Vec<SeqHash> = seqs[4..].iter().rev().copied().collect();
        steps.push((8, Step::Event(Event::removed(w, 8, tail))));
        (steps, locals)
    }

    /// The outsider's replay times every query, applies every event before it returns, and
    /// counts every step.
    pub(crate) fn check_native_replay(subject: &dyn Subject) {
        let (steps, locals) = small_replay();
        let (ops_per_s, h) = subject.replay_native(&steps);
        assert!(ops_per_s > 0.0);
        assert_eq!(h.len(), 8, "one latency per query");
        assert_eq!(subject.query(&locals).1, vec![(Worker::new(3, 0), 4)]);
    }

    #[test]
    fn the_outsiders_replay_applies_every_event_and_times_every_query() {
        for factory in ours() {
            check_native_replay(&*(factory.make)(2));
        }
    }
}
