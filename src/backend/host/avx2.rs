//! The AVX2 + FMA + F16C row kernels, part 1: shared helpers, the tile driver, and the 32-element
//! block formats (avx2_k.rs has the K-quants and the floats). The lanes, blocks and accumulators
//! are portable.rs's (see row_dot.rs for the arithmetic), with `a * b + c` fused. Weights are read
//! straight from the block bytes: integers are widened to i32 lanes and converted to f32
//! (exact), then multiplied with the f32 activations.
//!
//! Every kernel is a safe `#[target_feature]` function: the only callers, in row_dot.rs, check
//! the CPU first. Blocks are walked as fixed-size arrays (`as_chunks`, `sub`), so every load
//! below reads inside an array whose size its type states.
//!
//! A weight row's blocks are decoded once for up to R activation rows (prefill); each output
//! still goes through exactly the operations it would alone, so grouping never changes a bit.

use std::arch::x86_64::*;

use super::row_dot::{reduce8, sub, Tile, Q4_1_BYTES, Q5_1_BYTES};
use crate::quant::{e8m0_half, MXFP4_VALUES, QK};

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn load8(x: &[f32; 8]) -> __m256 {
    // SAFETY: reads the 8 f32 of the array; loadu has no alignment requirement.
    unsafe { _mm256_loadu_ps(x.as_ptr()) }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn load32(x: &[f32; 32]) -> [__m256; 4] {
    [
        load8(sub::<_, 0, 8, 32>(x)),
        load8(sub::<_, 8, 8, 32>(x)),
        load8(sub::<_, 16, 8, 32>(x)),
        load8(sub::<_, 24, 8, 32>(x)),
    ]
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn bytes16(b: &[u8; 16]) -> __m128i {
    // SAFETY: reads the 16 bytes of the array; loadu has no alignment requirement.
    unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn bytes32(b: &[u8; 32]) -> __m256i {
    // SAFETY: reads the 32 bytes of the array; loadu has no alignment requirement.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

/// A little-endian f16 (block scales) to f32, exactly.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn f16_scalar(h: &[u8; 2]) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(u16::from_le_bytes(*h) as i32)))
}

/// The low 8 signed bytes of `v` as 8 f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn i8x8(v: __m128i) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
}

/// 32 signed bytes as four runs of 8 f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn i8x32(v: __m256i) -> [__m256; 4] {
    let (lo, hi) = (_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    [i8x8(lo), i8x8(_mm_unpackhi_epi64(lo, lo)), i8x8(hi), i8x8(_mm_unpackhi_epi64(hi, hi))]
}

/// Runs of eight i32 lanes from bytes, without a lane-crossing shuffle: with the same 16 bytes
/// in both 128-bit halves, vpshufb puts byte `first + l` in lane l (lanes 0..4 read the low
/// half, 4..8 the high one). vpshufb issues on two ports where vpmovzxbd has one, and widening
/// is most of the work of the 4-bit formats.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn spread(v: __m256i, first: i8) -> __m256i {
    let (f, z) = (first, -1);
    #[rustfmt::skip]
    let idx = _mm256_setr_epi8(
        f, z, z, z, f + 1, z, z, z, f + 2, z, z, z, f + 3, z, z, z,
        f + 4, z, z, z, f + 5, z, z, z, f + 6, z, z, z, f + 7, z, z, z,
    );
    _mm256_shuffle_epi8(v, idx)
}

/// A 4-bit block's 32 nibbles in element order (low nibbles of the 16 bytes, then the high
/// ones) as four runs of eight i32 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn nibble_runs(qs: &[u8; 16]) -> [__m256i; 4] {
    let v = _mm256_broadcastsi128_si256(bytes16(qs));
    let m4 = _mm256_set1_epi8(0x0F);
    let lo = _mm256_and_si256(v, m4);
    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
    [spread(lo, 0), spread(lo, 8), spread(hi, 0), spread(hi, 8)]
}

/// Four runs of i32 minus `offset`, as f32 (exact: the values are small integers).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn runs_f32(r: [__m256i; 4], offset: i32) -> [__m256; 4] {
    let o = _mm256_set1_epi32(offset);
    let f = |v| _mm256_cvtepi32_ps(if offset == 0 { v } else { _mm256_sub_epi32(v, o) });
    [f(r[0]), f(r[1]), f(r[2]), f(r[3])]
}

/// Byte e is 0xFF where bit e of `bits` is set, else 0 (ggml's bytes_from_bits_32).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn bit_bytes32(bits: u32) -> __m256i {
    // Byte e takes byte e / 8 of `bits`; OR-ing every bit but bit e % 8 leaves all ones iff set.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits as i32),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0),
    );
    let others = _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    _mm256_cmpeq_epi8(others, _mm256_set1_epi64x(-1))
}

/// Lane l: `(q_l x_l + q_{l+8} x_{l+8}) + (q_{l+16} x_{l+16} + q_{l+24} x_{l+24})`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn lanes32(q: [__m256; 4], x: [__m256; 4]) -> __m256 {
    let a = _mm256_fmadd_ps(q[1], x[1], _mm256_mul_ps(q[0], x[0]));
    let b = _mm256_fmadd_ps(q[3], x[3], _mm256_mul_ps(q[2], x[2]));
    _mm256_add_ps(a, b)
}

/// row_dot.rs's `reduce8` over the lanes of `v`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn sum_lanes(v: __m256) -> f32 {
    let mut lanes = [0.0f32; 8];
    // SAFETY: writes the 8 f32 of the array; storeu has no alignment requirement.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
    reduce8(&lanes)
}

/// Every weight row of the tile against every activation row: `out[j * m + r]`. Activation rows
/// go R at a time through `many`, then H at a time through `few`, the rest one at a time
/// through `one` (all compute each output with the same operations; H = R or 1 skips `few`).
/// Activation rows are the outer loop so that a group of them stays in L1 while the tile's
/// weight rows pass.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn each_row<const R: usize, const H: usize>(
    t: Tile,
    many: impl Fn(&[u8], [&[f32]; R], [&[f32]; R]) -> [f32; R],
    few: impl Fn(&[u8], [&[f32]; H], [&[f32]; H]) -> [f32; H],
    one: impl Fn(&[u8], [&[f32]; 1], [&[f32]; 1]) -> [f32; 1],
) {
    if t.row_bytes == 0 || t.n_in == 0 || t.x.len() < t.n_in {
        return;
    }
    let m = t.x.len() / t.n_in;
    let n_sums = t.n_in / QK;
    let x_row = |r: usize| &t.x[r * t.n_in..(r + 1) * t.n_in];
    let sum_row = |r: usize| t.sums.get(r * n_sums..(r + 1) * n_sums).unwrap_or(&[]);
    let mut r = 0;
    while R > 1 && r + R <= m {
        let (xs, ss) = (std::array::from_fn(|i| x_row(r + i)), std::array::from_fn(|i| sum_row(r + i)));
        for (w, o) in t.w.chunks_exact(t.row_bytes).zip(t.out.chunks_exact_mut(m)) {
            prefetch_ahead(w);
            o[r..r + R].copy_from_slice(&many(w, xs, ss));
        }
        r += R;
    }
    while H > 1 && H < R && r + H <= m {
        let (xs, ss) = (std::array::from_fn(|i| x_row(r + i)), std::array::from_fn(|i| sum_row(r + i)));
        for (w, o) in t.w.chunks_exact(t.row_bytes).zip(t.out.chunks_exact_mut(m)) {
            prefetch_ahead(w);
            o[r..r + H].copy_from_slice(&few(w, xs, ss));
        }
        r += H;
    }
    for r in r..m {
        let (x, s) = ([x_row(r)], [sum_row(r)]);
        for (w, o) in t.w.chunks_exact(t.row_bytes).zip(t.out.chunks_exact_mut(m)) {
            prefetch_ahead(w);
            o[r] = one(w, x, s)[0];
        }
    }
}

/// How far ahead of the weight row being read to prefetch. A decode step streams every weight
/// from memory once, and the hardware prefetcher alone (it stops at 4 KiB pages) left the
/// kernels waiting: prefetching cut the CPU time of a SmolLM2 decode step by about a fifth
/// (one thread; 1, 2, 4 and 8 KiB ahead all did about as well).
const PREFETCH_BYTES: usize = 4096;

/// Asks for the cache lines `PREFETCH_BYTES` past the start of weight row `w`, as many as the
/// row has. The address may lie past the tensor: a prefetch never faults or reads it.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn prefetch_ahead(w: &[u8]) {
    let ahead = w.as_ptr().wrapping_add(PREFETCH_BYTES);
    for line in (0..w.len()).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line).cast());
    }
}

/// The 32-element block formats, one weight row against R activation rows: `decode` gives a
/// block's scale d, its min m and its 32 integers (after the offset) as f32, once for all R.
/// Block b goes to accumulator b % 2, and with `MIN`, `m_b * sums[b]` to a scalar chain added
/// at the end (it runs beside the vector work).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn legacy<const BB: usize, const MIN: bool, const R: usize>(
    w: &[u8],
    xs: [&[f32]; R],
    sums: [&[f32]; R],
    decode: impl Fn(&[u8; BB]) -> (f32, f32, [__m256; 4]),
) -> [f32; R] {
    let wb = w.as_chunks::<BB>().0;
    let mut nb = wb.len();
    for r in 0..R {
        nb = nb.min(xs[r].len() / QK);
        if MIN {
            nb = nb.min(sums[r].len());
        }
    }
    // (Loops rather than array::map, which the compiler does not always inline here.)
    let mut xb: [&[[f32; QK]]; R] = [&[]; R];
    let mut sb: [&[f32]; R] = [&[]; R];
    for r in 0..R {
        xb[r] = &xs[r].as_chunks::<QK>().0[..nb];
        if MIN {
            sb[r] = &sums[r][..nb];
        }
    }
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    let mut mins = [0.0f32; R];
    let mut block = |b: usize, k: usize| {
        let (d, m, q) = decode(&wb[b]);
        let d = _mm256_set1_ps(d);
        for r in 0..R {
            if MIN {
                mins[r] = m.mul_add(sb[r][b], mins[r]);
            }
            acc[r][k] = _mm256_fmadd_ps(d, lanes32(q, load32(&xb[r][b])), acc[r][k]);
        }
    };
    let mut b = 0;
    while b + 2 <= nb {
        block(b, 0);
        block(b + 1, 1);
        b += 2;
    }
    if b < nb {
        block(b, 0);
    }
    let mut out = [0.0f32; R];
    for r in 0..R {
        out[r] = sum_lanes(_mm256_add_ps(acc[r][0], acc[r][1])) + mins[r];
    }
    out
}

/// Activation rows decoded together by the 32-element formats: 4 x 2 accumulators, 4 weight
/// runs and a scale fill 13 of AVX2's 16 registers; with AVX-512's 32, 8 rows fit (16
/// accumulators), halving the decoding per output.
const R_LEGACY: usize = 4;
const R_LEGACY_WIDE: usize = 8;

/// The entry point of a 32-element format: `each_row` over `legacy`, R then H rows at a time.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn legacy_tile<const BB: usize, const MIN: bool, const R: usize, const H: usize>(
    t: Tile,
    decode: impl Fn(&[u8; BB]) -> (f32, f32, [__m256; 4]) + Copy,
) {
    each_row::<R, H>(
        t,
        |w, x, s| legacy::<BB, MIN, R>(w, x, s, decode),
        |w, x, s| legacy::<BB, MIN, H>(w, x, s, decode),
        |w, x, s| legacy::<BB, MIN, 1>(w, x, s, decode),
    )
}

/// Each 32-element format twice: `$name` for AVX2 (R_LEGACY rows per group) and `$wide` for
/// AVX-512 F + VL (R_LEGACY_WIDE unless given), the same source and operations; AVX-512 only lends the
/// compiler 32 registers (EVEX-encoded 256-bit instructions round exactly as the VEX ones).
macro_rules! legacy_entry {
    ($name:ident, $wide:ident, $bb:expr, $min:expr, $decode:ident) => {
        legacy_entry!($name, $wide, $bb, $min, $decode, R_LEGACY_WIDE);
    };
    ($name:ident, $wide:ident, $bb:expr, $min:expr, $decode:ident, $r_wide:expr) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub fn $name(t: Tile) {
            legacy_tile::<{ $bb }, $min, R_LEGACY, 2>(t, |b| $decode(b))
        }

        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
        pub fn $wide(t: Tile) {
            legacy_tile::<{ $bb }, $min, { $r_wide }, R_LEGACY>(t, |b| $decode(b))
        }
    };
}

/// One activation row against every weight row of a 32-element format without a min, with
/// AVX-512's 16 lanes: `legacy::<BB, false, 1>`'s operations, two runs per instruction. For the
/// block, runs 0 and 2 sit in one 16-lane register and runs 1 and 3 in another (a qword
/// shuffle of the 32 bytes before widening), and the activation row is laid out the same way
/// once per call; one multiply and one fused add then give lanes32's `a` (low half) and `b`
/// (high half), and their sum and the block's fused add are lanes32's and legacy's, lane for
/// lane, so the bits are the AVX2 kernel's. It widens 16 bytes per instruction where that
/// one widens 8: Q5_0's one-row time at `exact` fell by about a sixth (`perf`, Gemma3).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
#[inline]
fn one_row_512<const BB: usize>(t: Tile, decode: impl Fn(&[u8; BB]) -> (f32, __m256i)) {
    // RowKernel calls a one-row kernel for at most one activation row: none, or its first.
    if t.row_bytes == 0 || t.n_in == 0 || t.x.len() < t.n_in {
        return;
    }
    let nb = (t.n_in / QK).min(t.row_bytes / BB);
    // The row's blocks with runs in the order 0, 2, 1, 3.
    let mut xp = PERMUTED.with_borrow_mut(std::mem::take);
    xp.clear();
    for b in t.x[..t.n_in].as_chunks::<QK>().0[..nb].iter() {
        for run in [0, 2, 1, 3] {
            xp.extend_from_slice(&b[run * 8..run * 8 + 8]);
        }
    }
    let xb = xp.as_chunks::<QK>().0;
    for (w, o) in t.w.chunks_exact(t.row_bytes).zip(t.out.iter_mut()) {
        prefetch_ahead(w);
        let wb = &w.as_chunks::<BB>().0[..nb];
        let mut acc = [_mm256_setzero_ps(); 2];
        for (b, (blk, x)) in wb.iter().zip(xb).enumerate() {
            let (d, q) = decode(blk);
            let q = _mm256_permute4x64_epi64::<0b11_01_10_00>(q);
            let q02 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
            let q13 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256::<1>(q)));
            // SAFETY: reads the 32 f32 of the block; loadu has no alignment requirement.
            let (x02, x13) = unsafe { (_mm512_loadu_ps(x.as_ptr()), _mm512_loadu_ps(x.as_ptr().add(16))) };
            let ab = _mm512_fmadd_ps(q13, x13, _mm512_mul_ps(q02, x02));
            let (a, bb) = (_mm512_castps512_ps256(ab), _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(ab))));
            acc[b % 2] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_add_ps(a, bb), acc[b % 2]);
        }
        // `legacy` adds its min chain, 0.0 for these formats: kept, as it turns -0.0 into 0.0.
        *o = sum_lanes(_mm256_add_ps(acc[0], acc[1])) + 0.0;
    }
    PERMUTED.with_borrow_mut(|v| *v = xp);
}

thread_local! {
    /// `one_row_512`'s activation row in run order 0, 2, 1, 3: reused, no allocation per call.
    static PERMUTED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Q5_0 for one activation row on AVX-512 (`one_row_512`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
pub fn q5_0_one512(t: Tile) {
    one_row_512::<{ 2 + 4 + QK / 2 }>(t, |b| q5_0_bytes(b))
}

legacy_entry!(q8_0, q8_0_wide, 2 + QK, false, q8_0_block);
legacy_entry!(q4_0, q4_0_wide, 2 + QK / 2, false, q4_0_block);
// Q4_1 keeps 4 rows: its 8 scalar min chains would take the registers 8 rows need (6 and 8
// rows both timed slower than 4).
legacy_entry!(q4_1, q4_1_wide, Q4_1_BYTES, true, q4_1_block, R_LEGACY);
legacy_entry!(q5_0, q5_0_wide, 2 + 4 + QK / 2, false, q5_0_block);
// Q5_1 has Q4_1's min chains, so Q4_1's 4 rows.
legacy_entry!(q5_1, q5_1_wide, Q5_1_BYTES, true, q5_1_block, R_LEGACY);
legacy_entry!(mxfp4, mxfp4_wide, 1 + QK / 2, false, mxfp4_block);

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q8_0_block(b: &[u8; 2 + QK]) -> (f32, f32, [__m256; 4]) {
    (f16_scalar(sub::<_, 0, 2, 34>(b)), 0.0, i8x32(bytes32(sub::<_, 2, 32, 34>(b))))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q4_0_block(b: &[u8; 2 + QK / 2]) -> (f32, f32, [__m256; 4]) {
    (f16_scalar(sub::<_, 0, 2, 18>(b)), 0.0, runs_f32(nibble_runs(sub::<_, 2, 16, 18>(b)), 8))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q4_1_block(b: &[u8; Q4_1_BYTES]) -> (f32, f32, [__m256; 4]) {
    // d and m are adjacent f16s: one conversion gives both.
    let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes(*sub::<_, 0, 4, 20>(b))));
    let (d, m) = (_mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm)));
    (d, m, runs_f32(nibble_runs(sub::<_, 4, 16, 20>(b)), 0))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q5_0_block(b: &[u8; 2 + 4 + QK / 2]) -> (f32, f32, [__m256; 4]) {
    let (d, q) = q5_0_bytes(b);
    (d, 0.0, i8x32(q))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q5_1_block(b: &[u8; Q5_1_BYTES]) -> (f32, f32, [__m256; 4]) {
    let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes(*sub::<_, 0, 4, Q5_1_BYTES>(b))));
    let (d, m) = (_mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_movehdup_ps(dm)));
    (d, m, i8x32(q5_1_bytes(b)))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn mxfp4_block(b: &[u8; 1 + QK / 2]) -> (f32, f32, [__m256; 4]) {
    (e8m0_half(b[0]), 0.0, i8x32(mxfp4_bytes(b)))
}

/// A Q5_1 block's 32 integers (0..32) as bytes in element order.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn q5_1_bytes(b: &[u8; Q5_1_BYTES]) -> __m256i {
    let high = _mm256_and_si256(bit_bytes32(u32::from_le_bytes(*sub::<_, 4, 4, Q5_1_BYTES>(b))), _mm256_set1_epi8(0x10));
    _mm256_or_si256(nibble_bytes(sub::<_, 8, 16, Q5_1_BYTES>(b)), high)
}

/// A Q5_0 block's scale and its 32 signed integers as bytes in element order.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn q5_0_bytes(b: &[u8; 2 + 4 + QK / 2]) -> (f32, __m256i) {
    let high = _mm256_and_si256(bit_bytes32(u32::from_le_bytes(*sub::<_, 2, 4, 22>(b))), _mm256_set1_epi8(0x10));
    let nibbles = nibble_bytes(sub::<_, 6, 16, 22>(b));
    (f16_scalar(sub::<_, 0, 2, 22>(b)), _mm256_sub_epi8(_mm256_or_si256(nibbles, high), _mm256_set1_epi8(16)))
}

/// The 32 nibbles of a 4-bit block as bytes in element order: low nibbles, then high ones.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn nibble_bytes(qs: &[u8; 16]) -> __m256i {
    let v = bytes16(qs);
    let m4 = _mm_set1_epi8(0x0F);
    _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16::<4>(v), m4), _mm_and_si128(v, m4))
}

/// An MXFP4 block's 32 doubled E2M1 values (quant's `MXFP4_VALUES`) as signed bytes in element
/// order: each nibble indexes the 16-entry table with `vpshufb` (a nibble is below 16, so the
/// index's top bit, which would zero the byte, is never set).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn mxfp4_bytes(b: &[u8; 1 + QK / 2]) -> __m256i {
    // SAFETY: reads the 16 bytes of the table; loadu has no alignment requirement.
    let table = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(MXFP4_VALUES.as_ptr().cast()) });
    _mm256_shuffle_epi8(table, nibble_bytes(sub::<_, 1, 16, 17>(b)))
}
