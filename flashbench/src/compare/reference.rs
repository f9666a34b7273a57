//! The answers every compared index is checked against.
//!
//! [`NaiveIndexer`] is the contract written literally, but each of its queries rebuilds every
//! worker's child lists: far too slow for 100,000 queries over a million held blocks.
//! [`Reference`] lets `NaiveIndexer` decide what every event does (so acceptance and rejection are
//! the contract's own) and keeps, beside it, the held blocks grouped by `(parent, local)`, so a
//! query walks only the chains it matches. It is itself a [`KvIndex`], checked against
//! `NaiveIndexer` by the differential harness (the tests below) and, during a comparison, on a
//! sample of queries ([`Reference::find_matches_checked`]).

use flash_indexer::{
    Event, EventError, EventKind, KvIndex, LocalHash, NaiveIndexer, OverlapScores, SeqHash, Worker,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// Who holds a block with a given `(parent, local)`: each seq hash with its holders, sorted.
type Holders = Vec<(SeqHash, Vec<Worker>)>;

#[derive(Default, Debug)]
struct Chains {
    /// Per worker, what it holds: `seq -> (local, parent)`.
    held: HashMap<Worker, HashMap<SeqHash, (LocalHash, Option<SeqHash>)>>,
    /// Held blocks by `(parent, local)`.
    children: HashMap<(Option<SeqHash>, LocalHash), Holders>,
}

impl Chains {
    fn hold(&mut self, w: Worker, seq: SeqHash, local: LocalHash, parent: Option<SeqHash>) {
        let held = self.held.entry(w).or_default();
        if held.insert(seq, (local, parent)).is_some() {
            return; // an idempotent re-store: NaiveIndexer accepted it, so it is identical
        }
        let holders = self.children.entry((parent, local)).or_default();
        let at = match holders.iter().position(|(s, _)| *s == seq) {
            Some(at) => at,
            None => {
                holders.push((seq, Vec::new()));
                holders.len() - 1
            }
        };
        let workers = &mut holders[at].1;
        if let Err(i) = workers.binary_search(&w) {
            workers.insert(i, w);
        }
    }

    fn drop_block(&mut self, w: Worker, seq: SeqHash) {
        let Some((local, parent)) = self.held.get_mut(&w).and_then(|h| h.remove(&seq)) else {
            return;
        };
        self.unlink(w, seq, local, parent);
    }

    fn unlink(&mut self, w: Worker, seq: SeqHash, local: LocalHash, parent: Option<SeqHash>) {
        let key = (parent, local);
        let Some(holders) = self.children.get_mut(&key) else {
            return;
        };
        if let Some(at) = holders.iter().position(|(s, _)| *s == seq) {
            let workers = &mut holders[at].1;
            if let Ok(i) = workers.binary_search(&w) {
                workers.remove(i);
            }
            if workers.is_empty() {
                holders.swap_remove(at);
            }
        }
        if holders.is_empty() {
            self.children.remove(&key);
        }
    }

    fn drop_worker(&mut self, w: Worker) {
        if let Some(held) = self.held.remove(&w) {
            for (seq, (local, parent)) in held {
                self.unlink(w, seq, local, parent);
            }
        }
    }

    /// Each worker's depth: the chains that match the query, level by level. A worker can be on
    /// several chains at once (salted twins); its depth is the deepest.
    fn depths(&self, query: &[LocalHash]) -> OverlapScores {
        let mut depth: BTreeMap<Worker, u32> = BTreeMap::new();
        let mut frontier: Vec<(SeqHash, Vec<Worker>)> = Vec::new();
        let mut next: Vec<(SeqHash, Vec<Worker>)> = Vec::new();
        for (i, local) in query.iter().enumerate() {
            next.clear();
            if i == 0 {
                if let Some(roots) = self.children.get(&(None, *local)) {
                    next.extend(roots.iter().cloned());
                }
            } else {
                for (seq, workers) in &frontier {
                    let Some(children) = self.children.get(&(Some(*seq), *local)) else {
                        continue;
                    };
                    for (child, holders) in children {
                        let both = intersect(workers, holders);
                        if !both.is_empty() {
                            next.push((*child, both));
                        }
                    }
                }
            }
            if next.is_empty() {
                break;
            }
            for (_, workers) in &next {
                for w in workers {
                    depth.insert(*w, i as u32 + 1);
                }
            }
            std::mem::swap(&mut frontier, &mut next);
        }
        depth.into_iter().collect()
    }
}

/// Both sorted lists' common workers.
fn intersect(a: &[Worker], b: &[Worker]) -> Vec<Worker> {
    if a == b {
        return a.to_vec();
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out
}

/// The comparison's oracle: [`NaiveIndexer`]'s decisions, queries over maintained child lists.
#[derive(Debug, Default)]
pub struct Reference {
    naive: NaiveIndexer,
    // Plain std locking: the reference is applied from one thread; the lock makes it a `KvIndex`.
    chains: Mutex<Chains>,
}

impl Reference {
    pub fn new() -> Self {
        Self::default()
    }

    fn chains(&self) -> std::sync::MutexGuard<'_, Chains> {
        self.chains.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`KvIndex::find_matches`], also asked of `NaiveIndexer`; an error if they differ (the
    /// comparison must not trust a reference that disagrees with the contract).
    pub fn find_matches_checked(&self, query: &[LocalHash]) -> Result<OverlapScores, String> {
        let fast = self.find_matches(query);
        let naive = self.naive.find_matches(query);
        if fast == naive {
            Ok(fast)
        } else {
            Err(format!(
                "the comparison's reference disagrees with NaiveIndexer on a query of {} blocks: {:?} vs {:?}",
                query.len(),
                fast.to_sorted_vec(),
                naive.to_sorted_vec()
            ))
        }
    }

    /// `(worker, block)` pairs held, reachable or not.
    pub fn held_pairs(&self) -> u64 {
        self.chains().held.values().map(|h| h.len() as u64).sum()
    }
}

impl KvIndex for Reference {
    fn apply(&self, event: &Event) -> Result<(), EventError> {
        let verdict = self.naive.apply(event);
        let w = event.worker;
        let mut chains = self.chains();
        match &event.kind {
            EventKind::Stored { parent, blocks } => {
                if verdict.is_ok() {
                    let mut parent = *parent;
                    for b in blocks {
                        chains.hold(w, b.seq, b.local, parent);
                        parent = Some(b.seq);
                    }
                }
            }
            EventKind::Removed { blocks } => {
                for seq in blocks {
                    chains.drop_block(w, *seq);
                }
            }
            EventKind::Cleared => chains.drop_worker(w),
        }
        verdict
    }

    fn find_matches(&self, query: &[LocalHash]) -> OverlapScores {
        self.chains().depths(query)
    }

    fn remove_worker(&self, id: u64) {
        self.naive.remove_worker(id);
        let mut chains = self.chains();
        let of_id: Vec<Worker> = chains.held.keys().filter(|w| w.id == id).copied().collect();
        for w in of_id {
            chains.drop_worker(w);
        }
    }

    fn remove_worker_dp_rank(&self, worker: Worker) {
        self.naive.remove_worker_dp_rank(worker);
        self.chains().drop_worker(worker);
    }

    fn block_count(&self, worker: Worker) -> usize {
        self.chains().held.get(&worker).map_or(0, HashMap::len)
    }

    fn holds(&self, worker: Worker, seq: SeqHash) -> bool {
        self.chains()
            .held
            .get(&worker)
            .is_some_and(|held| held.contains_key(&seq))
    }

    fn block_counts(&self) -> Vec<(Worker, usize)> {
        let chains = self.chains();
        let counts = chains.held.iter().map(|(w, held)| (*w, held.len()));
        counts.filter(|&(_, n)| n > 0).collect()
    }

    fn dump(&self) -> Vec<Event> {
        self.naive.dump()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash_indexer::testing::{Profile, agrees_with_reference_using};

    #[test]
    fn agrees_with_naive_on_adversarial_histories() {
        agrees_with_reference_using(Reference::new, &Profile::adversarial().cases(300)).unwrap();
    }

    #[test]
    fn agrees_with_naive_on_long_chains() {
        agrees_with_reference_using(Reference::new, &Profile::long_chains().cases(100)).unwrap();
    }

    #[test]
    fn agrees_with_naive_with_many_workers() {
        agrees_with_reference_using(Reference::new, &Profile::many_workers().cases(100)).unwrap();
    }
}
