//! The side-by-side run. Both services start as child processes (ours is the
//! `flash-indexer-server` binary beside this one with `--dynamo-listen`; Dynamo's is this binary's
//! hidden `dynamo-service` command). One stand-in engine per worker of the load fleet
//! (`flash_indexer_server::fleet`) registers with both, then publishes its sequences. Once both
//! hold every sequence, the same queries go to both: first one by one, to compare every answer;
//! then from 1, 8 and 64 concurrent clients (each its own keep-alive connection) for a fixed
//! time per client count, the two services alternating, in interleaved rounds whose medians are
//! reported (as `compare` does: one noisy phase cannot decide a ratio). Resident memory is read
//! from `/proc` after the load; our server's time per query by phase from its metrics.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flash_indexer::hash;
use flash_indexer_server::fleet::{BLOCK_SIZE, Fleet};
use hdrhistogram::Histogram;
use serde_json::{Value, json};

use super::engines::{Engine, stored};

/// What a run does.
#[derive(Clone, Debug)]
pub struct Config {
    /// Concurrent clients, one load phase each.
    pub clients: Vec<usize>,
    /// Seconds of load per service and client count.
    pub seconds: f64,
    /// Interleaved rounds of every load phase; each cell is the median over them.
    pub rounds: usize,
    /// The fleet the engines hold.
    pub fleet: Fleet,
    /// Queries whose answers are compared one by one.
    pub compared: u64,
    /// Indexer threads of Dynamo's service.
    pub dynamo_threads: usize,
    /// Our server with the GPU tier alone (`[tiers] GPU = 1.0`) instead of its three default
    /// tiers.
    pub gpu_only: bool,
    /// Where `service.md` goes, if anywhere.
    pub out: Option<PathBuf>,
}

/// A service under test: its process and its Dynamo-API address.
struct Service {
    name: &'static str,
    child: Child,
    url: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Service {
    /// Starts `program` with `args` and reads the address lines it prints: the last one read is
    /// its Dynamo API.
    fn start(
        name: &'static str,
        program: &Path,
        args: &[&str],
        lines: usize,
    ) -> Result<Service, String> {
        let mut child = Command::new(program)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut url = String::new();
        for _ in 0..lines {
            let mut line = String::new();
            stdout.read_line(&mut line).map_err(|e| e.to_string())?;
            url = line
                .split_whitespace()
                .last()
                .filter(|u| u.starts_with("http://"))
                .ok_or_else(|| format!("{name} did not start: {line:?}"))?
                .to_owned();
        }
        Ok(Service { name, child, url })
    }

    fn rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// `POST url` with a JSON body: status and JSON answer.
fn post(agent: &ureq::Agent, url: &str, body: &[u8]) -> Result<(u16, Value), String> {
    let mut response = agent
        .post(url)
        .header("content-type", "application/json")
        .send(body)
        .map_err(|e| format!("{url}: {e}"))?;
    let text = response
        .body_mut()
        .with_config()
        .limit(1 << 30)
        .read_to_string()
        .map_err(|e| e.to_string())?;
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok((response.status().as_u16(), value))
}

fn get(agent: &ureq::Agent, url: &str) -> Result<String, String> {
    let mut response = agent.get(url).call().map_err(|e| format!("{url}: {e}"))?;
    response
        .body_mut()
        .with_config()
        .limit(1 << 30)
        .read_to_string()
        .map_err(|e| e.to_string())
}

/// The body of Dynamo's `/query` for `tokens`.
fn query_body(tokens: &[u32]) -> Vec<u8> {
    json!({ "token_ids": tokens, "model_name": "default" })
        .to_string()
        .into_bytes()
}

/// Registers every engine with `service` and waits until each is `active` there.
fn register(service: &Service, engines: &[Engine]) -> Result<(), String> {
    let agent = agent();
    for (w, engine) in engines.iter().enumerate() {
        let body = json!({
            "instance_id": w,
            "endpoint": engine.endpoint,
            "model_name": "default",
            "block_size": BLOCK_SIZE,
            "dp_rank": 0,
        });
        let (status, answer) = post(
            &agent,
            &format!("{}/register", service.url),
            body.to_string().as_bytes(),
        )?;
        if status != 201 {
            return Err(format!(
                "{}: /register answered {status}: {answer}",
                service.name
            ));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let workers: Value =
            serde_json::from_str(&get(&agent, &format!("{}/workers", service.url))?)
                .map_err(|e| e.to_string())?;
        let active = (workers.as_array().into_iter().flatten())
            .filter(|w| w["status"] == "active")
            .count();
        if active == engines.len() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{}: {active} of {} engines active after 60 s",
                service.name,
                engines.len()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `service` answers every sequence of the fleet with its worker at full depth.
fn settle(service: &Service, fleet: &Fleet) -> Result<(), String> {
    let agent = agent();
    let url = format!("{}/query", service.url);
    let full = (fleet.blocks * BLOCK_SIZE) as u64;
    let deadline = Instant::now() + Duration::from_secs(120);
    for w in 0..fleet.workers {
        for s in 0..fleet.sequences {
            let body = query_body(&fleet.tokens(w, s));
            loop {
                let (_, answer) = post(&agent, &url, &body)?;
                if answer["scores"][w.to_string()]["0"].as_u64() == Some(full) {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "{}: worker {w} sequence {s} not held after 120 s",
                        service.name
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    Ok(())
}

/// How two answers compare.
#[derive(Default, Debug)]
struct Agreement {
    compared: u64,
    /// `scores` or `instances` differ.
    differing: u64,
    /// Only `frequencies` differs (a documented difference: this server leaves it empty).
    frequencies_only: u64,
    first_difference: Option<String>,
}

fn compare_answers(
    ours: &Service,
    theirs: &Service,
    fleet: &Fleet,
    n: u64,
) -> Result<Agreement, String> {
    let agent = agent();
    let mut agreement = Agreement::default();
    for i in 0..n {
        let body = query_body(&fleet.query(i).0);
        let (s1, a) = post(&agent, &format!("{}/query", ours.url), &body)?;
        let (s2, b) = post(&agent, &format!("{}/query", theirs.url), &body)?;
        agreement.compared += 1;
        if s1 != 200 || s2 != 200 || a["scores"] != b["scores"] || a["instances"] != b["instances"]
        {
            agreement.differing += 1;
            agreement
                .first_difference
                .get_or_insert_with(|| format!("query {i}: ours {s1} {a}, Dynamo's {s2} {b}"));
        } else if a["frequencies"] != b["frequencies"] {
            agreement.frequencies_only += 1;
        }
    }
    Ok(agreement)
}

/// One load phase of one service.
struct Load {
    service: &'static str,
    clients: usize,
    requests: u64,
    errors: u64,
    seconds: f64,
    latency_us: Histogram<u64>,
}

fn load(service: &Service, bodies: &[Vec<u8>], clients: usize, seconds: f64) -> Load {
    let url = format!("{}/query", service.url);
    let start = Instant::now();
    let stop = start + Duration::from_secs_f64(seconds);
    let results: Vec<(u64, u64, Histogram<u64>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let url = &url;
                scope.spawn(move || {
                    let agent = agent();
                    let mut hist = Histogram::<u64>::new(3).expect("histogram");
                    let (mut requests, mut errors) = (0u64, 0u64);
                    let mut i = c;
                    while Instant::now() < stop {
                        let body = &bodies[i % bodies.len()];
                        let t = Instant::now();
                        match post(&agent, url, body) {
                            Ok((200, _)) => {}
                            _ => errors += 1,
                        }
                        let _ = hist.record(t.elapsed().as_micros().max(1) as u64);
                        requests += 1;
                        i += clients;
                    }
                    (requests, errors, hist)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client"))
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let mut latency_us = Histogram::<u64>::new(3).expect("histogram");
    let (mut requests, mut errors) = (0, 0);
    for (r, e, h) in results {
        requests += r;
        errors += e;
        latency_us.add(&h).expect("same bounds");
    }
    Load {
        service: service.name,
        clients,
        requests,
        errors,
        seconds: elapsed,
        latency_us,
    }
}

/// The phases of our server's Dynamo `/query`, in the order it runs them.
const PHASES: [&str; 4] = ["parse", "hash", "index", "answer"];

/// Our server's running (sum of seconds, count) for each phase of Dynamo's `/query`.
fn phase_totals(ours: &Service) -> Result<Vec<(f64, f64)>, String> {
    let text = get(&agent(), &format!("{}/metrics", ours.url))?;
    let metric = flash_indexer_server::dynamo::QUERY_PHASE_SECONDS;
    let value = |suffix: &str, phase: &str| {
        let prefix = format!("{metric}_{suffix}{{phase=\"{phase}\"}} ");
        (text.lines())
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok(PHASES
        .iter()
        .map(|&phase| (value("sum", phase), value("count", phase)))
        .collect())
}

/// The mean microseconds per query of each phase from its (seconds, count) summed over loads.
fn phase_means(sums: &[(f64, f64)]) -> Vec<f64> {
    (sums.iter())
        .map(|&(seconds, count)| {
            if count > 0.0 {
                seconds / count * 1e6
            } else {
                f64::NAN
            }
        })
        .collect()
}

/// One service at one client count: the median of each figure over the rounds.
struct Summary {
    service: &'static str,
    clients: usize,
    rounds: usize,
    errors: u64,
    queries_per_second: f64,
    /// p50, p99 and p99.9 in microseconds.
    quantiles_us: [f64; 3],
}

impl Summary {
    fn of(loads: &[Load]) -> Summary {
        let median = |f: &dyn Fn(&Load) -> f64| {
            crate::report::median(loads.iter().map(f).collect()).unwrap_or(f64::NAN)
        };
        let quantile = |q: f64| median(&|l: &Load| l.latency_us.value_at_quantile(q) as f64);
        Summary {
            service: loads[0].service,
            clients: loads[0].clients,
            rounds: loads.len(),
            errors: loads.iter().map(|l| l.errors).sum(),
            queries_per_second: median(&|l: &Load| l.requests as f64 / l.seconds),
            quantiles_us: [quantile(0.5), quantile(0.99), quantile(0.999)],
        }
    }
}

/// Runs the comparison and returns the report (Markdown).
pub fn run(config: &Config) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let server = exe.with_file_name("flash-indexer-server");
    if !server.exists() {
        return Err(format!(
            "{} is missing: build it with `cargo build --release -p flash-indexer-server`",
            server.display()
        ));
    }
    let mut args = vec!["--listen", "127.0.0.1:0", "--dynamo-listen", "127.0.0.1:0"];
    let config_file =
        std::env::temp_dir().join(format!("flashbench-service-{}.toml", std::process::id()));
    if config.gpu_only {
        std::fs::write(&config_file, "[tiers]\nGPU = 1.0\n").map_err(|e| e.to_string())?;
        args.extend([
            "--config",
            config_file.to_str().ok_or("temp dir is not UTF-8")?,
        ]);
    }
    let ours = Service::start("flash-indexer-server", &server, &args, 2);
    if config.gpu_only {
        let _ = std::fs::remove_file(&config_file); // Read at startup.
    }
    let ours = ours?;
    let threads = config.dynamo_threads.to_string();
    let theirs = Service::start(
        "Dynamo",
        &exe,
        &["dynamo-service", "--threads", &threads],
        1,
    )?;
    let fleet = config.fleet;
    let context = zmq::Context::new();
    let mut engines = (0..fleet.workers)
        .map(|_| Engine::bind(&context))
        .collect::<Result<Vec<_>, _>>()?;
    register(&ours, &engines)?;
    register(&theirs, &engines)?;
    // A subscription reaches the publisher a moment after its connection.
    std::thread::sleep(Duration::from_millis(500));
    eprintln!("service: {} engines publishing", engines.len());
    for (w, engine) in engines.iter_mut().enumerate() {
        for s in 0..fleet.sequences {
            let tokens = fleet.tokens(w as u64, s);
            let locals = hash::local_hashes(&tokens, BLOCK_SIZE);
            let seqs: Vec<u64> = hash::seq_hashes(&locals).into_iter().map(|q| q.0).collect();
            engine.publish(vec![stored(&seqs, &tokens, BLOCK_SIZE)])?;
        }
    }
    settle(&ours, &fleet)?;
    settle(&theirs, &fleet)?;
    eprintln!("service: both hold every sequence; comparing answers");
    let agreement = compare_answers(&ours, &theirs, &fleet, config.compared)?;
    let bodies: Vec<Vec<u8>> = (0..4096).map(|i| query_body(&fleet.query(i).0)).collect();
    // rounds[c][s]: every round's load of client count c on service s (0 ours, 1 Dynamo's).
    let mut rounds: Vec<[Vec<Load>; 2]> =
        config.clients.iter().map(|_| Default::default()).collect();
    let mut phase_sums: Vec<Vec<(f64, f64)>> = vec![vec![(0.0, 0.0); PHASES.len()]; rounds.len()];
    let round_count = config.rounds.max(1);
    for round in 0..round_count {
        for (c, &clients) in config.clients.iter().enumerate() {
            for (s, service) in [&ours, &theirs].into_iter().enumerate() {
                eprintln!(
                    "service: round {} of {}, {} with {clients} clients",
                    round + 1,
                    round_count,
                    service.name
                );
                let before = phase_totals(&ours)?;
                rounds[c][s].push(load(service, &bodies, clients, config.seconds));
                if s == 0 {
                    let after = phase_totals(&ours)?;
                    for (sum, (b, a)) in phase_sums[c].iter_mut().zip(before.iter().zip(&after)) {
                        sum.0 += a.0 - b.0;
                        sum.1 += a.1 - b.1;
                    }
                }
            }
        }
    }
    let loads: Vec<Summary> = rounds.iter().flatten().map(|r| Summary::of(r)).collect();
    let phases: Vec<(usize, Vec<f64>)> = (config.clients.iter().copied())
        .zip(phase_sums.iter().map(|sums| phase_means(sums)))
        .collect();
    let rss = (ours.rss_mib(), theirs.rss_mib());
    let report = report(config, &agreement, &loads, rss, &phases);
    if let Some(dir) = &config.out {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let name = if config.gpu_only {
            "service_gpu_only.md"
        } else {
            "service.md"
        };
        let path = dir.join(name);
        std::fs::write(&path, &report).map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(report)
}

fn report(
    config: &Config,
    agreement: &Agreement,
    loads: &[Summary],
    (rss_ours, rss_theirs): (f64, f64),
    phases: &[(usize, Vec<f64>)],
) -> String {
    let f = config.fleet;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# flash-indexer-server beside Dynamo's standalone indexer\n\n\
         `flashbench service`: both services on loopback, each its own process, fed by the same {} \
         stand-in engines over ZeroMQ ({} sequences each of {} blocks of {} tokens; half of each \
         sequence one of 4 shared prefixes) and asked the same `/query` ({} tokens) through \
         Dynamo's API. Dynamo's service runs {} indexer threads; ours its defaults (radix layout) \
         with {}. {} s of load per service and client count, the services alternating; {} \
         interleaved rounds, each cell the median over them.\n",
        f.workers,
        f.sequences,
        f.blocks,
        BLOCK_SIZE,
        f.blocks * BLOCK_SIZE,
        config.dynamo_threads,
        if config.gpu_only {
            "the GPU tier alone"
        } else {
            "its three default storage tiers"
        },
        config.seconds,
        loads.first().map_or(0, |l| l.rounds),
    );
    let _ = writeln!(
        out,
        "Answers compared one by one: {}; differing in `scores` or `instances`: {}; differing \
         only in `frequencies` (left empty here): {}.\n",
        agreement.compared, agreement.differing, agreement.frequencies_only
    );
    if let Some(first) = &agreement.first_difference {
        let _ = writeln!(
            out,
            "First difference: `{}`\n",
            first.chars().take(400).collect::<String>()
        );
    }
    let _ = writeln!(
        out,
        "| clients | service | queries/s | p50 us | p99 us | p99.9 us | errors |\n|---|---|---|---|---|---|---|"
    );
    for l in loads {
        let [p50, p99, p999] = l.quantiles_us;
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {p50:.0} | {p99:.0} | {p999:.0} | {} |",
            l.clients, l.service, l.queries_per_second, l.errors
        );
    }
    let _ = writeln!(
        out,
        "\n| clients | queries/s ours / Dynamo | p99 ours / Dynamo |\n|---|---|---|"
    );
    for pair in loads.chunks(2) {
        if let [ours, theirs] = pair {
            let _ = writeln!(
                out,
                "| {} | {:.2}x | {:.2}x |",
                ours.clients,
                ours.queries_per_second / theirs.queries_per_second,
                ours.quantiles_us[1] / theirs.quantiles_us[1]
            );
        }
    }
    let _ = writeln!(
        out,
        "\nResident memory after the load: ours {rss_ours:.1} MiB, Dynamo's {rss_theirs:.1} MiB ({:.2}x).\n",
        rss_ours / rss_theirs
    );
    let _ = writeln!(
        out,
        "Our server's mean time per `/query` inside the handler, by phase, in microseconds (the \
         rest of a query's latency is HTTP, the connection's wait for a thread, and the client):\n\n\
         | clients | {} |\n|---|{}",
        PHASES.join(" | "),
        "---|".repeat(PHASES.len())
    );
    for (clients, means) in phases {
        let cells: Vec<String> = means.iter().map(|us| format!("{us:.1}")).collect();
        let _ = writeln!(out, "| {clients} | {} |", cells.join(" | "));
    }
    out
}
