//! The one place the facade calls into packlm: opening a model, a session's steps, rollback
//! and state, and the vocabulary. Everything else in this crate speaks llama.cpp's terms.

use std::path::Path;
use std::sync::Mutex;

use packlm::{Model, OpenOptions, Session, StepItem, Want};

pub use packlm::Backend;
pub use packlm::Error;
pub use packlm::Pooling;
pub use packlm::TokenKind;
pub type Result<T> = std::result::Result<T, Error>;

/// FNV-1a over `bytes`, the checksum of the state bytes (the same function packlm's snapshots
/// use; written here because the facade uses packlm's public API only).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

/// An open model and the facts the llama.cpp API asks for.
pub struct Engine {
    model: Model,
    info: packlm::ModelInfo,
    /// The fill-in-the-middle tokens, in `FimRole` order.
    fim: [Option<u32>; 6],
    /// The padding token (`find_pad`).
    pad: Option<u32>,
    /// The backend it runs on (`Model::info_json`'s "backend": host, gpu or npu) and the
    /// device, for a device backend ("device": the GPU's "name (api, driver, device type)", the
    /// npu backend's "ONNX Runtime version, provider execution provider").
    backend: String,
    device: Option<String>,
    /// The worker-thread cap last set on the model (`set_threads`), 0 before any: packlm's
    /// API sets the cap but does not report it, and only this engine sets it.
    threads: Mutex<usize>,
}

/// llama.cpp's fill-in-the-middle roles, in the order of `Engine::fim`.
#[derive(Clone, Copy)]
pub enum FimRole {
    Pre,
    Suf,
    Mid,
    Pad,
    Rep,
    Sep,
}

/// Where llama.cpp finds each fill-in-the-middle token (llama-vocab.cpp, `load`): the id under
/// the GGUF key (a deprecated key, where set, after it and over it), else a token whose text
/// is one of these names. A row per role, in `FimRole` order.
const FIM_ROLES: [(&str, Option<&str>, &[&str]); 6] = [
    ("tokenizer.ggml.fim_pre_token_id", Some("tokenizer.ggml.prefix_token_id"), &["<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"]),
    ("tokenizer.ggml.fim_suf_token_id", Some("tokenizer.ggml.suffix_token_id"), &["<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"]),
    ("tokenizer.ggml.fim_mid_token_id", Some("tokenizer.ggml.middle_token_id"), &["<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"]),
    ("tokenizer.ggml.fim_pad_token_id", None, &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"]),
    ("tokenizer.ggml.fim_rep_token_id", None, &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"]),
    ("tokenizer.ggml.fim_sep_token_id", None, &["<|file_sep|>"]),
];

/// `Engine::fim`, found as llama.cpp finds it. Where several tokens carry a role's names,
/// llama.cpp takes whichever its hash map gives first; this takes the lowest id.
fn find_fim(model: &Model, n_vocab: usize) -> [Option<u32>; 6] {
    let key = |k: &str| model.metadata().iter().find(|kv| kv.0 == k).and_then(|kv| kv.1.parse::<u32>().ok()).filter(|&id| (id as usize) < n_vocab);
    let mut fim = [None; 6];
    for (slot, (k, deprecated, _)) in fim.iter_mut().zip(FIM_ROLES) {
        *slot = deprecated.and_then(key).or_else(|| key(k));
    }
    if fim.iter().any(Option::is_none) {
        for id in 0..n_vocab as u32 {
            let Some(text) = model.token_text(id) else { continue };
            for (slot, (_, _, names)) in fim.iter_mut().zip(FIM_ROLES) {
                if slot.is_none() && names.contains(&text.as_str()) {
                    *slot = Some(id);
                }
            }
        }
    }
    fim
}

/// The padding token as llama.cpp gets it from a GGUF (llama-vocab.cpp, `load`):
/// `tokenizer.ggml.padding_token_id`, an id outside the vocabulary ignored. For an HF folder,
/// where convert_hf_to_gguf.py's `SpecialVocab` (gguf-py vocab.py) finds it: tokenizer_config.json's
/// `pad_token` (a string or `{"content": ...}`), the token of that text, else config.json's
/// `pad_token_id`.
fn find_pad(path: &Path, model: &Model, n_vocab: usize) -> Option<u32> {
    let in_vocab = |id: u64| u32::try_from(id).ok().filter(|&id| (id as usize) < n_vocab);
    if !path.is_dir() {
        let id = model.metadata().iter().find(|kv| kv.0 == "tokenizer.ggml.padding_token_id")?.1.parse::<u64>().ok()?;
        return in_vocab(id);
    }
    let json = |name: &str| -> Option<serde_json::Value> { serde_json::from_str(&std::fs::read_to_string(path.join(name)).ok()?).ok() };
    let by_text = json("tokenizer_config.json").and_then(|c| {
        let pad = &c["pad_token"];
        let text = pad.as_str().or_else(|| pad["content"].as_str())?.to_string();
        (0..n_vocab as u32).find(|&id| model.token_text(id).as_deref() == Some(text.as_str()))
    });
    by_text.or_else(|| json("config.json").and_then(|c| c["pad_token_id"].as_u64()).and_then(in_vocab))
}

/// How `Engine::open_npu` sets up packlm's npu backend (offload.rs takes each from the
/// environment).
pub struct NpuSettings<'a> {
    /// The execution provider (packlm's names: cpu, openvino, vitisai, qnn, coreml, cuda, dml).
    pub provider: &'a str,
    /// The provider's options, "key=value" pairs separated by ';' ("" for none), passed to ONNX
    /// Runtime as they are.
    pub provider_options: &'a str,
    /// The graphs of sessions of up to this many positions are compiled during the open (0:
    /// each at its first use), which the open's progress counts as its second half.
    pub compile_ahead: usize,
    /// A folder each graph is written into as it is compiled (packlm's
    /// `OpenOptions::export_onnx`); None: nothing is written.
    pub export: Option<&'a Path>,
}

impl Engine {
    /// Opens `path` on `backend` (one worker thread per core until a context sets its count);
    /// `progress` is packlm's open progress (0 first, then after the pack's files are read
    /// and after each layer's weights are prepared, 1 last).
    pub fn open(path: &Path, backend: Backend, progress: impl FnMut(f32) -> bool) -> Result<Engine> {
        Engine::open_with(path, &OpenOptions::default().backend(backend), progress)
    }

    /// `open` on packlm's npu backend as `npu` says; ONNX Runtime's library is the one
    /// PACKLM_ONNXRUNTIME names, else the system's search path finds.
    pub fn open_npu(path: &Path, npu: &NpuSettings, progress: impl FnMut(f32) -> bool) -> Result<Engine> {
        let mut options = OpenOptions::default().backend(Backend::Npu).provider(npu.provider, npu.provider_options).compile_ahead(npu.compile_ahead);
        if let Some(dir) = npu.export {
            options = options.export_onnx(dir);
        }
        Engine::open_with(path, &options, progress)
    }

    fn open_with(path: &Path, options: &OpenOptions, progress: impl FnMut(f32) -> bool) -> Result<Engine> {
        let model = Model::open_with_progress(path, options, progress)?;
        let info = model.info();
        let fim = find_fim(&model, info.n_vocab);
        let pad = find_pad(path, &model, info.n_vocab);
        let json: serde_json::Value = serde_json::from_str(&model.info_json()).unwrap_or_default();
        let backend = json["backend"].as_str().unwrap_or_default().to_string();
        let device = json["device"].as_str().map(str::to_string);
        Ok(Engine { info, model, fim, pad, backend, device, threads: Mutex::new(0) })
    }

    /// The backend the model runs on: "host", "gpu" or "npu" (packlm's names).
    pub fn backend(&self) -> &str {
        &self.backend
    }
    /// The device of a GPU model, "name (api, driver, device type)", or of an npu model,
    /// "ONNX Runtime version, provider execution provider" (packlm's `info_json`).
    pub fn device(&self) -> Option<&str> {
        self.device.as_deref()
    }
    /// Whether the model runs on a GPU adapter whose device type is CPU (a software rasterizer
    /// such as Mesa's llvmpipe): packlm's device text ends with wgpu's type name `Cpu`.
    pub fn is_cpu_device(&self) -> bool {
        self.device.as_deref().is_some_and(|d| d.ends_with(", Cpu)"))
    }

    /// Caps the worker threads of the model's later passes at `threads` (1 to 256; packlm's
    /// `Model::set_threads`, which gives the same bits for any count, and which the GPU
    /// backend takes with no effect). The cap is the model's: every context of it shares it.
    pub fn set_threads(&self, threads: usize) -> Result<()> {
        // Held while packlm's cap changes, so that `threads` is the cap in force.
        let mut kept = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        self.model.set_threads(threads)?;
        *kept = threads;
        Ok(())
    }
    /// The cap `set_threads` last set (0 before any: one thread per core, the open's).
    pub fn threads(&self) -> usize {
        *self.threads.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn n_vocab(&self) -> usize {
        self.info.n_vocab
    }
    pub fn n_ctx_train(&self) -> usize {
        self.info.n_ctx
    }
    pub fn n_embd(&self) -> usize {
        self.info.hidden_size
    }
    /// The length of a pooled embedding: the pack's last Dense layer's width (EmbeddingGemma's
    /// projection), else the hidden size.
    pub fn n_embd_out(&self) -> usize {
        self.model.embedding_dim(packlm::Pooling::Mean)
    }
    pub fn n_layer(&self) -> usize {
        self.info.n_layers
    }
    /// A control vector of this model from `data` (n_layer x n_embd floats, layer 0 first),
    /// added at the end of layers `start..=end` (packlm's `ControlVector::from_data`).
    pub fn control_vector(&self, data: &[f32], start: usize, end: usize) -> Result<packlm::ControlVector> {
        packlm::ControlVector::from_data(&self.model, data, self.info.hidden_size, start, end)
    }
    /// Query heads of the first layer (llama.cpp's `n_head()`, which is layer 0's).
    pub fn n_head(&self) -> usize {
        self.info.n_heads.first().copied().unwrap_or(0)
    }
    /// KV heads of the first layer (llama.cpp's `n_head_kv()`).
    pub fn n_head_kv(&self) -> usize {
        self.info.n_kv_heads.first().copied().unwrap_or(0)
    }
    /// The attention window of the sliding-window layers, 0 when every layer attends to all
    /// positions (from packlm's layer table, `Model::info_json`'s per-layer `window`).
    pub fn sliding_window(&self) -> usize {
        let info: serde_json::Value = serde_json::from_str(&self.model.info_json()).unwrap_or_default();
        let layers = info["layers"].as_array().map(Vec::as_slice).unwrap_or_default();
        layers.iter().filter_map(|l| l["window"].as_u64()).max().unwrap_or(0) as usize
    }
    pub fn metadata(&self) -> &[(String, String)] {
        self.model.metadata()
    }
    pub fn family(&self) -> String {
        self.info.family.clone()
    }
    pub fn bos(&self) -> Option<u32> {
        self.info.bos
    }
    pub fn eos(&self) -> Option<u32> {
        self.info.eos
    }
    pub fn add_bos(&self) -> bool {
        self.info.add_bos
    }
    pub fn add_eos(&self) -> bool {
        self.info.add_eos
    }
    /// Elements and stored bytes of every weight tensor (llama.cpp's n_params and size).
    pub fn n_params(&self) -> u64 {
        self.model.n_params()
    }
    pub fn size_bytes(&self) -> u64 {
        self.model.size_bytes()
    }
    pub fn is_stop(&self, id: u32) -> bool {
        self.model.is_stop(id)
    }
    /// The padding token (llama.cpp's `llama_vocab_pad`), where the model states one.
    pub fn pad(&self) -> Option<u32> {
        self.pad
    }
    /// The fill-in-the-middle token of `role` (llama.cpp's `llama_vocab_fim_*`).
    pub fn fim(&self, role: FimRole) -> Option<u32> {
        self.fim[role as usize]
    }
    /// End of generation as llama.cpp counts it (llama-vocab.cpp, `special_eog_ids`): the
    /// pack's stop tokens (EOS, end of turn) and the fill-in-the-middle pad, repository and
    /// file-separator tokens.
    pub fn is_eog(&self, id: u32) -> bool {
        self.model.is_stop(id) || [FimRole::Pad, FimRole::Rep, FimRole::Sep].iter().any(|&r| self.fim(r) == Some(id))
    }
    /// The end-of-turn token: a stop token that is not the EOS.
    pub fn eot(&self) -> Option<u32> {
        let eos = self.eos();
        (0..self.n_vocab() as u32).find(|&t| self.model.is_stop(t) && Some(t) != eos)
    }
    /// The vocabulary calls of the DRY and infill samplers, holding the model.
    pub fn vocab(&self) -> Vocab {
        let eog = (0..self.n_vocab() as u32).filter(|&t| self.is_eog(t)).collect();
        Vocab { model: self.model.clone(), n_vocab: self.n_vocab(), eog, eot: self.eot(), eos: self.eos() }
    }
    pub fn token_kind(&self, id: u32) -> Option<TokenKind> {
        self.model.token_kind(id)
    }
    pub fn is_byte_level(&self) -> bool {
        self.model.is_byte_level()
    }
    pub fn suppress_tokens(&self) -> &[u32] {
        self.model.suppress_tokens()
    }
    pub fn chat_template(&self) -> Option<String> {
        self.model.chat_template().map(str::to_string)
    }
    /// The pack's own (Jinja) chat template over `msgs` (role, content).
    pub fn chat_apply(&self, msgs: &[(&str, &str)], add_generation_prompt: bool) -> Result<String> {
        let msgs: Vec<packlm::ChatMessage> = msgs.iter().map(|(r, c)| packlm::ChatMessage { role: r.to_string(), content: c.to_string() }).collect();
        self.model.chat_apply(&msgs, add_generation_prompt)
    }
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.model.token_text(id)
    }
    /// Text longer than packlm's tokenize limit (`packlm::DEFAULT_MAX_TOKENIZE_BYTES`, 1 MiB)
    /// gives `ErrLimitExceeded`, as packlm_tokenize: tokenizing N bytes peaks at up to about
    /// 300 x N bytes, and 16 MiB took 35 s and 2.6 GB without it.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        self.model.tokenize(text, add_special, parse_special)
    }
    pub fn token_bytes(&self, id: u32, render_special: bool) -> Result<Vec<u8>> {
        self.model.token_bytes(id, render_special)
    }
    pub fn new_session(&self, n_ctx: usize) -> Result<Session> {
        self.model.session_with_context(n_ctx)
    }
    /// Whether the model's attention is causal (a bidirectional embedding model's sessions
    /// refuse steps and serve embeddings only).
    pub fn is_causal(&self) -> bool {
        self.model.is_causal()
    }
    /// The pooling the pack declares for its embeddings (none when it declares none); an
    /// error for a declared pooling packlm does not compute.
    pub fn default_pooling(&self) -> Result<Pooling> {
        self.model.embedding_defaults().map(|(p, _)| p)
    }
    /// The length of one embedding under `pooling` (the pack's last Dense layer's width for a
    /// pooled vector, else the hidden size).
    pub fn embedding_dim(&self, pooling: Pooling) -> usize {
        self.model.embedding_dim(pooling)
    }
    /// Opens a LoRA adapter (a llama.cpp adapter GGUF or a PEFT folder) for this model; an
    /// adapter of another base is refused, naming the tensor or key.
    pub fn open_lora(&self, path: &Path) -> Result<Lora> {
        Ok(Lora { adapter: packlm::Adapter::open(&self.model, path)? })
    }
    /// llama.cpp's GBNF `text` over this model's vocabulary, starting at rule `root`.
    pub fn gbnf(&self, text: &str, root: &str) -> Result<Grammar> {
        let constraint = packlm::Constraint::gbnf(&self.model, text, root)?;
        Ok(Grammar { constraint, n_vocab: self.n_vocab() })
    }
}

/// A GBNF grammar and the tokens it has taken (packlm's `Constraint`), with the vocabulary
/// calls a grammar sampler makes. It keeps its model alive; a clone is independent.
#[derive(Clone)]
pub struct Grammar {
    constraint: packlm::Constraint,
    n_vocab: usize,
}

impl Grammar {
    /// Entries of a logits row (what `mask` takes).
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }
    /// Sets every entry of `row` (at least `n_vocab` long) whose token may not come next to
    /// -infinity; a stop token may come exactly where the grammar may end.
    pub fn mask(&mut self, row: &mut [f32]) -> Result<()> {
        self.constraint.mask(row)
    }
    /// Takes `token`; refused, with nothing changed, when the grammar does not allow it.
    pub fn accept(&mut self, token: u32) -> Result<()> {
        self.constraint.accept(token)
    }
    /// Whether the text so far is a whole match (a stop token may come now).
    pub fn can_end(&mut self) -> Result<bool> {
        self.constraint.can_end()
    }
    pub fn is_stop(&self, token: u32) -> bool {
        self.constraint.model().is_stop(token)
    }
    /// The token's bytes, a control token's text included (llama.cpp's `token_to_piece`).
    pub fn piece(&self, token: u32) -> Result<Vec<u8>> {
        self.constraint.model().token_bytes(token, true)
    }
    /// Tokens whose bytes joined are `bytes`: the text's own tokens, and where `bytes` ends
    /// inside a character, one token per byte of that end (a byte-level vocabulary has one
    /// for each). None when some byte has no token of its own.
    pub fn tokens_of(&self, bytes: &[u8]) -> Result<Option<Vec<u32>>> {
        let text_len = match std::str::from_utf8(bytes) {
            Ok(_) => bytes.len(),
            Err(e) => e.valid_up_to(),
        };
        let model = self.constraint.model();
        let text = std::str::from_utf8(&bytes[..text_len]).unwrap_or_default();
        let mut ids = model.tokenize(text, false, false)?;
        for &b in &bytes[text_len..] {
            let one = (0..self.n_vocab as u32).find(|&t| model.token_kind(t) != Some(TokenKind::Control) && model.token_bytes(t, false).is_ok_and(|w| w == [b]));
            match one {
                Some(t) => ids.push(t),
                None => return Ok(None),
            }
        }
        Ok(Some(ids))
    }
}

/// What the DRY and infill samplers ask of the vocabulary. llama.cpp's keep a `llama_vocab*`
/// the client must keep alive; this holds the model itself. A clone shares it.
#[derive(Clone)]
pub struct Vocab {
    model: Model,
    n_vocab: usize,
    /// The end-of-generation tokens (`Engine::is_eog`), ascending.
    eog: Vec<u32>,
    eot: Option<u32>,
    eos: Option<u32>,
}

impl Vocab {
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }
    pub fn eot(&self) -> Option<u32> {
        self.eot
    }
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }
    /// The token's bytes, a control token's text only when `special` (llama.cpp's
    /// `token_to_piece` with no lstrip); empty outside the vocabulary.
    pub fn piece(&self, id: u32, special: bool) -> Vec<u8> {
        self.model.token_bytes(id, special).unwrap_or_default()
    }
    /// `text` tokenized as plain text: no BOS, special tokens' texts not parsed.
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        self.model.tokenize(text, false, false)
    }
}

/// A LoRA adapter opened for one model (packlm's `Adapter`: applied at run time to the rows
/// of the sessions it is set on). A clone shares it.
#[derive(Clone)]
pub struct Lora {
    adapter: packlm::Adapter,
}

impl Lora {
    /// The GGUF's key/values (no arrays) as text, in file order; a PEFT folder's config
    /// scalars.
    pub fn metadata(&self) -> &[(String, String)] {
        self.adapter.metadata()
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

/// Whether a backend could not be made or does not take the model (packlm's
/// PACKLM_ERR_BACKEND_UNAVAILABLE).
pub fn is_backend_unavailable(e: &Error) -> bool {
    e.status == packlm::Status::ErrBackendUnavailable
}

/// Whether a pass was stopped by the abort flag (llama.cpp's 2).
pub fn is_aborted(e: &Error) -> bool {
    e.status == packlm::Status::ErrAborted
}

/// Whether a pass computed a non-finite logit (llama.cpp's "compute failed", -3).
pub fn is_non_finite(e: &Error) -> bool {
    e.status == packlm::Status::ErrNonFinite
}

fn want(rows: Rows) -> Want {
    match rows {
        Rows::None => Want::None,
        Rows::Last => Want::Last,
        Rows::All => Want::All,
    }
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
    /// Stops this sequence's pass from another thread (`Session::abort_handle`).
    pub fn abort_handle(&self) -> packlm::AbortHandle {
        self.session.abort_handle()
    }
    /// Steps `tokens` in one pass; returns the logits of the rows `rows` asks for.
    pub fn step(&mut self, tokens: &[u32], rows: Rows) -> Result<Vec<f32>> {
        self.session.step_batch(tokens, want(rows))
    }
    /// Steps several sequences' tokens in one pass over the weights (`Session::step_many`):
    /// each gets the logits its `rows` ask for, those of stepping it alone; all or nothing.
    pub fn step_many(items: &mut [(&mut Sequence, &[u32], Rows)]) -> Result<Vec<Vec<f32>>> {
        let mut steps: Vec<StepItem> = items.iter_mut().map(|(s, tokens, rows)| StepItem { session: &mut s.session, tokens, want: want(*rows) }).collect();
        Session::step_many(&mut steps)
    }
    pub fn truncate(&mut self, n: usize) -> Result<()> {
        self.session.truncate(n)
    }
    /// A sequence with this one's exact state, its KV shared in pages (`Session::fork`).
    pub fn fork(&self) -> Sequence {
        Sequence { session: self.session.fork() }
    }
    pub fn snapshot(&self) -> Vec<u8> {
        self.session.snapshot()
    }
    pub fn snapshot_len(&self) -> usize {
        self.session.snapshot_len()
    }
    /// What `snapshot_len` is when the session holds `positions` positions; None when that
    /// overflows.
    pub fn snapshot_len_at(&self, positions: usize) -> Option<usize> {
        self.session.snapshot_len_at(positions)
    }
    pub fn restore(&mut self, bytes: &[u8]) -> Result<()> {
        self.session.restore(bytes)
    }
    /// The tokens of the positions held, in order.
    pub fn tokens(&self) -> &[u32] {
        self.session.tokens()
    }
    /// Applies `adapters` (each with its scale, in order; empty: the base model) to this
    /// sequence's passes; refused unless it holds no positions.
    pub fn set_adapters(&mut self, adapters: &[(Lora, f32)]) -> Result<()> {
        let list: Vec<(packlm::Adapter, f32)> = adapters.iter().map(|(l, s)| (l.adapter.clone(), *s)).collect();
        self.session.set_adapters(&list)
    }
    /// Adds `control` (None: no vector) to the end of each layer of its range in this
    /// sequence's passes; refused unless it holds no positions. Its adapters stay.
    pub fn set_control_vector(&mut self, control: Option<&packlm::ControlVector>) -> Result<()> {
        self.session.set_control_vector(control)
    }
    /// The control vector its passes add, if any.
    pub fn control_vector(&self) -> Option<packlm::ControlVector> {
        self.session.control_vector()
    }
    /// The vectors of `texts` under this sequence's adapters, not normalized: one row per text
    /// when pooled, one per token of each text in order with `Pooling::None` (packlm's
    /// `Session::embed`); the positions held are untouched.
    pub fn embed(&mut self, texts: &[&[u32]], pooling: Pooling) -> Result<Vec<f32>> {
        let e = self.session.embed(texts, &packlm::EmbedOptions { pooling: Some(pooling), normalize: Some(false) })?;
        Ok(e.values)
    }
}
