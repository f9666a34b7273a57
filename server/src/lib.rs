//! flash-indexer as a service: engines' KV events in, prefix-match scores out, over HTTP.
//!
//! The binary `flash-indexer-server` is the product; this library is its parts, public so that
//! tests and the load tool (`flash-indexer-load`) use the same snapshot format and settings:
//!
//! - [`config`]: the command line and TOML file;
//! - [`service`]: one index per model and storage tier, the engines feeding them, scoring;
//! - [`routing`]: events of engines whose topics name the model, to that model;
//! - [`api`]: the HTTP routes;
//! - [`approximate`]: approximate mode, predictions from `POST /route`, shared over Redis;
//! - [`dynamo`]: Dynamo's standalone-indexer routes, on their own address;
//! - [`llmd`]: prompts scored per pod, llm-d's `GetPodScores` over gRPC and `POST /score`;
//! - [`prompt`]: a model's tokenizer, chat template and prefix store;
//! - [`duplicates`]: counting stores that change nothing;
//! - [`fleet`]: the synthetic fleet the load tools query;
//! - [`hybrid`]: the tiers of models with several KV-cache groups;
//! - [`snapshot`]: the versioned, checksummed snapshot format and its atomic writes;
//! - [`metrics`]: Prometheus metrics;
//! - [`run`]: startup (restore, engines), serving and shutdown.

pub mod api;
pub mod approximate;
pub mod config;
pub mod duplicates;
pub mod dynamo;
pub mod fleet;
pub mod hybrid;
pub mod llmd;
pub mod metrics;
pub mod prompt;
pub mod routing;
pub mod run;
pub mod service;
pub mod snapshot;
