//! The hyperparameter getters on the tiny fixtures: expected values are each fixture's
//! config.json (`sliding_window`, `hidden_size`) and llama.cpp's rope type of its architecture
//! (llama-model.cpp, `llama_model_rope_type`).

mod common;

use std::ffi::CString;

use llama::model::{llama_model_default_params, llama_model_free, llama_model_load_from_file, LlamaModel};
use llama::model_facts::*;

fn open(name: &str) -> *mut LlamaModel {
    let path = CString::new(format!("{}/../tests/fixtures/tiny/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let m = unsafe { llama_model_load_from_file(path.as_ptr(), llama_model_default_params()) };
    assert!(!m.is_null(), "{name} opens");
    m
}

#[test]
fn rope_type_and_sliding_window_per_fixture() {
    // (fixture, rope type, its config.json's sliding_window as the layers use it)
    let cases = [
        ("llama", ROPE_TYPE_NORM, 0),
        ("mistral", ROPE_TYPE_NORM, 5),
        ("qwen2", ROPE_TYPE_NEOX, 0),
        ("qwen3", ROPE_TYPE_NEOX, 0),
        ("gemma", ROPE_TYPE_NEOX, 0),
        ("gemma2", ROPE_TYPE_NEOX, 6),
        ("gemma3", ROPE_TYPE_NEOX, 5),
        ("gemma3_pattern", ROPE_TYPE_NEOX, 4),
        ("qwen3_moe", ROPE_TYPE_NEOX, 0),
        ("qwen2_moe", ROPE_TYPE_NEOX, 0),
        ("mixtral", ROPE_TYPE_NORM, 0),
        ("gpt_oss", ROPE_TYPE_NEOX, 4),
    ];
    for (name, rope, swa) in cases {
        let m = open(name);
        unsafe {
            assert_eq!(llama_model_rope_type(m), rope, "{name}");
            assert_eq!(llama_model_n_swa(m), swa, "{name}");
            llama_model_free(m);
        }
    }
}

#[test]
fn llama_fixture_facts() {
    common::capture_log();
    let m = common::model();
    unsafe {
        // hidden_size 64.
        assert_eq!(llama_model_n_embd_inp(m), 64);
        assert_eq!(llama_model_n_embd_out(m), 64);
        assert_eq!(llama_model_n_layer_nextn(m), 0);
        assert_eq!(llama_model_n_cls_out(m), 0);
        assert!(llama_model_cls_label(m, 0).is_null());
        assert_eq!(llama_model_decoder_start_token(m), -1);
        // A folder states no general.file_type.
        assert_eq!(llama_model_ftype(m), -1);
        assert!(common::logged(&["llama_model_ftype", "general.file_type"]));
        // NULL model: the failure values, logged.
        assert_eq!(llama_model_rope_type(std::ptr::null()), ROPE_TYPE_NONE);
        assert_eq!(llama_model_n_swa(std::ptr::null()), -1);
        llama_model_free(m);
    }
}

#[test]
fn add_sep_only_where_the_metadata_says() {
    // No fixture states tokenizer.ggml.add_sep_token: llama.cpp's default for BPE is false.
    let m = common::model();
    unsafe {
        assert!(!llama::vocab::llama_vocab_get_add_sep(m));
        llama_model_free(m);
    }
}

/// n_embd_out is a pooled embedding's width: the last Dense layer's out_features. The tiny
/// EmbeddingGemma-shaped fixture projects 64 -> 96 -> 64; with its second Dense left out of
/// modules.json the width is 96.
#[test]
fn n_embd_out_is_the_dense_projections_width() {
    let src = std::path::PathBuf::from(format!("{}/../tests/fixtures/tiny/embed_gemma3", env!("CARGO_MANIFEST_DIR")));
    let dst = std::env::temp_dir().join(format!("llama-embd-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::create_dir_all(dst.join("1_Pooling")).unwrap();
    std::fs::create_dir_all(dst.join("2_Dense")).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "1_Pooling/config.json", "2_Dense/config.json", "2_Dense/model.safetensors"] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap();
    }
    let modules: Vec<serde_json::Value> = serde_json::from_slice(&std::fs::read(src.join("modules.json")).unwrap()).unwrap();
    let kept: Vec<&serde_json::Value> = modules.iter().filter(|m| m["path"] != "3_Dense").collect();
    std::fs::write(dst.join("modules.json"), serde_json::to_vec(&kept).unwrap()).unwrap();
    let path = CString::new(dst.to_str().unwrap()).unwrap();
    unsafe {
        let m = llama_model_load_from_file(path.as_ptr(), llama_model_default_params());
        assert!(!m.is_null());
        assert_eq!(llama_model_n_embd_inp(m), 64);
        assert_eq!(llama_model_n_embd_out(m), 96);
        llama_model_free(m);
        let m = open("embed_gemma3");
        assert_eq!(llama_model_n_embd_out(m), 64);
        llama_model_free(m);
    }
    std::fs::remove_dir_all(&dst).unwrap();
}

/// A copy of the tiny llama folder with `edits` (file name, JSON key, value) applied to its
/// JSON files, under the system's temp folder.
fn tiny_llama_with(tag: &str, edits: &[(&str, &str, serde_json::Value)]) -> std::path::PathBuf {
    let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny/llama");
    let to = std::env::temp_dir().join(format!("packlm-llama-pad-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&to).unwrap();
    for e in std::fs::read_dir(&from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    for (file, key, value) in edits {
        let p = to.join(file);
        let mut j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        j[*key] = value.clone();
        std::fs::write(&p, j.to_string()).unwrap();
    }
    to
}

/// llama_vocab_pad on a folder: where convert_hf_to_gguf.py's SpecialVocab finds the pad token
/// (tokenizer_config.json's pad_token by text, else config.json's pad_token_id), else
/// LLAMA_TOKEN_NULL; the GGUF key is checked on SmolLM2 by tests/llama/all_functions.c.
#[test]
fn pad_token_of_a_folder() {
    use llama::vocab::{llama_token_pad, llama_vocab_bos, llama_vocab_pad};
    use serde_json::json;
    let cases: [(&str, Vec<(&str, &str, serde_json::Value)>, Option<i32>); 4] = [
        ("none", vec![], None),
        ("config", vec![("config.json", "pad_token_id", json!(5))], Some(5)),
        // The text's token wins over config.json's id; "<s>" is the fixture's BOS.
        ("text", vec![("config.json", "pad_token_id", json!(5)), ("tokenizer_config.json", "pad_token", json!({"content": "<s>"}))], None),
        ("outside", vec![("config.json", "pad_token_id", json!(100000))], None),
    ];
    for (tag, edits, want) in cases {
        let dir = tiny_llama_with(tag, &edits);
        let path = CString::new(dir.to_str().unwrap()).unwrap();
        let m = unsafe { llama_model_load_from_file(path.as_ptr(), llama_model_default_params()) };
        assert!(!m.is_null(), "{tag} opens");
        unsafe {
            let want = if tag == "text" { llama_vocab_bos(m) } else { want.unwrap_or(-1) };
            assert!(tag != "text" || want >= 0, "the fixture has a BOS");
            assert_eq!(llama_vocab_pad(m), want, "{tag}");
            assert_eq!(llama_token_pad(m), want, "{tag}");
            llama_model_free(m);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// add_eos follows the pack (the tiny Qwen3 embedder's post-processor appends `</s>`), and
/// llama_detokenize's remove_special drops a trailing EOS only where the vocabulary adds one
/// and a leading BOS only where it adds one (llama.cpp's rule).
#[test]
fn add_eos_and_detokenize_follow_the_vocabulary() {
    use llama::vocab::{llama_detokenize, llama_tokenize, llama_vocab_get_add_bos, llama_vocab_get_add_eos};
    unsafe {
        let m = open("embed_qwen3");
        assert!(llama_vocab_get_add_eos(m) && !llama_vocab_get_add_bos(m));
        let text = CString::new("a").unwrap();
        let mut toks = [0i32; 8];
        let n = llama_tokenize(m, text.as_ptr(), 1, toks.as_mut_ptr(), 8, true, false);
        assert_eq!(&toks[..n as usize], &[66, 1], "the post-processor's EOS appended");
        let mut out = [0i8; 64];
        // EOS (1) dropped; a leading BOS (0) kept, the vocabulary adding none.
        let ids = [0, 66, 1];
        let got = llama_detokenize(m, ids.as_ptr(), 3, out.as_mut_ptr(), 64, true, true);
        let s = std::slice::from_raw_parts(out.as_ptr() as *const u8, got as usize);
        assert_eq!(s, b"<s>a", "{:?}", String::from_utf8_lossy(s));
        llama_model_free(m);
    }
}
