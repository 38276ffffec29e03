//! The extended batch (`llama_batch_ext_*`) and `llama_process`, the API llama.cpp's own
//! examples (simple, simple-chat) decode with: entries added one at a time (a token, its
//! sequences, position and output flag), then run. `llama_process` lays the entries out as a
//! `llama_batch` and runs `llama_decode`, so both batch APIs share one path and one set of
//! rules and return values. Embedding entries (`_add_embd`, `_set_embd_*`) are not supported
//! (unsupported.rs), as `llama_batch_init` with `embd` is not.

use std::ptr;

use crate::abi::{Batch, Pos, SeqId, Token};
use crate::context::{ctx_ref, llama_decode, LlamaContext};
use crate::log::{error, guard, unsupported};
use crate::model::model_ref;

/// `LLAMA_TOKEN_NULL`: an entry made by `llama_batch_ext_add`, without a token.
const NULL_TOKEN: Token = -1;

/// `enum llama_process_type`.
const PROCESS_TYPE_ENCODE: i32 = 0;
const PROCESS_TYPE_DECODE: i32 = 1;

/// One entry: a token in one or more sequences at one position.
struct Entry {
    token: Token,
    /// Distinct ids, in the order added.
    seq_ids: Vec<SeqId>,
    /// 0 until set (llama.cpp's default).
    pos: Pos,
    /// Whether `llama_process` keeps this entry's logits.
    output: bool,
}

/// `struct llama_batch_ext`. Owned by its creator through a Box (`llama_batch_ext_init` /
/// `_free`). Safe to move to another thread; not for concurrent use. Its limits are taken from
/// the context at init, as llama.cpp does.
pub struct BatchExt {
    /// The context's n_batch.
    n_tokens_max: usize,
    /// The context's n_seq_max.
    n_seq_max: SeqId,
    n_vocab: Token,
    entries: Vec<Entry>,
}

impl BatchExt {
    /// llama.cpp's `add_token`: the new entry's index; -1 when the batch is full, -3 for a
    /// sequence id the context lacks.
    fn add(&mut self, seq_id: SeqId) -> i32 {
        if self.entries.len() >= self.n_tokens_max {
            return -1;
        }
        if seq_id < 0 || seq_id >= self.n_seq_max {
            return -3;
        }
        self.entries.push(Entry { token: NULL_TOKEN, seq_ids: vec![seq_id], pos: 0, output: false });
        (self.entries.len() - 1) as i32
    }

    fn entry(&mut self, idx: i32) -> Option<&mut Entry> {
        usize::try_from(idx).ok().and_then(|i| self.entries.get_mut(i))
    }
}

unsafe fn batch_mut<'a>(f: &str, p: *mut BatchExt) -> Option<&'a mut BatchExt> {
    if p.is_null() {
        error(f, "batch is NULL");
        return None;
    }
    Some(&mut *p)
}

/// An empty batch with the context's limits (n_batch entries, its sequences, its model's
/// vocabulary); NULL for a NULL context.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_init(ctx: *mut LlamaContext) -> *mut BatchExt {
    const F: &str = "llama_batch_ext_init";
    guard(F, ptr::null_mut(), || {
        let Some(c) = ctx_ref(F, ctx) else { return ptr::null_mut() };
        let Some(m) = model_ref(F, crate::context::llama_get_model(ctx)) else { return ptr::null_mut() };
        Box::into_raw(Box::new(BatchExt {
            n_tokens_max: crate::context::llama_n_batch(c) as usize,
            n_seq_max: SeqId::try_from(crate::context::llama_n_seq_max(c)).unwrap_or(SeqId::MAX),
            n_vocab: Token::try_from(m.engine.n_vocab()).unwrap_or(Token::MAX),
            entries: Vec::new(),
        }))
    })
}

/// Frees a batch from `llama_batch_ext_init`; NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_free(batch: *mut BatchExt) {
    guard("llama_batch_ext_free", (), || {
        if !batch.is_null() {
            drop(Box::from_raw(batch));
        }
    })
}

/// Removes every entry.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_clear(batch: *mut BatchExt) {
    const F: &str = "llama_batch_ext_clear";
    guard(F, (), || {
        if let Some(b) = batch_mut(F, batch) {
            b.entries.clear();
        }
    })
}

/// Adds an entry without a token in `seq_id` (llama.cpp fills it with an embedding, which is not
/// supported here: `llama_process` refuses a batch holding one). Returns its index; -1 when the
/// batch is full; -3 for a sequence id the context lacks.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_add(batch: *mut BatchExt, seq_id: SeqId) -> i32 {
    const F: &str = "llama_batch_ext_add";
    guard(F, -1, || batch_mut(F, batch).map_or(-1, |b| b.add(seq_id)))
}

/// Adds token `id` in `seq_id` at position 0 until `llama_batch_ext_set_pos`. Returns its index;
/// -1 when the batch is full; -2 for a token outside the vocabulary; -3 for a sequence id the
/// context lacks. Nothing is added on failure.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_add_token(batch: *mut BatchExt, seq_id: SeqId, id: Token) -> i32 {
    const F: &str = "llama_batch_ext_add_token";
    guard(F, -1, || {
        let Some(b) = batch_mut(F, batch) else { return -1 };
        let idx = b.add(seq_id);
        if idx < 0 {
            return idx;
        }
        if id < 0 || id >= b.n_vocab {
            b.entries.pop();
            return -2;
        }
        b.entries[idx as usize].token = id;
        idx
    })
}

/// Puts entry `idx` in sequence `seq_id` too (same position); false for an index or a
/// sequence id out of range.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_add_seq(batch: *mut BatchExt, idx: i32, seq_id: SeqId) -> bool {
    const F: &str = "llama_batch_ext_add_seq";
    guard(F, false, || {
        let Some(b) = batch_mut(F, batch) else { return false };
        let n_seq_max = b.n_seq_max;
        match b.entry(idx) {
            Some(e) if (0..n_seq_max).contains(&seq_id) => {
                if !e.seq_ids.contains(&seq_id) {
                    e.seq_ids.push(seq_id);
                }
                true
            }
            _ => false,
        }
    })
}

/// Sets entry `idx`'s position to `*pos` (a token entry has one position); false for an index
/// out of range or a NULL `pos`.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_set_pos(batch: *mut BatchExt, idx: i32, pos: *const Pos) -> bool {
    const F: &str = "llama_batch_ext_set_pos";
    guard(F, false, || {
        let Some(b) = batch_mut(F, batch) else { return false };
        match (b.entry(idx), pos.is_null()) {
            (Some(e), false) => {
                e.pos = *pos;
                true
            }
            _ => false,
        }
    })
}

/// Whether `llama_process` keeps entry `idx`'s logits; false for an index out of range.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_set_output_logits(batch: *mut BatchExt, idx: i32, value: bool) -> bool {
    const F: &str = "llama_batch_ext_set_output_logits";
    guard(F, false, || match batch_mut(F, batch).and_then(|b| b.entry(idx)) {
        Some(e) => {
            e.output = value;
            true
        }
        None => false,
    })
}

/// The same flag as `llama_batch_ext_set_output_logits` (llama.h: "for now, this is equivalent
/// to setting the output logits").
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_set_output_embd(batch: *mut BatchExt, idx: i32, value: bool) -> bool {
    llama_batch_ext_set_output_logits(batch, idx, value)
}

/// Runs the batch: LLAMA_PROCESS_TYPE_DECODE is `llama_decode` of its entries (the same return
/// values: 0 on success, 1 when a sequence is full, -1 for a batch the context cannot run, ...);
/// LLAMA_PROCESS_TYPE_ENCODE is for encoder models, which packlm does not run (-1).
#[no_mangle]
pub unsafe extern "C" fn llama_process(ctx: *mut LlamaContext, kind: i32, batch: *mut BatchExt) -> i32 {
    const F: &str = "llama_process";
    guard(F, -1, || {
        let Some(b) = batch_mut(F, batch) else { return -1 };
        match kind {
            PROCESS_TYPE_DECODE => {}
            PROCESS_TYPE_ENCODE => {
                unsupported("llama_process (LLAMA_PROCESS_TYPE_ENCODE)");
                return -1;
            }
            _ => {
                error(F, &format!("unknown llama_process_type {kind}"));
                return -1;
            }
        }
        if let Some(i) = b.entries.iter().position(|e| e.token == NULL_TOKEN) {
            error(F, &format!("entry {i} has no token (embedding inputs are not supported)"));
            return -1;
        }
        // llama_batch's parallel arrays; they outlive the call that reads them.
        let mut tokens: Vec<Token> = b.entries.iter().map(|e| e.token).collect();
        let mut pos: Vec<Pos> = b.entries.iter().map(|e| e.pos).collect();
        let mut n_seq_id: Vec<i32> = b.entries.iter().map(|e| e.seq_ids.len() as i32).collect();
        let mut seq_id: Vec<*mut SeqId> = b.entries.iter_mut().map(|e| e.seq_ids.as_mut_ptr()).collect();
        let mut logits: Vec<i8> = b.entries.iter().map(|e| e.output as i8).collect();
        let plain = Batch {
            n_tokens: i32::try_from(tokens.len()).unwrap_or(i32::MAX),
            token: tokens.as_mut_ptr(),
            embd: ptr::null_mut(),
            pos: pos.as_mut_ptr(),
            n_seq_id: n_seq_id.as_mut_ptr(),
            seq_id: seq_id.as_mut_ptr(),
            logits: logits.as_mut_ptr(),
        };
        llama_decode(ctx, plain)
    })
}
