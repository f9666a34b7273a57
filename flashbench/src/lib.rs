//! flashbench's parts: trace reading, mock engines, the workload format, replays and the
//! side-by-side comparison with Dynamo's indexes. The `flashbench` binary drives them; the
//! `dynamo_workload` bench reuses the comparison's subjects and presets.

pub mod compare;
pub mod engine;
pub mod prompts;
pub mod replay;
pub mod report;
pub mod route;
#[cfg(feature = "dynamo")]
pub mod service;
pub mod sweep;
pub mod trace;
pub mod workload;
