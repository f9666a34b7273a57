//! `GET /metrics`: Prometheus text, every name prefixed `flash_indexer_`.
//!
//! Query counts and latencies are recorded as queries are answered; everything else is read
//! from the indexes, pools and subscribers when the metrics are scraped, so a scrape costs a few
//! microseconds per index and engine and nothing on the hot paths.

use std::sync::atomic::Ordering;

use metrics::{counter, gauge};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::service::{EngineStatus, Service, now_unix_ms};

/// The query latency histogram.
pub const QUERY_SECONDS: &str = "flash_indexer_query_duration_seconds";

/// The latency histogram of prompt scores (`POST /score`), tokenizing included.
pub const SCORE_SECONDS: &str = "flash_indexer_score_duration_seconds";

/// Installs the Prometheus recorder for this process; `None` if one is installed already.
pub fn install() -> Option<PrometheusHandle> {
    let buckets = [
        1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 5e-3, 1e-2,
    ];
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(QUERY_SECONDS.to_owned()), &buckets)
        .ok()?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).ok()?;
    Some(handle)
}

/// The current metrics as Prometheus text.
pub fn render(service: &Service, handle: &PrometheusHandle) -> String {
    observe(service);
    handle.run_upkeep();
    handle.render()
}

/// Reads what is measured by looking: index sizes, pool and ingest counters, memory, snapshot
/// age.
fn observe(service: &Service) {
    for model in service.models() {
        for tier in &model.tiers {
            let labels = [
                ("model", model.name.clone()),
                ("tier", tier.tier.name.clone()),
            ];
            let stats = tier.pool.stats();
            counter!("flash_indexer_events_applied_total", &labels).absolute(stats.applied);
            counter!(
                "flash_indexer_events_warned_total",
                &with_reason(&labels, "unknown_blocks")
            )
            .absolute(stats.warned_unknown_blocks);
            for (reason, count) in [
                ("unknown_parent", stats.rejected_unknown_parent),
                ("invalid_sequence", stats.rejected_invalid_sequence),
                ("conflict", stats.rejected_conflict),
                ("no_group", tier.ungrouped.load(Ordering::Relaxed)),
            ] {
                counter!(
                    "flash_indexer_events_rejected_total",
                    &with_reason(&labels, reason)
                )
                .absolute(count);
            }
            let index = tier.pool.index();
            if std::sync::Arc::ptr_eq(&tier.pool, &model.tiers[0].pool) {
                counter!("flash_indexer_duplicate_stores_total", &labels)
                    .absolute(index.duplicate_stores());
            }
            gauge!("flash_indexer_workers", &labels).set(index.worker_count() as f64);
            gauge!("flash_indexer_entries", &labels).set(index.entries() as f64);
        }
    }
    for model in service.models() {
        let Some(predictions) = &model.predictions else {
            continue;
        };
        let labels = [("model", model.name.clone())];
        let s = predictions.index.stats();
        for (name, value) in [
            (
                "flash_indexer_shared_decisions_published_total",
                s.published,
            ),
            (
                "flash_indexer_shared_decisions_publish_failures_total",
                s.publish_failures,
            ),
            ("flash_indexer_shared_decisions_applied_total", s.applied),
            (
                "flash_indexer_shared_decisions_duplicate_total",
                s.duplicates,
            ),
            (
                "flash_indexer_shared_decisions_malformed_total",
                s.malformed,
            ),
            (
                "flash_indexer_shared_decisions_unmatched_releases_total",
                s.unmatched_releases,
            ),
            (
                "flash_indexer_shared_decisions_read_failures_total",
                s.read_failures,
            ),
            (
                "flash_indexer_shared_decisions_expired_pins_total",
                s.expired_pins,
            ),
        ] {
            counter!(name, &labels).absolute(value);
        }
    }
    let engines = service.engines();
    for engine in &engines {
        for tier in &engine.tiers {
            let labels = [
                ("engine", engine.key.clone()),
                (
                    "model",
                    engine.config.fixed_model().unwrap_or("(topics)").to_owned(),
                ),
                ("tier", tier.tier.clone()),
            ];
            let s = &tier.stats;
            for (name, value) in [
                ("flash_indexer_ingest_connections_total", s.connected),
                ("flash_indexer_ingest_disconnects_total", s.disconnects),
                ("flash_indexer_ingest_batches_total", s.batches),
                ("flash_indexer_ingest_events_total", s.events),
                ("flash_indexer_ingest_gaps_total", s.gaps),
                ("flash_indexer_ingest_replayed_total", s.replayed),
                ("flash_indexer_ingest_lost_total", s.lost),
                ("flash_indexer_ingest_restarts_total", s.restarts),
                ("flash_indexer_ingest_resyncs_total", s.resyncs),
                (
                    "flash_indexer_ingest_filtered_events_total",
                    s.filtered_events,
                ),
            ] {
                counter!(name, &labels).absolute(value);
            }
            for (reason, value) in [
                ("bad_frame", s.bad_frames),
                ("unresolved_topic", s.unresolved_topics),
                ("decode", s.decode_errors),
                ("mapping", s.rejected_events),
                ("unknown_event", s.unknown_events),
                ("index", s.index_refused),
            ] {
                counter!(
                    "flash_indexer_ingest_rejected_total",
                    &with_reason(&labels, reason)
                )
                .absolute(value);
            }
        }
    }
    for (model, tier, backlog) in backlogs(service, &engines) {
        gauge!("flash_indexer_ingest_backlog_events", "model" => model, "tier" => tier)
            .set(backlog as f64);
    }
    if let Some(bytes) = resident_bytes() {
        gauge!("flash_indexer_resident_bytes").set(bytes as f64);
    }
    if let Some(at) = service.snapshot_at() {
        let age = now_unix_ms().saturating_sub(at) as f64 / 1000.0;
        gauge!("flash_indexer_snapshot_age_seconds").set(age);
    }
}

/// `labels` and a `reason`.
fn with_reason(labels: &[(&'static str, String)], reason: &str) -> Vec<(&'static str, String)> {
    let mut out = labels.to_vec();
    out.push(("reason", reason.to_owned()));
    out
}

/// Ingest lag per index: events the engines' subscribers handed to its pool that the pool has
/// not applied yet.
fn backlogs(service: &Service, engines: &[EngineStatus]) -> Vec<(String, String, u64)> {
    let mut out = Vec::new();
    for model in service.models() {
        // A hybrid tier's subscribers apply in place: nothing waits in its pool.
        for tier in model.tiers.iter().filter(|t| t.hybrid.is_none()) {
            let submitted: u64 = engines
                .iter()
                .filter(|e| e.config.fixed_model() == Some(model.name.as_str()))
                .flat_map(|e| &e.tiers)
                .filter(|t| t.tier == tier.tier.name)
                .map(|t| t.stats.events)
                .sum();
            let s = tier.pool.stats();
            let done = s.applied + s.warned_unknown_blocks + s.rejected();
            out.push((
                model.name.clone(),
                tier.tier.name.clone(),
                submitted.saturating_sub(done),
            ));
        }
    }
    out
}

/// The process's resident memory (Linux: `/proc/self/statm`).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}
