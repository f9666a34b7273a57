//! Prompts in, llm-d's way: `POST /score` with a prompt or chat messages, and llm-d's
//! `indexer.v1.IndexerService/GetPodScores` over gRPC. The model's tokenizer is a small BPE
//! trained here and saved as a Hugging Face model directory; engines are stand-ins publishing
//! vLLM's batches over loopback ZeroMQ, one named by its configuration's `pod`, one by its
//! topic.

mod support;

use std::path::Path;

use flash_indexer_server::llmd::proto::GetPodScoresRequest;
use flash_indexer_server::llmd::proto::indexer_service_client::IndexerServiceClient;
use flash_indexer_server::prompt::{CHATML, Prompter, train_tokenizer};
use rmpv::Value as Msg;
use serde_json::{Value, json};
use support::{Engine, Server, temp_dir};

const BLOCK_SIZE: usize = 4;

/// Words for the tokenizer's corpus and the prompts.
fn text(seed: u64, words: usize) -> String {
    const WORDS: [&str; 12] = [
        "the", "cache", "router", "block", "prefix", "worker", "café", "tokens", "don't", "42",
        "engine", "prompt",
    ];
    let mut x = seed | 1;
    let mut out = String::new();
    for i in 0..words {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push_str(WORDS[(x % 12) as usize]);
        out.push_str(if i % 9 == 8 { ".\n" } else { " " });
    }
    out
}

/// vLLM 0.33's `BlockStored` of whole blocks of `tokens`, seqs from `first`, on the GPU.
fn stored(tokens: &[u32], first: u64) -> Msg {
    let blocks = tokens.len() / BLOCK_SIZE;
    Msg::Array(vec![
        Msg::from("BlockStored"),
        Msg::Array((0..blocks as u64).map(|i| Msg::from(first + i)).collect()),
        Msg::Nil,
        Msg::Array(
            tokens[..blocks * BLOCK_SIZE]
                .iter()
                .map(|&t| Msg::from(t))
                .collect(),
        ),
        Msg::from(BLOCK_SIZE as u32),
        Msg::Nil,
        Msg::from("GPU"),
    ])
}

struct Setup {
    server: Server,
    prompter: Prompter,
    /// Configured with worker 1 and `pod = "pod-a"`.
    a: Engine,
    /// Named by its topic `kv@pod-b@m`.
    b: Engine,
}

/// A tokenizer in `dir`, a model `m` using it and a model `plain` without one, two engines.
fn setup(name: &str) -> Setup {
    let dir = temp_dir(name);
    let model_dir = dir.join("model");
    let corpus: Vec<String> = (0..300).map(|s| text(s, 50)).collect();
    train_tokenizer(&model_dir, &corpus, 400, true, Some(CHATML)).unwrap();
    let prompter = Prompter::load(&model_dir, 1 << 20).unwrap();
    let (a, b) = (Engine::bind(), Engine::with_topic("kv@pod-b@m"));
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[[models]]\nname = \"m\"\nblock_size = {BLOCK_SIZE}\ntokenizer = {:?}\n\
             [[models]]\nname = \"plain\"\nblock_size = {BLOCK_SIZE}\n\
             [[engines]]\nevents = {:?}\nworker = 1\npod = \"pod-a\"\nmodel = \"m\"\n\
             [[engines]]\nevents = {:?}\n",
            model_dir.display().to_string(),
            a.endpoint,
            b.endpoint
        ),
    )
    .unwrap();
    let server = start(&dir, &config);
    Setup {
        server,
        prompter,
        a,
        b,
    }
}

fn start(dir: &Path, config: &Path) -> Server {
    let args = [
        "--config",
        config.to_str().unwrap(),
        "--grpc-listen",
        "127.0.0.1:0",
    ];
    Server::start(dir, "prompts", &args)
}

fn pod_score(answer: &Value, pod: &str) -> Option<f64> {
    (answer["scores"].as_array().unwrap().iter())
        .find(|s| s["pod"] == pod)
        .map(|s| s["score"].as_f64().unwrap())
}

#[test]
fn prompts_and_conversations_score_pods_over_http_and_grpc() {
    let Setup {
        server,
        prompter,
        mut a,
        mut b,
    } = setup("score");
    let prompt = text(1000, 400);
    let (tokens, _) = prompter.encode_prompt(&prompt).unwrap();
    let blocks = tokens.len() / BLOCK_SIZE;
    assert!(blocks > 20);
    let ask = |body: Value| server.post("/score", &body);
    // Engine a holds the whole prompt; engine b its first two blocks.
    a.publish_until(&[stored(&tokens, 100)], || {
        pod_score(&ask(json!({"model": "m", "prompt": prompt})).1, "pod-a") == Some(blocks as f64)
    });
    b.publish_until(&[stored(&tokens[..2 * BLOCK_SIZE], 200)], || {
        pod_score(&ask(json!({"model": "m", "prompt": prompt})).1, "pod-b") == Some(2.0)
    });

    let (status, answer) = ask(json!({"model": "m", "prompt": prompt}));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["tokens"], tokens.len());
    assert_eq!(answer["blocks"], blocks);
    let pods: Vec<&str> = (answer["scores"].as_array().unwrap().iter())
        .map(|s| s["pod"].as_str().unwrap())
        .collect();
    assert_eq!(pods, ["pod-a", "pod-b"], "best first: {answer}");
    assert_eq!(answer["scores"][0]["worker"], 1);
    assert!(answer["scores"][0].get("data_parallel_rank").is_none());

    // Pods asked about: one holding nothing scores 0 rather than vanishing.
    let (_, answer) = ask(json!({"model": "m", "prompt": prompt, "pods": ["pod-b", "pod-c"]}));
    assert_eq!(
        answer["scores"],
        json!([
            {"pod": "pod-b", "score": 2.0, "worker": answer["scores"][0]["worker"], "depth": 2},
            {"pod": "pod-c", "score": 0.0, "worker": answer["scores"][1]["worker"], "depth": 0},
        ])
    );

    // A prompt extending the first: its first part comes from the prefix store.
    let longer = format!("{prompt}{}", text(7, 40));
    let (_, answer) = ask(json!({"model": "m", "prompt": longer}));
    assert_eq!(pod_score(&answer, "pod-a"), Some(blocks as f64), "{answer}");
    let tokenized = answer["tokenized_bytes"].as_u64().unwrap() as usize;
    assert!(
        tokenized < longer.len() / 2,
        "{tokenized} of {} bytes",
        longer.len()
    );

    // A conversation: rendered through the chat template, scored as /query scores its tokens.
    let messages = json!([
        {"role": "system", "content": text(3, 30)},
        {"role": "user", "content": text(4, 60)},
    ]);
    let (chat, _) = prompter.encode_messages(&messages, true).unwrap();
    a.publish_until(&[stored(&chat, 1000)], || {
        let (_, answer) = ask(json!({"model": "m", "messages": messages}));
        pod_score(&answer, "pod-a") == Some((chat.len() / BLOCK_SIZE) as f64)
    });
    let (_, by_tokens) = server.post("/query", &json!({"model": "m", "tokens": chat}));
    assert_eq!(by_tokens["workers"][0]["depth"], chat.len() / BLOCK_SIZE);
    let (_, closed) =
        ask(json!({"model": "m", "messages": messages, "add_generation_prompt": false}));
    assert!(closed["tokens"].as_u64().unwrap() < chat.len() as u64);

    // The same through llm-d's gRPC service.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut client = IndexerServiceClient::connect(server.grpc().to_owned())
            .await
            .unwrap();
        let request = |model: &str, pods: &[&str]| GetPodScoresRequest {
            prompt: prompt.clone(),
            model_name: model.to_owned(),
            pod_identifiers: pods.iter().map(|p| (*p).to_owned()).collect(),
        };
        let scores = client
            .get_pod_scores(request("m", &[]))
            .await
            .unwrap()
            .into_inner()
            .scores;
        let got: Vec<(&str, f64)> = scores.iter().map(|s| (s.pod.as_str(), s.score)).collect();
        assert_eq!(got, [("pod-a", blocks as f64), ("pod-b", 2.0)]);
        assert_eq!(scores[0].data_parallel_rank, None);
        let scores = client
            .get_pod_scores(request("m", &["pod-x"]))
            .await
            .unwrap()
            .into_inner()
            .scores;
        assert_eq!(
            (scores.len(), scores[0].pod.as_str(), scores[0].score),
            (1, "pod-x", 0.0)
        );
        let refused = client
            .get_pod_scores(request("plain", &[]))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
        assert!(
            refused.message().contains("no tokenizer"),
            "{}",
            refused.message()
        );
        let unknown = client
            .get_pod_scores(request("nope", &[]))
            .await
            .unwrap_err();
        assert_eq!(unknown.code(), tonic::Code::NotFound);
    });
}

#[test]
fn bad_prompt_requests_get_a_reason_and_change_nothing() {
    let Setup { server, .. } = setup("bad");
    let (status, body) = server.post("/score", &json!({"model": "plain", "prompt": "x"}));
    assert_eq!(status, 422);
    assert!(
        body["error"].as_str().unwrap().contains("no tokenizer"),
        "{body}"
    );
    // A model without a tokenizer still answers tokens.
    let (status, _) = server.post("/query", &json!({"model": "plain", "tokens": [1, 2, 3, 4]}));
    assert_eq!(status, 200);
    let cases = [
        (json!({"model": "m"}), 400),
        (json!({"model": "m", "prompt": "x", "messages": []}), 400),
        (json!({"model": "m", "messages": "hi"}), 400),
        (
            json!({"model": "m", "prompt": "x", "add_generation_prompt": true}),
            400,
        ),
        (json!({"model": "m", "prompt": "x", "extra": 1}), 422),
        (json!({"model": "m", "messages": [{"role": "user"}]}), 400),
        (json!({"model": "nope", "prompt": "x"}), 404),
        (json!({"prompt": "x"}), 400),
    ];
    for (body, expected) in cases {
        let (status, answer) = server.post("/score", &body);
        assert_eq!(status, expected, "{body} -> {answer}");
        assert!(answer["error"].is_string(), "{answer}");
    }
    let (status, _) = server.post_raw("/score", "text/plain", b"{}");
    assert_eq!(status, 415);
    let (_, workers) = server.get_json("/workers");
    let entries: u64 = (workers["models"].as_array().unwrap().iter())
        .flat_map(|m| m["tiers"].as_array().unwrap())
        .map(|t| t["entries"].as_u64().unwrap())
        .sum();
    assert_eq!(entries, 0, "refused requests stored nothing");
}
