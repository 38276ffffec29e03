//! The unsafe plumbing of the C boundary, in one place: the panic guard every extern body runs
//! in, the thread-local last-error message, and pointer-to-reference conversions that return
//! PACKLM_ERR_NULL_ARGUMENT instead of dereferencing NULL.
//!
//! # Safety
//! Every `unsafe fn` here takes pointers from a C caller and shares one contract, the header's:
//! each pointer is NULL (refused with PACKLM_ERR_NULL_ARGUMENT where one is required) or valid
//! for the access the function makes (`n` elements, a NUL-terminated string, a struct whose
//! `size` field is true) for as long as the reference it returns is used, which is never past
//! the extern call; a handle was made by this library and not yet freed. The returned lifetimes
//! are unbounded, so a caller must not keep them past that call.

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
pub unsafe fn try_ref<'a, T>(p: *const T, what: &str) -> Result<&'a T> {
    // SAFETY: non-NULL pointers given to packlm are valid for the call (documented contract).
    unsafe { p.as_ref() }.ok_or_else(|| null(what))
}

/// `&mut T` from a pointer the caller promises is valid, unaliased, or NULL.
pub unsafe fn try_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    // SAFETY: as try_ref; the handle's thread rule forbids concurrent use.
    unsafe { p.as_mut() }.ok_or_else(|| null(what))
}

/// Refuses `n` elements of T whose byte length passes isize::MAX (no slice may be that long).
fn check_slice_len<T>(n: usize, what: &str) -> Result<()> {
    match n.checked_mul(std::mem::size_of::<T>()) {
        Some(bytes) if bytes <= isize::MAX as usize => Ok(()),
        _ => Err(Error::new(Status::ErrLimitExceeded, format!("{what}: {n} elements of {} bytes pass the largest object", std::mem::size_of::<T>()))),
    }
}

/// A slice of `n` elements; NULL is accepted only when `n == 0`.
pub unsafe fn try_slice<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null(what));
    }
    check_slice_len::<T>(n, what)?;
    // SAFETY: the caller promises `n` readable elements at `p`.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// A writable slice of `n` elements; NULL is accepted only when `n == 0`.
pub unsafe fn try_slice_mut<'a, T>(p: *mut T, n: usize, what: &str) -> Result<&'a mut [T]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(null(what));
    }
    check_slice_len::<T>(n, what)?;
    // SAFETY: the caller promises `n` writable elements at `p`, not aliased during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// UTF-8 text of `len` bytes.
pub unsafe fn try_text<'a>(p: *const c_char, len: usize, what: &str) -> Result<&'a str> {
    let bytes = try_slice(p as *const u8, len, what)?;
    std::str::from_utf8(bytes).map_err(|e| Error::new(Status::ErrUtf8, format!("{what}: {e}")))
}

/// A NUL-terminated UTF-8 string.
pub unsafe fn try_cstr<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
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
pub unsafe fn write_text(text: &str, buf: *mut c_char, cap: usize, n: *mut usize) -> Result<()> {
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
pub unsafe fn write_items<T: Copy>(items: &[T], buf: *mut T, cap: usize, n: *mut usize) -> Result<()> {
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
pub unsafe fn free_box<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: `p` came from Box::into_raw in this library and is freed once (the caller's
        // contract, stated on each `_free` function).
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(unsafe { Box::from_raw(p) })));
    }
}

/// A struct that crosses the boundary and starts with `size_t size` (sizeof the struct as the
/// caller compiled it). Fields are only ever appended, so a caller's size says which fields it
/// knows: the library accepts any size from the struct's first published size up to its current
/// one, reads or writes only that prefix, and gives every field past it its default.
///
/// # Safety
/// The type is `#[repr(C)]`, its first field is the `usize` size, and any bit pattern is a valid
/// value of each field (integers, floats, raw pointers, nullable function pointers): a prefix
/// copied from the caller over `defaults()` is then a valid value.
pub unsafe trait AbiStruct: Sized {
    /// The C name, for messages.
    const NAME: &'static str;
    /// The size of the first published layout: the end of its last field.
    const FIRST_SIZE: usize;
    /// The ABI version that published that first layout.
    const FIRST_ABI: u32;
    /// The value of every field a caller's size does not reach (`size` is set by the reader).
    fn defaults() -> Self;
}

/// Refuses a size outside [T::FIRST_SIZE, sizeof T], naming both bounds and the size given.
pub fn check_size<T: AbiStruct>(size: usize, what: &str) -> Result<()> {
    let current = std::mem::size_of::<T>();
    if size < T::FIRST_SIZE || size > current {
        return Err(Error::invalid(format!(
            "{what}.size is {size}; this library accepts a {} of {} (its ABI {} size) to {current} bytes",
            T::NAME,
            T::FIRST_SIZE,
            T::FIRST_ABI
        )));
    }
    Ok(())
}

/// The `size` field of the caller's struct at `p` (not NULL), unchecked.
unsafe fn caller_size<T: AbiStruct>(p: *const T) -> usize {
    // SAFETY: every layout of T starts with a usize `size` (AbiStruct's contract), and the caller
    // promises a valid struct at `p`.
    unsafe { std::ptr::read(p as *const usize) }
}

/// Reads the caller's struct at `p`: its first `size` bytes over `T::defaults()`. A size out of
/// range is refused before anything else is read.
pub unsafe fn read_prefix<T: AbiStruct>(p: *const T, what: &str) -> Result<T> {
    if p.is_null() {
        return Err(null(what));
    }
    let size = caller_size(p);
    check_size::<T>(size, what)?;
    let mut value = T::defaults();
    // SAFETY: size <= size_of::<T>() (checked), the caller's struct has `size` readable bytes,
    // and any bytes are a valid T (AbiStruct's contract).
    unsafe { std::ptr::copy_nonoverlapping(p as *const u8, &mut value as *mut T as *mut u8, size) };
    Ok(value)
}

/// Checks the `size` of the caller's output struct at `p` and returns it, so that the reply
/// goes through [`write_prefix`] with that size.
pub unsafe fn out_size<T: AbiStruct>(p: *mut T, what: &str) -> Result<usize> {
    if p.is_null() {
        return Err(null(what));
    }
    let size = caller_size(p);
    check_size::<T>(size, what)?;
    Ok(size)
}

/// Writes the first `size` bytes of `value` to the caller's struct at `p` (`size` came from
/// [`read_prefix`] or [`out_size`]); no byte past `size` is touched.
pub unsafe fn write_prefix<T: AbiStruct>(value: &T, p: *mut T, size: usize) {
    let size = size.min(std::mem::size_of::<T>());
    // SAFETY: the caller's struct at `p` has `size` writable bytes (its own size field said so)
    // and does not overlap `value`, a local.
    unsafe { std::ptr::copy_nonoverlapping(value as *const T as *const u8, p as *mut u8, size) };
}

/// `a * b` for buffer lengths; an overflow is refused with the two factors named.
pub fn checked_len(a: usize, b: usize, what: &str) -> Result<usize> {
    a.checked_mul(b).ok_or_else(|| Error::new(Status::ErrLimitExceeded, format!("{what}: {a} x {b} overflows size_t")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A struct published at ABI 1 with `a`, grown by `b` (placed past ABI 1's sizeof, 16).
    #[repr(C)]
    #[derive(Debug, PartialEq)]
    struct Grown {
        size: usize,
        a: u32,
        b: u64,
    }

    // SAFETY: repr(C), starts with the usize size, integers only.
    unsafe impl AbiStruct for Grown {
        const NAME: &'static str = "grown";
        const FIRST_SIZE: usize = std::mem::offset_of!(Grown, a) + 4;
        const FIRST_ABI: u32 = 1;
        fn defaults() -> Self {
            Grown { size: std::mem::size_of::<Grown>(), a: 7, b: 9 }
        }
    }

    /// Caller memory, aligned as a struct would be.
    #[repr(C, align(8))]
    struct Memory([u8; 32]);

    #[test]
    fn a_prefix_is_read_over_the_defaults() -> Result<()> {
        // An ABI 1 caller: its struct ends after `a`; the bytes after it are not its own.
        let mut mem = Memory([0xEE; 32]);
        mem.0[..8].copy_from_slice(&12usize.to_ne_bytes());
        mem.0[8..12].copy_from_slice(&3u32.to_ne_bytes());
        let v = unsafe { read_prefix(mem.0.as_ptr() as *const Grown, "g") }?;
        assert_eq!(v, Grown { size: 12, a: 3, b: 9 });
        // A current caller: every field is its own.
        let full = Grown { size: 24, a: 4, b: 5 };
        assert_eq!(unsafe { read_prefix(&full, "g") }?, Grown { size: 24, a: 4, b: 5 });
        Ok(())
    }

    #[test]
    fn sizes_out_of_range_are_refused_naming_both_bounds() {
        for size in [0usize, 11, 25, usize::MAX] {
            let g = Grown { size, a: 1, b: 2 };
            let Err(e) = (unsafe { read_prefix(&g, "g") }) else { panic!("g.size {size} was accepted") };
            assert_eq!(e.status, Status::ErrInvalidArgument);
            assert_eq!(e.message, format!("g.size is {size}; this library accepts a grown of 12 (its ABI 1 size) to 24 bytes"));
        }
    }

    #[test]
    fn only_the_prefix_is_written() -> Result<()> {
        let mut mem = Memory([0xEE; 32]);
        mem.0[..8].copy_from_slice(&12usize.to_ne_bytes());
        let p = mem.0.as_mut_ptr() as *mut Grown;
        let size = unsafe { out_size(p, "g") }?;
        unsafe { write_prefix(&Grown { size, a: 0x01020304, b: u64::MAX }, p, size) };
        assert_eq!(&mem.0[8..12], &0x01020304u32.to_ne_bytes());
        assert!(mem.0[12..].iter().all(|&b| b == 0xEE), "a byte past the caller's size was written");
        Ok(())
    }

    #[test]
    fn length_products_are_checked() -> Result<()> {
        assert_eq!(checked_len(3, 5, "x")?, 15);
        assert!(matches!(checked_len(usize::MAX, 2, "x"), Err(e) if e.status == Status::ErrLimitExceeded));
        Ok(())
    }
}

/// The first published sizes, as literals from the ABI 1 header (tests/c/abi1/packlm.h, LP64):
/// a change to a struct's early fields would move them, and this says so before any caller does.
#[cfg(all(test, target_pointer_width = "64"))]
mod published_sizes {
    use super::AbiStruct;
    use crate::ffi::model::{packlm_info, packlm_open_options};
    use crate::ffi::session::packlm_session_options;
    use crate::ffi::speculative::{packlm_sampler_params, packlm_verify_params, packlm_verify_result};

    #[test]
    fn first_published_sizes_are_the_abi_1_layouts() {
        assert_eq!(packlm_open_options::FIRST_SIZE, 40);
        assert_eq!(packlm_info::FIRST_SIZE, 40);
        assert_eq!(packlm_session_options::FIRST_SIZE, 12); // sizeof 16: 4 bytes of padding
        assert_eq!(packlm_sampler_params::FIRST_SIZE, 48);
        assert_eq!(packlm_verify_result::FIRST_SIZE, 48);
        // Re-published in ABI 2: size, mode (+4 padding), sampler, draft_probs, n_draft_probs, rng_state.
        assert_eq!(packlm_verify_params::FIRST_SIZE, 48);
        assert_eq!((packlm_verify_params::FIRST_ABI, packlm_info::FIRST_ABI), (2, 1));
    }
}
