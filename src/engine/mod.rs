//! The model (immutable, shared by sessions) and the session (one sequence's state), and the
//! calls that drive it: step, step_batch.

pub mod adapter;
pub mod content_hash;
pub mod control;
pub mod embed;
pub mod draft;
pub mod forward;
pub mod moe;
pub mod prefix_cache;
mod session;
mod shared_pass;
pub mod speculative;
pub mod weights;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use crate::backend::{self, Backend, BackendKind, Precision};
use crate::error::{Error, Result, Status};
use crate::constrain::Constraint;
use crate::kv::KvStore;
use crate::log;
use crate::pack::chat::{self, Message};
use crate::pack::vocab::Vocab;
use crate::pack::tensor::WeightTensor;
use crate::pack::Pack;
use crate::semantics::ModelSpec;
pub use forward::Want;
pub use session::{Job, JobResult, Session, VerifyCounters};
use weights::Weights;

/// How to open a model.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub backend: BackendKind,
    /// Worker threads of the host backend; 0 = one per core.
    pub threads: usize,
    /// The precision asked for; None = the pack's default (`Precision::default_for`).
    pub precision: Option<Precision>,
    /// The graph backend's runtime and provider (`BackendKind::Npu` only).
    pub graph: backend::graph::GraphOptions,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions { backend: BackendKind::Host, threads: 0, precision: None, graph: Default::default() }
    }
}

impl OpenOptions {
    /// `backend` with `threads`, at `precision`.
    pub fn new(backend: BackendKind, threads: usize, precision: Precision) -> OpenOptions {
        OpenOptions { backend, threads, precision: Some(precision), graph: Default::default() }
    }
}

/// Weights (memory-mapped), tokenizer, and per-layer table. Immutable once open: safe to share
/// between threads and sessions.
pub struct Model {
    spec: ModelSpec,
    config: serde_json::Value,
    /// The backend's prepared handles of every weight.
    weights: Weights,
    vocab: Vocab,
    backend: Box<dyn Backend>,
    source: String,
    /// Hash of the config and the tensor table (names, types, shapes).
    fingerprint: u64,
    /// The pack's metadata as (key, text) pairs (see `Pack::metadata`).
    metadata: Vec<(String, String)>,
    /// Every tensor of the pack, as mapped (kept for `content_hash`).
    tensors: BTreeMap<String, WeightTensor>,
    /// Hash of every tensor's bytes: computed at the first snapshot or restore, not at open.
    content_hash: OnceLock<u64>,
    /// The token table and grammar factory of its constraints: built at the first one.
    constraint_env: OnceLock<Arc<crate::constrain::ConstraintEnv>>,
    /// The pooling, normalization and Dense layers its embeddings default to.
    embedding: crate::pack::embedding::EmbedConfig,
}

impl Model {
    /// The per-layer table and model-wide hyperparameters.
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }
    /// The pack's config.json (or the GGUF's metadata in that shape).
    pub fn config(&self) -> &serde_json::Value {
        &self.config
    }
    /// Tokenizer, special tokens and chat template.
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }
    /// The backend the model was opened on.
    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }
    /// Every tensor of the pack, by name, as mapped.
    pub fn tensors(&self) -> &BTreeMap<String, WeightTensor> {
        &self.tensors
    }
    /// What the pack declares about embeddings (pack/embedding.rs).
    pub fn embedding(&self) -> &crate::pack::embedding::EmbedConfig {
        &self.embedding
    }
    /// The path the model was opened from.
    pub fn source(&self) -> &str {
        &self.source
    }
    /// Hash of the config and the tensor table: equal for the same model opened anywhere.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// Caps the worker threads of this model's later passes (0 = one per core); more than
    /// `backend::MAX_THREADS` is refused with `ErrLimitExceeded` and the cap is unchanged.
    /// Results are bit-identical for any count. Safe while sessions of the model run: the new
    /// cap applies from their next kernel call.
    pub fn set_threads(&self, threads: usize) -> Result<()> {
        if threads > backend::MAX_THREADS {
            return Err(Error::new(
                Status::ErrLimitExceeded,
                format!("threads {threads} is more than the maximum of {}", backend::MAX_THREADS),
            ));
        }
        self.backend.set_threads(threads)
    }

    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Model> {
        Model::open_with_progress(path, opts, &mut |_| true)
    }

    /// As `open`, calling `progress(fraction)` on this thread as the open goes: 0 first, then
    /// after the pack's files are read and after each layer's weights are prepared, 1 last;
    /// the fractions never decrease. When it returns false the open stops there with
    /// `ErrAborted`, everything built so far is freed, and it is not called again.
    pub fn open_with_progress(path: &Path, opts: &OpenOptions, progress: &mut dyn FnMut(f32) -> bool) -> Result<Model> {
        if opts.threads > backend::MAX_THREADS {
            return Err(Error::new(
                Status::ErrLimitExceeded,
                format!("threads {} is more than the maximum of {}", opts.threads, backend::MAX_THREADS),
            ));
        }
        let mut report = |f: f32| -> Result<()> {
            if progress(f) {
                Ok(())
            } else {
                Err(Error::new(Status::ErrAborted, format!("open cancelled by the progress callback at {f}")))
            }
        };
        report(0.0)?;
        // The pack is read before the backend is made: the default precision depends on its
        // weight types.
        let pack = Pack::open(path)?;
        let precision = opts.precision.unwrap_or_else(|| Precision::default_for(pack.tensors.values().any(|t| t.ty.is_quantized())));
        let backend = backend::create_with(opts.backend, opts.threads, precision, &opts.graph)?;
        // Graphs compiled ahead: for sessions of up to `compile_ahead` positions, at most the
        // model's context; the other backends compile nothing, nor does an embedding model
        // (bidirectional attention: it has no sessions' passes, and its `embed` passes compile
        // at first use).
        let ahead = match opts.backend {
            BackendKind::Npu if pack.spec.causal => backend::graph::ahead_passes(opts.graph.compile_ahead.min(pack.spec.max_context)),
            _ => Vec::new(),
        };
        // Compiling ahead counts as the second half of the open.
        let share = if ahead.is_empty() { 1.0 } else { 0.5 };
        let model = Model::open_reporting(path, pack, backend, &mut |f| report(f * share))?;
        let model = if ahead.is_empty() { model } else { model.compile_ahead(&ahead, &mut |f| report(share + (1.0 - share) * f))? };
        report(1.0)?;
        Ok(model)
    }

    /// Runs a pass of each shape of `passes` (`graph::ahead_passes`) in a session of its own,
    /// wanting no logits, the last row's and every row's, so that the graph backend compiles
    /// their graphs now rather than at their first use; `report(fraction)` after each.
    fn compile_ahead(self, passes: &[(usize, usize)], report: &mut dyn FnMut(f32) -> Result<()>) -> Result<Model> {
        let model = Arc::new(self);
        {
            let end = passes.iter().map(|(s, r)| s + r).max().unwrap_or(0);
            let mut s = session::Session::new(model.clone(), end)?;
            let token = model.vocab.bos.unwrap_or(0);
            let filler = vec![token; end];
            for (i, &(start, rows)) in passes.iter().enumerate() {
                for want in [Want::None, Want::Last, Want::All] {
                    if s.n_past() > start {
                        s.truncate(start)?;
                    }
                    let held = s.n_past();
                    if held < start {
                        s.step_batch(&filler[held..start], Want::None)?;
                    }
                    s.step_batch(&filler[start..start + rows], want)?;
                }
                report((i + 1) as f32 / passes.len() as f32)?;
            }
        }
        Arc::try_unwrap(model).map_err(|_| Error::new(Status::ErrPanic, "a session of the graphs compiled ahead outlived it"))
    }

    /// Opens `path` on a backend built by the caller (any implementation of the op set, such as
    /// a test backend); the backend prepares the weights.
    pub fn open_on(path: &Path, backend: Box<dyn Backend>) -> Result<Model> {
        Model::open_reporting(path, Pack::open(path)?, backend, &mut |_| Ok(()))
    }

    /// Reading the pack counts as the first tenth of an open, preparing the weights as the rest.
    fn open_reporting(path: &Path, pack: Pack, backend: Box<dyn Backend>, report: &mut dyn FnMut(f32) -> Result<()>) -> Result<Model> {
        const READ_SHARE: f32 = 0.1;
        report(READ_SHARE)?;
        let mut step = |done: usize, total: usize| report(READ_SHARE + (1.0 - READ_SHARE) * done as f32 / total as f32);
        backend.accepts(&pack.spec)?;
        let weights = Weights::resolve(&pack.spec, &pack.tensors, backend.as_ref(), &mut step)?;
        backend.weights_prepared();
        let fingerprint = fingerprint(&pack);
        if log::enabled(log::Level::Debug) {
            log::log(log::Level::Debug, &format!("{} layers: {}", pack.spec.family, pack.spec.layers_json()));
        }
        log::log(
            log::Level::Info,
            &format!(
                "opened {} ({}, {} layers, backend {}{}, precision {})",
                path.display(),
                pack.spec.family,
                pack.spec.layers.len(),
                backend.name(),
                backend.device().map(|d| format!(" on {d}")).unwrap_or_default(),
                backend.precision().name()
            ),
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
            constraint_env: OnceLock::new(),
            embedding: pack.embedding,
        })
    }

    /// What snapshots carry and restore checks: `fingerprint` mixed with the hash of the tensor
    /// bytes, so that another model with the same table (a fine-tune) is told apart. The first
    /// call reads every weight byte once (several GB/s); later calls are free.
    /// The token table and grammar factory every constraint of this model shares
    /// (constrain::ConstraintEnv), built at the first call.
    pub fn constraint_env(self: &Arc<Self>) -> Result<Arc<crate::constrain::ConstraintEnv>> {
        if let Some(e) = self.constraint_env.get() {
            return Ok(e.clone());
        }
        // The table tokenizes forced text with this model's tokenizer; it holds the model
        // weakly (the model holds the table), and every constraint holds the model.
        let weak = Arc::downgrade(self);
        let encode = Arc::new(move |text: &str| match weak.upgrade() {
            Some(m) => m.vocab.encode(text, false, false),
            None => Err(Error::invalid("the model was freed")),
        });
        let env = Arc::new(crate::constrain::ConstraintEnv::new(&self.vocab, Arc::as_ptr(self) as usize, encode)?);
        Ok(self.constraint_env.get_or_init(|| env).clone())
    }

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
        "suppress_tokens": m.vocab.suppress,
        "tie_word_embeddings": s.tie_word_embeddings,
        "backend": m.backend.name(),
        "device": m.backend.device(),
        "device_counters": m.backend.counters(),
        "layers": s.layers_json(),
        "experts": s.moe_json(),
    })
}
