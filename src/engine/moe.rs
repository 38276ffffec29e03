//! A mixture of experts in place of a layer's MLP (`LayerSpec::moe`): the router's logits come
//! back to the host, each row picks its experts there (`route`, the same code under every
//! backend), and each expert then runs once over all the rows of the pass routed to it, their
//! outputs scaled by the rows' weights and added into the rows in expert order. A backend whose
//! passes are static graphs routes where the logits are instead and runs every expert over
//! every row (`moe_block_dense`).
//!
//! Sources: transformers 5 `models/qwen3_moe/modeling_qwen3_moe.py` (`Qwen3MoeTopKRouter`,
//! `Qwen3MoeExperts.forward`) and `models/mixtral/modeling_mixtral.py` (the same router with the
//! top-k weights always renormalized): softmax over all experts in f32, top k, optionally
//! divided by their sum; the output starts at zero and each expert hit, in ascending expert
//! index, `index_add_`s its rows times their weights. gpt-oss (`models/gpt_oss`,
//! `GptOssTopKRouter`, `GptOssExperts.forward`): the router has a bias, takes the top k logits and
//! the softmax over those k; each expert's projections have biases (added after each matmul) and
//! its activation is the clamped SwiGLU (`Activation::ClampedSwiglu`). Qwen2-MoE
//! (`models/qwen2_moe`, `Qwen2MoeSparseMoeBlock`): a shared expert runs on every row, and its
//! output times sigmoid(shared_expert_gate(x)) is added to the routed experts' sum.
//!
//! A row's result depends only on the row: its experts are its own choice, and each expert's
//! matmuls give a row the same bits in any set of rows (the backend's contract). So a pass of M
//! rows, or of several sessions, equals stepping, bit for bit, and reads each expert once.

use crate::backend::{Backend, Tensor, Vector, Weight};
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
    /// 0..rows, and each row's shared-expert weight (sigmoid of its gate)
    all_rows: Vec<usize>,
    shared_weights: Vec<f32>,
}

/// A mixture's weights (engine/weights.rs `FeedForward::Experts`).
pub(super) struct MoeWeights<'a> {
    pub router: &'a Weight,
    pub router_bias: Option<&'a Vector>,
    pub experts: &'a [Mlp],
    /// The shared expert and its gate, (1, hidden)
    pub shared: Option<&'a (Mlp, Weight)>,
}

impl MoeScratch {
    /// None when no layer of the model has a mixture.
    pub(super) fn new(be: &dyn Backend, spec: &ModelSpec, rows: usize) -> Option<MoeScratch> {
        let moes = || spec.layers.iter().filter_map(|l| l.moe);
        let n = moes().map(|m| m.n_experts).max()?;
        let width = moes().map(|m| m.width.max(m.shared_width.unwrap_or(0))).max().unwrap_or(0);
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
            all_rows: (0..rows).collect(),
            shared_weights: vec![0.0; rows],
        })
    }

    /// `Backend::forget` of every buffer: the mixture's values are not read after its layer.
    pub(super) fn forget(&self, be: &dyn Backend) {
        for t in [&self.logits, &self.x, &self.gate, &self.up, &self.y] {
            be.forget(t);
        }
    }
}

/// `out` (m, hidden) = the mixture over `h` (m, hidden), the layer's normed input.
#[allow(clippy::too_many_arguments)]
pub(super) fn moe_block(be: &dyn Backend, moe: &MoeSpec, act: Activation, w: &MoeWeights, h: &Tensor, m: usize, hidden: usize, out: &mut Tensor, t: &mut MoeScratch) {
    if be.routes_where_the_logits_are() {
        return moe_block_dense(be, moe, act, w, h, m, hidden, out, t);
    }
    let n = moe.n_experts;
    be.matmul(w.router, h, m, &mut t.logits);
    if let Some(b) = w.router_bias {
        be.add_bias(&mut t.logits, b, m);
    }
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
    for (expert, (rows, weights)) in w.experts.iter().zip(&t.routed) {
        let k = rows.len();
        if k == 0 {
            continue;
        }
        be.gather_rows(h, rows, hidden, &mut t.x);
        gated_mlp(be, expert, act, moe.width, &t.x, k, [&mut t.gate, &mut t.up, &mut t.y]);
        be.add_rows_scaled(out, &t.y, rows, weights, hidden);
    }
    if let (Some((mlp, gate)), Some(width)) = (w.shared, moe.shared_width) {
        // HF: sigmoid(shared_expert_gate(x)) * shared_expert(x), then added to the routed sum.
        be.matmul(gate, h, m, &mut t.logits);
        be.read_into(&t.logits, 0, &mut t.shared_weights[..m]);
        for g in &mut t.shared_weights[..m] {
            *g = sigmoid(*g);
        }
        gated_mlp(be, mlp, act, width, h, m, [&mut t.gate, &mut t.up, &mut t.y]);
        be.add_rows_scaled(out, &t.y, &t.all_rows[..m], &t.shared_weights[..m], hidden);
    }
}

/// `moe_block` for a backend whose passes are static graphs (`Backend::routes_where_the_logits_are`):
/// the routing stays on the backend (`Backend::route`: each row's weights over all experts, zero
/// where not chosen), and every expert runs over every row, its output times the row's weight
/// added in expert order (`Backend::add_rows_weighted`). The sums are the sparse path's, in the
/// same order: an expert a row did not choose adds its output times a zero weight, which leaves
/// the sum as it was (for finite outputs). E / k times the experts' arithmetic, and no shape that
/// depends on the routing.
#[allow(clippy::too_many_arguments)]
fn moe_block_dense(be: &dyn Backend, moe: &MoeSpec, act: Activation, w: &MoeWeights, h: &Tensor, m: usize, hidden: usize, out: &mut Tensor, t: &mut MoeScratch) {
    let n = moe.n_experts;
    be.matmul(w.router, h, m, &mut t.logits);
    if let Some(b) = w.router_bias {
        be.add_bias(&mut t.logits, b, m);
    }
    be.route(&mut t.logits, moe, m);
    be.upload(&t.zeros[..m * hidden], out);
    for (e, expert) in w.experts.iter().enumerate() {
        gated_mlp(be, expert, act, moe.width, h, m, [&mut t.gate, &mut t.up, &mut t.y]);
        be.add_rows_weighted(out, &t.y, &t.logits, e, n, m, hidden);
    }
    if let (Some((mlp, gate)), Some(width)) = (w.shared, moe.shared_width) {
        be.matmul(gate, h, m, &mut t.logits);
        be.sigmoid(&mut t.logits, m);
        gated_mlp(be, mlp, act, width, h, m, [&mut t.gate, &mut t.up, &mut t.y]);
        be.add_rows_weighted(out, &t.y, &t.logits, 0, 1, m, hidden);
    }
}

/// A row's sigmoid as the sparse path computes a shared expert's weight.
pub fn sigmoid(g: f32) -> f32 {
    1.0 / (1.0 + crate::backend::exp::expf(-g))
}

/// `y = down(act(gate(x)) * up(x))` over `rows` rows of `x`, each projection followed by its
/// bias where the MLP has them; `gate` and `up` (rows, width) are scratch.
fn gated_mlp(be: &dyn Backend, mlp: &Mlp, act: Activation, width: usize, x: &Tensor, rows: usize, [gate, up, y]: [&mut Tensor; 3]) {
    let linear = |w: &Weight, i: usize, x: &Tensor, out: &mut Tensor| {
        be.matmul(w, x, rows, out);
        if let Some(b) = mlp.bias.as_ref().map(|b| &b[i]) {
            be.add_bias(out, b, rows);
        }
    };
    linear(&mlp.gate, 0, x, gate);
    linear(&mlp.up, 1, x, up);
    be.gated_activation(act, gate, up, rows * width);
    linear(&mlp.down, 2, gate, y);
}

/// One row's router logits `p` (n_experts; overwritten) -> `chosen(expert, weight)` for each of
/// its top-k experts, the highest first (ties: the lower index, a NaN never).
/// `SoftmaxTopK`: HF's softmax in f32 over all experts (exp(x - max) over the sum of those
/// terms), the top k of those, optionally divided by their sum. `TopKSoftmax`: the top k logits,
/// then the same softmax over those k alone.
pub fn route(p: &mut [f32], moe: &MoeSpec, mut chosen: impl FnMut(usize, f32)) {
    let k = moe.top_k.min(p.len()).min(MAX_EXPERTS_PER_TOKEN);
    let mut top = [(0usize, 0.0f32); MAX_EXPERTS_PER_TOKEN];
    match moe.routing {
        Routing::SoftmaxTopK { renormalize } => {
            softmax(p);
            top_k(p, &mut top[..k]);
            // HF: router_top_value /= router_top_value.sum(dim=-1, keepdim=True), the sum in rank order.
            if renormalize {
                let total = top[..k].iter().fold(0.0f32, |a, &(_, w)| a + w);
                top[..k].iter_mut().for_each(|t| t.1 /= total);
            }
        }
        Routing::TopKSoftmax => {
            top_k(p, &mut top[..k]);
            let mut w: [f32; MAX_EXPERTS_PER_TOKEN] = std::array::from_fn(|j| top[j].1);
            softmax(&mut w[..k]);
            top[..k].iter_mut().zip(&w).for_each(|(t, &w)| t.1 = w);
        }
    }
    for &(e, w) in &top[..k] {
        chosen(e, w);
    }
}

/// HF's softmax in f32, in place: exp(x - max) over the sum of those terms (in index order).
fn softmax(p: &mut [f32]) {
    let max = p.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for v in p.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in p.iter_mut() {
        *v /= sum;
    }
}

/// `top[j]` = (index, value) of the j-th largest of `p` (ties to the lower index; a NaN is
/// never taken over a number), for j < top.len() <= p.len().
fn top_k(p: &[f32], top: &mut [(usize, f32)]) {
    for j in 0..top.len() {
        let taken = |i: usize| top[..j].iter().any(|&(e, _)| e == i);
        let mut best = (0..p.len()).find(|&i| !taken(i)).unwrap_or(0);
        for i in best + 1..p.len() {
            if !taken(i) && (p[i] > p[best] || p[best].is_nan() && !p[i].is_nan()) {
                best = i;
            }
        }
        top[j] = (best, p[best]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(top_k: usize, renormalize: bool) -> MoeSpec {
        MoeSpec { n_experts: 4, top_k, width: 8, routing: Routing::SoftmaxTopK { renormalize }, biases: false, shared_width: None }
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

    /// gpt-oss's order: the top two logits (ln 4, ln 3: experts 3 and 2), then their softmax,
    /// 4/7 and 3/7 (worked by hand); the other experts' logits play no part.
    #[test]
    fn top_two_then_softmax() {
        let s = MoeSpec { routing: Routing::TopKSoftmax, ..spec(2, false) };
        let r = routed(&[1f32.ln(), 2f32.ln(), 3f32.ln(), 4f32.ln()], &s);
        assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), vec![3, 2]);
        assert!((r[0].1 - 4.0 / 7.0).abs() < 1e-6 && (r[1].1 - 3.0 / 7.0).abs() < 1e-6, "{r:?}");
        let r = routed(&[100.0, 2f32.ln(), 3f32.ln(), 4f32.ln()], &MoeSpec { top_k: 1, ..s });
        assert_eq!(r, vec![(0, 1.0)]);
    }

    /// Equal logits go to the lower index; a NaN logit is never chosen over a number and
    /// nothing panics.
    #[test]
    fn ties_go_low_and_nan_does_not_panic() {
        let r = routed(&[0.5, 0.5, 0.5, 0.5], &spec(2, true));
        assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
        let r = routed(&[f32::NAN, 1.0, 0.0, 0.0], &MoeSpec { routing: Routing::TopKSoftmax, ..spec(1, false) });
        assert_eq!(r, vec![(1, 1.0)]);
        let r = routed(&[f32::NAN, 1.0, 0.0, 0.0], &spec(1, false));
        assert_eq!(r.len(), 1);
    }
}
