//! The real server binary on loopback, without engines: its state comes from snapshots written
//! here, so every answer is known in advance. Every route, bad input, tiers, a corrupt
//! snapshot, a snapshot written on SIGTERM, and a replica bootstrapped from a peer.

mod support;

use flash_indexer::{Block, Event, LocalHash, Worker, hash};
use flash_indexer_server::snapshot::{self, Contents, IndexDump};
use serde_json::{Value, json};
use support::{Server, temp_dir};

const BLOCK_SIZE: usize = 4;

/// Tokens of a 6-block request, and its local hashes.
fn request() -> (Vec<u32>, Vec<LocalHash>) {
    let tokens: Vec<u32> = (100..124).collect();
    let locals = hash::local_hashes(&tokens, BLOCK_SIZE);
    (tokens, locals)
}

/// A chain of `n` blocks of `locals`, as one stored event of `worker`.
fn stored(worker: Worker, locals: &[LocalHash], n: usize) -> Event {
    let seqs = hash::seq_hashes(&locals[..n]);
    let blocks = locals
        .iter()
        .zip(seqs)
        .map(|(&l, s)| Block::new(l, s))
        .collect();
    Event::stored(worker, 0, None, blocks)
}

/// Model `m`: worker 1 holds 4 blocks on the GPU and 6 on the CPU; worker 2 holds 2 on the
/// CPU; worker 3 holds 1 on disk; worker 4 holds 3 on the GPU, hashed in cache namespace
/// `tenant-a`; worker 5 holds all 6 on the GPU keyed by an image (placeholders at tokens
/// 6..14), worker 6 all 6 keyed by vLLM's cache salt `tenant-x`.
fn tiered_snapshot(dir: &std::path::Path) {
    let (tokens, locals) = request();
    let tenant = hash::local_hashes_salted(&tokens, BLOCK_SIZE, hash::Salt::namespace("tenant-a"));
    let index = |tier: &str, events: Vec<Event>| IndexDump {
        model: "m".into(),
        tier: tier.into(),
        events,
        groups: Vec::new(),
    };
    let contents = Contents {
        taken_unix_ms: 1,
        indexes: vec![
            index(
                "GPU",
                vec![
                    stored(Worker::new(1, 0), &locals, 4),
                    stored(Worker::new(4, 0), &tenant, 3),
                    stored(Worker::new(5, 0), &keyed(&tokens, IMAGE, None), 6),
                    stored(Worker::new(6, 0), &keyed(&tokens, &[], Some("tenant-x")), 6),
                ],
            ),
            index(
                "CPU",
                vec![
                    stored(Worker::new(1, 0), &locals, 6),
                    stored(Worker::new(2, 0), &locals, 2),
                ],
            ),
            index("DISK", vec![stored(Worker::new(3, 0), &locals, 1)]),
        ],
    };
    snapshot::write_atomic(dir, &snapshot::encode(&contents)).unwrap();
}

/// The image of worker 5: 8 placeholder tokens from token 6.
const IMAGE: &[hash::MmItem<'static>] = &[hash::MmItem {
    identifier: "image-a",
    offset: 6,
    length: 8,
}];

/// The local hashes of `tokens` keyed by `mm` and `cache_salt`, as vLLM keys them.
fn keyed(tokens: &[u32], mm: &[hash::MmItem<'_>], cache_salt: Option<&str>) -> Vec<LocalHash> {
    let features = hash::Features {
        mm,
        cache_salt,
        ..hash::Features::default()
    };
    hash::local_hashes_with_features(tokens, BLOCK_SIZE, &features)
}

/// The depth `worker` matches in a query's answer, 0 if it is absent.
fn depth_of(answer: &Value, worker: u64) -> u64 {
    scores(answer)
        .iter()
        .find(|(w, _, _)| *w == worker)
        .map_or(0, |(_, depth, _)| *depth)
}

fn scores(answer: &Value) -> Vec<(u64, u64, f64)> {
    answer["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["worker"].as_u64().unwrap(),
                w["depth"].as_u64().unwrap(),
                w["score"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_model_whose_engines_hash_over_lookahead_tokens_is_queried_the_same_way() {
    // Model `eagle`'s engines hash each block over the token after it (vLLM with an EAGLE
    // drafter); worker 7 holds the 6 blocks of a 25-token request hashed that way.
    let dir = temp_dir("lookahead");
    let tokens: Vec<u32> = (200..225).collect();
    let eagle = hash::Features {
        lookahead: 1,
        ..hash::Features::default()
    };
    let locals = hash::local_hashes_with_features(&tokens, BLOCK_SIZE, &eagle);
    assert_eq!(locals.len(), 6);
    let contents = Contents {
        taken_unix_ms: 1,
        indexes: vec![IndexDump {
            model: "eagle".into(),
            tier: "GPU".into(),
            events: vec![stored(Worker::new(7, 0), &locals, 6)],
            groups: Vec::new(),
        }],
    };
    snapshot::write_atomic(&dir, &snapshot::encode(&contents)).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "[[models]]\nname = \"eagle\"\nblock_size = 4\nlookahead_tokens = 1\n",
    )
    .unwrap();
    let server = Server::start(
        &dir,
        "server",
        &[
            "--config",
            config.to_str().unwrap(),
            "--snapshot-dir",
            dir.to_str().unwrap(),
        ],
    );
    server.wait_ready();
    let query = |tokens: &[u32]| {
        let (status, answer) =
            server.post("/query", &json!({ "model": "eagle", "tokens": tokens }));
        assert_eq!(status, 200, "{answer}");
        (answer["blocks"].as_u64().unwrap(), depth_of(&answer, 7))
    };
    // Queries given as tokens are hashed as the model's engines hash them.
    assert_eq!(query(&tokens), (6, 6));
    // A prompt that ends at a block's end: that block has no token after it yet.
    assert_eq!(query(&tokens[..24]), (5, 5));
    // Another token after the last block is another block to the engine.
    let mut other = tokens.clone();
    other[24] = 7;
    assert_eq!(query(&other), (6, 5));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn queries_score_every_tier_and_bad_input_gets_a_4xx() {
    let dir = temp_dir("routes");
    tiered_snapshot(&dir);
    let server = Server::start(
        &dir,
        "server",
        &[
            "--snapshot-dir",
            dir.to_str().unwrap(),
            "--block-size",
            "4",
            "--max-request-bytes",
            "2000",
        ],
    );
    server.wait_ready();
    let (tokens, locals) = request();

    // Tiers: each block counts once, on the heaviest tier holding it (GPU 1, CPU 0.75, disk 0.25).
    // Worker 5 matches the plain request up to its image's first block.
    let (status, answer) = server.post("/query", &json!({ "model": "m", "tokens": tokens }));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["blocks"], 6);
    assert_eq!(
        scores(&answer),
        [
            (1, 6, 4.0 + 2.0 * 0.75),
            (2, 2, 1.5),
            (5, 1, 1.0),
            (3, 1, 0.25)
        ]
    );
    assert_eq!(answer["workers"][0]["tiers"], json!({ "GPU": 4, "CPU": 6 }));
    // The same request as local hashes, and the model implied (there is only one).
    let raw: Vec<u64> = locals.iter().map(|l| l.0).collect();
    let (status, same) = server.post("/query", &json!({ "local_hashes": raw }));
    assert_eq!((status, &same), (200, &answer));
    // Another LoRA adapter hashes the same tokens apart: nobody holds them.
    let (_, lora) = server.post("/query", &json!({ "tokens": tokens, "lora": "alice" }));
    assert_eq!(lora["workers"], json!([]));
    // So does a cache namespace: only the tenant's worker holds its blocks.
    let (status, tenant) = server.post(
        "/query",
        &json!({ "tokens": tokens, "namespace": "tenant-a" }),
    );
    assert_eq!(status, 200, "{tenant}");
    assert_eq!(scores(&tenant), [(4, 3, 3.0)]);
    // Multimodal and salted requests (vLLM's extra keys): the same image matches all of worker
    // 5, another image only the block before its placeholders; the same salt all of worker 6,
    // another salt or none nothing of it.
    let image = |id: &str| json!([{ "identifier": id, "offset": 6, "length": 8 }]);
    let (status, same) = server.post(
        "/query",
        &json!({ "tokens": tokens, "mm": image("image-a") }),
    );
    assert_eq!(status, 200, "{same}");
    assert_eq!(depth_of(&same, 5), 6);
    let (_, other) = server.post(
        "/query",
        &json!({ "tokens": tokens, "mm": image("image-b") }),
    );
    assert_eq!((depth_of(&other, 5), depth_of(&other, 1)), (1, 1));
    let (_, salted) = server.post(
        "/query",
        &json!({ "tokens": tokens, "cache_salt": "tenant-x" }),
    );
    assert_eq!(scores(&salted), [(6, 6, 6.0)]);
    let (_, other) = server.post(
        "/query",
        &json!({ "tokens": tokens, "cache_salt": "tenant-y" }),
    );
    assert_eq!(other["workers"], json!([]));
    assert_eq!((depth_of(&answer, 5), depth_of(&answer, 6)), (1, 0));
    // A request shorter than a block has no blocks.
    let (_, short) = server.post("/query", &json!({ "tokens": [1, 2, 3] }));
    assert_eq!(
        (short["blocks"].as_u64(), short["workers"].clone()),
        (Some(0), json!([]))
    );

    // Bad input: status and a message saying what was wrong.
    let bad = |status: u16, answer: (u16, Value), says: &str| {
        assert_eq!(answer.0, status, "{}", answer.1);
        let message = answer.1["error"].as_str().unwrap_or_default().to_owned();
        assert!(
            message.contains(says),
            "{message:?} should mention {says:?}"
        );
    };
    bad(
        400,
        server.post_raw("/query", "application/json", b"{\"tokens\": [1,"),
        "",
    );
    bad(
        415,
        server.post_raw("/query", "text/plain", b"{}"),
        "Content-Type",
    );
    bad(
        422,
        server.post("/query", &json!({ "tokens": [1], "colour": 1 })),
        "colour",
    );
    bad(422, server.post("/query", &json!({ "tokens": [-1] })), "");
    bad(
        400,
        server.post("/query", &json!({ "tokens": [1], "local_hashes": [1] })),
        "not both",
    );
    bad(400, server.post("/query", &json!({ "model": "m" })), "give");
    bad(
        400,
        server.post("/query", &json!({ "local_hashes": [1], "lora": "x" })),
        "lora",
    );
    bad(
        400,
        server.post("/query", &json!({ "local_hashes": [1], "namespace": "x" })),
        "namespace",
    );
    bad(
        400,
        server.post("/query", &json!({ "local_hashes": [1], "cache_salt": "x" })),
        "cache_salt",
    );
    bad(
        422,
        server.post(
            "/query",
            &json!({ "tokens": [1], "mm": [{ "identifier": "x" }] }),
        ),
        "offset",
    );

    bad(
        404,
        server.post("/query", &json!({ "model": "nope", "tokens": [1] })),
        "unknown model",
    );
    let huge = json!({ "tokens": vec![7u32; 1000] });
    bad(413, server.post("/query", &huge), "");
    bad(404, server.get_json("/nowhere"), "no such route");
    bad(
        400,
        server.post("/workers", &json!({ "events": "tcp://127.0.0.1:1" })),
        "worker",
    );
    bad(
        400,
        server.post("/workers", &json!({ "events": "udp://x:1", "worker": 5 })),
        "udp",
    );
    bad(
        422,
        server.post("/workers", &json!({ "events": 5, "worker": 5 })),
        "",
    );
    assert_eq!(server.delete("/workers/abc"), 400);
    assert_eq!(server.delete("/workers/12345"), 404);

    // Engines registered and removed at run time (nothing listens there: it stays unconnected).
    let engine = json!({ "events": "tcp://127.0.0.1:9", "worker": 5, "model": "m" });
    assert_eq!(server.post("/workers", &engine).0, 201);
    bad(409, server.post("/workers", &engine), "already");
    let (status, workers) = server.get_json("/workers");
    assert_eq!(status, 200);
    assert_eq!(workers["engines"][0]["engine"]["worker"], 5);
    assert_eq!(workers["engines"][0]["ingest"]["GPU"]["connected"], 0);
    let cpu = &workers["models"][0]["tiers"][1];
    assert_eq!(
        (cpu["tier"].as_str(), cpu["workers"].as_u64()),
        (Some("CPU"), Some(2))
    );
    assert_eq!(server.delete("/workers/5"), 204);
    assert_eq!(server.delete("/workers/5"), 404);

    // Metrics: what was served and what is held.
    let (status, metrics) = server.get("/metrics");
    assert_eq!(status, 200);
    for line in [
        "flash_indexer_queries_total{model=\"m\"} 9",
        "flash_indexer_workers{model=\"m\",tier=\"CPU\"} 2",
        "flash_indexer_query_duration_seconds_bucket",
        "flash_indexer_resident_bytes",
        "flash_indexer_snapshot_age_seconds",
        "flash_indexer_http_errors_total{status=\"422\"} 4",
    ] {
        assert!(metrics.contains(line), "no {line:?} in\n{metrics}");
    }

    // The dump is a snapshot of the same state.
    let (status, bytes) = server.get_bytes("/dump");
    assert_eq!(status, 200);
    let dumped = snapshot::decode(&bytes).unwrap();
    let events: usize = dumped.indexes.iter().map(|i| i.events.len()).sum();
    assert_eq!((dumped.indexes.len(), events), (3, 6));
    server.terminate();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_corrupt_snapshot_is_reported_and_survived_and_sigterm_saves_a_good_one() {
    let dir = temp_dir("corrupt");
    tiered_snapshot(&dir);
    let path = snapshot::path_in(&dir);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x20;
    std::fs::write(&path, &bytes).unwrap();

    let server = Server::start(&dir, "server", &["--snapshot-dir", dir.to_str().unwrap()]);
    server.wait_ready();
    let log = server.log();
    assert!(
        log.contains("snapshot unusable") && log.contains("checksum"),
        "the log should name the damage: {log}"
    );
    let moved_aside = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().contains("corrupt-"));
    assert!(
        moved_aside,
        "the corrupt snapshot is kept aside for inspection"
    );
    let (status, answer) = server.post("/query", &json!({ "model": "m", "tokens": [1, 2] }));
    assert_eq!(status, 404, "started empty: {answer}");
    server.terminate();
    // SIGTERM wrote a good (empty) snapshot.
    assert!(snapshot::read(&dir).unwrap().unwrap().indexes.is_empty());

    // Something that is not a snapshot at all, and a snapshot of a future format.
    std::fs::write(&path, b"hello").unwrap();
    let server = Server::start(&dir, "second", &["--snapshot-dir", dir.to_str().unwrap()]);
    server.wait_ready();
    assert!(
        server.log().contains("not a flash-indexer snapshot"),
        "{}",
        server.log()
    );
    drop(server);
    let mut future = snapshot::encode(&Contents::default());
    future[8] = 2;
    std::fs::write(&path, &future).unwrap();
    let server = Server::start(&dir, "third", &["--snapshot-dir", dir.to_str().unwrap()]);
    server.wait_ready();
    assert!(
        server.log().contains("snapshot format 2"),
        "{}",
        server.log()
    );
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_replica_bootstraps_from_its_peer_and_answers_alike() {
    let dir = temp_dir("peer");
    tiered_snapshot(&dir);
    let first = Server::start(
        &dir,
        "first",
        &["--snapshot-dir", dir.to_str().unwrap(), "--block-size", "4"],
    );
    first.wait_ready();
    let second = Server::start(&dir, "second", &["--peer", &first.url, "--block-size", "4"]);
    second.wait_ready();
    assert!(second.log().contains("index restored"), "{}", second.log());
    let (tokens, _) = request();
    for n in 0..=tokens.len() {
        let query = json!({ "model": "m", "tokens": tokens[..n] });
        assert_eq!(first.post("/query", &query), second.post("/query", &query));
    }
    // A peer that is not there: reported, and the replica starts empty.
    let lone = Server::start(&dir, "lone", &["--peer", "http://127.0.0.1:9"]);
    lone.wait_ready();
    assert!(
        lone.log().contains("bootstrap from the peer failed"),
        "{}",
        lone.log()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_command_lines_exit_with_a_message() {
    for (args, says) in [
        (&["--engine", "udp://x:1"][..], "udp://x:1"),
        (&["--config", "/nonexistent/flash.toml"][..], "cannot read"),
        (&["--listen", "not-an-address"][..], "invalid value"),
        (&["--layout", "btree"][..], "btree"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_flash-indexer-server"))
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} started");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn health_waits_for_every_startup_engine() {
    let dir = temp_dir("health");
    // Nothing listens on port 9: the engine never connects.
    let server = Server::start(&dir, "server", &["--engine", "1=tcp://127.0.0.1:9"]);
    let (status, body) = server.get_json("/health");
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        body,
        json!({ "status": "starting", "waiting_for": ["engine 1"] })
    );
    // The index answers meanwhile, from whatever it holds (nothing yet).
    let (status, answer) = server.post("/query", &json!({ "tokens": [1] }));
    assert_eq!((status, answer["workers"].clone()), (200, json!([])));
    std::fs::remove_dir_all(&dir).unwrap();
}
