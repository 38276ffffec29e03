//! Weight element types and block formats (GGML layouts), and dequantization of one row.
//!
//! The layouts and the arithmetic follow ggml's reference code (ggml/src/ggml-quants.c:
//! `dequantize_row_q4_0`, `_q4_1`, `_q5_0`, `_q5_1`, `_q8_0`, `_q4_K`, `_q5_K`, `_q6_K`, `_mxfp4`; the block structs in
//! ggml-common.h). All multi-byte fields are little-endian. The unit tests in
//! tests/quant_dequant.rs compare against gguf-py's numpy `gguf.quants.dequantize`.
//!
//! # One row per type
//!
//! Everything the library knows about a type is its row of [`FORMATS`] (ggml's `type_traits[]`):
//! its names, its block geometry, its dequantization, and the kernels each instruction set has
//! for it, at both precisions, and on the GPU. The dispatchers (row_dot.rs's `RowKernel`, int8.rs's
//! `Int8Kernel`, packed/, the GPU's weights and shaders) read the row; none of them matches on
//! the type. A column a type has no kernel in says so, with the reason ([`Kernel::Absent`]),
//! and the column says what runs in its place; tests/quant_table.rs lists every such gap.
//!
//! A new type is a variant of [`WeightType`], its row, and its kernels.

mod dequant;

pub use dequant::dequantize_row;

use crate::backend::host::int8::{self, FastKernels};
use crate::backend::host::packed::GroupFormat;
use crate::backend::host::portable;
use crate::backend::host::row_dot::ExactKernels;
#[cfg(target_arch = "aarch64")]
use crate::backend::host::neon_int8;
#[cfg(target_arch = "x86_64")]
use crate::backend::host::{avx2, avx2_int8, avx2_k};

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
    /// 32 elements: an E8M0 scale byte, 32 x 4-bit E2M1 values (the OCP microscaling format).
    MXFP4,
}

/// The values of MXFP4's 4-bit E2M1 codes, doubled to be integers (ggml-common.h
/// `kvalues_mxfp4`): code c is sign bit 3, magnitude 0, 0.5, 1, 1.5, 2, 3, 4, 6 times two. The
/// halving is in the scale ([`e8m0_half`]).
pub const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Half the value of an E8M0 scale byte, 2^(e - 127) / 2 (ggml-impl.h
/// `ggml_e8m0_to_fp32_half`): the f32 with exponent field e - 1, or for e < 2 the subnormal
/// 2^(e - 128) (bits 0x00200000 << e).
#[inline(always)]
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 { 0x0020_0000u32 << e } else { (e as u32 - 1) << 23 };
    f32::from_bits(bits)
}

/// Elements per block of the K-quants (ggml-common.h `QK_K`).
pub const QK_K: usize = 256;
/// Elements per block of the legacy quants (ggml-common.h `QK4_0`, `QK8_0`, ...).
pub const QK: usize = 32;

impl WeightType {
    /// Every type, in the order of [`FORMATS`]: the floats, then the block formats.
    pub const ALL: [WeightType; ROWS.len()] = {
        let mut all = [WeightType::F32; ROWS.len()];
        let mut i = 0;
        while i < all.len() {
            all[i] = ROWS[i].ty;
            i += 1;
        }
        all
    };

    /// The type's row of [`FORMATS`].
    #[inline]
    pub fn format(self) -> &'static Format {
        &FORMATS[self as usize]
    }

    /// The type for a ggml type id (ggml.h `enum ggml_type`), or None for ids we do not implement.
    pub fn from_ggml_type(id: u32) -> Option<WeightType> {
        FORMATS.iter().find(|f| f.ggml_type == id).map(|f| f.ty)
    }

    /// The ggml type id (inverse of [`WeightType::from_ggml_type`]).
    pub fn ggml_type(self) -> u32 {
        self.format().ggml_type
    }

    /// Lower-case name as ggml prints it (`ggml_type_name`): "f32", "q4_1", "q6_K", ...
    pub fn name(self) -> &'static str {
        self.format().name
    }

    /// Whether the type is a block format (8 bits or fewer per weight), not a float type.
    pub fn is_quantized(self) -> bool {
        self.format().layout != Layout::Float
    }

    /// Elements per block: 1 for the float types, 32 or 256 for the block formats.
    pub fn block_elems(self) -> usize {
        self.format().block_elems
    }

    /// Bytes per block (sizeof the ggml-common.h block struct).
    pub fn block_bytes(self) -> usize {
        self.format().block_bytes
    }

    /// Bytes of a row of `n_elems` elements; None if `n_elems` is not a whole number of blocks
    /// or the size overflows `usize`.
    pub fn row_bytes(self, n_elems: usize) -> Option<usize> {
        let f = self.format();
        // Blocks hold a power of two elements (checked when the crate compiles): a mask and a
        // shift, not a division by a value read from the row (a matmul asks for each tile).
        if n_elems & (f.block_elems - 1) != 0 {
            return None;
        }
        (n_elems >> f.block_elems.trailing_zeros()).checked_mul(f.block_bytes)
    }
}

impl std::fmt::Display for WeightType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a type's elements are stored, which decides its kernels' arithmetic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One float per element: f32 activations at both precisions (nothing to quantize against).
    Float,
    /// 32-element blocks with one scale (and one min) each: at `fast`, one integer sum per block
    /// (int8.rs's block sums), which the group kernels (packed/) take.
    Blocks32,
    /// 256-element super-blocks whose sub-blocks have scales of their own: at `fast`, Q4_K's and
    /// Q5_K's 32-element blocks take block sums as the 32-element formats do, Q6_K's 16-element
    /// halves sums per 4-element lane (int8.rs's lane sums; `Format::block_sums`).
    SuperBlocks,
}

/// One cell of a row's kernel columns.
#[derive(Clone, Copy, Debug)]
pub enum Kernel<F> {
    /// The type's own kernel on this instruction set.
    Own(F),
    /// The type's own kernel, compiled only for the instruction set's architecture, which is not
    /// this build's.
    OtherArch,
    /// No kernel of its own, for the reason given: what the column names runs in its place.
    Absent(&'static str),
}

impl<F: Copy> Kernel<F> {
    /// The kernel, where this build has it.
    #[inline]
    pub fn get(&self) -> Option<F> {
        match *self {
            Kernel::Own(f) => Some(f),
            Kernel::OtherArch | Kernel::Absent(_) => None,
        }
    }

    /// Why the type has no kernel of its own here; None where it has one (in any build).
    pub fn absent(&self) -> Option<&'static str> {
        match *self {
            Kernel::Absent(why) => Some(why),
            Kernel::Own(_) | Kernel::OtherArch => None,
        }
    }
}

/// How the GPU backend reads a type (src/backend/gpu/).
#[derive(Clone, Copy, Debug)]
pub struct GpuLoader {
    /// The WGSL function of shaders/formats.wgsl that dequantizes one unit of a row.
    pub loader: &'static str,
    /// The scale of a block that is not a whole number of 4-byte words: it is moved out of the
    /// block at upload (weights.rs); None where the block is word-sized.
    pub moved_scale: Option<MovedScale>,
}

/// Where a block's scale sits, and its size: what the upload moves out of each block so that
/// the rest is whole words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MovedScale {
    /// Its byte offset in the block.
    pub at: usize,
    /// 2 for an f16 scale, 1 for an E8M0 one.
    pub bytes: usize,
}

impl MovedScale {
    /// An f16 scale at byte `at`.
    pub const fn f16(at: usize) -> Option<MovedScale> {
        Some(MovedScale { at, bytes: 2 })
    }

    /// A one-byte E8M0 scale at byte `at`.
    pub const fn e8m0(at: usize) -> Option<MovedScale> {
        Some(MovedScale { at, bytes: 1 })
    }
}

/// A type's row: everything the library knows about it (see the module notes).
pub struct Format {
    pub ty: WeightType,
    /// Lower-case name as ggml prints it (`ggml_type_name`).
    pub name: &'static str,
    /// ggml.h's `enum ggml_type` id.
    pub ggml_type: u32,
    pub layout: Layout,
    /// Elements per block (1 for the float types).
    pub block_elems: usize,
    /// Bytes per block (sizeof the ggml-common.h block struct).
    pub block_bytes: usize,
    /// Whether an element is `scale * q + min` with a min of its block's (Q4_1, Q5_1) or
    /// sub-block's (Q4_K, Q5_K): the kernels then read the activations' block sums.
    pub has_min: bool,
    /// At `fast`, whether the integer kernels add a 32-element block's products into one exact
    /// sum before its float step (int8.rs's block sums, what the group kernels of packed/
    /// take); else they keep a sum per 4-element lane (lane sums: Q6_K, whose 16-element halves
    /// have scales of their own). False for the float types, which have no integer kernels.
    pub block_sums: bool,
    /// One row of `dst.len()` elements from exactly `row_bytes(dst.len())` bytes (dequant.rs).
    pub dequantize: fn(&[u8], &mut [f32]),
    /// The `exact` precision's kernels (f32 activations) on each instruction set.
    pub exact: ExactKernels,
    /// The `fast` precision's kernels (8-bit activations) on each instruction set.
    pub fast: FastKernels,
    /// The GPU backend's loader.
    pub gpu: Kernel<GpuLoader>,
}

impl Format {
    /// The row's kernel columns by name, each with None where the type has a kernel of its own
    /// there (in this build or in one for the column's architecture) and the reason where it has
    /// none: what tests/quant_table.rs walks to list the gaps.
    pub fn columns(&self) -> [(&'static str, Option<&'static str>); 10] {
        let (e, f) = (&self.exact, &self.fast);
        [
            ("exact portable", None),
            ("exact AVX2", e.avx2.absent()),
            ("exact AVX-512 one row", e.avx512_one_row.absent()),
            ("exact AVX-512 rows", e.avx512_rows.absent()),
            ("fast portable", f.portable.absent()),
            ("fast AVX2", f.avx2.absent()),
            ("fast AVX-512 VNNI", f.vnni.absent()),
            ("fast NEON", f.neon.absent()),
            ("fast groups (packed/)", f.groups.absent()),
            ("GPU", self.gpu.absent()),
        ]
    }
}

/// `Kernel::Own(f)` in an x86_64 build, `Kernel::OtherArch` in others (where `f` is not
/// compiled).
#[cfg(target_arch = "x86_64")]
macro_rules! x86 {
    ($f:expr) => {
        Kernel::Own($f)
    };
}
#[cfg(not(target_arch = "x86_64"))]
macro_rules! x86 {
    ($f:expr) => {
        Kernel::OtherArch
    };
}

/// `Kernel::Own(f)` in an aarch64 build, `Kernel::OtherArch` in others (where `f` is not
/// compiled).
#[cfg(target_arch = "aarch64")]
macro_rules! arm {
    ($f:expr) => {
        Kernel::Own($f)
    };
}
#[cfg(not(target_arch = "aarch64"))]
macro_rules! arm {
    ($f:expr) => {
        Kernel::OtherArch
    };
}

// Why a row has no kernel of its own in a column, where several rows share the reason.
const FLOAT_FAST: &str = "a float weight has nothing to quantize against: at `fast` its matrices take the `exact` f32 \
     kernels";
const GROUPS_ON_VNNI: &str = "on VNNI the group kernels (packed/) take these matrices; the rows they leave (after a \
     matrix's last group, or while its side table is built) take the AVX2 kernel";
const NO_GROUPS_FOR_LANE_SUMS: &str = "the group kernels keep one weight row per i32 lane, which the block-sum \
     arithmetic allows; Q6_K's lane sums keep 8 lanes per row";
const FLOAT_REGISTERS: &str = "the float formats gain nothing from more registers: their AVX2 kernel takes one activation \
     row at a time, converting being cheap (avx2_k.rs's `float`)";
const ONE_ROW_BLOCKS32: &str = "the 16-lane one-row form (avx2.rs's `one_row_512`) is for the 32-element formats without a min";
const ONE_ROW_NO_MIN: &str = "the 16-lane one-row form (avx2.rs's `one_row_512`) has no min chain";
const Q8_0_ONE_ROW: &str = "measured slower: the AVX2 kernel, which widens its bytes straight from memory, was about a \
     tenth faster than the 16-lane one-row form (perf, Gemma3's output matrix)";
const MXFP4_FAST_NEON: &str = "not written yet: the portable integer kernel runs, the same bits (its E2M1 values from a \
     16-entry table, which NEON's `tbl` would read as the AVX2 kernel reads it with `vpshufb`)";
const MXFP4_FAST_VNNI: &str = "the AVX2 kernel runs, the same bits: the other block-sum formats take VNNI through the group \
     kernels (packed/), which MXFP4 has not yet";
const MXFP4_GROUPS: &str = "not written yet: the row kernels take the whole matrix (the group kernels would need the \
     E2M1 table in their decoding)";
const ONE_ROW_NOT_MEASURED: &str = "not measured: the 16-lane one-row form was timed on Q5_0 (faster) and Q8_0 (slower) only";

/// One row per type, in the order of [`WeightType`]'s variants.
pub static FORMATS: [Format; ROWS.len()] = ROWS;

/// The rows, as a constant that `WeightType::ALL` and the checks below read when the crate
/// compiles.
const ROWS: [Format; 12] = [
    Format {
        ty: WeightType::F32,
        name: "f32",
        ggml_type: 0,
        layout: Layout::Float,
        block_elems: 1,
        block_bytes: 4,
        has_min: false,
        block_sums: false,
        dequantize: dequant::row_f32,
        exact: ExactKernels {
            portable: portable::f32,
            avx2: x86!(avx2_k::f32),
            avx512_one_row: Kernel::Absent(FLOAT_REGISTERS),
            avx512_rows: Kernel::Absent(FLOAT_REGISTERS),
        },
        fast: FastKernels {
            portable: Kernel::Absent(FLOAT_FAST),
            avx2: Kernel::Absent(FLOAT_FAST),
            vnni: Kernel::Absent(FLOAT_FAST),
            neon: Kernel::Absent(FLOAT_FAST),
            groups: Kernel::Absent(FLOAT_FAST),
        },
        gpu: Kernel::Own(GpuLoader { loader: "load_f32", moved_scale: None }),
    },
    Format {
        ty: WeightType::F16,
        name: "f16",
        ggml_type: 1,
        layout: Layout::Float,
        block_elems: 1,
        block_bytes: 2,
        has_min: false,
        block_sums: false,
        dequantize: dequant::row_f16,
        exact: ExactKernels {
            portable: portable::f16,
            avx2: x86!(avx2_k::f16),
            avx512_one_row: Kernel::Absent(FLOAT_REGISTERS),
            avx512_rows: Kernel::Absent(FLOAT_REGISTERS),
        },
        fast: FastKernels {
            portable: Kernel::Absent(FLOAT_FAST),
            avx2: Kernel::Absent(FLOAT_FAST),
            vnni: Kernel::Absent(FLOAT_FAST),
            neon: Kernel::Absent(FLOAT_FAST),
            groups: Kernel::Absent(FLOAT_FAST),
        },
        gpu: Kernel::Own(GpuLoader { loader: "load_f16", moved_scale: None }),
    },
    Format {
        ty: WeightType::BF16,
        name: "bf16",
        ggml_type: 30,
        layout: Layout::Float,
        block_elems: 1,
        block_bytes: 2,
        has_min: false,
        block_sums: false,
        dequantize: dequant::row_bf16,
        exact: ExactKernels {
            portable: portable::bf16,
            avx2: x86!(avx2_k::bf16),
            avx512_one_row: Kernel::Absent(FLOAT_REGISTERS),
            avx512_rows: Kernel::Absent(FLOAT_REGISTERS),
        },
        fast: FastKernels {
            portable: Kernel::Absent(FLOAT_FAST),
            avx2: Kernel::Absent(FLOAT_FAST),
            vnni: Kernel::Absent(FLOAT_FAST),
            neon: Kernel::Absent(FLOAT_FAST),
            groups: Kernel::Absent(FLOAT_FAST),
        },
        gpu: Kernel::Own(GpuLoader { loader: "load_bf16", moved_scale: None }),
    },
    Format {
        ty: WeightType::Q8_0,
        name: "q8_0",
        ggml_type: 8,
        layout: Layout::Blocks32,
        block_elems: QK,
        // block_q8_0 { ggml_half d; int8_t qs[32]; }
        block_bytes: 2 + QK,
        has_min: false,
        block_sums: true,
        dequantize: dequant::row_q8_0,
        exact: ExactKernels {
            portable: portable::q8_0,
            avx2: x86!(avx2::q8_0),
            avx512_one_row: Kernel::Absent(Q8_0_ONE_ROW),
            avx512_rows: x86!(avx2::q8_0_wide),
        },
        fast: FastKernels {
            portable: Kernel::Own(int8::decode_q8_0),
            avx2: x86!(avx2_int8::q8_0_summed_maddubs),
            vnni: Kernel::Absent(GROUPS_ON_VNNI),
            neon: arm!(neon_int8::q8_0_neon),
            groups: Kernel::Own(GroupFormat::Q8_0),
        },
        gpu: Kernel::Own(GpuLoader { loader: "load_q8_0", moved_scale: MovedScale::f16(0) }),
    },
    Format {
        ty: WeightType::Q4_0,
        name: "q4_0",
        ggml_type: 2,
        layout: Layout::Blocks32,
        block_elems: QK,
        // block_q4_0 { ggml_half d; uint8_t qs[16]; }
        block_bytes: 2 + QK / 2,
        has_min: false,
        block_sums: true,
        dequantize: dequant::row_q4_0,
        exact: ExactKernels {
            portable: portable::q4_0,
            avx2: x86!(avx2::q4_0),
            avx512_one_row: Kernel::Absent(ONE_ROW_NOT_MEASURED),
            avx512_rows: x86!(avx2::q4_0_wide),
        },
        fast: FastKernels {
            portable: Kernel::Own(int8::decode_q4_0),
            avx2: x86!(avx2_int8::q4_0_summed_maddubs),
            vnni: Kernel::Absent(GROUPS_ON_VNNI),
            neon: arm!(neon_int8::q4_0_neon),
            groups: Kernel::Own(GroupFormat::Q4_0),
        },
        gpu: Kernel::Own(GpuLoader { loader: "load_q4_0", moved_scale: MovedScale::f16(0) }),
    },
    Format {
        ty: WeightType::Q4_1,
        name: "q4_1",
        ggml_type: 3,
        layout: Layout::Blocks32,
        block_elems: QK,
        // block_q4_1 { ggml_half d, m; uint8_t qs[16]; }
        block_bytes: 4 + QK / 2,
        has_min: true,
        block_sums: true,
        dequantize: dequant::row_q4_1,
        exact: ExactKernels {
            portable: portable::q4_1,
            avx2: x86!(avx2::q4_1),
            avx512_one_row: Kernel::Absent(ONE_ROW_NO_MIN),
            avx512_rows: x86!(avx2::q4_1_wide),
        },
        fast: FastKernels {
            portable: Kernel::Own(int8::decode_q4_1),
            avx2: x86!(avx2_int8::q4_1_summed_maddubs),
            vnni: Kernel::Absent(GROUPS_ON_VNNI),
            neon: arm!(neon_int8::q4_1_neon),
            groups: Kernel::Own(GroupFormat::Q4_1),
        },
        gpu: Kernel::Own(GpuLoader { loader: "load_q4_1", moved_scale: None }),
    },
    Format {
        ty: WeightType::Q5_0,
        name: "q5_0",
        ggml_type: 6,
        layout: Layout::Blocks32,
        block_elems: QK,
        // block_q5_0 { ggml_half d; uint8_t qh[4]; uint8_t qs[16]; }
        block_bytes: 2 + 4 + QK / 2,
        has_min: false,
        block_sums: true,
        dequantize: dequant::row_q5_0,
        exact: ExactKernels {
            portable: portable::q5_0,
            avx2: x86!(avx2::q5_0),
            avx512_one_row: x86!(avx2::q5_0_one512),
            avx512_rows: x86!(avx2::q5_0_wide),
        },
        fast: FastKernels {
            portable: Kernel::Own(int8::decode_q5_0),
            avx2: x86!(avx2_int8::q5_0_summed_maddubs),
            vnni: Kernel::Absent(GROUPS_ON_VNNI),
            neon: arm!(neon_int8::q5_0_neon),
            groups: Kernel::Own(GroupFormat::Q5_0),
        },
        gpu: Kernel::Own(GpuLoader { loader: "load_q5_0", moved_scale: MovedScale::f16(0) }),
    },
    Format {
        ty: WeightType::Q5_1,
        name: "q5_1",
        ggml_type: 7,
        layout: Layout::Blocks32,
        block_elems: QK,
        // block_q5_1 { ggml_half d, m; uint8_t qh[4]; uint8_t qs[16]; }
        block_bytes: 4 + 4 + QK / 2,
        has_min: true,
        block_sums: true,
        dequantize: dequant::row_q5_1,
        exact: ExactKernels {
            portable: portable::q5_1,
            avx2: x86!(avx2::q5_1),
            avx512_one_row: Kernel::Absent(ONE_ROW_NO_MIN),
            avx512_rows: x86!(avx2::q5_1_wide),
        },
        fast: FastKernels {
            portable: Kernel::Own(int8::decode_q5_1),
            avx2: x86!(avx2_int8::q5_1_summed_maddubs),
            vnni: Kernel::Absent(GROUPS_ON_VNNI),
            neon: arm!(neon_int8::q5_1_neon),
            groups: Kernel::Own(GroupFormat::Q5_1),
        },
        gpu: Kernel::Own(GpuLoader { loader: "load_q5_1", moved_scale: None }),
    },
    Format {
        ty: WeightType::Q4_K,
        name: "q4_K",
        ggml_type: 12,
        layout: Layout::SuperBlocks,
        block_elems: QK_K,
        // block_q4_K { ggml_half d, dmin; uint8_t scales[12]; uint8_t qs[128]; }
        block_bytes: 4 + 12 + QK_K / 2,
        has_min: true,
        block_sums: true,
        dequantize: dequant::row_q4_k,
        exact: ExactKernels {
            portable: portable::q4_k,
            avx2: x86!(avx2_k::q4_k),
            avx512_one_row: Kernel::Absent(ONE_ROW_BLOCKS32),
            avx512_rows: x86!(avx2_k::q4_k_wide),
        },
        fast: FastKernels {
            portable: Kernel::Own(int8::decode_q4_k),
            avx2: x86!(avx2_int8::q4_k_summed_maddubs),
            vnni: Kernel::Absent(GROUPS_ON_VNNI),
            neon: arm!(neon_int8::q4_k_neon),
            groups: Kernel::Own(GroupFormat::Q4_K),
        },
        gpu: Kernel::Own(GpuLoader { loader: "load_q4_k", moved_scale: None }),
    },
    Format {
        ty: WeightType::Q5_K,
        name: "q5_K",
        ggml_type: 13,
        layout: Layout::SuperBlocks,
        block_elems: QK_K,
        // block_q5_K { ggml_half d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; }
        block_bytes: 4 + 12 + QK_K / 8 + QK_K / 2,
        has_min: true,
        block_sums: true,
        dequantize: dequant::row_q5_k,
        exact: ExactKernels {
            portable: portable::q5_k,
            avx2: x86!(avx2_k::q5_k),
            avx512_one_row: Kernel::Absent(ONE_ROW_BLOCKS32),
            avx512_rows: x86!(avx2_k::q5_k_wide),
        },
        fast: FastKernels {
            portable: Kernel::Own(int8::decode_q5_k),
            avx2: x86!(avx2_int8::q5_k_summed_maddubs),
            vnni: Kernel::Absent(GROUPS_ON_VNNI),
            neon: arm!(neon_int8::q5_k_neon),
            groups: Kernel::Own(GroupFormat::Q5_K),
        },
        gpu: Kernel::Own(GpuLoader { loader: "load_q5_k", moved_scale: None }),
    },
    Format {
        ty: WeightType::Q6_K,
        name: "q6_K",
        ggml_type: 14,
        layout: Layout::SuperBlocks,
        block_elems: QK_K,
        // block_q6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; ggml_half d; }
        block_bytes: QK_K / 2 + QK_K / 4 + QK_K / 16 + 2,
        has_min: false,
        block_sums: false,
        dequantize: dequant::row_q6_k,
        // d is the block's last 2 bytes.
        exact: ExactKernels {
            portable: portable::q6_k,
            avx2: x86!(avx2_k::q6_k),
            avx512_one_row: Kernel::Absent(ONE_ROW_BLOCKS32),
            avx512_rows: x86!(avx2_k::q6_k_wide),
        },
        fast: FastKernels {
            portable: Kernel::Own(int8::decode_q6_k),
            avx2: x86!(avx2_int8::q6_k_maddubs),
            vnni: x86!(avx2_int8::q6_k_vnni),
            neon: arm!(neon_int8::q6_k_neon),
            groups: Kernel::Absent(NO_GROUPS_FOR_LANE_SUMS),
        },
        gpu: Kernel::Own(GpuLoader { loader: "load_q6_k", moved_scale: MovedScale::f16(QK_K / 2 + QK_K / 4 + QK_K / 16) }),
    },
    Format {
        ty: WeightType::MXFP4,
        name: "mxfp4",
        ggml_type: 39,
        layout: Layout::Blocks32,
        block_elems: QK,
        // block_mxfp4 { uint8_t e; uint8_t qs[16]; }
        block_bytes: 1 + QK / 2,
        has_min: false,
        block_sums: true,
        dequantize: dequant::row_mxfp4,
        exact: ExactKernels {
            portable: portable::mxfp4,
            avx2: x86!(avx2::mxfp4),
            avx512_one_row: Kernel::Absent(ONE_ROW_NOT_MEASURED),
            avx512_rows: x86!(avx2::mxfp4_wide),
        },
        fast: FastKernels {
            portable: Kernel::Own(int8::decode_mxfp4),
            avx2: x86!(avx2_int8::mxfp4_summed_maddubs),
            vnni: Kernel::Absent(MXFP4_FAST_VNNI),
            neon: Kernel::Absent(MXFP4_FAST_NEON),
            groups: Kernel::Absent(MXFP4_GROUPS),
        },
        gpu: Kernel::Own(GpuLoader { loader: "load_mxfp4", moved_scale: MovedScale::e8m0(0) }),
    },
];

// Row i is the type whose discriminant is i (`WeightType::format` indexes by it), and the
// geometry is consistent: checked when the crate compiles.
const _: () = {
    let mut i = 0;
    while i < ROWS.len() {
        let f = &ROWS[i];
        assert!(f.ty as usize == i, "FORMATS is not in the order of WeightType's variants");
        assert!((f.block_elems == 1) == matches!(f.layout, Layout::Float));
        assert!(f.block_elems.is_power_of_two(), "row_bytes takes a block's elements as a shift");
        assert!(matches!(f.layout, Layout::Float) || f.block_elems == if matches!(f.layout, Layout::Blocks32) { QK } else { QK_K });
        assert!(f.block_sums != matches!(f.layout, Layout::Float) || matches!(f.ty, WeightType::Q6_K), "only Q6_K keeps lane sums");
        i += 1;
    }
};
