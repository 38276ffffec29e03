//! Where a model runs (`n_gpu_layers` of `llama_model_params`): on packlm's GPU backend or on
//! the host, all layers or none. 0 is the host; any other value (llama.cpp's default -1, "all
//! layers", or a count) puts every layer on the GPU when the process has one, as llama.cpp
//! counts GPUs: its Vulkan backend takes the discrete GPUs, else the first device that is not
//! CPU-type, and never a CPU-type device (a software rasterizer such as Mesa's llvmpipe or
//! lavapipe) unless GGML_VK_VISIBLE_DEVICES names it (ggml-vulkan.cpp, `ggml_vk_instance_init`).
//! Here the environment variable `PACKLM_LLAMA_GPU=any` counts a CPU-type device. Without a
//! GPU the model runs on the host with an info log line saying why; when the GPU backend does
//! not take this model (a bidirectional model, a binding too large for the device), on the
//! host with a warning naming why.
//!
//! An NPU has no place in llama.cpp's device list, so it is chosen by the environment: with
//! `PACKLM_LLAMA_NPU` set to an execution provider's name (packlm's names: `openvino`,
//! `vitisai`, `qnn`, `coreml`, `cuda`, `dml`, or `cpu`), a load whose `n_gpu_layers` is not 0
//! runs on packlm's npu backend (ONNX Runtime, its library from `PACKLM_ONNXRUNTIME`, else the
//! system's search path) with that provider, before any GPU, and an info line names the
//! runtime and provider. When the npu backend is unavailable (no ONNX Runtime, or one without
//! that provider) or does not take the model, the model runs on the host with a warning naming
//! why; the GPU is not tried, so that the place asked for is either the one used or named in
//! the warning. 0 layers and a vocabulary-only load stay on the host. With
//! `PACKLM_LLAMA_NPU_COMPILE_AHEAD` set to a count of positions, the load compiles the graphs
//! that contexts of up to that many positions use (packlm's `OpenOptions::compile_ahead`),
//! which the load's progress counts as its second half, rather than each at its first use; a
//! value that is not a count is named in a warning and ignored. `PACKLM_LLAMA_NPU_OPTIONS`
//! passes the provider's options (`key=value;key=value`, packlm's `provider_options`) to ONNX
//! Runtime as they are, and `PACKLM_LLAMA_NPU_EXPORT` names a folder each graph is written into
//! as it is compiled (packlm's `OpenOptions::export_onnx`: `graphN_rowsR_kvK.onnx`, their
//! weights in `weights.bin`, `graphs.json`). Options the provider refuses, or a folder that
//! cannot be made, are named in the warning of a load that then runs on the host.

use std::path::Path;
use std::sync::Mutex;

use crate::adapter::{self, Backend, Engine};
use crate::log::{self, Level};

/// The environment variable that changes which devices count as a GPU: `any` counts a
/// CPU-type device too (for tests on machines whose only Vulkan device is llvmpipe, and for
/// whoever wants that device). Unset or empty: llama.cpp's rule. Read at each load.
pub const GPU_ENV: &str = "PACKLM_LLAMA_GPU";

/// The environment variable that puts a model on packlm's npu backend: its value is the
/// execution provider's name, passed to packlm as it is. Unset or empty: the GPU rule. Read at
/// each load.
pub const NPU_ENV: &str = "PACKLM_LLAMA_NPU";

/// The environment variable that has a load on the npu backend compile the graphs of contexts
/// of up to that many positions (at most the model's context) before it returns, rather than
/// each at its first use: a count of positions, passed to packlm as it is. Unset, empty or 0:
/// none. Read at each load that puts a model on the npu backend.
pub const NPU_COMPILE_AHEAD_ENV: &str = "PACKLM_LLAMA_NPU_COMPILE_AHEAD";

/// The environment variable that passes options to the execution provider of a load on the
/// npu backend: `key=value` pairs separated by `;`, passed to packlm (`provider_options`) and
/// on to ONNX Runtime as they are. Unset or empty: none. Read at each load that puts a model on
/// the npu backend.
pub const NPU_OPTIONS_ENV: &str = "PACKLM_LLAMA_NPU_OPTIONS";

/// The environment variable that has a load on the npu backend write each graph it compiles
/// into a folder, made when missing (packlm's `OpenOptions::export_onnx`): ONNX files named by
/// their order and shape, their weights in one `weights.bin` beside them, and `graphs.json`
/// saying what each input and output is. Unset or empty: nothing is written. Read at each load
/// that puts a model on the npu backend.
pub const NPU_EXPORT_ENV: &str = "PACKLM_LLAMA_NPU_EXPORT";

/// What this process has learned of its GPU (`packlm::gpu_device`, asked at the first load
/// that could use one): packlm opens one adapter per process and keeps it, so the answer holds
/// for every later load.
#[derive(Clone)]
enum Gpu {
    Unknown,
    /// An adapter that is not CPU-type.
    Usable,
    /// The adapter is CPU-type: packlm's text naming it.
    CpuType(String),
    /// No GPU backend: packlm's reason.
    Absent(String),
}

static GPU: Mutex<Gpu> = Mutex::new(Gpu::Unknown);

fn known() -> Gpu {
    GPU.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn learned(gpu: Gpu) {
    *GPU.lock().unwrap_or_else(|e| e.into_inner()) = gpu;
}

/// Whether `GPU_ENV` counts CPU-type devices; another value is logged (under `f`) and ignored.
fn counts_cpu_devices(f: &str) -> bool {
    match std::env::var(GPU_ENV) {
        Ok(v) if v == "any" => true,
        Ok(v) if !v.is_empty() => {
            log::log(Level::Warn, &format!("{f}: {GPU_ENV}={v:?} is not \"any\"; ignored"));
            false
        }
        _ => false,
    }
}

/// `NPU_COMPILE_AHEAD_ENV`'s count of positions (0 when unset or empty); another value is
/// logged (under `f`) and ignored.
fn compile_ahead(f: &str) -> usize {
    match std::env::var(NPU_COMPILE_AHEAD_ENV) {
        Ok(v) if !v.is_empty() => v.parse().unwrap_or_else(|_| {
            log::log(Level::Warn, &format!("{f}: {NPU_COMPILE_AHEAD_ENV}={v:?} is not a count of positions; ignored"));
            0
        }),
        _ => 0,
    }
}

/// Opens `path` where `n_gpu_layers` puts it (see the module's doc): on the host for 0 and for
/// a vocabulary-only load (no weights are used), else on the GPU when it counts and takes the
/// model. `f` names the calling function in the log lines. `progress` gets packlm's open
/// progress (`Engine::open`) of each open tried: a load the GPU does not take reports again
/// from 0 on the host. A load it cancels (false) is not tried again.
pub fn open(f: &str, path: &Path, n_gpu_layers: i32, vocab_only: bool, progress: &mut dyn FnMut(f32) -> bool) -> adapter::Result<Engine> {
    let host = |progress: &mut dyn FnMut(f32) -> bool| Engine::open(path, Backend::Host, progress);
    if n_gpu_layers == 0 || vocab_only {
        return host(progress);
    }
    if let Some(provider) = std::env::var(NPU_ENV).ok().filter(|v| !v.is_empty()) {
        return open_npu(f, path, n_gpu_layers, &provider, progress);
    }
    let any = counts_cpu_devices(f);
    let head = format!("{f}: n_gpu_layers {n_gpu_layers}");
    let cpu_type = |device: &str| {
        format!("{head}: the GPU adapter {device} is a CPU-type device (a software rasterizer), which llama.cpp does not count as a GPU; the model runs on the host ({GPU_ENV}=any counts it)")
    };
    if matches!(known(), Gpu::Unknown) {
        // Asked of the device alone, so that no model is uploaded to a device that does not
        // count.
        learned(match packlm::gpu_device() {
            Ok(d) if d.ends_with(", Cpu)") => Gpu::CpuType(d),
            Ok(_) => Gpu::Usable,
            Err(e) => Gpu::Absent(e.message),
        });
    }
    match known() {
        Gpu::Absent(why) => {
            log::log(Level::Info, &format!("{head}: no GPU ({why}); the model runs on the host"));
            return host(progress);
        }
        Gpu::CpuType(device) if !any => {
            log::log(Level::Info, &cpu_type(&device));
            return host(progress);
        }
        _ => {}
    }
    // packlm reports progress first at 0, then once the pack is read and the backend made: an
    // open that fails before any later report failed there (engine/mod.rs,
    // `open_with_progress`).
    let mut read = false;
    let opened = Engine::open(path, Backend::Gpu, |p| {
        read |= p > 0.0;
        progress(p)
    });
    match opened {
        Err(e) if adapter::is_aborted(&e) => Err(e),
        Ok(e) if e.is_cpu_device() => {
            let device = e.device().unwrap_or_default().to_string();
            learned(Gpu::CpuType(device.clone()));
            if any {
                log::log(Level::Info, &format!("{head}: the CPU-type GPU adapter {device} counts as a GPU ({GPU_ENV}=any); the model runs on it"));
                return Ok(e);
            }
            drop(e);
            log::log(Level::Info, &cpu_type(&device));
            host(progress)
        }
        Ok(e) => {
            learned(Gpu::Usable);
            Ok(e)
        }
        Err(e) if !read && adapter::is_backend_unavailable(&e) => {
            learned(Gpu::Absent(e.message.clone()));
            log::log(Level::Info, &format!("{head}: no GPU ({}); the model runs on the host", e.message));
            host(progress)
        }
        // The pack could not be read: the host would refuse it the same way.
        Err(e) if !read => Err(e),
        Err(e) => {
            log::log(Level::Warn, &format!("{head}: the GPU backend does not run {}: {}; the model runs on the host", path.display(), e.message));
            host(progress)
        }
    }
}

/// `var`'s value, None when unset or empty.
fn set(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.is_empty())
}

/// `open` on packlm's npu backend with `provider` (`NPU_ENV`'s value) and the settings of
/// `NPU_OPTIONS_ENV`, `NPU_COMPILE_AHEAD_ENV` and `NPU_EXPORT_ENV`, else on the host with a
/// warning naming why.
fn open_npu(f: &str, path: &Path, n_gpu_layers: i32, provider: &str, progress: &mut dyn FnMut(f32) -> bool) -> adapter::Result<Engine> {
    let head = format!("{f}: n_gpu_layers {n_gpu_layers}, {NPU_ENV}={provider}");
    let options = set(NPU_OPTIONS_ENV).unwrap_or_default();
    let export = set(NPU_EXPORT_ENV);
    let npu = adapter::NpuSettings { provider, provider_options: &options, compile_ahead: compile_ahead(f), export: export.as_deref().map(Path::new) };
    // As on the GPU: an open that fails before packlm's second progress report failed reading
    // the pack or making the backend.
    let mut read = false;
    let opened = Engine::open_npu(path, &npu, |p| {
        read |= p > 0.0;
        progress(p)
    });
    match opened {
        Err(e) if adapter::is_aborted(&e) => Err(e),
        Ok(e) => {
            let writing = export.map(|dir| format!("; each graph compiled is written to {dir}")).unwrap_or_default();
            log::log(Level::Info, &format!("{head}: the model runs on packlm's npu backend ({}){writing}", e.device().unwrap_or_default()));
            Ok(e)
        }
        Err(e) if !read && adapter::is_backend_unavailable(&e) => {
            log::log(Level::Warn, &format!("{head}: the npu backend is unavailable ({}); the model runs on the host", e.message));
            Engine::open(path, Backend::Host, progress)
        }
        // Either the pack could not be read, which the host refuses the same way, or the
        // backend was not made with these settings (options the provider refuses, an export
        // folder that cannot be made): the host's open tells which.
        Err(e) if !read => {
            let host = Engine::open(path, Backend::Host, progress)?;
            log::log(Level::Warn, &format!("{head}: the npu backend was not made ({}); the model runs on the host", e.message));
            Ok(host)
        }
        Err(e) => {
            log::log(Level::Warn, &format!("{head}: the npu backend does not run {}: {}; the model runs on the host", path.display(), e.message));
            Engine::open(path, Backend::Host, progress)
        }
    }
}
