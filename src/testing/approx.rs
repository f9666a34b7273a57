//! The differential harness of approximate mode: every layout under an
//! [`ApproximateIndexer`](crate::ApproximateIndexer) against
//! [`NaiveApproximateIndexer`](crate::NaiveApproximateIndexer), on step sequences decoded from
//! bytes. The proptest suite (`tests/approximate.rs`) and the cargo-fuzz target `approximate`
//! decode the same way, so both explore one vocabulary.

use super::enabled_layouts;
use crate::approx::{ApproximateIndex, ApproximateIndexer, NaiveApproximateIndexer, Retention};
use crate::hash;
use crate::index::KvIndex;
use crate::scores::OverlapScores;
use crate::types::{Block, Event, LocalHash, SeqHash, Worker};
use arbitrary::{Arbitrary, Unstructured};
use core::time::Duration;

/// Steps beyond this many are ignored.
pub const MAX_APPROX_STEPS: usize = 192;
/// Longest chain a step names (longer ones are cut).
const MAX_CHAIN: usize = 24;

/// One instruction of an approximate-mode case. Chains are over a four-letter alphabet, so they
/// share prefixes often; workers are three ids with two ranks each.
#[derive(Clone, Debug, Arbitrary)]
#[allow(missing_docs)] // Each variant's doc says what its fields mean.
pub enum ApproxStep {
    /// A routing decision of `chain` to `worker`, at the harness's clock.
    Route { worker: u8, chain: Vec<u8> },
    /// A whole decision of `chain` ([`ApproximateIndex::route`]): the best-scored worker
    /// (ties to the lowest) when `pick` is even, else worker `pick / 2` whatever the scores.
    Decide { chain: Vec<u8>, pick: u8 },
    /// The `request`-th routed request (modulo how many there were) finished.
    Release { request: u8 },
    /// The clock moves forward.
    Advance { ms: u16 },
    /// The clock the next calls pass moves back (the index must not go back with it).
    Rewind { ms: u8 },
    /// An explicit expiry at the clock.
    Expire,
    /// An engine event: `worker` stores `chain` from position `from` (its parent the block
    /// before), with Dynamo's sequence hashes.
    Store {
        worker: u8,
        chain: Vec<u8>,
        from: u8,
    },
    /// An engine event: `worker` evicts the block at `at` of `chain`.
    Remove { worker: u8, chain: Vec<u8>, at: u8 },
    /// An engine event: `worker` cleared its cache.
    Clear { worker: u8 },
    /// The worker (or its whole server) leaves.
    RemoveWorker { worker: u8, all_ranks: bool },
    /// A query of `chain` (every chain seen so far is queried after every step too).
    Query { chain: Vec<u8> },
}

/// The retention a case runs under, and its steps.
#[derive(Clone, Debug)]
pub struct ApproxCase {
    /// How predictions are kept.
    pub retention: Retention,
    /// What happens.
    pub steps: Vec<ApproxStep>,
}

/// The case `data` encodes; `None` if it is too short.
pub fn decode_approx_input(data: &[u8]) -> Option<ApproxCase> {
    let mut u = Unstructured::new(data);
    let capacity = usize::from(u.int_in_range(0..=20u8).ok()?);
    let retention = match u.int_in_range(0..=2u8).ok()? {
        0 => Retention::ttl(Duration::from_millis(u64::from(
            u16::arbitrary(&mut u).ok()? % 400,
        )))
        .with_capacity(capacity),
        1 => Retention::lru(capacity),
        _ => Retention::lru(capacity).with_ttl(Duration::from_millis(u64::from(
            u8::arbitrary(&mut u).ok()?,
        ))),
    };
    // Steps until the bytes run out (a `Vec`'s own decoding stops at random, after two steps on
    // average).
    let mut steps = Vec::new();
    while !u.is_empty() && steps.len() < MAX_APPROX_STEPS {
        steps.push(ApproxStep::arbitrary(&mut u).ok()?);
    }
    Some(ApproxCase { retention, steps })
}

fn worker(w: u8) -> Worker {
    let w = w % 6;
    Worker::new(u64::from(w / 2), u32::from(w % 2))
}

fn chain(letters: &[u8]) -> Vec<LocalHash> {
    letters
        .iter()
        .take(MAX_CHAIN)
        .map(|l| LocalHash(0xC0DE + u64::from(l % 4)))
        .collect()
}

/// A [`ApproxStep::Decide`]'s choice from `scores` (kept in `seen`, to compare).
fn choose(scores: &OverlapScores, pick: u8, seen: &mut Vec<(Worker, u32)>) -> Worker {
    *seen = scores.to_sorted_vec();
    let best = (seen.iter()).max_by_key(|&&(w, depth)| (depth, core::cmp::Reverse(w)));
    match (pick % 2, best) {
        (0, Some(&(w, _))) => w,
        _ => worker(pick / 2),
    }
}

const WORKERS: [u8; 6] = [0, 1, 2, 3, 4, 5];

/// Runs `case` on `subject` and on the reference, comparing every result, every query of every
/// chain seen so far, and each worker's counts after every step; and at the end, that the
/// subject's dump rebuilds its answers. `Err` says where they first differ.
pub fn check_approximate(subject: &dyn ApproximateIndex, case: &ApproxCase) -> Result<(), String> {
    let reference = NaiveApproximateIndexer::new(case.retention);
    let mut now = Duration::from_secs(1);
    let mut routed = Vec::new();
    let mut seen: Vec<Vec<LocalHash>> = Vec::new();
    let remember = |seen: &mut Vec<Vec<LocalHash>>, c: &[LocalHash]| {
        if !c.is_empty() && !seen.iter().any(|s| s == c) && seen.len() < 48 {
            seen.push(c.to_vec());
        }
    };
    let apply_both = |event: &Event| {
        let (a, b) = (subject.apply(event), reference.apply(event));
        match a == b {
            true => Ok(()),
            false => Err(format!("apply: {a:?}, reference {b:?}")),
        }
    };
    for (at, step) in case.steps.iter().enumerate() {
        let fail = |what: String| Err(format!("step {at} ({step:?}): {what}"));
        match step {
            ApproxStep::Route {
                worker: w,
                chain: c,
            } => {
                let c = chain(c);
                remember(&mut seen, &c);
                let a = subject.record_routing(worker(*w), &c, now);
                let b = reference.record_routing(worker(*w), &c, now);
                routed.push((a, b));
            }
            ApproxStep::Decide { chain: c, pick } => {
                let c = chain(c);
                remember(&mut seen, &c);
                let (mut seen_a, mut seen_b) = (Vec::new(), Vec::new());
                let (wa, a) = subject.route(&c, now, &mut |s: &OverlapScores| {
                    choose(s, *pick, &mut seen_a)
                });
                let (wb, b) =
                    reference.route(&c, now, |s: &OverlapScores| choose(s, *pick, &mut seen_b));
                if (wa, &seen_a) != (wb, &seen_b) {
                    return fail(format!(
                        "chose {wa} from {seen_a:?}, reference {wb} from {seen_b:?}"
                    ));
                }
                routed.push((a, b));
            }
            ApproxStep::Release { request } => {
                if !routed.is_empty() {
                    let (a, b) = routed[usize::from(*request) % routed.len()];
                    // Each refuses the other's request, changing nothing.
                    if subject.release(b, now).is_ok() || reference.release(a, now).is_ok() {
                        return fail("released a request another index routed".into());
                    }
                    if subject.release(a, now).is_err() || reference.release(b, now).is_err() {
                        return fail("refused its own request".into());
                    }
                }
            }
            ApproxStep::Advance { ms } => now += Duration::from_millis(u64::from(*ms)),
            ApproxStep::Rewind { ms } => {
                now = now.saturating_sub(Duration::from_millis(u64::from(*ms)))
            }
            ApproxStep::Expire => {
                subject.expire(now);
                reference.expire(now);
            }
            ApproxStep::Store {
                worker: w,
                chain: c,
                from,
            } => {
                let c = chain(c);
                remember(&mut seen, &c);
                let seqs = hash::seq_hashes(&c);
                let from = usize::from(*from) % (c.len() + 1);
                let parent = from.checked_sub(1).map(|p| seqs[p]);
                let blocks = (from..c.len()).map(|i| Block::new(c[i], seqs[i])).collect();
                let event = Event::stored(worker(*w), 0, parent, blocks);
                if let Err(what) = apply_both(&event) {
                    return fail(what);
                }
            }
            ApproxStep::Remove {
                worker: w,
                chain: c,
                at,
            } => {
                let c = chain(c);
                let seqs = hash::seq_hashes(&c);
                let blocks: Vec<SeqHash> = seqs
                    .get(usize::from(*at) % c.len().max(1))
                    .copied()
                    .into_iter()
                    .collect();
                let event = Event::removed(worker(*w), 0, blocks);
                if let Err(what) = apply_both(&event) {
                    return fail(what);
                }
            }
            ApproxStep::Clear { worker: w } => {
                let event = Event::cleared(worker(*w), 0);
                if let Err(what) = apply_both(&event) {
                    return fail(what);
                }
            }
            ApproxStep::RemoveWorker {
                worker: w,
                all_ranks,
            } => {
                if *all_ranks {
                    subject.remove_worker(worker(*w).id);
                    reference.remove_worker(worker(*w).id);
                } else {
                    subject.remove_worker_dp_rank(worker(*w));
                    reference.remove_worker_dp_rank(worker(*w));
                }
            }
            ApproxStep::Query { chain: c } => remember(&mut seen, &chain(c)),
        }
        for query in &seen {
            let (a, b) = (subject.find_matches(query), reference.find_matches(query));
            if a != b {
                return fail(format!(
                    "query {query:?}: {:?}, reference {:?}",
                    a.to_sorted_vec(),
                    b.to_sorted_vec()
                ));
            }
        }
        for w in WORKERS.map(worker) {
            let a = (
                subject.is_exact(w),
                subject.predicted_blocks(w),
                subject.block_count(w),
            );
            let b = (
                reference.is_exact(w),
                reference.predicted_blocks(w),
                reference.block_count(w),
            );
            if a != b {
                return fail(format!(
                    "{w} (exact, predicted, blocks): {a:?}, reference {b:?}"
                ));
            }
        }
    }
    let rebuilt = crate::NaiveIndexer::new();
    for event in subject.dump() {
        rebuilt
            .apply(&event)
            .map_err(|e| format!("dump: {event:?}: {e}"))?;
    }
    for query in &seen {
        let (a, b) = (rebuilt.find_matches(query), reference.find_matches(query));
        if a != b {
            return Err(format!(
                "the dump rebuilt answers {:?} to {query:?}, reference {:?}",
                a.to_sorted_vec(),
                b.to_sorted_vec()
            ));
        }
    }
    Ok(())
}

/// Runs the case `data` encodes on an [`ApproximateIndexer`] over every enabled layout.
/// `Err` names the layout and the first difference from the reference.
pub fn run_approximate_input(data: &[u8]) -> Result<(), String> {
    match decode_approx_input(data) {
        Some(case) => approximate_case_on_every_layout(&case),
        None => Ok(()),
    }
}

/// Generated cases for the proptest suite: short chains over the four letters (so prompts share
/// prefixes and small capacities fill up), mostly routing decisions and releases, with engine
/// events, removals and clock moves between them.
pub fn approx_case_strategy() -> impl proptest::strategy::Strategy<Value = ApproxCase> {
    use proptest::prelude::*;
    let chain = || proptest::collection::vec(0u8..4, 0..10);
    let step = prop_oneof![
        6 => (0u8..6, chain()).prop_map(|(worker, chain)| ApproxStep::Route { worker, chain }),
        3 => (chain(), any::<u8>()).prop_map(|(chain, pick)| ApproxStep::Decide { chain, pick }),
        3 => any::<u8>().prop_map(|request| ApproxStep::Release { request }),
        2 => (0u16..200).prop_map(|ms| ApproxStep::Advance { ms }),
        1 => (0u8..100).prop_map(|ms| ApproxStep::Rewind { ms }),
        1 => Just(ApproxStep::Expire),
        1 => (0u8..6, chain(), 0u8..10)
            .prop_map(|(worker, chain, from)| ApproxStep::Store { worker, chain, from }),
        1 => (0u8..6, chain(), 0u8..10)
            .prop_map(|(worker, chain, at)| ApproxStep::Remove { worker, chain, at }),
        1 => (0u8..6).prop_map(|worker| ApproxStep::Clear { worker }),
        1 => (0u8..6, any::<bool>())
            .prop_map(|(worker, all_ranks)| ApproxStep::RemoveWorker { worker, all_ranks }),
        2 => chain().prop_map(|chain| ApproxStep::Query { chain }),
    ];
    let retention = prop_oneof![
        (0u64..400, 0usize..16)
            .prop_map(|(ms, cap)| Retention::ttl(Duration::from_millis(ms)).with_capacity(cap)),
        (0usize..16).prop_map(Retention::lru),
        (0u64..300, 0usize..16)
            .prop_map(|(ms, cap)| Retention::lru(cap).with_ttl(Duration::from_millis(ms))),
    ];
    (retention, proptest::collection::vec(step, 0..120))
        .prop_map(|(retention, steps)| ApproxCase { retention, steps })
}

/// Runs `case` on an [`ApproximateIndexer`] over every enabled layout against the reference.
pub fn approximate_case_on_every_layout(case: &ApproxCase) -> Result<(), String> {
    for layout in enabled_layouts() {
        let subject = ApproximateIndexer::with_index((layout.make)(), case.retention);
        check_approximate(&subject, case).map_err(|e| format!("{}: {e}", layout.name))?;
    }
    Ok(())
}
