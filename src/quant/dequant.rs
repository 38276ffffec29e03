//! Scalar dequantization of one row, block by block.
//!
//! Each function mirrors ggml's reference `dequantize_row_*` (ggml/src/ggml-quants.c) operation
//! for operation: the same products in the same order, each rounded to f32, never fused. That is
//! what makes the results bit-identical to ggml's scalar path and to gguf-py's numpy
//! `gguf.quants.dequantize`, which the tests in tests/quant_dequant.rs check.
//!
//! The loops walk `chunks_exact` over the source blocks and destination runs together, and index
//! inside a block only with constants, so the compiler removes the bounds checks.

use super::{e8m0_half, WeightType, MXFP4_VALUES, QK, QK_K};
use half::{bf16, f16};

/// Dequantize one row of `dst.len()` elements from exactly `ty.row_bytes(dst.len())` bytes of
/// `src` (little-endian GGML block layout).
///
/// The caller validates the lengths (debug builds assert them). With wrong lengths this never
/// panics: it converts only the whole blocks that fit in both slices and leaves the rest of `dst`
/// unwritten.
pub fn dequantize_row(ty: WeightType, src: &[u8], dst: &mut [f32]) {
    debug_assert_eq!(
        ty.row_bytes(dst.len()),
        Some(src.len()),
        "dequantize_row({}): {} bytes for {} elements",
        ty.name(),
        src.len(),
        dst.len()
    );
    (ty.format().dequantize)(src, dst)
}

#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

pub(super) fn row_f32(src: &[u8], dst: &mut [f32]) {
    for (s, d) in src.chunks_exact(4).zip(dst.iter_mut()) {
        *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    }
}

pub(super) fn row_f16(src: &[u8], dst: &mut [f32]) {
    for (s, d) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *d = f16::from_bits(u16::from_le_bytes([s[0], s[1]])).to_f32();
    }
}

pub(super) fn row_bf16(src: &[u8], dst: &mut [f32]) {
    // bf16 is the top half of an f32 (ggml-impl.h ggml_compute_bf16_to_fp32: bits << 16).
    for (s, d) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *d = bf16::from_bits(u16::from_le_bytes([s[0], s[1]])).to_f32();
    }
}

/// block_q8_0 { f16 d; i8 qs[32]; }: y = qs * d.
pub(super) fn row_q8_0(src: &[u8], dst: &mut [f32]) {
    const BB: usize = 2 + QK;
    for (b, y) in src.chunks_exact(BB).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        let qs = &b[2..BB];
        for (y, &q) in y.iter_mut().zip(qs) {
            *y = (q as i8) as f32 * d;
        }
    }
}

/// block_q4_0 { f16 d; u8 qs[16]; }: element j is the low nibble of qs[j], element j + 16 the
/// high nibble; y = (nibble - 8) * d.
pub(super) fn row_q4_0(src: &[u8], dst: &mut [f32]) {
    const BB: usize = 2 + QK / 2;
    for (b, y) in src.chunks_exact(BB).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        let qs = &b[2..BB];
        let (lo, hi) = y.split_at_mut(QK / 2);
        for j in 0..QK / 2 {
            let q = qs[j];
            lo[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
            hi[j] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
}

/// block_q4_1 { f16 d; f16 m; u8 qs[16]; }: y = nibble * d + m (same nibble order as q4_0).
pub(super) fn row_q4_1(src: &[u8], dst: &mut [f32]) {
    const BB: usize = 4 + QK / 2;
    for (b, y) in src.chunks_exact(BB).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        let m = f16_at(b, 2);
        let qs = &b[4..BB];
        let (lo, hi) = y.split_at_mut(QK / 2);
        for j in 0..QK / 2 {
            let q = qs[j];
            lo[j] = (q & 0x0F) as f32 * d + m;
            hi[j] = (q >> 4) as f32 * d + m;
        }
    }
}

/// The 5-bit values of elements j and j + 16 (j < 16) of a Q5_0 or Q5_1 block: nibbles of
/// `qs[j]`, fifth bits from the little-endian u32 `qh` (ggml: xh_0 = ((qh >> (j + 0)) << 4) &
/// 0x10; xh_1 = ((qh >> (j + 12))) & 0x10).
#[inline(always)]
fn fives(qh: u32, qs: &[u8], j: usize) -> (u32, u32) {
    let h0 = ((qh >> j) << 4) & 0x10;
    let h1 = (qh >> (j + 12)) & 0x10;
    ((qs[j] & 0x0F) as u32 | h0, (qs[j] >> 4) as u32 | h1)
}

/// block_q5_0 { f16 d; u8 qh[4]; u8 qs[16]; }: bit j of the little-endian u32 qh is the fifth
/// bit of element j; y = (5-bit value - 16) * d.
pub(super) fn row_q5_0(src: &[u8], dst: &mut [f32]) {
    const BB: usize = 2 + 4 + QK / 2;
    for (b, y) in src.chunks_exact(BB).zip(dst.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let (lo, hi) = y.split_at_mut(QK / 2);
        for j in 0..QK / 2 {
            let (v0, v1) = fives(qh, &b[6..BB], j);
            lo[j] = (v0 as i32 - 16) as f32 * d;
            hi[j] = (v1 as i32 - 16) as f32 * d;
        }
    }
}

/// block_q5_1 { f16 d; f16 m; u8 qh[4]; u8 qs[16]; }: the 5-bit values of q5_0 without its
/// offset; y = value * d + m (ggml `dequantize_row_q5_1`).
pub(super) fn row_q5_1(src: &[u8], dst: &mut [f32]) {
    const BB: usize = 4 + 4 + QK / 2;
    for (b, y) in src.chunks_exact(BB).zip(dst.chunks_exact_mut(QK)) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let (lo, hi) = y.split_at_mut(QK / 2);
        for j in 0..QK / 2 {
            let (v0, v1) = fives(qh, &b[8..BB], j);
            lo[j] = v0 as f32 * d + m;
            hi[j] = v1 as f32 * d + m;
        }
    }
}

/// The j-th (0..8) 6-bit scale and min of a Q4_K block's 12 packed bytes (ggml-quants.c
/// `get_scale_min_k4`).
#[inline(always)]
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// block_q4_K { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; }: eight sub-blocks of 32; each
/// 64-element group takes the low nibbles of 32 bytes, then their high nibbles;
/// y = (d * sc) * nibble - (dmin * m).
pub(super) fn row_q4_k(src: &[u8], dst: &mut [f32]) {
    row_k4::<{ 4 + 12 + QK_K / 2 }, 16, false>(src, dst)
}

/// block_q5_K { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }: Q4_K's layout with a
/// fifth bit per element: in 64-element group g, element l (< 32) takes bit 2g of qh[l] and
/// element 32 + l bit 2g + 1; y = (d * sc) * value - (dmin * m) (ggml `dequantize_row_q5_K`).
pub(super) fn row_q5_k(src: &[u8], dst: &mut [f32]) {
    row_k4::<{ 4 + 12 + QK_K / 8 + QK_K / 2 }, 48, true>(src, dst)
}

/// Q4_K and Q5_K: super-blocks of BB bytes, the nibbles from QS; with HIGH the fifth bits from
/// the 32 bytes at 16.
fn row_k4<const BB: usize, const QS: usize, const HIGH: bool>(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BB).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, 0);
        let dmin = f16_at(b, 2);
        let scales = &b[4..16];
        let qh = &b[16..QS];
        let qs = &b[QS..BB];
        for (g, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
            let (sc1, m1) = scale_min_k4(2 * g, scales);
            let (sc2, m2) = scale_min_k4(2 * g + 1, scales);
            let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
            let (lo, hi) = y.split_at_mut(32);
            for l in 0..32 {
                let (h1, h2) = if HIGH { (((qh[l] >> (2 * g)) & 1) << 4, ((qh[l] >> (2 * g + 1)) & 1) << 4) } else { (0, 0) };
                lo[l] = d1 * ((q[l] & 0x0F) | h1) as f32 - m1;
                hi[l] = d2 * ((q[l] >> 4) | h2) as f32 - m2;
            }
        }
    }
}

/// block_q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }: two halves of 128 elements;
/// in each, element l + 32k (k = 0..4) takes 4 low bits from ql and 2 high bits from qh;
/// y = (d * scale) * (6-bit value - 32), one scale per 16 elements.
pub(super) fn row_q6_k(src: &[u8], dst: &mut [f32]) {
    const BB: usize = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;
    for (b, y) in src.chunks_exact(BB).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f16_at(b, BB - 2);
        let (ql_all, rest) = b.split_at(QK_K / 2);
        let (qh_all, rest) = rest.split_at(QK_K / 4);
        let sc_all = &rest[..QK_K / 16];
        let halves = ql_all.chunks_exact(64).zip(qh_all.chunks_exact(32)).zip(sc_all.chunks_exact(8));
        for (((ql, qh), sc), y) in halves.zip(y.chunks_exact_mut(128)) {
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
            }
        }
    }
}

/// block_mxfp4 { u8 e; u8 qs[16]; }: q4_0's nibble order; y = MXFP4_VALUES[nibble] * d with
/// d = e8m0_half(e) (ggml `dequantize_row_mxfp4`). A power of two times a small integer: exact.
pub(super) fn row_mxfp4(src: &[u8], dst: &mut [f32]) {
    const BB: usize = 1 + QK / 2;
    for (b, y) in src.chunks_exact(BB).zip(dst.chunks_exact_mut(QK)) {
        let d = e8m0_half(b[0]);
        let qs = &b[1..BB];
        let (lo, hi) = y.split_at_mut(QK / 2);
        for j in 0..QK / 2 {
            let q = qs[j];
            lo[j] = MXFP4_VALUES[(q & 0x0F) as usize] as f32 * d;
            hi[j] = MXFP4_VALUES[(q >> 4) as usize] as f32 * d;
        }
    }
}
