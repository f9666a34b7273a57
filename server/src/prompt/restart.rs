//! Whether a tokenizer can resume at a word start: tokenizing the text after a word start
//! gives the same tokens as the whole text does from there. True when normalization is
//! Unicode composition (local to a character), words come from patterns that look at most one
//! character past a word (whitespace, punctuation, digits, byte-level, regex splits without
//! lookbehind), no added token strips the whitespace around it, and special tokens are only
//! put before the text. Other tokenizers (SentencePiece's metaspace, which marks the text's
//! start) are encoded whole every time.

use serde_json::Value as Json;
use tokenizers::Tokenizer;

/// `Ok` when the `tokenizer.json` resumes at word starts; else why not.
pub fn why_not(json: &Json) -> Result<(), String> {
    let kind = |v: &Json| {
        v.get("type")
            .and_then(Json::as_str)
            .unwrap_or("")
            .to_owned()
    };
    fn each<'a>(v: &'a Json, key: &str) -> Vec<&'a Json> {
        match v.get(key).and_then(Json::as_array) {
            Some(items) => items.iter().collect(),
            None => vec![v],
        }
    }
    match json.get("normalizer") {
        None | Some(Json::Null) => {}
        Some(n) => {
            for n in each(n, "normalizers") {
                let k = kind(n);
                if !matches!(k.as_str(), "NFC" | "NFD" | "NFKC" | "NFKD") {
                    return Err(format!("its normalizer {k} may change text across words"));
                }
            }
        }
    }
    match json.get("pre_tokenizer") {
        None | Some(Json::Null) => {}
        Some(p) => {
            for p in each(p, "pretokenizers") {
                let k = kind(p);
                match k.as_str() {
                    "Whitespace" | "WhitespaceSplit" | "Punctuation" | "Digits"
                    | "BertPreTokenizer" => {}
                    "ByteLevel" if p.get("add_prefix_space") != Some(&Json::Bool(true)) => {}
                    "Split" => {
                        let pattern = p.get("pattern").map(|v| v.to_string()).unwrap_or_default();
                        if pattern.contains("(?<") {
                            return Err("its split pattern looks behind".into());
                        }
                    }
                    _ => return Err(format!("its pre-tokenizer {k} depends on the text's start")),
                }
            }
        }
    }
    match json.get("post_processor") {
        None | Some(Json::Null) => {}
        Some(p) => {
            for p in each(p, "processors") {
                if p.get("trim_offsets") == Some(&Json::Bool(true)) {
                    return Err("its post-processor trims offsets".into());
                }
            }
        }
    }
    let strips = json
        .get("added_tokens")
        .and_then(Json::as_array)
        .is_some_and(|tokens| {
            tokens.iter().any(|t| {
                t.get("lstrip") == Some(&Json::Bool(true))
                    || t.get("rstrip") == Some(&Json::Bool(true))
            })
        });
    if strips {
        return Err("an added token strips the whitespace around it".into());
    }
    Ok(())
}

/// `Ok` when the tokenizer's special tokens all come before the text.
pub fn specials_lead(tokenizer: &Tokenizer) -> Result<(), &'static str> {
    let probe = "a b";
    let with = tokenizer
        .encode(probe, true)
        .map_err(|_| "it cannot encode a probe")?;
    let without = tokenizer
        .encode(probe, false)
        .map_err(|_| "it cannot encode a probe")?;
    if with.get_ids().ends_with(without.get_ids()) {
        Ok(())
    } else {
        Err("its post-processor adds tokens after the text")
    }
}
