//! Weight element types and block formats (GGML layouts), and dequantization of one row.
//!
//! The layouts and the arithmetic follow ggml's reference code (ggml/src/ggml-quants.c:
//! `dequantize_row_q4_0`, `_q4_1`, `_q5_0`, `_q5_1`, `_q8_0`, `_q4_K`, `_q5_K`, `_q6_K`; the block structs in
//! ggml-common.h). All multi-byte fields are little-endian. The unit tests in
//! tests/quant_dequant.rs compare against gguf-py's numpy `gguf.quants.dequantize`.

mod dequant;

pub use dequant::dequantize_row;

/// Element type of a weight tensor: a float type, or a GGML block-quantized format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum WeightType {
    F32,
    F16,
    BF16,
    /// 32 elements: f16 scale, 32 x i8.
    Q8_0,
    /// 32 elements: f16 scale, 32 x 4-bit (offset 8).
    Q4_0,
    /// 32 elements: f16 scale, f16 min, 32 x 4-bit.
    Q4_1,
    /// 32 elements: f16 scale, 32 high bits, 32 x 4-bit low bits (offset 16).
    Q5_0,
    /// 32 elements: f16 scale, f16 min, 32 high bits, 32 x 4-bit low bits (no offset).
    Q5_1,
    /// 256 elements: f16 super-scale and super-min, 8 x 6-bit sub-scales and mins, 256 x 4-bit.
    Q4_K,
    /// 256 elements: Q4_K's scales and mins, 256 high bits, 256 x 4-bit low bits.
    Q5_K,
    /// 256 elements: 256 x 6-bit (4 low bits + 2 high bits), 16 x i8 sub-scales, f16 scale.
    Q6_K,
}

/// Elements per block of the K-quants (ggml-common.h `QK_K`).
pub const QK_K: usize = 256;
/// Elements per block of the legacy quants (ggml-common.h `QK4_0`, `QK8_0`, ...).
pub const QK: usize = 32;

impl WeightType {
    /// Every type: the floats, then the block formats.
    pub const ALL: [WeightType; 11] = [
        WeightType::F32,
        WeightType::F16,
        WeightType::BF16,
        WeightType::Q8_0,
        WeightType::Q4_0,
        WeightType::Q4_1,
        WeightType::Q5_0,
        WeightType::Q5_1,
        WeightType::Q4_K,
        WeightType::Q5_K,
        WeightType::Q6_K,
    ];

    /// The type for a ggml type id (ggml.h `enum ggml_type`), or None for ids we do not implement.
    pub fn from_ggml_type(id: u32) -> Option<WeightType> {
        // Ids from ggml.h: GGML_TYPE_F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7,
        // Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14, BF16 = 30. (4 and 5 are retired Q4_2/Q4_3.)
        Some(match id {
            0 => WeightType::F32,
            1 => WeightType::F16,
            2 => WeightType::Q4_0,
            3 => WeightType::Q4_1,
            6 => WeightType::Q5_0,
            7 => WeightType::Q5_1,
            8 => WeightType::Q8_0,
            12 => WeightType::Q4_K,
            13 => WeightType::Q5_K,
            14 => WeightType::Q6_K,
            30 => WeightType::BF16,
            _ => return None,
        })
    }

    /// The ggml type id (inverse of [`WeightType::from_ggml_type`]).
    pub fn ggml_type(self) -> u32 {
        match self {
            WeightType::F32 => 0,
            WeightType::F16 => 1,
            WeightType::Q4_0 => 2,
            WeightType::Q4_1 => 3,
            WeightType::Q5_0 => 6,
            WeightType::Q5_1 => 7,
            WeightType::Q8_0 => 8,
            WeightType::Q4_K => 12,
            WeightType::Q5_K => 13,
            WeightType::Q6_K => 14,
            WeightType::BF16 => 30,
        }
    }

    /// Lower-case name as ggml prints it (`ggml_type_name`): "f32", "q4_1", "q6_K", ...
    pub fn name(self) -> &'static str {
        match self {
            WeightType::F32 => "f32",
            WeightType::F16 => "f16",
            WeightType::BF16 => "bf16",
            WeightType::Q8_0 => "q8_0",
            WeightType::Q4_0 => "q4_0",
            WeightType::Q4_1 => "q4_1",
            WeightType::Q5_0 => "q5_0",
            WeightType::Q5_1 => "q5_1",
            WeightType::Q4_K => "q4_K",
            WeightType::Q5_K => "q5_K",
            WeightType::Q6_K => "q6_K",
        }
    }

    /// Whether the type is a block format (8 bits or fewer per weight), not a float type.
    pub fn is_quantized(self) -> bool {
        self.block_elems() > 1
    }

    /// Elements per block: 1 for the float types, 32 or 256 for the block formats.
    pub fn block_elems(self) -> usize {
        match self {
            WeightType::F32 | WeightType::F16 | WeightType::BF16 => 1,
            WeightType::Q8_0 | WeightType::Q4_0 | WeightType::Q4_1 | WeightType::Q5_0 | WeightType::Q5_1 => QK,
            WeightType::Q4_K | WeightType::Q5_K | WeightType::Q6_K => QK_K,
        }
    }

    /// Bytes per block (sizeof the ggml-common.h block struct).
    pub fn block_bytes(self) -> usize {
        match self {
            WeightType::F32 => 4,
            WeightType::F16 | WeightType::BF16 => 2,
            // block_q8_0 { ggml_half d; int8_t qs[32]; }
            WeightType::Q8_0 => 2 + QK,
            // block_q4_0 { ggml_half d; uint8_t qs[16]; }
            WeightType::Q4_0 => 2 + QK / 2,
            // block_q4_1 { ggml_half d, m; uint8_t qs[16]; }
            WeightType::Q4_1 => 4 + QK / 2,
            // block_q5_0 { ggml_half d; uint8_t qh[4]; uint8_t qs[16]; }
            WeightType::Q5_0 => 2 + 4 + QK / 2,
            // block_q5_1 { ggml_half d, m; uint8_t qh[4]; uint8_t qs[16]; }
            WeightType::Q5_1 => 4 + 4 + QK / 2,
            // block_q4_K { ggml_half d, dmin; uint8_t scales[12]; uint8_t qs[128]; }
            WeightType::Q4_K => 4 + 12 + QK_K / 2,
            // block_q5_K { ggml_half d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; }
            WeightType::Q5_K => 4 + 12 + QK_K / 8 + QK_K / 2,
            // block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; ggml_half d; }
            WeightType::Q6_K => QK_K / 2 + QK_K / 4 + QK_K / 16 + 2,
        }
    }

    /// Bytes of a row of `n_elems` elements; None if `n_elems` is not a whole number of blocks
    /// or the size overflows `usize`.
    pub fn row_bytes(self, n_elems: usize) -> Option<usize> {
        let block = self.block_elems();
        if !n_elems.is_multiple_of(block) {
            return None;
        }
        (n_elems / block).checked_mul(self.block_bytes())
    }
}

impl std::fmt::Display for WeightType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
