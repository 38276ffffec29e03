//! A weight tensor: its element type, its shape in HF order (`[rows, cols]`, rows = output
//! features), and its bytes, which are a window of a memory map (the normal case: no copy, no
//! conversion at load) or, rarely, an owned buffer (GGUF llama Q/K rows put back in HF order).

use std::sync::Arc;

use memmap2::Mmap;

use crate::error::{Error, Result};
use crate::quant::{dequantize_row, WeightType};

/// Where a tensor's bytes live.
#[derive(Clone)]
pub enum TensorBytes {
    /// `len` bytes at `offset` of a shared memory map.
    Mapped { map: Arc<Mmap>, offset: usize, len: usize },
    /// Bytes owned by the tensor.
    Owned(Arc<Vec<u8>>),
}

#[derive(Clone)]
pub struct WeightTensor {
    pub name: String,
    pub ty: WeightType,
    /// HF order: the last dimension is the contiguous one (`[n_out, n_in]` for a linear layer).
    pub shape: Vec<usize>,
    bytes: TensorBytes,
}

impl WeightTensor {
    /// Checks that `bytes` holds exactly the tensor's data for `ty` and `shape`.
    pub fn new(name: String, ty: WeightType, shape: Vec<usize>, bytes: TensorBytes) -> Result<Self> {
        let cols = shape.last().copied().unwrap_or(1);
        let rows = shape[..shape.len().saturating_sub(1)]
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| Error::tensor(format!("tensor {name}: shape {shape:?} overflows")))?;
        let row_bytes = ty.row_bytes(cols).ok_or_else(|| {
            Error::tensor(format!(
                "tensor {name}: {cols} columns is not a whole number of {} blocks",
                ty.name()
            ))
        })?;
        let need = row_bytes
            .checked_mul(rows)
            .ok_or_else(|| Error::tensor(format!("tensor {name}: shape {shape:?} overflows")))?;
        let have = match &bytes {
            TensorBytes::Mapped { len, .. } => *len,
            TensorBytes::Owned(v) => v.len(),
        };
        if need != have {
            return Err(Error::tensor(format!(
                "tensor {name}: shape {shape:?} of {} needs {need} bytes, the file holds {have}",
                ty.name()
            )));
        }
        Ok(WeightTensor { name, ty, shape, bytes })
    }

    /// Matrix `e` of a stack of matrices (shape `[n, rows, cols]`: a mixture's experts in
    /// one tensor, as GGUF stores them), as a tensor of its own: a view of the same mapped
    /// bytes, or a copy of owned ones.
    pub fn matrix_of_stack(&self, e: usize) -> Result<WeightTensor> {
        let [n, rows, cols] = self.shape[..] else {
            return Err(Error::tensor(format!("tensor {}: shape {:?} is not a stack of matrices", self.name, self.shape)));
        };
        if e >= n {
            return Err(Error::tensor(format!("tensor {}: matrix {e} of a stack of {n}", self.name)));
        }
        // `new` checked that n * rows rows of `row_bytes` fill the bytes.
        let len = self.row_bytes() * rows;
        let bytes = match &self.bytes {
            TensorBytes::Mapped { map, offset, .. } => TensorBytes::Mapped { map: map.clone(), offset: offset + e * len, len },
            TensorBytes::Owned(v) => TensorBytes::Owned(Arc::new(v[e * len..(e + 1) * len].to_vec())),
        };
        WeightTensor::new(format!("{}[{e}]", self.name), self.ty, vec![rows, cols], bytes)
    }

    /// Whether the bytes are a window of a memory map, which lives as long as the pack: their
    /// address then names them for that long. Owned bytes may be freed, and their address
    /// reused, as soon as this tensor is dropped.
    pub fn is_mapped(&self) -> bool {
        matches!(self.bytes, TensorBytes::Mapped { .. })
    }

    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            TensorBytes::Mapped { map, offset, len } => &map[*offset..*offset + *len],
            TensorBytes::Owned(v) => v,
        }
    }

    /// Hands the mapped pages under bytes `range` of the tensor back to the kernel (a
    /// backend that has copied them elsewhere calls this, so that the process does not hold
    /// both); a later read faults them in again from the file, unchanged. Owned bytes stay.
    pub fn release_pages(&self, range: std::ops::Range<usize>) {
        if let TensorBytes::Mapped { map, offset, len } = &self.bytes {
            if range.start < range.end && range.end <= *len {
                // SAFETY: the map is a read-only mapping of the pack's file, never written
                // through, so dropping its pages loses nothing: the next read of them gets the
                // file's bytes again. memmap2 widens the range to whole pages; the neighbours
                // this drops are refaulted the same way.
                let _ = unsafe {
                    map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset + range.start, range.end - range.start)
                };
            }
        }
    }

    /// Number of rows (product of all but the last dimension).
    pub fn rows(&self) -> usize {
        self.shape[..self.shape.len().saturating_sub(1)].iter().product()
    }

    /// Number of columns (the last, contiguous dimension).
    pub fn cols(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    pub fn row_bytes(&self) -> usize {
        // Validated in `new`.
        self.ty.row_bytes(self.cols()).unwrap_or(0)
    }

    /// The raw bytes of row `r` (caller keeps `r < rows()`).
    pub fn row(&self, r: usize) -> &[u8] {
        let rb = self.row_bytes();
        &self.bytes()[r * rb..(r + 1) * rb]
    }

    /// Dequantizes row `r` into `dst` (`dst.len() == cols()`).
    pub fn row_f32(&self, r: usize, dst: &mut [f32]) {
        dequantize_row(self.ty, self.row(r), dst);
    }

    /// The whole tensor as f32 (for small tensors: norms, biases).
    pub fn to_f32(&self) -> Vec<f32> {
        let cols = self.cols();
        let mut out = vec![0.0f32; self.rows() * cols];
        for (r, chunk) in out.chunks_exact_mut(cols.max(1)).enumerate() {
            self.row_f32(r, chunk);
        }
        out
    }

    /// Checks the shape against what the model's config implies.
    pub fn expect_shape(&self, want: &[usize]) -> Result<()> {
        if self.shape != want {
            return Err(Error::tensor(format!(
                "tensor {}: shape {:?}, the config implies {:?}",
                self.name, self.shape, want
            )));
        }
        Ok(())
    }
}
