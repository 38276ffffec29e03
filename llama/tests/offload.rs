//! Where a model runs (`n_gpu_layers`, llama/src/offload.rs): 0 on the host; llama.cpp's
//! default -1 (and any other value) on packlm's GPU backend when the process has a GPU that
//! counts, which a CPU-type device (Mesa's llvmpipe) does not unless PACKLM_LLAMA_GPU=any;
//! on the host, with a warning naming why, when the GPU backend does not take the model. What
//! is expected is read from packlm's own GPU backend in the same process, so the tests hold on
//! a machine with a GPU, with only llvmpipe (CI), and with no Vulkan device at all. The tests
//! that depend on the environment or on what a process learns once run in child processes.

mod common;

use std::ffi::CString;

use common::{bits, decode_all, is_child, logged, packlm_all, tiny};
use llama::abi::ModelParams;
use llama::model::{llama_model_default_params, llama_model_free, llama_model_load_from_file, LlamaModel};
use llama::offload::{GPU_ENV, NPU_ENV};
use packlm::{Backend, Model, OpenOptions};

/// The tokens decoded in the comparisons (BOS first; the fixture's vocabulary is 300).

fn load(name: &str, params: ModelParams) -> *mut LlamaModel {
    let path = CString::new(tiny(name).to_str().unwrap()).unwrap();
    let m = unsafe { llama_model_load_from_file(path.as_ptr(), params) };
    assert!(!m.is_null(), "{name} opens");
    m
}

fn backend(m: *mut LlamaModel) -> String {
    unsafe { (*m).engine.backend().to_string() }
}

/// packlm's own GPU backend here, on the tiny llama fixture: None without one, else the model
/// and whether its adapter is CPU-type (the device type packlm names last in its device text).
fn packlm_gpu() -> Option<(Model, bool)> {
    match Model::open_with(tiny("llama"), &OpenOptions::default().backend(Backend::Gpu)) {
        Ok(m) => {
            let info: serde_json::Value = serde_json::from_str(&m.info_json()).unwrap();
            let device = info["device"].as_str().unwrap().to_string();
            let cpu_type = device.ends_with(", Cpu)");
            // Mesa's software rasterizers are CPU-type devices.
            if device.contains("llvmpipe") || device.contains("lavapipe") {
                assert!(cpu_type, "{device}");
            }
            eprintln!("note: packlm's GPU adapter here: {device}");
            Some((m, cpu_type))
        }
        Err(e) => {
            assert_eq!(e.status, packlm::Status::ErrBackendUnavailable, "{e}");
            eprintln!("note: no GPU here ({e})");
            None
        }
    }
}


#[test]
fn zero_layers_run_on_the_host() {
    common::capture_log();
    let m = load("llama", ModelParams { n_gpu_layers: 0, ..llama_model_default_params() });
    assert_eq!(backend(m), "host");
    // A vocabulary-only load uses no weights: the host, whatever n_gpu_layers asks.
    let v = load("llama", ModelParams { vocab_only: true, ..llama_model_default_params() });
    assert_eq!(backend(v), "host");
    // Neither looked for a GPU.
    assert!(!logged(&["n_gpu_layers"]));
    unsafe {
        llama_model_free(m);
        llama_model_free(v);
    }
}

#[test]
fn default_layers_count_gpus_as_llama_cpp_does() {
    // PACKLM_LLAMA_NPU, which goes before the GPU, unset (llama/tests/npu.rs tests it).
    common::in_child_with("child_default_layers", &[(GPU_ENV, None), (NPU_ENV, None)]);
    // Another value than "any" is llama.cpp's rule too, with a warning.
    common::in_child_with("child_default_layers", &[(GPU_ENV, Some("yes")), (NPU_ENV, None)]);
}

#[test]
fn child_default_layers() {
    if !is_child() {
        return;
    }
    common::capture_log();
    // llama.cpp's default (-1, all layers), then a count of layers: the first load finds out
    // what the GPU is, the second uses what the process learned.
    let first = load("llama", llama_model_default_params());
    let second = load("llama", ModelParams { n_gpu_layers: 5, ..llama_model_default_params() });
    let (b1, b2) = (backend(first), backend(second));
    unsafe {
        llama_model_free(first);
        llama_model_free(second);
    }
    match packlm_gpu() {
        None => {
            assert_eq!((b1.as_str(), b2.as_str()), ("host", "host"));
            assert!(logged(&["n_gpu_layers -1: no GPU (", "the model runs on the host"]));
            assert!(logged(&["n_gpu_layers 5: no GPU (", "the model runs on the host"]));
        }
        Some((_, true)) => {
            assert_eq!((b1.as_str(), b2.as_str()), ("host", "host"));
            assert!(logged(&["n_gpu_layers -1: the GPU adapter", "is a CPU-type device", "the model runs on the host (PACKLM_LLAMA_GPU=any counts it)"]));
            assert!(logged(&["n_gpu_layers 5: the GPU adapter", "is a CPU-type device"]));
        }
        Some((_, false)) => assert_eq!((b1.as_str(), b2.as_str()), ("gpu", "gpu")),
    }
    if std::env::var(GPU_ENV).is_ok_and(|v| v == "yes") {
        assert!(logged(&["llama_model_load_from_file: PACKLM_LLAMA_GPU=\"yes\" is not \"any\"; ignored"]));
    }
}

#[test]
fn any_counts_a_cpu_type_device() {
    common::in_child_with("child_any_device", &[(GPU_ENV, Some("any")), (NPU_ENV, None)]);
}

#[test]
fn child_any_device() {
    if !is_child() {
        return;
    }
    common::capture_log();
    let m = load("llama", llama_model_default_params());
    let got = decode_all(m);
    let host = packlm_all(&Model::open(tiny("llama")).unwrap());
    let Some((gpu, cpu_type)) = packlm_gpu() else {
        // No GPU at all: the host, and its bits.
        assert_eq!(backend(m), "host");
        assert_eq!(bits(&got), bits(&host));
        unsafe { llama_model_free(m) };
        return;
    };
    assert_eq!(backend(m), "gpu");
    if cpu_type {
        assert!(logged(&["n_gpu_layers -1: the CPU-type GPU adapter", "counts as a GPU (PACKLM_LLAMA_GPU=any); the model runs on it"]));
    }
    // packlm's GPU backend's bits, and the host's within 1e-4.
    assert_eq!(bits(&got), bits(&packlm_all(&gpu)));
    let d = common::max_abs_diff(&got, &host);
    assert!(d <= 1e-4, "GPU vs host: {d}");
    // A model the GPU backend does not take (a bidirectional embedding model) runs on the
    // host, with a warning naming why.
    let e = load("embed_gemma3", llama_model_default_params());
    assert_eq!(backend(e), "host");
    assert!(logged(&["n_gpu_layers -1: the GPU backend does not run", "embed_gemma3", "bidirectional", "the model runs on the host"]));
    unsafe {
        llama_model_free(e);
        llama_model_free(m);
    }
}
