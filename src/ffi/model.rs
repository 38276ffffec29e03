//! `packlm_model`: opened once, then shared. Owned as `Box<packlm_model>` holding a `Model`
//! (whose weights are shared); sessions hold their own clone, so freeing the model while sessions live is safe
//! (the weights go when the last session is freed). Safe to move to any thread and to use from
//! many threads at once: every call on it only reads.

use std::ffi::{c_char, c_void};
use std::path::Path;
use crate::error::{Error, Result, Status};
use crate::{Backend, Model, OpenOptions, Precision};
use crate::ffi::guard::{
    check_size, ffi_boundary, free_box, out_size, read_prefix, try_cstr, try_mut, try_ref, write_items, write_prefix, write_text, AbiStruct,
};

/// An open model (opaque): weights (memory-mapped), tokenizer, per-layer table. Created by
/// packlm_model_open, freed by packlm_model_free. Immutable: safe to move to any thread and to
/// use from any number of threads at once; sessions keep it alive.
pub struct packlm_model {
    pub(crate) inner: Model,
    /// packlm_tokenize's limit and its kept result (src/ffi/text.rs).
    pub(crate) tokenize: crate::ffi::text::TokenizeState,
}

/// Backend codes for `packlm_open_options.backend`.
pub const PACKLM_BACKEND_HOST: u32 = 0;
pub const PACKLM_BACKEND_REFERENCE: u32 = 1;
/// The GPU backend (wgpu: Vulkan, Metal or DX12); PACKLM_ERR_BACKEND_UNAVAILABLE, saying why,
/// where there is no usable adapter or the library was built without it.
pub const PACKLM_BACKEND_GPU: u32 = 2;
/// The earlier name of PACKLM_BACKEND_GPU (the accelerator seam): the same value.
pub const PACKLM_BACKEND_ACCELERATOR: u32 = 2;
/// The graph backend: the model's passes as static-shape ONNX graphs, compiled and run by ONNX
/// Runtime on an execution provider (`packlm_open_options.provider`: an NPU through OpenVINO,
/// VitisAI, QNN or CoreML, a GPU through CUDA or DirectML, or the CPU). ONNX Runtime's library
/// is loaded at run time (`packlm_open_options.onnxruntime_library`, else the environment
/// variable PACKLM_ONNXRUNTIME, else the system's search path); where it cannot be loaded, or
/// lacks the provider, the open fails with PACKLM_ERR_BACKEND_UNAVAILABLE saying why. Computes
/// exact (f32 graphs).
pub const PACKLM_BACKEND_NPU: u32 = 3;

/// `packlm_open_options.precision`: the pack's default, PACKLM_PRECISION_FAST when its weights
/// are block-quantized (8 bits or fewer per weight, e.g. a Q4_1 GGUF), PACKLM_PRECISION_EXACT
/// for float packs (f32, f16, bf16), where rounding activations would lose what the weights keep.
pub const PACKLM_PRECISION_DEFAULT: u32 = 0;
/// Activations stay f32 end to end: logits within 1e-4 of HF transformers on the golden fixtures.
/// Also a value of `packlm_info.precision`.
pub const PACKLM_PRECISION_EXACT: u32 = 1;
/// Activations may be rounded per 32-element block to 8 bits for integer dot products against
/// block-quantized weights (llama.cpp's trade: faster, a little farther from HF). A backend
/// without such kernels (PACKLM_BACKEND_REFERENCE) runs exact instead, and
/// `packlm_info.precision` says so. Also a value of `packlm_info.precision`.
pub const PACKLM_PRECISION_FAST: u32 = 2;

/// Called during open, on the thread that called `packlm_model_open` and under no lock of the
/// library, with the fraction done: 0 first, then after the pack's files are read and after
/// each layer's weights are prepared, 1 last; the fractions never decrease. Return false to
/// cancel: the open then stops, frees what it built, fails with PACKLM_ERR_ABORTED, and does
/// not call the callback again.
pub type packlm_progress_fn = Option<extern "C" fn(fraction: f32, user_data: *mut c_void) -> bool>;

/// Options of `packlm_model_open`. Fill with `packlm_open_options_init(&o, sizeof o)` (or
/// zero it and set `size`: every field's zero is its default) and change fields.
#[repr(C)]
pub struct packlm_open_options {
    /// sizeof(packlm_open_options) as the caller compiled it.
    pub size: usize,
    /// PACKLM_BACKEND_HOST (default), PACKLM_BACKEND_REFERENCE, PACKLM_BACKEND_GPU,
    /// PACKLM_BACKEND_NPU.
    pub backend: u32,
    /// Worker threads of the host backend, the calling thread included; 0 = one per core. More
    /// than 256 is refused with PACKLM_ERR_LIMIT_EXCEEDED. The helper threads are one pool per
    /// process, shared by all models; this number caps how many of them the model's calls use.
    /// After a call, an idle helper spins about 0.1 ms and yields its core until 1 ms, then
    /// sleeps until the next call.
    pub threads: u32,
    /// Weight type to convert to on load; 0 = keep the stored types (the only value
    /// implemented: others give PACKLM_ERR_UNSUPPORTED).
    pub weight_type: u32,
    /// Progress callback, may be NULL.
    pub progress: packlm_progress_fn,
    /// Passed to `progress` unchanged.
    pub user_data: *mut c_void,
    /// PACKLM_PRECISION_DEFAULT (0: the pack's default), PACKLM_PRECISION_EXACT or
    /// PACKLM_PRECISION_FAST; any other value gives PACKLM_ERR_UNSUPPORTED_PRECISION naming it,
    /// and no model. The precision asked for is what the backend may use: one without
    /// reduced-precision kernels runs exact, and `packlm_info.precision` reports the precision in
    /// use. Within one backend and precision every bit-level rule holds (step_batch == steps,
    /// truncate/restore == fresh, any thread count); only the distance to HF differs between
    /// precisions. Snapshots carry no precision: one taken at either restores into a session of
    /// the same pack opened at the other. A caller whose `size` ends before this field gets the
    /// default.
    pub precision: u32,
    /// PACKLM_BACKEND_NPU: the execution provider, by name: "cpu" (NULL: the default),
    /// "openvino", "vitisai", "qnn", "coreml", "cuda" or "dml". One that ONNX Runtime was not
    /// built with gives PACKLM_ERR_BACKEND_UNAVAILABLE naming it and what there is. Ignored by
    /// the other backends. A caller whose `size` ends before this field gets the default.
    pub provider: *const c_char,
    /// PACKLM_BACKEND_NPU: the provider's options as "key=value" pairs separated by ';' (NULL:
    /// none), passed to ONNX Runtime as they are.
    pub provider_options: *const c_char,
    /// PACKLM_BACKEND_NPU: the path of ONNX Runtime's shared library (libonnxruntime.so.*,
    /// libonnxruntime.*.dylib, onnxruntime.dll); NULL: PACKLM_ONNXRUNTIME, then the system's
    /// search path.
    pub onnxruntime_library: *const c_char,
    /// PACKLM_BACKEND_NPU: compile at open the graphs that sessions of up to this many
    /// positions use for prefills, decode steps and step_batch (0, the default: each graph is
    /// compiled at its first use, which makes that call slower). `progress` counts them as the
    /// second half of the open, and returning false from it stops the open with
    /// PACKLM_ERR_ABORTED. At most the model's context is used. Ignored by the other backends.
    pub compile_ahead: u32,
    /// Zero (keeps the next appended field past the padding a caller may leave unset).
    pub reserved0: u32,
    /// PACKLM_BACKEND_NPU: a folder (UTF-8 path) each graph is written into as it is compiled,
    /// for inspection or a vendor's own compiler (NULL, the default: nothing is written). The
    /// open creates it and its parents when missing and starts `weights.bin` there anew; each
    /// compile (at its first use, or during the open with `compile_ahead`) then writes
    /// `graphN_rowsR_kvK.onnx` (N its order from 0, R the pass's rows, K the KV rows it
    /// attends), appends to `weights.bin` the weights no earlier graph used (f32, ONNX external
    /// data that each graph names), and rewrites `graphs.json`, which lists each graph's file,
    /// rows, KV rows, inputs and outputs (name, type, shape, what it is). Files of those names
    /// already there are replaced; others are left. A folder that cannot be created or written
    /// gives PACKLM_ERR_IO naming the path and the system's reason: at the open, no model; at a
    /// later compile, the call that compiled fails. Ignored by the other backends. A caller whose
    /// `size` ends before this field gets the default.
    pub export_onnx_dir: *const c_char,
}

// SAFETY: repr(C), starts with the usize size, fields are integers, a nullable function
// pointer and raw pointers (any bits are a valid raw pointer).
unsafe impl AbiStruct for packlm_open_options {
    const NAME: &'static str = "packlm_open_options";
    const FIRST_SIZE: usize = std::mem::offset_of!(packlm_open_options, user_data) + std::mem::size_of::<*mut c_void>();
    const FIRST_ABI: u32 = 1;
    fn defaults() -> Self {
        packlm_open_options {
            size: std::mem::size_of::<packlm_open_options>(),
            backend: PACKLM_BACKEND_HOST,
            threads: 0,
            weight_type: 0,
            progress: None,
            user_data: std::ptr::null_mut(),
            precision: PACKLM_PRECISION_DEFAULT,
            provider: std::ptr::null(),
            provider_options: std::ptr::null(),
            onnxruntime_library: std::ptr::null(),
            compile_ahead: 0,
            reserved0: 0,
            export_onnx_dir: std::ptr::null(),
        }
    }
}

/// Writes the ABI 1 default options into `*out`: the fields of ABI 1 only, with `size` set to
/// their size, so that a caller compiled against any header can use it. A field appended later
/// keeps its default even when set afterwards: use packlm_open_options_init for those.
/// Never fails except on NULL.
#[no_mangle]
pub unsafe extern "C" fn packlm_open_options_default(out: *mut packlm_open_options) -> Status {
    ffi_boundary!("packlm_open_options_default", {
        let out = try_mut(out, "out")? as *mut packlm_open_options;
        let size = packlm_open_options::FIRST_SIZE;
        write_prefix(&packlm_open_options { size, ..packlm_open_options::defaults() }, out, size);
        Ok(())
    })
}

/// Writes the default options into the first `size` bytes of `*out` (pass
/// `sizeof(packlm_open_options)`) and sets `out->size` to `size`. A size outside the range
/// this library accepts gives PACKLM_ERR_INVALID_ARGUMENT and writes nothing.
#[no_mangle]
pub unsafe extern "C" fn packlm_open_options_init(out: *mut packlm_open_options, size: usize) -> Status {
    ffi_boundary!("packlm_open_options_init", {
        let out = try_mut(out, "out")? as *mut packlm_open_options;
        check_size::<packlm_open_options>(size, "options")?;
        write_prefix(&packlm_open_options { size, ..packlm_open_options::defaults() }, out, size);
        Ok(())
    })
}

unsafe fn read_options(opts: *const packlm_open_options) -> Result<(OpenOptions, packlm_progress_fn, *mut c_void)> {
    if opts.is_null() {
        return Ok((OpenOptions::default(), None, std::ptr::null_mut()));
    }
    let o = read_prefix(opts, "options")?;
    if o.weight_type != 0 {
        return Err(Error::unsupported(format!("options.weight_type {}: conversion on load is not implemented", o.weight_type)));
    }
    let backend = match o.backend {
        PACKLM_BACKEND_HOST => Backend::Host,
        PACKLM_BACKEND_REFERENCE => Backend::Reference,
        PACKLM_BACKEND_GPU => Backend::Gpu,
        PACKLM_BACKEND_NPU => Backend::Npu,
        other => return Err(Error::invalid(format!("backend {other} is not one of 0 (host), 1 (reference), 2 (gpu), 3 (npu)"))),
    };
    let text = |p: *const c_char, what: &str| -> Result<Option<String>> {
        // SAFETY: NULL or a NUL-terminated string, by the field's contract.
        if p.is_null() { Ok(None) } else { unsafe { try_cstr(p, what) }.map(|s| Some(s.to_string())) }
    };
    Ok((
        OpenOptions {
            backend,
            threads: o.threads as usize,
            precision: precision_from_code(o.precision)?,
            provider: text(o.provider, "options.provider")?,
            provider_options: text(o.provider_options, "options.provider_options")?.unwrap_or_default(),
            onnxruntime: text(o.onnxruntime_library, "options.onnxruntime_library")?,
            export_onnx: text(o.export_onnx_dir, "options.export_onnx_dir")?.map(std::path::PathBuf::from),
            compile_ahead: o.compile_ahead as usize,
        },
        o.progress,
        o.user_data,
    ))
}

/// `packlm_open_options.precision`: None for PACKLM_PRECISION_DEFAULT.
fn precision_from_code(code: u32) -> Result<Option<Precision>> {
    match code {
        PACKLM_PRECISION_DEFAULT => Ok(None),
        PACKLM_PRECISION_EXACT => Ok(Some(Precision::Exact)),
        PACKLM_PRECISION_FAST => Ok(Some(Precision::Fast)),
        other => Err(Error::new(Status::ErrUnsupportedPrecision, format!("precision {other} is not one of 0 (the pack's default), 1 (exact), 2 (fast)"))),
    }
}

fn precision_code(p: Precision) -> u32 {
    match p {
        Precision::Exact => PACKLM_PRECISION_EXACT,
        Precision::Fast => PACKLM_PRECISION_FAST,
    }
}

/// Opens a pack: an HF folder or a GGUF file at the NUL-terminated UTF-8 `path`; `options` may
/// be NULL for defaults. On success `*out` receives a new model the caller owns (free it with
/// `packlm_model_free`); on failure `*out` is untouched and `packlm_last_error` names what was
/// wrong. The weights are memory-mapped: the files must not change while the model is open.
#[no_mangle]
pub unsafe extern "C" fn packlm_model_open(path: *const c_char, options: *const packlm_open_options, out: *mut *mut packlm_model) -> Status {
    ffi_boundary!("packlm_model_open", {
        let path = try_cstr(path, "path")?;
        let out = try_mut(out, "out")?;
        let (opts, progress, user) = read_options(options)?;
        // The callback runs on this thread, under no lock of the library.
        let mut report = |f: f32| progress.is_none_or(|cb| cb(f, user));
        let model = Model::open_with_progress(Path::new(path), &opts, &mut report)?;
        *out = Box::into_raw(Box::new(packlm_model { inner: model, tokenize: Default::default() }));
        Ok(())
    })
}

/// Changes how many threads (the calling thread included; 0 = one per core) the model's later
/// calls use, e.g. to throttle an app in the background. Results are bit-identical for any count.
/// More than 256 returns PACKLM_ERR_LIMIT_EXCEEDED and leaves the setting as it was. Safe to call
/// from any thread, also while sessions of the model are running (they use the new count from
/// their next kernel call).
#[no_mangle]
pub unsafe extern "C" fn packlm_model_set_threads(model: *const packlm_model, threads: u32) -> Status {
    ffi_boundary!("packlm_model_set_threads", {
        let m = try_ref(model, "model")?;
        m.inner.set_threads(threads as usize)
    })
}

/// Frees a model handle; NULL is a no-op. Sessions created from it stay valid.
#[no_mangle]
pub unsafe extern "C" fn packlm_model_free(model: *mut packlm_model) {
    free_box(model);
}

/// Numbers describing an open model.
#[repr(C)]
pub struct packlm_info {
    /// sizeof(packlm_info) as the caller compiled it; must be set before the call.
    pub size: usize,
    /// Rows of the embedding / logits per position.
    pub n_vocab: u32,
    pub n_layers: u32,
    /// Context length (most positions a session may hold).
    pub n_ctx: u32,
    pub hidden_size: u32,
    /// BOS token id, or -1 when the pack has none.
    pub bos: i32,
    /// First EOS token id, or -1 when none.
    pub eos: i32,
    /// Count of stop tokens (see packlm_model_stop_tokens).
    pub n_stop: u32,
    /// 1 when tokenizing with PACKLM_TOKENIZE_ADD_SPECIAL prepends BOS.
    pub add_bos: u32,
    /// Since ABI 2: 1 when the pack has a chat template (packlm_chat_apply works), else 0.
    pub has_chat_template: u32,
    /// Written as 0. It keeps `precision` past the previous layout's sizeof (48 bytes on 64-bit
    /// targets, the last 4 of them padding), as the growth rule asks.
    pub reserved: u32,
    /// The precision the model computes in: PACKLM_PRECISION_EXACT (1) or PACKLM_PRECISION_FAST
    /// (2), after the pack's default and the backend's kernels are taken into account (fast asked
    /// of a backend without reduced-precision kernels reports exact). Not written when `size`
    /// ends before it.
    pub precision: u32,
    // sizeof is now 56 on 64-bit targets, its last 4 bytes padding: a u32 appended here needs a
    // reserved u32 before it.
}

// The layout before `reserved` ended at has_chat_template, padded to the alignment of `size`:
// the fields appended since start at or past that sizeof.
const _: () = assert!(
    std::mem::offset_of!(packlm_info, precision)
        >= (std::mem::offset_of!(packlm_info, has_chat_template) + std::mem::size_of::<u32>()).next_multiple_of(std::mem::align_of::<usize>())
);
// The same for packlm_open_options, whose ABI 1 layout ended at user_data.
const _: () = assert!(std::mem::offset_of!(packlm_open_options, precision) >= packlm_open_options::FIRST_SIZE.next_multiple_of(std::mem::align_of::<usize>()));

// SAFETY: repr(C), starts with the usize size, every other field an integer.
unsafe impl AbiStruct for packlm_info {
    const NAME: &'static str = "packlm_info";
    const FIRST_SIZE: usize = std::mem::offset_of!(packlm_info, add_bos) + std::mem::size_of::<u32>();
    const FIRST_ABI: u32 = 1;
    fn defaults() -> Self {
        packlm_info { size: std::mem::size_of::<packlm_info>(), n_vocab: 0, n_layers: 0, n_ctx: 0, hidden_size: 0, bos: -1, eos: -1, n_stop: 0, add_bos: 0, has_chat_template: 0, reserved: 0, precision: 0 }
    }
}

/// Fills the first `info->size` bytes of `*info` (the caller sets `size`, normally to
/// `sizeof(packlm_info)`); no byte past `size` is written. Safe from any thread.
#[no_mangle]
pub unsafe extern "C" fn packlm_model_info(model: *const packlm_model, info: *mut packlm_info) -> Status {
    ffi_boundary!("packlm_model_info", {
        let m = &try_ref(model, "model")?.inner;
        let size = out_size(info, "info")?;
        let i = m.info();
        let value = packlm_info {
            size,
            n_vocab: i.n_vocab as u32,
            n_layers: i.n_layers as u32,
            n_ctx: i.n_ctx as u32,
            hidden_size: i.hidden_size as u32,
            bos: i.bos.map(|b| b as i32).unwrap_or(-1),
            eos: i.eos.map(|e| e as i32).unwrap_or(-1),
            n_stop: i.stop_tokens.len() as u32,
            add_bos: i.add_bos as u32,
            has_chat_template: i.has_chat_template as u32,
            reserved: 0,
            precision: precision_code(i.precision),
        };
        write_prefix(&value, info, size);
        Ok(())
    })
}

/// Copies the stop token ids into `buf` (capacity `cap`); `*n` receives the count, or the
/// count needed with PACKLM_ERR_BUFFER_TOO_SMALL.
#[no_mangle]
pub unsafe extern "C" fn packlm_model_stop_tokens(model: *const packlm_model, buf: *mut u32, cap: usize, n: *mut usize) -> Status {
    ffi_boundary!("packlm_model_stop_tokens", {
        let m = &try_ref(model, "model")?.inner;
        write_items(&m.info().stop_tokens, buf, cap, n)
    })
}

/// Copies each layer's KV row width (n_kv_heads x head_dim; 0 for a layer that reads another
/// layer's plane) into `buf`; sizes as packlm_model_stop_tokens.
#[no_mangle]
pub unsafe extern "C" fn packlm_model_kv_widths(model: *const packlm_model, buf: *mut u32, cap: usize, n: *mut usize) -> Status {
    ffi_boundary!("packlm_model_kv_widths", {
        let m = &try_ref(model, "model")?.inner;
        let widths: Vec<u32> = m.info().kv_widths.iter().map(|w| w.unwrap_or(0) as u32).collect();
        write_items(&widths, buf, cap, n)
    })
}

/// The model's description as JSON text (family, sizes, special tokens, backend, precision in
/// use as "exact" or "fast", one entry per layer, and for the gpu and npu backends
/// "device_counters": their work so far, such as "graphs_compiled"),
/// NUL-terminated, into `buf` of capacity `cap`; `*n` receives its length, or the capacity
/// needed (length + 1) with PACKLM_ERR_BUFFER_TOO_SMALL.
#[no_mangle]
pub unsafe extern "C" fn packlm_model_info_json(model: *const packlm_model, buf: *mut c_char, cap: usize, n: *mut usize) -> Status {
    ffi_boundary!("packlm_model_info_json", {
        let m = &try_ref(model, "model")?.inner;
        write_text(&m.info_json(), buf, cap, n)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header's constants are the API's precisions, both ways.
    #[test]
    fn precision_constants_are_the_api_precisions() -> Result<()> {
        assert_eq!(precision_from_code(PACKLM_PRECISION_DEFAULT)?, None);
        assert_eq!(precision_from_code(PACKLM_PRECISION_EXACT)?, Some(Precision::Exact));
        assert_eq!(precision_from_code(PACKLM_PRECISION_FAST)?, Some(Precision::Fast));
        assert_eq!((precision_code(Precision::Exact), precision_code(Precision::Fast)), (PACKLM_PRECISION_EXACT, PACKLM_PRECISION_FAST));
        let Err(e) = precision_from_code(7) else { panic!("precision 7 was accepted") };
        assert_eq!(e.status, Status::ErrUnsupportedPrecision);
        assert!(e.message.contains('7'), "{}", e.message);
        Ok(())
    }
}
