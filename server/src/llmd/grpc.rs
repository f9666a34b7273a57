//! `indexer.v1.IndexerService` over gRPC: llm-d's `GetPodScores`.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::proto::indexer_service_server::{IndexerService, IndexerServiceServer};
use super::proto::{GetPodScoresRequest, GetPodScoresResponse, PodScore};
use super::{Prompt, ScoreError, score_prompt};
use crate::service::{ModelChoiceError, Service};

/// The gRPC service over `service`, refusing messages over `max_bytes`.
pub fn server(service: Arc<Service>) -> IndexerServiceServer<Indexer> {
    let limit = service.settings().max_request_bytes;
    IndexerServiceServer::new(Indexer { service })
        .max_decoding_message_size(limit)
        .max_encoding_message_size(usize::MAX)
}

/// llm-d's indexer service, answered by the server's indexes.
pub struct Indexer {
    service: Arc<Service>,
}

#[tonic::async_trait]
impl IndexerService for Indexer {
    async fn get_pod_scores(
        &self,
        request: Request<GetPodScoresRequest>,
    ) -> Result<Response<GetPodScoresResponse>, Status> {
        let request = request.into_inner();
        let service = Arc::clone(&self.service);
        let model = (service.pick_model(Some(&request.model_name))).map_err(|e| match e {
            ModelChoiceError::Unknown(..) => Status::not_found(e.to_string()),
            ModelChoiceError::Unnamed(_) => Status::invalid_argument(e.to_string()),
        })?;
        // Tokenizing is CPU work: off the async threads.
        let scored = tokio::task::spawn_blocking(move || {
            let prompt = Prompt::Text(&request.prompt);
            score_prompt(&service, &model, prompt, &request.pod_identifiers)
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        let scores = scored.map_err(|e| match e {
            ScoreError::NoTokenizer(_) => Status::failed_precondition(e.to_string()),
            ScoreError::Prompt(_) => Status::invalid_argument(e.to_string()),
        })?;
        let scores = (scores.scores.into_iter())
            .map(|s| PodScore {
                pod: s.pod,
                score: s.score,
                data_parallel_rank: s.data_parallel_rank,
            })
            .collect();
        Ok(Response::new(GetPodScoresResponse { scores }))
    }
}
