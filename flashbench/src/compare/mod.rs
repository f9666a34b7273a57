//! `flashbench compare`: every layout of this build side by side with NVIDIA Dynamo's indexes
//! (with the `dynamo` feature) on named workloads, in one process, interleaved rounds, medians.
//!
//! Each round runs every subject once on a fresh index, the rounds in orders where every subject
//! directly follows every other equally often ([`order`]), so that drift of the shared machine,
//! and whatever one subject leaves behind for the next, spreads over all of them; each cell is
//! the median over the rounds. Every query a subject answers (and, for trace replays, every
//! query of a separate checked replay) is compared with the reference's answer: the `differing`
//! column.

#[cfg(feature = "dynamo")]
pub mod dynamo;
mod hybrid;
pub mod measure;
pub mod order;
mod output;
pub mod presets;
pub mod reference;
pub mod subject;

use crate::engine::EngineConfig;
use crate::trace::Request;
use measure::Run;
use presets::Preset;
use std::path::PathBuf;
use subject::SubjectFactory;

/// How a comparison runs.
#[derive(Clone, Debug)]
pub struct CompareConfig {
    /// Presets to run, by name, in [`presets::NAMES`] order.
    pub presets: Vec<String>,
    /// Interleaved rounds per preset (each cell is the median).
    pub rounds: usize,
    /// Writer threads of every subject.
    pub threads: usize,
    /// Paced preset: times the trace's real rate, and wall seconds.
    pub paced_speed: f64,
    pub paced_seconds: f64,
    /// Fleet preset: workers and duplication.
    pub fleet_workers: u64,
    pub fleet_duplicate: usize,
    /// Hybrid preset: the least time from one query to the next.
    pub query_gap: std::time::Duration,
    /// Hybrid preset: one-group queries wait as long as the two-group ones waited for their
    /// writer (matched idle times).
    pub idle_matched: bool,
    /// How unpaced trace replays are driven, timed and checked.
    pub method: subject::Method,
    /// Where `compare.md`, `compare.json` and the figures go (none: print only).
    pub out: Option<PathBuf>,
}

/// The subjects of this build: our primary layouts, then Dynamo's (with the `dynamo` feature).
pub fn subjects() -> Vec<SubjectFactory> {
    #[allow(unused_mut)]
    let mut all = subject::ours();
    #[cfg(feature = "dynamo")]
    all.extend(dynamo::subjects());
    all
}

/// The results of one preset: per subject, every round.
pub struct Outcome {
    pub preset: Preset,
    /// Interleaved rounds run: `--rounds`, or the preset's minimum.
    pub rounds: usize,
    pub runs: Vec<(String, bool, Vec<Run>)>,
    pub load_before: String,
    pub load_after: String,
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn build_preset(
    name: &str,
    cfg: &CompareConfig,
    trace: &[Request],
    source: &str,
    engine: &EngineConfig,
) -> Preset {
    match name {
        "dynamo" => presets::dynamo(),
        "shared-prefix" => presets::shared_prefix(),
        "depth" => presets::depth(),
        "trace" => presets::trace(trace, source, engine),
        "trace-paced" => {
            presets::trace_paced(trace, source, engine, cfg.paced_speed, cfg.paced_seconds)
        }
        "fleet" => {
            let fleet = EngineConfig {
                workers: cfg.fleet_workers,
                duplicate: cfg.fleet_duplicate,
                ..engine.clone()
            };
            presets::fleet(trace, source, &fleet)
        }
        _ => unreachable!("names are checked before"),
    }
}

/// The preset of models with several KV-cache groups: our layouts only (Dynamo's index has no
/// groups), its own table (`hybrid.md`).
const HYBRID: &str = "hybrid";

/// Runs the comparison and writes its tables (and figures, with `out`).
pub fn compare(
    cfg: &CompareConfig,
    trace: &[Request],
    source: &str,
    engine: &EngineConfig,
) -> Result<(), String> {
    for name in &cfg.presets {
        if !presets::NAMES.contains(&name.as_str()) && name != HYBRID {
            return Err(format!(
                "unknown preset {name:?}; known: {}, {HYBRID}",
                presets::NAMES.join(", ")
            ));
        }
    }
    if cfg.presets.iter().any(|p| p == HYBRID) {
        let md = hybrid::run(
            trace,
            source,
            engine,
            cfg.rounds,
            cfg.query_gap,
            cfg.idle_matched,
        )?;
        println!("{md}");
        if let Some(dir) = &cfg.out {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            // The record is the default method's; matched idle times are a control beside it.
            let name = if cfg.idle_matched {
                "hybrid_idle_matched.md"
            } else {
                "hybrid.md"
            };
            let path = dir.join(name);
            std::fs::write(&path, &md).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        if cfg.presets.iter().all(|p| p == HYBRID) {
            return Ok(());
        }
    }
    #[cfg(feature = "dynamo")]
    dynamo::check_hashes_coincide()?;
    let subjects = subjects();
    let mut outcomes = Vec::new();
    for name in presets::NAMES
        .iter()
        .filter(|n| cfg.presets.iter().any(|p| p == *n))
    {
        let started = std::time::Instant::now();
        let preset = build_preset(name, cfg, trace, source, engine);
        eprintln!("{name}: computing the reference answers ...");
        let expected = measure::expected(&preset)?;
        let load_before = load_average();
        let mut runs: Vec<(String, bool, Vec<Run>)> = subjects
            .iter()
            .map(|s| (s.name.to_string(), s.ours, Vec::new()))
            .collect();
        let rounds = match cfg.method {
            subject::Method::Compare => cfg.rounds.max(preset.min_rounds).max(1),
            subject::Method::Outsider => cfg.rounds.max(1),
        };
        for round in 0..rounds {
            let check = match cfg.method {
                subject::Method::Compare => round == 0,
                subject::Method::Outsider => round + 1 == rounds,
            };
            for i in order::of_round(round, subjects.len()) {
                let (s, (_, _, of_subject)) = (&subjects[i], &mut runs[i]);
                eprintln!("{name}: round {} of {rounds}, {}", round + 1, s.name);
                let run = measure::run(s, &preset, &expected, cfg.threads, check, cfg.method);
                of_subject.push(run);
            }
        }
        let outcome = Outcome {
            preset,
            rounds,
            runs,
            load_before,
            load_after: load_average(),
        };
        println!("{}", output::table(&outcome, cfg));
        eprintln!("{name}: {:.0} s", started.elapsed().as_secs_f64());
        outcomes.push(outcome);
    }
    if let Some(dir) = &cfg.out {
        output::write(&outcomes, cfg, dir)?;
    }
    let wrong: Vec<String> = outcomes
        .iter()
        .flat_map(|o| {
            o.runs
                .iter()
                .filter(|(_, ours, _)| *ours)
                .filter_map(|(name, _, runs)| {
                    let differing: u64 = runs.iter().map(|r| r.differing).sum();
                    let rejected: u64 = runs.iter().filter_map(|r| r.rejected).sum();
                    (differing > 0 || rejected > 0).then(|| {
                    format!(
                        "{name} on {}: {differing} differing queries, {rejected} rejected events",
                        o.preset.name
                    )
                })
                })
        })
        .collect();
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("our layouts must be exact: {}", wrong.join("; ")))
    }
}
