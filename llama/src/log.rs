//! The log sink (`llama_log_set`) and the guard every entry point runs in: a panic becomes the
//! function's failure value and a log line, never an abort of the host.

use std::ffi::{c_char, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

/// `ggml_log_level`.
#[derive(Clone, Copy)]
#[repr(i32)]
pub enum Level {
    Info = 2,
    Warn = 3,
    Error = 4,
}

pub type Callback = unsafe extern "C" fn(i32, *const c_char, *mut c_void);

struct Sink {
    callback: Option<Callback>,
    user_data: usize,
}

static SINK: Mutex<Sink> = Mutex::new(Sink { callback: None, user_data: 0 });

pub fn set(callback: Option<Callback>, user_data: *mut c_void) {
    if let Ok(mut s) = SINK.lock() {
        *s = Sink { callback, user_data: user_data as usize };
    }
}

/// The callback and user data `llama_log_get` reports: the ones set, or (none set, or NULL
/// set) the default that writes to stderr, as llama.cpp reports ggml's default callback.
pub fn get() -> (Callback, *mut c_void) {
    match SINK.lock() {
        Ok(s) => (s.callback.unwrap_or(log_to_stderr), s.user_data as *mut c_void),
        Err(_) => (log_to_stderr, std::ptr::null_mut()),
    }
}

/// The default sink: the text as it is, on stderr.
unsafe extern "C" fn log_to_stderr(_level: i32, text: *const c_char, _user_data: *mut c_void) {
    if !text.is_null() {
        eprint!("{}", std::ffi::CStr::from_ptr(text).to_string_lossy());
    }
}

/// Sends one line to the client's callback, or to stderr when none is set. The lock is not
/// held while the callback runs (it may call back in).
pub fn log(level: Level, msg: &str) {
    let (callback, user_data) = match SINK.lock() {
        Ok(s) => (s.callback, s.user_data),
        Err(_) => (None, 0),
    };
    let line = format!("{msg}\n");
    match (callback, CString::new(line.replace('\0', " "))) {
        (Some(cb), Ok(text)) => unsafe { cb(level as i32, text.as_ptr(), user_data as *mut c_void) },
        _ => eprint!("{line}"),
    }
}

pub fn error(function: &str, msg: &str) {
    log(Level::Error, &format!("{function}: {msg}"));
}

/// Runs `body`; a panic is logged under `function` and gives `failure`.
pub fn guard<T>(function: &str, failure: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(_) => {
            error(function, "internal error (panic); returning the failure value");
            failure
        }
    }
}

/// For functions this library does not implement: names the function, says why.
pub fn unsupported(function: &str) {
    error(function, "not supported by this llama.cpp API over packlm");
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn quiet(_level: i32, _text: *const c_char, _user_data: *mut c_void) {}

    #[test]
    fn get_gives_back_what_was_set_or_the_default() {
        let mut marker = 7u8;
        let data = &mut marker as *mut u8 as *mut c_void;
        set(Some(quiet), data);
        let (cb, ud) = get();
        assert_eq!((cb as *const () as usize, ud), (quiet as *const () as usize, data));
        // NULL restores the default callback (llama.cpp: ggml's default is reported, never NULL).
        set(None, std::ptr::null_mut());
        let (cb, ud) = get();
        assert_eq!((cb as *const () as usize, ud), (log_to_stderr as *const () as usize, std::ptr::null_mut()));
    }
}
