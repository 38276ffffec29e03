//! Backend sampling (llama.h's [EXPERIMENTAL] API): a sampler chain attached to a sequence
//! (`llama_set_sampler`, or the context params' `samplers`) runs its leading samplers on each
//! of that sequence's output rows at every `llama_decode` (`sampler::backend` says which and
//! how); `llama_get_sampled_*_ith` read the results by batch index as `llama_get_logits_ith`
//! does (negative: from the last output back), and `llama_sampler_sample` starts from them,
//! as llama.cpp's does (llama-context.cpp `get_sampled_*`, llama-sampler.cpp
//! `llama_sampler_sample`).
//!
//! What the getters give, as llama.cpp's: when the last decode ran with no sampler attached
//! there are no results: token LLAMA_TOKEN_NULL, NULL and count 0, except the logits count,
//! n_vocab (llama.cpp's), and the candidates, the whole vocabulary's ids 0..n_vocab. An index
//! with no output row is logged and gives the same failure values (candidates: the whole
//! vocabulary, without a log line, as llama.cpp falls back). A row of a sequence without a
//! sampler has nothing: LLAMA_TOKEN_NULL, NULL and 0.
//!
//! A sequence's sampled rows are limited to `n_outputs_max_per_seq` per decode (default 1):
//! more is refused (-1, logged), as llama.cpp does. A `dist` draws from its generator once per
//! sampled row at decode; with `n_outputs_max_per_seq` > 1 llama.cpp instead draws from a copy
//! and commits the draws as tokens are accepted, which differs from this only when fewer rows
//! are accepted than were sampled.

use std::ffi::c_void;
use std::ptr;

use crate::abi::{Sampler, SamplerSeqConfig, SeqId, Token, TokenData};
use crate::context::{hold, LlamaContext, State};
use crate::log::{error, guard, log, Level};
use crate::sampler::backend::{self, RowSample};

/// A context's attached chains and the last decode's results.
#[derive(Default)]
pub struct Sampling {
    /// By seq_id: the chain attached to it, or NULL.
    chains: Vec<*mut Sampler>,
    /// The last decode's results by output row; None when it ran with no chain attached
    /// (llama.cpp's buffers are then absent).
    rows: Option<Vec<RowSample>>,
    /// Token ids 0..n_vocab (llama.cpp's `token_ids_full_vocab`).
    full_vocab: Vec<Token>,
}

impl Sampling {
    pub fn new(n_seq: usize, n_vocab: usize) -> Sampling {
        Sampling { chains: vec![ptr::null_mut(); n_seq], rows: None, full_vocab: (0..n_vocab as Token).collect() }
    }

    fn any(&self) -> bool {
        self.chains.iter().any(|c| !c.is_null())
    }

    /// The chain attached to sequence `seq`, if any.
    pub fn chain_of(&self, seq: usize) -> Option<*mut Sampler> {
        self.chains.get(seq).copied().filter(|c| !c.is_null())
    }

    /// Refuses a batch that gives a sequence with a chain more than `max_per_seq` output rows
    /// (`outputs_by_seq`: the sequence of each output row); the reason, as llama.cpp logs it.
    pub fn check_outputs(&self, outputs_by_seq: &[usize], max_per_seq: u32) -> Result<(), String> {
        let mut counts = vec![0u32; self.chains.len()];
        for &s in outputs_by_seq {
            counts[s] += 1;
            if self.chain_of(s).is_some() && counts[s] > max_per_seq {
                return Err(format!("backend sampling supports at most {max_per_seq} outputs per sequence (seq_id {s} had {})", counts[s]));
            }
        }
        Ok(())
    }

    /// Runs each output row's chain on its logits (`outputs`: rows x n_vocab, in batch order;
    /// `outputs_by_seq`: each row's sequence). Only this library's own samplers run here.
    pub unsafe fn run(&mut self, outputs: &[f32], n_vocab: usize, outputs_by_seq: &[usize]) {
        if !self.any() {
            self.rows = None;
            return;
        }
        let rows = outputs_by_seq
            .iter()
            .enumerate()
            .map(|(r, &s)| match self.chain_of(s) {
                Some(chain) => backend::run(chain, &outputs[r * n_vocab..(r + 1) * n_vocab]),
                None => RowSample::none(),
            })
            .collect();
        self.rows = Some(rows);
    }

    /// After the outputs are dropped (`llama_memory_clear`, a restored state): no row.
    pub fn clear_rows(&mut self) {
        if let Some(rows) = &mut self.rows {
            rows.clear();
        }
    }

    /// For a context made with samplers in its params: llama.cpp's buffers exist from the
    /// start, with no row.
    pub fn start_empty(&mut self) {
        if self.any() {
            self.rows = Some(Vec::new());
        }
    }
}

/// Attaches `smpl` (a chain; NULL detaches) to sequence `seq_id`, as llama.cpp's
/// `set_sampler`: true when attached or detached; false, with a warning, for a sampler that
/// is not a chain or an empty chain (it is detached then), or a seq_id the context lacks.
pub unsafe fn set(f: &str, c: &mut State, seq_id: SeqId, smpl: *mut Sampler) -> bool {
    let n_seq = c.sampling.chains.len();
    let Some(i) = usize::try_from(seq_id).ok().filter(|&i| i < n_seq) else {
        error(f, &format!("seq_id {seq_id}: this context has sequences 0 to {}", n_seq - 1));
        return false;
    };
    if smpl.is_null() {
        c.sampling.chains[i] = ptr::null_mut();
        return true;
    }
    let n = crate::sampler::llama_sampler_chain_n_quiet(smpl);
    if n.unwrap_or(0) == 0 {
        let name = crate::sampler::name_of(smpl);
        log(Level::Warn, &format!("{f}: sampler '{name}' for seq_id = {seq_id}, cannot be offloaded to the backend (it must be a non-empty llama_sampler_chain)"));
        c.sampling.chains[i] = ptr::null_mut();
        return false;
    }
    backend::init(smpl);
    c.sampling.chains[i] = smpl;
    true
}

/// The context params' `samplers` (`n` configs): each must be a chain, else the context is
/// refused (llama.cpp throws "the backend samplers must be of type llama_sampler_chain").
pub unsafe fn set_from_params(f: &str, c: &mut State, configs: *const c_void, n: usize) -> Result<(), String> {
    if n == 0 {
        return Ok(());
    }
    if configs.is_null() {
        return Err(format!("samplers is NULL with n_samplers {n}"));
    }
    let configs = std::slice::from_raw_parts(configs as *const SamplerSeqConfig, n);
    for cfg in configs {
        if crate::sampler::llama_sampler_chain_n_quiet(cfg.sampler).is_none() {
            return Err("the backend samplers must be of type llama_sampler_chain".into());
        }
        if set(f, c, cfg.seq_id, cfg.sampler) {
            let n = crate::sampler::llama_sampler_chain_n_quiet(cfg.sampler).unwrap_or(0);
            log(Level::Info, &format!("{f}: setting backend sampler for seq_id {} (n = {n})", cfg.seq_id));
        }
    }
    c.sampling.start_empty();
    Ok(())
}

/// What `llama_sampler_sample` starts from for batch index `idx`: the token a chain selected
/// at decode, or the candidates it left (ids, logits, probabilities), or None to use the raw
/// logits.
pub enum Start {
    Token(Token),
    Candidates(Vec<TokenData>),
}

pub fn start_for_sampling(c: &State, idx: i32) -> Option<Start> {
    let rows = c.sampling.rows.as_ref()?;
    let row = rows.get(c.output_row(idx, rows.len())?)?;
    if row.sampled != -1 {
        return Some(Start::Token(row.sampled));
    }
    let ids = if row.candidates.is_empty() { &c.sampling.full_vocab[..] } else { &row.candidates[..] };
    let data = if !row.probs.is_empty() {
        (0..row.probs.len()).map(|i| TokenData { id: ids[i], logit: row.logits[i], p: row.probs[i] }).collect()
    } else if !row.logits.is_empty() {
        (0..row.logits.len()).map(|i| TokenData { id: ids[i], logit: row.logits[i], p: 0.0 }).collect()
    } else {
        return None;
    };
    Some(Start::Candidates(data))
}

#[no_mangle]
pub unsafe extern "C" fn llama_set_sampler(ctx: *mut LlamaContext, seq_id: SeqId, smpl: *mut Sampler) -> bool {
    const F: &str = "llama_set_sampler";
    guard(F, false, || match hold(F, ctx) {
        Some(mut c) => set(F, &mut c, seq_id, smpl),
        None => false,
    })
}

/// The last decode's row for batch index `i`: Err(true) when the decode had no chain
/// attached (no results, nothing logged), Err(false) for an index with no output row (logged).
fn row_of<'a>(f: &str, c: &'a State, i: i32) -> Result<&'a RowSample, bool> {
    let Some(rows) = c.sampling.rows.as_ref() else { return Err(true) };
    match c.output_row(i, rows.len()).and_then(|r| rows.get(r)) {
        Some(row) => Ok(row),
        None => {
            error(f, &format!("invalid backend sampled id {i}: the last batch has {} output rows", rows.len()));
            Err(false)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_token_ith(ctx: *mut LlamaContext, i: i32) -> Token {
    const F: &str = "llama_get_sampled_token_ith";
    guard(F, -1, || {
        let Some(c) = hold(F, ctx) else { return -1 };
        row_of(F, &c, i).map_or(-1, |r| r.sampled)
    })
}

/// A row's vector as a pointer: NULL when empty (count 0).
fn ptr_of<T>(v: &[T]) -> *mut T {
    if v.is_empty() {
        ptr::null_mut()
    } else {
        v.as_ptr() as *mut T
    }
}

macro_rules! sampled_getters {
    ($get:ident, $count:ident, $field:ident, $ty:ty, $no_data_count:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $get(ctx: *mut LlamaContext, i: i32) -> *mut $ty {
            guard(stringify!($get), ptr::null_mut(), || {
                let Some(c) = hold(stringify!($get), ctx) else { return ptr::null_mut() };
                row_of(stringify!($get), &c, i).map_or(ptr::null_mut(), |r| ptr_of(&r.$field))
            })
        }

        #[no_mangle]
        pub unsafe extern "C" fn $count(ctx: *mut LlamaContext, i: i32) -> u32 {
            guard(stringify!($count), 0, || {
                let Some(c) = hold(stringify!($count), ctx) else { return 0 };
                match row_of(stringify!($count), &c, i) {
                    Ok(r) => r.$field.len() as u32,
                    Err(true) => $no_data_count(&c),
                    Err(false) => 0,
                }
            })
        }
    };
}

sampled_getters!(llama_get_sampled_probs_ith, llama_get_sampled_probs_count_ith, probs, f32, |_c: &State| 0);
// llama.cpp: with no backend results, the logits count is the vocabulary's size.
sampled_getters!(llama_get_sampled_logits_ith, llama_get_sampled_logits_count_ith, logits, f32, |c: &State| c.sampling.full_vocab.len() as u32);

/// The candidates' token ids of batch index `i`; llama.cpp falls back to the whole
/// vocabulary's ids (0..n_vocab) whenever a row has none, with no log line.
#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_candidates_ith(ctx: *mut LlamaContext, i: i32) -> *mut Token {
    const F: &str = "llama_get_sampled_candidates_ith";
    guard(F, ptr::null_mut(), || {
        let Some(c) = hold(F, ctx) else { return ptr::null_mut() };
        let row = c.sampling.rows.as_ref().and_then(|rows| c.output_row(i, rows.len()).and_then(|r| rows.get(r)));
        match row {
            Some(r) if !r.candidates.is_empty() => ptr_of(&r.candidates),
            _ => ptr_of(&c.sampling.full_vocab),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn llama_get_sampled_candidates_count_ith(ctx: *mut LlamaContext, i: i32) -> u32 {
    const F: &str = "llama_get_sampled_candidates_count_ith";
    guard(F, 0, || {
        let Some(c) = hold(F, ctx) else { return 0 };
        row_of(F, &c, i).map_or(0, |r| r.candidates.len() as u32)
    })
}
