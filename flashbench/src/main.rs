//! flashbench: replays request traces against every flash-indexer layout.
//!
//! With no arguments it synthesizes a Mooncake-like trace, runs the mock engines over it, and
//! replays the resulting workload on every layout (and the reference), printing a comparison.
//! `--trace FILE` uses a real Mooncake-format trace instead. `generate` writes a workload file;
//! `replay` replays one.

use clap::{Args, Parser, Subcommand};
use flash_indexer::testing::CountingAlloc;
use flash_indexer::testing::{self, IndexFactory};
use flashbench::engine::{self, EngineConfig};
use flashbench::replay::{self, ReplayConfig, Report};
use flashbench::workload::Workload;
use flashbench::{compare, report, route, sweep, trace};
use indicatif::{ProgressBar, ProgressStyle};
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The project's real trace, when flashbench runs from the repository root with `../shared`.
const SHARED_TRACE: &str = "../shared/traces/conversation_trace.jsonl";

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[derive(Parser, Debug)]
#[command(
    name = "flashbench",
    version,
    about = "Trace replay benchmark for flash-indexer layouts"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// A Mooncake-format trace; without it a synthetic Mooncake-like trace is used.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Requests of the synthetic trace (ignored with --trace).
    #[arg(long, default_value_t = 3000)]
    requests: usize,
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    replay: ReplayArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// flash-indexer-server beside Dynamo's standalone indexer (build with `--features dynamo`
    /// and `cargo build --release -p flash-indexer-server`): the same engines, the same queries
    /// through Dynamo's API; every answer compared, queries/s and latency at each client count,
    /// resident memory, our time per query by phase. Writes service.md.
    #[cfg(feature = "dynamo")]
    Service {
        /// Concurrent clients, one load phase each.
        #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
        clients: Vec<usize>,
        /// Seconds of load per service and client count.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Interleaved rounds of every load phase; each cell is the median over them.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// The fleet (one stand-in engine per worker).
        #[command(flatten)]
        fleet: flash_indexer_server::fleet::Fleet,
        /// Queries whose answers are compared one by one.
        #[arg(long, default_value_t = 2000)]
        compared: u64,
        /// Indexer threads of Dynamo's service.
        #[arg(long, default_value_t = 2)]
        dynamo_threads: usize,
        /// Run our server with the GPU tier alone (writes service_gpu_only.md).
        #[arg(long)]
        gpu_only: bool,
        /// Where service.md goes.
        #[arg(long, default_value = "papers/figures")]
        out: PathBuf,
        /// Print the report only.
        #[arg(long)]
        no_write: bool,
    },
    /// Serve Dynamo's standalone indexer on a loopback port (what `service` runs beside ours).
    #[cfg(feature = "dynamo")]
    #[command(hide = true)]
    DynamoService {
        /// Indexer threads.
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// The server's prefix store of tokenized prompts on a trace's shape (the shared
    /// conversation trace by default): prompts made of one passage per hash id, tokenized whole
    /// and through the store; every token list compared, the store's share of bytes and both
    /// times reported. Writes prompt_store.md.
    Prompts {
        /// A Mooncake-format trace [default: the shared conversation trace, else a synthetic
        /// one].
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Requests replayed, in trace order (0: all).
        #[arg(long, default_value_t = 3000)]
        requests: usize,
        /// The store's bound in MiB.
        #[arg(long, default_value_t = 64)]
        store_mib: usize,
        /// Words standing for one 512-token hash id.
        #[arg(long, default_value_t = 400)]
        words_per_block: usize,
        /// Where prompt_store.md goes.
        #[arg(long, default_value = "papers/figures")]
        out: PathBuf,
        /// Print the report only.
        #[arg(long)]
        no_write: bool,
    },
    /// Turn a trace into a workload file with the mock engines.
    Generate {
        /// A Mooncake-format trace; without it a synthetic one is used.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Requests of the synthetic trace (ignored with --trace).
        #[arg(long, default_value_t = 3000)]
        requests: usize,
        /// Where to write the workload (JSON Lines).
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Replay every layout as fast as possible (replay.md), then raise the offered rate until each
    /// can no longer keep up, noting where its query p99 crosses the threshold (sweep.json,
    /// sweep.svg, sweep.md). Regenerates every figure of papers/flash-indexer.md.
    Sweep {
        /// A Mooncake-format trace; without it a synthetic one is used.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Requests of the synthetic trace (ignored with --trace).
        #[arg(long, default_value_t = 3000)]
        requests: usize,
        /// Where the curves, the plot and the table go.
        #[arg(long, default_value = "papers/figures")]
        out: PathBuf,
        /// Query p99 limit, microseconds.
        #[arg(long, default_value_t = 5.0)]
        threshold_us: f64,
        /// Wall-clock seconds per point.
        #[arg(long, default_value_t = 4.0)]
        seconds: f64,
        /// First speed, times trace time (doubles each point).
        #[arg(long, default_value_t = 25.0)]
        start_speed: f64,
        /// Layouts to sweep, comma separated; default: every primary layout.
        #[arg(long, value_delimiter = ',')]
        layouts: Vec<String>,
        /// Writer threads.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Every layout side by side with Dynamo's indexes (build with `--features dynamo`) on named
    /// presets, interleaved rounds, medians; writes compare.md, compare.json and figures.
    Compare {
        /// A Mooncake-format trace for the trace presets; default: the project's shared
        /// conversation trace when it is there, else a synthetic one.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Presets to run, comma separated (dynamo, shared-prefix, depth, trace, trace-paced, fleet;
        /// and hybrid, a model of two KV-cache groups on our layouts, not run by default).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "dynamo,shared-prefix,depth,trace,trace-paced,fleet"
        )]
        presets: Vec<String>,
        /// Interleaved rounds per preset; each cell is the median.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// How the unpaced trace replays are driven and timed (the other presets are the same
        /// under both).
        #[arg(long, value_enum, default_value_t = compare::subject::Method::Compare)]
        method: compare::subject::Method,
        /// Writer threads of every index.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// The paced preset replays the trace at this many times its real rate ...
        #[arg(long, default_value_t = 100.0)]
        paced_speed: f64,
        /// ... for this many seconds of wall time.
        #[arg(long, default_value_t = 5.0)]
        paced_seconds: f64,
        /// Workers of the fleet preset.
        #[arg(long, default_value_t = 7000)]
        fleet_workers: u64,
        /// Hybrid preset: each query waits until this many microseconds after the previous one
        /// (and until its events are in), so that both models' queries follow the same idle time
        /// whatever their writers' work; 0 queries as soon as the events are in.
        #[arg(long, default_value_t = 0)]
        query_gap_us: u64,
        /// Hybrid preset: each one-group query also waits, from the previous answer, as long as
        /// the same query of the layout's latest two-group run waited for its writer, so that
        /// both models' queries follow the same idle times (paper §6.21: a query after a longer
        /// idle runs slower on these machines, whatever the index).
        #[arg(long)]
        idle_matched: bool,
        /// The fleet preset sends every request this many times (disjoint hash ids).
        #[arg(long, default_value_t = 2)]
        fleet_duplicate: usize,
        /// Where compare.md, compare.json and the SVG figures go.
        #[arg(long, default_value = "papers/figures")]
        out: PathBuf,
        /// Print the tables only.
        #[arg(long)]
        no_write: bool,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// A closed loop of router, index and mock engines over a trace: every routing policy side by
    /// side (random, round-robin, least-loaded, exact KV-aware per layout, approximate KV-aware
    /// with TTL and LRU retention; with `--features dynamo`, Dynamo's CRTC and approximate
    /// indexer). Prints one table per offered load: each policy's hit rate, TTFT, imbalance,
    /// index memory and decisions per second.
    Route {
        /// A Mooncake-format trace; without it a synthetic one of --shape is used.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// The synthetic trace's shape (ignored with --trace).
        #[arg(long, value_enum, default_value_t = Shape::Conversation)]
        shape: Shape,
        /// Requests of the synthetic trace (ignored with --trace).
        #[arg(long, default_value_t = 3000)]
        requests: usize,
        #[command(flatten)]
        fleet: FleetArgs,
        /// Prefill speed of an engine, tokens per second.
        #[arg(long, default_value_t = 20_000.0)]
        prefill_tokens_per_s: f64,
        /// Decode speed of a request, tokens per second.
        #[arg(long, default_value_t = 60.0)]
        decode_tokens_per_s: f64,
        /// How late the engines' events reach the router, milliseconds.
        #[arg(long, default_value_t = 20.0)]
        event_delay_ms: f64,
        /// Offered loads, comma separated, as multiples of the trace's own rate.
        #[arg(long, value_delimiter = ',', default_value = "1")]
        loads: Vec<f64>,
        /// Policies to run (names as in the table, comma separated); default: all.
        #[arg(long, value_delimiter = ',')]
        policies: Vec<String>,
        /// Wall-clock pace of Dynamo's approximate indexer, times trace time (its TTL runs on
        /// a real clock and is scaled down by the same factor).
        #[arg(long, default_value_t = 200.0)]
        dynamo_speed: f64,
        /// Router replica counts, comma separated: each approximate policy also runs as N
        /// replicas taking requests in turn, isolated and sharing decisions (`--policies
        /// kv-approx/lru` selects its replicated runs too).
        #[arg(long, value_delimiter = ',', default_value = "1")]
        routers: Vec<usize>,
        /// How late a shared decision reaches the other replicas, milliseconds.
        #[arg(long, default_value_t = 1.0)]
        share_delay_ms: f64,
        /// Interleaved rounds of every policy; each row is the round of median decisions/s
        /// (the routing itself is the same in every round).
        #[arg(long, default_value_t = 1)]
        rounds: usize,
        /// Write route.md, route.json and route.svg here.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Write a synthetic trace in Mooncake's format.
    Trace {
        /// The shape to generate.
        #[arg(long, value_enum)]
        shape: Shape,
        #[arg(long, default_value_t = 12_000)]
        requests: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Where to write it (JSON Lines).
        #[arg(long)]
        out: PathBuf,
    },
    /// Replay a workload file against every layout (or those named).
    Replay {
        #[arg(long)]
        workload: PathBuf,
        #[command(flatten)]
        replay: ReplayArgs,
    },
}

/// Shapes of synthetic traces.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// Mooncake's conversation trace: one shared first block, multi-turn histories.
    Conversation,
    /// Many users sharing a few long system prompts, short private tails.
    SharedPrompts,
}

impl Shape {
    fn generate(self, requests: usize, seed: u64) -> (Vec<trace::Request>, String) {
        match self {
            Shape::Conversation => (
                trace::synthetic(requests, seed),
                format!("synthetic conversation({requests}, seed {seed})"),
            ),
            Shape::SharedPrompts => (
                trace::shared_prompts(requests, seed),
                format!("synthetic shared-prompts({requests}, seed {seed})"),
            ),
        }
    }
}

/// The mock fleet: how many engines, and their caches.
#[derive(Args, Debug, Clone)]
struct FleetArgs {
    /// Workers (one mock engine each).
    #[arg(long, default_value_t = 16)]
    workers: u64,
    /// KV block slots per worker.
    #[arg(long, default_value_t = 4096)]
    capacity: usize,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 64)]
    block_size: usize,
}

#[derive(Args, Debug, Clone)]
struct EngineArgs {
    #[command(flatten)]
    fleet: FleetArgs,
    /// Seeds worker choice, synthetic tokens and opaque engine hashes.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Trace time is divided by this (2 = twice the request rate).
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Send every request this many times with disjoint hash ids (more load, same shape).
    #[arg(long, default_value_t = 1)]
    duplicate: usize,
}

#[derive(Args, Debug, Clone)]
struct ReplayArgs {
    /// Layouts to replay, comma separated (see the table); default: every primary layout.
    #[arg(long, value_delimiter = ',')]
    layouts: Vec<String>,
    /// Skip the reference NaiveIndexer.
    #[arg(long)]
    no_naive: bool,
    /// Writer threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Replay at this many times real time (trace timestamps); 0 = as fast as possible.
    #[arg(long, default_value_t = 0.0)]
    speed: f64,
}

impl EngineArgs {
    fn config(&self) -> EngineConfig {
        EngineConfig {
            workers: self.fleet.workers,
            capacity_blocks: self.fleet.capacity,
            block_size: self.fleet.block_size,
            seed: self.seed,
            time_scale: self.time_scale,
            duplicate: self.duplicate,
            ..EngineConfig::default()
        }
    }
}

fn load_trace(
    path: Option<&Path>,
    requests: usize,
    seed: u64,
) -> Result<(Vec<trace::Request>, String), String> {
    match path {
        Some(path) => {
            let file = File::open(path)
                .map_err(|e| format!("cannot open trace {}: {e}", path.display()))?;
            let requests = trace::read(BufReader::new(file))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let name = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            Ok((requests, name))
        }
        None => Ok((
            trace::synthetic(requests, seed),
            format!("synthetic({requests}, seed {seed})"),
        )),
    }
}

fn indexes(args: &ReplayArgs) -> Result<Vec<IndexFactory>, String> {
    let all = testing::enabled_layouts();
    let mut out: Vec<IndexFactory> = Vec::new();
    if args.layouts.is_empty() {
        out.extend(all.iter().filter(|f| f.primary).copied());
    } else {
        for name in &args.layouts {
            let found = all
                .iter()
                .find(|f| f.name == name.as_str())
                .ok_or_else(|| {
                    let known: Vec<&str> = all.iter().map(|f| f.name).collect();
                    format!(
                        "unknown layout {name:?}; this build has: {}",
                        known.join(", ")
                    )
                })?;
            out.push(*found);
        }
    }
    if !args.no_naive {
        out.push(testing::naive_factory());
    }
    Ok(out)
}

fn run_replays(workload: &Workload, args: &ReplayArgs) -> Result<Vec<Report>, String> {
    let cfg = ReplayConfig {
        threads: args.threads.max(1),
        speed: args.speed,
        max_wall: None,
    };
    let style = ProgressStyle::with_template("{prefix:>12} {bar:40} {pos}/{len} ops {elapsed}")
        .expect("template");
    let mut reports = Vec::new();
    for IndexFactory { name, make, .. } in indexes(args)? {
        let bar = ProgressBar::new(workload.ops.len() as u64)
            .with_style(style.clone())
            .with_prefix(name);
        let report = replay::replay(name, make, workload, &cfg, &bar);
        bar.finish_and_clear();
        reports.push(report);
    }
    Ok(reports)
}

fn main_job(cli: &Cli) -> Result<(), String> {
    let cfg = cli.engine.config();
    let (trace, source) = load_trace(cli.trace.as_deref(), cli.requests, cfg.seed)?;
    eprintln!(
        "generating the workload of {} requests from {source} ...",
        trace.len()
    );
    let workload = engine::generate(&trace, &cfg, &source);
    report::describe(&workload);
    let reports = run_replays(&workload, &cli.replay)?;
    report::table(&reports, &cli.replay.speed);
    report::check_rejections(&reports)
}

#[allow(clippy::too_many_arguments)]
fn route_job(
    trace: &[trace::Request],
    source: &str,
    cfg: route::RouteConfig,
    loads: &[f64],
    names: &[String],
    dynamo_speed: f64,
    routers: &[usize],
    rounds: usize,
    out: Option<&Path>,
) -> Result<(), String> {
    if rounds == 0 {
        return Err("--rounds: at least one round".into());
    }
    if let Some(bad) = loads.iter().find(|l| !(l.is_finite() && **l > 0.0)) {
        return Err(format!("--loads: {bad} is not a positive load"));
    }
    if routers.contains(&0) {
        return Err("--routers: a count of 0 routers".into());
    }
    let mut all = route::policies(dynamo_speed.max(1e-3));
    all.extend(route::replicated_policies(routers));
    for name in names {
        if !all.iter().any(|p| &p.name == name) {
            let known: Vec<&str> = all.iter().map(|p| p.name.as_str()).collect();
            return Err(format!(
                "unknown policy {name:?}; this build has: {}",
                known.join(", ")
            ));
        }
    }
    // A replicated run is chosen with its base policy ("kv-approx/lru x4 shared").
    let chosen: Vec<&route::PolicyFactory> = all
        .iter()
        .filter(|p| {
            names.is_empty()
                || names
                    .iter()
                    .any(|n| p.name == *n || p.name.starts_with(&format!("{n} x")))
        })
        .collect();
    let requests = route::prepare(trace, cfg.block_size);
    let limits = route::Limits {
        infinite: route::infinite_cache_hit_rate(&requests),
        pooled: route::pooled_cache_hit_rate(
            &requests,
            cfg.capacity_blocks.saturating_mul(cfg.workers as usize),
        ),
    };
    eprintln!(
        "routing {} requests of {source} over {} workers of {} blocks ({} policies, loads {loads:?}, \
         {rounds} rounds)",
        requests.len(),
        cfg.workers,
        cfg.capacity_blocks,
        chosen.len()
    );
    let mut outcomes = Vec::new();
    for &load in loads {
        let cfg = route::RouteConfig {
            load,
            ..cfg.clone()
        };
        // Rounds interleave the policies, so that a slow spell of the machine falls on all.
        let mut runs: Vec<Vec<route::Outcome>> = vec![Vec::new(); chosen.len()];
        for round in 1..=rounds {
            for (factory, runs) in chosen.iter().zip(&mut runs) {
                let bar = ProgressBar::new_spinner()
                    .with_prefix(format!("{} ({round}/{rounds})", factory.name));
                bar.set_style(
                    ProgressStyle::with_template("{prefix:>30} {spinner} {elapsed}")
                        .expect("template"),
                );
                bar.enable_steady_tick(std::time::Duration::from_millis(200));
                runs.push(route::run(&requests, &cfg, factory));
                bar.finish_and_clear();
            }
        }
        outcomes.extend(runs.into_iter().map(route::median_round));
        println!("{}", route::table(&outcomes, load, limits));
    }
    if let Some(dir) = out {
        route::write(&outcomes, loads, limits, &cfg, source, rounds, dir)?;
        eprintln!("wrote {}/route.md, route.json, route.svg", dir.display());
    }
    Ok(())
}

fn run(cli: Cli) -> Result<(), String> {
    match &cli.command {
        None => main_job(&cli),
        Some(Command::Generate {
            trace,
            requests,
            out,
            engine,
        }) => {
            let cfg = engine.config();
            let (trace, source) = load_trace(trace.as_deref(), *requests, cfg.seed)?;
            let workload = engine::generate(&trace, &cfg, &source);
            let file =
                File::create(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
            workload
                .write(file)
                .map_err(|e| format!("writing {}: {e}", out.display()))?;
            report::describe(&workload);
            eprintln!("wrote {}", out.display());
            Ok(())
        }
        Some(Command::Sweep {
            trace,
            requests,
            out,
            threshold_us,
            seconds,
            start_speed,
            layouts,
            threads,
            engine,
        }) => {
            let cfg = engine.config();
            let (trace, source) = load_trace(trace.as_deref(), *requests, cfg.seed)?;
            let workload = engine::generate(&trace, &cfg, &source);
            report::describe(&workload);
            let args = ReplayArgs {
                layouts: layouts.clone(),
                no_naive: true,
                threads: *threads,
                speed: 0.0,
            };
            let sweep_cfg = sweep::SweepConfig {
                threads: (*threads).max(1),
                start_speed: *start_speed,
                seconds_per_point: *seconds,
                threshold_us: *threshold_us,
                max_lag_ms: 50.0,
                max_points: 16,
            };
            let source = format!(
                "{source}, {} workers x {} blocks, block size {}",
                cfg.workers, cfg.capacity_blocks, cfg.block_size
            );
            // First the plain replay every layout's row in the paper comes from, then the sweep.
            let reports = run_replays(&workload, &args)?;
            report::table(&reports, &0.0);
            report::check_rejections(&reports)?;
            std::fs::create_dir_all(out)
                .map_err(|e| format!("cannot create {}: {e}", out.display()))?;
            std::fs::write(out.join("replay.md"), report::markdown(&reports, &source))
                .map_err(|e| format!("writing replay.md: {e}"))?;
            let curves = sweep::sweep(&workload, &indexes(&args)?, &sweep_cfg);
            sweep::write(&curves, &sweep_cfg, &source, out)?;
            println!(
                "\n{:<12} {:>16} {:>16} {:>12}",
                "layout", "keep-up ops/s", "threshold ops/s", "bytes/pair"
            );
            for c in &curves {
                println!(
                    "{:<12} {:>16.0} {:>16.0} {:>12.1}",
                    c.layout, c.keep_up_ops_per_s, c.threshold_ops_per_s, c.bytes_per_pair
                );
            }
            eprintln!(
                "wrote {}/replay.md, sweep.json, sweep.svg, sweep.md",
                out.display()
            );
            Ok(())
        }
        Some(Command::Compare {
            trace,
            presets,
            rounds,
            method,
            threads,
            paced_speed,
            paced_seconds,
            fleet_workers,
            fleet_duplicate,
            query_gap_us,
            idle_matched,
            out,
            no_write,
            engine,
        }) => {
            let cfg = engine.config();
            let shared = Path::new(SHARED_TRACE);
            let path = trace
                .clone()
                .or_else(|| shared.exists().then(|| shared.to_path_buf()));
            let (requests, source) = load_trace(path.as_deref(), 3000, cfg.seed)?;
            let compare_cfg = compare::CompareConfig {
                presets: presets.clone(),
                rounds: *rounds,
                threads: (*threads).max(1),
                paced_speed: *paced_speed,
                paced_seconds: *paced_seconds,
                fleet_workers: *fleet_workers,
                fleet_duplicate: *fleet_duplicate,
                query_gap: std::time::Duration::from_micros(*query_gap_us),
                idle_matched: *idle_matched,
                method: *method,
                out: (!no_write).then(|| out.clone()),
            };
            compare::compare(&compare_cfg, &requests, &source, &cfg)
        }
        Some(Command::Route {
            trace,
            shape,
            requests,
            fleet,
            prefill_tokens_per_s,
            decode_tokens_per_s,
            event_delay_ms,
            loads,
            policies,
            dynamo_speed,
            routers,
            share_delay_ms,
            rounds,
            out,
        }) => {
            let (trace, source) = match trace {
                Some(path) => load_trace(Some(path), 0, 0)?,
                None => shape.generate(*requests, 42),
            };
            let cfg = route::RouteConfig {
                workers: fleet.workers.max(1),
                capacity_blocks: fleet.capacity,
                block_size: fleet.block_size.max(1),
                prefill_tokens_per_s: *prefill_tokens_per_s,
                decode_tokens_per_s: *decode_tokens_per_s,
                event_delay_us: (event_delay_ms * 1000.0) as u64,
                share_delay_us: (share_delay_ms * 1000.0) as u64,
                ..route::RouteConfig::default()
            };
            if !(share_delay_ms.is_finite() && *share_delay_ms >= 0.0) {
                return Err(format!("--share-delay-ms: {share_delay_ms} is not a delay"));
            }
            route_job(
                &trace,
                &source,
                cfg,
                loads,
                policies,
                *dynamo_speed,
                routers,
                *rounds,
                out.as_deref(),
            )
        }
        Some(Command::Trace {
            shape,
            requests,
            seed,
            out,
        }) => {
            let (generated, source) = shape.generate(*requests, *seed);
            let file =
                File::create(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
            trace::write(&generated, std::io::BufWriter::new(file))
                .map_err(|e| format!("writing {}: {e}", out.display()))?;
            eprintln!("wrote {source} to {}", out.display());
            Ok(())
        }
        #[cfg(feature = "dynamo")]
        Some(Command::Service {
            clients,
            seconds,
            rounds,
            fleet,
            compared,
            dynamo_threads,
            gpu_only,
            out,
            no_write,
        }) => {
            let config = flashbench::service::run::Config {
                clients: clients.clone(),
                seconds: *seconds,
                rounds: *rounds,
                fleet: *fleet,
                compared: *compared,
                dynamo_threads: *dynamo_threads,
                gpu_only: *gpu_only,
                out: (!no_write).then(|| out.clone()),
            };
            let report = flashbench::service::run::run(&config)?;
            println!("{report}");
            Ok(())
        }
        Some(Command::Prompts {
            trace,
            requests,
            store_mib,
            words_per_block,
            out,
            no_write,
        }) => {
            let shared = Path::new(SHARED_TRACE);
            let path = trace
                .clone()
                .or_else(|| shared.exists().then(|| shared.to_path_buf()));
            let (requests_read, source) = load_trace(path.as_deref(), (*requests).max(1), 42)?;
            let cfg = flashbench::prompts::PromptsConfig {
                requests: *requests,
                store_bytes: store_mib << 20,
                words_per_block: (*words_per_block).max(1),
                out: (!no_write).then(|| out.clone()),
            };
            flashbench::prompts::run(&requests_read, &source, &cfg)
        }
        #[cfg(feature = "dynamo")]
        Some(Command::DynamoService { threads }) => flashbench::service::host::serve(*threads),
        Some(Command::Replay { workload, replay }) => {
            let file = File::open(workload)
                .map_err(|e| format!("cannot open {}: {e}", workload.display()))?;
            let loaded = Workload::read(BufReader::new(file))
                .map_err(|e| format!("{}: {e}", workload.display()))?;
            report::describe(&loaded);
            let reports = run_replays(&loaded, replay)?;
            report::table(&reports, &replay.speed);
            report::check_rejections(&reports)
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flashbench: {e}");
            ExitCode::FAILURE
        }
    }
}
