//! The host backend's fused row kernels (src/backend/host/row_dot.rs) against the scalar
//! reference: `quant::dequantize_row` (bit-exact to ggml) then a dot product in f64.
//!
//! Tolerance (derived in row_dot.rs): |kernel - exact| <= gamma(n/32 + 40) * T, with
//! gamma(k) = k u / (1 - k u), u = 2^-24, and T the sum of the magnitudes the kernel adds:
//! sum |w_i x_i|, or for Q4_1 / Q4_K (scale and min summed apart) sum (|w_i - m_i| + |m_i|) |x_i|
//! with m_i the min term of element i's block. Every type, both implementations (portable, AVX2
//! when the CPU has it), random blocks with odd block counts, gguf-py's quantized vectors, and
//! rows of the real models when models/ holds them. Then the exactness rules of the backend:
//! batch size and thread count never change a bit.

mod common;
use common::quant::{min_terms, put_f16, random_row, random_x, tensor, ALL};
use common::Rng;

use std::path::PathBuf;

use packlm::backend::host::row_dot::{block_sums, Isa, RowKernel};
use packlm::backend::host::{dot, HostBackend};
use packlm::backend::cpu::Kernels;
use packlm::pack::gguf::GgufFile;
use packlm::quant::{dequantize_row, WeightType};

/// (exact dot in f64 over the dequantized row, the bound row_dot.rs states).
fn exact_and_bound(ty: WeightType, w: &[u8], x: &[f32]) -> (f64, f64) {
    let n = x.len();
    let mut wf = vec![0.0f32; n];
    dequantize_row(ty, w, &mut wf);
    let mins = min_terms(ty, w, n);
    let mut exact = 0.0f64;
    let mut mag = 0.0f64;
    for ((&wi, &xi), &mi) in wf.iter().zip(x).zip(&mins) {
        exact += wi as f64 * xi as f64;
        mag += ((wi as f64 - mi).abs() + mi.abs()) * (xi as f64).abs();
    }
    let k = (n / 32 + 40) as f64;
    let u = (2.0f64).powi(-24);
    (exact, k * u / (1.0 - k * u) * mag + 1e-38)
}

fn isas() -> Vec<Isa> {
    if Isa::Avx512.available() {
        vec![Isa::Portable, Isa::Avx2, Isa::Avx512]
    } else if Isa::Avx2.available() {
        eprintln!("note: this CPU lacks AVX-512 F/VL; the wide kernels are not tested");
        vec![Isa::Portable, Isa::Avx2]
    } else if Isa::Neon.available() {
        // aarch64: Neon selects the portable f32 row kernels (only its integer kernels differ).
        vec![Isa::Portable, Isa::Neon]
    } else {
        eprintln!("note: this CPU lacks AVX2/FMA/F16C; only the portable kernels are tested");
        vec![Isa::Portable]
    }
}

fn kernel_dot(ty: WeightType, isa: Isa, w: &[u8], x: &[f32]) -> f32 {
    let sums: Vec<f32> = block_sums(x).collect();
    RowKernel::new(ty, isa).dot(w, x, &sums)
}

/// Checks one row on every implementation; returns the largest |error| / bound seen.
fn check_row(ty: WeightType, w: &[u8], x: &[f32], what: &str) -> f64 {
    let (exact, bound) = exact_and_bound(ty, w, x);
    let mut worst = 0.0f64;
    let got: Vec<f32> = isas().into_iter().map(|isa| kernel_dot(ty, isa, w, x)).collect();
    for (isa, &g) in isas().iter().zip(&got) {
        let err = (g as f64 - exact).abs();
        assert!(
            err <= bound,
            "{ty} {what} ({isa:?}, n={}): got {g:e}, exact {exact:e}, |err| {err:e} > bound {bound:e}",
            x.len()
        );
        worst = worst.max(err / bound);
    }
    if let [p, a] = got[..] {
        let d = (p as f64 - a as f64).abs();
        assert!(d <= bound, "{ty} {what}: portable {p:e} vs avx2 {a:e} differ by {d:e} > bound {bound:e}");
    }
    worst
}

/// Element counts with odd numbers of blocks (and, for the floats, ragged tails).
fn lengths(ty: WeightType) -> Vec<usize> {
    match ty.block_elems() {
        1 => vec![1, 7, 31, 32, 33, 95, 577, 1000, 2048],
        32 => vec![32, 96, 224, 576, 608, 1536, 4000],
        _ => vec![256, 768, 1280, 2304],
    }
}

#[test]
fn every_type_on_random_blocks_is_within_the_bound() {
    let mut rng = Rng(1);
    for ty in ALL {
        let mut worst = 0.0f64;
        for n in lengths(ty) {
            for rep in 0..6 {
                let w = random_row(&mut rng, ty, n);
                let x = random_x(&mut rng, n);
                worst = worst.max(check_row(ty, &w, &x, &format!("random rep {rep}")));
            }
        }
        eprintln!("{ty}: worst |err| / bound on random rows = {worst:.3}");
    }
}

/// gguf-py's own quantizations (tests/fixtures/make_quant_vectors.py): realistic scales and
/// values, against random activations.
#[test]
fn gguf_py_quantized_rows_are_within_the_bound() {
    let mut rng = Rng(2);
    for ty in ALL {
        let path =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/gguf/quant_{}.bin", ty.name()));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let (n_rows, n_cols) = (u32_at(8), u32_at(12));
        let rb = ty.row_bytes(n_cols).unwrap();
        let mut checked = 0;
        for r in 0..n_rows {
            let w = &bytes[16 + r * rb..16 + (r + 1) * rb];
            let mut wf = vec![0.0f32; n_cols];
            dequantize_row(ty, w, &mut wf);
            // The float fixtures also hold inf/NaN rows (for dequantize_row's tests): no bound
            // applies to those.
            if wf.iter().all(|v| v.is_finite()) {
                check_row(ty, w, &random_x(&mut rng, n_cols), &format!("gguf-py row {r}"));
                checked += 1;
            }
        }
        assert!(checked > 0, "{ty}: no finite row in {}", path.display());
    }
}

/// Every matrix of the real models (SmolLM2 Q4_1/Q8_0, Gemma3 Q4_K_M: Q4_K, Q6_K, Q5_0, Q8_0):
/// first, middle and last rows against random activations.
#[test]
fn real_model_rows_are_within_the_bound() {
    let mut rng = Rng(3);
    for (name, path) in [("SmolLM2", common::smollm2()), ("Gemma3-270M", common::gemma3_270m())] {
        let Some(path) = path else { continue };
        let g = GgufFile::open(&path).unwrap();
        let mut seen = std::collections::BTreeMap::new();
        for t in g.tensors.iter().filter(|t| t.dims.len() == 2) {
            let (cols, rows) = (t.dims[0] as usize, t.dims[1] as usize);
            let rb = t.ty.row_bytes(cols).unwrap();
            let data = g.tensor_data(t);
            let mut worst = 0.0f64;
            for r in [0, rows / 2, rows - 1] {
                let x = random_x(&mut rng, cols);
                worst =
                    worst.max(check_row(t.ty, &data[r * rb..(r + 1) * rb], &x, &format!("{name} {} row {r}", t.name)));
            }
            let e = seen.entry(t.ty.name()).or_insert((0usize, 0.0f64));
            *e = (e.0 + 1, e.1.max(worst));
        }
        for (ty, (count, worst)) in seen {
            eprintln!("{name}: {ty}: {count} tensors, worst |err| / bound = {worst:.3}");
        }
    }
}

/// F32/F16/BF16 convert exactly and then run dot.rs's lane structure: the same bits as
/// converting the row and calling `dot` (so f32/half safetensors packs did not move).
#[test]
fn float_rows_give_the_bits_of_dot_on_the_converted_row() {
    let mut rng = Rng(4);
    for ty in [WeightType::F32, WeightType::F16, WeightType::BF16] {
        for n in lengths(ty) {
            let w = random_row(&mut rng, ty, n);
            let x = random_x(&mut rng, n);
            let mut wf = vec![0.0f32; n];
            dequantize_row(ty, &w, &mut wf);
            let got = RowKernel::best(ty).dot(&w, &x, &[]);
            assert_eq!(got.to_bits(), dot(&x, &wf).to_bits(), "{ty} n={n}");
        }
    }
}

/// Single blocks worked by hand, with literal answers: small integers make every step exact,
/// so these catch a wrong layout or formula that code and reference could share.
#[test]
fn hand_worked_blocks() {
    let ones = vec![1.0f32; 256];
    let ramp: Vec<f32> = (0..256).map(|i| i as f32).collect();
    // Q8_0: d = 0.5, q_i = i - 16, x = i: 0.5 * (sum i^2 - 16 sum i) = 0.5 * (10416 - 7936) = 1240.
    let mut q8 = vec![0u8; 34];
    put_f16(&mut q8, 0, 0.5);
    (0..32).for_each(|i| q8[2 + i] = (i as i8 - 16) as u8);
    // Q4_0: d = 2, every byte 0x9A: low nibble 10 -> 2, high 9 -> 1; x = i:
    // 2 * (2 * sum(0..16) + 1 * sum(16..32)) = 2 * (240 + 376) = 1232.
    let mut q4_0 = vec![0x9Au8; 18];
    put_f16(&mut q4_0, 0, 2.0);
    // Q4_1: d = 0.5, m = -1, low nibbles 3, high 5; x = 1: 16 * (1.5 - 1) + 16 * (2.5 - 1) = 32.
    let mut q4_1 = vec![0x53u8; 20];
    put_f16(&mut q4_1, 0, 0.5);
    put_f16(&mut q4_1, 2, -1.0);
    // Q5_0: d = 1, nibbles 0, qh = 0xFFFF0000: elements 0..16 -> -16, 16..32 -> 0; x = 1: -256.
    let mut q5 = vec![0u8; 22];
    put_f16(&mut q5, 0, 1.0);
    q5[2..6].copy_from_slice(&0xFFFF_0000u32.to_le_bytes());
    // Q4_K: d = 1, dmin = 1, scales bytes: sc_j = 2 for j < 4 (bytes 0..4), m_j = 1 (bytes 4..8),
    // j >= 4 from bytes 8..12 = 0x13 -> sc 3, m 1 (top bits of bytes 0..8 are 0); every nibble 1;
    // x = 1: per sub-block 32 * (sc - m): 4 * 32 * 1 + 4 * 32 * 2 = 384.
    let mut q4k = vec![0x11u8; 144];
    put_f16(&mut q4k, 0, 1.0);
    put_f16(&mut q4k, 2, 1.0);
    q4k[4..8].fill(2);
    q4k[8..12].fill(1);
    q4k[12..16].fill(0x13);
    // Q5_1: d = 1, m = 0.5, every byte 0x21 (low nibble 1, high 2), qh = 0x0000FFFF: elements
    // 0..16 -> 1 | 16 = 17, 16..32 -> 2; x = 1: 16 * 17.5 + 16 * 2.5 = 320.
    let mut q5_1 = vec![0x21u8; 24];
    put_f16(&mut q5_1, 0, 1.0);
    put_f16(&mut q5_1, 2, 0.5);
    q5_1[4..8].copy_from_slice(&0x0000_FFFFu32.to_le_bytes());
    // Q5_K: d = 1, dmin = 0.5; sub-block 0 scale 1 min 2, sub-block 1 scale 3 min 4, the rest 0;
    // every nibble byte 0x21, every qh byte 0x01 (the fifth bit of sub-block 0 only): sub-block
    // 0 values 1 | 16 = 17, sub-block 1 values 2; x = 1: 32 * (17 - 1) + 32 * (6 - 2) = 640.
    let mut q5k = vec![0u8; 176];
    put_f16(&mut q5k, 0, 1.0);
    put_f16(&mut q5k, 2, 0.5);
    (q5k[4], q5k[5], q5k[8], q5k[9]) = (1, 3, 2, 4);
    q5k[16..48].fill(0x01);
    q5k[48..176].fill(0x21);
    // Q6_K: d = 0.25, ql = 0x21 (low nibble 1, high 2), qh = 0b10_01_00_11 -> values
    // q1 = 1 | 3<<4 = 49, q2 = 1 | 0 = 1, q3 = 2 | 1<<4 = 18, q4 = 2 | 2<<4 = 34, minus 32:
    // 17, -31, -14, 2 for each 32-run of a half; scales all 4 -> d * 4 = 1; x = 1:
    // 2 halves * 32 * (17 - 31 - 14 + 2) = -1664.
    let mut q6 = vec![0x21u8; 210];
    q6[128..192].fill(0b10_01_00_11);
    q6[192..208].fill(4);
    put_f16(&mut q6, 208, 0.25);
    // MXFP4: e = 129 -> d = 2^(129 - 127) / 2 = 2; every byte 0xA5: low code 5 -> 6, high code
    // 0xA -> -2; x = 1: 2 * (16 * 6 + 16 * -2) = 128.
    let mut mxfp4 = vec![0xA5u8; 17];
    mxfp4[0] = 129;
    let cases: [(WeightType, &[u8], &[f32], f32); 9] = [
        (WeightType::Q8_0, &q8, &ramp[..32], 1240.0),
        (WeightType::Q4_0, &q4_0, &ramp[..32], 1232.0),
        (WeightType::Q4_1, &q4_1, &ones[..32], 32.0),
        (WeightType::Q5_0, &q5, &ones[..32], -256.0),
        (WeightType::Q5_1, &q5_1, &ones[..32], 320.0),
        (WeightType::Q4_K, &q4k, &ones[..256], 384.0),
        (WeightType::Q5_K, &q5k, &ones[..256], 640.0),
        (WeightType::Q6_K, &q6, &ones[..256], -1664.0),
        (WeightType::MXFP4, &mxfp4, &ones[..32], 128.0),
    ];
    for (ty, w, x, want) in cases {
        for isa in isas() {
            assert_eq!(kernel_dot(ty, isa, w, x), want, "{ty} on {isa:?}");
        }
    }
}

/// `dot_rows` decodes a weight row once for a group of activation rows (up to 8 at a time, then
/// smaller groups): on every implementation, every output must still have the bits `dot` gives
/// it alone, whatever the number of rows and wherever a row falls in a group; and the AVX-512
/// kernels (the AVX2 source with more registers) must give the AVX2 kernels' bits.
#[test]
fn grouped_rows_give_the_bits_of_single_rows() {
    let mut rng = Rng(7);
    for ty in ALL {
        let n_in = if ty.block_elems() == 256 { 512 } else { 96 };
        let rb = ty.row_bytes(n_in).unwrap();
        let n_w = 3;
        let w: Vec<u8> = (0..n_w).flat_map(|_| random_row(&mut rng, ty, n_in)).collect();
        for m in 1..=17 {
            let x = random_x(&mut rng, m * n_in);
            let sums: Vec<f32> = block_sums(&x).collect();
            let mut by_isa = Vec::new();
            for isa in isas() {
                let k = RowKernel::new(ty, isa);
                let mut out = vec![f32::NAN; n_w * m];
                k.dot_rows(&w, n_in, &x, &sums, &mut out);
                for j in 0..n_w {
                    for r in 0..m {
                        let xr = &x[r * n_in..(r + 1) * n_in];
                        let alone = k.dot(&w[j * rb..(j + 1) * rb], xr, &sums[r * n_in / 32..(r + 1) * n_in / 32]);
                        assert_eq!(
                            out[j * m + r].to_bits(),
                            alone.to_bits(),
                            "{ty} {isa:?}: m={m} weight row {j} activation row {r}"
                        );
                    }
                }
                by_isa.push((isa, out));
            }
            let simd: Vec<_> = by_isa.iter().filter(|(isa, _)| *isa != Isa::Portable).collect();
            for pair in simd.windows(2) {
                let ((a, oa), (b, ob)) = (pair[0], pair[1]);
                let same = oa.iter().zip(ob).all(|(p, q)| p.to_bits() == q.to_bits());
                assert!(same, "{ty} m={m}: {a:?} and {b:?} differ");
            }
        }
    }
}

/// Rule 1 of docs/ARCHITECTURE.md, section 4 "Exactness": an output's bits do not depend on the batch size or the
/// thread count, on the serial path (small matrices) and the pooled one; and each output is the
/// row kernel's value.
#[test]
fn matmul_bits_do_not_depend_on_batch_or_threads() {
    let mut rng = Rng(5);
    let backends: Vec<HostBackend> = [1, 2, 3].iter().map(|&t| HostBackend::new(t).unwrap()).collect();
    for ty in ALL {
        let n_in = if ty.block_elems() == 256 { 512 } else { 96 * 3 };
        for n_out in [5, 300] {
            let w = tensor(ty, n_out, n_in, &mut rng);
            let rows = 5;
            let x = random_x(&mut rng, rows * n_in);
            let mut batched = vec![0.0f32; rows * n_out];
            backends[1].matmul(&w, &x, rows, &mut batched);
            for (m, xr) in x.chunks_exact(n_in).enumerate() {
                for (b, be) in backends.iter().enumerate() {
                    let mut single = vec![f32::NAN; n_out];
                    be.matmul(&w, xr, 1, &mut single);
                    let want = &batched[m * n_out..(m + 1) * n_out];
                    for (j, (s, bt)) in single.iter().zip(want).enumerate() {
                        assert_eq!(
                            s.to_bits(),
                            bt.to_bits(),
                            "{ty} n_out={n_out} row {m} col {j}: 1 row on {} threads vs {rows} rows on 2",
                            b + 1
                        );
                    }
                }
                for (j, &got) in batched[m * n_out..(m + 1) * n_out].iter().enumerate() {
                    let want = kernel_dot(ty, Isa::best(), w.row(j), xr);
                    assert_eq!(got.to_bits(), want.to_bits(), "{ty} row {m} col {j}: matmul vs row kernel");
                }
            }
            let mut three = vec![0.0f32; rows * n_out];
            backends[2].matmul(&w, &x, rows, &mut three);
            assert!(
                three.iter().zip(&batched).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{ty}: 3 vs 2 threads, batched"
            );
        }
    }
}

/// The index the one pass `sample::argmax` is defined by gives (the first strictly larger
/// value; a NaN is never larger, one at index 0 is kept), written out here.
fn one_pass_argmax(l: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in l.iter().enumerate() {
        if v > l[best] {
            best = i;
        }
    }
    best as u32
}

/// The host backend's argmax, split across its threads on long rows (a greedy verify's rows on
/// a 262k vocabulary), gives the one-pass index on any thread count: ties across the runs the
/// threads take, NaNs, infinities and zeros of both signs, the largest value in the last
/// (short) block; and through the backend seam, from an offset into a tensor, without reading
/// the row back.
#[test]
fn argmax_is_the_one_pass_index_on_any_thread_count() {
    use packlm::backend::cpu::CpuBackend;
    use packlm::backend::Backend;
    let mut rng = Rng(17);
    let backends: Vec<HostBackend> = [1, 2, 3].iter().map(|&t| HostBackend::new(t).unwrap()).collect();
    let specials = [f32::NAN, f32::NEG_INFINITY, f32::INFINITY, 0.0, -0.0, 9.0];
    for n in [1000usize, 65535, 65536, 98305, 262144 + 7] {
        for round in 0..12 {
            // Small integers: the largest value is tied many times, across the threads' runs.
            let mut l: Vec<f32> = (0..n).map(|_| (rng.next() % 9) as f32 - 4.0).collect();
            for _ in 0..round % 5 {
                let at = if round % 4 == 0 { 0 } else { rng.next() as usize % n };
                l[at] = specials[rng.next() as usize % specials.len()];
            }
            if round == 11 {
                l[n - 1] = 100.0;
            }
            let want = one_pass_argmax(&l);
            for (t, be) in backends.iter().enumerate() {
                assert_eq!(be.argmax(&l), want, "n={n} round {round} on {} threads", t + 1);
            }
        }
    }
    let row = 70_001;
    let mut values: Vec<f32> = rng.vec(3 * row);
    values[2 * row + 5] = 2.0;
    values[row + 60_000] = 3.0;
    let be = CpuBackend::new(HostBackend::new(2).unwrap());
    let t = common::put(&be, &values);
    let mut scratch = vec![0.0f32; row];
    for j in 0..3 {
        let want = one_pass_argmax(&values[j * row..(j + 1) * row]);
        assert_eq!(be.argmax(&t, j * row, &mut scratch), (want, false), "row {j} of the tensor");
    }
}

/// The fastest of 15 timings of `f` (the least disturbed by other work on the machine), in
/// seconds.
fn min_time(mut f: impl FnMut()) -> f64 {
    (0..15)
        .map(|_| {
            let t = std::time::Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Not a check: single-thread throughput of each kernel on a 1536 x 576 matrix (SmolLM2's
/// gate/up shape; 768 columns for the K-quants), one activation row; then whole matmuls (see
/// `cases`). Timings are the fastest of 15, as the machine may be shared.
/// `cargo test --release --test host_kernels -- --ignored --nocapture bench`.
#[test]
#[ignore]
fn bench_row_kernels() {
    let mut rng = Rng(6);
    for ty in ALL {
        let (n_out, n_in) = (1536, if ty.block_elems() == 256 { 768 } else { 576 });
        let w = tensor(ty, n_out, n_in, &mut rng);
        let x = random_x(&mut rng, n_in);
        let sums: Vec<f32> = block_sums(&x).collect();
        let mut line = format!("{ty:>5}:");
        for isa in isas() {
            let k = RowKernel::new(ty, isa);
            let mut out = vec![0.0f32; n_out];
            let s = min_time(|| {
                for _ in 0..20 {
                    k.dot_rows(w.bytes(), n_in, &x, &sums, &mut out);
                }
            });
            std::hint::black_box(&out);
            line += &format!("  {isa:?} {:.3} ns/weight", s * 1e9 / (20 * n_out * n_in) as f64);
        }
        eprintln!("{line}");
    }
    // Prefill: 64 activation rows against a 256-row tile (the grouped kernels).
    for ty in ALL {
        let (n_out, n_in, rows) = (256, if ty.block_elems() == 256 { 768 } else { 640 }, 64);
        let w = tensor(ty, n_out, n_in, &mut rng);
        let x = random_x(&mut rng, rows * n_in);
        let sums: Vec<f32> = block_sums(&x).collect();
        let mut line = format!("{ty:>5} x {rows} rows:");
        for isa in isas() {
            let k = RowKernel::new(ty, isa);
            let mut out = vec![0.0f32; n_out * rows];
            let s = min_time(|| k.dot_rows(w.bytes(), n_in, &x, &sums, &mut out));
            std::hint::black_box(&out);
            line += &format!("  {isa:?} {:.3} ns/weight/row", s * 1e9 / (n_out * n_in * rows) as f64);
        }
        eprintln!("{line}");
    }
    // (type, n_out, n_in, activation rows, repetitions): matrices far larger than the caches
    // (memory-bound), a small one (the cost of sharing work), and a prefill of 64 rows.
    let cases = [
        (WeightType::Q8_0, 49152, 576, 1, 1),
        (WeightType::Q4_1, 49152, 576, 1, 1),
        (WeightType::Q4_1, 192, 576, 1, 100),
        (WeightType::Q4_1, 1536, 576, 64, 1),
        (WeightType::Q4_K, 1536, 768, 64, 1),
    ];
    for (ty, n_out, n_in, rows, reps) in cases {
        let w = tensor(ty, n_out, n_in, &mut rng);
        let x = random_x(&mut rng, rows * n_in);
        let mut out = vec![0.0f32; rows * n_out];
        for threads in [1, 2] {
            let be = HostBackend::new(threads).unwrap();
            let s = min_time(|| (0..reps).for_each(|_| be.matmul(&w, &x, rows, &mut out))) / reps as f64;
            eprintln!(
                "{ty} {n_out} x {n_in} matmul of {rows} rows, {threads} threads: {:.1} us, {:.3} ns/weight/row",
                s * 1e6,
                s * 1e9 / (n_out * n_in * rows) as f64
            );
        }
    }
}

/// Not a check: whole matmuls of Gemma3-270m's prefill shapes (128 activation rows), on 1 and 2
/// threads, fastest of 15. `cargo test --release --test host_kernels -- --ignored --nocapture
/// prefill_shapes`.
#[test]
#[ignore]
fn bench_prefill_shapes() {
    let mut rng = Rng(8);
    let cases = [
        (WeightType::Q5_0, 2048, 640),
        (WeightType::Q5_0, 256, 640),
        (WeightType::Q4_K, 640, 1024),
        (WeightType::Q6_K, 640, 2048),
    ];
    let rows = 128;
    for (ty, n_out, n_in) in cases {
        let w = tensor(ty, n_out, n_in, &mut rng);
        let x = random_x(&mut rng, rows * n_in);
        let mut out = vec![0.0f32; rows * n_out];
        for threads in [1, 2] {
            let be = HostBackend::new(threads).unwrap();
            let s = min_time(|| be.matmul(&w, &x, rows, &mut out));
            eprintln!(
                "{ty} {n_out} x {n_in}, {rows} rows, {threads} threads: {:.0} us, {:.4} ns/weight/row",
                s * 1e6,
                s * 1e9 / (n_out * n_in * rows) as f64
            );
        }
    }
}
