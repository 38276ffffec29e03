//! Gemma, Gemma2, Gemma3 against HF transformers goldens (tests/fixtures/make_gemma_fixtures.py):
//! sandwich norms, (1 + w) norms, sqrt(hidden) embedding scale, softcapping, query_pre_attn_scalar,
//! sliding windows shorter than the sequence, local rope base, linear scaling on full layers.

mod common;

use common::*;
use packlm::backend::BackendKind;

const GEMMA: &[&str] = &["gemma", "gemma2", "gemma3", "gemma3_pattern", "gemma4", "gemma4_wide", "gemma4_e2b_pattern"];
/// The Gemma4 fixtures with a model.gguf (tests/fixtures/make_gemma4_gguf.py); llama.cpp runs
/// only gemma4_e2b_pattern's (its llama_cpp.json).
const GEMMA4_GGUFS: &[&str] = &["gemma4", "gemma4_wide", "gemma4_e2b_pattern"];

#[test]
fn gemma_families_match_hf() {
    for f in GEMMA {
        for backend in [BackendKind::Host, BackendKind::Reference] {
            assert_matches_golden(f, backend);
        }
    }
}

#[test]
fn gemma_batched_equals_sequential_and_threads_agree() {
    for f in GEMMA {
        let dir = tiny(f);
        let g = golden(&dir);
        let two = open_with(&dir, BackendKind::Host, 2);
        let batched = all_rows(&two, &g.tokens);
        assert_bits_equal(&batched, &stepped(&two, &g.tokens), f);
        assert_bits_equal(&batched, &all_rows(&open_with(&dir, BackendKind::Host, 1), &g.tokens), f);
    }
}

/// The Hub's older spellings: top-level rope_theta, rope_local_base_freq + rope_scaling (full
/// layers only), no layer_types (Gemma2 alternation), global_head_dim instead of
/// per_layer_config (Gemma4).
#[test]
fn gemma_legacy_spellings_give_identical_logits() {
    let checked = GEMMA.iter().filter(|f| legacy_config_gives_identical_logits(f)).count();
    assert_eq!(checked, 4, "gemma, gemma2, gemma3 and gemma4 have legacy configs");
}

/// Gemma4's KV-shared layers hold no plane and read their owner's: 3 and 4 read 2 (sliding),
/// 5 reads 1 (full); literal indices from HF's kv_sharing_modes worked by hand.
#[test]
fn gemma4_kv_sharing_table() {
    use packlm::semantics::KvSource;
    let m = open(&tiny("gemma4"));
    let src: Vec<KvSource> = m.spec().layers.iter().map(|l| l.kv_source).collect();
    assert_eq!(
        src,
        vec![
            KvSource::Own,
            KvSource::Own,
            KvSource::Own,
            KvSource::SharedWith { owner: 2 },
            KvSource::SharedWith { owner: 2 },
            KvSource::SharedWith { owner: 1 }
        ]
    );
    assert_eq!(m.spec().layers[3].mlp_width, 48, "double-wide MLP on shared layers");
    assert_eq!(m.spec().layers[2].mlp_width, 24);
    assert_eq!((m.spec().layers[1].head_dim, m.spec().layers[0].head_dim), (16, 8));
    let s = packlm::engine::Session::new(m.clone(), 0).unwrap();
    assert_eq!(s.plane_widths().iter().filter(|p| p.is_some()).count(), 3);
}

/// Two KV widths in one model: full layers 2 x 16 = 32, sliding 2 x 8 = 16 (literal, from the
/// fixture's config); shared layers 3 (sliding, owner 2) and 4 (full, owner 1) hold none.
#[test]
fn gemma4_wide_has_per_layer_kv_widths() {
    let m = open(&tiny("gemma4_wide"));
    let widths: Vec<usize> = m.spec().layers.iter().map(|l| l.kv_width()).collect();
    assert_eq!(widths, vec![16, 32, 16, 16, 32]);
    let s = packlm::engine::Session::new(m.clone(), 0).unwrap();
    assert_eq!(s.plane_widths(), vec![Some(16), Some(32), Some(16), None, None]);
}

/// Gemma4 GGUFs in llama.cpp's "gemma4" layout (tests/fixtures/make_gemma4_gguf.py): per-layer
/// kv heads and MLP widths, sliding pattern, proportional rope from rope_freqs.weight, k_eq_v
/// from the missing attn_v, per-layer inputs, layer_output_scale. Within TOL_F32 of HF on both
/// backends, and the same bits as the folder they were written from.
#[test]
fn gemma4_gguf_matches_hf_and_its_folder() {
    for f in GEMMA4_GGUFS {
        let dir = tiny(f);
        let g = golden(&dir);
        let file = dir.join("model.gguf");
        for backend in [BackendKind::Host, BackendKind::Reference] {
            let got = all_rows(&open_with(&file, backend, 2), &g.tokens);
            let d = max_abs_diff(&got, &g.logits);
            eprintln!("{f} GGUF ({backend:?}): max |packlm - HF| = {d:e}");
            assert!(d <= TOL_F32, "{f} GGUF ({backend:?}): max |packlm - HF| = {d} > {TOL_F32}");
        }
        let folder = all_rows(&open_with(&dir, BackendKind::Host, 2), &g.tokens);
        assert_bits_equal(&all_rows(&open_with(&file, BackendKind::Host, 2), &g.tokens), &folder, f);
    }
}
