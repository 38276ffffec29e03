//! The one place the facade calls into packlm: opening a model, a session's steps, rollback
//! and state, and the vocabulary. Everything else in this crate speaks llama.cpp's terms.

use std::path::Path;
use std::sync::Arc;

use packlm::engine::{Model, OpenOptions, Session, Want};

pub use packlm::kv::snapshot::fnv1a64;
pub use packlm::pack::vocab::TokenKind;
pub use packlm::Error;
pub type Result<T> = std::result::Result<T, Error>;

/// The longest text `tokenize` takes, in bytes: packlm_tokenize's default limit (1 MiB, about
/// 250k tokens of English). Tokenizing N bytes peaks at up to about 300 x N bytes, so without
/// it 16 MiB took 35 s and 2.6 GB.
pub const MAX_TOKENIZE_BYTES: usize = packlm::ffi::text::PACKLM_DEFAULT_MAX_TOKENIZE_BYTES;

/// An open model and the facts the llama.cpp API asks for.
pub struct Engine {
    model: Arc<Model>,
}

impl Engine {
    pub fn open(path: &Path) -> Result<Engine> {
        let model = Model::open(path, &OpenOptions::default())?;
        Ok(Engine { model: Arc::new(model) })
    }

    pub fn n_vocab(&self) -> usize {
        self.model.spec().vocab_size
    }
    pub fn n_ctx_train(&self) -> usize {
        self.model.spec().max_context
    }
    pub fn n_embd(&self) -> usize {
        self.model.spec().hidden_size
    }
    pub fn n_layer(&self) -> usize {
        self.model.spec().layers.len()
    }
    /// Query heads of the first layer (llama.cpp's `n_head()`, which is layer 0's).
    pub fn n_head(&self) -> usize {
        self.model.spec().layers.first().map_or(0, |l| l.n_heads)
    }
    /// KV heads of the first layer (llama.cpp's `n_head_kv()`).
    pub fn n_head_kv(&self) -> usize {
        self.model.spec().layers.first().map_or(0, |l| l.n_kv_heads)
    }
    pub fn metadata(&self) -> &[(String, String)] {
        self.model.metadata()
    }
    pub fn family(&self) -> String {
        self.model.spec().family.to_string()
    }
    pub fn bos(&self) -> Option<u32> {
        self.model.vocab().bos
    }
    pub fn eos(&self) -> Option<u32> {
        self.model.vocab().eos.first().copied()
    }
    pub fn add_bos(&self) -> bool {
        self.model.vocab().add_bos
    }
    pub fn is_stop(&self, id: u32) -> bool {
        self.model.vocab().stop.contains(&id)
    }
    pub fn token_kind(&self, id: u32) -> Option<TokenKind> {
        self.model.vocab().token_kind(id)
    }
    pub fn is_byte_level(&self) -> bool {
        self.model.vocab().is_byte_level()
    }
    pub fn chat_template(&self) -> Option<String> {
        self.model.vocab().chat_template.clone()
    }
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.model.vocab().token_text(id)
    }
    /// Text longer than `MAX_TOKENIZE_BYTES` gives `ErrLimitExceeded`, as packlm_tokenize.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        if text.len() > MAX_TOKENIZE_BYTES {
            return Err(Error::new(
                packlm::Status::ErrLimitExceeded,
                format!("text of {} bytes is over the tokenize limit of {MAX_TOKENIZE_BYTES} bytes", text.len()),
            ));
        }
        self.model.vocab().encode(text, add_special, parse_special)
    }
    pub fn token_bytes(&self, id: u32, render_special: bool) -> Result<Vec<u8>> {
        self.model.vocab().token_bytes(id, render_special)
    }
    pub fn new_session(&self, n_ctx: usize) -> Result<Session> {
        Session::new(self.model.clone(), n_ctx)
    }
}

/// Which rows of a pass give logits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    None,
    Last,
    All,
}

/// Whether a failure is a full context (llama.cpp's "no KV slot", 1) or bad input (-1).
pub fn is_context_full(e: &Error) -> bool {
    e.status == packlm::Status::ErrContextOverflow
}

/// Whether a pass was stopped by the abort flag (llama.cpp's 2).
pub fn is_aborted(e: &Error) -> bool {
    e.status == packlm::Status::ErrAborted
}

/// Whether a pass computed a non-finite logit (llama.cpp's "compute failed", -3).
pub fn is_non_finite(e: &Error) -> bool {
    e.status == packlm::Status::ErrNonFinite
}

/// One sequence over an [`Engine`].
pub struct Sequence {
    session: Session,
}

impl Sequence {
    pub fn new(engine: &Engine, n_ctx: usize) -> Result<Sequence> {
        Ok(Sequence { session: engine.new_session(n_ctx)? })
    }
    pub fn n_ctx(&self) -> usize {
        self.session.n_ctx()
    }
    pub fn n_past(&self) -> usize {
        self.session.n_past()
    }
    /// Steps `tokens` in one pass; returns the logits of the rows `rows` asks for.
    pub fn step(&mut self, tokens: &[u32], rows: Rows) -> Result<Vec<f32>> {
        let want = match rows {
            Rows::None => Want::None,
            Rows::Last => Want::Last,
            Rows::All => Want::All,
        };
        self.session.step_batch(tokens, want)
    }
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        self.session.truncate(n)
    }
    pub fn snapshot(&self) -> Vec<u8> {
        self.session.snapshot()
    }
    pub fn snapshot_len(&self) -> usize {
        self.session.snapshot_len()
    }
    /// What `snapshot_len` is when the session holds `positions` positions (the format in
    /// packlm's src/kv/snapshot.rs: a 32-byte header, the tokens, per layer its source byte,
    /// width and own planes, the 8-byte trailer); None when that overflows.
    pub fn snapshot_len_at(&self, positions: usize) -> Option<usize> {
        let mut len = positions.checked_mul(4)?.checked_add(32 + 8)?;
        for width in self.session.plane_widths() {
            let plane = width.map_or(Some(0), |w| positions.checked_mul(w)?.checked_mul(2 * 4))?;
            len = len.checked_add(5)?.checked_add(plane)?;
        }
        Some(len)
    }
    pub fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        self.session.restore(bytes)
    }
}
