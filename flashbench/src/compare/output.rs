//! The comparison's tables (Markdown), medians and every round's values (JSON) and figures (SVG).

use super::measure::Run;
use super::presets::DEPTHS;
use super::subject::{BASELINE, Method};
use super::{CompareConfig, Outcome};
use crate::report::median;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// A column's value in one run (`ns per block` is derived from the depth preset's p50s).
fn value(run: &Run, column: &str) -> Option<f64> {
    if column == "ns per block" {
        let deep = run.values.get("hit@4096 p50 us")?;
        let shallow = run.values.get("hit@1024 p50 us")?;
        return Some((deep - shallow) * 1000.0 / 3072.0);
    }
    run.values.get(column).copied()
}

fn median_of(runs: &[Run], column: &str) -> Option<f64> {
    median(runs.iter().filter_map(|r| value(r, column)).collect())
}

fn format_value(column: &str, v: f64) -> String {
    if column.ends_with("/s") {
        if v >= 1e6 {
            format!("{:.2}M", v / 1e6)
        } else {
            format!("{:.1}k", v / 1e3)
        }
    } else if column.ends_with("us") {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

/// The machine and date every table states.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores ({cpu}), {}", today())
}

/// Today's UTC date, `YYYY-MM-DD` (days to civil date, Howard Hinnant's algorithm).
fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// One preset's Markdown: what it is, the table, the ratio rows.
pub fn table(o: &Outcome, cfg: &CompareConfig) -> String {
    let p = &o.preset;
    let outsider = p.phases.iter().any(|ph| {
        matches!(ph, super::presets::Phase::Replay { speed, .. } if cfg.method.outsider_replay(*speed))
    });
    let method = match outsider {
        true => {
            " The outsider's method: every step converted to the index's own types before the clock starts, events handed over owned, queries asked straight from the converted trace, answers checked after the timed rounds."
        }
        false => "",
    };
    let mut md = format!(
        "### {}\n\n{}{method}\n\n{} interleaved rounds, medians; {} writer threads per index, one query thread; {}; load average {} before, {} after.\n\n",
        p.name,
        p.about,
        o.rounds,
        cfg.threads,
        machine(),
        o.load_before,
        o.load_after
    );
    md.push_str("| index |");
    for c in &p.columns {
        md.push_str(&format!(" {c} |"));
    }
    md.push_str(" differing queries |\n|---|");
    for _ in &p.columns {
        md.push_str("---|");
    }
    md.push_str("---|\n");
    for (name, _, runs) in &o.runs {
        md.push_str(&format!("| {name} |"));
        for c in &p.columns {
            let cell = median_of(runs, c).map_or("-".into(), |v| format_value(c, v));
            md.push_str(&format!(" {cell} |"));
        }
        let checked: u64 = runs.iter().map(|r| r.checked).sum();
        let differing: u64 = runs.iter().map(|r| r.differing).sum();
        let mut by_phase: BTreeMap<&str, u64> = BTreeMap::new();
        for (label, n) in runs.iter().flat_map(|r| &r.differing_in) {
            *by_phase.entry(label).or_default() += n;
        }
        let where_: Vec<String> = by_phase.iter().map(|(l, n)| format!("{l}: {n}")).collect();
        let where_ = if where_.is_empty() {
            String::new()
        } else {
            format!(" ({})", where_.join(", "))
        };
        md.push_str(&format!(" {differing} of {checked}{where_} |\n"));
    }
    let baseline = o.runs.iter().find(|(name, _, _)| name == BASELINE);
    if let Some((_, _, base)) = baseline {
        for (name, _, runs) in o.runs.iter().filter(|(_, ours, _)| *ours) {
            md.push_str(&format!("| {name} / CRTC |"));
            for c in &p.columns {
                let cell = match (median_of(runs, c), median_of(base, c)) {
                    (Some(a), Some(b)) if b != 0.0 => format!("{:.2}x", a / b),
                    _ => "-".into(),
                };
                md.push_str(&format!(" {cell} |"));
            }
            md.push_str(" |\n");
        }
        md.push_str("\nRatio rows: ours / CRTC; above 1 is better in the /s columns, below 1 in the others.\n");
    } else {
        md.push_str("\n(Built without the `dynamo` feature: no CRTC to compare with.)\n");
    }
    md
}

/// Writes `compare.md`, `compare.json` and the figures into `dir`.
pub fn write(outcomes: &[Outcome], cfg: &CompareConfig, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let (stem, command) = match cfg.method {
        Method::Compare => ("compare", "compare"),
        Method::Outsider => ("outsider", "compare --method outsider"),
    };
    let mut md = format!(
        "# flash-indexer against Dynamo's indexes\n\nWritten by `cargo run --release -p flashbench --features dynamo -- {command}`. Queries are timed one by one in the index's own call; write phases run until the last event is applied.\n\n",
    );
    let mut json = serde_json::Map::new();
    for o in outcomes {
        md.push_str(&table(o, cfg));
        md.push('\n');
        let mut of_preset = serde_json::Map::new();
        for (name, _, runs) in &o.runs {
            let mut cells = serde_json::Map::new();
            // Every round's value beside the median, in the order the rounds ran: the spread
            // the median hides.
            let mut per_round = serde_json::Map::new();
            for c in o.preset.columns.iter().chain(runs[0].values.keys()) {
                let values: Vec<Option<f64>> = runs.iter().map(|r| value(r, c)).collect();
                if let Some(v) = median(values.iter().flatten().copied().collect()) {
                    cells.insert(c.clone(), v.into());
                    per_round.insert(c.clone(), values.into());
                }
            }
            cells.insert(
                "differing".into(),
                runs.iter().map(|r| r.differing).sum::<u64>().into(),
            );
            cells.insert(
                "checked".into(),
                runs.iter().map(|r| r.checked).sum::<u64>().into(),
            );
            cells.insert("rounds".into(), per_round.into());
            of_preset.insert(name.clone(), cells.into());
        }
        json.insert(o.preset.name.into(), of_preset.into());
        // The figures are the run of record's: the outsider's method writes its tables only.
        if cfg.method == Method::Compare {
            scatter(o, dir)?;
            if o.preset.name == "depth" {
                depth_figure(o, dir)?;
            }
        }
    }
    let (md_path, json_path) = (
        dir.join(format!("{stem}.md")),
        dir.join(format!("{stem}.json")),
    );
    std::fs::write(&md_path, md).map_err(|e| format!("writing {}: {e}", md_path.display()))?;
    let json = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
    std::fs::write(&json_path, json)
        .map_err(|e| format!("writing {}: {e}", json_path.display()))?;
    eprintln!("wrote {} and {}", md_path.display(), json_path.display());
    Ok(())
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Throughput against query p99 per index (p50 against p99 where a preset has no throughput).
fn scatter(o: &Outcome, dir: &Path) -> Result<(), String> {
    let cols = &o.preset.columns;
    let y_col = cols.iter().find(|c| c.ends_with("p99 us"));
    let x_col = cols
        .iter()
        .find(|c| c.ends_with("/s"))
        .or_else(|| cols.iter().find(|c| c.ends_with("p50 us")));
    let (Some(x_col), Some(y_col)) = (x_col, y_col) else {
        return Ok(());
    };
    let points: Vec<(String, f64, f64)> = o
        .runs
        .iter()
        .filter_map(|(name, _, runs)| {
            Some((
                name.clone(),
                median_of(runs, x_col)?,
                median_of(runs, y_col)?,
            ))
        })
        .collect();
    if points.is_empty() {
        return Ok(());
    }
    let path = dir.join(format!("compare-{}.svg", o.preset.name));
    let root = SVGBackend::new(&path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (xmin, xmax) = points
        .iter()
        .fold((f64::MAX, 0f64), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let (ymin, ymax) = points
        .iter()
        .fold((f64::MAX, 0f64), |(a, b), p| (a.min(p.2), b.max(p.2)));
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{}: {x_col} against {y_col}", o.preset.name),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (xmin * 0.5..xmax * 2.0).log_scale(),
            (ymin * 0.5..ymax * 2.0).log_scale(),
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_col.as_str())
        .y_desc(y_col.as_str())
        .draw()
        .map_err(err)?;
    for (i, (name, x, y)) in points.iter().enumerate() {
        let color = Palette99::pick(i).mix(0.9);
        chart
            .draw_series(std::iter::once(Circle::new((*x, *y), 5, color.filled())))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, color.filled()));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

/// Full-hit query p50 against depth, one line per index.
fn depth_figure(o: &Outcome, dir: &Path) -> Result<(), String> {
    let lines: Vec<(String, Vec<(f64, f64)>)> = o
        .runs
        .iter()
        .map(|(name, _, runs)| {
            let pts = DEPTHS
                .iter()
                .filter_map(|d| Some((*d as f64, median_of(runs, &format!("hit@{d} p50 us"))?)))
                .collect();
            (name.clone(), pts)
        })
        .collect();
    let ymax = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, y)| *y))
        .fold(0.01f64, f64::max);
    let ymin = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, y)| *y))
        .fold(ymax, f64::min);
    let path = dir.join("compare-depth-latency.svg");
    let root = SVGBackend::new(&path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("full-hit query p50 against depth", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (32f64..8192f64).log_scale(),
            (ymin * 0.5..ymax * 2.0).log_scale(),
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("depth (blocks)")
        .y_desc("p50 (us)")
        .draw()
        .map_err(err)?;
    for (i, (name, pts)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).mix(0.9);
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}
