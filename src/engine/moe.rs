//! A mixture of experts in place of a layer's MLP (`LayerSpec::moe`): the router's logits come
//! back to the host, each row picks its experts there (`route`, the same code under every
//! backend), and each expert then runs once over all the rows of the pass routed to it, their
//! outputs scaled by the rows' weights and added into the rows in expert order.
//!
//! Sources: transformers 5 `models/qwen3_moe/modeling_qwen3_moe.py` (`Qwen3MoeTopKRouter`,
//! `Qwen3MoeExperts.forward`) and `models/mixtral/modeling_mixtral.py` (the same router with the
//! top-k weights always renormalized): softmax over all experts in f32, top k, optionally
//! divided by their sum; the output starts at zero and each expert hit, in ascending expert
//! index, `index_add_`s its rows times their weights.
//!
//! A row's result depends only on the row: its experts are its own choice, and each expert's
//! matmuls give a row the same bits in any set of rows (the backend's contract). So a pass of M
//! rows, or of several sessions, equals stepping, bit for bit, and reads each expert once.

use crate::backend::{Backend, Tensor, Weight};
use crate::engine::weights::Mlp;
use crate::semantics::{Activation, ModelSpec, MoeSpec, Routing, MAX_EXPERTS_PER_TOKEN};

/// The buffers of a pass's mixtures, for up to `rows` rows (made with the pass's scratch when
/// the model has a mixture).
pub(super) struct MoeScratch {
    /// (rows, n_experts): the router's logits, on the backend
    logits: Tensor,
    /// (rows, n_experts): the same on the host, turned into probabilities in place
    probs: Vec<f32>,
    /// Per expert: the pass's rows routed to it, ascending, and each one's weight.
    routed: Vec<(Vec<usize>, Vec<f32>)>,
    /// (rows, hidden): an expert's input rows
    x: Tensor,
    /// (rows, width) each: an expert's gate and up projections
    gate: Tensor,
    up: Tensor,
    /// (rows, hidden): an expert's output rows
    y: Tensor,
    /// rows * hidden zeros: the mixture's sum starts from them
    zeros: Vec<f32>,
}

impl MoeScratch {
    /// None when no layer of the model has a mixture.
    pub(super) fn new(be: &dyn Backend, spec: &ModelSpec, rows: usize) -> Option<MoeScratch> {
        let moes = || spec.layers.iter().filter_map(|l| l.moe);
        let n = moes().map(|m| m.n_experts).max()?;
        let width = moes().map(|m| m.width).max().unwrap_or(0);
        let hidden = spec.hidden_size;
        Some(MoeScratch {
            logits: be.tensor(rows * n),
            probs: vec![0.0; rows * n],
            routed: (0..n).map(|_| (Vec::with_capacity(rows), Vec::with_capacity(rows))).collect(),
            x: be.tensor(rows * hidden),
            gate: be.tensor(rows * width),
            up: be.tensor(rows * width),
            y: be.tensor(rows * hidden),
            zeros: vec![0.0; rows * hidden],
        })
    }
}

/// `out` (m, hidden) = the mixture over `h` (m, hidden), the layer's normed input.
#[allow(clippy::too_many_arguments)]
pub(super) fn moe_block(be: &dyn Backend, moe: &MoeSpec, act: Activation, router: &Weight, experts: &[Mlp], h: &Tensor, m: usize, hidden: usize, out: &mut Tensor, t: &mut MoeScratch) {
    let n = moe.n_experts;
    be.matmul(router, h, m, &mut t.logits);
    be.read_into(&t.logits, 0, &mut t.probs[..m * n]);
    for (rows, weights) in &mut t.routed {
        rows.clear();
        weights.clear();
    }
    for (r, p) in t.probs[..m * n].chunks_exact_mut(n).enumerate() {
        route(p, moe, |e, w| {
            t.routed[e].0.push(r);
            t.routed[e].1.push(w);
        });
    }
    be.upload(&t.zeros[..m * hidden], out);
    for (expert, (rows, weights)) in experts.iter().zip(&t.routed) {
        let k = rows.len();
        if k == 0 {
            continue;
        }
        be.gather_rows(h, rows, hidden, &mut t.x);
        be.matmul(&expert.gate, &t.x, k, &mut t.gate);
        be.matmul(&expert.up, &t.x, k, &mut t.up);
        be.gated_activation(act, &mut t.gate, &t.up, k * moe.width);
        be.matmul(&expert.down, &t.gate, k, &mut t.y);
        be.add_rows_scaled(out, &t.y, rows, weights, hidden);
    }
}

/// One row's router logits `p` (n_experts, overwritten by their softmax) -> `chosen(expert,
/// weight)` for each of its top-k experts, the highest probability first (ties: the lower
/// index, a NaN never). The softmax is HF's in f32: exp(x - max) over the sum of those terms.
pub fn route(p: &mut [f32], moe: &MoeSpec, mut chosen: impl FnMut(usize, f32)) {
    let max = p.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for v in p.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in p.iter_mut() {
        *v /= sum;
    }
    let k = moe.top_k.min(p.len()).min(MAX_EXPERTS_PER_TOKEN);
    let mut top = [(0usize, 0.0f32); MAX_EXPERTS_PER_TOKEN];
    for j in 0..k {
        let taken = |i: usize| top[..j].iter().any(|&(e, _)| e == i);
        let mut best = (0..p.len()).find(|&i| !taken(i)).unwrap_or(0);
        for i in best + 1..p.len() {
            if !taken(i) && p[i] > p[best] {
                best = i;
            }
        }
        top[j] = (best, p[best]);
    }
    let Routing::SoftmaxTopK { renormalize } = moe.routing;
    // HF: router_top_value /= router_top_value.sum(dim=-1, keepdim=True), the sum in rank order.
    let total = if renormalize { top[..k].iter().fold(0.0f32, |a, &(_, w)| a + w) } else { 1.0 };
    for &(e, w) in &top[..k] {
        chosen(e, if renormalize { w / total } else { w });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(top_k: usize, renormalize: bool) -> MoeSpec {
        MoeSpec { n_experts: 4, top_k, width: 8, routing: Routing::SoftmaxTopK { renormalize } }
    }

    fn routed(logits: &[f32], s: &MoeSpec) -> Vec<(usize, f32)> {
        let mut p = logits.to_vec();
        let mut out = Vec::new();
        route(&mut p, s, |e, w| out.push((e, w)));
        out
    }

    /// Logits ln 1, ln 2, ln 3, ln 4: softmax 0.1, 0.2, 0.3, 0.4 (worked by hand); the top two
    /// are experts 3 and 2, renormalized to 4/7 and 3/7.
    #[test]
    fn softmax_then_top_two_then_renormalized() {
        let logits = [1f32.ln(), 2f32.ln(), 3f32.ln(), 4f32.ln()];
        let r = routed(&logits, &spec(2, false));
        assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), vec![3, 2]);
        assert!((r[0].1 - 0.4).abs() < 1e-6 && (r[1].1 - 0.3).abs() < 1e-6, "{r:?}");
        let r = routed(&logits, &spec(2, true));
        assert!((r[0].1 - 4.0 / 7.0).abs() < 1e-6 && (r[1].1 - 3.0 / 7.0).abs() < 1e-6, "{r:?}");
    }

    /// Equal logits go to the lower index; a NaN logit is never chosen over a number and
    /// nothing panics.
    #[test]
    fn ties_go_low_and_nan_does_not_panic() {
        let r = routed(&[0.5, 0.5, 0.5, 0.5], &spec(2, true));
        assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
        let r = routed(&[f32::NAN, 1.0, 0.0, 0.0], &spec(1, false));
        assert_eq!(r.len(), 1);
    }
}
