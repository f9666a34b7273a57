//! A model's chat template, rendered as Hugging Face's `apply_chat_template` renders it: Jinja
//! with `trim_blocks` and `lstrip_blocks`, Python's string and dict methods, `raise_exception`
//! and `strftime_now`, and the special tokens of `tokenizer_config.json` in the context.

use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, Error, ErrorKind, Value};
use serde_json::Value as Json;

/// The template's name inside its environment.
const NAME: &str = "chat";

/// A compiled chat template and the special tokens its context names.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// The template of a `tokenizer_config.json`: its `chat_template` (a string, or a list of
    /// named templates of which `default` is used). `Ok(None)` when it has none.
    pub fn from_tokenizer_config(config: &Json) -> Result<Option<ChatTemplate>, String> {
        let source = match config.get("chat_template") {
            None | Some(Json::Null) => return Ok(None),
            Some(Json::String(source)) => source.clone(),
            Some(Json::Array(named)) => {
                let default = named
                    .iter()
                    .find(|t| t.get("name") == Some(&"default".into()));
                match default
                    .and_then(|t| t.get("template"))
                    .and_then(Json::as_str)
                {
                    Some(source) => source.to_owned(),
                    None => return Err("chat_template lists no template named \"default\"".into()),
                }
            }
            Some(_) => return Err("chat_template is neither a string nor a list".into()),
        };
        let token = |key: &str| match config.get(key) {
            Some(Json::String(s)) => s.clone(),
            Some(Json::Object(o)) => o.get("content").and_then(Json::as_str).unwrap_or("").into(),
            _ => String::new(),
        };
        ChatTemplate::new(source, token("bos_token"), token("eos_token")).map(Some)
    }

    /// Compiles `source`.
    pub fn new(source: String, bos_token: String, eos_token: String) -> Result<Self, String> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| e.to_string())?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, source)
            .map_err(|e| format!("the chat template does not compile: {e}"))?;
        Ok(ChatTemplate {
            env,
            bos_token,
            eos_token,
        })
    }

    /// The prompt text of `messages` (OpenAI's chat shape: a list of `{role, content, ...}`),
    /// ending with the assistant's turn opened when `add_generation_prompt`.
    pub fn render(&self, messages: &Json, add_generation_prompt: bool) -> Result<String, String> {
        let template = self.env.get_template(NAME).map_err(|e| e.to_string())?;
        let context = minijinja::context! {
            messages => Value::from(minijinja::value::Serde(messages)),
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        };
        template
            .render(context)
            .map_err(|e| format!("the chat template failed: {e:#}"))
    }
}

/// The templates' way to refuse a conversation (HF's `raise_exception`).
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// The date some templates print (HF's `strftime_now`): rendered as the Unix day count is not
/// a date, so only formats of the current day in UTC are supported.
fn strftime_now(format: String) -> Result<Value, Error> {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400) as i64;
    let (year, month, day) = civil_from_days(days);
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let month_name = MONTHS[(month - 1) as usize];
    let out = format
        .replace("%Y", &year.to_string())
        .replace("%m", &format!("{month:02}"))
        .replace("%d", &format!("{day:02}"))
        .replace("%B", month_name)
        .replace("%b", &month_name[..3]);
    Ok(Value::from(out))
}

/// Year, month and day of a count of days since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A ChatML template as Qwen's models ship it (shortened: no tools).
    const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

    #[test]
    fn renders_a_chatml_conversation_as_hugging_face_does() {
        let template = ChatTemplate::new(CHATML.into(), String::new(), String::new()).unwrap();
        let messages = json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ]);
        assert_eq!(
            template.render(&messages, true).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert!(
            !template
                .render(&messages, false)
                .unwrap()
                .ends_with("assistant\n")
        );
    }

    #[test]
    fn python_methods_blocks_and_exceptions_work_as_in_jinja2() {
        let source = "{{ bos_token }}{% for m in messages %}\n  {% if m.role not in ['user', 'assistant'] %}{{ raise_exception('bad role ' + m.role) }}{% endif %}\n  [{{ m.role.upper() }}] {{ m.content.strip() }}\n{% endfor %}";
        let template = ChatTemplate::new(source.into(), "<s>".into(), "</s>".into()).unwrap();
        let ok = template.render(&json!([{"role": "user", "content": "  x "}]), false);
        assert_eq!(ok.unwrap(), "<s>  [USER] x\n");
        let refused = template.render(&json!([{"role": "tool", "content": "x"}]), false);
        assert!(refused.unwrap_err().contains("bad role tool"));
    }

    #[test]
    fn reads_the_template_and_tokens_of_a_tokenizer_config() {
        let config = json!({
            "chat_template": [{"name": "default", "template": "{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}"}],
            "bos_token": {"content": "<s>", "lstrip": false},
            "eos_token": "</s>",
        });
        let template = ChatTemplate::from_tokenizer_config(&config)
            .unwrap()
            .unwrap();
        let text = template.render(&json!([{"role": "user", "content": "x"}]), true);
        assert_eq!(text.unwrap(), "<s>x</s>");
        assert!(
            ChatTemplate::from_tokenizer_config(&json!({}))
                .unwrap()
                .is_none()
        );
        assert!(ChatTemplate::from_tokenizer_config(&json!({"chat_template": 3})).is_err());
    }

    #[test]
    fn days_become_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
