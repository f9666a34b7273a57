//! Test vectors against Dynamo's own hasher (`dynamo-kv-router` 1.6): local hashes under every
//! combination of LoRA adapter and cache namespace, and the sequence-hash chain over them, are
//! bit-identical to `compute_block_hash_for_seq` and `compute_seq_hash_for_block`. Runs with
//! `cargo test -p flashbench --features dynamo`.
#![cfg(feature = "dynamo")]

use dynamo_kv_router::protocols::{
    BlockHashOptions, compute_block_hash_for_seq, compute_seq_hash_for_block,
};
use flash_indexer::hash::{self, Salt};

fn dynamo(tokens: &[u32], block_size: u32, salt: Salt<'_>) -> (Vec<u64>, Vec<u64>) {
    let options = BlockHashOptions {
        lora_name: salt.lora_name,
        cache_namespace: salt.cache_namespace,
        ..Default::default()
    };
    let locals = compute_block_hash_for_seq(tokens, block_size, options);
    let seqs = compute_seq_hash_for_block(&locals);
    (locals.iter().map(|l| l.0).collect(), seqs)
}

fn ours(tokens: &[u32], block_size: usize, salt: Salt<'_>) -> (Vec<u64>, Vec<u64>) {
    let locals = hash::local_hashes_salted(tokens, block_size, salt);
    let seqs = hash::seq_hashes(&locals);
    (
        locals.iter().map(|l| l.0).collect(),
        seqs.iter().map(|s| s.0).collect(),
    )
}

#[test]
fn every_salt_hashes_as_dynamo_does() {
    let tokens: Vec<u32> = (0..1_000u32)
        .map(|t| t.wrapping_mul(2_654_435_761))
        .collect();
    let names = [
        None,
        Some(""),
        Some("tenant-a"),
        Some("my-lora"),
        Some("ünïcode"),
    ];
    for block_size in [1u32, 16, 32, 64] {
        for lora_name in names {
            for cache_namespace in names {
                let salt = Salt {
                    lora_name,
                    cache_namespace,
                };
                assert_eq!(
                    ours(&tokens, block_size as usize, salt),
                    dynamo(&tokens, block_size, salt),
                    "block size {block_size}, {salt:?}"
                );
            }
        }
    }
}

/// The vectors the crate's docs quote, computed by Dynamo.
#[test]
fn documented_vectors_are_dynamos() {
    let tokens: Vec<u32> = (1..=48).collect();
    let (locals, _) = dynamo(&tokens, 16, Salt::namespace("tenant-a"));
    assert_eq!(locals[0], 8175209796170318505);
    let (locals, _) = dynamo(&tokens, 16, Salt::lora("my-lora"));
    assert_eq!(locals[0], 4148081000444450790);
}

#[test]
fn multimodal_blocks_hash_as_dynamo_does() {
    use dynamo_kv_router::protocols::{BlockExtraInfo, BlockMmObjectInfo};

    let tokens: Vec<u32> = (0..256u32).map(|t| t.wrapping_mul(2_654_435_761)).collect();
    // Blocks of 16: none, one object, two objects (given unsorted), an empty list, and blocks
    // past the list's end.
    let objects: [Option<Vec<u64>>; 5] = [
        None,
        Some(vec![0x1234_5678_9abc_def0]),
        Some(vec![u64::MAX, 7]),
        Some(vec![]),
        Some(vec![7]),
    ];
    let infos: Vec<Option<BlockExtraInfo>> = objects
        .iter()
        .map(|block| {
            block.as_ref().map(|hashes| BlockExtraInfo {
                mm_objects: hashes
                    .iter()
                    .map(|&mm_hash| BlockMmObjectInfo {
                        mm_hash,
                        offsets: vec![(0, 4)],
                    })
                    .collect(),
            })
        })
        .collect();
    for salt in [
        Salt::NONE,
        Salt::lora("my-lora"),
        Salt::namespace("tenant-a"),
    ] {
        let options = BlockHashOptions {
            block_mm_infos: Some(&infos),
            lora_name: salt.lora_name,
            cache_namespace: salt.cache_namespace,
            ..Default::default()
        };
        let theirs: Vec<u64> = compute_block_hash_for_seq(&tokens, 16, options)
            .iter()
            .map(|l| l.0)
            .collect();
        let ours: Vec<u64> = hash::local_hashes_dynamo_mm(&tokens, 16, salt, &objects)
            .iter()
            .map(|l| l.0)
            .collect();
        assert_eq!(ours, theirs, "{salt:?}");
    }
}
