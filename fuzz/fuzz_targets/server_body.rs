//! The server's request bodies and paths on arbitrary bytes, through its real router (every
//! layer: body limit, JSON extraction, handlers, the panic catcher). No request may panic a
//! handler (libFuzzer's panic hook aborts even on a panic the server would catch) or answer 500;
//! every refusal is a 4xx. Prompts (`POST /score`) are tokenized by a tokenizer trained at
//! start. Dynamo's API (`--dynamo-listen`) gets the same over the same service.
//! Engines are not registered here: `POST /workers` and `POST /register` would dial sockets.
#![no_main]

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use clap::Parser;
use flash_indexer::{Block, Event, LocalHash, SeqHash, Worker, hash};
use flash_indexer_server::config::{Cli, Settings};
use flash_indexer_server::dynamo::registry::Registry;
use flash_indexer_server::prompt::{CHATML, train_tokenizer};
use flash_indexer_server::service::Service;
use flash_indexer_server::snapshot::{Contents, IndexDump};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};
use tower::ServiceExt;

/// One server for the whole run: model `m` (blocks of 4, with a small trained tokenizer and
/// ChatML for `POST /score`), worker 1 holding the chain of tokens `0..16` on the GPU.
fn app() -> &'static (tokio::runtime::Runtime, axum::Router, axum::Router) {
    static APP: OnceLock<(tokio::runtime::Runtime, axum::Router, axum::Router)> = OnceLock::new();
    APP.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("fuzz-server-body-{}", std::process::id()));
        let corpus: Vec<String> = (0..50)
            .map(|i| format!("the cache {i} router, block prefix worker café {}", i * 7))
            .collect();
        train_tokenizer(&dir.join("model"), &corpus, 300, true, Some(CHATML)).expect("tokenizer");
        let config = dir.join("config.toml");
        let model = dir.join("model").display().to_string();
        let toml = format!("[[models]]\nname = \"m\"\nblock_size = 4\ntokenizer = {model:?}\n");
        std::fs::write(&config, toml).expect("config");
        let cli = Cli::parse_from(["server", "--config", config.to_str().expect("utf-8")]);
        let service = Service::new(Settings::from_cli(cli).expect("settings"));
        let tokens: Vec<u32> = (0..16).collect();
        let locals = hash::local_hashes(&tokens, 4);
        let blocks = locals
            .iter()
            .zip(hash::seq_hashes(&locals))
            .map(|(&l, s): (&LocalHash, SeqHash)| Block::new(l, s))
            .collect();
        service.restore(&Contents {
            taken_unix_ms: 0,
            indexes: vec![IndexDump {
                model: "m".into(),
                tier: "GPU".into(),
                events: vec![Event::stored(Worker::new(1, 0), 0, None, blocks)],
                groups: Vec::new(),
            }],
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let registry = Arc::new(Registry::new(Arc::clone(&service)));
        let dynamo = flash_indexer_server::dynamo::router(registry, None);
        (
            runtime,
            flash_indexer_server::api::router(service, None),
            dynamo,
        )
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    // Selectors 4 and up go to Dynamo's API.
    let dynamo = selector % 8 >= 4;
    let request = match selector % 8 {
        // Dynamo's body routes, that dial nothing.
        4 | 5 => {
            let route = [
                "/query",
                "/query_by_hash",
                "/unregister",
                "/register_peer",
                "/deregister_peer",
            ][usize::from(selector / 8) % 5];
            Request::builder()
                .method(Method::POST)
                .uri(route)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(body.to_vec()))
        }
        // The query and prompt routes, with and without a JSON content type.
        0 | 1 => {
            let uri = ["/query", "/score"][usize::from(selector / 8) % 2];
            let mut builder = Request::builder().method(Method::POST).uri(uri);
            if selector % 8 == 0 {
                builder = builder.header(header::CONTENT_TYPE, "application/json");
            }
            builder.body(Body::from(body.to_vec()))
        }
        // A worker id that is not a number, or one nobody registered.
        2 => {
            let id: String = String::from_utf8_lossy(body)
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || "-_.~%".contains(*c))
                .take(40)
                .collect();
            Request::builder()
                .method(Method::DELETE)
                .uri(format!("/workers/{id}"))
                .body(Body::empty())
        }
        // Any path, read-only.
        _ => {
            let path: String = String::from_utf8_lossy(body)
                .chars()
                .filter(|c| c.is_ascii_graphic())
                .take(64)
                .collect();
            Request::builder()
                .method(Method::GET)
                .uri(format!("/{path}"))
                .body(Body::empty())
        }
    };
    let Ok(request) = request else {
        return;
    };
    let (runtime, ours, dynamo_api) = app();
    let router = if dynamo { dynamo_api } else { ours };
    let response = runtime
        .block_on(router.clone().oneshot(request))
        .expect("infallible");
    assert_ne!(
        response.status(),
        StatusCode::INTERNAL_SERVER_ERROR,
        "a request answered 500"
    );
});
