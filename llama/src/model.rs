//! Library setup, model loading and the model's facts (`llama_model_*`, `llama_backend_*`).

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::ptr;
use std::sync::{Mutex, OnceLock};

use crate::abi::ModelParams;
use crate::adapter::Engine;
use crate::log::{self, error, guard};

/// `struct llama_model` (and `struct llama_vocab`, which points at the same object).
pub struct LlamaModel {
    pub engine: Engine,
    /// The pack's metadata as (key, value) strings (packlm's `Model::metadata`).
    pub meta: Vec<(String, String)>,
    pub desc: CString,
    /// Each token's text, NUL-terminated, made on first use (`llama_vocab_get_text`).
    pub texts: OnceLock<Vec<CString>>,
    /// The pack's chat template (`llama_model_chat_template`).
    pub template: Option<CString>,
    /// The addresses of its LoRA adapters not yet freed (`llama_adapter_lora_init`): the model
    /// frees them with itself, as llama.cpp's does.
    pub(crate) loras: Mutex<Vec<usize>>,
    /// When its load began, on ggml's clock, and how long it took, in microseconds
    /// (llama.cpp's `t_start_us`, `t_load_us`; `context_perf`).
    pub t_start_us: i64,
    pub t_load_us: i64,
}

impl LlamaModel {
    fn new(engine: Engine, t_start_us: i64) -> LlamaModel {
        let meta = engine.metadata().to_vec();
        let arch = meta.iter().find(|kv| kv.0 == "general.architecture").map(|kv| kv.1.clone()).unwrap_or_else(|| engine.family());
        let desc = CString::new(format!("{arch} {} layers (packlm)", engine.n_layer())).unwrap_or_default();
        let template = engine.chat_template().and_then(|t| CString::new(t).ok());
        let t_load_us = crate::context_perf::time_us() - t_start_us;
        LlamaModel { engine, meta, desc, texts: OnceLock::new(), template, loras: Mutex::new(Vec::new()), t_start_us, t_load_us }
    }

    /// The metadata value under `key`.
    pub fn meta_value(&self, key: &str) -> Option<&str> {
        self.meta.iter().find(|kv| kv.0 == key).map(|kv| kv.1.as_str())
    }

    /// `general.architecture` (GGUF's name of the architecture; packlm states it for a
    /// folder too), else packlm's family.
    pub fn arch(&self) -> String {
        self.meta_value("general.architecture").map(str::to_string).unwrap_or_else(|| self.engine.family())
    }

    pub fn texts(&self) -> &[CString] {
        self.texts.get_or_init(|| {
            (0..self.engine.n_vocab() as u32)
                .map(|id| CString::new(self.engine.token_text(id).unwrap_or_default().replace('\0', " ")).unwrap_or_default())
                .collect()
        })
    }
}

/// The model behind a `llama_model*` or `llama_vocab*`; None (and a log line) for NULL.
pub unsafe fn model_ref<'a>(function: &str, p: *const LlamaModel) -> Option<&'a LlamaModel> {
    if p.is_null() {
        error(function, "model (or vocab) is NULL");
        return None;
    }
    Some(&*p)
}

/// Copies `text` as a NUL-terminated string into `buf` of `size` bytes, cut to fit (as
/// snprintf does); returns the full length (llama.cpp's `llama_model_meta_*` contract).
pub unsafe fn write_c_string(text: &str, buf: *mut c_char, size: usize) -> i32 {
    if !buf.is_null() && size > 0 {
        let n = text.len().min(size - 1);
        ptr::copy_nonoverlapping(text.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
    }
    i32::try_from(text.len()).unwrap_or(i32::MAX)
}

#[no_mangle]
pub extern "C" fn llama_backend_init() {}

#[no_mangle]
pub extern "C" fn llama_backend_free() {}

#[no_mangle]
pub extern "C" fn llama_numa_init(_numa: i32) {}

#[no_mangle]
pub extern "C" fn llama_log_set(callback: Option<log::Callback>, user_data: *mut c_void) {
    log::set(callback, user_data)
}

/// `llama_log_get`: writes the callback and user data now in use (see `log::get`); a NULL
/// out-pointer is skipped.
#[no_mangle]
pub unsafe extern "C" fn llama_log_get(callback: *mut Option<log::Callback>, user_data: *mut *mut c_void) {
    let (cb, ud) = log::get();
    if !callback.is_null() {
        *callback = Some(cb);
    }
    if !user_data.is_null() {
        *user_data = ud;
    }
}

#[no_mangle]
pub extern "C" fn llama_max_devices() -> usize {
    1
}

/// llama.cpp's limit on tensor buffer-type overrides (4096); this library refuses any.
#[no_mangle]
pub extern "C" fn llama_max_tensor_buft_overrides() -> usize {
    4096
}

/// LLAMA_MAX_SEQ (256), the most sequences a context of this library takes (`n_seq_max`), as
/// llama.cpp's.
#[no_mangle]
pub extern "C" fn llama_max_parallel_sequences() -> usize {
    crate::context::MAX_SEQ as usize
}

#[no_mangle]
pub extern "C" fn llama_supports_mmap() -> bool {
    true
}

#[no_mangle]
pub extern "C" fn llama_supports_mlock() -> bool {
    false
}

#[no_mangle]
pub extern "C" fn llama_supports_gpu_offload() -> bool {
    false
}

#[no_mangle]
pub extern "C" fn llama_supports_rpc() -> bool {
    false
}

#[no_mangle]
pub extern "C" fn llama_time_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

#[no_mangle]
pub extern "C" fn llama_print_system_info() -> *const c_char {
    c"packlm CPU backend".as_ptr()
}

#[no_mangle]
pub extern "C" fn llama_model_default_params() -> ModelParams {
    // llama.cpp's defaults: all layers on the GPU when there is one (see `offload`), mmap
    // loading.
    ModelParams {
        devices: ptr::null_mut(),
        tensor_buft_overrides: ptr::null(),
        n_gpu_layers: -1,
        split_mode: 1,
        // LLAMA_LOAD_MODE_AUTO and LLAMA_LAZY_MODE_AUTO (llama-model.cpp); this library
        // maps the weights whatever they say.
        load_mode: -1,
        lazy_mode: 1,
        main_gpu: 0,
        tensor_split: ptr::null(),
        progress_callback: None,
        progress_callback_user_data: ptr::null_mut(),
        kv_overrides: ptr::null(),
        vocab_only: false,
        check_tensors: false,
        use_extra_bufts: true,
        no_host: false,
        no_alloc: false,
        load_mtp: false,
    }
}

/// Opens a GGUF file (or a packlm pack folder). NULL, with the reason logged, on any failure.
/// `kv_overrides` and tensor overrides change the model and are refused. `n_gpu_layers` puts
/// the whole model on packlm's GPU backend or on the host (`offload`: 0 is the host, any other
/// value the GPU when there is one, or packlm's npu backend when PACKLM_LLAMA_NPU names an
/// execution provider); the other placement and memory fields (split mode, main
/// GPU, mmap, mlock) are ignored: packlm maps the weights, and runs a model on one device.
/// The progress callback is called as the load goes (`Progress`); false cancels it (NULL).
#[no_mangle]
pub unsafe extern "C" fn llama_model_load_from_file(path: *const c_char, params: ModelParams) -> *mut LlamaModel {
    const F: &str = "llama_model_load_from_file";
    guard(F, ptr::null_mut(), || load(F, path, params))
}

/// `llama_model_load_from_file`'s load, its log lines under `f` (the entry point called).
pub(crate) unsafe fn load(f: &str, path: *const c_char, params: ModelParams) -> *mut LlamaModel {
    if path.is_null() {
        error(f, "path is NULL");
        return ptr::null_mut();
    }
    let Ok(path) = CStr::from_ptr(path).to_str() else {
        error(f, "path is not UTF-8");
        return ptr::null_mut();
    };
    if !params.kv_overrides.is_null() || !params.tensor_buft_overrides.is_null() {
        error(f, "kv_overrides and tensor_buft_overrides are not supported");
        return ptr::null_mut();
    }
    let t_start_us = crate::context_perf::time_us();
    let mut progress = Progress { callback: params.progress_callback, user_data: params.progress_callback_user_data, last: None };
    // llama.h: a progress callback returning false aborts the load; llama.cpp then frees
    // what it loaded, logs "cancelled model load" (info) and gives NULL.
    let cancelled = || {
        log::log(log::Level::Info, &format!("{f}: cancelled model load"));
        ptr::null_mut()
    };
    let opened = crate::offload::open(f, Path::new(path), params.n_gpu_layers, params.vocab_only, &mut |p| progress.report(p));
    match opened {
        Ok(engine) => {
            if !progress.finish() {
                drop(engine);
                return cancelled();
            }
            let m = Box::into_raw(Box::new(LlamaModel::new(engine, t_start_us)));
            crate::chat::opened(m);
            m
        }
        Err(e) if crate::adapter::is_aborted(&e) => cancelled(),
        Err(e) => {
            error(f, &format!("{path}: {e}"));
            ptr::null_mut()
        }
    }
}

/// The params' progress callback, called at packlm's own points of an open (`Engine::open`):
/// 0 first, then once the pack's files are read, then after each layer's weights are prepared
/// (one value per layer), and 1 last. Only a value above the last one given is passed on (a
/// load the GPU does not take opens again on the host, from 0), so the values the client sees
/// grow from 0 to 1; 1 is given at the end whatever packlm's last point was.
struct Progress {
    callback: Option<unsafe extern "C" fn(f32, *mut c_void) -> bool>,
    user_data: *mut c_void,
    last: Option<f32>,
}

impl Progress {
    /// Passes `p` on; false when the callback asks to stop.
    fn report(&mut self, p: f32) -> bool {
        let Some(cb) = self.callback else { return true };
        if self.last.is_some_and(|last| p <= last) {
            return true;
        }
        self.last = Some(p);
        // SAFETY: llama.h's `llama_progress_callback`, with the params' user data.
        unsafe { cb(p, self.user_data) }
    }

    /// Gives 1 if it was not given yet; false when the callback asks to stop.
    fn finish(&mut self) -> bool {
        self.report(1.0)
    }
}

#[no_mangle]
pub unsafe extern "C" fn llama_load_model_from_file(path: *const c_char, params: ModelParams) -> *mut LlamaModel {
    llama_model_load_from_file(path, params)
}

/// Frees a model and the LoRA adapters loaded for it that were not freed; NULL is a no-op.
/// Contexts made from it must be freed first.
#[no_mangle]
pub unsafe extern "C" fn llama_model_free(model: *mut LlamaModel) {
    guard("llama_model_free", (), || {
        if !model.is_null() {
            crate::chat::closed(model);
            let m = Box::from_raw(model);
            crate::lora::free_all(std::mem::take(&mut *m.loras.lock().unwrap_or_else(|e| e.into_inner())));
            drop(m);
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn llama_free_model(model: *mut LlamaModel) {
    llama_model_free(model)
}

#[no_mangle]
pub extern "C" fn llama_model_get_vocab(model: *const LlamaModel) -> *const LlamaModel {
    model
}

macro_rules! model_fact {
    ($name:ident, $ty:ty, $fail:expr, |$m:ident| $body:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(model: *const LlamaModel) -> $ty {
            guard(stringify!($name), $fail, || match model_ref(stringify!($name), model) {
                Some($m) => $body,
                None => $fail,
            })
        }
    };
}

pub(crate) use model_fact;

model_fact!(llama_model_n_ctx_train, i32, -1, |m| m.engine.n_ctx_train() as i32);
model_fact!(llama_model_n_embd, i32, -1, |m| m.engine.n_embd() as i32);
model_fact!(llama_model_n_layer, i32, -1, |m| m.engine.n_layer() as i32);
// Layer 0's head counts, as llama.cpp's hparams.n_head() and n_head_kv() give.
model_fact!(llama_model_n_head, i32, -1, |m| m.engine.n_head() as i32);
model_fact!(llama_model_n_head_kv, i32, -1, |m| m.engine.n_head_kv() as i32);
model_fact!(llama_model_meta_count, i32, -1, |m| m.meta.len() as i32);
model_fact!(llama_model_is_recurrent, bool, false, |_m| false);
model_fact!(llama_model_is_hybrid, bool, false, |_m| false);
model_fact!(llama_model_is_diffusion, bool, false, |_m| false);
model_fact!(llama_model_has_encoder, bool, false, |_m| false);
model_fact!(llama_model_has_decoder, bool, false, |_m| true);

/// Frequency scaling of the training context: 1 (packlm applies a pack's rope scaling itself).
#[no_mangle]
pub unsafe extern "C" fn llama_model_rope_freq_scale_train(model: *const LlamaModel) -> f32 {
    guard("llama_model_rope_freq_scale_train", 0.0, || match model_ref("llama_model_rope_freq_scale_train", model) {
        Some(_) => 1.0,
        None => 0.0,
    })
}

#[no_mangle]
pub unsafe extern "C" fn llama_model_desc(model: *const LlamaModel, buf: *mut c_char, size: usize) -> i32 {
    guard("llama_model_desc", -1, || match model_ref("llama_model_desc", model) {
        Some(m) => write_c_string(m.desc.to_str().unwrap_or(""), buf, size),
        None => -1,
    })
}

#[no_mangle]
pub unsafe extern "C" fn llama_model_meta_key_by_index(model: *const LlamaModel, i: i32, buf: *mut c_char, size: usize) -> i32 {
    meta_by_index("llama_model_meta_key_by_index", model, i, buf, size, |kv| &kv.0)
}

#[no_mangle]
pub unsafe extern "C" fn llama_model_meta_val_str_by_index(model: *const LlamaModel, i: i32, buf: *mut c_char, size: usize) -> i32 {
    meta_by_index("llama_model_meta_val_str_by_index", model, i, buf, size, |kv| &kv.1)
}

/// Picks the key or the value of a metadata entry.
type MetaField = fn(&(String, String)) -> &String;

unsafe fn meta_by_index(
    f: &str,
    model: *const LlamaModel,
    i: i32,
    buf: *mut c_char,
    size: usize,
    pick: MetaField,
) -> i32 {
    guard(f, -1, || {
        let Some(m) = model_ref(f, model) else { return -1 };
        match usize::try_from(i).ok().and_then(|i| m.meta.get(i)) {
            Some(kv) => write_c_string(pick(kv), buf, size),
            None => {
                if !buf.is_null() && size > 0 {
                    *buf = 0;
                }
                -1
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn llama_model_meta_val_str(model: *const LlamaModel, key: *const c_char, buf: *mut c_char, size: usize) -> i32 {
    const F: &str = "llama_model_meta_val_str";
    guard(F, -1, || {
        let Some(m) = model_ref(F, model) else { return -1 };
        if key.is_null() {
            error(F, "key is NULL");
            return -1;
        }
        let key = CStr::from_ptr(key).to_string_lossy();
        match m.meta.iter().find(|kv| kv.0 == key) {
            Some(kv) => write_c_string(&kv.1, buf, size),
            None => {
                if !buf.is_null() && size > 0 {
                    *buf = 0;
                }
                -1
            }
        }
    })
}

/// The pack's chat template when `name` is NULL; NULL for a named template (packs carry one).
#[no_mangle]
pub unsafe extern "C" fn llama_model_chat_template(model: *const LlamaModel, name: *const c_char) -> *const c_char {
    const F: &str = "llama_model_chat_template";
    guard(F, ptr::null(), || {
        let Some(m) = model_ref(F, model) else { return ptr::null() };
        if !name.is_null() {
            return ptr::null();
        }
        m.template.as_ref().map(|t| t.as_ptr()).unwrap_or(ptr::null())
    })
}

#[no_mangle]
pub extern "C" fn llama_version() -> *const c_char {
    c"packlm-llama 0.1.0".as_ptr()
}

/// A deprecated name of llama.h that calls its replacement (llama.h names each one).
macro_rules! deprecated_name {
    ($old:ident => $new:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty) => {
        #[doc = concat!("Deprecated: `", stringify!($new), "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $old($($arg: $ty),*) -> $ret {
            $new($($arg),*)
        }
    };
}
pub(crate) use deprecated_name;

deprecated_name!(llama_n_ctx_train => llama_model_n_ctx_train(model: *const LlamaModel) -> i32);
deprecated_name!(llama_n_embd => llama_model_n_embd(model: *const LlamaModel) -> i32);
deprecated_name!(llama_n_layer => llama_model_n_layer(model: *const LlamaModel) -> i32);
deprecated_name!(llama_n_head => llama_model_n_head(model: *const LlamaModel) -> i32);
