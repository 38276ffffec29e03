//! The tensor type table (ggml.h's `enum ggml_type`): each type's name, elements per block and
//! bytes per block, one row per type, indexed by the enum's value. The rows are ggml.c's
//! `type_traits[]` (names, block sizes) with the block structs' sizes of ggml-common.h (e.g.
//! block_q8_0 = one f16 scale + 32 int8 = 34 bytes); removed types keep their row with ggml's
//! text and zero sizes.

use std::ffi::{c_char, CStr};

struct TypeRow {
    name: &'static CStr,
    /// Elements per block.
    blck_size: i64,
    /// Bytes per block.
    type_size: usize,
    is_quantized: bool,
}

const fn row(name: &'static CStr, blck_size: i64, type_size: usize, is_quantized: bool) -> TypeRow {
    TypeRow { name, blck_size, type_size, is_quantized }
}

const fn removed(name: &'static CStr) -> TypeRow {
    row(name, 0, 0, false)
}

const QK_K: i64 = 256;

/// GGML_TYPE_COUNT rows: row i is the type whose enum value is i.
static TYPES: [TypeRow; 43] = [
    row(c"f32", 1, 4, false),       // 0 GGML_TYPE_F32
    row(c"f16", 1, 2, false),       // 1 GGML_TYPE_F16
    row(c"q4_0", 32, 18, true),     // 2 GGML_TYPE_Q4_0
    row(c"q4_1", 32, 20, true),     // 3 GGML_TYPE_Q4_1
    removed(c"DEPRECATED"),         // 4 (Q4_2)
    removed(c"DEPRECATED"),         // 5 (Q4_3)
    row(c"q5_0", 32, 22, true),     // 6 GGML_TYPE_Q5_0
    row(c"q5_1", 32, 24, true),     // 7 GGML_TYPE_Q5_1
    row(c"q8_0", 32, 34, true),     // 8 GGML_TYPE_Q8_0
    row(c"q8_1", 32, 36, true),     // 9 GGML_TYPE_Q8_1
    row(c"q2_K", QK_K, 84, true),   // 10 GGML_TYPE_Q2_K
    row(c"q3_K", QK_K, 110, true),  // 11 GGML_TYPE_Q3_K
    row(c"q4_K", QK_K, 144, true),  // 12 GGML_TYPE_Q4_K
    row(c"q5_K", QK_K, 176, true),  // 13 GGML_TYPE_Q5_K
    row(c"q6_K", QK_K, 210, true),  // 14 GGML_TYPE_Q6_K
    row(c"q8_K", QK_K, 292, true),  // 15 GGML_TYPE_Q8_K
    row(c"iq2_xxs", QK_K, 66, true), // 16 GGML_TYPE_IQ2_XXS
    row(c"iq2_xs", QK_K, 74, true), // 17 GGML_TYPE_IQ2_XS
    row(c"iq3_xxs", QK_K, 98, true), // 18 GGML_TYPE_IQ3_XXS
    row(c"iq1_s", QK_K, 50, true),  // 19 GGML_TYPE_IQ1_S
    row(c"iq4_nl", 32, 18, true),   // 20 GGML_TYPE_IQ4_NL
    row(c"iq3_s", QK_K, 110, true), // 21 GGML_TYPE_IQ3_S
    row(c"iq2_s", QK_K, 82, true),  // 22 GGML_TYPE_IQ2_S
    row(c"iq4_xs", QK_K, 136, true), // 23 GGML_TYPE_IQ4_XS
    row(c"i8", 1, 1, false),        // 24 GGML_TYPE_I8
    row(c"i16", 1, 2, false),       // 25 GGML_TYPE_I16
    row(c"i32", 1, 4, false),       // 26 GGML_TYPE_I32
    row(c"i64", 1, 8, false),       // 27 GGML_TYPE_I64
    row(c"f64", 1, 8, false),       // 28 GGML_TYPE_F64
    row(c"iq1_m", QK_K, 56, true),  // 29 GGML_TYPE_IQ1_M
    row(c"bf16", 1, 2, false),      // 30 GGML_TYPE_BF16
    removed(c"TYPE_Q4_0_4_4 REMOVED, use Q4_0 with runtime repacking"), // 31
    removed(c"TYPE_Q4_0_4_8 REMOVED, use Q4_0 with runtime repacking"), // 32
    removed(c"TYPE_Q4_0_8_8 REMOVED, use Q4_0 with runtime repacking"), // 33
    row(c"tq1_0", QK_K, 54, true),  // 34 GGML_TYPE_TQ1_0
    row(c"tq2_0", QK_K, 66, true),  // 35 GGML_TYPE_TQ2_0
    removed(c"TYPE_IQ4_NL_4_4 REMOVED, use IQ4_NL with runtime repacking"), // 36
    removed(c"TYPE_IQ4_NL_4_8 REMOVED, use IQ4_NL with runtime repacking"), // 37
    removed(c"TYPE_IQ4_NL_8_8 REMOVED, use IQ4_NL with runtime repacking"), // 38
    row(c"mxfp4", 32, 17, true),    // 39 GGML_TYPE_MXFP4
    row(c"nvfp4", 64, 36, true),    // 40 GGML_TYPE_NVFP4
    row(c"q1_0", 128, 18, true),    // 41 GGML_TYPE_Q1_0
    row(c"q2_0", 64, 18, true),     // 42 GGML_TYPE_Q2_0
];

/// The row of `ty`; None outside the enum (where ggml.c only asserts in debug builds and
/// reads past its table otherwise).
fn type_row(ty: i32) -> Option<&'static TypeRow> {
    usize::try_from(ty).ok().and_then(|i| TYPES.get(i))
}

/// The type's name; "NONE" outside the enum (ggml's answer for an unknown type before it
/// dropped the check).
#[no_mangle]
pub extern "C" fn ggml_type_name(ty: i32) -> *const c_char {
    type_row(ty).map_or(c"NONE", |r| r.name).as_ptr()
}

/// Elements per block; 0 for a removed type or one outside the enum.
#[no_mangle]
pub extern "C" fn ggml_blck_size(ty: i32) -> i64 {
    type_row(ty).map_or(0, |r| r.blck_size)
}

/// Bytes per block; 0 for a removed type or one outside the enum.
#[no_mangle]
pub extern "C" fn ggml_type_size(ty: i32) -> usize {
    type_row(ty).map_or(0, |r| r.type_size)
}

/// Bytes of `ne` elements: type_size * ne / blck_size (ne a multiple of the block size, as ggml
/// asserts); 0 for a removed type or one outside the enum.
#[no_mangle]
pub extern "C" fn ggml_row_size(ty: i32, ne: i64) -> usize {
    match type_row(ty) {
        Some(r) if r.blck_size > 0 => (r.type_size as i128 * ne as i128 / r.blck_size as i128).try_into().unwrap_or(0),
        _ => 0,
    }
}

/// Bytes per element, as a double (type_size / blck_size); NaN for a removed type (0 / 0, as
/// ggml computes it) or one outside the enum.
#[no_mangle]
pub extern "C" fn ggml_type_sizef(ty: i32) -> f64 {
    type_row(ty).map_or(f64::NAN, |r| r.type_size as f64 / r.blck_size as f64)
}

#[no_mangle]
pub extern "C" fn ggml_is_quantized(ty: i32) -> bool {
    type_row(ty).is_some_and(|r| r.is_quantized)
}
