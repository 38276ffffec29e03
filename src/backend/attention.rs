//! Causal attention of a block of query rows against one layer's KV plane, scalar. Each
//! (row, head) result is computed alone, in one fixed order, so a row gives the same bits
//! whether it comes alone or inside a batch.

use crate::backend::reference::dot_sequential;
use crate::backend::AttentionShape;

/// One attention call: its geometry and rules, the layer's KV plane, and where the queries start.
pub struct AttentionArgs<'a> {
    pub shape: AttentionShape,
    /// (positions, n_kv_heads * head_dim)
    pub k: &'a [f32],
    /// (positions, n_kv_heads * head_dim)
    pub v: &'a [f32],
    /// Position of the first query row.
    pub first_position: usize,
}

/// `q`: (rows, n_heads * head_dim) -> `out`: (rows, n_heads * head_dim).
pub fn attention_scalar(a: &AttentionArgs, q: &[f32], rows: usize, out: &mut [f32]) {
    let qw = a.shape.n_heads * a.shape.head_dim;
    for r in 0..rows {
        for h in 0..a.shape.n_heads {
            let o = &mut out[r * qw + h * a.shape.head_dim..r * qw + (h + 1) * a.shape.head_dim];
            head(a, &q[r * qw + h * a.shape.head_dim..r * qw + (h + 1) * a.shape.head_dim], h, a.first_position + r, o, dot_sequential);
        }
    }
}

/// One query head at position `pos`: softmax over the visible keys (max-subtracted, f32, as
/// HF's eager attention), then the probability-weighted sum of values, in key order. `dot` is
/// the backend's q.k product (each backend keeps one, so a row's bits never depend on the batch).
pub fn head(a: &AttentionArgs, qh: &[f32], h: usize, pos: usize, out: &mut [f32], dot: impl Fn(&[f32], &[f32]) -> f32 + Copy) {
    head_inline(a, qh, h, pos, out, dot)
}

/// `head`, compiled for AVX2 and FMA: the value sum `out += p * v` runs 8 lanes wide instead of
/// baseline x86_64's 4, and a `dot` compiled for the same features is inlined into the score
/// loop (through a function pointer it was a call per key). Every element still gets one
/// multiply then one add, in key order (no fused multiply-add: Rust never contracts), so the
/// bits are `head`'s with the same `dot`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub fn head_avx2(a: &AttentionArgs, qh: &[f32], h: usize, pos: usize, out: &mut [f32], dot: impl Fn(&[f32], &[f32]) -> f32 + Copy) {
    head_inline(a, qh, h, pos, out, dot)
}

#[inline(always)]
fn head_inline(a: &AttentionArgs, qh: &[f32], h: usize, pos: usize, out: &mut [f32], dot: impl Fn(&[f32], &[f32]) -> f32 + Copy) {
    let kvh = h / (a.shape.n_heads / a.shape.n_kv_heads);
    let lo = match a.shape.window {
        Some(w) if pos + 1 > w => pos + 1 - w,
        _ => 0,
    };
    let n = pos + 1 - lo;
    // The buffer is taken out of the thread-local and put back (no allocation) rather than
    // used inside a `with` closure: a closure is compiled without its caller's target
    // features, so `head_avx2`'s value loop would run 4 lanes wide there.
    let mut scores = SCORES.with_borrow_mut(std::mem::take);
    head_with(a, qh, kvh, lo, pos, n, out, dot, &mut scores);
    SCORES.with_borrow_mut(|s| *s = scores);
}

/// Dims of a head whose value sums one pass over the keys keeps in registers (8 AVX2 registers:
/// 8 independent chains of adds, enough to hide the add latency).
const VALUE_RUN: usize = 64;

thread_local! {
    /// Each thread's score buffer, reused by every head it computes: no allocation per head.
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn head_with(
    a: &AttentionArgs,
    qh: &[f32],
    kvh: usize,
    lo: usize,
    pos: usize,
    n: usize,
    out: &mut [f32],
    dot: impl Fn(&[f32], &[f32]) -> f32,
    scores: &mut Vec<f32>,
) {
    let (d, kvw) = (a.shape.head_dim, a.shape.n_kv_heads * a.shape.head_dim);
    scores.clear();
    scores.resize(n, 0.0);
    let mut max = f32::NEG_INFINITY;
    let key = |t: usize| &a.k[t * kvw + kvh * d..t * kvw + (kvh + 1) * d];
    let mut finish = |i: usize, raw: f32| {
        let mut s = raw * a.shape.scale;
        if let Some(cap) = a.shape.softcap {
            s = (s / cap).tanh() * cap;
        }
        max = max.max(s);
        scores[i] = s;
    };
    // Four keys' dot products side by side, so that their reductions overlap (each is the
    // same `dot`, and the scores are finished in key order: the same bits as one at a time).
    let mut t = lo;
    while t + 4 <= pos + 1 {
        let raw = [dot(qh, key(t)), dot(qh, key(t + 1)), dot(qh, key(t + 2)), dot(qh, key(t + 3))];
        for (j, &r) in raw.iter().enumerate() {
            finish(t - lo + j, r);
        }
        t += 4;
    }
    for t in t..=pos {
        finish(t - lo, dot(qh, key(t)));
    }
    let mut sum = 0.0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    for s in scores.iter_mut() {
        *s /= sum;
    }
    // out = sum over keys, in key order, of p * v: for each run of 64 dims the running sums
    // stay in registers across all keys (one multiply then one add per element and key, in key
    // order, as a plain loop over keys would do it: the same bits).
    let base = kvh * d;
    let mut chunks = out.chunks_exact_mut(VALUE_RUN);
    for (c, oc) in (&mut chunks).enumerate() {
        let mut acc = [0.0f32; VALUE_RUN];
        for (i, t) in (lo..=pos).enumerate() {
            let p = scores[i];
            let vt = &a.v[t * kvw + base + c * VALUE_RUN..][..VALUE_RUN];
            for (x, &v) in acc.iter_mut().zip(vt) {
                *x += p * v;
            }
        }
        oc.copy_from_slice(&acc);
    }
    let tail = chunks.into_remainder();
    let off = d - tail.len();
    tail.iter_mut().for_each(|x| *x = 0.0);
    for (i, t) in (lo..=pos).enumerate() {
        let p = scores[i];
        let vt = &a.v[t * kvw + base + off..t * kvw + base + d];
        for (o, &v) in tail.iter_mut().zip(vt) {
            *o += p * v;
        }
    }
}
