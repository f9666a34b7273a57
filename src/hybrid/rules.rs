//! vLLM 0.33's reuse rules, transcribed: how long a prefix every group of a model can supply.
//!
//! Sources, in `vllm/v1/core/`: `HybridKVCacheCoordinator.find_longest_cache_hit` and
//! `verify_and_split_kv_cache_groups` (`kv_cache_coordinator.py`) for how groups combine;
//! `find_longest_cache_hit` of `FullAttentionManager`, `SlidingWindowManager`
//! (with `_contiguous_blocks_for_hit`), `ChunkedLocalAttentionManager` and `MambaManager`
//! (`single_type_kv_cache_manager.py`) for each kind. Every group here has one block size, so
//! vLLM's alignment to the scheduler block size is a block, and no EAGLE block is dropped (the
//! router's business, like the prompt's last token). Lengths are in blocks.

use super::model::{GroupKind, ModelGroups};

/// What the rules ask about one worker's groups on one query.
pub(crate) trait Holdings {
    /// Whether `group` (not the chain group) holds the query's block `i`.
    fn held(&mut self, group: u32, i: usize) -> bool;

    /// The rule of spec `spec` (an index into [`ModelGroups::specs`], a kind with
    /// [`run_blocks`](super::model::Spec::run_blocks)) for the first `max_blocks` blocks, if
    /// the holder keeps that answer whole; `None` asks the rule to look block by block.
    fn run_answer(&mut self, spec: usize, max_blocks: usize) -> Option<usize> {
        let _ = (spec, max_blocks);
        None
    }
}

impl<F: FnMut(u32, usize) -> bool> Holdings for F {
    fn held(&mut self, group: u32, i: usize) -> bool {
        self(group, i)
    }
}

/// The longest prefix, in blocks, of a query of `query_blocks` blocks that every group can
/// supply. `holdings` says which of the query's blocks each group holds; the chain group holds
/// exactly the first `chain_depth` (the caller's walk found them), so it is not asked.
pub(crate) fn longest_hit(
    model: &ModelGroups,
    query_blocks: usize,
    chain_depth: usize,
    holdings: &mut dyn Holdings,
) -> usize {
    let block_size = model.block_size() as usize;
    let chain = model.chain_group();
    let specs = model.specs();
    let is_simple_hybrid = specs.len() == 2 && matches!(specs[0].kind, GroupKind::FullAttention);

    let mut hit_length = query_blocks;
    // A full-attention spec's hit, once looked up (at most one full-attention spec exists).
    let mut full_hit: Option<usize> = None;
    loop {
        let mut curr_hit_length = hit_length;
        for (at, spec) in specs.iter().enumerate() {
            if let Some(answer) = holdings.run_answer(at, curr_hit_length) {
                curr_hit_length = answer;
                continue;
            }
            let mut all_hold = |i: usize| {
                spec.members.iter().all(|&g| {
                    if g == chain {
                        i < chain_depth
                    } else {
                        holdings.held(g, i)
                    }
                })
            };
            curr_hit_length = match spec.kind {
                GroupKind::FullAttention => {
                    // Full attention is downward-closed: looked up once, then only trimmed.
                    let found = *full_hit.get_or_insert_with(|| {
                        if !spec.members.contains(&chain) {
                            return full_attention(curr_hit_length, &mut all_hold);
                        }
                        let bound = curr_hit_length.min(chain_depth);
                        if spec.members.len() == 1 {
                            return bound;
                        }
                        full_attention(bound, &mut all_hold)
                    });
                    curr_hit_length.min(found)
                }
                GroupKind::SlidingWindow { window } => {
                    sliding_window(curr_hit_length, window as usize, block_size, &mut all_hold)
                }
                GroupKind::ChunkedLocal { chunk } => {
                    chunked_local(curr_hit_length, chunk as usize, block_size, &mut all_hold)
                }
                GroupKind::Mamba => mamba(curr_hit_length, &mut all_hold),
            };
        }
        if curr_hit_length >= hit_length {
            break;
        }
        hit_length = curr_hit_length;
        if is_simple_hybrid {
            break;
        }
    }
    hit_length
}

/// `FullAttentionManager.find_longest_cache_hit`: the run of held blocks from the first.
fn full_attention(max_blocks: usize, held: &mut dyn FnMut(usize) -> bool) -> usize {
    (0..max_blocks).find(|&i| !held(i)).unwrap_or(max_blocks)
}

/// `SlidingWindowManager.find_longest_cache_hit`: from the right, the first run of
/// `cdiv(window - 1, block_size)` held blocks ends the hit; without one, the run of held blocks
/// from the first.
fn sliding_window(
    max_blocks: usize,
    window: usize,
    block_size: usize,
    held: &mut dyn FnMut(usize) -> bool,
) -> usize {
    let contiguous = (window - 1).div_ceil(block_size);
    let mut num_contiguous_blocks = 0;
    for i in (0..max_blocks).rev() {
        if held(i) {
            num_contiguous_blocks += 1;
            if num_contiguous_blocks >= contiguous {
                return i + num_contiguous_blocks;
            }
        } else {
            num_contiguous_blocks = 0;
        }
    }
    num_contiguous_blocks
}

/// `ChunkedLocalAttentionManager.find_longest_cache_hit`: the blocks before the last chunk
/// start are computed (null); from there, the run of held blocks.
fn chunked_local(
    max_blocks: usize,
    chunk: usize,
    block_size: usize,
    held: &mut dyn FnMut(usize) -> bool,
) -> usize {
    let max_length = max_blocks * block_size;
    let start_block = max_length / chunk * chunk / block_size;
    (start_block..max_blocks)
        .find(|&i| !held(i))
        .unwrap_or(max_blocks)
}

/// `MambaManager.find_longest_cache_hit`: the last held block ends the hit.
fn mamba(max_blocks: usize, held: &mut dyn FnMut(usize) -> bool) -> usize {
    (0..max_blocks)
        .rev()
        .find(|&i| held(i))
        .map_or(0, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hybrid::GroupSpec;

    fn model(kinds: &[GroupKind], block_size: u32) -> ModelGroups {
        ModelGroups::new(
            kinds
                .iter()
                .map(|&kind| GroupSpec::new(kind, block_size))
                .collect(),
        )
        .unwrap()
    }

    /// `held` as one string per group, `x` held, `.` not.
    fn hit(model: &ModelGroups, rows: &[&str]) -> usize {
        let n = rows[0].len();
        let chain = model.chain_group() as usize;
        let depth = rows[chain].find('.').unwrap_or(n);
        longest_hit(model, n, depth, &mut |g, i| {
            rows[g as usize].as_bytes()[i] == b'x'
        })
    }

    #[test]
    fn one_full_attention_group_is_the_run_from_the_first_block() {
        let m = model(&[GroupKind::FullAttention], 16);
        assert_eq!(hit(&m, &["xxx.x"]), 3);
        assert_eq!(hit(&m, &[".xxxx"]), 0);
    }

    #[test]
    fn sliding_window_needs_only_the_blocks_under_its_window() {
        // Window 48 tokens, blocks of 16: cdiv(47, 16) = 3 blocks before the hit's end.
        let m = model(
            &[
                GroupKind::FullAttention,
                GroupKind::SlidingWindow { window: 48 },
            ],
            16,
        );
        assert_eq!(hit(&m, &["xxxxxxxx", "....xxxx"]), 8);
        assert_eq!(hit(&m, &["xxxxxxxx", "...xxx.x"]), 6);
        // No window anywhere: the run from the first block counts.
        assert_eq!(hit(&m, &["xxxxxxxx", "xx.x.x.x"]), 2);
        // The full-attention group bounds the window's search.
        assert_eq!(hit(&m, &["xxxxx...", "..xxxxxx"]), 5);
    }

    #[test]
    fn a_window_within_one_block_needs_one_block() {
        let m = model(
            &[
                GroupKind::FullAttention,
                GroupKind::SlidingWindow { window: 17 },
            ],
            16,
        );
        assert_eq!(hit(&m, &["xxxxx", "...x."]), 4);
    }

    #[test]
    fn mamba_needs_the_state_that_ends_the_hit() {
        let m = model(&[GroupKind::FullAttention, GroupKind::Mamba], 16);
        assert_eq!(hit(&m, &["xxxxxx", ".x..x."]), 5);
        assert_eq!(hit(&m, &["xxx...", ".x..x."]), 2);
        assert_eq!(hit(&m, &["xxxxxx", "......"]), 0);
    }

    #[test]
    fn chunked_local_needs_the_blocks_of_the_last_chunk() {
        // vLLM's docstring: chunk 8, blocks of 4.
        let m = model(
            &[
                GroupKind::FullAttention,
                GroupKind::ChunkedLocal { chunk: 8 },
            ],
            4,
        );
        assert_eq!(hit(&m, &["xxxx", "...."]), 4);
        assert_eq!(hit(&m, &["xxx", "..x"]), 3);
        assert_eq!(hit(&m, &["xxx", "..."]), 2);
    }

    #[test]
    fn three_groups_reach_a_fixed_point() {
        // Full, window of 2 blocks, Mamba: the window lands at 6, Mamba's state at 4, then
        // the window must hold before 4 too.
        let m = model(
            &[
                GroupKind::FullAttention,
                GroupKind::SlidingWindow { window: 17 },
                GroupKind::Mamba,
            ],
            16,
        );
        assert_eq!(hit(&m, &["xxxxxxxx", ".....x..", "...x...."]), 0);
        assert_eq!(hit(&m, &["xxxxxxxx", "...x.x..", "...x.x.."]), 6);
        assert_eq!(hit(&m, &["xxxxxxxx", "...x.x..", "...x...."]), 4);
    }

    #[test]
    fn groups_of_one_spec_are_looked_up_together() {
        let m = model(
            &[GroupKind::FullAttention, GroupKind::Mamba, GroupKind::Mamba],
            16,
        );
        assert_eq!(hit(&m, &["xxxxxx", ".x..x.", ".x...x"]), 2);
    }
}
