//! The `fast` precision's kernels on x86_64: int8.rs's arithmetic with the four-byte integer
//! sums made by `vpmaddubsw` + `vpmaddwd` (AVX2) or `vpdpbusd` (AVX-512 VNNI), and the f32 steps
//! fused exactly as int8.rs's `mul_add`s. Both give each lane the exact i32 sum of four products
//! (|w| <= 128 and |x| <= 127, so the pair sums stay below i16's limit), so every path has the
//! portable bits.
//!
//! Signs: `vpmaddubsw` and `vpdpbusd` multiply unsigned bytes by signed ones, so the weight goes
//! in as |w| and the activation as x with w's sign (`vpsignb`), as ggml's mul_sum_i8_pairs does.
//!
//! A weight row's 32-element block is decoded once for R activation rows (prefill, verify); each
//! output still goes through exactly the operations it would alone.
//!
//! The block-sum formats (the 32-element ones, Q4_K and Q5_K) take int8.rs's block-sum
//! arithmetic: here four weight rows at a time over their stored bytes (`summed_tile`); at
//! `fast` the host backend runs their matrices through the group kernels (packed/), and only
//! rows after a matrix's last group come here. The lane-sum kernels below (`tile`, and
//! `tile_512` in vnni.rs) are Q6_K's.

use std::arch::x86_64::*;

use super::avx2::{bit_bytes32, bytes32, f16_scalar, nibble_bytes, prefetch_ahead};
use super::int8::{common_blocks, QTile};
use super::row_dot::{reduce8, sub, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES};
use crate::quant::{e8m0_half, QK, QK_K};

// The 512-bit tiles of the K formats.
mod vnni;
use vnni::{prep_q6_k, q6_k_pair, tile_512};

/// A decoded 32-element weight block: the integers, the per-lane weight scale, the min.
type Decoded = (__m256i, __m256, f32);

/// A K-quant super-block's scales, unpacked once for its eight blocks: Q4_K's and Q5_K's `d *
/// sc` (8) and `-(dmin * m)` (8); Q6_K's 16 half-block `d * sc`.
type Scales = ([f32; 16], [f32; 8]);

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn sums_maddubs(w_abs: __m256i, x_signed: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, x_signed), _mm256_set1_epi16(1))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load_i8(x: &[i8; QK]) -> __m256i {
    // SAFETY: reads the 32 bytes of the array; loadu has no alignment requirement.
    unsafe { _mm256_loadu_si256(x.as_ptr().cast()) }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn sum8(v: __m256) -> f32 {
    let mut lanes = [0.0f32; 8];
    // SAFETY: writes the 8 f32 of the array; storeu has no alignment requirement.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
    reduce8(&lanes)
}

/// int8.rs's `quantize_block` with 256-bit operations, the same values: the largest magnitude
/// (max is exact in any order), the scalar d and 1/d, then per element the same multiply, add of
/// copysign(0.5 - 2^-25) and truncation, the same clamp; q in element order, sum exact.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn quantize_block(x: &[f32; QK], q: &mut [i8; QK]) -> (f32, f32) {
    let v = super::avx2::load32(x);
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let a = v.map(|v| _mm256_and_ps(v, abs_mask));
    // |v| < inf is false for an infinity and for NaN (ordered compare).
    let inf = _mm256_set1_ps(f32::INFINITY);
    let finite = a.map(|a| _mm256_cmp_ps::<_CMP_LT_OQ>(a, inf));
    let all = _mm256_and_ps(_mm256_and_ps(finite[0], finite[1]), _mm256_and_ps(finite[2], finite[3]));
    if _mm256_movemask_ps(all) != 0xff {
        q.fill(0);
        return (f32::NAN, f32::NAN);
    }
    let m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let (idv, sign, half) = (_mm256_set1_ps(id), _mm256_set1_ps(-0.0), _mm256_set1_ps(0.49999997));
    let (lo, hi) = (_mm256_set1_epi32(-127), _mm256_set1_epi32(127));
    let r = v.map(|v| {
        let t = _mm256_mul_ps(v, idv);
        let t = _mm256_add_ps(t, _mm256_or_ps(_mm256_and_ps(t, sign), half));
        _mm256_min_epi32(_mm256_max_epi32(_mm256_cvttps_epi32(t), lo), hi)
    });
    let total = _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3]));
    let t = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256::<1>(total));
    let t = _mm_add_epi32(t, _mm_shuffle_epi32::<0b01_00_11_10>(t));
    let sum = _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32::<0b10_11_00_01>(t)));
    // packs interleaves 128-bit halves: 4-byte groups come out a0 b0 c0 d0 a1 b1 c1 d1.
    let bytes = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
    let bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    // SAFETY: writes the 32 bytes of the array; storeu has no alignment requirement.
    unsafe { _mm256_storeu_si256(q.as_mut_ptr().cast(), bytes) };
    (d, d * sum as f32)
}

/// One weight row (super-blocks of BB bytes, SUBS 32-element blocks each) against R rounded
/// activation rows. `sums` makes the four-byte sums (one of the two functions above, inlined).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn row_dots<const BB: usize, const SUBS: usize, const MIN: bool, const R: usize>(
    w: &[u8],
    xq: [&[[i8; QK]]; R],
    xd: [&[f32]; R],
    xs: [&[f32]; R],
    prep: impl Fn(&[u8; BB]) -> Scales,
    decode: impl Fn(&[u8; BB], usize, &Scales) -> Decoded,
    sums: impl Fn(__m256i, __m256i) -> __m256i,
) -> [f32; R] {
    let sbs = w.as_chunks::<BB>().0;
    let nb = common_blocks::<MIN, R>(sbs.len() * SUBS, &xq, &xd, &xs);
    // Cut every row to the nb blocks all of them have, so that the loop below needs no checks.
    let (mut xq_b, mut xd_b, mut xs_b): ([&[[i8; QK]]; R], [&[f32]; R], [&[f32]; R]) = ([&[]; R], [&[]; R], [&[]; R]);
    for r in 0..R {
        (xq_b[r], xd_b[r]) = (&xq[r][..nb], &xd[r][..nb]);
        if MIN {
            xs_b[r] = &xs[r][..nb];
        }
    }
    let (xq, xd, xs) = (xq_b, xd_b, xs_b);
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    let mut mins = [0.0f32; R];
    // SAFETY (every get_unchecked below): b < nb, and nb is at most the block count of the
    // weight row (sbs.len() * SUBS, so b / SUBS < sbs.len()) and the length of every row's
    // xq and xd (and xs when MIN), as cut above. The checks cost a sixth of the loop.
    let mut block = |b: usize, k: usize, scales: &Scales| {
        debug_assert!(b < nb);
        let (q, ws, wm) = decode(unsafe { sbs.get_unchecked(b / SUBS) }, b % SUBS, scales);
        // Formats whose integers are never negative (those with a min: MIN) go in as they are.
        let q_abs = if MIN { q } else { _mm256_sign_epi8(q, q) };
        for r in 0..R {
            let x = load_i8(unsafe { xq[r].get_unchecked(b) });
            let x = if MIN { x } else { _mm256_sign_epi8(x, q) };
            let p = _mm256_cvtepi32_ps(sums(q_abs, x));
            let c = _mm256_mul_ps(ws, _mm256_set1_ps(unsafe { *xd[r].get_unchecked(b) }));
            acc[r][k] = _mm256_fmadd_ps(c, p, acc[r][k]);
            if MIN {
                mins[r] = wm.mul_add(unsafe { *xs[r].get_unchecked(b) }, mins[r]);
            }
        }
    };
    // A super-block's scales are unpacked as its first block comes (SUBS is even, so a pair
    // never spans two): per block, the unpacking and the f16 conversions were the larger part
    // of a decode step's K-quant matmuls on AVX2.
    let mut scales: Scales = ([0.0; 16], [0.0; 8]);
    let mut b = 0;
    while b + 2 <= nb {
        if b % SUBS == 0 {
            scales = prep(unsafe { sbs.get_unchecked(b / SUBS) });
        }
        block(b, 0, &scales);
        block(b + 1, 1, &scales);
        b += 2;
    }
    if b < nb {
        if b % SUBS == 0 {
            scales = prep(unsafe { sbs.get_unchecked(b / SUBS) });
        }
        block(b, 0, &scales);
    }
    let mut out = [0.0f32; R];
    for r in 0..R {
        out[r] = sum8(_mm256_add_ps(acc[r][0], acc[r][1])) + mins[r];
    }
    out
}

/// Every weight row of the tile against every activation row: `R_AVX2` (4) at a time, then the
/// 1 to 3 rows left in one pass. Before, the rows left went one pass each: `kernel_time avx2`
/// (KT_MIB=64) timed 2 and 3 rows of Q4_K at 64-68 ns a weight row and activation row, as much
/// as 1 row, and 44 and 38 ns in one pass. A row's value does not depend on the rows it runs
/// with: each has its own accumulators, added in the same order.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn tile<const BB: usize, const SUBS: usize, const MIN: bool>(
    mut t: QTile,
    prep: impl Fn(&[u8; BB]) -> Scales + Copy,
    decode: impl Fn(&[u8; BB], usize, &Scales) -> Decoded + Copy,
    sums: impl Fn(__m256i, __m256i) -> __m256i + Copy,
) {
    if t.row_bytes == 0 || t.m == 0 || t.n_in == 0 {
        return;
    }
    let m = t.m;
    let mut r = 0;
    while m - r >= R_AVX2 {
        rows_pass::<BB, SUBS, MIN, R_AVX2>(&mut t, r, prep, decode, sums);
        r += R_AVX2;
    }
    match m - r {
        0 => {}
        1 => rows_pass::<BB, SUBS, MIN, 1>(&mut t, r, prep, decode, sums),
        2 => rows_pass::<BB, SUBS, MIN, 2>(&mut t, r, prep, decode, sums),
        _ => rows_pass::<BB, SUBS, MIN, 3>(&mut t, r, prep, decode, sums),
    }
}

/// Activation rows r0..r0 + RX of the tile against all its weight rows, in one pass over them.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn rows_pass<const BB: usize, const SUBS: usize, const MIN: bool, const RX: usize>(
    t: &mut QTile,
    r0: usize,
    prep: impl Fn(&[u8; BB]) -> Scales + Copy,
    decode: impl Fn(&[u8; BB], usize, &Scales) -> Decoded + Copy,
    sums: impl Fn(__m256i, __m256i) -> __m256i + Copy,
) {
    let m = t.m;
    let rows: [_; RX] = std::array::from_fn(|i| t.x.row_blocks(r0 + i, t.n_in));
    let (xq, xd, xs) = (rows.map(|v| v.0), rows.map(|v| v.1), rows.map(|v| v.2));
    for (w, o) in t.w.chunks_exact(t.row_bytes).zip(t.out.chunks_exact_mut(m)) {
        prefetch_ahead(w);
        o[r0..r0 + RX].copy_from_slice(&row_dots::<BB, SUBS, MIN, RX>(w, xq, xd, xs, prep, decode, sums));
    }
}

// Decoders: block k (always 0 for the 32-element formats) of one stored block (Q8_0 and Q4_0
// take the block-sum kernels below).

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q5_0(b: &[u8; 22], _: usize) -> Decoded {
    let high = _mm256_and_si256(bit_bytes32(u32::from_le_bytes(*sub::<_, 2, 4, 22>(b))), _mm256_set1_epi8(0x10));
    let q = _mm256_sub_epi8(_mm256_or_si256(nibble_bytes(sub::<_, 6, 16, 22>(b)), high), _mm256_set1_epi8(16));
    (q, _mm256_set1_ps(f16_scalar(sub::<_, 0, 2, 22>(b))), 0.0)
}


/// 32 bytes of `b` from `at` (at + 32 <= N, checked).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn bytes_at<const N: usize>(b: &[u8; N], at: usize) -> __m256i {
    let s: &[u8; 32] = b[at..at + 32].try_into().unwrap_or_else(|_| unreachable!("32 bytes from {at} of {N}"));
    bytes32(s)
}

/// Bytes with 0x10 where bit k (0..8) of the byte of `qh` is set: Q5_K's fifth bits of block k.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn fifth_bits(qh: __m256i, k: usize) -> __m256i {
    let m = _mm256_set1_epi8((1u8 << k) as i8);
    _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m), m), _mm256_set1_epi8(0x10))
}

/// Block k of a Q4_K or Q5_K super-block (BB bytes, nibbles from QS; with HIGH, Q5_K, the fifth
/// bits from the 32 bytes at 16).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn k4<const BB: usize, const QS: usize, const HIGH: bool>(b: &[u8; BB], k: usize) -> Decoded {
    k4_scaled::<BB, QS, HIGH>(b, k, &prep_k4_avx2(b))
}

/// `k4` with the super-block's scales from `prep_k4_avx2`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn k4_scaled<const BB: usize, const QS: usize, const HIGH: bool>(b: &[u8; BB], k: usize, s: &Scales) -> Decoded {
    let v = bytes_at(b, QS + (k / 2) * 32);
    let m4 = _mm256_set1_epi8(0x0F);
    let q = if k % 2 == 0 { _mm256_and_si256(v, m4) } else { _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4) };
    let q = if HIGH { _mm256_or_si256(q, fifth_bits(bytes_at(b, 16), k)) } else { q };
    (q, _mm256_set1_ps(s.0[k]), s.1[k])
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q6_k(b: &[u8; Q6_K_BYTES], k: usize) -> Decoded {
    q6_k_scaled(b, k, &prep_q6_k_avx2(b))
}

/// `q6_k` with the super-block's scales from `prep_q6_k_avx2`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q6_k_scaled(b: &[u8; Q6_K_BYTES], k: usize, s: &Scales) -> Decoded {
    let (n, part) = (k / 4, k % 4);
    let ql = bytes_at(b, n * 64 + (part % 2) * 32);
    let qh = bytes_at(b, QK_K / 2 + n * 32);
    let m4 = _mm256_set1_epi8(0x0F);
    let lo = if part < 2 { _mm256_and_si256(ql, m4) } else { _mm256_and_si256(_mm256_srli_epi16::<4>(ql), m4) };
    let hi = match part {
        0 => qh,
        1 => _mm256_srli_epi16::<2>(qh),
        2 => _mm256_srli_epi16::<4>(qh),
        _ => _mm256_srli_epi16::<6>(qh),
    };
    let hi = _mm256_slli_epi16::<4>(_mm256_and_si256(hi, _mm256_set1_epi8(3)));
    let q = _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32));
    let (s0, s1) = (s.0[2 * k], s.0[2 * k + 1]);
    (q, _mm256_setr_ps(s0, s0, s0, s0, s1, s1, s1, s1), 0.0)
}

/// A Q6_K super-block's 16 half-block scales `d * sc` (half-block j's scale is byte j of the
/// scales, as `dequantize_row` reads it).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn prep_q6_k_avx2(b: &[u8; Q6_K_BYTES]) -> Scales {
    let sc = sub::<_, { QK_K / 2 + QK_K / 4 }, 16, Q6_K_BYTES>(b);
    let d = _mm256_set1_ps(f16_scalar(sub::<_, { Q6_K_BYTES - 2 }, 2, Q6_K_BYTES>(b)));
    let mut out = [0.0f32; 16];
    for (h, o) in out.as_chunks_mut::<8>().0.iter_mut().enumerate() {
        let bytes = u64::from_le_bytes(sc[8 * h..8 * h + 8].try_into().unwrap_or_else(|_| unreachable!("8 of 16 bytes")));
        let v = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_cvtsi64_si128(bytes as i64))));
        // SAFETY: writes the 8 f32 of the array; storeu has no alignment requirement.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), v) };
    }
    (out, [0.0; 8])
}

/// A Q4_K or Q5_K super-block's 8 scales `d * sc` and 8 mins `-(dmin * m)` (the two formats
/// share d, dmin and the 12 scale bytes at the front), the 6-bit values unpacked all at once
/// (ggml's kmask words) instead of `scale_min_k4` per block; the same values.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn prep_k4_avx2<const BB: usize>(b: &[u8; BB]) -> Scales {
    let w = |i: usize| u32::from_le_bytes([b[4 + 4 * i], b[5 + 4 * i], b[6 + 4 * i], b[7 + 4 * i]]);
    let (u0, u1, u2) = (w(0), w(1), w(2));
    let (k1, k2, k3) = (0x3f3f_3f3fu32, 0x0f0f_0f0fu32, 0x0303_0303u32);
    // Scales of blocks 0..4 and 4..8, then mins of 0..4 and 4..8, a byte each.
    let sc = (u0 & k1) as u64 | (((u2 & k2) | (((u0 >> 6) & k3) << 4)) as u64) << 32;
    let mn = (u1 & k1) as u64 | ((((u2 >> 4) & k2) | (((u1 >> 6) & k3) << 4)) as u64) << 32;
    let bytes = |v: u64| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v as i64)));
    let (d, dmin) = (f16_scalar(sub::<_, 0, 2, BB>(b)), f16_scalar(sub::<_, 2, 2, BB>(b)));
    let ws = _mm256_mul_ps(_mm256_set1_ps(d), bytes(sc));
    // -(dmin * m): the product, then the sign flipped (exact).
    let mins = _mm256_xor_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), bytes(mn)), _mm256_set1_ps(-0.0));
    let mut out: Scales = ([0.0; 16], [0.0; 8]);
    // SAFETY: each writes the first 8 f32 of its array; storeu has no alignment requirement.
    unsafe {
        _mm256_storeu_ps(out.0.as_mut_ptr(), ws);
        _mm256_storeu_ps(out.1.as_mut_ptr(), mins);
    }
    out
}

/// Activation rows per decoded block: AVX2's 16 registers hold 4 rows' 8 accumulators beside
/// the block (`tile` takes the 1 to 3 rows left over in one pass, so it is at most 4).
const R_AVX2: usize = 4;
const _: () = assert!(R_AVX2 >= 1 && R_AVX2 <= 4);

// The block-sum formats (int8.rs's `sums_per_block`): four weight rows at a time, their
// blocks' exact sums gathered into the four lanes of one 128-bit vector, so that the float
// step (`fma(s_b, ws * d_x, acc)`) runs on four rows' chains at once.

/// A block-sum format's block: its 32 integers (unsigned for the formats with a min), its
/// scale and its min (0 without).
type Summed = (__m256i, f32, f32);

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q8_0_summed(b: &[u8; 34]) -> Summed {
    (bytes32(sub::<_, 2, 32, 34>(b)), f16_scalar(sub::<_, 0, 2, 34>(b)), 0.0)
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q4_0_summed(b: &[u8; 18]) -> Summed {
    (_mm256_sub_epi8(nibble_bytes(sub::<_, 2, 16, 18>(b)), _mm256_set1_epi8(8)), f16_scalar(sub::<_, 0, 2, 18>(b)), 0.0)
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q4_1_summed(b: &[u8; 20]) -> Summed {
    (nibble_bytes(sub::<_, 4, 16, 20>(b)), f16_scalar(sub::<_, 0, 2, 20>(b)), f16_scalar(sub::<_, 2, 2, 20>(b)))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q5_1_summed(b: &[u8; 24]) -> Summed {
    (super::avx2::q5_1_bytes(b), f16_scalar(sub::<_, 0, 2, 24>(b)), f16_scalar(sub::<_, 2, 2, 24>(b)))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q5_0_summed(b: &[u8; 22]) -> Summed {
    let (q, ws, _) = q5_0(b, 0);
    (q, _mm256_cvtss_f32(ws), 0.0)
}

/// MXFP4: Q4_0's nibbles through the E2M1 table instead of less 8, and the halved E8M0 scale
/// (int8.rs's `decode_mxfp4`); |q| <= 12, so `vpsignb`'s |w| is exact.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn mxfp4_summed(b: &[u8; 1 + QK / 2]) -> Summed {
    (super::avx2::mxfp4_bytes(b), e8m0_half(b[0]), 0.0)
}

/// Block k of a Q4_K or Q5_K super-block (`k4`): its 32 unsigned integers, `d * sc` and
/// `-(dmin * m)`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn k4_summed<const BB: usize, const QS: usize, const HIGH: bool>(b: &[u8; BB], k: usize) -> Summed {
    let (q, ws, wm) = k4::<BB, QS, HIGH>(b, k);
    (q, _mm256_cvtss_f32(ws), wm)
}

/// Lane j: the exact sum of `v[j]`'s eight i32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn sums4(v: [__m256i; 4]) -> __m128i {
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
}

/// Weight rows `w` (4, of units of BB bytes holding SUBS blocks each: 1 for the 32-element
/// formats, 8 for the K formats' super-blocks) against R activation rows: lane j of result r
/// is row j . row r. `decode(unit, k)` gives block k of a unit.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn summed_rows<const BB: usize, const SUBS: usize, const MIN: bool, const R: usize>(
    w: [&[[u8; BB]]; 4],
    xq: [&[[i8; QK]]; R],
    xd: [&[f32]; R],
    xs: [&[f32]; R],
    decode: impl Fn(&[u8; BB], usize) -> Summed,
) -> [__m128; R] {
    let nb = common_blocks::<MIN, R>(w.iter().map(|w| w.len()).min().unwrap_or(0) * SUBS, &xq, &xd, &xs);
    let mut acc = [_mm_setzero_ps(); R];
    for b in 0..nb {
        let (mut q, mut qa, mut ws, mut wm) = ([_mm256_setzero_si256(); 4], [_mm256_setzero_si256(); 4], [0.0f32; 4], [0.0f32; 4]);
        for j in 0..4 {
            // SAFETY: b < nb <= w[j].len() * SUBS.
            (q[j], ws[j], wm[j]) = decode(unsafe { w[j].get_unchecked(b / SUBS) }, b % SUBS);
            // Formats with a min have unsigned integers: they go in as they are.
            qa[j] = if MIN { q[j] } else { _mm256_sign_epi8(q[j], q[j]) };
        }
        let (ws, wm) = (_mm_setr_ps(ws[0], ws[1], ws[2], ws[3]), _mm_setr_ps(wm[0], wm[1], wm[2], wm[3]));
        for r in 0..R {
            // SAFETY: b < nb <= xq[r].len(), xd[r].len().
            let (x, dx) = unsafe { (load_i8(xq[r].get_unchecked(b)), *xd[r].get_unchecked(b)) };
            let mut p = [_mm256_setzero_si256(); 4];
            for j in 0..4 {
                p[j] = sums_maddubs(qa[j], if MIN { x } else { _mm256_sign_epi8(x, q[j]) });
            }
            let t = _mm_mul_ps(ws, _mm_set1_ps(dx));
            acc[r] = _mm_fmadd_ps(_mm_cvtepi32_ps(sums4(p)), t, acc[r]);
            if MIN {
                // SAFETY: b < nb <= xs[r].len() when MIN.
                acc[r] = _mm_fmadd_ps(wm, _mm_set1_ps(unsafe { *xs[r].get_unchecked(b) }), acc[r]);
            }
        }
    }
    acc
}

/// Every weight row of the tile against every activation row with the block-sum arithmetic:
/// four weight rows at a time (a last partial group repeats its last row), two activation
/// rows at a time; units of BB bytes with SUBS blocks each (`summed_rows`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn summed_tile<const BB: usize, const SUBS: usize, const MIN: bool>(t: QTile, decode: impl Fn(&[u8; BB], usize) -> Summed + Copy) {
    if t.row_bytes == 0 || t.m == 0 || t.n_in == 0 {
        return;
    }
    let (m, rb) = (t.m, t.row_bytes);
    let n = t.w.len() / rb;
    let row = |r: usize| t.x.row_blocks(r, t.n_in);
    let wrow = |j: usize| t.w[j * rb..(j + 1) * rb].as_chunks::<BB>().0;
    let mut put = |j: usize, r: usize, v: __m128| {
        let mut lanes = [0.0f32; 4];
        // SAFETY: writes the 4 f32 of the array; storeu has no alignment requirement.
        unsafe { _mm_storeu_ps(lanes.as_mut_ptr(), v) };
        for (i, &v) in lanes.iter().enumerate().take(n - j) {
            t.out[(j + i) * m + r] = v;
        }
    };
    for j in (0..n).step_by(4) {
        let w = [wrow(j), wrow((j + 1).min(n - 1)), wrow((j + 2).min(n - 1)), wrow((j + 3).min(n - 1))];
        // Four rows read side by side are four streams, which the hardware prefetchers here
        // follow badly (64 MiB of Q8_0 at two activation rows: 71 ns a row without this, 13
        // from the cache).
        prefetch_ahead(&t.w[j * rb..(j + 4).min(n) * rb]);
        let mut r = 0;
        while r + 2 <= m {
            let ((q0, d0, s0), (q1, d1, s1)) = (row(r), row(r + 1));
            let acc = summed_rows::<BB, SUBS, MIN, 2>(w, [q0, q1], [d0, d1], [s0, s1], decode);
            put(j, r, acc[0]);
            put(j, r + 1, acc[1]);
            r += 2;
        }
        if r < m {
            let (q0, d0, s0) = row(r);
            put(j, r, summed_rows::<BB, SUBS, MIN, 1>(w, [q0], [d0], [s0], decode)[0]);
        }
    }
}

/// The block-sum formats' entries over stored bytes; a matrix prepared for the group kernels
/// (packed/) takes those, and only the rows after its last group these.
macro_rules! summed_entries {
    ($($name:ident, $decode:expr, $bb:expr, $subs:expr, $min:expr;)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c")]
        pub fn $name(t: QTile) {
            summed_tile::<{ $bb }, { $subs }, $min>(t, |b, k| ($decode)(b, k))
        }
    )*};
}

summed_entries! {
    q8_0_summed_maddubs, |b, _| q8_0_summed(b), 34, 1, false;
    q4_0_summed_maddubs, |b, _| q4_0_summed(b), 18, 1, false;
    q4_1_summed_maddubs, |b, _| q4_1_summed(b), 20, 1, true;
    q5_0_summed_maddubs, |b, _| q5_0_summed(b), 22, 1, false;
    q5_1_summed_maddubs, |b, _| q5_1_summed(b), 24, 1, true;
    mxfp4_summed_maddubs, |b, _| mxfp4_summed(b), 17, 1, false;
    q4_k_summed_maddubs, k4_summed::<Q4_K_BYTES, 16, false>, Q4_K_BYTES, 8, true;
    q5_k_summed_maddubs, k4_summed::<Q5_K_BYTES, 48, true>, Q5_K_BYTES, 8, true;
}

macro_rules! entries {
    ($($name:ident, $vnni:ident, $decode:expr, $scaled:expr, $prep_avx2:expr, $bb:expr, $subs:expr, $min:expr, $pair:expr, $prep:ident;)*) => {$(
        #[target_feature(enable = "avx2,fma,f16c")]
        pub fn $name(t: QTile) {
            tile::<{ $bb }, { $subs }, $min>(t, |b| ($prep_avx2)(b), |b, k, s| ($scaled)(b, k, s), |a, x| sums_maddubs(a, x))
        }

        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")]
        pub fn $vnni(t: QTile) {
            tile_512::<{ $bb }, { $subs }, $min>(t, |b, k| ($decode)(b, k), $pair, |b| $prep(b))
        }
    )*};
}

// Q6_K, the one format of lane sums, decodes a pair of blocks from one super-block with the
// scales its `prep` unpacked once (the others take the block-sum kernels above).
entries! {
    q6_k_maddubs, q6_k_vnni, q6_k, q6_k_scaled, prep_q6_k_avx2, Q6_K_BYTES, 8, false, |b0, _, (k, _), pre| q6_k_pair(b0, k, pre), prep_q6_k;
}
