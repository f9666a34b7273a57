//! What the server is told: the command line, the TOML file it may name, and the settings the
//! two make together (the command line wins where both say something).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde::Deserialize;

use flash_indexer::hybrid::{GroupKind, GroupSpec, ModelGroups};

use crate::prompt::{DEFAULT_PREFIX_STORE_BYTES, Prompter};

/// The model of engines and queries that name none.
pub const DEFAULT_MODEL: &str = "default";

/// The block size of models the configuration does not describe (vLLM's default).
pub const DEFAULT_BLOCK_SIZE: usize = 16;

/// Storage tiers and their weights when the configuration names none: a block on the GPU counts
/// fully; one offloaded to host memory 0.75 and one on disk 0.25, Dynamo's weights (llm-d
/// weighs CPU 0.8).
pub const DEFAULT_TIERS: [(&str, f64); 3] = [("GPU", 1.0), ("CPU", 0.75), ("DISK", 0.25)];

/// The largest request body accepted by default: room for a query of a million tokens.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 16 << 20;

/// The index layouts the server can run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LayoutChoice {
    /// The compressed radix tree: the fastest layout on every measured workload.
    #[default]
    Radix,
    /// The concurrent positional map, searched by jumps.
    Positional,
    /// Fixed-depth position arrays, searched by jumps.
    Array,
}

/// How approximate mode keeps its predictions (`--approximate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ApproximateChoice {
    /// Predictions live `--ttl-secs` after their last routing (default 120, Dynamo's).
    Ttl,
    /// An LRU model of `--capacity-blocks` per worker, running requests pinned until released.
    Lru,
}

/// Approximate mode: each model's GPU tier also predicts the caches of workers that publish no
/// events, from the routing decisions posted to `POST /route`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApproximateSettings {
    /// How predictions are kept.
    pub retention: flash_indexer::Retention,
    /// The Redis (or Valkey) server whose streams replicas share decisions through, if any.
    pub share: Option<String>,
    /// The model `--model` names (`default` without it), created at startup beside the
    /// configuration's models: routers post decisions for models the server has.
    pub model: String,
}

impl fmt::Display for LayoutChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LayoutChoice::Radix => "radix",
            LayoutChoice::Positional => "positional",
            LayoutChoice::Array => "array",
        })
    }
}

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "flash-indexer-server",
    version,
    about = "Serves flash-indexer over HTTP: subscribes to engines' KV events, answers prefix-match queries."
)]
pub struct Cli {
    /// Address to serve HTTP on [default: 127.0.0.1:8080].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Also serve Dynamo's standalone-indexer API on this address (see the README) [default:
    /// not served].
    #[arg(long, value_name = "ADDR")]
    pub dynamo_listen: Option<SocketAddr>,
    /// Also serve llm-d's `indexer.v1.IndexerService` (`GetPodScores`) over gRPC on this
    /// address [default: not served].
    #[arg(long, value_name = "ADDR")]
    pub grpc_listen: Option<SocketAddr>,
    /// Directory of the index snapshot: restored at startup, written periodically and on shutdown.
    #[arg(long, value_name = "DIR")]
    pub snapshot_dir: Option<PathBuf>,
    /// Seconds between two periodic snapshots [default: 60].
    #[arg(long, value_name = "SECS")]
    pub snapshot_interval: Option<u64>,
    /// An engine to subscribe to: `[ID=]EVENTS[+REPLAY]`, e.g. `3=tcp://10.0.0.5:5557+tcp://10.0.0.5:5558`.
    /// Without an id, workers are named after the pod of each message's topic (`kv@POD@MODEL`).
    /// Repeatable.
    #[arg(long = "engine", value_name = "[ID=]EVENTS[+REPLAY]")]
    pub engines: Vec<String>,
    /// The model of the `--engine`s given on the command line [default: the topic's model for
    /// engines without an id, else `default`].
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// Block size of models the configuration does not describe [default: 16].
    #[arg(long, value_name = "TOKENS")]
    pub block_size: Option<usize>,
    /// A TOML file with more settings (models, tiers, engines); see the crate's README.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A running replica to bootstrap the index from (its `GET /dump`), e.g. `http://10.0.0.7:8080`.
    #[arg(long, value_name = "URL")]
    pub peer: Option<String>,
    /// The index layout [default: radix].
    #[arg(long, value_enum)]
    pub layout: Option<LayoutChoice>,
    /// The largest request body accepted, in bytes [default: 16 MiB].
    #[arg(long, value_name = "BYTES")]
    pub max_request_bytes: Option<usize>,
    /// Threads that serve requests (HTTP, Dynamo's API, gRPC) [default: one less than the
    /// machine's cores, at least 1, so that the engines' event threads keep a core].
    #[arg(long, value_name = "N")]
    pub http_threads: Option<usize>,
    /// Approximate mode: predict the caches of workers without events from `POST /route`
    /// decisions, by a time to live or an LRU model of each worker's capacity [default: off].
    #[arg(long, value_enum)]
    pub approximate: Option<ApproximateChoice>,
    /// Approximate mode: seconds a prediction lives after its last routing [default: 120 for
    /// `ttl`, none for `lru`].
    #[arg(long, value_name = "SECS")]
    pub ttl_secs: Option<u64>,
    /// Approximate mode: KV blocks per worker (needed by `lru`; a bound for `ttl`).
    #[arg(long, value_name = "BLOCKS")]
    pub capacity_blocks: Option<usize>,
    /// Approximate mode: share routing decisions with the other replicas through this Redis or
    /// Valkey server (`redis://host:port/`), one stream per model [default: not shared].
    #[arg(long, value_name = "URL")]
    pub share: Option<String>,
}

/// The TOML configuration file. Every field is optional.
///
/// ```toml
/// listen = "0.0.0.0:8080"
/// dynamo_listen = "0.0.0.0:8090"
/// grpc_listen = "0.0.0.0:50051"
/// snapshot_dir = "/var/lib/flash-indexer"
/// snapshot_interval_secs = 60
/// layout = "radix"
///
/// [tiers]            # weight of a block held on each storage tier
/// GPU = 1.0
/// CPU = 0.8
///
/// [[models]]
/// name = "Qwen/Qwen3-8B"
/// block_size = 16
/// tokenizer = "/models/Qwen3-8B"   # its tokenizer.json (and tokenizer_config.json)
///
/// [[models]]                       # a hybrid model: its KV-cache groups by `group_idx`
/// name = "openai/gpt-oss-20b"
/// block_size = 16
/// groups = [{ kind = "full_attention" }, { kind = "sliding_window", window = 128 }]
///
/// [[engines]]
/// events = "tcp://10.0.0.5:5557"
/// replay = "tcp://10.0.0.5:5558"
/// worker = 5
/// pod = "qwen-0"
/// model = "Qwen/Qwen3-8B"
/// ```
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// As `--listen`.
    pub listen: Option<SocketAddr>,
    /// As `--dynamo-listen`.
    pub dynamo_listen: Option<SocketAddr>,
    /// As `--grpc-listen`.
    pub grpc_listen: Option<SocketAddr>,
    /// As `--snapshot-dir`.
    pub snapshot_dir: Option<PathBuf>,
    /// As `--snapshot-interval`.
    pub snapshot_interval_secs: Option<u64>,
    /// As `--layout`.
    pub layout: Option<LayoutChoice>,
    /// As `--peer`.
    pub peer: Option<String>,
    /// As `--max-request-bytes`.
    pub max_request_bytes: Option<usize>,
    /// As `--http-threads`.
    pub http_threads: Option<usize>,
    /// As `--block-size`.
    pub block_size: Option<usize>,
    /// Storage tiers to index and their weights (replacing the defaults).
    pub tiers: Option<BTreeMap<String, f64>>,
    /// Models and their block sizes.
    #[serde(default)]
    pub models: Vec<ModelConfig>,
    /// Engines to subscribe to.
    #[serde(default)]
    pub engines: Vec<EngineConfig>,
}

/// A model of the configuration file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The model's name, as queries and engines give it.
    pub name: String,
    /// Tokens per KV block, to hash queries given as tokens.
    pub block_size: usize,
    /// The model's Hugging Face tokenizer, to score prompts: a `tokenizer.json`, or the
    /// directory holding it (its `tokenizer_config.json` gives the chat template).
    #[serde(default)]
    pub tokenizer: Option<PathBuf>,
    /// Bytes of tokenized prompt prefixes kept for the model [default: 64 MiB].
    #[serde(default)]
    pub prefix_store_bytes: Option<usize>,
    /// The model's KV-cache groups, in vLLM's `group_idx` order, each of `block_size` tokens
    /// (`{ kind = "full_attention" }`, `{ kind = "sliding_window", window = TOKENS }`,
    /// `{ kind = "chunked_local", chunk = TOKENS }`, `{ kind = "mamba" }`) [default: one
    /// full-attention group, every event merged into it].
    #[serde(default)]
    pub groups: Vec<GroupKind>,
    /// Tokens after each block that the model's engines hash it over too (vLLM's
    /// `num_hash_lookahead_tokens`: 1 with an EAGLE drafter, the speculative tokens with MTP;
    /// at most 64) [default: 0]. Queries given as tokens are hashed the same way.
    #[serde(default)]
    pub lookahead_tokens: usize,
}

/// An engine: where its events come from, which worker and model they belong to. The body of
/// `POST /workers` too.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// The engine's event socket, `tcp://HOST:PORT` or `ipc://PATH`.
    pub events: String,
    /// The engine's replay socket, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<String>,
    /// The worker id of its events; without one, workers are named after the topic's pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<u64>,
    /// A fixed data-parallel rank, for engines that publish each rank on its own socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dp_rank: Option<u32>,
    /// The pod name prompt scores give the worker (llm-d's pod identifier). Without one, a
    /// worker is named after its topic's pod, else by its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The model its events are indexed under. Without one: the model named in each message's
    /// topic (`kv@POD@MODEL`) when the worker comes from the topic too, else `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl EngineConfig {
    /// Parses the command line's `[ID=]EVENTS[+REPLAY]`.
    ///
    /// ```
    /// use flash_indexer_server::config::EngineConfig;
    ///
    /// let e = EngineConfig::parse("3=tcp://h:5557+tcp://h:5558", Some("m")).unwrap();
    /// assert_eq!((e.worker, e.events.as_str(), e.replay.as_deref()), (Some(3), "tcp://h:5557", Some("tcp://h:5558")));
    /// assert!(EngineConfig::parse("x=tcp://h:1", None).is_err());
    /// ```
    pub fn parse(spec: &str, model: Option<&str>) -> Result<EngineConfig, ConfigError> {
        let bad = |reason: &str| ConfigError::Engine {
            spec: spec.to_owned(),
            reason: reason.to_owned(),
        };
        let (worker, rest) = match spec.split_once('=') {
            Some((id, rest)) if !id.contains("://") => {
                let id = id
                    .parse::<u64>()
                    .map_err(|_| bad("the worker id before '=' is not a number"))?;
                (Some(id), rest)
            }
            _ => (None, spec),
        };
        let (events, replay) = match rest.split_once('+') {
            Some((events, replay)) => (events, Some(replay.to_owned())),
            None => (rest, None),
        };
        let engine = EngineConfig {
            events: events.to_owned(),
            replay,
            worker,
            dp_rank: None,
            pod: None,
            model: model.map(str::to_owned),
        };
        engine.check()?;
        Ok(engine)
    }

    /// What can be checked before any socket exists.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |reason: String| ConfigError::Engine {
            spec: self.events.clone(),
            reason,
        };
        for address in std::iter::once(&self.events).chain(&self.replay) {
            let rest = address
                .strip_prefix("tcp://")
                .or_else(|| address.strip_prefix("ipc://"))
                .ok_or_else(|| bad(format!("{address:?} is not tcp://HOST:PORT or ipc://PATH")))?;
            if rest.is_empty() {
                return Err(bad(format!("{address:?} has nothing after the scheme")));
            }
        }
        if self.model.as_deref() == Some("") {
            return Err(bad("the model name is empty".to_owned()));
        }
        match (&self.pod, self.worker) {
            (Some(pod), _) if pod.is_empty() => {
                return Err(bad("the pod name is empty".to_owned()));
            }
            (Some(_), None) => {
                return Err(bad(
                    "a pod name needs a worker id (without one, each topic's pod names the worker)"
                        .to_owned(),
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// The model every event of this engine goes to; `None` when each message's topic names it.
    pub fn fixed_model(&self) -> Option<&str> {
        match (&self.model, self.worker) {
            (Some(model), _) => Some(model),
            (None, Some(_)) => Some(DEFAULT_MODEL),
            (None, None) => None,
        }
    }

    /// The name the server knows the engine by: its worker id (`ID:RANK` with a fixed rank), or
    /// its event address when workers come from topics.
    pub fn key(&self) -> String {
        match (self.worker, self.dp_rank) {
            (Some(id), None) => id.to_string(),
            (Some(id), Some(rank)) => format!("{id}:{rank}"),
            (None, _) => self.events.clone(),
        }
    }
}

/// A storage tier and the weight of a block held there.
#[derive(Clone, Debug, PartialEq)]
pub struct Tier {
    /// Upper-case name, as engines' `medium` field gives it (compared case-insensitively).
    pub name: String,
    /// Weight of a block held on this tier in a query's score.
    pub weight: f64,
}

/// The `medium`s engines publish for the same tier as Dynamo's router reads them
/// (`StorageTier::from_kv_medium`): a tier named by one of a row is every name of that row.
pub const MEDIUM_ALIASES: [&[&str]; 4] = [
    &["GPU", "DEVICE"],
    &["CPU", "CPU_PINNED", "CPU_TIER1"],
    &["DISK", "CPU_TIER2", "NVME", "STORAGE"],
    &["EXTERNAL", "NETWORK", "REMOTE", "SHARED"],
];

impl Tier {
    /// The mediums whose events this tier indexes: its name and the names Dynamo reads as the
    /// same tier.
    pub fn mediums(&self) -> Vec<String> {
        MEDIUM_ALIASES
            .iter()
            .find(|row| row.iter().any(|m| m.eq_ignore_ascii_case(&self.name)))
            .map_or_else(
                || vec![self.name.clone()],
                |row| row.iter().map(|m| (*m).to_owned()).collect(),
            )
    }
}

/// Everything the server runs with.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Where HTTP is served.
    pub listen: SocketAddr,
    /// Where Dynamo's standalone-indexer API is served, if anywhere.
    pub dynamo_listen: Option<SocketAddr>,
    /// Where llm-d's gRPC indexer service is served, if anywhere.
    pub grpc_listen: Option<SocketAddr>,
    /// Where snapshots live, if anywhere.
    pub snapshot_dir: Option<PathBuf>,
    /// Time between periodic snapshots.
    pub snapshot_interval: Duration,
    /// The replica to bootstrap from.
    pub peer: Option<String>,
    /// The index layout.
    pub layout: LayoutChoice,
    /// The largest request body accepted.
    pub max_request_bytes: usize,
    /// Threads of the runtime that serves requests.
    pub http_threads: usize,
    /// Block size of models not listed in `models`.
    pub default_block_size: usize,
    /// Tiers, heaviest first.
    pub tiers: Vec<Tier>,
    /// Block size per model.
    pub models: BTreeMap<String, usize>,
    /// The KV-cache groups of the hybrid models (more than one group).
    pub groups: BTreeMap<String, ModelGroups>,
    /// Lookahead tokens of the models whose engines hash blocks over them (`lookahead_tokens`).
    pub lookahead: BTreeMap<String, usize>,
    /// Tokenizers of the models that have one, to score prompts.
    pub prompters: BTreeMap<String, Arc<Prompter>>,
    /// Engines to subscribe to at startup.
    pub engines: Vec<EngineConfig>,
    /// Approximate mode, if on.
    pub approximate: Option<ApproximateSettings>,
}

/// Approximate mode from the command line: its flags need `--approximate`, and `lru` needs a
/// capacity.
fn approximate_settings(cli: &Cli) -> Result<Option<ApproximateSettings>, ConfigError> {
    use flash_indexer::Retention;
    let ttl = cli.ttl_secs.map(Duration::from_secs);
    let retention = match cli.approximate {
        None => {
            if ttl.is_some() || cli.capacity_blocks.is_some() || cli.share.is_some() {
                return Err(ConfigError::Invalid(
                    "--ttl-secs, --capacity-blocks and --share are for --approximate".to_owned(),
                ));
            }
            return Ok(None);
        }
        Some(ApproximateChoice::Ttl) => {
            let retention = Retention::ttl(ttl.unwrap_or(Retention::DEFAULT_TTL));
            match cli.capacity_blocks {
                Some(blocks) => retention.with_capacity(blocks),
                None => retention,
            }
        }
        Some(ApproximateChoice::Lru) => {
            let blocks = cli.capacity_blocks.ok_or_else(|| {
                ConfigError::Invalid("--approximate lru needs --capacity-blocks".to_owned())
            })?;
            match ttl {
                Some(ttl) => Retention::lru(blocks).with_ttl(ttl),
                None => Retention::lru(blocks),
            }
        }
    };
    if let Some(url) = &cli.share {
        // Parsed here so that a bad URL stops the server at startup.
        flash_indexer::approx::RedisLog::open(url, "", Duration::ZERO)
            .map_err(|e| ConfigError::Invalid(format!("--share: {e}")))?;
    }
    Ok(Some(ApproximateSettings {
        retention,
        share: cli.share.clone(),
        model: cli.model.clone().unwrap_or_else(|| "default".to_owned()),
    }))
}

impl Settings {
    /// The settings of a command line, reading its `--config` file.
    pub fn from_cli(cli: Cli) -> Result<Settings, ConfigError> {
        let file = match &cli.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let mut engines = file.engines;
        for spec in &cli.engines {
            engines.push(EngineConfig::parse(spec, cli.model.as_deref())?);
        }
        for engine in &engines {
            engine.check()?;
        }
        let http_threads = match cli.http_threads.or(file.http_threads) {
            Some(0) => {
                return Err(ConfigError::Invalid(
                    "http_threads must be at least 1".to_owned(),
                ));
            }
            Some(n) => n,
            None => default_http_threads(),
        };
        let default_block_size = cli
            .block_size
            .or(file.block_size)
            .unwrap_or(DEFAULT_BLOCK_SIZE);
        let mut models = BTreeMap::new();
        let mut prompters = BTreeMap::new();
        let mut groups = BTreeMap::new();
        let mut lookahead = BTreeMap::new();
        for m in file.models {
            check_block_size(m.block_size)?;
            if m.lookahead_tokens > flash_indexer::hash::MAX_LOOKAHEAD_TOKENS {
                return Err(ConfigError::Invalid(format!(
                    "model {}: lookahead_tokens {} (0 to {} are accepted)",
                    m.name,
                    m.lookahead_tokens,
                    flash_indexer::hash::MAX_LOOKAHEAD_TOKENS
                )));
            }
            if m.lookahead_tokens > 0 {
                lookahead.insert(m.name.clone(), m.lookahead_tokens);
            }
            if let Some(model) = model_groups(&m)? {
                groups.insert(m.name.clone(), model);
            }
            if let Some(path) = &m.tokenizer {
                let bytes = m.prefix_store_bytes.unwrap_or(DEFAULT_PREFIX_STORE_BYTES);
                let prompter = Prompter::load(path, bytes)
                    .map_err(|why| ConfigError::Invalid(format!("model {}: {why}", m.name)))?;
                if let Some(why) = prompter.store_unused() {
                    tracing::warn!(model = %m.name, "no prefix store for this tokenizer: {why}");
                }
                prompters.insert(m.name.clone(), Arc::new(prompter));
            }
            models.insert(m.name, m.block_size);
        }
        check_block_size(default_block_size)?;
        let tiers = match file.tiers {
            Some(tiers) => tiers
                .into_iter()
                .map(|(name, weight)| Tier {
                    name: name.to_ascii_uppercase(),
                    weight,
                })
                .collect(),
            None => DEFAULT_TIERS
                .iter()
                .map(|&(name, weight)| Tier {
                    name: name.to_owned(),
                    weight,
                })
                .collect(),
        };
        let approximate = approximate_settings(&cli)?;
        let snapshots = cli.snapshot_dir.is_some() || file.snapshot_dir.is_some();
        if approximate.is_some() && (snapshots || cli.peer.is_some() || file.peer.is_some()) {
            // A snapshot holds blocks as exact stores: predictions restored from one would
            // never expire. Shared replicas catch up from the decision stream instead.
            return Err(ConfigError::Invalid(
                "--approximate takes no snapshots and no --peer (replicas share decisions with --share)"
                    .to_owned(),
            ));
        }
        if let Some(name) = groups.keys().next() {
            check_hybrid(name, &approximate)?;
        }
        Ok(Settings {
            approximate,
            listen: cli
                .listen
                .or(file.listen)
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080))),
            dynamo_listen: cli.dynamo_listen.or(file.dynamo_listen),
            grpc_listen: cli.grpc_listen.or(file.grpc_listen),
            snapshot_dir: cli.snapshot_dir.or(file.snapshot_dir),
            snapshot_interval: Duration::from_secs(
                cli.snapshot_interval
                    .or(file.snapshot_interval_secs)
                    .unwrap_or(60)
                    .max(1),
            ),
            peer: cli.peer.or(file.peer),
            layout: cli.layout.or(file.layout).unwrap_or_default(),
            max_request_bytes: cli
                .max_request_bytes
                .or(file.max_request_bytes)
                .unwrap_or(DEFAULT_MAX_REQUEST_BYTES),
            http_threads,
            default_block_size,
            tiers: check_tiers(tiers)?,
            models,
            groups,
            lookahead,
            prompters,
            engines,
        })
    }

    /// The block size of `model`.
    pub fn block_size(&self, model: &str) -> usize {
        self.models
            .get(model)
            .copied()
            .unwrap_or(self.default_block_size)
    }

    /// The lookahead tokens of `model` (0 unless configured).
    pub fn lookahead(&self, model: &str) -> usize {
        self.lookahead.get(model).copied().unwrap_or(0)
    }
}

/// `m`'s groups, validated; `None` for a model of one full-attention group (or none given).
fn model_groups(m: &ModelConfig) -> Result<Option<ModelGroups>, ConfigError> {
    if m.groups.is_empty() {
        return Ok(None);
    }
    let block_size = u32::try_from(m.block_size).expect("checked block size");
    let specs = (m.groups.iter())
        .map(|&kind| GroupSpec::new(kind, block_size))
        .collect();
    let model = ModelGroups::new(specs)
        .map_err(|why| ConfigError::Invalid(format!("model {}: groups: {why}", m.name)))?;
    Ok((model.len() > 1).then_some(model))
}

/// What hybrid models (`name` is one) cannot be combined with yet: approximate mode (its
/// predictions have no groups).
fn check_hybrid(name: &str, approximate: &Option<ApproximateSettings>) -> Result<(), ConfigError> {
    if approximate.is_some() {
        return Err(ConfigError::Invalid(format!(
            "model {name} has several KV-cache groups: --approximate predicts one group only"
        )));
    }
    Ok(())
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_owned(),
        error,
    })?;
    toml::from_str(&text).map_err(|error| ConfigError::Parse {
        path: path.to_owned(),
        message: error.to_string(),
    })
}

fn check_block_size(size: usize) -> Result<(), ConfigError> {
    if size == 0 || size > flash_indexer::hash::MAX_BLOCK_SIZE {
        return Err(ConfigError::Invalid(format!(
            "a block size of {size} tokens (1 to {} are accepted)",
            flash_indexer::hash::MAX_BLOCK_SIZE
        )));
    }
    Ok(())
}

/// Sorts tiers heaviest first and refuses two tiers of one medium (or of mediums Dynamo reads as
/// one) and weights that are not finite non-negative numbers.
fn check_tiers(mut tiers: Vec<Tier>) -> Result<Vec<Tier>, ConfigError> {
    if tiers.is_empty() {
        return Err(ConfigError::Invalid("no storage tier to index".to_owned()));
    }
    for (i, tier) in tiers.iter().enumerate() {
        if !tier.weight.is_finite() || tier.weight < 0.0 {
            return Err(ConfigError::Invalid(format!(
                "tier {}: weight {} is not a finite number >= 0",
                tier.name, tier.weight
            )));
        }
        if let Some(same) = tiers[..i]
            .iter()
            .find(|t| t.mediums().iter().any(|m| tier.mediums().contains(m)))
        {
            return Err(ConfigError::Invalid(format!(
                "tiers {} and {} name the same medium",
                same.name, tier.name
            )));
        }
    }
    tiers.sort_by(|a, b| b.weight.total_cmp(&a.weight));
    Ok(tiers)
}

/// Why the settings could not be made.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// The configuration file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The configuration file is not valid TOML for these settings.
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// An engine that cannot be subscribed to as given.
    Engine {
        /// The engine as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A value out of range.
    Invalid(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { path, error } => {
                write!(f, "cannot read {}: {error}", path.display())
            }
            ConfigError::Parse { path, message } => write!(f, "{}: {message}", path.display()),
            ConfigError::Engine { spec, reason } => write!(f, "engine {spec:?}: {reason}"),
            ConfigError::Invalid(what) => write!(f, "invalid setting: {what}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// One thread less than the machine's cores, at least one: the engines' subscriber and writer
/// threads keep a core, so a saturated server does not preempt its own ingest, and requests
/// queue in the runtime rather than in the OS scheduler (measured in the paper, section 6.22).
fn default_http_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(args: &[&str]) -> Result<Settings, ConfigError> {
        let argv = std::iter::once("flash-indexer-server").chain(args.iter().copied());
        Settings::from_cli(Cli::parse_from(argv))
    }

    #[test]
    fn defaults() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(s.layout, LayoutChoice::Radix);
        let names: Vec<&str> = s.tiers.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["GPU", "CPU", "DISK"]);
        assert_eq!(s.block_size("anything"), 16);
        assert_eq!(s.http_threads, default_http_threads());
        assert!(s.http_threads >= 1);
    }

    #[test]
    fn approximate_mode() {
        use flash_indexer::Retention;
        assert_eq!(settings(&[]).unwrap().approximate, None);
        let ttl = settings(&["--approximate", "ttl", "--share", "redis://127.0.0.1:6379/"]);
        let ttl = ttl.unwrap().approximate.unwrap();
        assert_eq!(ttl.retention, Retention::default());
        assert_eq!(ttl.model, "default");
        let lru = settings(&[
            "--approximate",
            "lru",
            "--capacity-blocks",
            "8",
            "--ttl-secs",
            "5",
        ]);
        assert_eq!(
            lru.unwrap().approximate.unwrap().retention,
            Retention::lru(8).with_ttl(Duration::from_secs(5))
        );
        for (args, says) in [
            (&["--share", "redis://h/"][..], "--approximate"),
            (&["--capacity-blocks", "8"][..], "--approximate"),
            (&["--approximate", "lru"][..], "--capacity-blocks"),
            (
                &["--approximate", "ttl", "--share", "http://h/"][..],
                "--share",
            ),
            (
                &["--approximate", "ttl", "--snapshot-dir", "/tmp"][..],
                "snapshots",
            ),
            (
                &["--approximate", "ttl", "--peer", "http://h"][..],
                "--peer",
            ),
        ] {
            let message = settings(args).unwrap_err().to_string();
            assert!(message.contains(says), "{args:?}: {message}");
        }
    }

    #[test]
    fn http_threads() {
        assert_eq!(settings(&["--http-threads", "3"]).unwrap().http_threads, 3);
        let message = settings(&["--http-threads", "0"]).unwrap_err().to_string();
        assert!(message.contains("http_threads"), "{message}");
    }

    #[test]
    fn engines_from_the_command_line() {
        let s = settings(&[
            "--engine",
            "tcp://a:1",
            "--engine",
            "7=ipc:///x+tcp://a:2",
            "--model",
            "m",
        ])
        .unwrap();
        assert_eq!(s.engines.len(), 2);
        assert_eq!(s.engines[0].worker, None);
        assert_eq!(s.engines[1].worker, Some(7));
        assert_eq!(s.engines[1].fixed_model(), Some("m"));
        let s = settings(&["--engine", "tcp://a:1", "--engine", "7=tcp://a:2"]).unwrap();
        assert_eq!(s.engines[0].fixed_model(), None, "the topic names it");
        assert_eq!(s.engines[1].fixed_model(), Some(DEFAULT_MODEL));
        assert!(settings(&["--engine", "udp://a:1"]).is_err());
        let mut engine = EngineConfig::parse("3=tcp://a:1", None).unwrap();
        engine.pod = Some("pod-3".into());
        assert!(engine.check().is_ok());
        engine.pod = Some(String::new());
        assert!(engine.check().is_err());
        engine.pod = Some("pod-3".into());
        engine.worker = None;
        assert!(engine.check().is_err(), "a pod name needs a worker id");
        assert!(settings(&["--engine", "tcp://"]).is_err());
    }

    #[test]
    fn file_settings_and_bad_files() {
        let dir = std::env::temp_dir().join(format!("fis-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.toml");
        std::fs::write(
            &good,
            "layout = \"array\"\n[tiers]\ngpu = 1.0\ncpu = 0.8\n[[models]]\nname = \"m\"\nblock_size = 64\n[[engines]]\nevents = \"tcp://h:1\"\nworker = 4\nmodel = \"m\"\n",
        )
        .unwrap();
        let s = settings(&["--config", good.to_str().unwrap(), "--layout", "positional"]).unwrap();
        assert_eq!(s.layout, LayoutChoice::Positional, "the command line wins");
        assert_eq!(s.block_size("m"), 64);
        assert_eq!(
            s.tiers[1],
            Tier {
                name: "CPU".into(),
                weight: 0.8
            }
        );
        assert_eq!(s.engines[0].worker, Some(4));
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "listen = 5\n").unwrap();
        let message = settings(&["--config", bad.to_str().unwrap()])
            .unwrap_err()
            .to_string();
        assert!(message.contains("bad.toml"), "{message}");
        std::fs::write(&bad, "[tiers]\nGPU = -1.0\n").unwrap();
        assert!(settings(&["--config", bad.to_str().unwrap()]).is_err());
        assert!(settings(&["--config", dir.join("missing.toml").to_str().unwrap()]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lookahead_tokens_per_model() {
        let dir = std::env::temp_dir().join(format!("fis-lookahead-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("lookahead.toml");
        let with = |tokens: usize| {
            let model = format!(
                "[[models]]\nname = \"eagle\"\nblock_size = 16\nlookahead_tokens = {tokens}\n"
            );
            std::fs::write(&file, model).unwrap();
            settings(&["--config", file.to_str().unwrap()])
        };
        let s = with(1).unwrap();
        assert_eq!((s.lookahead("eagle"), s.lookahead("other")), (1, 0));
        assert_eq!(with(0).unwrap().lookahead("eagle"), 0);
        let message = with(65).unwrap_err().to_string();
        assert!(message.contains("lookahead_tokens 65"), "{message}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hybrid_models_and_what_they_refuse() {
        let dir = std::env::temp_dir().join(format!("fis-groups-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("groups.toml");
        let with_groups = |groups: &str| {
            let model = format!("[[models]]\nname = \"m\"\nblock_size = 16\ngroups = {groups}\n");
            std::fs::write(&file, model).unwrap();
            file.to_str().unwrap().to_owned()
        };
        let gpt_oss = r#"[{ kind = "full_attention" }, { kind = "sliding_window", window = 128 }]"#;
        let s = settings(&["--config", &with_groups(gpt_oss)]).unwrap();
        let groups = s.groups["m"].groups();
        assert_eq!(
            groups[1],
            GroupSpec::new(GroupKind::SlidingWindow { window: 128 }, 16)
        );
        assert_eq!(s.block_size("m"), 16);
        // One full-attention group is a plain model.
        let one = settings(&["--config", &with_groups(r#"[{ kind = "full_attention" }]"#)]);
        assert!(one.unwrap().groups.is_empty());
        for (groups, args, says) in [
            (
                r#"[{ kind = "mamba" }, { kind = "mamba" }]"#,
                &[][..],
                "full-attention",
            ),
            (
                r#"[{ kind = "full_attention" }, { kind = "sliding_window", window = 0 }]"#,
                &[],
                "group 1",
            ),
            (
                r#"[{ kind = "full_attention" }, { kind = "retention" }]"#,
                &[],
                "retention",
            ),
            (gpt_oss, &["--approximate", "ttl"], "--approximate"),
        ] {
            let mut argv = vec!["--config".to_owned(), with_groups(groups)];
            argv.extend(args.iter().map(|a| (*a).to_owned()));
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            let message = settings(&argv).unwrap_err().to_string();
            assert!(message.contains(says), "{groups} {args:?}: {message}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
