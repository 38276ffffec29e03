//! The `fast` precision's integer kernels (src/backend/host/int8.rs, avx2_int8.rs,
//! neon_int8.rs).
//!
//! - The activation rounding against hand-worked blocks and C's `roundf`.
//! - Every implementation (portable; AVX2 `vpmaddubsw`, also on AVX-512 machines; AVX-512 VNNI
//!   where the CPU has it; NEON on aarch64, run under qemu by scripts/aarch64_tests.sh) gives
//!   the portable bits, for every block format, one row or many.
//! - The portable kernel against an independent oracle: `quant::dequantize_row` (bit-exact to
//!   ggml, tested against gguf-py) times the rounded activations `d * q`, summed in f64. Bound:
//!   gamma(n/32 + 44) * T, T = sum (|w_i - m_i| + |m_i|) |d q_i| (m_i the block's min term),
//!   from the roundings an element passes through: dequantize_row's 2 (which factoring
//!   skips), the scale product 2, the lane sum's conversion 0 (an exact integer), the block chain
//!   n/64 (two accumulators) or n/32 for the min chain and the block-sum formats' one chain, 1
//!   to join, 3 in reduce8, 1 for the mins.
//! - The whole matmul: batch size and thread count never change a bit.
//! - Matrices packed for the VNNI block-sum kernels (packed/) give the portable bits.

mod common;
use common::quant::{min_terms, put_f16, random_row, random_x, tensor};
use common::Rng;

use packlm::backend::cpu::Kernels;
use packlm::backend::host::int8::{self, Int8Isa, Int8Kernel, Q8Rows, QTile};
use packlm::backend::host::row_dot::Isa;
use packlm::backend::host::HostBackend;
use packlm::backend::Precision;
use packlm::quant::{dequantize_row, WeightType};

/// The block formats.
fn block_types() -> impl Iterator<Item = WeightType> {
    WeightType::ALL.into_iter().filter(|t| t.is_quantized())
}

/// Every implementation this CPU runs, of those its architecture has.
fn isas() -> Vec<Int8Isa> {
    let all: &[Int8Isa] = if cfg!(target_arch = "aarch64") {
        &[Int8Isa::Portable, Int8Isa::Neon]
    } else {
        &[Int8Isa::Portable, Int8Isa::Avx2, Int8Isa::Avx512Vnni]
    };
    let have: Vec<Int8Isa> = all.iter().copied().filter(|i| i.available()).collect();
    if have.len() < all.len() {
        eprintln!("note: this CPU runs only {have:?} of the integer kernels");
    }
    have
}

/// The host backend takes the integer kernels of its f32 kernels' instruction set: NEON is
/// aarch64's best, and a forced `Portable` is portable on every CPU.
#[test]
fn integer_kernels_follow_the_backend_isa() {
    assert_eq!(Int8Isa::for_isa(Isa::Portable), Int8Isa::Portable);
    assert_eq!(Int8Isa::for_isa(Isa::Neon), Int8Isa::Neon);
    assert_eq!(Int8Isa::best(), Int8Isa::for_isa(Isa::best()));
    if cfg!(target_arch = "aarch64") {
        assert_eq!(Isa::best(), Isa::Neon);
        assert_eq!(Int8Isa::best(), Int8Isa::Neon);
    }
    assert_eq!(Int8Isa::Neon.available(), cfg!(target_arch = "aarch64"));
}

#[test]
fn round_half_away_is_c_roundf() {
    // Literal cases: halves go away from zero, the f32 just below a half does not.
    let below_half = f32::from_bits(0.5f32.to_bits() - 1);
    for (v, want) in
        [(0.5, 1), (-0.5, -1), (1.5, 2), (2.5, 3), (-2.5, -3), (below_half, 0), (-below_half, 0), (126.5, 127), (0.0, 0), (-0.0, 0)]
    {
        assert_eq!(int8::round_half_away(v), want, "{v:e}");
    }
    // Every f32 within a few ulps of each half-integer up to 128, and random values.
    for k in -256..=256 {
        let h = k as f32 * 0.5;
        for delta in -4i32..=4 {
            let v = f32::from_bits((h.to_bits() as i32 + delta) as u32);
            if v.is_finite() && v.abs() < 130.0 {
                assert_eq!(int8::round_half_away(v), v.round() as i32, "{v:e}");
            }
        }
    }
    let mut rng = Rng(11);
    for _ in 0..1_000_000 {
        let v = rng.sym() * 128.0;
        assert_eq!(int8::round_half_away(v), v.round() as i32, "{v:e}");
    }
}

#[test]
fn quantize_block_hand_worked() {
    // amax 2 -> d = 2/127; x / d = x * 63.5: 2 -> 127, -1 -> -63.5 -> -64, 0.5 -> 31.75 -> 32,
    // 0.01 -> 0.635 -> 1, the rest 0. sum = 127 - 64 + 32 + 1 = 96, s = d * 96.
    let mut x = [0.0f32; 32];
    (x[0], x[1], x[2], x[31]) = (2.0, -1.0, 0.5, 0.01);
    let mut q = [0i8; 32];
    let (d, s) = int8::quantize_block(&x, &mut q);
    assert_eq!(d, 2.0f32 / 127.0);
    assert_eq!((q[0], q[1], q[2], q[31]), (127, -64, 32, 1));
    assert!(q[3..31].iter().all(|&v| v == 0));
    assert_eq!(s, d * 96.0);
    // All zeros: d = 0 and q = 0 (no division by zero).
    assert_eq!(int8::quantize_block(&[0.0; 32], &mut q), (0.0, 0.0));
    assert!(q.iter().all(|&v| v == 0));
    // A NaN or an infinity makes the block's scale NaN, so the outputs it reaches are NaN.
    let mut bad = [1.0f32; 32];
    bad[7] = f32::INFINITY;
    assert!(int8::quantize_block(&bad, &mut q).0.is_nan());
    bad[7] = f32::NAN;
    assert!(int8::quantize_block(&bad, &mut q).0.is_nan());
}

/// The vectorized rounding gives the scalar one's values: random rows of every scale, halves,
/// zeros, a NaN and an infinity.
#[test]
fn quantize_gives_the_scalar_values() {
    let mut rng = Rng(17);
    let n = 32 * 64;
    let mut x = random_x(&mut rng, n);
    // Values that land on halves: a block whose amax is 127 makes x / d = x.
    for (i, v) in x[..32].iter_mut().enumerate() {
        *v = if i == 0 { 127.0 } else { i as f32 - 15.5 };
    }
    x[32..64].fill(0.0);
    x[64 + 5] = f32::NAN;
    x[96 + 9] = f32::NEG_INFINITY;
    let (mut a, mut b) = (Q8Rows::default(), Q8Rows::default());
    a.quantize(&x, n);
    b.quantize_scalar(&x, n);
    assert_eq!(a.q, b.q);
    assert_eq!(a.d.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), b.d.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    assert_eq!(a.s.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), b.s.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    assert_eq!((b.q[1], b.q[2]), (-15, -14), "-14.5 rounds away from zero; -13.5 too");
    assert!(b.d[2].is_nan() && b.d[3].is_nan());
    // The 512-bit kernels' views: each scale over its block's 8 lanes, and -128 times each
    // lane's four values (the first block: 127, -14.5 -> -15, -13.5 -> -14, -12.5 -> -13).
    assert_eq!(a.c[0], -128 * (127 - 15 - 14 - 13));
    for (l, &c) in a.c.iter().enumerate() {
        assert_eq!(c, -128 * a.q[4 * l..4 * l + 4].iter().map(|&v| v as i32).sum::<i32>());
    }
    assert_eq!(a.d8.len(), 8 * a.d.len());
    for (i, v) in a.d8.iter().enumerate() {
        assert_eq!(v.to_bits(), a.d[i / 8].to_bits());
    }
}

/// One kernel call over `w` (rows of `n_in`) and the rounded `x` (m rows).
fn run(ty: WeightType, isa: Int8Isa, w: &[u8], n_in: usize, x: &Q8Rows, m: usize) -> Vec<f32> {
    let row_bytes = ty.row_bytes(n_in).unwrap();
    let mut out = vec![f32::NAN; w.len() / row_bytes * m];
    Int8Kernel::new(ty, isa).unwrap().run(QTile { w, row_bytes, n_in, x, m, out: &mut out });
    out
}

fn lengths(ty: WeightType) -> Vec<usize> {
    if ty.block_elems() == 256 {
        vec![256, 768, 2304]
    } else {
        vec![32, 96, 576, 2080]
    }
}

#[test]
fn every_implementation_gives_the_portable_bits() {
    let mut rng = Rng(3);
    for ty in block_types() {
        for n in lengths(ty) {
            let n_out = 7;
            let w: Vec<u8> = (0..n_out).flat_map(|_| random_row(&mut rng, ty, n)).collect();
            for m in [1, 2, 3, 4, 5, 8, 9, 17] {
                let mut x = Q8Rows::default();
                x.quantize(&random_x(&mut rng, m * n), n);
                let want = run(ty, Int8Isa::Portable, &w, n, &x, m);
                for isa in isas() {
                    let got = run(ty, isa, &w, n, &x, m);
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(g.to_bits(), w.to_bits(), "{ty} n={n} m={m} {isa:?} output {i}: {g} vs portable {w}");
                    }
                    // Each row alone gives the bits it has in the group.
                    for r in 0..m {
                        let one = x.single_row(r, n);
                        let alone = run(ty, isa, &w, n, &one, 1);
                        for j in 0..n_out {
                            assert_eq!(alone[j].to_bits(), got[j * m + r].to_bits(), "{ty} n={n} {isa:?}: row {r} of {m} alone");
                        }
                    }
                }
            }
        }
    }
}

/// The oracle's value and bound (see the top of the file).
fn oracle(ty: WeightType, w: &[u8], xq: &[i8], xd: &[f32]) -> (f64, f64) {
    let n = xq.len();
    let mut wf = vec![0.0f32; n];
    dequantize_row(ty, w, &mut wf);
    let mins = min_terms(ty, w, n);
    let (mut exact, mut mag) = (0.0f64, 0.0f64);
    for i in 0..n {
        let xi = xd[i / 32] as f64 * xq[i] as f64;
        exact += wf[i] as f64 * xi;
        mag += ((wf[i] as f64 - mins[i]).abs() + mins[i].abs()) * xi.abs();
    }
    let k = (n / 32 + 44) as f64;
    let u = (2.0f64).powi(-24);
    (exact, k * u / (1.0 - k * u) * mag + 1e-38)
}

#[test]
fn the_portable_kernel_is_within_the_bound_of_the_dequantized_sum() {
    let mut rng = Rng(7);
    let mut worst = 0.0f64;
    for ty in block_types() {
        for n in lengths(ty) {
            for _ in 0..40 {
                let w = random_row(&mut rng, ty, n);
                let mut x = Q8Rows::default();
                x.quantize(&random_x(&mut rng, n), n);
                let got = run(ty, Int8Isa::Portable, &w, n, &x, 1)[0] as f64;
                let (exact, bound) = oracle(ty, &w, &x.q, &x.d);
                let err = (got - exact).abs();
                assert!(err <= bound, "{ty} n={n}: |{got} - {exact}| = {err:e} > {bound:e}");
                worst = worst.max(err / bound);
            }
        }
    }
    eprintln!("largest error / bound: {worst:.3}");
}

/// A hand-worked Q8_0 and Q4_1 row of one block against activations whose rounding is exact.
#[test]
fn hand_worked_rows() {
    // Activations: x_i = i - 16 for i < 32 -> amax 16, d = 16/127, q_i = round((i - 16) * 7.9375).
    let x: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect();
    let mut q8 = Q8Rows::default();
    q8.quantize(&x, 32);
    assert_eq!(q8.q[0], -127);
    assert_eq!(q8.q[16], 0);
    assert_eq!(q8.q[17], 8); // 7.9375 -> 8
                             // Q8_0 weights all 1 with d = 1: the dot is d_x * sum(q_x) = s.
    let mut w = vec![0u8; 34];
    put_f16(&mut w, 0, 1.0);
    w[2..].fill(1);
    let got = run(WeightType::Q8_0, Int8Isa::Portable, &w, 32, &q8, 1)[0];
    let sum_q: i32 = q8.q.iter().map(|&v| v as i32).sum();
    assert_eq!(q8.s[0], q8.d[0] * sum_q as f32);
    assert!((got - q8.d[0] * sum_q as f32).abs() <= 1e-6 * got.abs().max(1.0), "{got}");
    // Q4_1 with d = 0 and m = 0.5: every weight is 0.5, so the dot is 0.5 * s exactly.
    let mut w = vec![0u8; 20];
    put_f16(&mut w, 2, 0.5);
    let got = run(WeightType::Q4_1, Int8Isa::Portable, &w, 32, &q8, 1)[0];
    assert_eq!(got, 0.5 * q8.s[0]);
}

/// The block-sum formats' arithmetic, written out: 8-block Q8_0 and Q4_0 rows whose blocks
/// have different scales, against `acc = fma(s_b, ws_b * d_b, acc)` over the blocks in order
/// with the integer sums taken here, for 5 activation rows, on every kernel path.
#[test]
fn block_sum_formats_follow_their_arithmetic() {
    const NB: usize = 8;
    let n = NB * 32;
    let mut rng = Rng(21);
    let x = random_x(&mut rng, 5 * n);
    let mut q8 = Q8Rows::default();
    q8.quantize(&x, n);
    // Scales exact in f16, of different magnitudes and signs.
    let scales = [0.375f32, -1.25, 0.01171875, 3.0, -0.0068359375, 0.6875, -2.75, 0.0009765625];
    // Q8_0: weights w_i = (i * 37) % 255 - 127.
    let wq: Vec<i32> = (0..n as i32).map(|i| (i * 37) % 255 - 127).collect();
    let mut w = vec![0u8; NB * 34];
    // Q4_0: nibbles n_i = (i * 5 + i / 7) % 16, weight n_i - 8.
    let nq: Vec<i32> = (0..n as i32).map(|i| (i * 5 + i / 7) % 16).collect();
    let mut w4 = vec![0u8; NB * 18];
    for b in 0..NB {
        put_f16(&mut w, b * 34, scales[b]);
        put_f16(&mut w4, b * 18, scales[NB - 1 - b]);
        for i in 0..32 {
            w[b * 34 + 2 + i] = wq[b * 32 + i] as i8 as u8;
        }
        for j in 0..16 {
            w4[b * 18 + 2 + j] = (nq[b * 32 + j] | nq[b * 32 + j + 16] << 4) as u8;
        }
    }
    let rev: Vec<f32> = scales.iter().rev().copied().collect();
    let cases = [(WeightType::Q8_0, &w, wq, scales.to_vec()), (WeightType::Q4_0, &w4, nq.iter().map(|n| n - 8).collect(), rev)];
    for (ty, bytes, ints, ws) in cases {
        for isa in isas() {
            let got = run(ty, isa, bytes, n, &q8, 5);
            for r in 0..5 {
                let (xq, xd, _) = q8.row(r, n);
                let mut want = 0.0f32;
                for b in 0..NB {
                    let s: i32 = (0..32).map(|i| ints[b * 32 + i] * xq[b * 32 + i] as i32).sum();
                    want = (s as f32).mul_add(ws[b] * xd[b], want);
                }
                assert_eq!(got[r].to_bits(), want.to_bits(), "{ty} {isa:?} row {r}: {} vs {want}", got[r]);
            }
        }
    }
}

/// An output's bits do not depend on the batch size or the thread count, on every kernel path,
/// and the `fast` matmul is the integer kernel's value on the rounded rows.
#[test]
fn fast_matmul_bits_do_not_depend_on_batch_or_threads() {
    let mut rng = Rng(9);
    for isa in [Isa::Portable, Isa::Avx2, Isa::Avx512, Isa::Neon].into_iter().filter(|i| i.available()) {
        let backends: Vec<HostBackend> =
            [1, 2, 3].iter().map(|&t| HostBackend::with_isa(t, isa).unwrap().with_precision(Precision::Fast)).collect();
        for ty in block_types() {
            let n_in = if ty.block_elems() == 256 { 512 } else { 96 * 3 };
            for n_out in [5, 300] {
                let w = tensor(ty, n_out, n_in, &mut rng);
                let rows = 11;
                let x = random_x(&mut rng, rows * n_in);
                let mut batched = vec![0.0f32; rows * n_out];
                backends[1].matmul(&w, &x, rows, &mut batched);
                let mut q8 = Q8Rows::default();
                q8.quantize(&x, n_in);
                let direct = run(ty, Int8Isa::for_isa(isa), w.bytes(), n_in, &q8, rows);
                for (m, xr) in x.chunks_exact(n_in).enumerate() {
                    for (t, be) in backends.iter().enumerate() {
                        let mut single = vec![f32::NAN; n_out];
                        be.matmul(&w, xr, 1, &mut single);
                        for j in 0..n_out {
                            let b = batched[m * n_out + j];
                            assert_eq!(
                                single[j].to_bits(),
                                b.to_bits(),
                                "{isa:?} {ty} n_out={n_out} row {m} col {j}: 1 row on {} threads vs {rows} rows on 2",
                                t + 1
                            );
                            assert_eq!(b.to_bits(), direct[j * rows + m].to_bits(), "{isa:?} {ty}: matmul vs kernel");
                        }
                    }
                }
                let mut three = vec![0.0f32; rows * n_out];
                backends[2].matmul(&w, &x, rows, &mut three);
                assert!(three.iter().zip(&batched).all(|(a, b)| a.to_bits() == b.to_bits()), "{isa:?} {ty}: 3 vs 2 threads");
            }
        }
    }
}

/// A packed matrix's side table is built by the first pass that needs it when the writer
/// thread has not built it yet; a pass aborted while it builds (its flag set before the call,
/// so its own tasks are skipped) still builds the whole table, which every later pass reads:
/// the next pass, not aborted, gives the portable bits.
#[test]
fn a_side_table_built_by_an_aborted_pass_is_whole() {
    use packlm::backend::cpu::CpuWeight;
    use packlm::backend::host::packed::Packed;
    use std::sync::atomic::AtomicBool;
    let mut rng = Rng(29);
    for isa in [Isa::Avx512, Isa::Avx2] {
        if !isa.available() || (isa == Isa::Avx512 && !Int8Isa::Avx512Vnni.available()) {
            continue;
        }
        for threads in [1, 2] {
            let be = HostBackend::with_isa(threads, isa).unwrap().with_precision(Precision::Fast).with_background_interleave(false);
            for ty in [WeightType::Q8_0, WeightType::Q4_0, WeightType::Q5_0, WeightType::Q4_1, WeightType::Q5_1] {
                let (n_out, n_in, m) = (2048, 640, 3);
                let w = tensor(ty, n_out, n_in, &mut rng);
                let cw = CpuWeight::new(&be, &w).unwrap();
                let packed = cw.prepared.as_ref().and_then(|p| p.as_any().downcast_ref::<Packed>()).expect("packed");
                assert!(!packed.has_side_table());
                let x = random_x(&mut rng, m * n_in);
                let mut out = vec![0.0f32; m * n_out];
                {
                    let flag = std::sync::Arc::new(AtomicBool::new(true));
                    let _pass = packlm::backend::pass::enter(&flag);
                    be.matmul_prepared(&cw, &x, m, &mut out);
                    assert!(packlm::backend::pass::cut_short(), "{isa:?} {ty} {threads} threads: the aborted pass ran every task");
                }
                assert!(packed.has_side_table(), "{isa:?} {ty}");
                let mut q8 = Q8Rows::default();
                q8.quantize(&x, n_in);
                let want = run(ty, Int8Isa::Portable, w.bytes(), n_in, &q8, m);
                be.matmul_prepared(&cw, &x, m, &mut out);
                for r in 0..m {
                    for j in 0..n_out {
                        let (g, w) = (out[r * n_out + j], want[j * m + r]);
                        assert_eq!(g.to_bits(), w.to_bits(), "{isa:?} {ty} {threads} threads: row {r} col {j}: {g} vs {w}");
                    }
                }
            }
        }
    }
}

/// A pass does not wait for a side table another thread is building (the writer thread, at
/// the idle priority, may not run for a long time on busy cores): it takes the row-order
/// kernels for that call, the portable bits, and the group kernels once the table is built.
#[test]
fn a_pass_does_not_wait_for_a_side_table_being_built() {
    use packlm::backend::cpu::CpuWeight;
    use packlm::backend::host::packed::{Arena, Packed};
    use std::sync::mpsc::channel;
    use std::time::Duration;
    let isa = if Isa::Avx2.available() { Isa::Avx2 } else { return };
    let mut rng = Rng(31);
    let be = std::sync::Arc::new(HostBackend::with_isa(1, isa).unwrap().with_precision(Precision::Fast).with_background_interleave(false));
    let (ty, n_out, n_in, m) = (WeightType::Q4_0, 256, 320, 2);
    let w = tensor(ty, n_out, n_in, &mut rng);
    let cw = std::sync::Arc::new(CpuWeight::new(&*be, &w).unwrap());
    let x = random_x(&mut rng, m * n_in);
    let mut q8 = Q8Rows::default();
    q8.quantize(&x, n_in);
    let want = run(ty, Int8Isa::Portable, w.bytes(), n_in, &q8, m);
    let check = |got: &[f32], what: &str| {
        for r in 0..m {
            for j in 0..n_out {
                let (g, w) = (got[r * n_out + j], want[j * m + r]);
                assert_eq!(g.to_bits(), w.to_bits(), "{what}: row {r} col {j}: {g} vs {w}");
            }
        }
    };
    // A builder that holds the table until told to go on.
    let (entered_tx, entered_rx) = channel();
    let (go_tx, go_rx) = channel::<()>();
    let builder = {
        let cw = cw.clone();
        std::thread::spawn(move || {
            let packed = cw.prepared.as_ref().and_then(|p| p.as_any().downcast_ref::<Packed>()).expect("packed");
            let arena = Arena::new();
            packed.side_table(
                &arena,
                &|n, task| {
                    entered_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                    (0..n).for_each(task)
                },
                true,
            )
        })
    };
    entered_rx.recv_timeout(Duration::from_secs(60)).expect("the builder started");
    let (done_tx, done_rx) = channel();
    let pass = {
        let (be, cw, x) = (be.clone(), cw.clone(), x.clone());
        std::thread::spawn(move || {
            let mut out = vec![f32::NAN; m * n_out];
            be.matmul_prepared(&cw, &x, m, &mut out);
            done_tx.send(out).unwrap();
        })
    };
    let during = done_rx.recv_timeout(Duration::from_secs(20));
    go_tx.send(()).unwrap();
    assert!(builder.join().unwrap(), "the builder built the table");
    pass.join().unwrap();
    check(&during.expect("the pass waited for the side table being built"), "during the build");
    let mut after = vec![f32::NAN; m * n_out];
    be.matmul_prepared(&cw, &x, m, &mut after);
    check(&after, "after the build");
}

/// On x86-64, `fast` runs the block-sum formats' matrices through the group kernels (packed/),
/// 16 rows a group for the VNNI kernels and 8 for the AVX2 ones (forced here on AVX-512
/// machines too): over the stored rows from the open on, and over the interleaved copy once it
/// is written. Both give the portable bits for every batch size (1 to 64 rows: one chunk of
/// activation rows, several, and a last short one) and thread count, with and without rows
/// after the last group; a tensor prepared twice is packed once; its rows read for an
/// embedding lookup after the copy is written are the stored rows' values.
#[test]
fn packed_matrices_give_the_portable_bits() {
    use packlm::backend::cpu::CpuWeight;
    use packlm::backend::host::packed::Packed;
    let kinds: Vec<(Isa, usize)> = [(Isa::Avx512, 16), (Isa::Avx2, 8)]
        .into_iter()
        .filter(|&(isa, lanes)| isa.available() && (lanes == 8 || Int8Isa::Avx512Vnni.available()))
        .collect();
    if kinds.len() < 2 {
        eprintln!("note: this CPU packs for {kinds:?} only (no AVX-512 VNNI, or no x86-64)");
    }
    let mut rng = Rng(17);
    for (isa, lanes) in kinds {
        // The copies are written only when asked, so that both orders are run.
        let backends: Vec<HostBackend> = [1, 2, 3]
            .iter()
            .map(|&t| HostBackend::with_isa(t, isa).unwrap().with_precision(Precision::Fast).with_background_interleave(false))
            .collect();
        for ty in [WeightType::Q8_0, WeightType::Q4_0, WeightType::Q5_0, WeightType::Q4_1, WeightType::Q5_1, WeightType::Q4_K, WeightType::Q5_K] {
            let shapes = if ty.block_elems() == 256 { [(16, 256), (37, 512), (300, 768), (64, 2304)] } else { [(16, 32), (37, 96), (300, 640), (64, 2080)] };
            for (n_out, n_in) in shapes {
                let w = tensor(ty, n_out, n_in, &mut rng);
                let cw = CpuWeight::new(&backends[0], &w).unwrap();
                let packed = cw.prepared.as_ref().and_then(|p| p.as_any().downcast_ref::<Packed>()).expect("packed");
                assert_eq!((packed.lanes, packed.rows()), (lanes, n_out / lanes * lanes), "{isa:?} {ty}");
                let twice = CpuWeight::new(&backends[0], &w).unwrap();
                assert!(std::sync::Arc::ptr_eq(cw.prepared.as_ref().unwrap(), twice.prepared.as_ref().unwrap()), "{ty}: packed twice");
                // Preparing reads none of the matrix: the first pass builds the side table.
                assert!(!packed.has_side_table(), "{isa:?} {ty}: a side table built before any pass");
                for interleaved in [false, true] {
                    if interleaved {
                        backends[0].interleave_now();
                    }
                    assert_eq!(packed.is_interleaved(), interleaved, "{isa:?} {ty}");
                    for m in [1, 2, 3, 4, 7, 8, 9, 12, 13, 21, 64] {
                        let x = random_x(&mut rng, m * n_in);
                        let mut q8 = Q8Rows::default();
                        q8.quantize(&x, n_in);
                        let want = run(ty, Int8Isa::Portable, w.bytes(), n_in, &q8, m);
                        for (t, be) in backends.iter().enumerate() {
                            let mut got = vec![f32::NAN; m * n_out];
                            be.matmul_prepared(&cw, &x, m, &mut got);
                            for r in 0..m {
                                for j in 0..n_out {
                                    let (g, w) = (got[r * n_out + j], want[j * m + r]);
                                    assert_eq!(
                                        g.to_bits(),
                                        w.to_bits(),
                                        "{isa:?} {ty} {n_out}x{n_in} interleaved {interleaved} m={m} {} threads: row {r} col {j}: {g} vs {w}",
                                        t + 1
                                    );
                                }
                            }
                        }
                    }
                }
                assert!(packed.has_side_table(), "{isa:?} {ty}: no side table after the passes");
                // Embedding rows, read once the copy is written, are the stored rows' values.
                let (mut a, mut b) = (vec![0.0f32; n_in], vec![f32::NAN; n_in]);
                for j in 0..n_out {
                    dequantize_row(ty, &w.bytes()[j * w.row_bytes()..(j + 1) * w.row_bytes()], &mut a);
                    cw.row_f32(j, &mut b);
                    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{isa:?} {ty} {n_out}x{n_in}: embedding row {j}");
                }
            }
        }
        // Nothing is packed at exact, nor in Q6_K (lane sums).
        let exact = HostBackend::with_isa(1, isa).unwrap();
        assert!(CpuWeight::new(&exact, &tensor(WeightType::Q8_0, 32, 64, &mut rng)).unwrap().prepared.is_none());
        assert!(CpuWeight::new(&exact, &tensor(WeightType::Q4_K, 32, 256, &mut rng)).unwrap().prepared.is_none());
        assert!(CpuWeight::new(&backends[0], &tensor(WeightType::Q6_K, 32, 256, &mut rng)).unwrap().prepared.is_none());
    }
}

/// `exact` never takes the integer kernels, and float weights never do either.
#[test]
fn exact_and_float_weights_keep_the_f32_kernels() {
    let mut rng = Rng(13);
    let n_in = 256;
    let exact = HostBackend::new(1).unwrap();
    let fast = HostBackend::new(1).unwrap().with_precision(Precision::Fast);
    let x = random_x(&mut rng, n_in);
    for ty in [WeightType::F32, WeightType::F16, WeightType::BF16] {
        let w = tensor(ty, 9, n_in, &mut rng);
        let (mut a, mut b) = (vec![0.0f32; 9], vec![0.0f32; 9]);
        exact.matmul(&w, &x, 1, &mut a);
        fast.matmul(&w, &x, 1, &mut b);
        assert_eq!(a, b, "{ty}");
    }
    let w = tensor(WeightType::Q8_0, 9, n_in, &mut rng);
    let (mut a, mut b) = (vec![0.0f32; 9], vec![0.0f32; 9]);
    exact.matmul(&w, &x, 1, &mut a);
    fast.matmul(&w, &x, 1, &mut b);
    assert_ne!(a, b, "fast must round the activations of a Q8_0 matmul");
    assert_eq!(exact.precision(), Precision::Exact);
    assert_eq!(fast.precision(), Precision::Fast);
}

/// A packed matmul reuses the rounded activations of the one before it on the same thread when
/// the rows are the same bits (q, k and v of a layer read one input). Rows that differ only a
/// little (one element one ulp away, a zero's sign, the same values in another row count) are
/// rounded again: each result is the portable kernel's over that call's own rows.
#[test]
fn packed_matmuls_reuse_rounded_rows_only_when_equal() {
    use packlm::backend::cpu::CpuWeight;
    let Some(isa) = [Isa::Avx512, Isa::Avx2].into_iter().find(|i| i.available() && cfg!(target_arch = "x86_64")) else {
        eprintln!("note: no packed kernels on this CPU");
        return;
    };
    let mut rng = Rng(23);
    let be = HostBackend::with_isa(2, isa).unwrap().with_precision(Precision::Fast);
    let (ty, n_out, n_in) = (WeightType::Q4_1, 48, 96);
    let w = tensor(ty, n_out, n_in, &mut rng);
    let cw = CpuWeight::new(&be, &w).unwrap();
    assert!(cw.prepared.is_some(), "{isa:?}: not packed");
    let x = random_x(&mut rng, 2 * n_in);
    let mut ulp = x.clone();
    ulp[5] = f32::from_bits(ulp[5].to_bits() + 1);
    let mut zero = x.clone();
    zero[40] = 0.0;
    let mut neg_zero = zero.clone();
    neg_zero[40] = -0.0;
    // A block whose largest magnitude is the element changed, so that its scale changes too.
    let mut big = x.clone();
    big[70] = 100.0;
    for (what, x) in [("x", &x), ("x again", &x), ("one ulp", &ulp), ("x", &x), ("zero", &zero), ("-0", &neg_zero), ("big", &big), ("x", &x)] {
        for m in [2, 1] {
            let x = &x[..m * n_in];
            let mut q8 = Q8Rows::default();
            q8.quantize(x, n_in);
            let want = run(ty, Int8Isa::Portable, w.bytes(), n_in, &q8, m);
            let mut got = vec![f32::NAN; m * n_out];
            be.matmul_prepared(&cw, x, m, &mut got);
            for r in 0..m {
                for j in 0..n_out {
                    assert_eq!(got[r * n_out + j].to_bits(), want[j * m + r].to_bits(), "{what}, m={m}: row {r} col {j}");
                }
            }
        }
    }
}

/// The block-sum formats at their largest integers: every quant at its largest magnitude (Q8_0's
/// -128 and 127, the nibble formats' 15, the fifth bits all set: 31) against activations all
/// rounding to 127 or to -127, through every kernel path, the group kernels over the stored
/// rows and over the interleaved copy included (AVX2 forced on AVX-512 machines too). The SIMD
/// kernels add some products in 16 bits before widening (four registers of `vpmaddubsw` pairs
/// for the 5-bit formats, eight below 16); a sum past i16 would wrap and differ from the
/// portable kernel's i32 arithmetic, which random values almost never reach.
#[test]
fn the_largest_integers_give_the_portable_bits() {
    use packlm::backend::cpu::CpuWeight;
    use packlm::pack::tensor::{TensorBytes, WeightTensor};
    let mut rng = Rng(37);
    for ty in [WeightType::Q8_0, WeightType::Q4_0, WeightType::Q5_0, WeightType::Q4_1, WeightType::Q5_1, WeightType::Q4_K, WeightType::Q5_K] {
        // Everything after the f16 scale (and min; a K super-block's d and dmin): the K formats'
        // 6-bit scales and mins at 63 too where the fill is 0xFF.
        let header = if matches!(ty, WeightType::Q8_0 | WeightType::Q4_0 | WeightType::Q5_0) { 2 } else { 4 };
        let (n_out, n_in) = (32, if ty.block_elems() == 256 { 768 } else { 640 });
        for fill in [0xFFu8, 0x80, 0x7F] {
            let mut bytes: Vec<u8> = (0..n_out).flat_map(|_| random_row(&mut rng, ty, n_in)).collect();
            for b in bytes.chunks_exact_mut(ty.block_bytes()) {
                b[header..].fill(fill);
            }
            let w = WeightTensor::new(format!("{ty}"), ty, vec![n_out, n_in], TensorBytes::Owned(std::sync::Arc::new(bytes))).unwrap();
            for sign in [1.0f32, -1.0] {
                let m = 9;
                let x: Vec<f32> = (0..m * n_in).map(|i| sign * (1 + i / n_in) as f32).collect();
                let mut q8 = Q8Rows::default();
                q8.quantize(&x, n_in);
                assert!(q8.q.iter().all(|&v| v == (127.0 * sign) as i8));
                let want = run(ty, Int8Isa::Portable, w.bytes(), n_in, &q8, m);
                let check = |got: &[f32], transposed: bool, what: &str| {
                    for r in 0..m {
                        for j in 0..n_out {
                            let g = if transposed { got[r * n_out + j] } else { got[j * m + r] };
                            assert_eq!(g.to_bits(), want[j * m + r].to_bits(), "{ty} bytes {fill:#x} x {sign}: {what}: row {r} col {j}");
                        }
                    }
                };
                for isa in isas() {
                    check(&run(ty, isa, w.bytes(), n_in, &q8, m), false, &format!("{isa:?}"));
                }
                for isa in [Isa::Avx512, Isa::Avx2] {
                    if !isa.available() || (isa == Isa::Avx512 && !Int8Isa::Avx512Vnni.available()) {
                        continue;
                    }
                    let be = HostBackend::with_isa(1, isa).unwrap().with_precision(Precision::Fast).with_background_interleave(false);
                    let cw = CpuWeight::new(&be, &w).unwrap();
                    for interleaved in [false, true] {
                        if interleaved {
                            be.interleave_now();
                        }
                        let mut got = vec![f32::NAN; m * n_out];
                        be.matmul_prepared(&cw, &x, m, &mut got);
                        check(&got, true, &format!("{isa:?} group kernels, interleaved {interleaved}"));
                    }
                }
            }
        }
    }
}
