//! The host's LoRA update (`Backend::lora`): `out += s * ((x A^T) B^T)` over f32 A (rank x
//! n_in) and B^T (rank x n_out), one row at a time, on the calling thread. A row's bits depend
//! on nothing but the row (no thread split, no batch), and every product is a fused
//! multiply-add (`f32::mul_add`, one rounding on every CPU: an `fma` instruction where the CPU
//! has one, libm's `fmaf` elsewhere), so every path gives the same bits:
//! - `t[k] = x . A[k]`: sixteen partial sums (element i into lane i % 16, in order), then the
//!   lanes added in lane order;
//! - `acc[o] = sum_k t[k] * B^T[k][o]`, k in order, each output on its own (so the loop over
//!   outputs runs as wide as the CPU's vectors);
//! - `out[o] += acc[o] * s` (PEFT's `result + lora_B(lora_A(x)) * scaling`).
//!
//! The default of `Backend::lora` (two matmuls, a scale and an add) costs four calls per map
//! and, with B as (n_out x rank), a dot of only `rank` terms per output, short of the matmul
//! kernels' vector width: on SmolLM2 a rank-16 adapter on all seven maps took 2.7x the base's
//! decode step that way (BENCHMARKS.md).

const LANES: usize = 16;

#[cfg(target_arch = "x86_64")]
static HAS_AVX2_FMA: once_cell::sync::Lazy<bool> =
    once_cell::sync::Lazy::new(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"));

/// `a`: rank x n_in, `bt`: rank x n_out, `x`: rows x n_in, `out`: rows x n_out; `t`: rank
/// values and `acc`: n_out values of scratch.
#[allow(clippy::too_many_arguments)]
pub fn lora_rows(a: &[f32], bt: &[f32], rank: usize, n_in: usize, n_out: usize, x: &[f32], rows: usize, s: f32, t: &mut [f32], acc: &mut [f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if *HAS_AVX2_FMA {
        // SAFETY: the CPU has AVX2 and FMA (checked at run time).
        unsafe { lora_rows_avx2(a, bt, rank, n_in, n_out, x, rows, s, t, acc, out) };
        return;
    }
    lora_rows_inline(a, bt, rank, n_in, n_out, x, rows, s, t, acc, out)
}

/// `lora_rows` compiled for AVX2 and FMA: the same operations in the same order.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn lora_rows_avx2(a: &[f32], bt: &[f32], rank: usize, n_in: usize, n_out: usize, x: &[f32], rows: usize, s: f32, t: &mut [f32], acc: &mut [f32], out: &mut [f32]) {
    lora_rows_inline(a, bt, rank, n_in, n_out, x, rows, s, t, acc, out)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn lora_rows_inline(a: &[f32], bt: &[f32], rank: usize, n_in: usize, n_out: usize, x: &[f32], rows: usize, s: f32, t: &mut [f32], acc: &mut [f32], out: &mut [f32]) {
    let (t, acc) = (&mut t[..rank], &mut acc[..n_out]);
    for r in 0..rows {
        let xr = &x[r * n_in..(r + 1) * n_in];
        for (k, tk) in t.iter_mut().enumerate() {
            *tk = dot_lanes(&a[k * n_in..(k + 1) * n_in], xr);
        }
        acc.iter_mut().for_each(|v| *v = 0.0);
        for (k, &tk) in t.iter().enumerate() {
            for (v, &b) in acc.iter_mut().zip(&bt[k * n_out..(k + 1) * n_out]) {
                *v = tk.mul_add(b, *v);
            }
        }
        for (o, &v) in out[r * n_out..(r + 1) * n_out].iter_mut().zip(acc.iter()) {
            *o += v * s;
        }
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

    /// Against f64 sums of the same products, and the same bits on the portable and AVX2 paths.
    #[test]
    fn matches_a_plain_sum_and_every_path_agrees() {
        let (rank, n_in, n_out, rows) = (5, 37, 23, 3);
        let v = |n: usize, k: u64| (0..n).map(|i| (((i as u64 * 2654435761 + k) % 1000) as f32 / 500.0) - 1.0).collect::<Vec<f32>>();
        let (a, bt, x) = (v(rank * n_in, 1), v(rank * n_out, 2), v(rows * n_in, 3));
        let base = v(rows * n_out, 4);
        let mut out = base.clone();
        let (mut t, mut acc) = (vec![0.0; rank], vec![0.0; n_out]);
        lora_rows(&a, &bt, rank, n_in, n_out, &x, rows, 0.75, &mut t, &mut acc, &mut out);
        for r in 0..rows {
            for o in 0..n_out {
                let want: f64 = (0..rank)
                    .map(|k| (0..n_in).map(|i| a[k * n_in + i] as f64 * x[r * n_in + i] as f64).sum::<f64>() * bt[k * n_out + o] as f64)
                    .sum::<f64>()
                    * 0.75
                    + base[r * n_out + o] as f64;
                assert!((out[r * n_out + o] as f64 - want).abs() < 1e-4, "row {r} out {o}");
            }
        }
        let mut portable = base.clone();
        lora_rows_inline(&a, &bt, rank, n_in, n_out, &x, rows, 0.75, &mut t, &mut acc, &mut portable);
        assert_eq!(out.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), portable.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
        // A row's bits do not depend on the rows beside it.
        let mut one = base[n_out..2 * n_out].to_vec();
        lora_rows(&a, &bt, rank, n_in, n_out, &x[n_in..2 * n_in], 1, 0.75, &mut t, &mut acc, &mut one);
        assert_eq!(one.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), out[n_out..2 * n_out].iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    }
}
