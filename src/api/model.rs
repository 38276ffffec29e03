//! [`Model`]: a pack opened once and shared by sessions, with its tokenizer and chat template.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::api::{ChatMessage, Detokenizer, Pooling, Session};
use crate::backend::{self, BackendKind};
use crate::engine;
use crate::error::{Error, Result, Status};
use crate::semantics::KvSource;

/// Which kernels a model runs on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// SIMD kernels and worker threads on the CPU (the default).
    #[default]
    Host,
    /// Scalar kernels: the oracle the others are tested against; slow.
    Reference,
    /// The GPU through wgpu (Vulkan, Metal or DX12); [`Status::ErrBackendUnavailable`] where
    /// there is none or the crate was built without the `gpu` feature.
    Gpu,
    /// ONNX Runtime on an execution provider (the CPU, an NPU or a GPU; see
    /// [`OpenOptions::provider`]), its library loaded at run time;
    /// [`Status::ErrBackendUnavailable`] where it cannot be loaded or lacks the provider.
    Npu,
}

impl Backend {
    fn kind(self) -> BackendKind {
        match self {
            Backend::Host => BackendKind::Host,
            Backend::Reference => BackendKind::Reference,
            Backend::Gpu => BackendKind::Accelerator,
            Backend::Npu => BackendKind::Npu,
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = Error;
    /// `host`, `reference`, `gpu` or `npu` (the command line's names).
    fn from_str(s: &str) -> Result<Backend> {
        Ok(match s.parse::<BackendKind>()? {
            BackendKind::Host => Backend::Host,
            BackendKind::Reference => Backend::Reference,
            BackendKind::Accelerator => Backend::Gpu,
            BackendKind::Npu => Backend::Npu,
        })
    }
}

/// How activations are computed. Both keep every bit-for-bit rule (batched == sequential, any
/// thread count); only the distance to the reference implementation differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Precision {
    /// Activations in f32 end to end: logits within 1e-4 of HF transformers.
    Exact,
    /// Activations rounded per block to 8 bits for integer dot products against block-quantized
    /// weights (llama.cpp's trade): faster on quantized packs.
    Fast,
}

impl Precision {
    fn from_engine(p: backend::Precision) -> Precision {
        match p {
            backend::Precision::Exact => Precision::Exact,
            backend::Precision::Fast => Precision::Fast,
        }
    }
    fn engine(self) -> backend::Precision {
        match self {
            Precision::Exact => backend::Precision::Exact,
            Precision::Fast => backend::Precision::Fast,
        }
    }
    /// `"exact"` or `"fast"`.
    pub fn name(self) -> &'static str {
        self.engine().name()
    }
}

impl std::str::FromStr for Precision {
    type Err = Error;
    /// `exact` or `fast`.
    fn from_str(s: &str) -> Result<Precision> {
        match s {
            "exact" => Ok(Precision::Exact),
            "fast" => Ok(Precision::Fast),
            other => Err(Error::new(Status::ErrUnsupportedPrecision, format!("precision {other:?} is not exact or fast"))),
        }
    }
}

/// How to open a model; `OpenOptions::default()` is the host backend, one thread per core,
/// the pack's own precision (fast for block-quantized weights, exact for float ones).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    pub backend: Backend,
    /// Worker threads, the calling thread included; 0 = one per core. At most 256.
    pub threads: usize,
    /// None = the pack's default.
    pub precision: Option<Precision>,
    /// [`Backend::Npu`]: the execution provider by name (`cpu`, `openvino`, `vitisai`, `qnn`,
    /// `coreml`, `cuda`, `dml`); None = `cpu`.
    pub provider: Option<String>,
    /// [`Backend::Npu`]: the provider's options, `key=value` pairs separated by `;`.
    pub provider_options: String,
    /// [`Backend::Npu`]: ONNX Runtime's library; None = `PACKLM_ONNXRUNTIME`, then the system's
    /// library search path.
    pub onnxruntime: Option<String>,
    /// [`Backend::Npu`]: a folder each graph is written into as it is compiled (ONNX files, their
    /// weights in one `weights.bin` beside them, `graphs.json` saying what each input and output
    /// is), for inspection or a vendor's own compiler; None = nothing written.
    pub export_onnx: Option<std::path::PathBuf>,
    /// [`Backend::Npu`]: compile at open the graphs that sessions of up to this many positions
    /// use for prefills, decode steps and `step_batch` (0 = compile each at its first use); the
    /// open's progress counts them as its second half. At most the model's context.
    pub compile_ahead: usize,
}

impl OpenOptions {
    /// These options with `backend`.
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }
    /// These options with `threads` (0 = one per core).
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }
    /// These options with `precision`.
    pub fn precision(mut self, precision: Precision) -> Self {
        self.precision = Some(precision);
        self
    }
    /// These options with the execution provider `name` and its `options` ([`Backend::Npu`]).
    pub fn provider(mut self, name: &str, options: &str) -> Self {
        self.provider = Some(name.to_string());
        self.provider_options = options.to_string();
        self
    }
    /// These options with each compiled graph written to `dir` ([`Backend::Npu`]).
    pub fn export_onnx(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.export_onnx = Some(dir.into());
        self
    }
    /// These options with the graphs of sessions of up to `positions` positions compiled at open
    /// ([`Backend::Npu`]).
    pub fn compile_ahead(mut self, positions: usize) -> Self {
        self.compile_ahead = positions;
        self
    }
    /// These options with ONNX Runtime's library at `path` ([`Backend::Npu`]).
    pub fn onnxruntime(mut self, path: &str) -> Self {
        self.onnxruntime = Some(path.to_string());
        self
    }
    fn engine(&self) -> engine::OpenOptions {
        engine::OpenOptions {
            backend: self.backend.kind(),
            threads: self.threads,
            precision: self.precision.map(Precision::engine),
            graph: backend::graph::GraphOptions { library: self.onnxruntime.clone(), provider: self.provider.clone(), provider_options: self.provider_options.clone(), export: self.export_onnx.clone(), initializers: false, compile_ahead: self.compile_ahead },
        }
    }
}

/// Numbers describing an open model.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelInfo {
    /// The family whose rules built the layer table (`llama`, `qwen3`, `gemma3`, ...).
    pub family: String,
    /// Logits per position.
    pub n_vocab: usize,
    pub n_layers: usize,
    /// The most positions a session may hold.
    pub n_ctx: usize,
    pub hidden_size: usize,
    pub bos: Option<u32>,
    /// The first end-of-sequence id.
    pub eos: Option<u32>,
    /// Every token that ends a reply (EOS ids and the chat template's end-of-turn tokens).
    pub stop_tokens: Vec<u32>,
    /// Whether tokenizing with `add_special` puts BOS first.
    pub add_bos: bool,
    /// Whether tokenizing with `add_special` puts EOS last (a GGUF's `add_eos_token`, an
    /// embedding model's post-processor).
    pub add_eos: bool,
    pub has_chat_template: bool,
    /// The precision in use (a backend without reduced-precision kernels runs exact).
    pub precision: Precision,
    /// Each layer's KV row width (n_kv_heads x head_dim), or None for a layer that reads
    /// another layer's keys and values.
    pub kv_widths: Vec<Option<usize>>,
    /// Each layer's query heads.
    pub n_heads: Vec<usize>,
    /// Each layer's key/value heads.
    pub n_kv_heads: Vec<usize>,
}

/// The device the GPU backend runs on in this process: wgpu's adapter, as "name (driver)
/// (API, driver name, device type)", the type one of wgpu's (`DiscreteGpu`, `IntegratedGpu`,
/// `VirtualGpu`, `Cpu` for a software rasterizer such as Mesa's llvmpipe, `Other`); or
/// [`Status::ErrBackendUnavailable`] with the reason (no adapter, or a build without the GPU
/// backend). The adapter is opened once per process and kept, so later calls are cheap; no
/// model is loaded.
pub fn gpu_device() -> Result<String> {
    let be = backend::create(BackendKind::Accelerator, 1, backend::Precision::Exact)?;
    Ok(be.device().unwrap_or_default())
}

/// An open model: weights (memory-mapped), tokenizer, chat template and layer table.
///
/// Immutable and cheap to clone (the weights are shared): safe to move to any thread and to use
/// from many threads at once. Sessions keep their model alive.
pub struct Model {
    inner: Arc<engine::Model>,
    /// `tokenize`'s input limit, per handle.
    max_tokenize_bytes: AtomicUsize,
}

impl Clone for Model {
    fn clone(&self) -> Model {
        Model { inner: self.inner.clone(), max_tokenize_bytes: AtomicUsize::new(self.max_tokenize_bytes.load(Ordering::Relaxed)) }
    }
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("source", &self.inner.source()).field("family", &self.inner.spec().family).finish()
    }
}

/// The longest text [`Model::tokenize`] accepts by default, in bytes (1 MiB: about 250k tokens
/// of English). Tokenizing N bytes peaks near 300 x N bytes of memory, so the limit bounds it.
pub const DEFAULT_MAX_TOKENIZE_BYTES: usize = 1 << 20;

impl Model {
    /// Opens a pack with default options: a Hugging Face folder (`config.json`,
    /// `tokenizer.json`, safetensors) or a GGUF file. The weights are memory-mapped: the files
    /// must not change while the model is open.
    pub fn open(path: impl AsRef<Path>) -> Result<Model> {
        Model::open_with(path, &OpenOptions::default())
    }

    /// Opens a pack with `options`.
    pub fn open_with(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Model> {
        Model::open_with_progress(path, options, |_| true)
    }

    /// As [`Model::open_with`], calling `progress(fraction)` on this thread as the open goes (0
    /// first, 1 last, never decreasing). Returning false stops the open with
    /// [`Status::ErrAborted`].
    pub fn open_with_progress(path: impl AsRef<Path>, options: &OpenOptions, mut progress: impl FnMut(f32) -> bool) -> Result<Model> {
        let m = engine::Model::open_with_progress(path.as_ref(), &options.engine(), &mut progress)?;
        Ok(Model::from_engine(Arc::new(m)))
    }

    pub(crate) fn from_engine(inner: Arc<engine::Model>) -> Model {
        Model { inner, max_tokenize_bytes: AtomicUsize::new(DEFAULT_MAX_TOKENIZE_BYTES) }
    }

    pub(crate) fn engine(&self) -> &Arc<engine::Model> {
        &self.inner
    }

    /// Sizes, special tokens and the precision in use.
    pub fn info(&self) -> ModelInfo {
        let (s, v) = (self.inner.spec(), self.inner.vocab());
        ModelInfo {
            family: s.family.to_string(),
            n_vocab: s.vocab_size,
            n_layers: s.layers.len(),
            n_ctx: s.max_context,
            hidden_size: s.hidden_size,
            bos: v.bos,
            eos: v.eos.first().copied(),
            stop_tokens: v.stop.clone(),
            add_bos: v.add_bos,
            add_eos: v.add_eos.is_some(),
            has_chat_template: v.chat_template.is_some(),
            precision: self.precision(),
            kv_widths: s
                .layers
                .iter()
                .map(|l| match l.kv_source {
                    KvSource::Own => Some(l.kv_width()),
                    KvSource::SharedWith { .. } => None,
                })
                .collect(),
            n_heads: s.layers.iter().map(|l| l.n_heads).collect(),
            n_kv_heads: s.layers.iter().map(|l| l.n_kv_heads).collect(),
        }
    }

    /// Logits per position (the vocabulary's size).
    pub fn n_vocab(&self) -> usize {
        self.inner.spec().vocab_size
    }

    /// The precision in use.
    pub fn precision(&self) -> Precision {
        Precision::from_engine(self.inner.backend().precision())
    }

    /// The model's description as JSON text: family, sizes, special tokens, backend (and
    /// device), precision, one entry per layer.
    pub fn info_json(&self) -> String {
        let mut v = engine::info_json(&self.inner);
        v["precision"] = self.precision().name().into();
        v.to_string()
    }

    /// The pack's metadata as (key, text) pairs: a GGUF's non-array key/values, or for a
    /// Hugging Face folder its architecture, sizes and chat template under GGUF's key names.
    pub fn metadata(&self) -> &[(String, String)] {
        self.inner.metadata()
    }

    /// The pooling embeddings default to (what the pack declares; [`Pooling::None`] when it
    /// declares none), and whether they are L2-normalized by default. A declared pooling
    /// packlm does not compute is an error here and when embedding with the default.
    pub fn embedding_defaults(&self) -> Result<(Pooling, bool)> {
        let c = self.inner.embedding();
        let p = c.default_pooling()?;
        Ok((p, c.normalize && p != Pooling::None))
    }

    /// The length of one embedding vector under `pooling`: the pack's last Dense layer's width
    /// for a pooled vector, else the hidden size.
    pub fn embedding_dim(&self, pooling: Pooling) -> usize {
        crate::engine::embed::dim(&self.inner, pooling)
    }

    /// Elements of every weight tensor of the pack (llama.cpp's `llama_model_n_params`).
    pub fn n_params(&self) -> u64 {
        self.inner.tensors().values().map(|t| t.shape.iter().product::<usize>() as u64).sum()
    }

    /// Bytes of every weight tensor of the pack as stored (llama.cpp's `llama_model_size`).
    pub fn size_bytes(&self) -> u64 {
        self.inner.tensors().values().map(|t| t.bytes().len() as u64).sum()
    }

    /// Whether the model's attention is causal. A bidirectional model (an encoder such as
    /// EmbeddingGemma) serves embeddings only: its sessions refuse steps.
    pub fn is_causal(&self) -> bool {
        self.inner.spec().causal
    }

    /// Whether `token` ends a reply.
    pub fn is_stop(&self, token: u32) -> bool {
        self.inner.vocab().stop.contains(&token)
    }

    /// Caps the worker threads of the model's later passes (0 = one per core; more than 256
    /// is refused and the cap unchanged). Results are bit-identical for any count; sessions
    /// running now use the new cap from their next kernel call.
    pub fn set_threads(&self, threads: usize) -> Result<()> {
        self.inner.set_threads(threads)
    }

    /// A new, empty session holding up to the model's context length.
    pub fn session(&self) -> Result<Session> {
        Session::new(self, 0)
    }

    /// A new, empty session holding at most `n_ctx` positions (0 = the model's context length;
    /// more than it is refused).
    pub fn session_with_context(&self, n_ctx: usize) -> Result<Session> {
        Session::new(self, n_ctx)
    }

    /// Token ids of `text`. `add_special` puts BOS first where the pack's rules say so (never a
    /// second one when the text already starts with it); `parse_special` reads special-token
    /// text such as `<|im_start|>` as its token. Text longer than the handle's limit
    /// ([`DEFAULT_MAX_TOKENIZE_BYTES`] unless changed) gives [`Status::ErrLimitExceeded`].
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let max = self.max_tokenize_bytes();
        if text.len() > max {
            return Err(Error::new(
                Status::ErrLimitExceeded,
                format!("text of {} bytes is over this model's tokenize limit of {max} bytes", text.len()),
            ));
        }
        self.inner.vocab().encode(text, add_special, parse_special)
    }

    /// The limit [`Model::tokenize`] applies to its input, in bytes.
    pub fn max_tokenize_bytes(&self) -> usize {
        self.max_tokenize_bytes.load(Ordering::Relaxed)
    }

    /// Changes this handle's tokenize limit (0 restores the default). Clones made later copy it.
    pub fn set_max_tokenize_bytes(&self, max_bytes: usize) {
        let max = if max_bytes == 0 { DEFAULT_MAX_TOKENIZE_BYTES } else { max_bytes };
        self.max_tokenize_bytes.store(max, Ordering::Relaxed);
    }

    /// The text of `tokens`; `skip_special` leaves special tokens out. An id outside the
    /// vocabulary gives [`Status::ErrTokenOutOfRange`].
    pub fn detokenize(&self, tokens: &[u32], skip_special: bool) -> Result<String> {
        self.inner.vocab().decode(tokens, skip_special)
    }

    /// One token's text as the tokenizer's decoder gives it alone.
    pub fn token_to_piece(&self, token: u32) -> Result<String> {
        self.inner.vocab().token_to_piece(token)
    }

    /// One token's raw bytes (a byte-fallback token is its byte); special tokens give their
    /// text when `render_special`, else nothing.
    pub fn token_bytes(&self, token: u32, render_special: bool) -> Result<Vec<u8>> {
        self.inner.vocab().token_bytes(token, render_special)
    }

    /// A token's vocabulary entry as stored (None outside the vocabulary).
    pub fn token_text(&self, token: u32) -> Option<String> {
        self.inner.vocab().token_text(token)
    }

    /// What kind of token `token` is (None outside the vocabulary).
    pub fn token_kind(&self, token: u32) -> Option<TokenKind> {
        self.inner.vocab().token_kind(token)
    }

    /// Whether the tokenizer works on bytes mapped to printable characters (GPT-2's byte-level
    /// BPE) rather than on text with byte fallback.
    pub fn is_byte_level(&self) -> bool {
        self.inner.vocab().is_byte_level()
    }

    /// The pack's chat template text, if it has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.inner.vocab().chat_template.as_deref()
    }

    /// Token ids the pack says a sampler should never pick (a GGUF's
    /// `tokenizer.ggml.suppress_tokens`, ids outside the vocabulary dropped); empty when it
    /// lists none. packlm's samplers do not apply it: it is for the application (as llama.h's
    /// `llama_vocab_get_suppress_tokens`). Also "suppress_tokens" in `info_json`.
    pub fn suppress_tokens(&self) -> &[u32] {
        &self.inner.vocab().suppress
    }

    /// The pack's chat template rendered over `messages`; `add_generation_prompt` appends the
    /// start of the assistant's turn. Templates run with bounded instructions and output.
    pub fn chat_apply(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.inner.render_chat(messages, add_generation_prompt)
    }

    /// A streaming detokenizer over this model's vocabulary.
    pub fn detokenizer(&self, skip_special: bool) -> Detokenizer {
        Detokenizer::new(self, skip_special)
    }
}

pub use crate::pack::vocab::TokenKind;
