//! Hybrid models: every layout under `HybridIndexer` against `NaiveHybridIndexer` on generated
//! models and steps, and the rules' promises, one scenario each.

use flash_indexer::hybrid::{
    GroupKind, GroupSpec, HybridIndex, HybridIndexer, ModelGroups, NaiveHybridIndexer,
};
use flash_indexer::testing::{
    self, check_hybrid_case, hybrid_case_strategy, run_hybrid_input, scaled_cases,
};
use flash_indexer::{Block, Event, EventError, KvIndex, LocalHash, SeqHash, Worker};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(scaled_cases(512)))]

    /// Models of one to four groups, steps along a few shared chains, every layout.
    #[test]
    fn every_layout_agrees_with_the_reference(case in hybrid_case_strategy()) {
        if let Err(divergence) = check_hybrid_case(&case) {
            prop_assert!(false, "{}", divergence);
        }
    }

    /// The fuzz target's decoding of raw bytes, so that its vocabulary stays exercised here.
    #[test]
    fn fuzz_inputs_agree_with_the_reference(data in proptest::collection::vec(any::<u8>(), 0..1_500)) {
        if let Err(divergence) = run_hybrid_input(&data) {
            prop_assert!(false, "{}", divergence);
        }
    }
}

/// The reference and every layout, for one model.
fn subjects(model: &ModelGroups) -> Vec<(&'static str, Box<dyn HybridIndex>)> {
    let mut out: Vec<(&'static str, Box<dyn HybridIndex>)> =
        vec![("naive", Box::new(NaiveHybridIndexer::new(model.clone())))];
    for layout in testing::enabled_layouts() {
        let index: HybridIndexer<Box<dyn KvIndex>> =
            HybridIndexer::with_layout(model.clone(), (layout.make)());
        out.push((layout.name, Box::new(index)));
    }
    out
}

fn model(kinds: &[GroupKind]) -> ModelGroups {
    ModelGroups::new(kinds.iter().map(|&k| GroupSpec::new(k, 16)).collect()).unwrap()
}

/// Blocks `0..n` of one chain: locals `i`, seqs `1000 + i`.
fn chain(n: u64) -> (Vec<LocalHash>, Vec<Block>) {
    let locals: Vec<LocalHash> = (0..n).map(LocalHash).collect();
    let blocks = (0..n)
        .map(|i| Block::new(LocalHash(i), SeqHash(1000 + i)))
        .collect();
    (locals, blocks)
}

fn seqs(range: core::ops::Range<u64>) -> Vec<SeqHash> {
    range.map(|i| SeqHash(1000 + i)).collect()
}

#[test]
fn one_full_attention_group_scores_as_the_layout_alone() {
    let w = Worker::new(1, 0);
    let (locals, blocks) = chain(8);
    for (name, index) in subjects(&ModelGroups::full_attention(16)) {
        index
            .apply(0, &Event::stored(w, 0, None, blocks.clone()))
            .unwrap();
        index.apply(0, &Event::removed(w, 1, seqs(5..6))).unwrap();
        assert_eq!(index.find_matches(&locals).get(w), Some(5), "{name}");
    }
}

#[test]
fn out_of_window_evictions_keep_the_hit_and_a_missing_window_ends_it() {
    // gpt-oss-like: window 128 tokens over blocks of 16 = 8 blocks (cdiv(127, 16)).
    let m = model(&[
        GroupKind::FullAttention,
        GroupKind::SlidingWindow { window: 128 },
    ]);
    let w = Worker::new(2, 1);
    let (locals, blocks) = chain(20);
    for (name, index) in subjects(&m) {
        index
            .apply(0, &Event::stored(w, 0, None, blocks.clone()))
            .unwrap();
        index
            .apply(1, &Event::stored(w, 0, None, blocks.clone()))
            .unwrap();
        index.apply(1, &Event::removed(w, 1, seqs(0..4))).unwrap();
        assert_eq!(index.find_matches(&locals).get(w), Some(20), "{name}");
        // The window group loses block 15: the longest prefix ending in 8 held blocks is 15.
        index.apply(1, &Event::removed(w, 2, seqs(15..16))).unwrap();
        assert_eq!(index.find_matches(&locals).get(w), Some(15), "{name}");
        // Shorter queries end where their own window is.
        assert_eq!(index.find_matches(&locals[..14]).get(w), Some(14), "{name}");
        // The full-attention group's hole bounds the window's search.
        index.apply(0, &Event::removed(w, 3, seqs(13..14))).unwrap();
        assert_eq!(index.find_matches(&locals).get(w), Some(13), "{name}");
        // No 8 held blocks before 13 any more, nor a run from the first block: no hit.
        index.apply(1, &Event::removed(w, 4, seqs(10..11))).unwrap();
        assert_eq!(index.find_matches(&locals).get(w), None, "{name}");
    }
}

#[test]
fn mamba_states_score_only_where_they_are() {
    // Qwen3-Next-like: full attention and Mamba states every fourth block.
    let m = model(&[GroupKind::FullAttention, GroupKind::Mamba]);
    let w = Worker::new(3, 0);
    let (locals, blocks) = chain(10);
    for (name, index) in subjects(&m) {
        index
            .apply(0, &Event::stored(w, 0, None, blocks.clone()))
            .unwrap();
        let states: Vec<Block> = blocks.iter().skip(3).step_by(4).copied().collect();
        index
            .apply(1, &Event::stored(w, 1, Some(SeqHash(1002)), states))
            .unwrap();
        assert_eq!(index.find_matches(&locals).get(w), Some(8), "{name}");
        assert_eq!(index.find_matches(&locals[..7]).get(w), Some(4), "{name}");
        assert_eq!(index.find_matches(&locals[..3]).get(w), None, "{name}");
    }
}

#[test]
fn every_child_of_a_block_stored_again_elsewhere_follows_it() {
    // A (local 0) -> B (1) -> C1 (2) and C2 (3), Mamba states on both children. B comes back
    // under X (local 9): each child's state counts at its new path, none at its old one.
    let m = model(&[GroupKind::FullAttention, GroupKind::Mamba]);
    let w = Worker::new(5, 0);
    let block = |local: u64, seq: u64| Block::new(LocalHash(local), SeqHash(seq));
    let (a, b, x) = (block(0, 10), block(1, 11), block(9, 19));
    let kids = [block(2, 12), block(3, 13)];
    let query = |first: u64, kid: u64| vec![LocalHash(first), LocalHash(1), LocalHash(kid)];
    for (name, index) in subjects(&m) {
        index
            .apply(0, &Event::stored(w, 0, None, vec![a, b]))
            .unwrap();
        for kid in kids {
            index
                .apply(0, &Event::stored(w, 1, Some(b.seq), vec![kid]))
                .unwrap();
        }
        index
            .apply(1, &Event::stored(w, 2, None, kids.to_vec()))
            .unwrap();
        for kid in [2, 3] {
            assert_eq!(index.find_matches(&query(0, kid)).get(w), Some(3), "{name}");
        }
        index.apply(0, &Event::stored(w, 3, None, vec![x])).unwrap();
        index.apply(0, &Event::removed(w, 4, vec![b.seq])).unwrap();
        index
            .apply(0, &Event::stored(w, 5, Some(x.seq), vec![b]))
            .unwrap();
        for kid in [2, 3] {
            assert_eq!(index.find_matches(&query(9, kid)).get(w), Some(3), "{name}");
            assert_eq!(index.find_matches(&query(0, kid)).get(w), None, "{name}");
        }
    }
}

#[test]
fn a_block_of_another_group_counts_only_on_the_prefix_its_sequence_hash_names() {
    let m = model(&[GroupKind::FullAttention, GroupKind::Mamba]);
    let w = Worker::new(4, 0);
    let (locals, blocks) = chain(4);
    for (name, index) in subjects(&m) {
        index
            .apply(0, &Event::stored(w, 0, None, blocks.clone()))
            .unwrap();
        index
            .apply(1, &Event::stored(w, 1, None, blocks[3..].to_vec()))
            .unwrap();
        assert_eq!(index.find_matches(&locals).get(w), Some(4), "{name}");
        // The chain group re-stores block 2 under another prefix: block 3 follows it, and the
        // Mamba state with it.
        index.apply(0, &Event::removed(w, 2, seqs(2..3))).unwrap();
        let other = Block::new(LocalHash(2), SeqHash(1002));
        index
            .apply(0, &Event::stored(w, 3, None, vec![other]))
            .unwrap();
        assert_eq!(index.find_matches(&locals).get(w), None, "{name}");
        let moved = [LocalHash(2), LocalHash(3)];
        assert_eq!(index.find_matches(&moved).get(w), Some(2), "{name}");
    }
}

#[test]
fn a_clear_of_any_group_clears_the_worker_and_unknown_groups_are_refused() {
    let m = model(&[GroupKind::FullAttention, GroupKind::Mamba]);
    let w = Worker::new(5, 0);
    let (locals, blocks) = chain(3);
    for (name, index) in subjects(&m) {
        index
            .apply(0, &Event::stored(w, 0, None, blocks.clone()))
            .unwrap();
        index
            .apply(1, &Event::stored(w, 0, None, blocks.clone()))
            .unwrap();
        assert_eq!(
            index.apply(2, &Event::stored(w, 0, None, blocks.clone())),
            Err(EventError::UnknownGroup {
                group: 2,
                groups: 2
            }),
            "{name}"
        );
        assert_eq!(index.find_matches(&locals).get(w), Some(3), "{name}");
        index.apply(1, &Event::cleared(w, 1)).unwrap();
        assert_eq!(index.block_count(w, 0), 0, "{name}");
        assert_eq!(index.block_count(w, 1), 0, "{name}");
        assert!(index.find_matches(&locals).is_empty(), "{name}");
    }
}

#[test]
fn a_query_scores_every_worker_however_many_distinct_depths_it_meets() {
    // A window of 2 blocks. Worker i of n holds blocks 0..=i in both groups, and the odd ones
    // have lost their last window block: n distinct depths, a few, then more than a query sorts
    // on its stack (64).
    let m = model(&[
        GroupKind::FullAttention,
        GroupKind::SlidingWindow { window: 32 },
    ]);
    let worker = |i: u64| Worker::new(100 + i, 0);
    for n in [5, 70] {
        let (locals, blocks) = chain(n);
        for (name, index) in subjects(&m) {
            for i in 0..n {
                let (w, held) = (worker(i), blocks[..=i as usize].to_vec());
                index
                    .apply(0, &Event::stored(w, 0, None, held.clone()))
                    .unwrap();
                index.apply(1, &Event::stored(w, 1, None, held)).unwrap();
                if i % 2 == 1 {
                    index
                        .apply(1, &Event::removed(w, 2, seqs(i..i + 1)))
                        .unwrap();
                }
            }
            let scores = index.find_matches(&locals);
            for i in 0..n {
                // Its depth, or, without its last window block, one block short (the window
                // before that, blocks i - 2 and i - 1, or block 0, it holds).
                let expected = Some(i as u32 + 1 - (i % 2) as u32);
                assert_eq!(scores.get(worker(i)), expected, "{name}, worker {i} of {n}");
            }
        }
    }
}

#[test]
fn committed_fuzz_corpus_agrees_with_the_reference() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/hybrid");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the committed corpus of the hybrid fuzz target")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "the committed corpus is missing");
    for file in &files {
        let data = std::fs::read(file).expect("readable fuzz input");
        if let Err(divergence) = run_hybrid_input(&data) {
            panic!("{}: {divergence}", file.display());
        }
    }
}
