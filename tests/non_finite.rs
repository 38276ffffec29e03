//! A pack whose weights hold NaN or infinity opens (weights are not scanned at open), but a pass
//! never hands back a logit that is not finite: it fails with ErrNonFinite naming the first
//! layer whose output was not finite, and the session is as it was (PACKLM_ERR_NON_FINITE in
//! include/packlm.h).
//!
//! The tiny llama fixture has two layers; one weight element is replaced at a time, so the
//! stage that must be named is known from where the value was put, not from the code: a norm
//! weight of layer 1 leaves the embedding and layer 0 finite, and so on.

mod common;

use std::sync::Arc;

use common::*;
use packlm::backend::{BackendKind, Precision};
use packlm::engine::speculative::Acceptance;
use packlm::engine::{Model, OpenOptions, Session, Want};
use packlm::error::Status;
use packlm::sample::SamplerParams;

fn open_exact(dir: &std::path::Path, backend: BackendKind) -> Arc<Model> {
    Arc::new(Model::open(dir, &OpenOptions::new(backend, 2, Precision::Exact)).unwrap())
}

/// The failure of `f` on a session holding `held` tokens of the fixture, checked to leave the
/// session as it was.
fn fails_unchanged(m: &Arc<Model>, held: &[u32], what: &str, f: impl FnOnce(&mut Session) -> packlm::Result<()>) -> String {
    let mut s = Session::new(m.clone(), 0).unwrap();
    if !held.is_empty() {
        // A pass that hands back no logits is not checked (it succeeds).
        s.step_batch(held, Want::None).unwrap();
    }
    let before = (s.snapshot(), s.tokens().to_vec(), s.last_logits().to_vec());
    let e = f(&mut s).expect_err(what);
    assert_eq!(e.status, Status::ErrNonFinite, "{what}: {e}");
    assert!(before == (s.snapshot(), s.tokens().to_vec(), s.last_logits().to_vec()), "{what}: session changed");
    e.message
}

#[test]
fn a_nan_norm_weight_fails_every_pass_naming_its_layer() {
    let t = golden(&tiny("llama")).tokens;
    for (backend, tag) in [(BackendKind::Host, "host"), (BackendKind::Reference, "reference")] {
        for (name, layer) in [("model.layers.1.post_attention_layernorm.weight", 1), ("model.layers.0.input_layernorm.weight", 0)] {
            let dir = tiny_with_values("llama", &format!("nan-norm-{tag}-{layer}"), &[(name, 5, f32::NAN)]);
            let m = open_exact(&dir, backend);
            let named = format!("layer {layer} (of 2) is the first whose output is not finite");
            let check = |msg: String, position: usize, what: &str| {
                assert!(msg.contains(&named) && msg.contains(&format!("position {position} ")) && msg.contains("NaN"), "{tag}, {what}: {msg}");
            };
            let what = format!("{tag}, NaN in {name}");
            check(fails_unchanged(&m, &[], &what, |s| s.step(t[0]).map(drop)), 0, "step");
            check(fails_unchanged(&m, &t[..3], &what, |s| s.step(t[3]).map(drop)), 3, "step after 3");
            check(fails_unchanged(&m, &t[..2], &what, |s| s.step_batch(&t[2..6], Want::Last).map(drop)), 5, "batch, last row");
            check(fails_unchanged(&m, &t[..2], &what, |s| s.step_batch(&t[2..6], Want::All).map(drop)), 2, "batch, all rows");
            check(fails_unchanged(&m, &t[..3], &what, |s| s.verify(t[3], &t[4..7], Acceptance::Greedy).map(drop)), 3, "greedy verify");
            let params = SamplerParams { temperature: 0.8, ..Default::default() };
            let mut rng = 7;
            check(
                fails_unchanged(&m, &t[..3], &what, |s| s.verify(t[3], &t[4..7], Acceptance::Sampled { params: &params, draft_probs: None, rng: &mut rng }).map(drop)),
                3,
                "sampled verify",
            );
            std::fs::remove_dir_all(&dir).ok();
        }
    }
}

#[test]
fn the_stage_named_is_where_the_value_was_put() {
    let t = golden(&tiny("llama")).tokens;
    let cases: [(&str, usize, f32, &str); 4] = [
        // Token t[0]'s embedding row (64 wide): only that token's pass is hit.
        ("model.embed_tokens.weight", t[0] as usize * 64 + 3, f32::NAN, "the token embedding is the first output that is not finite"),
        ("model.layers.1.mlp.down_proj.weight", 17, f32::INFINITY, "layer 1 (of 2) is the first whose output is not finite"),
        ("model.norm.weight", 0, f32::NAN, "the output projection (final norm, lm_head) made it"),
        // One lm_head row: only that logit is infinite.
        ("lm_head.weight", 7 * 64, f32::NEG_INFINITY, "the output projection (final norm, lm_head) made it"),
    ];
    for (i, (name, index, value, named)) in cases.into_iter().enumerate() {
        let dir = tiny_with_values("llama", &format!("nonfinite-stage-{i}"), &[(name, index, value)]);
        let m = open_exact(&dir, BackendKind::Host);
        let msg = fails_unchanged(&m, &[], name, |s| s.step_batch(&t[..4], Want::All).map(drop));
        assert!(msg.contains(named), "{name}: {msg}");
        std::fs::remove_dir_all(&dir).ok();
    }
    // The untouched fixture runs (the check passes finite logits through).
    let m = open_exact(&tiny("llama"), BackendKind::Host);
    let mut s = Session::new(m, 0).unwrap();
    assert!(s.step_batch(&t, Want::All).unwrap().iter().all(|x| x.is_finite()));
}

#[test]
fn all_finite_finds_every_kind_at_every_place() {
    use packlm::backend::all_finite;
    for n in [0usize, 1, 15, 16, 17, 33, 300] {
        let v: Vec<f32> = (0..n).map(|i| i as f32 / n.max(1) as f32 * -1.5e37).collect();
        assert!(all_finite(&v), "{n} finite values (down to -1.5e37)");
        for at in 0..n {
            for bad in [f32::NAN, -f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                let mut w = v.clone();
                w[at] = bad;
                assert!(!all_finite(&w), "{bad} at {at} of {n}");
            }
        }
    }
    assert!(all_finite(&[f32::MAX, f32::MIN, f32::MIN_POSITIVE, -0.0, 1e-45]));
}
