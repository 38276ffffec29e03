//! Rotary position embedding: reading its parameters from a config (both spellings) and turning
//! them into one table of inverse frequencies plus a cos/sin scale. The formulas follow
//! transformers' modeling_rope_utils.py (`_compute_default_rope_parameters`,
//! `_compute_linear_scaling_rope_parameters`, `_compute_llama3_parameters`,
//! `_compute_yarn_parameters`); anything else is refused at open.

use std::f64::consts::PI;

use crate::error::Result;
use crate::semantics::config::Cfg;

/// The rope of one layer, ready to apply: rotate the first `rotary_dims` of each head by
/// angle `position * inv_freq[i]` in HF's rotate-half pairing (i, i + rotary_dims/2), and scale
/// cos and sin by `attention_factor` (yarn; 1 elsewhere).
#[derive(Clone, Debug, PartialEq)]
pub struct RopeSpec {
    /// What the config asked for, for `packlm info`.
    pub kind: String,
    pub theta: f64,
    pub factor: Option<f64>,
    pub rotary_dims: usize,
    /// (rotary_dims / 2), f32 as HF computes them.
    pub inv_freq: Vec<f32>,
    pub attention_factor: f32,
}

/// Where a layer's rope comes from in the older config spelling (no `rope_parameters`).
#[derive(Clone, Copy, Debug)]
pub struct LegacyRope {
    /// The top-level key holding the base (`rope_theta`; Gemma3 sliding layers:
    /// `rope_local_base_freq`).
    pub theta_key: &'static str,
    /// The base when that key is absent too (the family's config-class default).
    pub default_theta: f64,
    /// Whether top-level `rope_scaling` applies to this layer (Gemma3: full layers only).
    pub scaling: bool,
}

impl LegacyRope {
    pub const STANDARD: LegacyRope = LegacyRope { theta_key: "rope_theta", default_theta: 10000.0, scaling: true };
}

/// The rope parameters of one layer type as an object (`rope_parameters`, or the legacy
/// `rope_scaling` merged with a top-level base), read from `cfg`.
/// `layer_type` selects the nested entry when `rope_parameters` is per layer type.
pub fn read_rope(cfg: Cfg, head_dim: usize, layer_type: Option<&str>, legacy: LegacyRope) -> Result<RopeSpec> {
    cfg.limit("head_dim", head_dim, super::MAX_HEAD_DIM)?;
    let max_pos = cfg.opt_usize("max_position_embeddings")?;
    let top_theta = cfg.opt_positive_f64(legacy.theta_key)?;
    let top_partial = cfg.opt_f64("partial_rotary_factor")?;
    // transformers 5 writes `rope_parameters`; older writers `rope_theta` + `rope_scaling`.
    let params = match cfg.opt_obj("rope_parameters")? {
        Some(p) => {
            let nested = layer_type.and_then(|lt| p.get(lt)).is_some();
            match (nested, layer_type) {
                (true, Some(lt)) => p.opt_obj(lt)?,
                _ => Some(p),
            }
        }
        None if legacy.scaling => cfg.opt_obj("rope_scaling")?,
        None => None,
    };
    let get_f = |k: &str| -> Result<Option<f64>> {
        match params {
            Some(p) => p.opt_f64(k),
            None => Ok(None),
        }
    };
    // Bases, factors and context lengths divide or are raised to powers: each must be > 0.
    let get_pos = |k: &str| -> Result<Option<f64>> {
        match params {
            Some(p) => p.opt_positive_f64(k),
            None => Ok(None),
        }
    };
    let kind = match params {
        Some(p) => p.opt_str("rope_type")?.or(p.opt_str("type")?).unwrap_or("default"),
        None => "default",
    };
    let theta = get_pos("rope_theta")?.or(top_theta).unwrap_or(legacy.default_theta);
    let partial = get_f("partial_rotary_factor")?.or(top_partial).unwrap_or(1.0);
    if !(partial > 0.0 && partial <= 1.0) {
        return Err(cfg.invalid("partial_rotary_factor", "must be in (0, 1]"));
    }
    let rotary_dims = if kind == "proportional" { head_dim } else { (head_dim as f64 * partial) as usize };
    if rotary_dims == 0 || rotary_dims % 2 != 0 || rotary_dims > head_dim {
        return Err(cfg.refuse("partial_rotary_factor", "rotary dims must be even and within head_dim"));
    }
    let default = default_inv_freq(theta, rotary_dims);
    let (inv, factor, attention_factor) = match kind {
        "default" => (default, None, 1.0),
        "linear" => {
            let f = require(get_f("factor")?, cfg, "rope factor")?;
            (default.iter().map(|&x| (x as f64 / f) as f32).collect(), Some(f), 1.0)
        }
        "llama3" => {
            let f = require(get_f("factor")?, cfg, "rope factor")?;
            let low = require(get_f("low_freq_factor")?, cfg, "low_freq_factor")?;
            let high = require(get_f("high_freq_factor")?, cfg, "high_freq_factor")?;
            // HF divides by (high_freq_factor - low_freq_factor).
            if high == low {
                return Err(cfg.invalid("rope_parameters", "high_freq_factor equals low_freq_factor"));
            }
            let orig = get_pos("original_max_position_embeddings")?
                .or(max_pos.map(|x| x as f64))
                .ok_or_else(|| cfg.missing("original_max_position_embeddings"))?;
            (llama3_inv_freq(&default, f, low, high, orig), Some(f), 1.0)
        }
        "yarn" => {
            let orig = get_pos("original_max_position_embeddings")?
                .or(max_pos.map(|x| x as f64))
                .ok_or_else(|| cfg.missing("original_max_position_embeddings"))?;
            let f = match get_pos("factor")? {
                Some(f) => f,
                None => max_pos.map(|m| m as f64 / orig).ok_or_else(|| cfg.missing("factor"))?,
            };
            // The correction range divides by ln(theta).
            if theta <= 1.0 {
                return Err(cfg.invalid("rope_theta", "yarn needs a rope base above 1"));
            }
            let truncate = match params {
                Some(p) => p.opt_bool("truncate")?.unwrap_or(true),
                None => true,
            };
            let y = Yarn {
                factor: f,
                attention_factor: get_pos("attention_factor")?,
                mscale: get_f("mscale")?,
                mscale_all_dim: get_f("mscale_all_dim")?,
                beta_fast: get_pos("beta_fast")?.filter(|&b| b != 0.0).unwrap_or(32.0),
                beta_slow: get_pos("beta_slow")?.filter(|&b| b != 0.0).unwrap_or(1.0),
                original_max_positions: orig,
                truncate,
            };
            let (inv, att) = yarn_inv_freq(&y, theta, rotary_dims);
            (inv, Some(f), att)
        }
        // transformers `_compute_proportional_rope_parameters` (Gemma4 full layers): the first
        // floor(p * d / 2) pairs rotate at theta^(-2j/d) (the denominator is the whole head),
        // the other pairs get frequency 0 (pass through); all divided by `factor` (default 1).
        "proportional" => {
            let rotated = ((partial * head_dim as f64) / 2.0).floor() as usize;
            let f = get_pos("factor")?.unwrap_or(1.0);
            let inv = (0..head_dim / 2)
                .map(|j| {
                    let x = if j < rotated { 1.0f32 / (theta as f32).powf((2 * j) as f32 / head_dim as f32) } else { 0.0 };
                    x / f as f32
                })
                .collect();
            return Ok(RopeSpec { kind: kind.to_string(), theta, factor: Some(f), rotary_dims: head_dim, inv_freq: inv, attention_factor: 1.0 });
        }
        other => {
            let key = if cfg.get("rope_parameters").is_some() {
                "rope_parameters"
            } else {
                "rope_scaling"
            };
            return Err(cfg.refuse(
                key,
                &format!("rope type \"{other}\" is not implemented (default, linear, llama3, yarn are)"),
            ));
        }
    };
    Ok(RopeSpec { kind: kind.to_string(), theta, factor, rotary_dims, inv_freq: inv, attention_factor })
}

fn require(v: Option<f64>, cfg: Cfg, what: &str) -> Result<f64> {
    v.filter(|x| x.is_finite() && *x > 0.0)
        .ok_or_else(|| cfg.refuse("rope_parameters", &format!("{what} missing or not positive")))
}

/// `1 / theta^(2i/d)`: HF computes the exponent and the power in float32.
fn default_inv_freq(theta: f64, dims: usize) -> Vec<f32> {
    (0..dims / 2)
        .map(|i| {
            let exponent = (2 * i) as f32 / dims as f32;
            1.0f32 / (theta as f32).powf(exponent)
        })
        .collect()
}

/// transformers `_compute_llama3_parameters`.
fn llama3_inv_freq(inv: &[f32], factor: f64, low: f64, high: f64, old_ctx: f64) -> Vec<f32> {
    let low_wavelen = old_ctx / low;
    let high_wavelen = old_ctx / high;
    inv.iter()
        .map(|&f| {
            let f = f as f64;
            let wavelen = 2.0 * PI / f;
            let scaled = if wavelen > low_wavelen { f / factor } else { f };
            let smooth = (old_ctx / wavelen - low) / (high - low);
            let smoothed = (1.0 - smooth) * scaled / factor + smooth * scaled;
            // HF: ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen), kept literally.
            #[allow(clippy::nonminimal_bool, clippy::neg_cmp_op_on_partial_ord)]
            let medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
            (if medium { smoothed } else { scaled }) as f32
        })
        .collect()
}

struct Yarn {
    factor: f64,
    attention_factor: Option<f64>,
    mscale: Option<f64>,
    mscale_all_dim: Option<f64>,
    beta_fast: f64,
    beta_slow: f64,
    original_max_positions: f64,
    truncate: bool,
}

/// transformers `_compute_yarn_parameters`.
fn yarn_inv_freq(y: &Yarn, theta: f64, dims: usize) -> (Vec<f32>, f32) {
    let get_mscale = |scale: f64, m: f64| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
    let attention = match (y.attention_factor, y.mscale, y.mscale_all_dim) {
        (Some(a), _, _) => a,
        (None, Some(m), Some(mad)) if m != 0.0 && mad != 0.0 => {
            get_mscale(y.factor, m) / get_mscale(y.factor, mad)
        }
        _ => get_mscale(y.factor, 1.0),
    };
    let d = dims as f64;
    let correction_dim =
        |rot: f64| (d * (y.original_max_positions / (rot * 2.0 * PI)).ln()) / (2.0 * theta.ln());
    let (mut low, mut high) = (correction_dim(y.beta_fast), correction_dim(y.beta_slow));
    if y.truncate {
        low = low.floor();
        high = high.ceil();
    }
    let low = low.max(0.0);
    let high = high.min(d - 1.0);
    let high = if low == high { high + 0.001 } else { high };
    let inv = (0..dims / 2)
        .map(|i| {
            let pos_freq = (theta as f32).powf((2 * i) as f32 / dims as f32);
            let extrapolation = 1.0f32 / pos_freq;
            let interpolation = 1.0f32 / (y.factor as f32 * pos_freq);
            let ramp = ((i as f32 - low as f32) / (high as f32 - low as f32)).clamp(0.0, 1.0);
            let extrapolation_factor = 1.0 - ramp;
            interpolation * (1.0 - extrapolation_factor) + extrapolation * extrapolation_factor
        })
        .collect();
    (inv, attention as f32)
}

/// Rotates the first `rope.rotary_dims` of one head vector in place at `position`
/// (HF `apply_rotary_pos_emb` with `rotate_half`: pairs (i, i + half)).
pub fn apply_rope(rope: &RopeSpec, head: &mut [f32], position: usize) {
    let half = rope.rotary_dims / 2;
    for i in 0..half {
        let (c, s) = cos_sin(rope, position, i);
        rotate_pair(head, i, half, c, s);
    }
}

/// `apply_rope` with the pairs' (cos, sin) already made (`cos_sin` for i in 0..rotary_dims / 2):
/// the same bits, for the heads of one position sharing one table.
pub fn apply_rope_table(table: &[(f32, f32)], head: &mut [f32]) {
    let half = table.len();
    for (i, &(c, s)) in table.iter().enumerate() {
        rotate_pair(head, i, half, c, s);
    }
}

#[inline(always)]
fn rotate_pair(head: &mut [f32], i: usize, half: usize, c: f32, s: f32) {
    let (x0, x1) = (head[i], head[i + half]);
    head[i] = x0 * c - x1 * s;
    head[i + half] = x1 * c + x0 * s;
}

/// The (cos, sin) that rotate pair `i` at `position`. HF: freqs = position (f32) * inv_freq
/// (f32); cos/sin in f32, times attention_factor (evaluated here in f64, then rounded).
pub fn cos_sin(rope: &RopeSpec, position: usize, i: usize) -> (f32, f32) {
    let angle = position as f32 * rope.inv_freq[i];
    let (s, c) = (angle as f64).sin_cos();
    (c as f32 * rope.attention_factor, s as f32 * rope.attention_factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_keeps_high_frequencies_and_divides_low_ones() {
        // Wavelength 2*pi/inv: the first (fastest) frequency has wavelength 2*pi < 8192/4,
        // so it is kept; the slowest of a 128-dim head at theta 500000 is far longer than
        // 8192/1, so it is divided by the factor 8.
        let base = default_inv_freq(500000.0, 128);
        let out = llama3_inv_freq(&base, 8.0, 1.0, 4.0, 8192.0);
        assert_eq!(out[0], base[0]);
        assert_eq!(out[63], (base[63] as f64 / 8.0) as f32);
    }
}
