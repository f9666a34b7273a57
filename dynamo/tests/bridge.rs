//! The bridge through Dynamo's own entry points: `ThreadPoolIndexer` over every layout against the
//! naive reference, and the direct `KvIndexerInterface`. (Dynamo's own indexer tests run on it
//! too: `dynamo/suite/run_dynamo_suite.py`.)

use dynamo_kv_router::indexer::{KvIndexerInterface, KvRouterError, ThreadPoolIndexer};
use dynamo_kv_router::protocols::{
    BlockHashOptions, LocalBlockHash, TokensWithHashes, WorkerWithDpRank,
    compute_block_hash_for_seq,
};
use flash_indexer::{
    ArrayIndexer, Block, Event, KvIndex, LocalHash, NaiveIndexer, PositionalIndexer, RadixIndexer,
    SeqHash, Worker,
};
use flash_indexer_dynamo::convert::{overlap_scores, router_event};
use flash_indexer_dynamo::{DefaultFlashIndexer, FlashIndexer};

/// Chains of 8 workers over 2 ranks sharing prefixes, with removals, a clear and re-stores:
/// events whose answers the reference knows.
fn events() -> Vec<Event> {
    let mut events = Vec::new();
    let mut next_id = 0;
    let mut id = || {
        next_id += 1;
        next_id
    };
    for w in 0..8u64 {
        let worker = Worker::new(w, (w % 2) as u32);
        // Locals 0..24 shared by all, then 8 private ones; seq hashes salted by nothing (the
        // engines agree), so workers with a common prefix share seq hashes too.
        let locals: Vec<u64> = (0..24).chain((0..8).map(|i| 1000 * (w + 1) + i)).collect();
        let blocks: Vec<Block> = locals
            .iter()
            .enumerate()
            .map(|(i, &l)| Block::new(LocalHash(l), SeqHash((i as u64 + 1) * 7919 + l * 31)))
            .collect();
        events.push(Event::stored(worker, id(), None, blocks[..20].to_vec()));
        events.push(Event::stored(
            worker,
            id(),
            Some(blocks[19].seq),
            blocks[20..].to_vec(),
        ));
        if w % 3 == 0 {
            events.push(Event::removed(
                worker,
                id(),
                vec![blocks[10].seq, blocks[25].seq],
            ));
        }
        if w % 4 == 1 {
            events.push(Event::stored(
                worker,
                id(),
                Some(blocks[9].seq),
                vec![blocks[10]],
            ));
        }
        if w == 5 {
            events.push(Event::cleared(worker, id()));
        }
    }
    events
}

fn queries() -> Vec<Vec<LocalHash>> {
    let mut queries = vec![(0..24).map(LocalHash).collect::<Vec<_>>()];
    for w in 0..8u64 {
        queries.push(
            (0..24)
                .chain((0..8).map(|i| 1000 * (w + 1) + i))
                .map(LocalHash)
                .collect(),
        );
    }
    queries.push(vec![LocalHash(999_999)]);
    queries
}

fn dynamo_query(query: &[LocalHash]) -> Vec<LocalBlockHash> {
    query.iter().map(|l| LocalBlockHash(l.0)).collect()
}

async fn pool_matches_reference<I: KvIndex + Default + 'static>() {
    let pool = ThreadPoolIndexer::new(FlashIndexer::<I>::new(), 4, 16);
    let reference = NaiveIndexer::new();
    for event in events() {
        pool.apply_event(router_event(&event)).await;
        let _ = reference.apply(&event);
    }
    pool.flush().await;
    for query in queries() {
        let ours = pool.find_matches(dynamo_query(&query)).await.unwrap();
        let expected = overlap_scores(&reference.find_matches(&query));
        assert_eq!(ours.scores, expected.scores, "query {query:?}");
    }
    // Removing a worker (every rank) goes through every lane, then once through the index.
    pool.remove_worker(2).await;
    reference.remove_worker(2);
    for query in queries() {
        let ours = pool.find_matches(dynamo_query(&query)).await.unwrap();
        let expected = overlap_scores(&reference.find_matches(&query));
        assert_eq!(ours.scores, expected.scores, "query {query:?}");
    }
    pool.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thread_pool_over_each_layout_answers_as_the_reference() {
    pool_matches_reference::<PositionalIndexer>().await;
    pool_matches_reference::<ArrayIndexer>().await;
    pool_matches_reference::<RadixIndexer>().await;
}

#[tokio::test]
async fn direct_interface_applies_at_once_and_hashes_requests_as_dynamo() {
    let index = DefaultFlashIndexer::new().with_block_size(4);
    let tokens: Vec<u32> = (0..16).collect();
    let locals = compute_block_hash_for_seq(&tokens, 4, BlockHashOptions::default());
    let blocks: Vec<Block> = locals
        .iter()
        .enumerate()
        .map(|(i, l)| Block::new(LocalHash(l.0), SeqHash(i as u64 + 1)))
        .collect();
    let worker = Worker::new(3, 1);
    KvIndexerInterface::apply_event(
        &index,
        router_event(&Event::stored(worker, 1, None, blocks.clone())),
    )
    .await;

    // No flush needed: the event is applied when the call returns.
    let scores = index
        .find_matches_for_request(&tokens, None, None, None)
        .await
        .unwrap();
    assert_eq!(scores.scores[&WorkerWithDpRank::new(3, 1)], 4);
    // Another namespace hashes to other blocks.
    let scores = index
        .find_matches_for_request(&tokens, None, Some("tenant-b"), None)
        .await
        .unwrap();
    assert!(scores.scores.is_empty());

    let sizes = index.shard_sizes().await;
    assert_eq!(
        (sizes[0].worker_count, sizes[0].block_count),
        (1, 4),
        "{sizes:?}"
    );

    // A dump replayed into an empty index answers the same.
    let replayed = DefaultFlashIndexer::new();
    for event in KvIndexerInterface::dump_events(&index).await.unwrap() {
        KvIndexerInterface::apply_event(&replayed, event).await;
    }
    let query = locals.clone();
    assert_eq!(
        KvIndexerInterface::find_matches(&replayed, query.clone())
            .await
            .unwrap()
            .scores,
        KvIndexerInterface::find_matches(&index, query.clone())
            .await
            .unwrap()
            .scores
    );

    index.reset_worker_dp_rank_and_wait(3, 1).await.unwrap();
    assert!(
        KvIndexerInterface::find_matches(&index, query)
            .await
            .unwrap()
            .scores
            .is_empty()
    );
}

#[tokio::test]
async fn routing_decisions_without_retention_are_refused_not_faked() {
    let index = DefaultFlashIndexer::new();
    let mut request = TokensWithHashes::new((0..64).collect(), 16);
    let refused = index
        .process_routing_decision_for_request(&mut request, WorkerWithDpRank::new(1, 0))
        .await;
    assert!(matches!(refused, Err(KvRouterError::Unsupported(_))));
    assert_eq!(index.index().block_count(Worker::new(1, 0)), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_events_change_nothing_and_later_events_apply() {
    let pool = ThreadPoolIndexer::new(DefaultFlashIndexer::new(), 2, 16);
    let worker = Worker::new(9, 0);
    let orphan = Event::stored(
        worker,
        1,
        Some(SeqHash(12345)),
        vec![Block::new(LocalHash(1), SeqHash(2))],
    );
    pool.apply_event(router_event(&orphan)).await;
    let root = Event::stored(worker, 2, None, vec![Block::new(LocalHash(1), SeqHash(2))]);
    pool.apply_event(router_event(&root)).await;
    pool.flush().await;
    let scores = pool.find_matches(vec![LocalBlockHash(1)]).await.unwrap();
    assert_eq!(scores.scores[&WorkerWithDpRank::new(9, 0)], 1);
    assert_eq!(pool.backend().index().block_count(worker), 1);
    pool.shutdown();
}

/// A chain of 6 blocks of `worker` with block 2 removed: blocks 3 to 5 are held but unreachable.
fn chain_with_a_hole(worker: Worker) -> [Event; 2] {
    let blocks = (0..6)
        .map(|i| Block::new(LocalHash(100 + i), SeqHash(200 + i)))
        .collect();
    [
        Event::stored(worker, 1, None, blocks),
        Event::removed(worker, 2, vec![SeqHash(202)]),
    ]
}

async fn holes_count_as_held<I: KvIndex + Default + 'static>() {
    use dynamo_kv_router::indexer::{SyncIndexer, WorkerTask};
    use dynamo_kv_router::protocols::ExternalSequenceBlockHash;

    let worker = Worker::new(4, 1);
    let backend = std::sync::Arc::new(FlashIndexer::<I>::new());
    let pool = ThreadPoolIndexer::new(FlashIndexer::<I>::new(), 2, 16);
    for event in chain_with_a_hole(worker) {
        backend.index().apply(&event).ok();
        pool.apply_event(router_event(&event)).await;
    }
    pool.flush().await;
    // ContainsWorkerBlock, as Dynamo's pool sends it to a lane: every held block, reachable or
    // not; the removed one is not held.
    let (tasks, lane) = flume::unbounded();
    let lane_backend = std::sync::Arc::clone(&backend);
    let lane_thread = std::thread::spawn(move || lane_backend.worker(lane, None));
    let cases = [
        (200, true),
        (202, false),
        (203, true),
        (205, true),
        (999, false),
    ];
    for (seq, held) in cases {
        let (resp, answer) = tokio::sync::oneshot::channel();
        let task = WorkerTask::ContainsWorkerBlock {
            worker: WorkerWithDpRank::new(4, 1),
            block_hash: ExternalSequenceBlockHash(seq),
            resp,
        };
        tasks.send(task).unwrap();
        assert_eq!(answer.await.unwrap(), held, "block {seq}");
    }
    tasks.send(WorkerTask::Terminate).unwrap();
    lane_thread.join().unwrap().unwrap();
    // Shard sizes count every held block, as block_count does: 5, not the 2 reachable ones.
    for sizes in [pool.shard_sizes().await, backend.shard_sizes().await] {
        let (workers, blocks) = (sizes[0].worker_count, sizes[0].block_count);
        assert_eq!((workers, blocks), (1, 5), "{sizes:?}");
    }
    assert_eq!(backend.index().block_count(worker), 5);
    pool.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hole_in_the_chain_leaves_its_descendants_held_for_dynamos_calls() {
    holes_count_as_held::<PositionalIndexer>().await;
    holes_count_as_held::<ArrayIndexer>().await;
    holes_count_as_held::<RadixIndexer>().await;
    holes_count_as_held::<NaiveIndexer>().await;
}
