//! The pack's own chat template (Jinja), found and rendered as transformers does:
//! `chat_template.jinja`, else tokenizer_config.json `chat_template` (a string, or a list of
//! named templates of which "default" is taken), else the GGUF's `tokenizer.chat_template`.
//! Rendered with minijinja plus its Python-compatibility methods (`.strip()`, `.items()`...).
//!
//! # Bounded rendering
//!
//! A template is code from the pack, so a render runs under three limits ([`Limits`]): fuel
//! (instructions), an output cap, and an allocation budget. The bound: a render's peak memory
//! above the caller's is at most twice its allocation budget (8 x the output cap; a string is
//! built, then copied once into minijinja's shared form) plus a few MiB for the template's
//! instructions and the VM's frames, or the render returns `ErrLimitExceeded` naming the step
//! (the filter, method or operator) and the limit. Values nested past 64 levels, namespaces
//! stored inside values and loops kept past their end are refused too (`ErrLimitExceeded`,
//! `ErrUnsupported`): printing, comparing or dropping such a value recurses without bound.
//!
//! Fuel and the output cap alone do not bound memory: one filter call (`indent(1e11)`,
//! `tojson(indent=1e11)`, `'%1e11s'|format`), one operator (`s ~ s` forty times, `l * 1e5`
//! then `|join`), or a constant the compiler folds (`'x' * 1e8 ~ ...`) builds its value in one
//! step, before any output is written. How the budget is enforced, and why this way:
//! - A counting allocator cannot refuse: a failed allocation aborts a Rust program (there is no
//!   stable way to make it unwind), and a library cannot install a global allocator without
//!   imposing it on every Rust program that links it. So every size must be known before the
//!   allocation is asked for.
//! - Rendering in a child process with a memory limit would need an executable to run (a
//!   library has none of its own), or `fork` inside the host's process, which is unsafe in a
//!   threaded host and absent on Windows; and it costs a process per chat turn.
//! - Wrapping the filters alone leaves the operators (`~`, `+`, `*`, slicing), list literals,
//!   printing into captures, and compile-time folding, none of which calls a filter.
//!
//! So packlm compiles the template itself with minijinja's own parser and code generator
//! (`chat_compile`): constant expressions the generator would fold are bounded and charged
//! first, and the generated instructions are rewritten to call a guard (`chat_guard`) before
//! every step that may build a value of data-dependent size or put one value inside another.
//! Every filter, function and method that builds a value is replaced by one that computes an
//! upper bound of its result from its arguments before calling minijinja's (`chat_calls`).
//! Charges are cumulative (nothing is refunded), so what is alive is at most what was charged.
//! That uses minijinja's unstable machinery API: the dependency is pinned to one version, and
//! the corpus test (tests/chat_memory.rs) fails if a new version changes what the guards see.

use std::path::Path;
use std::sync::Arc;

use minijinja::machinery::{make_string_output, Vm};
use minijinja::{context, AutoEscape, Environment, ErrorKind};
use serde_json::Value;

use crate::error::{Error, Result, Status};
use crate::pack::chat_guard::Budget;
use crate::pack::{chat_calls, chat_compile, chat_guard};

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

/// The allocation budget of a render, per byte of its output cap (see the module doc).
pub const ALLOC_PER_OUTPUT_BYTE: usize = 8;
/// Steps of value inspection a render may take per unit of fuel (see `chat_guard`).
pub const WORK_PER_FUEL: u64 = 1;

/// The limits of one render over `messages`.
pub struct Limits {
    pub fuel: u64,
    /// Bytes of output.
    pub output_cap: usize,
    /// Bytes every value built and every byte printed are charged against.
    pub alloc_budget: usize,
}

impl Limits {
    pub fn for_chat(messages: &[Message]) -> Limits {
        let content: usize = messages.iter().map(|m| m.content.len() + m.role.len()).fold(0, usize::saturating_add);
        let fuel = FUEL_BASE.saturating_add(FUEL_PER_MESSAGE.saturating_mul(messages.len() as u64));
        let output_cap = OUTPUT_BASE.saturating_add(content.saturating_mul(OUTPUT_PER_CONTENT_BYTE));
        Limits { fuel, output_cap, alloc_budget: output_cap.saturating_mul(ALLOC_PER_OUTPUT_BYTE) }
    }
}

/// Renders `template` over `messages` within [`Limits::for_chat`]: fuel, an output cap and an
/// allocation budget (`ErrLimitExceeded` naming the limit when one runs out: a template that
/// loops without end, prints without end, or builds one huge value returns).
pub fn render(
    template: &str,
    messages: &[Message],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String> {
    let limits = Limits::for_chat(messages);
    let (fuel, cap) = (limits.fuel, limits.output_cap);
    let budget = Arc::new(Budget::new(
        limits.alloc_budget,
        format!("{ALLOC_PER_OUTPUT_BYTE} x the output cap of {cap}"),
        cap,
        fuel.saturating_mul(WORK_PER_FUEL),
    ));
    let mut env = Environment::new();
    minijinja_contrib::add_to_environment(&mut env);
    env.set_fuel(Some(fuel));
    env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
    });
    chat_calls::install_calls(&mut env, &budget);
    chat_guard::install_guards(&mut env, &budget);
    let compiled = chat_compile::compile("chat", template, &budget);
    let root = context! {
        messages => messages,
        add_generation_prompt => add_generation_prompt,
        bos_token => bos_token,
        eos_token => eos_token,
    };
    let mut text = String::new();
    let rendered = compiled.and_then(|c| {
        Vm::new(&env)
            .eval(&c.instructions, root, &c.blocks, &mut make_string_output(&mut text), AutoEscape::None)
            .map(|_| ())
    });
    if let Some((status, message)) = budget.refusal() {
        return Err(Error::new(status, format!("chat template: {message}")));
    }
    match rendered {
        Ok(()) if text.len() > cap => Err(Error::new(
            Status::ErrLimitExceeded,
            format!("chat template: output passed the cap of {cap} bytes (1 MiB + 4 x the messages' text)"),
        )),
        Ok(()) => Ok(text),
        Err(e) if e.kind() == ErrorKind::OutOfFuel => Err(Error::new(
            Status::ErrLimitExceeded,
            format!("chat template: ran out of fuel ({fuel} instructions: {FUEL_BASE} + {FUEL_PER_MESSAGE} per message)"),
        )),
        Err(e) => Err(Error::new(Status::ErrTokenizer, format!("chat template: {e}"))),
    }
}
