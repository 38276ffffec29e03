//! The AVX2 + FMA + F16C row kernels, part 2: the K-quants (256-element super-blocks) and the
//! float formats. Helpers, the tile driver and the conventions are avx2.rs's.

use std::arch::x86_64::*;

use super::avx2::{
    bytes16, bytes32, each_row, f16_scalar, i8x32, lanes32, load32, nibble_runs, runs_f32, sum_lanes,
};
use super::row_dot::{finish_float, scale_min_k4, sub, Tile, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES};
use crate::quant::QK_K;

/// One Q4_K or Q5_K weight row against R activation rows. Sub-block sb (32 elements) goes to
/// accumulator sb % 2 scaled by `d * sc` (rounded as dequantize_row rounds it); `(dmin * m) *
/// sums[sb]` goes to a scalar chain subtracted at the end. `QS` is where the nibbles start; with
/// `HIGH` (Q5_K) the 32 bytes before them hold the fifth bits, bit sb of byte l for element l
/// of sub-block sb.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn k4_row<const BB: usize, const QS: usize, const HIGH: bool, const R: usize>(w: &[u8], xs: [&[f32]; R], sums: [&[f32]; R]) -> [f32; R] {
    let wb = w.as_chunks::<BB>().0;
    let mut nb = wb.len();
    for r in 0..R {
        nb = nb.min(xs[r].len() / QK_K).min(sums[r].len() / 8);
    }
    let mut xb: [&[[f32; QK_K]]; R] = [&[]; R];
    let mut sb: [&[[f32; 8]]; R] = [&[]; R];
    for r in 0..R {
        xb[r] = &xs[r].as_chunks::<QK_K>().0[..nb];
        sb[r] = &sums[r].as_chunks::<8>().0[..nb];
    }
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    let mut mins = [0.0f32; R];
    for b in 0..nb {
        let blk = &wb[b];
        let (d, dmin) = (f16_scalar(sub::<_, 0, 2, BB>(blk)), f16_scalar(sub::<_, 2, 2, BB>(blk)));
        let scales = sub::<_, 4, 12, BB>(blk);
        let qh = if HIGH { bytes32(sub::<_, 16, 32, BB>(blk)) } else { _mm256_setzero_si256() };
        let qs: &[u8; 128] = blk[QS..QS + 128].try_into().unwrap_or_else(|_| unreachable!("128 bytes from {QS} of {BB}"));
        for (g, q) in qs.as_chunks::<32>().0.iter().enumerate() {
            // Bytes 32g..32g + 32: low nibbles are sub-block 2g, high nibbles 2g + 1.
            let (lo, hi) = if HIGH {
                // Bytes with the fifth bit: 0x10 where bit k of the qh byte is set.
                let bit = |k: usize| {
                    let m = _mm256_set1_epi8(1 << k);
                    _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m), m), _mm256_set1_epi8(0x10))
                };
                let (v, m4) = (bytes32(q), _mm256_set1_epi8(0x0F));
                let lo = _mm256_or_si256(_mm256_and_si256(v, m4), bit(2 * g));
                let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(v), m4), bit(2 * g + 1));
                (i8x32(lo), i8x32(hi))
            } else {
                // Each half of the bytes gives [low 0..8, low 8..16, high 0..8, high 8..16].
                let [a0, a1, a2, a3] = nibble_runs(sub::<_, 0, 16, 32>(q));
                let [b0, b1, b2, b3] = nibble_runs(sub::<_, 16, 16, 32>(q));
                (runs_f32([a0, a1, b0, b1], 0), runs_f32([a2, a3, b2, b3], 0))
            };
            let (sc_lo, m_lo) = scale_min_k4(2 * g, scales);
            let (sc_hi, m_hi) = scale_min_k4(2 * g + 1, scales);
            let (d_lo, d_hi) = (_mm256_set1_ps(d * sc_lo as f32), _mm256_set1_ps(d * sc_hi as f32));
            let (m_lo, m_hi) = (dmin * m_lo as f32, dmin * m_hi as f32);
            for r in 0..R {
                let x64 = &xb[r][b].as_chunks::<64>().0[g];
                acc[r][0] = _mm256_fmadd_ps(d_lo, lanes32(lo, load32(sub::<_, 0, 32, 64>(x64))), acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(d_hi, lanes32(hi, load32(sub::<_, 32, 32, 64>(x64))), acc[r][1]);
                mins[r] = m_lo.mul_add(sb[r][b][2 * g], mins[r]);
                mins[r] = m_hi.mul_add(sb[r][b][2 * g + 1], mins[r]);
            }
        }
    }
    let mut out = [0.0f32; R];
    for r in 0..R {
        out[r] = sum_lanes(_mm256_add_ps(acc[r][0], acc[r][1])) - mins[r];
    }
    out
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q4_k_row<const R: usize>(w: &[u8], xs: [&[f32]; R], sums: [&[f32]; R]) -> [f32; R] {
    k4_row::<Q4_K_BYTES, 16, false, R>(w, xs, sums)
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q5_k_row<const R: usize>(w: &[u8], xs: [&[f32]; R], sums: [&[f32]; R]) -> [f32; R] {
    k4_row::<Q5_K_BYTES, 48, true, R>(w, xs, sums)
}

/// A K4 format's entries: `$name` for AVX2 (4 activation rows per decoded weight row), `$wide`
/// with AVX-512's 32 registers (avx2.rs's `legacy_entry` says why the bits are the same): 6
/// rows (8 spill: the two scalar min chains per row also take registers; for Q4_K 8 timed
/// slower than 4, 6 faster).
macro_rules! k4_entries {
    ($($name:ident, $wide:ident, $row:ident;)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c")]
        pub fn $name(t: Tile) {
            each_row::<4, 2>(t, |w, x, s| $row::<4>(w, x, s), |w, x, s| $row::<2>(w, x, s), |w, x, s| $row::<1>(w, x, s))
        }

        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
        pub fn $wide(t: Tile) {
            each_row::<6, 4>(t, |w, x, s| $row::<6>(w, x, s), |w, x, s| $row::<4>(w, x, s), |w, x, s| $row::<1>(w, x, s))
        }
    )*};
}

k4_entries! {
    q4_k, q4_k_wide, q4_k_row;
    q5_k, q5_k_wide, q5_k_row;
}

/// One Q6_K weight row against R activation rows. Group g (16 elements, one scale) goes to
/// accumulator g % 4, lane l of a group being `q_l x_l + q_{l+8} x_{l+8}`. In each 128-element
/// half, element l + 32k (k = 0..4) takes 4 bits from ql and 2 from qh (quant/dequant.rs); the
/// byte shifts below move whole 16-bit lanes, and the masks drop the bits that crossed a byte.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q6_k_row<const R: usize>(w: &[u8], xs: [&[f32]; R], _: [&[f32]; R]) -> [f32; R] {
    let (m4, m2) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
    let offset = _mm256_set1_epi8(32);
    let wb = w.as_chunks::<Q6_K_BYTES>().0;
    let mut nb = wb.len();
    for x in xs {
        nb = nb.min(x.len() / QK_K);
    }
    let mut xb: [&[[f32; QK_K]]; R] = [&[]; R];
    for r in 0..R {
        xb[r] = &xs[r].as_chunks::<QK_K>().0[..nb];
    }
    let mut acc = [[_mm256_setzero_ps(); 4]; R];
    for b in 0..nb {
        let blk = &wb[b];
        let d = f16_scalar(sub::<_, { Q6_K_BYTES - 2 }, 2, Q6_K_BYTES>(blk));
        let ql = sub::<_, 0, 128, Q6_K_BYTES>(blk).as_chunks::<64>().0;
        let qh = sub::<_, 128, 64, Q6_K_BYTES>(blk).as_chunks::<32>().0;
        let sc = sub::<_, 192, 16, Q6_K_BYTES>(blk).as_chunks::<8>().0;
        for (h, ((ql, qh), sc)) in ql.iter().zip(qh).zip(sc).enumerate() {
            let (ql0, ql1, qh) = (bytes32(sub::<_, 0, 32, 64>(ql)), bytes32(sub::<_, 32, 32, 64>(ql)), bytes32(qh));
            // (ql & 15 or ql >> 4) | ((qh >> 2k) & 3) << 4 for k = 0..4, minus 32.
            let q = [
                _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m2)),
                _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4), _mm256_and_si256(qh, m2)),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m2),
                ),
            ];
            for (k, q) in q.into_iter().enumerate() {
                // Elements 32k..32k + 32 of the half: groups 2k and 2k + 1, accumulators
                // 2k % 4 and (2k + 1) % 4.
                let q = i8x32(_mm256_sub_epi8(q, offset));
                let s0 = _mm256_set1_ps(d * (sc[2 * k] as i8) as f32);
                let s1 = _mm256_set1_ps(d * (sc[2 * k + 1] as i8) as f32);
                let a = (2 * k) % 4;
                for r in 0..R {
                    let x = load32(&xb[r][b].as_chunks::<32>().0[4 * h + k]);
                    let g0 = _mm256_fmadd_ps(q[1], x[1], _mm256_mul_ps(q[0], x[0]));
                    let g1 = _mm256_fmadd_ps(q[3], x[3], _mm256_mul_ps(q[2], x[2]));
                    acc[r][a] = _mm256_fmadd_ps(s0, g0, acc[r][a]);
                    acc[r][a + 1] = _mm256_fmadd_ps(s1, g1, acc[r][a + 1]);
                }
            }
        }
    }
    let mut out = [0.0f32; R];
    for r in 0..R {
        let [a0, a1, a2, a3] = acc[r];
        out[r] = sum_lanes(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    }
    out
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn q6_k(t: Tile) {
    let one = |w: &[u8], x: [&[f32]; 1], s: [&[f32]; 1]| q6_k_row::<1>(w, x, s);
    each_row::<2, 1>(t, |w, x, s| q6_k_row::<2>(w, x, s), one, one)
}

/// `q6_k` with AVX-512's 32 registers: 4 x 4 accumulators fit beside the 4 weight runs.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
pub fn q6_k_wide(t: Tile) {
    each_row::<4, 2>(
        t,
        |w, x, s| q6_k_row::<4>(w, x, s),
        |w, x, s| q6_k_row::<2>(w, x, s),
        |w, x, s| q6_k_row::<1>(w, x, s),
    )
}

/// The float formats: dot.rs's four 8-lane accumulators over 32-element chunks, `convert`
/// giving 8 weights from 8 elements' bytes (`EB8` = 8 x element bytes), then the tail in order.
/// One activation row at a time: converting is cheap, and 4 accumulators per row fill the
/// registers.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn float<const EB: usize, const EB8: usize>(
    w: &[u8],
    x: &[f32],
    convert: impl Fn(&[u8; EB8]) -> __m256,
    scalar: impl Fn(&[u8; EB]) -> f32,
) -> f32 {
    let n = (w.len() / EB).min(x.len());
    let body = n / 32 * 32;
    let mut acc = [_mm256_setzero_ps(); 4];
    for (w8, x32) in w[..body * EB].as_chunks::<EB8>().0.chunks_exact(4).zip(x[..body].as_chunks::<32>().0) {
        let xv = load32(x32);
        for k in 0..4 {
            acc[k] = _mm256_fmadd_ps(xv[k], convert(&w8[k]), acc[k]);
        }
    }
    let mut lanes = [0.0f32; 32];
    for (a, l) in acc.iter().zip(lanes.as_chunks_mut::<8>().0) {
        // SAFETY: writes the 8 f32 of the array; storeu has no alignment requirement.
        unsafe { _mm256_storeu_ps(l.as_mut_ptr(), *a) };
    }
    let tail = w[body * EB..n * EB].as_chunks::<EB>().0.iter().zip(&x[body..n]);
    finish_float(&lanes, tail.map(|(w, &x)| (x, scalar(w))))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn f32(t: Tile) {
    let row = |w: &[u8], [x]: [&[f32]; 1], _: [&[f32]; 1]| {
        // SAFETY: reads the 32 bytes (8 f32) of the array; loadu has no alignment requirement.
        [float::<4, 32>(w, x, |b| unsafe { _mm256_loadu_ps(b.as_ptr().cast()) }, |b| f32::from_le_bytes(*b))]
    };
    each_row::<1, 1>(t, row, row, row)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn f16(t: Tile) {
    let row = |w: &[u8], [x]: [&[f32]; 1], _: [&[f32]; 1]| {
        [float::<2, 16>(w, x, |b| _mm256_cvtph_ps(bytes16(b)), |b| half::f16::from_le_bytes(*b).to_f32())]
    };
    each_row::<1, 1>(t, row, row, row)
}

/// bf16 is the top half of an f32: widen to 32 bits and shift left by 16.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn bf16(t: Tile) {
    let row = |w: &[u8], [x]: [&[f32]; 1], _: [&[f32]; 1]| {
        let convert = |b: &[u8; 16]| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(bytes16(b))));
        [float::<2, 16>(w, x, convert, |b| half::bf16::from_le_bytes(*b).to_f32())]
    };
    each_row::<1, 1>(t, row, row, row)
}
