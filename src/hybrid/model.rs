//! A model's KV-cache groups: what kind of attention each one serves and its block size.

use core::fmt;

/// The kind of attention a KV-cache group serves, with what its reuse rule needs.
///
/// The names follow vLLM's `KVCacheSpec` classes (`FullAttentionSpec`, `SlidingWindowSpec`,
/// `ChunkedLocalAttentionSpec`, `MambaSpec`); each kind's rule is in
/// [the contract](crate::docs::contract#groups).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case", tag = "kind"))]
#[non_exhaustive]
pub enum GroupKind {
    /// Every token attends to every earlier token: a hit needs every block before it.
    FullAttention,
    /// Every token attends to the `window` tokens before it: a hit needs only the blocks that
    /// cover the window before it.
    SlidingWindow {
        /// The window, in tokens (gpt-oss: 128; Gemma 3: 1,024).
        window: u32,
    },
    /// Tokens attend within their chunk of `chunk` tokens (Llama 4): a hit needs only the blocks
    /// of the last chunk.
    ChunkedLocal {
        /// The chunk, in tokens.
        chunk: u32,
    },
    /// Linear attention or a state-space layer (Mamba, Qwen3-Next's gated delta net): a hit at
    /// a position needs the state block that ends there.
    Mamba,
}

impl GroupKind {
    /// The kind vLLM 0.33 names `kind` in a `BlockStored` event's `kv_cache_spec_kind`, with the
    /// event's `kv_cache_spec_sliding_window` (`window`, tokens) where the kind needs one.
    /// The names are vLLM's spec classes, or the same in snake case (`full_attention`,
    /// `sliding_window`, `chunked_local_attention`, `mamba`). A kind this crate has no rule for
    /// is an error with the reason, so that its events are refused rather than merged.
    ///
    /// vLLM 0.33 declares these fields but its block pool leaves them unset: give the groups
    /// in the configuration then.
    pub fn from_vllm(kind: &str, window: Option<u32>) -> Result<Self, String> {
        match kind {
            "full_attention" | "FullAttentionSpec" => Ok(Self::FullAttention),
            "sliding_window" | "SlidingWindowSpec" => match window {
                Some(window) if window > 0 => Ok(Self::SlidingWindow { window }),
                _ => Err("a sliding-window group without its window".to_owned()),
            },
            "chunked_local_attention" | "ChunkedLocalAttentionSpec" => match window {
                Some(chunk) if chunk > 0 => Ok(Self::ChunkedLocal { chunk }),
                _ => Err("a chunked-local group without its chunk size".to_owned()),
            },
            "mamba" | "MambaSpec" => Ok(Self::Mamba),
            other => Err(format!("KV-cache kind {other:?} has no reuse rule here")),
        }
    }

    fn is_full(self) -> bool {
        matches!(self, Self::FullAttention)
    }
}

/// One KV-cache group of a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GroupSpec {
    /// What the group's layers attend to.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub kind: GroupKind,
    /// Tokens per block.
    pub block_size: u32,
}

impl GroupSpec {
    /// A group of `kind` with blocks of `block_size` tokens.
    pub fn new(kind: GroupKind, block_size: u32) -> Self {
        GroupSpec { kind, block_size }
    }
}

/// Why a list of groups is not a model this crate can score.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupsError {
    /// No group at all.
    Empty,
    /// More groups than [`ModelGroups::MAX_GROUPS`].
    TooMany {
        /// Groups given.
        groups: usize,
    },
    /// No full-attention group: the index learns which prefix a block continues from the
    /// full-attention group's events, so a model without one cannot be scored exactly.
    NoFullAttention,
    /// Groups of different block sizes (vLLM allows multiples of the hash block size; this
    /// crate does not score them yet).
    BlockSizes {
        /// The first group's block size.
        first: u32,
        /// The group whose block size differs.
        group: u32,
        /// Its block size.
        block_size: u32,
    },
    /// A block size of 0, or a window or chunk of 0 tokens.
    Zero {
        /// The group.
        group: u32,
    },
}

impl fmt::Display for GroupsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("a model needs at least one KV-cache group"),
            Self::TooMany { groups } => write!(
                f,
                "{groups} KV-cache groups: at most {} are supported",
                ModelGroups::MAX_GROUPS
            ),
            Self::NoFullAttention => f.write_str(
                "no full-attention group: models whose every group is sliding-window, chunked or \
                 Mamba cannot be scored exactly and are not supported",
            ),
            Self::BlockSizes {
                first,
                group,
                block_size,
            } => write!(
                f,
                "group {group} has blocks of {block_size} tokens, group 0 of {first}: groups of \
                 different block sizes are not supported yet"
            ),
            Self::Zero { group } => write!(f, "group {group}: a block size, window or chunk of 0"),
        }
    }
}

impl std::error::Error for GroupsError {}

/// The KV-cache groups of one model, validated: at least one full-attention group, one block
/// size for all.
///
/// ```
/// use flash_indexer::hybrid::{GroupKind, GroupSpec, ModelGroups};
///
/// // gpt-oss: full attention and sliding windows of 128 tokens, blocks of 16.
/// let model = ModelGroups::new(vec![
///     GroupSpec::new(GroupKind::FullAttention, 16),
///     GroupSpec::new(GroupKind::SlidingWindow { window: 128 }, 16),
/// ])
/// .unwrap();
/// assert_eq!(model.len(), 2);
/// assert!(ModelGroups::new(vec![GroupSpec::new(GroupKind::Mamba, 16)]).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelGroups {
    groups: Vec<GroupSpec>,
    /// The first full-attention group: its events say which prefix each block continues.
    chain: u32,
    /// The groups by spec, full attention first (vLLM's `verify_and_split_kv_cache_groups`).
    specs: Vec<Spec>,
}

/// Groups with one spec, looked up together: a block counts only if every member holds it
/// (vLLM's `SpecGroup`, and `block_pool.get_cached_block(hash, group_ids)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Spec {
    pub(crate) kind: GroupKind,
    pub(crate) members: Vec<u32>,
}

impl Spec {
    /// For kinds whose hit ends at the last run of this many held blocks (a sliding window:
    /// `cdiv(window - 1, block_size)`, at least one; Mamba: its state), that run's length.
    pub(crate) fn run_blocks(&self, block_size: u32) -> Option<u32> {
        match self.kind {
            GroupKind::SlidingWindow { window } => Some((window - 1).div_ceil(block_size).max(1)),
            GroupKind::Mamba => Some(1),
            GroupKind::FullAttention | GroupKind::ChunkedLocal { .. } => None,
        }
    }
}

impl ModelGroups {
    /// The most groups a model may have (vLLM models have two to four).
    pub const MAX_GROUPS: usize = 32;

    /// Validates `groups`, indexed by vLLM's `group_idx`.
    pub fn new(groups: Vec<GroupSpec>) -> Result<Self, GroupsError> {
        if groups.is_empty() {
            return Err(GroupsError::Empty);
        }
        if groups.len() > Self::MAX_GROUPS {
            return Err(GroupsError::TooMany {
                groups: groups.len(),
            });
        }
        let first = groups[0].block_size;
        for (group, spec) in (0u32..).zip(&groups) {
            let zero = spec.block_size == 0
                || matches!(spec.kind, GroupKind::SlidingWindow { window: 0 })
                || matches!(spec.kind, GroupKind::ChunkedLocal { chunk: 0 });
            if zero {
                return Err(GroupsError::Zero { group });
            }
            if spec.block_size != first {
                return Err(GroupsError::BlockSizes {
                    first,
                    group,
                    block_size: spec.block_size,
                });
            }
        }
        let chain = (0u32..)
            .zip(&groups)
            .find(|(_, spec)| spec.kind.is_full())
            .map(|(group, _)| group)
            .ok_or(GroupsError::NoFullAttention)?;
        let specs = specs_of(&groups);
        Ok(ModelGroups {
            groups,
            chain,
            specs,
        })
    }

    /// A model with one full-attention group of `block_size`: scores exactly as a
    /// [`KvIndex`](crate::KvIndex) does.
    pub fn full_attention(block_size: u32) -> Self {
        let groups = vec![GroupSpec::new(GroupKind::FullAttention, block_size)];
        let specs = specs_of(&groups);
        ModelGroups {
            groups,
            chain: 0,
            specs,
        }
    }

    /// The groups, by `group_idx`.
    pub fn groups(&self) -> &[GroupSpec] {
        &self.groups
    }

    /// How many groups.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Always `false`: a model has at least one group.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The tokens per block of every group.
    pub fn block_size(&self) -> u32 {
        self.groups[0].block_size
    }

    /// The group whose events say which prefix each block continues: the first full-attention
    /// group.
    pub fn chain_group(&self) -> u32 {
        self.chain
    }

    /// Whether the model has a group other than the chain group.
    pub(crate) fn is_hybrid(&self) -> bool {
        self.groups.len() > 1
    }

    pub(crate) fn specs(&self) -> &[Spec] {
        &self.specs
    }
}

/// One entry per distinct spec, in group order, then full attention first (a stable sort).
fn specs_of(groups: &[GroupSpec]) -> Vec<Spec> {
    let mut specs: Vec<Spec> = Vec::new();
    for (group, spec) in (0u32..).zip(groups) {
        match specs.iter_mut().find(|s| s.kind == spec.kind) {
            Some(s) => s.members.push(group),
            None => specs.push(Spec {
                kind: spec.kind,
                members: vec![group],
            }),
        }
    }
    specs.sort_by_key(|s| !s.kind.is_full());
    specs
}
