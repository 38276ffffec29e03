//! The samplers that select and steer by what they selected: mirostat 1 and 2
//! (https://arxiv.org/abs/2007.14966), which keep the surprise of the tokens taken near `tau`,
//! and adaptive-p (llama.cpp PR 17927), which keeps their probability near a target. As
//! llama.cpp's src/llama-sampler.cpp defines them: each picks with its own `std::mt19937`
//! through `std::discrete_distribution` (`Mt19937::discrete`), in f32 where it uses float.

use super::{new_sampler, rng_seed, softmax_impl, Kind};
use crate::abi::{Sampler, Token, TokenData};
use crate::rng::Mt19937;

/// `int(x)` as x86-64 computes it (cvttss2si): truncation, and INT_MIN for NaN or a value
/// outside int (Rust's `as` saturates instead).
fn c_int(x: f32) -> i32 {
    if !(-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

/// `powf(2, mu)` with the base hidden from the optimizer, which may rewrite a power of a
/// constant 2 as `exp2f`; llama.cpp calls `powf`, and the two can differ in the last bit.
fn pow2(mu: f32) -> f32 {
    std::hint::black_box(2.0f32).powf(mu)
}

/// The generator of a seeded sampler: the seed as given (LLAMA_DEFAULT_SEED draws one at
/// creation and at each reset) and the one in use.
#[derive(Clone)]
pub struct Seeded {
    pub seed: u32,
    pub seed_cur: u32,
    pub rng: Mt19937,
}

impl Seeded {
    pub fn new(seed: u32) -> Seeded {
        let seed_cur = rng_seed(seed);
        Seeded { seed, seed_cur, rng: Mt19937::new(seed_cur) }
    }
    pub fn reset(&mut self) {
        *self = Seeded::new(self.seed);
    }
}

/// `llama_sampler_init_mirostat`.
#[derive(Clone)]
pub struct Mirostat {
    pub n_vocab: i32,
    pub tau: f32,
    pub eta: f32,
    /// How many of the most probable tokens estimate the Zipf exponent.
    pub m: i32,
    /// The surprise bound, 2 tau at first.
    pub mu: f32,
    pub gen: Seeded,
}

impl Mirostat {
    pub fn new(n_vocab: i32, seed: u32, tau: f32, eta: f32, m: i32) -> Mirostat {
        Mirostat { n_vocab, tau, eta, m, mu: 2.0 * tau, gen: Seeded::new(seed) }
    }

    pub fn reset(&mut self) {
        self.mu = 2.0 * self.tau;
        self.gen.reset();
    }

    /// Estimates the Zipf exponent s from the `m` most probable tokens, keeps the top k that
    /// gives a surprise of mu, picks, and moves mu by eta times the surprise's error.
    pub fn apply(&mut self, v: &mut Vec<TokenData>, sorted: &mut bool, selected: &mut i64) {
        if v.is_empty() {
            // llama.cpp asserts on an empty array.
            *selected = -1;
            return;
        }
        softmax_impl(v, sorted, true);
        // size_t(m - 1): a negative m reads as huge, so the loop then runs to the end.
        let limit = self.m.wrapping_sub(1) as usize;
        let mut sum_ti_bi = 0.0f32;
        let mut sum_ti_sq = 0.0f32;
        let mut i = 0;
        while i < limit && i < v.len() - 1 {
            let t_i = ((i + 2) as f32 / (i + 1) as f32).ln();
            let b_i = (v[i].p / v[i + 1].p).ln();
            sum_ti_bi += t_i * b_i;
            sum_ti_sq += t_i * t_i;
            i += 1;
        }
        let s_hat = sum_ti_bi / sum_ti_sq;
        let epsilon_hat = s_hat - 1.0;
        let k = ((epsilon_hat * pow2(self.mu)) / (1.0 - (self.n_vocab as f32).powf(-epsilon_hat))).powf(1.0 / s_hat);
        // llama_sampler_top_k_impl on the sorted array: keep the first k.
        let k = c_int(k).max(1) as usize;
        v.truncate(k.min(v.len()));
        softmax_impl(v, sorted, true);
        let weights: Vec<f32> = v.iter().map(|d| d.p).collect();
        let idx = self.gen.rng.discrete(&weights);
        *selected = idx as i64;
        let observed_surprise = -v[idx].p.log2();
        let e = observed_surprise - self.tau;
        self.mu -= self.eta * e;
    }
}

/// `llama_sampler_init_mirostat_v2`.
#[derive(Clone)]
pub struct MirostatV2 {
    pub tau: f32,
    pub eta: f32,
    pub mu: f32,
    pub gen: Seeded,
}

impl MirostatV2 {
    pub fn new(seed: u32, tau: f32, eta: f32) -> MirostatV2 {
        MirostatV2 { tau, eta, mu: 2.0 * tau, gen: Seeded::new(seed) }
    }

    pub fn reset(&mut self) {
        self.mu = 2.0 * self.tau;
        self.gen.reset();
    }

    /// Keeps the most probable tokens up to the first whose surprise (-log2 p) exceeds mu
    /// (at least one), picks among them, and moves mu by eta times the surprise's error.
    pub fn apply(&mut self, v: &mut Vec<TokenData>, sorted: &mut bool, selected: &mut i64) {
        if v.is_empty() {
            *selected = -1;
            return;
        }
        softmax_impl(v, sorted, true);
        let keep = v.iter().position(|d| -d.p.log2() > self.mu).unwrap_or(v.len());
        v.truncate(keep.max(1));
        softmax_impl(v, sorted, true);
        let weights: Vec<f32> = v.iter().map(|d| d.p).collect();
        let idx = self.gen.rng.discrete(&weights);
        *selected = idx as i64;
        let observed_surprise = -v[idx].p.log2();
        let e = observed_surprise - self.tau;
        self.mu -= self.eta * e;
    }
}

/// llama.cpp's adaptive-p constants: the width of the target's neighbourhood, the logit at
/// the target, and how fast the logit falls away from it.
const DISTRIBUTION_WIDTH: f32 = 0.3;
const PEAK_LOGIT_VALUE: f32 = 5.0;
const SHARPNESS: f32 = 10.0;
const INV_WIDTH: f32 = 1.0 / DISTRIBUTION_WIDTH;

/// `llama_sampler_init_adaptive_p`.
#[derive(Clone)]
pub struct AdaptiveP {
    /// Negative: only picks from the distribution as it is.
    pub target: f32,
    /// Clamped to 0..0.99.
    pub decay: f32,
    /// sum(p_i * decay^i) over the probabilities (before the transform) of the tokens taken.
    pub weighted_sum: f32,
    /// sum(decay^i).
    pub total_weight: f32,
    /// The probabilities before the transform at the last apply.
    pub original_probs: Vec<f32>,
    /// The token the last apply picked and its index, until the next accept.
    pub pending: Option<(Token, usize)>,
    pub gen: Seeded,
}

impl AdaptiveP {
    pub fn new(target: f32, decay: f32, seed: u32) -> AdaptiveP {
        // std::clamp(decay, 0.0f, 0.99f) (a NaN stays NaN in both).
        let decay = decay.clamp(0.0, 0.99);
        AdaptiveP {
            target,
            decay,
            weighted_sum: target / (1.0 - decay),
            total_weight: 1.0 / (1.0 - decay),
            original_probs: Vec::new(),
            pending: None,
            gen: Seeded::new(seed),
        }
    }

    pub fn reset(&mut self) {
        self.weighted_sum = self.target / (1.0 - self.decay);
        self.total_weight = 1.0 / (1.0 - self.decay);
        self.pending = None;
        self.gen.reset();
    }

    /// As llama.cpp's clone: the running sums and the pending token, but a generator new from
    /// the seed, and no probabilities (a pending token accepted by the clone then adds 0;
    /// llama.cpp reads past its empty vector there).
    pub fn clone_as_llama_cpp(&self) -> AdaptiveP {
        AdaptiveP { gen: Seeded::new(self.gen.seed), original_probs: Vec::new(), ..self.clone() }
    }

    /// Only the token this sampler picked last updates the running average.
    pub fn accept(&mut self, token: Token) {
        if let Some((id, idx)) = self.pending.take() {
            if id == token {
                let p = self.original_probs.get(idx).copied().unwrap_or(0.0);
                self.weighted_sum = p + self.decay * self.weighted_sum;
                self.total_weight = 1.0 + self.decay * self.total_weight;
            }
        }
    }

    /// Each finite logit becomes PEAK - SHARPNESS d^2 / (1 + d), d = |p - target'| / WIDTH,
    /// where target' = 2 target - (the average probability taken so far), clamped to 0..1;
    /// then softmax and a pick. Neither softmax sorts.
    pub fn apply(&mut self, v: &mut [TokenData], sorted: &mut bool, selected: &mut i64) {
        if v.is_empty() {
            *selected = -1;
            return;
        }
        softmax_impl(v, sorted, false);
        if self.target < 0.0 {
            let weights: Vec<f32> = v.iter().map(|d| d.p).collect();
            *selected = self.gen.rng.discrete(&weights) as i64;
            return;
        }
        self.original_probs = v.iter().map(|d| d.p).collect();
        let target = clamp01(self.target);
        let adapted = clamp01(if self.total_weight == 0.0 { target } else { 2.0 * target - (self.weighted_sum / self.total_weight) });
        for d in v.iter_mut() {
            if d.logit == f32::NEG_INFINITY {
                continue;
            }
            let dist = ((d.p - adapted) * INV_WIDTH).abs();
            d.logit = PEAK_LOGIT_VALUE - SHARPNESS * dist * dist / (1.0 + dist);
        }
        softmax_impl(v, sorted, false);
        let weights: Vec<f32> = v.iter().map(|d| d.p).collect();
        let idx = self.gen.rng.discrete(&weights);
        *selected = idx as i64;
        self.pending = Some((v[idx].id, idx));
    }
}

/// std::clamp(x, 0.0f, 1.0f) (a NaN stays NaN in both).
fn clamp01(x: f32) -> f32 {
    x.clamp(0.0, 1.0)
}

/// Mirostat 1: selects, keeping the tokens' surprise near `tau` (learning rate `eta`, Zipf
/// exponent estimated from the `m` most probable tokens of `n_vocab`).
#[no_mangle]
pub extern "C" fn llama_sampler_init_mirostat(n_vocab: i32, seed: u32, tau: f32, eta: f32, m: i32) -> *mut Sampler {
    new_sampler(Kind::Mirostat(Box::new(Mirostat::new(n_vocab, seed, tau, eta, m))))
}

/// Mirostat 2: selects among the tokens whose surprise is within a bound that it moves
/// toward `tau` (learning rate `eta`).
#[no_mangle]
pub extern "C" fn llama_sampler_init_mirostat_v2(seed: u32, tau: f32, eta: f32) -> *mut Sampler {
    new_sampler(Kind::MirostatV2(Box::new(MirostatV2::new(seed, tau, eta))))
}

/// Adaptive-p: selects tokens near probability `target` (negative: plain sampling), adapted
/// by the average (decay `decay`, clamped to 0..0.99) of the probabilities it took.
#[no_mangle]
pub extern "C" fn llama_sampler_init_adaptive_p(target: f32, decay: f32, seed: u32) -> *mut Sampler {
    new_sampler(Kind::AdaptiveP(Box::new(AdaptiveP::new(target, decay, seed))))
}

#[cfg(test)]
mod tests {
    //! Values worked by hand from llama.cpp's definitions.
    use super::*;

    fn data(logits: &[f32]) -> Vec<TokenData> {
        logits.iter().enumerate().map(|(i, &l)| TokenData { id: i as i32, logit: l, p: 0.0 }).collect()
    }

    #[test]
    fn c_int_is_x86_truncation() {
        assert_eq!(c_int(2.9), 2);
        assert_eq!(c_int(-2.9), -2);
        assert_eq!(c_int(f32::NAN), i32::MIN);
        assert_eq!(c_int(f32::INFINITY), i32::MIN);
        assert_eq!(c_int(3e9), i32::MIN);
    }

    #[test]
    fn mirostat_v2_cuts_at_the_surprise_bound_and_moves_mu() {
        // Logits ln 4, ln 2, 0, 0 give p = 4/8, 2/8, 1/8, 1/8: surprises 1, 2, 3, 3 bits.
        // tau 1 makes mu 2: the tokens of surprise 1 and 2 stay, renormalized to 2/3, 1/3.
        let mut s = MirostatV2::new(9, 1.0, 0.5);
        let mut v = data(&[4f32.ln(), 2f32.ln(), 0.0, 0.0]);
        let (mut sorted, mut selected) = (false, -1);
        s.apply(&mut v, &mut sorted, &mut selected);
        assert_eq!(v.len(), 2);
        assert!((v[0].p - 2.0 / 3.0).abs() < 1e-6 && (v[1].p - 1.0 / 3.0).abs() < 1e-6);
        // mu = 2 - 0.5 (surprise - 1): token 0 (-log2 2/3 = 0.585) gives 2.2075, token 1
        // (-log2 1/3 = 1.585) gives 1.7075.
        let want = if selected == 0 { 2.2075 } else { 1.7075 };
        assert!((s.mu - want).abs() < 1e-3, "{} {selected}", s.mu);
        // A bound below every surprise still keeps one token, taken with p 1 and no draw.
        let mut s = MirostatV2::new(9, -5.0, 0.5);
        let rng = s.gen.rng.clone();
        let mut v = data(&[4f32.ln(), 2f32.ln(), 0.0, 0.0]);
        s.apply(&mut v, &mut false, &mut selected);
        assert_eq!((v.len(), selected, v[0].p), (1, 0, 1.0));
        assert_eq!(s.gen.rng.clone().next_u32(), rng.clone().next_u32());
    }

    #[test]
    fn mirostat_estimates_s_and_keeps_the_top_k() {
        // p proportional to 1/i (Zipf, s = 1): every b_i = ln((i+1)/i) = t_i, so s_hat = 1
        // and epsilon_hat = 0, and k = (0 * 2^mu / (1 - N^0))^(1/1) = 0/0: NaN, which int()
        // makes INT_MIN and max(., 1) makes 1. One token, no draw.
        let mut s = Mirostat::new(100, 3, 5.0, 0.1, 100);
        let logits: Vec<f32> = (1..=8).map(|i| -(i as f32).ln()).collect();
        let mut v = data(&logits);
        let mut selected = -1;
        s.apply(&mut v, &mut false, &mut selected);
        assert_eq!((v.len(), selected), (1, 0));
        // p = 1, surprise 0: mu = 10 - 0.1 (0 - 5) = 10.5.
        assert_eq!(s.mu, 10.5);
        // Two equal logits: b = ln 1 = 0, s_hat = 0, k = (-1 * 2^mu / (1 - N))^(1/0) where
        // 2^10.5 / 99 > 1, so infinity: INT_MIN again (out of range), one token.
        let mut v = data(&[0.0, 0.0]);
        s.apply(&mut v, &mut false, &mut selected);
        assert_eq!(v.len(), 1);
    }

    #[test]
    fn adaptive_p_peaks_at_the_target_and_learns_from_accepted_tokens() {
        // target 0.5 with the initial average equal to it (weighted_sum / total_weight =
        // target): the adapted target is 0.5. p = 0.5, 0.25, 0.25 give distances 0, 0.833,
        // 0.833: logits 5 and 5 - 10 * 0.694 / 1.833 = 1.2121.
        let mut s = AdaptiveP::new(0.5, 0.9, 1);
        let mut v = data(&[2f32.ln(), 0.0, 0.0]);
        let mut selected = -1;
        s.apply(&mut v, &mut false, &mut selected);
        assert_eq!(v[0].logit, 5.0);
        assert!((v[1].logit - 1.212_121).abs() < 1e-5, "{}", v[1].logit);
        assert_eq!(s.original_probs, vec![0.5, 0.25, 0.25]);
        // Accepting the picked token adds its original probability: ws = p + 0.9 ws,
        // tw = 1 + 0.9 tw (ws and tw start at 0.5 / 0.1 and 1 / 0.1, in float).
        let (ws, tw) = (s.weighted_sum, s.total_weight);
        assert_eq!((ws, tw), (0.5 / (1.0 - 0.9f32), 1.0 / (1.0 - 0.9f32)));
        let (id, idx) = s.pending.unwrap();
        s.accept(id);
        assert_eq!(s.total_weight, 1.0 + 0.9 * tw);
        assert_eq!(s.weighted_sum, [0.5, 0.25, 0.25][idx] + 0.9 * ws);
        // Another token accepted (picked by another sampler) changes nothing.
        let before = (s.weighted_sum, s.total_weight);
        s.apply(&mut data(&[2f32.ln(), 0.0, 0.0]), &mut false, &mut selected);
        s.accept(99);
        assert_eq!((s.weighted_sum, s.total_weight), before);
        // decay is clamped to 0.99.
        assert_eq!(AdaptiveP::new(0.5, 2.0, 1).decay, 0.99);
    }
}
