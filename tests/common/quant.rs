//! Random weight rows of every type and random activations, shared by the kernel tests.

use std::sync::Arc;

use half::{bf16, f16};
use packlm::pack::tensor::{TensorBytes, WeightTensor};
use packlm::quant::WeightType;

use super::Rng;

pub const ALL: [WeightType; WeightType::ALL.len()] = WeightType::ALL;

pub fn put_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

/// A random row of `n` elements: random quant bits, scales set to finite f16 values of random
/// sign and size (random bytes would give inf/NaN scales) or MXFP4's to moderate powers of two,
/// floats finite.
pub fn random_row(rng: &mut Rng, ty: WeightType, n: usize) -> Vec<u8> {
    let scale = |rng: &mut Rng| rng.sym() * 0.05 * (1 << (rng.next() % 6)) as f32;
    match ty {
        WeightType::F32 => (0..n).flat_map(|_| rng.sym().to_le_bytes()).collect(),
        WeightType::F16 => (0..n).flat_map(|_| f16::from_f32(rng.sym()).to_le_bytes()).collect(),
        WeightType::BF16 => (0..n).flat_map(|_| bf16::from_f32(rng.sym()).to_le_bytes()).collect(),
        _ => {
            let bb = ty.block_bytes();
            let mut row = rng.bytes(ty.row_bytes(n).unwrap());
            for b in row.chunks_exact_mut(bb) {
                let (d, m) = (scale(rng), scale(rng));
                match ty {
                    WeightType::Q6_K => put_f16(b, bb - 2, d),
                    // An E8M0 scale byte: d = 2^(e - 128) from 2^-8 to 2^-1.
                    WeightType::MXFP4 => b[0] = 120 + (rng.next() % 8) as u8,
                    WeightType::Q4_1 | WeightType::Q5_1 | WeightType::Q4_K | WeightType::Q5_K => {
                        put_f16(b, 0, d);
                        put_f16(b, 2, m);
                    }
                    _ => put_f16(b, 0, d),
                }
            }
            row
        }
    }
}

/// Activations: uniform in [-1, 1) times a per-row power of two from 2^-8 to 2^8.
pub fn random_x(rng: &mut Rng, n: usize) -> Vec<f32> {
    let s = (2.0f32).powi((rng.next() % 17) as i32 - 8);
    (0..n).map(|_| rng.sym() * s).collect()
}

/// The min term of each element's block (Q4_1, Q5_1: m; Q4_K, Q5_K: -(dmin * m_sb)), else 0.
pub fn min_terms(ty: WeightType, w: &[u8], n: usize) -> Vec<f64> {
    let f16_at = |b: &[u8], at: usize| f16::from_le_bytes([b[at], b[at + 1]]).to_f32();
    let mut out = vec![0.0f64; n];
    match ty {
        WeightType::Q4_1 | WeightType::Q5_1 => {
            for (b, o) in w.chunks_exact(ty.block_bytes()).zip(out.chunks_exact_mut(32)) {
                o.fill(f16_at(b, 2) as f64);
            }
        }
        WeightType::Q4_K | WeightType::Q5_K => {
            for (b, o) in w.chunks_exact(ty.block_bytes()).zip(out.chunks_exact_mut(256)) {
                let (dmin, q) = (f16_at(b, 2), &b[4..16]);
                for (j, o) in o.chunks_exact_mut(32).enumerate() {
                    // ggml-quants.c get_scale_min_k4, the min half.
                    let m = if j < 4 { q[j + 4] & 63 } else { (q[j + 4] >> 4) | ((q[j] >> 6) << 4) };
                    o.fill(-((dmin * m as f32) as f64));
                }
            }
        }
        _ => {}
    }
    out
}

pub fn tensor(ty: WeightType, n_out: usize, n_in: usize, rng: &mut Rng) -> WeightTensor {
    let bytes: Vec<u8> = (0..n_out).flat_map(|_| random_row(rng, ty, n_in)).collect();
    WeightTensor::new(format!("{ty}"), ty, vec![n_out, n_in], TensorBytes::Owned(Arc::new(bytes))).unwrap()
}

/// gguf-py's quantization of one type (tests/fixtures/gguf/quant_<type>.bin, written by
/// tests/fixtures/make_quant_vectors.py): the `[rows, cols]` weight, and gguf-py's dequantized
/// values of it. The float fixtures also hold inf and NaN rows.
pub fn gguf_py_vectors(ty: WeightType) -> (WeightTensor, Vec<f32>) {
    let path = super::fixtures().join(format!("gguf/quant_{}.bin", ty.name()));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    assert_eq!(WeightType::from_ggml_type(u32_at(4) as u32), Some(ty), "{}", path.display());
    let (rows, cols) = (u32_at(8), u32_at(12));
    let end = 16 + rows * ty.row_bytes(cols).unwrap();
    let w = WeightTensor::new(ty.name().into(), ty, vec![rows, cols], TensorBytes::Owned(Arc::new(bytes[16..end].to_vec()))).unwrap();
    (w, bytes[end..].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect())
}
