//! The public Rust API: owned, safe types over the engine. The C ABI (`src/ffi/`), the command
//! line and the drop-in libllama are built on these same types.

mod adapter;
mod constraint;
mod generate;
mod model;
mod session;

pub use adapter::{Adapter, ControlVector, EmbedOptions, Embeddings, Pooling};
pub use constraint::{Constraint, GrammarKind, MAX_GRAMMAR_BYTES};
pub use generate::{Detokenizer, Drafter, Generate, GenerateOptions, ModelDrafter, NgramDrafter, PrefixCache, Token};
pub use model::{gpu_device, Backend, Model, ModelInfo, OpenOptions, Precision, TokenKind, DEFAULT_MAX_TOKENIZE_BYTES};
pub use session::{AbortHandle, Acceptance, Job, JobResult, Session, StepItem, VerifyCounters, VerifyOutcome, Want};

pub use crate::pack::chat::Message as ChatMessage;
pub use crate::sample::SamplerParams;

use crate::error::{Error, Result};

/// The library's version (the crate's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The version of the C ABI this build exports (`PACKLM_ABI_VERSION`).
pub const ABI_VERSION: u32 = crate::ffi::status::PACKLM_ABI_VERSION;

/// The index of the largest value (the first of equal ones; a NaN counts as largest); 0 for an
/// empty slice.
pub fn argmax(logits: &[f32]) -> u32 {
    crate::sample::argmax(logits)
}

/// Draws a token from `logits` under `params`: greedy at temperature 0, else temperature,
/// top-k, top-p, min-p and a repetition penalty over `recent` ids, reproducibly from the
/// random state `rng` (advanced by the draw). Refuses empty logits, NaN or +inf values (naming
/// the first), all -inf, and settings out of range (naming the field).
pub fn sample(logits: &[f32], params: &SamplerParams, recent: &[u32], rng: &mut u64) -> Result<u32> {
    if logits.is_empty() {
        return Err(Error::invalid("no logits given"));
    }
    params.check()?;
    crate::sample::check_logits(logits)?;
    Ok(crate::sample::sample(logits, params, recent, rng))
}

/// How important a log message is.
pub use crate::log::Level as LogLevel;

/// Sends the library's log messages to `sink` (None: back to stderr, shown when the
/// `PACKLM_LOG` environment variable asks for the level). The sink may be called from any
/// thread, never while the library holds a lock, so it may call into the library.
pub fn set_log_callback(sink: Option<Box<dyn Fn(LogLevel, &str) + Send + Sync>>) {
    crate::log::set_sink(sink.map(|s| -> crate::log::Sink { std::sync::Arc::from(s) }));
}
