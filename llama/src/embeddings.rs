//! Embeddings: `llama_set_embeddings`, `llama_get_embeddings`, `_ith`, `_seq` and the pooling
//! a context resolves (`llama_pooling_type`, the `pooling_type` and `embeddings` params).
//!
//! With embeddings on, `llama_decode` makes every token of the batch an output (llama.cpp's
//! rule: its logits flags are overridden) and gives, per sequence of the batch, what the
//! context's pooling says: one vector per token with `LLAMA_POOLING_TYPE_NONE`
//! (`llama_get_embeddings`, `_ith`), else one pooled vector (`llama_get_embeddings_seq`).
//! They are packlm's `Session::embed` vectors under the context's adapters, not normalized
//! (llama.cpp normalizes in its examples, not in the library): the final hidden states
//! (after the final norm), pooled mean / first / last, through the pack's Dense layers.
//!
//! A sequence's vectors cover the tokens it holds when the batch ends:
//! - A sequence that held no positions before the batch (what `Llama.embed`, llama.cpp's
//!   embedding example and its server do: clear the memory, then decode each text whole) is
//!   embedded in the decode itself, one pass for all such sequences: exactly packlm's
//!   `Session::embed` of the batch's tokens.
//! - A sequence that continues (it held positions before the batch) gets, as in llama.cpp,
//!   the vectors of the batch's tokens attending to everything it holds, pooled over the
//!   batch's tokens (llama.cpp pools over its ubatch's; the same when n_ubatch covers the
//!   batch). packlm computes them over the sequence's whole token list, so they are computed
//!   when first read, not in the decode: a client that decodes with embeddings on and never
//!   reads them (generating with `Llama(embedding=True)`) pays nothing for each step. A pack
//!   with Dense layers has no pooled vector of a continuation (refused when read, logged).
//! - A model with bidirectional attention (an embedding model such as EmbeddingGemma) takes
//!   no steps: its sequences hold no positions, so each decode embeds its batch's sequences
//!   whole (llama.cpp too needs a non-causal sequence in one batch), and gives no logits.
//!
//! Reading is refused (NULL, logged) when the last decode computed no embeddings, for a batch
//! index or sequence it did not have, for per-token vectors of a pooled context and pooled
//! vectors of a `NONE` one (llama.h: NULL then). The vectors stay readable until the next
//! decode or a call that drops the context's outputs (`llama_memory_clear`, state restores).

use std::ptr;

use crate::adapter::{Engine, Lora, Pooling, Result, Sequence};
use crate::context::{hold, LlamaContext, Plan, State};
use crate::log::{error, guard};
use crate::model::LlamaModel;

/// The pooling a context computes and the number `llama_pooling_type` reports, from the
/// params' `pooling_type`: LLAMA_POOLING_TYPE_UNSPECIFIED (-1) takes the model's (a GGUF's
/// `<arch>.pooling_type`, an HF folder's sentence-transformers modules; none when it declares
/// none, as llama.cpp). A pooling packlm does not compute (RANK, 4: a reranker's head) is the
/// reason it gives instead; the context is refused when it asks for embeddings.
pub(crate) fn context_pooling(m: &LlamaModel, pooling_type: i32) -> (std::result::Result<Pooling, String>, i32) {
    if pooling_type == -1 {
        return match m.engine.default_pooling() {
            Ok(p) => (Ok(p), p as i32),
            Err(e) => {
                let declared = m.meta_value(&format!("{}.pooling_type", m.arch())).and_then(|v| v.parse().ok()).unwrap_or(-1);
                (Err(format!("the model's pooling: {e}")), declared)
            }
        };
    }
    match Pooling::from_code(pooling_type as i64) {
        Some(p) => (Ok(p), pooling_type),
        None => (Err(format!("pooling_type {pooling_type} is not computed: NONE (0), MEAN (1), CLS (2) and LAST (3) are")), pooling_type),
    }
}

/// A sequence of a decode whose vectors are computed when first read (see the module's doc).
struct Deferred {
    seq: usize,
    /// The tokens it held before the batch, then the batch's.
    tokens: Vec<u32>,
    /// Where the batch's tokens start in `tokens`.
    start: usize,
    /// The batch's output rows of its tokens, in order (pooling none).
    rows: Vec<usize>,
}

/// The last decode's embeddings.
#[derive(Default)]
pub struct Output {
    /// Whether the last decode computed embeddings.
    active: bool,
    pooling: Option<Pooling>,
    /// Values per vector.
    dim: usize,
    /// Pooling none: one row of `dim` values per output row (every batch index), in batch
    /// order.
    rows: Vec<f32>,
    /// Pooled: each sequence's vector by seq_id; empty for a sequence not in the batch.
    by_seq: Vec<Vec<f32>>,
    /// Continuations, computed at the first read.
    deferred: Vec<Deferred>,
    /// The adapters (and scales) the decode ran under: the deferred ones are computed under
    /// them, whatever the context's adapters are by then.
    adapters: Vec<(Lora, f32)>,
    /// The control vector the decode ran under (cvec.rs), likewise.
    control: Option<packlm::ControlVector>,
}

impl Output {
    /// Computes the deferred sequences' vectors: one `Session::embed` (pooling none) over each
    /// one's whole token list on a scratch sequence with the decode's adapters, the batch's
    /// rows taken, pooled here as packlm pools (its mean: an f32 sum in row order, divided).
    fn resolve(&mut self, engine: &Engine) -> std::result::Result<(), String> {
        if self.deferred.is_empty() {
            return Ok(());
        }
        let pooling = self.pooling.unwrap_or(Pooling::None);
        let hidden = engine.n_embd();
        if pooling != Pooling::None && self.dim != hidden {
            return Err(format!(
                "a pooled vector of a sequence that held positions before the batch is not computed for a pack with Dense layers ({hidden} -> {}): clear the sequence and decode it whole",
                self.dim
            ));
        }
        let texts: Vec<&[u32]> = self.deferred.iter().map(|d| d.tokens.as_slice()).collect();
        let all = scratch_embed(engine, &self.adapters, self.control.as_ref(), &texts).map_err(|e| e.to_string())?;
        let mut at = 0;
        for d in &self.deferred {
            let own = &all[(at + d.start) * hidden..(at + d.tokens.len()) * hidden];
            at += d.tokens.len();
            match pooling {
                Pooling::None => {
                    for (j, &r) in d.rows.iter().enumerate() {
                        self.rows[r * hidden..(r + 1) * hidden].copy_from_slice(&own[j * hidden..(j + 1) * hidden]);
                    }
                }
                Pooling::Mean => self.by_seq[d.seq] = mean(own, hidden),
                Pooling::Cls => self.by_seq[d.seq] = own[..hidden].to_vec(),
                Pooling::Last => self.by_seq[d.seq] = own[own.len() - hidden..].to_vec(),
            }
        }
        self.deferred.clear();
        Ok(())
    }
}

/// `Session::embed` with pooling none of `texts` on a new sequence under `adapters` and
/// `control` (the context's control vector, cvec.rs).
fn scratch_embed(engine: &Engine, adapters: &[(Lora, f32)], control: Option<&packlm::ControlVector>, texts: &[&[u32]]) -> Result<Vec<f32>> {
    let mut s = Sequence::new(engine, 0)?;
    s.set_adapters(adapters)?;
    s.set_control_vector(control)?;
    s.embed(texts, Pooling::None)
}

/// The mean of `rows` (each `width` values), as packlm's `engine/embed.rs` computes it.
fn mean(rows: &[f32], width: usize) -> Vec<f32> {
    let n = rows.len() / width;
    let mut s = vec![0.0f32; width];
    for row in rows.chunks_exact(width) {
        for (a, &v) in s.iter_mut().zip(row) {
            *a += v;
        }
    }
    s.iter_mut().for_each(|a| *a /= n as f32);
    s
}

/// The embedding part of one `llama_decode`, planned before its pass.
pub(crate) struct EmbeddingPass {
    pooling: Pooling,
    dim: usize,
    /// The plan's items whose sequence held no positions: embedded in the decode.
    fresh: Vec<usize>,
    /// The others, computed when first read.
    deferred: Vec<Deferred>,
    adapters: Vec<(Lora, f32)>,
    control: Option<packlm::ControlVector>,
}

impl EmbeddingPass {
    pub(crate) fn new(c: &State, engine: &Engine, pooling: Pooling, plan: &Plan) -> EmbeddingPass {
        let mut fresh = Vec::new();
        let mut deferred = Vec::new();
        for (k, it) in plan.items.iter().enumerate() {
            let held = c.seqs[it.seq].tokens();
            if held.is_empty() {
                fresh.push(k);
                continue;
            }
            let rows = plan.wanted.iter().enumerate().filter(|(_, w)| w.0 == k).map(|(r, _)| r).collect();
            let tokens = [held, &it.tokens].concat();
            deferred.push(Deferred { seq: it.seq, tokens, start: held.len(), rows });
        }
        let adapters = c.loras.iter().map(|e| (e.lora.clone(), e.scale)).collect();
        // Every sequence of a context holds the context's control vector (cvec.rs).
        let control = c.seqs.first().and_then(Sequence::control_vector);
        EmbeddingPass { pooling, dim: engine.embedding_dim(pooling), fresh, deferred, adapters, control }
    }

    /// The fresh items' vectors, one pass for all of them (on the first one's sequence: every
    /// sequence of a context runs under its adapters, and embedding changes none): per fresh
    /// item, its tokens' rows (pooling none) or its pooled vector.
    pub(crate) fn run(&self, seqs: &mut [Sequence], plan: &Plan) -> Result<Vec<Vec<f32>>> {
        let Some(&first) = self.fresh.first() else { return Ok(Vec::new()) };
        let texts: Vec<&[u32]> = self.fresh.iter().map(|&k| plan.items[k].tokens.as_slice()).collect();
        let all = seqs[plan.items[first].seq].embed(&texts, self.pooling)?;
        let mut at = 0;
        Ok(texts
            .iter()
            .map(|t| {
                let n = if self.pooling == Pooling::None { t.len() * self.dim } else { self.dim };
                at += n;
                all[at - n..at].to_vec()
            })
            .collect())
    }

    /// The decode's `Output` from `run`'s vectors, for a context of `n_seqs` sequences.
    pub(crate) fn finish(self, vectors: Vec<Vec<f32>>, plan: &Plan, n_seqs: usize) -> Output {
        let dim = self.dim;
        let mut rows = Vec::new();
        let mut by_seq = vec![Vec::new(); n_seqs];
        if self.pooling == Pooling::None {
            rows = vec![0.0; plan.wanted.len() * dim];
            for (r, &(k, local)) in plan.wanted.iter().enumerate() {
                if let Some(f) = self.fresh.iter().position(|&x| x == k) {
                    rows[r * dim..(r + 1) * dim].copy_from_slice(&vectors[f][local * dim..(local + 1) * dim]);
                }
            }
        } else {
            for (&k, v) in self.fresh.iter().zip(vectors) {
                by_seq[plan.items[k].seq] = v;
            }
        }
        Output { active: true, pooling: Some(self.pooling), dim, rows, by_seq, deferred: self.deferred, adapters: self.adapters, control: self.control }
    }
}

/// The context's state with the last decode's embeddings computed; None (logged) when it
/// computed none or they cannot be computed.
unsafe fn resolved<'a>(f: &str, ctx: *mut LlamaContext) -> Option<crate::context::Held<'a>> {
    let mut c = hold(f, ctx)?;
    if !c.embd.active {
        error(f, "the last llama_decode computed no embeddings (turn them on with llama_set_embeddings or the context's embeddings param)");
        return None;
    }
    let engine = &(*(*ctx).model).engine;
    let pending: usize = c.embd.deferred.iter().map(|d| d.tokens.len()).sum();
    if pending > 0 {
        (*ctx).settings.apply_threads(f, engine, pending);
    }
    if let Err(why) = c.embd.resolve(engine) {
        error(f, &why);
        return None;
    }
    Some(c)
}

/// Whether the last decode's pooling is `pooling none` (per-token vectors); false, logged,
/// when it pooled.
fn per_token(f: &str, out: &Output) -> bool {
    let ok = out.pooling == Some(Pooling::None);
    if !ok {
        error(f, "the context pools its embeddings (llama_pooling_type is not LLAMA_POOLING_TYPE_NONE): read each sequence's with llama_get_embeddings_seq");
    }
    ok
}

/// Turns embeddings on or off for the next decodes (llama.cpp: "whether the context outputs
/// embeddings"). On is refused, logged, when the context's pooling is one packlm does not
/// compute; nothing changes then.
#[no_mangle]
pub unsafe extern "C" fn llama_set_embeddings(ctx: *mut LlamaContext, embeddings: bool) {
    const F: &str = "llama_set_embeddings";
    guard(F, (), || {
        let Some(mut c) = hold(F, ctx) else { return };
        if let (true, Err(why)) = (embeddings, &(*ctx).pooling) {
            error(F, &format!("embeddings stay off: {why}"));
            return;
        }
        c.embeddings = embeddings;
    })
}

/// Every output row's vector of the last decode (rows x n_embd, in batch order; with
/// embeddings on every token is an output). NULL, logged, for a pooled context.
#[no_mangle]
pub unsafe extern "C" fn llama_get_embeddings(ctx: *mut LlamaContext) -> *mut f32 {
    const F: &str = "llama_get_embeddings";
    guard(F, ptr::null_mut(), || {
        let Some(mut c) = resolved(F, ctx) else { return ptr::null_mut() };
        if !per_token(F, &c.embd) {
            return ptr::null_mut();
        }
        c.embd.rows.as_mut_ptr()
    })
}

/// The vector of batch index `i` of the last decode (negative: counted back from the last
/// output). NULL, logged, for an index the batch did not have, or a pooled context.
#[no_mangle]
pub unsafe extern "C" fn llama_get_embeddings_ith(ctx: *mut LlamaContext, i: i32) -> *mut f32 {
    const F: &str = "llama_get_embeddings_ith";
    guard(F, ptr::null_mut(), || {
        let Some(mut c) = resolved(F, ctx) else { return ptr::null_mut() };
        if !per_token(F, &c.embd) {
            return ptr::null_mut();
        }
        let dim = c.embd.dim;
        let n_rows = c.embd.rows.len() / dim.max(1);
        match c.output_row(i, n_rows) {
            Some(r) => c.embd.rows[r * dim..].as_mut_ptr(),
            None => {
                error(F, &format!("invalid embeddings id {i}: the last batch had {n_rows} output rows"));
                ptr::null_mut()
            }
        }
    })
}

/// The pooled vector of sequence `seq_id` from the last decode (the pack's embedding width).
/// NULL, logged, when the context does not pool (LLAMA_POOLING_TYPE_NONE) or the sequence was
/// not in the batch.
#[no_mangle]
pub unsafe extern "C" fn llama_get_embeddings_seq(ctx: *mut LlamaContext, seq_id: i32) -> *mut f32 {
    const F: &str = "llama_get_embeddings_seq";
    guard(F, ptr::null_mut(), || {
        let Some(mut c) = resolved(F, ctx) else { return ptr::null_mut() };
        if c.embd.pooling == Some(Pooling::None) {
            error(F, "the context does not pool its embeddings (LLAMA_POOLING_TYPE_NONE): read each token's with llama_get_embeddings_ith");
            return ptr::null_mut();
        }
        match usize::try_from(seq_id).ok().and_then(|s| c.embd.by_seq.get_mut(s)).filter(|v| !v.is_empty()) {
            Some(v) => v.as_mut_ptr(),
            None => {
                error(F, &format!("sequence {seq_id} was not in the last batch"));
                ptr::null_mut()
            }
        }
    })
}
