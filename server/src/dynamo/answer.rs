//! The answer of Dynamo's `/query` and `/query_by_hash`: `scores` (GPU-tier tokens per worker
//! and rank) and `instances` (per instance, Mooncake RFC #1403's `longest_matched`, `gpu`, `dp`,
//! `cpu`, `disk`, each tier cumulative through the heavier ones).

use std::collections::BTreeMap;

use flash_indexer::LocalHash;
use serde::Serialize;

use crate::config::MEDIUM_ALIASES;
use crate::service::{Model, TierIndex};

/// What Dynamo's router answers, field for field.
#[derive(Debug, Default, Serialize)]
pub struct ScoreResponse {
    /// Tokens matched on the GPU tier, by worker id and then data-parallel rank.
    pub scores: BTreeMap<String, BTreeMap<String, u32>>,
    /// How often the matched blocks were used: Dynamo fills it only when its index tracks block
    /// frequencies, which this server does not, so it is always empty.
    pub frequencies: Vec<usize>,
    /// Per instance, its best rank's tokens on each tier, cumulative through heavier tiers.
    pub instances: BTreeMap<String, InstanceSummary>,
}

/// One instance's matches, in tokens (Dynamo's `MooncakeOverlapSummary`).
#[derive(Debug, Default, PartialEq, Eq, Serialize)]
pub struct InstanceSummary {
    /// The largest of `gpu`, `cpu` and `disk`.
    pub longest_matched: u32,
    /// On the GPU, at its best rank.
    pub gpu: u32,
    /// On the GPU, per rank.
    pub dp: BTreeMap<String, u32>,
    /// On the GPU or in host memory, at its best rank.
    pub cpu: u32,
    /// On any tier, at its best rank.
    pub disk: u32,
}

/// Dynamo's class of a tier: 0 for the GPU, 1 for host memory, 2 for disk (and external
/// storage, which Dynamo counts with disk); `None` for tiers Dynamo has no name for.
fn class(tier: &str) -> Option<usize> {
    let row = MEDIUM_ALIASES
        .iter()
        .position(|row| row.iter().any(|m| m.eq_ignore_ascii_case(tier)))?;
    Some(row.min(2))
}

/// `model`'s answer to `query` from its indexes `tiers` (those the service queries), with blocks
/// counted as `model.block_size` tokens.
///
/// A worker's depth on a class is the deepest prefix it holds on that class's tier and the
/// heavier ones together (each tier's index holds what it and every heavier tier hold), so a
/// chain that continues on a lighter tier counts as Dynamo counts it.
pub fn score(model: &Model, tiers: &[TierIndex], query: &[LocalHash]) -> ScoreResponse {
    // Per (worker id, rank): the depth on each class.
    let mut depths: BTreeMap<(u64, u32), [u32; 3]> = BTreeMap::new();
    for tier in tiers {
        let Some(class) = class(&tier.tier.name) else {
            continue;
        };
        for (worker, depth) in tier.pool.find_matches(query).iter() {
            let entry = depths.entry((worker.id, worker.dp_rank)).or_default();
            entry[class] = entry[class].max(depth);
        }
    }
    let tokens =
        |blocks: u32| blocks.saturating_mul(model.block_size.min(u32::MAX as usize) as u32);
    let mut answer = ScoreResponse::default();
    for ((id, rank), [gpu, cpu, disk]) in depths {
        let cpu = cpu.max(gpu);
        let disk = disk.max(cpu);
        if gpu > 0 {
            (answer.scores.entry(id.to_string()).or_default())
                .insert(rank.to_string(), tokens(gpu));
        }
        let summary = answer.instances.entry(id.to_string()).or_default();
        summary.dp.insert(rank.to_string(), tokens(gpu));
        summary.gpu = summary.gpu.max(tokens(gpu));
        summary.cpu = summary.cpu.max(tokens(cpu));
        summary.disk = summary.disk.max(tokens(disk));
        summary.longest_matched = summary.gpu.max(summary.cpu).max(summary.disk);
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_fall_into_dynamo_classes() {
        assert_eq!(class("GPU"), Some(0));
        assert_eq!(class("cpu_tier1"), Some(1));
        assert_eq!(class("CPU_TIER2"), Some(2));
        assert_eq!(class("REMOTE"), Some(2));
        assert_eq!(class("HBM3"), None);
    }
}
