//! The structs llama.cpp's C API passes by value or by pointer, laid out as llama.h of
//! llama.cpp as shipped with llama-cpp-python 0.3.36 declares them (field order and C types;
//! `tests/llama/layout.sh` checks every size and offset against a C compiler's).

use std::ffi::{c_char, c_void};

pub type Token = i32;
pub type Pos = i32;
pub type SeqId = i32;

/// `struct llama_model_params`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModelParams {
    pub devices: *mut c_void,
    pub tensor_buft_overrides: *const c_void,
    pub n_gpu_layers: i32,
    pub split_mode: i32,
    pub load_mode: i32,
    pub lazy_mode: i32,
    pub main_gpu: i32,
    pub tensor_split: *const f32,
    pub progress_callback: Option<unsafe extern "C" fn(f32, *mut c_void) -> bool>,
    pub progress_callback_user_data: *mut c_void,
    pub kv_overrides: *const c_void,
    pub vocab_only: bool,
    pub check_tensors: bool,
    pub use_extra_bufts: bool,
    pub no_host: bool,
    pub no_alloc: bool,
    pub load_mtp: bool,
}

/// `struct llama_context_params`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ContextParams {
    pub n_ctx: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub n_seq_max: u32,
    pub n_rs_seq: u32,
    pub n_outputs_max: u32,
    pub n_outputs_max_per_seq: u32,
    pub n_threads: i32,
    pub n_threads_batch: i32,
    pub ctx_type: i32,
    pub rope_scaling_type: i32,
    pub pooling_type: i32,
    pub attention_type: i32,
    pub flash_attn_type: i32,
    pub rope_freq_base: f32,
    pub rope_freq_scale: f32,
    pub yarn_ext_factor: f32,
    pub yarn_attn_factor: f32,
    pub yarn_beta_fast: f32,
    pub yarn_beta_slow: f32,
    pub yarn_orig_ctx: u32,
    pub defrag_thold: f32,
    pub cb_eval: *mut c_void,
    pub cb_eval_user_data: *mut c_void,
    pub type_k: i32,
    pub type_v: i32,
    pub abort_callback: *mut c_void,
    pub abort_callback_data: *mut c_void,
    pub embeddings: bool,
    pub offload_kqv: bool,
    pub no_perf: bool,
    pub op_offload: bool,
    pub swa_full: bool,
    pub kv_unified: bool,
    pub samplers: *mut c_void,
    pub n_samplers: usize,
    pub ctx_other: *mut c_void,
}

/// `struct llama_batch`: parallel arrays of `n_tokens` entries.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Batch {
    pub n_tokens: i32,
    pub token: *mut Token,
    pub embd: *mut f32,
    pub pos: *mut Pos,
    pub n_seq_id: *mut i32,
    pub seq_id: *mut *mut SeqId,
    pub logits: *mut i8,
}

/// `struct llama_sampler_chain_params`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SamplerChainParams {
    pub no_perf: bool,
}

/// `struct llama_token_data`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TokenData {
    pub id: Token,
    pub logit: f32,
    pub p: f32,
}

/// `struct llama_token_data_array`.
#[repr(C)]
pub struct TokenDataArray {
    pub data: *mut TokenData,
    pub size: usize,
    pub selected: i64,
    pub sorted: bool,
}

/// `struct llama_sampler_i`: a sampler's vtable. Any entry may be NULL.
#[repr(C)]
pub struct SamplerI {
    pub name: Option<unsafe extern "C" fn(*const Sampler) -> *const c_char>,
    pub accept: Option<unsafe extern "C" fn(*mut Sampler, Token)>,
    pub apply: Option<unsafe extern "C" fn(*mut Sampler, *mut TokenDataArray)>,
    pub reset: Option<unsafe extern "C" fn(*mut Sampler)>,
    pub clone: Option<unsafe extern "C" fn(*const Sampler) -> *mut Sampler>,
    pub free: Option<unsafe extern "C" fn(*mut Sampler)>,
    pub backend_init: *mut c_void,
    pub backend_accept: *mut c_void,
    pub backend_apply: *mut c_void,
    pub backend_set_input: *mut c_void,
    pub backend_reset: *mut c_void,
    pub copy_state: *mut c_void,
}

/// `struct llama_sampler`.
#[repr(C)]
pub struct Sampler {
    pub iface: *const SamplerI,
    pub ctx: *mut c_void,
}

/// `struct llama_logit_bias`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LogitBias {
    pub token: Token,
    pub bias: f32,
}

/// `struct llama_chat_message`.
#[repr(C)]
pub struct ChatMessage {
    pub role: *const c_char,
    pub content: *const c_char,
}

/// `struct llama_model_quantize_params`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModelQuantizeParams {
    pub nthread: i32,
    pub ftype: i32,
    pub output_tensor_type: i32,
    pub token_embedding_type: i32,
    pub allow_requantize: bool,
    pub quantize_output_tensor: bool,
    pub only_copy: bool,
    pub pure: bool,
    pub keep_split: bool,
    pub dry_run: bool,
    pub imatrix: *const c_void,
    pub kv_overrides: *const c_void,
    pub tt_overrides: *const c_void,
    pub prune_layers: *const i32,
    pub max_buf_size: usize,
}

impl ModelQuantizeParams {
    /// All fields zero or NULL: what an unsupported call that returns this struct gives.
    pub const ZERO: ModelQuantizeParams = ModelQuantizeParams {
        nthread: 0,
        ftype: 0,
        output_tensor_type: 0,
        token_embedding_type: 0,
        allow_requantize: false,
        quantize_output_tensor: false,
        only_copy: false,
        pure: false,
        keep_split: false,
        dry_run: false,
        imatrix: std::ptr::null(),
        kv_overrides: std::ptr::null(),
        tt_overrides: std::ptr::null(),
        prune_layers: std::ptr::null(),
        max_buf_size: 0,
    };
}

/// `struct llama_perf_context_data`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct PerfContextData {
    pub t_start_ms: f64,
    pub t_load_ms: f64,
    pub t_p_eval_ms: f64,
    pub t_eval_ms: f64,
    pub n_p_eval: i32,
    pub n_eval: i32,
    pub n_reused: i32,
}

/// `struct llama_perf_sampler_data`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct PerfSamplerData {
    pub t_sample_ms: f64,
    pub n_sample: i32,
}

/// `struct llama_embd`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Embd {
    pub data: *const f32,
    pub n_rows: usize,
    pub n_embd: usize,
}

/// `struct llama_opt_params`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OptParams {
    pub n_ctx_train: u32,
    pub param_filter: *mut c_void,
    pub param_filter_ud: *mut c_void,
    pub get_opt_pars: *mut c_void,
    pub get_opt_pars_ud: *mut c_void,
    pub optimizer_type: i32,
}

/// `struct llama_sampler_seq_config`: a sampler chain for one sequence (the context params'
/// `samplers`).
#[repr(C)]
pub struct SamplerSeqConfig {
    pub seq_id: SeqId,
    pub sampler: *mut Sampler,
}

/// A struct's C name, size and field offsets, for the layout test.
pub struct Layout {
    pub name: &'static str,
    pub size: usize,
    pub fields: Vec<(&'static str, usize)>,
}

/// Every struct above, for the layout test (`llama/examples/layout.rs`).
pub fn layouts() -> Vec<Layout> {
    use std::mem::{offset_of, size_of};
    macro_rules! layout {
        ($c:literal, $t:ty, $($f:ident),*) => {
            Layout { name: $c, size: size_of::<$t>(), fields: vec![$((stringify!($f), offset_of!($t, $f))),*] }
        };
    }
    vec![
        layout!("llama_model_params", ModelParams, devices, tensor_buft_overrides, n_gpu_layers, split_mode, load_mode, lazy_mode, main_gpu, tensor_split, progress_callback, progress_callback_user_data, kv_overrides, vocab_only, check_tensors, use_extra_bufts, no_host, no_alloc, load_mtp),
        layout!("llama_context_params", ContextParams, n_ctx, n_batch, n_ubatch, n_seq_max, n_rs_seq, n_outputs_max, n_outputs_max_per_seq, n_threads, n_threads_batch, ctx_type, rope_scaling_type, pooling_type, attention_type, flash_attn_type, rope_freq_base, rope_freq_scale, yarn_ext_factor, yarn_attn_factor, yarn_beta_fast, yarn_beta_slow, yarn_orig_ctx, defrag_thold, cb_eval, cb_eval_user_data, type_k, type_v, abort_callback, abort_callback_data, embeddings, offload_kqv, no_perf, op_offload, swa_full, kv_unified, samplers, n_samplers, ctx_other),
        layout!("llama_batch", Batch, n_tokens, token, embd, pos, n_seq_id, seq_id, logits),
        layout!("llama_sampler_chain_params", SamplerChainParams, no_perf),
        layout!("llama_token_data", TokenData, id, logit, p),
        layout!("llama_token_data_array", TokenDataArray, data, size, selected, sorted),
        layout!("llama_sampler_i", SamplerI, name, accept, apply, reset, clone, free, backend_init, backend_accept, backend_apply, backend_set_input, backend_reset, copy_state),
        layout!("llama_sampler", Sampler, iface, ctx),
        layout!("llama_sampler_seq_config", SamplerSeqConfig, seq_id, sampler),
        layout!("llama_logit_bias", LogitBias, token, bias),
        layout!("llama_chat_message", ChatMessage, role, content),
        layout!("llama_model_quantize_params", ModelQuantizeParams, nthread, ftype, output_tensor_type, token_embedding_type, allow_requantize, quantize_output_tensor, only_copy, pure, keep_split, dry_run, imatrix, kv_overrides, tt_overrides, prune_layers, max_buf_size),
        layout!("llama_perf_context_data", PerfContextData, t_start_ms, t_load_ms, t_p_eval_ms, t_eval_ms, n_p_eval, n_eval, n_reused),
        layout!("llama_perf_sampler_data", PerfSamplerData, t_sample_ms, n_sample),
        layout!("llama_embd", Embd, data, n_rows, n_embd),
        layout!("llama_opt_params", OptParams, n_ctx_train, param_filter, param_filter_ud, get_opt_pars, get_opt_pars_ud, optimizer_type),
    ]
}
