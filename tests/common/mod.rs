//! Shared helpers of the integration tests: fixture paths, golden files, opening models.
#![allow(dead_code)]

pub mod gbnf;
pub mod quant;

use std::path::PathBuf;
use std::sync::Arc;

use packlm::backend::{Backend, BackendKind, Precision, Tensor};
use packlm::engine::{Model, OpenOptions, Session, Want};

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn tiny(name: &str) -> PathBuf {
    fixtures().join("tiny").join(name)
}

/// The real SmolLM2 GGUF, or None (with a note) when scripts/fetch_models.sh has not run.
pub fn smollm2() -> Option<PathBuf> {
    real_model("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The real Gemma3-270M GGUF, likewise.
pub fn gemma3_270m() -> Option<PathBuf> {
    real_model("gemma3-270m-Q4_K_M.gguf")
}

fn real_model(name: &str) -> Option<PathBuf> {
    fetched(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models").join(name), "scripts/fetch_models.sh")
}

/// `p` where it exists; where not, None with a note naming `fetch` (the script that makes it),
/// or a panic when PACKLM_REQUIRE_MODELS is set.
pub fn fetched(p: PathBuf, fetch: &str) -> Option<PathBuf> {
    if p.exists() {
        Some(p)
    } else if std::env::var("PACKLM_REQUIRE_MODELS").is_ok() {
        panic!("{} is missing and PACKLM_REQUIRE_MODELS is set; run {fetch}", p.display());
    } else {
        eprintln!("note: {} absent; run {fetch}", p.display());
        None
    }
}

pub fn open_with(path: &std::path::Path, backend: BackendKind, threads: usize) -> Arc<Model> {
    Arc::new(Model::open(path, &OpenOptions::new(backend, threads, Precision::Exact)).unwrap_or_else(|e| panic!("open {}: {e}", path.display())))
}

pub fn open(path: &std::path::Path) -> Arc<Model> {
    open_with(path, BackendKind::Host, 2)
}

/// The GPU backend (src/backend/gpu) on whatever adapter wgpu finds (in CI, Mesa's llvmpipe
/// Vulkan device), or None with a note when there is no adapter and PACKLM_REQUIRE_GPU is unset;
/// CI sets it, so a missing adapter fails there.
#[cfg(feature = "gpu")]
pub fn gpu() -> Option<packlm::backend::gpu::GpuBackend> {
    match packlm::backend::gpu::GpuBackend::new() {
        Ok(be) => Some(be),
        Err(e) if std::env::var("PACKLM_REQUIRE_GPU").is_err() => {
            eprintln!("note: GPU tests skipped, no adapter and PACKLM_REQUIRE_GPU unset: {e}");
            None
        }
        Err(e) => panic!("PACKLM_REQUIRE_GPU is set and the GPU backend is unavailable: {e}"),
    }
}

/// The graph backend (src/backend/graph) on ONNX Runtime's CPU execution provider with
/// `threads` threads, or None with a note when its library cannot be loaded (PACKLM_ONNXRUNTIME
/// names it) and PACKLM_REQUIRE_ONNXRUNTIME is unset; `make test` sets both, so a missing
/// runtime fails there.
pub fn graph(threads: usize) -> Option<packlm::backend::graph::GraphBackend> {
    use packlm::backend::graph::{GraphBackend, GraphOptions};
    match GraphBackend::new(&GraphOptions::default(), threads) {
        Ok(be) => Some(be),
        Err(e) if std::env::var_os("PACKLM_REQUIRE_ONNXRUNTIME").is_none() => {
            eprintln!("note: graph backend tests skipped, ONNX Runtime unavailable and PACKLM_REQUIRE_ONNXRUNTIME unset: {e}");
            None
        }
        Err(e) => panic!("PACKLM_REQUIRE_ONNXRUNTIME is set and the graph backend is unavailable: {e}"),
    }
}

/// The GPU's second instance in the tests: a device whose bindings hold 4 KiB, which splits
/// every matrix of the tiny fixtures across buffers.
pub const SMALL_BINDING: u64 = 4 << 10;

/// The GPU backends the op-level tests run on (empty when gpu() is None, or without the gpu
/// feature): the device's own largest binding, and one that splits weights into 4 KiB chunks.
/// The second splits the weights only: the op-level tests call ops on more rows than a 4 KiB
/// binding holds, which the engine never does (max_pass_rows).
pub fn gpu_backends() -> Vec<(&'static str, Box<dyn Backend>)> {
    #[cfg(feature = "gpu")]
    if let Some(be) = gpu() {
        use packlm::backend::gpu::GpuBackend;
        return vec![("gpu", Box::new(be)), ("gpu, 4 KiB weight chunks", Box::new(GpuBackend::with_chunk_limit(SMALL_BINDING).unwrap()))];
    }
    Vec::new()
}

/// A way to open a model on one backend.
pub type Opener = Box<dyn Fn(&std::path::Path) -> Arc<Model>>;

/// The GPU's ways to open a model (empty when gpu() is None, or without the gpu feature): with
/// the device's bindings ("gpu"), and with bindings of SMALL_BINDING bytes ("gpu, 4 KiB
/// bindings"), where every matrix of the tiny fixtures is split across buffers and passes are
/// capped at 3 rows of a 300-token vocabulary (the engine splits longer ones).
pub fn gpu_model_openers() -> Vec<(&'static str, Opener)> {
    #[cfg(feature = "gpu")]
    if gpu().is_some() {
        return vec![("gpu", Box::new(|p| open_gpu(p, false))), ("gpu, 4 KiB bindings", Box::new(|p| open_gpu(p, true)))];
    }
    Vec::new()
}

/// A model opened on the GPU: the device's bindings, or (`small`) bindings of SMALL_BINDING
/// bytes.
#[cfg(feature = "gpu")]
pub fn open_gpu(path: &std::path::Path, small: bool) -> Arc<Model> {
    use packlm::backend::gpu::GpuBackend;
    let be = if small { GpuBackend::with_binding_limit(SMALL_BINDING) } else { GpuBackend::new() }.unwrap();
    Arc::new(Model::open_on(path, Box::new(be)).unwrap_or_else(|e| panic!("open {}: {e}", path.display())))
}

/// f32 weights and f32 compute on both sides: the only differences are summation order.
pub const TOL_F32: f32 = 1e-4;

/// All rows of one pass over the fixture's tokens match HF's golden logits within TOL_F32.
pub fn assert_matches_golden(name: &str, backend: BackendKind) {
    let dir = tiny(name);
    let g = golden(&dir);
    let got = all_rows(&open_with(&dir, backend, 2), &g.tokens);
    assert_eq!(got.len(), g.logits.len(), "{name}: logits size");
    let d = max_abs_diff(&got, &g.logits);
    eprintln!("{name} ({backend:?}): max |packlm - HF| = {d:e}");
    assert!(d <= TOL_F32, "{name} ({backend:?}): max |packlm - HF| = {d} > {TOL_F32}");
}

/// The last-row logits of `prompt` and their max difference from a raw f32 fixture file.
pub fn last_row_vs_fixture(model: &Arc<Model>, prompt: &[u32], rel: &str) -> (Vec<f32>, f32) {
    let want = read_f32(&fixtures().join(rel));
    let mut s = Session::new(model.clone(), 0).unwrap();
    let got = s.step_batch(prompt, Want::Last).unwrap();
    let d = max_abs_diff(&got, &want);
    eprintln!("{rel}: max |packlm - HF| over {} logits: {d}", want.len());
    (got, d)
}

pub struct Golden {
    pub tokens: Vec<u32>,
    pub n_vocab: usize,
    /// (rows, n_vocab)
    pub logits: Vec<f32>,
}

pub fn read_f32(path: &std::path::Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

pub fn golden(dir: &std::path::Path) -> Golden {
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("golden.json")).unwrap()).unwrap();
    let tokens = j["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let n_vocab = j["n_vocab"].as_u64().unwrap() as usize;
    Golden { tokens, n_vocab, logits: read_f32(&dir.join("golden.f32")) }
}

/// All rows' logits of one batched pass.
pub fn all_rows(model: &Arc<Model>, tokens: &[u32]) -> Vec<f32> {
    let mut s = Session::new(model.clone(), 0).unwrap();
    s.step_batch(tokens, Want::All).unwrap()
}

/// Rows' logits from one step per token.
pub fn stepped(model: &Arc<Model>, tokens: &[u32]) -> Vec<f32> {
    let mut s = Session::new(model.clone(), 0).unwrap();
    tokens.iter().flat_map(|&t| s.step(t).unwrap()).collect()
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Bitwise equality, reporting the first difference.
pub fn assert_bits_equal(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    if let Some(i) = a.iter().zip(b).position(|(x, y)| x.to_bits() != y.to_bits()) {
        panic!("{what}: first difference at {i}: {} vs {}", a[i], b[i]);
    }
}

/// When the fixture has a config_legacy.json (the same model in the older config spelling),
/// checks that it gives bit-identical logits; returns whether there was one.
pub fn legacy_config_gives_identical_logits(name: &str) -> bool {
    let dir = tiny(name);
    if !dir.join("config_legacy.json").is_file() {
        return false;
    }
    let tmp = std::env::temp_dir().join(format!("packlm-legacy-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let file = p.file_name().unwrap().to_str().unwrap().to_string();
        match file.as_str() {
            "config.json" => continue,
            "config_legacy.json" => std::fs::copy(&p, tmp.join("config.json")).unwrap(),
            _ => std::fs::copy(&p, tmp.join(&file)).unwrap(),
        };
    }
    let g = golden(&dir);
    let a = all_rows(&open(&dir), &g.tokens);
    let b = all_rows(&open(&tmp), &g.tokens);
    std::fs::remove_dir_all(&tmp).ok();
    assert_bits_equal(&a, &b, &format!("{name}: legacy spelling"));
    true
}

/// A JSON fixture under tests/fixtures.
pub fn fixture_json(rel: &str) -> serde_json::Value {
    let p = fixtures().join(rel);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

/// A JSON array of token ids.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}")).iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// splitmix64: a fixed, dependency-free stream so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn sym(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.sym()).collect()
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A backend tensor holding `data`.
pub fn put(be: &dyn Backend, data: &[f32]) -> Tensor {
    let mut t = be.tensor(data.len());
    be.upload(data, &mut t);
    t
}

/// Every element within `tol` of `want`.
pub fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let d = max_abs_diff(got, want);
    assert!(d <= tol, "{what}: max difference {d} > {tol}");
}

/// The model-level invariants on a backend: batched == sequential, truncate == fresh,
/// restore == fresh, on tiny models covering shared planes, per-layer inputs, sliding windows,
/// softcaps, qkv bias, mixtures of experts (a shared expert, MXFP4 experts) and attention sinks.
pub fn model_invariants(name: &str, open_model: &dyn Fn(&std::path::Path) -> Arc<Model>) {
    for fixture in ["llama", "qwen2", "gemma2", "gemma4", "gemma4_wide", "qwen3_moe", "qwen2_moe", "mixtral", "gpt_oss", "gpt_oss_mxfp4"] {
        let m = open_model(&tiny(fixture));
        let tokens: Vec<u32> = golden(&tiny(fixture)).tokens.into_iter().take(12).collect();
        let what = |s: &str| format!("{name}, {fixture}: {s}");
        let batched = all_rows(&m, &tokens);
        assert_bits_equal(&batched, &stepped(&m, &tokens), &what("batched vs sequential"));
        let mut s = Session::new(m.clone(), 0).unwrap();
        s.step_batch(&tokens, Want::None).unwrap();
        let snap7 = {
            let mut t = Session::new(m.clone(), 0).unwrap();
            t.step_batch(&tokens[..7], Want::None).unwrap();
            t.snapshot()
        };
        s.truncate(7).unwrap();
        assert!(s.snapshot() == snap7, "{}", what("truncate gives a fresh session's snapshot"));
        let after_truncate = s.step(tokens[7]).unwrap();
        let v = m.spec().vocab_size;
        assert_bits_equal(&after_truncate, &batched[7 * v..8 * v], &what("truncate vs fresh"));
        let mut r = Session::new(m.clone(), 0).unwrap();
        r.restore(&snap7).unwrap();
        assert_bits_equal(&r.step(tokens[7]).unwrap(), &batched[7 * v..8 * v], &what("restore vs fresh"));
    }
}

/// A layer of the given attention geometry (the rest copied from `base`, a tiny fixture's layer).
pub fn layer_like(base: &packlm::semantics::LayerSpec, n_heads: usize, n_kv_heads: usize, head_dim: usize, kv_source: packlm::semantics::KvSource) -> packlm::semantics::LayerSpec {
    packlm::semantics::LayerSpec { n_heads, n_kv_heads, head_dim, kv_source, ..base.clone() }
}

/// A copy of the tiny fixture `base` in a temp folder (named by `tag` and the process), with
/// elements of its f32 tensors replaced: each edit is (tensor name, element index, value). The
/// caller removes the folder.
pub fn tiny_with_values(base: &str, tag: &str, edits: &[(&str, usize, f32)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("packlm-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(tiny(base)).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    let path = dir.join("model.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    // safetensors: u64 LE header length, the JSON header, then the data its offsets index.
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    for &(name, index, value) in edits {
        let t = &header[name];
        assert_eq!(t["dtype"], "F32", "{name}: an f32 tensor");
        let at = 8 + n + t["data_offsets"][0].as_u64().unwrap() as usize + 4 * index;
        assert!(at + 4 <= 8 + n + t["data_offsets"][1].as_u64().unwrap() as usize, "{name}: element {index} out of range");
        bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }
    std::fs::write(&path, bytes).unwrap();
    dir
}
