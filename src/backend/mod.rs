//! Kernels behind one trait. The engine reaches arithmetic on weights only through `Backend`:
//! `reference` is plain scalar Rust (the oracle every fast kernel is tested against), `host` is
//! the fast CPU backend; an accelerator backend plugs in behind the same trait.
//!
//! Exactness rule for every backend: an output element is computed by the same sequence of
//! floating-point operations whatever the number of rows in the batch and whatever the thread
//! count. Work is split over output columns and rows, never over the reduction dimension.

pub mod attention;
pub mod host;
pub mod reference;

use crate::error::{Error, Result, Status};
use crate::pack::tensor::WeightTensor;

pub trait Backend: Send + Sync {
    fn name(&self) -> &'static str;

    /// `out[m * n_out + j] = sum_k x[m * n_in + k] * w[j, k]` for `m < rows`, where
    /// `w` is `[n_out, n_in]` in any weight type. `x.len() == rows * n_in`,
    /// `out.len() == rows * n_out`. Each weight row is read once for all `rows`.
    fn matmul(&self, w: &WeightTensor, x: &[f32], rows: usize, out: &mut [f32]);

    /// Causal attention of `rows` query rows (`q`: rows x n_heads*head_dim) against a KV plane;
    /// see `attention::AttentionArgs`. The default is the scalar version.
    fn attention(&self, args: &attention::AttentionArgs, q: &[f32], rows: usize, out: &mut [f32]) {
        attention::attention_scalar(args, q, rows, out)
    }
}

/// Which backend the open options ask for (`packlm_open_options.backend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    Host,
    Reference,
    Accelerator,
}

impl BackendKind {
    pub fn from_code(code: u32) -> Result<BackendKind> {
        match code {
            0 => Ok(BackendKind::Host),
            1 => Ok(BackendKind::Reference),
            2 => Ok(BackendKind::Accelerator),
            other => Err(Error::invalid(format!("backend {other} is not one of 0 (host), 1 (reference), 2 (accelerator)"))),
        }
    }
}

/// Creates the backend; `threads == 0` means one per core.
pub fn create(kind: BackendKind, threads: usize) -> Result<Box<dyn Backend>> {
    match kind {
        BackendKind::Host => Ok(Box::new(host::HostBackend::new(threads)?)),
        BackendKind::Reference => Ok(Box::new(reference::ReferenceBackend)),
        // The seam for an NPU/GPU backend: none is built into this library yet.
        BackendKind::Accelerator => Err(Error::new(
            Status::ErrBackendUnavailable,
            "no accelerator backend is available in this build",
        )),
    }
}
