//! The GPU backend (src/backend/gpu) on whatever adapter wgpu finds: in CI, Mesa's llvmpipe
//! Vulkan device. Every test here skips, saying so, only when there is no adapter AND
//! PACKLM_REQUIRE_GPU is unset; CI sets it, so a missing device fails there.
//!
//! The op set against the reference, batched == sequential, the KV store, the model-level
//! invariants and snapshots across backends are the conformance suite's
//! (tests/backend_conformance.rs), which runs the GPU as it runs every backend. Here: what only
//! the GPU has, on two instances where it applies: the device's own largest binding, and a
//! 4 KiB one. At the model level the 4 KiB instance acts as a device with 4 KiB bindings: every
//! matrix of the tiny fixtures is split across buffers, passes are capped at 3 rows of a
//! 300-token vocabulary (the engine splits longer ones) and buffers are bound no further than
//! 4 KiB, so a missing split shows as wrong logits.
//!
//! Tolerances: the device computes in f32 with fused multiply-adds, partial sums over 64
//! threads joined in a tree, and the shader's exp; the reference accumulates in f64 and
//! sequentially: 1e-4 for logits across backends (as for the host backend), and 1e-4 to HF on
//! the golden fixtures.

#![cfg(feature = "gpu")]

mod common;

use std::sync::Arc;

use common::quant::gguf_py_vectors;
use common::*;
use packlm::backend::{Backend, BackendKind, Precision};
use packlm::engine::speculative::Acceptance;
use packlm::engine::{Model, Session, Want};
use packlm::error::Status;
use packlm::quant::WeightType;

/// Device against host, element by element: the bound tests/backend_conformance.rs holds every
/// backend's ops to against the reference.
const KERNEL_TOL: f32 = 1e-4;

/// The GPU backends under test, or None (with a note) when there is no adapter and the GPU is
/// not required.
fn gpus() -> Option<Vec<(&'static str, Box<dyn Backend>)>> {
    Some(gpu_backends()).filter(|g| !g.is_empty())
}

/// The shaders' dequantization of every weight type against gguf-py's numpy dequantize (an
/// independent implementation), through the embedding op: every row of each fixture.
/// Bit-exact but for the formats with a min (Q4_1, Q5_1, Q4_K, Q5_K), whose `a * b + c` a GPU
/// compiler may fuse into one
/// rounding (1 ulp of the larger term).
#[test]
fn the_shaders_dequantize_every_type_as_gguf_py() {
    let Some(gpus) = gpus() else { return };
    for (name, be) in gpus {
        for ty in WeightType::ALL {
            let (w, want) = gguf_py_vectors(ty);
            let (rows, cols) = (w.rows(), w.cols());
            let pw = be.prepare_matrix(&w).unwrap();
            let mut out = be.tensor(rows * cols);
            let tokens: Vec<u32> = (0..rows as u32).collect();
            be.embed(&pw, &tokens, None, &mut out);
            let got = be.read(&out, rows * cols);
            assert_eq!(got.len(), want.len(), "{name}: {ty}: values");
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                let ok = g.to_bits() == e.to_bits()
                    || (g.is_nan() && e.is_nan())
                    || (matches!(ty, WeightType::Q4_1 | WeightType::Q5_1 | WeightType::Q4_K | WeightType::Q5_K)
                        && (g - e).abs() <= e.abs().max(1e-3) * 2.0 * f32::EPSILON);
                assert!(ok, "{name}: {ty} element {i}: gpu {g:e}, gguf-py {e:e}");
            }
        }
    }
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
        let m = Model::open(&tiny("llama"), &packlm::engine::OpenOptions { backend: BackendKind::Accelerator, threads: 0, precision: asked, ..Default::default() }).unwrap();
        assert_eq!(m.backend().name(), "gpu");
        assert_eq!(m.backend().precision(), Precision::Exact, "asked {asked:?}");
        assert!(m.backend().device().is_some_and(|d| !d.is_empty()));
    }
}

/// A LoRA adapter on the device: every row within 1e-4 of PEFT's logits (the fixture's), on
/// both instances (with 4 KiB bindings the adapter's matrices are split too), and a shared
/// pass of a session with it and one without gives each its own bits.
#[test]
fn lora_adapters_match_peft_on_the_device() {
    if gpus().is_none() {
        return;
    }
    let dir = tiny("lora_llama");
    let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("lora.json")).unwrap()).unwrap();
    let tokens: Vec<u32> = meta["tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    let want: Vec<f32> =
        std::fs::read(dir.join("logits_scale1.f32")).unwrap().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    for small in [false, true] {
        let m = open_gpu(&tiny("llama"), small);
        let a = Arc::new(packlm::engine::adapter::Adapter::open(&m, &dir).unwrap());
        let set = packlm::engine::adapter::AdapterSet::new(&m, vec![(a, 1.0)]).unwrap();
        let mut s = Session::new(m.clone(), 0).unwrap();
        s.set_adapters(set.clone()).unwrap();
        let got = s.step_batch(&tokens, Want::All).unwrap();
        let d = max_abs_diff(&got, &want);
        assert!(d <= TOL_F32, "gpu (small bindings {small}): max |packlm - PEFT| = {d}");
        let mut with = Session::new(m.clone(), 0).unwrap();
        with.set_adapters(set).unwrap();
        let mut base = Session::new(m.clone(), 0).unwrap();
        let alone = base.step_batch(&tokens[..5], Want::All).unwrap();
        base.truncate(0).unwrap();
        let mut jobs = vec![(&mut with, packlm::engine::Job::Step { tokens: &tokens[..7], want: Want::All }), (&mut base, packlm::engine::Job::Step { tokens: &tokens[..5], want: Want::All })];
        let out = Session::run_many(&mut jobs).unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        match (&out[0], &out[1]) {
            (packlm::engine::JobResult::Logits(a), packlm::engine::JobResult::Logits(b)) => {
                assert_eq!(bits(a), bits(&got[..7 * 300]), "gpu (small {small}): the adapter's session in a shared pass");
                assert_eq!(bits(b), bits(&alone), "gpu (small {small}): the base session in a shared pass");
            }
            _ => panic!("step jobs give logits"),
        }
    }
}

/// `packlm::gpu_device` names the adapter the GPU backend opens, with wgpu's device type last,
/// without loading a model; the same text the backend reports.
#[test]
fn gpu_device_names_the_adapter_and_its_type() {
    let Some(gpus) = gpus() else {
        assert_eq!(packlm::gpu_device().unwrap_err().status, Status::ErrBackendUnavailable);
        return;
    };
    let d = packlm::gpu_device().unwrap();
    let types = [", DiscreteGpu)", ", IntegratedGpu)", ", VirtualGpu)", ", Cpu)", ", Other)"];
    assert!(types.iter().any(|t| d.ends_with(t)), "{d}");
    assert_eq!(gpus[0].1.device().as_deref(), Some(d.as_str()));
}
