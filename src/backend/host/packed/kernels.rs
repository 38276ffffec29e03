//! The group kernels (see the module notes of packed/mod.rs): one module per instruction set,
//! each a `group` over one group's blocks against a few activation rows, reading the quants
//! from the interleaved copy or from the stored rows, and the `rows` / `run` around it.

use super::{block_bytes, chunk_bytes, has_min, is_k, QK};

/// The reads of a kernel's `group` over `nb` blocks: the side table (`st` bytes a block), the
/// quants (`FULL`: the group's interleaved copy; else its L stored rows of `rb` bytes), and RX
/// activation rows (values, scales, sums for the formats with a min, corrections), checked once so that its loop
/// needs no checks.
#[allow(clippy::type_complexity)]
#[inline(always)]
fn check_rows<const F: u8, const RX: usize, const FULL: bool>(
    side: &[u8],
    quants: &[u8],
    (l, rb, nb, st): (usize, usize, usize, usize),
    (xq, xd, xs, cb): ([&[i8]; RX], [&[f32]; RX], [&[f32]; RX], [&[i32]; RX]),
) {
    assert!(side.len() >= nb * st);
    // A K format's groups are always read from the copy (or a group put in its layout).
    assert!(FULL || !is_k(F), "a K format's stored rows read by a group kernel");
    if FULL {
        assert!(quants.len() >= nb * chunk_bytes(F, l));
    } else {
        assert!(rb >= nb * block_bytes(F) && quants.len() >= l * rb);
    }
    for r in 0..RX {
        assert!(xq[r].len() >= nb * QK && xd[r].len() >= nb && cb[r].len() >= nb && (!has_min(F) || xs[r].len() >= nb));
    }
}

/// Bytes ahead of the block being read that a pass over an interleaved copy prefetches,
/// whatever its activation rows. Passes of 3 or more rows used to be left to the hardware
/// prefetcher: 4 rows of Q8_0 read about 24 GB/s that way and 40 with this (`kernel_time`), and
/// 4096 bytes ahead took 5-10% more off a verify of 8 drafted rows than 2048. A pass over the
/// stored rows prefetches the next group instead: its rows are contiguous, and its blocks are
/// read at L block sizes a step, so that sweeps the stored bytes at the rate they are read
/// (more distance did no better in `kernel_time`; none was 30-50% slower).
const PREFETCH_BYTES: usize = 4096;

/// Asks for the cache lines of the `len` bytes at `at`. The address may lie past the matrix:
/// a prefetch never faults or reads it.
#[inline(always)]
fn prefetch_lines(at: *const u8, len: usize) {
    for line in (0..len).step_by(64) {
        // SAFETY: a prefetch is a hint; it reads nothing and cannot fault.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.wrapping_add(line).cast()) };
    }
}

/// Block b's prefetch (see PREFETCH_BYTES), for a group of l rows of format F: from `quants`,
/// the interleaved copy (`FULL`) or the stored rows (`rb` bytes each).
#[inline(always)]
fn prefetch_block<const F: u8, const FULL: bool>(quants: *const u8, l: usize, rb: usize, b: usize) {
    if FULL {
        let cs = chunk_bytes(F, l);
        prefetch_lines(quants.wrapping_add(b * cs + PREFETCH_BYTES), cs);
    } else {
        let step = l * block_bytes(F);
        prefetch_lines(quants.wrapping_add(l * rb + b * step), step);
    }
}

/// A kernel module's `rows` (one call of its `group`, stored into place) and `run` (every group
/// and activation row), for its lanes, store and the activation-row counts its `chunk` gives.
macro_rules! rows_and_run {
    ($features:literal, $lanes:expr, $store:ident, [$($rx:literal)*]) => {
        /// Activation rows r0..r0 + RX of group g into `out` (weight rows from `row0`, rows
        /// `stride` apart: `Packed::run`), the quants read from `quants`: the group's
        /// interleaved copy (`FULL`), else its stored rows; `sides`, the whole side table
        /// (taken once per call: per group it was 0.8% of a decode step's instructions, callgrind).
        ///
        /// # Safety
        /// `Packed::run`'s promise about `out`, for these rows and group.
        #[target_feature(enable = $features)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        unsafe fn rows<const F: u8, const RX: usize, const FULL: bool>(p: &Packed, sides: &[u8], quants: &[u8], g: usize, x: &Q8Rows, n_in: usize, r0: usize, out: *mut f32, stride: usize, row0: usize) {
            let (nb, st, rb) = (p.nb, super::super::stride(F, $lanes), p.row_bytes);
            let side = &sides[g * nb * st..(g + 1) * nb * st];
            let mut xq: [&[i8]; RX] = [&[]; RX];
            let mut xd: [&[f32]; RX] = [&[]; RX];
            let mut xs: [&[f32]; RX] = [&[]; RX];
            let mut cb: [&[i32]; RX] = [&[]; RX];
            let mut x16: [&[i16]; RX] = [&[]; RX];
            for r in 0..RX {
                (xq[r], xd[r], xs[r]) = x.row(r0 + r, n_in);
                cb[r] = &x.cb[(r0 + r) * nb..(r0 + r + 1) * nb];
                x16[r] = x.q16.get((r0 + r) * n_in..(r0 + r + 1) * n_in).unwrap_or(&[]);
            }
            let acc = group::<F, RX, FULL>(side, quants, rb, nb, xq, xd, xs, cb, x16);
            for (r, a) in acc.iter().enumerate() {
                // SAFETY: the caller's promise: activation row r0 + r's lanes of group g lie in
                // the writable run; storeu has no alignment requirement.
                unsafe { $store(out.add((r0 + r) * stride + g * $lanes - row0), *a) };
            }
        }

        /// The quants of a group's stored rows of `rb` bytes (`stored`, `nb` blocks of format F)
        /// into `dst` in the interleaved copy's layout (`Packed::interleave`): the registers
        /// `group` makes of the stored rows, Q8_0's as the copy holds them (`as_copied`).
        #[target_feature(enable = $features)]
        fn stage<const F: u8>(stored: &[u8], rb: usize, nb: usize, dst: &mut [u8]) {
            let (bb, cs) = (block_bytes(F), chunk_bytes(F, $lanes));
            assert!(rb >= nb * bb && stored.len() >= $lanes * rb && dst.len() >= nb * cs);
            let (sp, dp) = (stored.as_ptr(), dst.as_mut_ptr());
            for b in 0..nb {
                // SAFETY: block b of each of the rows lies in `stored` and its cs bytes in `dst`
                // (asserted): Q8_0's 8 registers and the others' 4 fill them.
                unsafe {
                    prefetch_block::<F, false>(sp, $lanes, rb, b);
                    let q = sp.add(b * bb + quants_at(F));
                    if F == Q8_0 {
                        for (k, c) in q8_lanes(q, rb).into_iter().enumerate() {
                            put(dp.add(b * cs + k * cs / 8), as_copied(c));
                        }
                    } else {
                        for (k, c) in nibble_lanes(q, rb).into_iter().enumerate() {
                            put(dp.add(b * cs + k * cs / 4), c);
                        }
                    }
                }
            }
        }

        /// Groups g0..g1 of format F against all m activation rows, `chunk` rows at a time.
        ///
        /// # Safety
        /// `Packed::run`'s promise about `out`.
        #[target_feature(enable = $features)]
        #[allow(clippy::too_many_arguments)]
        unsafe fn run_format<const F: u8>(p: &Packed, g0: usize, g1: usize, x: &Q8Rows, n_in: usize, m: usize, out: *mut f32, stride: usize) {
            // Which groups the copy holds is looked at once per call: per group it was some 3% of
            // a decode step's instructions (callgrind). The choice between copy and stored rows
            // is made here, each `rows` instance reading one of them: with the choice inside
            // `rows`, a 9-row pass took 2% more instructions on the AVX2 path (callgrind), the
            // same blocks and multiply-adds.
            let (written, stored, rb, sides) = (p.written(), p.tensor.bytes(), p.row_bytes, p.side_bytes());
            // A group the copy does not hold yet, in a call of several chunks of activation rows
            // (a prefill while the copies are being written), is put in the copy's layout once,
            // in a buffer of this thread (`stage`), instead of being transposed from its stored
            // rows once per chunk: the same quants reach the same `group`, so the same bits. A K
            // format's always is (`k_rows`): its kernels read only the copy's layout.
            let several = m > chunk::<F>(m) || is_k(F);
            let mut staged: Option<Vec<u8>> = None;
            for g in g0..g1 {
                let copy = match written.group(g) {
                    Some(c) => Some(c),
                    None if several => {
                        let buf = staged.get_or_insert_with(|| STAGED.with_borrow_mut(std::mem::take));
                        buf.resize(p.nb * chunk_bytes(F, $lanes), 0);
                        let rows = &stored[g * $lanes * rb..(g + 1) * $lanes * rb];
                        if is_k(F) {
                            super::super::k_rows(F, $lanes, rows, rb, p.nb, None, Some(&mut buf[..]));
                        } else {
                            stage::<F>(rows, rb, p.nb, buf);
                        }
                        Some(&buf[..])
                    }
                    None => None,
                };
                let mut r0 = 0;
                while r0 < m {
                    let rx = chunk::<F>(m - r0);
                    // SAFETY: the caller's promise, for rows r0..r0 + rx < m and group g.
                    match (rx, copy) {
                        $(
                            ($rx, Some(c)) => unsafe { rows::<F, $rx, true>(p, sides, c, g, x, n_in, r0, out, stride, g0 * $lanes) },
                            ($rx, None) => unsafe {
                                rows::<F, $rx, false>(p, sides, &stored[g * $lanes * rb..(g + 1) * $lanes * rb], g, x, n_in, r0, out, stride, g0 * $lanes)
                            },
                        )*
                        _ => unreachable!("chunk gives {rx} rows"),
                    }
                    r0 += rx;
                }
            }
            if let Some(v) = staged {
                STAGED.with_borrow_mut(|kept| *kept = v);
            }
        }

        thread_local! {
            /// `run_format`'s staged group, reused across calls: no allocation per call.
            static STAGED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }

        /// # Safety
        /// `Packed::run`'s promise about `out`.
        #[target_feature(enable = $features)]
        #[allow(clippy::too_many_arguments)]
        pub(in crate::backend::host::packed) unsafe fn run(p: &Packed, g0: usize, g1: usize, x: &Q8Rows, n_in: usize, m: usize, out: *mut f32, stride: usize) {
            // SAFETY: the caller's promise.
            unsafe {
                match p.format {
                    GroupFormat::Q8_0 => run_format::<Q8_0>(p, g0, g1, x, n_in, m, out, stride),
                    GroupFormat::Q4_0 => run_format::<Q4_0>(p, g0, g1, x, n_in, m, out, stride),
                    GroupFormat::Q5_0 => run_format::<Q5_0>(p, g0, g1, x, n_in, m, out, stride),
                    GroupFormat::Q5_1 => run_format::<Q5_1>(p, g0, g1, x, n_in, m, out, stride),
                    GroupFormat::Q4_1 => run_format::<Q4_1>(p, g0, g1, x, n_in, m, out, stride),
                    GroupFormat::Q4_K => run_format::<Q4_K>(p, g0, g1, x, n_in, m, out, stride),
                    GroupFormat::Q5_K => run_format::<Q5_K>(p, g0, g1, x, n_in, m, out, stride),
                }
            }
        }
    };
}

pub(super) mod vnni {
    use std::arch::x86_64::*;

    use super::super::{block_bytes, chunk_bytes, has_masks, has_min, is_k, k_block_at, masks_at, quants_at, stride, GroupFormat, Packed, GROUP, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q8_0};
    use super::{check_rows, prefetch_block};
    use crate::backend::host::int8::Q8Rows;
    use crate::quant::QK;

    /// The 32 quant bytes at `q` of 16 rows `rb` apart, as eight registers: register k holds
    /// bytes 4k..4k+4 of row r in lane r (a 16 x 8 transposition of 4-byte groups).
    ///
    /// # Safety
    /// The CPU has AVX-512 F; `q + r * rb .. + 32` is readable for r < 16.
    #[target_feature(enable = "avx2,avx512f")]
    #[inline]
    unsafe fn q8_lanes(q: *const u8, rb: usize) -> [__m512i; 8] {
        // SAFETY: the caller's promise; the loads have no alignment requirement.
        let row = |r: usize| unsafe { _mm256_loadu_si256(q.add(r * rb).cast()) };
        // z[j]: row j in the low half, row j + 8 in the high one; the halves are transposed
        // side by side (8 x 8 each), the 128-bit lanes brought together last.
        let z: [__m512i; 8] = std::array::from_fn(|j| _mm512_inserti64x4::<1>(_mm512_castsi256_si512(row(j)), row(j + 8)));
        let t: [__m512i; 8] = std::array::from_fn(|i| {
            let (a, b) = (z[2 * (i / 2)], z[2 * (i / 2) + 1]);
            if i % 2 == 0 { _mm512_unpacklo_epi32(a, b) } else { _mm512_unpackhi_epi32(a, b) }
        });
        // u[k] (v[k]): dword k of rows 0..4 (4..8) in the 128-bit lanes 0 and 2 (rows + 8),
        // dword k + 4 in lanes 1 and 3.
        let quad = |t: &[__m512i]| -> [__m512i; 4] {
            [
                _mm512_unpacklo_epi64(t[0], t[2]),
                _mm512_unpackhi_epi64(t[0], t[2]),
                _mm512_unpacklo_epi64(t[1], t[3]),
                _mm512_unpackhi_epi64(t[1], t[3]),
            ]
        };
        let (u, v) = (quad(&t[..4]), quad(&t[4..]));
        let low = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
        let high = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
        std::array::from_fn(|k| if k < 4 { _mm512_permutex2var_epi64(u[k], low, v[k]) } else { _mm512_permutex2var_epi64(u[k - 4], high, v[k - 4]) })
    }

    /// The 16 quant bytes at `q` of 16 rows `rb` apart, as four registers: register k holds
    /// bytes 4k..4k+4 of row r in lane r (a 16 x 4 transposition of 4-byte groups).
    ///
    /// # Safety
    /// The CPU has AVX-512 F; `q + r * rb .. + 16` is readable for r < 16.
    #[target_feature(enable = "avx2,avx512f")]
    #[inline]
    unsafe fn nibble_lanes(q: *const u8, rb: usize) -> [__m512i; 4] {
        // SAFETY: the caller's promise; the loads have no alignment requirement.
        let row = |r: usize| unsafe { _mm_loadu_si128(q.add(r * rb).cast()) };
        // z[j]: rows j, j + 4, j + 8, j + 12 in its four 128-bit lanes, each transposed 4 x 4.
        let z: [__m512i; 4] = std::array::from_fn(|j| {
            let a = _mm512_inserti32x4::<1>(_mm512_castsi128_si512(row(j)), row(j + 4));
            _mm512_inserti32x4::<3>(_mm512_inserti32x4::<2>(a, row(j + 8)), row(j + 12))
        });
        let (t0, t1) = (_mm512_unpacklo_epi32(z[0], z[1]), _mm512_unpackhi_epi32(z[0], z[1]));
        let (t2, t3) = (_mm512_unpacklo_epi32(z[2], z[3]), _mm512_unpackhi_epi32(z[2], z[3]));
        [_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2), _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3)]
    }

    /// A register's 64 bytes at `at` (`stage`).
    ///
    /// # Safety
    /// The CPU has AVX-512 F; `at .. + 64` is writable.
    #[target_feature(enable = "avx2,avx512f")]
    #[inline]
    unsafe fn put(at: *mut u8, v: __m512i) {
        // SAFETY: the caller's promise; storeu has no alignment requirement.
        unsafe { _mm512_storeu_si512(at.cast(), v) }
    }

    /// Q8_0 quants as the copy holds them: `vpdpbusd` takes the weights as unsigned bytes, q +
    /// 128, the sign bit flipped.
    #[target_feature(enable = "avx2,avx512f")]
    #[inline]
    fn as_copied(v: __m512i) -> __m512i {
        _mm512_xor_si512(v, _mm512_set1_epi8(-128))
    }

    /// One group's `nb` blocks (the side table `side`; `quants`, the group's interleaved copy
    /// where `FULL`, else its 16 stored rows of `rb` bytes; format F) against RX activation
    /// rows: lane l of result r is the group's row l . activation row r, int8.rs's block-sum
    /// arithmetic.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn group<const F: u8, const RX: usize, const FULL: bool>(
        side: &[u8],
        quants: &[u8],
        rb: usize,
        nb: usize,
        xq: [&[i8]; RX],
        xd: [&[f32]; RX],
        xs: [&[f32]; RX],
        cb: [&[i32]; RX],
        _x16: [&[i16]; RX],
    ) -> [__m512; RX] {
        let (st, bb, cs) = (stride(F, GROUP), block_bytes(F), chunk_bytes(F, GROUP));
        check_rows::<F, RX, FULL>(side, quants, (GROUP, rb, nb, st), (xq, xd, xs, cb));
        let mut acc = [_mm512_setzero_ps(); RX];
        let (sp, qp) = (side.as_ptr(), quants.as_ptr());
        for b in 0..nb {
            // SAFETY (the loads below): b < nb, and the asserts above keep block b's stride
            // bytes of `side`, block b's chunks of the copy or block b of each of the 16
            // stored rows, the 32 bytes of each activation row's block b, and its scale, sum
            // and correction inside their slices; the loads have no alignment requirement.
            unsafe {
                prefetch_block::<F, FULL>(qp, GROUP, rb, b);
                let base = if is_k(F) { sp.add(k_block_at(F, GROUP, b)) } else { sp.add(b * st) };
                // The K formats' scales and mins: `d * sc` and `-(dmin * m)` from the
                // super-block's f32 d and dmin and the block's 6-bit bytes (exact products, the
                // decoders' values); the others' f16 as stored.
                let (ws, wm) = if is_k(F) {
                    let head = sp.add((b / 8) * 8 * st);
                    let (d, dmin) = (_mm512_loadu_ps(head.cast()), _mm512_loadu_ps(head.add(4 * GROUP).cast()));
                    let bytes = |at: *const u8| _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(at.cast())));
                    (_mm512_mul_ps(d, bytes(base)), _mm512_xor_ps(_mm512_mul_ps(dmin, bytes(base.add(GROUP))), _mm512_set1_ps(-0.0)))
                } else {
                    let ws = _mm512_cvtph_ps(_mm256_loadu_si256(base.cast()));
                    (ws, if has_min(F) { _mm512_cvtph_ps(_mm256_loadu_si256(base.add(2 * GROUP).cast())) } else { ws })
                };
                let chunk = |k: usize| _mm512_loadu_si512(qp.add(b * cs + 64 * k).cast());
                let q = qp.wrapping_add(b * bb + quants_at(F));
                let mut wv = [_mm512_setzero_si512(); 8];
                if F == Q8_0 {
                    if FULL {
                        wv = std::array::from_fn(chunk);
                    } else {
                        // `vpdpbusd` takes the weights as unsigned bytes: q + 128, the sign bit
                        // flipped (as the copy holds them); the activations' `cb` takes the
                        // offset back.
                        let flip = _mm512_set1_epi8(-128);
                        for (v, c) in wv.iter_mut().zip(q8_lanes(q, rb)) {
                            *v = _mm512_xor_si512(c, flip);
                        }
                    }
                } else {
                    let m4 = _mm512_set1_epi8(0x0F);
                    let nibbles: [__m512i; 4] = if FULL { std::array::from_fn(chunk) } else { nibble_lanes(q, rb) };
                    for (k, c) in nibbles.into_iter().enumerate() {
                        wv[k] = _mm512_and_si512(c, m4);
                        wv[k + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(c), m4);
                    }
                    if has_masks(F) {
                        let masks = base.add(masks_at(F, GROUP)).cast::<u64>();
                        let bit = _mm512_set1_epi8(0x10);
                        for k in 0..4 {
                            let (lo, hi) = (masks.add(2 * k).read_unaligned(), masks.add(2 * k + 1).read_unaligned());
                            wv[k] = _mm512_mask_add_epi8(wv[k], lo, wv[k], bit);
                            wv[k + 4] = _mm512_mask_add_epi8(wv[k + 4], hi, wv[k + 4], bit);
                        }
                    }
                }
                for r in 0..RX {
                    let xp = xq[r].as_ptr().add(b * QK).cast::<i32>();
                    let c = *cb[r].get_unchecked(b);
                    let mut s = _mm512_set1_epi32(match F {
                        Q8_0 => c,
                        Q4_0 => c >> 4,
                        Q5_0 => c >> 3,
                        _ => 0,
                    });
                    for (k, &v) in wv.iter().enumerate() {
                        s = _mm512_dpbusd_epi32(s, v, _mm512_set1_epi32(xp.add(k).read_unaligned()));
                    }
                    let t = _mm512_mul_ps(ws, _mm512_set1_ps(*xd[r].get_unchecked(b)));
                    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), t, acc[r]);
                    if has_min(F) {
                        acc[r] = _mm512_fmadd_ps(wm, _mm512_set1_ps(*xs[r].get_unchecked(b)), acc[r]);
                    }
                }
            }
        }
        acc
    }

    /// Activation rows per call of `group` for `left` rows still to do: all of them up to 12 (a
    /// verify of 8 drafted rows is 9), else 8, so that the accumulators and a block's eight
    /// weight registers stay in the 32 registers.
    fn chunk<const F: u8>(left: usize) -> usize {
        if left > 12 {
            8
        } else {
            left
        }
    }

    rows_and_run!("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni", GROUP, _mm512_storeu_ps, [1 2 3 4 5 6 7 8 9 10 11 12]);
}

pub(super) mod avx2 {
    use std::arch::x86_64::*;

    use super::super::{block_bytes, chunk_bytes, has_masks, has_min, is_k, k_block_at, masks_at, quants_at, stride, GroupFormat, Packed, GROUP_AVX2 as L, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q8_0};
    use super::{check_rows, prefetch_block};
    use crate::backend::host::int8::Q8Rows;
    use crate::quant::QK;

    /// Byte j of a 64-bit pattern selecting bit j % 8 (for the Q5_0 masks).
    const BIT_OF_BYTE: i64 = 0x8040_2010_0804_0201u64 as i64;

    /// The 32 quant bytes at `q` of 8 rows `rb` apart, as eight registers: register k holds
    /// bytes 4k..4k+4 of row r in lane r (an 8 x 8 transposition of 4-byte groups).
    ///
    /// # Safety
    /// The CPU has AVX2; `q + r * rb .. + 32` is readable for r < 8.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn q8_lanes(q: *const u8, rb: usize) -> [__m256i; 8] {
        // SAFETY: the caller's promise; the loads have no alignment requirement.
        let z: [__m256i; 8] = std::array::from_fn(|r| unsafe { _mm256_loadu_si256(q.add(r * rb).cast()) });
        let t: [__m256i; 8] = std::array::from_fn(|i| {
            let (a, b) = (z[2 * (i / 2)], z[2 * (i / 2) + 1]);
            if i % 2 == 0 { _mm256_unpacklo_epi32(a, b) } else { _mm256_unpackhi_epi32(a, b) }
        });
        // u[k] (v[k]): dword k of rows 0..4 (4..8) in the low 128-bit lane, dword k + 4 in the
        // high one.
        let quad = |t: &[__m256i]| -> [__m256i; 4] {
            [
                _mm256_unpacklo_epi64(t[0], t[2]),
                _mm256_unpackhi_epi64(t[0], t[2]),
                _mm256_unpacklo_epi64(t[1], t[3]),
                _mm256_unpackhi_epi64(t[1], t[3]),
            ]
        };
        let (u, v) = (quad(&t[..4]), quad(&t[4..]));
        std::array::from_fn(|k| if k < 4 { _mm256_permute2x128_si256::<0x20>(u[k], v[k]) } else { _mm256_permute2x128_si256::<0x31>(u[k - 4], v[k - 4]) })
    }

    /// The 16 quant bytes at `q` of 8 rows `rb` apart, as four registers: register k holds
    /// bytes 4k..4k+4 of row r in lane r (an 8 x 4 transposition of 4-byte groups).
    ///
    /// # Safety
    /// The CPU has AVX2; `q + r * rb .. + 16` is readable for r < 8.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn nibble_lanes(q: *const u8, rb: usize) -> [__m256i; 4] {
        // SAFETY: the caller's promise; the loads have no alignment requirement.
        let row = |r: usize| unsafe { _mm_loadu_si128(q.add(r * rb).cast()) };
        // z[j]: rows j and j + 4 in its two 128-bit lanes, each transposed 4 x 4.
        let z: [__m256i; 4] = std::array::from_fn(|j| _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(row(j)), row(j + 4)));
        let (t0, t1) = (_mm256_unpacklo_epi32(z[0], z[1]), _mm256_unpackhi_epi32(z[0], z[1]));
        let (t2, t3) = (_mm256_unpacklo_epi32(z[2], z[3]), _mm256_unpackhi_epi32(z[2], z[3]));
        [_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2), _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)]
    }

    /// A register's 32 bytes at `at` (`stage`).
    ///
    /// # Safety
    /// The CPU has AVX2; `at .. + 32` is writable.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn put(at: *mut u8, v: __m256i) {
        // SAFETY: the caller's promise; storeu has no alignment requirement.
        unsafe { _mm256_storeu_si256(at.cast(), v) }
    }

    /// Q8_0 quants as the copy holds them: signed, as stored.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn as_copied(v: __m256i) -> __m256i {
        v
    }

    /// One group's `nb` blocks (the side table `side`; `quants`, the group's interleaved copy
    /// where `FULL`, else its 8 stored rows of `rb` bytes; format F) against RX activation
    /// rows: lane l of result r is the group's row l . activation row r, int8.rs's block-sum
    /// arithmetic. `vpmaddubsw` multiplies unsigned by signed bytes: the nibble formats go in
    /// as they are (pair sums at most 2 * 31 * 127, so four pairs add in i16 without
    /// overflow; eight below 16), Q8_0 as |q| against x with q's sign where one activation row
    /// comes, else widened to 16 bits (`vpmaddwd`, below).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn group<const F: u8, const RX: usize, const FULL: bool>(
        side: &[u8],
        quants: &[u8],
        rb: usize,
        nb: usize,
        xq: [&[i8]; RX],
        xd: [&[f32]; RX],
        xs: [&[f32]; RX],
        cb: [&[i32]; RX],
        x16: [&[i16]; RX],
    ) -> [__m256; RX] {
        let (st, bb, cs) = (stride(F, L), block_bytes(F), chunk_bytes(F, L));
        check_rows::<F, RX, FULL>(side, quants, (L, rb, nb, st), (xq, xd, xs, cb));
        // Q8_0 from the copy, for two activation rows or more: 16-bit pairs (`vpmaddwd`,
        // sixteen products an instruction and no sign trick: 19 instructions on the multiply
        // ports a block and row, against the sign trick's 27), the activations widened once per pass
        // (`Q8Rows::q16`), the weights once per block for all RX rows. One row keeps the sign
        // trick, where the widening would not be shared. The lanes come out in the order of
        // `vphaddd`'s rows, PAIRED (ws and the results are put in it and back).
        let wide = F == Q8_0 && FULL && RX > 1;
        let paired = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
        if wide {
            for x in x16 {
                assert!(x.len() >= nb * QK, "the Q8_0 group kernel needs the activations' q16 (Q8Rows::fill_q16)");
            }
        }
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); RX];
        let (sp, qp) = (side.as_ptr(), quants.as_ptr());
        for b in 0..nb {
            // SAFETY (the loads below): b < nb, and the asserts above keep block b's stride
            // bytes of `side`, block b's chunks of the copy or block b of each of the 8 stored
            // rows, the 32 bytes of each activation row's block b, and its scale, sum and
            // correction inside their slices; the loads have no alignment requirement.
            unsafe {
                prefetch_block::<F, FULL>(qp, L, rb, b);
                let base = if is_k(F) { sp.add(k_block_at(F, L, b)) } else { sp.add(b * st) };
                // The K formats' scales and mins: `d * sc` and `-(dmin * m)` from the
                // super-block's f32 d and dmin and the block's 6-bit bytes (exact products, the
                // decoders' values); the others' f16 as stored.
                let (ws, wm) = if is_k(F) {
                    let head = sp.add((b / 8) * 8 * st);
                    let (d, dmin) = (_mm256_loadu_ps(head.cast()), _mm256_loadu_ps(head.add(4 * L).cast()));
                    let bytes = |at: *const u8| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(at.cast())));
                    (_mm256_mul_ps(d, bytes(base)), _mm256_xor_ps(_mm256_mul_ps(dmin, bytes(base.add(L))), _mm256_set1_ps(-0.0)))
                } else {
                    let ws = _mm256_cvtph_ps(_mm_loadu_si128(base.cast()));
                    (ws, if has_min(F) { _mm256_cvtph_ps(_mm_loadu_si128(base.add(2 * L).cast())) } else { ws })
                };
                let chunk = |k: usize| _mm256_loadu_si256(qp.add(b * cs + 32 * k).cast());
                if wide {
                    // Chunk k holds bytes 4k..4k+4 of row r at 4r: its low half (rows 0..4)
                    // and its high half (rows 4..8) widened to i16 and multiplied in pairs by
                    // the activations' 4k..4k+4 give lanes (row, first pair), (row, second
                    // pair); summed over the eight chunks, `vphaddd` adds each row's two (a pair
                    // product sum is at most 2 * 128 * 127: the i32 sums are the block sums
                    // exactly) into lanes of rows PAIRED, the order `ws` was put in.
                    let (mut lo, mut hi) = ([_mm256_setzero_si256(); RX], [_mm256_setzero_si256(); RX]);
                    for k in 0..8 {
                        let at = qp.add(b * cs + 32 * k);
                        let wl = _mm256_cvtepi8_epi16(_mm_loadu_si128(at.cast()));
                        let wh = _mm256_cvtepi8_epi16(_mm_loadu_si128(at.add(16).cast()));
                        for r in 0..RX {
                            let xv = _mm256_set1_epi64x(x16[r].as_ptr().add(b * QK + 4 * k).cast::<i64>().read_unaligned());
                            lo[r] = _mm256_add_epi32(lo[r], _mm256_madd_epi16(wl, xv));
                            hi[r] = _mm256_add_epi32(hi[r], _mm256_madd_epi16(wh, xv));
                        }
                    }
                    let ws = _mm256_permutevar8x32_ps(ws, paired);
                    for r in 0..RX {
                        let s = _mm256_hadd_epi32(lo[r], hi[r]);
                        let t = _mm256_mul_ps(ws, _mm256_set1_ps(*xd[r].get_unchecked(b)));
                        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), t, acc[r]);
                    }
                    continue;
                }
                let q = qp.wrapping_add(b * bb + quants_at(F));
                // Q8_0: the signed quants (for their signs) and their magnitudes.
                let mut qs = [_mm256_setzero_si256(); 8];
                let mut wv = [_mm256_setzero_si256(); 8];
                if F == Q8_0 {
                    qs = if FULL { std::array::from_fn(chunk) } else { q8_lanes(q, rb) };
                    for (v, &c) in wv.iter_mut().zip(&qs) {
                        *v = _mm256_abs_epi8(c);
                    }
                } else {
                    let m4 = _mm256_set1_epi8(0x0F);
                    let nibbles: [__m256i; 4] = if FULL { std::array::from_fn(chunk) } else { nibble_lanes(q, rb) };
                    for (k, c) in nibbles.into_iter().enumerate() {
                        wv[k] = _mm256_and_si256(c, m4);
                        wv[k + 4] = _mm256_and_si256(_mm256_srli_epi16::<4>(c), m4);
                    }
                    if has_masks(F) {
                        // Mask i's 32 bits, bit 4r + j for byte 4r + j: each byte picks its
                        // mask byte, tests its bit, and gains 16 where it is set.
                        let masks = base.add(masks_at(F, L)).cast::<u32>();
                        let spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
                        let bits = _mm256_set1_epi64x(BIT_OF_BYTE);
                        let sixteen = _mm256_set1_epi8(0x10);
                        for i in 0..8 {
                            let m = _mm256_shuffle_epi8(_mm256_set1_epi32(masks.add(i).read_unaligned() as i32), spread);
                            let hit = _mm256_cmpeq_epi8(_mm256_and_si256(m, bits), bits);
                            let v = (i / 2) + 4 * (i % 2);
                            wv[v] = _mm256_or_si256(wv[v], _mm256_and_si256(hit, sixteen));
                        }
                    }
                }
                for r in 0..RX {
                    let xp = xq[r].as_ptr().add(b * QK).cast::<i32>();
                    let x = |k: usize| _mm256_set1_epi32(xp.add(k).read_unaligned());
                    let c = *cb[r].get_unchecked(b);
                    let s = if F == Q8_0 {
                        let mut s = _mm256_setzero_si256();
                        for (k, &v) in wv.iter().enumerate() {
                            s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(v, _mm256_sign_epi8(x(k), qs[k])), ones));
                        }
                        s
                    } else {
                        let half = |k0: usize| {
                            let mut h = _mm256_maddubs_epi16(wv[k0], x(k0));
                            for k in k0 + 1..k0 + 4 {
                                h = _mm256_add_epi16(h, _mm256_maddubs_epi16(wv[k], x(k)));
                            }
                            _mm256_madd_epi16(h, ones)
                        };
                        let half8 = || {
                            let mut h = _mm256_maddubs_epi16(wv[0], x(0));
                            for k in 1..8 {
                                h = _mm256_add_epi16(h, _mm256_maddubs_epi16(wv[k], x(k)));
                            }
                            _mm256_madd_epi16(h, ones)
                        };
                        let corr = match F {
                            Q4_0 => c >> 4,
                            Q5_0 => c >> 3,
                            _ => 0,
                        };
                        // Quants below 16 (Q4_0, Q4_1): a pair's sum is at most 2 * 15 * 127,
                        // so all eight registers' add in i16 (30480), and one `vpmaddwd` widens
                        // them; the fifth bit's 31 allows four.
                        let sums = if has_masks(F) { _mm256_add_epi32(half(0), half(4)) } else { half8() };
                        _mm256_add_epi32(sums, _mm256_set1_epi32(corr))
                    };
                    let t = _mm256_mul_ps(ws, _mm256_set1_ps(*xd[r].get_unchecked(b)));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), t, acc[r]);
                    if has_min(F) {
                        acc[r] = _mm256_fmadd_ps(wm, _mm256_set1_ps(*xs[r].get_unchecked(b)), acc[r]);
                    }
                }
            }
        }
        if wide {
            // PAIRED is its own inverse: rows back in lane order.
            acc.map(|a| _mm256_permutevar8x32_ps(a, paired))
        } else {
            acc
        }
    }

    /// Activation rows per call of `group`: AVX2's 16 registers hold a block's 8 weight
    /// registers and a few rows' accumulators, so 3; but 4 rows left go as two calls of 2, not
    /// 3 and 1 (a call of one row pays a block's weight registers for one row: `kernel_time
    /// avx2`, in cache, 4 rows of Q8_0 12.8 ns a weight row against 13.6, Q4_0 9.1 against 9.5).
    fn chunk<const F: u8>(left: usize) -> usize {
        if F == Q8_0 {
            // The 16-bit kernel for two rows or more keeps no weight registers across a block
            // (`group`): 4 rows go as one call (`kernel_time avx2`, 64 MiB: 10.1 ns a weight
            // row against 11.1 as two calls of 2). More rows go as evenly as calls of at most
            // 4 allow: 8 (the rows after a verify's first) as 4 and 4, not 3, 3 and 2.
            return if left <= 4 { left } else { left.div_ceil(left.div_ceil(4)) };
        }
        if left == 4 {
            2
        } else {
            left.min(3)
        }
    }

    rows_and_run!("avx2,fma,f16c", L, _mm256_storeu_ps, [1 2 3 4]);
}
