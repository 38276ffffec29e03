//! Contexts: `n_seq_max` sequences over a model, each a packlm session; `llama_decode` (one
//! pass over the weights for every sequence in the batch), logits, the memory calls (rollback,
//! copy, keep) and state bytes. A `llama_memory_t` is its context's pointer. The embeddings a
//! decode computes are in `embeddings`, the context's LoRA adapters in `lora`.

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::ops::{Deref, DerefMut};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::abi::{Batch, ContextParams, Pos, SeqId, Token, TokenData};
use crate::adapter::{self, Pooling, Rows, Sequence};
use crate::backend_sampling::{self, Sampling, Start};
use crate::context_perf::Perf;
use crate::context_settings::{run_abortable, Settings};
use crate::embeddings::{self, EmbeddingPass};
use crate::log::{error, guard};
use crate::model::{model_ref, LlamaModel};

/// `struct llama_context`. Safe to move to another thread; used by one thread at a time:
/// every call that reads or writes its sequence or logits takes its in-use flag (`hold`), so a
/// second, concurrent call fails (a log line and its failure value) instead of racing, as
/// packlm's sessions do.
pub struct LlamaContext {
    pub(crate) model: *const LlamaModel,
    n_ctx: u32,
    /// Positions each sequence may hold (llama.cpp's n_ctx_seq).
    n_ctx_seq: u32,
    n_batch: u32,
    n_ubatch: u32,
    /// Its sequences, seq_id 0 to n_seq_max - 1 (never changes).
    n_seq_max: u32,
    /// Most output rows a decode may give a sequence with a sampler chain attached
    /// (`backend_sampling`).
    n_outputs_max_per_seq: u32,
    /// The pooling of its embeddings (the params' `pooling_type`, or the model's when
    /// unspecified); the reason when packlm does not compute it (embeddings are then refused).
    pub(crate) pooling: Result<Pooling, String>,
    /// What `llama_pooling_type` reports: the pooling's number (a declared one packlm does not
    /// compute included).
    pub(crate) pooling_code: i32,
    in_use: AtomicBool,
    pub settings: Settings,
    /// Reached only through `Held`, which holds `in_use`.
    state: UnsafeCell<State>,
}

/// Most sequences of a context (llama.cpp's LLAMA_MAX_SEQ).
pub const MAX_SEQ: u32 = 256;

/// What a context's calls change: its sequences, its adapters, whether it computes embeddings,
/// and the last decode's logits and embeddings.
pub struct State {
    n_vocab: usize,
    /// Sequence i is seq_id i. Every sequence runs under `loras` (see `lora::set`).
    pub(crate) seqs: Vec<Sequence>,
    /// Logits of the last decode's output rows (rows x n_vocab), in batch order.
    outputs: Vec<f32>,
    /// For each index of the last decoded batch, its row in `outputs`, or -1.
    output_of: Vec<i32>,
    /// `llama_set_embeddings` / the `embeddings` param: whether `llama_decode` computes them.
    pub(crate) embeddings: bool,
    /// The last decode's embeddings.
    pub(crate) embd: embeddings::Output,
    /// The context's LoRA adapters and scales (`llama_set_adapters_lora`).
    pub(crate) loras: Vec<crate::lora::Entry>,
    /// The sampler chains attached to its sequences and the last decode's results.
    pub(crate) sampling: Sampling,
    /// `llama_perf_context`'s counts.
    pub(crate) perf: Perf,
}

impl State {
    fn n_outputs(&self) -> usize {
        self.outputs.len() / self.n_vocab.max(1)
    }

    /// The logits row for batch index `i` (negative: counted back from the last output).
    pub fn logits_ith(&self, f: &str, i: i32) -> Option<&[f32]> {
        match self.output_row(i, self.n_outputs()) {
            Some(r) => Some(&self.outputs[r * self.n_vocab..(r + 1) * self.n_vocab]),
            None => {
                error(f, &format!("no logits for index {i}: the last batch asked for {} output rows", self.n_outputs()));
                None
            }
        }
    }

    fn clear_outputs(&mut self) {
        self.outputs.clear();
        self.output_of.clear();
        self.sampling.clear_rows();
        self.embd = embeddings::Output::default();
    }

    /// Row `i` of the last decode's outputs (negative: counted back from the last), for a
    /// batch of `n_outputs` output rows.
    pub(crate) fn output_row(&self, i: i32, n_outputs: usize) -> Option<usize> {
        let row = if i < 0 {
            let back = usize::try_from(-(i as i64)).ok()?;
            n_outputs.checked_sub(back)
        } else {
            self.output_of.get(i as usize).and_then(|&r| usize::try_from(r).ok())
        };
        row.filter(|&r| r < n_outputs)
    }

    /// The positions sequence `seq_id` holds; None for a seq_id the context lacks.
    fn n_past_of(&self, seq_id: SeqId) -> Option<usize> {
        usize::try_from(seq_id).ok().and_then(|i| self.seqs.get(i)).map(Sequence::n_past)
    }

    /// Whether the context has sequence `seq_id`; false with a log line naming the range.
    fn has_seq(&self, f: &str, seq_id: SeqId) -> bool {
        let ok = self.n_past_of(seq_id).is_some();
        if !ok {
            error(f, &format!("seq_id {seq_id}: this context has sequences 0 to {}", self.seqs.len() - 1));
        }
        ok
    }
}

/// A context's state, held exclusively until dropped (the flag is lowered on drop, also when a
/// panic unwinds through the call).
pub struct Held<'a> {
    ctx: &'a LlamaContext,
}

impl Deref for Held<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        // SAFETY: this guard holds the in-use flag, so no other reference to the state exists.
        unsafe { &*self.ctx.state.get() }
    }
}

impl DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut State {
        // SAFETY: as deref; `&mut self` makes this the only reference made through the guard.
        unsafe { &mut *self.ctx.state.get() }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.ctx.in_use.store(false, Ordering::Release);
    }
}

/// The facts of a context that never change after it is made (no flag needed).
pub unsafe fn ctx_ref<'a>(f: &str, p: *const LlamaContext) -> Option<&'a LlamaContext> {
    if p.is_null() {
        error(f, "context is NULL");
        return None;
    }
    Some(&*p)
}

/// Takes the context's in-use flag; None (and a log line) for NULL, or when a call on another
/// thread holds it: nothing is done then.
pub unsafe fn hold<'a>(f: &str, p: *const LlamaContext) -> Option<Held<'a>> {
    let ctx = ctx_ref(f, p)?;
    if ctx.in_use.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        error(f, "the context is in use by a call on another thread (a context is used by one thread at a time); nothing was done");
        return None;
    }
    Some(Held { ctx })
}

#[no_mangle]
pub extern "C" fn llama_context_default_params() -> ContextParams {
    // llama.cpp's llama_context_default_params.
    ContextParams {
        n_ctx: 512,
        n_batch: 2048,
        n_ubatch: 512,
        n_seq_max: 1,
        n_rs_seq: 0,
        n_outputs_max: 0,
        n_outputs_max_per_seq: 1,
        n_threads: 4,
        n_threads_batch: 4,
        ctx_type: 0,
        rope_scaling_type: -1,
        pooling_type: -1,
        attention_type: -1,
        flash_attn_type: -1,
        rope_freq_base: 0.0,
        rope_freq_scale: 0.0,
        yarn_ext_factor: -1.0,
        yarn_attn_factor: -1.0,
        yarn_beta_fast: -1.0,
        yarn_beta_slow: -1.0,
        yarn_orig_ctx: 0,
        defrag_thold: -1.0,
        cb_eval: ptr::null_mut(),
        cb_eval_user_data: ptr::null_mut(),
        type_k: 1,
        type_v: 1,
        abort_callback: ptr::null_mut(),
        abort_callback_data: ptr::null_mut(),
        embeddings: false,
        offload_kqv: true,
        no_perf: true,
        op_offload: true,
        swa_full: true,
        kv_unified: false,
        samplers: ptr::null_mut(),
        n_samplers: 0,
        ctx_other: ptr::null_mut(),
    }
}

/// A context of `n_ctx` positions (0: the model's) for `n_seq_max` sequences. NULL, logged,
/// when a parameter asks for what packlm does not do (embeddings with a pooling it does not
/// compute, attention other than the model's, rope changes, a longer context than the
/// model's, `ctx_other`). The params' `samplers` are attached as `llama_set_sampler` does.
#[no_mangle]
pub unsafe extern "C" fn llama_init_from_model(model: *mut LlamaModel, params: ContextParams) -> *mut LlamaContext {
    const F: &str = "llama_init_from_model";
    guard(F, ptr::null_mut(), || {
        let Some(m) = model_ref(F, model) else { return ptr::null_mut() };
        let refuse = |why: String| {
            error(F, &why);
            ptr::null_mut()
        };
        let (pooling, pooling_code) = embeddings::context_pooling(m, params.pooling_type);
        if let (true, Err(why)) = (params.embeddings, &pooling) {
            return refuse(format!("embeddings: {why}"));
        }
        // The model's attention is the only one packlm computes: causal for a decoder,
        // bidirectional for an embedding model that declares it.
        match (params.attention_type, m.engine.is_causal()) {
            (1, true) => return refuse("non-causal attention (LLAMA_ATTENTION_TYPE_NON_CAUSAL) is not supported for a causal model".into()),
            (0, false) => return refuse("causal attention (LLAMA_ATTENTION_TYPE_CAUSAL) is not supported for this model, whose attention is bidirectional".into()),
            _ => {}
        }
        if params.n_seq_max > MAX_SEQ {
            return refuse(format!("n_seq_max {} is more than the {MAX_SEQ} sequences a context may have", params.n_seq_max));
        }
        let n_seq = params.n_seq_max.max(1) as usize;
        if params.rope_freq_base != 0.0 || params.rope_freq_scale != 0.0 || params.rope_scaling_type > 0 {
            return refuse("rope overrides (rope_freq_base, rope_freq_scale, rope_scaling_type) are not supported".into());
        }
        if !params.ctx_other.is_null() {
            return refuse("ctx_other is not supported".into());
        }
        let first = match Sequence::new(&m.engine, params.n_ctx as usize) {
            Ok(s) => s,
            Err(e) => return refuse(e.to_string()),
        };
        let n_ctx = first.n_ctx() as u32;
        // As llama.cpp: the sequences share n_ctx (each n_ctx / n_seq_max positions), or with
        // kv_unified each may use all of it (packlm's sequences hold their own caches, so then
        // each may hold n_ctx positions).
        let per_seq = if params.kv_unified || n_seq == 1 { n_ctx as usize } else { (n_ctx as usize / n_seq).max(1) };
        let mut seqs = Vec::with_capacity(n_seq);
        if per_seq == n_ctx as usize {
            seqs.push(first);
        }
        while seqs.len() < n_seq {
            match Sequence::new(&m.engine, per_seq) {
                Ok(s) => seqs.push(s),
                Err(e) => return refuse(e.to_string()),
            }
        }
        // llama-context.cpp: with causal attention a batch is at most the context
        // (min(n_ctx, n_batch)), and a micro-batch at most the batch (n_ubatch 0: n_batch).
        // n_batch 0 asks for n_ctx here (llama.cpp would keep 0 and refuse every decode).
        let asked = if params.n_batch == 0 { n_ctx } else { params.n_batch };
        let n_batch = if m.engine.is_causal() { asked.min(n_ctx) } else { asked };
        let n_ubatch = if params.n_ubatch == 0 { asked } else { params.n_ubatch };
        let n_vocab = m.engine.n_vocab();
        // llama.h: n_outputs_max_per_seq 0 is n_outputs_max, whose 0 is n_batch.
        let n_outputs_max = if params.n_outputs_max == 0 { n_batch } else { params.n_outputs_max };
        let n_outputs_max_per_seq = if params.n_outputs_max_per_seq == 0 { n_outputs_max } else { params.n_outputs_max_per_seq };
        let mut ctx = Box::new(LlamaContext {
            model,
            n_ctx,
            n_ctx_seq: per_seq as u32,
            n_batch,
            n_ubatch: n_ubatch.min(n_batch).max(1),
            n_seq_max: n_seq as u32,
            n_outputs_max_per_seq,
            pooling,
            pooling_code,
            in_use: AtomicBool::new(false),
            settings: Settings::new(params.n_threads, params.n_threads_batch, params.abort_callback, params.abort_callback_data),
            state: UnsafeCell::new(State {
                n_vocab,
                seqs,
                outputs: Vec::new(),
                output_of: Vec::new(),
                embeddings: params.embeddings,
                embd: embeddings::Output::default(),
                loras: Vec::new(),
                sampling: Sampling::new(n_seq, n_vocab),
                perf: Perf::new(params.no_perf, m.t_start_us, m.t_load_us),
            }),
        });
        if let Err(why) = backend_sampling::set_from_params(F, ctx.state.get_mut(), params.samplers, params.n_samplers) {
            return refuse(why);
        }
        Box::into_raw(ctx)
    })
}

#[no_mangle]
pub unsafe extern "C" fn llama_new_context_with_model(model: *mut LlamaModel, params: ContextParams) -> *mut LlamaContext {
    llama_init_from_model(model, params)
}

/// Frees a context; NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn llama_free(ctx: *mut LlamaContext) {
    guard("llama_free", (), || {
        if !ctx.is_null() {
            drop(Box::from_raw(ctx));
        }
    })
}

macro_rules! ctx_fact {
    ($name:ident, $ty:ty, $fail:expr, |$c:ident| $body:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(ctx: *const LlamaContext) -> $ty {
            guard(stringify!($name), $fail, || match ctx_ref(stringify!($name), ctx) {
                Some($c) => $body,
                None => $fail,
            })
        }
    };
}

ctx_fact!(llama_n_ctx, u32, 0, |c| c.n_ctx);
ctx_fact!(llama_n_ctx_seq, u32, 0, |c| c.n_ctx_seq);
// llama.cpp clamps n_rs_seq to 0 for an architecture without recurrent-state rollback,
// which is every one packlm runs.
ctx_fact!(llama_n_rs_seq, u32, 0, |_c| 0);
ctx_fact!(llama_n_batch, u32, 0, |c| c.n_batch);
ctx_fact!(llama_n_ubatch, u32, 0, |c| c.n_ubatch);
ctx_fact!(llama_n_seq_max, u32, 0, |c| c.n_seq_max);
ctx_fact!(llama_get_model, *const LlamaModel, ptr::null(), |c| c.model);
// The params' pooling_type, or the model's when that was LLAMA_POOLING_TYPE_UNSPECIFIED.
ctx_fact!(llama_pooling_type, i32, -1, |c| c.pooling_code);
ctx_fact!(llama_get_memory, *mut c_void, ptr::null_mut(), |c| c as *const LlamaContext as *mut c_void);

#[no_mangle]
pub extern "C" fn llama_synchronize(_ctx: *mut LlamaContext) {}

/// `llama_attach_threadpool(ctx, threadpool, threadpool_batch)`: accepted and not kept. packlm
/// runs its passes on its own worker pool (the context's thread counts, `llama_set_n_threads`),
/// so a ggml threadpool is never used; llama.h makes the pool optional ("an auto threadpool gets
/// created in ggml if not passed explicitly"), and either way the results are the same.
#[no_mangle]
pub extern "C" fn llama_attach_threadpool(_ctx: *mut LlamaContext, _threadpool: *mut c_void, _threadpool_batch: *mut c_void) {}

/// `llama_detach_threadpool`: a no-op, since `llama_attach_threadpool` keeps nothing.
#[no_mangle]
pub extern "C" fn llama_detach_threadpool(_ctx: *mut LlamaContext) {}

/// Most bytes `llama_batch_init` allocates (its arrays and the sequence-id rows): 1 GiB, room
/// for a batch of over 16 million tokens, far beyond any context. Past it the batch is refused
/// instead of allocated: llama.cpp's own allocation of an absurd size aborts the process.
pub const MAX_BATCH_BYTES: usize = 1 << 30;

/// A batch of up to `n_tokens` tokens, each in up to `n_seq_max` sequences. `embd` inputs are
/// not supported: a batch made for them has no token array, and `llama_decode` refuses it.
/// Sizes whose arrays would pass `MAX_BATCH_BYTES`, or an allocation that fails, give the empty
/// batch (every pointer NULL, which `llama_batch_free` accepts) and a log line.
#[no_mangle]
pub extern "C" fn llama_batch_init(n_tokens: i32, embd: i32, n_seq_max: i32) -> Batch {
    const F: &str = "llama_batch_init";
    let empty = Batch {
        n_tokens: 0,
        token: ptr::null_mut(),
        embd: ptr::null_mut(),
        pos: ptr::null_mut(),
        n_seq_id: ptr::null_mut(),
        seq_id: ptr::null_mut(),
        logits: ptr::null_mut(),
    };
    guard(F, empty, || {
        let (Ok(n), Ok(seqs)) = (usize::try_from(n_tokens), usize::try_from(n_seq_max)) else {
            error(F, &format!("n_tokens {n_tokens} and n_seq_max {n_seq_max} must not be negative"));
            return empty;
        };
        if embd != 0 {
            error(F, "embedding inputs are not supported");
            return empty;
        }
        let seqs = seqs.max(1);
        match batch_bytes(n, seqs) {
            Some(bytes) if bytes <= MAX_BATCH_BYTES => {}
            _ => {
                error(F, &format!("n_tokens {n_tokens} x n_seq_max {n_seq_max} is more than the {MAX_BATCH_BYTES} bytes a batch may take"));
                return empty;
            }
        }
        match BatchArrays::new(n, seqs) {
            Some(arrays) => arrays.into_batch(),
            None => {
                error(F, &format!("could not allocate a batch of {n_tokens} tokens x {n_seq_max} sequences"));
                empty
            }
        }
    })
}

/// Bytes of a batch's arrays: token, pos, n_seq_id (4 each), logits (1), seq_id (a pointer per
/// token and the NULL after them), and each token's row of `seqs` ids with its length slot.
fn batch_bytes(n: usize, seqs: usize) -> Option<usize> {
    let row = seqs.checked_add(1)?.checked_mul(std::mem::size_of::<SeqId>())?;
    let per_token = (3 * 4 + 1 + std::mem::size_of::<*mut SeqId>()).checked_add(row)?;
    n.checked_mul(per_token)?.checked_add(std::mem::size_of::<*mut SeqId>())
}

/// A vector of `n` copies of `value`, or None when the allocation fails.
fn try_filled<T: Clone>(n: usize, value: T) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    v.resize(n, value);
    Some(v)
}

/// A batch's arrays while they are made: dropped whole if any allocation fails.
struct BatchArrays {
    token: Vec<i32>,
    pos: Vec<i32>,
    n_seq_id: Vec<i32>,
    logits: Vec<i8>,
    /// One row per token; each is `seqs + 1` ids, the first holding `seqs` (see `free_seq_row`).
    rows: Vec<Box<[SeqId]>>,
}

impl BatchArrays {
    fn new(n: usize, seqs: usize) -> Option<BatchArrays> {
        let mut rows = Vec::new();
        rows.try_reserve_exact(n).ok()?;
        for _ in 0..n {
            let mut row = try_filled(seqs + 1, 0 as SeqId)?;
            row[0] = seqs as SeqId;
            rows.push(row.into_boxed_slice());
        }
        Some(BatchArrays { token: try_filled(n, 0)?, pos: try_filled(n, 0)?, n_seq_id: try_filled(n, 0)?, logits: try_filled(n, 0)?, rows })
    }

    fn into_batch(self) -> Batch {
        let leak = |v: Vec<i32>| Box::into_raw(v.into_boxed_slice()) as *mut i32;
        // seq_id has one more entry, NULL, as llama.cpp's (llama_batch_free walks to it). Each
        // row's pointer is past its length slot, so that `llama_batch_free` (which gets only
        // the struct) frees exactly what was made.
        let mut seq_id: Vec<*mut SeqId> = Vec::with_capacity(self.rows.len() + 1);
        for row in self.rows {
            let base = Box::into_raw(row) as *mut SeqId;
            // SAFETY: the row has seqs + 1 >= 2 elements.
            seq_id.push(unsafe { base.add(1) });
        }
        seq_id.push(ptr::null_mut());
        Batch {
            n_tokens: 0,
            token: leak(self.token),
            embd: ptr::null_mut(),
            pos: leak(self.pos),
            n_seq_id: leak(self.n_seq_id),
            seq_id: Box::into_raw(seq_id.into_boxed_slice()) as *mut *mut SeqId,
            logits: Box::into_raw(self.logits.into_boxed_slice()) as *mut i8,
        }
    }
}

/// Frees a batch from `llama_batch_init`. The capacity is recovered from the NULL that ends
/// `seq_id`.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_free(batch: Batch) {
    guard("llama_batch_free", (), || {
        if batch.seq_id.is_null() {
            return;
        }
        let mut n = 0;
        while !(*batch.seq_id.add(n)).is_null() {
            n += 1;
        }
        let free = |p: *mut i32| {
            if !p.is_null() {
                drop(Box::from_raw(ptr::slice_from_raw_parts_mut(p, n)));
            }
        };
        free(batch.token);
        free(batch.pos);
        free(batch.n_seq_id);
        if !batch.logits.is_null() {
            drop(Box::from_raw(ptr::slice_from_raw_parts_mut(batch.logits, n)));
        }
        for i in 0..n {
            free_seq_row(*batch.seq_id.add(i));
        }
        drop(Box::from_raw(ptr::slice_from_raw_parts_mut(batch.seq_id, n + 1)));
    })
}

unsafe fn free_seq_row(row: *mut SeqId) {
    if row.is_null() {
        return;
    }
    let base = row.sub(1);
    let len = *base as usize;
    drop(Box::from_raw(ptr::slice_from_raw_parts_mut(base, len + 1)));
}

/// Runs a batch: each token in one sequence of the context (seq_id 0 when the batch names
/// none), at that sequence's next position; tokens of several sequences, interleaved in any
/// order, run as one pass over the weights (packlm's `Session::step_many`), and each
/// sequence's logits are those of decoding it alone, bit for bit (llama.cpp's batched logits
/// differ from one sequence's; packlm's do not). Returns 0; 1 when a sequence is full; 2 when
/// aborted; -1 for a batch this context cannot run (a token in several sequences or in one
/// the context lacks, other positions, embeddings, a token outside the vocabulary, more than
/// n_batch tokens); -2 when a call on another thread is using the context; -3 when the pass
/// computed a non-finite logit (packlm's PACKLM_ERR_NON_FINITE: the log line names the first
/// layer whose output was not finite). On any failure every sequence is unchanged.
///
/// With embeddings on (`llama_set_embeddings`), every token of the batch is an output, as in
/// llama.cpp, and the pass also gives the embeddings `embeddings.rs` describes; a model whose
/// attention is bidirectional takes no steps then (its sequences serve embeddings only and
/// hold no positions).
#[no_mangle]
pub unsafe extern "C" fn llama_decode(ctx: *mut LlamaContext, batch: Batch) -> i32 {
    const F: &str = "llama_decode";
    guard(F, -3, || {
        if ctx.is_null() {
            error(F, "context is NULL");
            return -1;
        }
        let Some(mut c) = hold(F, ctx) else { return -2 };
        let started = std::time::Instant::now();
        let engine = &(*(*ctx).model).engine;
        let pooling = match (c.embeddings, &(*ctx).pooling) {
            (false, _) => None,
            (true, Ok(p)) => Some(*p),
            (true, Err(why)) => {
                error(F, &format!("embeddings: {why}"));
                return -1;
            }
        };
        let plan = match plan_batch(&c, (*ctx).n_batch, &batch, pooling.is_some()) {
            Ok(p) => p,
            Err(why) => {
                error(F, &why);
                return -1;
            }
        };
        let outputs_by_seq: Vec<usize> = plan.wanted.iter().map(|&(item, _)| plan.items[item].seq).collect();
        if let Err(why) = c.sampling.check_outputs(&outputs_by_seq, (*ctx).n_outputs_max_per_seq) {
            error(F, &why);
            return -1;
        }
        let pass = pooling.map(|p| EmbeddingPass::new(&c, engine, p, &plan));
        let step = engine.is_causal() || pass.is_none();
        let v = c.n_vocab;
        let handles: Vec<_> = plan.items.iter().map(|it| c.seqs[it.seq].abort_handle()).collect();
        let settings = &(*ctx).settings;
        settings.apply_threads(F, engine, plan.items.iter().map(|it| it.tokens.len()).sum());
        let result = run_abortable(settings, &handles, || {
            // Embeddings first: they change no sequence, so a failure of either part leaves
            // every sequence as it was.
            let vectors = match &pass {
                Some(p) => p.run(&mut c.seqs, &plan)?,
                None => Vec::new(),
            };
            if !step {
                return Ok((Vec::new(), vectors));
            }
            let mut items: Vec<(&mut Sequence, &[u32], Rows)> = Vec::with_capacity(plan.items.len());
            let mut rest: &mut [Sequence] = &mut c.seqs;
            let mut base = 0;
            for it in &plan.items {
                let (s, tail) = std::mem::take(&mut rest)[it.seq - base..].split_first_mut().expect("a planned sequence");
                rest = tail;
                base = it.seq + 1;
                items.push((s, &it.tokens, it.rows));
            }
            let logits = if items.len() == 1 {
                let (s, tokens, rows) = items.pop().expect("one item");
                s.step(tokens, rows).map(|l| vec![l])
            } else {
                Sequence::step_many(&mut items)
            };
            logits.map(|l| (l, vectors))
        });
        let Some(result) = result else {
            error(F, "aborted by the abort callback before the pass; nothing was decoded");
            return 2;
        };
        match result {
            Ok((logits, vectors)) => {
                // The output rows in batch order: batch index i is row `local` of its item's
                // logits (an item asking for its last row only has that one row).
                c.outputs = if logits.is_empty() {
                    Vec::new()
                } else {
                    plan.wanted
                        .iter()
                        .flat_map(|&(item, local)| {
                            let row = if plan.items[item].rows == Rows::All { local } else { 0 };
                            logits[item][row * v..(row + 1) * v].iter().copied()
                        })
                        .collect()
                };
                let n_seqs = c.seqs.len();
                c.embd = match pass {
                    Some(p) => p.finish(vectors, &plan, n_seqs),
                    None => embeddings::Output::default(),
                };
                c.output_of = plan.output_of;
                // The chains attached to the output rows' sequences run on them (this
                // library's samplers only: no client code runs while the context is held).
                let n_rows = if c.outputs.is_empty() { 0 } else { outputs_by_seq.len() };
                let State { sampling, outputs, .. } = &mut *c;
                sampling.run(outputs, v, &outputs_by_seq[..n_rows]);
                c.perf.count(batch.n_tokens as usize, started);
                0
            }
            Err(e) => {
                error(F, &e.to_string());
                if adapter::is_context_full(&e) {
                    1
                } else if adapter::is_aborted(&e) {
                    2
                } else if adapter::is_non_finite(&e) {
                    -3
                } else {
                    -1
                }
            }
        }
    })
}

/// One sequence's tokens of a batch, in batch order, and the rows it returns.
pub(crate) struct PlanItem {
    pub(crate) seq: usize,
    pub(crate) tokens: Vec<u32>,
    rows: Rows,
}

pub(crate) struct Plan {
    /// By sequence id, ascending.
    pub(crate) items: Vec<PlanItem>,
    /// For each batch index whose logits are wanted, in batch order: (its item, its index among
    /// the item's tokens).
    pub(crate) wanted: Vec<(usize, usize)>,
    output_of: Vec<i32>,
}

/// A batch's tokens grouped by sequence. Each token must be in exactly one sequence of this
/// context (a token in several is refused: decode it in one and copy the sequence with
/// llama_memory_seq_cp), at the next position of its sequence. With `all_outputs` (embeddings
/// on) every token is an output, whatever its `logits` flag (llama.cpp's rule).
unsafe fn plan_batch(c: &State, n_batch: u32, b: &Batch, all_outputs: bool) -> Result<Plan, String> {
    let n = usize::try_from(b.n_tokens).ok().filter(|&n| n > 0).ok_or(format!("n_tokens is {}", b.n_tokens))?;
    if b.token.is_null() {
        return Err("the batch has no tokens (embedding inputs are not supported)".into());
    }
    if n > n_batch as usize {
        return Err(format!("n_tokens {n} exceeds n_batch {n_batch}"));
    }
    // Per sequence: its tokens in this batch and their batch indices.
    let mut by_seq: Vec<(Vec<u32>, Vec<usize>)> = vec![(Vec::new(), Vec::new()); c.seqs.len()];
    let mut place = Vec::with_capacity(n);
    for i in 0..n {
        let t = *b.token.add(i);
        let t = u32::try_from(t).ok().filter(|&t| (t as usize) < c.n_vocab).ok_or(format!("token id {t} at index {i} is outside the vocabulary of {}", c.n_vocab))?;
        let seq: usize = if !b.n_seq_id.is_null() && !b.seq_id.is_null() {
            let k = *b.n_seq_id.add(i);
            let row = *b.seq_id.add(i);
            if k != 1 || row.is_null() {
                return Err(format!("index {i} is in {k} sequences: a token goes in one sequence (copy a shared prefix with llama_memory_seq_cp)"));
            }
            let id = *row;
            usize::try_from(id).ok().filter(|&s| s < c.seqs.len()).ok_or(format!("index {i} is in sequence {id}: this context has sequences 0 to {}", c.seqs.len() - 1))?
        } else {
            0
        };
        let (tokens, indices) = &mut by_seq[seq];
        if !b.pos.is_null() {
            let p: Pos = *b.pos.add(i);
            let next = c.seqs[seq].n_past() + tokens.len();
            if i64::from(p) != next as i64 {
                return Err(format!("position {p} at index {i}: sequence {seq} holds {} positions and appends at {next}", c.seqs[seq].n_past()));
            }
        }
        place.push((seq, tokens.len()));
        tokens.push(t);
        indices.push(i);
    }
    let wanted_index: Vec<usize> = if all_outputs {
        (0..n).collect()
    } else if b.logits.is_null() {
        vec![n - 1]
    } else {
        (0..n).filter(|&i| *b.logits.add(i) != 0).collect()
    };
    let mut items = Vec::new();
    let mut item_of = vec![usize::MAX; c.seqs.len()];
    for (seq, (tokens, indices)) in by_seq.into_iter().enumerate() {
        if tokens.is_empty() {
            continue;
        }
        let last = *indices.last().expect("a token");
        let wants: Vec<usize> = indices.iter().copied().filter(|i| wanted_index.contains(i)).collect();
        let rows = match wants.as_slice() {
            [] => Rows::None,
            [only] if *only == last => Rows::Last,
            _ => Rows::All,
        };
        item_of[seq] = items.len();
        items.push(PlanItem { seq, tokens, rows });
    }
    let mut output_of = vec![-1; n];
    let mut wanted = Vec::with_capacity(wanted_index.len());
    for (row, &i) in wanted_index.iter().enumerate() {
        output_of[i] = row as i32;
        let (seq, local) = place[i];
        wanted.push((item_of[seq], local));
    }
    Ok(Plan { items, wanted, output_of })
}

/// Encoder models only; packlm runs decoders.
#[no_mangle]
pub extern "C" fn llama_encode(_ctx: *mut LlamaContext, _batch: Batch) -> i32 {
    crate::log::unsupported("llama_encode");
    -1
}

/// The last decode's output rows (rows x n_vocab); NULL when it asked for none.
#[no_mangle]
pub unsafe extern "C" fn llama_get_logits(ctx: *mut LlamaContext) -> *mut f32 {
    const F: &str = "llama_get_logits";
    guard(F, ptr::null_mut(), || {
        let Some(mut c) = hold(F, ctx) else { return ptr::null_mut() };
        if c.outputs.is_empty() {
            error(F, "the last batch asked for no logits");
            return ptr::null_mut();
        }
        c.outputs.as_mut_ptr()
    })
}

/// The logits of batch index `i` of the last decode (negative: from the last output back);
/// NULL, logged, when that index asked for none.
#[no_mangle]
pub unsafe extern "C" fn llama_get_logits_ith(ctx: *mut LlamaContext, i: i32) -> *mut f32 {
    const F: &str = "llama_get_logits_ith";
    guard(F, ptr::null_mut(), || {
        let Some(c) = hold(F, ctx) else { return ptr::null_mut() };
        c.logits_ith(F, i).map(|r| r.as_ptr() as *mut f32).unwrap_or(ptr::null_mut())
    })
}

/// Empties every sequence of the context.
#[no_mangle]
pub unsafe extern "C" fn llama_memory_clear(mem: *mut c_void, _data: bool) {
    const F: &str = "llama_memory_clear";
    guard(F, (), || {
        let Some(mut c) = hold(F, mem as *const LlamaContext) else { return };
        for s in c.seqs.iter_mut() {
            if let Err(e) = s.truncate(0) {
                error(F, &e.to_string());
            }
        }
        c.clear_outputs();
    })
}

/// Removes positions [p0, p1) of sequence `seq_id` (every sequence when `seq_id` < 0; p0 < 0:
/// from 0; p1 < 0: to the end). Only a tail can go (the positions after it would have to
/// move): true when done, false (logged, nothing changed) otherwise. As in llama.cpp, the
/// memory calls leave the last decode's logits readable (examples/parallel samples a client
/// after removing another's sequence); llama_memory_clear drops them.
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_rm(mem: *mut c_void, seq_id: SeqId, p0: Pos, p1: Pos) -> bool {
    const F: &str = "llama_memory_seq_rm";
    guard(F, false, || {
        let Some(mut c) = hold(F, mem as *const LlamaContext) else { return false };
        let start = usize::try_from(p0).unwrap_or(0);
        let end = usize::try_from(p1).unwrap_or(usize::MAX);
        let targets: Vec<usize> = if seq_id < 0 {
            (0..c.seqs.len()).collect()
        } else {
            if !c.has_seq(F, seq_id) {
                return false;
            }
            vec![seq_id as usize]
        };
        // Every sequence is checked before any changes.
        for &i in &targets {
            let n_past = c.seqs[i].n_past();
            if start < n_past && start < end && end < n_past {
                error(F, &format!("removing [{start}, {end}) of sequence {i}'s {n_past} positions: only a tail can be removed"));
                return false;
            }
        }
        for &i in &targets {
            if start < c.seqs[i].n_past() && start < end {
                if let Err(e) = c.seqs[i].truncate(start) {
                    error(F, &e.to_string());
                    return false;
                }
            }
        }
        true
    })
}

/// Makes sequence `dst` hold sequence `src`'s positions [0, p1) (p1 < 0: all of them), in
/// place of what it held. As llama.cpp's seq_cp shares cells, the copy shares `src`'s keys and
/// values (`Session::fork`: pages shared copy-on-write), so copying a long prompt to many
/// sequences costs no KV memory until they diverge. Only a prefix can be copied (p0 <= 0);
/// anything else is refused with a log line and nothing changes.
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_cp(mem: *mut c_void, src: SeqId, dst: SeqId, p0: Pos, p1: Pos) {
    const F: &str = "llama_memory_seq_cp";
    guard(F, (), || {
        let Some(mut c) = hold(F, mem as *const LlamaContext) else { return };
        if !c.has_seq(F, src) || !c.has_seq(F, dst) {
            return;
        }
        let n_src = c.seqs[src as usize].n_past();
        if src == dst {
            return;
        }
        if p0 > 0 {
            error(F, &format!("copying from position {p0}: only a prefix of a sequence can be copied"));
            return;
        }
        let keep = usize::try_from(p1).map_or(n_src, |p| p.min(n_src));
        let mut copy = c.seqs[src as usize].fork();
        match copy.truncate(keep) {
            Ok(()) => c.seqs[dst as usize] = copy,
            Err(e) => error(F, &e.to_string()),
        }
    })
}

/// Empties every sequence but `seq_id`.
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_keep(mem: *mut c_void, seq_id: SeqId) {
    const F: &str = "llama_memory_seq_keep";
    guard(F, (), || {
        let Some(mut c) = hold(F, mem as *const LlamaContext) else { return };
        if !c.has_seq(F, seq_id) {
            return;
        }
        for (i, s) in c.seqs.iter_mut().enumerate() {
            if i != seq_id as usize {
                if let Err(e) = s.truncate(0) {
                    error(F, &e.to_string());
                }
            }
        }
    })
}

/// The largest position held by sequence `seq_id` (-1 when empty or no such sequence).
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_pos_max(mem: *mut c_void, seq_id: SeqId) -> Pos {
    const F: &str = "llama_memory_seq_pos_max";
    guard(F, -1, || {
        let Some(c) = hold(F, mem as *const LlamaContext) else { return -1 };
        c.n_past_of(seq_id).map_or(-1, |n| n as Pos - 1)
    })
}

/// The smallest position held by sequence `seq_id` (-1 when empty or no such sequence).
#[no_mangle]
pub unsafe extern "C" fn llama_memory_seq_pos_min(mem: *mut c_void, seq_id: SeqId) -> Pos {
    const F: &str = "llama_memory_seq_pos_min";
    guard(F, -1, || {
        let Some(c) = hold(F, mem as *const LlamaContext) else { return -1 };
        match c.n_past_of(seq_id) {
            Some(n) if n > 0 => 0,
            _ => -1,
        }
    })
}

#[no_mangle]
pub extern "C" fn llama_memory_can_shift(_mem: *mut c_void) -> bool {
    false
}

/// State bytes, little-endian:
///
/// ```text
/// header    "PLMS" | format version u32 | the number of floats of kept logits u64 (0 or n_vocab)
/// logits    f32 each: the last output row, so that sampling right after a restore works
/// snapshot  packlm's session snapshot, ending in its own FNV-1a 64 trailer
/// trailer   FNV-1a 64 of the header, the logits and the snapshot's trailer
/// ```
///
/// Every byte is under a checksum: the snapshot's bytes under its own (packlm checks it on
/// restore), the rest, and that checksum, under this trailer, so that neither part can be
/// changed or swapped for another state's. Hashing the snapshot's trailer instead of its bytes
/// keeps saving and restoring to one pass over the planes. Version 1 had no trailer and is
/// refused. Restore also refuses logits that are not finite (a pass never hands those out:
/// packlm refuses such a pass with PACKLM_ERR_NON_FINITE).
const STATE_MAGIC: &[u8; 4] = b"PLMS";
const STATE_VERSION: u32 = 2;
const STATE_HEADER: usize = 16;
const STATE_TRAILER: usize = 8;
/// The snapshot's own trailer (packlm's src/kv/snapshot.rs).
const SNAPSHOT_TRAILER: usize = 8;

/// The checksum of a state: header and logits (`head`), then the snapshot's trailer.
fn state_checksum(head: &[u8], snapshot: &[u8]) -> u64 {
    let mut bytes = Vec::with_capacity(head.len() + SNAPSHOT_TRAILER);
    bytes.extend_from_slice(head);
    bytes.extend_from_slice(&snapshot[snapshot.len().saturating_sub(SNAPSHOT_TRAILER)..]);
    adapter::fnv1a64(&bytes)
}

/// The last output row, or nothing when the last decode asked for none.
fn kept_logits(c: &State) -> &[f32] {
    if c.n_outputs() > 0 {
        &c.outputs[c.outputs.len() - c.n_vocab..]
    } else {
        &[]
    }
}

fn state_bytes(c: &State) -> Vec<u8> {
    let last = kept_logits(c);
    let snapshot = c.seqs[0].snapshot();
    let mut out = Vec::with_capacity(STATE_HEADER + last.len() * 4 + snapshot.len() + STATE_TRAILER);
    out.extend_from_slice(STATE_MAGIC);
    out.extend_from_slice(&STATE_VERSION.to_le_bytes());
    out.extend_from_slice(&(last.len() as u64).to_le_bytes());
    for x in last {
        out.extend_from_slice(&x.to_le_bytes());
    }
    let sum = state_checksum(&out, &snapshot);
    out.extend_from_slice(&snapshot);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

fn state_len(c: &State) -> usize {
    STATE_HEADER + kept_logits(c).len() * 4 + c.seqs[0].snapshot_len() + STATE_TRAILER
}

/// The whole-context state holds sequence 0 (and the last output row): a context whose other
/// sequences hold positions has no such state (llama_state_seq_* save each sequence).
fn only_seq_0(f: &str, c: &State) -> bool {
    match c.seqs.iter().skip(1).position(|s| s.n_past() > 0) {
        None => true,
        Some(i) => {
            error(f, &format!("sequence {} holds positions: a context's state holds sequence 0 alone; save each sequence with llama_state_seq_get_data", i + 1));
            false
        }
    }
}

/// Copies state `bytes` to the caller's `dst` of `size` bytes: the bytes written, or 0 (logged)
/// when they do not fit.
unsafe fn copy_out(f: &str, bytes: &[u8], dst: *mut u8, size: usize) -> usize {
    if dst.is_null() || bytes.len() > size {
        error(f, &format!("the state is {} bytes; the buffer holds {size}", bytes.len()));
        return 0;
    }
    ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len());
    bytes.len()
}

#[no_mangle]
pub unsafe extern "C" fn llama_state_get_size(ctx: *mut LlamaContext) -> usize {
    const F: &str = "llama_state_get_size";
    guard(F, 0, || match hold(F, ctx) {
        Some(c) if only_seq_0(F, &c) => state_len(&c),
        _ => 0,
    })
}

/// Copies the state into `dst` of `size` bytes; returns the bytes written, 0 (logged) when
/// they do not fit.
#[no_mangle]
pub unsafe extern "C" fn llama_state_get_data(ctx: *mut LlamaContext, dst: *mut u8, size: usize) -> usize {
    const F: &str = "llama_state_get_data";
    guard(F, 0, || {
        let Some(c) = hold(F, ctx) else { return 0 };
        if !only_seq_0(F, &c) {
            return 0;
        }
        copy_out(F, &state_bytes(&c), dst, size)
    })
}

/// Replaces the state with `size` bytes from `llama_state_get_data` (of a context of the same
/// model). Returns the bytes read, or 0 (logged, the context unchanged) when they are not a
/// valid state of this model: another format or model, cut short, any byte changed, or
/// logits that are not finite.
#[no_mangle]
pub unsafe extern "C" fn llama_state_set_data(ctx: *mut LlamaContext, src: *const u8, size: usize) -> usize {
    const F: &str = "llama_state_set_data";
    guard(F, 0, || {
        let Some(mut c) = hold(F, ctx) else { return 0 };
        if src.is_null() {
            error(F, "src is NULL");
            return 0;
        }
        let bytes = std::slice::from_raw_parts(src, size);
        match restore_state(&mut c, bytes) {
            Ok(()) => size,
            Err(why) => {
                error(F, &why);
                0
            }
        }
    })
}

/// The number of kept logits a state's header states, checked against the model.
fn state_header(c: &State, bytes: &[u8]) -> Result<usize, String> {
    if bytes.len() < STATE_HEADER || &bytes[..4] != STATE_MAGIC {
        return Err(format!("not a state of this library ({} bytes, no \"PLMS\" header)", bytes.len()));
    }
    let version = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    if version != STATE_VERSION {
        return Err(format!("state format version {version}; this library reads {STATE_VERSION}"));
    }
    let mut n8 = [0u8; 8];
    n8.copy_from_slice(&bytes[8..16]);
    let n_logits = u64::from_le_bytes(n8);
    if n_logits != 0 && n_logits != c.n_vocab as u64 {
        return Err(format!("the state keeps {n_logits} logits; this model's vocabulary has {}", c.n_vocab));
    }
    Ok(n_logits as usize)
}

fn restore_state(c: &mut State, bytes: &[u8]) -> Result<(), String> {
    let n_logits = state_header(c, bytes)?;
    let end = STATE_HEADER + n_logits * 4;
    if bytes.len() < end + SNAPSHOT_TRAILER + STATE_TRAILER {
        return Err(format!("the state is cut short: {} bytes, its logits end at {end}", bytes.len()));
    }
    let (body, trailer) = bytes.split_at(bytes.len() - STATE_TRAILER);
    let mut t8 = [0u8; 8];
    t8.copy_from_slice(trailer);
    if u64::from_le_bytes(t8) != state_checksum(&body[..end], &body[end..]) {
        return Err("the state's checksum does not match: the bytes were changed, cut or joined".into());
    }
    let logits: Vec<f32> = body[STATE_HEADER..end].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    if let Some((i, x)) = logits.iter().enumerate().find(|(_, x)| !x.is_finite()) {
        return Err(format!("the state's logit {i} is {x}: kept logits must be finite"));
    }
    c.seqs[0].restore(&body[end..]).map_err(|e| e.to_string())?;
    // The state was saved with the other sequences empty.
    for s in c.seqs.iter_mut().skip(1) {
        s.truncate(0).map_err(|e| e.to_string())?;
    }
    c.outputs = logits;
    c.output_of.clear();
    c.sampling.clear_rows();
    Ok(())
}

/// The length of the state at `src` from its header, for `llama_set_state_data`, which is given
/// no size: the header, the logits, the snapshot of the positions its header states (at most
/// this context's), the trailer. Reads the headers only.
unsafe fn state_len_at(c: &State, n_ctx: u32, src: *const u8) -> Result<usize, String> {
    let n_logits = state_header(c, std::slice::from_raw_parts(src, STATE_HEADER))?;
    // The snapshot's header: magic (8), format version (4), fingerprint (8), positions (8).
    let at = STATE_HEADER + n_logits * 4;
    let head = std::slice::from_raw_parts(src.add(at), 28);
    let mut p8 = [0u8; 8];
    p8.copy_from_slice(&head[20..28]);
    let positions = u64::from_le_bytes(p8);
    if positions > u64::from(n_ctx) {
        return Err(format!("the state holds {positions} positions; this context holds at most {n_ctx}"));
    }
    let snapshot = c.seqs[0].snapshot_len_at(positions as usize).ok_or("the state's size overflows")?;
    Ok(at + snapshot + STATE_TRAILER)
}

/// The size of sequence `seq_id`'s state (packlm's session snapshot: its cache and tokens,
/// checksummed); 0 (logged) for a sequence the context lacks.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_get_size(ctx: *mut LlamaContext, seq_id: SeqId) -> usize {
    const F: &str = "llama_state_seq_get_size";
    guard(F, 0, || {
        let Some(c) = hold(F, ctx) else { return 0 };
        if !c.has_seq(F, seq_id) {
            return 0;
        }
        c.seqs[seq_id as usize].snapshot_len()
    })
}

/// Copies sequence `seq_id`'s state into `dst` of `size` bytes; returns the bytes written, 0
/// (logged) when they do not fit or there is no such sequence.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_get_data(ctx: *mut LlamaContext, dst: *mut u8, size: usize, seq_id: SeqId) -> usize {
    const F: &str = "llama_state_seq_get_data";
    guard(F, 0, || {
        let Some(c) = hold(F, ctx) else { return 0 };
        if !c.has_seq(F, seq_id) {
            return 0;
        }
        copy_out(F, &c.seqs[seq_id as usize].snapshot(), dst, size)
    })
}

/// Replaces sequence `dest_seq_id` with a state from `llama_state_seq_get_data` (of a context of
/// the same model, any sequence); returns the bytes read, or 0 (logged, nothing changed) when
/// they are not a valid state of this model or do not fit the sequence.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_set_data(ctx: *mut LlamaContext, src: *const u8, size: usize, dest_seq_id: SeqId) -> usize {
    const F: &str = "llama_state_seq_set_data";
    guard(F, 0, || {
        let Some(mut c) = hold(F, ctx) else { return 0 };
        if src.is_null() {
            error(F, "src is NULL");
            return 0;
        }
        if !c.has_seq(F, dest_seq_id) {
            return 0;
        }
        let bytes = std::slice::from_raw_parts(src, size);
        match c.seqs[dest_seq_id as usize].restore(bytes) {
            Ok(()) => {
                c.clear_outputs();
                size
            }
            Err(e) => {
                error(F, &e.to_string());
                0
            }
        }
    })
}

/// `flags` of the `_ext` state calls: LLAMA_STATE_SEQ_FLAGS_ON_DEVICE (2) asks to keep the bytes
/// on the device, a hint (packlm's states are host bytes); LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
/// (1), a state of only the sliding-window or recurrent part, is refused (logged): packlm
/// saves a sequence whole.
fn ext_flags_ok(f: &str, flags: u32) -> bool {
    if flags & !2 != 0 {
        error(f, &format!("state flags {flags:#x}: only LLAMA_STATE_SEQ_FLAGS_ON_DEVICE is taken; partial states are not made"));
        return false;
    }
    true
}

/// `llama_state_seq_get_size` with flags (see `ext_flags_ok`).
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_get_size_ext(ctx: *mut LlamaContext, seq_id: SeqId, flags: u32) -> usize {
    if !ext_flags_ok("llama_state_seq_get_size_ext", flags) {
        return 0;
    }
    llama_state_seq_get_size(ctx, seq_id)
}

/// `llama_state_seq_get_data` with flags (see `ext_flags_ok`).
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_get_data_ext(ctx: *mut LlamaContext, dst: *mut u8, size: usize, seq_id: SeqId, flags: u32) -> usize {
    if !ext_flags_ok("llama_state_seq_get_data_ext", flags) {
        return 0;
    }
    llama_state_seq_get_data(ctx, dst, size, seq_id)
}

/// `llama_state_seq_set_data` with flags (see `ext_flags_ok`).
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_set_data_ext(ctx: *mut LlamaContext, src: *const u8, size: usize, dest_seq_id: SeqId, flags: u32) -> usize {
    if !ext_flags_ok("llama_state_seq_set_data_ext", flags) {
        return 0;
    }
    llama_state_seq_set_data(ctx, src, size, dest_seq_id)
}

/// `llama_state_get_size` (its deprecated name).
#[no_mangle]
pub unsafe extern "C" fn llama_get_state_size(ctx: *mut LlamaContext) -> usize {
    llama_state_get_size(ctx)
}

/// `llama_state_get_data` into a buffer the caller made `llama_state_get_size` bytes long (the
/// deprecated form, given no size).
#[no_mangle]
pub unsafe extern "C" fn llama_copy_state_data(ctx: *mut LlamaContext, dst: *mut u8) -> usize {
    llama_state_get_data(ctx, dst, usize::MAX)
}

/// `llama_state_set_data` of a state from `llama_state_get_data` (the deprecated form, given no
/// size): its length is read from its headers, then it is validated whole as
/// `llama_state_set_data` does. Returns the bytes read, or 0 (logged).
#[no_mangle]
pub unsafe extern "C" fn llama_set_state_data(ctx: *mut LlamaContext, src: *const u8) -> usize {
    const F: &str = "llama_set_state_data";
    guard(F, 0, || {
        let len = {
            let Some(c) = hold(F, ctx) else { return 0 };
            if src.is_null() {
                error(F, "src is NULL");
                return 0;
            }
            match state_len_at(&c, (*ctx).n_ctx, src) {
                Ok(len) => len,
                Err(why) => {
                    error(F, &why);
                    return 0;
                }
            }
        };
        llama_state_set_data(ctx, src, len)
    })
}

/// For the sampler: what a chain attached to the row's sequence left at decode
/// (`backend_sampling::start_for_sampling`), else the candidates (id, logit) of the logits row
/// `idx` of `ctx`; copied while the context is held, so that samplers (which may be the
/// client's code) run without it.
pub unsafe fn candidates_for_sampling(f: &str, ctx: *mut LlamaContext, idx: i32) -> Option<Start> {
    let c = hold(f, ctx)?;
    if let Some(start) = backend_sampling::start_for_sampling(&c, idx) {
        return Some(start);
    }
    let logits = c.logits_ith(f, idx)?;
    Some(Start::Candidates(logits.iter().enumerate().map(|(i, &l)| TokenData { id: i as Token, logit: l, p: 0.0 }).collect()))
}

/// A batch over the caller's `tokens` (not copied): positions from the context's length,
/// sequence 0, logits for the last token.
#[no_mangle]
pub extern "C" fn llama_batch_get_one(tokens: *mut crate::abi::Token, n_tokens: i32) -> Batch {
    Batch {
        n_tokens,
        token: tokens,
        embd: ptr::null_mut(),
        pos: ptr::null_mut(),
        n_seq_id: ptr::null_mut(),
        seq_id: ptr::null_mut(),
        logits: ptr::null_mut(),
    }
}
