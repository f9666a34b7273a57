//! Replays ops on an index and on the reference, and reports the first disagreement.

use crate::index::KvIndex;
use crate::naive::NaiveIndexer;
use crate::scores::OverlapScores;
use crate::types::{Event, EventKind, LocalHash, SeqHash, Worker};
use core::fmt;

/// One concrete operation on an index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// [`KvIndex::apply`].
    Apply(Event),
    /// [`KvIndex::remove_worker`].
    RemoveWorker(u64),
    /// [`KvIndex::remove_worker_dp_rank`].
    RemoveWorkerDpRank(Worker),
    /// [`KvIndex::find_matches`].
    Query(Vec<LocalHash>),
}

impl Op {
    /// Runs the op; queries return their scores, applies their result.
    fn run(&self, index: &dyn KvIndex) -> Outcome {
        match self {
            Op::Apply(event) => Outcome::Applied(index.apply(event)),
            Op::RemoveWorker(id) => {
                index.remove_worker(*id);
                Outcome::Done
            }
            Op::RemoveWorkerDpRank(w) => {
                index.remove_worker_dp_rank(*w);
                Outcome::Done
            }
            Op::Query(q) => Outcome::Scores(index.find_matches(q)),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Applied(Result<(), crate::EventError>),
    Scores(OverlapScores),
    Done,
}

/// Where and how an index disagreed with [`NaiveIndexer`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// Index of the op in the replayed sequence (`ops.len()` for the closing checks).
    pub at: usize,
    /// What disagreed, with both answers.
    pub what: String,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "diverged from the reference at op {}: {}",
            self.at, self.what
        )
    }
}

impl std::error::Error for Divergence {}

fn summarize(op: &Op) -> String {
    match op {
        Op::Apply(Event {
            worker,
            kind: EventKind::Stored { parent, blocks },
            ..
        }) => {
            format!(
                "store on {worker}, parent {parent:?}, {} blocks",
                blocks.len()
            )
        }
        Op::Apply(Event {
            worker,
            kind: EventKind::Removed { blocks },
            ..
        }) => {
            format!("remove on {worker}, {} blocks", blocks.len())
        }
        Op::Query(q) => format!("query of {} blocks", q.len()),
        other => format!("{other:?}"),
    }
}

/// Applies `ops` to `index` (which must start empty) and to a fresh [`NaiveIndexer`], comparing
/// every result and every query, the touched worker's block count after each event, and at the
/// end `closing_queries`, every worker's block count, and the answers of an index rebuilt from
/// `index.dump()`.
pub fn check_ops(
    index: &dyn KvIndex,
    ops: &[Op],
    closing_queries: &[Vec<LocalHash>],
    workers: &[Worker],
) -> Result<(), Divergence> {
    check_ops_on_each(&[index], ops, closing_queries, workers).map_err(|(_, d)| d)
}

/// [`check_ops`] for several indexes at once, in lockstep against one reference: the reference
/// answers each op once, however many indexes are checked (the fuzz target checks every layout
/// this way). On a divergence, returns which index (its position in `indexes`) and where.
pub fn check_ops_on_each(
    indexes: &[&dyn KvIndex],
    ops: &[Op],
    closing_queries: &[Vec<LocalHash>],
    workers: &[Worker],
) -> Result<(), (usize, Divergence)> {
    let reference = NaiveIndexer::new();
    for (at, op) in ops.iter().enumerate() {
        let want = op.run(&reference);
        for (i, index) in indexes.iter().enumerate() {
            let got = op.run(*index);
            if got != want {
                let what = format!("{}: got {got:?}, want {want:?}", summarize(op));
                return Err((i, Divergence { at, what }));
            }
        }
        if let Op::Apply(event) = op {
            let want = reference.block_count(event.worker);
            for (i, index) in indexes.iter().enumerate() {
                let got = index.block_count(event.worker);
                if got != want {
                    let what = format!(
                        "block_count({}) after {}: got {got}, want {want}",
                        event.worker,
                        summarize(op)
                    );
                    return Err((i, Divergence { at, what }));
                }
            }
            // Whether the worker holds each block the event named (a hole included).
            let seqs: Vec<SeqHash> = match &event.kind {
                EventKind::Stored { parent, blocks } => parent
                    .iter()
                    .copied()
                    .chain(blocks.iter().map(|b| b.seq))
                    .collect(),
                EventKind::Removed { blocks } => blocks.clone(),
                EventKind::Cleared => Vec::new(),
            };
            for seq in seqs {
                let want = reference.holds(event.worker, seq);
                for (i, index) in indexes.iter().enumerate() {
                    if index.holds(event.worker, seq) != want {
                        let what = format!(
                            "holds({}, {seq:?}) after {}: got {}, want {want}",
                            event.worker,
                            summarize(op),
                            !want
                        );
                        return Err((i, Divergence { at, what }));
                    }
                }
            }
        }
    }
    let at = ops.len();
    let sorted = |mut counts: Vec<(Worker, usize)>| {
        counts.sort_unstable();
        counts
    };
    let want = sorted(reference.block_counts());
    for (i, index) in indexes.iter().enumerate() {
        let got = sorted(index.block_counts());
        if got != want {
            let what = format!("closing block_counts(): got {got:?}, want {want:?}");
            return Err((i, Divergence { at, what }));
        }
    }
    for w in workers {
        let want = reference.block_count(*w);
        for (i, index) in indexes.iter().enumerate() {
            let got = index.block_count(*w);
            if got != want {
                let what = format!("closing block_count({w}): got {got}, want {want}");
                return Err((i, Divergence { at, what }));
            }
        }
    }
    // Each dump is replayed into a reference; layouts that dump the same events share one (the
    // core writes dumps, so they usually do), which answers for all of them.
    let mut dumps: Vec<Vec<Event>> = Vec::with_capacity(indexes.len());
    let mut rebuilt: Vec<NaiveIndexer> = Vec::new();
    let mut copy_of = Vec::with_capacity(indexes.len());
    for (i, index) in indexes.iter().enumerate() {
        let dump = index.dump();
        if let Some(same) = dumps.iter().position(|d| *d == dump) {
            copy_of.push(copy_of[same]);
            dumps.push(dump);
            continue;
        }
        let copy = NaiveIndexer::new();
        for event in &dump {
            copy.apply(event).map_err(|e| {
                let what = format!("dump() replay rejected {event:?}: {e}");
                (i, Divergence { at, what })
            })?;
        }
        copy_of.push(rebuilt.len());
        rebuilt.push(copy);
        dumps.push(dump);
    }
    for q in closing_queries {
        let want = reference.find_matches(q);
        let from_dumps: Vec<OverlapScores> = rebuilt.iter().map(|c| c.find_matches(q)).collect();
        for (i, (index, &copy)) in indexes.iter().zip(&copy_of).enumerate() {
            let live = index.find_matches(q);
            let answers = [
                ("closing query", &live),
                ("dump() then query", &from_dumps[copy]),
            ];
            for (asked, got) in answers {
                if *got != want {
                    let what = format!(
                        "{asked} of {} blocks: got {:?}, want {:?}",
                        q.len(),
                        got.to_sorted_vec(),
                        want.to_sorted_vec()
                    );
                    return Err((i, Divergence { at, what }));
                }
            }
        }
    }
    Ok(())
}
