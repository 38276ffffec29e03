//! `ggml_abort` and `ggml_set_abort_callback` (ggml.h). The body is C (abort.c): ggml_abort is
//! printf-style variadic. A function of a C static archive linked into a Rust cdylib is not
//! exported, so `ggml_abort` here is a naked function that jumps to the C body: a jump, not a
//! call, leaves the caller's registers and stack as they were, so the C function receives the
//! variadic arguments exactly as the caller passed them.

use std::ffi::c_char;

/// `ggml_abort_callback_t`: receives the formatted message; abort() follows when it returns.
pub type AbortCallback = Option<unsafe extern "C" fn(*const c_char)>;

extern "C" {
    fn ggml_base_abort(file: *const c_char, line: i32, fmt: *const c_char, ...) -> !;
    fn ggml_base_set_abort_callback(callback: AbortCallback) -> AbortCallback;
}

/// `void ggml_abort(const char * file, int line, const char * fmt, ...)`: never returns.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn ggml_abort() {
    std::arch::naked_asm!("jmp {body}", body = sym ggml_base_abort)
}

/// `void ggml_abort(const char * file, int line, const char * fmt, ...)`: never returns.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn ggml_abort() {
    std::arch::naked_asm!("b {body}", body = sym ggml_base_abort)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("ggml_abort's jump to its C body is written for x86_64 and aarch64 only");

/// Sets the callback ggml_abort gives its message to (NULL: print it on stderr, the default);
/// returns the previous one.
#[no_mangle]
pub extern "C" fn ggml_set_abort_callback(callback: AbortCallback) -> AbortCallback {
    unsafe { ggml_base_set_abort_callback(callback) }
}
