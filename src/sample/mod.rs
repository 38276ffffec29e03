//! Samplers: greedy, and seeded temperature / top-k / top-p / min-p sampling with a repetition
//! penalty. The random source is SplitMix64 over a caller-held state, so a seed reproduces a
//! run on any machine.

use crate::error::{Error, Result};

/// Index of the largest logit (the first on ties, as torch.argmax): the index one pass keeping
/// the first strictly larger value ends on, where a NaN is never larger and one at index 0 is
/// kept. Done as the first block of `ARGMAX_BLOCK` whose largest value beats those before it, then
/// a search of it for that value, so that the maxima vectorize: one pass with the index in the
/// chain took 0.3 ms on a 262k vocabulary, once per generated token.
pub fn argmax(logits: &[f32]) -> u32 {
    argmax_of_blocks(logits, logits.chunks(ARGMAX_BLOCK).map(largest))
}

/// `argmax` of `logits` given the largest value of each of its `ARGMAX_BLOCK` blocks, in order
/// (`largest_of_blocks`, which a backend may run on several threads): the same index.
pub fn argmax_of_blocks(logits: &[f32], maxima: impl IntoIterator<Item = f32>) -> u32 {
    let Some(&first) = logits.first() else { return 0 };
    if first.is_nan() {
        return 0;
    }
    let (mut max, mut block) = (first, 0);
    for (b, m) in maxima.into_iter().enumerate() {
        if m > max {
            (max, block) = (m, b);
        }
    }
    // The block holds max (its largest value, or `first` in block 0); a zero of either sign
    // equals the other, as it is not larger in the one pass.
    let at = block * ARGMAX_BLOCK;
    (at + logits[at..].iter().position(|&v| v == max).unwrap_or(0)) as u32
}

/// Logits per block of `argmax`.
pub const ARGMAX_BLOCK: usize = 1024;

/// `out[i]`: the largest non-NaN value of block i of `values` (`ARGMAX_BLOCK` values each,
/// the last one shorter), -inf if none; `out` has one entry per block.
pub fn largest_of_blocks(values: &[f32], out: &mut [f32]) {
    debug_assert_eq!(out.len(), values.len().div_ceil(ARGMAX_BLOCK));
    for (m, block) in out.iter_mut().zip(values.chunks(ARGMAX_BLOCK)) {
        *m = largest(block);
    }
}

/// The largest non-NaN value of `values` (-inf if none), in 16 running maxima.
fn largest(values: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = values.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            if v > *m {
                *m = v;
            }
        }
    }
    lanes.iter().chain(tail).fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// Sampling settings; `temperature <= 0` means greedy.
#[derive(Clone, Debug)]
pub struct SamplerParams {
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1.0 = off.
    pub top_p: f32,
    /// 0.0 = off.
    pub min_p: f32,
    /// 1.0 = off; applied to the ids in `recent` (HF's rule: divide positive logits, multiply
    /// negative ones).
    pub repetition_penalty: f32,
}

impl SamplerParams {
    /// Refuses settings that make the draw meaningless, naming the field: a temperature that is
    /// not finite (NaN would pass every `<= 0` test and sample from NaN weights), top_p outside
    /// (0, 1], min_p outside [0, 1], a repetition penalty that is not finite and positive.
    pub fn check(&self) -> Result<()> {
        let bad = |what: &str, v: f32| Err(Error::invalid(format!("sampler {what} = {v} is out of range")));
        if !self.temperature.is_finite() {
            return bad("temperature", self.temperature);
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", self.top_p);
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", self.min_p);
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return bad("repetition_penalty", self.repetition_penalty);
        }
        Ok(())
    }
}

/// Refuses logits a draw cannot be made from, naming the first bad index: NaN or +inf
/// anywhere (greedy would return an arbitrary index; sampling would return token 0), or no
/// finite logit at all. -inf is allowed: it masks a token out (probability 0).
pub fn check_logits(logits: &[f32]) -> Result<()> {
    if let Some(i) = logits.iter().position(|v| v.is_nan() || *v == f32::INFINITY) {
        return Err(Error::invalid(format!("logits[{i}] is {}: logits must be finite or -inf", logits[i])));
    }
    if !logits.iter().any(|v| v.is_finite()) {
        return Err(Error::invalid(format!("all {} logits are -inf: nothing to draw", logits.len())));
    }
    Ok(())
}

impl Default for SamplerParams {
    fn default() -> Self {
        SamplerParams { temperature: 0.0, top_k: 0, top_p: 1.0, min_p: 0.0, repetition_penalty: 1.0 }
    }
}

/// SplitMix64: one u64 of state, advanced per draw.
pub fn next_u64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in [0, 1) with 53 bits.
pub fn next_f64(state: &mut u64) -> f64 {
    (next_u64(state) >> 11) as f64 / (1u64 << 53) as f64
}

/// The distribution `p` draws from: one probability per vocabulary entry (zero outside the
/// kept set). Greedy (`temperature <= 0`) is a point mass on the argmax. Computed in f64.
pub fn probabilities(logits: &[f32], p: &SamplerParams, recent: &[u32]) -> Vec<f64> {
    let mut l = logits.to_vec();
    if p.repetition_penalty != 1.0 {
        for &t in recent {
            if let Some(v) = l.get_mut(t as usize) {
                *v = if *v > 0.0 { *v / p.repetition_penalty } else { *v * p.repetition_penalty };
            }
        }
    }
    let mut out = vec![0.0f64; l.len()];
    if l.is_empty() {
        return out;
    }
    if p.temperature <= 0.0 {
        out[argmax(&l) as usize] = 1.0;
        return out;
    }
    // Candidates sorted by logit, descending (ties by id for reproducibility).
    let mut idx: Vec<u32> = (0..l.len() as u32).collect();
    idx.sort_by(|&a, &b| l[b as usize].total_cmp(&l[a as usize]).then(a.cmp(&b)));
    if p.top_k > 0 && p.top_k < idx.len() {
        idx.truncate(p.top_k);
    }
    let max = l[idx[0] as usize] as f64;
    let mut probs: Vec<f64> = idx.iter().map(|&i| ((l[i as usize] as f64 - max) / p.temperature as f64).exp()).collect();
    let total: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|x| *x /= total);
    let mut keep = probs.len();
    if p.min_p > 0.0 {
        let floor = probs[0] * p.min_p as f64;
        keep = probs.iter().take_while(|&&x| x >= floor).count().max(1);
    }
    if p.top_p < 1.0 {
        let mut acc = 0.0;
        let mut n = 0;
        for &x in &probs[..keep] {
            acc += x;
            n += 1;
            if acc >= p.top_p as f64 {
                break;
            }
        }
        keep = n.max(1);
    }
    let total: f64 = probs[..keep].iter().sum();
    for (k, &i) in idx[..keep].iter().enumerate() {
        out[i as usize] = probs[k] / total;
    }
    out
}

/// Draws an index from unnormalized non-negative weights (the last positive one on rounding).
pub fn draw(weights: &[f64], rng: &mut u64) -> u32 {
    let total: f64 = weights.iter().sum();
    let mut r = next_f64(rng) * total;
    let mut last = 0;
    for (i, &w) in weights.iter().enumerate() {
        if w > 0.0 {
            if r < w {
                return i as u32;
            }
            r -= w;
            last = i;
        }
    }
    last as u32
}

/// Draws a token from `logits` under `p`, advancing `rng` (greedy draws nothing).
pub fn sample(logits: &[f32], p: &SamplerParams, recent: &[u32], rng: &mut u64) -> u32 {
    if p.temperature <= 0.0 && p.repetition_penalty == 1.0 {
        return argmax(logits);
    }
    let probs = probabilities(logits, p, recent);
    if p.temperature <= 0.0 {
        return argmax_f64(&probs);
    }
    draw(&probs, rng)
}

fn argmax_f64(v: &[f64]) -> u32 {
    let mut best = 0usize;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_first_max_and_top_k_one_is_greedy() {
        let l = [0.5f32, 2.0, 2.0, -1.0];
        assert_eq!(argmax(&l), 1);
        let p = SamplerParams { temperature: 1.0, top_k: 1, ..Default::default() };
        let mut rng = 7;
        for _ in 0..10 {
            assert_eq!(sample(&l, &p, &[], &mut rng), 1);
        }
    }

    /// `argmax` is the one pass it is defined by (written out here) on values with ties,
    /// zeros of both signs, infinities and NaNs (at the start too), across block boundaries.
    #[test]
    fn argmax_is_the_first_strictly_larger_value_of_one_pass() {
        let one_pass = |l: &[f32]| {
            let mut best = 0usize;
            for (i, &v) in l.iter().enumerate() {
                if v > l[best] {
                    best = i;
                }
            }
            best as u32
        };
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let specials = [f32::NAN, f32::NEG_INFINITY, f32::INFINITY, 0.0, -0.0, 3.0];
        for n in [0usize, 1, 2, 15, 16, 17, 1023, 1024, 1025, 3000, 5000] {
            for round in 0..40 {
                let mut l: Vec<f32> = (0..n).map(|_| (next_u64(&mut seed) % 7) as f32 - 5.0).collect();
                // A few values of each kind in random places; some rounds put one at index 0.
                for _ in 0..(round % 6) {
                    if n > 0 {
                        let at = if round % 5 == 0 { 0 } else { next_u64(&mut seed) as usize % n };
                        l[at] = specials[next_u64(&mut seed) as usize % specials.len()];
                    }
                }
                assert_eq!(argmax(&l), one_pass(&l), "n={n} round {round}: {l:?}");
            }
        }
        assert_eq!(argmax(&[-0.0, 0.0, 1.0, 1.0]), 2);
        assert_eq!(argmax(&[f32::NAN, 5.0]), 0);
        assert_eq!(argmax(&[1.0, f32::NAN, 5.0, f32::NAN]), 2);
        let mut late = vec![0.0f32; 4096];
        late[4000] = 1.0;
        late[4090] = 1.0;
        assert_eq!(argmax(&late), 4000);
    }

    #[test]
    fn non_finite_logits_are_refused_with_their_index() {
        for bad in [f32::NAN, f32::INFINITY] {
            let e = check_logits(&[0.5, 1.0, bad, 2.0]).unwrap_err();
            assert_eq!(e.status, crate::Status::ErrInvalidArgument);
            assert!(e.message.contains("logits[2]"), "{}", e.message);
        }
        assert!(check_logits(&[f32::NEG_INFINITY; 3]).is_err());
        // -inf masks a token: allowed, and never drawn.
        let l = [f32::NEG_INFINITY, 1.0, 0.0];
        assert!(check_logits(&l).is_ok());
        let p = SamplerParams { temperature: 1.0, ..Default::default() };
        let mut rng = 3;
        for _ in 0..100 {
            assert_ne!(sample(&l, &p, &[], &mut rng), 0);
        }
    }

    #[test]
    fn a_nan_temperature_is_refused() {
        let p = SamplerParams { temperature: f32::NAN, ..Default::default() };
        assert!(p.check().unwrap_err().message.contains("temperature"));
        assert!(SamplerParams { temperature: 0.7, ..Default::default() }.check().is_ok());
    }
}
