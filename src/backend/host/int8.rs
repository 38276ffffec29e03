//! The `fast` precision's kernels: activations rounded per 32-element block to 8 bits, dotted
//! with block-quantized weight rows in integers (llama.cpp's trade: ggml's vec_dot_q*_q8_*).
//!
//! # Activations ([`Q8Rows`])
//!
//! Each 32-element block of an activation row becomes `d = amax / 127` and `q_i =
//! round(x_i / d)` in [-127, 127] (ggml-quants.c `quantize_row_q8_1_ref`: `id = 1/d`, `roundf(x *
//! id)`, half away from zero), plus `s = d * sum(q_i)` for the formats with a min. Unlike ggml,
//! d and s stay f32 (ggml stores them as f16), which costs nothing and loses nothing. A block
//! holding a NaN or an infinity gets `d = NaN`, so the outputs it reaches are NaN, as in `exact`.
//! The scalar `quantize_block` defines the values; the AVX2 rounding (avx2_int8.rs) gives the
//! same ones (tested), so every kernel path sees the same integers.
//!
//! # Weights
//!
//! Every format is read as 32-element blocks ([`Block32`], by its [`Decoder`]): 32 signed integers (after the
//! format's offset), the weight scale of each 16-element half (equal for all formats but Q6_K,
//! whose scales cover 16 elements), and a min coefficient (Q4_1's and Q5_1's `m`, Q4_K's and
//! Q5_K's `-dmin * m`; 0 for the rest). A K-quant super-block is eight such blocks, each with its own scale.
//!
//! # Arithmetic (the same on every instruction set, bit for bit)
//!
//! Two forms, fixed per weight format.
//!
//! **Block sums** (the 32-element formats Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, MXFP4, and the K formats
//! Q4_K and Q5_K, whose 32-element blocks have one scale and one min each: [`sums_per_block`]):
//! for activation block b, `s_b = sum of q_w[i] * q_x[i]` over the block's 32 elements, an exact
//! i32 (|s_b| <= 32 * 128 * 127 < 2^24, so its f32 is exact too); then in f32, `t = ws *
//! d_x[b]`, `acc = fma(s_b, t, acc)` and, for the formats with a min, `acc = fma(wm, s_x[b], acc)`, in block
//! order from 0; the result is `acc`. A K block's `ws` is `d * sc` and its `wm` is `-(dmin * m)`,
//! each exact in f32 (an f16 times a 6-bit integer). One float step per block: what makes
//! a 512-bit kernel over weight rows interleaved 16 at a time (packed/) cheap, each lane
//! being one weight row's chain.
//!
//! **Lane sums** (Q6_K, whose 16-element halves have scales of their own): for activation block b and lane l (0..8): `p_l = sum of
//! q_w[i] * q_x[i] for i in 4l..4l+4`,
//! an exact i32 (the four-byte sums `vpmaddubsw` + `vpmaddwd`, `vpdpbusd` or NEON's `smull` +
//! `saddlp` + `addp` produce). Then, in f32, `c = ws[l / 4] * d_x[b]` and `acc[b % 2][l] =
//! fma(c, p_l, acc[b % 2][l])`, and the min chain `mins = fma(wm, s_x[b], mins)` in block
//! order. The result is `reduce8(acc[0] + acc[1]) + mins` (row_dot.rs's fixed tree). The
//! integers are exact whatever instructions make them, and the float operations are fixed, so
//! the portable code (with `mul_add`), AVX2, AVX-512 VNNI and NEON give the same bits, and an
//! output never depends on the batch size or thread count.
//!
//! # Which implementation runs
//!
//! The host backend has one instruction-set choice, row_dot.rs's `Isa`, and takes the integer
//! kernels that go with it ([`Int8Isa::for_isa`]): the CPU's best gives the best integer
//! kernels (VNNI or AVX2 on x86_64, NEON on aarch64), and a forced `Isa::Portable` gives the
//! portable ones on every CPU, so tests can run each path through the whole backend. On
//! x86_64 the block-sum formats' matrices take the VNNI or AVX2 group kernels (packed/);
//! these entry points then serve only the rows after a matrix's last group.
//!
//! # Accuracy
//!
//! Against the f32 kernels, the difference is the activation rounding, at most `d / 2 =
//! amax / 254` per element: relative to a block's largest element, 0.4%. tests/host_int8.rs
//! checks the kernels against an f64 sum over the dequantized weights and the rounded
//! activations; tests/fast_precision.rs the whole `fast` model against `exact`; and
//! scripts/perplexity_compare.py its perplexity against llama.cpp's on the same ids.

use crate::quant::{e8m0_half, Kernel, WeightType, MXFP4_VALUES, QK, QK_K};

use super::packed::GroupFormat;

use super::row_dot::{f16_at, reduce8, scale_min_k4, Isa, Lanes};

/// Activation rows rounded to 8 bits per 32-element block.
#[derive(Default)]
pub struct Q8Rows {
    /// (m, n_in): the rounded values.
    pub q: Vec<i8>,
    /// (m, n_in / 32): each block's scale.
    pub d: Vec<f32>,
    /// (m, n_in / 32): each block's `d * sum(q)`.
    pub s: Vec<f32>,
    /// (m, n_in / 32 * 8): each block's `d` repeated over its 8 lanes, so that a 512-bit
    /// kernel loads the scales of a block pair as one vector.
    pub d8: Vec<f32>,
    /// (m, n_in / 4): `-128 * (q[4l] + ... + q[4l + 3])` for each lane l: what a weight read as
    /// unsigned bytes (w + 128) adds to a lane's sum, taken back by starting the sum there.
    pub c: Vec<i32>,
    /// (m, n_in / 32): `-128 * sum(q)` for each block, the same correction for a whole block
    /// (the packed kernels, packed/).
    pub cb: Vec<i32>,
    /// (m, n_in): `q` widened to 16 bits, for the AVX2 Q8_0 group kernel over the interleaved
    /// copy (packed/), which multiplies 16-bit pairs (`vpmaddwd`); filled by `fill_q16`.
    pub q16: Vec<i16>,
}

impl Q8Rows {
    /// Rounds the `x.len() / n_in` rows of `x` (`n_in` a multiple of 32), reusing the buffers;
    /// with 256-bit operations where the CPU has AVX2 (the same values: tests/host_int8.rs).
    /// Every view is filled, `d8`, `c` and `q16` included, so any kernel can read the result.
    pub fn quantize(&mut self, x: &[f32], n_in: usize) {
        self.quantize_with(x, n_in, Isa::Avx2.available(), true);
        self.fill_q16();
    }

    /// As `quantize`, for one kernel: `d8` and `c` only when it reads them
    /// ([`Int8Kernel::reads_wide_rows`]), else they are left empty (the other kernels would
    /// pay for them on every matmul and never look).
    pub fn quantize_for(&mut self, x: &[f32], n_in: usize, kernel: &Int8Kernel) {
        self.quantize_with(x, n_in, Isa::Avx2.available(), kernel.reads_wide_rows());
    }

    /// As `quantize`, always with the scalar `quantize_block` (the tests' reference).
    pub fn quantize_scalar(&mut self, x: &[f32], n_in: usize) {
        self.quantize_with(x, n_in, false, true);
    }

    /// As `quantize`, for the packed kernels (packed/): `cb` filled, `d8` and `c` left
    /// empty.
    pub fn quantize_for_packed(&mut self, x: &[f32], n_in: usize) {
        self.quantize_with(x, n_in, Isa::Avx2.available(), false);
        self.fill_cb();
    }

    /// Fills `q16` from `q`, unless it already holds them (`quantize_with` empties it).
    pub fn fill_q16(&mut self) {
        if self.q16.len() != self.q.len() {
            self.q16.clear();
            self.q16.extend(self.q.iter().map(|&v| i16::from(v)));
        }
    }

    /// Fills `cb` from `q`.
    fn fill_cb(&mut self) {
        self.cb.clear();
        self.cb.extend(self.q.as_chunks::<QK>().0.iter().map(|b| -128 * b.iter().map(|&v| v as i32).sum::<i32>()));
    }

    fn quantize_with(&mut self, x: &[f32], n_in: usize, avx2: bool, wide: bool) {
        let nb = x.len() / QK;
        debug_assert!(n_in.is_multiple_of(QK) && x.len().is_multiple_of(n_in.max(1)));
        self.q.resize(nb * QK, 0);
        self.q16.clear();
        self.d.resize(nb, 0.0);
        self.s.resize(nb, 0.0);
        let blocks = x.as_chunks::<QK>().0.iter().zip(self.q.as_chunks_mut::<QK>().0);
        for ((xb, qb), (d, s)) in blocks.zip(self.d.iter_mut().zip(self.s.iter_mut())) {
            (*d, *s) = match avx2 {
                // SAFETY: `avx2` is true only where the CPU has AVX2, FMA and F16C (`quantize`
                // checks), the features the function is compiled for.
                #[cfg(target_arch = "x86_64")]
                true => unsafe { super::avx2_int8::quantize_block(xb, qb) },
                _ => quantize_block(xb, qb),
            };
        }
        if wide {
            self.derive();
        } else {
            self.d8.clear();
            self.c.clear();
            self.cb.clear();
        }
    }

    /// Fills `d8`, `c` and `cb` from `q` and `d`.
    fn derive(&mut self) {
        self.d8.clear();
        self.d8.extend(self.d.iter().flat_map(|&d| [d; 8]));
        self.c.clear();
        self.c.extend(self.q.as_chunks::<4>().0.iter().map(|g| -128 * g.iter().map(|&v| v as i32).sum::<i32>()));
        self.fill_cb();
    }

    /// Row r (of `n_in` elements) alone, as `quantize` would give it for that row alone.
    pub fn single_row(&self, r: usize, n_in: usize) -> Q8Rows {
        let (q, d, s) = self.row(r, n_in);
        let mut one = Q8Rows { q: q.to_vec(), d: d.to_vec(), s: s.to_vec(), ..Q8Rows::default() };
        one.derive();
        one
    }

    /// Row r's values, scales and sums, for rows of `n_in` elements.
    pub fn row(&self, r: usize, n_in: usize) -> (&[i8], &[f32], &[f32]) {
        let nb = n_in / QK;
        (&self.q[r * n_in..(r + 1) * n_in], &self.d[r * nb..(r + 1) * nb], &self.s[r * nb..(r + 1) * nb])
    }

    /// `row`, the values as blocks of QK: what the AVX2 and NEON tiles read.
    pub fn row_blocks(&self, r: usize, n_in: usize) -> (&[[i8; QK]], &[f32], &[f32]) {
        let (q, d, s) = self.row(r, n_in);
        (q.as_chunks::<QK>().0, d, s)
    }

    /// Row r's repeated scales (`d8`) and offset corrections (`c`), for rows of `n_in` elements.
    pub fn row_wide(&self, r: usize, n_in: usize) -> (&[f32], &[i32]) {
        let nl = n_in / QK * 8;
        (&self.d8[r * nl..(r + 1) * nl], &self.c[r * nl..(r + 1) * nl])
    }
}

/// The blocks present in the weight row (`weight_blocks`) and in every activation row: what the
/// kernels may read without a check.
#[inline(always)]
pub(super) fn common_blocks<const MIN: bool, const R: usize>(
    weight_blocks: usize,
    xq: &[&[[i8; QK]]; R],
    xd: &[&[f32]; R],
    xs: &[&[f32]; R],
) -> usize {
    let mut nb = weight_blocks;
    for r in 0..R {
        nb = nb.min(xq[r].len()).min(xd[r].len());
        if MIN {
            nb = nb.min(xs[r].len());
        }
    }
    nb
}

/// One block: (d, d * sum(q)), with `q` written.
pub fn quantize_block(x: &[f32; QK], q: &mut [i8; QK]) -> (f32, f32) {
    let mut amax = 0.0f32;
    let mut finite = true;
    for &v in x {
        finite &= v.is_finite();
        amax = amax.max(v.abs());
    }
    if !finite {
        q.fill(0);
        return (f32::NAN, f32::NAN);
    }
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut sum = 0i32;
    for (q, &v) in q.iter_mut().zip(x) {
        // |v * id| <= 127 up to one rounding of id; the clamp keeps a last-bit excess in range.
        let r = round_half_away(v * id).clamp(-127, 127) as i8;
        *q = r;
        sum += r as i32;
    }
    (d, d * sum as f32)
}

/// `v` rounded to the nearest integer, halves away from zero (C's `roundf`), for |v| < 2^23:
/// truncating `v + copysign(0.5 - 2^-25, v)` (the largest f32 below one half), which is one
/// add and one conversion where `f32::round` is a library call on x86_64's baseline. The
/// addend below one half keeps `0.5 - 2^-25` itself from rounding up, and an exact half still
/// reaches the next integer because the sum rounds to even there.
#[inline(always)]
pub fn round_half_away(v: f32) -> i32 {
    (v + 0.49999997f32.copysign(v)) as i32
}

/// One 32-element block of a weight row, as the integer kernels read it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Block32 {
    /// The 32 integers after the format's offset, in element order.
    pub q: [i8; QK],
    /// The weight scale of elements 0..16 and 16..32.
    pub scale: [f32; 2],
    /// The coefficient of the activation block's `s` (Q4_1, Q5_1: m; Q4_K, Q5_K: -dmin * m; else 0).
    pub min: f32,
}

/// Whether the format takes the block-sum arithmetic (see the module notes): the formats whose
/// 32-element blocks have one scale each (`block_sums` in their rows, quant/).
pub fn sums_per_block(ty: WeightType) -> bool {
    ty.format().block_sums
}

/// Whether the format has a min term (reads the activations' `s`).
pub fn has_min(ty: WeightType) -> bool {
    ty.format().has_min
}

/// A format's portable decoding: block `b` (of 32 elements) of a weight row.
pub type Decoder = fn(&[u8], usize) -> Block32;

fn one(d: f32) -> [f32; 2] {
    [d, d]
}

pub(crate) fn decode_q8_0(row: &[u8], b: usize) -> Block32 {
    let mut q = [0i8; QK];
    let blk = &row[b * 34..(b + 1) * 34];
    for (q, &v) in q.iter_mut().zip(&blk[2..]) {
        *q = v as i8;
    }
    Block32 { q, scale: one(f16_at(blk, 0)), min: 0.0 }
}

/// Q4_0 and Q4_1: blocks of BB bytes, the nibbles from AT, less OFF; with MIN the f16 at 2.
#[inline(always)]
fn nibbles<const BB: usize, const AT: usize, const OFF: i8, const MIN: bool>(row: &[u8], b: usize) -> Block32 {
    let mut q = [0i8; QK];
    let blk = &row[b * BB..(b + 1) * BB];
    for j in 0..QK / 2 {
        q[j] = ((blk[AT + j] & 0x0F) as i8) - OFF;
        q[j + QK / 2] = ((blk[AT + j] >> 4) as i8) - OFF;
    }
    let min = if MIN { f16_at(blk, 2) } else { 0.0 };
    Block32 { q, scale: one(f16_at(blk, 0)), min }
}

pub(crate) fn decode_q4_0(row: &[u8], b: usize) -> Block32 {
    nibbles::<18, 2, 8, false>(row, b)
}

pub(crate) fn decode_q4_1(row: &[u8], b: usize) -> Block32 {
    nibbles::<20, 4, 0, true>(row, b)
}

/// Q5_0 and Q5_1: blocks of BB bytes, qh (4 bytes) at AT just before the 16 nibble bytes, less
/// OFF; with MIN the f16 at 2 (Q5_1 has a min, no offset).
#[inline(always)]
fn fives<const BB: usize, const AT: usize, const OFF: i8, const MIN: bool>(row: &[u8], b: usize) -> Block32 {
    let mut q = [0i8; QK];
    let blk = &row[b * BB..(b + 1) * BB];
    let qh = u32::from_le_bytes([blk[AT], blk[AT + 1], blk[AT + 2], blk[AT + 3]]);
    for j in 0..QK / 2 {
        let lo = (blk[AT + 4 + j] & 0x0F) as u32 | ((qh >> j) & 1) << 4;
        let hi = (blk[AT + 4 + j] >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
        q[j] = lo as i8 - OFF;
        q[j + QK / 2] = hi as i8 - OFF;
    }
    let min = if MIN { f16_at(blk, 2) } else { 0.0 };
    Block32 { q, scale: one(f16_at(blk, 0)), min }
}

pub(crate) fn decode_q5_0(row: &[u8], b: usize) -> Block32 {
    fives::<22, 2, 16, false>(row, b)
}

pub(crate) fn decode_q5_1(row: &[u8], b: usize) -> Block32 {
    fives::<24, 4, 0, true>(row, b)
}

/// MXFP4: the doubled E2M1 values (at most 12 in magnitude, so a block's sum stays far inside
/// the block-sum bound) and the halved E8M0 scale, exactly as dequantize_row takes them.
pub(crate) fn decode_mxfp4(row: &[u8], b: usize) -> Block32 {
    const BB: usize = 1 + QK / 2;
    let mut q = [0i8; QK];
    let blk = &row[b * BB..(b + 1) * BB];
    for j in 0..QK / 2 {
        q[j] = MXFP4_VALUES[(blk[1 + j] & 0x0F) as usize];
        q[j + QK / 2] = MXFP4_VALUES[(blk[1 + j] >> 4) as usize];
    }
    Block32 { q, scale: one(e8m0_half(blk[0])), min: 0.0 }
}

/// Sub-block k of a Q4_K or Q5_K super-block (BB bytes, nibbles from QS): 64-element group
/// k / 2, low nibbles for even k; with HIGH (Q5_K), bit k of qh byte l as element l's fifth bit.
#[inline(always)]
fn k4<const BB: usize, const QS: usize, const HIGH: bool>(row: &[u8], b: usize) -> Block32 {
    let mut q = [0i8; QK];
    let (sb, k) = (b / 8, b % 8);
    let blk = &row[sb * BB..(sb + 1) * BB];
    let (sc, m) = scale_min_k4(k, &blk[4..16]);
    let qh = &blk[16..QS];
    let qs = &blk[QS + (k / 2) * 32..QS + (k / 2) * 32 + 32];
    for (l, (q, &v)) in q.iter_mut().zip(qs).enumerate() {
        let lo = if k % 2 == 0 { v & 0x0F } else { v >> 4 };
        let high = if HIGH { ((qh[l] >> k) & 1) << 4 } else { 0 };
        *q = (lo | high) as i8;
    }
    let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
    Block32 { q, scale: one(d * sc as f32), min: -(dmin * m as f32) }
}

pub(crate) fn decode_q4_k(row: &[u8], b: usize) -> Block32 {
    k4::<{ 4 + 12 + QK_K / 2 }, 16, false>(row, b)
}

pub(crate) fn decode_q5_k(row: &[u8], b: usize) -> Block32 {
    k4::<{ 4 + 12 + QK_K / 8 + QK_K / 2 }, 48, true>(row, b)
}

/// 32-element block k = 4n + part of the super-block: half n, ql bytes 32 (part % 2) on, the
/// low nibble for part < 2, qh bits 2 part; scales n*8 + 2 part (+1).
pub(crate) fn decode_q6_k(row: &[u8], b: usize) -> Block32 {
    const BB: usize = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;
    let mut q = [0i8; QK];
    let (sb, k) = (b / 8, b % 8);
    let blk = &row[sb * BB..(sb + 1) * BB];
    let (n, part) = (k / 4, k % 4);
    let ql = &blk[n * 64 + (part % 2) * 32..n * 64 + (part % 2) * 32 + 32];
    let qh = &blk[QK_K / 2 + n * 32..QK_K / 2 + n * 32 + 32];
    for (l, q) in q.iter_mut().enumerate() {
        let lo = if part < 2 { ql[l] & 0x0F } else { ql[l] >> 4 };
        let hi = (qh[l] >> (2 * part)) & 3;
        *q = (lo | hi << 4) as i8 - 32;
    }
    let d = f16_at(blk, BB - 2);
    let sc = &blk[QK_K / 2 + QK_K / 4 + n * 8 + part * 2..];
    Block32 { q, scale: [d * (sc[0] as i8) as f32, d * (sc[1] as i8) as f32], min: 0.0 }
}

/// Lane l of a block: the exact sum of `w[i] * x[i]` for i in 4l..4l+4.
#[inline(always)]
pub fn lane_sums(w: &[i8; QK], x: &[i8]) -> [i32; 8] {
    let mut p = [0i32; 8];
    for (l, p) in p.iter_mut().enumerate() {
        for i in 4 * l..4 * l + 4 {
            *p += w[i] as i32 * x[i] as i32;
        }
    }
    p
}

/// The portable kernel: weight row `w` (`n_in` elements of `ty`) against one rounded
/// activation row (`xq`, `xd`, `xs` as `Q8Rows::row` gives them).
pub fn dot_row(ty: WeightType, w: &[u8], xq: &[i8], xd: &[f32], xs: &[f32]) -> f32 {
    let with_min = has_min(ty);
    let Some(decode) = ty.format().fast.portable.get() else { unreachable!("{ty} has no integer kernels: it takes the f32 ones") };
    if sums_per_block(ty) {
        let mut acc = 0.0f32;
        for (b, &dx) in xd.iter().enumerate() {
            let blk = decode(w, b);
            let s: i32 = lane_sums(&blk.q, &xq[b * QK..(b + 1) * QK]).iter().sum();
            acc = (s as f32).mul_add(blk.scale[0] * dx, acc);
            if with_min {
                acc = blk.min.mul_add(xs[b], acc);
            }
        }
        return acc;
    }
    let mut acc: [Lanes; 2] = [[0.0; 8]; 2];
    let mut mins = 0.0f32;
    for (b, (&dx, &sx)) in xd.iter().zip(xs).enumerate() {
        let blk = decode(w, b);
        let p = lane_sums(&blk.q, &xq[b * QK..(b + 1) * QK]);
        let c = [blk.scale[0] * dx, blk.scale[1] * dx];
        for l in 0..8 {
            acc[b % 2][l] = c[l / 4].mul_add(p[l] as f32, acc[b % 2][l]);
        }
        if with_min {
            mins = blk.min.mul_add(sx, mins);
        }
    }
    let mut sum = [0.0f32; 8];
    for l in 0..8 {
        sum[l] = acc[0][l] + acc[1][l];
    }
    reduce8(&sum) + mins
}

/// One kernel call of the `fast` precision: whole weight rows against rounded activation rows.
pub struct QTile<'a> {
    /// (weight rows, row_bytes): the stored bytes of consecutive weight rows.
    pub w: &'a [u8],
    pub row_bytes: usize,
    pub n_in: usize,
    /// The `m` rounded activation rows.
    pub x: &'a Q8Rows,
    pub m: usize,
    /// (weight rows, m): `out[j * m + r]` = weight row j . activation row r.
    pub out: &'a mut [f32],
}

/// The portable tile: `dot_row` for every pair.
pub fn portable_tile(ty: WeightType, t: QTile) {
    if t.row_bytes == 0 || t.m == 0 {
        return;
    }
    for (w, o) in t.w.chunks_exact(t.row_bytes).zip(t.out.chunks_exact_mut(t.m)) {
        for (r, o) in o.iter_mut().enumerate() {
            let (xq, xd, xs) = t.x.row(r, t.n_in);
            *o = dot_row(ty, w, xq, xd, xs);
        }
    }
}

/// Which implementation of the integer kernels runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Int8Isa {
    Portable,
    /// `vpmaddubsw` + `vpmaddwd` (AVX2, FMA, F16C).
    Avx2,
    /// `vpdpbusd` on 512-bit registers (AVX-512 F, VL, BW, DQ and VNNI): two blocks per
    /// instruction, up to 16 activation rows per decoded pair.
    Avx512Vnni,
    /// `smull` + `saddlp` + `addp` (aarch64 NEON), with 4 activation rows per decoded block.
    Neon,
}

static HAS_VNNI: once_cell::sync::Lazy<bool> = once_cell::sync::Lazy::new(|| {
    #[cfg(target_arch = "x86_64")]
    {
        Isa::Avx512.available()
            && is_x86_feature_detected!("avx512vnni")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
});

impl Int8Isa {
    /// The integer kernels that go with the f32 kernels' `isa` (the host backend's one
    /// choice, so forcing `Isa::Portable` makes both portable): AVX-512 means VNNI where the
    /// CPU has it, else the AVX2 kernels; `Isa::Neon` (aarch64's best) means NEON.
    pub fn for_isa(isa: Isa) -> Int8Isa {
        match isa {
            Isa::Portable => Int8Isa::Portable,
            Isa::Avx2 => Int8Isa::Avx2,
            Isa::Avx512 if *HAS_VNNI => Int8Isa::Avx512Vnni,
            Isa::Avx512 => Int8Isa::Avx2,
            Isa::Neon => Int8Isa::Neon,
        }
    }

    /// The fastest integer kernels this CPU runs: those of [`Isa::best`].
    pub fn best() -> Int8Isa {
        Int8Isa::for_isa(Isa::best())
    }

    /// Whether this CPU can run `self`.
    pub fn available(self) -> bool {
        match self {
            Int8Isa::Portable => true,
            Int8Isa::Avx2 => Isa::Avx2.available(),
            Int8Isa::Avx512Vnni => *HAS_VNNI,
            Int8Isa::Neon => Isa::Neon.available(),
        }
    }
}

/// A weight type's `fast` kernels, one column per instruction set: filled by the type's row
/// (quant/), read by `Int8Kernel::new` and packed/. Every column gives the same bits (see the
/// module notes), so a column's stand-in changes only the speed.
#[derive(Clone, Copy)]
pub struct FastKernels {
    /// Plain Rust, on every target: the type's blocks as its decoder reads them, in this file's
    /// arithmetic. Absent (the float types): the `exact` f32 kernels run at `fast` too.
    pub portable: Kernel<Decoder>,
    /// `vpmaddubsw` + `vpmaddwd` (AVX2, FMA, F16C). Absent: the portable kernel.
    pub avx2: Kernel<unsafe fn(QTile)>,
    /// `vpdpbusd` (AVX-512 VNNI), reading the activations' `d8` and `c`. Absent: the AVX2
    /// column.
    pub vnni: Kernel<unsafe fn(QTile)>,
    /// aarch64 NEON. Absent: the portable kernel.
    pub neon: Kernel<unsafe fn(QTile)>,
    /// The group kernels (packed/: AVX2 and VNNI), over a matrix's rows 8 or 16 at a time.
    /// Absent: the row kernels above take the whole matrix.
    pub groups: Kernel<GroupFormat>,
}

/// A kernel entry point; the x86 and NEON ones need the CPU features `Int8Kernel::new` checks.
#[derive(Clone, Copy)]
enum Entry {
    Portable(WeightType),
    #[cfg(target_arch = "x86_64")]
    X86(unsafe fn(QTile)),
    #[cfg(target_arch = "aarch64")]
    Neon(unsafe fn(QTile)),
}

/// The integer kernel for one weight type on one implementation.
#[derive(Clone, Copy)]
pub struct Int8Kernel {
    entry: Entry,
    /// Whether it reads `Q8Rows::d8` and `Q8Rows::c` (the AVX-512 VNNI kernels).
    wide: bool,
}

impl Int8Kernel {
    /// The kernel for `ty` on `isa`, from the type's row (quant/, [`FastKernels`]); None where
    /// the row has no portable integer kernel (the float types: the f32 kernels serve, as the
    /// row says). An `isa` this CPU cannot run gives the portable kernel.
    pub fn new(ty: WeightType, isa: Int8Isa) -> Option<Int8Kernel> {
        let k = &ty.format().fast;
        k.portable.get()?;
        #[cfg(target_arch = "x86_64")]
        if isa != Int8Isa::Portable && isa.available() {
            if let Some(f) = k.vnni.get().filter(|_| isa == Int8Isa::Avx512Vnni) {
                return Some(Int8Kernel { entry: Entry::X86(f), wide: true });
            }
            if let Some(f) = k.avx2.get() {
                return Some(Int8Kernel { entry: Entry::X86(f), wide: false });
            }
        }
        #[cfg(target_arch = "aarch64")]
        if let Some(f) = k.neon.get().filter(|_| isa == Int8Isa::Neon && isa.available()) {
            return Some(Int8Kernel { entry: Entry::Neon(f), wide: false });
        }
        let _ = isa;
        Some(Int8Kernel { entry: Entry::Portable(ty), wide: false })
    }

    /// Whether the kernel reads the activations' `d8` and `c` (`Q8Rows::quantize_for`).
    pub fn reads_wide_rows(&self) -> bool {
        self.wide
    }

    /// Every weight row of `t` against every activation row (see `QTile`).
    pub fn run(&self, t: QTile) {
        match self.entry {
            Entry::Portable(ty) => portable_tile(ty, t),
            // SAFETY: `new` stores an x86 entry only after `Int8Isa::available` found the
            // features it is compiled for (AVX2, FMA, F16C; for VNNI also AVX-512 F, VL, VNNI).
            #[cfg(target_arch = "x86_64")]
            Entry::X86(f) => unsafe { f(t) },
            // SAFETY: `new` stores a NEON entry only after `Int8Isa::Neon.available()` found
            // NEON, the one feature the NEON kernels are compiled for.
            #[cfg(target_arch = "aarch64")]
            Entry::Neon(f) => unsafe { f(t) },
        }
    }
}
