//! `flashbench service`: `flash-indexer-server` and Dynamo's standalone KV indexer
//! (`dynamo-kv-router` 1.6.1, feature `standalone-indexer`) side by side, each in its own
//! process on loopback, fed by the same stand-in engines and asked the same queries through the
//! same Dynamo API (see `run`).

pub mod engines;
pub mod host;
pub mod run;
