//! The forward pass: M token rows through every layer in one pass over the weights, with one
//! layer body for every family (it branches on LayerSpec fields only).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::backend::attention::AttentionArgs;
use crate::engine::ops::{add_bias, add_into, gated_activation, rms_norm, rms_norm_inplace, rms_normalize_inplace, softcap};
use crate::engine::weights::LayerWeights;
use crate::engine::Model;
use crate::error::{Error, Result, Status};
use crate::kv::KvCache;
use crate::semantics::rope::apply_rope;
use crate::semantics::{AttentionKind, KvSource, LayerSpec};

/// Which rows' logits a pass returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    None,
    Last,
    All,
}

/// Runs `tokens` at positions `kv.n_past ..`, appends their keys and values, and returns the
/// logits of the wanted rows (`rows x vocab`). On failure (abort), and also when the pass
/// panics, the cache is as before: the rows a pass appended are dropped while unwinding, so a
/// caller that catches the panic (the C boundary does) keeps a usable session.
pub fn forward(model: &Model, kv: &mut KvCache, tokens: &[u32], want: Want, abort: &AtomicBool) -> Result<Vec<f32>> {
    let mut pass = Rollback { start: kv.n_past, kv, done: false };
    let logits = run(model, pass.kv, tokens, want, abort)?;
    pass.kv.n_past = pass.start + tokens.len();
    pass.done = true;
    Ok(logits)
}

/// Until `done`, dropping it truncates the cache back to `start`: on `Err` and on unwind alike.
struct Rollback<'a> {
    kv: &'a mut KvCache,
    start: usize,
    done: bool,
}

impl Drop for Rollback<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.kv.truncate(self.start);
            self.kv.n_past = self.start;
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Test-only fault injection: a pass on this thread panics after this layer's attention
    /// block (its keys and values already appended). Not compiled into the library.
    pub(crate) static PANIC_AFTER_LAYER: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

fn run(model: &Model, kv: &mut KvCache, tokens: &[u32], want: Want, abort: &AtomicBool) -> Result<Vec<f32>> {
    let spec = &model.spec;
    let hidden = spec.hidden_size;
    let m = tokens.len();
    // x: (m, hidden), the residual stream.
    let mut x = vec![0.0f32; m * hidden];
    for (row, &t) in x.chunks_exact_mut(hidden).zip(tokens) {
        model.weights.embed.row_f32(t as usize, row);
        if let Some(s) = spec.embed_scale {
            row.iter_mut().for_each(|v| *v *= s);
        }
    }
    let ple = per_layer_inputs(model, tokens, &x);
    let mut scratch = Scratch::default();
    for (il, (ls, lw)) in spec.layers.iter().zip(&model.weights.layers).enumerate() {
        if abort.load(Ordering::Relaxed) {
            return Err(Error::new(Status::ErrAborted, format!("aborted before layer {il}")));
        }
        attention_block(model, kv, il, ls, lw, &mut x, m, &mut scratch);
        #[cfg(test)]
        if PANIC_AFTER_LAYER.with(|p| p.get()) == Some(il) {
            panic!("injected panic after layer {il}");
        }
        mlp_block(model, il, ls, lw, &mut x, m, &ple, &mut scratch);
    }
    let rows: Vec<usize> = match want {
        Want::None => return Ok(Vec::new()),
        Want::Last => vec![m - 1],
        Want::All => (0..m).collect(),
    };
    let mut h = vec![0.0f32; rows.len() * hidden];
    for (o, &r) in h.chunks_exact_mut(hidden).zip(&rows) {
        rms_norm(&x[r * hidden..(r + 1) * hidden], &model.weights.final_norm, spec.norm_eps, hidden, o);
    }
    let mut logits = vec![0.0f32; rows.len() * spec.vocab_size];
    model.backend.matmul(&model.weights.lm_head, &h, rows.len(), &mut logits);
    if let Some(cap) = spec.final_softcap {
        softcap(&mut logits, cap);
    }
    Ok(logits)
}

/// Buffers reused across layers.
#[derive(Default)]
struct Scratch {
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    proj: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
}

fn resize(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    v.resize(n, 0.0);
    &mut v[..n]
}

/// x += post_norm(o(attention(rope(qk_norm(q, k)), v)) over pre_norm(x)).
#[allow(clippy::too_many_arguments)]
fn attention_block(model: &Model, kv: &mut KvCache, il: usize, ls: &LayerSpec, lw: &LayerWeights, x: &mut [f32], m: usize, s: &mut Scratch) {
    let spec = &model.spec;
    let be = model.backend.as_ref();
    let (hidden, d) = (spec.hidden_size, ls.head_dim);
    let (qw, kvw) = (ls.q_width(), ls.kv_width());
    let start = kv.n_past;
    let h = resize(&mut s.h, m * hidden);
    match &lw.pre_attention_norm {
        Some(w) => rms_norm(x, w, spec.norm_eps, hidden, h),
        None => h.copy_from_slice(x),
    }
    let q = resize(&mut s.q, m * qw);
    be.matmul(&lw.q, h, m, q);
    let owns_plane = ls.kv_source == KvSource::Own;
    if let Some([bq, _, _]) = &lw.qkv_bias {
        add_bias(q, bq);
    }
    for (r, row) in q.chunks_exact_mut(qw).enumerate() {
        for head in row.chunks_exact_mut(d) {
            if let Some(w) = &lw.q_norm {
                rms_norm_inplace(head, w, spec.norm_eps, d);
            }
            apply_rope(&ls.rope, head, start + r);
        }
    }
    if let (true, Some(kw)) = (owns_plane, &lw.k) {
        let k = resize(&mut s.k, m * kvw);
        let v = resize(&mut s.v, m * kvw);
        be.matmul(kw, h, m, k);
        if let Some([_, bk, _]) = &lw.qkv_bias {
            add_bias(k, bk);
        }
        match &lw.v {
            Some(vw) => {
                be.matmul(vw, h, m, v);
                if let Some([_, _, bv]) = &lw.qkv_bias {
                    add_bias(v, bv);
                }
            }
            // Values are the raw key projection (before k-norm and rope).
            None => v.copy_from_slice(k),
        }
        if ls.v_norm {
            for head in v.chunks_exact_mut(d) {
                rms_normalize_inplace(head, spec.norm_eps);
            }
        }
        for (r, row) in k.chunks_exact_mut(kvw).enumerate() {
            for head in row.chunks_exact_mut(d) {
                if let Some(w) = &lw.k_norm {
                    rms_norm_inplace(head, w, spec.norm_eps, d);
                }
                apply_rope(&ls.rope, head, start + r);
            }
        }
        if let Some(Some(plane)) = kv.planes.get_mut(il) {
            plane.k.extend_from_slice(k);
            plane.v.extend_from_slice(v);
        }
    }
    let attn = resize(&mut s.attn, m * qw);
    if let Some(plane) = kv.plane_for(&spec.layers, il) {
        let args = AttentionArgs {
            n_heads: ls.n_heads,
            n_kv_heads: ls.n_kv_heads,
            head_dim: d,
            scale: ls.attn_scale,
            softcap: ls.attn_softcap,
            window: match ls.attention {
                AttentionKind::Full => None,
                AttentionKind::Sliding { window } => Some(window),
            },
            k: &plane.k,
            v: &plane.v,
            first_position: start,
        };
        be.attention(&args, q, m, attn);
    }
    let proj = resize(&mut s.proj, m * hidden);
    be.matmul(&lw.o, attn, m, proj);
    if let Some(b) = &lw.o_bias {
        add_bias(proj, b);
    }
    if let Some(w) = &lw.post_attention_norm {
        rms_norm_inplace(proj, w, spec.norm_eps, hidden);
    }
    add_into(x, proj);
}

/// x += post_norm(down(act(gate(h)) * up(h))), h = pre_norm(x); then the per-layer input
/// (x += post_norm(projection(act(gate(x)) * P[layer]))) and the layer scalar, when present.
#[allow(clippy::too_many_arguments)]
fn mlp_block(model: &Model, il: usize, ls: &LayerSpec, lw: &LayerWeights, x: &mut [f32], m: usize, ple: &[f32], s: &mut Scratch) {
    let spec = &model.spec;
    let be = model.backend.as_ref();
    let hidden = spec.hidden_size;
    let h = resize(&mut s.h, m * hidden);
    match &lw.pre_feedforward_norm {
        Some(w) => rms_norm(x, w, spec.norm_eps, hidden, h),
        None => h.copy_from_slice(x),
    }
    let gate = resize(&mut s.gate, m * ls.mlp_width);
    let up = resize(&mut s.up, m * ls.mlp_width);
    be.matmul(&lw.gate, h, m, gate);
    be.matmul(&lw.up, h, m, up);
    gated_activation(ls.activation, gate, up);
    let proj = resize(&mut s.proj, m * hidden);
    be.matmul(&lw.down, gate, m, proj);
    if let Some(w) = &lw.post_feedforward_norm {
        rms_norm_inplace(proj, w, spec.norm_eps, hidden);
    }
    add_into(x, proj);
    if let (Some(pl), Some(p)) = (&lw.per_layer, spec.per_layer_input) {
        // HF Gemma4TextDecoderLayer: gate -> activation -> * per_layer_input -> projection -> norm.
        let width = spec.layers.len() * p.dim;
        let g = resize(&mut s.gate, m * p.dim);
        be.matmul(&pl.gate, x, m, g);
        let pi: Vec<f32> = (0..m).flat_map(|r| ple[r * width + il * p.dim..r * width + (il + 1) * p.dim].iter().copied()).collect();
        gated_activation(ls.activation, g, &pi);
        let proj = resize(&mut s.proj, m * hidden);
        be.matmul(&pl.projection, g, m, proj);
        rms_norm_inplace(proj, &pl.post_norm, spec.norm_eps, hidden);
        add_into(x, proj);
    }
    if let Some(scalar) = lw.layer_scalar {
        x.iter_mut().for_each(|v| *v *= scalar);
    }
}

/// Gemma4 per-layer inputs for `tokens` (m, n_layers * dim): the token table scaled by
/// sqrt(dim), plus the RMS-normed projection of the scaled embedding `e` times 1/sqrt(hidden),
/// times 1/sqrt(2) (HF Gemma4TextModel.get_per_layer_inputs / project_per_layer_inputs).
fn per_layer_inputs(model: &Model, tokens: &[u32], e: &[f32]) -> Vec<f32> {
    let spec = &model.spec;
    let (Some(p), Some(w)) = (spec.per_layer_input, &model.weights.per_layer_input) else {
        return Vec::new();
    };
    let m = tokens.len();
    let width = spec.layers.len() * p.dim;
    let mut c = vec![0.0f32; m * width];
    model.backend.matmul(&w.model_projection, e, m, &mut c);
    let proj_scale = (spec.hidden_size as f64).powf(-0.5) as f32;
    c.iter_mut().for_each(|v| *v *= proj_scale);
    rms_norm_inplace(&mut c, &w.projection_norm, spec.norm_eps, p.dim);
    let table_scale = (p.dim as f64).sqrt() as f32;
    let combine = std::f64::consts::FRAC_1_SQRT_2 as f32;
    let mut t = vec![0.0f32; width];
    for (row, &tok) in c.chunks_exact_mut(width).zip(tokens) {
        w.table.row_f32(tok as usize, &mut t);
        for (cv, &tv) in row.iter_mut().zip(&t) {
            *cv = (*cv + tv * table_scale) * combine;
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::path::Path;
    use std::sync::Arc;

    use super::{Want, PANIC_AFTER_LAYER};
    use crate::backend::BackendKind;
    use crate::engine::{Model, OpenOptions, Session};

    fn tiny(name: &str, backend: BackendKind) -> Arc<Model> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny").join(name);
        Arc::new(Model::open(&dir, &OpenOptions { backend, threads: 2 }).unwrap())
    }

    /// A pass that panics after some layers appended their keys and values leaves the session
    /// exactly as before the call: same positions, same snapshot bytes, and the next step gives
    /// the bits of a session that never saw the failed call.
    #[test]
    fn a_panicking_pass_leaves_the_session_as_it_was() {
        for (name, backend) in [("llama", BackendKind::Host), ("gemma4", BackendKind::Host), ("gemma2", BackendKind::Reference)] {
            let m = tiny(name, backend);
            let prefix = [0u32, 17, 42, 99, 5];
            let mut s = Session::new(m.clone(), 0).unwrap();
            s.step_batch(&prefix, Want::Last).unwrap();
            let before = s.snapshot();
            let layer = m.spec.layers.len() / 2;
            PANIC_AFTER_LAYER.with(|p| p.set(Some(layer)));
            let r = catch_unwind(AssertUnwindSafe(|| s.step_batch(&[7, 8, 9], Want::All)));
            PANIC_AFTER_LAYER.with(|p| p.set(None));
            assert!(r.is_err(), "{name}: the injected panic did not happen");
            assert_eq!(s.n_past(), prefix.len(), "{name}: positions held changed");
            assert!(s.snapshot() == before, "{name}: the session state changed");
            let next = s.step(11).unwrap();
            let mut fresh = Session::new(m.clone(), 0).unwrap();
            fresh.step_batch(&prefix, Want::Last).unwrap();
            let want = fresh.step(11).unwrap();
            assert!(next.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{name}: next step differs from a fresh session");
        }
    }
}
