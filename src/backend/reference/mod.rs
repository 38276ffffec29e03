//! The scalar reference kernels: the plainest possible arithmetic, the oracle for kernel tests.
//! `CpuBackend<ReferenceBackend>` is the reference backend.

use crate::backend::attention::{attention_scalar, AttentionArgs};
use crate::backend::cpu::Kernels;
use crate::pack::tensor::WeightTensor;

pub struct ReferenceBackend;

/// Dot product left to right, accumulated in f64 and rounded once: the most exact plain
/// version, so that it can serve as the oracle for faster kernels.
pub fn dot_sequential(a: &[f32], b: &[f32]) -> f32 {
    let mut s = 0.0f64;
    for (x, y) in a.iter().zip(b) {
        s += *x as f64 * *y as f64;
    }
    s as f32
}

impl Kernels for ReferenceBackend {
    fn name(&self) -> &'static str {
        "reference"
    }

    fn matmul(&self, w: &WeightTensor, x: &[f32], rows: usize, out: &mut [f32]) {
        let (n_out, n_in) = (w.rows(), w.cols());
        let mut wrow = vec![0.0f32; n_in];
        for j in 0..n_out {
            w.row_f32(j, &mut wrow);
            for m in 0..rows {
                out[m * n_out + j] = dot_sequential(&x[m * n_in..(m + 1) * n_in], &wrow);
            }
        }
    }

    fn attention(&self, args: &AttentionArgs, q: &[f32], rows: usize, out: &mut [f32]) {
        attention_scalar(args, q, rows, out)
    }
}
