//! Dynamo's standalone KV indexer API (`dynamo-kv-router` 1.6.1, `services/indexer/server.rs`),
//! served on its own address (`--dynamo-listen`) so that a client of Dynamo's service can point
//! at this server unchanged.
//!
//! | route | what |
//! |---|---|
//! | `POST /register` | follow an engine: `{"instance_id", "endpoint", "model_name", "block_size", "routing_group"?, "dp_rank"?, "replay_endpoint"?}`; 201, 409 on a conflict |
//! | `POST /unregister` | `{"instance_id", "model_name", "routing_group"?, "dp_rank"?}`; 404 when not registered |
//! | `GET /workers` | registered instances, `?model_name=&routing_group=` filter |
//! | `POST /query` | `{"token_ids", "model_name", "routing_group"?, "lora_name"?, "cache_salt"?}`: hashed here, `cache_salt` as Dynamo's cache namespace (every block) |
//! | `POST /query_by_hash` | `{"block_hashes", "model_name", "routing_group"?}`; a `cache_salt` is refused (400) |
//! | `GET /dump` | every partition's events |
//! | `POST /register_peer`, `POST /deregister_peer`, `GET /peers` | the list of peer indexers clients discover here |
//! | `GET /health`, `GET /metrics`, `POST /reopen_logs` | as the main address (no access log to reopen) |
//!
//! Answers of both queries: [`answer::ScoreResponse`]. Errors: `{"error": "..."}` with Dynamo's
//! status codes. `tenant_id`, Dynamo's legacy name, is accepted and ignored as Dynamo ignores it.

pub mod answer;
pub mod registry;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use flash_indexer::{LocalHash, hash};
use metrics::{counter, histogram};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Deserialize;
use serde_json::{Value, json};
use tower_http::catch_panic::CatchPanicLayer;

use crate::api::ApiError;
use crate::metrics::QUERY_SECONDS;
use crate::service::Model;
use answer::ScoreResponse;
use registry::{DEFAULT_ROUTING_GROUP, Registration, Registry, RegistryError, partition_model};

/// What the routes share.
#[derive(Clone)]
struct App {
    registry: Arc<Registry>,
    peers: Arc<Mutex<BTreeSet<String>>>,
    metrics: Option<PrometheusHandle>,
}

/// Dynamo's routes over `registry`; `metrics` renders `GET /metrics`.
pub fn router(registry: Arc<Registry>, metrics: Option<PrometheusHandle>) -> Router {
    let limit = registry.service().settings().max_request_bytes;
    Router::new()
        .route("/register", post(register))
        .route("/unregister", post(unregister))
        .route("/workers", get(list_workers))
        .route("/query", post(query))
        .route("/query_by_hash", post(query_by_hash))
        .route("/dump", get(dump))
        .route("/register_peer", post(register_peer))
        .route("/deregister_peer", post(deregister_peer))
        .route("/peers", get(list_peers))
        .route("/health", get(health))
        .route("/metrics", get(render_metrics))
        .route("/reopen_logs", post(reopen_logs))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .layer(DefaultBodyLimit::max(limit))
        .layer(CatchPanicLayer::custom(crate::api::panicked))
        .with_state(App {
            registry,
            peers: Arc::default(),
            metrics,
        })
}

fn default_group() -> String {
    DEFAULT_ROUTING_GROUP.to_owned()
}

impl From<RegistryError> for ApiError {
    fn from(error: RegistryError) -> Self {
        match error {
            RegistryError::Conflict(why) => ApiError::new(StatusCode::CONFLICT, why),
            RegistryError::Invalid(why) => ApiError::bad(why),
            RegistryError::NotFound(why) => ApiError::new(StatusCode::NOT_FOUND, why),
        }
    }
}

/// The body of `POST /register`.
#[derive(Deserialize)]
struct RegisterRequest {
    instance_id: u64,
    endpoint: String,
    model_name: String,
    #[serde(default = "default_group")]
    routing_group: String,
    block_size: u32,
    dp_rank: Option<u32>,
    replay_endpoint: Option<String>,
}

async fn register(
    State(app): State<App>,
    body: Result<Json<RegisterRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Json(request) = body?;
    let registration = Registration {
        instance_id: request.instance_id,
        endpoint: request.endpoint,
        replay_endpoint: request.replay_endpoint,
        model_name: request.model_name,
        routing_group: request.routing_group,
        block_size: request.block_size,
        dp_rank: request.dp_rank.unwrap_or(0),
    };
    let registry = Arc::clone(&app.registry);
    off_async(move || registry.register(registration)).await?;
    Ok((StatusCode::CREATED, Json(json!({ "status": "ok" }))))
}

/// Runs `f`, which makes or stops sockets, off the async threads.
async fn off_async(
    f: impl FnOnce() -> Result<(), RegistryError> + Send + 'static,
) -> Result<(), ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(ApiError::from)
}

/// The body of `POST /unregister`.
#[derive(Deserialize)]
struct UnregisterRequest {
    instance_id: u64,
    model_name: String,
    routing_group: Option<String>,
    dp_rank: Option<u32>,
}

async fn unregister(
    State(app): State<App>,
    body: Result<Json<UnregisterRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(request) = body?;
    let registry = Arc::clone(&app.registry);
    off_async(move || {
        registry.unregister(
            request.instance_id,
            &request.model_name,
            request.routing_group.as_deref(),
            request.dp_rank,
        )
    })
    .await?;
    Ok(Json(json!({ "status": "ok" })))
}

/// The filters of `GET /workers`.
#[derive(Deserialize)]
struct WorkersFilter {
    model_name: Option<String>,
    routing_group: Option<String>,
}

async fn list_workers(
    State(app): State<App>,
    filter: Result<Query<WorkersFilter>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(filter) =
        filter.map_err(|rejection| ApiError::new(rejection.status(), rejection.body_text()))?;
    let workers = app.registry.list(
        filter.model_name.as_deref(),
        filter.routing_group.as_deref(),
    );
    Ok(Json(json!(workers)))
}

/// The body of `POST /query`.
#[derive(Deserialize)]
struct QueryRequest {
    token_ids: Vec<u32>,
    model_name: String,
    #[serde(default = "default_group")]
    routing_group: String,
    lora_name: Option<String>,
    /// Dynamo's cache namespace: it seeds the hash of every block.
    cache_salt: Option<String>,
}

/// The body of `POST /query_by_hash`.
#[derive(Deserialize)]
struct QueryByHashRequest {
    block_hashes: Vec<i64>,
    model_name: String,
    #[serde(default = "default_group")]
    routing_group: String,
    cache_salt: Option<String>,
}

/// The partition's model, or Dynamo's 404.
fn partition(app: &App, model_name: &str, routing_group: &str) -> Result<Arc<Model>, ApiError> {
    let name = partition_model(model_name, routing_group);
    app.registry.service().model(&name).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no indexer for model={model_name} routing_group={routing_group}"),
        )
    })
}

fn answer(app: &App, model: &Model, query: &[LocalHash]) -> Json<ScoreResponse> {
    let start = Instant::now();
    let response = answer::score(model, app.registry.service().queried_tiers(model), query);
    let labels = [("model", model.name.clone())];
    histogram!(QUERY_SECONDS, &labels).record(start.elapsed().as_secs_f64());
    counter!("flash_indexer_queries_total", &labels).increment(1);
    Json(response)
}

/// The phases of a `/query`, each timed into [`QUERY_PHASE_SECONDS`]: the body decoded, the
/// tokens hashed, the indexes asked, the answer encoded.
async fn query(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let clock = Instant::now();
    let request: QueryRequest = json_body(&headers, &body)?;
    let parsed = Instant::now();
    let model = partition(&app, &request.model_name, &request.routing_group)?;
    let salt = hash::Salt {
        lora_name: request.lora_name.as_deref(),
        cache_namespace: request.cache_salt.as_deref(),
    };
    // As Dynamo hashes them, and over the tokens after each block for a model whose engines
    // hash that way (`lookahead_tokens`; Dynamo itself does not).
    let features = hash::Features {
        salt,
        lookahead: model.lookahead,
        ..hash::Features::default()
    };
    let locals = hash::local_hashes_with_features(&request.token_ids, model.block_size, &features);
    let hashed = Instant::now();
    let tiers = app.registry.service().queried_tiers(&model);
    let response = answer::score(&model, tiers, &locals);
    let scored = Instant::now();
    let bytes = serde_json::to_vec(&response)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let written = Instant::now();
    for (phase, from, to) in [
        ("parse", clock, parsed),
        ("hash", parsed, hashed),
        ("index", hashed, scored),
        ("answer", scored, written),
    ] {
        histogram!(QUERY_PHASE_SECONDS, "phase" => phase).record((to - from).as_secs_f64());
    }
    let labels = [("model", model.name.clone())];
    histogram!(QUERY_SECONDS, &labels).record((scored - hashed).as_secs_f64());
    counter!("flash_indexer_queries_total", &labels).increment(1);
    Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response())
}

/// Time per phase of Dynamo's `/query` (label `phase`: `parse`, `hash`, `index`, `answer`).
pub const QUERY_PHASE_SECONDS: &str = "flash_indexer_dynamo_query_phase_seconds";

/// A JSON body as axum's `Json` takes it: 415 without a JSON content type, 400 for malformed
/// JSON, 422 for the wrong fields.
fn json_body<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<T, ApiError> {
    let json = (headers.get(header::CONTENT_TYPE))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| {
            let mime = mime.trim();
            mime == "application/json"
                || (mime.starts_with("application/") && mime.ends_with("+json"))
        });
    if !json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Expected request with `Content-Type: application/json`",
        ));
    }
    serde_json::from_slice(body).map_err(|error| {
        let status = match error.classify() {
            serde_json::error::Category::Data => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError::new(
            status,
            format!("Failed to parse the request body as JSON: {error}"),
        )
    })
}

async fn query_by_hash(
    State(app): State<App>,
    body: Result<Json<QueryByHashRequest>, JsonRejection>,
) -> Result<Json<ScoreResponse>, ApiError> {
    let Json(request) = body?;
    if request.cache_salt.is_some() {
        return Err(ApiError::bad(
            "cache_salt is not accepted by /query_by_hash; block_hashes must already include the intended cache salt",
        ));
    }
    let model = partition(&app, &request.model_name, &request.routing_group)?;
    let locals: Vec<LocalHash> = (request.block_hashes.iter())
        .map(|&h| LocalHash(h as u64))
        .collect();
    Ok(answer(&app, &model, &locals))
}

/// Every model's events per tier, keyed `MODEL:ROUTING_GROUP` as Dynamo keys its dump. The
/// events are this crate's (`flash_indexer::Event`), not Dynamo's `RouterEvent`s.
async fn dump(State(app): State<App>) -> Result<Json<Value>, ApiError> {
    let service = Arc::clone(app.registry.service());
    let contents = tokio::task::spawn_blocking(move || service.dump())
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let mut partitions: BTreeMap<String, Value> = BTreeMap::new();
    for index in contents.indexes {
        let (model_name, group) = match index.model.split_once('@') {
            Some((model, group)) => (model.to_owned(), group.to_owned()),
            None => (index.model.clone(), default_group()),
        };
        let block_size = app
            .registry
            .service()
            .model(&index.model)
            .map_or(0, |m| m.block_size);
        let entry = partitions
            .entry(format!("{model_name}:{group}"))
            .or_insert_with(|| json!({ "block_size": block_size, "events": [] }));
        let events = entry["events"].as_array_mut().expect("made an array above");
        events.extend(
            (index.events.iter()).map(|event| json!({ "tier": index.tier, "event": event })),
        );
    }
    Ok(Json(json!(partitions)))
}

/// The body of the peer routes.
#[derive(Deserialize)]
struct PeerRequest {
    url: String,
}

async fn register_peer(
    State(app): State<App>,
    body: Result<Json<PeerRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Json(request) = body?;
    app.peers.lock().unwrap().insert(request.url);
    Ok((StatusCode::CREATED, Json(json!({ "status": "ok" }))))
}

async fn deregister_peer(
    State(app): State<App>,
    body: Result<Json<PeerRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(request) = body?;
    if app.peers.lock().unwrap().remove(&request.url) {
        Ok(Json(json!({ "status": "ok" })))
    } else {
        Err(ApiError::new(StatusCode::NOT_FOUND, "peer not found"))
    }
}

async fn list_peers(State(app): State<App>) -> Json<Vec<String>> {
    Json(app.peers.lock().unwrap().iter().cloned().collect())
}

async fn health(State(app): State<App>) -> (StatusCode, Json<Value>) {
    crate::api::health_answer(app.registry.service())
}

/// This server's metrics, and Dynamo's name for the one both count: stores that changed nothing.
async fn render_metrics(State(app): State<App>) -> Result<Response, ApiError> {
    let service = Arc::clone(app.registry.service());
    let duplicates: u64 = (service.models().iter())
        .map(|model| model.tiers[0].pool.index().duplicate_stores())
        .sum();
    let mut response = crate::api::metrics_answer(service, app.metrics.clone()).await?;
    let body = std::mem::take(response.body_mut());
    let mut text = axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .to_vec();
    text.extend_from_slice(
        format!(
            "# TYPE dynamo_kvrouter_kv_cache_event_warnings counter\n\
             dynamo_kvrouter_kv_cache_event_warnings{{warning_kind=\"duplicate_store\"}} {duplicates}\n"
        )
        .as_bytes(),
    );
    *response.body_mut() = axum::body::Body::from(text);
    Ok(response)
}

/// Dynamo reopens its access log here; this server writes none, so there is nothing to reopen
/// and the answer is Dynamo's answer without a log.
async fn reopen_logs() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}
