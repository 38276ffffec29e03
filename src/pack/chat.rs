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
    if crate::pack::files::exists(&file) {
        return crate::pack::files::read_text(&file, crate::pack::files::FileKind::ChatTemplate).map(Some);
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

/// Instructions a render may run: a fixed allowance plus a share per message (a real template
/// runs a few hundred per message; SmolLM2's and Gemma3's stay far below this for any chat).
pub const FUEL_BASE: u64 = 10_000_000;
pub const FUEL_PER_MESSAGE: u64 = 100_000;
/// Bytes a render may produce: a fixed allowance plus four times the messages' text.
pub const OUTPUT_BASE: usize = 1 << 20;
pub const OUTPUT_PER_CONTENT_BYTE: usize = 4;

/// A writer that refuses to grow past `cap` bytes.
struct CappedOutput {
    out: Vec<u8>,
    cap: usize,
    exceeded: bool,
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.out.len().saturating_add(buf.len()) > self.cap {
            self.exceeded = true;
            return Err(std::io::Error::other("chat template output cap reached"));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Renders `template` over `messages`, with fuel and an output cap (`ErrLimitExceeded` when
/// either runs out: a template that loops without end, or prints without end, returns).
pub fn render(
    template: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String> {
    let content: usize = messages.iter().map(|m| m.content.len() + m.role.len()).fold(0, usize::saturating_add);
    let fuel = FUEL_BASE.saturating_add(FUEL_PER_MESSAGE.saturating_mul(messages.len() as u64));
    let cap = OUTPUT_BASE.saturating_add(content.saturating_mul(OUTPUT_PER_CONTENT_BYTE));
    let mut env = Environment::new();
    minijinja_contrib::add_to_environment(&mut env);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.set_fuel(Some(fuel));
    env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_template("chat", template)
        .map_err(|e| Error::new(Status::ErrTokenizer, format!("chat template: {e}")))?;
    let tmpl = env
        .get_template("chat")
        .map_err(|e| Error::new(Status::ErrTokenizer, format!("chat template: {e}")))?;
    let mut out = CappedOutput { out: Vec::new(), cap, exceeded: false };
    let rendered = tmpl.render_captured_to(
        context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => bos_token,
            eos_token => eos_token,
        },
        &mut out,
    );
    match rendered {
        Ok(_) => String::from_utf8(out.out)
            .map_err(|e| Error::new(Status::ErrUtf8, format!("chat template output: {e}"))),
        Err(_) if out.exceeded => Err(Error::new(
            Status::ErrLimitExceeded,
            format!("chat template: output passed the cap of {cap} bytes (1 MiB + 4 x the messages' text)"),
        )),
        Err(e) if e.kind() == ErrorKind::OutOfFuel => Err(Error::new(
            Status::ErrLimitExceeded,
            format!("chat template: ran out of fuel ({fuel} instructions: {FUEL_BASE} + {FUEL_PER_MESSAGE} per message)"),
        )),
        Err(e) => Err(Error::new(Status::ErrTokenizer, format!("chat template: {e}"))),
    }
}
