//! Q6_K's integer kernels in 512-bit registers (AVX-512 VNNI): two blocks a register,
//! a tile of weight rows by activation rows; the 256-bit decoders and scales of the parent
//! module, so every lane gets its operations.

use std::arch::x86_64::*;

use super::{bytes_at, load_i8, prep_q6_k_avx2, sum8, Decoded};
use crate::backend::host::avx2::prefetch_ahead;
use crate::backend::host::int8::QTile;
use crate::backend::host::row_dot::Q6_K_BYTES;
use crate::quant::{QK, QK_K};

/// Two consecutive decoded blocks in one 512-bit register: the integers, the per-lane scales,
/// the two mins.
pub(super) type Pair = (__m512i, __m512, [f32; 2]);

/// A Q6_K super-block's 16 scales, one per half-block, made once for its four pairs (and room
/// for mins, which Q6_K has not).
pub(super) type Prep = (__m512, [f32; 8]);

/// Q6_K's blocks k and k + 1 (k even: parts 0 and 1, or 2 and 3, of half n = k / 4): the two
/// 32-byte runs of ql and the one of qh they share, the four scales from `prep_q6_k`; each value
/// as `q6_k` gives it.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")]
#[inline]
pub(super) fn q6_k_pair(b: &[u8; Q6_K_BYTES], k: usize, pre: &Prep) -> Pair {
    debug_assert!(k.is_multiple_of(2));
    let (n, part) = (k / 4, k % 4);
    let (ql0, ql1, qh) = (bytes_at(b, n * 64), bytes_at(b, n * 64 + 32), bytes_at(b, QK_K / 2 + n * 32));
    let m4 = _mm256_set1_epi8(0x0F);
    let (lo0, lo1, hi0, hi1) = if part == 0 {
        (_mm256_and_si256(ql0, m4), _mm256_and_si256(ql1, m4), qh, _mm256_srli_epi16::<2>(qh))
    } else {
        let (a, b) = (_mm256_srli_epi16::<4>(ql0), _mm256_srli_epi16::<4>(ql1));
        (_mm256_and_si256(a, m4), _mm256_and_si256(b, m4), _mm256_srli_epi16::<4>(qh), _mm256_srli_epi16::<6>(qh))
    };
    let (m3, off) = (_mm256_set1_epi8(3), _mm256_set1_epi8(32));
    let join = |lo, hi| _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16::<4>(_mm256_and_si256(hi, m3))), off);
    // Lanes 4j..4j + 4 take half-block scale 2k + j.
    let idx = _mm512_add_epi32(_mm512_set1_epi32(2 * k as i32), _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
    let ws = _mm512_permutexvar_ps(idx, pre.0);
    (_mm512_inserti64x4::<1>(_mm512_castsi256_si512(join(lo0, hi0)), join(lo1, hi1)), ws, [0.0; 2])
}

/// A Q6_K super-block's 16 half-block scales `d * sc`: `prep_q6_k_avx2`'s.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")]
#[inline]
pub(super) fn prep_q6_k(b: &[u8; Q6_K_BYTES]) -> Prep {
    let s = prep_q6_k_avx2(b);
    // SAFETY: reads the 16 f32 of the array; loadu has no alignment requirement.
    (unsafe { _mm512_loadu_ps(s.0.as_ptr()) }, [0.0; 8])
}

// ---- 512-bit registers: two blocks at once, a tile of weight rows by activation rows --------
//
// int8.rs's two accumulators acc[b % 2] are the two halves of one 512-bit register: the low
// half takes the even blocks, the high half the odd ones, so a pair (b, b + 1) is one
// `vpdpbusd`, one conversion, one multiply and one fused multiply-add per (weight row,
// activation row), and each lane sees exactly the operations of the 256-bit code in the same
// order. A last unpaired block goes through the 256-bit operations on the low half alone.
//
// Signs without a per-pair instruction: `vpdpbusd` multiplies unsigned bytes by signed ones.
// The formats with a min (Q4_1, Q5_1, Q4_K, Q5_K) have unsigned integers already. The others go in as
// w + 128 (the sign bit flipped, once per decoded block), which adds 128 * (x[4l] + .. +
// x[4l + 3]) to lane l; each activation row carries minus that (`Q8Rows::c`), and the sum
// starts there, so the lane ends at the exact i32 of the other paths. (AVX2's `vpmaddubsw`
// cannot take this route: its pair sums of 255 * 127 would saturate i16.)
//
// Tiles: RW weight rows are decoded once per block pair for RX activation rows, and each
// activation pair is loaded once for the RW weight rows; 4 x 4 keeps 16 accumulators, the 8
// decoded vectors and the activation's 3 in the 32 registers.

/// An activation row as the 512-bit tiles read it: values, repeated scales, offset
/// corrections, block sums (`Q8Rows::row`, `Q8Rows::row_wide`), each cut to `nb` blocks.
#[derive(Clone, Copy)]
struct WideRow<'a> {
    q: &'a [i8],
    d8: &'a [f32],
    c: &'a [i32],
    s: &'a [f32],
}

/// RW consecutive weight rows (`row_bytes` each, super-blocks of BB bytes holding SUBS blocks)
/// against RX activation rows over `nb` blocks: `out[i][j]` = weight row i . activation row j.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")]
#[inline]
fn tile_rw_rx<const BB: usize, const SUBS: usize, const MIN: bool, const RW: usize, const RX: usize>(
    w: &[u8],
    row_bytes: usize,
    x: [WideRow; RX],
    (nb, st): (usize, &[f32]),
    (decode, pair, prep): (
        impl Fn(&[u8; BB], usize) -> Decoded,
        impl Fn(&[u8; BB], &[u8; BB], (usize, usize), &Prep) -> Pair,
        impl Fn(&[u8; BB]) -> Prep,
    ),
) -> [[f32; RX]; RW] {
    // Every read below is in bounds: checked here once, so the loop needs no checks.
    assert!(w.len() >= RW * row_bytes && (!MIN || st.len() >= nb * 16) && RX <= 16);
    for r in &x {
        assert!(r.q.len() >= nb * QK && r.d8.len() >= nb * 8 && r.c.len() >= nb * 8 && (!MIN || r.s.len() >= nb));
    }
    // (A loop, not array::from_fn: that one was not inlined, and its call cost a decode step
    // a third of its time.)
    let mut sbs: [&[[u8; BB]]; RW] = [&[]; RW];
    for i in 0..RW {
        sbs[i] = w[i * row_bytes..(i + 1) * row_bytes].as_chunks::<BB>().0;
        assert!(sbs[i].len() * SUBS >= nb);
    }
    let flip = _mm512_set1_epi8(-128);
    let mut acc = [[_mm512_setzero_ps(); RX]; RW];
    // With MIN, lane j of mins[i] is the chain of weight row i and activation row j: the
    // scalar chain's fused multiply-adds, 16 rows to an instruction (`st` holds each block's
    // sums of the RX rows, 16 lanes to a block).
    let mut mins = [_mm512_setzero_ps(); RW];
    let st_at = |b: usize| unsafe { _mm512_loadu_ps(st.as_ptr().add(b * 16)) };
    let mut pre: [Prep; RW] = [(_mm512_setzero_ps(), [0.0; 8]); RW];
    let mut b = 0;
    // SAFETY (every get_unchecked and pointer read below): b + 1 < nb (b < nb for the tail), and
    // nb is at most the blocks of every weight row (b / SUBS < sbs[i].len()) and of every
    // activation row's slices, as asserted above; SUBS is 1 or even, so b and b + 1 are blocks 0
    // of consecutive stored blocks, or k and k + 1 of one.
    while b + 2 <= nb {
        let mut wq = [_mm512_setzero_si512(); RW];
        let mut ws = [_mm512_setzero_ps(); RW];
        let mut wm = [[0.0f32; 2]; RW];
        for i in 0..RW {
            let sb = unsafe { sbs[i].get_unchecked(b / SUBS) };
            if SUBS > 1 && b % SUBS == 0 {
                pre[i] = prep(sb);
            }
            let (q, s, m) = pair(sb, unsafe { sbs[i].get_unchecked((b + 1) / SUBS) }, (b % SUBS, (b + 1) % SUBS), &pre[i]);
            wq[i] = if MIN { q } else { _mm512_xor_si512(q, flip) };
            (ws[i], wm[i]) = (s, m);
        }
        for j in 0..RX {
            let xv = unsafe { _mm512_loadu_si512(x[j].q.as_ptr().add(b * QK).cast()) };
            let c = if MIN { _mm512_setzero_si512() } else { unsafe { _mm512_loadu_si512(x[j].c.as_ptr().add(b * 8).cast()) } };
            let d = unsafe { _mm512_loadu_ps(x[j].d8.as_ptr().add(b * 8)) };
            for i in 0..RW {
                let p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(c, wq[i], xv));
                acc[i][j] = _mm512_fmadd_ps(_mm512_mul_ps(ws[i], d), p, acc[i][j]);
            }
        }
        if MIN {
            let (s0, s1) = (st_at(b), st_at(b + 1));
            for i in 0..RW {
                mins[i] = _mm512_fmadd_ps(_mm512_set1_ps(wm[i][0]), s0, mins[i]);
                mins[i] = _mm512_fmadd_ps(_mm512_set1_ps(wm[i][1]), s1, mins[i]);
            }
        }
        b += 2;
    }
    let mut out = [[0.0f32; RX]; RW];
    for i in 0..RW {
        let tail = (b < nb).then(|| decode(unsafe { sbs[i].get_unchecked(b / SUBS) }, b % SUBS));
        if let (true, Some((_, _, wm))) = (MIN, tail) {
            mins[i] = _mm512_fmadd_ps(_mm512_set1_ps(wm), st_at(b), mins[i]);
        }
        let mut min_lanes = [0.0f32; 16];
        // SAFETY: writes the 16 f32 of the array; storeu has no alignment requirement.
        unsafe { _mm512_storeu_ps(min_lanes.as_mut_ptr(), mins[i]) };
        for j in 0..RX {
            let (mut even, odd) = (_mm512_castps512_ps256(acc[i][j]), _mm512_extractf32x8_ps::<1>(acc[i][j]));
            if let Some((q, ws, _)) = tail {
                let q = if MIN { q } else { _mm256_xor_si256(q, _mm512_castsi512_si256(flip)) };
                let xv = load_i8(unsafe { x[j].q.as_ptr().add(b * QK).cast::<[i8; QK]>().as_ref().unwrap_unchecked() });
                let c = if MIN { _mm256_setzero_si256() } else { unsafe { _mm256_loadu_si256(x[j].c.as_ptr().add(b * 8).cast()) } };
                let p = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(c, q, xv));
                let d = unsafe { _mm256_loadu_ps(x[j].d8.as_ptr().add(b * 8)) };
                even = _mm256_fmadd_ps(_mm256_mul_ps(ws, d), p, even);
            }
            out[i][j] = sum8(_mm256_add_ps(even, odd)) + min_lanes[j];
        }
    }
    out
}

/// Every weight row of `w` (`rb` bytes each) against the RX activation rows `xs` (rows r0.. of
/// the tile's m), RW weight rows at a time (then one at a time), into `out` laid out (weight
/// rows, m). Not inlined: one compact function per format and tile shape (inlined into one
/// large function, the same loops ran up to four times slower, by register allocation).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")]
#[inline(never)]
fn pass<const BB: usize, const SUBS: usize, const MIN: bool, const RW: usize, const RX: usize>(
    w: &[u8],
    rb: usize,
    xs: [WideRow; RX],
    nb: usize,
    (out, m, r0): (&mut [f32], usize, usize),
    decode: (
        impl Fn(&[u8; BB], usize) -> Decoded + Copy,
        impl Fn(&[u8; BB], &[u8; BB], (usize, usize), &Prep) -> Pair + Copy,
        impl Fn(&[u8; BB]) -> Prep + Copy,
    ),
) {
    let n_rows = w.len() / rb;
    // Out of the thread-local and back: inside `with`'s closure, which has no target
    // features, the loops below were not compiled for them (a decode step a tenth slower).
    let mut st = if MIN { MIN_SUMS.take() } else { Vec::new() };
    if MIN {
        // Each block's sums of the RX rows, 16 lanes to a block (tile_rw_rx's mins).
        st.clear();
        st.resize(nb * 16, 0.0);
        for (j, x) in xs.iter().enumerate() {
            for (b, &v) in x.s[..nb].iter().enumerate() {
                st[b * 16 + j] = v;
            }
        }
    }
    let nst = (nb, &st[..]);
    let mut j = 0;
    while RW > 1 && j + RW <= n_rows {
        prefetch_ahead(&w[j * rb..(j + RW) * rb]);
        let o = tile_rw_rx::<BB, SUBS, MIN, RW, RX>(&w[j * rb..(j + RW) * rb], rb, xs, nst, decode);
        for (i, o) in o.iter().enumerate() {
            out[(j + i) * m + r0..(j + i) * m + r0 + RX].copy_from_slice(o);
        }
        j += RW;
    }
    while j < n_rows {
        let wr = &w[j * rb..(j + 1) * rb];
        prefetch_ahead(wr);
        let o = tile_rw_rx::<BB, SUBS, MIN, 1, RX>(wr, rb, xs, nst, decode);
        out[j * m + r0..j * m + r0 + RX].copy_from_slice(&o[0]);
        j += 1;
    }
    if MIN {
        MIN_SUMS.set(st);
    }
}

thread_local! {
    /// `pass`'s block sums of its activation rows, for the formats with a min, reused.
    static MIN_SUMS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `tile` for the 512-bit kernels: up to 12 activation rows in one pass, 2 weight
/// rows at a time; more (prefill) in ceil(m / 4) groups as even as possible, each one pass of 4
/// weight rows at a time over a task's weight rows, which are few enough to stay in the
/// caches (host/mod.rs's PREFILL_TASK_MACS).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")]
#[inline]
pub(super) fn tile_512<const BB: usize, const SUBS: usize, const MIN: bool>(
    t: QTile,
    decode: impl Fn(&[u8; BB], usize) -> Decoded + Copy,
    pair: impl Fn(&[u8; BB], &[u8; BB], (usize, usize), &Prep) -> Pair + Copy,
    prep: impl Fn(&[u8; BB]) -> Prep + Copy,
) {
    let decode = (decode, pair, prep);
    if t.row_bytes == 0 || t.m == 0 || t.n_in == 0 {
        return;
    }
    let (m, rb, nb) = (t.m, t.row_bytes, t.n_in / QK);
    let row = |r: usize| {
        let (q, _, s) = t.x.row(r, t.n_in);
        let (d8, c) = t.x.row_wide(r, t.n_in);
        WideRow { q, d8, c, s }
    };
    // Up to 12 rows in one pass over the weights, as 2 weight rows by all of them: 2 x 12
    // accumulators, the 4 decoded vectors and the activation's 3 fill the 32 registers. A
    // verify of 8 drafted rows (9) is one such pass; on a 180 MB Q8_0 matrix (Gemma3's output),
    // a pass per group of 3 rows read it three times and took 1.6 times as long (kernel_time).
    macro_rules! one_pass {
        ($($n:literal)*) => {
            match m {
                1 => return pass::<BB, SUBS, MIN, 1, 1>(t.w, rb, [row(0)], nb, (t.out, 1, 0), decode),
                $($n => return pass::<BB, SUBS, MIN, 2, $n>(t.w, rb, std::array::from_fn(row), nb, (t.out, m, 0), decode),)*
                _ => {}
            }
        };
    }
    one_pass!(2 3 4 5 6 7 8 9 10 11 12);
    let groups = m.div_ceil(4);
    let mut r = 0;
    for g in 0..groups {
        let size = m / groups + usize::from(g < m % groups);
        let o = (&mut *t.out, m, r);
        let xs = |k| row(r + k);
        match size {
            4 => pass::<BB, SUBS, MIN, 4, 4>(t.w, rb, std::array::from_fn(xs), nb, o, decode),
            _ => pass::<BB, SUBS, MIN, 4, 3>(t.w, rb, std::array::from_fn(xs), nb, o, decode),
        }
        r += size;
    }
}
