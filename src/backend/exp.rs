//! e^x in f32 with one set of bits on every path: a scalar form for the reference and the
//! scalar loops, and 8-lane AVX2 and 16-lane AVX-512 forms that perform the same operations
//! lane by lane.
//!
//! The algorithm is the one glibc's `expf` has used since 2.27 (from Arm's optimized
//! routines): x / ln2 * 32 = k + r in double, |r| <= 1/2; 2^(k/32) from a 32-entry table of
//! 2^(i/32) with k / 32 added into the exponent bits; 2^(r/32) by a cubic; one rounding to
//! f32 at the end (within 0.502 ulp). Written here with its fused multiply-adds where glibc's
//! x86-64 FMA build has them, so on a glibc machine with FMA these are libm's `expf` bits
//! (`tests` checks that against `f32::exp`); elsewhere they are still this function's, which
//! keeps a row's bits independent of the platform's libm.
//!
//! Softmax (attention.rs) and SiLU (cpu.rs) take their exponent from here at both precisions.

/// 32 / ln 2.
const INV_LN2_N: f64 = f64::from_bits(0x4047_1547_652b_82fe);
/// 1.5 * 2^52: adding it rounds a double below 2^51 in magnitude to an integer, ties to even.
const SHIFT: f64 = f64::from_bits(0x4338_0000_0000_0000);
/// The cubic for 2^(r/32) - 1 in r: C0 r^3 + C1 r^2 + C2 r (minimax coefficients over
/// [-1/2, 1/2], scaled by 32^-3, 32^-2, 32^-1).
const C: [f64; 3] = [f64::from_bits(0x3ebc_6af8_4b91_2394), f64::from_bits(0x3f2e_bfce_50fa_c4f3), f64::from_bits(0x3f96_2e42_ff0c_52d6)];
/// TAB[i] = bits(2^(i/32), rounded to the nearest double) - (i << 47): adding k << 47 for
/// k = 32 q + i then gives the bits of 2^(k/32) (q added into the exponent).
const TAB: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];
/// Above this e^x is not a finite f32 (the largest x whose e^x rounds below 2^128).
const OVERFLOW: f32 = f32::from_bits(0x42b1_7217); // 88.72283
/// Below this e^x rounds to 0 (e^x < 2^-150).
const UNDERFLOW: f32 = f32::from_bits(0xc2cf_f1b4); // -103.97208

/// e^x, rounded to f32: +inf above `OVERFLOW`, 0 below `UNDERFLOW` (and for -inf), NaN for NaN.
#[inline(always)]
pub fn expf(x: f32) -> f32 {
    if x.is_nan() {
        return x + x;
    }
    if x > OVERFLOW {
        return f32::INFINITY;
    }
    if x < UNDERFLOW {
        return 0.0;
    }
    // x / ln2 * 32 is not rounded on its own: glibc's FMA build fuses it into both of its
    // uses, the shift and the remainder.
    let xd = x as f64;
    let shifted = INV_LN2_N.mul_add(xd, SHIFT);
    let ki = shifted.to_bits();
    let r = INV_LN2_N.mul_add(xd, -(shifted - SHIFT));
    let s = f64::from_bits(TAB[(ki % 32) as usize].wrapping_add(ki << 47));
    let p = C[0].mul_add(r, C[1]);
    let y = C[2].mul_add(r, 1.0);
    let y = p.mul_add(r * r, y);
    (y * s) as f32
}

/// `x[i] = expf(x[i] - sub)` for every element.
#[inline(always)]
pub fn exp_sub_scalar(x: &mut [f32], sub: f32) {
    for v in x {
        *v = expf(*v - sub);
    }
}

#[cfg(target_arch = "x86_64")]
pub mod avx2 {
    use std::arch::x86_64::*;

    use super::*;

    /// TAB's entries split into their low and their high 32 bits, eight to a register, for
    /// `entry4`.
    static TAB_HALVES: [[u32; 32]; 2] = {
        let mut h = [[0; 32]; 2];
        let mut i = 0;
        while i < 32 {
            h[0][i] = TAB[i] as u32;
            h[1][i] = (TAB[i] >> 32) as u32;
            i += 1;
        }
        h
    };

    /// TAB[ki % 32] in each 64-bit lane, read with permutes: each half of every entry is
    /// picked from its four registers by bits 0..2 of the index (`vpermd`), then by bits 3
    /// and 4 (blends on the sign bit of the index shifted up). The same entries as
    /// `vpgatherqq`, which was slow on the Xeon VMs at hand: an exponent cost 2.8-3.0 ns with
    /// two gathers per eight, 1.5-2.2 ns with these permutes (4096 values from the L1, one
    /// thread; `examples/kernel_time exp` times today's form; BENCHMARKS.md).
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[inline(always)]
    unsafe fn entry4(ki: __m256i) -> __m256i {
        // SAFETY: the caller's promise; each load reads 8 of a half's 32 entries.
        unsafe {
            // Both 32-bit halves of a lane carry the index (its low half), so that a lane's
            // two permuted halves come from one entry.
            let idx = _mm256_shuffle_epi32::<0b10_10_00_00>(ki);
            let bit3 = _mm256_castsi256_ps(_mm256_slli_epi32::<28>(idx));
            let bit4 = _mm256_castsi256_ps(_mm256_slli_epi32::<27>(idx));
            let [low, high] = &TAB_HALVES;
            _mm256_blend_epi32::<0b1010_1010>(pick(low, idx, bit3, bit4), pick(high, idx, bit3, bit4))
        }
    }

    /// `half[idx % 32]` in each 32-bit lane (`entry4`). A function, not a closure: a closure
    /// is compiled without its caller's target features, and its intrinsics become calls.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[inline(always)]
    unsafe fn pick(half: &[u32; 32], idx: __m256i, bit3: __m256, bit4: __m256) -> __m256i {
        // SAFETY: the caller's promise; the loads read entries 0..8, 8..16, 16..24, 24..32.
        unsafe {
            let p = half.as_ptr();
            let e0 = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(p.cast()), idx);
            let e1 = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(p.add(8).cast()), idx);
            let e2 = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(p.add(16).cast()), idx);
            let e3 = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(p.add(24).cast()), idx);
            let low = _mm256_blendv_ps(_mm256_castsi256_ps(e0), _mm256_castsi256_ps(e1), bit3);
            let high = _mm256_blendv_ps(_mm256_castsi256_ps(e2), _mm256_castsi256_ps(e3), bit3);
            _mm256_castps_si256(_mm256_blendv_ps(low, high, bit4))
        }
    }

    /// `expf` on 4 lanes of doubles widened from f32 (the main path, no special cases).
    #[inline(always)]
    unsafe fn main4(xd: __m256d) -> __m128 {
        let shifted = _mm256_fmadd_pd(_mm256_set1_pd(INV_LN2_N), xd, _mm256_set1_pd(SHIFT));
        let ki = _mm256_castpd_si256(shifted);
        let r = _mm256_fmsub_pd(_mm256_set1_pd(INV_LN2_N), xd, _mm256_sub_pd(shifted, _mm256_set1_pd(SHIFT)));
        // SAFETY: the caller's promise (AVX2).
        let t = unsafe { entry4(ki) };
        let s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64::<47>(ki)));
        let p = _mm256_fmadd_pd(_mm256_set1_pd(C[0]), r, _mm256_set1_pd(C[1]));
        let y = _mm256_fmadd_pd(_mm256_set1_pd(C[2]), r, _mm256_set1_pd(1.0));
        let y = _mm256_fmadd_pd(p, _mm256_mul_pd(r, r), y);
        _mm256_cvtpd_ps(_mm256_mul_pd(y, s))
    }

    /// `expf` on 8 lanes, operation for operation (the special cases blended in after).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[inline(always)]
    pub unsafe fn exp8(x: __m256) -> __m256 {
        // SAFETY: the caller's promise.
        unsafe {
            let lo = main4(_mm256_cvtps_pd(_mm256_castps256_ps128(x)));
            let hi = main4(_mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x)));
            let y = _mm256_set_m128(hi, lo);
            let y = _mm256_blendv_ps(y, _mm256_set1_ps(f32::INFINITY), _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(OVERFLOW)));
            let y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(UNDERFLOW)));
            _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x))
        }
    }

    /// `exp_sub_scalar`, 8 elements at a time: the same bits.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[inline(always)]
    pub unsafe fn exp_sub(x: &mut [f32], sub: f32) {
        let n = x.len() / 8 * 8;
        let p = x.as_mut_ptr();
        // SAFETY: i + 8 <= n <= x.len(); the caller's promise for the instructions.
        unsafe {
            let s = _mm256_set1_ps(sub);
            for i in (0..n).step_by(8) {
                _mm256_storeu_ps(p.add(i), exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), s)));
            }
        }
        exp_sub_scalar(&mut x[n..], sub);
    }
}

/// The exponent 16 lanes wide with AVX-512 F: the same operations lane by lane as `expf`, the
/// table read with two-register permutes instead of AVX2's gather (a softmax's exponents took
/// about a sixth of a verify's attention with the gather).
#[cfg(target_arch = "x86_64")]
pub mod avx512 {
    use std::arch::x86_64::*;

    use super::*;

    /// `expf` on 8 lanes of doubles widened from f32 (the main path, no special cases); `tab`
    /// is TAB in four registers.
    #[inline(always)]
    unsafe fn main8(xd: __m512d, tab: &[__m512i; 4]) -> __m256 {
        // SAFETY: the caller's promise (AVX-512 F).
        unsafe {
            let shifted = _mm512_fmadd_pd(_mm512_set1_pd(INV_LN2_N), xd, _mm512_set1_pd(SHIFT));
            let ki = _mm512_castpd_si512(shifted);
            let r = _mm512_fmsub_pd(_mm512_set1_pd(INV_LN2_N), xd, _mm512_sub_pd(shifted, _mm512_set1_pd(SHIFT)));
            // Entry ki % 32: a permute of two registers reads bits 0..4 of the index, so
            // entries 0..16 and 16..32, then bit 4 picks one.
            let low = _mm512_permutex2var_epi64(tab[0], ki, tab[1]);
            let high = _mm512_permutex2var_epi64(tab[2], ki, tab[3]);
            let t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), low, high);
            let s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64::<47>(ki)));
            let p = _mm512_fmadd_pd(_mm512_set1_pd(C[0]), r, _mm512_set1_pd(C[1]));
            let y = _mm512_fmadd_pd(_mm512_set1_pd(C[2]), r, _mm512_set1_pd(1.0));
            let y = _mm512_fmadd_pd(p, _mm512_mul_pd(r, r), y);
            _mm512_cvtpd_ps(_mm512_mul_pd(y, s))
        }
    }

    /// TAB in four registers, for `exp16`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F.
    #[inline(always)]
    pub unsafe fn table() -> [__m512i; 4] {
        let t = TAB.as_ptr();
        // SAFETY: TAB's 32 entries are the four registers' 256 bytes; the caller's promise.
        [0, 8, 16, 24].map(|i| unsafe { _mm512_loadu_si512(t.add(i).cast()) })
    }

    /// `expf` on 16 lanes, operation for operation (the special cases blended in after); `tab`
    /// from `table`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F.
    #[inline(always)]
    pub unsafe fn exp16(x: __m512, tab: &[__m512i; 4]) -> __m512 {
        // SAFETY: the caller's promise.
        unsafe {
            let lo = main8(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), tab);
            let hi = main8(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(x)))), tab);
            let y = _mm512_castpd_ps(_mm512_insertf64x4::<1>(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi)));
            let y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, _mm512_set1_ps(OVERFLOW)), y, _mm512_set1_ps(f32::INFINITY));
            let y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(UNDERFLOW)), y, _mm512_setzero_ps());
            _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), y, _mm512_add_ps(x, x))
        }
    }

    /// `exp_sub_scalar`, 16 elements at a time: the same bits.
    ///
    /// # Safety
    /// The CPU has AVX-512 F.
    #[inline(always)]
    pub unsafe fn exp_sub(x: &mut [f32], sub: f32) {
        let n = x.len() / 16 * 16;
        let p = x.as_mut_ptr();
        // SAFETY: i + 16 <= n <= x.len(); the caller's promise for the instructions.
        unsafe {
            let tab = table();
            let s = _mm512_set1_ps(sub);
            for i in (0..n).step_by(16) {
                _mm512_storeu_ps(p.add(i), exp16(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), s), &tab));
            }
        }
        exp_sub_scalar(&mut x[n..], sub);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is 2^(i/32) as libm's exp2 gives it (correctly rounded at these points).
    #[test]
    fn table_is_powers_of_two_to_the_i_over_32() {
        for (i, &t) in TAB.iter().enumerate() {
            assert_eq!(t.wrapping_add((i as u64) << 47), (i as f64 / 32.0).exp2().to_bits(), "entry {i}");
        }
    }

    /// Inputs: a stride through every f32 bit pattern, a dense run over softmax's range
    /// [-30, 0], the thresholds and their neighbours, and the special values.
    fn inputs() -> Vec<f32> {
        let mut v: Vec<f32> = (0..=u32::MAX).step_by(4099).map(f32::from_bits).collect();
        v.extend((0..400_000).map(|i| -30.0 * i as f32 / 400_000.0));
        for t in [OVERFLOW, UNDERFLOW, 88.0, -88.0, -87.33, 0.0, -0.0] {
            let b = t.to_bits();
            v.extend((b.saturating_sub(40)..b.saturating_add(40)).map(f32::from_bits));
        }
        // Two of the inputs where an unfused x / ln2 * 32 gives the other neighbour (an
        // exhaustive comparison found these two among all 2^32).
        v.extend([f32::from_bits(0x4202_422f), f32::from_bits(0xc27c_65d9)]);
        v.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN, f32::MIN_POSITIVE, -f32::MIN_POSITIVE, f32::MAX, f32::MIN]);
        v
    }

    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    /// Against libm's `expf`: the same bits where libm is glibc's FMA build (every x86-64 CI
    /// machine: AVX2 and FMA), else within one ulp.
    #[test]
    fn scalar_is_libm() {
        let bits = cfg!(all(target_arch = "x86_64", target_env = "gnu")) && {
            #[cfg(target_arch = "x86_64")]
            let fma = is_x86_feature_detected!("fma");
            #[cfg(not(target_arch = "x86_64"))]
            let fma = false;
            fma
        };
        let mut off = 0;
        for x in inputs() {
            let (got, want) = (expf(x), x.exp());
            if bits {
                assert!(same(got, want), "expf({x:e}) = {got:e} ({:#x}), libm {want:e} ({:#x})", got.to_bits(), want.to_bits());
            } else if !same(got, want) {
                let ulps = (got.to_bits() as i64 - want.to_bits() as i64).abs();
                assert!(ulps <= 1, "expf({x:e}) = {got:e}, libm {want:e}");
                off += 1;
            }
        }
        if !bits {
            eprintln!("{off} inputs one ulp from this libm");
        }
    }

    /// `exp_sub` of a vector form against the scalar one on every input.
    #[cfg(target_arch = "x86_64")]
    fn lanes_are_scalar(form: unsafe fn(&mut [f32], f32)) {
        let mut x = inputs();
        let want: Vec<f32> = x.iter().map(|&v| expf(v - 0.25)).collect();
        // SAFETY: the callers checked that the CPU has the form's features.
        unsafe { form(&mut x, 0.25) };
        for (i, (&g, &w)) in x.iter().zip(&want).enumerate() {
            assert!(same(g, w), "element {i}: {g:e} vs {w:e}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_is_scalar() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            eprintln!("no AVX2 and FMA here: the 8-lane form is not run");
            return;
        }
        lanes_are_scalar(avx2_exp_sub);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_is_scalar() {
        if !is_x86_feature_detected!("avx512f") {
            eprintln!("no AVX-512 F here: the 16-lane form is not run");
            return;
        }
        lanes_are_scalar(avx512_exp_sub);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn avx512_exp_sub(x: &mut [f32], sub: f32) {
        // SAFETY: the caller's promise.
        unsafe { avx512::exp_sub(x, sub) }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2_exp_sub(x: &mut [f32], sub: f32) {
        // SAFETY: the caller's promise.
        unsafe { avx2::exp_sub(x, sub) }
    }
}
