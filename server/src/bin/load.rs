//! `flash-indexer-load`: a bounded load test of `flash-indexer-server` over loopback HTTP.
//!
//! Writes a snapshot of a synthetic fleet (Dynamo's workload shape, scaled down: workers with
//! sequences that share a few long prefixes), starts the server binary on it (the binary
//! beside this one), waits until it is ready, then for each client count sends queries from that
//! many threads, each with its own keep-alive connection, until a fixed number of requests or
//! seconds is reached. Prints and writes (`--out`, default `papers/figures`) queries per second
//! and p50 / p99 latency per client count, as `server_load.md` and `server_load.svg` (with
//! `--api dynamo`, through Dynamo's API: `server_load_dynamo.*`; with `--api prompt`, prompt
//! text through `POST /score`, tokenized by a BPE tokenizer trained on the fleet's text at
//! start: `server_load_prompt.*`). Every answer must be a 200 whose best worker is the one
//! expected, or the run fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use flash_indexer::{Block, Event, Worker, hash};
use flash_indexer_server::fleet::{BLOCK_SIZE, Fleet};
use flash_indexer_server::prompt::{Prompter, train_tokenizer};
use flash_indexer_server::snapshot::{self, Contents, IndexDump};
use hdrhistogram::Histogram;
use plotters::prelude::*;
use serde_json::{Value, json};

#[derive(Debug, Parser)]
#[command(about = "Bounded HTTP load test of flash-indexer-server on loopback.")]
struct Args {
    /// Concurrent clients, one run each.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    clients: Vec<usize>,
    /// Requests per run, at most.
    #[arg(long, default_value_t = 40_000)]
    requests: u64,
    /// Seconds per run, at most.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    #[command(flatten)]
    fleet: Fleet,
    /// Index layout of the server.
    #[arg(long, default_value = "radix")]
    layout: String,
    /// Where the table and the plot go.
    #[arg(long, default_value = "papers/figures")]
    out: PathBuf,
    /// Print only; write nothing.
    #[arg(long)]
    no_write: bool,
    /// Which API the queries use: the server's own, or Dynamo's (served with `--dynamo-listen`).
    #[arg(long, value_enum, default_value = "own")]
    api: Api,
}

/// The query API under load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Api {
    /// `POST /query` with `tokens`.
    Own,
    /// Dynamo's `POST /query` with `token_ids`, on the Dynamo address.
    Dynamo,
    /// `POST /score` with `prompt` text, tokenized by the server.
    Prompt,
}

impl Api {
    fn path(self) -> &'static str {
        match self {
            Api::Own | Api::Dynamo => "/query",
            Api::Prompt => "/score",
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            Api::Own => "",
            Api::Dynamo => "_dynamo",
            Api::Prompt => "_prompt",
        }
    }
}

/// Trains the prompt API's tokenizer on the fleet's text into `dir/model` and writes
/// `dir/config.toml` naming it for model `default`.
fn prompt_model(dir: &Path, args: &Args) -> Result<Prompter, String> {
    let model = dir.join("model");
    let corpus: Vec<String> = (0..args.fleet.workers.min(8))
        .flat_map(|w| (0..args.fleet.sequences.min(8)).map(move |s| (w, s)))
        .map(|(w, s)| args.fleet.text(w, s))
        .collect();
    train_tokenizer(&model, &corpus, 2_000, false, None)?;
    let config = format!(
        "[[models]]\nname = \"default\"\nblock_size = {BLOCK_SIZE}\ntokenizer = {:?}\n",
        model.display().to_string()
    );
    std::fs::write(dir.join("config.toml"), config).map_err(|e| e.to_string())?;
    Prompter::load(&model, 0)
}

/// The fleet's blocks; with a tokenizer, those of its text's tokens.
fn fleet(args: &Args, prompter: Option<&Prompter>) -> Result<Contents, String> {
    let mut events = Vec::new();
    for w in 0..args.fleet.workers {
        for s in 0..args.fleet.sequences {
            let tokens = match prompter {
                Some(p) => {
                    (p.encode_prompt(&args.fleet.text(w, s)))
                        .map_err(|e| e.to_string())?
                        .0
                }
                None => args.fleet.tokens(w, s),
            };
            let locals = hash::local_hashes(&tokens, BLOCK_SIZE);
            let seqs = hash::seq_hashes(&locals);
            let blocks = locals
                .iter()
                .zip(seqs)
                .map(|(&l, q)| Block::new(l, q))
                .collect();
            events.push(Event::stored(Worker::new(w, 0), 0, None, blocks));
        }
    }
    Ok(Contents {
        taken_unix_ms: 0,
        indexes: vec![IndexDump {
            model: "default".into(),
            tier: "GPU".into(),
            events,
            groups: Vec::new(),
        }],
    })
}

/// The `i`-th query and the worker that must come first, if one must.
fn query(args: &Args, i: u64) -> (Value, Option<u64>) {
    if args.api == Api::Prompt {
        let (text, expect) = args.fleet.query_text(i);
        return (json!({ "model": "default", "prompt": text }), expect);
    }
    let (tokens, expect) = args.fleet.query(i);
    let body = match args.api {
        Api::Dynamo => json!({ "model_name": "default", "token_ids": tokens }),
        _ => json!({ "model": "default", "tokens": tokens }),
    };
    (body, expect)
}

/// The worker an answer puts first: the best score on our API, the most GPU tokens on Dynamo's.
fn first_worker(api: Api, answer: &Value) -> Option<u64> {
    match api {
        Api::Own => answer["workers"][0]["worker"].as_u64(),
        Api::Dynamo => (answer["scores"].as_object()?.iter())
            .filter_map(|(w, ranks)| Some((ranks["0"].as_u64()?, w.parse::<u64>().ok()?)))
            .max()
            .map(|(_, w)| w),
        // Workers without a pod name are named by their id.
        Api::Prompt => answer["scores"][0]["pod"].as_str()?.parse().ok(),
    }
}

struct Run {
    clients: usize,
    requests: u64,
    seconds: f64,
    p50_us: f64,
    p99_us: f64,
}

fn run(url: &str, args: &Args, clients: usize) -> Result<Run, String> {
    let sent = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let queries: Arc<Vec<(String, Option<u64>)>> = Arc::new(
        (0..1024)
            .map(|i| {
                let (q, e) = query(args, i);
                (q.to_string(), e)
            })
            .collect(),
    );
    let start = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let (sent, queries, url) = (Arc::clone(&sent), Arc::clone(&queries), url.to_owned());
            let (limit, api) = (args.requests, args.api);
            std::thread::spawn(move || -> Result<Histogram<u64>, String> {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(Duration::from_secs(30)))
                    .build()
                    .into();
                let mut hist = Histogram::<u64>::new(3).expect("a histogram");
                loop {
                    let i = sent.fetch_add(1, Ordering::Relaxed);
                    if i >= limit || Instant::now() >= deadline {
                        sent.fetch_sub(1, Ordering::Relaxed);
                        return Ok(hist);
                    }
                    let (body, expect) = &queries[(i % 1024) as usize];
                    let t = Instant::now();
                    let mut response = agent
                        .post(format!("{url}{}", api.path()))
                        .header("content-type", "application/json")
                        .send(body.as_bytes())
                        .map_err(|e| e.to_string())?;
                    let text = response
                        .body_mut()
                        .read_to_string()
                        .map_err(|e| e.to_string())?;
                    let _ = hist.record(t.elapsed().as_nanos() as u64);
                    if response.status() != 200 {
                        return Err(format!("status {}: {text}", response.status()));
                    }
                    if let Some(w) = expect {
                        let answer: Value =
                            serde_json::from_str(&text).map_err(|e| e.to_string())?;
                        if first_worker(api, &answer) != Some(*w) {
                            return Err(format!("expected worker {w} first: {text}"));
                        }
                    }
                }
            })
        })
        .collect();
    let mut merged = Histogram::<u64>::new(3).expect("a histogram");
    for thread in threads {
        let hist = thread
            .join()
            .map_err(|_| "a client panicked".to_owned())??;
        merged.add(hist).map_err(|e| e.to_string())?;
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(Run {
        clients,
        requests: merged.len(),
        seconds,
        p50_us: merged.value_at_quantile(0.5) as f64 / 1e3,
        p99_us: merged.value_at_quantile(0.99) as f64 / 1e3,
    })
}

/// Starts the server binary beside this one on `dir`'s snapshot; returns it and its URL.
fn start_server(
    dir: &Path,
    layout: &str,
    api: Api,
) -> Result<(std::process::Child, String), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let server = exe.with_file_name("flash-indexer-server");
    let mut child = Command::new(&server)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--layout",
            layout,
            "--snapshot-dir",
        ])
        .arg(dir)
        .args(["--snapshot-interval", "3600"])
        .args(match api {
            Api::Own => vec![],
            Api::Dynamo => vec!["--dynamo-listen".into(), "127.0.0.1:0".into()],
            Api::Prompt => vec!["--config".into(), dir.join("config.toml").into_os_string()],
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!(
                "{}: {e} (build it: cargo build --release -p flash-indexer-server)",
                server.display()
            )
        })?;
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let mut url = String::new();
    // `listening on URL`, then with Dynamo's API `dynamo api on URL`: the last is the one asked.
    for prefix in ["listening on ", "dynamo api on "]
        .iter()
        .take(1 + usize::from(api == Api::Dynamo))
    {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line).map_err(|e| e.to_string())?;
        url = line
            .trim()
            .strip_prefix(prefix)
            .ok_or_else(|| format!("the server did not start: {line:?}"))?
            .to_owned();
    }
    Ok((child, url))
}

fn write(out: &Path, args: &Args, runs: &[Run], table: &str) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| e.to_string())?;
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let md = format!(
        "# flash-indexer-server under load\n\nWritten by `cargo run --release -p flash-indexer-server --bin flash-indexer-load`: \
         the server ({layout} layout) restored from a snapshot of {w} workers x {s} sequences x {b} blocks \
         (block size 16; 4 shared prefixes of {h} blocks), queried over loopback HTTP/1.1 with keep-alive \
         (50% whole sequences, 25% diverging after the prefix, 25% misses; {tokens} a query; \
         {api}). \
         Each run stops at {r} requests or {sec} s; clients and server share {cpus} cores.\n\n{table}",
        layout = args.layout,
        w = args.fleet.workers,
        s = args.fleet.sequences,
        b = args.fleet.blocks,
        h = args.fleet.blocks / 2,
        tokens = match args.api {
            Api::Prompt => format!("{} words", args.fleet.blocks * BLOCK_SIZE),
            _ => format!("{} tokens", args.fleet.blocks * BLOCK_SIZE),
        },
        r = args.requests,
        sec = args.seconds,
        api = match args.api {
            Api::Own => "the server's own `/query`",
            Api::Dynamo => "Dynamo's `/query` on `--dynamo-listen`",
            Api::Prompt => "prompt text to `/score`, tokenized by the server with its prefix store",
        },
    );
    let name = format!("server_load{}", args.api.suffix());
    std::fs::write(out.join(format!("{name}.md")), md).map_err(|e| e.to_string())?;
    plot(&out.join(format!("{name}.svg")), runs).map_err(|e| e.to_string())
}

fn plot(path: &Path, runs: &[Run]) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(450);
    let xmax = runs.iter().map(|r| r.clients).max().unwrap_or(1) as f64 * 1.5;
    let qmax = runs
        .iter()
        .map(|r| r.requests as f64 / r.seconds)
        .fold(1.0, f64::max)
        * 1.2;
    let mut chart = ChartBuilder::on(&left)
        .caption("queries per second", ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0.7..xmax).log_scale(), 0.0..qmax)?;
    chart.configure_mesh().x_desc("concurrent clients").draw()?;
    let qps: Vec<(f64, f64)> = runs
        .iter()
        .map(|r| (r.clients as f64, r.requests as f64 / r.seconds))
        .collect();
    chart.draw_series(LineSeries::new(qps.clone(), BLUE.stroke_width(2)))?;
    chart.draw_series(qps.into_iter().map(|p| Circle::new(p, 4, BLUE.filled())))?;
    let lmax = runs.iter().map(|r| r.p99_us).fold(1.0, f64::max) * 2.0;
    let lmin = runs.iter().map(|r| r.p50_us).fold(lmax, f64::min) * 0.5;
    let mut chart = ChartBuilder::on(&right)
        .caption("latency (us)", ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0.7..xmax).log_scale(), (lmin..lmax).log_scale())?;
    chart.configure_mesh().x_desc("concurrent clients").draw()?;
    for (name, color, pick) in [
        ("p50", GREEN, (|r: &Run| r.p50_us) as fn(&Run) -> f64),
        ("p99", RED, |r: &Run| r.p99_us),
    ] {
        let pts: Vec<(f64, f64)> = runs.iter().map(|r| (r.clients as f64, pick(r))).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match main_inner(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("flash-indexer-load: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn main_inner(args: &Args) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("flash-indexer-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let prompter = match args.api {
        Api::Prompt => Some(prompt_model(&dir, args)?),
        _ => None,
    };
    let contents = fleet(args, prompter.as_ref())?;
    snapshot::write_atomic(&dir, &snapshot::encode(&contents)).map_err(|e| e.to_string())?;
    let (mut child, url) = start_server(&dir, &args.layout, args.api)?;
    let result = (|| {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let deadline = Instant::now() + Duration::from_secs(60);
        while agent
            .get(format!("{url}/health"))
            .call()
            .map(|r| r.status() != 200)
            .unwrap_or(true)
        {
            if Instant::now() > deadline {
                return Err("the server was not ready after 60 s".to_owned());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut runs = Vec::new();
        for &clients in &args.clients {
            let r = run(&url, args, clients)?;
            eprintln!(
                "{clients} clients: {:.0} queries/s, p50 {:.1} us, p99 {:.1} us",
                r.requests as f64 / r.seconds,
                r.p50_us,
                r.p99_us
            );
            runs.push(r);
        }
        Ok(runs)
    })();
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let runs = result?;
    let mut table = String::from(
        "| clients | requests | seconds | queries/s | p50 us | p99 us |\n|---|---|---|---|---|---|\n",
    );
    for r in &runs {
        table.push_str(&format!(
            "| {} | {} | {:.2} | {:.0} | {:.1} | {:.1} |\n",
            r.clients,
            r.requests,
            r.seconds,
            r.requests as f64 / r.seconds,
            r.p50_us,
            r.p99_us
        ));
    }
    println!("{table}");
    if !args.no_write {
        write(&args.out, args, &runs, &table)?;
        let name = format!("server_load{}", args.api.suffix());
        println!("wrote {}/{name}.{{md,svg}}", args.out.display());
    }
    Ok(())
}
