//! What a [`Subscriber`](super::Subscriber) is told about each engine, and how it behaves.

use std::fmt;
use std::time::Duration;

use super::decode::Engine;
use super::map::MapConfig;

/// How the events of an endpoint get their [`Worker::dp_rank`](crate::Worker::dp_rank).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DpRank {
    /// The batch's `data_parallel_rank` field, 0 when it is absent (vLLM sets it on every batch
    /// of a data-parallel engine).
    #[default]
    FromBatch,
    /// This rank, whatever the batch says: for engines that publish each rank on its own socket
    /// without naming the rank in the batch.
    Fixed(u32),
    /// The batch's `data_parallel_rank`, this rank when it is absent (Dynamo's standalone
    /// indexer: the rank an engine was registered with, unless its batches name another).
    FromBatchOr(u32),
}

/// Who dials whom.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Dial {
    /// The engine binds its PUB socket, the router connects (vLLM's and SGLang's default).
    #[default]
    Connect,
    /// The router binds and engines connect to it (llm-d's deployment). Many engines may share
    /// one bound endpoint: each is told apart by its topic, so each must publish its own.
    Bind,
}

/// One engine to subscribe to (or, with [`EngineEndpoint::bind`], one address engines connect
/// to).
///
/// Addresses are ZeroMQ endpoints: `tcp://host:port` or `ipc:///path/to/socket`.
///
/// Which worker the events belong to is said here with [`with_worker`](Self::with_worker)
/// (needed for vLLM's and SGLang's default topic, the empty one), or left to the topic resolver
/// of [`Subscriber::spawn_with_resolver`](super::Subscriber::spawn_with_resolver).
///
/// ```
/// use flash_indexer::ingest::{DpRank, EngineEndpoint};
///
/// let engine = EngineEndpoint::new("tcp://10.0.0.5:5557")
///     .with_replay("tcp://10.0.0.5:5558")
///     .with_worker(5);
/// assert_eq!((engine.worker, engine.dp_rank), (Some(5), DpRank::FromBatch));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineEndpoint {
    /// The engine's PUB socket, e.g. `tcp://10.0.0.5:5557` (or the address to bind).
    pub events: String,
    /// The engine's replay ROUTER socket, e.g. `tcp://10.0.0.5:5558`, if it has one.
    pub replay: Option<String>,
    /// Who dials whom.
    pub dial: Dial,
    /// The worker id of every event from this endpoint; `None` asks the topic resolver.
    pub worker: Option<u64>,
    /// How events get their data-parallel rank.
    pub dp_rank: DpRank,
}

impl EngineEndpoint {
    /// An engine whose PUB socket the router connects to, without a replay socket.
    pub fn new(events: impl Into<String>) -> Self {
        EngineEndpoint {
            events: events.into(),
            replay: None,
            dial: Dial::Connect,
            worker: None,
            dp_rank: DpRank::FromBatch,
        }
    }

    /// An address the router binds; engines connect their PUB sockets to it.
    pub fn bind(events: impl Into<String>) -> Self {
        EngineEndpoint {
            dial: Dial::Bind,
            ..EngineEndpoint::new(events)
        }
    }

    /// Recover lost messages and resynchronize through the replay socket at `replay`.
    pub fn with_replay(mut self, replay: impl Into<String>) -> Self {
        self.replay = Some(replay.into());
        self
    }

    /// Every event of this endpoint belongs to worker `id`, whatever its topic.
    pub fn with_worker(mut self, id: u64) -> Self {
        self.worker = Some(id);
        self
    }

    /// Every event of this endpoint has data-parallel rank `rank`.
    pub fn with_dp_rank(mut self, rank: u32) -> Self {
        self.dp_rank = DpRank::Fixed(rank);
        self
    }

    /// Events get the batch's `data_parallel_rank`, `rank` when the batch names none.
    pub fn with_default_dp_rank(mut self, rank: u32) -> Self {
        self.dp_rank = DpRank::FromBatchOr(rank);
        self
    }

    /// Checks what can be checked before any socket exists.
    pub(crate) fn validate(&self, has_resolver: bool) -> Result<(), IngestError> {
        let bad = |endpoint: &str, reason: &str| IngestError::BadEndpoint {
            endpoint: endpoint.to_owned(),
            reason: reason.to_owned(),
        };
        for address in std::iter::once(&self.events).chain(&self.replay) {
            let rest = address
                .strip_prefix("tcp://")
                .or_else(|| address.strip_prefix("ipc://"))
                .ok_or_else(|| bad(address, "expected tcp://HOST:PORT or ipc://PATH"))?;
            if rest.is_empty() {
                return Err(bad(address, "the address after the scheme is empty"));
            }
            // The socket library takes C strings: a NUL would end the address early (and its
            // binding panics on one).
            if address.contains('\0') {
                return Err(bad(address, "the address contains a NUL byte"));
            }
        }
        if self.dial == Dial::Bind && self.replay.is_some() {
            return Err(bad(
                &self.events,
                "a bound endpoint gathers many engines; a replay socket belongs to one (connect to it instead)",
            ));
        }
        if self.worker.is_none() && !has_resolver {
            return Err(bad(
                &self.events,
                "names no worker (EngineEndpoint::with_worker) and no topic resolver was given",
            ));
        }
        Ok(())
    }
}

/// How a [`Subscriber`](super::Subscriber) decodes, filters, and copes with a faulty network.
#[derive(Clone, Debug)]
pub struct SubscriberConfig {
    /// How hashes sent as bytes become 64 bits. Default: vLLM's convention.
    pub engine: Engine,
    /// Which tiers and groups to index. Default: GPU, every group.
    pub map: MapConfig,
    /// The longest one replay may hold up live messages, from the request to the end marker, and
    /// the longest the subscriber waits for a replay socket to come up the first time. A replay
    /// that overruns is abandoned and the engine is cleared instead. Default: 1 s.
    pub replay_timeout: Duration,
    /// The longest wait between two reconnection attempts (ZeroMQ backs off from 100 ms up to
    /// this). Default: 1 s.
    pub reconnect_max: Duration,
    /// Messages larger than this are refused before any allocation: the connection that sent one
    /// is dropped (counted in [`IngestStats::disconnects`](super::IngestStats::disconnects)) and
    /// redialled. Default: 64 MiB.
    pub max_message_size: usize,
    /// Messages queued per endpoint while the subscriber is busy (a replay, a full writer pool);
    /// beyond it ZeroMQ drops messages, which shows up as a gap. Default: 100,000.
    pub receive_queue: usize,
    /// Topics one bound endpoint tracks at most (one per engine that connects to it); messages
    /// of further topics are counted as unresolved. Default: 4,096.
    pub max_topics: usize,
}

impl Default for SubscriberConfig {
    fn default() -> Self {
        SubscriberConfig {
            engine: Engine::default(),
            map: MapConfig::default(),
            replay_timeout: Duration::from_secs(1),
            reconnect_max: Duration::from_secs(1),
            max_message_size: 64 << 20,
            receive_queue: 100_000,
            max_topics: 4096,
        }
    }
}

/// Why a [`Subscriber`](super::Subscriber) could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum IngestError {
    /// An endpoint that cannot be used as given.
    BadEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        reason: String,
    },
    /// ZeroMQ refused a socket, an option, a bind or a connect.
    Transport {
        /// The endpoint it was for.
        endpoint: String,
        /// ZeroMQ's error.
        error: zmq::Error,
    },
    /// The operating system refused a thread.
    Io(std::io::Error),
}

impl fmt::Display for IngestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IngestError::BadEndpoint { endpoint, reason } => {
                write!(f, "bad ZeroMQ endpoint {endpoint:?}: {reason}")
            }
            IngestError::Transport { endpoint, error } => {
                write!(f, "ZeroMQ refused {endpoint:?}: {error}")
            }
            IngestError::Io(error) => write!(f, "cannot start a subscriber thread: {error}"),
        }
    }
}

impl std::error::Error for IngestError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IngestError::Io(error) => Some(error),
            IngestError::Transport { error, .. } => Some(error),
            IngestError::BadEndpoint { .. } => None,
        }
    }
}
