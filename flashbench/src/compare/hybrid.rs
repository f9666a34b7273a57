//! The `hybrid` preset: a gpt-oss-like fleet (full attention and a sliding window of 128
//! tokens), every layout's queries with the window group against the same fleet with the
//! full-attention group alone.
//!
//! The trace runs through the mock engines; the window group caches what the full-attention
//! group caches and evicts, as vLLM's sliding-window manager does, every block of a store but
//! the window's tail at once (`remove_skipped_blocks` frees them, and a busy pool evicts them
//! first). Each subject replays the same steps on a fresh index, applying events on a writer
//! thread and timing each query on the calling thread once the events before it are in; every
//! answer is checked against the reference of its model. Interleaved rounds, medians.

use super::presets::Step;
use crate::engine::{self, EngineConfig};
use crate::trace::Request;
use flash_indexer::hybrid::{
    GroupKind, GroupSpec, HybridIndex, HybridIndexer, ModelGroups, NaiveHybridIndexer,
};
use flash_indexer::{Event, EventKind, KvIndex, LocalHash, SeqHash, Worker};
use hdrhistogram::Histogram;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// gpt-oss's window, in tokens.
const WINDOW: u32 = 128;

/// One step of the two-group replay: an event of a group, or a query.
enum HybridStep {
    Event(u32, Event),
    Query(Vec<LocalHash>),
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
    for (_, step) in super::presets::steps_of(&workload.ops) {
        let event = match step {
            Step::Query(q) => {
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
        out.push(HybridStep::Event(0, event));
        out.extend(derived.into_iter().map(|e| HybridStep::Event(1, e)));
    }
    out
}

type Scores = Vec<(Worker, u32)>;

/// Each query's answer from `index`, and each query's nanoseconds (`timed`). Events are
/// applied on a writer thread, as a router's event loop applies them, and each query runs on
/// the calling thread once every event before it is in (the writer waits for the answer), so
/// the answers are the reference's and the query's caches hold what a query thread's would.
/// With a `gap`, a query also waits until `gap` after the previous one started.
fn replay(
    index: &dyn HybridIndex,
    steps: &[HybridStep],
    timed: bool,
    gap: Duration,
) -> (Vec<Scores>, Vec<u64>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let groups = index.model().len() as u32;
    let queries: Vec<&Vec<LocalHash>> = steps
        .iter()
        .filter_map(|s| match s {
            HybridStep::Query(q) => Some(q),
            HybridStep::Event(..) => None,
        })
        .collect();
    // Queries the writer has reached (every event before them applied), and queries answered.
    let (reached, answered) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let mut answers = Vec::with_capacity(queries.len());
    let mut ns = Vec::with_capacity(queries.len());
    let mut due = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for step in steps {
                match step {
                    HybridStep::Event(group, event) if *group < groups => {
                        let _ = index.apply(*group, event);
                    }
                    HybridStep::Event(..) => {}
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
            while reached.load(Ordering::Acquire) <= at || Instant::now() < due {
                std::hint::spin_loop();
            }
            let query = (*query).clone();
            let t0 = Instant::now();
            due = t0 + gap;
            let scores = index.find_matches(&query);
            if timed {
                ns.push(t0.elapsed().as_nanos() as u64);
            }
            answers.push(scores.to_sorted_vec());
            answered.store(at + 1, Ordering::Release);
        }
    });
    (answers, ns)
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
) -> Result<String, String> {
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
        replay(&reference, &steps, false, Duration::ZERO).0
    });
    let layouts: Vec<_> = flash_indexer::testing::enabled_layouts()
        .into_iter()
        .filter(|f| f.primary)
        .collect();
    // Per layout and model: p50 and p99 of every round.
    let mut cells: Vec<[Vec<(f64, f64)>; 2]> = layouts.iter().map(|_| [vec![], vec![]]).collect();
    let mut wrong = Vec::new();
    for round in 0..rounds.max(1) {
        for (l, layout) in layouts.iter().enumerate() {
            // Which model goes first alternates, round by round.
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for m in order {
                let (model, expected) = [(&one, &expected_one), (&two, &expected_two)][m];
                eprintln!(
                    "hybrid: round {} of {rounds}, {} ({} groups)",
                    round + 1,
                    layout.name,
                    model.len()
                );
                let index: HybridIndexer<Box<dyn KvIndex>> =
                    HybridIndexer::with_layout(model.clone(), (layout.make)());
                let (answers, ns) = replay(&index, &steps, true, gap);
                let differing = answers.iter().zip(expected).filter(|(a, e)| a != e).count();
                if differing > 0 {
                    wrong.push(format!(
                        "{} with {} groups: {differing} differing answers",
                        layout.name,
                        model.len()
                    ));
                }
                cells[l][m].push((quantile(&ns, 0.5), quantile(&ns, 0.99)));
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
         {queries} queries, each timed on the query thread once a writer thread has applied the events before it{}. Model: full attention, or full attention and a sliding \
         window of {WINDOW} tokens ({window_blocks} blocks), the window group evicting every \
         block of a store but its last {window_blocks} at once. Medians of {rounds} rounds; \
         every answer equal to its model's reference.\n",
        cfg.workers,
        cfg.capacity_blocks,
        if gap.is_zero() {
            String::new()
        } else {
            format!(
                " and at least {} us after the previous query",
                gap.as_micros()
            )
        }
    );
    let _ = writeln!(
        md,
        "| layout | p50 us, 1 group | p50 us, 2 groups | p50 ratio | p99 us, 1 group | p99 us, 2 groups | p99 ratio |\n|---|---|---|---|---|---|---|"
    );
    for (layout, [one, two]) in layouts.iter().zip(&cells) {
        let p50 = |v: &Vec<(f64, f64)>| median(v.iter().map(|c| c.0).collect());
        let p99 = |v: &Vec<(f64, f64)>| median(v.iter().map(|c| c.1).collect());
        let _ = writeln!(
            md,
            "| {} | {:.2} | {:.2} | {:.2}x | {:.2} | {:.2} | {:.2}x |",
            layout.name,
            p50(one),
            p50(two),
            p50(two) / p50(one),
            p99(one),
            p99(two),
            p99(two) / p99(one)
        );
    }
    Ok(md)
}
