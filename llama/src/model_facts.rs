//! The model facts llama.cpp reads from its hyperparameters (llama-model.cpp's
//! `llama_model_*` getters), answered from packlm's model and its metadata.

use std::ffi::c_char;
use std::ptr;

use crate::log::{error, guard};
use crate::model::{model_fact, model_ref, LlamaModel};

/// `enum llama_rope_type`.
pub const ROPE_TYPE_NONE: i32 = -1;
pub const ROPE_TYPE_NORM: i32 = 0;
/// `GGML_ROPE_TYPE_NEOX`.
pub const ROPE_TYPE_NEOX: i32 = 2;

/// llama.cpp's rope type of each architecture packlm opens (llama-model.cpp,
/// `llama_model_rope_type`): NORM rotates consecutive pairs, NEOX pairs n_rot/2 apart. A
/// Hugging Face Mistral folder is named "mistral" here; llama.cpp's converter writes it as
/// "llama".
const ROPE_TYPES: [(&str, i32); 12] = [
    ("llama", ROPE_TYPE_NORM),
    ("mistral", ROPE_TYPE_NORM),
    ("mixtral", ROPE_TYPE_NORM),
    ("qwen2", ROPE_TYPE_NEOX),
    ("qwen3", ROPE_TYPE_NEOX),
    ("qwen3moe", ROPE_TYPE_NEOX),
    ("qwen2moe", ROPE_TYPE_NEOX),
    ("gpt-oss", ROPE_TYPE_NEOX),
    ("gemma", ROPE_TYPE_NEOX),
    ("gemma2", ROPE_TYPE_NEOX),
    ("gemma3", ROPE_TYPE_NEOX),
    ("gemma4", ROPE_TYPE_NEOX),
];

/// `llama_model_rope_type`: the architecture's rope type; NONE and a log line for an
/// architecture not in the table (llama.cpp aborts on an unknown one).
#[no_mangle]
pub unsafe extern "C" fn llama_model_rope_type(model: *const LlamaModel) -> i32 {
    const F: &str = "llama_model_rope_type";
    guard(F, ROPE_TYPE_NONE, || {
        let Some(m) = model_ref(F, model) else { return ROPE_TYPE_NONE };
        let arch = m.arch();
        match ROPE_TYPES.iter().find(|r| r.0 == arch) {
            Some(r) => r.1,
            None => {
                error(F, &format!("no rope type known for architecture {arch}"));
                ROPE_TYPE_NONE
            }
        }
    })
}

/// The integer under `<arch>.<suffix>` in the metadata.
fn arch_int(m: &LlamaModel, suffix: &str) -> Option<i64> {
    m.meta_value(&format!("{}.{suffix}", m.arch())).and_then(|v| v.parse().ok())
}

// Models without deepstack: llama.cpp's n_embd_inp() is n_embd. n_embd_out() is the width of
// a pooled embedding: the pack's Dense projection's where it has one, else n_embd.
model_fact!(llama_model_n_embd_inp, i32, -1, |m| m.engine.n_embd() as i32);
model_fact!(llama_model_n_embd_out, i32, -1, |m| m.engine.n_embd_out() as i32);
// Every weight tensor of the pack: its bytes as stored, its elements (llama.cpp sums
// ggml_nbytes and ggml_nelements over the model's tensors).
model_fact!(llama_model_size, u64, 0, |m| m.engine.size_bytes());
model_fact!(llama_model_n_params, u64, 0, |m| m.engine.n_params());
// The window packlm's sliding-window layers attend over (the GGUF's
// `<arch>.attention.sliding_window`, a folder's `sliding_window`); 0 when none slides.
model_fact!(llama_model_n_swa, i32, -1, |m| i32::try_from(m.engine.sliding_window()).unwrap_or(i32::MAX));
// packlm runs no multi-token-prediction (next-n) layers and no classifier head.
model_fact!(llama_model_n_layer_nextn, i32, -1, |_m| 0);
model_fact!(llama_model_n_cls_out, u32, 0, |_m| 0);
// `<arch>.decoder_start_token_id` (set by encoder-decoder models), else LLAMA_TOKEN_NULL.
model_fact!(llama_model_decoder_start_token, i32, -1, |m| arch_int(m, "decoder_start_token_id").and_then(|t| i32::try_from(t).ok()).unwrap_or(-1));

/// `llama_model_ftype`: `general.file_type`. A file without it (and a folder) gives -1 and a
/// log line: llama.cpp guesses from the tensor types, which packlm does not expose.
#[no_mangle]
pub unsafe extern "C" fn llama_model_ftype(model: *const LlamaModel) -> i32 {
    const F: &str = "llama_model_ftype";
    guard(F, -1, || {
        let Some(m) = model_ref(F, model) else { return -1 };
        match m.meta_value("general.file_type").and_then(|v| v.parse::<i32>().ok()) {
            Some(t) => t,
            None => {
                error(F, "the model states no general.file_type");
                -1
            }
        }
    })
}

/// `llama_model_cls_label`: NULL, as llama.cpp for an index past its labels (there are none).
#[no_mangle]
pub unsafe extern "C" fn llama_model_cls_label(model: *const LlamaModel, _i: u32) -> *const c_char {
    let _ = model_ref("llama_model_cls_label", model);
    ptr::null()
}
