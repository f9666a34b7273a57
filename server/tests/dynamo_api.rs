//! Dynamo's standalone-indexer API, served with `--dynamo-listen`: every test of
//! `dynamo-kv-router` 1.6.1's `tests/standalone_indexer_http.rs` (and the HTTP tests of its
//! `services/indexer/server.rs`), transcribed with the same requests and the same assertions.
//!
//! Dynamo's tests put events straight into its registry's indexes. Here engines publish them:
//! each registered instance is a stand-in engine in this file, vLLM's msgpack batches on a
//! ZeroMQ PUB socket over loopback, followed through `POST /register` like any engine. Events
//! over the wire carry tokens, not local hashes, so where Dynamo's tests store the local hashes
//! 11, 12, 13 an engine here stores one block of tokens for each, and `/query_by_hash` asks for
//! those blocks' local hashes.

mod support;

use std::time::{Duration, Instant};

use flash_indexer::hash;
use rmpv::Value as Msg;
use serde_json::{Value, json};
use support::{Client, Engine, Server, temp_dir};

const BLOCK_SIZE: u32 = 4;
const MODEL: &str = "test-model";
const ROUTING_GROUP: &str = "default";

/// A server with Dynamo's API on a free port.
fn server(name: &str, extra: &[&str]) -> Server {
    let mut args = vec!["--dynamo-listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let server = Server::start(&temp_dir(name), name, &args);
    server.wait_ready();
    server
}

/// vLLM 0.33's `BlockStored`, positional: hashes, parent, tokens, block size, LoRA id, medium,
/// LoRA name, extra keys.
fn stored(seqs: &[u64], parent: Option<u64>, tokens: &[u32], medium: &str, keys: Msg) -> Msg {
    Msg::Array(vec![
        Msg::from("BlockStored"),
        Msg::Array(seqs.iter().map(|&s| Msg::from(s)).collect()),
        parent.map_or(Msg::Nil, Msg::from),
        Msg::Array(tokens.iter().map(|&t| Msg::from(t)).collect()),
        Msg::from(BLOCK_SIZE),
        Msg::Nil,
        Msg::from(medium),
        Msg::Nil,
        keys,
    ])
}

/// The tokens of the block Dynamo's tests call local hash `name`.
fn block(name: u32) -> Vec<u32> {
    (name * 100..name * 100 + BLOCK_SIZE).collect()
}

/// The local hash of that block, as `/query_by_hash` takes it.
fn local(name: u32) -> i64 {
    hash::local_hashes(&block(name), BLOCK_SIZE as usize)[0].0 as i64
}

/// The tokens of blocks `names`, one after the other.
fn blocks(names: &[u32]) -> Vec<u32> {
    names.iter().flat_map(|&n| block(n)).collect()
}

/// Registers `engine` as `instance` of `routing_group`, then publishes empty batches until every
/// tier's subscription has one (ZeroMQ drops what a PUB socket sends before a subscriber joins).
fn register(server: &Server, engine: &mut Engine, instance: u64, routing_group: &str) {
    let (status, body) = server.dynamo().post(
        "/register",
        &json!({
            "instance_id": instance,
            "endpoint": engine.endpoint,
            "model_name": MODEL,
            "routing_group": routing_group,
            "block_size": BLOCK_SIZE,
            "dp_rank": 0,
        }),
    );
    assert_eq!(status, 201, "{body}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let key = format!("{instance}:0");
    loop {
        engine.publish(Vec::new(), 0);
        let (_, workers) = server.get_json("/workers");
        let joined = (workers["engines"].as_array().unwrap().iter())
            .find(|e| e["key"] == key)
            .and_then(|e| e["ingest"].as_object())
            .is_some_and(|tiers| tiers.values().all(|t| t["batches"].as_u64() > Some(0)));
        if joined {
            return;
        }
        assert!(Instant::now() < deadline, "engine {key} never joined");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asks `path` with `body` until `done` holds of the answer (events are applied asynchronously),
/// and returns it.
fn converged(api: &Client, path: &str, body: &Value, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, answer) = api.post(path, body);
        if status == 200 && done(&answer) {
            return answer;
        }
        assert!(
            Instant::now() < deadline,
            "no converged answer to {path} {body}: last {status} {answer}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `/query_by_hash` must surface both the legacy flat shape and the Mooncake RFC #1403 shape
/// (per-instance `gpu`/`cpu`/`disk`/`longest_matched`).
#[test]
fn query_by_hash_returns_per_instance_tier_breakdown() {
    let server = server("dynamo-tiers", &[]);
    // Worker 7: 2 device blocks + 1 host-pinned extension. Worker 8: 2 device blocks.
    let (mut seven, mut eight) = (Engine::bind(), Engine::bind());
    register(&server, &mut seven, 7, ROUTING_GROUP);
    register(&server, &mut eight, 8, ROUTING_GROUP);
    let device = stored(&[711, 712], None, &blocks(&[11, 12]), "GPU", Msg::Nil);
    seven.publish(vec![device.clone()], 0);
    eight.publish(vec![device], 0);
    let host = stored(&[713], Some(712), &block(13), "CPU_PINNED", Msg::Nil);
    seven.publish(vec![host], 0);

    let query = json!({
        "block_hashes": [local(11), local(12), local(13)],
        "model_name": MODEL,
        "routing_group": ROUTING_GROUP,
    });
    let body = converged(server.dynamo(), "/query_by_hash", &query, |b| {
        b["instances"]["7"]["cpu"] == 3 * BLOCK_SIZE && b["scores"]["8"]["0"] == 2 * BLOCK_SIZE
    });

    // Legacy flat shape: device-tier overlap, scaled to tokens.
    assert_eq!(body["scores"]["7"]["0"], 2 * BLOCK_SIZE);
    assert_eq!(body["scores"]["8"]["0"], 2 * BLOCK_SIZE);
    // Mooncake-shape per-instance breakdown.
    let inst7 = &body["instances"]["7"];
    assert_eq!(inst7["gpu"], 2 * BLOCK_SIZE, "instance 7 gpu");
    assert_eq!(
        inst7["cpu"],
        3 * BLOCK_SIZE,
        "cumulative through host-pinned"
    );
    assert_eq!(inst7["disk"], 3 * BLOCK_SIZE, "disk falls back to cpu");
    assert_eq!(inst7["dp"]["0"], 2 * BLOCK_SIZE, "dp_rank=0 device count");
    assert_eq!(inst7["longest_matched"], 3 * BLOCK_SIZE, "max across tiers");
    let inst8 = &body["instances"]["8"];
    assert_eq!(inst8["gpu"], 2 * BLOCK_SIZE);
    assert_eq!(inst8["cpu"], 2 * BLOCK_SIZE, "cpu falls back to device");
    assert_eq!(inst8["longest_matched"], 2 * BLOCK_SIZE);

    let mut null_salt = query.clone();
    null_salt["cache_salt"] = Value::Null;
    let (status, _) = server.dynamo().post("/query_by_hash", &null_salt);
    assert_eq!(status, 200);
}

#[test]
fn query_by_hash_isolates_routing_groups_and_ignores_legacy_tenant_id() {
    let server = server("dynamo-groups", &[]);
    let (mut seven, mut eight) = (Engine::bind(), Engine::bind());
    register(&server, &mut seven, 7, "default");
    register(&server, &mut eight, 8, "group-b");
    let one = stored(&[711], None, &block(11), "GPU", Msg::Nil);
    seven.publish(vec![one.clone()], 0);
    eight.publish(vec![one], 0);
    let api = server.dynamo();
    let in_group = |group: &str, worker: &str| {
        let query =
            json!({ "block_hashes": [local(11)], "model_name": MODEL, "routing_group": group });
        converged(api, "/query_by_hash", &query, |b| {
            !b["scores"][worker].is_null()
        });
    };
    in_group("default", "7");
    in_group("group-b", "8");

    let (_, legacy_only) = api.post(
        "/query_by_hash",
        &json!({ "block_hashes": [local(11)], "model_name": MODEL, "tenant_id": "group-b" }),
    );
    assert_eq!(legacy_only["scores"]["7"]["0"], BLOCK_SIZE);
    assert!(legacy_only["scores"].get("8").is_none());

    let (_, explicit_group) = api.post(
        "/query_by_hash",
        &json!({
            "block_hashes": [local(11)],
            "model_name": MODEL,
            "routing_group": "group-b",
            "tenant_id": "default",
        }),
    );
    assert_eq!(explicit_group["scores"]["8"]["0"], BLOCK_SIZE);
    assert!(explicit_group["scores"].get("7").is_none());
}

/// `/query` owns token hashing, so equal tokens under different cache salts must match only the
/// worker whose stored blocks used the same salt. Engines carry the salt as Dynamo's frontend
/// marks it in vLLM's `extra_keys`: `dynamo-cache-salt:NAMESPACE` on the first block.
#[test]
fn query_isolates_cache_salts() {
    let server = server("dynamo-salts", &[]);
    let tokens: Vec<u32> = (1..=8).collect();
    let marked = |salt: &str| {
        Msg::Array(vec![
            Msg::Array(vec![Msg::from(format!("dynamo-cache-salt:{salt}"))]),
            Msg::Nil,
        ])
    };
    let (mut seven, mut eight) = (Engine::bind(), Engine::bind());
    register(&server, &mut seven, 7, ROUTING_GROUP);
    register(&server, &mut eight, 8, ROUTING_GROUP);
    seven.publish(
        vec![stored(&[71, 72], None, &tokens, "GPU", marked("tenant-a"))],
        0,
    );
    eight.publish(
        vec![stored(&[81, 82], None, &tokens, "GPU", marked("tenant-b"))],
        0,
    );

    for (salt, expected_worker, other_worker) in [("tenant-a", "7", "8"), ("tenant-b", "8", "7")] {
        let query = json!({
            "token_ids": tokens,
            "model_name": MODEL,
            "routing_group": ROUTING_GROUP,
            "cache_salt": salt,
        });
        let body = converged(server.dynamo(), "/query", &query, |b| {
            !b["scores"][expected_worker].is_null()
        });
        assert_eq!(body["scores"][expected_worker]["0"], tokens.len());
        assert!(body["scores"].get(other_worker).is_none());
    }
}

/// A model whose engines hash each block over the token after it (vLLM with an EAGLE drafter,
/// `lookahead_tokens = 1` in the configuration): `/query` hashes tokens that way too, so the
/// blocks match where the engine would reuse them and nowhere else.
#[test]
fn query_hashes_over_lookahead_tokens_for_a_model_configured_so() {
    let dir = temp_dir("dynamo-lookahead");
    let config = dir.join("config.toml");
    let model = format!(
        "[[models]]\nname = \"{MODEL}\"\nblock_size = {BLOCK_SIZE}\nlookahead_tokens = 1\n"
    );
    std::fs::write(&config, model).unwrap();
    // In the configuration's own directory: a second `temp_dir` of the same name may be this one,
    // emptied.
    let args = [
        "--dynamo-listen",
        "127.0.0.1:0",
        "--config",
        config.to_str().unwrap(),
    ];
    let server = Server::start(&dir, "dynamo-lookahead", &args);
    server.wait_ready();
    let request: Vec<u32> = (1..=9).collect();
    let mut fields = match stored(&[71, 72], None, &request[..8], "GPU", Msg::Nil) {
        Msg::Array(fields) => fields,
        _ => unreachable!(),
    };
    // group_idx .. session_id, then `lookahead_token_ids`: the token after each block.
    fields.extend(std::iter::repeat_n(Msg::Nil, 6));
    fields.push(Msg::Array(vec![
        Msg::Array(vec![Msg::from(5)]),
        Msg::Array(vec![Msg::from(9)]),
    ]));
    let mut seven = Engine::bind();
    register(&server, &mut seven, 7, ROUTING_GROUP);
    seven.publish(vec![Msg::Array(fields)], 0);
    let query = |tokens: &[u32]| json!({ "token_ids": tokens, "model_name": MODEL, "routing_group": ROUTING_GROUP });
    let body = converged(server.dynamo(), "/query", &query(&request), |b| {
        !b["scores"]["7"].is_null()
    });
    assert_eq!(body["scores"]["7"]["0"], 8, "{body}");
    // Without the token after block 1, the engine could not reuse it, and neither is it found.
    let (status, body) = server.dynamo().post("/query", &query(&request[..8]));
    assert_eq!(
        (status, &body["scores"]["7"]["0"]),
        (200, &json!(4)),
        "{body}"
    );
    // Another token after block 1 is another block.
    let mut other = request.clone();
    other[8] = 99;
    let (_, body) = server.dynamo().post("/query", &query(&other));
    assert_eq!(body["scores"]["7"]["0"], 4, "{body}");
}

/// `/query_by_hash` cannot apply a cache salt after token hashes have already been produced.
#[test]
fn query_by_hash_rejects_cache_salt() {
    let server = server("dynamo-salt-refused", &[]);
    for cache_salt in ["tenant-a", ""] {
        let (status, body) = server.dynamo().post(
            "/query_by_hash",
            &json!({
                "block_hashes": [11_i64, 12],
                "model_name": MODEL,
                "routing_group": ROUTING_GROUP,
                "cache_salt": cache_salt,
            }),
        );
        assert_eq!(status, 400);
        assert!(
            (body["error"].as_str())
                .is_some_and(|e| e.contains("block_hashes must already include"))
        );
    }
}

/// `/query` against an unknown `(model, routing group)` must return 404 with an error body.
#[test]
fn query_returns_404_for_unknown_model() {
    let server = server("dynamo-unknown", &[]);
    let (status, body) = server.dynamo().post(
        "/query",
        &json!({ "token_ids": [1_u32, 2, 3], "model_name": "no-such-model" }),
    );
    assert_eq!(status, 404);
    assert!(
        (body["error"].as_str()).is_some_and(|s| s.contains("no indexer for model=")),
        "unexpected 404 body: {body}"
    );
}

#[test]
fn duplicate_store_warning_is_exported() {
    let server = server("dynamo-duplicates", &[]);
    let mut engine = Engine::bind();
    register(&server, &mut engine, 7, ROUTING_GROUP);
    let store = stored(&[711, 712], None, &blocks(&[11, 12]), "GPU", Msg::Nil);
    engine.publish(vec![store.clone()], 0);
    engine.publish(vec![store], 0);
    let expected = "dynamo_kvrouter_kv_cache_event_warnings{warning_kind=\"duplicate_store\"} 1";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = server.dynamo().get("/metrics");
        assert_eq!(status, 200);
        if body.lines().any(|line| line == expected) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "duplicate-store warning metric missing from /metrics:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A real PUB socket → subscription → index → HTTP `/query` round trip: a Device-tier and a
/// `CPU_TIER1` (host-pinned) `BlockStored` chained together show as the per-tier breakdown.
#[test]
fn zmq_published_tiered_events_appear_in_http_query() {
    const INSTANCE_ID: u64 = 7;
    let server = server("dynamo-zmq-tiers", &[]);
    let mut engine = Engine::bind();
    register(&server, &mut engine, INSTANCE_ID, ROUTING_GROUP);
    let device_tokens = vec![10_u32, 11, 12, 13];
    let host_tokens = vec![20_u32, 21, 22, 23];
    let device_block_hash: u64 = 0xD0_E0_AA_AA_BB_BB_CC_CC;
    let host_block_hash: u64 = 0x40_E0_AA_AA_BB_BB_CC_CC;
    engine.publish(
        vec![stored(
            &[device_block_hash],
            None,
            &device_tokens,
            "GPU",
            Msg::Nil,
        )],
        0,
    );
    engine.publish(
        vec![stored(
            &[host_block_hash],
            Some(device_block_hash),
            &host_tokens,
            "CPU_TIER1",
            Msg::Nil,
        )],
        0,
    );
    let mut full_tokens = device_tokens;
    full_tokens.extend(host_tokens);
    let query =
        json!({ "token_ids": full_tokens, "model_name": MODEL, "routing_group": ROUTING_GROUP });
    let body = converged(server.dynamo(), "/query", &query, |b| {
        b["instances"]["7"]["cpu"].as_u64() >= Some(2 * u64::from(BLOCK_SIZE))
    });
    let inst = &body["instances"][INSTANCE_ID.to_string()];
    assert_eq!(inst["gpu"], BLOCK_SIZE, "device-tier hits: one block");
    assert_eq!(inst["cpu"], 2 * BLOCK_SIZE, "device + host extension");
    assert_eq!(inst["longest_matched"], 2 * BLOCK_SIZE, "the full reach");
}

// The HTTP tests of Dynamo's `services/indexer/server.rs`.

#[test]
fn query_rejects_request_bodies_over_limit() {
    // Dynamo's limit for query bodies is 8 MiB; this server's is `--max-request-bytes`.
    const LIMIT: usize = 8 * 1024 * 1024;
    let server = server("dynamo-limit", &["--max-request-bytes", &LIMIT.to_string()]);
    let mut body = String::from(r#"{"token_ids":["#);
    while body.len() <= LIMIT {
        body.push_str("0,");
    }
    body.push_str(r#"0],"model_name":"model"}"#);
    let (status, _) = server
        .dynamo()
        .post_raw("/query", "application/json", body.as_bytes());
    assert_eq!(status, 413);
}

#[test]
fn listener_control_endpoints_are_not_mounted_by_default() {
    let server = server("dynamo-test-routes", &[]);
    for uri in ["/test/pause_listener", "/test/resume_listener"] {
        let (status, _) = server
            .dynamo()
            .post_raw(uri, "application/json", b"not json");
        assert_eq!(status, 404, "{uri} must not be mounted");
    }
}

#[test]
fn get_workers_returns_registered_workers_with_metadata() {
    let server = server("dynamo-workers", &[]);
    let api = server.dynamo();
    for (instance, port, model, group, block_size) in [
        (20, 15590, "llama3", "acme", 4),
        (21, 15591, "mistral", "other", 8),
    ] {
        let (status, body) = api.post(
            "/register",
            &json!({
                "instance_id": instance,
                "endpoint": format!("tcp://127.0.0.1:{port}"),
                "model_name": model,
                "routing_group": group,
                "block_size": block_size,
                "dp_rank": 0,
            }),
        );
        assert_eq!(status, 201, "{body}");
    }
    let list = |query: &str| -> Vec<Value> {
        let (status, body) = api.get_json(&format!("/workers{query}"));
        assert_eq!(status, 200);
        body.as_array().unwrap().clone()
    };
    let workers = list("");
    assert_eq!(workers.len(), 2);
    let mut model_names: Vec<_> = workers
        .iter()
        .filter_map(|w| w["model_name"].as_str())
        .collect();
    model_names.sort();
    assert_eq!(model_names, ["llama3", "mistral"]);
    let llama = workers
        .iter()
        .find(|w| w["model_name"] == "llama3")
        .unwrap();
    assert_eq!(llama["block_size"], 4);
    assert_eq!(llama["routing_group"], "acme");
    assert!(llama.get("tenant_id").is_none());
    assert_eq!(list("?tenant_id=acme").len(), 2);
    let by_group = list("?routing_group=acme");
    assert_eq!(by_group.len(), 1);
    assert_eq!(by_group[0]["routing_group"], "acme");
    let by_model = list("?model_name=llama3");
    assert_eq!(by_model.len(), 1);
    assert_eq!(by_model[0]["model_name"], "llama3");
    assert!(list("?model_name=nonexistent").is_empty());
}

#[test]
fn reopen_logs_returns_ok_without_writers() {
    let server = server("dynamo-reopen", &[]);
    let (status, body) = server.dynamo().post("/reopen_logs", &json!(null));
    assert_eq!(status, 200);
    assert_eq!(body["status"], "ok");
}

/// Bad bodies get the statuses axum's `Json` gives Dynamo's routes, and change nothing.
#[test]
fn bad_query_bodies_get_dynamo_statuses() {
    let server = server("dynamo-bad-bodies", &[]);
    let api = server.dynamo();
    let good = json!({ "token_ids": [1_u32, 2, 3, 4], "model_name": MODEL }).to_string();
    let (status, _) = api.post_raw("/query", "text/plain", good.as_bytes());
    assert_eq!(status, 415);
    let (status, _) = api.post_raw("/query", "application/json", b"{\"token_ids\": [1,");
    assert_eq!(status, 400);
    let (status, body) = api.post_raw("/query", "application/json", b"{\"token_ids\": [-1]}");
    assert_eq!(status, 422, "{body}");
    // A body that parses gets as far as the partition, which nobody registered.
    let (status, body) = api.post_raw("/query", "application/json", good.as_bytes());
    assert_eq!(status, 404, "{body}");
}
