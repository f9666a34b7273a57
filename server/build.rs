//! llm-d's `indexer.v1.IndexerService` (llm-d-kv-cache's `api/indexerpb/indexer.proto`) as
//! tonic code, described here in Rust: no protoc at build time. The messages are written by
//! hand in `src/llmd/proto.rs` with the same field numbers.

fn main() {
    let get_pod_scores = tonic_build::manual::Method::builder()
        .name("get_pod_scores")
        .route_name("GetPodScores")
        .input_type("crate::llmd::proto::GetPodScoresRequest")
        .output_type("crate::llmd::proto::GetPodScoresResponse")
        .codec_path("tonic_prost::ProstCodec")
        .build();
    let service = tonic_build::manual::Service::builder()
        .name("IndexerService")
        .package("indexer.v1")
        .method(get_pod_scores)
        .build();
    tonic_build::manual::Builder::new().compile(&[service]);
}
