//! The fast CPU backend: weight rows split into tiles over a rayon pool, each tile dequantized
//! once and dotted with every input row. A tile's results do not depend on which thread runs
//! it, so any thread count gives the same bits.

mod dot;

use rayon::prelude::*;

use crate::backend::attention::{self, AttentionArgs};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::pack::tensor::WeightTensor;

pub use dot::dot;

/// Weight rows per task: small enough to balance two to sixteen cores on a 576-row matrix,
/// large enough that scheduling costs little.
const TILE_ROWS: usize = 16;

pub struct HostBackend {
    pool: rayon::ThreadPool,
}

impl HostBackend {
    pub fn new(threads: usize) -> Result<HostBackend> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("packlm-host-{i}"))
            .build()
            .map_err(|e| Error::invalid(format!("cannot start {threads} threads: {e}")))?;
        Ok(HostBackend { pool })
    }

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }
}

impl Backend for HostBackend {
    fn name(&self) -> &'static str {
        "host"
    }

    fn matmul(&self, w: &WeightTensor, x: &[f32], rows: usize, out: &mut [f32]) {
        let (n_out, n_in) = (w.rows(), w.cols());
        // Results land transposed ([n_out][rows]) so that each tile owns one contiguous chunk.
        let mut out_t = vec![0.0f32; n_out * rows];
        self.pool.install(|| {
            out_t.par_chunks_mut(TILE_ROWS * rows).enumerate().for_each(|(tile, chunk)| {
                let j0 = tile * TILE_ROWS;
                let n = chunk.len() / rows;
                let mut wrow = vec![0.0f32; n_in];
                for jj in 0..n {
                    w.row_f32(j0 + jj, &mut wrow);
                    for m in 0..rows {
                        chunk[jj * rows + m] = dot(&x[m * n_in..(m + 1) * n_in], &wrow);
                    }
                }
            });
        });
        for j in 0..n_out {
            for m in 0..rows {
                out[m * n_out + j] = out_t[j * rows + m];
            }
        }
    }

    /// Each (row, head) pair is one task; its arithmetic is the scalar version's.
    fn attention(&self, a: &AttentionArgs, q: &[f32], rows: usize, out: &mut [f32]) {
        let (d, nh) = (a.head_dim, a.n_heads);
        let out = &mut out[..rows * nh * d];
        self.pool.install(|| {
            out.par_chunks_mut(d).enumerate().for_each(|(i, o)| {
                let (r, h) = (i / nh, i % nh);
                let qh = &q[r * nh * d + h * d..r * nh * d + (h + 1) * d];
                attention::head(a, qh, h, a.first_position + r, o);
            });
        });
    }
}
