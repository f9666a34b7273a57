//! Replays a workload against one index through the writer pool.

use crate::workload::{Op, Workload};
use flash_indexer::pool::{PoolConfig, PoolStats, WriterPool};
use flash_indexer::testing::{CountingAlloc, collect_garbage};
use flash_indexer::{KvIndex, Worker};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use std::collections::BTreeSet;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a replay runs.
#[derive(Clone, Debug)]
pub struct ReplayConfig {
    /// Writer threads of the pool.
    pub threads: usize,
    /// Trace time runs this many times faster than real time; 0 replays as fast as possible.
    pub speed: f64,
    /// Stop issuing ops after this much wall time (the sweep's budget per point).
    pub max_wall: Option<Duration>,
}

/// What one replay measured.
#[derive(Debug)]
pub struct Report {
    pub name: String,
    pub ops: u64,
    /// Blocks named by all ops (query blocks included).
    pub block_ops: u64,
    /// Until the final flush returned.
    pub elapsed: Duration,
    /// Query latency, nanoseconds.
    pub latency: Histogram<u64>,
    pub pool: PoolStats,
    /// Most heap bytes above the starting point during the replay.
    pub peak_bytes: i64,
    /// Heap bytes above the starting point once the replay is done.
    pub end_bytes: i64,
    /// (worker, block) pairs held at the end.
    pub held_pairs: u64,
    /// Largest delay of an op behind its scheduled time (paced replays).
    pub max_lag: Duration,
    /// Time from the last op's schedule to the end of the final flush (paced replays).
    pub drain: Duration,
}

impl Report {
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    pub fn block_ops_per_s(&self) -> f64 {
        self.block_ops as f64 / self.elapsed.as_secs_f64()
    }

    pub fn bytes_per_pair(&self) -> f64 {
        if self.held_pairs == 0 {
            0.0
        } else {
            self.end_bytes as f64 / self.held_pairs as f64
        }
    }
}

/// Replays `workload` on a fresh index from `make`.
pub fn replay(
    name: &str,
    make: fn() -> Box<dyn KvIndex>,
    workload: &Workload,
    cfg: &ReplayConfig,
    progress: &ProgressBar,
) -> Report {
    collect_garbage();
    let base = CountingAlloc::live_bytes();
    CountingAlloc::reset_peak();
    let events: Vec<Option<flash_indexer::Event>> = workload.ops.iter().map(Op::event).collect();
    let index: Arc<dyn KvIndex> = Arc::from(make());
    let pool = WriterPool::new(
        index.clone(),
        PoolConfig {
            threads: cfg.threads,
            queue_capacity: 8192,
        },
    );
    let mut latency =
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds");
    let mut block_ops = 0u64;
    let mut max_lag = Duration::ZERO;
    let start = Instant::now();
    let schedule = |t: u64| {
        (cfg.speed > 0.0).then(|| start + Duration::from_secs_f64(t as f64 / 1e6 / cfg.speed))
    };
    let mut issued = 0u64;
    let mut last_scheduled = None;
    for (i, (op, event)) in workload.ops.iter().zip(events).enumerate() {
        if cfg.max_wall.is_some_and(|budget| start.elapsed() > budget) {
            break;
        }
        issued += 1;
        last_scheduled = schedule(op.t());
        if let Some(at) = last_scheduled {
            let now = Instant::now();
            if now < at {
                std::thread::sleep(at - now);
            } else {
                max_lag = max_lag.max(now - at);
            }
        }
        block_ops += op.blocks() as u64;
        match (op, event) {
            (Op::Match { q, .. }, _) => {
                let q: Vec<flash_indexer::LocalHash> =
                    q.iter().copied().map(flash_indexer::LocalHash).collect();
                let t0 = Instant::now();
                black_box(pool.find_matches(&q));
                latency.saturating_record(t0.elapsed().as_nanos() as u64);
            }
            (_, Some(event)) => {
                pool.submit(event).expect("writer threads alive");
            }
            _ => unreachable!("every non-match op is an event"),
        }
        if i % 4096 == 0 {
            progress.set_position(i as u64);
        }
    }
    pool.flush();
    let elapsed = start.elapsed();
    let drain = last_scheduled.map_or(Duration::ZERO, |at| {
        Instant::now().saturating_duration_since(at)
    });
    progress.set_position(workload.ops.len() as u64);
    let workers: BTreeSet<Worker> = workload
        .ops
        .iter()
        .map(|op| match op {
            Op::Match { w, r, .. }
            | Op::Store { w, r, .. }
            | Op::Remove { w, r, .. }
            | Op::Clear { w, r, .. } => Worker::new(*w, *r),
        })
        .collect();
    let held_pairs = workers.iter().map(|w| index.block_count(*w) as u64).sum();
    let stats = pool.stats();
    drop(pool);
    collect_garbage();
    let end_bytes = (CountingAlloc::live_bytes() - base) as i64;
    let peak_bytes = (CountingAlloc::peak_bytes() - base) as i64;
    drop(index);
    Report {
        name: name.into(),
        ops: issued,
        block_ops,
        elapsed,
        latency,
        pool: stats,
        peak_bytes,
        end_bytes,
        held_pairs,
        max_lag,
        drain,
    }
}
