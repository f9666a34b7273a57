//! llm-d's `indexer.v1` messages, field for field as `api/indexerpb/indexer.proto` of
//! llm-d-kv-cache declares them, and the generated service and client.

#![allow(missing_docs, clippy::all)]

/// `GetPodScoresRequest`: a prompt, its model, and the pods to score (all when empty).
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetPodScoresRequest {
    #[prost(string, tag = "1")]
    pub prompt: String,
    #[prost(string, tag = "2")]
    pub model_name: String,
    #[prost(string, repeated, tag = "3")]
    pub pod_identifiers: Vec<String>,
}

/// `GetPodScoresResponse`: a score per pod (and data-parallel rank).
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetPodScoresResponse {
    #[prost(message, repeated, tag = "1")]
    pub scores: Vec<PodScore>,
}

/// `PodScore`: a pod, its score, and its data-parallel rank when it has several.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodScore {
    #[prost(string, tag = "1")]
    pub pod: String,
    #[prost(double, tag = "2")]
    pub score: f64,
    #[prost(int32, optional, tag = "3")]
    pub data_parallel_rank: Option<i32>,
}

include!(concat!(env!("OUT_DIR"), "/indexer.v1.IndexerService.rs"));
