//! Gemma, Gemma2, Gemma3 against HF transformers goldens (tests/fixtures/make_gemma_fixtures.py):
//! sandwich norms, (1 + w) norms, sqrt(hidden) embedding scale, softcapping, query_pre_attn_scalar,
//! sliding windows shorter than the sequence, local rope base, linear scaling on full layers.

mod common;

use common::*;
use packlm::backend::BackendKind;

const TOL_F32: f32 = 1e-4;
const GEMMA: &[&str] = &["gemma", "gemma2", "gemma3", "gemma3_pattern"];

#[test]
fn gemma_families_match_hf() {
    for f in GEMMA {
        for backend in [BackendKind::Host, BackendKind::Reference] {
            let dir = tiny(f);
            let g = golden(&dir);
            let got = all_rows(&open_with(&dir, backend, 2), &g.tokens);
            let d = max_abs_diff(&got, &g.logits);
            assert!(d <= TOL_F32, "{f} ({backend:?}): max |packlm - HF| = {d}");
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
