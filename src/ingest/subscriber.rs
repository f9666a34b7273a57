//! The subscriber: one thread per engine endpoint, feeding a [`WriterPool`].

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::decode::decode_batch;
use super::endpoint::{Dial, DpRank, EngineEndpoint, IngestError, SubscriberConfig};
use super::map::EventMapper;
use super::sequence::{SeqCheck, SeqTracker, Topic, parse_seq};
use super::sink::{Offer, Sink};
use super::stats::{IngestStats, Monitor, bump};
use super::transport::{
    Connection, RECONNECT_FIRST, ReplayClient, ReplayStep, SLICE, Subscription,
};
use crate::pool::WriterPool;
use crate::sync::Arc;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::{KvIndex, Worker};

/// Resolves a message topic to the worker id its events belong to.
pub type Resolver = dyn Fn(&Topic<'_>) -> Option<u64> + Send + Sync;

/// What every endpoint thread shares.
struct Shared<S: Sink> {
    sink: Arc<S>,
    resolver: Option<Box<Resolver>>,
    config: SubscriberConfig,
    monitor: Arc<Monitor>,
    stop: Arc<AtomicBool>,
}

/// Subscribes to engines' KV events and keeps an index current.
///
/// Each endpoint gets its own thread, so an engine that is slow, silent, unreachable or
/// hostile holds up nobody else; events go into the writer pool, whose per-worker queues apply
/// them in order.
///
/// Per endpoint, for every three-frame message `[topic, seq, payload]`:
/// 1. the worker is the endpoint's ([`EngineEndpoint::with_worker`]) or the resolver's answer
///    for the topic (`kv@<pod>@<model>`);
/// 2. the sequence number is checked against the last one applied (the one place sequence
///    numbers are checked): a gap is filled through the engine's replay socket when it has one
///    (vLLM's protocol: a DEALER sends `[b"", first_missing_seq]`, the engine's ROUTER answers
///    `[topic?, seq, payload]` per buffered batch and ends with seq -1);
/// 3. the payload is decoded and mapped ([`decode_batch`], [`EventMapper`]) and its events are
///    submitted to the pool, each with the batch's sequence number as its event id.
///
/// **Resynchronization.** After every (re)connection, every restart (a sequence number going
/// backwards) and every loss a replay cannot repair, the subscriber clears the engine's workers
/// and rebuilds them from the engine's replay buffer, from its oldest retained batch. So the index
/// never keeps a block it cannot vouch for: what the engine stored before its buffer begins is
/// missing (an under-count, counted in [`IngestStats::lost`]), but nothing the engine dropped
/// stays. This is what recovers a router started after its engines, an engine that restarted
/// (however long the reconnection took), and a gap larger than the buffer. An engine without a
/// replay socket is cleared and followed live from there.
///
/// **Bounded waits.** A replay holds up live messages for at most
/// [`SubscriberConfig::replay_timeout`]; a replay socket that does not come up is waited for once
/// per connection, not at every gap; a replay that overruns is abandoned and the engine cleared.
/// Reconnection backs off to at most [`SubscriberConfig::reconnect_max`]. Messages over
/// [`SubscriberConfig::max_message_size`] are refused before allocation and their connection
/// dropped and redialled. A full writer pool is waited for in short slices. Every wait looks at
/// the stop flag at least every 50 ms, so [`Subscriber::shutdown`] returns promptly.
///
/// Everything that goes wrong is counted in [`IngestStats`], and the last problem is kept as text
/// ([`Subscriber::last_problem`]); nothing stops the subscriber but [`Subscriber::shutdown`].
///
/// ```no_run
/// use std::sync::Arc;
/// use flash_indexer::ingest::{EngineEndpoint, Subscriber, SubscriberConfig};
/// use flash_indexer::pool::{PoolConfig, WriterPool};
/// use flash_indexer::DefaultIndexer;
///
/// let pool = Arc::new(WriterPool::new(Arc::new(DefaultIndexer::default()), PoolConfig::default()));
/// let engines = [
///     EngineEndpoint::new("tcp://10.0.0.5:5557").with_replay("tcp://10.0.0.5:5558").with_worker(0),
///     EngineEndpoint::new("ipc:///run/engine-1/kv").with_worker(1),
/// ];
/// let subscriber = Subscriber::spawn(Arc::clone(&pool), engines, SubscriberConfig::default())?;
/// # Ok::<(), flash_indexer::ingest::IngestError>(())
/// ```
pub struct Subscriber {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    monitor: Arc<Monitor>,
}

impl Subscriber {
    /// Starts one thread per endpoint; every endpoint must name its worker
    /// ([`EngineEndpoint::with_worker`]). Sockets are created, bound and dialled here, so a
    /// malformed endpoint, an address in use or a refused thread fails here; connections
    /// themselves come up (and come back) in the background.
    pub fn spawn<I>(
        pool: Arc<WriterPool<I>>,
        endpoints: impl IntoIterator<Item = EngineEndpoint>,
        config: SubscriberConfig,
    ) -> Result<Subscriber, IngestError>
    where
        I: KvIndex + ?Sized + 'static,
    {
        Self::start(pool, endpoints, None, config)
    }

    /// As [`spawn`](Self::spawn), for a model with several KV-cache groups: every event keeps
    /// its group (vLLM's `group_idx`), mapped by
    /// [`EventMapper::map_groups`] against `index`'s model, and each endpoint's thread applies
    /// its engine's events to `index` itself, in the engine's order (there is no pool: a hybrid
    /// index takes each event with its group). What the mapping refuses is counted in
    /// [`IngestStats::rejected_events`], what the index refuses in
    /// [`IngestStats::index_refused`].
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use flash_indexer::hybrid::{GroupKind, GroupSpec, HybridIndexer, ModelGroups};
    /// use flash_indexer::ingest::{EngineEndpoint, Subscriber, SubscriberConfig};
    /// use flash_indexer::DefaultIndexer;
    ///
    /// // gpt-oss-like: full attention and a window of 128 tokens, blocks of 16.
    /// let model = ModelGroups::new(vec![
    ///     GroupSpec::new(GroupKind::FullAttention, 16),
    ///     GroupSpec::new(GroupKind::SlidingWindow { window: 128 }, 16),
    /// ])?;
    /// let index = Arc::new(HybridIndexer::<DefaultIndexer>::new(model));
    /// let engine = EngineEndpoint::new("tcp://10.0.0.5:5557").with_replay("tcp://10.0.0.5:5558");
    /// let subscriber =
    ///     Subscriber::spawn_hybrid(Arc::clone(&index), [engine.with_worker(0)], SubscriberConfig::default())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "hybrid")]
    pub fn spawn_hybrid<H>(
        index: Arc<H>,
        endpoints: impl IntoIterator<Item = EngineEndpoint>,
        config: SubscriberConfig,
    ) -> Result<Subscriber, IngestError>
    where
        H: crate::hybrid::HybridIndex + ?Sized + 'static,
    {
        let sink = Arc::new(super::sink::Hybrid(index));
        Self::start(sink, endpoints, None, config)
    }

    /// As [`spawn_hybrid`](Self::spawn_hybrid), with `resolver` naming the worker of every
    /// endpoint that does not name its own, from each message's topic.
    #[cfg(feature = "hybrid")]
    pub fn spawn_hybrid_with_resolver<H, R>(
        index: Arc<H>,
        endpoints: impl IntoIterator<Item = EngineEndpoint>,
        resolver: R,
        config: SubscriberConfig,
    ) -> Result<Subscriber, IngestError>
    where
        H: crate::hybrid::HybridIndex + ?Sized + 'static,
        R: Fn(&Topic<'_>) -> Option<u64> + Send + Sync + 'static,
    {
        let sink = Arc::new(super::sink::Hybrid(index));
        Self::start(sink, endpoints, Some(Box::new(resolver)), config)
    }

    /// As [`spawn`](Self::spawn), with `resolver` naming the worker of every endpoint that does
    /// not name its own, from each message's topic.
    pub fn spawn_with_resolver<I, R>(
        pool: Arc<WriterPool<I>>,
        endpoints: impl IntoIterator<Item = EngineEndpoint>,
        resolver: R,
        config: SubscriberConfig,
    ) -> Result<Subscriber, IngestError>
    where
        I: KvIndex + ?Sized + 'static,
        R: Fn(&Topic<'_>) -> Option<u64> + Send + Sync + 'static,
    {
        Self::start(pool, endpoints, Some(Box::new(resolver)), config)
    }

    fn start<S: Sink>(
        sink: Arc<S>,
        endpoints: impl IntoIterator<Item = EngineEndpoint>,
        resolver: Option<Box<Resolver>>,
        config: SubscriberConfig,
    ) -> Result<Subscriber, IngestError> {
        let endpoints: Vec<EngineEndpoint> = endpoints.into_iter().collect();
        for endpoint in &endpoints {
            endpoint.validate(resolver.is_some())?;
        }
        let context = zmq::Context::new();
        let mut opened = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let subscription = Subscription::open(&context, &endpoint, &config)?;
            let replay = match &endpoint.replay {
                Some(address) => Some(ReplayClient::open(&context, address, &config)?),
                None => None,
            };
            opened.push((endpoint, subscription, replay));
        }
        let monitor = Arc::new(Monitor::default());
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            sink,
            resolver,
            config,
            monitor: Arc::clone(&monitor),
            stop: Arc::clone(&stop),
        });
        let mut subscriber = Subscriber {
            stop,
            threads: Vec::new(),
            monitor,
        };
        for (endpoint, subscription, replay) in opened {
            let name = format!("flash-ingest {}", endpoint.events);
            let task = EndpointTask::new(endpoint, Arc::clone(&shared), subscription, replay);
            let thread = std::thread::Builder::new()
                .name(name)
                .spawn(move || task.run())
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
        self.monitor.last_problem()
    }

    /// Stops every endpoint thread and waits for them (each sees the request within about
    /// 50 ms, whatever it is doing). Events already submitted stay queued in the pool; call
    /// [`WriterPool::flush`] to wait for them.
    pub fn shutdown(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
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

/// One publisher as the subscriber follows it.
#[derive(Default)]
struct Source {
    tracker: SeqTracker,
    /// Known once the publisher's worker is.
    mapper: Option<EventMapper>,
    /// Workers (id and rank) it published to since it was last cleared.
    workers: BTreeSet<Worker>,
    /// A connection came up: resynchronize before the next message.
    resync_pending: bool,
}

/// Which publisher of an endpoint a message is from: the topic on a bound endpoint (many
/// engines), nothing on a dialled one (one engine).
type SourceKey = Vec<u8>;

/// One endpoint's state, owned by its thread.
struct EndpointTask<S: Sink> {
    endpoint: EngineEndpoint,
    shared: Arc<Shared<S>>,
    subscription: Subscription,
    replay: Option<ReplayClient>,
    sources: HashMap<SourceKey, Source>,
    /// When to dial a dropped engine afresh, unless it is back by then.
    redial_at: Option<Instant>,
}

impl<S: Sink> EndpointTask<S> {
    fn new(
        endpoint: EngineEndpoint,
        shared: Arc<Shared<S>>,
        subscription: Subscription,
        replay: Option<ReplayClient>,
    ) -> Self {
        let mut sources = HashMap::new();
        if endpoint.dial == Dial::Connect {
            let source = Source {
                mapper: endpoint
                    .worker
                    .map(|id| mapper(&endpoint, &shared.config, id)),
                ..Source::default()
            };
            sources.insert(SourceKey::new(), source);
        }
        EndpointTask {
            endpoint,
            shared,
            subscription,
            replay,
            sources,
            redial_at: None,
        }
    }

    fn stopped(&self) -> bool {
        self.shared.stop.load(Ordering::Relaxed)
    }

    fn problem(&self, what: impl fmt::Display) {
        self.shared.monitor.problem(&self.endpoint.events, what);
    }

    fn run(mut self) {
        while !self.stopped() {
            let (connections, messages) = match self.subscription.wait() {
                Ok(ready) => ready,
                Err(error) => {
                    self.problem(format!("poll failed: {error}"));
                    std::thread::sleep(SLICE);
                    continue;
                }
            };
            if connections {
                while let Some(change) = self.subscription.connection() {
                    self.on_connection(change);
                }
            }
            if self.redial_at.is_some_and(|at| Instant::now() >= at) {
                self.redial_at = None;
                if let Err(error) = self.subscription.redial() {
                    self.problem(format!("redial failed: {error}"));
                }
            }
            if messages {
                // A bounded burst, so that connection changes and the stop flag are seen.
                for _ in 0..1024 {
                    if self.stopped() {
                        return;
                    }
                    let Some(message) = self.subscription.message() else {
                        break;
                    };
                    self.on_message(message);
                }
            }
        }
    }

    fn on_connection(&mut self, change: Connection) {
        let counters = &self.shared.monitor.counters;
        match change {
            Connection::Down => {
                bump(&counters.disconnects, 1);
                self.problem("connection dropped (engine gone, or a message over the size limit)");
                if self.endpoint.dial == Dial::Connect {
                    self.redial_at = Some(Instant::now() + RECONNECT_FIRST);
                }
            }
            Connection::Up => {
                bump(&counters.connected, 1);
                self.redial_at = None;
                // A bound endpoint cannot tell which engine connected: its sources resync on
                // their sequence numbers instead.
                if self.endpoint.dial == Dial::Connect {
                    if let Some(replay) = &mut self.replay {
                        replay.reconnected();
                    }
                    let key = SourceKey::new();
                    let source = self.source(&key);
                    source.resync_pending = true;
                    if source.mapper.is_some() {
                        self.resync(&key);
                    }
                }
            }
        }
    }

    fn source(&mut self, key: &SourceKey) -> &mut Source {
        self.sources.entry(key.clone()).or_default()
    }

    fn on_message(&mut self, frames: Vec<Vec<u8>>) {
        let counters = &self.shared.monitor.counters;
        let Ok([topic, seq, payload]) = <[Vec<u8>; 3]>::try_from(frames) else {
            bump(&counters.bad_frames, 1);
            return;
        };
        let Some(seq) = parse_seq(&seq) else {
            bump(&counters.bad_frames, 1);
            return;
        };
        let worker_id = self.endpoint.worker.or_else(|| {
            let resolver = self.shared.resolver.as_ref()?;
            resolver(&Topic::parse(&topic)?)
        });
        let key = match self.endpoint.dial {
            Dial::Connect => SourceKey::new(),
            Dial::Bind => topic.clone(),
        };
        let room =
            self.sources.contains_key(&key) || self.sources.len() < self.shared.config.max_topics;
        let Some(worker_id) = worker_id.filter(|_| room) else {
            bump(&counters.unresolved_topics, 1);
            self.problem(format!(
                "no worker for topic {:?}",
                String::from_utf8_lossy(&topic)
            ));
            return;
        };
        let (endpoint, config) = (&self.endpoint, &self.shared.config);
        let source = self.sources.entry(key.clone()).or_default();
        if source.mapper.as_ref().map(EventMapper::worker_id) != Some(worker_id) {
            source.mapper = Some(mapper(endpoint, config, worker_id));
        }
        self.process(&key, seq, &payload);
    }

    /// Applies one live message in sequence: repairs a gap, resynchronizes after a restart or an
    /// unrepaired loss, skips what a resynchronization applied already.
    fn process(&mut self, key: &SourceKey, seq: u64, payload: &[u8]) {
        if self.source(key).resync_pending {
            self.resync(key);
        }
        // At most one repair, one resynchronization and one clear per message: every branch
        // ends in `Next` after a reset at the latest.
        let monitor = Arc::clone(&self.shared.monitor);
        let counters = &monitor.counters;
        let mut resynced = false;
        loop {
            match self.source(key).tracker.check(seq) {
                SeqCheck::Next => {
                    self.deliver(key, seq, payload);
                    self.source(key).tracker.applied(seq);
                    return;
                }
                SeqCheck::AlreadyApplied => {
                    bump(&counters.skipped, 1);
                    return;
                }
                SeqCheck::Gap { first, last } => {
                    bump(&counters.gaps, 1);
                    if !resynced && self.repair(key, first, last) {
                        continue;
                    }
                    let reached = self.source(key).tracker.last().unwrap_or(first - 1);
                    let lost = last.saturating_sub(reached);
                    bump(&counters.lost, lost);
                    self.problem(format!("lost {lost} messages before seq {seq}"));
                }
                SeqCheck::Jump => {
                    bump(&counters.jumps, 1);
                    self.problem(format!("sequence number {seq} is far ahead of the last"));
                }
                SeqCheck::Behind => {
                    bump(&counters.restarts, 1);
                }
            }
            if resynced {
                // The replay disagrees with the live stream: follow the live stream from here.
                self.clear(key);
                self.source(key).tracker.reset();
            } else {
                self.resync(key);
                resynced = true;
            }
        }
    }

    /// Fills `first ..= last` from the replay socket. `true` if all of it was applied.
    fn repair(&mut self, key: &SourceKey, first: u64, last: u64) -> bool {
        let Some(mut replay) = self.replay.take() else {
            return false;
        };
        if self.request(&mut replay, first) {
            while let Some((seq, payload)) = self.replayed(&mut replay) {
                if seq <= last && self.source(key).tracker.check(seq) == SeqCheck::Next {
                    self.deliver(key, seq, &payload);
                    self.source(key).tracker.applied(seq);
                    bump(&self.shared.monitor.counters.replayed, 1);
                }
            }
        }
        self.replay = Some(replay);
        self.source(key).tracker.last() == Some(last)
    }

    /// Clears the publisher's workers and rebuilds them from its replay buffer, if it has one.
    fn resync(&mut self, key: &SourceKey) {
        bump(&self.shared.monitor.counters.resyncs, 1);
        self.clear(key);
        let source = self.source(key);
        source.resync_pending = false;
        source.tracker.reset();
        let Some(mut replay) = self.replay.take() else {
            return;
        };
        if self.request(&mut replay, 0) {
            let mut complete = true;
            loop {
                match replay.next(&self.shared.stop) {
                    ReplayStep::Message { seq, payload } => {
                        if self.source(key).tracker.check(seq) == SeqCheck::Next {
                            self.deliver(key, seq, &payload);
                            self.source(key).tracker.applied(seq);
                            bump(&self.shared.monitor.counters.resync_batches, 1);
                        }
                    }
                    ReplayStep::End => break,
                    ReplayStep::BadFrame => bump(&self.shared.monitor.counters.bad_frames, 1),
                    ReplayStep::Abandoned(why) => {
                        self.abandoned(&replay, why);
                        complete = false;
                        break;
                    }
                }
            }
            let tracker = &mut self.source(key).tracker;
            match tracker.last() {
                // A prefix of the buffer is no state to keep: the rest of it is unknown.
                _ if !complete => {
                    self.clear(key);
                    self.source(key).tracker.reset();
                }
                Some(end) => tracker.replayed_through(end),
                None => {}
            }
        }
        self.replay = Some(replay);
    }

    /// Sends a replay request; counts and reports a replay socket that is not there.
    fn request(&self, replay: &mut ReplayClient, first: u64) -> bool {
        let sent = replay.request(first, &self.shared.stop);
        if !sent {
            bump(&self.shared.monitor.counters.replays_abandoned, 1);
            self.shared
                .monitor
                .problem(replay.address(), "replay socket not there");
        }
        sent
    }

    /// The next replayed message, until the end marker or the stream is abandoned.
    fn replayed(&self, replay: &mut ReplayClient) -> Option<(u64, Vec<u8>)> {
        loop {
            match replay.next(&self.shared.stop) {
                ReplayStep::Message { seq, payload } => return Some((seq, payload)),
                ReplayStep::End => return None,
                ReplayStep::BadFrame => bump(&self.shared.monitor.counters.bad_frames, 1),
                ReplayStep::Abandoned(why) => {
                    self.abandoned(replay, why);
                    return None;
                }
            }
        }
    }

    fn abandoned(&self, replay: &ReplayClient, why: &str) {
        bump(&self.shared.monitor.counters.replays_abandoned, 1);
        self.shared
            .monitor
            .problem(replay.address(), format!("replay abandoned: {why}"));
    }

    /// A `Cleared` for every worker the publisher wrote to since it was last cleared, and for
    /// what may hold state from before this subscriber (a snapshot restored, an earlier
    /// subscriber): the endpoint's fixed worker and rank, or, when the batches name their ranks,
    /// every rank of the publisher's worker id.
    fn clear(&mut self, key: &SourceKey) {
        let fixed = match (self.endpoint.worker, self.endpoint.dp_rank) {
            (Some(id), DpRank::Fixed(rank)) => Some(Worker::new(id, rank)),
            _ => None,
        };
        let all_ranks = match self.endpoint.dp_rank {
            DpRank::FromBatch | DpRank::FromBatchOr(_) => {
                self.source(key).mapper.as_ref().map(EventMapper::worker_id)
            }
            DpRank::Fixed(_) => None,
        };
        if let Some(id) = all_ranks {
            // Queued behind the worker's earlier events, ahead of the rebuild's.
            self.shared.sink.remove_worker(id);
        }
        let source = self.source(key);
        if let Some(mapper) = &source.mapper {
            mapper.forget_mediums();
        }
        let mut workers = std::mem::take(&mut source.workers);
        workers.retain(|w| Some(w.id) != all_ranks);
        workers.extend(fixed);
        let event_id = source.tracker.last().unwrap_or(0);
        let sink = &self.shared.sink;
        let clears = workers.into_iter().map(|w| sink.cleared(w, event_id));
        self.submit(clears.collect());
    }

    /// Decodes one payload and submits its events.
    fn deliver(&mut self, key: &SourceKey, seq: u64, payload: &[u8]) {
        let monitor = Arc::clone(&self.shared.monitor);
        let counters = &monitor.counters;
        let batch = match decode_batch(payload, self.shared.config.engine) {
            Ok(batch) => batch,
            Err(error) => {
                bump(&counters.decode_errors, 1);
                self.problem(error);
                return;
            }
        };
        // Disjoint fields: the sink is only read while the source is written.
        let sink = &self.shared.sink;
        let source = self.sources.entry(key.clone()).or_default();
        let Some(mapper) = &source.mapper else {
            return; // unreachable: a source is given its mapper before its first message
        };
        let mapped = sink.map(mapper, &batch, seq);
        if !mapped.items.is_empty() {
            source.workers.insert(mapper.worker(&batch));
        }
        bump(&counters.unknown_events, batch.unknown_events as u64);
        bump(&counters.filtered_events, mapped.filtered as u64);
        bump(&counters.rejected_events, mapped.rejected.len() as u64);
        if let Some(error) = mapped.rejected.last() {
            self.problem(error);
        }
        self.submit(mapped.items);
        // Counted last: once a batch shows here, its events are in the pool.
        bump(&counters.batches, 1);
    }

    /// Hands events to the sink, waiting in short slices while a pool queue is full so that a
    /// stop request is never held up by a busy pool.
    fn submit(&self, items: Vec<S::Item>) {
        let items = match self.shared.sink.apply_all(items) {
            Ok(verdicts) => {
                for verdict in verdicts {
                    self.count(verdict);
                }
                return;
            }
            Err(items) => items,
        };
        for mut item in items {
            loop {
                match self.shared.sink.offer(item) {
                    Offer::Full(back) => {
                        if self.stopped() {
                            return;
                        }
                        item = back;
                        std::thread::sleep(Duration::from_micros(200));
                        continue;
                    }
                    Offer::Gone(why) => {
                        // Only once the pool's writer thread has died: nothing to do but say so.
                        self.problem(why);
                        return;
                    }
                    verdict => self.count(verdict),
                }
                break;
            }
        }
    }

    /// Counts what became of one event the sink took or refused.
    fn count(&self, verdict: Offer<S::Item>) {
        let counters = &self.shared.monitor.counters;
        match verdict {
            Offer::Taken => bump(&counters.events, 1),
            Offer::Warned(warning) => {
                bump(&counters.events, 1);
                bump(&counters.index_warnings, 1);
                self.problem(warning);
            }
            Offer::Refused(why) => {
                bump(&counters.index_refused, 1);
                self.problem(why);
            }
            Offer::Full(_) | Offer::Gone(_) => {
                debug_assert!(false, "`submit` handles full queues and gone pools itself")
            }
        }
    }
}

fn mapper(endpoint: &EngineEndpoint, config: &SubscriberConfig, worker_id: u64) -> EventMapper {
    EventMapper::new(worker_id, config.map.clone()).with_dp_rank(endpoint.dp_rank)
}
