//! The host's LoRA update (`Backend::lora`): `out += s * ((x A^T) B^T)` over A (rank x n_in) and
//! B^T (rank x n_out), kept in the adapter's own element type (f32, f16 or bf16 are read in
//! place, widened a row at a time; other types are dequantized a row at a time), so that a
//! half-precision adapter is read in half the bytes and gives the bits its values give in f32.
//!
//! The work is cut into fixed pieces, the same on every thread count: for each activation row,
//! the rank is cut into chunks of `K_CHUNK`, and piece (row, chunk) computes
//! - `t[k] = x . A[k]` for the chunk's k: sixteen partial sums (element i into lane i % 16, in
//!   order), then the lanes added in lane order;
//! - `p[o] = sum_k t[k] * B^T[k][o]` over the chunk's k in order, each output on its own (so the
//!   loop over outputs runs as wide as the CPU's vectors).
//!
//! The pieces run on the backend's threads: beside the tasks of the map's own matmul
//! (`Backend::matmul_lora`, `Kernels::matmul_prepared_with`: no hand-off of their own), or on
//! their own (`Backend::lora`, on the calling thread when small). Then, on the calling thread,
//! `out[o] += (p_0[o] + p_1[o] + ...) * s`, the chunks' sums added in chunk order (PEFT's
//! `result + lora_B(lora_A(x)) * scaling`). Every product is a fused multiply-add
//! (`f32::mul_add`, one rounding on every CPU), so a row's bits depend on nothing but the row:
//! not on the thread count, the rows beside it, or the instruction set.
//!
//! Why so: the default of `Backend::lora` (two matmuls, a scale and an add) costs four calls per
//! map and, with B as (n_out x rank), a dot of only `rank` terms per output, short of the
//! matmul kernels' vector width; on SmolLM2 a rank-16 adapter on all seven maps took 2.7x the
//! base's decode step that way, 1.3x in one pass on the calling thread at f32 (where a f16
//! adapter went the slow way), 1.1-1.2x as it is now (BENCHMARKS.md).

use std::cell::RefCell;

use crate::pack::tensor::WeightTensor;
use crate::quant::WeightType;

/// Rank values per piece of work: a rank-16 adapter is one piece per map and row, run beside the
/// map's matmul tasks. On SmolLM2 (f16 rank-16 adapter, 2 threads, examples/lora_decode) chunks
/// of 16 took 1.10-1.16x the base's time per token, of 8 1.14-1.25x, of 4 1.21-1.37x: a longer
/// chunk keeps more of `t` in registers for each load of B^T.
pub const K_CHUNK: usize = 16;
const LANES: usize = 16;
/// Below this many multiply-adds a `Backend::lora` of its own runs on the calling thread (the
/// same pieces, the same bits): on SmolLM2 a decode step's rank-16 maps (18k-33k multiply-adds,
/// 2-4 us) took longer handed to a second thread than done alone (examples/lora_ops).
const SERIAL_MACS: usize = 256 * 1024;

#[cfg(target_arch = "x86_64")]
static HAS_AVX2_FMA: once_cell::sync::Lazy<bool> =
    once_cell::sync::Lazy::new(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c"));

thread_local! {
    /// Widened rows of A and B^T.
    static ROWS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The pieces' sums, (row, chunk, n_out), on the calling thread.
    static PARTS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// A matrix the kernel reads by rows as f32.
#[derive(Clone, Copy)]
pub enum Rows<'a> {
    F32(&'a [f32]),
    F16(&'a [half::f16]),
    Bf16(&'a [half::bf16]),
    Other(&'a WeightTensor),
}

impl<'a> Rows<'a> {
    /// `w`'s rows, read in place where its type and alignment allow.
    pub fn of(w: &'a WeightTensor) -> Rows<'a> {
        let b = w.bytes();
        // SAFETY: every bit pattern is a value of these types; only an aligned middle covering
        // all the bytes is taken.
        unsafe {
            match w.ty {
                WeightType::F32 => match b.align_to::<f32>() {
                    (&[], m, &[]) => Rows::F32(m),
                    _ => Rows::Other(w),
                },
                WeightType::F16 => match b.align_to::<half::f16>() {
                    (&[], m, &[]) => Rows::F16(m),
                    _ => Rows::Other(w),
                },
                WeightType::BF16 => match b.align_to::<half::bf16>() {
                    (&[], m, &[]) => Rows::Bf16(m),
                    _ => Rows::Other(w),
                },
                _ => Rows::Other(w),
            }
        }
    }

    /// Row `r` (`len` wide) as f32: in place, or widened into `buf`.
    #[inline(always)]
    fn row<'b>(&'b self, r: usize, len: usize, buf: &'b mut [f32]) -> &'b [f32] {
        use half::slice::HalfFloatSliceExt;
        let buf = &mut buf[..len];
        match self {
            Rows::F32(v) => return &v[r * len..(r + 1) * len],
            Rows::F16(v) => v[r * len..(r + 1) * len].convert_to_f32_slice(buf),
            Rows::Bf16(v) => v[r * len..(r + 1) * len].convert_to_f32_slice(buf),
            Rows::Other(w) => w.row_f32(r, buf),
        }
        buf
    }
}

/// The shape of one call: A (rank x n_in), B^T (rank x n_out).
#[derive(Clone, Copy)]
pub struct Dims {
    pub rank: usize,
    pub n_in: usize,
    pub n_out: usize,
}

/// One adapter's update of a map: A, B^T, their shape and the scale.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    pub a: Rows<'a>,
    pub bt: Rows<'a>,
    pub d: Dims,
    pub s: f32,
}

/// The multiply-adds of `jobs` over `rows` rows.
pub fn macs(jobs: &[Job], rows: usize) -> usize {
    jobs.iter().map(|j| rows * j.d.rank * (j.d.n_in + j.d.n_out)).sum()
}

/// Whether `jobs` over `rows` rows are worth handing to other threads on their own.
pub fn worth_threads(jobs: &[Job], rows: usize) -> bool {
    macs(jobs, rows) >= SERIAL_MACS
}

/// `out[r] += s * ((x[r] A^T) B^T)` for `r < rows`, for each job in order (all read `x` and
/// add into `out`, so each has the same n_in and n_out). `run(n, task)` runs `task(i)` once for
/// each i < n, on any threads, and returns when all have: the pieces write only their own sums,
/// so `run` may do other work with them, `out` in hand (the host runs them among the tasks of
/// the matmul that writes `out`); the sums are added into `out` after it returns.
pub fn lora_rows(jobs: &[Job], x: &[f32], rows: usize, out: &mut [f32], run: impl FnOnce(usize, &(dyn Fn(usize) + Sync), &mut [f32])) {
    let Some(first) = jobs.first() else {
        return run(0, &|_| {}, out);
    };
    let (n_in, n_out) = (first.d.n_in, first.d.n_out);
    assert!(jobs.iter().all(|j| j.d.n_in == n_in && j.d.n_out == n_out), "LoRA jobs of one call share their input and output");
    // Piece i: job `at[j] <= i < at[j + 1]`, then row and chunk.
    let mut at = Vec::with_capacity(jobs.len() + 1);
    at.push(0);
    for j in jobs {
        at.push(at[at.len() - 1] + rows * j.d.rank.div_ceil(K_CHUNK));
    }
    let n = at[jobs.len()];
    PARTS.with_borrow_mut(|parts| {
        parts.resize(n * n_out, 0.0);
        let shared = Shared(parts.as_mut_ptr());
        let task = |i: usize| {
            let shared = &shared;
            let j = at.partition_point(|&a| a <= i) - 1;
            let job = &jobs[j];
            let chunks = job.d.rank.div_ceil(K_CHUNK);
            let (r, c) = ((i - at[j]) / chunks, (i - at[j]) % chunks);
            // SAFETY: piece i alone writes elements i * n_out .. (i + 1) * n_out, inside `parts`
            // (i < n), which stays borrowed until every piece has ended.
            let p = unsafe { std::slice::from_raw_parts_mut(shared.0.add(i * n_out), n_out) };
            piece(job.a, job.bt, job.d, &x[r * n_in..(r + 1) * n_in], c * K_CHUNK..((c + 1) * K_CHUNK).min(job.d.rank), p);
        };
        run(n, &task, out);
        for (j, job) in jobs.iter().enumerate() {
            let chunks = job.d.rank.div_ceil(K_CHUNK);
            for (r, o) in out[..rows * n_out].chunks_exact_mut(n_out).enumerate() {
                let from = (at[j] + r * chunks) * n_out;
                add_scaled(o, &mut parts[from..from + chunks * n_out], chunks, job.s);
            }
        }
    });
}

struct Shared(*mut f32);
// SAFETY: the pieces write disjoint elements (see `lora_rows`).
unsafe impl Sync for Shared {}

/// `o[j] += (p[0][j] + p[1][j] + ...) * s` over the `chunks` sums in `p` (chunks x o.len()),
/// the sums gathered into `p[0]`.
fn add_scaled(o: &mut [f32], p: &mut [f32], chunks: usize, s: f32) {
    #[cfg(target_arch = "x86_64")]
    if *HAS_AVX2_FMA {
        // SAFETY: the CPU has AVX2 (checked at run time).
        unsafe { add_scaled_avx2(o, p, chunks, s) };
        return;
    }
    add_scaled_inline(o, p, chunks, s)
}

/// `add_scaled` compiled for AVX2 (adds and multiplies, none fused: the same bits).
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_scaled_avx2(o: &mut [f32], p: &mut [f32], chunks: usize, s: f32) {
    add_scaled_inline(o, p, chunks, s)
}

#[inline(always)]
fn add_scaled_inline(o: &mut [f32], p: &mut [f32], chunks: usize, s: f32) {
    let w = o.len();
    let (first, rest) = p.split_at_mut(w);
    for c in 1..chunks {
        for (a, &b) in first.iter_mut().zip(&rest[(c - 1) * w..c * w]) {
            *a += b;
        }
    }
    for (v, &a) in o.iter_mut().zip(first.iter()) {
        *v += a * s;
    }
}

/// One piece: `p[o] = sum_{k in ks} (x . A[k]) * B^T[k][o]`.
fn piece(a: Rows, bt: Rows, d: Dims, x: &[f32], ks: std::ops::Range<usize>, p: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if *HAS_AVX2_FMA {
        use simd::piece as run;
        // SAFETY: the CPU has AVX2, FMA and F16C (checked at run time); each matrix holds
        // rank rows of its width (`Dims`).
        let done = unsafe {
            match (a, bt) {
                (Rows::F32(a), Rows::F32(b)) => run(a, b, d, x, ks.clone(), p),
                (Rows::F32(a), Rows::F16(b)) => run(a, b, d, x, ks.clone(), p),
                (Rows::F32(a), Rows::Bf16(b)) => run(a, b, d, x, ks.clone(), p),
                (Rows::F16(a), Rows::F32(b)) => run(a, b, d, x, ks.clone(), p),
                (Rows::F16(a), Rows::F16(b)) => run(a, b, d, x, ks.clone(), p),
                (Rows::F16(a), Rows::Bf16(b)) => run(a, b, d, x, ks.clone(), p),
                (Rows::Bf16(a), Rows::F32(b)) => run(a, b, d, x, ks.clone(), p),
                (Rows::Bf16(a), Rows::F16(b)) => run(a, b, d, x, ks.clone(), p),
                (Rows::Bf16(a), Rows::Bf16(b)) => run(a, b, d, x, ks.clone(), p),
                _ => false,
            }
        };
        if done {
            return;
        }
    }
    ROWS.with_borrow_mut(|buf| {
        buf.resize(d.n_in.max(d.n_out), 0.0);
        piece_portable(a, bt, d, x, ks, p, buf)
    })
}

/// The arithmetic of every path, one element at a time.
fn piece_portable(a: Rows, bt: Rows, d: Dims, x: &[f32], ks: std::ops::Range<usize>, p: &mut [f32], buf: &mut [f32]) {
    let mut t = [0.0f32; K_CHUNK];
    for (tk, k) in t.iter_mut().zip(ks.clone()) {
        *tk = dot_lanes(a.row(k, d.n_in, buf), x);
    }
    for v in p.iter_mut() {
        *v = 0.0;
    }
    for (&tk, k) in t.iter().zip(ks) {
        for (v, &b) in p.iter_mut().zip(bt.row(k, d.n_out, buf)) {
            *v = tk.mul_add(b, *v);
        }
    }
}

/// `piece` in AVX2 + FMA + F16C, reading f16 and bf16 in place: the same operations in the same
/// order as `piece_portable` (lanes 0-7 and 8-15 of the dot are two registers; each output's
/// sum over k is kept in a register from 0.0 to the last k).
#[cfg(target_arch = "x86_64")]
mod simd {
    use super::{Dims, K_CHUNK, LANES};
    use std::arch::x86_64::*;

    pub trait Elem: Copy {
        /// Eight values from `p` as f32.
        ///
        /// # Safety
        /// `p` points at eight readable values; the CPU has AVX2 and F16C.
        unsafe fn load8(p: *const Self) -> __m256;
        fn to_f32(self) -> f32;
    }
    impl Elem for f32 {
        #[inline(always)]
        unsafe fn load8(p: *const f32) -> __m256 {
            _mm256_loadu_ps(p)
        }
        #[inline(always)]
        fn to_f32(self) -> f32 {
            self
        }
    }
    impl Elem for half::f16 {
        #[inline(always)]
        unsafe fn load8(p: *const half::f16) -> __m256 {
            _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
        }
        #[inline(always)]
        fn to_f32(self) -> f32 {
            half::f16::to_f32(self)
        }
    }
    impl Elem for half::bf16 {
        #[inline(always)]
        unsafe fn load8(p: *const half::bf16) -> __m256 {
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i))))
        }
        #[inline(always)]
        fn to_f32(self) -> f32 {
            half::bf16::to_f32(self)
        }
    }

    /// Always true (the bool lets `piece`'s match fall through for the other storages).
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `a` holds rank x n_in values, `b` rank x n_out.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn piece<A: Elem, B: Elem>(a: &[A], b: &[B], d: Dims, x: &[f32], ks: std::ops::Range<usize>, p: &mut [f32]) -> bool {
        let (n_in, n_out) = (d.n_in, d.n_out);
        let (x, p) = (&x[..n_in], &mut p[..n_out]);
        let mut kbuf = [0usize; K_CHUNK];
        let nk = ks.len();
        for (slot, k) in kbuf.iter_mut().zip(ks) {
            *slot = k;
        }
        let ks = &kbuf[..nk];
        let mut t = [0.0f32; K_CHUNK];
        // The dots four rows of A at a time (eight chains of fused multiply-adds in flight, so
        // that their latency is hidden), each row's lanes as `dot_lanes` has them.
        let full = n_in / LANES * LANES;
        for (tq, kq) in t.chunks_mut(4).zip(ks.chunks(4)) {
            let mut l = [[_mm256_setzero_ps(); 2]; 4];
            let rows: [*const A; 4] = std::array::from_fn(|q| a.as_ptr().add(kq[q.min(kq.len() - 1)] * n_in));
            let mut i = 0;
            while i < full {
                let (x0, x1) = (_mm256_loadu_ps(x.as_ptr().add(i)), _mm256_loadu_ps(x.as_ptr().add(i + 8)));
                for q in 0..4 {
                    l[q][0] = _mm256_fmadd_ps(A::load8(rows[q].add(i)), x0, l[q][0]);
                    l[q][1] = _mm256_fmadd_ps(A::load8(rows[q].add(i + 8)), x1, l[q][1]);
                }
                i += LANES;
            }
            for (q, tk) in tq.iter_mut().enumerate().take(kq.len()) {
                let mut lanes = [0.0f32; LANES];
                _mm256_storeu_ps(lanes.as_mut_ptr(), l[q][0]);
                _mm256_storeu_ps(lanes.as_mut_ptr().add(8), l[q][1]);
                let row = &a[kq[q] * n_in..(kq[q] + 1) * n_in];
                for j in 0..n_in - full {
                    lanes[j] = row[full + j].to_f32().mul_add(x[full + j], lanes[j]);
                }
                *tk = lanes.iter().fold(0.0f32, |s, &v| s + v);
            }
        }
        let t = &t[..ks.len()];
        // The outputs 64 at a time (eight chains in flight), then 8, then one.
        let mut o = 0;
        while o + 64 <= n_out {
            let mut acc = [_mm256_setzero_ps(); 8];
            for (&tk, &k) in t.iter().zip(ks) {
                let tv = _mm256_set1_ps(tk);
                let row = b.as_ptr().add(k * n_out + o);
                for (j, v) in acc.iter_mut().enumerate() {
                    *v = _mm256_fmadd_ps(tv, B::load8(row.add(8 * j)), *v);
                }
            }
            for (j, v) in acc.iter().enumerate() {
                _mm256_storeu_ps(p.as_mut_ptr().add(o + 8 * j), *v);
            }
            o += 64;
        }
        while o + 8 <= n_out {
            let mut v = _mm256_setzero_ps();
            for (&tk, &k) in t.iter().zip(ks) {
                v = _mm256_fmadd_ps(_mm256_set1_ps(tk), B::load8(b.as_ptr().add(k * n_out + o)), v);
            }
            _mm256_storeu_ps(p.as_mut_ptr().add(o), v);
            o += 8;
        }
        for (o, v) in p.iter_mut().enumerate().skip(o) {
            let mut acc = 0.0f32;
            for (&tk, &k) in t.iter().zip(ks) {
                acc = tk.mul_add(b[k * n_out + o].to_f32(), acc);
            }
            *v = acc;
        }
        true
    }
}

/// `a . b` in sixteen lanes (element i into lane i % 16), the lanes added in order.
#[inline(always)]
fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..LANES {
            lanes[j] = x[j].mul_add(y[j], lanes[j]);
        }
    }
    for j in 0..ra.len() {
        lanes[j] = ra[j].mul_add(rb[j], lanes[j]);
    }
    lanes.iter().fold(0.0f32, |s, &v| s + v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::tensor::TensorBytes;
    use std::sync::Arc;

    fn values(n: usize, k: u64) -> Vec<f32> {
        (0..n).map(|i| (((i as u64 * 2654435761 + k) % 1000) as f32 / 500.0) - 1.0).collect()
    }

    fn tensor(ty: WeightType, rows: usize, cols: usize, v: &[f32]) -> WeightTensor {
        let bytes: Vec<u8> = match ty {
            WeightType::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            WeightType::F16 => v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
            _ => v.iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect(),
        };
        WeightTensor::new("t".into(), ty, vec![rows, cols], TensorBytes::Owned(Arc::new(bytes))).unwrap()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Runs the pieces on two threads of this test, in reverse order.
    fn two_threads(n: usize, task: &(dyn Fn(usize) + Sync), _: &mut [f32]) {
        std::thread::scope(|s| {
            s.spawn(|| (0..n).rev().filter(|i| i % 2 == 0).for_each(task));
            s.spawn(|| (0..n).rev().filter(|i| i % 2 == 1).for_each(task));
        });
    }

    /// Against f64 sums of the same products; the same bits on one thread, two threads, the
    /// portable and AVX2 paths, a row alone, and half-precision storage against its values in f32.
    #[test]
    fn matches_a_plain_sum_and_every_path_agrees() {
        // Rank 20: three chunks, the last one short; 8 rows, over the serial bound.
        let d = Dims { rank: 20, n_in: 67, n_out: 45 };
        let rows = 8;
        let (a, bt, x) = (values(d.rank * d.n_in, 1), values(d.rank * d.n_out, 2), values(rows * d.n_in, 3));
        let base = values(rows * d.n_out, 4);
        let (ta, tb) = (tensor(WeightType::F32, d.rank, d.n_in, &a), tensor(WeightType::F32, d.rank, d.n_out, &bt));
        let serial = |n: usize, t: &(dyn Fn(usize) + Sync), _: &mut [f32]| (0..n).for_each(t);
        let mut out = base.clone();
        lora_rows(&[Job { a: Rows::of(&ta), bt: Rows::of(&tb), d, s: 0.75 }], &x, rows, &mut out, serial);
        for r in 0..rows {
            for o in 0..d.n_out {
                let want: f64 = (0..d.rank)
                    .map(|k| (0..d.n_in).map(|i| a[k * d.n_in + i] as f64 * x[r * d.n_in + i] as f64).sum::<f64>() * bt[k * d.n_out + o] as f64)
                    .sum::<f64>()
                    * 0.75
                    + base[r * d.n_out + o] as f64;
                assert!((out[r * d.n_out + o] as f64 - want).abs() < 1e-4, "row {r} out {o}");
            }
        }
        let mut threaded = base.clone();
        lora_rows(&[Job { a: Rows::of(&ta), bt: Rows::of(&tb), d, s: 0.75 }], &x, rows, &mut threaded, two_threads);
        assert_eq!(bits(&threaded), bits(&out));
        // The portable body against the dispatched one, piece by piece, for every storage
        // (n_in 67: four blocks of 16 and a tail; n_out 45: a block of 32, one of 8 and a tail).
        for ty in [WeightType::F32, WeightType::F16, WeightType::BF16] {
            let (ta, tb) = (tensor(ty, d.rank, d.n_in, &a), tensor(ty, d.rank, d.n_out, &bt));
            for r in 0..rows {
                for c in 0..d.rank.div_ceil(K_CHUNK) {
                    let ks = c * K_CHUNK..((c + 1) * K_CHUNK).min(d.rank);
                    let (mut p1, mut p2) = (vec![0.0; d.n_out], vec![0.0; d.n_out]);
                    let xr = &x[r * d.n_in..(r + 1) * d.n_in];
                    piece(Rows::of(&ta), Rows::of(&tb), d, xr, ks.clone(), &mut p1);
                    let mut buf = vec![0.0; d.n_in.max(d.n_out)];
                    piece_portable(Rows::of(&ta), Rows::of(&tb), d, xr, ks, &mut p2, &mut buf);
                    assert_eq!(bits(&p1), bits(&p2), "{ty:?} row {r} chunk {c}");
                }
            }
        }
        // A row's bits do not depend on the rows beside it.
        let mut one = base[d.n_out..2 * d.n_out].to_vec();
        lora_rows(&[Job { a: Rows::of(&ta), bt: Rows::of(&tb), d, s: 0.75 }], &x[d.n_in..2 * d.n_in], 1, &mut one, serial);
        assert_eq!(bits(&one), bits(&out[d.n_out..2 * d.n_out]));
        // Two jobs in one call: the bits of two calls, in job order.
        let (a2, b2) = (values(d.rank * d.n_in, 5), values(d.rank * d.n_out, 6));
        let (ta2, tb2) = (tensor(WeightType::F32, d.rank, d.n_in, &a2), tensor(WeightType::F32, d.rank, d.n_out, &b2));
        let (mut both, mut apart) = (base.clone(), base.clone());
        let jobs = [Job { a: Rows::of(&ta), bt: Rows::of(&tb), d, s: 0.75 }, Job { a: Rows::of(&ta2), bt: Rows::of(&tb2), d, s: -0.5 }];
        lora_rows(&jobs, &x, rows, &mut both, two_threads);
        lora_rows(&jobs[..1], &x, rows, &mut apart, serial);
        lora_rows(&jobs[1..], &x, rows, &mut apart, serial);
        assert_eq!(bits(&both), bits(&apart));
        // f16 and bf16 storage: the bits of their values widened to f32.
        for ty in [WeightType::F16, WeightType::BF16] {
            let (ha, hb) = (tensor(ty, d.rank, d.n_in, &a), tensor(ty, d.rank, d.n_out, &bt));
            assert!(matches!(Rows::of(&ha), Rows::F16(_) | Rows::Bf16(_)));
            let (wa, wb) = (tensor(WeightType::F32, d.rank, d.n_in, &ha.to_f32()), tensor(WeightType::F32, d.rank, d.n_out, &hb.to_f32()));
            let (mut half_out, mut wide_out) = (base.clone(), base.clone());
            lora_rows(&[Job { a: Rows::of(&ha), bt: Rows::of(&hb), d, s: 0.75 }], &x, rows, &mut half_out, two_threads);
            lora_rows(&[Job { a: Rows::of(&wa), bt: Rows::of(&wb), d, s: 0.75 }], &x, rows, &mut wide_out, serial);
            assert_eq!(bits(&half_out), bits(&wide_out), "{ty:?}");
            assert_ne!(bits(&half_out), bits(&out), "{ty:?} rounds the values");
        }
    }
}
