//! The throughput-latency sweep: paced replays at rising rates until a layout can no longer keep
//! up or its query p99 crosses a threshold.

use crate::replay::{self, ReplayConfig, Report};
use crate::workload::Workload;
use flash_indexer::testing::IndexFactory;
use indicatif::ProgressBar;
use plotters::prelude::*;
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// How the sweep runs.
#[derive(Clone, Debug)]
pub struct SweepConfig {
    pub threads: usize,
    /// First speed (times trace time); each next point doubles it.
    pub start_speed: f64,
    /// Wall-clock budget of one point.
    pub seconds_per_point: f64,
    /// A point whose query p99 exceeds this fails.
    pub threshold_us: f64,
    /// A point keeps up when no op ran later than this behind schedule and the final flush
    /// returned within it.
    pub max_lag_ms: f64,
    /// Points at most per layout.
    pub max_points: usize,
}

/// One measured point.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub speed: f64,
    pub offered_ops_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_lag_ms: f64,
    pub drain_ms: f64,
    pub kept_up: bool,
    pub under_threshold: bool,
}

/// One layout's curve, its keep-up limit (the highest offered rate it kept up with) and its
/// threshold throughput (the highest offered rate it kept up with at query p99 under the
/// threshold; 0 if no point was under it).
#[derive(Clone, Debug, Serialize)]
pub struct Curve {
    pub layout: String,
    pub keep_up_ops_per_s: f64,
    pub threshold_ops_per_s: f64,
    pub bytes_per_pair: f64,
    pub points: Vec<Point>,
}

fn point(report: &Report, speed: f64, cfg: &SweepConfig) -> Point {
    let (max_lag_ms, drain_ms) = (
        report.max_lag.as_secs_f64() * 1e3,
        report.drain.as_secs_f64() * 1e3,
    );
    let p99_us = report.latency.value_at_quantile(0.99) as f64 / 1e3;
    Point {
        speed,
        offered_ops_per_s: report.ops_per_s(),
        p50_us: report.latency.value_at_quantile(0.5) as f64 / 1e3,
        p99_us,
        max_lag_ms,
        drain_ms,
        kept_up: max_lag_ms <= cfg.max_lag_ms && drain_ms <= cfg.max_lag_ms,
        under_threshold: p99_us <= cfg.threshold_us,
    }
}

/// Sweeps every layout of `factories` over `workload`.
pub fn sweep(workload: &Workload, factories: &[IndexFactory], cfg: &SweepConfig) -> Vec<Curve> {
    let mut curves = Vec::new();
    for factory in factories {
        let mut curve = Curve {
            layout: factory.name.into(),
            keep_up_ops_per_s: 0.0,
            threshold_ops_per_s: 0.0,
            bytes_per_pair: 0.0,
            points: Vec::new(),
        };
        let mut speed = cfg.start_speed;
        for _ in 0..cfg.max_points {
            let replay_cfg = ReplayConfig {
                threads: cfg.threads,
                speed,
                max_wall: Some(Duration::from_secs_f64(cfg.seconds_per_point)),
            };
            let bar = ProgressBar::hidden();
            let report = replay::replay(factory.name, factory.make, workload, &replay_cfg, &bar);
            let p = point(&report, speed, cfg);
            eprintln!(
                "{:>12} speed {:>8.0}x: {:>9.0} ops/s  p99 {:>8.2} us  lag {:>7.1} ms  drain {:>7.1} ms{}",
                factory.name,
                speed,
                p.offered_ops_per_s,
                p.p99_us,
                p.max_lag_ms,
                p.drain_ms,
                match (p.kept_up, p.under_threshold) {
                    (false, _) => "  <- cannot keep up",
                    (true, false) => "  (p99 over threshold)",
                    (true, true) => "",
                }
            );
            curve.bytes_per_pair = report.bytes_per_pair();
            let kept_up = p.kept_up;
            if kept_up {
                curve.keep_up_ops_per_s = curve.keep_up_ops_per_s.max(p.offered_ops_per_s);
                if p.under_threshold {
                    curve.threshold_ops_per_s = curve.threshold_ops_per_s.max(p.offered_ops_per_s);
                }
            }
            curve.points.push(p);
            if !kept_up {
                break;
            }
            speed *= 2.0;
        }
        curves.push(curve);
    }
    curves
}

/// Writes `sweep.json`, `sweep.svg` (p99 against offered rate, log-log) and `sweep.md` (the
/// threshold table) into `dir`.
pub fn write(curves: &[Curve], cfg: &SweepConfig, source: &str, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let json = serde_json::to_string_pretty(curves).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("sweep.json"), json).map_err(|e| format!("writing sweep.json: {e}"))?;

    let mut md = format!(
        "Keep-up limit: the highest offered rate at which a layout kept up (no op more than {} ms late, final flush within {} ms). Threshold throughput: the highest such rate with query p99 at most {} us (0: no point was under it). Workload: {source}; {} writer threads; {} s per point.\n\n| layout | keep-up limit ops/s | threshold ops/s | bytes per held pair |\n|---|---|---|---|\n",
        cfg.max_lag_ms, cfg.max_lag_ms, cfg.threshold_us, cfg.threads, cfg.seconds_per_point
    );
    for c in curves {
        md.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.1} |\n",
            c.layout, c.keep_up_ops_per_s, c.threshold_ops_per_s, c.bytes_per_pair
        ));
    }
    std::fs::write(dir.join("sweep.md"), md).map_err(|e| format!("writing sweep.md: {e}"))?;

    let path = dir.join("sweep.svg");
    let root = SVGBackend::new(&path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let pts = curves.iter().flat_map(|c| &c.points);
    let (xmax, ymax) = pts.fold((1.0f64, 1.0f64), |(x, y), p| {
        (x.max(p.offered_ops_per_s), y.max(p.p99_us))
    });
    let (xmin, ymin) = curves
        .iter()
        .flat_map(|c| &c.points)
        .fold((xmax, ymax), |(x, y), p| {
            (x.min(p.offered_ops_per_s), y.min(p.p99_us))
        });
    let mut chart = ChartBuilder::on(&root)
        .caption("query p99 against offered load", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (xmin * 0.8..xmax * 1.25).log_scale(),
            (ymin * 0.8..ymax * 1.25).log_scale(),
        )
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("offered ops/s")
        .y_desc("query p99 (us)")
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, c) in curves.iter().enumerate() {
        let color = Palette99::pick(i).mix(0.9);
        let series: Vec<(f64, f64)> = c
            .points
            .iter()
            .map(|p| (p.offered_ops_per_s, p.p99_us))
            .collect();
        chart
            .draw_series(LineSeries::new(series.clone(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(c.layout.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                series
                    .into_iter()
                    .map(|(x, y)| Circle::new((x, y), 3, color.filled())),
            )
            .map_err(|e| e.to_string())?;
    }
    let limit = cfg.threshold_us;
    chart
        .draw_series(LineSeries::new(
            vec![(xmin * 0.8, limit), (xmax * 1.25, limit)],
            BLACK.mix(0.4),
        ))
        .map_err(|e| e.to_string())?
        .label(format!("p99 threshold {limit} us"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
