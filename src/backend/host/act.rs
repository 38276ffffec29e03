//! GELU (tanh form) at the `fast` precision, with a polynomial exp in place of libm's tanh:
//! `0.5 x (1 + tanh(z)) = x / (1 + e^(-2z))`, `z = sqrt(2/pi) (x + 0.044715 x^3)`.
//!
//! `exp_poly` is written once in f32 operations (fused multiply-adds, a rounding to the nearest
//! integer, an exponent built in the bits); the AVX2 loop performs the same operations lane by
//! lane, so every path gives the same bits, and the result of an element never depends on the
//! batch or the thread count. At `exact` GELU stays libm's (cpu::gated_activation).
//! The exp is Cephes' single-precision polynomial over [-ln2/2, ln2/2] (within 2 ulp);
//! tests/host_act.rs bounds the distance to the exact form.
//!
//! SiLU is the same at both precisions (`gated_silu`): exp.rs's exponent, which is glibc's
//! `expf` bit for bit, 8 lanes wide. A polynomial form bought no measurable decode speed on
//! SmolLM2 and changed its greedy replies.

use crate::backend::cpu::GELU_C;
use crate::backend::host::row_dot::Isa;
use crate::semantics::Activation;

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split so that `n * LN2_HI` is exact for the n that occur.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// The clamp keeps 2^n a normal number and e^x finite.
const EXP_LO: f32 = -87.0;
const EXP_HI: f32 = 88.0;
const P: [f32; 6] = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5];

/// e^x for the fast activations. NaN stays NaN.
#[inline(always)]
pub fn exp_poly(x: f32) -> f32 {
    // max/min in the order of _mm256_max_ps(lo, x) / _mm256_min_ps(hi, x): a NaN x passes.
    let x = if x > EXP_LO || x.is_nan() { x } else { EXP_LO };
    let x = if x < EXP_HI || x.is_nan() { x } else { EXP_HI };
    let n = (x * LOG2E).round_ties_even();
    let r = (-n).mul_add(LN2_HI, x);
    let r = (-n).mul_add(LN2_LO, r);
    let mut p = P[0];
    for c in &P[1..] {
        p = p.mul_add(r, *c);
    }
    let y = p.mul_add(r * r, r) + 1.0;
    // n is in [-126, 127] here (0 for a NaN x, whose y is NaN anyway).
    let ni = if n.is_nan() { 0 } else { n as i32 };
    y * f32::from_bits(((ni + 127) as u32) << 23)
}

#[inline(always)]
fn gelu(x: f32, u: f32) -> f32 {
    let inner = (x * x * x).mul_add(0.044715, x);
    x / (1.0 + exp_poly(inner * (-2.0 * GELU_C))) * u
}

/// `gate[i] = silu(gate[i]) * up[i]` (cpu.rs's form, at both precisions), 8 lanes wide on
/// the kernels of `isa` where they have AVX2, 16 on the AVX-512 ones: the same operations, so
/// the same bits.
pub fn gated_silu(gate: &mut [f32], up: &[f32], isa: Isa) {
    #[cfg(target_arch = "x86_64")]
    let lanes: Lanes = if isa == Isa::Avx512 { avx2::silu16 } else { avx2::silu };
    #[cfg(not(target_arch = "x86_64"))]
    let lanes = ();
    gated(gate, up, isa, lanes, |g, u| crate::backend::cpu::silu(g) * u)
}

/// `gate[i] = act(gate[i]) * up[i]` at `fast`, on the kernels of `isa`: GELU as above, SiLU
/// as at `exact`.
pub fn gated_fast(act: Activation, gate: &mut [f32], up: &[f32], isa: Isa) {
    if act == Activation::Silu {
        return gated_silu(gate, up, isa);
    }
    #[cfg(target_arch = "x86_64")]
    let lanes: Lanes = avx2::gelu;
    #[cfg(not(target_arch = "x86_64"))]
    let lanes = ();
    gated(gate, up, isa, lanes, gelu)
}

/// An 8-lane loop over the whole groups of 8: returns how many elements it did.
#[cfg(target_arch = "x86_64")]
type Lanes = unsafe fn(&mut [f32], &[f32]) -> usize;
#[cfg(not(target_arch = "x86_64"))]
type Lanes = ();

/// `gate[i] = f(gate[i], up[i])`: `lanes` first where `isa` has AVX2, `f` on the rest.
fn gated(gate: &mut [f32], up: &[f32], isa: Isa, lanes: Lanes, f: impl Fn(f32, f32) -> f32) {
    let n = gate.len().min(up.len());
    #[allow(unused_mut)]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if matches!(isa, Isa::Avx2 | Isa::Avx512) {
        // SAFETY: the Avx2 and Avx512 kernels are only selected on a CPU with AVX2 and FMA
        // (Isa::available), the features `lanes` is compiled for.
        done = unsafe { lanes(&mut gate[..n], &up[..n]) };
    }
    let _ = (isa, lanes);
    for (g, &u) in gate[done..n].iter_mut().zip(&up[done..n]) {
        *g = f(*g, u);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::*;

    /// `-x`: the sign bit flipped, as the scalar negation does (0 - x would turn -0 into +0).
    #[inline(always)]
    unsafe fn neg8(x: __m256) -> __m256 {
        _mm256_xor_ps(x, _mm256_set1_ps(-0.0))
    }

    /// `exp_poly` on 8 lanes, operation for operation.
    #[inline(always)]
    unsafe fn exp8(x: __m256) -> __m256 {
        let x = _mm256_max_ps(_mm256_set1_ps(EXP_LO), x);
        let x = _mm256_min_ps(_mm256_set1_ps(EXP_HI), x);
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)));
        let neg = neg8(n);
        let r = _mm256_fmadd_ps(neg, _mm256_set1_ps(LN2_HI), x);
        let r = _mm256_fmadd_ps(neg, _mm256_set1_ps(LN2_LO), r);
        let mut p = _mm256_set1_ps(P[0]);
        for c in &P[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
        }
        let y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0));
        // A NaN lane converts to i32::MIN: its 2^n is garbage, its y NaN, the product NaN.
        let ni = _mm256_cvtps_epi32(n);
        let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(ni, _mm256_set1_epi32(127))));
        _mm256_mul_ps(y, scale)
    }

    /// `g / (1 + e(g)) * u` on the whole groups of 8 (the form both activations take); returns
    /// how many elements were done.
    #[inline(always)]
    unsafe fn logistic_times_up(gate: &mut [f32], up: &[f32], e: impl Fn(__m256) -> __m256) -> usize {
        let n = gate.len() / 8 * 8;
        let one = _mm256_set1_ps(1.0);
        for i in (0..n).step_by(8) {
            let g = _mm256_loadu_ps(gate.as_ptr().add(i));
            let u = _mm256_loadu_ps(up.as_ptr().add(i));
            _mm256_storeu_ps(gate.as_mut_ptr().add(i), _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e(g))), u));
        }
        n
    }

    /// SiLU times up, as cpu::silu: -x, e^-x (exp.rs), 1 + that, x over it, times up.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn silu(gate: &mut [f32], up: &[f32]) -> usize {
        logistic_times_up(gate, up, |g| crate::backend::exp::avx2::exp8(neg8(g)))
    }

    /// `silu` 16 lanes wide, with exp.rs's AVX-512 exponent (the same bits): on a verify of 8
    /// drafted rows on SmolLM2, the 8-lane form took about a twelfth of the extra rows' time.
    /// The whole groups of 16, then `silu` on a group of 8 left.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and AVX-512 F (`Isa::Avx512`).
    #[target_feature(enable = "avx2,fma,avx512f")]
    pub unsafe fn silu16(gate: &mut [f32], up: &[f32]) -> usize {
        let n = gate.len().min(up.len()) / 16 * 16;
        // SAFETY: i + 16 <= n, inside both slices; the caller's promise for the instructions.
        unsafe {
            let tab = crate::backend::exp::avx512::table();
            let one = _mm512_set1_ps(1.0);
            for i in (0..n).step_by(16) {
                let g = _mm512_loadu_ps(gate.as_ptr().add(i));
                let u = _mm512_loadu_ps(up.as_ptr().add(i));
                // -g: the sign bit flipped (an integer xor: AVX-512 F has no float one).
                let neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32(i32::MIN)));
                let e = crate::backend::exp::avx512::exp16(neg, &tab);
                _mm512_storeu_ps(gate.as_mut_ptr().add(i), _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u));
            }
            n + silu(&mut gate[n..], &up[n..])
        }
    }

    /// GELU times up, as `gelu`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn gelu(gate: &mut [f32], up: &[f32]) -> usize {
        logistic_times_up(gate, up, |g| {
            let x3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
            let inner = _mm256_fmadd_ps(x3, _mm256_set1_ps(0.044715), g);
            exp8(_mm256_mul_ps(inner, _mm256_set1_ps(-2.0 * GELU_C)))
        })
    }
}
