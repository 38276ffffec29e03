//! LoRA adapters through the facade on the tiny llama fixture and its PEFT-made adapter
//! (tests/fixtures/tiny/lora_llama: alpha 8, r 4, all seven maps; adapter.gguf from
//! tests/fixtures/lora_to_gguf.py): llama_adapter_lora_init and its metadata,
//! llama_set_adapters_lora at scales 1 and 0.5 within 1e-4 of PEFT's logits and equal to
//! packlm's bit for bit; a set changed while a sequence holds positions recomputes them (the
//! logits then equal a context that ran under the new set from the start); the older
//! single-adapter calls; bad input (another base, NULL, another model's adapter) refused
//! with a log line.

mod common;

use std::ffi::{c_char, CString};
use std::ptr;

use common::*;
use llama::abi::{ContextParams, Token};
use llama::context::*;
use llama::lora::*;
use llama::model::{llama_model_free, LlamaModel};
use packlm::{Adapter, Model, Want};

const N_VOCAB: usize = 300;

fn golden() -> (Vec<Token>, serde_json::Value) {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(tiny("lora_llama").join("lora.json")).unwrap()).unwrap();
    let tokens = v["tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as Token).collect();
    (tokens, v)
}

fn read_f32(name: &str) -> Vec<f32> {
    std::fs::read(tiny("lora_llama").join(name)).unwrap().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

fn adapter_path() -> CString {
    CString::new(tiny("lora_llama").join("adapter.gguf").to_str().unwrap()).unwrap()
}

unsafe fn init(m: *mut LlamaModel, path: &std::path::Path) -> *mut LlamaLora {
    let p = CString::new(path.to_str().unwrap()).unwrap();
    llama_adapter_lora_init(m, p.as_ptr())
}

/// Every row's logits of `tokens` decoded at positions from `start` in sequence 0.
unsafe fn all_logits(c: *mut LlamaContext, tokens: &[Token], start: i32) -> Vec<f32> {
    let e: Vec<_> = tokens.iter().enumerate().map(|(i, &t)| (t, start + i as i32, 0, true)).collect();
    assert_eq!(decode_entries(c, &e), 0);
    floats(llama_get_logits(c), tokens.len() * N_VOCAB, "logits")
}

unsafe fn set_one(c: *mut LlamaContext, a: *mut LlamaLora, scale: f32) -> i32 {
    let adapters = [a as *const LlamaLora];
    llama_set_adapters_lora(c, adapters.as_ptr(), 1, [scale].as_ptr())
}

/// packlm's logits of `tokens` under the GGUF adapter at `scale`.
fn packlm_logits(tokens: &[Token], scale: f32) -> Vec<f32> {
    let model = Model::open(tiny("llama")).unwrap();
    let a = Adapter::open(&model, tiny("lora_llama").join("adapter.gguf")).unwrap();
    let mut s = model.session().unwrap();
    s.set_adapters(&[(a, scale)]).unwrap();
    s.step_batch(&tokens.iter().map(|&t| t as u32).collect::<Vec<_>>(), Want::All).unwrap()
}

unsafe fn text_of(f: unsafe extern "C" fn(*const LlamaLora, i32, *mut c_char, usize) -> i32, a: *const LlamaLora, i: i32) -> (i32, String) {
    let mut buf = [0 as c_char; 64];
    let n = f(a, i, buf.as_mut_ptr(), buf.len());
    (n, std::ffi::CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned())
}

#[test]
fn a_gguf_adapter_gives_pefts_logits() { unsafe {
    let m = model();
    let a = llama_adapter_lora_init(m, adapter_path().as_ptr());
    assert!(!a.is_null());
    // Its metadata, as llama.cpp gives a GGUF's scalars (floats as "%f").
    let n = llama_adapter_meta_count(a);
    let keys: Vec<String> = (0..n).map(|i| text_of(llama_adapter_meta_key_by_index, a, i).1).collect();
    for k in ["general.architecture", "general.type", "adapter.type", "adapter.lora.alpha"] {
        assert!(keys.iter().any(|x| x == k), "{k} in {keys:?}");
    }
    let mut buf = [0 as c_char; 16];
    assert_eq!(llama_adapter_meta_val_str(a, c"adapter.lora.alpha".as_ptr(), buf.as_mut_ptr(), 16), 8);
    assert_eq!(std::ffi::CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), "8.000000");
    let i = keys.iter().position(|k| k == "adapter.type").unwrap() as i32;
    assert_eq!(text_of(llama_adapter_meta_val_str_by_index, a, i), (4, "lora".into()));
    // Cut to the buffer, the full length returned; absent and out of range: -1, cleared.
    assert_eq!(llama_adapter_meta_val_str(a, c"general.type".as_ptr(), buf.as_mut_ptr(), 4), 7);
    assert_eq!(std::ffi::CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), "ada");
    assert_eq!(llama_adapter_meta_val_str(a, c"no.such.key".as_ptr(), buf.as_mut_ptr(), 16), -1);
    assert_eq!(buf[0], 0);
    assert_eq!(text_of(llama_adapter_meta_key_by_index, a, n), (-1, String::new()));
    assert_eq!(text_of(llama_adapter_meta_val_str_by_index, a, -1), (-1, String::new()));
    // Not an aLoRA.
    assert_eq!(llama_adapter_get_alora_n_invocation_tokens(a), 0);
    assert!(llama_adapter_get_alora_invocation_tokens(a).is_null());

    let (tokens, _) = golden();
    let c = context(m);
    let base = all_logits(c, &tokens, 0);
    for (scale, file) in [(1.0f32, "logits_scale1.f32"), (0.5, "logits_scale0.5.f32")] {
        llama_memory_clear(llama_get_memory(c), true);
        assert_eq!(set_one(c, a, scale), 0);
        let got = all_logits(c, &tokens, 0);
        let d = max_abs_diff(&got, &read_f32(file));
        assert!(d <= 1e-4, "scale {scale}: max-abs {d} from PEFT");
        assert_eq!(bits(&got), bits(&packlm_logits(&tokens, scale)), "scale {scale}: packlm's bits");
    }
    // Setting the same set again changes nothing; clearing it gives the base back.
    assert_eq!(set_one(c, a, 0.5), 0);
    llama_memory_clear(llama_get_memory(c), true);
    assert_eq!(llama_set_adapters_lora(c, ptr::null(), 0, ptr::null()), 0);
    assert_eq!(bits(&all_logits(c, &tokens, 0)), bits(&base));
    llama_free(c);
    llama_adapter_lora_free(a);
    llama_model_free(m);
}}

#[test]
fn a_set_changed_on_held_positions_recomputes_them() { unsafe {
    capture_log();
    let m = model();
    let a = llama_adapter_lora_init(m, adapter_path().as_ptr());
    let (tokens, _) = golden();
    let (head, tail) = tokens.split_at(12);
    // Under the adapter from the start, in one context.
    let c0 = context(m);
    assert_eq!(set_one(c0, a, 1.0), 0);
    let want = all_logits(c0, &tokens, 0);
    llama_free(c0);
    // The head without it, then the adapter set on the 12 held positions, then the tail.
    let c = context(m);
    all_logits(c, head, 0);
    assert_eq!(set_one(c, a, 1.0), 0);
    assert!(logged(&["llama_set_adapters_lora", "0 (12 positions)", "recomputed under the new adapters"]));
    assert_eq!(llama_memory_seq_pos_max(llama_get_memory(c), 0), 11);
    let got = all_logits(c, tail, 12);
    assert_eq!(bits(&got), bits(&want[12 * N_VOCAB..]), "the tail's logits are those of the whole under the adapter");
    // Cleared on held positions: the base's logits of the same tokens.
    llama_memory_seq_rm(llama_get_memory(c), 0, 12, -1);
    llama_clear_adapter_lora(c);
    let base_ctx = context(m);
    let base = all_logits(base_ctx, &tokens, 0);
    assert_eq!(bits(&all_logits(c, tail, 12)), bits(&base[12 * N_VOCAB..]));
    llama_free(base_ctx);
    // The handle freed while the context uses the adapter: the context keeps it.
    llama_memory_clear(llama_get_memory(c), true);
    assert_eq!(llama_set_adapter_lora(c, a, 1.0), 0);
    llama_adapter_lora_free(a);
    assert_eq!(bits(&all_logits(c, &tokens, 0)), bits(&want));
    llama_free(c);
    llama_model_free(m);
}}

#[test]
fn the_older_single_adapter_calls() { unsafe {
    capture_log();
    let m = model();
    let a = llama_adapter_lora_init(m, adapter_path().as_ptr());
    let (tokens, _) = golden();
    let c = context(m);
    assert_eq!(llama_set_adapter_lora(c, a, 0.5), 0);
    assert_eq!(bits(&all_logits(c, &tokens, 0)), bits(&packlm_logits(&tokens, 0.5)));
    assert_eq!(llama_rm_adapter_lora(c, a), 0);
    assert_eq!(llama_rm_adapter_lora(c, a), -1);
    assert!(logged(&["llama_rm_adapter_lora", "does not have this adapter"]));
    llama_memory_clear(llama_get_memory(c), true);
    let base = context(m);
    assert_eq!(bits(&all_logits(c, &tokens, 0)), bits(&all_logits(base, &tokens, 0)));
    llama_free(base);
    llama_free(c);
    // Not freed by the client: the model frees it.
    llama_model_free(m);
}}

#[test]
fn bad_adapters_are_refused() { unsafe {
    capture_log();
    let m = model();
    // Another base: an adapter for qwen3's architecture, and the same tensors labelled llama
    // (every lora_b's shape is qwen3's: refused naming the tensor).
    assert!(init(m, &tiny("lora_other_base").join("adapter.gguf")).is_null());
    assert!(logged(&["llama_adapter_lora_init", "architecture qwen3"]));
    assert!(init(m, &tiny("lora_other_base").join("adapter_as_llama.gguf")).is_null());
    assert!(logged(&["llama_adapter_lora_init", "adapter_as_llama.gguf", "lora_b"]));
    assert!(init(m, &tiny("lora_llama").join("missing.gguf")).is_null());
    assert!(llama_adapter_lora_init(m, ptr::null()).is_null());
    assert!(logged(&["llama_adapter_lora_init", "path_lora is NULL"]));
    assert!(llama_adapter_lora_init(ptr::null_mut(), adapter_path().as_ptr()).is_null());
    // NULL adapters and contexts.
    llama_adapter_lora_free(ptr::null_mut());
    assert_eq!(llama_adapter_meta_count(ptr::null()), -1);
    assert_eq!(llama_adapter_meta_val_str(ptr::null(), c"general.type".as_ptr(), ptr::null_mut(), 0), -1);
    assert_eq!(llama_adapter_get_alora_n_invocation_tokens(ptr::null()), 0);
    let c = context(m);
    assert_eq!(llama_set_adapters_lora(c, ptr::null(), 1, ptr::null()), -1);
    assert!(logged(&["llama_set_adapters_lora", "NULL adapters or scales"]));
    let nulls = [ptr::null::<LlamaLora>()];
    assert_eq!(llama_set_adapters_lora(c, nulls.as_ptr(), 1, [1.0f32].as_ptr()), -1);
    assert_eq!(llama_set_adapter_lora(ptr::null_mut(), ptr::null(), 1.0), -1);
    // An adapter of another model (the same fixture opened twice), a scale that is not finite.
    let m2 = model();
    let other = llama_adapter_lora_init(m2, adapter_path().as_ptr());
    assert!(!other.is_null());
    assert_eq!(set_one(c, other, 1.0), -1);
    assert!(logged(&["llama_set_adapters_lora", "loaded for another model"]));
    let a = llama_adapter_lora_init(m, adapter_path().as_ptr());
    assert_eq!(set_one(c, a, f32::NAN), -1);
    assert!(logged(&["llama_set_adapters_lora", "is not finite"]));
    // Nothing was set: the base's logits.
    let (tokens, _) = golden();
    let base = context(m);
    assert_eq!(bits(&all_logits(c, &tokens, 0)), bits(&all_logits(base, &tokens, 0)));
    llama_free(base);
    llama_free(c);
    llama_model_free(m2);
    llama_model_free(m);
}}

#[test]
fn adapters_apply_to_every_sequence_and_to_embeddings() { unsafe {
    let m = model();
    let a = llama_adapter_lora_init(m, adapter_path().as_ptr());
    let (tokens, _) = golden();
    let params = ContextParams { n_ctx: 0, n_seq_max: 2, kv_unified: true, embeddings: true, pooling_type: 1, ..llama_context_default_params() };
    let c = llama_init_from_model(m, params);
    assert_eq!(set_one(c, a, 1.0), 0);
    let e: Vec<_> = tokens.iter().enumerate().map(|(i, &t)| (t, i as i32, 1, true)).collect();
    assert_eq!(decode_entries(c, &e), 0);
    let want = packlm_logits(&tokens, 1.0);
    assert_eq!(bits(&floats(llama_get_logits(c), tokens.len() * N_VOCAB, "logits")), bits(&want), "sequence 1 runs under the adapter");
    let model = Model::open(tiny("llama")).unwrap();
    let adapter = Adapter::open(&model, tiny("lora_llama").join("adapter.gguf")).unwrap();
    let mut s = model.session().unwrap();
    s.set_adapters(&[(adapter, 1.0)]).unwrap();
    let ids: Vec<u32> = tokens.iter().map(|&t| t as u32).collect();
    let mean = s.embed(&[&ids], &packlm::EmbedOptions { pooling: Some(packlm::Pooling::Mean), normalize: Some(false) }).unwrap();
    assert_eq!(bits(&floats(llama::embeddings::llama_get_embeddings_seq(c, 1), 64, "a pooled vector")), bits(&mean.values));
    llama_free(c);
    llama_model_free(m);
}}
