//! Replays the committed fuzz corpus and every saved crash (`fuzz/regressions/`) through the
//! fuzz target's own check, on every enabled layout, in every `cargo test`.

use flash_indexer::testing::run_fuzz_input;
use std::path::Path;

fn replay(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for file in &files {
        let data = std::fs::read(file).expect("readable fuzz input");
        if let Err(divergence) = run_fuzz_input(&data) {
            panic!("{}: {divergence}", file.display());
        }
    }
    files.len()
}

#[test]
fn committed_corpus_and_regressions_agree_with_the_reference() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let corpus = replay(&root.join("corpus/differential"));
    let regressions = replay(&root.join("regressions/differential"));
    assert!(corpus > 0, "the committed corpus is missing");
    eprintln!("replayed {corpus} corpus inputs and {regressions} regressions");
}
