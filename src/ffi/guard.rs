//! The unsafe plumbing of the C boundary, in one place: the panic guard every extern body runs
//! in, the thread-local last-error message, and pointer-to-reference conversions that return
//! PACKLM_ERR_NULL_ARGUMENT instead of dereferencing NULL.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};

use crate::error::{Error, Result, Status};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Shown by packlm_last_error on a thread whose error store is already destroyed.
const STORE_GONE: &CStr = c"(no message: packlm was called while this thread was exiting)";

/// Records `message` as this thread's last error (interior NULs are replaced). A call from a
/// thread-exit destructor, after the store is destroyed, keeps no message (`with` would panic
/// outside any guard there and abort the host).
pub fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut slot) = e.try_borrow_mut() {
            *slot = c;
        }
    });
}

/// Pointer to this thread's last error text; valid until the next failing call on this thread.
pub fn last_error_ptr() -> *const c_char {
    LAST_ERROR.try_with(|e| e.try_borrow().map(|m| m.as_ptr()).unwrap_or(STORE_GONE.as_ptr())).unwrap_or(STORE_GONE.as_ptr())
}

/// Runs `body` with panics caught; turns its result into a status and records the message.
pub fn boundary<F: FnOnce() -> Result<()>>(name: &str, body: F) -> Status {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => Status::Ok,
        Ok(Err(e)) => {
            set_last_error(&format!("{name}: {}", e.message));
            e.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(&format!("{name}: internal panic: {what}"));
            Status::ErrPanic
        }
    }
}

/// Wraps an extern body: `ffi_boundary!("packlm_x", { ...; Ok(()) })`.
macro_rules! ffi_boundary {
    ($name:expr, $body:block) => {
        $crate::ffi::guard::boundary($name, || -> $crate::error::Result<()> { $body })
    };
}
pub(crate) use ffi_boundary;

fn null(what: &str) -> Error {
    Error::new(Status::ErrNullArgument, format!("{what} is NULL"))
}

/// `&T` from a pointer the caller promises is valid or NULL.
pub fn try_ref<'a, T>(p: *const T, what: &str) -> Result<&'a T> {
    // SAFETY: non-NULL pointers given to packlm are valid for the call (documented contract).
    unsafe { p.as_ref() }.ok_or_else(|| null(what))
}

/// `&mut T` from a pointer the caller promises is valid, unaliased, or NULL.
pub fn try_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    // SAFETY: as try_ref; the handle's thread rule forbids concurrent use.
    unsafe { p.as_mut() }.ok_or_else(|| null(what))
}

/// A slice of `n` elements; NULL is accepted only when `n == 0`.
pub fn try_slice<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: the caller promises `n` readable elements at `p`.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// A writable slice of `n` elements; NULL is accepted only when `n == 0`.
pub fn try_slice_mut<'a, T>(p: *mut T, n: usize, what: &str) -> Result<&'a mut [T]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: the caller promises `n` writable elements at `p`, not aliased during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// UTF-8 text of `len` bytes.
pub fn try_text<'a>(p: *const c_char, len: usize, what: &str) -> Result<&'a str> {
    let bytes = try_slice(p as *const u8, len, what)?;
    std::str::from_utf8(bytes).map_err(|e| Error::new(Status::ErrUtf8, format!("{what}: {e}")))
}

/// A NUL-terminated UTF-8 string.
pub fn try_cstr<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: the caller promises a NUL-terminated string.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str().map_err(|e| Error::new(Status::ErrUtf8, format!("{what}: {e}")))
}

/// Copies `text` plus a NUL into `buf` (capacity `cap`) and its length into `*n`; when it
/// does not fit, writes the capacity needed (length + 1) into `*n` and returns
/// ErrBufferTooSmall, leaving `buf` untouched.
pub fn write_text(text: &str, buf: *mut c_char, cap: usize, n: *mut usize) -> Result<()> {
    let n = try_mut(n, "n_out")?;
    let need = text.len() + 1;
    if cap < need {
        *n = need;
        return Err(Error::new(Status::ErrBufferTooSmall, format!("needs {need} bytes, buffer has {cap}")));
    }
    let out = try_slice_mut(buf as *mut u8, need, "buf")?;
    out[..text.len()].copy_from_slice(text.as_bytes());
    out[text.len()] = 0;
    *n = text.len();
    Ok(())
}

/// Copies `items` into `buf` (capacity `cap`); on too small, the count needed goes to `*n`.
pub fn write_items<T: Copy>(items: &[T], buf: *mut T, cap: usize, n: *mut usize) -> Result<()> {
    let n = try_mut(n, "n_out")?;
    if cap < items.len() {
        *n = items.len();
        return Err(Error::new(Status::ErrBufferTooSmall, format!("needs {} entries, buffer has {cap}", items.len())));
    }
    let out = try_slice_mut(buf, items.len(), "buf")?;
    out.copy_from_slice(items);
    *n = items.len();
    Ok(())
}

/// Frees a handle made by `Box::into_raw`; NULL is a no-op; a panic in a destructor is caught.
pub fn free_box<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: `p` came from Box::into_raw in this library and is freed once (the caller's
        // contract, stated on each `_free` function).
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(unsafe { Box::from_raw(p) })));
    }
}
