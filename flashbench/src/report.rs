//! What flashbench prints.

use crate::replay::Report;
use crate::workload::{Op, Workload};

/// The median of `values` as every table of flashbench reports it: the middle value, the upper
/// of the two middle ones for an even count (always a value that was measured). `None` if empty.
///
/// ```
/// use flashbench::report::median;
///
/// assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
/// assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(3.0));
/// assert_eq!(median(Vec::new()), None);
/// ```
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// One line about a workload: its size and mix.
pub fn describe(workload: &Workload) {
    let (mut matches, mut stores, mut removes, mut blocks) = (0u64, 0u64, 0u64, 0u64);
    for op in &workload.ops {
        match op {
            Op::Match { .. } => matches += 1,
            Op::Store { blocks: b, .. } => {
                stores += 1;
                blocks += b.len() as u64;
            }
            Op::Remove { .. } => removes += 1,
            Op::Clear { .. } => {}
        }
    }
    let span = workload.ops.last().map_or(0, Op::t) as f64 / 1e6;
    eprintln!(
        "workload: {} ops over {span:.0} s of trace time ({matches} queries, {stores} stores of {blocks} blocks, {removes} removes); block size {}, {} workers, {} blocks each",
        workload.ops.len(),
        workload.header.block_size,
        workload
            .header
            .workers
            .map_or("?".into(), |w| w.to_string()),
        workload
            .header
            .capacity_blocks
            .map_or("?".into(), |c| c.to_string()),
    );
}

fn us(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1000.0)
}

/// The cells of one layout's row, in table order after the name.
fn cells(r: &Report) -> [String; 9] {
    let l = &r.latency;
    [
        format!("{:.0}", r.ops_per_s()),
        format!("{:.0}", r.block_ops_per_s()),
        us(l.value_at_quantile(0.5)),
        us(l.value_at_quantile(0.99)),
        us(l.value_at_quantile(0.999)),
        us(l.max()),
        r.pool.rejected().to_string(),
        format!("{:.1}", r.peak_bytes as f64 / (1 << 20) as f64),
        format!("{:.1}", r.bytes_per_pair()),
    ]
}

/// The comparison table.
pub fn table(reports: &[Report], speed: &f64) {
    let mode = if *speed > 0.0 {
        format!("paced at {speed}x trace time")
    } else {
        "as fast as possible".into()
    };
    println!("\nreplay {mode}; clocks stop after the final flush; latencies in microseconds");
    println!(
        "{:<12} {:>10} {:>12} {:>8} {:>8} {:>8} {:>8} {:>9} {:>10} {:>9}",
        "layout",
        "ops/s",
        "block ops/s",
        "p50",
        "p99",
        "p99.9",
        "max",
        "rejected",
        "peak MiB",
        "B/pair"
    );
    for r in reports {
        let [ops, blocks, p50, p99, p999, max, rejected, peak, per_pair] = cells(r);
        println!(
            "{:<12} {ops:>10} {blocks:>12} {p50:>8} {p99:>8} {p999:>8} {max:>8} {rejected:>9} {peak:>10} {per_pair:>9}",
            r.name
        );
    }
    if *speed > 0.0 {
        println!("\n{:<12} {:>12} {:>12}", "layout", "max lag ms", "drain ms");
        for r in reports {
            println!(
                "{:<12} {:>12.1} {:>12.1}",
                r.name,
                r.max_lag.as_secs_f64() * 1e3,
                r.drain.as_secs_f64() * 1e3
            );
        }
    }
}

/// Generated workloads are valid: any rejected event is a bug (in the engines or an index).
pub fn check_rejections(reports: &[Report]) -> Result<(), String> {
    let bad: Vec<String> = reports
        .iter()
        .filter(|r| r.pool.rejected() > 0 || r.pool.warned_unknown_blocks > 0)
        .map(|r| format!("{}: {:?}", r.name, r.pool))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("events were rejected:\n{}", bad.join("\n")))
    }
}

/// The comparison table as Markdown (for `papers/figures/`).
pub fn markdown(reports: &[Report], source: &str) -> String {
    let mut md = format!(
        "Replay as fast as possible, clocks stopped after the final flush; workload: {source}. Latencies in microseconds.\n\n| layout | ops/s | block ops/s | p50 | p99 | p99.9 | max | rejected | peak MiB | bytes per held pair |\n|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for r in reports {
        md.push_str(&format!("| {} | {} |\n", r.name, cells(r).join(" | ")));
    }
    md
}
