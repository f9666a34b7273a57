//! The server's life: restore, follow the engines, serve, and save on the way out.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use metrics::counter;
use tokio::net::TcpListener;

use crate::config::Settings;
use crate::service::{Service, now_unix_ms};
use crate::snapshot::{self, Contents};

/// Why the server stopped with an error.
pub type RunError = Box<dyn std::error::Error + Send + Sync>;

/// Runs the server until SIGINT or SIGTERM: restores the index (from `--peer`, else from the
/// snapshot directory), starts following the configured engines, serves HTTP on
/// `settings.listen` (printing `listening on http://ADDR` on stdout once bound) and Dynamo's API
/// on `settings.dynamo_listen` if set (printing `dynamo api on http://ADDR`), llm-d's gRPC
/// service on `settings.grpc_listen` if set (printing `grpc on ADDR`), writes a
/// snapshot every `snapshot_interval`, and a last one after the engines are stopped.
pub fn serve(settings: Settings) -> Result<(), RunError> {
    let metrics = crate::metrics::install();
    let service = Service::new(settings.clone());
    restore(&service);
    service.mark_restored();
    for engine in settings.engines.iter().cloned() {
        let key = engine.key();
        service
            .add_engine(engine, true)
            .map_err(|e| format!("engine {key}: {e}"))?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(settings.http_threads)
        .enable_all()
        .build()?;
    let served: Result<(), RunError> = runtime.block_on(async {
        let listener = TcpListener::bind(settings.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", settings.listen))?;
        let address = listener.local_addr()?;
        println!("listening on http://{address}");
        tracing::info!(%address, layout = %settings.layout, "serving");
        tokio::spawn(observe_lighter_tiers(Arc::clone(&service)));
        if let Some(dir) = settings.snapshot_dir.clone() {
            tokio::spawn(save_periodically(
                Arc::clone(&service),
                dir,
                settings.snapshot_interval,
            ));
        }
        let dynamo = match settings.dynamo_listen {
            Some(address) => {
                let listener = bind(address, "Dynamo's API", "dynamo api on http://").await?;
                let registry =
                    Arc::new(crate::dynamo::registry::Registry::new(Arc::clone(&service)));
                let app = crate::dynamo::router(registry, metrics.clone());
                Some(tokio::spawn(async move {
                    axum::serve(listener, app)
                        .with_graceful_shutdown(shutdown_signal())
                        .await
                }))
            }
            None => None,
        };
        let grpc = match settings.grpc_listen {
            Some(address) => {
                let listener = bind(address, "llm-d's gRPC indexer", "grpc on ").await?;
                let incoming = tonic::transport::server::TcpIncoming::from(listener);
                let indexer = crate::llmd::grpc::server(Arc::clone(&service));
                Some(tokio::spawn(
                    tonic::transport::Server::builder()
                        .add_service(indexer)
                        .serve_with_incoming_shutdown(incoming, shutdown_signal()),
                ))
            }
            None => None,
        };
        let app = crate::api::router(Arc::clone(&service), metrics);
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown_signal())
            .await?;
        if let Some(dynamo) = dynamo {
            dynamo.await??;
        }
        if let Some(grpc) = grpc {
            grpc.await?.map_err(|e| format!("gRPC: {e}"))?;
        }
        Ok(())
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    tracing::info!("shutting down");
    service.stop_engines();
    if let Some(dir) = &settings.snapshot_dir {
        save(&service, dir);
    }
    served
}

/// Binds a second address of the server, printing `{line}ADDR` on stdout once bound.
async fn bind(address: SocketAddr, what: &str, line: &str) -> Result<TcpListener, RunError> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| format!("cannot listen on {address} ({what}): {e}"))?;
    let address = listener.local_addr()?;
    println!("{line}{address}");
    tracing::info!(%address, "serving {what}");
    Ok(listener)
}

/// Fills the index from the peer, or failing that from the snapshot directory. A snapshot that
/// cannot be used is reported, moved aside (so the next save does not destroy the evidence) and
/// the server starts empty.
fn restore(service: &Service) {
    let settings = service.settings();
    if let Some(peer) = &settings.peer {
        match fetch_peer(peer) {
            Ok(contents) => {
                apply(service, &contents, peer);
                return;
            }
            Err(error) => {
                tracing::error!(%peer, %error, "bootstrap from the peer failed; trying the snapshot directory")
            }
        }
    }
    let Some(dir) = &settings.snapshot_dir else {
        return;
    };
    let path = snapshot::path_in(dir);
    match snapshot::read(dir) {
        Ok(Some(contents)) => apply(service, &contents, &path.display().to_string()),
        Ok(None) => tracing::info!(path = %path.display(), "no snapshot yet: starting empty"),
        Err(error) => {
            let aside = path.with_extension(format!("corrupt-{}", now_unix_ms()));
            let moved = std::fs::rename(&path, &aside);
            tracing::error!(
                path = %path.display(),
                %error,
                moved_to = %aside.display(),
                moved = moved.is_ok(),
                "snapshot unusable: starting empty"
            );
        }
    }
}

fn apply(service: &Service, contents: &Contents, from: &str) {
    let (applied, refused) = service.restore(contents);
    tracing::info!(
        from,
        indexes = contents.indexes.len(),
        applied,
        refused,
        age_ms = now_unix_ms().saturating_sub(contents.taken_unix_ms),
        "index restored"
    );
}

/// The peer's `GET /dump`, checked.
fn fetch_peer(peer: &str) -> Result<Contents, RunError> {
    let url = format!("{}/dump", peer.trim_end_matches('/'));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into();
    let mut response = agent.get(&url).call()?;
    let bytes = response
        .body_mut()
        .with_config()
        .limit(u64::MAX)
        .read_to_vec()?;
    Ok(snapshot::decode(&bytes)?)
}

/// Looks every 50 ms whether an engine has published on a lighter tier (see
/// [`Service::queried_tiers`]) until one has.
async fn observe_lighter_tiers(service: Arc<Service>) {
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tick.tick().await;
        if service.observe_lighter_tiers() {
            return;
        }
    }
}

async fn save_periodically(service: Arc<Service>, dir: std::path::PathBuf, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // The first tick is immediate: nothing new to save yet.
    loop {
        tick.tick().await;
        let (service, dir) = (Arc::clone(&service), dir.clone());
        let _ = tokio::task::spawn_blocking(move || save(&service, &dir)).await;
    }
}

/// Writes the index's snapshot into `dir`.
pub fn save(service: &Service, dir: &Path) {
    let contents = service.dump();
    let bytes = snapshot::encode(&contents);
    match snapshot::write_atomic(dir, &bytes) {
        Ok(()) => {
            service.snapshot_written(contents.taken_unix_ms);
            counter!("flash_indexer_snapshots_written_total").increment(1);
            tracing::debug!(bytes = bytes.len(), "snapshot written");
        }
        Err(error) => {
            counter!("flash_indexer_snapshot_failures_total").increment(1);
            tracing::error!(dir = %dir.display(), %error, "snapshot not written");
        }
    }
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
