//! SPEC §5: hashing compatible with Dynamo's router, checked on the SPEC's test vectors.

use flash_indexer::hash::{SEED, local_hashes, local_hashes_lora, lora_seed, seq_hashes};
use flash_indexer::{LocalHash, SeqHash};

fn tokens() -> Vec<u32> {
    (1..=48).collect()
}

#[test]
fn local_hashes_match_the_spec_vectors() {
    let want = [
        16863443419780771464,
        2287610619914608821,
        12129935312930971799,
    ]
    .map(LocalHash);
    assert_eq!(local_hashes(&tokens(), 16), want);
}

#[test]
fn seq_hashes_match_the_spec_vectors() {
    let want = [
        16863443419780771464,
        12466389667045779788,
        960926348267535642,
    ]
    .map(SeqHash);
    assert_eq!(seq_hashes(&local_hashes(&tokens(), 16)), want);
}

#[test]
fn lora_name_changes_the_local_seed() {
    assert_eq!(
        local_hashes_lora(&tokens(), 16, "my-lora")[0],
        LocalHash(4148081000444450790)
    );
    assert_ne!(lora_seed("my-lora"), SEED);
}

#[test]
fn empty_lora_name_means_no_lora() {
    assert_eq!(lora_seed(""), SEED);
    assert_eq!(
        local_hashes_lora(&tokens(), 16, ""),
        local_hashes(&tokens(), 16)
    );
}

#[test]
fn trailing_partial_block_is_dropped() {
    assert_eq!(local_hashes(&tokens()[..47], 16).len(), 2);
    assert!(local_hashes(&tokens()[..15], 16).is_empty());
}

#[test]
fn block_size_zero_gives_no_blocks_instead_of_panicking() {
    assert!(local_hashes(&tokens(), 0).is_empty());
}

#[test]
fn seq_hashes_of_nothing_is_nothing() {
    assert!(seq_hashes(&[]).is_empty());
}
