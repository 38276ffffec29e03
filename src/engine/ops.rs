//! Row-wise operations of the layer body: one RMSNorm, the activations, softcapping.

use crate::semantics::Activation;

/// RMSNorm of each `width`-wide row of `x` into `out`: `w * (x * rsqrt(mean(x^2) + eps))`, as
/// HF's LlamaRMSNorm (f32; the weight already in its effective form, see engine::weights).
/// The mean is accumulated in f64 to keep it exact regardless of width.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, width: usize, out: &mut [f32]) {
    for (xr, or) in x.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
        let ss: f64 = xr.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let mean = (ss / width as f64) as f32;
        let inv = 1.0 / (mean + eps).sqrt();
        for ((o, &v), &g) in or.iter_mut().zip(xr).zip(w) {
            *o = g * (v * inv);
        }
    }
}

/// In-place RMSNorm of each row.
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32, width: usize) {
    for xr in x.chunks_exact_mut(width) {
        let ss: f64 = xr.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let mean = (ss / width as f64) as f32;
        let inv = 1.0 / (mean + eps).sqrt();
        for (v, &g) in xr.iter_mut().zip(w) {
            *v = g * (*v * inv);
        }
    }
}

/// In-place RMS normalization without a weight (Gemma4 `v_norm`, `with_scale=False`).
pub fn rms_normalize_inplace(x: &mut [f32], eps: f32) {
    let ss: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    let inv = 1.0 / ((ss / x.len() as f64) as f32 + eps).sqrt();
    x.iter_mut().for_each(|v| *v *= inv);
}

/// `act(gate) * up`, written into `gate`.
pub fn gated_activation(act: Activation, gate: &mut [f32], up: &[f32]) {
    match act {
        Activation::Silu => {
            for (g, &u) in gate.iter_mut().zip(up) {
                *g = (*g / (1.0 + (-*g).exp())) * u;
            }
        }
        // gelu_pytorch_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        Activation::GeluTanh => {
            const C: f32 = 0.797_884_6;
            for (g, &u) in gate.iter_mut().zip(up) {
                let x = *g;
                *g = 0.5 * x * (1.0 + (C * (x + 0.044715 * x * x * x)).tanh()) * u;
            }
        }
    }
}

/// `tanh(x / cap) * cap` on every element.
pub fn softcap(x: &mut [f32], cap: f32) {
    for v in x {
        *v = (*v / cap).tanh() * cap;
    }
}

/// `x += y`.
pub fn add_into(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// Adds `bias` to each `bias.len()`-wide row of `x`.
pub fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        add_into(row, bias);
    }
}
