//! A small byte-level BPE tokenizer trained on given text and saved as a Hugging Face model
//! directory (`tokenizer.json`, and `tokenizer_config.json` with a chat template): what tests
//! and benchmarks use in place of a downloaded model's files.

use std::path::Path;

use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, TokenizerBuilder};

/// The special tokens of a trained tokenizer: a BOS, an EOS and ChatML's turn markers.
pub const SPECIAL_TOKENS: [&str; 4] = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"];

/// ChatML, the template of Qwen's models (tools left out).
pub const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Trains a byte-level BPE tokenizer of about `vocab_size` tokens on `texts` (NFC-normalized,
/// GPT-2's word pattern, as Qwen's and Llama 3's tokenizers are built) and writes it into `dir`:
/// `tokenizer.json`, putting `<s>` before every text when `bos`, and `tokenizer_config.json`
/// with `chat_template` if given.
pub fn train_tokenizer(
    dir: &Path,
    texts: &[String],
    vocab_size: usize,
    bos: bool,
    chat_template: Option<&str>,
) -> Result<(), String> {
    let specials: Vec<AddedToken> = SPECIAL_TOKENS
        .iter()
        .map(|t| AddedToken::from(*t, true))
        .collect();
    let mut trainer = BpeTrainerBuilder::new()
        .show_progress(false)
        .vocab_size(vocab_size)
        .min_frequency(2)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .special_tokens(specials)
        .build();
    let mut tokenizer = TokenizerBuilder::new()
        .with_model(BPE::default())
        .with_normalizer(Some(NFC))
        .with_pre_tokenizer(Some(ByteLevel::new(false, false, true)))
        .with_post_processor(Some(ByteLevel::new(false, false, true)))
        .with_decoder(Some(ByteLevel::default()))
        .build()
        .map_err(|e| e.to_string())?;
    tokenizer
        .train(&mut trainer, texts.iter())
        .map_err(|e| e.to_string())?;
    let mut json: serde_json::Value =
        serde_json::from_str(&tokenizer.to_string(false).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    if bos {
        let id = tokenizer.token_to_id("<s>").ok_or("no <s> token")?;
        json["post_processor"] = serde_json::json!({
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [id], "tokens": ["<s>"]}},
        });
    }
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let write = |name: &str, value: &serde_json::Value| {
        std::fs::write(dir.join(name), value.to_string())
            .map_err(|e| format!("cannot write {name}: {e}"))
    };
    write("tokenizer.json", &json)?;
    if let Some(template) = chat_template {
        let config = serde_json::json!({
            "chat_template": template,
            "bos_token": "<s>",
            "eos_token": "</s>",
        });
        write("tokenizer_config.json", &config)?;
    }
    Ok(())
}
