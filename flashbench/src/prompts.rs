//! `flashbench prompts`: the server's prefix store of tokenized text on a trace's shape.
//!
//! Each request becomes prompt text: one passage of made-up words per 512-token hash id (the
//! same id, the same passage), the last passage cut to the request's length, so that requests
//! sharing hash ids share text exactly as they share tokens. The prompts are tokenized in trace
//! order twice with a byte-level BPE trained on the passages: whole, and through the prefix
//! store as `POST /score` tokenizes them. Every token list is compared; the report gives the
//! share of bytes the store supplied and both times.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use flash_indexer_server::fleet::words;
use flash_indexer_server::prompt::{Prompter, train_tokenizer};

use crate::trace::{Request, TOKENS_PER_HASH_ID};

/// What `flashbench prompts` runs.
#[derive(Clone, Debug)]
pub struct PromptsConfig {
    /// Requests of the trace replayed (0: all).
    pub requests: usize,
    /// The store's bound in bytes.
    pub store_bytes: usize,
    /// Words standing for one 512-token block.
    pub words_per_block: usize,
    /// Where `prompt_store.md` goes, if anywhere.
    pub out: Option<PathBuf>,
}

/// The prompt text of `request`, and the bytes its first `seen` passages take.
fn prompt(request: &Request, words_per_block: usize, seen: usize) -> (String, usize) {
    let (mut text, mut seen_bytes) = (String::new(), 0);
    let full = request.input_length / TOKENS_PER_HASH_ID;
    for (k, &id) in request.hash_ids.iter().enumerate() {
        let n = if k < full {
            words_per_block
        } else {
            let rest = request.input_length % TOKENS_PER_HASH_ID;
            (words_per_block * rest / TOKENS_PER_HASH_ID).max(1)
        };
        text.push_str(&words(id, n));
        if k < seen {
            seen_bytes = text.len();
        }
    }
    (text, seen_bytes)
}

/// Runs the measurement and prints (and writes) its report.
pub fn run(trace: &[Request], source: &str, cfg: &PromptsConfig) -> Result<(), String> {
    let take = if cfg.requests == 0 {
        trace.len()
    } else {
        cfg.requests.min(trace.len())
    };
    // The bytes a perfect store would supply: the passages of hash ids seen before, up to the
    // first one not seen (each id stands for its block and everything before it).
    let mut seen_ids = std::collections::HashSet::new();
    let mut ideal = 0usize;
    let prompts: Vec<String> = trace[..take]
        .iter()
        .map(|r| {
            let seen = r
                .hash_ids
                .iter()
                .take_while(|id| seen_ids.contains(*id))
                .count();
            seen_ids.extend(r.hash_ids.iter().copied());
            let (text, seen_bytes) = prompt(r, cfg.words_per_block, seen);
            ideal += seen_bytes;
            text
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("flashbench-prompts-{}", std::process::id()));
    let corpus: Vec<String> = (0..200).map(|id| words(id, cfg.words_per_block)).collect();
    train_tokenizer(&dir, &corpus, 4_000, false, None)?;
    let whole = Prompter::load(&dir, 0)?;
    let stored = Prompter::load(&dir, cfg.store_bytes)?;
    let _ = std::fs::remove_dir_all(&dir);

    let (mut whole_time, mut store_time) = (Duration::ZERO, Duration::ZERO);
    let (mut bytes, mut from_store, mut tokens) = (0usize, 0usize, 0usize);
    for (i, text) in prompts.iter().enumerate() {
        let t = Instant::now();
        let expected = whole.whole(text, true).map_err(|e| e.to_string())?;
        whole_time += t.elapsed();
        let t = Instant::now();
        let (ids, reuse) = stored.encode_prompt(text).map_err(|e| e.to_string())?;
        store_time += t.elapsed();
        if ids != expected.get_ids() {
            return Err(format!(
                "request {i}: the store's tokens differ from the whole text's"
            ));
        }
        bytes += text.len();
        tokens += ids.len();
        from_store += reuse.stored_bytes;
    }
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    let table = format!(
        "| requests | prompt text | tokens | bytes from the store | text seen before | whole: seconds | store: seconds | store / whole | store holds |\n\
         |---|---|---|---|---|---|---|---|---|\n\
         | {take} | {:.1} MiB | {tokens} | {:.1}% | {:.1}% | {:.2} | {:.2} | {:.2}x | {:.1} MiB |\n",
        mib(bytes),
        100.0 * from_store as f64 / bytes.max(1) as f64,
        100.0 * ideal as f64 / bytes.max(1) as f64,
        whole_time.as_secs_f64(),
        store_time.as_secs_f64(),
        store_time.as_secs_f64() / whole_time.as_secs_f64().max(1e-9),
        mib(stored.store_bytes()),
    );
    println!("{table}");
    if let Some(out) = &cfg.out {
        std::fs::create_dir_all(out).map_err(|e| e.to_string())?;
        let md = format!(
            "# The prefix store of tokenized prompts\n\nWritten by `flashbench prompts` on {source}: \
             {take} requests in trace order, each a prompt of {w} made-up words per 512-token hash id \
             (the last cut to the request's length), tokenized with a byte-level BPE of 4,000 tokens \
             trained on the passages: whole, then through a prefix store of {store:.0} MiB as the \
             server's `POST /score` does (one store-assisted encoding in 64 is also checked whole, \
             and that time is included). Every request's tokens were identical both ways. \
             \"Text seen before\" is what a perfect store could supply: the passages of each \
             request's hash ids up to the first one no earlier request had.\n\n{table}",
            w = cfg.words_per_block,
            store = mib(cfg.store_bytes),
        );
        let path = out.join("prompt_store.md");
        std::fs::write(&path, md).map_err(|e| e.to_string())?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
