//! Approximate mode in the real server binary: `POST /route` and `POST /release`, and three
//! replicas sharing their routing decisions through a `redis-server` on loopback (started here;
//! `.ci/run` installs Debian's): after the stream is drained every replica gives the same
//! answers, one killed and started again too. Without `redis-server` on the PATH the shared test says so and passes, except under
//! CI (`CI` set), where it fails.

mod support;

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Server, temp_dir};

/// A `redis-server` on a loopback port, without persistence, killed on drop.
struct Redis(Child, u16);

impl Redis {
    fn start() -> Option<Redis> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let child = match Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(e) if std::env::var_os("CI").is_none() => {
                eprintln!("skipped: cannot start redis-server ({e})");
                return None;
            }
            Err(e) => panic!("CI needs redis-server: {e}"),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Redis(child, port))
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The workers of a `POST /query` answer, with their depths.
fn depths(answer: &Value) -> Vec<(u64, u64)> {
    answer["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["worker"].as_u64().unwrap(), w["depth"].as_u64().unwrap()))
        .collect()
}

fn tokens(first: u32, blocks: u32) -> Vec<u32> {
    (first..first + 4 * blocks).collect()
}

#[test]
fn a_routed_request_is_predicted_and_released() {
    let dir = temp_dir("approximate");
    let server = Server::start(
        &dir,
        "lru",
        &[
            "--approximate",
            "lru",
            "--capacity-blocks",
            "64",
            "--block-size",
            "4",
            "--model",
            "m",
        ],
    );
    let (status, body) = server.post("/route", &json!({"tokens": tokens(0, 6), "worker": 7}));
    assert_eq!(status, 200, "{body}");
    let request = body["request"].as_u64().unwrap();
    let (_, answer) = server.post("/query", &json!({"model": "m", "tokens": tokens(0, 6)}));
    assert_eq!(depths(&answer), vec![(7, 6)]);
    let (status, _) = server.post("/release", &json!({"request": request}));
    assert_eq!(status, 200);
    let (status, body) = server.post("/release", &json!({"request": request}));
    assert_eq!(status, 404, "{body}");
    // Released, the blocks stay predicted until the LRU model evicts them.
    let (_, answer) = server.post("/query", &json!({"tokens": tokens(0, 3)}));
    assert_eq!(depths(&answer), vec![(7, 3)]);
    let (status, body) = server.post("/route", &json!({"tokens": tokens(0, 1)}));
    assert_eq!(status, 422, "{body}");
}

#[test]
fn routing_decisions_need_approximate_mode_and_its_flags_need_it_too() {
    let dir = temp_dir("exact");
    let config = dir.join("exact.toml");
    std::fs::write(&config, "[[models]]\nname = \"m\"\nblock_size = 4\n").unwrap();
    let server = Server::start(&dir, "exact", &["--config", config.to_str().unwrap()]);
    let (status, body) = server.post("/route", &json!({"tokens": tokens(0, 1), "worker": 1}));
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].as_str().unwrap().contains("--approximate"));
    let status = Command::new(env!("CARGO_BIN_EXE_flash-indexer-server"))
        .args(["--share", "redis://127.0.0.1:1/"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success());
    let status = Command::new(env!("CARGO_BIN_EXE_flash-indexer-server"))
        .args(["--approximate", "lru"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "lru needs --capacity-blocks");
}

#[test]
fn three_replicas_sharing_through_redis_give_the_same_answers() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}/", redis.1);
    let dir = temp_dir("shared");
    let args = [
        "--approximate",
        "ttl",
        "--share",
        &url,
        "--block-size",
        "4",
        "--model",
        "m",
    ];
    let replicas: Vec<Server> = (0..3)
        .map(|r| Server::start(&dir, &format!("replica{r}"), &args))
        .collect();
    // Each replica routes its share of twelve requests, as behind a load balancer.
    for k in 0..12u32 {
        let replica = &replicas[k as usize % 3];
        let body = json!({"tokens": tokens(1_000 * k, 1 + k % 5), "worker": u64::from(k % 4)});
        let (status, answer) = replica.post("/route", &body);
        assert_eq!(status, 200, "{answer}");
    }
    // A replica killed and started again catches up from the stream.
    let mut replicas = replicas;
    replicas.pop().unwrap().kill_9();
    replicas.push(Server::start(&dir, "replica2-again", &args));
    for k in 0..12u32 {
        let query = json!({"tokens": tokens(1_000 * k, 1 + k % 5)});
        let answers: Vec<Vec<(u64, u64)>> = replicas
            .iter()
            .map(|r| depths(&r.post("/query", &query).1))
            .collect();
        assert_eq!(answers[0], vec![(u64::from(k % 4), u64::from(1 + k % 5))]);
        assert_eq!(answers[1], answers[0], "request {k}");
        assert_eq!(answers[2], answers[0], "request {k}");
    }
    let (_, metrics) = replicas[2].get("/metrics");
    assert!(
        metrics.contains("flash_indexer_shared_decisions_applied_total{model=\"m\"} 12"),
        "{metrics}"
    );
}
