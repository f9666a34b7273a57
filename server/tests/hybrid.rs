//! A hybrid model in the server's configuration: gpt-oss-like groups (full attention and a
//! sliding window of 8 tokens, blocks of 4), fed vLLM 0.33's events with their `group_idx` by
//! a stand-in engine over loopback ZeroMQ, scored by vLLM's reuse rules, kept by a replica that
//! bootstraps from the server and by its snapshot; and an engine named by its topic, whose
//! events come without their group, refused and counted.

mod support;

use std::time::{Duration, Instant};

use rmpv::Value as Msg;
use serde_json::json;
use support::{Engine, Server, temp_dir};

const BLOCK_SIZE: usize = 4;

/// vLLM 0.33's `BlockStored` of group `group`: the blocks of `tokens`, seqs from `first`.
fn stored(group: u32, tokens: &[u32], first: u64) -> Msg {
    let blocks = tokens.len() / BLOCK_SIZE;
    Msg::Array(vec![
        Msg::from("BlockStored"),
        Msg::Array((0..blocks as u64).map(|i| Msg::from(first + i)).collect()),
        Msg::Nil,
        Msg::Array(tokens.iter().map(|&t| Msg::from(t)).collect()),
        Msg::from(BLOCK_SIZE as u32),
        Msg::Nil,         // lora_id
        Msg::from("GPU"), // medium
        Msg::Nil,         // lora_name
        Msg::Nil,         // extra_keys
        Msg::from(group), // group_idx
        Msg::Nil,         // kv_cache_spec_kind: vLLM 0.33 leaves it unset
        Msg::Nil,         // kv_cache_spec_sliding_window
    ])
}

/// vLLM 0.33's `BlockRemoved` of group `group`.
fn removed(group: u32, seqs: impl Iterator<Item = u64>) -> Msg {
    Msg::Array(vec![
        Msg::from("BlockRemoved"),
        Msg::Array(seqs.map(Msg::from).collect()),
        Msg::from("GPU"),
        Msg::from(group),
    ])
}

/// Each worker's depth for `tokens`.
fn depths(server: &Server, tokens: &[u32]) -> Vec<(u64, u64)> {
    let (status, answer) = server.post("/query", &json!({"model": "gpt", "tokens": tokens}));
    assert_eq!(status, 200, "{answer}");
    (answer["workers"].as_array().unwrap().iter())
        .map(|w| (w["worker"].as_u64().unwrap(), w["depth"].as_u64().unwrap()))
        .collect()
}

fn metric(server: &Server, line_start: &str) -> Option<f64> {
    let (_, text) = server.get("/metrics");
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn a_hybrid_model_is_scored_by_every_group_kept_by_snapshots_and_ungrouped_events_are_refused() {
    let dir = temp_dir("hybrid");
    let (mut a, mut b) = (Engine::bind(), Engine::with_topic("kv@pod-b@gpt"));
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[models]]\nname = \"gpt\"\nblock_size = {BLOCK_SIZE}\n\
             groups = [{{ kind = \"full_attention\" }}, {{ kind = \"sliding_window\", window = 8 }}]\n\
             [[engines]]\nevents = {:?}\nworker = 1\nmodel = \"gpt\"\n\
             [[engines]]\nevents = {:?}\n",
            a.endpoint, b.endpoint
        ),
    )
    .unwrap();
    let server = Server::start(&dir, "hybrid", &["--config", config.to_str().unwrap()]);
    server.wait_ready();

    // Ten blocks in both groups; the window group then evicts all but the last two, as vLLM
    // frees blocks that slid out of a window of 8 tokens (cdiv(8 - 1, 4) = 2 blocks).
    let tokens: Vec<u32> = (0..10 * BLOCK_SIZE as u32).collect();
    let events = [
        stored(0, &tokens, 1),
        stored(1, &tokens, 1),
        removed(1, 1..=8),
    ];
    a.publish_until(&events, || {
        depths(&server, &tokens) == [(1, 10)] && depths(&server, &tokens[..28]).is_empty()
    });
    // The whole prompt: its last window is held. Seven blocks: the full-attention group holds
    // them, but no window before them is held, so nothing is reusable (merged into one worker,
    // the removal would have dropped the whole prompt).
    assert_eq!(depths(&server, &tokens), [(1, 10)]);
    assert_eq!(depths(&server, &tokens[..28]), []);
    // Nine blocks: the window group holds block 8 only, and no earlier pair either.
    assert_eq!(depths(&server, &tokens[..36]), []);

    // The engine named by its topic publishes without a group the router could keep: refused,
    // counted, never merged.
    let rejected =
        "flash_indexer_events_rejected_total{model=\"gpt\",tier=\"GPU\",reason=\"no_group\"}";
    b.publish_until(&[stored(0, &tokens, 100)], || {
        metric(&server, rejected).is_some_and(|n| n > 0.0)
    });
    assert_eq!(depths(&server, &tokens), [(1, 10)]);

    // Every group survives a replica's bootstrap from this server (`--peer`, its `GET /dump`)
    // and that replica's snapshot on disk.
    let model_only = dir.join("model.toml");
    let model_toml = std::fs::read_to_string(&config).unwrap();
    let model_toml = &model_toml[..model_toml.find("[[engines]]").unwrap()];
    std::fs::write(&model_only, model_toml).unwrap();
    let snapshots = dir.join("snapshots");
    let (model_only, snapshots) = (model_only.to_str().unwrap(), snapshots.to_str().unwrap());
    let replica = Server::start(
        &dir,
        "replica",
        &[
            "--config",
            model_only,
            "--peer",
            &server.url,
            "--snapshot-dir",
            snapshots,
        ],
    );
    replica.wait_ready();
    let restored = |other: &Server| {
        assert_eq!(depths(other, &tokens), [(1, 10)]);
        assert_eq!(depths(other, &tokens[..28]), []);
        assert_eq!(depths(other, &tokens[..36]), []);
    };
    restored(&replica);
    replica.terminate();
    let restarted = Server::start(
        &dir,
        "restarted",
        &["--config", model_only, "--snapshot-dir", snapshots],
    );
    restarted.wait_ready();
    restored(&restarted);

    // Removing the worker reaches every group.
    assert_eq!(server.delete("/workers/1"), 204);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !depths(&server, &tokens).is_empty() {
        assert!(Instant::now() < deadline, "worker 1 was never removed");
        std::thread::sleep(Duration::from_millis(20));
    }
}
