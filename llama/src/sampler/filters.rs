//! The samplers that reshape or cut the candidates without selecting: dynamic temperature
//! (`temp-ext`), XTC and top-n-sigma, as llama.cpp's src/llama-sampler.cpp defines them. The
//! arithmetic is llama.cpp's, type for type (f32 where it uses float, f64 where double), so
//! that the same logits give the same bits.

use super::{new_sampler, rng_seed, softmax_impl, temp_impl, Kind};
use crate::abi::{Sampler, TokenData};
use crate::rng::Mt19937;

/// `llama_sampler_init_temp_ext`: with `delta` > 0 the temperature moves between
/// `temp - delta` (not below 0) and `temp + delta` with the candidates' normalized entropy to
/// the power `exponent` (https://arxiv.org/abs/2309.02772); else plain temperature.
#[derive(Clone)]
pub struct TempExt {
    pub temp: f32,
    pub delta: f32,
    pub exponent: f32,
}

impl TempExt {
    pub fn apply(&self, v: &mut [TokenData], sorted: &mut bool) {
        if self.delta <= 0.0 {
            temp_impl(v, self.temp);
            return;
        }
        // std::max(0.0f, x): 0 unless 0 < x.
        let low = self.temp - self.delta;
        let min_temp = if 0.0 < low { low } else { 0.0 };
        let max_temp = self.temp + self.delta;
        if v.len() <= 1 {
            return;
        }
        let max_entropy = -(1.0f32 / v.len() as f32).ln();
        softmax_impl(v, sorted, true);
        let mut entropy = 0.0f32;
        for d in v.iter() {
            if d.p > 0.0 {
                entropy -= d.p * d.p.ln();
            }
        }
        let normalized_entropy = entropy / max_entropy;
        let dyn_temp = min_temp + (max_temp - min_temp) * normalized_entropy.powf(self.exponent);
        temp_impl(v, dyn_temp);
        // The probabilities again, in double from the (still first) largest logit; each
        // stored as float, the sum kept in double, the quotient rounded to float.
        let max_l = v[0].logit as f64;
        let mut sum = 0.0f64;
        for d in v.iter_mut() {
            let p = (d.logit as f64 - max_l).exp();
            d.p = p as f32;
            sum += p;
        }
        for d in v.iter_mut() {
            d.p = (d.p as f64 / sum) as f32;
        }
    }
}

/// `llama_sampler_init_xtc` (Exclude Top Choices): with chance `probability` (one
/// `uniform_real_distribution<float>` draw per apply, on two or more candidates), every
/// candidate of probability at least `threshold` but the least of them is removed, if
/// `min_keep` remain.
#[derive(Clone)]
pub struct Xtc {
    pub probability: f32,
    pub threshold: f32,
    pub min_keep: usize,
    /// As given (LLAMA_DEFAULT_SEED draws one at each reset).
    pub seed: u32,
    pub rng: Mt19937,
}

impl Xtc {
    pub fn new(probability: f32, threshold: f32, min_keep: usize, seed: u32) -> Xtc {
        Xtc { probability, threshold, min_keep, seed, rng: Mt19937::new(rng_seed(seed)) }
    }

    pub fn reset(&mut self) {
        self.rng = Mt19937::new(rng_seed(self.seed));
    }

    /// Returns how many leading candidates are removed: llama.cpp moves the array's `data`
    /// past them, it does not move the candidates.
    pub fn apply(&mut self, v: &mut [TokenData], sorted: &mut bool) -> usize {
        if self.probability <= 0.0 || self.threshold > 0.5 || v.len() < 2 {
            return 0;
        }
        if self.rng.uniform_f32() > self.probability {
            return 0;
        }
        softmax_impl(v, sorted, true);
        let mut pos_last = 0;
        for (i, d) in v.iter().enumerate() {
            if d.p >= self.threshold {
                pos_last = i;
            } else {
                break;
            }
        }
        if v.len() - pos_last >= self.min_keep && pos_last > 0 {
            pos_last
        } else {
            0
        }
    }
}

/// `llama_sampler_init_top_n_sigma`: logits more than `n` standard deviations below the
/// largest become -infinity (https://arxiv.org/pdf/2411.07641); -infinity logits are left out
/// of the mean and deviation.
pub fn top_n_sigma(v: &mut [TokenData], n: f32) {
    if n <= 0.0 || v.len() <= 1 {
        return;
    }
    let mut max = v[0].logit;
    let mut sum = 0.0f32;
    let mut count = 0usize;
    for d in v.iter() {
        if d.logit != f32::NEG_INFINITY {
            max = if max < d.logit { d.logit } else { max };
            sum += d.logit;
            count += 1;
        }
    }
    let mean = if count > 0 { sum / count as f32 } else { 0.0 };
    // acc (float) += pow(x, 2) (double): each square in double, the sum rounded to float.
    let mut acc = 0.0f32;
    for d in v.iter() {
        if d.logit != f32::NEG_INFINITY {
            let x = (d.logit - mean) as f64;
            acc = (acc as f64 + x * x) as f32;
        }
    }
    let std = if count > 0 { (acc / count as f32).sqrt() } else { 0.0 };
    for d in v.iter_mut() {
        if d.logit < max - n * std {
            d.logit = f32::NEG_INFINITY;
        }
    }
}

/// Dynamic temperature: between `t - delta` (not below 0) and `t + delta` by the candidates'
/// normalized entropy to the power `exponent`; plain temperature `t` when `delta` <= 0. With
/// `t` 1 and `delta` <= 0 llama.cpp's empty "?temp-ext".
#[no_mangle]
pub extern "C" fn llama_sampler_init_temp_ext(t: f32, delta: f32, exponent: f32) -> *mut Sampler {
    if t == 1.0 && delta <= 0.0 {
        return new_sampler(Kind::Empty(c"?temp-ext"));
    }
    new_sampler(Kind::TempExt(TempExt { temp: t, delta, exponent }))
}

/// XTC: with chance `p` (drawn from its own generator, seeded with `seed`), removes every
/// candidate of probability at least `t` but the least of them, where `min_keep` remain.
/// With `p` <= 0 or `t` > 0.5 llama.cpp's empty "?xtc".
#[no_mangle]
pub extern "C" fn llama_sampler_init_xtc(p: f32, t: f32, min_keep: usize, seed: u32) -> *mut Sampler {
    if p <= 0.0 || t > 0.5 {
        return new_sampler(Kind::Empty(c"?xtc"));
    }
    new_sampler(Kind::Xtc(Box::new(Xtc::new(p, t, min_keep, seed))))
}

/// Top-n-sigma: logits more than `n` standard deviations below the largest become
/// -infinity. With `n` <= 0 llama.cpp's empty "?top-n-sigma".
#[no_mangle]
pub extern "C" fn llama_sampler_init_top_n_sigma(n: f32) -> *mut Sampler {
    if n <= 0.0 {
        return new_sampler(Kind::Empty(c"?top-n-sigma"));
    }
    new_sampler(Kind::TopNSigma(n))
}

#[cfg(test)]
mod tests {
    //! Values worked by hand from llama.cpp's definitions.
    use super::*;

    fn data(logits: &[f32]) -> Vec<TokenData> {
        logits.iter().enumerate().map(|(i, &l)| TokenData { id: i as i32, logit: l, p: 0.0 }).collect()
    }

    #[test]
    fn top_n_sigma_masks_below_max_minus_n_deviations() {
        // Logits 1, 2, 3, 4: mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25,
        // deviation 1.1180; with n = 1 the bound is 4 - 1.118 = 2.882: 3 and 4 stay.
        let mut v = data(&[1.0, 2.0, 3.0, 4.0]);
        top_n_sigma(&mut v, 1.0);
        let finite: Vec<i32> = v.iter().filter(|d| d.logit.is_finite()).map(|d| d.id).collect();
        assert_eq!(finite, vec![2, 3]);
        // A -infinity logit counts in neither: 1, -inf, 3 has mean 2, deviation 1, bound 2
        // (n = 1): 1 goes.
        let mut v = data(&[1.0, f32::NEG_INFINITY, 3.0]);
        top_n_sigma(&mut v, 1.0);
        assert_eq!(v.iter().map(|d| d.logit).collect::<Vec<_>>(), vec![f32::NEG_INFINITY, f32::NEG_INFINITY, 3.0]);
    }

    #[test]
    fn temp_ext_scales_by_the_entropy() {
        // Two equal logits: entropy ln 2 = the maximum, normalized 1, so the temperature is
        // temp + delta = 2 whatever the exponent; the logits halve, the probabilities 0.5.
        let t = TempExt { temp: 1.0, delta: 1.0, exponent: 3.0 };
        let mut v = data(&[2.0, 2.0]);
        let mut sorted = false;
        t.apply(&mut v, &mut sorted);
        assert_eq!(v.iter().map(|d| (d.logit, d.p)).collect::<Vec<_>>(), vec![(1.0, 0.5), (1.0, 0.5)]);
        // delta 0: plain temperature, 4 / 0.5 = 8.
        let mut v = data(&[4.0]);
        TempExt { temp: 0.5, delta: 0.0, exponent: 1.0 }.apply(&mut v, &mut sorted);
        assert_eq!(v[0].logit, 8.0);
    }

    #[test]
    fn xtc_removes_all_top_choices_but_the_least() {
        // softmax(3, 2, 1, 0) = 0.6439, 0.2369, 0.0871, 0.0321: with threshold 0.08 the last
        // at or above it is index 2, so two leading candidates go (probability 1: always).
        let mut x = Xtc::new(1.0, 0.08, 1, 5);
        let mut v = data(&[0.0, 1.0, 2.0, 3.0]);
        let mut sorted = false;
        assert_eq!(x.apply(&mut v, &mut sorted), 2);
        assert_eq!(v[2..].iter().map(|d| d.id).collect::<Vec<_>>(), vec![1, 0]);
        // min_keep 3 would leave 2: nothing goes.
        let mut x = Xtc::new(1.0, 0.08, 3, 5);
        assert_eq!(x.apply(&mut data(&[0.0, 1.0, 2.0, 3.0]), &mut false), 0);
        // Only the top above the threshold (0.5): nothing to remove.
        let mut x = Xtc::new(1.0, 0.5, 1, 5);
        assert_eq!(x.apply(&mut data(&[0.0, 1.0, 2.0, 3.0]), &mut false), 0);
    }

    #[test]
    fn xtc_draws_once_per_apply_and_acts_when_the_draw_is_at_most_p() {
        // Seed 42's first float draw is 0.37454012 (rng.rs): p 0.37 skips, p 0.38 acts.
        let mut x = Xtc::new(0.37, 0.08, 1, 42);
        assert_eq!(x.apply(&mut data(&[0.0, 1.0, 2.0, 3.0]), &mut false), 0);
        let mut x = Xtc::new(0.38, 0.08, 1, 42);
        assert_eq!(x.apply(&mut data(&[0.0, 1.0, 2.0, 3.0]), &mut false), 2);
        // One candidate: no draw at all, so the next apply sees the first draw.
        let mut x = Xtc::new(0.38, 0.08, 1, 42);
        assert_eq!(x.apply(&mut data(&[1.0]), &mut false), 0);
        assert_eq!(x.apply(&mut data(&[0.0, 1.0, 2.0, 3.0]), &mut false), 2);
    }
}
