//! Weights on the device in their stored block format, re-laid out only as far as 4-byte
//! alignment needs, and split by rows across buffers that each fit one binding.
//!
//! A block whose size is a whole number of words (Q4_1: 20 bytes, Q5_1: 24, Q4_K: 144, Q5_K:
//! 176, F32) is copied as it is. Q8_0 (34 bytes), Q4_0 (18), Q5_0 (22) and Q6_K (210) carry one
//! 2-byte f16 scale that breaks the alignment, MXFP4 (17) a 1-byte E8M0 one: it is moved out of
//! the block into a run of halves (or bytes) after the chunk's blocks (where it sits in the block,
//! and its size, is the type's row in quant/, `GpuLoader::moved_scale`), so the chunk holds
//! exactly the file's bytes plus at most 6 bytes of padding. F16 and BF16 rows are copied as they
//! are, padded at the chunk's end. The shaders dequantize (shaders/formats.wgsl); there is never
//! an f32 copy of a quantized weight on the device.

use crate::backend::gpu::device::Gpu;
use crate::error::{Error, Result, Status};
use crate::pack::tensor::WeightTensor;
use crate::quant::{Kernel, MovedScale, WeightType};

/// A matrix on the device: `rows x cols` in type `ty`, in chunks of whole rows.
pub struct GpuWeight {
    pub ty: WeightType,
    pub rows: usize,
    pub cols: usize,
    pub chunks: Vec<Chunk>,
    /// Device bytes of all chunks.
    pub bytes: u64,
}

pub struct Chunk {
    pub buf: wgpu::Buffer,
    /// The first row of the matrix this chunk holds, and how many.
    pub row0: usize,
    pub rows: usize,
    /// Word offset of the moved scales (0 when the type moves none).
    pub scale_word: u32,
}

/// Units (32 elements for block formats, 1 for float types) per row, as the shaders count them.
pub fn units_per_row(ty: WeightType, cols: usize) -> usize {
    if ty.is_quantized() {
        cols / 32
    } else {
        cols
    }
}

/// Uploads `w`, split so that no chunk exceeds `max_binding` bytes.
pub fn upload(gpu: &Gpu, w: &WeightTensor, max_binding: u64) -> Result<GpuWeight> {
    let (rows, cols, ty) = (w.rows(), w.cols(), w.ty);
    let layout = match ty.format().gpu {
        Kernel::Own(layout) => layout,
        Kernel::OtherArch | Kernel::Absent(_) => {
            let why = ty.format().gpu.absent().unwrap_or("no loader in this build");
            return Err(Error::new(Status::ErrUnsupported, format!("tensor {}: the GPU backend cannot read {ty} weights: {why}", w.name)));
        }
    };
    let row_bytes = w.row_bytes();
    // Room for the padding of the scale run and of the chunk's end.
    let per_chunk = (max_binding.saturating_sub(8) / row_bytes.max(1) as u64) as usize;
    if per_chunk == 0 {
        return Err(Error::new(
            Status::ErrBackendUnavailable,
            format!("tensor {}: a row of {row_bytes} bytes is larger than the GPU's largest binding ({max_binding} bytes)", w.name),
        ));
    }
    let bytes = w.bytes();
    let mut chunks = Vec::new();
    let mut total = 0u64;
    let mut row0 = 0;
    while row0 < rows {
        let n = per_chunk.min(rows - row0);
        let src = &bytes[row0 * row_bytes..(row0 + n) * row_bytes];
        let (data, scale_word) = match layout.moved_scale {
            None => (src.to_vec(), 0),
            Some(MovedScale { at, bytes: n_scale }) => {
                let bb = ty.block_bytes();
                let blocks = src.len() / bb;
                let mut body = Vec::with_capacity(src.len() + 4);
                let mut scales = Vec::with_capacity(blocks * n_scale);
                for b in src.chunks_exact(bb) {
                    body.extend_from_slice(&b[..at]);
                    body.extend_from_slice(&b[at + n_scale..]);
                    scales.extend_from_slice(&b[at..at + n_scale]);
                }
                debug_assert_eq!(body.len() % 4, 0);
                let word = (body.len() / 4) as u32;
                body.extend_from_slice(&scales);
                (body, word)
            }
        };
        let buf = gpu.buffer_with(&data);
        total += buf.size();
        chunks.push(Chunk { buf, row0, rows: n, scale_word });
        row0 += n;
    }
    Ok(GpuWeight { ty, rows, cols, chunks, bytes: total })
}
