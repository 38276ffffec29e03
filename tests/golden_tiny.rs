//! Logits against HF transformers goldens on tiny random models of every implemented family
//! (tests/fixtures/make_fixtures.py), plus the bit-for-bit equivalences.

mod common;

use common::*;
use packlm::backend::BackendKind;

const FAMILIES: &[&str] = &["llama", "llama_linear", "llama_llama3", "llama_yarn", "mistral", "qwen2", "qwen3"];

#[test]
fn every_family_matches_hf_on_the_host_backend() {
    for f in FAMILIES {
        assert_matches_golden(f, BackendKind::Host);
    }
}

#[test]
fn every_family_matches_hf_on_the_reference_backend() {
    for f in FAMILIES {
        assert_matches_golden(f, BackendKind::Reference);
    }
}

/// bf16 / f16 weights, computed in f32: the goldens are HF's f32 forward over the same rounded
/// weights, so the tolerance stays the f32 one.
#[test]
fn half_precision_weights_match_hf_on_the_rounded_weights() {
    for f in ["llama_bf16", "llama_f16"] {
        assert_matches_golden(f, BackendKind::Host);
    }
}

#[test]
fn step_batch_equals_sequential_steps_bit_for_bit() {
    for f in FAMILIES.iter().chain(&["llama_bf16"]) {
        let dir = tiny(f);
        let g = golden(&dir);
        let m = open(&dir);
        assert_bits_equal(&all_rows(&m, &g.tokens), &stepped(&m, &g.tokens), f);
    }
}

#[test]
fn one_thread_equals_two_threads_bit_for_bit() {
    for f in FAMILIES {
        let dir = tiny(f);
        let g = golden(&dir);
        let one = all_rows(&open_with(&dir, BackendKind::Host, 1), &g.tokens);
        let two = all_rows(&open_with(&dir, BackendKind::Host, 2), &g.tokens);
        let three = all_rows(&open_with(&dir, BackendKind::Host, 3), &g.tokens);
        assert_bits_equal(&one, &two, f);
        assert_bits_equal(&one, &three, f);
    }
}

/// The older config spelling (top-level rope_theta / rope_scaling) gives the same model.
#[test]
fn legacy_rope_spelling_gives_identical_logits() {
    let checked = FAMILIES.iter().filter(|f| legacy_config_gives_identical_logits(f)).count();
    assert!(checked >= 3, "expected legacy configs for llama, llama_linear, llama_llama3, llama_yarn; found {checked}");
}

/// Sliding window: the mistral fixture's window is 5 and its sequence 22 tokens, so the
/// window must cut; with the window removed from the config the logits must move away from HF.
#[test]
fn mistral_window_is_load_bearing() {
    let dir = tiny("mistral");
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["sliding_window"], 5);
    let g = golden(&dir);
    assert!(g.tokens.len() > 5);
    let tmp = std::env::temp_dir().join(format!("packlm-nowindow-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, tmp.join(p.file_name().unwrap())).unwrap();
    }
    let mut c = cfg.clone();
    c["sliding_window"] = serde_json::Value::Null;
    std::fs::write(tmp.join("config.json"), c.to_string()).unwrap();
    let full = all_rows(&open(&tmp), &g.tokens);
    std::fs::remove_dir_all(&tmp).ok();
    assert!(max_abs_diff(&full, &g.logits) > 1e-2, "removing the window should change the logits");
}
