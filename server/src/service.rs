//! The server's state: one index per model and storage tier, each behind a writer pool, and
//! the engines that feed them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use flash_indexer::hybrid::HybridIndex;
use flash_indexer::ingest::{
    DpRank, EngineEndpoint, IngestStats, MapConfig, Subscriber, SubscriberConfig, Topic,
};
use flash_indexer::pool::{PoolConfig, WriterPool};
use flash_indexer::{
    ArrayIndexer, Indexer, KvIndex, Layout, LocalHash, PositionalIndexer, RadixIndexer, Worker,
};
use serde::Serialize;
use xxhash_rust::xxh3::xxh3_64;

use crate::approximate::Predictions;
use crate::config::{EngineConfig, LayoutChoice, Settings, Tier};
use crate::duplicates::DuplicateStores;
use crate::hybrid::new_hybrid_tier;
use crate::prompt::Prompter;
use crate::routing::TopicRouter;
use crate::snapshot::{Contents, IndexDump};

/// An index the server can run: any layout, with what its metrics need.
pub trait ServedIndex: KvIndex {
    /// Entries of the layout (map entries or tree nodes).
    fn entries(&self) -> usize;
    /// Workers holding at least one block.
    fn worker_count(&self) -> usize;
    /// Stores that changed nothing, where they are counted ([`DuplicateStores`]).
    fn duplicate_stores(&self) -> u64 {
        0
    }
}

impl<L: Layout> ServedIndex for Indexer<L> {
    fn entries(&self) -> usize {
        Indexer::entries(self)
    }
    fn worker_count(&self) -> usize {
        Indexer::worker_count(self)
    }
}

fn new_index(layout: LayoutChoice) -> Arc<dyn ServedIndex> {
    match layout {
        LayoutChoice::Radix => Arc::new(RadixIndexer::default()),
        LayoutChoice::Positional => Arc::new(PositionalIndexer::default()),
        LayoutChoice::Array => Arc::new(ArrayIndexer::default()),
    }
}

/// One storage tier of one model.
pub struct TierIndex {
    /// The tier and its weight.
    pub tier: Tier,
    /// Its index, behind the pool that applies its events.
    pub pool: Arc<WriterPool<dyn ServedIndex>>,
    /// For a model with several KV-cache groups, the same index as its engines' subscribers
    /// apply each event with its group (the pool then applies none).
    pub hybrid: Option<Arc<dyn HybridIndex>>,
    /// Events refused because they came without their group: those of engines whose topics
    /// name a hybrid model ([`TopicRouter`]).
    pub ungrouped: AtomicU64,
}

/// One model: an index per tier, heaviest tier first.
pub struct Model {
    /// As queries and engines name it.
    pub name: String,
    /// Tokens per block, to hash queries given as tokens.
    pub block_size: usize,
    /// Tokens after each block that its engines hash it over too (`lookahead_tokens`).
    pub lookahead: usize,
    /// Its tiers, in the settings' order (heaviest first).
    pub tiers: Vec<TierIndex>,
    /// Its tokenizer, to score prompts, if the configuration names one.
    pub prompter: Option<Arc<Prompter>>,
    /// Approximate mode's routing side, if on (its index is the GPU tier's).
    pub predictions: Option<Arc<Predictions>>,
}

impl Model {
    /// Whether the model has several KV-cache groups (`groups` in its configuration).
    pub fn is_hybrid(&self) -> bool {
        self.tiers.iter().any(|t| t.hybrid.is_some())
    }
}

/// An engine the server follows: one subscriber per tier, each keeping that tier's events.
struct Engine {
    config: EngineConfig,
    subscribers: Vec<(String, Subscriber)>,
    /// Given at startup (health waits for its first connection), or registered later.
    at_startup: bool,
}

/// One worker's answer to a query.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkerScore {
    /// The worker id.
    pub worker: u64,
    /// Its data-parallel rank.
    pub dp_rank: u32,
    /// Blocks of the request it holds as a prefix on its best tier for each position: the
    /// largest of its tier depths.
    pub depth: u32,
    /// Its matched depth on each tier that reaches deeper than the heavier tiers, counting the
    /// blocks before it that heavier tiers hold.
    pub tiers: BTreeMap<String, u32>,
    /// Each matched block weighed by the heaviest tier holding it.
    pub score: f64,
}

/// The answer to a query.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueryAnswer {
    /// The model asked.
    pub model: String,
    /// Blocks in the request.
    pub blocks: usize,
    /// Workers holding a prefix of it, best score first.
    pub workers: Vec<WorkerScore>,
}

/// The server's state. Cheap to share (`Arc<Service>`).
pub struct Service {
    settings: Settings,
    models: RwLock<BTreeMap<String, Arc<Model>>>,
    engines: Mutex<BTreeMap<String, Engine>>,
    /// Pods named in topics, by the worker id they were given, with the model the topic named.
    pods: Arc<Mutex<BTreeMap<u64, TopicPod>>>,
    restored: AtomicBool,
    ready: AtomicBool,
    /// Some engine published an event of a tier lighter than the heaviest: until then the
    /// lighter tiers' indexes hold copies of the heaviest one's blocks, and queries skip them.
    lighter_tiers: AtomicBool,
    /// When the index was last saved to (or restored from) a snapshot, in ms since the epoch.
    snapshot_at: Mutex<Option<u64>>,
}

/// Why a request's model could not be chosen; each with the server's model names.
#[derive(Debug)]
pub enum ModelChoiceError {
    /// The named model is not served.
    Unknown(String, Vec<String>),
    /// No model named, and the server has more than one (or none).
    Unnamed(Vec<String>),
}

impl std::fmt::Display for ModelChoiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelChoiceError::Unknown(name, models) => {
                write!(f, "unknown model {name:?}; models: {models:?}")
            }
            ModelChoiceError::Unnamed(models) => write!(f, "name the model: one of {models:?}"),
        }
    }
}

/// Why an engine could not be added.
#[derive(Debug)]
pub enum EngineError {
    /// An engine with that id (or event address) is already followed.
    Exists(String),
    /// The engine is not usable as given.
    Invalid(String),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Exists(key) => write!(f, "engine {key} is already registered"),
            EngineError::Invalid(why) => f.write_str(why),
        }
    }
}

/// A pod named in message topics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TopicPod {
    /// Its name.
    pub pod: String,
    /// The model its topic named.
    pub model: String,
}

/// The worker id of a pod named in message topics: the same in every replica and across
/// restarts, so that replicas answer alike and snapshots stay valid.
pub fn pod_worker_id(pod: &str) -> u64 {
    xxh3_64(pod.as_bytes())
}

/// Milliseconds since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Service {
    /// A service with the settings' models (and their engines' models), no engine started yet.
    pub fn new(settings: Settings) -> Arc<Service> {
        let service = Arc::new(Service {
            settings,
            models: RwLock::default(),
            engines: Mutex::default(),
            pods: Arc::default(),
            restored: AtomicBool::new(false),
            ready: AtomicBool::new(false),
            lighter_tiers: AtomicBool::new(false),
            snapshot_at: Mutex::new(None),
        });
        let names: Vec<String> = service
            .settings
            .models
            .keys()
            .cloned()
            .chain(
                (service.settings.engines.iter())
                    .filter_map(|e| e.fixed_model().map(str::to_owned)),
            )
            .chain(service.settings.approximate.iter().map(|a| a.model.clone()))
            .collect();
        for name in names {
            service.model_or_create(&name);
        }
        service
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The model called `name`, if the server has it.
    pub fn model(&self, name: &str) -> Option<Arc<Model>> {
        self.models.read().unwrap().get(name).cloned()
    }

    /// The model a request names, or the only one when it names none (`None`, or an empty
    /// name): `Err` with the server's model names when there is no such model or no only one.
    pub fn pick_model(&self, name: Option<&str>) -> Result<Arc<Model>, ModelChoiceError> {
        let names = || self.models.read().unwrap().keys().cloned().collect();
        match name.filter(|n| !n.is_empty()) {
            Some(name) => self
                .model(name)
                .ok_or_else(|| ModelChoiceError::Unknown(name.to_owned(), names())),
            None => match self.models().as_slice() {
                [only] => Ok(Arc::clone(only)),
                _ => Err(ModelChoiceError::Unnamed(names())),
            },
        }
    }

    /// Every model, by name.
    pub fn models(&self) -> Vec<Arc<Model>> {
        self.models.read().unwrap().values().cloned().collect()
    }

    /// The model called `name`, created empty if it is new.
    pub fn model_or_create(&self, name: &str) -> Arc<Model> {
        self.model_or_create_sized(name, None)
    }

    /// The model called `name`, created empty with `block_size` (or the configured one) if it
    /// is new.
    pub fn model_or_create_sized(&self, name: &str, block_size: Option<usize>) -> Arc<Model> {
        if let Some(model) = self.model(name) {
            return model;
        }
        let mut models = self.models.write().unwrap();
        models
            .entry(name.to_owned())
            .or_insert_with(|| {
                let mut predictions = None;
                let groups = self.settings.groups.get(name);
                let tiers = (self.settings.tiers.iter().enumerate())
                    .map(|(t, tier)| {
                        if let Some(groups) = groups {
                            let (index, hybrid) = new_hybrid_tier(self.settings.layout, groups);
                            return TierIndex {
                                tier: tier.clone(),
                                pool: Arc::new(WriterPool::new(index, PoolConfig::default())),
                                hybrid: Some(hybrid),
                                ungrouped: AtomicU64::new(0),
                            };
                        }
                        let mut index = new_index(self.settings.layout);
                        if t == 0 {
                            index = Arc::new(DuplicateStores::new(index));
                            if let Some(approximate) = &self.settings.approximate {
                                let p = Arc::new(Predictions::new(index, approximate, name));
                                index = p.index.clone();
                                predictions = Some(p);
                            }
                        }
                        TierIndex {
                            tier: tier.clone(),
                            pool: Arc::new(WriterPool::new(index, PoolConfig::default())),
                            hybrid: None,
                            ungrouped: AtomicU64::new(0),
                        }
                    })
                    .collect();
                Arc::new(Model {
                    name: name.to_owned(),
                    block_size: block_size.unwrap_or_else(|| self.settings.block_size(name)),
                    lookahead: self.settings.lookahead(name),
                    tiers,
                    prompter: self.settings.prompters.get(name).cloned(),
                    predictions,
                })
            })
            .clone()
    }

    /// Drops the model called `name` if nothing uses it: not in the settings, followed by no
    /// engine, and every index empty once what is queued is applied. Its queries then answer
    /// 404 again (Dynamo drops a routing partition when its last instance leaves).
    pub fn remove_model_if_unused(&self, name: &str) -> bool {
        if self.settings.models.contains_key(name)
            || (self.engines.lock().unwrap().values()).any(|e| e.config.fixed_model() == Some(name))
        {
            return false;
        }
        let mut models = self.models.write().unwrap();
        let Some(model) = models.get(name) else {
            return false;
        };
        let empty = model.tiers.iter().all(|t| {
            t.pool.flush();
            t.pool.index().worker_count() == 0
        });
        if empty {
            models.remove(name);
        }
        empty
    }

    /// Rebuilds the indexes from a snapshot (before any engine is followed). Returns the events
    /// applied and those the index refused (none, from a snapshot this server wrote); indexes
    /// of tiers this server does not keep are skipped.
    pub fn restore(&self, contents: &Contents) -> (usize, usize) {
        let (mut applied, mut refused) = (0, 0);
        for dump in &contents.indexes {
            let model = self.model_or_create(&dump.model);
            let Some(tier) = model.tiers.iter().find(|t| t.tier.name == dump.tier) else {
                tracing::warn!(tier = %dump.tier, model = %dump.model, "snapshot tier not kept by this server: skipped");
                continue;
            };
            // A model that gained or lost its groups since: its index is rebuilt from the engines.
            let fits = match &tier.hybrid {
                Some(_) => dump.groups.len() == dump.events.len(),
                None => dump.groups.is_empty(),
            };
            if !fits {
                tracing::warn!(tier = %dump.tier, model = %dump.model, "snapshot index kept other KV-cache groups than its model has: skipped");
                continue;
            }
            let index = tier.pool.index();
            for (at, event) in dump.events.iter().enumerate() {
                let result = match &tier.hybrid {
                    Some(hybrid) => hybrid.apply(dump.groups[at], event),
                    None => index.apply(event),
                };
                match result {
                    Ok(()) => applied += 1,
                    Err(_) => refused += 1,
                }
            }
        }
        // A lighter tier that holds a block the heaviest does not was in use.
        let heaviest: std::collections::HashSet<(String, Worker, flash_indexer::SeqHash)> =
            (contents.indexes.iter())
                .filter(|d| {
                    self.settings
                        .tiers
                        .first()
                        .is_some_and(|t| t.name == d.tier)
                })
                .flat_map(|d| d.events.iter().map(move |e| (d, e)))
                .flat_map(|(d, e)| stored_seqs(e).map(move |seq| (d.model.clone(), e.worker, seq)))
                .collect();
        let lighter_used = (contents.indexes.iter())
            .filter(|d| {
                self.settings
                    .tiers
                    .first()
                    .is_some_and(|t| t.name != d.tier)
            })
            .any(|d| {
                (d.events.iter()).any(|e| {
                    stored_seqs(e).any(|seq| !heaviest.contains(&(d.model.clone(), e.worker, seq)))
                })
            });
        if lighter_used {
            self.lighter_tiers.store(true, Ordering::Relaxed);
        }
        *self.snapshot_at.lock().unwrap() = Some(contents.taken_unix_ms);
        (applied, refused)
    }

    /// Says that restoring is over (done, failed, or there was nothing to restore).
    pub fn mark_restored(&self) {
        self.restored.store(true, Ordering::Release);
    }

    /// The whole index, once every event queued so far is applied.
    pub fn dump(&self) -> Contents {
        let mut indexes = Vec::new();
        for model in self.models() {
            for tier in &model.tiers {
                tier.pool.flush();
                let (events, groups) = match &tier.hybrid {
                    Some(hybrid) => hybrid.dump().into_iter().map(|(g, e)| (e, g)).unzip(),
                    None => (tier.pool.index().dump(), Vec::new()),
                };
                indexes.push(IndexDump {
                    model: model.name.clone(),
                    tier: tier.tier.name.clone(),
                    events,
                    groups,
                });
            }
        }
        Contents {
            taken_unix_ms: now_unix_ms(),
            indexes,
        }
    }

    /// Records a snapshot written at `taken_unix_ms`.
    pub fn snapshot_written(&self, taken_unix_ms: u64) {
        *self.snapshot_at.lock().unwrap() = Some(taken_unix_ms);
    }

    /// When the last snapshot was written or restored, in ms since the epoch.
    pub fn snapshot_at(&self) -> Option<u64> {
        *self.snapshot_at.lock().unwrap()
    }

    /// Starts following `config`'s engine: one subscriber per tier, each indexing that tier's
    /// events into the engine's model. Sockets come up in the background.
    pub fn add_engine(
        self: &Arc<Self>,
        config: EngineConfig,
        at_startup: bool,
    ) -> Result<(), EngineError> {
        let dp_rank = config.dp_rank.map_or(DpRank::FromBatch, DpRank::Fixed);
        self.add_engine_ranked(config, at_startup, dp_rank)
    }

    /// [`add_engine`](Self::add_engine), its events ranked by `dp_rank` (the engine's own
    /// `dp_rank` then only keys it).
    pub fn add_engine_ranked(
        self: &Arc<Self>,
        config: EngineConfig,
        at_startup: bool,
        dp_rank: DpRank,
    ) -> Result<(), EngineError> {
        config
            .check()
            .map_err(|e| EngineError::Invalid(e.to_string()))?;
        let key = config.key();
        let mut engines = self.engines.lock().unwrap();
        if engines.contains_key(&key) {
            return Err(EngineError::Exists(key));
        }
        let model = config.fixed_model().map(|name| self.model_or_create(name));
        let mut endpoint = EngineEndpoint::new(config.events.clone());
        if let Some(replay) = &config.replay {
            endpoint = endpoint.with_replay(replay.clone());
        }
        if let Some(id) = config.worker {
            endpoint = endpoint.with_worker(id);
        }
        endpoint.dp_rank = dp_rank;
        let mut subscribers = Vec::with_capacity(self.settings.tiers.len());
        for (t, tier) in self.settings.tiers.iter().enumerate() {
            // Tier `t`'s index holds what this tier and every heavier one hold: a block counts
            // on a tier when the chain up to it is there or heavier (as Dynamo counts tiers).
            let subscriber_config = SubscriberConfig {
                map: MapConfig {
                    mediums: (self.settings.tiers[..=t].iter())
                        .flat_map(Tier::mediums)
                        .collect(),
                    ..MapConfig::default()
                },
                ..SubscriberConfig::default()
            };
            let endpoints = [endpoint.clone()];
            let by_topic = config.worker.is_none();
            let hybrid = model.as_ref().and_then(|m| m.tiers[t].hybrid.clone());
            let started = if let Some(hybrid) = hybrid {
                // A hybrid model's subscribers apply each event to the index with its group.
                if by_topic {
                    let resolver = self.topic_resolver();
                    Subscriber::spawn_hybrid_with_resolver(
                        hybrid,
                        endpoints,
                        resolver,
                        subscriber_config,
                    )
                } else {
                    Subscriber::spawn_hybrid(hybrid, endpoints, subscriber_config)
                }
            } else {
                let pool = match &model {
                    Some(model) => Arc::clone(&model.tiers[t].pool),
                    None => {
                        let router: Arc<dyn ServedIndex> = Arc::new(TopicRouter::new(self, t));
                        let one_writer = PoolConfig {
                            threads: 1,
                            ..PoolConfig::default()
                        };
                        Arc::new(WriterPool::new(router, one_writer))
                    }
                };
                if by_topic {
                    let resolver = self.topic_resolver();
                    Subscriber::spawn_with_resolver(pool, endpoints, resolver, subscriber_config)
                } else {
                    Subscriber::spawn(pool, endpoints, subscriber_config)
                }
            };
            match started {
                Ok(subscriber) => subscribers.push((tier.name.clone(), subscriber)),
                Err(error) => {
                    // Those already started stop as they drop.
                    return Err(EngineError::Invalid(error.to_string()));
                }
            }
        }
        engines.insert(
            key,
            Engine {
                config,
                subscribers,
                at_startup,
            },
        );
        Ok(())
    }

    /// Names each message's worker after its topic's pod, recording the pod and its model.
    fn topic_resolver(&self) -> impl Fn(&Topic<'_>) -> Option<u64> + Send + Sync + 'static {
        let pods = Arc::clone(&self.pods);
        move |topic: &Topic<'_>| {
            let id = pod_worker_id(topic.pod);
            pods.lock().unwrap().entry(id).or_insert_with(|| TopicPod {
                pod: topic.pod.to_owned(),
                model: topic.model.to_owned(),
            });
            Some(id)
        }
    }

    /// Stops following the engine of worker `id` (if one is registered) and drops every block
    /// of worker `id`, all ranks, from every index. `false` when the server knew neither an
    /// engine nor a topic pod with that id. Blocks for up to about 50 ms per tier while the
    /// engine's threads stop.
    pub fn remove_worker(&self, id: u64) -> bool {
        let engines: Vec<Engine> = {
            let mut engines = self.engines.lock().unwrap();
            let keys: Vec<String> = (engines.iter())
                .filter(|(_, e)| e.config.worker == Some(id))
                .map(|(key, _)| key.clone())
                .collect();
            keys.iter().filter_map(|key| engines.remove(key)).collect()
        };
        let known_pod = self.pods.lock().unwrap().remove(&id).is_some();
        let found = !engines.is_empty() || known_pod;
        for engine in engines {
            for (_, subscriber) in engine.subscribers {
                subscriber.shutdown();
            }
        }
        for model in self.models() {
            for tier in &model.tiers {
                tier.pool.remove_worker(id);
            }
        }
        found
    }

    /// Stops following the engine known as `key` ([`EngineConfig::key`]), leaving its blocks
    /// in the indexes. `false` when no engine has that key.
    pub fn stop_engine(&self, key: &str) -> bool {
        let Some(engine) = self.engines.lock().unwrap().remove(key) else {
            return false;
        };
        for (_, subscriber) in engine.subscribers {
            subscriber.shutdown();
        }
        true
    }

    /// Drops every block of `worker` (that id and rank) from every index.
    pub fn remove_worker_dp_rank(&self, worker: Worker) {
        for model in self.models() {
            for tier in &model.tiers {
                tier.pool.remove_worker_dp_rank(worker);
            }
        }
    }

    /// The tiers of `model` a query asks: all of them once some engine has published on a
    /// lighter tier than the heaviest, else the heaviest alone (the others hold copies of it).
    pub fn queried_tiers<'m>(&self, model: &'m Model) -> &'m [TierIndex] {
        if self.lighter_tiers.load(Ordering::Relaxed) {
            &model.tiers
        } else {
            &model.tiers[..1]
        }
    }

    /// Looks whether an engine has published on a lighter tier yet (its heaviest tier's
    /// subscription filtered an event out), and says whether one has. Called periodically;
    /// once true, stays true.
    pub fn observe_lighter_tiers(&self) -> bool {
        if self.lighter_tiers.load(Ordering::Relaxed) {
            return true;
        }
        let seen = (self.engines.lock().unwrap().values()).any(|e| {
            e.subscribers
                .first()
                .is_some_and(|(_, s)| s.stats().filtered_events > 0)
        });
        if seen {
            self.lighter_tiers.store(true, Ordering::Relaxed);
        }
        seen
    }

    /// `model`'s matches for `query`: each worker's depth per tier, scored across tiers.
    pub fn query(&self, model: &Model, query: &[LocalHash]) -> QueryAnswer {
        if let Some(predictions) = &model.predictions {
            predictions.sync();
        }
        let mut by_worker: BTreeMap<Worker, Vec<u32>> = BTreeMap::new();
        let tiers = model.tiers.len();
        for (t, tier) in self.queried_tiers(model).iter().enumerate() {
            for (worker, depth) in tier.pool.find_matches(query).iter() {
                by_worker.entry(worker).or_insert_with(|| vec![0; tiers])[t] = depth;
            }
        }
        // A tier's depth counts what heavier tiers hold (an index restored from an older
        // snapshot may hold its own tier's chains only).
        for depths in by_worker.values_mut() {
            for t in 1..depths.len() {
                depths[t] = depths[t].max(depths[t - 1]);
            }
        }
        let mut workers: Vec<WorkerScore> = by_worker
            .into_iter()
            .map(|(worker, depths)| {
                let (mut score, mut covered) = (0.0, 0);
                for (tier, &depth) in model.tiers.iter().zip(&depths) {
                    // Tiers are heaviest first: each block counts on the heaviest tier holding it.
                    if depth > covered {
                        score += f64::from(depth - covered) * tier.tier.weight;
                        covered = depth;
                    }
                }
                WorkerScore {
                    worker: worker.id,
                    dp_rank: worker.dp_rank,
                    depth: covered,
                    tiers: (model.tiers.iter().enumerate())
                        .filter(|&(t, _)| depths[t] > t.checked_sub(1).map_or(0, |u| depths[u]))
                        .map(|(t, tier)| (tier.tier.name.clone(), depths[t]))
                        .collect(),
                    score,
                }
            })
            .collect();
        workers.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then(b.depth.cmp(&a.depth))
                .then((a.worker, a.dp_rank).cmp(&(b.worker, b.dp_rank)))
        });
        QueryAnswer {
            model: model.name.clone(),
            blocks: query.len(),
            workers,
        }
    }

    /// Ready: restoring is over and every engine given at startup has connected once. Stays
    /// ready after that. Otherwise, what it waits for.
    pub fn health(&self) -> Result<(), Vec<String>> {
        if self.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut waiting = Vec::new();
        if !self.restored.load(Ordering::Acquire) {
            waiting.push("restore".to_owned());
        }
        for (key, engine) in self.engines.lock().unwrap().iter() {
            let connected = engine
                .subscribers
                .iter()
                .all(|(_, s)| s.stats().connected > 0);
            if engine.at_startup && !connected {
                waiting.push(format!("engine {key}"));
            }
        }
        if waiting.is_empty() {
            self.ready.store(true, Ordering::Release);
            Ok(())
        } else {
            Err(waiting)
        }
    }

    /// The engines followed, with each tier's ingest counters and last problem.
    pub fn engines(&self) -> Vec<EngineStatus> {
        self.engines
            .lock()
            .unwrap()
            .iter()
            .map(|(key, engine)| EngineStatus {
                key: key.clone(),
                config: engine.config.clone(),
                tiers: engine
                    .subscribers
                    .iter()
                    .map(|(tier, s)| TierIngest {
                        tier: tier.clone(),
                        stats: s.stats(),
                        last_problem: s.last_problem(),
                    })
                    .collect(),
            })
            .collect()
    }

    /// Pods named in topics, by worker id.
    pub fn pods(&self) -> BTreeMap<u64, TopicPod> {
        self.pods.lock().unwrap().clone()
    }

    /// Pod names and their worker ids: the pods named in topics, and the `pod` of each engine
    /// configured with a worker id (which wins over a topic pod of the same name).
    pub fn pod_names(&self) -> BTreeMap<String, u64> {
        let mut names: BTreeMap<String, u64> = (self.pods.lock().unwrap().iter())
            .map(|(&id, pod)| (pod.pod.clone(), id))
            .collect();
        for engine in self.engines.lock().unwrap().values() {
            if let (Some(pod), Some(id)) = (&engine.config.pod, engine.config.worker) {
                names.insert(pod.clone(), id);
            }
        }
        names
    }

    /// The model the topic of worker `id` named, if a topic named it.
    pub fn topic_model(&self, id: u64) -> Option<String> {
        self.pods.lock().unwrap().get(&id).map(|p| p.model.clone())
    }

    /// Stops every engine (on shutdown, before the last snapshot).
    pub fn stop_engines(&self) {
        let engines = std::mem::take(&mut *self.engines.lock().unwrap());
        for (_, engine) in engines {
            for (_, subscriber) in engine.subscribers {
                subscriber.shutdown();
            }
        }
    }
}

/// The blocks a stored event stores.
fn stored_seqs(event: &flash_indexer::Event) -> impl Iterator<Item = flash_indexer::SeqHash> + '_ {
    let blocks: &[flash_indexer::Block] = match &event.kind {
        flash_indexer::EventKind::Stored { blocks, .. } => blocks,
        _ => &[],
    };
    blocks.iter().map(|b| b.seq)
}

/// An engine as `GET /workers` and the metrics see it.
#[derive(Debug)]
pub struct EngineStatus {
    /// Its id (or event address).
    pub key: String,
    /// How it was configured.
    pub config: EngineConfig,
    /// Ingest per tier.
    pub tiers: Vec<TierIngest>,
}

/// One tier's subscription to one engine.
#[derive(Debug)]
pub struct TierIngest {
    /// The tier.
    pub tier: String,
    /// Its counters.
    pub stats: IngestStats,
    /// The last problem seen.
    pub last_problem: Option<String>,
}
