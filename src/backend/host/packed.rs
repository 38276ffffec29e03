//! Matrices of the block-sum formats (Q8_0, Q4_0: int8.rs's `sums_per_block`) packed at open
//! for the AVX-512 VNNI kernels: sixteen weight rows interleaved, so that one `vpdpbusd` makes
//! four products for each of the sixteen rows, and after a block's eight the sixteen lanes hold
//! the rows' exact block sums. The float step `acc = fma(s_b, ws * d_x, acc)` then runs on all
//! sixteen rows' chains at once: a tenth of the float work of the lane-sum form, with no lane
//! reduction at the end. The bits are int8.rs's block-sum arithmetic, as every other kernel
//! path gives them (tests/host_int8.rs).
//!
//! # Layout
//!
//! Rows are taken sixteen at a time (a group); the rows after the last whole group stay in the
//! stored bytes and take the row-order kernels. Group g's block b is `stride` bytes: first the
//! sixteen rows' f16 scales, as stored, then 64-byte chunks in which bytes 4r..4r+4 belong to
//! row r:
//!
//! - Q8_0: eight chunks, chunk k holding elements 4k..4k+4 of each row, as unsigned bytes
//!   (q + 128: the sign bit flipped), so that they can be `vpdpbusd`'s unsigned operand; the
//!   activations' `cb` (-128 times the block's sum) takes the offset back.
//! - Q4_0: four chunks, chunk k holding stored bytes 4k..4k+4 of each row: their low nibbles are
//!   elements 4k..4k+4, their high nibbles elements 16+4k..16+4k+4, unsigned (q + 8); the
//!   offset is taken back by `cb / 16` (-8 times the block's sum).
//!
//! The packed copy is the same size as the stored bytes. After packing, the mapped pages of the
//! tensor are handed back to the kernel (`WeightTensor::release_pages`), so that the process
//! holds one copy; the few reads of the stored bytes that remain (the last rows, an embedding
//! row) fault their pages in again.

use crate::pack::tensor::WeightTensor;
use crate::quant::{WeightType, QK};

use super::int8::{sums_per_block, Q8Rows};

/// Weight rows per group: the lanes of a 512-bit register of i32.
pub const GROUP: usize = 16;

/// Bytes of the source handed back at a time while packing (`WeightTensor::release_pages`).
const RELEASE_BYTES: usize = 1 << 20;

/// A matrix packed for the VNNI block-sum kernels (see the module notes).
pub struct Packed {
    pub ty: WeightType,
    /// Whole groups packed: rows 0..groups * 16.
    pub groups: usize,
    /// 32-element blocks per row.
    pub nb: usize,
    data: Vec<u8>,
}

/// Bytes of one group's block.
fn stride(ty: WeightType) -> usize {
    match ty {
        WeightType::Q4_0 => 2 * GROUP + 4 * 64,
        _ => 2 * GROUP + 8 * 64,
    }
}

impl Packed {
    /// `w` packed, or None when its format is not a block-sum one or it has under 16 rows.
    pub fn new(w: &WeightTensor) -> Option<Packed> {
        let ty = w.ty;
        if !sums_per_block(ty) || w.rows() < GROUP || w.cols() < QK {
            return None;
        }
        let (nb, rb, bb, st) = (w.cols() / QK, w.row_bytes(), ty.block_bytes(), stride(ty));
        let groups = w.rows() / GROUP;
        let bytes = w.bytes();
        let mut data = vec![0u8; groups * nb * st];
        let mut released = 0;
        for (g, dst) in data.chunks_exact_mut(nb * st).enumerate() {
            for r in 0..GROUP {
                let row = &bytes[(g * GROUP + r) * rb..(g * GROUP + r + 1) * rb];
                for (blk, d) in row.chunks_exact(bb).zip(dst.chunks_exact_mut(st)) {
                    d[2 * r..2 * r + 2].copy_from_slice(&blk[..2]);
                    let (quants, chunks) = (&blk[2..], &mut d[2 * GROUP..]);
                    if ty == WeightType::Q4_0 {
                        for k in 0..4 {
                            chunks[64 * k + 4 * r..64 * k + 4 * r + 4].copy_from_slice(&quants[4 * k..4 * k + 4]);
                        }
                    } else {
                        for k in 0..8 {
                            for i in 0..4 {
                                chunks[64 * k + 4 * r + i] = quants[4 * k + i] ^ 0x80;
                            }
                        }
                    }
                }
            }
            let done = (g + 1) * GROUP * rb;
            if done - released >= RELEASE_BYTES || g + 1 == groups {
                w.release_pages(released..done);
                released = done;
            }
        }
        Some(Packed { ty, groups, nb, data })
    }

    /// Rows packed (the rest take the stored bytes).
    pub fn rows(&self) -> usize {
        self.groups * GROUP
    }

    /// Groups g0..g1 against the m activation rows of `x` (`n_in` wide, `cb` filled:
    /// `Q8Rows::quantize`), into `out` laid out (weight rows, m) from row g0 * 16.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA, F16C and AVX-512 F, VL, BW, DQ and VNNI (`Int8Isa::Avx512Vnni`).
    #[cfg(target_arch = "x86_64")]
    pub unsafe fn run(&self, g0: usize, g1: usize, x: &Q8Rows, n_in: usize, m: usize, out: &mut [f32]) {
        // SAFETY: the caller's promise.
        unsafe { vnni::run(self, g0, g1, x, n_in, m, out) }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    use super::{stride, Packed, GROUP};
    use crate::backend::host::int8::Q8Rows;
    use crate::quant::{WeightType, QK};

    /// Bytes ahead of the block being read that a one-row pass prefetches.
    const PREFETCH_BYTES: usize = 2048;

    /// One group's `nb` blocks (`blocks`) against RX activation rows: lane l of result r is
    /// the group's row l . activation row r, int8.rs's block-sum arithmetic.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")]
    #[inline]
    fn group<const Q4: bool, const RX: usize>(blocks: &[u8], nb: usize, xq: [&[i8]; RX], xd: [&[f32]; RX], cb: [&[i32]; RX]) -> [__m512; RX] {
        let st = if Q4 { stride(WeightType::Q4_0) } else { stride(WeightType::Q8_0) };
        assert!(blocks.len() >= nb * st);
        for r in 0..RX {
            assert!(xq[r].len() >= nb * QK && xd[r].len() >= nb && cb[r].len() >= nb);
        }
        let mut acc = [_mm512_setzero_ps(); RX];
        let p = blocks.as_ptr();
        for b in 0..nb {
            // SAFETY (the loads below): b < nb, and the asserts above keep block b's stride
            // bytes of `blocks`, the 32 bytes of each activation row's block b, and its scale
            // and correction inside their slices; the loads have no alignment requirement.
            unsafe {
                let base = p.add(b * st);
                if RX <= 2 {
                    for line in (0..st).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(PREFETCH_BYTES + line).cast());
                    }
                }
                let ws = _mm512_cvtph_ps(_mm256_loadu_si256(base.cast()));
                let chunks = base.add(2 * GROUP);
                let mut wv = [_mm512_setzero_si512(); 8];
                if Q4 {
                    let m4 = _mm512_set1_epi8(0x0F);
                    for k in 0..4 {
                        let c = _mm512_loadu_si512(chunks.add(64 * k).cast());
                        wv[k] = _mm512_and_si512(c, m4);
                        wv[k + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(c), m4);
                    }
                } else {
                    for (k, v) in wv.iter_mut().enumerate() {
                        *v = _mm512_loadu_si512(chunks.add(64 * k).cast());
                    }
                }
                for r in 0..RX {
                    let xp = xq[r].as_ptr().add(b * QK).cast::<i32>();
                    let c = *cb[r].get_unchecked(b);
                    let mut s = _mm512_set1_epi32(if Q4 { c >> 4 } else { c });
                    for (k, &v) in wv.iter().enumerate() {
                        s = _mm512_dpbusd_epi32(s, v, _mm512_set1_epi32(xp.add(k).read_unaligned()));
                    }
                    let t = _mm512_mul_ps(ws, _mm512_set1_ps(*xd[r].get_unchecked(b)));
                    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), t, acc[r]);
                }
            }
        }
        acc
    }

    /// Activation rows r0..r0 + RX of group g into `out` (weight rows from `row0`, m columns).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")]
    #[inline]
    fn rows<const Q4: bool, const RX: usize>(p: &Packed, g: usize, x: &Q8Rows, n_in: usize, r0: usize, m: usize, out: &mut [f32], row0: usize) {
        let (nb, st) = (p.nb, stride(p.ty));
        let blocks = &p.data[g * nb * st..(g + 1) * nb * st];
        let mut xq: [&[i8]; RX] = [&[]; RX];
        let mut xd: [&[f32]; RX] = [&[]; RX];
        let mut cb: [&[i32]; RX] = [&[]; RX];
        for r in 0..RX {
            (xq[r], xd[r], _) = x.row(r0 + r, n_in);
            cb[r] = &x.cb[(r0 + r) * nb..(r0 + r + 1) * nb];
        }
        let acc = group::<Q4, RX>(blocks, nb, xq, xd, cb);
        let mut lanes = [0.0f32; GROUP];
        for (r, a) in acc.iter().enumerate() {
            // SAFETY: writes the 16 f32 of the array; storeu has no alignment requirement.
            unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), *a) };
            for (l, &v) in lanes.iter().enumerate() {
                out[(g * GROUP + l - row0) * m + r0 + r] = v;
            }
        }
    }

    /// Activation rows per call of `group` for m rows in all: all of them up to 12 (a verify
    /// of 8 drafted rows is 9), else 8 at a time, so that the accumulators and a block's eight
    /// weight registers stay in the 32 registers.
    const MAX_RX: usize = 12;

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")]
    pub(super) fn run(p: &Packed, g0: usize, g1: usize, x: &Q8Rows, n_in: usize, m: usize, out: &mut [f32]) {
        macro_rules! by_rx {
            ($q4:expr, $g:expr, $r0:expr, $rx:expr) => {
                match $rx {
                    1 => rows::<$q4, 1>(p, $g, x, n_in, $r0, m, out, g0 * GROUP),
                    2 => rows::<$q4, 2>(p, $g, x, n_in, $r0, m, out, g0 * GROUP),
                    3 => rows::<$q4, 3>(p, $g, x, n_in, $r0, m, out, g0 * GROUP),
                    4 => rows::<$q4, 4>(p, $g, x, n_in, $r0, m, out, g0 * GROUP),
                    5 => rows::<$q4, 5>(p, $g, x, n_in, $r0, m, out, g0 * GROUP),
                    6 => rows::<$q4, 6>(p, $g, x, n_in, $r0, m, out, g0 * GROUP),
                    7 => rows::<$q4, 7>(p, $g, x, n_in, $r0, m, out, g0 * GROUP),
                    8 => rows::<$q4, 8>(p, $g, x, n_in, $r0, m, out, g0 * GROUP),
                    9 => rows::<$q4, 9>(p, $g, x, n_in, $r0, m, out, g0 * GROUP),
                    10 => rows::<$q4, 10>(p, $g, x, n_in, $r0, m, out, g0 * GROUP),
                    11 => rows::<$q4, 11>(p, $g, x, n_in, $r0, m, out, g0 * GROUP),
                    _ => rows::<$q4, 12>(p, $g, x, n_in, $r0, m, out, g0 * GROUP),
                }
            };
        }
        let q4 = p.ty == WeightType::Q4_0;
        for g in g0..g1 {
            let mut r0 = 0;
            while r0 < m {
                let rx = if m - r0 > MAX_RX { 8 } else { m - r0 };
                if q4 {
                    by_rx!(true, g, r0, rx);
                } else {
                    by_rx!(false, g, r0, rx);
                }
                r0 += rx;
            }
        }
    }
}
