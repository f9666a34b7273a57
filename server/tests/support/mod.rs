//! Starting the real server binary on loopback and talking HTTP to it. Each test file uses a
//! part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `flash-indexer-server`, killed when dropped. Its methods talk to its main address.
pub struct Server {
    child: Child,
    client: Client,
    /// Its Dynamo API, when started with `--dynamo-listen`.
    dynamo: Option<Client>,
    /// Its gRPC address (`http://127.0.0.1:PORT`), when started with `--grpc-listen`.
    grpc: Option<String>,
    stderr: PathBuf,
}

/// HTTP to one address of a server.
#[derive(Clone)]
pub struct Client {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    agent: ureq::Agent,
}

impl std::ops::Deref for Server {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

/// A fresh directory under the system's temporary one: its own on every call, even for one name
/// in one process.
pub fn temp_dir(name: &str) -> PathBuf {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("fis-{name}-{}-{call}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Server {
    /// Starts the server with `args` (and `--listen 127.0.0.1:0`), logging to `logs/NAME.log`
    /// of `dir`, and waits until it listens.
    pub fn start(dir: &Path, name: &str, args: &[&str]) -> Server {
        let stderr = dir.join(format!("{name}.log"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_flash-indexer-server"))
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .stdin(Stdio::null())
            .spawn()
            .expect("the server binary runs");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let dynamo = args.contains(&"--dynamo-listen").then(|| {
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            (line.trim().strip_prefix("dynamo api on "))
                .unwrap_or_else(|| panic!("no Dynamo API address: {line:?}"))
                .to_owned()
        });
        let grpc = args.contains(&"--grpc-listen").then(|| {
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            let address = (line.trim().strip_prefix("grpc on "))
                .unwrap_or_else(|| panic!("no gRPC address: {line:?}"));
            format!("http://{address}")
        });
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| {
                panic!(
                    "the server did not start: {line:?}; log: {}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                )
            })
            .to_owned();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let client = |url: String| Client {
            url,
            agent: agent.clone(),
        };
        Server {
            child,
            client: client(url),
            dynamo: dynamo.map(client),
            grpc,
            stderr,
        }
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Its Dynamo API address.
    pub fn dynamo(&self) -> &Client {
        self.dynamo.as_ref().expect("started with --dynamo-listen")
    }

    /// Its gRPC address, `http://127.0.0.1:PORT`.
    pub fn grpc(&self) -> &str {
        self.grpc.as_deref().expect("started with --grpc-listen")
    }

    /// Waits until `GET /health` says ready.
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, body) = self.get("/health");
            if status == 200 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not ready after 60 s: {body}; log: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A stand-in engine: a bound PUB socket publishing vLLM's msgpack event batches under one
/// topic.
pub struct Engine {
    socket: zmq::Socket,
    /// Its `tcp://127.0.0.1:PORT`.
    pub endpoint: String,
    topic: Vec<u8>,
    seq: u64,
    _context: zmq::Context,
}

impl Engine {
    /// An engine publishing without a topic.
    pub fn bind() -> Engine {
        Engine::with_topic("")
    }

    /// An engine publishing under `topic` (e.g. `kv@POD@MODEL`).
    pub fn with_topic(topic: &str) -> Engine {
        let context = zmq::Context::new();
        let socket = context.socket(zmq::PUB).unwrap();
        socket.set_linger(0).unwrap();
        socket.bind("tcp://127.0.0.1:*").unwrap();
        let endpoint = socket.get_last_endpoint().unwrap().unwrap();
        Engine {
            socket,
            endpoint,
            topic: topic.as_bytes().to_vec(),
            seq: 0,
            _context: context,
        }
    }

    /// One batch `[ts, events, dp_rank]` as the frames `[topic, seq, payload]`.
    pub fn publish(&mut self, events: Vec<rmpv::Value>, dp_rank: u32) {
        use rmpv::Value as Msg;
        let batch = Msg::Array(vec![Msg::F64(0.0), Msg::Array(events), Msg::from(dp_rank)]);
        let mut payload = Vec::new();
        rmpv::encode::write_value(&mut payload, &batch).unwrap();
        let frames: [&[u8]; 3] = [&self.topic, &self.seq.to_be_bytes(), &payload];
        self.socket.send_multipart(frames, 0).unwrap();
        self.seq += 1;
    }
}

impl Engine {
    /// Publishes `events` as one batch every 50 ms until `done` holds, for up to 30 s (a PUB
    /// socket drops what it sends before the subscriber joins, so the batch must be idempotent).
    pub fn publish_until(&mut self, events: &[rmpv::Value], done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(Instant::now() < deadline, "the events never arrived");
            self.publish(events.to_vec(), 0);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Client {
    /// `GET path`: status and body.
    pub fn get(&self, path: &str) -> (u16, String) {
        let mut response = self
            .agent
            .get(format!("{}{path}", self.url))
            .call()
            .unwrap();
        let body = response.body_mut().read_to_string().unwrap();
        (response.status().as_u16(), body)
    }

    /// `GET path` as bytes.
    pub fn get_bytes(&self, path: &str) -> (u16, Vec<u8>) {
        let mut response = self
            .agent
            .get(format!("{}{path}", self.url))
            .call()
            .unwrap();
        let body = response
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_vec()
            .unwrap();
        (response.status().as_u16(), body)
    }

    /// `GET path` as JSON.
    pub fn get_json(&self, path: &str) -> (u16, Value) {
        let (status, body) = self.get(path);
        (
            status,
            serde_json::from_str(&body).unwrap_or(Value::String(body)),
        )
    }

    /// `POST path` with `body` and `content_type`: status and body as JSON (or as a string).
    pub fn post_raw(&self, path: &str, content_type: &str, body: &[u8]) -> (u16, Value) {
        let mut response = self
            .agent
            .post(format!("{}{path}", self.url))
            .header("content-type", content_type)
            .send(body)
            .unwrap();
        let text = response.body_mut().read_to_string().unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (response.status().as_u16(), value)
    }

    /// `POST path` with a JSON body.
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(path, "application/json", body.to_string().as_bytes())
    }

    /// `DELETE path`: the status.
    pub fn delete(&self, path: &str) -> u16 {
        let response = self
            .agent
            .delete(format!("{}{path}", self.url))
            .call()
            .unwrap();
        response.status().as_u16()
    }
}

impl Server {
    /// SIGTERM, then waits for a clean exit.
    pub fn terminate(mut self) {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(killed.success());
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "exit after SIGTERM: {status}; log: {}",
            self.log()
        );
    }

    /// SIGKILL: no chance to save anything.
    pub fn kill_9(mut self) {
        self.child.kill().unwrap();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
