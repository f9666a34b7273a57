//! The ZeroMQ subscriber: one thread per engine endpoint, feeding a [`WriterPool`].

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::watch;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

use super::decode::{Engine, decode_batch};
use super::map::{EventMapper, MapConfig};
use super::sequence::{END_OF_REPLAY, SeqCheck, SeqTracker, Topic, parse_seq};
use crate::KvIndex;
use crate::pool::WriterPool;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::{Arc, Mutex, lock};

/// One engine to subscribe to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineEndpoint {
    /// The engine's PUB socket, e.g. `tcp://10.0.0.5:5557`.
    pub events: String,
    /// The engine's replay ROUTER socket, e.g. `tcp://10.0.0.5:5558`, if it has one.
    pub replay: Option<String>,
}

impl EngineEndpoint {
    /// An engine without a replay socket: lost messages are counted, not recovered.
    pub fn new(events: impl Into<String>) -> Self {
        EngineEndpoint {
            events: events.into(),
            replay: None,
        }
    }

    /// Recover lost messages through the replay socket at `replay`.
    pub fn with_replay(mut self, replay: impl Into<String>) -> Self {
        self.replay = Some(replay.into());
        self
    }
}

/// How a [`Subscriber`] decodes and filters.
#[derive(Clone, Debug)]
pub struct SubscriberConfig {
    /// How hashes sent as bytes become 64 bits. Default: vLLM's convention.
    pub engine: Engine,
    /// Which tiers and groups to index. Default: GPU, every group.
    pub map: MapConfig,
    /// How long to wait for the replay socket to connect and for each replayed message.
    /// Default: 2 s.
    pub replay_timeout: Duration,
}

impl Default for SubscriberConfig {
    fn default() -> Self {
        SubscriberConfig {
            engine: Engine::default(),
            map: MapConfig::default(),
            replay_timeout: Duration::from_secs(2),
        }
    }
}

/// Why a [`Subscriber`] could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum IngestError {
    /// An endpoint that is not a ZeroMQ TCP address.
    BadEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The operating system refused a thread or a runtime.
    Io(std::io::Error),
}

impl fmt::Display for IngestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IngestError::BadEndpoint { endpoint, reason } => {
                write!(f, "bad ZeroMQ endpoint {endpoint:?}: {reason}")
            }
            IngestError::Io(error) => write!(f, "cannot start a subscriber thread: {error}"),
        }
    }
}

impl std::error::Error for IngestError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IngestError::Io(error) => Some(error),
            IngestError::BadEndpoint { .. } => None,
        }
    }
}

/// Counters of a [`Subscriber`], read with [`Subscriber::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IngestStats {
    /// Endpoints whose first connection is up (ZeroMQ reconnects by itself after that).
    pub connected: u64,
    /// Payloads decoded and handed to the pool, live or replayed.
    pub batches: u64,
    /// Index events submitted to the pool.
    pub events: u64,
    /// Messages that were not `[topic, 8-byte seq, payload]`.
    pub bad_frames: u64,
    /// Messages whose topic the resolver did not map to a worker (or that were not
    /// `kv@<pod>@<model>`).
    pub unresolved_topics: u64,
    /// Payloads that failed to decode (nothing of them applied).
    pub decode_errors: u64,
    /// Events of unknown types, skipped.
    pub unknown_events: u64,
    /// Events of tiers or groups the configuration filters out.
    pub filtered_events: u64,
    /// Events rejected by the mapping (tokens not whole blocks, ...).
    pub rejected_events: u64,
    /// Sequence gaps seen.
    pub gaps: u64,
    /// Messages recovered through replay.
    pub replayed: u64,
    /// Messages lost: in a gap and not recovered.
    pub lost: u64,
    /// Engine restarts seen (sequence numbers going backwards).
    pub restarts: u64,
}

#[derive(Default)]
struct Counters {
    connected: AtomicU64,
    batches: AtomicU64,
    events: AtomicU64,
    bad_frames: AtomicU64,
    unresolved_topics: AtomicU64,
    decode_errors: AtomicU64,
    unknown_events: AtomicU64,
    filtered_events: AtomicU64,
    rejected_events: AtomicU64,
    gaps: AtomicU64,
    replayed: AtomicU64,
    lost: AtomicU64,
    restarts: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> IngestStats {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        IngestStats {
            connected: read(&self.connected),
            batches: read(&self.batches),
            events: read(&self.events),
            bad_frames: read(&self.bad_frames),
            unresolved_topics: read(&self.unresolved_topics),
            decode_errors: read(&self.decode_errors),
            unknown_events: read(&self.unknown_events),
            filtered_events: read(&self.filtered_events),
            rejected_events: read(&self.rejected_events),
            gaps: read(&self.gaps),
            replayed: read(&self.replayed),
            lost: read(&self.lost),
            restarts: read(&self.restarts),
        }
    }
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// Resolves a message topic to the worker id its events belong to.
pub type Resolver = dyn Fn(&Topic<'_>) -> Option<u64> + Send + Sync;

/// Counters and the last problem, shared by the endpoint threads and the [`Subscriber`].
#[derive(Default)]
struct Monitor {
    counters: Counters,
    last_problem: Mutex<Option<String>>,
}

impl Monitor {
    fn problem(&self, endpoint: &str, what: impl fmt::Display) {
        *lock(&self.last_problem) = Some(format!("{endpoint}: {what}"));
    }
}

/// What every endpoint thread shares.
struct Shared<I: KvIndex + ?Sized + 'static> {
    pool: Arc<WriterPool<I>>,
    resolver: Arc<Resolver>,
    config: SubscriberConfig,
    monitor: Arc<Monitor>,
}

/// Subscribes to engines' KV events and keeps an index current.
///
/// Each endpoint gets its own thread and its own single-threaded async runtime, so an engine
/// that is slow, silent or unreachable holds up nobody else; events go into the writer pool,
/// whose per-worker queues apply them in order.
///
/// Per endpoint, for every three-frame message `[topic, seq, payload]`:
/// 1. the topic (`kv@<pod>@<model>`) is resolved to a worker id by the caller's resolver;
/// 2. the sequence number is checked against the last one applied. A gap is recovered through
///    the engine's replay socket when one is configured (vLLM's protocol: a DEALER sends
///    `[b"", first_missing_seq]`, the engine's ROUTER answers `[topic?, seq, payload]` per
///    buffered batch and ends with seq -1 and an empty payload); a number that goes backwards
///    means the engine restarted, and the worker's ranks seen so far are cleared;
/// 3. the payload is decoded and mapped ([`decode_batch`], [`EventMapper`]) and its events are
///    submitted to the pool.
///
/// Everything that goes wrong is counted in [`IngestStats`], and the last problem is kept as text
/// ([`Subscriber::last_problem`]); nothing stops the subscriber but [`Subscriber::shutdown`].
///
/// Limits: a subscriber that joins mid-stream starts from the first message it sees (it does not
/// replay the engine's buffer); a gap the replay cannot fill is counted in
/// [`IngestStats::lost`] and the worker is kept, not cleared; an engine that restarts and
/// overtakes the old sequence number before the subscriber reconnects looks like a gap, not a
/// restart. Only `tcp://` endpoints are supported.
///
/// ```no_run
/// use std::sync::Arc;
/// use flash_indexer::ingest::{EngineEndpoint, Subscriber, SubscriberConfig};
/// use flash_indexer::pool::{PoolConfig, WriterPool};
/// use flash_indexer::DefaultIndexer;
///
/// let pool = Arc::new(WriterPool::new(Arc::new(DefaultIndexer::default()), PoolConfig::default()));
/// let engines = [EngineEndpoint::new("tcp://10.0.0.5:5557").with_replay("tcp://10.0.0.5:5558")];
/// let subscriber = Subscriber::spawn(
///     Arc::clone(&pool),
///     engines,
///     |topic| topic.pod.strip_prefix("worker-")?.parse().ok(),
///     SubscriberConfig::default(),
/// )?;
/// # Ok::<(), flash_indexer::ingest::IngestError>(())
/// ```
pub struct Subscriber {
    stop: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
    monitor: Arc<Monitor>,
}

impl Subscriber {
    /// Starts one thread per endpoint. Each connects (and keeps reconnecting) in the background;
    /// only malformed endpoints and a refused thread fail here.
    pub fn spawn<I, R>(
        pool: Arc<WriterPool<I>>,
        endpoints: impl IntoIterator<Item = EngineEndpoint>,
        resolver: R,
        config: SubscriberConfig,
    ) -> Result<Subscriber, IngestError>
    where
        I: KvIndex + ?Sized + 'static,
        R: Fn(&Topic<'_>) -> Option<u64> + Send + Sync + 'static,
    {
        let endpoints: Vec<EngineEndpoint> = endpoints.into_iter().collect();
        for endpoint in &endpoints {
            let addresses = std::iter::once(&endpoint.events).chain(endpoint.replay.as_ref());
            for address in addresses {
                zeromq::Endpoint::from_str(address).map_err(|e| IngestError::BadEndpoint {
                    endpoint: address.clone(),
                    reason: e.to_string(),
                })?;
            }
        }
        let monitor = Arc::new(Monitor::default());
        let shared = Arc::new(Shared {
            pool,
            resolver: Arc::new(resolver),
            config,
            monitor: Arc::clone(&monitor),
        });
        let (stop, stopped) = watch::channel(false);
        let mut subscriber = Subscriber {
            stop,
            threads: Vec::new(),
            monitor,
        };
        for endpoint in endpoints {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(IngestError::Io)?;
            let shared = Arc::clone(&shared);
            let stopped = stopped.clone();
            let thread = std::thread::Builder::new()
                .name(format!("flash-ingest {}", endpoint.events))
                .spawn(move || {
                    runtime.block_on(EndpointTask::new(endpoint, shared).run(stopped));
                })
                .map_err(IngestError::Io)?;
            subscriber.threads.push(thread);
        }
        Ok(subscriber)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> IngestStats {
        self.monitor.counters.snapshot()
    }

    /// The last problem seen (a decode error, a rejected event, a failed replay ...), with its
    /// endpoint.
    pub fn last_problem(&self) -> Option<String> {
        lock(&self.monitor.last_problem).clone()
    }

    /// Stops every endpoint thread and waits for them. Events already submitted stay queued in
    /// the pool; call [`WriterPool::flush`] to wait for them.
    pub fn shutdown(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        // Receivers see the change (or the sender gone) at their next await.
        let _ = self.stop.send(true);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

impl fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscriber")
            .field("endpoints", &self.threads.len())
            .field("stats", &self.stats())
            .finish()
    }
}

/// One endpoint's state, owned by its thread.
struct EndpointTask<I: KvIndex + ?Sized + 'static> {
    endpoint: EngineEndpoint,
    shared: Arc<Shared<I>>,
    tracker: SeqTracker,
    /// One mapper per worker id this publisher's topics resolved to (normally one).
    mappers: HashMap<u64, EventMapper>,
}

impl<I: KvIndex + ?Sized + 'static> EndpointTask<I> {
    fn new(endpoint: EngineEndpoint, shared: Arc<Shared<I>>) -> Self {
        EndpointTask {
            endpoint,
            shared,
            tracker: SeqTracker::default(),
            mappers: HashMap::new(),
        }
    }

    async fn run(mut self, mut stopped: watch::Receiver<bool>) {
        let mut socket = SubSocket::new();
        tokio::select! {
            connected = self.connect(&mut socket) => if !connected { return },
            _ = stopped.changed() => return,
        }
        bump(&self.shared.monitor.counters.connected, 1);
        loop {
            let message = tokio::select! {
                message = socket.recv() => message,
                _ = stopped.changed() => return,
            };
            match message {
                Ok(message) => self.live(message).await,
                Err(error) => {
                    self.shared
                        .monitor
                        .problem(&self.endpoint.events, format!("receive failed: {error}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// Connects and subscribes to every topic, retrying until it works.
    async fn connect(&self, socket: &mut SubSocket) -> bool {
        loop {
            let attempt = async {
                socket.connect(&self.endpoint.events).await?;
                socket.subscribe("").await
            };
            match attempt.await {
                Ok(()) => return true,
                Err(error) => {
                    self.shared
                        .monitor
                        .problem(&self.endpoint.events, format!("connect failed: {error}"));
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    async fn live(&mut self, message: ZmqMessage) {
        let counters = &self.shared.monitor.counters;
        let frames = message.into_vec();
        let [topic, seq, payload] = frames.as_slice() else {
            bump(&counters.bad_frames, 1);
            return;
        };
        let Some(seq) = parse_seq(seq) else {
            bump(&counters.bad_frames, 1);
            return;
        };
        let Some(worker_id) = Topic::parse(topic).and_then(|t| (self.shared.resolver)(&t)) else {
            bump(&counters.unresolved_topics, 1);
            self.shared.monitor.problem(
                &self.endpoint.events,
                format!("unresolved topic {:?}", String::from_utf8_lossy(topic)),
            );
            return;
        };
        match self.tracker.check(seq) {
            SeqCheck::InOrder => {}
            SeqCheck::Gap { first, last } => {
                bump(&counters.gaps, 1);
                let recovered = match &self.endpoint.replay {
                    Some(replay) => self.replay(replay.clone(), worker_id, first, last).await,
                    None => 0,
                };
                let lost = last - first + 1 - recovered;
                bump(&self.shared.monitor.counters.lost, lost);
                if lost > 0 {
                    self.shared.monitor.problem(
                        &self.endpoint.events,
                        format!("lost {lost} messages before seq {seq}"),
                    );
                }
            }
            SeqCheck::Restarted => {
                bump(&counters.restarts, 1);
                let clears = self.mapper(worker_id).restart();
                self.submit(clears);
            }
        }
        self.apply(worker_id, payload);
        self.tracker.applied(seq);
    }

    /// Asks the replay socket for `first ..= last` and applies what comes back, in order.
    /// Returns how many of them were applied.
    async fn replay(&mut self, address: String, worker_id: u64, first: u64, last: u64) -> u64 {
        let timeout = self.shared.config.replay_timeout;
        let mut socket = DealerSocket::new();
        let request = async {
            socket.connect(&address).await?;
            let mut request = ZmqMessage::from(Vec::<u8>::new());
            request.push_back(first.to_be_bytes().to_vec().into());
            socket.send(request).await
        };
        match tokio::time::timeout(timeout, request).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                self.shared
                    .monitor
                    .problem(&address, format!("replay request failed: {error}"));
                return 0;
            }
            Err(_) => {
                self.shared
                    .monitor
                    .problem(&address, "replay socket did not connect in time");
                return 0;
            }
        }
        let mut recovered = 0;
        loop {
            let reply = match tokio::time::timeout(timeout, socket.recv()).await {
                Ok(Ok(reply)) => reply.into_vec(),
                Ok(Err(error)) => {
                    self.shared
                        .monitor
                        .problem(&address, format!("replay failed: {error}"));
                    break;
                }
                Err(_) => {
                    self.shared
                        .monitor
                        .problem(&address, "replay stopped answering");
                    break;
                }
            };
            // [b"", topic, seq, payload] (vLLM) or [b"", seq, payload] (SGLang, older vLLM).
            let (seq, payload) = match reply.as_slice() {
                [empty, _, seq, payload] | [empty, seq, payload] if empty.is_empty() => {
                    (parse_seq(seq), payload)
                }
                _ => (None, &reply[0]),
            };
            let Some(seq) = seq else {
                bump(&self.shared.monitor.counters.bad_frames, 1);
                continue;
            };
            if seq == END_OF_REPLAY {
                break;
            }
            // Only the gap: what the engine buffered before it is applied already, and what
            // follows it is still queued on the live socket.
            if seq < first || seq > last || self.tracker.last().is_some_and(|l| seq <= l) {
                continue;
            }
            self.apply(worker_id, payload);
            self.tracker.applied(seq);
            recovered += 1;
            if seq == last {
                break;
            }
        }
        bump(&self.shared.monitor.counters.replayed, recovered);
        recovered
    }

    fn mapper(&mut self, worker_id: u64) -> &mut EventMapper {
        let config = &self.shared.config.map;
        self.mappers
            .entry(worker_id)
            .or_insert_with(|| EventMapper::new(worker_id, config.clone()))
    }

    /// Decodes one payload and submits its events.
    fn apply(&mut self, worker_id: u64, payload: &[u8]) {
        let counters = &self.shared.monitor.counters;
        let batch = match decode_batch(payload, self.shared.config.engine) {
            Ok(batch) => batch,
            Err(error) => {
                bump(&counters.decode_errors, 1);
                self.shared.monitor.problem(&self.endpoint.events, error);
                return;
            }
        };
        let mapped = self.mapper(worker_id).map(&batch);
        let counters = &self.shared.monitor.counters;
        bump(&counters.unknown_events, batch.unknown_events as u64);
        bump(&counters.filtered_events, mapped.filtered as u64);
        bump(&counters.rejected_events, mapped.rejected.len() as u64);
        if let Some(error) = mapped.rejected.last() {
            self.shared.monitor.problem(&self.endpoint.events, error);
        }
        self.submit(mapped.events);
        // Counted last: once a batch shows here, its events are in the pool.
        bump(&self.shared.monitor.counters.batches, 1);
    }

    fn submit(&self, events: Vec<crate::Event>) {
        for event in events {
            // `submit` only fails once the pool's writer thread has died; nothing to do then
            // but say so.
            match self.shared.pool.submit(event) {
                Ok(()) => bump(&self.shared.monitor.counters.events, 1),
                Err(error) => self
                    .shared
                    .monitor
                    .problem(&self.endpoint.events, format!("{error:?}")),
            }
        }
    }
}
