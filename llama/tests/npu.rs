//! The npu backend through the llama.cpp API (llama/src/offload.rs): with PACKLM_LLAMA_NPU
//! naming an execution provider and `n_gpu_layers` not 0, a model loads on packlm's npu backend
//! (ONNX Runtime, its library from PACKLM_ONNXRUNTIME) ahead of any GPU; with a provider the
//! runtime lacks (qnn: the CPU build of ONNX Runtime has only its CPU provider), on the host
//! with a warning naming it. The tests skip, saying so, only when neither PACKLM_ONNXRUNTIME nor
//! PACKLM_REQUIRE_ONNXRUNTIME is set (make llama-test sets both). The variable is read at each
//! load, so each setting runs in a child process with it set.

mod common;

use std::ffi::{c_void, CString};

use common::{bits, decode_all, is_child, logged, logged_at, packlm_all, tiny, TOKENS};
use llama::abi::ModelParams;
use llama::model::{llama_model_default_params, llama_model_free, llama_model_load_from_file, LlamaModel};
use llama::offload::{NPU_COMPILE_AHEAD_ENV, NPU_ENV, NPU_EXPORT_ENV, NPU_OPTIONS_ENV};
use packlm::{Backend, Model, OpenOptions};

/// The tokens decoded in the comparisons (BOS first; the fixture's vocabulary is 300).

/// `ggml_log_level`s.
const INFO: i32 = 2;
const WARN: i32 = 3;

/// Whether to skip: neither ONNX Runtime's library is named nor the runtime required.
fn skip() -> bool {
    let named = std::env::var_os("PACKLM_ONNXRUNTIME").is_some_and(|v| !v.is_empty());
    if !named && std::env::var_os("PACKLM_REQUIRE_ONNXRUNTIME").is_none() {
        eprintln!("skipped: neither PACKLM_ONNXRUNTIME (ONNX Runtime's library) nor PACKLM_REQUIRE_ONNXRUNTIME is set");
        return true;
    }
    false
}

fn load(params: ModelParams) -> *mut LlamaModel {
    let path = CString::new(tiny("llama").to_str().unwrap()).unwrap();
    let m = unsafe { llama_model_load_from_file(path.as_ptr(), params) };
    assert!(!m.is_null(), "the fixture opens");
    m
}

fn backend(m: *mut LlamaModel) -> String {
    unsafe { (*m).engine.backend().to_string() }
}

/// A load with the default parameters, in a child whose settings the npu backend cannot take:
/// the model is on the host, a warning holds each of `warning`, and the logits are the host's.
fn runs_on_the_host_warning(warning: &[&str]) {
    common::capture_log();
    let m = load(llama_model_default_params());
    assert_eq!(backend(m), "host");
    assert!(logged_at(WARN, warning), "no warning with {warning:?}");
    let host = packlm_all(&Model::open(tiny("llama")).unwrap());
    assert_eq!(bits(&decode_all(m)), bits(&host));
    unsafe { llama_model_free(m) };
}

/// `m`'s logits are those of packlm's npu backend on the cpu provider, bit for bit; frees `m`.
fn decodes_as_packlm_npu(m: *mut LlamaModel) {
    let npu = Model::open_with(tiny("llama"), &OpenOptions::default().backend(Backend::Npu).provider("cpu", "")).unwrap();
    assert_eq!(bits(&decode_all(m)), bits(&packlm_all(&npu)));
    unsafe { llama_model_free(m) };
}

#[test]
fn a_provider_puts_the_model_on_the_npu_backend() {
    if skip() {
        return;
    }
    common::in_child_with("child_cpu_provider", &[(NPU_ENV, Some("cpu"))]);
}

#[test]
fn child_cpu_provider() {
    if !is_child() {
        return;
    }
    common::capture_log();
    // llama.cpp's default (-1, all layers) and a count of layers: the npu backend, whatever
    // GPU the process has.
    let m = load(llama_model_default_params());
    let counted = load(ModelParams { n_gpu_layers: 99, ..llama_model_default_params() });
    assert_eq!((backend(m).as_str(), backend(counted).as_str()), ("npu", "npu"));
    let device = unsafe { (*m).engine.device().unwrap_or_default().to_string() };
    assert!(device.starts_with("ONNX Runtime ") && device.ends_with(", cpu execution provider"), "{device}");
    assert!(logged_at(INFO, &[&format!("llama_model_load_from_file: n_gpu_layers -1, PACKLM_LLAMA_NPU=cpu: the model runs on packlm's npu backend ({device})")]));
    assert!(logged_at(INFO, &["llama_model_load_from_file: n_gpu_layers 99, PACKLM_LLAMA_NPU=cpu: the model runs on packlm's npu backend"]));
    // packlm's own npu backend's bits, and the host's within 1e-4.
    let got = decode_all(m);
    let npu = Model::open_with(tiny("llama"), &OpenOptions::default().backend(Backend::Npu).provider("cpu", "")).unwrap();
    assert_eq!(bits(&got), bits(&packlm_all(&npu)));
    assert_eq!(bits(&decode_all(counted)), bits(&got));
    let host = packlm_all(&Model::open(tiny("llama")).unwrap());
    let d = common::max_abs_diff(&got, &host);
    eprintln!("max |npu - host| over {} rows: {d:e}", TOKENS.len());
    assert!(d <= 1e-4, "npu vs host: {d}");
    // 0 layers is the host, the variable set or not, and says nothing of the npu.
    let h = load(common::host_params());
    assert_eq!(backend(h), "host");
    assert!(!logged(&["n_gpu_layers 0"]));
    assert_eq!(bits(&decode_all(h)), bits(&host));
    unsafe {
        llama_model_free(h);
        llama_model_free(counted);
        llama_model_free(m);
    }
}

#[test]
fn an_absent_provider_falls_back_to_the_host() {
    if skip() {
        return;
    }
    common::in_child_with("child_absent_provider", &[(NPU_ENV, Some("qnn"))]);
}

#[test]
fn child_absent_provider() {
    if !is_child() {
        return;
    }
    // The warning gives packlm's reason, which names the provider (quoted) and what the runtime
    // has.
    runs_on_the_host_warning(&[
        "llama_model_load_from_file: n_gpu_layers -1, PACKLM_LLAMA_NPU=qnn: the npu backend is unavailable (",
        "execution provider \"qnn\"",
        "; the model runs on the host",
    ]);
}

/// `llama_model_params`' progress callback: each fraction given, kept in the `Vec<f32>` at
/// `user_data`.
unsafe extern "C" fn keep_fraction(fraction: f32, user_data: *mut c_void) -> bool {
    (*(user_data as *mut Vec<f32>)).push(fraction);
    true
}

/// A load of the fixture on the npu backend with a progress callback: the model, and how many
/// of the fractions it was given fall strictly between 0.5 and 1.
fn load_counting() -> (*mut LlamaModel, usize) {
    let mut seen: Vec<f32> = Vec::new();
    let m = load(ModelParams { progress_callback: Some(keep_fraction), progress_callback_user_data: &mut seen as *mut Vec<f32> as *mut c_void, ..llama_model_default_params() });
    assert_eq!(backend(m), "npu");
    assert!(seen.windows(2).all(|w| w[0] < w[1]) && seen.last() == Some(&1.0), "fractions {seen:?}");
    (m, seen.iter().filter(|&&f| f > 0.5 && f < 1.0).count())
}

/// PACKLM_LLAMA_NPU_COMPILE_AHEAD=100 (the fixture's context is 128): the load compiles the
/// graphs of 14 pass shapes (parts of 1 to 64 rows ending at 64 and at 100) and reports each as
/// its second half, so the load's progress callback is given at least 13 fractions between 0.5
/// and 1, where a load without it is given only its layers'. A value that is not a count is
/// named in a warning and the load goes on without compiling ahead. Either way the logits are
/// packlm's npu backend's, bit for bit.
#[test]
fn compile_ahead_compiles_the_graphs_at_load() {
    if skip() {
        return;
    }
    common::in_child_with("child_compile_ahead", &[(NPU_ENV, Some("cpu")), (NPU_COMPILE_AHEAD_ENV, Some("100"))]);
    common::in_child_with("child_compile_ahead_not_a_count", &[(NPU_ENV, Some("cpu")), (NPU_COMPILE_AHEAD_ENV, Some("many"))]);
}

#[test]
fn child_compile_ahead() {
    if !is_child() {
        return;
    }
    common::capture_log();
    let (m, past_half) = load_counting();
    assert!(past_half >= 13, "{past_half} fractions between 0.5 and 1");
    assert!(!logged(&[NPU_COMPILE_AHEAD_ENV]));
    decodes_as_packlm_npu(m);
}

#[test]
fn child_compile_ahead_not_a_count() {
    if !is_child() {
        return;
    }
    common::capture_log();
    let (m, past_half) = load_counting();
    assert!(past_half < 13, "{past_half} fractions between 0.5 and 1: graphs were compiled ahead");
    assert!(logged_at(WARN, &["llama_model_load_from_file: PACKLM_LLAMA_NPU_COMPILE_AHEAD=\"many\" is not a count of positions; ignored"]));
    decodes_as_packlm_npu(m);
}

/// PACKLM_LLAMA_NPU_OPTIONS reaches ONNX Runtime's provider as packlm's provider_options: the
/// cpu provider takes none, so `intra_op_num_threads=1` is refused and the load runs on the host
/// with a warning that names the options; empty, the variable changes nothing.
#[test]
fn provider_options_reach_the_provider() {
    if skip() {
        return;
    }
    common::in_child_with("child_provider_options_refused", &[(NPU_ENV, Some("cpu")), (NPU_OPTIONS_ENV, Some("intra_op_num_threads=1"))]);
    common::in_child_with("child_provider_options_empty", &[(NPU_ENV, Some("cpu")), (NPU_OPTIONS_ENV, Some(""))]);
}

#[test]
fn child_provider_options_refused() {
    if !is_child() {
        return;
    }
    runs_on_the_host_warning(&[
        "llama_model_load_from_file: n_gpu_layers -1, PACKLM_LLAMA_NPU=cpu: the npu backend was not made (",
        "the cpu provider takes no options (given \"intra_op_num_threads=1\")",
        "; the model runs on the host",
    ]);
}

#[test]
fn child_provider_options_empty() {
    if !is_child() {
        return;
    }
    common::capture_log();
    let m = load(llama_model_default_params());
    assert_eq!(backend(m), "npu");
    assert!(!logged_at(WARN, &[""]), "a warning was logged");
    unsafe { llama_model_free(m) };
}

/// A folder of this test process's own under the system's temporary folder, removed first.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("packlm-llama-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// PACKLM_LLAMA_NPU_EXPORT=<folder>: the load makes the folder (and its missing parent), the
/// info line names it, and decoding compiles graphs that are written there: at least one
/// graph*.onnx beside a non-empty weights.bin, and graphs.json listing each such file with its
/// inputs and outputs. The logits are packlm's npu backend's, bit for bit. A folder under a
/// regular file cannot be made: the load runs on the host with a warning naming it.
#[test]
fn export_writes_the_graphs() {
    if skip() {
        return;
    }
    let tmp = scratch("export");
    std::fs::create_dir_all(&tmp).unwrap();
    let out = tmp.join("export").join("graphs");
    common::in_child_with("child_export", &[(NPU_ENV, Some("cpu")), (NPU_EXPORT_ENV, Some(out.to_str().unwrap()))]);
    let mut onnx: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("graph") && n.ends_with(".onnx"))
        .collect();
    onnx.sort();
    assert!(!onnx.is_empty(), "no graph*.onnx in {}", out.display());
    assert!(std::fs::metadata(out.join("weights.bin")).unwrap().len() > 0);
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("graphs.json")).unwrap()).unwrap();
    let graphs = manifest["graphs"].as_array().expect("graphs.json has graphs");
    let mut listed: Vec<String> = graphs.iter().map(|g| g["file"].as_str().unwrap().to_string()).collect();
    listed.sort();
    assert_eq!(listed, onnx);
    assert!(graphs.iter().all(|g| g["inputs"].as_array().is_some_and(|a| !a.is_empty()) && g["outputs"].as_array().is_some_and(|a| !a.is_empty())));
    let blocker = tmp.join("a_file");
    std::fs::write(&blocker, b"x").unwrap();
    common::in_child_with("child_export_refused", &[(NPU_ENV, Some("cpu")), (NPU_EXPORT_ENV, Some(blocker.join("graphs").to_str().unwrap()))]);
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn child_export() {
    if !is_child() {
        return;
    }
    common::capture_log();
    let out = std::env::var(NPU_EXPORT_ENV).unwrap();
    let m = load(llama_model_default_params());
    assert_eq!(backend(m), "npu");
    assert!(logged_at(INFO, &["PACKLM_LLAMA_NPU=cpu: the model runs on packlm's npu backend (", &format!("); each graph compiled is written to {out}")]));
    decodes_as_packlm_npu(m);
}

#[test]
fn child_export_refused() {
    if !is_child() {
        return;
    }
    let out = std::env::var(NPU_EXPORT_ENV).unwrap();
    runs_on_the_host_warning(&["PACKLM_LLAMA_NPU=cpu: the npu backend was not made (", &out, "; the model runs on the host"]);
}
