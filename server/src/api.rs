//! The HTTP routes.
//!
//! | route | what |
//! |---|---|
//! | `POST /query` | `{"model", "tokens" \| "local_hashes", "lora"?, "namespace"?, "cache_salt"?, "mm"?}`: every worker's matched depth per tier and weighted score, best first |
//! | `POST /score` | `{"model", "prompt" \| "messages", "pods"?, "add_generation_prompt"?}`: the prompt tokenized with the model's tokenizer, each pod's score (llm-d's `GetPodScores`) |
//! | `POST /route` | approximate mode (`--approximate`): `{"model", "tokens" \| "local_hashes", ..., "worker", "dp_rank"?}`: the router sent this request there; answers `{"request": N}` |
//! | `POST /release` | approximate mode: `{"model", "request": N}`: that request finished |
//! | `GET /workers` | engines followed (with ingest counters), topic pods, models and their indexes |
//! | `POST /workers` | follow one more engine: `{"events", "replay"?, "worker", "dp_rank"?, "model"?}` |
//! | `DELETE /workers/{id}` | stop following worker `id`'s engine and drop its blocks |
//! | `GET /health` | 200 once restored and every startup engine has connected; 503 and what it waits for before |
//! | `GET /metrics` | Prometheus text |
//! | `GET /dump` | the whole index as a snapshot (what `--peer` bootstraps from) |
//!
//! Every error is a 4xx or 5xx with `{"error": "..."}` saying what was wrong. Bodies are
//! limited to [`Settings::max_request_bytes`](crate::config::Settings::max_request_bytes).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use flash_indexer::{LocalHash, hash};
use metrics::{counter, histogram};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Deserialize;
use serde_json::{Value, json};
use tower_http::catch_panic::CatchPanicLayer;

use crate::config::EngineConfig;
use crate::llmd::{Prompt, PromptScores, ScoreError, score_prompt};
use crate::metrics::QUERY_SECONDS;
use crate::service::{EngineError, Model, ModelChoiceError, QueryAnswer, Service};
use crate::snapshot;

/// What the routes share.
#[derive(Clone)]
struct App {
    service: Arc<Service>,
    metrics: Option<PrometheusHandle>,
}

/// The server's routes over `service`; `metrics` renders `GET /metrics` (without it the route
/// answers 503).
pub fn router(service: Arc<Service>, metrics: Option<PrometheusHandle>) -> Router {
    let limit = service.settings().max_request_bytes;
    Router::new()
        .route("/query", post(query))
        .route("/score", post(score))
        .route("/route", post(route))
        .route("/release", post(release))
        .route("/workers", get(list_workers).post(add_worker))
        .route("/workers/{id}", delete(remove_worker))
        .route("/health", get(health))
        .route("/metrics", get(render_metrics))
        .route("/dump", get(dump))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .layer(DefaultBodyLimit::max(limit))
        .layer(CatchPanicLayer::custom(panicked))
        .with_state(App { service, metrics })
}

/// A handler panicked (a bug: no request should make one): the request answers 500 with the
/// panic's message, and the server goes on serving.
pub(crate) fn panicked(payload: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned());
    tracing::error!(panic = %what, "a request handler panicked");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("internal error (please report it): {what}"),
    )
    .into_response()
}

/// An error answer: a status and a message saying what was wrong.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn bad(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        counter!("flash_indexer_http_errors_total", "status" => self.status.as_u16().to_string())
            .increment(1);
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        // axum's own status: 400 for bad JSON, 413 over the size limit, 415 without a JSON
        // content type, 422 for the wrong fields; its text says which.
        ApiError::new(rejection.status(), rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::new(rejection.status(), rejection.body_text())
    }
}

/// The body of `POST /query`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryRequest {
    /// Optional when the server has exactly one model.
    model: Option<String>,
    tokens: Option<Vec<u32>>,
    local_hashes: Option<Vec<u64>>,
    lora: Option<String>,
    /// The cache namespace of `tokens` (Dynamo's `cache_namespace`): seeds every block.
    namespace: Option<String>,
    /// vLLM's cache salt of the request: a key of its first block.
    cache_salt: Option<String>,
    /// The request's multimodal items: each keys the blocks its placeholders overlap.
    mm: Option<Vec<MmRequest>>,
}

/// One multimodal item of `POST /query`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MmRequest {
    identifier: String,
    offset: usize,
    length: usize,
}

async fn query(
    State(app): State<App>,
    body: Result<Json<QueryRequest>, JsonRejection>,
) -> Result<Json<QueryAnswer>, ApiError> {
    let Json(request) = body?;
    let service = &app.service;
    let model = pick_model(service, request.model.as_deref())?;
    let locals = block_hashes(
        &model,
        BlockKeys {
            tokens: request.tokens,
            local_hashes: request.local_hashes,
            lora: request.lora,
            namespace: request.namespace,
            cache_salt: request.cache_salt,
            mm: request.mm,
        },
    )?;
    let start = Instant::now();
    let answer = service.query(&model, &locals);
    let labels = [("model", model.name.clone())];
    histogram!(QUERY_SECONDS, &labels).record(start.elapsed().as_secs_f64());
    counter!("flash_indexer_queries_total", &labels).increment(1);
    Ok(Json(answer))
}

/// The body of `POST /route`: a request's blocks as `POST /query` takes them, and its worker.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteRequest {
    model: Option<String>,
    tokens: Option<Vec<u32>>,
    local_hashes: Option<Vec<u64>>,
    lora: Option<String>,
    namespace: Option<String>,
    cache_salt: Option<String>,
    mm: Option<Vec<MmRequest>>,
    worker: u64,
    dp_rank: Option<u32>,
}

/// The body of `POST /release`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseRequest {
    model: Option<String>,
    request: u64,
}

/// The model's routing side: 409 when the server is not in approximate mode.
fn predictions(model: &Model) -> Result<&crate::approximate::Predictions, ApiError> {
    model.predictions.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "routing decisions need approximate mode (--approximate ttl|lru)",
        )
    })
}

async fn route(
    State(app): State<App>,
    body: Result<Json<RouteRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(request) = body?;
    let model = pick_model(&app.service, request.model.as_deref())?;
    let predictions = predictions(&model)?;
    let locals = block_hashes(
        &model,
        BlockKeys {
            tokens: request.tokens,
            local_hashes: request.local_hashes,
            lora: request.lora,
            namespace: request.namespace,
            cache_salt: request.cache_salt,
            mm: request.mm,
        },
    )?;
    let worker = flash_indexer::Worker::new(request.worker, request.dp_rank.unwrap_or(0));
    let number = predictions.route(worker, &locals);
    counter!("flash_indexer_routings_total", "model" => model.name.clone()).increment(1);
    Ok(Json(json!({ "request": number })))
}

async fn release(
    State(app): State<App>,
    body: Result<Json<ReleaseRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(request) = body?;
    let model = pick_model(&app.service, request.model.as_deref())?;
    if !predictions(&model)?.release(request.request) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no running request {}", request.request),
        ));
    }
    Ok(Json(json!({ "released": request.request })))
}

/// What names a request's blocks: its tokens with the keys that go into their hashes, or hashes
/// already made.
struct BlockKeys {
    tokens: Option<Vec<u32>>,
    local_hashes: Option<Vec<u64>>,
    lora: Option<String>,
    namespace: Option<String>,
    cache_salt: Option<String>,
    mm: Option<Vec<MmRequest>>,
}

/// A request's local block hashes under `model`: 400 unless exactly one of tokens and hashes is
/// given, and keys only with tokens.
fn block_hashes(model: &Model, keys: BlockKeys) -> Result<Vec<LocalHash>, ApiError> {
    let features_given = keys.lora.is_some()
        || keys.namespace.is_some()
        || keys.cache_salt.is_some()
        || keys.mm.is_some();
    Ok(match (keys.tokens, keys.local_hashes) {
        (Some(tokens), None) => {
            let mm: Vec<hash::MmItem<'_>> = keys
                .mm
                .iter()
                .flatten()
                .map(|item| hash::MmItem {
                    identifier: &item.identifier,
                    offset: item.offset,
                    length: item.length,
                })
                .collect();
            let features = hash::Features {
                salt: hash::Salt {
                    lora_name: keys.lora.as_deref(),
                    cache_namespace: keys.namespace.as_deref(),
                },
                cache_salt: keys.cache_salt.as_deref(),
                mm: &mm,
                lookahead: model.lookahead,
            };
            hash::local_hashes_with_features(&tokens, model.block_size, &features)
        }
        (None, Some(locals)) if !features_given => locals.into_iter().map(LocalHash).collect(),
        (None, Some(_)) => {
            return Err(ApiError::bad(
                "\"lora\", \"namespace\", \"cache_salt\" and \"mm\" key the hashes of \"tokens\"; \"local_hashes\" are hashed already",
            ));
        }
        (Some(_), Some(_)) => {
            return Err(ApiError::bad(
                "give either \"tokens\" or \"local_hashes\", not both",
            ));
        }
        (None, None) => return Err(ApiError::bad("give \"tokens\" or \"local_hashes\"")),
    })
}

/// The model a request names, or the only one when it names none: 404 for a model the server
/// does not have, 400 when the request must name one.
fn pick_model(service: &Service, name: Option<&str>) -> Result<Arc<Model>, ApiError> {
    service.pick_model(name).map_err(|e| match e {
        ModelChoiceError::Unknown(..) => ApiError::new(StatusCode::NOT_FOUND, e.to_string()),
        ModelChoiceError::Unnamed(_) => ApiError::bad(e.to_string()),
    })
}

/// The body of `POST /score`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScoreRequest {
    /// Optional when the server has exactly one model.
    model: Option<String>,
    /// Completion text, encoded with the tokenizer's special tokens.
    prompt: Option<String>,
    /// A chat conversation (OpenAI's shape), rendered through the model's chat template.
    messages: Option<Value>,
    /// With `messages`: open the assistant's turn at the end (vLLM's default: true).
    add_generation_prompt: Option<bool>,
    /// The pods to score (every pod holding a prefix when absent or empty).
    pods: Option<Vec<String>>,
}

async fn score(
    State(app): State<App>,
    body: Result<Json<ScoreRequest>, JsonRejection>,
) -> Result<Json<PromptScores>, ApiError> {
    let Json(request) = body?;
    let model = pick_model(&app.service, request.model.as_deref())?;
    match (&request.prompt, &request.messages) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad(
                "give either \"prompt\" or \"messages\", not both",
            ));
        }
        (None, None) => return Err(ApiError::bad("give \"prompt\" or \"messages\"")),
        (None, Some(messages)) if !messages.is_array() => {
            return Err(ApiError::bad(
                "\"messages\" is a list of {\"role\", \"content\"} objects",
            ));
        }
        (Some(_), None) if request.add_generation_prompt.is_some() => {
            return Err(ApiError::bad(
                "\"add_generation_prompt\" goes with \"messages\"",
            ));
        }
        _ => {}
    }
    let service = Arc::clone(&app.service);
    let start = Instant::now();
    // Tokenizing is CPU work: off the async threads.
    let scored = tokio::task::spawn_blocking(move || {
        // Checked above: one of the two, `messages` a list.
        let prompt = match &request.prompt {
            Some(text) => Prompt::Text(text),
            None => Prompt::Messages(
                request.messages.as_ref().unwrap_or(&Value::Null),
                request.add_generation_prompt.unwrap_or(true),
            ),
        };
        score_prompt(
            &service,
            &model,
            prompt,
            request.pods.as_deref().unwrap_or(&[]),
        )
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let scores = scored.map_err(|e| match e {
        ScoreError::NoTokenizer(_) => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string())
        }
        ScoreError::Prompt(_) => ApiError::bad(e.to_string()),
    })?;
    let labels = [("model", scores.model.clone())];
    histogram!(crate::metrics::SCORE_SECONDS, &labels).record(start.elapsed().as_secs_f64());
    Ok(Json(scores))
}

async fn list_workers(State(app): State<App>) -> Json<Value> {
    let service = &app.service;
    let engines: Vec<Value> = service
        .engines()
        .into_iter()
        .map(|engine| {
            let tiers: serde_json::Map<String, Value> = engine
                .tiers
                .iter()
                .map(|t| {
                    let s = &t.stats;
                    let status = json!({
                        "connected": s.connected,
                        "disconnects": s.disconnects,
                        "batches": s.batches,
                        "events": s.events,
                        "gaps": s.gaps,
                        "lost": s.lost,
                        "resyncs": s.resyncs,
                        "decode_errors": s.decode_errors,
                        "rejected_events": s.rejected_events,
                        "last_problem": t.last_problem,
                    });
                    (t.tier.clone(), status)
                })
                .collect();
            json!({ "key": engine.key, "engine": engine.config, "ingest": tiers })
        })
        .collect();
    let models: Vec<Value> = service
        .models()
        .iter()
        .map(|model| {
            let tiers: Vec<Value> = model
                .tiers
                .iter()
                .map(|t| {
                    json!({
                        "tier": t.tier.name,
                        "weight": t.tier.weight,
                        "workers": t.pool.index().worker_count(),
                        "entries": t.pool.index().entries(),
                    })
                })
                .collect();
            json!({ "model": model.name, "block_size": model.block_size, "tiers": tiers })
        })
        .collect();
    let pods: serde_json::Map<String, Value> = service
        .pods()
        .into_iter()
        .map(|(id, pod)| (id.to_string(), json!(pod)))
        .collect();
    Json(json!({ "engines": engines, "pods": pods, "models": models }))
}

async fn add_worker(
    State(app): State<App>,
    body: Result<Json<EngineConfig>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Json(engine) = body?;
    let Some(id) = engine.worker else {
        return Err(ApiError::bad(
            "\"worker\" is required: the id that DELETE /workers/{id} will name",
        ));
    };
    let service = Arc::clone(&app.service);
    let registered = engine.clone();
    // Sockets are created and dialled here: off the async threads.
    tokio::task::spawn_blocking(move || service.add_engine(engine, false))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|error| match error {
            EngineError::Exists(_) => ApiError::new(StatusCode::CONFLICT, error.to_string()),
            EngineError::Invalid(_) => ApiError::bad(error.to_string()),
        })?;
    tracing::info!(worker = id, events = %registered.events, "engine registered");
    Ok((StatusCode::CREATED, Json(json!({ "engine": registered }))))
}

async fn remove_worker(
    State(app): State<App>,
    id: Result<Path<u64>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let Path(id) = id?;
    let service = Arc::clone(&app.service);
    let found = tokio::task::spawn_blocking(move || service.remove_worker(id))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    if found {
        tracing::info!(worker = id, "worker removed");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no engine or topic pod with worker id {id}"),
        ))
    }
}

async fn health(State(app): State<App>) -> (StatusCode, Json<Value>) {
    health_answer(&app.service)
}

/// `GET /health`: 200 once ready, else 503 and what the service waits for.
pub(crate) fn health_answer(service: &Service) -> (StatusCode, Json<Value>) {
    match service.health() {
        Ok(()) => (StatusCode::OK, Json(json!({ "status": "ready" }))),
        Err(waiting) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "starting", "waiting_for": waiting })),
        ),
    }
}

async fn render_metrics(State(app): State<App>) -> Result<Response, ApiError> {
    metrics_answer(Arc::clone(&app.service), app.metrics.clone()).await
}

/// `GET /metrics`: the Prometheus text, or 503 without a recorder.
pub(crate) async fn metrics_answer(
    service: Arc<Service>,
    handle: Option<PrometheusHandle>,
) -> Result<Response, ApiError> {
    let handle = handle.ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no metrics recorder in this process",
        )
    })?;
    let text = tokio::task::spawn_blocking(move || crate::metrics::render(&service, &handle))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

async fn dump(State(app): State<App>) -> Result<Response, ApiError> {
    let service = Arc::clone(&app.service);
    let bytes = tokio::task::spawn_blocking(move || snapshot::encode(&service.dump()))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn boom() -> &'static str {
        panic!("boom")
    }

    #[tokio::test]
    async fn a_panicking_handler_answers_500_and_the_router_keeps_serving() {
        let router = Router::new()
            .route("/boom", get(boom))
            .route("/fine", get(|| async { "fine" }))
            .layer(CatchPanicLayer::custom(panicked));
        for _ in 0..2 {
            let request = Request::get("/boom").body(Body::empty()).unwrap();
            let response = router.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
            let body = axum::body::to_bytes(response.into_body(), 1 << 16)
                .await
                .unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap();
            assert!(body["error"].as_str().unwrap().contains("boom"), "{body}");
            let request = Request::get("/fine").body(Body::empty()).unwrap();
            let response = router.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
        }
    }
}
