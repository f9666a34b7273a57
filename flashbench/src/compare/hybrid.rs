//! The `hybrid` preset: a gpt-oss-like fleet (full attention and a sliding window of 128
//! tokens), every layout's queries with the window group against the same fleet with the
//! full-attention group alone.
//!
//! The trace runs through the mock engines; the window group caches what the full-attention
//! group caches and evicts, as vLLM's sliding-window manager does, every block of a store but
//! the window's tail at once (`remove_skipped_blocks` frees them, and a busy pool evicts them
//! first). Each subject replays the same steps on a fresh index, applying the events between
//! two queries as one batch on a writer thread (as a router applies an engine's batches) and
//! timing each query on the calling thread once the events before it are in; every
//! answer is checked against the reference of its model. Interleaved rounds, medians.
//!
//! A third subject is the control: the two-group fleet, queried through its full-attention
//! layout alone (the same walk a one-group query does, with the same answers). Its ratio to one
//! group is what the two-group replay's surroundings (its writer's longer work between queries)
//! cost a query that does no work for the second group.

use super::presets::Step;
use crate::engine::{self, EngineConfig};
use crate::trace::Request;
use flash_indexer::hybrid::{
    GroupKind, GroupSpec, HybridIndex, HybridIndexer, ModelGroups, NaiveHybridIndexer,
};
use flash_indexer::testing::{CountingAlloc, collect_garbage};
use flash_indexer::{Event, EventKind, KvIndex, LocalHash, OverlapScores, SeqHash, Worker};
use hdrhistogram::Histogram;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// gpt-oss's window, in tokens.
const WINDOW: u32 = 128;

/// One step of the two-group replay: the events between two queries, or a query.
enum HybridStep {
    /// Applied as one batch, as a router applies an engine's batch: the full-attention group's
    /// events first, then the window group's, each group's in order (what a group holds does
    /// not depend on how the groups' events interleave). The one-group model takes the first
    /// `chain`.
    Events {
        events: Vec<(u32, Event)>,
        chain: usize,
    },
    Query(Vec<LocalHash>),
}

/// Collects each group's events and makes them one [`HybridStep::Events`] at each query.
#[derive(Default)]
struct Batcher {
    chain: Vec<(u32, Event)>,
    window: Vec<(u32, Event)>,
}

impl Batcher {
    fn push(&mut self, group: u32, event: Event) {
        match group {
            0 => self.chain.push((0, event)),
            _ => self.window.push((group, event)),
        }
    }

    /// Ends the batch (if it has events) into `out`.
    fn flush(&mut self, out: &mut Vec<HybridStep>) {
        let chain = self.chain.len();
        let mut events = core::mem::take(&mut self.chain);
        events.append(&mut self.window);
        if !events.is_empty() {
            out.push(HybridStep::Events { events, chain });
        }
    }
}

/// The engines' events for both groups: the full-attention group's as the engines publish them,
/// the window group's derived as vLLM's sliding-window manager would publish them.
fn steps(
    trace: &[Request],
    cfg: &EngineConfig,
    source: &str,
    window_blocks: usize,
) -> Vec<HybridStep> {
    let workload = engine::generate(trace, cfg, source);
    let mut window_held: HashMap<Worker, HashSet<SeqHash>> = HashMap::new();
    let mut out = Vec::new();
    let mut batch = Batcher::default();
    for (_, step) in super::presets::steps_of(&workload.ops) {
        let event = match step {
            Step::Query(q) => {
                batch.flush(&mut out);
                out.push(HybridStep::Query(q));
                continue;
            }
            Step::Event(event) => event,
        };
        let worker = event.worker;
        let derived: Vec<Event> = match &event.kind {
            EventKind::Stored { parent, blocks } => {
                let held = window_held.entry(worker).or_default();
                held.extend(blocks.iter().map(|b| b.seq));
                let slid_out = blocks.len().saturating_sub(window_blocks);
                let gone: Vec<SeqHash> = blocks[..slid_out].iter().map(|b| b.seq).collect();
                for seq in &gone {
                    held.remove(seq);
                }
                let mut derived = vec![Event::stored(
                    worker,
                    event.event_id,
                    *parent,
                    blocks.clone(),
                )];
                if !gone.is_empty() {
                    derived.push(Event::removed(worker, event.event_id, gone));
                }
                derived
            }
            EventKind::Removed { blocks } => {
                let held = window_held.entry(worker).or_default();
                let gone: Vec<SeqHash> =
                    blocks.iter().copied().filter(|s| held.remove(s)).collect();
                if gone.is_empty() {
                    vec![]
                } else {
                    vec![Event::removed(worker, event.event_id, gone)]
                }
            }
            EventKind::Cleared => {
                window_held.remove(&worker);
                vec![]
            }
        };
        batch.push(0, event);
        for event in derived {
            batch.push(1, event);
        }
    }
    batch.flush(&mut out);
    out
}

type Scores = Vec<(Worker, u32)>;

/// The subjects of a round, by index: one group, two groups, and the control (two groups, walk
/// alone).
const SUBJECTS: usize = 3;
const ONE_GROUP: usize = 0;
const TWO_GROUPS: usize = 1;
const CONTROL: usize = 2;

/// When a query may start, besides once every event before it is in.
#[derive(Clone, Copy)]
enum Pace<'a> {
    /// At once.
    Free,
    /// At least this long after the previous query started.
    Gap(Duration),
    /// Query `i` at least `idle[i]` after the previous answer: another run's idle times.
    Idle(&'a [Duration]),
}

/// One replay's answers, and for each query its nanoseconds (when `timed`) and the idle time
/// before it (from the previous answer to its start).
struct Replayed {
    answers: Vec<Scores>,
    ns: Vec<u64>,
    idle: Vec<Duration>,
}

/// Replays `steps` into `index`. Events are applied on a writer thread, a batch at a time, as a
/// router's event loop applies them, and each query runs on the calling thread once every event
/// before it is in (the writer waits for the answer), so the answers are the reference's and the query's
/// caches hold what a query thread's would. `pace` may hold a query back longer. Queries go to
/// `ask` (the index's own `find_matches`, or the control's walk alone).
fn replay(
    index: &dyn HybridIndex,
    ask: &dyn Fn(&[LocalHash]) -> OverlapScores,
    steps: &[HybridStep],
    timed: bool,
    pace: Pace<'_>,
) -> Replayed {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let groups = index.model().len() as u32;
    let queries: Vec<&Vec<LocalHash>> = steps
        .iter()
        .filter_map(|s| match s {
            HybridStep::Query(q) => Some(q),
            HybridStep::Events { .. } => None,
        })
        .collect();
    // Queries the writer has reached (every event before them applied), and queries answered.
    let (reached, answered) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let mut out = Replayed {
        answers: Vec::with_capacity(queries.len()),
        ns: Vec::with_capacity(queries.len()),
        idle: Vec::with_capacity(queries.len()),
    };
    let mut previous = Instant::now();
    let mut last_start = previous;
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for step in steps {
                match step {
                    HybridStep::Events { events, chain } => {
                        let events = if groups > 1 {
                            events
                        } else {
                            &events[..*chain]
                        };
                        let _ = index.apply_batch(events);
                    }
                    HybridStep::Query(_) => {
                        let at = reached.fetch_add(1, Ordering::Release) + 1;
                        while answered.load(Ordering::Acquire) < at {
                            std::hint::spin_loop();
                        }
                    }
                }
            }
        });
        for (at, query) in queries.iter().enumerate() {
            let due = match pace {
                Pace::Free => previous,
                Pace::Gap(gap) => last_start + gap,
                Pace::Idle(idle) => previous + idle.get(at).copied().unwrap_or_default(),
            };
            while reached.load(Ordering::Acquire) <= at || Instant::now() < due {
                std::hint::spin_loop();
            }
            let query = (*query).clone();
            let t0 = Instant::now();
            last_start = t0;
            out.idle.push(t0 - previous);
            let scores = ask(&query);
            if timed {
                out.ns.push(t0.elapsed().as_nanos() as u64);
            }
            out.answers.push(scores.to_sorted_vec());
            previous = Instant::now();
            answered.store(at + 1, Ordering::Release);
        }
    });
    out
}

fn quantile(ns: &[u64], q: f64) -> f64 {
    let mut h = Histogram::<u64>::new(3).expect("3 significant figures is valid");
    for &v in ns {
        let _ = h.record(v.max(1));
    }
    h.value_at_quantile(q) as f64 / 1000.0
}

fn median(v: Vec<f64>) -> f64 {
    crate::report::median(v).unwrap_or(f64::NAN)
}

/// Runs the preset; returns its markdown table. `Err` if any layout's answer differs from its
/// model's reference.
pub fn run(
    trace: &[Request],
    source: &str,
    cfg: &EngineConfig,
    rounds: usize,
    gap: Duration,
    idle_matched: bool,
) -> Result<String, String> {
    if idle_matched && !gap.is_zero() {
        return Err("the hybrid preset takes a query gap or matched idle times, not both".into());
    }
    let bs = cfg.block_size as u32;
    let one = ModelGroups::full_attention(bs);
    let two = ModelGroups::new(vec![
        GroupSpec::new(GroupKind::FullAttention, bs),
        GroupSpec::new(GroupKind::SlidingWindow { window: WINDOW }, bs),
    ])
    .map_err(|e| e.to_string())?;
    let window_blocks = (WINDOW as usize - 1).div_ceil(bs as usize);
    let steps = steps(trace, cfg, source, window_blocks);
    let queries = steps
        .iter()
        .filter(|s| matches!(s, HybridStep::Query(_)))
        .count();
    eprintln!("hybrid: computing the reference answers ...");
    let [expected_one, expected_two] = [&one, &two].map(|model| {
        let reference = NaiveHybridIndexer::new(model.clone());
        let ask = |q: &[LocalHash]| reference.find_matches(q);
        replay(&reference, &ask, &steps, false, Pace::Free).answers
    });
    let layouts: Vec<_> = flash_indexer::testing::enabled_layouts()
        .into_iter()
        .filter(|f| f.primary)
        .collect();
    // Per layout and subject (one group, two groups, the control): p50 and p99 of every round,
    // and the median idle time before a query.
    let mut cells: Vec<[Vec<(f64, f64)>; SUBJECTS]> =
        layouts.iter().map(|_| Default::default()).collect();
    let mut idles: Vec<[Vec<f64>; SUBJECTS]> = layouts.iter().map(|_| Default::default()).collect();
    // Per layout and subject, the index's live MiB after each round's replay.
    let mut mib: Vec<[Vec<f64>; SUBJECTS]> = layouts.iter().map(|_| Default::default()).collect();
    // Per layout, the idle times of its latest two-group run: with `idle_matched`, the one-group
    // queries wait as long, so that both models' queries follow the same idle time.
    let mut schedules: Vec<Vec<Duration>> = vec![Vec::new(); layouts.len()];
    let mut wrong = Vec::new();
    if idle_matched {
        for (l, layout) in layouts.iter().enumerate() {
            eprintln!(
                "hybrid: {} (2 groups), idle times for the first round",
                layout.name
            );
            let index: HybridIndexer<Box<dyn KvIndex>> =
                HybridIndexer::with_layout(two.clone(), (layout.make)());
            let ask = |q: &[LocalHash]| index.find_matches(q);
            schedules[l] = replay(&index, &ask, &steps, false, Pace::Free).idle;
        }
    }
    for round in 0..rounds.max(1) {
        for (l, layout) in layouts.iter().enumerate() {
            // Which subject goes first rotates, round by round.
            for m in (0..SUBJECTS).map(|k| (k + round) % SUBJECTS) {
                // The control answers as one group does: its walk is the full-attention group's.
                let (model, expected, name) = [
                    (&one, &expected_one, "1 group"),
                    (&two, &expected_two, "2 groups"),
                    (&two, &expected_one, "2 groups, walk alone"),
                ][m];
                eprintln!(
                    "hybrid: round {} of {rounds}, {} ({name})",
                    round + 1,
                    layout.name,
                );
                collect_garbage();
                let base = CountingAlloc::live_bytes();
                let index: HybridIndexer<Box<dyn KvIndex>> =
                    HybridIndexer::with_layout(model.clone(), (layout.make)());
                let pace = match (idle_matched, m) {
                    (true, ONE_GROUP) => Pace::Idle(&schedules[l]),
                    (true, _) => Pace::Free,
                    (false, _) if gap.is_zero() => Pace::Free,
                    (false, _) => Pace::Gap(gap),
                };
                let full = |q: &[LocalHash]| index.find_matches(q);
                let walk = |q: &[LocalHash]| index.chain().find_matches(q);
                let ask: &dyn Fn(&[LocalHash]) -> OverlapScores =
                    if m == CONTROL { &walk } else { &full };
                let Replayed { answers, ns, idle } = replay(&index, ask, &steps, true, pace);
                let differing = answers.iter().zip(expected).filter(|(a, e)| a != e).count();
                if differing > 0 {
                    wrong.push(format!(
                        "{} ({name}): {differing} differing answers",
                        layout.name
                    ));
                }
                cells[l][m].push((quantile(&ns, 0.5), quantile(&ns, 0.99)));
                let idle_ns: Vec<u64> = idle.iter().map(|d| d.as_nanos() as u64).collect();
                idles[l][m].push(quantile(&idle_ns, 0.5));
                // What is live now beside the index: the idle times, kept for the next round.
                drop((answers, ns, idle_ns));
                collect_garbage();
                let beside = idle.capacity() * size_of::<Duration>();
                let live = CountingAlloc::live_bytes() - base - beside as isize;
                mib[l][m].push(live as f64 / (1 << 20) as f64);
                if idle_matched && m == TWO_GROUPS {
                    schedules[l] = idle;
                }
            }
        }
    }
    if !wrong.is_empty() {
        return Err(format!("our layouts must be exact: {}", wrong.join("; ")));
    }
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## hybrid\n\n{source} through the mock engines ({} workers x {} blocks, block size {bs}), \
         {queries} queries, each timed on the query thread once a writer thread has applied the events before it (those between two queries as one batch){}. Model: full attention, or full attention and a sliding \
         window of {WINDOW} tokens ({window_blocks} blocks), the window group evicting every \
         block of a store but its last {window_blocks} at once. Medians of {rounds} rounds; \
         every answer equal to its model's reference. Control: the two-group fleet queried \
         through its full-attention layout alone (one group's walk and answers, two groups' \
         writer), as a ratio to one group. MiB: the index's live heap after a replay.\n",
        cfg.workers,
        cfg.capacity_blocks,
        match (idle_matched, gap.is_zero()) {
            (true, _) => " and, with one group, at least as long after the previous answer as \
                          the query of the layout's latest two-group run waited for its writer \
                          (matched idle times)"
                .to_string(),
            (false, true) => String::new(),
            (false, false) => format!(
                " and at least {} us after the previous query",
                gap.as_micros()
            ),
        }
    );
    let _ = writeln!(
        md,
        "| layout | p50 us, 1 group | p50 us, 2 groups | p50 ratio | p99 us, 1 group | p99 us, 2 groups | p99 ratio | control p50 / p99 ratio | idle us before a query, 1 / 2 groups | MiB, 1 / 2 groups |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for (((layout, [one, two, control]), [idle_one, idle_two, _]), [mib_one, mib_two, _]) in
        layouts.iter().zip(&cells).zip(&idles).zip(&mib)
    {
        let p50 = |v: &Vec<(f64, f64)>| median(v.iter().map(|c| c.0).collect());
        let p99 = |v: &Vec<(f64, f64)>| median(v.iter().map(|c| c.1).collect());
        let _ = writeln!(
            md,
            "| {} | {:.2} | {:.2} | {:.2}x | {:.2} | {:.2} | {:.2}x | {:.2}x / {:.2}x | {:.1} / {:.1} | {:.1} / {:.1} |",
            layout.name,
            p50(one),
            p50(two),
            p50(two) / p50(one),
            p99(one),
            p99(two),
            p99(two) / p99(one),
            p50(control) / p50(one),
            p99(control) / p99(one),
            median(idle_one.clone()),
            median(idle_two.clone()),
            median(mib_one.clone()),
            median(mib_two.clone()),
        );
    }
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash_indexer::Block;

    /// The answers of a free-running, untimed replay of `steps` asked through `ask`.
    fn answers(
        index: &dyn HybridIndex,
        ask: &dyn Fn(&[LocalHash]) -> OverlapScores,
        steps: &[HybridStep],
    ) -> Vec<Scores> {
        replay(index, ask, steps, false, Pace::Free).answers
    }

    /// Two workers' stores, each followed by a query, on the window group too.
    fn few_steps() -> Vec<HybridStep> {
        let blocks: Vec<Block> = (0..4)
            .map(|i| Block::new(LocalHash(i), SeqHash(100 + i)))
            .collect();
        let query: Vec<LocalHash> = (0..4).map(LocalHash).collect();
        let mut steps = Vec::new();
        let mut batch = Batcher::default();
        for id in 0..3 {
            let worker = Worker::new(id, 0);
            for group in 0..2 {
                batch.push(group, Event::stored(worker, 0, None, blocks.clone()));
            }
            batch.flush(&mut steps);
            steps.push(HybridStep::Query(query.clone()));
        }
        steps
    }

    #[test]
    fn the_control_walks_the_two_group_fleet_and_answers_as_one_group() {
        let bs = 4;
        let two = ModelGroups::new(vec![
            GroupSpec::new(GroupKind::FullAttention, bs),
            GroupSpec::new(GroupKind::SlidingWindow { window: 8 }, bs),
        ])
        .unwrap();
        let mut steps = few_steps();
        // The window group of worker 0 drops the last block: two groups now answer less.
        let dropped = Event::removed(Worker::new(0, 0), 1, vec![SeqHash(103)]);
        steps.push(HybridStep::Events {
            events: vec![(1, dropped)],
            chain: 0,
        });
        steps.push(HybridStep::Query((0..4).map(LocalHash).collect()));
        let one_group = NaiveHybridIndexer::new(ModelGroups::full_attention(bs));
        let expected_one = answers(&one_group, &|q| one_group.find_matches(q), &steps);
        let index: HybridIndexer<flash_indexer::DefaultIndexer> = HybridIndexer::new(two);
        let full = answers(&index, &|q| index.find_matches(q), &steps);
        let index: HybridIndexer<flash_indexer::DefaultIndexer> =
            HybridIndexer::new(index.model().clone());
        let walk = answers(&index, &|q| index.chain().find_matches(q), &steps);
        assert_ne!(full, expected_one, "the groups disagree");
        assert_eq!(walk, expected_one);
    }

    #[test]
    fn matched_idle_times_hold_each_query_back_as_long_as_asked() {
        let model = ModelGroups::new(vec![
            GroupSpec::new(GroupKind::FullAttention, 4),
            GroupSpec::new(GroupKind::SlidingWindow { window: 8 }, 4),
        ])
        .unwrap();
        let steps = few_steps();
        let index = NaiveHybridIndexer::new(model.clone());
        let free = replay(&index, &|q| index.find_matches(q), &steps, true, Pace::Free);
        let asked = [3, 0, 5].map(Duration::from_millis);
        let index = NaiveHybridIndexer::new(model);
        let held = replay(
            &index,
            &|q| index.find_matches(q),
            &steps,
            true,
            Pace::Idle(&asked),
        );
        assert_eq!(held.answers, free.answers, "pacing changes no answer");
        assert_eq!((held.ns.len(), held.idle.len()), (3, 3));
        for (idle, asked) in held.idle.iter().zip(asked) {
            assert!(*idle >= asked, "waited {idle:?}, asked {asked:?}");
        }
        let worker = Worker::new(2, 0);
        assert_eq!(
            held.answers[2].iter().find(|(w, _)| *w == worker),
            Some(&(worker, 4))
        );
    }
}
