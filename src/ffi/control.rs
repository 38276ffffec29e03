//! Cancellation and logging.

use std::ffi::{c_char, c_void, CString};
use crate::error::Status;
use crate::ffi::guard::{free_box, ffi_boundary, try_mut, try_ref};
use crate::ffi::session::{packlm_session, session_in_use};
use crate::{set_log_callback, AbortHandle, LogLevel};

/// A session's abort flag (opaque), from packlm_session_abort_handle, freed by
/// packlm_abort_free. Safe to use from any thread, including while the session runs a pass on
/// another thread: that is its purpose. It keeps only the flag alive, not the session.
pub struct packlm_abort {
    flag: AbortHandle,
}

/// Writes into `*out` a handle to the session's abort flag. Setting it (packlm_abort_set) makes
/// the session's current and later passes stop with PACKLM_ERR_ABORTED, leaving the session as
/// it was before the call, until packlm_abort_clear. The host backend checks it inside long
/// kernels (per task of a matmul or attention call, and in the output projection), the others
/// between layers.
#[no_mangle]
pub unsafe extern "C" fn packlm_session_abort_handle(session: *const packlm_session, out: *mut *mut packlm_abort) -> Status {
    ffi_boundary!("packlm_session_abort_handle", {
        let s = session_in_use(session)?;
        let out = try_mut(out, "out")?;
        *out = Box::into_raw(Box::new(packlm_abort { flag: s.abort_handle() }));
        Ok(())
    })
}

/// Raises the flag. Safe from any thread.
#[no_mangle]
pub unsafe extern "C" fn packlm_abort_set(abort: *const packlm_abort) -> Status {
    ffi_boundary!("packlm_abort_set", {
        try_ref(abort, "abort")?.flag.abort();
        Ok(())
    })
}

/// Lowers the flag, so that the session runs again. Safe from any thread.
#[no_mangle]
pub unsafe extern "C" fn packlm_abort_clear(abort: *const packlm_abort) -> Status {
    ffi_boundary!("packlm_abort_clear", {
        try_ref(abort, "abort")?.flag.clear();
        Ok(())
    })
}

/// Frees an abort handle; NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn packlm_abort_free(abort: *mut packlm_abort) {
    free_box(abort);
}

/// Log levels passed to the callback.
pub const PACKLM_LOG_DEBUG: i32 = 0;
pub const PACKLM_LOG_INFO: i32 = 1;
pub const PACKLM_LOG_WARN: i32 = 2;

/// A log callback: level (PACKLM_LOG_*), a NUL-terminated message valid during the call, and the
/// user_data given to packlm_set_log_callback. May be called from any packlm thread.
pub type packlm_log_fn = Option<extern "C" fn(level: i32, message: *const c_char, user_data: *mut c_void)>;

struct UserData(*mut c_void);
// SAFETY: the pointer is only handed back to the host's callback; the host promises (header
// doc) that its callback and user_data may be used from any thread.
unsafe impl Send for UserData {}
unsafe impl Sync for UserData {}

impl UserData {
    /// Taking `&self` makes the closure capture the whole (Send + Sync) wrapper.
    fn get(&self) -> *mut c_void {
        self.0
    }
}

/// Sends library messages to `callback` (NULL restores the default: stderr when the PACKLM_LOG
/// environment variable is "debug", "info" or "warn"). Process-wide; safe from any thread.
#[no_mangle]
pub extern "C" fn packlm_set_log_callback(callback: packlm_log_fn, user_data: *mut c_void) -> Status {
    ffi_boundary!("packlm_set_log_callback", {
        let ud = UserData(user_data);
        set_log_callback(callback.map(|cb| {
            Box::new(move |level: LogLevel, msg: &str| {
                let text = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
                cb(level as i32, text.as_ptr(), ud.get());
            }) as Box<dyn Fn(LogLevel, &str) + Send + Sync>
        }));
        Ok(())
    })
}
