//! What `flashbench route` prints and writes: a table per offered load, and the figures.

use super::{Outcome, RouteConfig};

/// The hit rates a fleet of caches is measured against.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// One infinite cache that saw every earlier request.
    pub infinite: f64,
    /// One LRU cache of the fleet's whole capacity.
    pub pooled: f64,
}
use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;
use std::path::Path;

const HEADER: &str = "| policy | hit rate | TTFT p50 ms | TTFT p99 ms | imbalance | index MiB | decisions/s | index us/request |";

fn row(o: &Outcome) -> String {
    format!(
        "| {} | {:.1}% | {:.1} | {:.1} | {:.2} | {:.2} | {:.0} | {:.2} |",
        o.policy,
        o.hit_rate * 100.0,
        o.ttft_p50_ms,
        o.ttft_p99_ms,
        o.imbalance,
        // Policies without an index hold nothing; a few bytes freed elsewhere during the run
        // would otherwise print as -0.00.
        o.index_bytes.max(0) as f64 / f64::from(1 << 20),
        o.decisions_per_s,
        o.index_us_per_request
    )
}

/// The table of one offered load, as Markdown: one row per policy, its name first.
pub fn table(outcomes: &[Outcome], load: f64, limits: Limits) -> String {
    let mut out = format!(
        "load {load}x; the trace's limit (one infinite cache): {:.1}%; one LRU cache of the fleet's whole capacity: {:.1}%\n\n{HEADER}\n|---|---|---|---|---|---|---|---|\n",
        limits.infinite * 100.0,
        limits.pooled * 100.0
    );
    for o in outcomes.iter().filter(|o| o.load == load) {
        out.push_str(&row(o));
        out.push('\n');
    }
    out
}

/// Writes `route.md` (every load's table), `route.json` and `route.svg` (hit rate and TTFT p99
/// against offered load) into `dir`; `rounds` is how many rounds each row is the median of.
pub fn write(
    outcomes: &[Outcome],
    loads: &[f64],
    limits: Limits,
    cfg: &RouteConfig,
    source: &str,
    rounds: usize,
    dir: &Path,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let replicated = outcomes.iter().any(|o| o.policy.contains(" shared"));
    let shared = if replicated {
        format!(
            ", router replicas' shared decisions {} ms late",
            cfg.share_delay_us as f64 / 1000.0
        )
    } else {
        String::new()
    };
    let rounds = if rounds > 1 {
        format!(" Each row is the round of median decisions/s of {rounds} interleaved rounds.")
    } else {
        String::new()
    };
    let mut md = format!(
        "`flashbench route` on {source}: {} workers of {} blocks of {} tokens, prefill {} tokens/s per engine, decode {} tokens/s per request, events {} ms late{shared}, overlap weight {}.{rounds}\n\n",
        cfg.workers,
        cfg.capacity_blocks,
        cfg.block_size,
        cfg.prefill_tokens_per_s,
        cfg.decode_tokens_per_s,
        cfg.event_delay_us as f64 / 1000.0,
        cfg.overlap_weight
    );
    for &load in loads {
        md.push_str(&table(outcomes, load, limits));
        md.push('\n');
    }
    std::fs::write(dir.join("route.md"), md).map_err(|e| format!("writing route.md: {e}"))?;
    let json = serde_json::to_string_pretty(outcomes).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("route.json"), json).map_err(|e| format!("writing route.json: {e}"))?;
    plot(outcomes, loads, limits.infinite, &dir.join("route.svg"))
        .map_err(|e| format!("route.svg: {e}"))
}

fn plot(outcomes: &[Outcome], loads: &[f64], limit: f64, path: &Path) -> Result<(), String> {
    let root = SVGBackend::new(path, (1100, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (left, right) = root.split_horizontally(550);
    let mut names: Vec<&str> = Vec::new();
    for o in outcomes {
        if !names.contains(&o.policy.as_str()) {
            names.push(&o.policy);
        }
    }
    let xmax = loads.iter().copied().fold(1.0, f64::max) * 1.1;
    let xmin = loads.iter().copied().fold(xmax, f64::min) * 0.9;
    let ttft_max = outcomes.iter().map(|o| o.ttft_p99_ms).fold(1.0, f64::max) * 1.5;
    let ttft_min = outcomes
        .iter()
        .map(|o| o.ttft_p99_ms)
        .fold(ttft_max, f64::min)
        .max(0.01)
        * 0.7;
    let hit_label = "prefix-cache hit rate (%)";
    let mut hits = ChartBuilder::on(&left)
        .caption(hit_label, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..(limit * 100.0 + 10.0))
        .map_err(|e| e.to_string())?;
    mesh(&mut hits, hit_label)?;
    series(&mut hits, &names, outcomes, |o| o.hit_rate * 100.0)?;
    hits.draw_series(LineSeries::new(
        vec![(xmin, limit * 100.0), (xmax, limit * 100.0)],
        BLACK.mix(0.4),
    ))
    .map_err(|e| e.to_string())?
    .label("infinite cache")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
    hits.configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .label_font(("sans-serif", 11))
        .draw()
        .map_err(|e| e.to_string())?;

    let ttft_label = "TTFT p99 (ms)";
    let mut ttft = ChartBuilder::on(&right)
        .caption(ttft_label, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d((xmin..xmax).log_scale(), (ttft_min..ttft_max).log_scale())
        .map_err(|e| e.to_string())?;
    mesh(&mut ttft, ttft_label)?;
    series(&mut ttft, &names, outcomes, |o| o.ttft_p99_ms)?;
    root.present().map_err(|e| e.to_string())
}

fn mesh<X, Y>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, Y>>,
    label: &str,
) -> Result<(), String>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc("offered load (x trace rate)")
        .y_desc(label)
        .draw()
        .map_err(|e| e.to_string())
}

fn series<X, Y>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<X, Y>>,
    names: &[&str],
    outcomes: &[Outcome],
    value: fn(&Outcome) -> f64,
) -> Result<(), String>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (i, name) in names.iter().enumerate() {
        let color = Palette99::pick(i).mix(0.9);
        let points: Vec<(f64, f64)> = outcomes
            .iter()
            .filter(|o| o.policy == *name)
            .map(|o| (o.load, value(o)))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name.to_string())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, color.filled())),
            )
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
