//! dequantize_row against gguf-py's numpy dequantize (fixtures from
//! tests/fixtures/make_quant_vectors.py), plus hand-worked single blocks with literal answers.

use packlm::quant::{dequantize_row, WeightType};
use std::path::PathBuf;

struct Vectors {
    ty: WeightType,
    n_rows: usize,
    n_cols: usize,
    raw: Vec<u8>,
    expected: Vec<f32>,
}

fn load(name: &str) -> Vectors {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/gguf/quant_{name}.bin"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (run tests/fixtures/make_quant_vectors.py)", path.display()));
    assert_eq!(&bytes[..4], b"PQKV");
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let ty = WeightType::from_ggml_type(u32_at(4) as u32).expect("type id");
    let (n_rows, n_cols) = (u32_at(8), u32_at(12));
    let row_bytes = ty.row_bytes(n_cols).expect("row bytes");
    let raw_end = 16 + n_rows * row_bytes;
    let raw = bytes[16..raw_end].to_vec();
    let expected: Vec<f32> =
        bytes[raw_end..].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(expected.len(), n_rows * n_cols, "{name}: fixture length");
    Vectors { ty, n_rows, n_cols, raw, expected }
}

fn check(name: &str, ty: WeightType) {
    let v = load(name);
    assert_eq!(v.ty, ty);
    assert_eq!(v.ty.name(), name);
    let row_bytes = v.ty.row_bytes(v.n_cols).unwrap();
    let mut out = vec![f32::NAN; v.n_cols];
    for r in 0..v.n_rows {
        dequantize_row(v.ty, &v.raw[r * row_bytes..(r + 1) * row_bytes], &mut out);
        let want = &v.expected[r * v.n_cols..(r + 1) * v.n_cols];
        for (i, (&got, &exp)) in out.iter().zip(want).enumerate() {
            // Bit-exact: same f32 operations in the same order as ggml and gguf-py.
            assert!(
                got.to_bits() == exp.to_bits() || (got.is_nan() && exp.is_nan()),
                "{name} row {r} elem {i}: got {got:e} ({:#010x}), gguf-py {exp:e} ({:#010x})",
                got.to_bits(),
                exp.to_bits()
            );
        }
    }
}

#[test]
fn f32_matches_gguf_py() { check("f32", WeightType::F32) }
#[test]
fn f16_matches_gguf_py() { check("f16", WeightType::F16) }
#[test]
fn bf16_matches_gguf_py() { check("bf16", WeightType::BF16) }
#[test]
fn q8_0_matches_gguf_py() { check("q8_0", WeightType::Q8_0) }
#[test]
fn q4_0_matches_gguf_py() { check("q4_0", WeightType::Q4_0) }
#[test]
fn q4_1_matches_gguf_py() { check("q4_1", WeightType::Q4_1) }
#[test]
fn q5_0_matches_gguf_py() { check("q5_0", WeightType::Q5_0) }
#[test]
fn q5_1_matches_gguf_py() { check("q5_1", WeightType::Q5_1) }
#[test]
fn q4_k_matches_gguf_py() { check("q4_K", WeightType::Q4_K) }
#[test]
fn q5_k_matches_gguf_py() { check("q5_K", WeightType::Q5_K) }
#[test]
fn q6_k_matches_gguf_py() { check("q6_K", WeightType::Q6_K) }
#[test]
fn mxfp4_matches_gguf_py() { check("mxfp4", WeightType::MXFP4) }

#[test]
fn type_table_matches_ggml() {
    // (ggml id, name, block elements, block bytes) from ggml.c's type_traits table.
    let table = [
        (0, "f32", 1, 4),
        (1, "f16", 1, 2),
        (2, "q4_0", 32, 18),
        (3, "q4_1", 32, 20),
        (6, "q5_0", 32, 22),
        (7, "q5_1", 32, 24),
        (8, "q8_0", 32, 34),
        (12, "q4_K", 256, 144),
        (13, "q5_K", 256, 176),
        (14, "q6_K", 256, 210),
        (30, "bf16", 1, 2),
        (39, "mxfp4", 32, 17),
    ];
    for (id, name, elems, bytes) in table {
        let ty = WeightType::from_ggml_type(id).unwrap();
        assert_eq!((ty.name(), ty.block_elems(), ty.block_bytes()), (name, elems, bytes));
        assert_eq!(ty.ggml_type(), id);
    }
    for id in [4, 5, 9, 10, 11, 15, 16, 29, 31, 40, 1000, u32::MAX] {
        assert_eq!(WeightType::from_ggml_type(id), None, "id {id}");
    }
    assert_eq!(WeightType::Q4_1.row_bytes(576), Some(18 * 20));
    assert_eq!(WeightType::Q4_1.row_bytes(33), None);
    assert_eq!(WeightType::Q6_K.row_bytes(128), None);
    assert_eq!(WeightType::F32.row_bytes(usize::MAX), None);
    assert_eq!(WeightType::Q8_0.row_bytes(usize::MAX / 32 * 32), None);
    assert_eq!(WeightType::F16.row_bytes(0), Some(0));
}

/// f16 bits of 0.5, 1.0, 2.0 (IEEE binary16).
const H_HALF: [u8; 2] = [0x00, 0x38];
const H_ONE: [u8; 2] = [0x00, 0x3C];
const H_TWO: [u8; 2] = [0x00, 0x40];

#[test]
fn q4_0_block_by_hand() {
    // d = 2; qs[j] = low nibble j % 16, high nibble 15 - j % 16
    let mut b = H_TWO.to_vec();
    b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let mut y = [0.0f32; 32];
    dequantize_row(WeightType::Q4_0, &b, &mut y);
    // elements 0..16: (j - 8) * 2; elements 16..32: (15 - j - 8) * 2
    assert_eq!(&y[..4], &[-16.0, -14.0, -12.0, -10.0]);
    assert_eq!(y[15], 14.0);
    assert_eq!(&y[16..19], &[14.0, 12.0, 10.0]);
    assert_eq!(y[31], -16.0);
}

#[test]
fn q4_1_block_by_hand() {
    // d = 0.5, m = 1; qs = 0xF3 for all: low nibble 3, high 15
    let mut b = H_HALF.to_vec();
    b.extend(H_ONE);
    b.extend([0xF3u8; 16]);
    let mut y = [0.0f32; 32];
    dequantize_row(WeightType::Q4_1, &b, &mut y);
    assert!(y[..16].iter().all(|&v| v == 2.5), "{y:?}");
    assert!(y[16..].iter().all(|&v| v == 8.5), "{y:?}");
}

#[test]
fn q5_0_block_by_hand() {
    // d = 1; all nibbles 0; qh bit j set only for j = 1 and j = 17 (elements 1 and 17)
    let mut b = H_ONE.to_vec();
    b.extend(((1u32 << 1) | (1u32 << 17)).to_le_bytes());
    b.extend([0u8; 16]);
    let mut y = [0.0f32; 32];
    dequantize_row(WeightType::Q5_0, &b, &mut y);
    for (i, &v) in y.iter().enumerate() {
        let want = if i == 1 || i == 17 { 0.0 } else { -16.0 };
        assert_eq!(v, want, "elem {i}");
    }
}

#[test]
fn q5_1_block_by_hand() {
    // d = 2, m = 0.5; low nibbles 3, high nibbles 0; qh bit j set for j = 0 and j = 31
    // (elements 0 and 31: the fifth bit, 16)
    let mut b = H_TWO.to_vec();
    b.extend(H_HALF);
    b.extend(((1u32 << 0) | (1u32 << 31)).to_le_bytes());
    b.extend([0x03u8; 16]);
    let mut y = [0.0f32; 32];
    dequantize_row(WeightType::Q5_1, &b, &mut y);
    assert_eq!(y[0], 19.0 * 2.0 + 0.5);
    assert_eq!(y[1], 3.0 * 2.0 + 0.5);
    assert_eq!(y[16], 0.5);
    assert_eq!(y[31], 16.0 * 2.0 + 0.5);
}

#[test]
fn q5_k_block_by_hand() {
    // Q4_K's scales (sub-block 0 scale 1 min 2, sub-block 1 scale 3 min 4), d = 1, dmin = 0.5;
    // qs all 0x21 (low nibble 1, high 2); qh[0] = 0b0000_0110: element 0 of sub-block 1 (bit 1)
    // and element 0 of sub-block 2 (bit 2) get the fifth bit.
    let mut scales = [0u8; 12];
    scales[0] = 1;
    scales[4] = 2;
    scales[1] = 3;
    scales[5] = 4;
    let mut b = H_ONE.to_vec();
    b.extend(H_HALF);
    b.extend(scales);
    let mut qh = [0u8; 32];
    qh[0] = 0b0000_0110;
    b.extend(qh);
    b.extend([0x21u8; 128]);
    let mut y = [0.0f32; 256];
    dequantize_row(WeightType::Q5_K, &b, &mut y);
    assert_eq!(y[0], 1.0 * 1.0 - 0.5 * 2.0); // sub-block 0, no fifth bit
    assert_eq!(y[1], 0.0);
    assert_eq!(y[32], 3.0 * 18.0 - 0.5 * 4.0); // sub-block 1: high nibble 2, plus 16
    assert_eq!(y[33], 3.0 * 2.0 - 0.5 * 4.0);
    assert_eq!(y[64], 0.0); // sub-block 2: scale 0, min 0, whatever its value (17)
}

#[test]
fn q8_0_block_by_hand() {
    let mut b = H_HALF.to_vec();
    b.extend((0..32).map(|j: i32| ((j - 16) * 8) as i8 as u8));
    let mut y = [0.0f32; 32];
    dequantize_row(WeightType::Q8_0, &b, &mut y);
    assert_eq!(y[0], -64.0);
    assert_eq!(y[16], 0.0);
    assert_eq!(y[31], 60.0);
}

#[test]
fn q4_k_block_by_hand() {
    // d = 1, dmin = 0.5. scales bytes: sub-block 0 scale 1 min 2, sub-block 1 scale 3 min 4,
    // sub-block 4 (packed form) scale 5 + 16 (high bits from byte 0) min 6.
    let mut scales = [0u8; 12];
    scales[0] = 1 | (1 << 6); // sc0 = 1, high bits of sc4 = 1
    scales[4] = 2; // m0 = 2
    scales[1] = 3; // sc1 = 3
    scales[5] = 4; // m1 = 4
    scales[8] = 5 | (6 << 4); // sc4 low = 5, m4 low = 6
    let mut b = H_ONE.to_vec();
    b.extend(H_HALF);
    b.extend(scales);
    b.extend([0x21u8; 128]); // low nibble 1, high nibble 2
    let mut y = [0.0f32; 256];
    dequantize_row(WeightType::Q4_K, &b, &mut y);
    assert_eq!(y[0], 1.0 * 1.0 - 0.5 * 2.0); // sub-block 0: low nibbles
    assert_eq!(y[32], 3.0 * 2.0 - 0.5 * 4.0); // sub-block 1: high nibbles of the same bytes
    assert_eq!(y[128], 21.0 * 1.0 - 0.5 * 6.0); // sub-block 4
    assert_eq!(y[64], 0.0); // sub-block 2: scale 0, min 0
}

#[test]
fn q6_k_block_by_hand() {
    // ql all 0x21 (low 1, high 2), qh all 0b11_10_01_00, scales i8 = [1, -1, 2, -2, ...], d = 0.5
    let mut b = vec![0x21u8; 128];
    b.extend([0b1110_0100u8; 64]);
    b.extend([1i8, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6, 7, -7, 8, -8].map(|s| s as u8));
    b.extend(H_HALF);
    let mut y = [0.0f32; 256];
    dequantize_row(WeightType::Q6_K, &b, &mut y);
    // y[l]      : q = (1 | 0 << 4) - 32 = -31, scale sc[0] = 1
    // y[l + 32] : q = (1 | 1 << 4) - 32 = -15, scale sc[2] = 2
    // y[l + 64] : q = (2 | 2 << 4) - 32 = 2,   scale sc[4] = 3
    // y[l + 96] : q = (2 | 3 << 4) - 32 = 18,  scale sc[6] = 4
    assert_eq!(y[0], 0.5 * 1.0 * -31.0);
    assert_eq!(y[16], -0.5 * -31.0); // l = 16 uses sc[1]
    assert_eq!(y[32], 0.5 * 2.0 * -15.0);
    assert_eq!(y[64], 0.5 * 3.0 * 2.0);
    assert_eq!(y[96], 0.5 * 4.0 * 18.0);
    assert_eq!(y[128], 0.5 * 5.0 * -31.0); // second half: sc[8]
}

#[test]
fn mxfp4_blocks_by_hand() {
    // qs[j] = low code j, high code 15 - j: elements 0..16 take the codes 0..16 in order, elements
    // 16..32 the same codes reversed. The doubled E2M1 values of codes 0..16:
    let codes = [0.0f32, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0];
    let qs: Vec<u8> = (0..16u8).map(|j| j | ((15 - j) << 4)).collect();
    // e = 128 -> d = 1.0 (bits 0x3F800000); 127 -> 0.5; 130 -> 4.0; 1 -> 2^-127 and 0 -> 2^-128,
    // subnormals (bits 0x00400000 and 0x00200000).
    for (e, d) in [(128u8, 1.0f32), (127, 0.5), (130, 4.0), (1, f32::from_bits(0x0040_0000)), (0, f32::from_bits(0x0020_0000))] {
        let mut b = vec![e];
        b.extend(&qs);
        let mut y = [f32::NAN; 32];
        dequantize_row(WeightType::MXFP4, &b, &mut y);
        for j in 0..16 {
            assert_eq!(y[j].to_bits(), (codes[j] * d).to_bits(), "e = {e}, element {j}");
            assert_eq!(y[31 - j].to_bits(), (codes[j] * d).to_bits(), "e = {e}, element {}", 31 - j);
        }
    }
    // Literal values: e = 128, elements 5, 7, 13, 16 (code 15); e = 127, element 7; e = 0, element
    // 1 (2^-128, the smallest nonzero scale) and 7 (12 * 2^-128 = 1.5 * 2^-125, a normal: exponent
    // field 2, mantissa 0.5).
    let mut b = vec![128u8];
    b.extend(&qs);
    let mut y = [0.0f32; 32];
    dequantize_row(WeightType::MXFP4, &b, &mut y);
    assert_eq!([y[5], y[7], y[13], y[16]], [6.0, 12.0, -6.0, -12.0]);
    b[0] = 127;
    dequantize_row(WeightType::MXFP4, &b, &mut y);
    assert_eq!(y[7], 6.0);
    b[0] = 0;
    dequantize_row(WeightType::MXFP4, &b, &mut y);
    assert_eq!(y[1], 2.938735877055719e-39);
    assert_eq!(y[7].to_bits(), 0x0140_0000);
}

#[test]
fn wrong_lengths_do_not_panic_in_release() {
    if cfg!(debug_assertions) {
        return; // debug builds assert on the contract instead
    }
    let mut y = [7.0f32; 40];
    dequantize_row(WeightType::Q4_0, &[0u8; 20], &mut y); // one whole block, 8 extra elements
    assert_eq!(y[39], 7.0);
    dequantize_row(WeightType::Q6_K, &[0u8; 3], &mut y);
}
