//! `ggml_log_set` and `ggml_log_get` (ggml.h). The callback is kept and given back; nothing in
//! this library logs (the functions here answer without messages), so it is never called from
//! here. libllama's own lines go to the sink of `llama_log_set`.

use std::ffi::{c_char, c_void, CStr};
use std::io::Write;
use std::sync::Mutex;

/// `ggml_log_callback`: (enum ggml_log_level, text, user_data).
pub type LogCallback = unsafe extern "C" fn(i32, *const c_char, *mut c_void);

struct Logger {
    callback: LogCallback,
    user_data: usize,
}

static LOGGER: Mutex<Logger> = Mutex::new(Logger { callback: log_to_stderr, user_data: 0 });

/// ggml's default: the text as it is, on stderr, flushed.
unsafe extern "C" fn log_to_stderr(_level: i32, text: *const c_char, _user_data: *mut c_void) {
    if !text.is_null() {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(CStr::from_ptr(text).to_bytes());
        let _ = err.flush();
    }
}

/// Sets the callback for later log lines; NULL restores the default (stderr).
#[no_mangle]
pub extern "C" fn ggml_log_set(callback: Option<LogCallback>, user_data: *mut c_void) {
    let mut logger = LOGGER.lock().unwrap_or_else(|e| e.into_inner());
    *logger = Logger { callback: callback.unwrap_or(log_to_stderr), user_data: user_data as usize };
}

/// Writes the current callback (the default one when none was set) and its user data.
#[no_mangle]
pub unsafe extern "C" fn ggml_log_get(callback: *mut Option<LogCallback>, user_data: *mut *mut c_void) {
    let logger = LOGGER.lock().unwrap_or_else(|e| e.into_inner());
    if !callback.is_null() {
        *callback = Some(logger.callback);
    }
    if !user_data.is_null() {
        *user_data = logger.user_data as *mut c_void;
    }
}
