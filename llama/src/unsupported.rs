//! The rest of the llama.cpp API as llama-cpp-python 0.3.36 resolves it at import: every
//! function exists (a missing symbol fails the client's import) and fails loudly: a log line
//! naming it, and NULL, -1, false, 0 (sizes and counts), NaN (floats) or an all-zero struct.
//! None of these is silently wrong: each is llama.cpp's failure value for its function, or a
//! value a caller cannot take for a result (NaN, NULL).
//!
//! Parameter and return types follow llama.h; pointer parameters are `*mut c_void` since
//! nothing here reads them.

use std::ffi::{c_char, c_void};
use std::ptr;

use crate::abi::{Embd, ModelParams, OptParams};
use crate::log::unsupported;

macro_rules! unsupported_fn {
    ($name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty = $fail:expr) => {
        #[no_mangle]
        pub extern "C" fn $name($($arg: $ty),*) -> $ret {
            $(let _ = $arg;)*
            unsupported(stringify!($name));
            $fail
        }
    };
    ($name:ident ( $($arg:ident : $ty:ty),* )) => {
        #[no_mangle]
        pub extern "C" fn $name($($arg: $ty),*) {
            $(let _ = $arg;)*
            unsupported(stringify!($name));
        }
    };
}

unsupported_fn!(llama_model_save_to_file(_a0: *mut c_void, _a1: *const c_char));
unsupported_fn!(llama_model_init_from_user(_a0: *mut c_void, _a1: *mut c_void, _a2: *mut c_void, _a3: ModelParams) -> *mut c_void = ptr::null_mut());
unsupported_fn!(llama_memory_seq_add(_a0: *mut c_void, _a1: i32, _a2: i32, _a3: i32, _a4: i32));
unsupported_fn!(llama_memory_seq_div(_a0: *mut c_void, _a1: i32, _a2: i32, _a3: i32, _a4: i32));
unsupported_fn!(llama_batch_ext_add_embd(_a0: *mut c_void, _a1: i32, _a2: Embd) -> i32 = -1);
unsupported_fn!(llama_batch_ext_set_embd_token(_a0: *mut c_void, _a1: i32, _a2: Embd) -> bool = false);
unsupported_fn!(llama_batch_ext_set_embd_state(_a0: *mut c_void, _a1: i32, _a2: Embd) -> bool = false);
unsupported_fn!(llama_opt_init(_a0: *mut c_void, _a1: *mut c_void, _a2: OptParams));
unsupported_fn!(llama_opt_epoch(_a0: *mut c_void, _a1: *mut c_void, _a2: *mut c_void, _a3: *mut c_void, _a4: i64, _a5: *mut c_void, _a6: *mut c_void));

/// `llama_model_quantize`: packlm writes no ggml models. llama.cpp's failure: 1 and its log
/// line (llama-quant.cpp: "failed to quantize: ..."); nothing is written.
#[no_mangle]
pub extern "C" fn llama_model_quantize(_fname_inp: *const c_char, _fname_out: *const c_char, _params: *const c_void) -> u32 {
    crate::log::error(
        "llama_model_quantize",
        "failed to quantize: not supported by this llama.cpp API over packlm",
    );
    1
}

/// `llama_opt_param_filter_all`: llama.h "always returns true" (llama.cpp's body). Training
/// itself (`llama_opt_init`, `llama_opt_epoch`) stays refused.
#[no_mangle]
pub extern "C" fn llama_opt_param_filter_all(_tensor: *const c_void, _userdata: *mut c_void) -> bool {
    true
}
