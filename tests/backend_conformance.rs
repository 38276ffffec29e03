//! The conformance suite every backend runs (see src/backend/mod.rs for how to add one): the
//! reference, the host backend (1 and 3 threads, and each kernel path this CPU can run, forced),
//! the counting backend below, and the GPU (src/backend/gpu, a cargo feature) on whatever
//! adapter wgpu finds, in CI Mesa's llvmpipe Vulkan device, twice: with the device's own
//! bindings and with weights split into 4 KiB chunks (4 KiB bindings at the model level). With
//! no adapter the GPU is left out, saying so, unless PACKLM_REQUIRE_GPU is set (CI sets it):
//! then it is a failure. The npu backend (src/backend/graph, ONNX Runtime's CPU provider) runs
//! it too when its library is at hand; `make test` requires it (PACKLM_REQUIRE_ONNXRUNTIME).
//!
//! - every op of the `Backend` trait against the reference backend on random inputs of odd
//!   sizes (rows M = 1, 3, 8, 17; widths that are not multiples of any SIMD width), and matmul
//!   also on gguf-py's quantizations of every weight type: equal bits for the row operations on
//!   the CPU backends, within a stated bound on the GPU and for matmul and attention;
//! - batched == sequential, per op (matmul, attention) and per model pass, bit for bit;
//! - the KV store: truncate, export and import, past a plane's first 256 positions;
//! - truncate == fresh and restore == fresh, including a snapshot written by one backend and
//!   restored into a session of another;
//! - threads 1 == threads N (host).
//!
//! It also shows the seam is real: `Counting` is a test backend that keeps its tensors and KV in
//! its own arena (the engine gets handles that hold only an index) and counts the bytes that
//! cross to the host. A pass through it gives the reference's bits and hands back exactly
//! wanted rows x n_vocab x 4 bytes; any engine access to activation or KV memory other than
//! through the op set would fail (its handles hold no data).

mod common;

use packlm::backend::cpu::CpuBackend;
use packlm::backend::host::row_dot::Isa;
use packlm::backend::host::HostBackend;

use std::any::Any;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::quant::gguf_py_vectors;
use common::*;
use half::f16;
use packlm::backend::{self, AttentionShape, Backend, BackendKind, KvStore, Precision, Tensor, Vector, Weight};
use packlm::engine::speculative::Acceptance;
use packlm::engine::{Model, Session, Want};
use packlm::error::Result;
use packlm::pack::tensor::{TensorBytes, WeightTensor};
use packlm::quant::WeightType;
use packlm::semantics::rope::RopeSpec;
use packlm::semantics::{Activation, KvSource, LayerSpec};

const ROWS: [usize; 4] = [1, 3, 8, 17];

/// The GPU's row ops (norms, activations, rope, embedding) against the reference's: the device
/// computes in f32 with fused multiply-adds, partial sums over 64 threads joined in a tree, and
/// the shader's exp; the reference accumulates in f64 and sequentially. For inputs in [-1, 1)
/// and widths up to 512 the differences are a few f32 ulps of the sums.
const GPU_ROW_TOL: f32 = 1e-5;

/// The graph backend's row ops against the reference's: ONNX Runtime's f32 kernels (vector
/// reductions for the norms' means, its own exp, tanh and sigmoid) against f64 sums and libm.
const GRAPH_ROW_TOL: f32 = 1e-5;

fn reference() -> Box<dyn Backend> {
    backend::create(BackendKind::Reference, 1, Precision::Exact).unwrap()
}

/// A backend this suite is run against.
struct UnderTest {
    name: &'static str,
    be: Box<dyn Backend>,
    /// How its row ops compare with the reference's: None, bit for bit (the CPU backends run
    /// the reference's arithmetic); Some(tol), within tol (the GPU, GPU_ROW_TOL).
    row_tol: Option<f32>,
}

/// Every backend this suite is run against.
fn backends() -> Vec<UnderTest> {
    let cpu = |name, be| UnderTest { name, be, row_tol: None };
    let mut all = vec![
        cpu("reference", reference()),
        cpu("host, 1 thread", backend::create(BackendKind::Host, 1, Precision::Exact).unwrap()),
        cpu("host, 3 threads", backend::create(BackendKind::Host, 3, Precision::Exact).unwrap()),
        cpu("counting", Box::new(Counting::new())),
    ];
    // Every kernel path this CPU can run, forced, not only its best: the AVX2 kernels are
    // tested on an AVX-512 machine too, and the portable ones everywhere.
    for (name, isa) in [
        ("host, portable kernels", Isa::Portable),
        ("host, AVX2 kernels", Isa::Avx2),
        ("host, AVX-512 kernels", Isa::Avx512),
        ("host, NEON kernels", Isa::Neon),
    ] {
        if isa.available() {
            all.push(cpu(name, Box::new(CpuBackend::new(HostBackend::with_isa(2, isa).unwrap()))));
        }
    }
    all.extend(gpu_backends().into_iter().map(|(name, be)| UnderTest { name, be, row_tol: Some(GPU_ROW_TOL) }));
    if let Some(be) = graph(1) {
        all.push(UnderTest { name: "npu (ONNX Runtime, cpu provider)", be: Box::new(be), row_tol: Some(GRAPH_ROW_TOL) });
    }
    all
}

/// Every backend's way to open a model, for the model-level tests: the GPU with the device's
/// bindings and with 4 KiB ones (passes split, matrices across buffers).
fn model_openers() -> Vec<(&'static str, Opener)> {
    let mut all: Vec<(&'static str, Opener)> = vec![
        ("reference", Box::new(|p| open_with(p, BackendKind::Reference, 1))),
        ("host", Box::new(|p| open_with(p, BackendKind::Host, 2))),
        ("counting", Box::new(|p| Arc::new(Model::open_on(p, Box::new(Counting::new())).unwrap()))),
    ];
    all.extend(gpu_model_openers());
    all
}

/// A row op's output against the reference's: equal bits, or within the backend's tolerance.
fn assert_row_op(got: &[f32], want: &[f32], tol: Option<f32>, what: &str) {
    match tol {
        None => assert_bits_equal(got, want, what),
        Some(tol) => assert_close(got, want, tol, what),
    }
}

/// A `[rows, cols]` weight of random values in type `ty` (F32, F16, Q8_0, Q5_1, Q5_K or MXFP4).
fn weight(ty: WeightType, rows: usize, cols: usize, rng: &mut Rng) -> WeightTensor {
    let bytes: Vec<u8> = match ty {
        WeightType::F32 => (0..rows * cols).flat_map(|_| rng.sym().to_le_bytes()).collect(),
        WeightType::F16 => (0..rows * cols).flat_map(|_| f16::from_f32(rng.sym()).to_le_bytes()).collect(),
        WeightType::Q8_0 => (0..rows * cols / 32)
            .flat_map(|_| {
                let mut b = f16::from_f32(rng.sym() * 0.02).to_le_bytes().to_vec();
                b.extend((0..32).map(|_| rng.next() as u8));
                b
            })
            .collect(),
        // Random bits with a small f16 scale and min (|w| stays under about 1): the formats with
        // fifth bits and a min, 32-element blocks (Q5_1) and 256-element super-blocks (Q5_K).
        WeightType::Q5_1 | WeightType::Q5_K => {
            let (bb, d) = if ty == WeightType::Q5_1 { (24, 0.02) } else { (176, 0.0005) };
            (0..rows * cols / ty.block_elems())
                .flat_map(|_| {
                    let mut b = f16::from_f32(rng.sym() * d).to_le_bytes().to_vec();
                    b.extend(f16::from_f32(rng.sym() * d).to_le_bytes());
                    b.extend((4..bb).map(|_| rng.next() as u8));
                    b
                })
                .collect()
        }
        // Random codes with an E8M0 scale from 2^-9 to 2^-6 (|w| under 0.2): a block of 17
        // bytes, whose moved scales fill no whole word when the block count is odd.
        WeightType::MXFP4 => (0..rows * cols / 32)
            .flat_map(|_| {
                let mut b = vec![119 + (rng.next() % 4) as u8];
                b.extend((0..16).map(|_| rng.next() as u8));
                b
            })
            .collect(),
        other => panic!("no random weights of type {other:?} here"),
    };
    WeightTensor::new("w".into(), ty, vec![rows, cols], TensorBytes::Owned(Arc::new(bytes))).unwrap()
}

/// Runs `op` on the backend under test and on the reference with the same inputs; returns both
/// outputs (read back).
fn both(be: &dyn Backend, op: impl Fn(&dyn Backend) -> Vec<f32>) -> (Vec<f32>, Vec<f32>) {
    (op(be), op(reference().as_ref()))
}

#[test]
fn row_ops_equal_the_reference() {
    let mut rng = Rng(7);
    for UnderTest { name, be, row_tol } in backends() {
        let be = be.as_ref();
        for m in ROWS {
            let width = 37;
            let x = rng.vec(m * width);
            let y = rng.vec(m * width);
            let w = rng.vec(width);
            let what = |op: &str| format!("{name}: {op}, {m} rows");
            let (a, b) = both(be, |be| {
                let (xt, wv, mut out) = (put(be, &x), be.prepare_vector(&w).unwrap(), be.tensor(m * width));
                be.rms_norm(&xt, &wv, 1e-6, m, width, &mut out);
                be.read(&out, m * width)
            });
            assert_row_op(&a, &b, row_tol, &what("rms_norm"));
            let (a, b) = both(be, |be| {
                let (mut xt, wv) = (put(be, &x), be.prepare_vector(&w).unwrap());
                be.rms_norm_inplace(&mut xt, &wv, 1e-6, m, width);
                be.read(&xt, m * width)
            });
            assert_row_op(&a, &b, row_tol, &what("rms_norm_inplace"));
            // One rounding per element, on every backend.
            let (a, b) = both(be, |be| {
                let (mut xt, bias) = (put(be, &x), be.prepare_vector(&w).unwrap());
                be.add_bias(&mut xt, &bias, m);
                be.read(&xt, m * width)
            });
            assert_bits_equal(&a, &b, &what("add_bias"));
            // The clamped SwiGLU's limit inside the inputs' range, so that both clamps bite.
            for act in [Activation::Silu, Activation::GeluTanh, Activation::ClampedSwiglu { alpha: 1.702, limit: 0.5 }] {
                let (a, b) = both(be, |be| {
                    let (mut g, u) = (put(be, &x), put(be, &y));
                    be.gated_activation(act, &mut g, &u, m * width);
                    be.read(&g, m * width)
                });
                assert_row_op(&a, &b, row_tol, &what(&format!("gated_activation {act:?}")));
            }
            let (a, b) = both(be, |be| {
                let (mut xt, yt) = (put(be, &x), put(be, &y));
                be.add(&mut xt, &yt, m * width);
                be.scale(&mut xt, 0.37, m * width);
                be.softcap(&mut xt, 0.9, m * width);
                let mut c = be.tensor(m * width);
                be.copy(&xt, &mut c, m * width);
                be.read(&c, m * width)
            });
            assert_row_op(&a, &b, row_tol, &what("add, scale, softcap, copy"));
            // Heads of 10 (q/k-norm with a weight, v-norm without), rope from position 5.
            let (heads, d) = (3, 10);
            let hx = rng.vec(m * heads * d);
            let hw = rng.vec(d);
            let rope = RopeSpec {
                kind: "default".into(),
                theta: 10000.0,
                factor: None,
                rotary_dims: d,
                inv_freq: (0..d / 2).map(|i| 10000f32.powf(-((2 * i) as f32) / d as f32)).collect(),
                attention_factor: 1.0,
            };
            let (a, b) = both(be, |be| {
                let (mut t, wv) = (put(be, &hx), be.prepare_vector(&hw).unwrap());
                be.head_norm(&mut t, Some(&wv), 1e-6, m, heads * d, d);
                be.rope(&mut t, &rope, m, heads * d, d, 5);
                be.head_norm(&mut t, None, 1e-6, m, heads * d, d);
                be.read(&t, m * heads * d)
            });
            assert_row_op(&a, &b, row_tol, &what("head_norm, rope"));
            // Copies, bit for bit on every backend.
            let (a, b) = both(be, |be| {
                let (src, mut rows_out, mut cols_out) = (put(be, &x), be.tensor(m * width), be.tensor(m * 11));
                let picked: Vec<usize> = (0..m).rev().collect();
                be.gather_rows(&src, &picked, width, &mut rows_out);
                be.gather_columns(&src, m, width, 13, 11, &mut cols_out);
                let mut r = be.read(&rows_out, m * width);
                r.extend(be.read(&cols_out, m * 11));
                r
            });
            assert_bits_equal(&a, &b, &what("gather_rows, gather_columns"));
            // A mixture's sum: rows picked out of order, one of them twice, each product and
            // sum rounded alone (no fused multiply-add), so the same bits on every backend.
            let picked: Vec<usize> = (0..m).rev().chain([m / 2]).collect();
            let weights: Vec<f32> = picked.iter().map(|&r| 0.3 + r as f32 * 0.17).collect();
            let ys = rng.vec(picked.len() * width);
            let (a, b) = both(be, |be| {
                let (mut out, yt) = (put(be, &x), put(be, &ys));
                be.add_rows_scaled(&mut out, &yt, &picked, &weights, width);
                be.read(&out, m * width)
            });
            assert_bits_equal(&a, &b, &what("add_rows_scaled"));
            let mut want = x.clone();
            for ((&r, &w), y) in picked.iter().zip(&weights).zip(ys.chunks_exact(width)) {
                for (o, &v) in want[r * width..(r + 1) * width].iter_mut().zip(y) {
                    *o = (w * v) + *o;
                }
            }
            assert_bits_equal(&a, &want, &what("add_rows_scaled against its definition"));
        }
    }
}

#[test]
fn embedding_and_per_layer_combine_equal_the_reference() {
    let mut rng = Rng(11);
    let table = weight(WeightType::F16, 29, 37, &mut rng);
    for UnderTest { name, be, row_tol } in backends() {
        for m in ROWS {
            let tokens: Vec<u32> = (0..m as u32).map(|i| (i * 7 + 3) % 29).collect();
            let c0 = rng.vec(m * 37);
            let (a, b) = both(be.as_ref(), |be| {
                let t = be.prepare_matrix(&table).unwrap();
                let mut e = be.tensor(m * 37);
                be.embed(&t, &tokens, Some(1.5), &mut e);
                let mut c = put(be, &c0);
                be.per_layer_combine(&mut c, &t, &tokens, 0.7, 0.5);
                let mut r = be.read(&e, m * 37);
                r.extend(be.read(&c, m * 37));
                r
            });
            assert_row_op(&a, &b, row_tol, &format!("{name}: embed, per_layer_combine, {m} rows"));
        }
    }
}

/// The host's dot products accumulate in f32 lanes, the GPU's in f32 with fused multiply-adds
/// joined in a tree, the reference's in f64: they differ by rounding only. Inputs are in
/// [-1, 1), weights under about 1, rows at most 256 wide, so 1e-4 is ample.
const KERNEL_TOL: f32 = 1e-4;

/// Every weight type's matmul against the reference, and M rows at once bit-identical to one
/// row at a time: random weights of the types with their own block shapes (a 21 x 256 Q5_K is
/// one super-block per row), then gguf-py's quantizations of every type
/// (tests/fixtures/make_quant_vectors.py: realistic scales, and the float types' inf and NaN
/// rows), whose outputs are larger: their bound is KERNEL_TOL times the largest output.
#[test]
fn matmul_equals_the_reference_and_batched_equals_sequential() {
    let mut rng = Rng(13);
    let random = [
        (WeightType::F32, 19, 37),
        (WeightType::F16, 23, 53),
        (WeightType::Q8_0, 21, 160),
        (WeightType::Q5_1, 21, 160),
        (WeightType::Q5_K, 21, 256),
        (WeightType::MXFP4, 21, 160),
    ]
    .map(|(ty, n_out, n_in)| (weight(ty, n_out, n_in, &mut rng), false));
    let gguf_py = WeightType::ALL.map(|ty| (gguf_py_vectors(ty).0, true));
    let backends = backends();
    let r = reference();
    for (w, relative) in random.iter().chain(&gguf_py) {
        let (ty, n_out, n_in) = (w.ty, w.rows(), w.cols());
        let kind = if *relative { "gguf-py" } else { "random" };
        let run = |be: &dyn Backend, pw: &Weight, x: &[f32], m: usize| {
            let (xt, mut out) = (put(be, x), be.tensor(m * n_out));
            be.matmul(pw, &xt, m, &mut out);
            be.read(&out, m * n_out)
        };
        let rw = r.prepare_matrix(w).unwrap();
        for m in ROWS {
            let x = rng.vec(m * n_in);
            let want = run(r.as_ref(), &rw, &x, m);
            let largest = want.iter().filter(|v| v.is_finite()).fold(1f32, |a, v| a.max(v.abs()));
            let tol = if *relative { KERNEL_TOL * largest } else { KERNEL_TOL };
            for UnderTest { name, be, .. } in &backends {
                let be = be.as_ref();
                let pw = be.prepare_matrix(w).unwrap();
                let got = run(be, &pw, &x, m);
                assert_close_where_finite(&got, &want, tol, &format!("{name}: {kind} {ty:?} matmul, {m} rows"));
                let rows: Vec<f32> = (0..m).flat_map(|i| run(be, &pw, &x[i * n_in..(i + 1) * n_in], 1)).collect();
                assert_bits_equal(&got, &rows, &format!("{name}: {kind} {ty:?} matmul, {m} rows vs one at a time"));
            }
        }
    }
}

/// `Backend::lora` (the adapter update `out += s * ((x A^T) B^T)`) and `Backend::matmul_lora` (a
/// map with its bias and adapters) on every backend: within KERNEL_TOL of the reference's
/// four-op default, batched == one row at a time, `matmul_lora` == its parts (matmul, bias,
/// each update) bit for bit, and the host's bits the same on every thread count and forced
/// kernel path. A and B in f32 and f16 (read in place on the host), rank 20 (the host's pieces
/// cut the rank in chunks, one short).
#[test]
fn lora_equals_the_reference_and_batched_equals_sequential() {
    let mut rng = Rng(29);
    let (rank, n_in, n_out) = (20, 37, 53);
    let mat = |ty: WeightType, rows: usize, cols: usize, v: &[f32]| {
        let bytes: Vec<u8> = match ty {
            WeightType::F16 => v.iter().flat_map(|&x| f16::from_f32(x).to_le_bytes()).collect(),
            _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        WeightTensor::new("w".into(), ty, vec![rows, cols], TensorBytes::Owned(Arc::new(bytes))).unwrap()
    };
    let transpose = |v: &[f32], rows: usize, cols: usize| (0..rows * cols).map(|i| v[(i % rows) * cols + i / rows]).collect::<Vec<f32>>();
    let w = weight(WeightType::F32, n_out, n_in, &mut rng);
    let bias: Vec<f32> = rng.vec(n_out);
    let backends = backends();
    let r = reference();
    for ty in [WeightType::F32, WeightType::F16] {
        // Two adapters, the second at a negative scale.
        let ups: Vec<(WeightTensor, WeightTensor, WeightTensor, f32)> = [0.75f32, -0.5]
            .iter()
            .map(|&s| {
                let (a, b) = (rng.vec(rank * n_in), rng.vec(n_out * rank));
                (mat(ty, rank, n_in, &a), mat(ty, n_out, rank, &b), mat(ty, rank, n_out, &transpose(&b, n_out, rank)), s)
            })
            .collect();
        let mut host_bits: Option<(&str, Vec<f32>)> = None;
        for m in ROWS {
            let x = rng.vec(m * n_in);
            let base = rng.vec(m * n_out);
            // One update, alone.
            let lora = |be: &dyn Backend, x: &[f32], m: usize, base: &[f32]| {
                let (a, b, bt, s) = &ups[0];
                let (pa, pb, pbt) = (be.prepare_matrix(a).unwrap(), be.prepare_matrix(b).unwrap(), be.prepare_matrix(bt).unwrap());
                let (xt, mut out) = (put(be, x), put(be, base));
                let (mut rr, mut delta) = (be.tensor(m * rank), be.tensor(m * n_out));
                be.lora(&pa, &pb, &pbt, &xt, m, *s, &mut rr, &mut delta, &mut out);
                be.read(&out, m * n_out)
            };
            // The map: matmul, bias, both updates, in one call and in parts.
            let map = |be: &dyn Backend, whole: bool| {
                let (pw, pbias) = (be.prepare_matrix(&w).unwrap(), be.prepare_vector(&bias).unwrap());
                let prepared: Vec<_> = ups.iter().map(|(a, b, bt, s)| (be.prepare_matrix(a).unwrap(), be.prepare_matrix(b).unwrap(), be.prepare_matrix(bt).unwrap(), *s)).collect();
                let (xt, mut out) = (put(be, &x), be.tensor(m * n_out));
                let (mut rr, mut delta) = (be.tensor(m * rank), be.tensor(m * n_out));
                if whole {
                    let args: Vec<backend::LoraArgs> = prepared.iter().map(|(a, b, bt, s)| backend::LoraArgs { a, b, bt, s: *s }).collect();
                    be.matmul_lora(&pw, Some(&pbias), &xt, m, &mut out, &args, &mut rr, &mut delta);
                } else {
                    be.matmul(&pw, &xt, m, &mut out);
                    be.add_bias(&mut out, &pbias, m);
                    for (a, b, bt, s) in &prepared {
                        be.lora(a, b, bt, &xt, m, *s, &mut rr, &mut delta, &mut out);
                    }
                }
                be.read(&out, m * n_out)
            };
            let want = lora(r.as_ref(), &x, m, &base);
            let want_map = map(r.as_ref(), false);
            for UnderTest { name, be, .. } in &backends {
                let be = be.as_ref();
                let what = format!("{name}: {ty:?} lora, {m} rows");
                let got = lora(be, &x, m, &base);
                assert_close_where_finite(&got, &want, KERNEL_TOL, &what);
                let rows: Vec<f32> = (0..m).flat_map(|i| lora(be, &x[i * n_in..(i + 1) * n_in], 1, &base[i * n_out..(i + 1) * n_out])).collect();
                assert_bits_equal(&got, &rows, &format!("{what} vs one at a time"));
                let whole = map(be, true);
                assert_close_where_finite(&whole, &want_map, KERNEL_TOL, &format!("{what}: matmul_lora"));
                assert_bits_equal(&whole, &map(be, false), &format!("{what}: matmul_lora vs its parts"));
                if name.starts_with("host") && m == 17 {
                    let got: Vec<f32> = got.into_iter().chain(whole).collect();
                    match &host_bits {
                        None => host_bits = Some((name, got)),
                        Some((first, bits)) => assert_bits_equal(&got, bits, &format!("{what} and matmul_lora vs {first}")),
                    }
                }
            }
        }
    }
}

/// `got` within `tol` of `want` where `want` is finite, and the same infinity or a NaN where it
/// is not (gguf-py's float fixtures hold inf and NaN weights).
fn assert_close_where_finite(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if w.is_finite() {
            assert!((g - w).abs() <= tol, "{what}: element {i}: {g} vs the reference's {w}, more than {tol} apart");
        } else {
            assert!(g == w || (g.is_nan() && w.is_nan()), "{what}: element {i}: {g} where the reference has {w}");
        }
    }
}

#[test]
fn attention_equals_the_reference_and_batched_equals_sequential() {
    let base = open_with(&tiny("llama"), BackendKind::Reference, 1).spec().layers[0].clone();
    let mut rng = Rng(17);
    // GQA 6 heads over 2 KV heads of 11; a layer sharing layer 0's plane.
    let layers = [layer_like(&base, 6, 2, 11, KvSource::Own), layer_like(&base, 6, 2, 11, KvSource::SharedWith { owner: 0 })];
    let kvw = 2 * 11;
    let shapes = [
        AttentionShape {
            n_heads: 6,
            n_kv_heads: 2,
            head_dim: 11,
            scale: 0.3,
            softcap: None,
            window: None,
            causal: true,
        },
        AttentionShape {
            n_heads: 6,
            n_kv_heads: 2,
            head_dim: 11,
            scale: 0.3,
            softcap: Some(2.5),
            window: Some(5),
            causal: true,
        },
    ];
    // Per-head sink logits (gpt-oss) from -3 to 3, on both shapes.
    let sinks: Vec<f32> = (0..6).map(|h| h as f32 * 1.2 - 3.0).collect();
    // Multi-head attention (as many KV heads as query heads, on a plane as wide): one query
    // row per KV head in a step.
    let mha = AttentionShape { n_heads: 2, n_kv_heads: 2, head_dim: 11, scale: 0.3, softcap: None, window: None, causal: true };
    let cases = [(&shapes[0], None), (&shapes[1], None), (&shapes[0], Some(&sinks[..])), (&shapes[1], Some(&sinks[..])), (&mha, None)];
    let backends = backends();
    // Starts beyond one tile of 64 keys too, so that the running max and sum carry over tiles.
    for start in [4, 70] {
        for m in ROWS {
            for &(shape, sinks) in &cases {
                let qw = shape.n_heads * shape.head_dim;
                let (k, v, q) = (rng.vec((start + m) * kvw), rng.vec((start + m) * kvw), rng.vec(m * qw));
                // The plane holds `start` earlier positions, then this pass's m rows.
                let run = |be: &dyn Backend| {
                    let mut kv = be.new_kv(&layers);
                    be.kv_append(kv.as_mut(), 0, &put(be, &k[..start * kvw]), &put(be, &v[..start * kvw]), start);
                    kv.advance(start);
                    be.kv_append(kv.as_mut(), 0, &put(be, &k[start * kvw..]), &put(be, &v[start * kvw..]), m);
                    let (qt, mut out) = (put(be, &q), be.tensor(m * qw));
                    be.attention(kv.as_ref(), 0, shape, sinks, &qt, m, start, &mut out);
                    let batched = be.read(&out, m * qw);
                    let single: Vec<f32> = (0..m)
                        .flat_map(|r| {
                            let (qt, mut out) = (put(be, &q[r * qw..(r + 1) * qw]), be.tensor(qw));
                            be.attention(kv.as_ref(), 0, shape, sinks, &qt, 1, start + r, &mut out);
                            be.read(&out, qw)
                        })
                        .collect();
                    (batched, single)
                };
                let (want, _) = run(reference().as_ref());
                for UnderTest { name, be, .. } in &backends {
                    let (got, single) = run(be.as_ref());
                    let what = format!("{name}: attention {shape:?}, sinks {sinks:?}, start {start}, {m} rows");
                    assert_bits_equal(&got, &single, &format!("{what}: batched vs one at a time"));
                    assert_close(&got, &want, KERNEL_TOL, &what);
                }
            }
        }
    }
}

/// The host's attention gives the same bits whichever x86 kernels are forced (AVX2's 256-bit
/// products and value sums, AVX-512's 512-bit ones, the portable ones, whose `dot` takes AVX2's
/// products on such a CPU), at head sizes that take the eight-key
/// products (multiples of 32) and over enough keys for several tiles, with a window, GQA, and
/// batches as wide as a verify and a prefill's group.
#[test]
fn host_attention_bits_do_not_depend_on_the_instruction_set() {
    let isas: Vec<Isa> = [Isa::Avx2, Isa::Avx512, Isa::Portable].into_iter().filter(|i| i.available()).collect();
    if !Isa::Avx2.available() {
        eprintln!("skipped: this CPU runs none of the x86 kernels");
        return;
    }
    let base = open_with(&tiny("llama"), BackendKind::Reference, 1).spec().layers[0].clone();
    let mut rng = Rng(29);
    for (nh, nkv, d, window) in [(4, 1, 256, None), (9, 3, 64, Some(40)), (2, 2, 96, None)] {
        let layers = [layer_like(&base, nh, nkv, d, KvSource::Own)];
        let (qw, kvw) = (nh * d, nkv * d);
        let shape = AttentionShape {
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: d,
            scale: 0.0625,
            softcap: None,
            window,
            causal: true,
        };
        for m in [1usize, 2, 9, 17] {
            let start = 70;
            let (k, v, q) = (rng.vec((start + m) * kvw), rng.vec((start + m) * kvw), rng.vec(m * qw));
            let outs: Vec<Vec<f32>> = isas
                .iter()
                .map(|&isa| {
                    let be = CpuBackend::new(HostBackend::with_isa(2, isa).unwrap());
                    let mut kv = be.new_kv(&layers);
                    be.kv_append(kv.as_mut(), 0, &put(&be, &k), &put(&be, &v), start + m);
                    let (qt, mut out) = (put(&be, &q), be.tensor(m * qw));
                    be.attention(kv.as_ref(), 0, &shape, None, &qt, m, start, &mut out);
                    be.read(&out, m * qw)
                })
                .collect();
            for (isa, out) in isas.iter().zip(&outs).skip(1) {
                assert_bits_equal(out, &outs[0], &format!("{isa:?} vs AVX2 attention, {nh} heads over {nkv} of {d}, window {window:?}, {m} rows"));
            }
        }
    }
}

/// The ops of a mixture routed where the logits are (engine/moe.rs `moe_block_dense`): `route`
/// against `engine::moe::route` on the host for each routing rule (a row's weights over all
/// experts, zero where not chosen), `add_rows_weighted` and `sigmoid` against the plain
/// arithmetic. Every backend runs them (the provided forms on the CPU backends: the same bits).
#[test]
fn dense_routing_ops_equal_the_host_routing() {
    use packlm::semantics::{MoeSpec, Routing};
    let mut rng = Rng(41);
    let (rows, n, width) = (5, 8, 12);
    let specs = [
        MoeSpec { n_experts: n, top_k: 2, width: 4, routing: Routing::SoftmaxTopK { renormalize: true }, biases: false, shared_width: None },
        MoeSpec { n_experts: n, top_k: 3, width: 4, routing: Routing::SoftmaxTopK { renormalize: false }, biases: false, shared_width: None },
        MoeSpec { n_experts: n, top_k: 2, width: 4, routing: Routing::TopKSoftmax, biases: false, shared_width: None },
    ];
    let logits: Vec<f32> = rng.vec(rows * n).iter().map(|v| v * 4.0).collect();
    let (y, out0) = (rng.vec(rows * width), rng.vec(rows * width));
    for UnderTest { name, be, row_tol } in backends() {
        let be = be.as_ref();
        for spec in &specs {
            let mut want = vec![0.0f32; rows * n];
            for (r, row) in logits.chunks_exact(n).enumerate() {
                let mut p = row.to_vec();
                packlm::engine::moe::route(&mut p, spec, |e, w| want[r * n + e] = w);
            }
            let mut t = put(be, &logits);
            be.route(&mut t, spec, rows);
            let got = be.read(&t, rows * n);
            assert_row_op(&got, &want, row_tol, &format!("{name}: route {:?} top {}", spec.routing, spec.top_k));
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(*g == 0.0, *w == 0.0, "{name}: the same experts chosen ({got:?} vs {want:?})");
            }
            // Expert 3's outputs added with each row's weight for it.
            let mut out = put(be, &out0);
            be.add_rows_weighted(&mut out, &put(be, &y), &t, 3, n, rows, width);
            let want_out: Vec<f32> = (0..rows * width).map(|i| out0[i] + got[(i / width) * n + 3] * y[i]).collect();
            assert_row_op(&be.read(&out, rows * width), &want_out, row_tol, &format!("{name}: add_rows_weighted"));
        }
        let mut t = put(be, &logits);
        be.sigmoid(&mut t, rows * n);
        let want: Vec<f32> = logits.iter().map(|&g| packlm::engine::moe::sigmoid(g)).collect();
        assert_row_op(&be.read(&t, rows * n), &want, row_tol, &format!("{name}: sigmoid"));
    }
}

#[test]
fn kv_store_truncates_exports_and_imports() {
    let base = open_with(&tiny("llama"), BackendKind::Reference, 1).spec().layers[0].clone();
    let layers = [layer_like(&base, 2, 1, 9, KvSource::Own), layer_like(&base, 2, 1, 9, KvSource::SharedWith { owner: 0 }), layer_like(&base, 4, 2, 5, KvSource::Own)];
    let mut rng = Rng(19);
    for UnderTest { name, be, .. } in backends() {
        let be = be.as_ref();
        let mut kv = be.new_kv(&layers);
        assert_eq!((kv.n_layers(), kv.plane_width(0), kv.plane_width(1), kv.plane_width(2)), (3, Some(9), None, Some(10)), "{name}");
        // 300 rows in two passes: a plane grows past its first 256 positions (the GPU's first
        // allocation) during the second.
        let (k0, v0, k2, v2) = (rng.vec(300 * 9), rng.vec(300 * 9), rng.vec(300 * 10), rng.vec(300 * 10));
        be.kv_append(kv.as_mut(), 0, &put(be, &k0[..200 * 9]), &put(be, &v0[..200 * 9]), 200);
        be.kv_append(kv.as_mut(), 2, &put(be, &k2[..200 * 10]), &put(be, &v2[..200 * 10]), 200);
        assert_eq!(kv.positions(), 0, "{name}: rows of an unfinished pass are not held");
        kv.advance(200);
        be.kv_append(kv.as_mut(), 0, &put(be, &k0[200 * 9..]), &put(be, &v0[200 * 9..]), 100);
        be.kv_append(kv.as_mut(), 2, &put(be, &k2[200 * 10..]), &put(be, &v2[200 * 10..]), 100);
        kv.advance(100);
        let export = |kv: &dyn KvStore, layer| {
            let mut out = None;
            kv.export_plane(layer, &mut |k, v| out = Some((k.to_vec(), v.to_vec())));
            out
        };
        assert_eq!(export(kv.as_ref(), 0), Some((k0.clone(), v0.clone())), "{name}: layer 0 after growth");
        kv.truncate(3);
        assert_eq!(kv.positions(), 3, "{name}");
        assert_eq!(export(kv.as_ref(), 0), Some((k0[..27].to_vec(), v0[..27].to_vec())), "{name}: layer 0 after truncate");
        assert_eq!(export(kv.as_ref(), 1), None, "{name}: a shared layer exports nothing");
        assert_eq!(export(kv.as_ref(), 2), Some((k2[..30].to_vec(), v2[..30].to_vec())), "{name}: layer 2 after truncate");
        let mut other = be.new_kv(&layers);
        other.import(vec![Some((k0.clone(), v0.clone())), None, Some((k2.clone(), v2.clone()))], 300).unwrap();
        assert_eq!(other.positions(), 300, "{name}");
        assert_eq!(export(other.as_ref(), 2), Some((k2.clone(), v2.clone())), "{name}: imported plane");
    }
}

/// batched == sequential, truncate == fresh, restore == fresh, bit for bit, on the tiny
/// fixtures with shared planes, per-layer inputs, sliding windows, softcaps and qkv bias; with
/// the GPU's 4 KiB bindings, passes of 12 rows run as several (the engine splits them), and
/// sessions hold fewer positions than the model's context (Session::new caps them).
#[test]
fn every_backend_keeps_the_model_level_invariants() {
    for (name, open_model) in model_openers() {
        model_invariants(name, open_model.as_ref());
    }
    if graph(1).is_some() {
        model_invariants("npu", &|p| Arc::new(Model::open_on(p, Box::new(graph(1).unwrap())).unwrap()));
    }
}

#[test]
fn host_bits_do_not_depend_on_the_thread_count() {
    for fixture in ["llama", "gemma4", "qwen3_moe", "gpt_oss_mxfp4"] {
        let tokens = golden(&tiny(fixture)).tokens;
        let one = all_rows(&open_with(&tiny(fixture), BackendKind::Host, 1), &tokens);
        for threads in [2, 3, 5] {
            let n = all_rows(&open_with(&tiny(fixture), BackendKind::Host, threads), &tokens);
            assert_bits_equal(&n, &one, &format!("{fixture}: {threads} threads vs 1"));
        }
    }
}

/// A snapshot is portable across backends: written by one, restored into a session of another,
/// it re-encodes to the same bytes, and the next step is within the kernel bound of the
/// writer's own next step and of a fresh session on the restoring backend (the restored keys
/// are the writer's; the next row is computed by the restoring backend: on the same backend
/// that equals a fresh pass, across backends it is close to it).
#[test]
fn snapshots_restore_across_backends() {
    for fixture in ["gemma4", "llama"] {
        let dir = tiny(fixture);
        let tokens = golden(&dir).tokens;
        let host = open_with(&dir, BackendKind::Host, 2);
        let reference = open_with(&dir, BackendKind::Reference, 1);
        let counting = Arc::new(Model::open_on(&dir, Box::new(Counting::new())).unwrap());
        let v = host.spec().vocab_size;
        let mut pairs = vec![(&host, &reference, "host -> reference"), (&reference, &host, "reference -> host"), (&host, &counting, "host -> counting")];
        let gpu = gpu_model_openers().into_iter().find(|(name, _)| *name == "gpu").map(|(_, open)| open(&dir));
        pairs.extend(gpu.iter().flat_map(|gpu| [(&host, gpu, "host -> gpu"), (gpu, &host, "gpu -> host")]));
        let npu = graph(1).map(|be| Arc::new(Model::open_on(&dir, Box::new(be)).unwrap()));
        pairs.extend(npu.iter().flat_map(|npu| [(&host, npu, "host -> npu"), (npu, &host, "npu -> host")]));
        if let (Some(gpu), Some(npu)) = (&gpu, &npu) {
            pairs.extend([(gpu, npu, "gpu -> npu"), (npu, gpu, "npu -> gpu")]);
        }
        for (from, to, what) in pairs {
            let what = format!("{fixture}, {what}");
            let mut a = Session::new(from.clone(), 0).unwrap();
            a.step_batch(&tokens[..9], Want::None).unwrap();
            let snap = a.snapshot();
            let mut b = Session::new(to.clone(), 0).unwrap();
            b.restore(&snap).unwrap();
            assert!(b.snapshot() == snap, "{what}: the restored state re-encodes to the same bytes");
            let next = b.step(tokens[9]).unwrap();
            let writer_next = a.step(tokens[9]).unwrap();
            assert_close(&next, &writer_next, KERNEL_TOL, &format!("{what}: next logits vs the writer's"));
            let fresh = all_rows(to, &tokens[..10]);
            assert_close(&next, &fresh[9 * v..], KERNEL_TOL, &format!("{what}: next logits vs a fresh session"));
        }
    }
}

/// A pass through the counting backend hands exactly the wanted rows' logits to the host and
/// gives the reference's bits.
#[test]
fn only_the_wanted_logits_cross_to_the_host() {
    let dir = tiny("gemma4");
    let tokens = golden(&dir).tokens;
    let (m, counters) = open_counting(&dir);
    let r = open_with(&dir, BackendKind::Reference, 1);
    let v = m.spec().vocab_size;
    for (want, rows) in [(Want::Last, 1), (Want::All, tokens.len()), (Want::None, 0)] {
        let mut s = Session::new(m.clone(), 0).unwrap();
        let read_before = counters.to_host.load(Ordering::SeqCst);
        let got = s.step_batch(&tokens, want).unwrap();
        let read = counters.to_host.load(Ordering::SeqCst) - read_before;
        assert_eq!(read, rows * v * 4, "{want:?}: bytes handed to the host");
        let mut rs = Session::new(r.clone(), 0).unwrap();
        assert_bits_equal(&got, &rs.step_batch(&tokens, want).unwrap(), &format!("{want:?}: counting vs reference"));
    }
    assert_eq!(counters.from_host.load(Ordering::SeqCst), 0, "the engine uploads no activations");
    assert!(counters.ops.load(Ordering::SeqCst) > 0);
}

/// One pass over N sessions reads each weight matrix once, whatever N is: the matmul calls of a
/// shared decode step of 1, 2, 4 and 8 sessions are those of one session's step (and the
/// logits are each session's own, by the reference's bits).
#[test]
fn a_pass_over_many_sessions_reads_each_weight_once() {
    let dir = tiny("gemma4");
    let (m, counters) = open_counting(&dir);
    let r = open_with(&dir, BackendKind::Reference, 1);
    let mut per_pass = Vec::new();
    for n in [1usize, 2, 4, 8] {
        let mut ss: Vec<Session> = (0..n).map(|_| Session::new(m.clone(), 0).unwrap()).collect();
        let mut rs: Vec<Session> = (0..n).map(|_| Session::new(r.clone(), 0).unwrap()).collect();
        for (i, (s, rs)) in ss.iter_mut().zip(&mut rs).enumerate() {
            let prompt: Vec<u32> = (0..=i as u32).map(|t| t * 5 + 3).collect();
            s.step_batch(&prompt, Want::None).unwrap();
            rs.step_batch(&prompt, Want::None).unwrap();
        }
        let tokens: Vec<[u32; 1]> = (0..n as u32).map(|i| [i * 11 + 1]).collect();
        let before = counters.matmuls.load(Ordering::SeqCst);
        let mut items: Vec<(&mut Session, &[u32], Want)> = ss.iter_mut().zip(&tokens).map(|(s, t)| (s, &t[..], Want::Last)).collect();
        let got = Session::step_many(&mut items).unwrap();
        per_pass.push(counters.matmuls.load(Ordering::SeqCst) - before);
        for ((g, rs), t) in got.iter().zip(&mut rs).zip(&tokens) {
            assert_bits_equal(g, &rs.step_batch(t, Want::Last).unwrap(), &format!("{n} sessions: counting vs reference"));
        }
    }
    assert!(per_pass[0] > 0);
    assert!(per_pass.iter().all(|&c| c == per_pass[0]), "matmul calls per pass for 1, 2, 4, 8 sessions: {per_pass:?}");
}

/// Memory of verify: k drafted rows peak at no more activation bytes than a step_batch of k + 1
/// rows asking for the last row's logits, plus the output tile (16 rows of logits and of the
/// two hidden-wide buffers before them), however large k is; the logits handed to the host never exceed 16 rows at a time either.
#[test]
fn verify_memory_is_bounded_by_the_output_tile() {
    let dir = tiny("gemma4");
    let tokens = golden(&dir).tokens;
    let (m, counters) = open_counting(&dir);
    let v = m.spec().vocab_size;
    for k in [1, 15, 16, 40, 100] {
        // Drafts that are all accepted are the worst case: every row is projected.
        let mut g = Session::new(m.clone(), 0).unwrap();
        g.step_batch(&tokens[..4], Want::Last).unwrap();
        let mut rows = Vec::new();
        for _ in 0..=k {
            let next = packlm::sample::argmax(g.last_logits());
            rows.push(next);
            g.step(next).unwrap();
        }
        let mut s = Session::new(m.clone(), 0).unwrap();
        s.step_batch(&tokens[..4], Want::Last).unwrap();
        // A session keeps the buffers of short passes (forward::PassBuffers): one pass of k + 1
        // rows first, so that both measured calls start from the same kept buffers.
        s.step_batch(&rows, Want::Last).unwrap();
        s.truncate(4).unwrap();
        counters.reset_peak();
        let base = counters.live.load(Ordering::SeqCst);
        s.step_batch(&rows, Want::Last).unwrap();
        let step_peak = counters.peak.load(Ordering::SeqCst) - base;
        s.truncate(4).unwrap();
        counters.reset_peak();
        let read_before = counters.to_host.load(Ordering::SeqCst);
        let r = s.verify(rows[0], &rows[1..], Acceptance::Greedy).unwrap();
        let verify_peak = counters.peak.load(Ordering::SeqCst) - base;
        let read = counters.to_host.load(Ordering::SeqCst) - read_before;
        assert_eq!(r.n_accepted, k, "k = {k}: every draft is the greedy token");
        let tile = 16 * (v + 2 * m.spec().hidden_size) * 4;
        assert!(verify_peak <= step_peak + tile, "k = {k}: verify peaked at {verify_peak} bytes; step_batch at {step_peak} + a tile of {tile}");
        assert_eq!(read, (k + 1) * v * 4, "k = {k}: each row's logits are read once");
    }
}

/// A verify hands the host only the rows it judges: drafts rejected at the first one read one
/// row of logits, however many were drafted and however many rows the backend projects at once
/// (the reference projects them all in one tile); one rejected at the third, three.
#[test]
fn verify_reads_only_the_rows_it_judges() {
    let dir = tiny("gemma4");
    let tokens = golden(&dir).tokens;
    let (m, counters) = open_counting(&dir);
    let v = m.spec().vocab_size as u32;
    let mut g = Session::new(m.clone(), 0).unwrap();
    g.step_batch(&tokens[..4], Want::Last).unwrap();
    let mut greedy = Vec::new();
    for _ in 0..4 {
        let next = packlm::sample::argmax(g.last_logits());
        greedy.push(next);
        g.step(next).unwrap();
    }
    for (taken, k) in [(0usize, 1usize), (0, 8), (2, 8)] {
        // The greedy continuation for `taken` drafts, then tokens that are not the greedy one.
        let mut draft: Vec<u32> = greedy[1..=taken].to_vec();
        let wrong = (greedy[taken + 1] + 1) % v;
        draft.extend((0..(k - taken) as u32).map(|i| (wrong + i) % v));
        let mut s = Session::new(m.clone(), 0).unwrap();
        s.step_batch(&tokens[..4], Want::Last).unwrap();
        let before = counters.to_host.load(Ordering::SeqCst);
        let r = s.verify(greedy[0], &draft, Acceptance::Greedy).unwrap();
        let read = counters.to_host.load(Ordering::SeqCst) - before;
        assert_eq!(r.n_accepted, taken, "{k} drafts, the first {taken} greedy");
        assert_eq!(read, (taken + 1) * v as usize * 4, "{k} drafts, {taken} accepted: bytes handed to the host");
    }
}

// ---- The counting backend -------------------------------------------------------------------

/// The pack at `dir` on a counting backend, and its counters.
fn open_counting(dir: &Path) -> (Arc<Model>, Arc<Counters>) {
    let counting = Counting::new();
    let counters = counting.counters.clone();
    (Arc::new(Model::open_on(dir, Box::new(counting)).unwrap()), counters)
}

#[derive(Default)]
struct Counters {
    /// Bytes handed to host memory by `read_into`, which `read` and the provided `argmax` call (and KV export).
    to_host: AtomicUsize,
    /// Bytes written from host memory by `upload` (and KV import).
    from_host: AtomicUsize,
    /// Ops run.
    ops: AtomicUsize,
    /// Matmul calls: each reads one weight matrix once.
    matmuls: AtomicUsize,
    /// Bytes of activation tensors alive now, and the most alive at once since the last reset.
    live: AtomicUsize,
    peak: AtomicUsize,
}

impl Counters {
    /// Starts a new peak from what is alive now.
    fn reset_peak(&self) {
        self.peak.store(self.live.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

type Arena = Arc<Mutex<Vec<Option<Tensor>>>>;

/// An activation handle of the counting backend: an index into its arena, no data. Dropping it
/// frees the slot.
struct Slot {
    arena: Arena,
    index: usize,
    bytes: usize,
    counters: Arc<Counters>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut a) = self.arena.lock() {
            a[self.index] = None;
        }
        self.counters.live.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

/// A KV store of the counting backend, wrapping the reference's.
struct CountingKv {
    inner: Box<dyn KvStore>,
    counters: Arc<Counters>,
}

impl KvStore for CountingKv {
    fn positions(&self) -> usize {
        self.inner.positions()
    }
    fn advance(&mut self, rows: usize) {
        self.inner.advance(rows)
    }
    fn truncate(&mut self, n: usize) {
        self.inner.truncate(n)
    }
    fn n_layers(&self) -> usize {
        self.inner.n_layers()
    }
    fn plane_width(&self, layer: usize) -> Option<usize> {
        self.inner.plane_width(layer)
    }
    fn export_plane(&self, layer: usize, visit: &mut dyn FnMut(&[f32], &[f32])) {
        self.inner.export_plane(layer, &mut |k, v| {
            self.counters.to_host.fetch_add((k.len() + v.len()) * 4, Ordering::SeqCst);
            visit(k, v)
        })
    }
    fn import(&mut self, planes: Vec<Option<(Vec<f32>, Vec<f32>)>>, positions: usize) -> Result<()> {
        let bytes: usize = planes.iter().flatten().map(|(k, v)| (k.len() + v.len()) * 4).sum();
        self.counters.from_host.fetch_add(bytes, Ordering::SeqCst);
        self.inner.import(planes, positions)
    }
    fn fork(&self) -> Box<dyn KvStore> {
        Box::new(CountingKv { inner: self.inner.fork(), counters: self.counters.clone() })
    }
    fn family_bytes(&self) -> usize {
        self.inner.family_bytes()
    }
    fn reserve(&mut self, rows: usize) -> Result<()> {
        self.inner.reserve(rows)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// The reference backend behind an arena: its tensors live in `arena`, the engine holds only
/// slot indices.
struct Counting {
    inner: Box<dyn Backend>,
    arena: Arena,
    counters: Arc<Counters>,
}

impl Counting {
    fn new() -> Counting {
        Counting { inner: reference(), arena: Arc::default(), counters: Arc::default() }
    }
    /// Runs `f` on the reference tensors in slots `idx` (taken out of the arena meanwhile).
    fn with<R>(&self, idx: &[usize], f: impl FnOnce(&mut [Tensor]) -> R) -> R {
        self.counters.ops.fetch_add(1, Ordering::SeqCst);
        let mut taken: Vec<Tensor> = {
            let mut a = self.arena.lock().unwrap();
            idx.iter().map(|&i| a[i].take().expect("slot in use")).collect()
        };
        let r = f(&mut taken);
        let mut a = self.arena.lock().unwrap();
        for (&i, t) in idx.iter().zip(taken) {
            a[i] = Some(t);
        }
        r
    }
    fn kv<'a>(&self, kv: &'a dyn KvStore) -> &'a dyn KvStore {
        kv.as_any().downcast_ref::<CountingKv>().expect("a counting KV store").inner.as_ref()
    }
}

/// The arena slot behind a handle of the counting backend.
fn id(t: &Tensor) -> usize {
    t.get::<Slot>().index
}

impl Backend for Counting {
    fn name(&self) -> &'static str {
        "counting"
    }
    fn prepare_matrix(&self, w: &WeightTensor) -> Result<Weight> {
        Ok(Weight::new(w.rows(), w.cols(), self.inner.prepare_matrix(w)?))
    }
    fn prepare_vector(&self, v: &[f32]) -> Result<Vector> {
        Ok(Vector::new(v.len(), self.inner.prepare_vector(v)?))
    }
    fn tensor(&self, len: usize) -> Tensor {
        let mut a = self.arena.lock().unwrap();
        a.push(Some(self.inner.tensor(len)));
        let bytes = len * 4;
        let live = self.counters.live.fetch_add(bytes, Ordering::SeqCst) + bytes;
        self.counters.peak.fetch_max(live, Ordering::SeqCst);
        Tensor::new(len, Slot { arena: self.arena.clone(), index: a.len() - 1, bytes, counters: self.counters.clone() })
    }
    fn read_into(&self, t: &Tensor, start: usize, out: &mut [f32]) {
        self.counters.to_host.fetch_add(out.len() * 4, Ordering::SeqCst);
        self.with(&[id(t)], |t| self.inner.read_into(&t[0], start, out))
    }
    fn upload(&self, data: &[f32], t: &mut Tensor) {
        self.counters.from_host.fetch_add(data.len() * 4, Ordering::SeqCst);
        self.with(&[id(t)], |t| self.inner.upload(data, &mut t[0]))
    }
    fn new_kv(&self, layers: &[LayerSpec]) -> Box<dyn KvStore> {
        Box::new(CountingKv { inner: self.inner.new_kv(layers), counters: self.counters.clone() })
    }
    fn embed(&self, table: &Weight, tokens: &[u32], scale: Option<f32>, out: &mut Tensor) {
        self.with(&[id(out)], |t| self.inner.embed(table.get(), tokens, scale, &mut t[0]))
    }
    fn rms_norm(&self, x: &Tensor, w: &Vector, eps: f32, rows: usize, width: usize, out: &mut Tensor) {
        self.with(&[id(x), id(out)], |t| {
            let (x, out) = t.split_at_mut(1);
            self.inner.rms_norm(&x[0], w.get(), eps, rows, width, &mut out[0])
        })
    }
    fn rms_norm_inplace(&self, x: &mut Tensor, w: &Vector, eps: f32, rows: usize, width: usize) {
        self.with(&[id(x)], |t| self.inner.rms_norm_inplace(&mut t[0], w.get(), eps, rows, width))
    }
    fn copy(&self, src: &Tensor, dst: &mut Tensor, len: usize) {
        self.with(&[id(src), id(dst)], |t| {
            let (s, d) = t.split_at_mut(1);
            self.inner.copy(&s[0], &mut d[0], len)
        })
    }
    fn copy_rows(&self, src: &Tensor, src_row: usize, dst: &mut Tensor, dst_row: usize, rows: usize, width: usize) {
        self.with(&[id(src), id(dst)], |t| {
            let (s, d) = t.split_at_mut(1);
            self.inner.copy_rows(&s[0], src_row, &mut d[0], dst_row, rows, width)
        })
    }
    fn matmul(&self, w: &Weight, x: &Tensor, rows: usize, out: &mut Tensor) {
        self.counters.matmuls.fetch_add(1, Ordering::SeqCst);
        self.with(&[id(x), id(out)], |t| {
            let (x, out) = t.split_at_mut(1);
            self.inner.matmul(w.get(), &x[0], rows, &mut out[0])
        })
    }
    fn add_bias(&self, x: &mut Tensor, bias: &Vector, rows: usize) {
        self.with(&[id(x)], |t| self.inner.add_bias(&mut t[0], bias.get(), rows))
    }
    fn head_norm(&self, x: &mut Tensor, w: Option<&Vector>, eps: f32, rows: usize, width: usize, head_dim: usize) {
        self.with(&[id(x)], |t| self.inner.head_norm(&mut t[0], w.map(|w| w.get()), eps, rows, width, head_dim))
    }
    fn rope(&self, x: &mut Tensor, rope: &RopeSpec, rows: usize, width: usize, head_dim: usize, start: usize) {
        self.with(&[id(x)], |t| self.inner.rope(&mut t[0], rope, rows, width, head_dim, start))
    }
    fn gated_activation(&self, act: Activation, gate: &mut Tensor, up: &Tensor, len: usize) {
        self.with(&[id(gate), id(up)], |t| {
            let (g, u) = t.split_at_mut(1);
            self.inner.gated_activation(act, &mut g[0], &u[0], len)
        })
    }
    fn add(&self, x: &mut Tensor, y: &Tensor, len: usize) {
        self.with(&[id(x), id(y)], |t| {
            let (x, y) = t.split_at_mut(1);
            self.inner.add(&mut x[0], &y[0], len)
        })
    }
    fn scale(&self, x: &mut Tensor, s: f32, len: usize) {
        self.with(&[id(x)], |t| self.inner.scale(&mut t[0], s, len))
    }
    fn softcap(&self, x: &mut Tensor, cap: f32, len: usize) {
        self.with(&[id(x)], |t| self.inner.softcap(&mut t[0], cap, len))
    }
    fn gather_rows(&self, x: &Tensor, rows: &[usize], width: usize, out: &mut Tensor) {
        self.with(&[id(x), id(out)], |t| {
            let (x, out) = t.split_at_mut(1);
            self.inner.gather_rows(&x[0], rows, width, &mut out[0])
        })
    }
    fn gather_columns(&self, src: &Tensor, rows: usize, src_width: usize, offset: usize, width: usize, out: &mut Tensor) {
        self.with(&[id(src), id(out)], |t| {
            let (s, out) = t.split_at_mut(1);
            self.inner.gather_columns(&s[0], rows, src_width, offset, width, &mut out[0])
        })
    }
    fn per_layer_combine(&self, c: &mut Tensor, table: &Weight, tokens: &[u32], table_scale: f32, combine: f32) {
        self.with(&[id(c)], |t| self.inner.per_layer_combine(&mut t[0], table.get(), tokens, table_scale, combine))
    }
    fn kv_append(&self, kv: &mut dyn KvStore, layer: usize, k: &Tensor, v: &Tensor, rows: usize) {
        let kv = kv.as_any_mut().downcast_mut::<CountingKv>().expect("a counting KV store").inner.as_mut();
        self.with(&[id(k), id(v)], |t| self.inner.kv_append(kv, layer, &t[0], &t[1], rows))
    }
    fn attention(&self, kv: &dyn KvStore, plane: usize, shape: &AttentionShape, sinks: Option<&[f32]>, q: &Tensor, rows: usize, start: usize, out: &mut Tensor) {
        let kv = self.kv(kv);
        self.with(&[id(q), id(out)], |t| {
            let (q, out) = t.split_at_mut(1);
            self.inner.attention(kv, plane, shape, sinks, &q[0], rows, start, &mut out[0])
        })
    }
}
