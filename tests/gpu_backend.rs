//! The GPU backend (src/backend/gpu) on whatever adapter wgpu finds: in CI, Mesa's llvmpipe
//! Vulkan device. Every test here skips, saying so, only when there is no adapter AND
//! PACKLM_REQUIRE_GPU is unset; CI sets it, so a missing device fails there.
//!
//! Each test runs on two instances: the device's own largest binding, and a 4 KiB one. At the
//! model level the 4 KiB instance acts as a device with 4 KiB bindings: every matrix of the
//! tiny fixtures is split across buffers, passes are capped at 3 rows of a 300-token
//! vocabulary (the engine splits longer ones) and buffers are bound no further than 4 KiB, so
//! a missing split shows as wrong logits. Op-level tests split the weights only.
//!
//! Tolerances: the device computes in f32 with fused multiply-adds, partial sums over 64
//! threads joined in a tree, and the shader's exp; the reference accumulates in f64 and
//! sequentially. For inputs in [-1, 1) and widths up to 512 the differences are a few f32
//! ulps of the sums: 1e-5 for row ops, 1e-4 for matmul and attention (as for the host
//! backend, tests/backend_conformance.rs), and 1e-4 to HF on the golden fixtures.

#![cfg(feature = "gpu")]

mod common;

use std::sync::Arc;

use common::*;
use half::f16;
use packlm::backend::gpu::GpuBackend;
use packlm::backend::{self, AttentionShape, Backend, BackendKind, KvStore, Precision, Weight};
use packlm::engine::speculative::Acceptance;
use packlm::engine::{Model, Session, Want};
use packlm::error::Status;
use packlm::pack::tensor::{TensorBytes, WeightTensor};
use packlm::quant::WeightType;
use packlm::semantics::rope::RopeSpec;
use packlm::semantics::{Activation, KvSource};

const ROWS: [usize; 4] = [1, 3, 8, 17];
const ROW_TOL: f32 = 1e-5;
const KERNEL_TOL: f32 = 1e-4;
/// The binding limit that splits the tiny fixtures' matrices.
const SMALL_BINDING: u64 = 4 << 10;

/// The GPU backends under test, or None (with a note) when there is no adapter and the GPU is
/// not required.
/// The op-level tests' second instance splits weights into 4 KiB chunks only: they call ops
/// on more rows than a 4 KiB binding holds, which the engine never does (max_pass_rows).
fn gpus() -> Option<Vec<(&'static str, Box<dyn Backend>)>> {
    match GpuBackend::new() {
        Ok(be) => Some(vec![("gpu", Box::new(be)), ("gpu, 4 KiB weight chunks", Box::new(GpuBackend::with_chunk_limit(SMALL_BINDING).unwrap()))]),
        Err(e) if std::env::var("PACKLM_REQUIRE_GPU").is_err() => {
            eprintln!("note: GPU tests skipped, no adapter and PACKLM_REQUIRE_GPU unset: {e}");
            None
        }
        Err(e) => panic!("PACKLM_REQUIRE_GPU is set and the GPU backend is unavailable: {e}"),
    }
}

fn reference() -> Box<dyn Backend> {
    backend::create(BackendKind::Reference, 1, Precision::Exact).unwrap()
}

/// A model opened on the GPU: the device's bindings, or the small limit.
fn open_gpu(path: &std::path::Path, small: bool) -> Arc<Model> {
    let be = if small { GpuBackend::with_binding_limit(SMALL_BINDING) } else { GpuBackend::new() }.unwrap();
    Arc::new(Model::open_on(path, Box::new(be)).unwrap_or_else(|e| panic!("open {}: {e}", path.display())))
}

fn both(be: &dyn Backend, op: impl Fn(&dyn Backend) -> Vec<f32>) -> (Vec<f32>, Vec<f32>) {
    (op(be), op(reference().as_ref()))
}

#[test]
fn row_ops_match_the_reference() {
    let Some(gpus) = gpus() else { return };
    let mut rng = Rng(7);
    for (name, be) in gpus {
        let be = be.as_ref();
        for m in ROWS {
            let width = 37;
            let (x, y, w) = (rng.vec(m * width), rng.vec(m * width), rng.vec(width));
            let what = |op: &str| format!("{name}: {op}, {m} rows");
            let (a, b) = both(be, |be| {
                let (xt, wv, mut out) = (put(be, &x), be.prepare_vector(&w).unwrap(), be.tensor(m * width));
                be.rms_norm(&xt, &wv, 1e-6, m, width, &mut out);
                let mut r = be.read(&out, m * width);
                let mut xt = put(be, &x);
                be.rms_norm_inplace(&mut xt, &wv, 1e-6, m, width);
                r.extend(be.read(&xt, m * width));
                r
            });
            assert_close(&a, &b, ROW_TOL, &what("rms_norm, rms_norm_inplace"));
            let (a, b) = both(be, |be| {
                let (mut xt, bias) = (put(be, &x), be.prepare_vector(&w).unwrap());
                be.add_bias(&mut xt, &bias, m);
                be.read(&xt, m * width)
            });
            assert_bits_equal(&a, &b, &what("add_bias"));
            for act in [Activation::Silu, Activation::GeluTanh] {
                let (a, b) = both(be, |be| {
                    let (mut g, u) = (put(be, &x), put(be, &y));
                    be.gated_activation(act, &mut g, &u, m * width);
                    be.read(&g, m * width)
                });
                assert_close(&a, &b, ROW_TOL, &what(&format!("gated_activation {act:?}")));
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
            assert_close(&a, &b, ROW_TOL, &what("add, scale, softcap, copy"));
            let (heads, d) = (3, 10);
            let (hx, hw) = (rng.vec(m * heads * d), rng.vec(d));
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
            assert_close(&a, &b, ROW_TOL, &what("head_norm, rope"));
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
        }
    }
}

/// A fixture of tests/fixtures/gguf: (type, rows, cols, block bytes, gguf-py's dequantized values).
fn quant_vectors(name: &str) -> (WeightTensor, Vec<f32>) {
    let bytes = std::fs::read(fixtures().join(format!("gguf/quant_{name}.bin"))).unwrap();
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let ty = WeightType::from_ggml_type(u32_at(4) as u32).unwrap();
    let (rows, cols) = (u32_at(8), u32_at(12));
    let end = 16 + rows * ty.row_bytes(cols).unwrap();
    let w = WeightTensor::new(name.into(), ty, vec![rows, cols], TensorBytes::Owned(Arc::new(bytes[16..end].to_vec()))).unwrap();
    (w, read_f32_bytes(&bytes[end..]))
}

fn read_f32_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

const TYPES: [&str; 11] = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_K", "q5_K", "q6_K"];

/// The shaders' dequantization of every weight type against gguf-py's numpy dequantize (an
/// independent implementation), through the embedding op: every row of each fixture.
/// Bit-exact but for the formats with a min (Q4_1, Q5_1, Q4_K, Q5_K), whose `a * b + c` a GPU
/// compiler may fuse into one
/// rounding (1 ulp of the larger term).
#[test]
fn the_shaders_dequantize_every_type_as_gguf_py() {
    let Some(gpus) = gpus() else { return };
    for (name, be) in gpus {
        for ty in TYPES {
            let (w, want) = quant_vectors(ty);
            let (rows, cols) = (w.rows(), w.cols());
            let pw = be.prepare_matrix(&w).unwrap();
            let mut out = be.tensor(rows * cols);
            let tokens: Vec<u32> = (0..rows as u32).collect();
            be.embed(&pw, &tokens, None, &mut out);
            let got = be.read(&out, rows * cols);
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                let ok = g.to_bits() == e.to_bits()
                    || (g.is_nan() && e.is_nan())
                    || (matches!(ty, "q4_1" | "q5_1" | "q4_K" | "q5_K") && (g - e).abs() <= e.abs().max(1e-3) * 2.0 * f32::EPSILON);
                assert!(ok, "{name}: {ty} element {i}: gpu {g:e}, gguf-py {e:e}");
            }
        }
    }
}

#[test]
fn embedding_and_per_layer_combine_equal_the_reference() {
    let Some(gpus) = gpus() else { return };
    let mut rng = Rng(11);
    let bytes: Vec<u8> = (0..29 * 37).flat_map(|_| f16::from_f32(rng.sym()).to_le_bytes()).collect();
    let table = WeightTensor::new("t".into(), WeightType::F16, vec![29, 37], TensorBytes::Owned(Arc::new(bytes))).unwrap();
    for (name, be) in gpus {
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
            assert_close(&a, &b, ROW_TOL, &format!("{name}: embed, per_layer_combine, {m} rows"));
        }
    }
}

/// Every weight type's matmul against the reference, and M rows at once bit-identical to one
/// row at a time.
#[test]
fn matmul_of_every_type_matches_the_reference_and_batched_equals_sequential() {
    let Some(gpus) = gpus() else { return };
    let mut rng = Rng(13);
    for ty in TYPES {
        let (w, _) = quant_vectors(ty);
        let (n_out, n_in) = (w.rows(), w.cols());
        for (name, be) in &gpus {
            let be = be.as_ref();
            let pw = be.prepare_matrix(&w).unwrap();
            for m in ROWS {
                let x = rng.vec(m * n_in);
                let run = |be: &dyn Backend, pw: &Weight, x: &[f32], m: usize| {
                    let (xt, mut out) = (put(be, x), be.tensor(m * n_out));
                    be.matmul(pw, &xt, m, &mut out);
                    be.read(&out, m * n_out)
                };
                let got = run(be, &pw, &x, m);
                let r = reference();
                let want = run(r.as_ref(), &r.prepare_matrix(&w).unwrap(), &x, m);
                let scale = want.iter().fold(1f32, |a, v| a.max(v.abs()));
                assert_close(&got, &want, KERNEL_TOL * scale, &format!("{name}: {ty} matmul, {m} rows"));
                let rows: Vec<f32> = (0..m).flat_map(|i| run(be, &pw, &x[i * n_in..(i + 1) * n_in], 1)).collect();
                assert_bits_equal(&got, &rows, &format!("{name}: {ty} matmul, {m} rows vs one at a time"));
            }
        }
    }
}


#[test]
fn attention_matches_the_reference_and_batched_equals_sequential() {
    let Some(gpus) = gpus() else { return };
    let base = open_with(&tiny("llama"), BackendKind::Reference, 1).spec().layers[0].clone();
    let mut rng = Rng(17);
    let layers = [layer_like(&base, 6, 2, 11, KvSource::Own), layer_like(&base, 6, 2, 11, KvSource::SharedWith { owner: 0 })];
    let (qw, kvw) = (6 * 11, 2 * 11);
    let shapes = [
        AttentionShape { n_heads: 6, n_kv_heads: 2, head_dim: 11, scale: 0.3, softcap: None, window: None },
        AttentionShape { n_heads: 6, n_kv_heads: 2, head_dim: 11, scale: 0.3, softcap: Some(2.5), window: Some(5) },
    ];
    for (name, be) in &gpus {
        let be = be.as_ref();
        // Starts beyond one tile of 64 keys, so that the running max and sum carry over tiles.
        for start in [4, 70] {
            for m in ROWS {
                for shape in &shapes {
                    let (k, v, q) = (rng.vec((start + m) * kvw), rng.vec((start + m) * kvw), rng.vec(m * qw));
                    let run = |be: &dyn Backend| {
                        let mut kv = be.new_kv(&layers);
                        be.kv_append(kv.as_mut(), 0, &put(be, &k[..start * kvw]), &put(be, &v[..start * kvw]), start);
                        kv.advance(start);
                        be.kv_append(kv.as_mut(), 0, &put(be, &k[start * kvw..]), &put(be, &v[start * kvw..]), m);
                        let (qt, mut out) = (put(be, &q), be.tensor(m * qw));
                        be.attention(kv.as_ref(), 0, shape, &qt, m, start, &mut out);
                        let batched = be.read(&out, m * qw);
                        let single: Vec<f32> = (0..m)
                            .flat_map(|r| {
                                let (qt, mut out) = (put(be, &q[r * qw..(r + 1) * qw]), be.tensor(qw));
                                be.attention(kv.as_ref(), 0, shape, &qt, 1, start + r, &mut out);
                                be.read(&out, qw)
                            })
                            .collect();
                        (batched, single)
                    };
                    let (got, single) = run(be);
                    let what = format!("{name}: attention {shape:?}, start {start}, {m} rows");
                    assert_bits_equal(&got, &single, &format!("{what}: batched vs one at a time"));
                    assert_close(&got, &run(reference().as_ref()).0, KERNEL_TOL, &what);
                }
            }
        }
    }
}

#[test]
fn kv_planes_truncate_export_and_import_on_the_device() {
    let Some(gpus) = gpus() else { return };
    let base = open_with(&tiny("llama"), BackendKind::Reference, 1).spec().layers[0].clone();
    let layers = [layer_like(&base, 2, 1, 9, KvSource::Own), layer_like(&base, 2, 1, 9, KvSource::SharedWith { owner: 0 }), layer_like(&base, 4, 2, 5, KvSource::Own)];
    let mut rng = Rng(19);
    for (name, be) in &gpus {
        let be = be.as_ref();
        let mut kv = be.new_kv(&layers);
        assert_eq!((kv.n_layers(), kv.plane_width(0), kv.plane_width(1), kv.plane_width(2)), (3, Some(9), None, Some(10)), "{name}");
        // 300 rows: the plane grows past its first 256 on the device.
        let (k0, v0, k2, v2) = (rng.vec(300 * 9), rng.vec(300 * 9), rng.vec(300 * 10), rng.vec(300 * 10));
        be.kv_append(kv.as_mut(), 0, &put(be, &k0[..200 * 9]), &put(be, &v0[..200 * 9]), 200);
        be.kv_append(kv.as_mut(), 2, &put(be, &k2[..200 * 10]), &put(be, &v2[..200 * 10]), 200);
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
/// the small binding limit, passes of 12 rows run as several (the engine splits them), and
/// sessions hold fewer positions than the model's context (Session::new caps them).
#[test]
fn the_model_level_invariants_hold_on_the_device() {
    if gpus().is_none() {
        return;
    }
    model_invariants("gpu", &|p| open_gpu(p, false));
    model_invariants("gpu, 4 KiB bindings", &|p| open_gpu(p, true));
}

/// Every family's tiny golden fixture within 1e-4 of HF (f32 on both sides; the difference
/// is summation order).
#[test]
fn golden_fixtures_of_every_family_match_hf() {
    if gpus().is_none() {
        return;
    }
    for entry in std::fs::read_dir(fixtures().join("tiny")).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.join("golden.json").is_file() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        for small in [false, true] {
            let g = golden(&dir);
            let got = all_rows(&open_gpu(&dir, small), &g.tokens);
            let d = max_abs_diff(&got, &g.logits);
            eprintln!("{name} (gpu, small bindings {small}): max |packlm - HF| = {d:e}");
            assert!(d <= TOL_F32, "{name} (gpu, small bindings {small}): max |packlm - HF| = {d} > {TOL_F32}");
        }
    }
}

/// A snapshot written by a host session restores into a GPU session and the other way round;
/// the next logits agree with the writer backend's own within the kernel tolerance.
#[test]
fn snapshots_move_between_host_and_device() {
    if gpus().is_none() {
        return;
    }
    for fixture in ["gemma4", "llama"] {
        let dir = tiny(fixture);
        let tokens = golden(&dir).tokens;
        let host = open_with(&dir, BackendKind::Host, 2);
        let gpu = open_gpu(&dir, false);
        let v = host.spec().vocab_size;
        for (from, to, what) in [(&host, &gpu, "host -> gpu"), (&gpu, &host, "gpu -> host")] {
            let mut a = Session::new(from.clone(), 0).unwrap();
            a.step_batch(&tokens[..9], Want::None).unwrap();
            let snap = a.snapshot();
            let mut b = Session::new(to.clone(), 0).unwrap();
            b.restore(&snap).unwrap();
            assert!(b.snapshot() == snap, "{fixture}, {what}: the restored state re-encodes to the same bytes");
            let next = b.step(tokens[9]).unwrap();
            let writer_next = a.step(tokens[9]).unwrap();
            assert_close(&next, &writer_next, KERNEL_TOL, &format!("{fixture}, {what}: next logits vs the writer's"));
            let fresh = all_rows(to, &tokens[..10]);
            assert_close(&next, &fresh[9 * v..], KERNEL_TOL, &format!("{fixture}, {what}: next logits vs a fresh session"));
        }
    }
}

/// verify on the device: a partial acceptance leaves the session as a fresh one that stepped
/// the accepted tokens (same next logits, bit for bit).
#[test]
fn a_partial_verify_equals_a_fresh_session() {
    if gpus().is_none() {
        return;
    }
    let dir = tiny("gemma3");
    let m = open_gpu(&dir, false);
    let tokens = golden(&dir).tokens;
    let mut s = Session::new(m.clone(), 0).unwrap();
    s.step_batch(&tokens[..4], Want::Last).unwrap();
    let first = packlm::sample::argmax(s.last_logits());
    let mut g = Session::new(m.clone(), 0).unwrap();
    g.step_batch(&tokens[..4], Want::Last).unwrap();
    g.step(first).unwrap();
    let second = packlm::sample::argmax(g.last_logits());
    // Drafts: the greedy token, then one that is not.
    let wrong = (second + 1) % m.spec().vocab_size as u32;
    let r = s.verify(first, &[second, wrong, 5], Acceptance::Greedy).unwrap();
    assert_eq!(r.n_accepted, 1, "the first draft is the greedy token, the second is not");
    let mut fresh = Session::new(m.clone(), 0).unwrap();
    fresh.step_batch(&[&tokens[..4], &[first, second]].concat(), Want::Last).unwrap();
    assert_eq!(s.n_past(), fresh.n_past());
    let (a, b) = (s.step(7).unwrap(), fresh.step(7).unwrap());
    assert_bits_equal(&a, &b, "after a partial verify vs fresh");
}

/// A sliding window wider than any context is full attention: such a pack opens and runs on
/// the device as on the host (a window beyond u32 made every step panic), with the bits a
/// window of exactly the context's length gives, batched and stepped.
#[test]
fn a_window_wider_than_the_context_runs_as_the_context() {
    if gpus().is_none() {
        return;
    }
    let base = tiny("mistral");
    let tokens = golden(&base).tokens;
    let with_window = |window: u64| {
        let dir = std::env::temp_dir().join(format!("packlm-gpu-window-{window}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for e in std::fs::read_dir(&base).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
        }
        let mut cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
        assert_eq!(cfg["max_position_embeddings"], 128, "the fixture's context");
        cfg["sliding_window"] = window.into();
        std::fs::write(dir.join("config.json"), serde_json::to_vec(&cfg).unwrap()).unwrap();
        dir
    };
    let (huge, context) = (with_window(1 << 40), with_window(128));
    let host = all_rows(&open(&huge), &tokens);
    for small in [false, true] {
        let what = |s: &str| format!("{}: {s}", if small { "4 KiB bindings" } else { "device bindings" });
        let m = open_gpu(&huge, small);
        let batched = all_rows(&m, &tokens);
        assert_bits_equal(&batched, &all_rows(&open_gpu(&context, small), &tokens), &what("window 2^40 vs window 128"));
        assert_bits_equal(&stepped(&m, &tokens), &batched, &what("stepped vs batched"));
        assert_close(&batched, &host, KERNEL_TOL, &what("device vs host"));
    }
    std::fs::remove_dir_all(&huge).ok();
    std::fs::remove_dir_all(&context).ok();
}

/// A pack whose weights hold NaN fails every pass on the device too (ErrNonFinite, naming the
/// layer), steps and greedy verify alike, and leaves the session as it was.
#[test]
fn non_finite_logits_are_refused_on_the_device() {
    if gpus().is_none() {
        return;
    }
    let dir = tiny_with_values("llama", "gpu-nan-norm", &[("model.layers.1.post_attention_layernorm.weight", 5, f32::NAN)]);
    let tokens = golden(&tiny("llama")).tokens;
    for small in [false, true] {
        let m = open_gpu(&dir, small);
        let mut s = Session::new(m.clone(), 0).unwrap();
        s.step_batch(&tokens[..3], Want::None).unwrap();
        let before = s.snapshot();
        for (what, e) in [
            ("step", s.step(tokens[3]).map(drop).unwrap_err()),
            ("verify", s.verify(tokens[3], &tokens[4..6], Acceptance::Greedy).map(drop).unwrap_err()),
        ] {
            assert_eq!(e.status, Status::ErrNonFinite, "{what}: {e}");
            assert!(e.message.contains("layer 1 (of 2) is the first") && e.message.contains("position 3 "), "{what}: {e}");
        }
        assert!(s.snapshot() == before, "the session changed");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The device path is real: a pass's dispatches and copies do not grow with its rows, the
/// bytes read back are the wanted logits, and the weights on the device are at most 1.05x the
/// file's tensor bytes.
#[test]
fn counters_show_the_device_path() {
    if gpus().is_none() {
        return;
    }
    let dir = tiny("gemma3");
    let m = open_gpu(&dir, false);
    let counters = || m.backend().counters().unwrap();
    let tokens = golden(&dir).tokens;
    let v = m.spec().vocab_size;
    let mut per_pass = Vec::new();
    for rows in [1, 4, 16] {
        let mut s = Session::new(m.clone(), 0).unwrap();
        s.step_batch(&tokens[..2], Want::Last).unwrap();
        let before = counters();
        let batch: Vec<u32> = (0..rows as u32).map(|i| (i * 5 + 1) % v as u32).collect();
        s.step_batch(&batch, Want::Last).unwrap();
        let after = counters();
        assert_eq!(after.bytes_read - before.bytes_read, (v * 4) as u64, "{rows} rows: bytes read back");
        per_pass.push((after.dispatches - before.dispatches, after.copies - before.copies));
        let before = counters();
        s.step_batch(&batch, Want::All).unwrap();
        assert_eq!(counters().bytes_read - before.bytes_read, (rows * v * 4) as u64, "{rows} rows, all logits: bytes read back");
    }
    assert!(per_pass.iter().all(|p| *p == per_pass[0]), "dispatches and copies per pass for 1, 4, 16 rows: {per_pass:?}");
    assert!(per_pass[0].0 > 0);
    for (what, path) in [("tiny gemma3", Some(dir.clone())), ("SmolLM2", smollm2()), ("Gemma3-270M", gemma3_270m())] {
        let Some(path) = path else { continue };
        let m = open_gpu(&path, false);
        let file: u64 = m.tensors().values().map(|t| t.bytes().len() as u64).sum();
        let device = m.backend().counters().unwrap().weight_bytes;
        eprintln!("{what}: {device} weight bytes on the device, {file} tensor bytes in the file");
        assert!(device as f64 <= file as f64 * 1.05, "{what}: {device} bytes on the device for {file} in the file");
    }
}

/// An abort raised before a pass stops it between layers: ErrAborted, and the session is as
/// before.
#[test]
fn an_abort_leaves_the_session_as_it_was() {
    if gpus().is_none() {
        return;
    }
    let m = open_gpu(&tiny("llama"), false);
    let mut s = Session::new(m.clone(), 0).unwrap();
    s.step_batch(&[1, 2, 3], Want::Last).unwrap();
    let before = s.snapshot();
    s.abort_flag().store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(s.step_batch(&[4, 5], Want::Last).unwrap_err().status, Status::ErrAborted);
    s.abort_flag().store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(s.snapshot() == before, "the session changed");
}

/// The greedy continuations of the real models on the device equal the host backend's
/// (exact precision) for 24 tokens.
#[test]
fn real_models_continue_as_the_host_does() {
    if gpus().is_none() {
        return;
    }
    for (what, path) in [("SmolLM2", smollm2()), ("Gemma3-270M", gemma3_270m())] {
        let Some(path) = path else { continue };
        let gpu = open_gpu(&path, false);
        let host = open_with(&path, BackendKind::Host, 2);
        let prompt = host.vocab().encode("The capital of France is a city that", true, false).unwrap();
        let run = |m: &Arc<Model>| {
            let mut s = Session::new(m.clone(), 0).unwrap();
            let mut out = Vec::new();
            let mut logits = s.step_batch(&prompt, Want::Last).unwrap();
            for _ in 0..24 {
                let t = packlm::sample::argmax(&logits);
                out.push(t);
                logits = s.step(t).unwrap();
            }
            out
        };
        let (g, h) = (run(&gpu), run(&host));
        eprintln!("{what}: gpu {g:?}");
        assert_eq!(g, h, "{what}: greedy continuation on the GPU vs the host");
    }
}

/// Opened through the engine's options: the backend is "gpu", names its adapter, and runs
/// exact (f32) whatever precision was asked.
#[test]
fn the_gpu_runs_exact_whatever_is_asked() {
    if gpus().is_none() {
        return;
    }
    for asked in [None, Some(Precision::Fast), Some(Precision::Exact)] {
        let m = Model::open(&tiny("llama"), &packlm::engine::OpenOptions { backend: BackendKind::Accelerator, threads: 0, precision: asked }).unwrap();
        assert_eq!(m.backend().name(), "gpu");
        assert_eq!(m.backend().precision(), Precision::Exact, "asked {asked:?}");
        assert!(m.backend().device().is_some_and(|d| !d.is_empty()));
    }
}
