//! [`NaiveIndexer`]: the contract written as literally as possible. The oracle of every test.

use crate::error::EventError;
use crate::index::KvIndex;
use crate::scores::OverlapScores;
use crate::sync::{Mutex, MutexGuard, lock};
use crate::types::{Block, Event, EventKind, LocalHash, SeqHash, Worker};
use foldhash::fast::RandomState;
use std::collections::{BTreeMap, HashMap, HashSet};

/// What a worker holds about one block: its local hash and its parent (see [the
/// contract](crate::docs::contract)).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Held {
    pub(crate) local: LocalHash,
    pub(crate) parent: Option<SeqHash>,
}

// foldhash rather than SipHash: no input here is adversarial, and the differential suite and
// the fuzz target spend much of their time in these maps.
pub(crate) type HeldSet = HashMap<SeqHash, Held, RandomState>;
/// Every held block as `(parent, local, seq)`, sorted: the children of one parent with one local
/// hash are one contiguous run.
pub(crate) type Children = Vec<(Option<SeqHash>, LocalHash, SeqHash)>;

/// One worker's held set, and its child lists while they are valid.
#[derive(Debug, Default)]
struct Holding {
    held: HeldSet,
    /// `children_of(held)`, built by the first query after a change and dropped by every change:
    /// queries between two events of a worker share it. Nothing but a cache of a pure function
    /// of `held`.
    children: Option<Children>,
}

impl Holding {
    /// The held set, for a change (which invalidates the child lists).
    fn held_mut(&mut self) -> &mut HeldSet {
        self.children = None;
        &mut self.held
    }

    fn depth(&mut self, query: &[LocalHash]) -> u32 {
        let children = self.children.get_or_insert_with(|| children_of(&self.held));
        depth(children, query)
    }
}

/// The reference index: nested maps under one lock, queries walk the held chains.
///
/// Obviously correct, not fast: the first query after a worker's event rebuilds its child lists. Use it as the
/// oracle in tests and as a baseline in benchmarks, not in a router.
///
/// ```
/// use flash_indexer::{Block, Event, KvIndex, LocalHash, NaiveIndexer, SeqHash, Worker};
///
/// let index = NaiveIndexer::default();
/// let w = Worker::new(1, 0);
/// let blocks = vec![Block::new(LocalHash(10), SeqHash(100)), Block::new(LocalHash(11), SeqHash(101))];
/// index.apply(&Event::stored(w, 0, None, blocks)).unwrap();
/// assert_eq!(index.find_matches(&[LocalHash(10), LocalHash(11), LocalHash(12)]).get(w), Some(2));
/// ```
#[derive(Debug, Default)]
pub struct NaiveIndexer {
    // A BTreeMap so that `dump` and iteration are deterministic.
    workers: Mutex<BTreeMap<Worker, Holding>>,
}

impl NaiveIndexer {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Blocks held (reachable or not) over all workers, and workers with a held set.
    #[cfg(feature = "testing")]
    pub(crate) fn totals(&self) -> (usize, usize) {
        let workers = self.lock();
        (workers.values().map(|h| h.held.len()).sum(), workers.len())
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Worker, Holding>> {
        // Every mutation below is validated first, so a poisoned lock is still consistent.
        lock(&self.workers)
    }
}

/// Applies a `Stored` event to one worker's held set, checks in the contract's order.
pub(crate) fn store(
    held: &mut HeldSet,
    parent: Option<SeqHash>,
    blocks: &[Block],
) -> Result<(), EventError> {
    if blocks.is_empty() {
        return Ok(());
    }
    if let Some(p) = parent
        && !held.contains_key(&p)
    {
        return Err(EventError::UnknownParent { parent: p });
    }
    let mut seen = HashSet::with_hasher(RandomState::default());
    for block in blocks {
        if Some(block.seq) == parent || !seen.insert(block.seq) {
            return Err(EventError::InvalidSequence { seq: block.seq });
        }
    }
    let mut block_parent = parent;
    for block in blocks {
        let wanted = Held {
            local: block.local,
            parent: block_parent,
        };
        if let Some(existing) = held.get(&block.seq)
            && *existing != wanted
        {
            return Err(EventError::Conflict { seq: block.seq });
        }
        block_parent = Some(block.seq);
    }
    let mut block_parent = parent;
    for block in blocks {
        held.insert(
            block.seq,
            Held {
                local: block.local,
                parent: block_parent,
            },
        );
        block_parent = Some(block.seq);
    }
    Ok(())
}

/// Children of each parent (`None` = chain starts) among a worker's held blocks, by local hash.
pub(crate) fn children_of(held: &HeldSet) -> Children {
    let mut children: Children = held
        .iter()
        .map(|(seq, h)| (h.parent, h.local, *seq))
        .collect();
    children.sort_unstable();
    children
}

/// The largest `d` such that the worker holds a chain `c_0 .. c_{d-1}` from a root block whose
/// locals are `query[..d]` (see [the contract](crate::docs::contract)). Every matching chain is
/// followed at once, so two blocks with the same local under one parent both count.
fn depth(children: &Children, query: &[LocalHash]) -> u32 {
    // Two buffers, swapped at each position: the reference runs under AddressSanitizer in the
    // fuzz target, where an allocation per position was its largest cost.
    let mut frontier: Vec<Option<SeqHash>> = vec![None];
    let mut next: Vec<Option<SeqHash>> = Vec::new();
    let mut depth = 0;
    for &local in query {
        next.clear();
        for &parent in &frontier {
            let first = children.partition_point(|&(p, l, _)| (p, l) < (parent, local));
            let matching = children[first..]
                .iter()
                .take_while(|&&(p, l, _)| (p, l) == (parent, local));
            next.extend(matching.map(|&(_, _, seq)| Some(seq)));
        }
        if next.is_empty() {
            break;
        }
        core::mem::swap(&mut frontier, &mut next);
        depth += 1;
    }
    depth
}

/// Reachable blocks (see [the contract](crate::docs::contract)) of one worker, each after its
/// parent.
pub(crate) fn reachable_in_order(held: &HeldSet) -> Vec<(SeqHash, Held)> {
    let children = children_of(held);
    let mut out = Vec::new();
    let mut stack: Vec<Option<SeqHash>> = vec![None];
    while let Some(parent) = stack.pop() {
        let first = children.partition_point(|&(p, _, _)| p < parent);
        let mut kids: Vec<SeqHash> = children[first..]
            .iter()
            .take_while(|&&(p, _, _)| p == parent)
            .map(|&(_, _, seq)| seq)
            .collect();
        kids.sort_unstable();
        for seq in kids {
            out.push((seq, held[&seq]));
            stack.push(Some(seq));
        }
    }
    out
}

impl KvIndex for NaiveIndexer {
    fn apply(&self, event: &Event) -> Result<(), EventError> {
        let mut workers = self.lock();
        match &event.kind {
            EventKind::Stored { parent, blocks } => {
                let held = workers.entry(event.worker).or_default().held_mut();
                let result = store(held, *parent, blocks);
                if held.is_empty() {
                    workers.remove(&event.worker);
                }
                result
            }
            EventKind::Removed { blocks } => {
                let mut missing = Vec::new();
                let held = workers.get_mut(&event.worker).map(Holding::held_mut);
                match held {
                    None => missing.extend_from_slice(blocks),
                    Some(held) => {
                        for seq in blocks {
                            if held.remove(seq).is_none() {
                                missing.push(*seq);
                            }
                        }
                        if held.is_empty() {
                            workers.remove(&event.worker);
                        }
                    }
                }
                if missing.is_empty() {
                    Ok(())
                } else {
                    Err(EventError::UnknownBlocks { missing })
                }
            }
            EventKind::Cleared => {
                workers.remove(&event.worker);
                Ok(())
            }
        }
    }

    fn find_matches(&self, query: &[LocalHash]) -> OverlapScores {
        let mut workers = self.lock();
        let mut scores = OverlapScores::new();
        if query.is_empty() {
            return scores;
        }
        for (worker, holding) in workers.iter_mut() {
            scores.push(*worker, holding.depth(query));
        }
        scores
    }

    fn remove_worker(&self, id: u64) {
        self.lock().retain(|w, _| w.id != id);
    }

    fn remove_worker_dp_rank(&self, worker: Worker) {
        self.lock().remove(&worker);
    }

    fn block_count(&self, worker: Worker) -> usize {
        self.lock().get(&worker).map_or(0, |h| h.held.len())
    }

    fn holds(&self, worker: Worker, seq: SeqHash) -> bool {
        self.lock()
            .get(&worker)
            .is_some_and(|h| h.held.contains_key(&seq))
    }

    fn block_counts(&self) -> Vec<(Worker, usize)> {
        self.lock()
            .iter()
            .map(|(worker, h)| (*worker, h.held.len()))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    fn dump(&self) -> Vec<Event> {
        let workers = self.lock();
        let mut events = Vec::new();
        for (worker, holding) in workers.iter() {
            for (event_id, (seq, h)) in reachable_in_order(&holding.held).into_iter().enumerate() {
                let block = Block::new(h.local, seq);
                events.push(Event::stored(
                    *worker,
                    event_id as u64,
                    h.parent,
                    vec![block],
                ));
            }
        }
        events
    }
}
