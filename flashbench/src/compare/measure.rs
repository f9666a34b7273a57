//! Runs a preset's phases on one subject and measures them; the expected answers come first,
//! from the reference, once per preset.

use super::presets::{Phase, Preset, Step, write_blocks};
use super::reference::Reference;
use super::subject::{Method, Scores, Subject, SubjectFactory};
use flash_indexer::KvIndex;
use flash_indexer::testing::{CountingAlloc, collect_garbage};
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How many queries of each phase are also asked of `NaiveIndexer` (each costs a walk of the
/// whole state there).
const NAIVE_SAMPLE: usize = 3;

/// What every query of a preset must answer, and how much is held after each phase.
pub struct Expected {
    /// Per phase: the answer of each query, in order (empty for write phases).
    answers: Vec<Vec<Scores>>,
    /// Per phase: `(worker, block)` pairs held once it is applied.
    held_pairs: Vec<u64>,
}

fn sorted(scores: &flash_indexer::OverlapScores) -> Scores {
    scores.to_sorted_vec()
}

/// Feeds the preset to the reference in order, recording every answer.
pub fn expected(preset: &Preset) -> Result<Expected, String> {
    let reference = Reference::new();
    let mut answers = Vec::new();
    let mut held_pairs = Vec::new();
    let apply = |e| {
        // Rejections are part of what the indexes must reproduce: nothing to do here.
        let _ = reference.apply(e);
    };
    for phase in &preset.phases {
        let mut of_phase = Vec::new();
        match phase {
            Phase::Write { events, .. } => events.iter().for_each(apply),
            Phase::Query { queries, .. } => {
                let every = (queries.len() / NAIVE_SAMPLE).max(1);
                for (i, q) in queries.iter().enumerate() {
                    let answer = if i % every == 0 {
                        reference.find_matches_checked(q)?
                    } else {
                        reference.find_matches(q)
                    };
                    of_phase.push(sorted(&answer));
                }
            }
            Phase::Replay { steps, .. } => {
                let queries = steps
                    .iter()
                    .filter(|(_, s)| matches!(s, Step::Query(_)))
                    .count();
                let every = (queries / NAIVE_SAMPLE).max(1);
                for (_, step) in steps {
                    match step {
                        Step::Event(e) => apply(e),
                        Step::Query(q) => {
                            let answer = if of_phase.len() % every == every - 1 {
                                reference.find_matches_checked(q)?
                            } else {
                                reference.find_matches(q)
                            };
                            of_phase.push(sorted(&answer));
                        }
                    }
                }
            }
        }
        answers.push(of_phase);
        held_pairs.push(reference.held_pairs());
    }
    Ok(Expected {
        answers,
        held_pairs,
    })
}

/// One run of a preset on one subject: a value per column, and the exactness count.
#[derive(Default, Clone, Debug)]
pub struct Run {
    pub values: BTreeMap<String, f64>,
    /// Queries checked, and how many of them differed from the reference.
    pub checked: u64,
    pub differing: u64,
    /// The differing queries by phase label (phases with none left out).
    pub differing_in: BTreeMap<&'static str, u64>,
    pub rejected: Option<u64>,
}

impl Run {
    fn count(&mut self, label: &'static str, checked: u64, differing: u64) {
        self.checked += checked;
        self.differing += differing;
        if differing > 0 {
            *self.differing_in.entry(label).or_default() += differing;
        }
    }
}

pub(super) fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

/// Runs every phase of `preset` on a fresh subject. Replays are timed without waiting for the
/// writers (their answers race the writers, so they are not checked); with `check_replays`, each
/// replay is also run on another fresh subject with a barrier before every query, and those
/// answers are checked: before the timed replay, or after it by `method`'s rule (unpaced replays
/// are driven by `method`; paced ones always as [`Method::Compare`] drives them).
pub fn run(
    factory: &SubjectFactory,
    preset: &Preset,
    expected: &Expected,
    threads: usize,
    check_replays: bool,
    method: Method,
) -> Run {
    let mut run = Run::default();
    collect_garbage();
    let base = CountingAlloc::live_bytes();
    let subject = (factory.make)(threads);
    for (i, phase) in preset.phases.iter().enumerate() {
        let label = phase.label();
        match phase {
            Phase::Write {
                events,
                bytes_after,
                ..
            } => {
                let t0 = Instant::now();
                for e in events {
                    subject.submit(e);
                }
                subject.barrier();
                let took = t0.elapsed();
                run.values.insert(
                    format!("{label} blocks/s"),
                    write_blocks(phase) as f64 / took.as_secs_f64(),
                );
                if *bytes_after {
                    collect_garbage();
                    let bytes = (CountingAlloc::live_bytes() - base) as f64;
                    let pairs = expected.held_pairs[i].max(1) as f64;
                    run.values.insert("bytes/pair".into(), bytes / pairs);
                }
            }
            Phase::Query { queries, .. } => {
                let mut h = latency_histogram();
                let mut differing = 0;
                for (q, want) in queries.iter().zip(&expected.answers[i]) {
                    let (ns, got) = subject.query(q);
                    h.saturating_record(ns.max(1));
                    differing += u64::from(&got != want);
                }
                run.count(label, queries.len() as u64, differing);
                insert_latencies(&mut run, label, &h);
            }
            Phase::Replay { steps, speed, .. } => {
                let check = |run: &mut Run| {
                    let checker = (factory.make)(threads);
                    let (checked, differing) =
                        checked_replay(&*checker, steps, &expected.answers[i]);
                    run.count(label, checked, differing);
                };
                // The outsider checks after timing, so that nothing ran before its first round.
                let outsider = method.outsider_replay(*speed);
                if check_replays && !outsider {
                    check(&mut run);
                }
                let (ops_per_s, h) = if outsider {
                    subject.replay_native(steps)
                } else {
                    timed_replay(&*subject, steps, *speed)
                };
                run.values.insert(format!("{label} ops/s"), ops_per_s);
                insert_latencies(&mut run, label, &h);
                if check_replays && outsider {
                    check(&mut run);
                }
            }
        }
    }
    run.rejected = subject.rejected();
    run
}

/// A phase's query latencies: p50, p99, p99.9 and the slowest query, in microseconds.
fn insert_latencies(run: &mut Run, label: &str, h: &Histogram<u64>) {
    run.values.insert(format!("{label} p50 us"), us(h, 0.5));
    run.values.insert(format!("{label} p99 us"), us(h, 0.99));
    run.values.insert(format!("{label} p99.9 us"), us(h, 0.999));
    run.values
        .insert(format!("{label} max us"), h.max() as f64 / 1e3);
}

fn checked_replay(subject: &dyn Subject, steps: &[(u64, Step)], answers: &[Scores]) -> (u64, u64) {
    let (mut checked, mut differing) = (0, 0);
    let mut answers = answers.iter();
    for (_, step) in steps {
        match step {
            Step::Event(e) => subject.submit(e),
            Step::Query(q) => {
                subject.barrier();
                let (_, got) = subject.query(q);
                let want = answers.next().expect("an answer per query");
                checked += 1;
                differing += u64::from(&got != want);
            }
        }
    }
    subject.barrier();
    (checked, differing)
}

fn timed_replay(subject: &dyn Subject, steps: &[(u64, Step)], speed: f64) -> (f64, Histogram<u64>) {
    let mut h = latency_histogram();
    let start = Instant::now();
    let t_first = steps.first().map_or(0, |(t, _)| *t);
    for (t, step) in steps {
        if speed > 0.0 {
            let at = start + Duration::from_secs_f64((t - t_first) as f64 / 1e6 / speed);
            let now = Instant::now();
            if now < at {
                std::thread::sleep(at - now);
            }
        }
        match step {
            Step::Event(e) => subject.submit(e),
            Step::Query(q) => {
                let (ns, _) = subject.query(q);
                h.saturating_record(ns.max(1));
            }
        }
    }
    subject.barrier();
    (steps.len() as f64 / start.elapsed().as_secs_f64(), h)
}
