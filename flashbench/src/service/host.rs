//! Dynamo's standalone KV indexer in this process: its own router and registry, as its
//! `run_server` builds them, on a loopback port the OS picks (printed as `listening on
//! http://ADDR`).

use std::sync::Arc;

use dynamo_kv_router::services::indexer::server::{AppState, create_router};

/// Serves Dynamo's indexer with `threads` indexer threads until the process is killed.
pub fn serve(threads: usize) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let state = Arc::new(AppState::new(threads).map_err(|e| e.to_string())?);
        state.registry.signal_ready();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        println!("listening on http://{address}");
        axum::serve(listener, create_router(state))
            .await
            .map_err(|e| e.to_string())
    })
}
