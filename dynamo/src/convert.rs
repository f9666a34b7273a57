//! Dynamo's protocol types to flash-indexer's and back: same workers, event ids, hashes and
//! parents, nothing dropped but the fields our contract has no use for (`start_position`,
//! multimodal block info, storage tier and residency domain: Dynamo's default backend ignores
//! them too).

use dynamo_kv_router::protocols::{
    DpRank, ExternalSequenceBlockHash, KvCacheEvent, KvCacheEventData, KvCacheEventError,
    KvCacheRemoveData, KvCacheStoreData, KvCacheStoredBlockData, LocalBlockHash, OverlapScores,
    RouterEvent, WorkerId, WorkerWithDpRank,
};
use flash_indexer::{Block, Event, EventError, EventKind, LocalHash, SeqHash, Worker};

/// Dynamo's event as ours.
pub fn flash_event(event: &RouterEvent) -> Event {
    flash_event_in(event, Vec::new(), Vec::new())
}

/// Dynamo's event as ours, its blocks written into `blocks` (a store) or `seqs` (a removal),
/// emptied first: buffers a caller takes back from the event with [`into_buffers`] and reuses,
/// so that converting allocates nothing.
pub fn flash_event_in(
    event: &RouterEvent,
    mut blocks: Vec<Block>,
    mut seqs: Vec<SeqHash>,
) -> Event {
    let worker = flash_worker(WorkerWithDpRank::new(event.worker_id, event.event.dp_rank));
    let id = event.event.event_id;
    match &event.event.data {
        KvCacheEventData::Stored(stored) => {
            blocks.clear();
            blocks.extend(
                stored
                    .blocks
                    .iter()
                    .map(|b| Block::new(LocalHash(b.tokens_hash.0), SeqHash(b.block_hash.0))),
            );
            Event::stored(worker, id, stored.parent_hash.map(|p| SeqHash(p.0)), blocks)
        }
        KvCacheEventData::Removed(removed) => {
            seqs.clear();
            seqs.extend(removed.block_hashes.iter().map(|s| SeqHash(s.0)));
            Event::removed(worker, id, seqs)
        }
        KvCacheEventData::Cleared => Event::cleared(worker, id),
    }
}

/// The buffer an event holds, back for reuse (see [`flash_event_in`]).
pub fn into_buffers(event: Event) -> (Option<Vec<Block>>, Option<Vec<SeqHash>>) {
    match event.kind {
        EventKind::Stored { blocks, .. } => (Some(blocks), None),
        EventKind::Removed { blocks } => (None, Some(blocks)),
        EventKind::Cleared => (None, None),
    }
}

/// Our event as Dynamo's.
pub fn router_event(event: &Event) -> RouterEvent {
    let data = match &event.kind {
        EventKind::Stored { parent, blocks } => KvCacheEventData::Stored(KvCacheStoreData {
            parent_hash: parent.map(|p| ExternalSequenceBlockHash(p.0)),
            start_position: None,
            blocks: blocks
                .iter()
                .map(|b| KvCacheStoredBlockData {
                    block_hash: ExternalSequenceBlockHash(b.seq.0),
                    tokens_hash: LocalBlockHash(b.local.0),
                    mm_extra_info: None,
                })
                .collect(),
        }),
        EventKind::Removed { blocks } => KvCacheEventData::Removed(KvCacheRemoveData {
            block_hashes: blocks
                .iter()
                .map(|s| ExternalSequenceBlockHash(s.0))
                .collect(),
        }),
        EventKind::Cleared => KvCacheEventData::Cleared,
    };
    RouterEvent::new(
        event.worker.id as WorkerId,
        KvCacheEvent {
            event_id: event.event_id,
            data,
            dp_rank: event.worker.dp_rank as DpRank,
        },
    )
}

/// Dynamo's query as ours.
pub fn local_hashes(sequence: &[LocalBlockHash]) -> Vec<LocalHash> {
    sequence.iter().map(|l| LocalHash(l.0)).collect()
}

/// Our scores as Dynamo's: every worker with at least one matched block (Dynamo's backends
/// leave out workers that match nothing, too); no frequencies (not tracked).
pub fn overlap_scores(found: &flash_indexer::OverlapScores) -> OverlapScores {
    let mut scores = OverlapScores::new();
    // Sized once: growing the map through its doublings cost more than the query itself.
    scores.scores.reserve(found.len());
    scores.scores.extend(
        found
            .iter()
            .filter(|&(_, depth)| depth > 0)
            .map(|(w, depth)| (dynamo_worker(w), depth)),
    );
    scores
}

/// Our worker as Dynamo's.
pub fn dynamo_worker(worker: Worker) -> WorkerWithDpRank {
    WorkerWithDpRank::new(worker.id as WorkerId, worker.dp_rank as DpRank)
}

/// Our worker for Dynamo's.
pub fn flash_worker(worker: WorkerWithDpRank) -> Worker {
    Worker::new(worker.worker_id, worker.dp_rank)
}

/// Our refusal as the closest of Dynamo's, for its metrics and acknowledgements.
pub fn event_error(error: &EventError) -> KvCacheEventError {
    match error {
        EventError::UnknownParent { .. } => KvCacheEventError::ParentBlockNotFound,
        EventError::UnknownBlocks { .. } => KvCacheEventError::BlockNotFound,
        _ => KvCacheEventError::InvalidBlockSequence,
    }
}
