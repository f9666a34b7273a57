//! llm-d's way in: a prompt (or a chat conversation) and the pods to score, answered with each
//! pod's score, over gRPC (`indexer.v1.IndexerService/GetPodScores`, as llm-d-kv-cache serves
//! it) and over HTTP (`POST /score`).
//!
//! The prompt is tokenized with the model's tokenizer (see [`crate::prompt`]), hashed with the
//! model's block size and scored as `POST /query` scores tokens: the longest prefix each worker
//! holds, each block weighed by the heaviest tier holding it (llm-d's longest-prefix scorer).
//! Pods are the names engines publish in their topics (`kv@POD@MODEL`) or the `pod` of an
//! engine's configuration; a pod asked about that holds nothing scores 0.

pub mod grpc;
pub mod proto;

use std::collections::{BTreeMap, BTreeSet};

use flash_indexer::hash;
use serde::Serialize;

use crate::prompt::{PromptError, Reuse};
use crate::service::{Model, Service, pod_worker_id};

/// What a prompt is.
pub enum Prompt<'a> {
    /// Completion text.
    Text(&'a str),
    /// A chat conversation (OpenAI's `messages`) and whether to open the assistant's turn.
    Messages(&'a serde_json::Value, bool),
}

/// Why a prompt could not be scored.
#[derive(Debug)]
pub enum ScoreError {
    /// The model has no tokenizer configured.
    NoTokenizer(String),
    /// The prompt could not be tokenized.
    Prompt(PromptError),
}

impl std::fmt::Display for ScoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScoreError::NoTokenizer(model) => write!(
                f,
                "model {model:?} has no tokenizer: name one in its [[models]] entry \
                 (tokenizer = \"DIR\"), or send tokens to POST /query"
            ),
            ScoreError::Prompt(why) => write!(f, "{why}"),
        }
    }
}

/// One pod's score.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PodScore {
    /// The pod's name.
    pub pod: String,
    /// Its score: matched blocks, each weighed by its tier.
    pub score: f64,
    /// Its data-parallel rank, when the pod has ranks other than 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_parallel_rank: Option<i32>,
    /// The worker id the pod is indexed under.
    pub worker: u64,
    /// Blocks of the prompt it holds as a prefix.
    pub depth: u32,
}

/// The scores of a prompt.
#[derive(Clone, Debug, Serialize)]
pub struct PromptScores {
    /// The model asked.
    pub model: String,
    /// Tokens of the prompt.
    pub tokens: usize,
    /// Whole blocks of it.
    pub blocks: usize,
    /// Bytes of the prompt tokenized by this request (the rest came from the prefix store).
    pub tokenized_bytes: usize,
    /// Scores, best first.
    pub scores: Vec<PodScore>,
}

/// Tokenizes `prompt` with `model`'s tokenizer and scores `pods` (every pod holding a prefix
/// when empty).
pub fn score_prompt(
    service: &Service,
    model: &Model,
    prompt: Prompt<'_>,
    pods: &[String],
) -> Result<PromptScores, ScoreError> {
    let prompter =
        (model.prompter.as_ref()).ok_or_else(|| ScoreError::NoTokenizer(model.name.clone()))?;
    let (tokens, reuse): (Vec<u32>, Reuse) = match prompt {
        Prompt::Text(text) => prompter.encode_prompt(text),
        Prompt::Messages(messages, open) => prompter.encode_messages(messages, open),
    }
    .map_err(ScoreError::Prompt)?;
    let features = hash::Features {
        lookahead: model.lookahead,
        ..hash::Features::default()
    };
    let locals = hash::local_hashes_with_features(&tokens, model.block_size, &features);
    let answer = service.query(model, &locals);
    let names = service.pod_names();
    let by_id: BTreeMap<u64, &String> = names.iter().map(|(name, &id)| (id, name)).collect();
    let name_of = |worker: u64| {
        by_id
            .get(&worker)
            .map_or_else(|| worker.to_string(), |n| (*n).clone())
    };
    let mut ranks: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for w in &answer.workers {
        ranks.entry(w.worker).or_default().insert(w.dp_rank);
    }
    let entry = |w: &crate::service::WorkerScore, pod: String| PodScore {
        pod,
        score: w.score,
        data_parallel_rank: (ranks[&w.worker].iter().any(|&r| r != 0))
            .then(|| i32::try_from(w.dp_rank).unwrap_or(i32::MAX)),
        worker: w.worker,
        depth: w.depth,
    };
    let mut scores: Vec<PodScore> = Vec::new();
    if pods.is_empty() {
        scores.extend(answer.workers.iter().map(|w| entry(w, name_of(w.worker))));
    } else {
        let mut seen = BTreeSet::new();
        for pod in pods.iter().filter(|p| seen.insert(p.as_str())) {
            let id = names
                .get(pod)
                .copied()
                .unwrap_or_else(|| pod_worker_id(pod));
            let before = scores.len();
            scores.extend(
                (answer.workers.iter())
                    .filter(|w| w.worker == id)
                    .map(|w| entry(w, pod.clone())),
            );
            if scores.len() == before {
                scores.push(PodScore {
                    pod: pod.clone(),
                    score: 0.0,
                    data_parallel_rank: None,
                    worker: id,
                    depth: 0,
                });
            }
        }
    }
    scores.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.pod.cmp(&b.pod))
            .then(a.data_parallel_rank.cmp(&b.data_parallel_rank))
    });
    Ok(PromptScores {
        model: model.name.clone(),
        tokens: tokens.len(),
        blocks: locals.len(),
        tokenized_bytes: reuse.tokenized_bytes,
        scores,
    })
}
