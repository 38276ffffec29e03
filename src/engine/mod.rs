//! The model (immutable, shared by sessions) and the session (one sequence's state), and the
//! calls that drive it: step, step_batch.

pub mod content_hash;
pub mod draft;
pub mod forward;
pub mod ops;
pub mod prefix_cache;
pub mod speculative;
pub mod weights;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use crate::backend::{self, Backend, BackendKind};
use crate::error::{Error, Result, Status};
use crate::kv::KvCache;
use crate::log;
use crate::pack::chat::{self, Message};
use crate::pack::vocab::Vocab;
use crate::pack::tensor::WeightTensor;
use crate::pack::Pack;
use crate::semantics::ModelSpec;
pub use forward::Want;
use weights::Weights;

/// How to open a model.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub backend: BackendKind,
    /// Worker threads of the host backend; 0 = one per core.
    pub threads: usize,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions { backend: BackendKind::Host, threads: 0 }
    }
}

/// Weights (memory-mapped), tokenizer, and per-layer table. Immutable once open: safe to share
/// between threads and sessions.
pub struct Model {
    pub spec: ModelSpec,
    pub config: serde_json::Value,
    pub weights: Weights,
    pub vocab: Vocab,
    pub backend: Box<dyn Backend>,
    pub source: String,
    /// Hash of the config and the tensor table (names, types, shapes).
    pub fingerprint: u64,
    /// The pack's metadata as (key, text) pairs (see `Pack::metadata`).
    metadata: Vec<(String, String)>,
    /// Every tensor of the pack, as mapped (kept for `content_hash`).
    tensors: BTreeMap<String, WeightTensor>,
    /// Hash of every tensor's bytes: computed at the first snapshot or restore, not at open.
    content_hash: OnceLock<u64>,
}

impl Model {
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Model> {
        let backend = backend::create(opts.backend, opts.threads)?;
        let pack = Pack::open(path)?;
        let weights = Weights::resolve(&pack.spec, &pack.tensors)?;
        let fingerprint = fingerprint(&pack);
        if log::enabled(log::Level::Debug) {
            log::log(log::Level::Debug, &format!("{} layers: {}", pack.spec.family, pack.spec.layers_json()));
        }
        log::log(
            log::Level::Info,
            &format!("opened {} ({}, {} layers, backend {})", path.display(), pack.spec.family, pack.spec.layers.len(), backend.name()),
        );
        Ok(Model {
            spec: pack.spec,
            config: pack.config,
            weights,
            vocab: pack.vocab,
            backend,
            source: path.display().to_string(),
            fingerprint,
            metadata: pack.metadata,
            tensors: pack.tensors,
            content_hash: OnceLock::new(),
        })
    }

    /// What snapshots carry and restore checks: `fingerprint` mixed with the hash of the tensor
    /// bytes, so that another model with the same table (a fine-tune) is told apart. The first
    /// call reads every weight byte once (several GB/s); later calls are free.
    pub fn snapshot_fingerprint(&self) -> u64 {
        let content = *self.content_hash.get_or_init(|| content_hash::tensors_hash(&self.tensors));
        content_hash::hash_bytes(&content.to_le_bytes(), self.fingerprint)
    }

    /// The pack's metadata: a GGUF's non-array key/values as text, or for an HF folder its
    /// architecture, context length, sizes and chat template under GGUF's key names.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    /// The pack's chat template rendered over `msgs`.
    pub fn render_chat(&self, msgs: &[Message], add_generation_prompt: bool) -> Result<String> {
        let template = self
            .vocab
            .chat_template
            .as_deref()
            .ok_or_else(|| Error::new(Status::ErrUnsupported, "the pack has no chat template"))?;
        let text_of = |id: Option<u32>| id.and_then(|i| self.vocab.token_text(i)).unwrap_or_default();
        chat::render(template, msgs, add_generation_prompt, &text_of(self.vocab.bos), &text_of(self.vocab.eos.first().copied()))
    }
}

/// FNV-1a over the canonical config JSON (serde_json orders keys) and each tensor's name, type
/// and shape: equal for the same model opened from the same pack anywhere.
fn fingerprint(pack: &Pack) -> u64 {
    let mut text = pack.config.to_string();
    for (name, t) in &pack.tensors {
        text.push_str(&format!("\n{name}:{}:{:?}", t.ty.name(), t.shape));
    }
    crate::kv::snapshot::fnv1a64(text.as_bytes())
}

/// Counters of a session's speculative steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyCounters {
    /// packlm_verify calls.
    pub rounds: u64,
    /// Draft tokens scored.
    pub drafted: u64,
    /// Draft tokens accepted.
    pub accepted: u64,
}

/// One sequence: KV planes, the tokens it holds, and the logits of its last position.
/// Used by one thread at a time.
pub struct Session {
    pub model: Arc<Model>,
    pub kv: KvCache,
    /// The token at each held position.
    pub tokens: Vec<u32>,
    /// Logits of the last stepped position (empty before the first step, and after a pass that
    /// asked for none, a truncate or a restore).
    pub last_logits: Vec<f32>,
    /// Most positions this session may hold.
    pub n_ctx: usize,
    /// Set from any thread to stop a long pass between layers.
    pub abort: Arc<AtomicBool>,
    pub counters: VerifyCounters,
}

impl Session {
    /// `n_ctx == 0` means the model's context length; more than that is refused.
    pub fn new(model: Arc<Model>, n_ctx: usize) -> Result<Session> {
        let max = model.spec.max_context;
        if n_ctx > max {
            return Err(Error::invalid(format!("n_ctx {n_ctx} is larger than the model's context length {max}")));
        }
        let n_ctx = if n_ctx == 0 { max } else { n_ctx };
        let kv = KvCache::new(&model.spec.layers);
        Ok(Session { model, kv, tokens: Vec::new(), last_logits: Vec::new(), n_ctx, abort: Arc::new(AtomicBool::new(false)), counters: VerifyCounters::default() })
    }

    pub fn n_past(&self) -> usize {
        self.kv.n_past
    }

    fn check(&self, tokens: &[u32]) -> Result<()> {
        if tokens.is_empty() {
            return Err(Error::invalid("no tokens given"));
        }
        // The length first: the ids are read only once the count is known to fit.
        if tokens.len() > self.n_ctx.saturating_sub(self.n_past()) {
            return Err(Error::new(
                Status::ErrContextOverflow,
                format!("{} held + {} new positions exceed the context of {}", self.n_past(), tokens.len(), self.n_ctx),
            ));
        }
        // Tokens index the embedding and, on PLE models, the per-layer table too.
        let vocab = match self.model.spec.per_layer_input {
            Some(p) => self.model.spec.vocab_size.min(p.vocab),
            None => self.model.spec.vocab_size,
        };
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(Error::new(Status::ErrTokenOutOfRange, format!("token id {bad} is outside the vocabulary of {vocab}")));
        }
        Ok(())
    }

    /// Runs `tokens` as one pass; returns logits of the wanted rows (rows x vocab).
    /// On any failure the session is unchanged.
    pub fn step_batch(&mut self, tokens: &[u32], want: Want) -> Result<Vec<f32>> {
        self.check(tokens)?;
        let model = self.model.clone();
        let logits = forward::forward(&model, &mut self.kv, tokens, want, &self.abort)?;
        // Want::None skips the output projection (on a 262k vocabulary it costs more than a
        // token's layers), so there are no last logits to keep after it.
        let v = model.spec.vocab_size;
        self.last_logits = if logits.is_empty() { Vec::new() } else { logits[logits.len() - v..].to_vec() };
        self.tokens.extend_from_slice(tokens);
        Ok(logits)
    }

    /// One position.
    pub fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        self.step_batch(&[token], Want::Last)
    }

    /// Keeps exactly the first `n` positions (n <= n_past). The logits of the new last position
    /// are not kept (`last_logits` becomes empty): step the next token to continue.
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        if n > self.n_past() {
            return Err(Error::invalid(format!("cannot truncate to {n} positions: the session holds {}", self.n_past())));
        }
        if n < self.n_past() {
            self.kv.truncate(n);
            self.tokens.truncate(n);
            self.last_logits.clear();
        }
        Ok(())
    }

    /// The session's exact state as portable bytes (see kv::snapshot).
    pub fn snapshot(&self) -> Vec<u8> {
        crate::kv::snapshot::encode(&self.kv, &self.tokens, self.model.snapshot_fingerprint())
    }

    /// Size of `snapshot()` without building it.
    pub fn snapshot_len(&self) -> usize {
        crate::kv::snapshot::encoded_len(&self.kv)
    }

    /// Replaces the state with a snapshot's; everything is validated first, so on failure the
    /// session is unchanged. `last_logits` becomes empty, as after truncate.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        let m = &self.model;
        let (kv, tokens) = crate::kv::snapshot::decode(bytes, &m.spec.layers, m.snapshot_fingerprint(), m.spec.vocab_size, self.n_ctx)?;
        self.kv = kv;
        self.tokens = tokens;
        self.last_logits.clear();
        Ok(())
    }
}

/// The model's description (`packlm info --json`, `packlm_model_info_json`).
pub fn info_json(m: &Model) -> serde_json::Value {
    let s = &m.spec;
    serde_json::json!({
        "source": m.source,
        "family": s.family,
        "n_layers": s.layers.len(),
        "n_vocab": s.vocab_size,
        "n_ctx": s.max_context,
        "hidden_size": s.hidden_size,
        "bos": m.vocab.bos,
        "eos": m.vocab.eos,
        "stop": m.vocab.stop,
        "add_bos": m.vocab.add_bos,
        "tie_word_embeddings": s.tie_word_embeddings,
        "backend": m.backend.name(),
        "layers": s.layers_json(),
    })
}
