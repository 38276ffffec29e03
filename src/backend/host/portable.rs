//! The portable row kernels: plain Rust with the lanes, blocks and accumulators of avx2.rs (see
//! row_dot.rs for the arithmetic). Products are rounded before they are added, where AVX2 fuses
//! them. Runs on CPUs without AVX2 and is the second implementation the tests compare against.

use half::{bf16, f16};

use super::row_dot::{f16_at, finish_float, reduce8, scale_min_k4, Lanes, Tile, Q4_1_BYTES, Q4_K_BYTES, Q5_1_BYTES, Q5_K_BYTES, Q6_K_BYTES};
use crate::quant::{e8m0_half, MXFP4_VALUES, QK, QK_K};

/// Lane l: `(q_l x_l + q_{l+8} x_{l+8}) + (q_{l+16} x_{l+16} + q_{l+24} x_{l+24})`.
#[inline(always)]
fn lanes32(q: &[f32; 32], x: &[f32; 32]) -> Lanes {
    let mut s = [0.0f32; 8];
    for (l, s) in s.iter_mut().enumerate() {
        let a = q[l] * x[l] + q[8 + l] * x[8 + l];
        let b = q[16 + l] * x[16 + l] + q[24 + l] * x[24 + l];
        *s = a + b;
    }
    s
}

/// Lane l: `q_l x_l + q_{l+8} x_{l+8}` (one 16-element group of Q6_K).
#[inline(always)]
fn lanes16(q: &[f32], x: &[f32]) -> Lanes {
    let mut s = [0.0f32; 8];
    for (l, s) in s.iter_mut().enumerate() {
        *s = q[l] * x[l] + q[8 + l] * x[8 + l];
    }
    s
}

/// `acc += d * s` lane by lane.
#[inline(always)]
fn scale_add(acc: &mut Lanes, d: f32, s: &Lanes) {
    for (a, &s) in acc.iter_mut().zip(s) {
        *a += d * s;
    }
}

#[inline(always)]
fn add_lanes(a: &Lanes, b: &Lanes) -> Lanes {
    let mut v = [0.0f32; 8];
    for l in 0..8 {
        v[l] = a[l] + b[l];
    }
    v
}

/// The 32-element block formats: `decode` writes a block's integers (after the offset) into `q`
/// and returns its scale d and min m; block b goes to accumulator b % 2, and `m_b * sums[b]`
/// to the scalar min chain (formats without a min pass no sums).
#[inline(always)]
fn legacy<const BB: usize>(
    w: &[u8],
    x: &[f32],
    sums: &[f32],
    decode: impl Fn(&[u8; BB], &mut [f32; QK]) -> (f32, f32),
) -> f32 {
    let mut acc = [[0.0f32; 8]; 2];
    let mut mins = 0.0f32;
    let mut q = [0.0f32; QK];
    for (b, (blk, xs)) in w.as_chunks::<BB>().0.iter().zip(x.as_chunks::<QK>().0).enumerate() {
        let (d, m) = decode(blk, &mut q);
        scale_add(&mut acc[b % 2], d, &lanes32(&q, xs));
        if let Some(&xsum) = sums.get(b) {
            mins += m * xsum;
        }
    }
    reduce8(&add_lanes(&acc[0], &acc[1])) + mins
}

/// Element j of a 4-bit block is the low nibble of byte j, element j + 16 its high nibble.
#[inline(always)]
fn nibbles(qs: &[u8], q: &mut [f32; QK], offset: i32) {
    for j in 0..QK / 2 {
        q[j] = ((qs[j] & 0x0F) as i32 - offset) as f32;
        q[j + QK / 2] = ((qs[j] >> 4) as i32 - offset) as f32;
    }
}

/// The 5-bit formats: `nibbles` with bit e of the little-endian `qh` as element e's fifth bit.
#[inline(always)]
fn fives(qh: &[u8], qs: &[u8], q: &mut [f32; QK], offset: i32) {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    for j in 0..QK / 2 {
        let lo = (qs[j] & 0x0F) as u32 | ((qh >> j) & 1) << 4;
        let hi = (qs[j] >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
        q[j] = (lo as i32 - offset) as f32;
        q[j + QK / 2] = (hi as i32 - offset) as f32;
    }
}

fn q8_0_row(w: &[u8], x: &[f32], _: &[f32]) -> f32 {
    legacy::<{ 2 + QK }>(w, x, &[], |b, q| {
        for (q, &v) in q.iter_mut().zip(&b[2..]) {
            *q = (v as i8) as f32;
        }
        (f16_at(b, 0), 0.0)
    })
}

fn q4_0_row(w: &[u8], x: &[f32], _: &[f32]) -> f32 {
    legacy::<{ 2 + QK / 2 }>(w, x, &[], |b, q| {
        nibbles(&b[2..], q, 8);
        (f16_at(b, 0), 0.0)
    })
}

fn q4_1_row(w: &[u8], x: &[f32], sums: &[f32]) -> f32 {
    legacy::<Q4_1_BYTES>(w, x, sums, |b, q| {
        nibbles(&b[4..], q, 0);
        (f16_at(b, 0), f16_at(b, 2))
    })
}

fn q5_0_row(w: &[u8], x: &[f32], _: &[f32]) -> f32 {
    legacy::<{ 2 + 4 + QK / 2 }>(w, x, &[], |b, q| {
        fives(&b[2..6], &b[6..], q, 16);
        (f16_at(b, 0), 0.0)
    })
}

fn q5_1_row(w: &[u8], x: &[f32], sums: &[f32]) -> f32 {
    legacy::<Q5_1_BYTES>(w, x, sums, |b, q| {
        fives(&b[4..8], &b[8..], q, 0);
        (f16_at(b, 0), f16_at(b, 2))
    })
}

fn mxfp4_row(w: &[u8], x: &[f32], _: &[f32]) -> f32 {
    legacy::<{ 1 + QK / 2 }>(w, x, &[], |b, q| {
        for j in 0..QK / 2 {
            q[j] = MXFP4_VALUES[(b[1 + j] & 0x0F) as usize] as f32;
            q[j + QK / 2] = MXFP4_VALUES[(b[1 + j] >> 4) as usize] as f32;
        }
        (e8m0_half(b[0]), 0.0)
    })
}

/// Q4_K and Q5_K: sub-block sb (32 elements) goes to accumulator sb % 2, scaled by `d * sc`
/// rounded as in dequantize_row; `(dmin * m) * sums[sb]` goes to the scalar min chain,
/// subtracted at the end. `QS` is where the nibbles start; with `HIGH`, the 32 bytes before them
/// hold the fifth bits (bit sb of byte l for element l of sub-block sb).
fn k4_row<const BB: usize, const QS: usize, const HIGH: bool>(w: &[u8], x: &[f32], sums: &[f32]) -> f32 {
    let mut acc = [[0.0f32; 8]; 2];
    let mut mins = 0.0f32;
    let mut q = [0.0f32; QK];
    let blocks = w.as_chunks::<BB>().0.iter().zip(x.as_chunks::<QK_K>().0);
    for ((b, xs), xsums) in blocks.zip(sums.as_chunks::<8>().0) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        let (scales, qh, qs) = (&b[4..16], &b[16..QS], &b[QS..]);
        for (sb, xs) in xs.as_chunks::<QK>().0.iter().enumerate() {
            // Sub-blocks 2g and 2g + 1 are the low and high nibbles of bytes 32g..32g + 32.
            let bytes = &qs[32 * (sb / 2)..32 * (sb / 2) + 32];
            let shift = 4 * (sb % 2);
            for (l, (q, &v)) in q.iter_mut().zip(bytes).enumerate() {
                let high = if HIGH { ((qh[l] >> sb) & 1) << 4 } else { 0 };
                *q = (((v >> shift) & 0x0F) | high) as f32;
            }
            let (sc, m) = scale_min_k4(sb, scales);
            scale_add(&mut acc[sb % 2], d * sc as f32, &lanes32(&q, xs));
            mins += dmin * m as f32 * xsums[sb];
        }
    }
    reduce8(&add_lanes(&acc[0], &acc[1])) - mins
}

fn q4_k_row(w: &[u8], x: &[f32], sums: &[f32]) -> f32 {
    k4_row::<Q4_K_BYTES, 16, false>(w, x, sums)
}

fn q5_k_row(w: &[u8], x: &[f32], sums: &[f32]) -> f32 {
    k4_row::<Q5_K_BYTES, 48, true>(w, x, sums)
}

/// Group g (16 elements, one scale) goes to accumulator g % 4.
fn q6_k_row(w: &[u8], x: &[f32], _: &[f32]) -> f32 {
    let mut acc = [[0.0f32; 8]; 4];
    let mut q = [0.0f32; QK_K];
    for (b, xs) in w.as_chunks::<Q6_K_BYTES>().0.iter().zip(x.as_chunks::<QK_K>().0) {
        let d = f16_at(b, Q6_K_BYTES - 2);
        let (ql, rest) = b.split_at(QK_K / 2);
        let (qh, sc) = rest.split_at(QK_K / 4);
        // The 6-bit values of the two 128-element halves, as in quant/dequant.rs.
        for (h, q) in q.chunks_exact_mut(128).enumerate() {
            let (ql, qh) = (&ql[64 * h..64 * h + 64], &qh[32 * h..32 * h + 32]);
            for l in 0..32 {
                q[l] = (((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32) as f32;
                q[l + 32] = (((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32) as f32;
                q[l + 64] = (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32) as f32;
                q[l + 96] = (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32) as f32;
            }
        }
        for (g, (q, xs)) in q.chunks_exact(16).zip(xs.chunks_exact(16)).enumerate() {
            scale_add(&mut acc[g % 4], d * (sc[g] as i8) as f32, &lanes16(q, xs));
        }
    }
    reduce8(&add_lanes(&add_lanes(&acc[0], &acc[1]), &add_lanes(&acc[2], &acc[3])))
}

/// The float formats: dot.rs's portable dot over the converted row, 32 elements at a time.
fn float<const EB: usize>(w: &[u8], x: &[f32], convert: impl Fn(&[u8; EB]) -> f32) -> f32 {
    let n = (w.len() / EB).min(x.len());
    let (w, x) = (&w[..n * EB], &x[..n]);
    let mut acc = [0.0f32; 32];
    let (wc, wt) = w.as_chunks::<EB>();
    let body = n / 32 * 32;
    for (wb, xb) in wc[..body].chunks_exact(32).zip(x[..body].chunks_exact(32)) {
        for i in 0..32 {
            acc[i] += xb[i] * convert(&wb[i]);
        }
    }
    debug_assert!(wt.is_empty());
    finish_float(&acc, x[body..].iter().zip(&wc[body..]).map(|(&x, w)| (x, convert(w))))
}

fn f32_row(w: &[u8], x: &[f32], _: &[f32]) -> f32 {
    float::<4>(w, x, |b| f32::from_le_bytes(*b))
}

fn f16_row(w: &[u8], x: &[f32], _: &[f32]) -> f32 {
    float::<2>(w, x, |b| f16::from_le_bytes(*b).to_f32())
}

fn bf16_row(w: &[u8], x: &[f32], _: &[f32]) -> f32 {
    float::<2>(w, x, |b| bf16::from_le_bytes(*b).to_f32())
}

/// Every weight row of the tile against every activation row, `out[j * m + r]`, one at a time.
fn each_row(t: Tile, row: fn(&[u8], &[f32], &[f32]) -> f32) {
    if t.row_bytes == 0 || t.n_in == 0 || t.x.len() < t.n_in {
        return;
    }
    let n_sums = t.n_in / QK;
    for (w, o) in t.w.chunks_exact(t.row_bytes).zip(t.out.chunks_exact_mut(t.x.len() / t.n_in)) {
        for (r, (o, x)) in o.iter_mut().zip(t.x.chunks_exact(t.n_in)).enumerate() {
            *o = row(w, x, t.sums.get(r * n_sums..(r + 1) * n_sums).unwrap_or(&[]));
        }
    }
}

pub fn q8_0(t: Tile) {
    each_row(t, q8_0_row)
}
pub fn q4_0(t: Tile) {
    each_row(t, q4_0_row)
}
pub fn q4_1(t: Tile) {
    each_row(t, q4_1_row)
}
pub fn q5_0(t: Tile) {
    each_row(t, q5_0_row)
}
pub fn q5_1(t: Tile) {
    each_row(t, q5_1_row)
}
pub fn mxfp4(t: Tile) {
    each_row(t, mxfp4_row)
}
pub fn q4_k(t: Tile) {
    each_row(t, q4_k_row)
}
pub fn q5_k(t: Tile) {
    each_row(t, q5_k_row)
}
pub fn q6_k(t: Tile) {
    each_row(t, q6_k_row)
}
pub fn f32(t: Tile) {
    each_row(t, f32_row)
}
pub fn f16(t: Tile) {
    each_row(t, f16_row)
}
pub fn bf16(t: Tile) {
    each_row(t, bf16_row)
}
