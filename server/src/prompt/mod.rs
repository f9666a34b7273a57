//! Prompts in: a model's Hugging Face tokenizer (`tokenizer.json`), its chat template (from
//! `tokenizer_config.json` beside it) and a [`PrefixStore`] of tokenized text, so that a prompt
//! extending an earlier one is tokenized only from where the shared text stops.
//!
//! Tokens follow vLLM's serving rules: a completion prompt is encoded with the tokenizer's
//! special tokens (its BOS), a chat conversation is rendered through the template (which writes
//! its own BOS) and encoded without them.

mod restart;
mod store;
mod template;
mod train;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use metrics::counter;
use serde_json::Value as Json;
use tokenizers::{Encoding, Tokenizer};

pub use store::{CHUNK_BYTES, PrefixStore, Tokenized};
pub use template::ChatTemplate;
pub use train::{CHATML, SPECIAL_TOKENS, train_tokenizer};

/// The prefix store's default bound per model.
pub const DEFAULT_PREFIX_STORE_BYTES: usize = 64 << 20;

/// One store-assisted encoding in this many is checked against a whole encoding; a difference
/// turns the store off for the model.
const CHECK_EVERY: u64 = 64;

/// Mode keys of the store: the same text encodes to other tokens with or without specials.
const WITH_SPECIALS: u64 = 0x5bec_1a15;
const WITHOUT_SPECIALS: u64 = 0x0b1a_9e55;

/// Why a prompt could not be tokenized.
#[derive(Debug)]
pub enum PromptError {
    /// Chat messages for a model whose tokenizer has no chat template.
    NoTemplate,
    /// The template refused the messages or failed.
    Template(String),
    /// The tokenizer failed.
    Tokenizer(String),
}

impl std::fmt::Display for PromptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PromptError::NoTemplate => f.write_str(
                "the model's tokenizer_config.json has no chat_template: send \"prompt\" text",
            ),
            PromptError::Template(why) | PromptError::Tokenizer(why) => f.write_str(why),
        }
    }
}

/// How the store did for one encoding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reuse {
    /// Bytes of the text whose tokens came from the store.
    pub stored_bytes: usize,
    /// Bytes tokenized now.
    pub tokenized_bytes: usize,
}

/// A model's tokenizer, chat template and prefix store.
pub struct Prompter {
    path: PathBuf,
    tokenizer: Tokenizer,
    template: Option<ChatTemplate>,
    store: Mutex<PrefixStore>,
    /// Why the store cannot be used with this tokenizer, if it cannot.
    unrestartable: Option<String>,
    /// Turned off after a checked encoding differed.
    store_off: AtomicBool,
    assisted: AtomicU64,
}

impl std::fmt::Debug for Prompter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prompter")
            .field("path", &self.path)
            .field("chat_template", &self.template.is_some())
            .field("unrestartable", &self.unrestartable)
            .finish_non_exhaustive()
    }
}

impl Prompter {
    /// Loads `path`: a `tokenizer.json`, or a directory holding one (and perhaps a
    /// `tokenizer_config.json` with the chat template). `store_bytes` bounds the prefix store.
    pub fn load(path: &Path, store_bytes: usize) -> Result<Prompter, String> {
        let (file, dir) = if path.is_dir() {
            (path.join("tokenizer.json"), path.to_owned())
        } else {
            let dir = path.parent().map_or_else(PathBuf::new, Path::to_owned);
            (path.to_owned(), dir)
        };
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let tokenizer: Tokenizer = text
            .parse()
            .map_err(|e| format!("{} is not a tokenizer.json: {e}", file.display()))?;
        let json: Json = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        let config_file = dir.join("tokenizer_config.json");
        let template = if config_file.exists() {
            let config: Json = std::fs::read_to_string(&config_file)
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
                .map_err(|e| format!("cannot read {}: {e}", config_file.display()))?;
            ChatTemplate::from_tokenizer_config(&config)
                .map_err(|e| format!("{}: {e}", config_file.display()))?
        } else {
            None
        };
        let unrestartable = restart::why_not(&json).err().or_else(|| {
            restart::specials_lead(&tokenizer)
                .err()
                .map(|e| e.to_string())
        });
        Ok(Prompter {
            path: file,
            tokenizer,
            template,
            store: Mutex::new(PrefixStore::new(store_bytes)),
            unrestartable,
            store_off: AtomicBool::new(false),
            assisted: AtomicU64::new(0),
        })
    }

    /// Why the prefix store is not used for this tokenizer, if it is not.
    pub fn store_unused(&self) -> Option<&str> {
        self.unrestartable.as_deref()
    }

    /// Whether the model has a chat template.
    pub fn has_template(&self) -> bool {
        self.template.is_some()
    }

    /// The tokens of a completion prompt (with the tokenizer's special tokens).
    pub fn encode_prompt(&self, text: &str) -> Result<(Vec<u32>, Reuse), PromptError> {
        self.encode(text, true)
    }

    /// The tokens of a chat conversation: rendered through the template, encoded without the
    /// tokenizer's special tokens (the template writes them).
    pub fn encode_messages(
        &self,
        messages: &Json,
        add_generation_prompt: bool,
    ) -> Result<(Vec<u32>, Reuse), PromptError> {
        let template = self.template.as_ref().ok_or(PromptError::NoTemplate)?;
        let text = template
            .render(messages, add_generation_prompt)
            .map_err(PromptError::Template)?;
        self.encode(&text, false)
    }

    /// `text`'s tokens, from the store as far as it knows the text.
    pub fn encode(&self, text: &str, specials: bool) -> Result<(Vec<u32>, Reuse), PromptError> {
        let all_tokenized = Reuse {
            stored_bytes: 0,
            tokenized_bytes: text.len(),
        };
        if self.unrestartable.is_some() || self.store_off.load(Ordering::Relaxed) {
            let ids = self.whole(text, specials)?.get_ids().to_vec();
            return Ok((ids, counted(all_tokenized)));
        }
        let mode = if specials {
            WITH_SPECIALS
        } else {
            WITHOUT_SPECIALS
        };
        let found = self.store.lock().unwrap().lookup(mode, text.as_bytes());
        let assisted = found.resume > 0 || !found.ids.is_empty();
        // The rest, from a word start: with specials only when nothing came from the store.
        let rest = &text[found.resume..];
        let encoding = self
            .tokenizer
            .encode(rest, specials && !assisted)
            .map_err(|e| PromptError::Tokenizer(e.to_string()))?;
        let base = found.ids.len();
        let mut ids = Vec::with_capacity(base + encoding.len());
        ids.extend_from_slice(&found.ids);
        ids.extend_from_slice(encoding.get_ids());
        let tokens = Tokenized {
            ids,
            word_starts: word_starts(&encoding)
                .map(|(index, offset)| (base + index, found.resume + offset))
                .collect(),
        };
        let checked =
            assisted && (self.assisted.fetch_add(1, Ordering::Relaxed)).is_multiple_of(CHECK_EVERY);
        if checked {
            let whole = self.whole(text, specials)?;
            if whole.get_ids() != tokens.ids {
                self.store_off.store(true, Ordering::Relaxed);
                counter!("flash_indexer_prompt_store_mismatches_total").increment(1);
                tracing::warn!(
                    tokenizer = %self.path.display(),
                    "tokens from the prefix store differed from a whole encoding: store turned off"
                );
                return Ok((whole.get_ids().to_vec(), counted(all_tokenized)));
            }
        }
        self.store
            .lock()
            .unwrap()
            .insert(mode, text.as_bytes(), &found, &tokens);
        let reuse = Reuse {
            stored_bytes: found.resume,
            tokenized_bytes: rest.len(),
        };
        Ok((tokens.ids, counted(reuse)))
    }

    /// The whole text encoded, the store not asked.
    pub fn whole(&self, text: &str, specials: bool) -> Result<Encoding, PromptError> {
        self.tokenizer
            .encode(text, specials)
            .map_err(|e| PromptError::Tokenizer(e.to_string()))
    }

    /// Bytes the prefix store holds.
    pub fn store_bytes(&self) -> usize {
        self.store.lock().unwrap().used_bytes()
    }
}

/// `reuse`, counted in `flash_indexer_prompt_bytes_total` by where the bytes' tokens came from.
fn counted(reuse: Reuse) -> Reuse {
    counter!("flash_indexer_prompt_bytes_total", "source" => "store")
        .increment(reuse.stored_bytes as u64);
    counter!("flash_indexer_prompt_bytes_total", "source" => "tokenizer")
        .increment(reuse.tokenized_bytes as u64);
    reuse
}

/// The tokens of an encoding that begin a word: `(token index, byte offset)`.
fn word_starts(encoding: &Encoding) -> impl Iterator<Item = (usize, usize)> + '_ {
    let words = encoding.get_word_ids();
    let offsets = encoding.get_offsets();
    (0..words.len()).filter_map(move |i| {
        let starts = words[i].is_some() && (i == 0 || words[i] != words[i - 1]);
        starts.then(|| (i, offsets[i].0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic generator of text with what tokenizers find hard: runs of spaces,
    /// newlines, digits, punctuation, accents and CJK.
    struct Text(u64);

    impl Text {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn words(&mut self, n: usize) -> String {
            const WORDS: [&str; 16] = [
                "the",
                "cache",
                "router",
                "block",
                "prefix",
                "worker",
                "café",
                "naïve",
                "日本語",
                "tokens",
                "don't",
                "x86_64",
                "1234567",
                "---",
                "(see",
                "e\u{301}",
            ];
            const GAPS: [&str; 8] = [" ", " ", " ", "  ", "\n", "\n\n", ", ", ".\t"];
            let mut out = String::new();
            for _ in 0..n {
                out.push_str(WORDS[(self.next() % 16) as usize]);
                out.push_str(GAPS[(self.next() % 8) as usize]);
            }
            out
        }
    }

    fn prompter(bos: bool, name: &str) -> Prompter {
        let dir = std::env::temp_dir().join(format!("fis-prompt-{name}-{}", std::process::id()));
        let mut text = Text(7);
        let corpus: Vec<String> = (0..400).map(|_| text.words(40)).collect();
        train_tokenizer(&dir, &corpus, 600, bos, Some(CHATML)).unwrap();
        let prompter = Prompter::load(&dir, 1 << 20).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        prompter
    }

    #[test]
    fn growing_conversations_encode_as_whole_texts_do_and_reuse_the_store() {
        for bos in [false, true] {
            let prompter = prompter(bos, &format!("grow-{bos}"));
            assert_eq!(prompter.store_unused(), None);
            let mut text = Text(11);
            for conversation in 0..20 {
                let mut prompt = text.words(30);
                let mut reused = 0;
                for _turn in 0..6 {
                    let n = 1 + (text.next() % 120) as usize;
                    prompt.push_str(&text.words(n));
                    for specials in [true, false] {
                        let (ids, reuse) = prompter.encode(&prompt, specials).unwrap();
                        let whole = prompter.whole(&prompt, specials).unwrap();
                        assert_eq!(
                            ids,
                            whole.get_ids(),
                            "conversation {conversation}, bos {bos}"
                        );
                        assert_eq!(reuse.stored_bytes + reuse.tokenized_bytes, prompt.len());
                        reused += reuse.stored_bytes;
                    }
                }
                assert!(reused > 0, "a growing conversation reuses the store");
            }
        }
    }

    #[test]
    fn prompts_that_part_anywhere_encode_as_whole_texts_do() {
        let prompter = prompter(true, "part");
        let mut text = Text(23);
        for case in 0..300 {
            let n = 20 + (text.next() % 200) as usize;
            let shared = text.words(n);
            // Cut the shared text at any character, then go on differently.
            let cuts: Vec<usize> = shared.char_indices().map(|(i, _)| i).collect();
            let cut = cuts[(text.next() as usize) % cuts.len()];
            let first = format!("{}{}", &shared[..cut], text.words(5));
            let second = format!("{}{}", &shared[..cut], text.words(30));
            let third = format!("{}{}", &shared, text.words(3));
            for prompt in [&first, &second, &third, &shared] {
                let (ids, _) = prompter.encode(prompt, true).unwrap();
                assert_eq!(
                    ids,
                    prompter.whole(prompt, true).unwrap().get_ids(),
                    "case {case}"
                );
            }
        }
    }

    #[test]
    fn chat_messages_are_rendered_then_encoded_without_specials() {
        let prompter = prompter(true, "chat");
        let messages = serde_json::json!([{"role": "user", "content": "the cache router"}]);
        let (ids, _) = prompter.encode_messages(&messages, true).unwrap();
        let text = "<|im_start|>user\nthe cache router<|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(ids, prompter.whole(text, false).unwrap().get_ids());
        let (with_bos, _) = prompter.encode_prompt("the cache").unwrap();
        let bos = prompter.tokenizer.token_to_id("<s>").unwrap();
        assert_eq!(
            with_bos[0], bos,
            "completion prompts get the tokenizer's specials"
        );
        assert_ne!(ids[0], bos);
    }

    #[test]
    fn the_store_stays_within_its_bytes() {
        let mut store = PrefixStore::new(4096);
        let mut text = Text(5);
        for _ in 0..200 {
            let prompt = text.words(300);
            let found = store.lookup(1, prompt.as_bytes());
            let ids: Vec<u32> = (0..prompt.len() as u32 / 3).collect();
            let word_starts: Vec<(usize, usize)> = (0..ids.len()).map(|i| (i, i * 3)).collect();
            store.insert(
                1,
                prompt.as_bytes(),
                &found,
                &Tokenized { ids, word_starts },
            );
            assert!(store.used_bytes() <= 4096, "{}", store.used_bytes());
        }
        assert!(!store.is_empty());
        let mut none = PrefixStore::new(0);
        let found = none.lookup(1, b"x");
        none.insert(1, b"x", &found, &Tokenized::default());
        assert!(none.is_empty());
    }

    #[test]
    fn tokenizers_that_cannot_resume_at_a_word_are_named() {
        use serde_json::json;
        let ok = json!({"normalizer": {"type": "NFC"}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\s+(?!\\S)|\\p{L}+"}, "behavior": "Isolated"},
            {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
            "post_processor": {"type": "ByteLevel", "trim_offsets": false}});
        assert_eq!(restart::why_not(&ok), Ok(()));
        let metaspace = json!({"pre_tokenizer": {"type": "Metaspace", "prepend_scheme": "first"}});
        assert!(
            restart::why_not(&metaspace)
                .unwrap_err()
                .contains("Metaspace")
        );
        let prepend =
            json!({"normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend"}]}});
        assert!(restart::why_not(&prepend).is_err());
        let behind = json!({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(?<=a)b"}}});
        assert!(restart::why_not(&behind).is_err());
        let strip = json!({"added_tokens": [{"content": "<mask>", "lstrip": true}]});
        assert!(restart::why_not(&strip).is_err());
    }
}
