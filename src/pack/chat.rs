//! The pack's own chat template (Jinja), found and rendered as transformers does:
//! `chat_template.jinja`, else tokenizer_config.json `chat_template` (a string, or a list of
//! named templates of which "default" is taken), else the GGUF's `tokenizer.chat_template`.
//! Rendered with minijinja plus its Python-compatibility methods (`.strip()`, `.items()`...).

use std::path::Path;

use minijinja::{context, Environment, ErrorKind};
use serde_json::Value;

use crate::error::{Error, Result, Status};

pub fn template_from_folder(dir: &Path, tokenizer_config: &Value) -> Result<Option<String>> {
    let file = dir.join("chat_template.jinja");
    if file.is_file() {
        return std::fs::read_to_string(&file).map(Some).map_err(|e| Error::io(&file, e));
    }
    match tokenizer_config.get("chat_template") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(list)) => Ok(list
            .iter()
            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
            .and_then(|t| t.get("template"))
            .and_then(|t| t.as_str())
            .map(str::to_string)),
        Some(other) => Err(Error::format(format!(
            "tokenizer_config.json: \"chat_template\" should be a string or a list, found {other}"
        ))),
    }
}

/// One chat message.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

/// Renders `template` over `messages`.
pub fn render(
    template: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String> {
    let mut env = Environment::new();
    minijinja_contrib::add_to_environment(&mut env);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_template("chat", template)
        .map_err(|e| Error::new(Status::ErrTokenizer, format!("chat template: {e}")))?;
    let tmpl = env
        .get_template("chat")
        .map_err(|e| Error::new(Status::ErrTokenizer, format!("chat template: {e}")))?;
    tmpl.render(context! {
        messages => messages,
        add_generation_prompt => add_generation_prompt,
        bos_token => bos_token,
        eos_token => eos_token,
    })
    .map_err(|e| Error::new(Status::ErrTokenizer, format!("chat template: {e}")))
}
