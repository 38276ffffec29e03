//! The `fast` precision's kernels on aarch64: int8.rs's arithmetic with NEON, which every
//! aarch64 target Rust builds for by default. The four-byte integer sums are `smull` (eight
//! exact i16 products: |w| <= 128 and |x| <= 127), `saddlp` (pairs, widened to i32) and `addp`
//! (pairs of pairs), so lane l is the exact sum of the products 4l..4l+4; the f32 steps are
//! `fmla`, the fused multiply-add of int8.rs's `mul_add`. Every output has the portable bits.
//!
//! NEON multiplies signed bytes by signed bytes, so unlike x86 no sign trick is needed. The
//! `sdot` instruction (the dotprod extension) would make the same lanes in one step, but its
//! intrinsic `vdotq_s32` is not stable yet (rust-lang/rust#117224), so it is not used.
//!
//! Eight f32 lanes are two 4-lane registers: elements 0..16 (lanes 0..4, weight scale 0) and
//! 16..32 (lanes 4..8, scale 1). A weight row's 32-element block is decoded once for R
//! activation rows (prefill, verify); each output still goes through exactly the operations it
//! would alone. No prefetch, unlike avx2_int8.rs: the aarch64 prefetch intrinsic is unstable,
//! and a row is one sequential stream, which the hardware prefetchers follow.

use std::arch::aarch64::*;

use super::int8::{common_blocks, QTile};
use super::row_dot::{reduce8, scale_min_k4, sub, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES};
use crate::quant::{QK, QK_K};

/// A decoded 32-element weight block.
#[derive(Clone, Copy)]
struct Decoded {
    /// Elements 0..16 and 16..32, after the format's offset.
    q: [int8x16_t; 2],
    /// The weight scale of each half.
    scale: [f32; 2],
    /// The coefficient of the activation block's `s` (0 for the formats without a min).
    min: f32,
}

/// Lanes 0..4 of one 16-element half: the exact sums of `w[i] * x[i]` over 4 consecutive i.
#[target_feature(enable = "neon")]
#[inline]
fn sums16(w: int8x16_t, x: int8x16_t) -> int32x4_t {
    let lo = vpaddlq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(x)));
    let hi = vpaddlq_s16(vmull_high_s8(w, x));
    vpaddq_s32(lo, hi)
}

#[target_feature(enable = "neon")]
#[inline]
fn load_u8(b: &[u8; 16]) -> uint8x16_t {
    // SAFETY: reads the 16 bytes of the array; vld1q_u8 needs only u8's alignment.
    unsafe { vld1q_u8(b.as_ptr()) }
}

/// A rounded activation block as its two halves.
#[target_feature(enable = "neon")]
#[inline]
fn load_x(x: &[i8; QK]) -> [int8x16_t; 2] {
    // SAFETY: reads bytes 0..16 and 16..32 of the 32-byte array; vld1q_s8 needs only i8's
    // alignment.
    unsafe { [vld1q_s8(x.as_ptr()), vld1q_s8(x.as_ptr().add(16))] }
}

/// The sum of 8 lanes by row_dot.rs's fixed tree.
#[target_feature(enable = "neon")]
#[inline]
fn sum8(v: [float32x4_t; 2]) -> f32 {
    let mut lanes = [0.0f32; 8];
    // SAFETY: writes lanes 0..4 and 4..8 of the 8-f32 array; vst1q_f32 needs only f32's
    // alignment.
    unsafe {
        vst1q_f32(lanes.as_mut_ptr(), v[0]);
        vst1q_f32(lanes.as_mut_ptr().add(4), v[1]);
    }
    reduce8(&lanes)
}

/// A little-endian f16 (block scales) to f32, exactly.
#[inline(always)]
fn f16(h: &[u8; 2]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes(*h)).to_f32()
}

/// One weight row (super-blocks of BB bytes, SUBS 32-element blocks each) against R rounded
/// activation rows.
#[target_feature(enable = "neon")]
#[inline]
fn row_dots<const BB: usize, const SUBS: usize, const MIN: bool, const R: usize>(
    w: &[u8],
    xq: [&[[i8; QK]]; R],
    xd: [&[f32]; R],
    xs: [&[f32]; R],
    decode: impl Fn(&[u8; BB], usize) -> Decoded,
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
    // acc[r][k]: row r's chain k (blocks b with b % 2 == k), lanes 0..4 and 4..8.
    let mut acc = [[[vdupq_n_f32(0.0); 2]; 2]; R];
    let mut mins = [0.0f32; R];
    // SAFETY (every get_unchecked below): b < nb, and nb is at most the block count of the
    // weight row (sbs.len() * SUBS, so b / SUBS < sbs.len()) and the length of every row's
    // xq and xd (and xs when MIN), as cut above.
    let mut block = |b: usize, k: usize| {
        debug_assert!(b < nb);
        let blk = decode(unsafe { sbs.get_unchecked(b / SUBS) }, b % SUBS);
        for r in 0..R {
            let x = load_x(unsafe { xq[r].get_unchecked(b) });
            let dx = unsafe { *xd[r].get_unchecked(b) };
            for h in 0..2 {
                let p = vcvtq_f32_s32(sums16(blk.q[h], x[h]));
                acc[r][k][h] = vfmaq_f32(acc[r][k][h], vdupq_n_f32(blk.scale[h] * dx), p);
            }
            if MIN {
                mins[r] = blk.min.mul_add(unsafe { *xs[r].get_unchecked(b) }, mins[r]);
            }
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
        let [a, c] = acc[r];
        out[r] = sum8([vaddq_f32(a[0], c[0]), vaddq_f32(a[1], c[1])]) + mins[r];
    }
    out
}

/// One weight row against RR activation rows, in the lane-sum (`row_dots`) or (SUMMED) the
/// block-sum form.
#[target_feature(enable = "neon")]
#[inline]
fn dots<const BB: usize, const SUBS: usize, const MIN: bool, const SUMMED: bool, const RR: usize>(
    w: &[u8],
    xq: [&[[i8; QK]]; RR],
    xd: [&[f32]; RR],
    xs: [&[f32]; RR],
    decode: impl Fn(&[u8; BB], usize) -> Decoded,
) -> [f32; RR] {
    if !SUMMED {
        return row_dots::<BB, SUBS, MIN, RR>(w, xq, xd, xs, decode);
    }
    // The block-sum formats (int8.rs's `sums_per_block`): each block's lanes added across
    // (`addv`, exact in i32) and the float step on the sum.
    // Units of BB bytes hold SUBS blocks each: 1 for the 32-element formats, 8 for Q4_K's and
    // Q5_K's super-blocks.
    let units = w.as_chunks::<BB>().0;
    let nb = common_blocks::<MIN, RR>(units.len() * SUBS, &xq, &xd, &xs);
    let mut acc = [0.0f32; RR];
    for b in 0..nb {
        let blk = decode(&units[b / SUBS], b % SUBS);
        for r in 0..RR {
            let x = load_x(&xq[r][b]);
            let s = vaddvq_s32(vaddq_s32(sums16(blk.q[0], x[0]), sums16(blk.q[1], x[1])));
            acc[r] = (s as f32).mul_add(blk.scale[0] * xd[r][b], acc[r]);
            if MIN {
                acc[r] = blk.min.mul_add(xs[r][b], acc[r]);
            }
        }
    }
    acc
}

/// Every weight row of the tile against every activation row, R at a time, then the 1 to 3
/// rows left in one pass over the weights (as avx2_int8.rs's `tile`; before, one pass each).
/// A row's value does not depend on the rows it runs with.
#[target_feature(enable = "neon")]
#[inline]
fn tile<const BB: usize, const SUBS: usize, const MIN: bool, const SUMMED: bool, const R: usize>(
    mut t: QTile,
    decode: impl Fn(&[u8; BB], usize) -> Decoded + Copy,
) {
    if t.row_bytes == 0 || t.m == 0 || t.n_in == 0 {
        return;
    }
    // The rows left after the passes of R are fewer than R: at most 3 for the match below.
    const { assert!(R >= 1 && R <= 4) };
    let m = t.m;
    let mut r = 0;
    while m - r >= R {
        rows_pass::<BB, SUBS, MIN, SUMMED, R>(&mut t, r, decode);
        r += R;
    }
    match m - r {
        0 => {}
        1 => rows_pass::<BB, SUBS, MIN, SUMMED, 1>(&mut t, r, decode),
        2 => rows_pass::<BB, SUBS, MIN, SUMMED, 2>(&mut t, r, decode),
        _ => rows_pass::<BB, SUBS, MIN, SUMMED, 3>(&mut t, r, decode),
    }
}

/// Activation rows r0..r0 + RX of the tile against all its weight rows, in one pass over them.
#[target_feature(enable = "neon")]
#[inline]
fn rows_pass<const BB: usize, const SUBS: usize, const MIN: bool, const SUMMED: bool, const RX: usize>(
    t: &mut QTile,
    r0: usize,
    decode: impl Fn(&[u8; BB], usize) -> Decoded + Copy,
) {
    let m = t.m;
    let rows: [_; RX] = std::array::from_fn(|i| t.x.row_blocks(r0 + i, t.n_in));
    let (xq, xd, xs) = (rows.map(|v| v.0), rows.map(|v| v.1), rows.map(|v| v.2));
    for (w, o) in t.w.chunks_exact(t.row_bytes).zip(t.out.chunks_exact_mut(m)) {
        o[r0..r0 + RX].copy_from_slice(&dots::<BB, SUBS, MIN, SUMMED, RX>(w, xq, xd, xs, decode));
    }
}

// Decoders: block k (always 0 for the 32-element formats) of one stored block.

/// 16 packed bytes as their low nibbles (elements 0..16) and high nibbles (16..32).
#[target_feature(enable = "neon")]
#[inline]
fn nibbles(qs: &[u8; 16]) -> [uint8x16_t; 2] {
    let v = load_u8(qs);
    [vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(v)]
}

/// Unsigned bytes minus `offset`, as signed bytes.
#[target_feature(enable = "neon")]
#[inline]
fn minus(q: [uint8x16_t; 2], offset: i8) -> [int8x16_t; 2] {
    q.map(|v| vsubq_s8(vreinterpretq_s8_u8(v), vdupq_n_s8(offset)))
}

#[target_feature(enable = "neon")]
#[inline]
fn q8_0(b: &[u8; 34], _: usize) -> Decoded {
    let q = [load_u8(sub::<_, 2, 16, 34>(b)), load_u8(sub::<_, 18, 16, 34>(b))].map(|v| vreinterpretq_s8_u8(v));
    let d = f16(sub::<_, 0, 2, 34>(b));
    Decoded { q, scale: [d, d], min: 0.0 }
}

#[target_feature(enable = "neon")]
#[inline]
fn q4_0(b: &[u8; 18], _: usize) -> Decoded {
    let d = f16(sub::<_, 0, 2, 18>(b));
    Decoded { q: minus(nibbles(sub::<_, 2, 16, 18>(b)), 8), scale: [d, d], min: 0.0 }
}

#[target_feature(enable = "neon")]
#[inline]
fn q4_1(b: &[u8; 20], _: usize) -> Decoded {
    let (d, m) = (f16(sub::<_, 0, 2, 20>(b)), f16(sub::<_, 2, 2, 20>(b)));
    Decoded { q: minus(nibbles(sub::<_, 4, 16, 20>(b)), 0), scale: [d, d], min: m }
}

/// Bytes 0x10 where bit e of the little-endian `qh` is set, for elements 0..16 and 16..32.
#[target_feature(enable = "neon")]
#[inline]
fn fifth_bits32(qh: &[u8; 4]) -> [uint8x16_t; 2] {
    // Element e takes bit e of qh (little-endian), i.e. bit e % 8 of qh's byte e / 8: spread
    // each byte over 8 lanes and test lane i against bit i % 8.
    let bit = vcombine_u8(vcreate_u8(0x8040_2010_0804_0201), vcreate_u8(0x8040_2010_0804_0201));
    let high = |b0: u8, b1: u8| {
        let spread = vcombine_u8(vdup_n_u8(b0), vdup_n_u8(b1));
        vandq_u8(vtstq_u8(spread, bit), vdupq_n_u8(0x10))
    };
    [high(qh[0], qh[1]), high(qh[2], qh[3])]
}

#[target_feature(enable = "neon")]
#[inline]
fn q5_0(b: &[u8; 22], _: usize) -> Decoded {
    let [h0, h1] = fifth_bits32(sub::<_, 2, 4, 22>(b));
    let [lo, hi] = nibbles(sub::<_, 6, 16, 22>(b));
    let q = [vorrq_u8(lo, h0), vorrq_u8(hi, h1)];
    let d = f16(sub::<_, 0, 2, 22>(b));
    Decoded { q: minus(q, 16), scale: [d, d], min: 0.0 }
}

#[target_feature(enable = "neon")]
#[inline]
fn q5_1(b: &[u8; 24], _: usize) -> Decoded {
    let [h0, h1] = fifth_bits32(sub::<_, 4, 4, 24>(b));
    let [lo, hi] = nibbles(sub::<_, 8, 16, 24>(b));
    let q = [vorrq_u8(lo, h0), vorrq_u8(hi, h1)];
    let (d, m) = (f16(sub::<_, 0, 2, 24>(b)), f16(sub::<_, 2, 2, 24>(b)));
    Decoded { q: minus(q, 0), scale: [d, d], min: m }
}


/// The 32 bytes of `b` from `at` as two halves (at + 32 <= N, checked).
#[target_feature(enable = "neon")]
#[inline]
fn bytes_at<const N: usize>(b: &[u8; N], at: usize) -> [uint8x16_t; 2] {
    let s: &[u8; 32] = b[at..at + 32].try_into().unwrap_or_else(|_| unreachable!("32 bytes from {at} of {N}"));
    [load_u8(sub::<_, 0, 16, 32>(s)), load_u8(sub::<_, 16, 16, 32>(s))]
}

/// Block k of a Q4_K or Q5_K super-block (BB bytes): 64-element group k / 2 of the nibbles
/// from QS, low nibbles for even k; with HIGH (Q5_K), bit k of qh byte l (the 32 bytes at 16)
/// as element l's fifth bit (as int8.rs's `k4`).
#[target_feature(enable = "neon")]
#[inline]
fn k4<const BB: usize, const QS: usize, const HIGH: bool>(b: &[u8; BB], k: usize) -> Decoded {
    let (sc, m) = scale_min_k4(k, sub::<_, 4, 12, BB>(b));
    let v = bytes_at(b, QS + (k / 2) * 32);
    let mut q = if k.is_multiple_of(2) { v.map(|v| vandq_u8(v, vdupq_n_u8(0x0F))) } else { v.map(|v| vshrq_n_u8::<4>(v)) };
    if HIGH {
        let (bit, qh) = (vdupq_n_u8(1 << k), bytes_at(b, 16));
        q = std::array::from_fn(|h| vorrq_u8(q[h], vandq_u8(vtstq_u8(qh[h], bit), vdupq_n_u8(0x10))));
    }
    let (d, dmin) = (f16(sub::<_, 0, 2, BB>(b)), f16(sub::<_, 2, 2, BB>(b)));
    let s = d * sc as f32;
    Decoded { q: minus(q, 0), scale: [s, s], min: -(dmin * m as f32) }
}

#[target_feature(enable = "neon")]
#[inline]
fn q6_k(b: &[u8; Q6_K_BYTES], k: usize) -> Decoded {
    // Block k = 4n + part: half n, ql bytes 32 (part % 2) on, the low nibble for part < 2, qh
    // bits 2 part; scales n*8 + 2 part (+1) (as int8.rs's `decode_q6_k`).
    let (n, part) = (k / 4, k % 4);
    let ql = bytes_at(b, n * 64 + (part % 2) * 32);
    let qh = bytes_at(b, QK_K / 2 + n * 32);
    // vshlq_u8 by a negative count shifts right.
    let down = vdupq_n_s8(-2 * part as i8);
    let q: [uint8x16_t; 2] = std::array::from_fn(|h| {
        let lo = if part < 2 { vandq_u8(ql[h], vdupq_n_u8(0x0F)) } else { vshrq_n_u8::<4>(ql[h]) };
        let hi = vshlq_n_u8::<4>(vandq_u8(vshlq_u8(qh[h], down), vdupq_n_u8(3)));
        vorrq_u8(lo, hi)
    });
    let d = f16(sub::<_, { Q6_K_BYTES - 2 }, 2, Q6_K_BYTES>(b));
    let at = QK_K / 2 + QK_K / 4 + n * 8 + part * 2;
    Decoded { q: minus(q, 32), scale: [d * (b[at] as i8) as f32, d * (b[at + 1] as i8) as f32], min: 0.0 }
}

/// Activation rows per decoded block: 4 rows' 16 accumulator registers leave half of NEON's 32
/// for the block, the activations and the products.
const R: usize = 4;

macro_rules! summed_entries {
    ($($name:ident, $decode:expr, $bb:expr, $subs:expr, $min:expr;)*) => {$(
        #[target_feature(enable = "neon")]
        pub fn $name(t: QTile) {
            tile::<{ $bb }, { $subs }, $min, true, R>(t, |b, k| ($decode)(b, k))
        }
    )*};
}

summed_entries! {
    q8_0_neon, q8_0, 34, 1, false;
    q4_0_neon, q4_0, 18, 1, false;
    q4_1_neon, q4_1, 20, 1, true;
    q5_0_neon, q5_0, 22, 1, false;
    q5_1_neon, q5_1, 24, 1, true;
    q4_k_neon, k4::<Q4_K_BYTES, 16, false>, Q4_K_BYTES, 8, true;
    q5_k_neon, k4::<Q5_K_BYTES, 48, true>, Q5_K_BYTES, 8, true;
}

macro_rules! entries {
    ($($name:ident, $decode:expr, $bb:expr, $subs:expr, $min:expr;)*) => {$(
        #[target_feature(enable = "neon")]
        pub fn $name(t: QTile) {
            tile::<{ $bb }, { $subs }, $min, false, R>(t, |b, k| ($decode)(b, k))
        }
    )*};
}

entries! {
    q6_k_neon, q6_k, Q6_K_BYTES, 8, false;
}
