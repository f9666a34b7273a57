//! The differential harness of hybrid models: every layout under a
//! [`HybridIndexer`](crate::hybrid::HybridIndexer) against
//! [`NaiveHybridIndexer`](crate::hybrid::NaiveHybridIndexer), on models of one to four groups
//! and step sequences decoded from bytes. The proptest suite (`tests/hybrid.rs`) and the
//! cargo-fuzz target `hybrid` decode the same way.

use super::enabled_layouts;
use crate::error::EventError;
use crate::hash;
use crate::hybrid::{
    GroupKind, GroupSpec, HybridIndex, HybridIndexer, ModelGroups, NaiveHybridIndexer,
};
use crate::index::KvIndex;
use crate::mix::splitmix64;
use crate::types::{Block, Event, LocalHash, SeqHash, Worker};
use arbitrary::{Arbitrary, Unstructured};

/// Steps beyond this many are ignored.
pub const MAX_HYBRID_STEPS: usize = 160;
/// Longest chain a step names (longer ones are cut).
const MAX_CHAIN: usize = 20;
/// Tokens per block: small, so that windows and chunks fall below, on and across blocks.
const BLOCK_SIZE: u32 = 4;
const WINDOWS: [u32; 8] = [1, 2, 4, 5, 8, 9, 13, 16];
const CHUNKS: [u32; 4] = [4, 8, 12, 20];
/// Sets a second sequence hash apart from the first for one block (same local, same parent).
const TWIN: u64 = 0x5eed_0000_0000_0001;

/// One instruction of a hybrid case. Chains are over a four-letter alphabet, so they share
/// prefixes and repeat local hashes at the same position under other prefixes; workers are
/// three ids with two ranks each; a group byte is taken modulo the model's groups.
#[derive(Clone, Debug, Arbitrary)]
#[allow(missing_docs)] // Each variant's doc says what its fields mean.
pub enum HybridStep {
    /// `group` stores `chain`'s blocks from position `from` on, after the block before; a
    /// group other than the chain group stores only every `every`-th of them (a window's tail, a
    /// Mamba state now and then).
    Store {
        worker: u8,
        group: u8,
        chain: Vec<u8>,
        from: u8,
        every: u8,
    },
    /// Every group stores `chain` at once, as an engine caches a prefill: the chain group every
    /// block, the others every `every`-th block counted back from the last (a window's tail, a
    /// Mamba state after each step).
    StoreAll {
        worker: u8,
        chain: Vec<u8>,
        every: u8,
    },
    /// `group` stores `chain`'s last block again under a second sequence hash.
    Twin {
        worker: u8,
        group: u8,
        chain: Vec<u8>,
    },
    /// The chain group removes `chain`'s last block and stores it after `onto`'s last block
    /// instead: its held descendants follow it (or it closes a cycle, or conflicts).
    Relink {
        worker: u8,
        chain: Vec<u8>,
        onto: Vec<u8>,
    },
    /// `group` evicts `chain`'s blocks from `from` to `to` (out-of-window blocks, a hole).
    Remove {
        worker: u8,
        group: u8,
        chain: Vec<u8>,
        from: u8,
        to: u8,
    },
    /// The worker's engine cleared its cache (every group).
    Clear { worker: u8, group: u8 },
    /// The worker (or its whole server) leaves.
    RemoveWorker { worker: u8, all_ranks: bool },
    /// A query of `chain` (every chain seen so far is queried after every step too).
    Query { chain: Vec<u8> },
}

/// A model and what happens to it.
#[derive(Clone, Debug)]
pub struct HybridCase {
    /// The model's groups.
    pub groups: Vec<GroupSpec>,
    /// What happens.
    pub steps: Vec<HybridStep>,
    /// Varies every hash of the case.
    pub seed: u64,
}

/// The case `data` encodes; `None` if it is too short.
pub fn decode_hybrid_input(data: &[u8]) -> Option<HybridCase> {
    let mut u = Unstructured::new(data);
    let n = u.int_in_range(1..=4usize).ok()?;
    let mut groups = Vec::with_capacity(n);
    for _ in 0..n {
        let pick = u8::arbitrary(&mut u).ok()?;
        let kind = match pick % 4 {
            0 => GroupKind::FullAttention,
            1 => GroupKind::SlidingWindow {
                window: WINDOWS[(pick / 4) as usize % WINDOWS.len()],
            },
            2 => GroupKind::ChunkedLocal {
                chunk: CHUNKS[(pick / 4) as usize % CHUNKS.len()],
            },
            _ => GroupKind::Mamba,
        };
        groups.push(GroupSpec::new(kind, BLOCK_SIZE));
    }
    if !groups.iter().any(|g| g.kind == GroupKind::FullAttention) {
        let at = u.choose_index(n).ok()?;
        groups[at].kind = GroupKind::FullAttention;
    }
    let seed = u64::arbitrary(&mut u).ok()?;
    let mut steps = Vec::<HybridStep>::arbitrary(&mut u).ok()?;
    steps.truncate(MAX_HYBRID_STEPS);
    Some(HybridCase {
        groups,
        steps,
        seed,
    })
}

/// Runs the case `data` encodes on every enabled layout against the reference.
pub fn run_hybrid_input(data: &[u8]) -> Result<(), String> {
    match decode_hybrid_input(data) {
        Some(case) => check_hybrid_case(&case),
        None => Ok(()),
    }
}

struct Subject {
    name: &'static str,
    index: HybridIndexer<Box<dyn KvIndex>>,
    make: fn() -> Box<dyn KvIndex>,
}

/// Runs `case` on every enabled layout (and the default model of one group, when the case has
/// one) against [`NaiveHybridIndexer`]: every result and every query must agree, and once every
/// worker is removed, nothing may be left. Each index's dump, applied to an empty index of its
/// kind and to an empty reference, must answer every query as the reference does.
pub fn check_hybrid_case(case: &HybridCase) -> Result<(), String> {
    let model = ModelGroups::new(case.groups.clone()).map_err(|e| e.to_string())?;
    let reference = NaiveHybridIndexer::new(model.clone());
    let subjects: Vec<Subject> = enabled_layouts()
        .into_iter()
        .map(|layout| Subject {
            name: layout.name,
            index: HybridIndexer::with_layout(model.clone(), (layout.make)()),
            make: layout.make,
        })
        .collect();
    let world = World {
        seed: case.seed,
        groups: model.len() as u8,
        chain: model.chain_group(),
    };
    let mut seen: Vec<Vec<LocalHash>> = Vec::new();
    // Events not yet applied to the layouts: steps whose calls are all events go to them in
    // batches of one to a few steps, as an engine's batch gathers events, checked whole.
    let mut batch: Vec<(u32, Event)> = Vec::new();
    for (at, step) in case.steps.iter().enumerate() {
        let ops = world.ops(step);
        let roll = splitmix64(case.seed ^ at as u64);
        let events: Option<Vec<(u32, Event)>> = (ops.iter())
            .map(|op| match op {
                HybridOp::Apply(group, event) => Some((*group, event.clone())),
                _ => None,
            })
            .collect();
        let batched = match events {
            Some(events) if roll & 1 == 1 => {
                batch.extend(events);
                true
            }
            _ => false,
        };
        let last = at + 1 == case.steps.len();
        if !batched || roll >> 1 & 3 == 0 || last {
            check_batch(&reference, &subjects, &core::mem::take(&mut batch), at)?;
        }
        if !batched {
            for op in &ops {
                let expected = op.run(&reference);
                for subject in &subjects {
                    let got = op.run(&subject.index);
                    if got != expected {
                        return Err(format!(
                            "{}: step {at} ({step:?}): {op:?} gave {got:?}, the reference \
                             {expected:?}",
                            subject.name
                        ));
                    }
                }
            }
        }
        let mut new = world.chains(step);
        if let HybridStep::Relink { chain, onto, .. } = step {
            // The moved block's held descendants follow it: query where they went.
            let (chain, onto) = (world.locals(chain), world.locals(onto));
            if let Some(cut) = chain.len().checked_sub(1) {
                for old in seen.iter().filter(|s| s.starts_with(&chain)) {
                    new.push(onto.iter().chain(&old[cut..]).copied().collect());
                }
            }
        }
        for chain in new {
            if !seen.contains(&chain) {
                seen.push(chain);
            }
        }
        if !batch.is_empty() {
            continue; // the layouts have yet to see the step
        }
        for query in &seen {
            let expected = sorted(reference.find_matches(query).iter().collect());
            for subject in &subjects {
                let got = sorted(subject.index.find_matches(query).iter().collect());
                if got != expected {
                    return Err(format!(
                        "{}: after step {at} ({step:?}), query {query:?}: {got:?}, the reference \
                         {expected:?}",
                        subject.name
                    ));
                }
            }
        }
    }
    check_dumps(&model, &reference, &subjects, &seen)?;
    for id in 0..3 {
        reference.remove_worker(id);
        for subject in &subjects {
            subject.index.remove_worker(id);
        }
    }
    for subject in &subjects {
        let (tables, members) = subject.index.residue();
        if tables + members > 0 {
            return Err(format!(
                "{}: {tables} worker tables and {members} group paths left after every worker \
                 was removed",
                subject.name
            ));
        }
    }
    Ok(())
}

/// What a snapshot keeps: every index's dump rebuilds, in an empty index of its own kind and in
/// an empty reference, the answers of the reference to `queries`.
fn check_dumps(
    model: &ModelGroups,
    reference: &NaiveHybridIndexer,
    subjects: &[Subject],
    queries: &[Vec<LocalHash>],
) -> Result<(), String> {
    let naive = || -> Box<dyn HybridIndex> { Box::new(NaiveHybridIndexer::new(model.clone())) };
    type Rebuilt = (String, Box<dyn HybridIndex>, Vec<(u32, Event)>);
    let mut rebuilt: Vec<Rebuilt> = vec![(
        "naive dump into naive".to_owned(),
        naive(),
        reference.dump(),
    )];
    for subject in subjects {
        let dump = subject.index.dump();
        let same = HybridIndexer::with_layout(model.clone(), (subject.make)());
        let name = subject.name;
        rebuilt.push((
            format!("{name} dump into {name}"),
            Box::new(same),
            dump.clone(),
        ));
        rebuilt.push((format!("{name} dump into naive"), naive(), dump));
    }
    for (name, index, dump) in rebuilt {
        for (group, event) in &dump {
            index
                .apply(*group, event)
                .map_err(|e| format!("{name}: {event:?} of group {group} refused: {e}"))?;
        }
        for query in queries {
            let expected = sorted(reference.find_matches(query).iter().collect());
            let got = sorted(index.find_matches(query).iter().collect());
            if got != expected {
                return Err(format!(
                    "{name}: query {query:?}: {got:?}, the reference {expected:?}"
                ));
            }
        }
    }
    Ok(())
}

fn sorted(mut scores: Vec<(Worker, u32)>) -> Vec<(Worker, u32)> {
    scores.sort_unstable();
    scores
}

/// Applies `events` (a batch that ends at step `at`) to the reference one by one and to each
/// subject as one batch: every event's result and the touched workers' block counts must agree.
fn check_batch(
    reference: &NaiveHybridIndexer,
    subjects: &[Subject],
    events: &[(u32, Event)],
    at: usize,
) -> Result<(), String> {
    if events.is_empty() {
        return Ok(());
    }
    let expected = run_batch(reference, events, false);
    for subject in subjects {
        let got = run_batch(&subject.index, events, true);
        if got != expected {
            return Err(format!(
                "{}: the batch ending at step {at} ({} events) gave {got:?}, the reference \
                 {expected:?}",
                subject.name,
                events.len()
            ));
        }
    }
    Ok(())
}

/// Applies `events` one by one, or with `batch` as one [`HybridIndex::apply_batch`]; what each
/// returned, as text, and then the block counts of the workers they touched.
fn run_batch(index: &dyn HybridIndex, events: &[(u32, Event)], batch: bool) -> String {
    let results: Vec<Result<(), EventError>> = if batch {
        index.apply_batch(events)
    } else {
        (events.iter())
            .map(|(group, event)| index.apply(*group, event))
            .collect()
    };
    let counts: Vec<usize> = (events.iter())
        .flat_map(|(_, event)| {
            (0..index.model().len() as u32).map(|g| index.block_count(event.worker, g))
        })
        .collect();
    format!("{results:?} {counts:?}")
}

/// One call on a hybrid index.
#[derive(Debug)]
enum HybridOp {
    Apply(u32, Event),
    RemoveWorker(u64),
    RemoveRank(Worker),
}

impl HybridOp {
    /// Runs the call; what it returned, as text, and the block counts of the worker it touched.
    fn run(&self, index: &dyn HybridIndex) -> String {
        match self {
            HybridOp::Apply(group, event) => {
                let result = index.apply(*group, event);
                let counts: Vec<usize> = (0..index.model().len() as u32)
                    .map(|g| index.block_count(event.worker, g))
                    .collect();
                format!("{result:?} {counts:?}")
            }
            HybridOp::RemoveWorker(id) => {
                index.remove_worker(*id);
                String::new()
            }
            HybridOp::RemoveRank(worker) => {
                index.remove_worker_dp_rank(*worker);
                String::new()
            }
        }
    }
}

/// How steps become events.
struct World {
    seed: u64,
    groups: u8,
    chain: u32,
}

impl World {
    fn worker(&self, byte: u8) -> Worker {
        Worker::new(u64::from(byte % 3), u32::from(byte / 3 % 2))
    }

    fn group(&self, byte: u8) -> u32 {
        u32::from(byte % self.groups)
    }

    fn locals(&self, chain: &[u8]) -> Vec<LocalHash> {
        chain
            .iter()
            .take(MAX_CHAIN)
            .map(|&letter| LocalHash(splitmix64(self.seed ^ u64::from(letter % 4))))
            .collect()
    }

    /// The engine's hashes of `chain`'s blocks: one per prefix.
    fn blocks(&self, chain: &[u8]) -> Vec<Block> {
        let locals = self.locals(chain);
        hash::seq_hashes(&locals)
            .into_iter()
            .zip(locals)
            .map(|(seq, local)| Block::new(local, SeqHash(seq.0 ^ self.seed)))
            .collect()
    }

    fn chains(&self, step: &HybridStep) -> Vec<Vec<LocalHash>> {
        let chains: Vec<&Vec<u8>> = match step {
            HybridStep::Store { chain, .. }
            | HybridStep::StoreAll { chain, .. }
            | HybridStep::Twin { chain, .. }
            | HybridStep::Remove { chain, .. }
            | HybridStep::Query { chain } => vec![chain],
            HybridStep::Relink { chain, onto, .. } => vec![chain, onto],
            HybridStep::Clear { .. } | HybridStep::RemoveWorker { .. } => vec![],
        };
        chains
            .into_iter()
            .map(|c| self.locals(c))
            .filter(|c| !c.is_empty())
            .collect()
    }

    fn ops(&self, step: &HybridStep) -> Vec<HybridOp> {
        match *step {
            HybridStep::Store {
                worker,
                group,
                ref chain,
                from,
                every,
            } => {
                let blocks = self.blocks(chain);
                let from = usize::from(from).min(blocks.len());
                let parent = from.checked_sub(1).map(|p| blocks[p].seq);
                let every = usize::from(every % 4) + 1;
                let kept: Vec<Block> = blocks[from..].iter().step_by(every).copied().collect();
                let event = Event::stored(self.worker(worker), 0, parent, kept);
                vec![HybridOp::Apply(self.group(group), event)]
            }
            HybridStep::StoreAll {
                worker,
                ref chain,
                every,
            } => {
                let blocks = self.blocks(chain);
                let every = usize::from(every % 4) + 1;
                let worker = self.worker(worker);
                (0..u32::from(self.groups))
                    .map(|group| {
                        let kept: Vec<Block> = if group == self.chain {
                            blocks.clone()
                        } else {
                            let n = blocks.len();
                            (0..n)
                                .filter(|i| (n - 1 - i).is_multiple_of(every))
                                .map(|i| blocks[i])
                                .collect()
                        };
                        HybridOp::Apply(group, Event::stored(worker, 0, None, kept))
                    })
                    .collect()
            }
            HybridStep::Twin {
                worker,
                group,
                ref chain,
            } => {
                let blocks = self.blocks(chain);
                let Some(last) = blocks.last() else {
                    return vec![];
                };
                let parent = blocks.len().checked_sub(2).map(|p| blocks[p].seq);
                let twin = Block::new(last.local, SeqHash(last.seq.0 ^ TWIN));
                let event = Event::stored(self.worker(worker), 0, parent, vec![twin]);
                vec![HybridOp::Apply(self.group(group), event)]
            }
            HybridStep::Relink {
                worker,
                ref chain,
                ref onto,
            } => {
                let (blocks, onto) = (self.blocks(chain), self.blocks(onto));
                let (Some(last), Some(parent)) = (blocks.last(), onto.last()) else {
                    return vec![];
                };
                let worker = self.worker(worker);
                let removed = Event::removed(worker, 0, vec![last.seq]);
                let stored = Event::stored(worker, 0, Some(parent.seq), vec![*last]);
                vec![
                    HybridOp::Apply(self.chain, removed),
                    HybridOp::Apply(self.chain, stored),
                ]
            }
            HybridStep::Remove {
                worker,
                group,
                ref chain,
                from,
                to,
            } => {
                let blocks = self.blocks(chain);
                let from = usize::from(from).min(blocks.len());
                let to = usize::from(to).clamp(from, blocks.len());
                let seqs = blocks[from..to].iter().map(|b| b.seq).collect();
                let event = Event::removed(self.worker(worker), 0, seqs);
                vec![HybridOp::Apply(self.group(group), event)]
            }
            HybridStep::Clear { worker, group } => {
                let event = Event::cleared(self.worker(worker), 0);
                vec![HybridOp::Apply(self.group(group), event)]
            }
            HybridStep::RemoveWorker { worker, all_ranks } => {
                let worker = self.worker(worker);
                if all_ranks {
                    vec![HybridOp::RemoveWorker(worker.id)]
                } else {
                    vec![HybridOp::RemoveRank(worker)]
                }
            }
            HybridStep::Query { .. } => vec![],
        }
    }
}

/// A chain of a few shared bases, maybe forked at one position: cases whose chains share long
/// prefixes and diverge (a random chain over four letters rarely shares more than a block).
fn chain_strategy() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    (
        0u8..3,
        1usize..=MAX_CHAIN,
        proptest::option::of((0usize..MAX_CHAIN, 0u8..4)),
    )
        .prop_map(|(base, len, fork)| {
            (0..len)
                .map(|i| match fork {
                    Some((at, letter)) if i >= at => letter.wrapping_add(i as u8),
                    _ => base.wrapping_mul(3).wrapping_add(i as u8 * 5) % 4,
                })
                .collect()
        })
}

/// Cases for the proptest suite: models of one to four groups of every kind, and steps that
/// mostly store and evict along a few shared chains.
pub fn hybrid_case_strategy() -> impl proptest::strategy::Strategy<Value = HybridCase> {
    use proptest::prelude::*;
    let kind = prop_oneof![
        2 => Just(GroupKind::FullAttention),
        2 => proptest::sample::select(WINDOWS.to_vec())
            .prop_map(|window| GroupKind::SlidingWindow { window }),
        1 => proptest::sample::select(CHUNKS.to_vec())
            .prop_map(|chunk| GroupKind::ChunkedLocal { chunk }),
        2 => Just(GroupKind::Mamba),
    ];
    let groups = (
        proptest::collection::vec(kind, 1..=4),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(kinds, full)| {
            let mut groups: Vec<GroupSpec> = kinds
                .into_iter()
                .map(|k| GroupSpec::new(k, BLOCK_SIZE))
                .collect();
            if !groups.iter().any(|g| g.kind == GroupKind::FullAttention) {
                let at = full.index(groups.len());
                groups[at].kind = GroupKind::FullAttention;
            }
            groups
        });
    let worker = 0u8..4;
    let step = prop_oneof![
        4 => (worker.clone(), any::<u8>(), chain_strategy(), prop_oneof![3 => Just(0u8), 1 => 0u8..12], any::<u8>())
            .prop_map(|(worker, group, chain, from, every)| HybridStep::Store { worker, group, chain, from, every }),
        6 => (worker.clone(), chain_strategy(), prop_oneof![2 => Just(0u8), 1 => any::<u8>()])
            .prop_map(|(worker, chain, every)| HybridStep::StoreAll { worker, chain, every }),
        1 => (worker.clone(), any::<u8>(), chain_strategy())
            .prop_map(|(worker, group, chain)| HybridStep::Twin { worker, group, chain }),
        1 => (worker.clone(), chain_strategy(), chain_strategy())
            .prop_map(|(worker, chain, onto)| HybridStep::Relink { worker, chain, onto }),
        4 => (worker.clone(), any::<u8>(), chain_strategy(), 0u8..16, 0u8..24)
            .prop_map(|(worker, group, chain, from, to)| HybridStep::Remove { worker, group, chain, from, to }),
        1 => (worker.clone(), any::<u8>()).prop_map(|(worker, group)| HybridStep::Clear { worker, group }),
        1 => (worker, any::<bool>()).prop_map(|(worker, all_ranks)| HybridStep::RemoveWorker { worker, all_ranks }),
        2 => chain_strategy().prop_map(|chain| HybridStep::Query { chain }),
    ];
    (groups, proptest::collection::vec(step, 1..80), any::<u64>()).prop_map(
        |(groups, steps, seed)| HybridCase {
            groups,
            steps,
            seed,
        },
    )
}
