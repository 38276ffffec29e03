//! Fused row kernels: the dot product of one weight row, read straight from its stored bytes
//! (GGML blocks or f32/f16/bf16), with one f32 activation row. No f32 copy of the row is made.
//!
//! # Arithmetic (the same in both implementations)
//!
//! Block formats factor the block scale out of the sum, as ggml's vec_dot kernels do, but keep
//! the activations in f32 (ggml rounds them to 8 bits; that would break the accuracy below):
//!
//! - Q8_0, Q4_0, Q5_0: `d * sum(q_i * x_i)` per 32-block, q the signed integer after the format's
//!   offset (exact in f32).
//! - MXFP4: the same, q the doubled E2M1 value and d half the E8M0 scale (quant's
//!   `MXFP4_VALUES`, `e8m0_half`).
//! - Q4_1, Q5_1: `d * sum(q_i * x_i)` per block, plus `m * X_b` with `X_b` the block's sum of x.
//! - Q4_K, Q5_K: per 32-element sub-block `(d * sc) * sum(q_i * x_i)`, minus `(dmin * m) * X_b`.
//! - Q6_K: per 16-element group `(d * sc) * sum((q_i - 32) * x_i)`.
//! - F32, F16, BF16: the f32 `dot` of dot.rs on the converted values (conversion is exact), so
//!   these give the same bits as converting the row and calling `dot`.
//!
//! The block sums `X_b` depend only on the activation row: [`block_sums`] computes them once per
//! row and every weight row reuses them, so the inner loop stays one multiply-add chain.
//!
//! Lane structure: a 32-block is four runs of 8 (lane l holds elements l, l+8, l+16, l+24) and
//! gives `s_l = (q_l x_l + q_{l+8} x_{l+8}) + (q_{l+16} x_{l+16} + q_{l+24} x_{l+24})`; then
//! `acc[b % 2]_l += d_b * s_l` over blocks (two chains hide the multiply-add latency; Q6_K uses
//! four, indexed by group % 4, and 16-element groups `s_l = q_l x_l + q_{l+8} x_{l+8}`).
//! At the end the accumulators are added lane-wise and the 8 lanes summed by `reduce8`'s fixed
//! tree; the min terms (Q4_1, Q5_1, Q4_K, Q5_K) go to one scalar chain in element order, added at the end.
//! The AVX2 code fuses `a * b + c` where the portable code rounds the product first; nothing
//! else differs. Which one runs is chosen once per process, so every call rounds the same way.
//! An output never depends on the batch size or the thread count: its whole reduction is done
//! by one kernel, and the AVX2 kernels that decode a weight row once for several activation
//! rows (prefill) still apply exactly the single-row operations to each output.
//!
//! # Accuracy
//!
//! Against the exact sum `E = sum(w_i * x_i)` over the dequantized row (quant::dequantize_row,
//! itself bit-exact to ggml), with u = 2^-24:
//!
//! `|row_dot - E| <= gamma(k) * T`, gamma(k) = k u / (1 - k u), k = n / 32 + 40,
//!
//! where T is the sum of the magnitudes the kernel actually adds: `sum |w_i x_i|` for the
//! single-scale formats and floats, and `sum (|d q_i| + |m|) |x_i|` for the formats with a min (the two
//! parts are summed separately, so their cancellation inside w_i is not covered by
//! `sum |w_i x_i|`). Why k: a sum whose every term passes through at most k roundings is within
//! gamma(k) * T of exact (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed.,
//! sec. 3.1). Counting them: at most 2 for dequantize_row's own roundings of `d * q (+ m)`,
//! which factoring skips; 3 inside a block (products and the pair tree); 1 for the scale; the
//! block-to-block chain, n/64 long with two accumulators, but n/32 for the min chain,
//! which comes after the 5 levels of `block_sums`; 1 to join the chains, 3 for reduce8, 1 for
//! the min term. The floats have no conversion rounding but a chain of n/32, the 5 levels of
//! reduce32 and a tail of at most 31 in sequence: n/32 + 37. So k = n/32 + 40 covers every
//! path. For n = 576 that is 58 u = 3.5e-6 relative, and it stays under 1e-5 up to n = 4300.
//! tests/host_kernels.rs asserts the bound for every type, both implementations, random blocks,
//! gguf-py's quantizations and every matrix of the real models; the errors seen are under 3% of it.

use super::dot::reduce32;
use crate::quant::{Kernel, WeightType, QK, QK_K};

/// Eight f32 lanes, the width of one AVX2 register.
pub(super) type Lanes = [f32; 8];

/// Which implementation of the kernels runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust, every target.
    Portable,
    /// x86_64 with AVX2, FMA and F16C.
    Avx2,
    /// Avx2 plus AVX-512 F and VL: the same 256-bit kernels and the same bits, but 32 registers
    /// let a decoded weight row serve twice the activation rows (prefill).
    Avx512,
    /// aarch64 with NEON (baseline there). The f32 row kernels are still the portable ones;
    /// what this selects is the `fast` precision's NEON integer kernels (neon_int8.rs), so that
    /// forcing `Portable` keeps meaning plain Rust everywhere.
    Neon,
}

static HAS_NEON: once_cell::sync::Lazy<bool> = once_cell::sync::Lazy::new(|| {
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("neon")
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        false
    }
});

static HAS_AVX512: once_cell::sync::Lazy<bool> = once_cell::sync::Lazy::new(|| {
    #[cfg(target_arch = "x86_64")]
    {
        *HAS_AVX2 && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
});

static HAS_AVX2: once_cell::sync::Lazy<bool> = once_cell::sync::Lazy::new(|| {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
});

impl Isa {
    /// The fastest implementation this CPU runs, decided once per process.
    pub fn best() -> Isa {
        if *HAS_AVX512 {
            Isa::Avx512
        } else if *HAS_AVX2 {
            Isa::Avx2
        } else if *HAS_NEON {
            Isa::Neon
        } else {
            Isa::Portable
        }
    }

    /// Whether this CPU can run `self`.
    pub fn available(self) -> bool {
        match self {
            Isa::Portable => true,
            Isa::Avx2 => *HAS_AVX2,
            Isa::Avx512 => *HAS_AVX512,
            Isa::Neon => *HAS_NEON,
        }
    }
}

/// One kernel call: whole weight rows against whole activation rows.
pub struct Tile<'a> {
    /// (weight rows, row_bytes): the stored bytes of consecutive weight rows.
    pub w: &'a [u8],
    pub row_bytes: usize,
    /// (m, n_in): the activation rows.
    pub x: &'a [f32],
    pub n_in: usize,
    /// (m, n_in / 32): their block sums, when the format reads them (else not read).
    pub sums: &'a [f32],
    /// (weight rows, m): `out[j * m + r]` = weight row j . activation row r.
    pub out: &'a mut [f32],
}

/// A kernel entry point. The AVX2 ones are `unsafe` to call: they need a CPU with AVX2, FMA and
/// F16C, which `RowKernel::new` checks before it picks one.
#[derive(Clone, Copy)]
enum KernelFn {
    Portable(fn(Tile)),
    #[cfg(target_arch = "x86_64")]
    Avx2(unsafe fn(Tile)),
}

/// A weight type's `exact` kernels, one column per instruction set: filled by the type's row
/// (quant/), read by `RowKernel::new`. aarch64 runs the portable column (no f32 NEON kernels
/// yet, for any type).
#[derive(Clone, Copy)]
pub struct ExactKernels {
    /// Plain Rust, on every target: every type has one.
    pub portable: fn(Tile),
    /// AVX2, FMA and F16C. Absent: the portable kernel.
    pub avx2: Kernel<unsafe fn(Tile)>,
    /// AVX-512 F and VL, for one activation row (decode). Absent: the AVX2 column, the same
    /// bits (AVX-512 lends the kernels registers, not another rounding).
    pub avx512_one_row: Kernel<unsafe fn(Tile)>,
    /// AVX-512 F and VL, for several activation rows (prefill): 32 registers let a decoded weight
    /// row serve more of them. Absent: the AVX2 column, the same bits.
    pub avx512_rows: Kernel<unsafe fn(Tile)>,
}

/// The kernel for one weight type on one implementation, chosen once per matmul call.
#[derive(Clone, Copy)]
pub struct RowKernel {
    ty: WeightType,
    /// For one activation row (decode).
    f: KernelFn,
    /// For several (prefill): `f`, or on Avx512 the wide kernel, which gives the same bits but
    /// runs one row a little slower than `f` (measured), so decode keeps `f`.
    many: KernelFn,
}

impl RowKernel {
    /// The kernel for `ty` on `isa`, from the type's row (quant/, [`ExactKernels`]); an `isa`
    /// this CPU cannot run, and `Neon` (no f32 NEON kernels yet), give the portable kernel.
    pub fn new(ty: WeightType, isa: Isa) -> RowKernel {
        let k = &ty.format().exact;
        let portable = KernelFn::Portable(k.portable);
        #[cfg(target_arch = "x86_64")]
        let avx2 = k.avx2.get().map_or(portable, KernelFn::Avx2);
        let (f, many) = match (isa.available(), isa) {
            #[cfg(target_arch = "x86_64")]
            (true, Isa::Avx2) => (avx2, avx2),
            #[cfg(target_arch = "x86_64")]
            (true, Isa::Avx512) => (k.avx512_one_row.get().map_or(avx2, KernelFn::Avx2), k.avx512_rows.get().map_or(avx2, KernelFn::Avx2)),
            _ => (portable, portable),
        };
        RowKernel { ty, f, many }
    }

    /// The kernel for `ty` on [`Isa::best`].
    pub fn best(ty: WeightType) -> RowKernel {
        RowKernel::new(ty, Isa::best())
    }

    /// Whether the kernel reads the activations' [`block_sums`] (the formats with a min: Q4_1,
    /// Q5_1, Q4_K, Q5_K).
    pub fn needs_block_sums(&self) -> bool {
        self.ty.format().has_min
    }

    /// Dot product of the weight row `w` (`ty.row_bytes(x.len())` bytes) with `x`;
    /// `x_block_sums` is `block_sums(x)` when `needs_block_sums()`, else it is not read.
    pub fn dot(&self, w: &[u8], x: &[f32], x_block_sums: &[f32]) -> f32 {
        let mut out = [0.0f32];
        self.dot_rows(w, x.len(), x, x_block_sums, &mut out);
        out[0]
    }

    /// For the consecutive weight rows in `w` (of `n_in` elements each) and the activation rows
    /// in `x` (`m = x.len() / n_in` rows, with their block sums stacked in `x_block_sums` when
    /// the kernel reads them): `out[j * m + r]` = weight row j . activation row r. Every output
    /// has the bits `dot` gives it alone.
    ///
    /// Lengths are the caller's to keep (debug builds assert them); wrong lengths never panic or
    /// read out of bounds: only whole rows and blocks present everywhere are used.
    pub fn dot_rows(&self, w: &[u8], n_in: usize, x: &[f32], x_block_sums: &[f32], out: &mut [f32]) {
        let row_bytes = self.ty.row_bytes(n_in).unwrap_or(0);
        let m = x.len().checked_div(n_in).unwrap_or(0);
        debug_assert!(
            row_bytes > 0 && w.len().is_multiple_of(row_bytes),
            "{} rows of {n_in} elements in {} bytes",
            self.ty,
            w.len()
        );
        debug_assert_eq!(x.len(), m * n_in);
        debug_assert_eq!(out.len(), w.len().checked_div(row_bytes).unwrap_or(0) * m);
        debug_assert!(!self.needs_block_sums() || x_block_sums.len() == m * (n_in / QK));
        let tile = Tile { w, row_bytes, x, n_in, sums: x_block_sums, out };
        match if m > 1 { self.many } else { self.f } {
            KernelFn::Portable(f) => f(tile),
            // SAFETY: `new` stores an Avx2 kernel only after `Isa::Avx2.available()` found avx2,
            // fma and f16c on this CPU, the features the AVX2 kernels are compiled for, and one
            // of the wide kernels (compiled for avx512f and avx512vl too) only after
            // `Isa::Avx512.available()` found those as well.
            #[cfg(target_arch = "x86_64")]
            KernelFn::Avx2(f) => unsafe { f(tile) },
        }
    }
}

/// The sum of each 32-element block of `x` (lane tree `(x_l + x_{l+8}) + (x_{l+16} + x_{l+24})`,
/// then `reduce8`): `x.len() / 32` values. Plain f32 adds, so both implementations share these
/// bits.
pub fn block_sums(x: &[f32]) -> impl Iterator<Item = f32> + '_ {
    x.as_chunks::<QK>().0.iter().map(|b| {
        let mut v = [0.0f32; 8];
        for (l, v) in v.iter_mut().enumerate() {
            *v = (b[l] + b[8 + l]) + (b[16 + l] + b[24 + l]);
        }
        reduce8(&v)
    })
}

/// The fixed tree over 8 lanes: (l, l+4) pairs, then (l, l+2), then the last two. The same as
/// the end of dot.rs's `reduce32`.
#[inline]
pub(super) fn reduce8(v: &Lanes) -> f32 {
    let w = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    (w[0] + w[2]) + (w[1] + w[3])
}

/// `a[O..O + L]` as an array reference, bounds checked at compile time.
#[inline(always)]
pub(super) fn sub<T, const O: usize, const L: usize, const N: usize>(a: &[T; N]) -> &[T; L] {
    const { assert!(O + L <= N) };
    // SAFETY: O + L <= N (checked at compile time above), so the L elements from O lie inside
    // `a`; [T; L] has the alignment of T.
    unsafe { &*(a.as_ptr().add(O) as *const [T; L]) }
}

#[inline(always)]
pub(super) fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// The j-th (0..8) 6-bit scale and min of a Q4_K block's 12 packed bytes (ggml-quants.c
/// `get_scale_min_k4`; the same as quant/dequant.rs).
#[inline(always)]
pub(super) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

pub(super) const Q4_1_BYTES: usize = 4 + QK / 2;
pub(super) const Q5_1_BYTES: usize = 4 + 4 + QK / 2;
pub(super) const Q4_K_BYTES: usize = 4 + 12 + QK_K / 2;
pub(super) const Q5_K_BYTES: usize = 4 + 12 + QK_K / 8 + QK_K / 2;
pub(super) const Q6_K_BYTES: usize = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;

/// The lanes of the float formats: dot.rs's 32-lane structure, then the tail in order.
pub(super) fn finish_float(acc: &[f32; 32], tail: impl Iterator<Item = (f32, f32)>) -> f32 {
    let mut s = reduce32(acc);
    for (x, w) in tail {
        s += x * w;
    }
    s
}
