//! Q4_K's and Q5_K's `fast` arithmetic (int8.rs's block sums), written out here from ggml's
//! block layouts: super-blocks built byte by byte from chosen integers, 6-bit scales and mins,
//! and each output compared, bit for bit, with the formula over those integers: for each
//! 32-element block b, the exact i32 `s_b = sum q_i * x_i`, then `acc = fma(s_b, (d * sc_b) *
//! d_x[b], acc)` and `acc = fma(-(dmin * m_b), s_x[b], acc)`, in block order. On every kernel
//! path: the portable one, the row kernels (AVX2, also on AVX-512 machines; VNNI; NEON) and the
//! group kernels (packed/: AVX2 forced, and VNNI where the CPU has it) over the stored rows and
//! over the interleaved copy. Row 1 holds every integer at its largest (nibbles 15, fifth bits
//! set, scales and mins 63) and two activation rows round to all 127 and all -127, where a
//! 16-bit partial sum past i16 would show.

mod common;
use common::quant::put_f16;
use common::Rng;

use packlm::backend::cpu::{CpuWeight, Kernels};
use packlm::backend::host::int8::{Int8Isa, Int8Kernel, Q8Rows, QTile};
use packlm::backend::host::row_dot::Isa;
use packlm::backend::host::HostBackend;
use packlm::backend::Precision;
use packlm::pack::tensor::{TensorBytes, WeightTensor};
use packlm::quant::WeightType;

/// A super-block's 12 scale bytes for 6-bit scales `sc` and mins `m` (the inverse of ggml's
/// `get_scale_min_k4`: blocks 0..4 in the low 6 bits of bytes 0..4 and 4..8, blocks 4..8 in the
/// low and high nibbles of bytes 8..12 with their top 2 bits above blocks 0..4's).
fn pack_scales(sc: &[i32; 8], m: &[i32; 8]) -> [u8; 12] {
    let mut b = [0u8; 12];
    for j in 0..4 {
        b[j] = (sc[j] | (sc[j + 4] >> 4) << 6) as u8;
        b[j + 4] = (m[j] | (m[j + 4] >> 4) << 6) as u8;
        b[j + 8] = ((sc[j + 4] & 15) | (m[j + 4] & 15) << 4) as u8;
    }
    b
}

/// One super-block: its bytes and the values they hold.
struct Super {
    bytes: Vec<u8>,
    q: Vec<i32>,
    sc: [i32; 8],
    m: [i32; 8],
    d: f32,
    dmin: f32,
}

/// A Q4_K or Q5_K super-block of the integers `q` (0..16 or 0..32).
fn k_super(ty: WeightType, q: &[i32], sc: [i32; 8], m: [i32; 8], d: f32, dmin: f32) -> Super {
    let high = ty == WeightType::Q5_K;
    let mut bytes = vec![0u8; ty.block_bytes()];
    put_f16(&mut bytes, 0, d);
    put_f16(&mut bytes, 2, dmin);
    bytes[4..16].copy_from_slice(&pack_scales(&sc, &m));
    let qs = if high { 48 } else { 16 };
    for (i, &v) in q.iter().enumerate() {
        let (k, l) = (i / 32, i % 32);
        // Block k: the low nibbles of the 32 bytes k / 2 for even k, the high ones for odd k;
        // Q5_K's fifth bit of element l of block k is bit k of qh byte l.
        bytes[qs + (k / 2) * 32 + l] |= ((v & 15) as u8) << (4 * (k % 2));
        if high {
            bytes[16 + l] |= (((v >> 4) & 1) as u8) << k;
        }
    }
    Super { bytes, q: q.to_vec(), sc, m, d, dmin }
}

/// The formula over one row's super-blocks against activation row (`xq`, `xd`, `xs`).
fn formula(supers: &[Super], xq: &[i8], xd: &[f32], xs: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (j, s) in supers.iter().enumerate() {
        for b in 0..8 {
            let at = 256 * j + 32 * b;
            let sum: i32 = (0..32).map(|i| s.q[32 * b + i] * xq[at + i] as i32).sum();
            let (ws, wm) = (s.d * s.sc[b] as f32, -(s.dmin * s.m[b] as f32));
            acc = (sum as f32).mul_add(ws * xd[8 * j + b], acc);
            acc = wm.mul_add(xs[8 * j + b], acc);
        }
    }
    acc
}

#[test]
fn k_formats_follow_the_block_sums() {
    let mut rng = Rng(0x6b5f_b10c);
    let (n, n_out) = (512, 19);
    let mut xs: Vec<Vec<f32>> = (0..5).map(|_| (0..n).map(|_| rng.sym() * 3.0).collect()).collect();
    xs.push(vec![0.5; n]);
    xs.push(vec![-2.0; n]);
    let m_rows = xs.len();
    let x: Vec<f32> = xs.concat();
    let mut q8 = Q8Rows::default();
    q8.quantize(&x, n);
    assert!(q8.q[5 * n..6 * n].iter().all(|&v| v == 127) && q8.q[6 * n..].iter().all(|&v| v == -127));
    for ty in [WeightType::Q4_K, WeightType::Q5_K] {
        let top = if ty == WeightType::Q4_K { 15 } else { 31 };
        let rows: Vec<Vec<Super>> = (0..n_out)
            .map(|row| {
                let extreme = row == 1;
                (0..n / 256)
                    .map(|j| {
                        let q: Vec<i32> = (0..256).map(|i| if extreme { top } else { ((i * 7 + j * 3 + i / 5 + row * 11) % (top as usize + 1)) as i32 }).collect();
                        let sc: [i32; 8] = std::array::from_fn(|b| if extreme { 63 } else { (b as i32 * 9 + 5 + j as i32 + row as i32) % 64 });
                        let m: [i32; 8] = std::array::from_fn(|b| if extreme { 63 } else { (b as i32 * 23 + 1 + 3 * row as i32) % 64 });
                        let (d, dmin) = ([0.0078125f32, -0.375][j], [0.001953125f32, 0.25][j]);
                        k_super(ty, &q, sc, m, d * (1.0 + row as f32 / 64.0), dmin)
                    })
                    .collect()
            })
            .collect();
        let bytes: Vec<u8> = rows.iter().flat_map(|r| r.iter().flat_map(|s| s.bytes.clone())).collect();
        let want: Vec<f32> = (0..n_out * m_rows)
            .map(|i| {
                let (j, r) = (i / m_rows, i % m_rows);
                let (xq, xd, xs) = q8.row(r, n);
                formula(&rows[j], xq, xd, xs)
            })
            .collect();
        let check = |got: &[f32], transposed: bool, what: &str| {
            for j in 0..n_out {
                for r in 0..m_rows {
                    let g = if transposed { got[r * n_out + j] } else { got[j * m_rows + r] };
                    assert_eq!(g.to_bits(), want[j * m_rows + r].to_bits(), "{ty} {what}: weight row {j} activation row {r}: {g} vs {}", want[j * m_rows + r]);
                }
            }
        };
        let row_bytes = ty.row_bytes(n).unwrap();
        for isa in [Int8Isa::Portable, Int8Isa::Avx2, Int8Isa::Avx512Vnni, Int8Isa::Neon].into_iter().filter(|i| i.available()) {
            let mut out = vec![f32::NAN; n_out * m_rows];
            Int8Kernel::new(ty, isa).unwrap().run(QTile { w: &bytes, row_bytes, n_in: n, x: &q8, m: m_rows, out: &mut out });
            check(&out, false, &format!("{isa:?} row kernel"));
        }
        let w = WeightTensor::new(format!("{ty}"), ty, vec![n_out, n], TensorBytes::Owned(std::sync::Arc::new(bytes))).unwrap();
        for isa in [Isa::Avx512, Isa::Avx2] {
            if !isa.available() || (isa == Isa::Avx512 && !Int8Isa::Avx512Vnni.available()) {
                continue;
            }
            let be = HostBackend::with_isa(1, isa).unwrap().with_precision(Precision::Fast).with_background_interleave(false);
            let cw = CpuWeight::new(&be, &w).unwrap();
            assert!(cw.prepared.is_some(), "{ty} {isa:?}: not packed for the group kernels");
            for interleaved in [false, true] {
                if interleaved {
                    be.interleave_now();
                }
                for m in [1, m_rows] {
                    let mut got = vec![f32::NAN; m * n_out];
                    be.matmul_prepared(&cw, &x[..m * n], m, &mut got);
                    for j in 0..n_out {
                        for r in 0..m {
                            let g = got[r * n_out + j];
                            assert_eq!(g.to_bits(), want[j * m_rows + r].to_bits(), "{ty} {isa:?} group kernels, interleaved {interleaved}, {m} rows: weight row {j} activation row {r}");
                        }
                    }
                }
            }
        }
    }
}
