//! Router replicas sharing decisions through a real `redis-server` on loopback (started here;
//! `.ci/run` installs Debian's): they converge, a restarted replica catches up, a Redis that
//! goes away and comes back costs nothing but the decisions made meanwhile, malformed stream
//! entries are refused and counted, and the stream stays within its retention window.
//!
//! Without `redis-server` on the PATH these tests say so and pass, except under CI (`CI` set),
//! where they fail.

use core::time::Duration;
use flash_indexer::approx::{DecisionLog, RedisLog, SharedApproximateIndexer};
use flash_indexer::{DefaultIndexer, LocalHash, Retention, Worker};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

type Replica = SharedApproximateIndexer<DefaultIndexer, RedisLog>;

/// A `redis-server` on a loopback port, without persistence, killed on drop.
struct Server {
    port: u16,
    child: Child,
}

impl Server {
    /// On a free port. Tests run side by side, so a port picked free may be taken by another
    /// test's server before this one binds it: then another port.
    fn start() -> Option<Self> {
        for _ in 0..8 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            match Self::spawn_on(port)? {
                Ok(server) => return Some(server),
                Err(why) => eprintln!("port {port}: {why}; trying another"),
            }
        }
        panic!("no redis-server of this test's own after 8 ports");
    }

    /// On `port` again (after a restart); panics if another process holds it.
    fn start_on(port: u16) -> Option<Self> {
        Self::spawn_on(port).map(|started| started.unwrap_or_else(|why| panic!("{why}")))
    }

    /// `None` without redis-server outside CI; `Err` when what listens on `port` is not the
    /// server this call started (it found the port taken and exited).
    fn spawn_on(port: u16) -> Option<Result<Self, String>> {
        let spawned = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) if std::env::var_os("CI").is_none() => {
                eprintln!("skipped: cannot start redis-server ({e})");
                return None;
            }
            Err(e) => panic!("CI needs redis-server: {e}"),
        };
        let mut server = Self { port, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Some(Err(format!("redis-server exited ({status})")));
            }
            if let Some(pid) = server.process_id() {
                return Some(if pid == server.child.id() {
                    Ok(server)
                } else {
                    Err(format!("another redis-server (pid {pid}) listens there"))
                });
            }
            assert!(Instant::now() < deadline, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process id of the server that answers on the port, if one does.
    fn process_id(&self) -> Option<u32> {
        let client = redis::Client::open(self.url()).ok()?;
        let mut connection = client
            .get_connection_with_timeout(Duration::from_secs(1))
            .ok()?;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut connection)
            .ok()?;
        info.lines()
            .find_map(|line| line.strip_prefix("process_id:"))
            .and_then(|pid| pid.trim().parse().ok())
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn log(&self, key: &str, window: Duration) -> RedisLog {
        RedisLog::open(&self.url(), key, window)
            .unwrap()
            .with_timeout(Duration::from_millis(500))
    }

    /// A raw command, for what a replica would never send.
    fn command(&self, args: &[&[u8]]) -> redis::Value {
        let mut connection = redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap());
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut connection).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn chain(k: u64) -> Vec<LocalHash> {
    (0..1 + k % 5).map(|i| LocalHash(k * 100 + i)).collect()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Every worker's score for 40 chains.
fn answers(r: &Replica) -> Vec<Vec<Option<u32>>> {
    (0..40)
        .map(|k| {
            let scores = r.find_matches(&chain(k));
            (0..8).map(|w| scores.get(Worker::new(w, 0))).collect()
        })
        .collect()
}

#[test]
fn three_replicas_agree_after_the_stream_is_drained_and_a_restarted_one_catches_up() {
    let Some(server) = Server::start() else {
        return;
    };
    let retention = Retention::lru(64);
    let replicas: Vec<Replica> = (0..3)
        .map(|_| SharedApproximateIndexer::new(retention, server.log("fleet", secs(600))))
        .collect();
    let mut running = Vec::new();
    for k in 0..40u64 {
        let r = (k % 3) as usize;
        replicas[r].sync(secs(k)).unwrap();
        let routed = replicas[r].record_routing(Worker::new(k % 8, 0), &chain(k), secs(k));
        running.push((r, routed));
        if k % 4 == 3 {
            let (r, routed) = running.remove(0);
            replicas[r].release(routed, secs(k)).unwrap();
        }
    }
    for r in &replicas {
        r.sync(secs(40)).unwrap();
    }
    let expected = answers(&replicas[0]);
    assert!(expected.iter().flatten().any(Option::is_some));
    for r in &replicas[1..] {
        assert_eq!(answers(r), expected);
        let stats = r.stats();
        assert_eq!((stats.malformed, stats.read_failures), (0, 0));
    }

    // Replica 2 restarts: a new one reads the stream from its start.
    let restarted: Replica =
        SharedApproximateIndexer::new(retention, server.log("fleet", secs(600)));
    restarted.sync(secs(40)).unwrap();
    assert_eq!(answers(&restarted), expected);
}

#[test]
fn malformed_stream_entries_are_refused_and_counted() {
    let Some(server) = Server::start() else {
        return;
    };
    let a: Replica =
        SharedApproximateIndexer::new(Retention::default(), server.log("s", secs(600)));
    let b: Replica =
        SharedApproximateIndexer::new(Retention::default(), server.log("s", secs(600)));
    server.command(&[b"XADD", b"s", b"*", b"d", b"garbage"]);
    server.command(&[b"XADD", b"s", b"*", b"other", b"field"]);
    a.record_routing(Worker::new(1, 0), &chain(3), secs(1));
    assert_eq!(b.sync(secs(1)), Ok(1));
    assert_eq!(b.stats().malformed, 2);
    assert_eq!(
        b.find_matches(&chain(3)).best(),
        Some((Worker::new(1, 0), 4))
    );
}

#[test]
fn replicas_route_through_a_redis_outage_and_share_again_after() {
    let Some(mut server) = Server::start() else {
        return;
    };
    let a: Replica =
        SharedApproximateIndexer::new(Retention::default(), server.log("o", secs(600)));
    let b: Replica =
        SharedApproximateIndexer::new(Retention::default(), server.log("o", secs(600)));
    a.record_routing(Worker::new(0, 0), &chain(1), secs(1));
    assert_eq!(b.sync(secs(1)), Ok(1));

    let port = server.port;
    drop(server);
    a.record_routing(Worker::new(2, 0), &chain(2), secs(2));
    assert!(b.sync(secs(2)).is_err());
    assert_eq!(
        a.find_matches(&chain(2)).best().map(|(w, _)| w),
        Some(Worker::new(2, 0))
    );
    assert_eq!(b.find_matches(&chain(2)).best(), None);
    assert_eq!(a.stats().publish_failures, 1);
    assert_eq!(b.stats().read_failures, 1);

    // Back, empty (no persistence): new decisions are shared again.
    server = Server::start_on(port).expect("restarted");
    a.record_routing(Worker::new(3, 0), &chain(4), secs(3));
    assert_eq!(b.sync(secs(3)), Ok(1));
    assert_eq!(
        b.find_matches(&chain(4)).best().map(|(w, _)| w),
        Some(Worker::new(3, 0))
    );
    assert_eq!(server.port, port);
}

#[test]
fn the_stream_is_trimmed_to_the_retention_window() {
    let Some(server) = Server::start() else {
        return;
    };
    let log = server.log("w", Duration::from_millis(200));
    for i in 0..500u64 {
        log.append(secs(i), &i.to_le_bytes()).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    // Each append trims behind the previous one: two appends after the window has passed.
    log.append(secs(500), b"x").unwrap();
    log.append(secs(501), b"y").unwrap();
    let len = match server.command(&[b"XLEN", b"w"]) {
        redis::Value::Int(n) => n,
        other => panic!("{other:?}"),
    };
    assert!(len <= 2, "{len} entries kept");
    assert_eq!(log.read(None, secs(0), 10).unwrap().len() as i64, len);
}
