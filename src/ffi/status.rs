//! Status text, last error, version.

use std::ffi::c_char;

use crate::error::Status;
use crate::ffi::guard::last_error_ptr;

/// ABI version of this header; it changes only when an existing signature or struct changes
/// (see the list of re-published structs at the top). build.rs reads this line: the Linux
/// shared library's SONAME is libpacklm.so.PACKLM_ABI_VERSION.
pub const PACKLM_ABI_VERSION: u32 = 2;

/// Fixed text of a status (static storage; never free it); "unknown status" for a number that
/// is not a status. Takes an int so that any value is safe to pass. Safe from any thread.
#[no_mangle]
pub extern "C" fn packlm_status_str(status: i32) -> *const c_char {
    match Status::from_code(status) {
        Some(s) => s.text().as_ptr() as *const c_char,
        None => c"unknown status".as_ptr(),
    }
}

/// The message of the last failed call on the calling thread (empty if none). The pointer stays
/// valid until the next failing packlm call on this thread; copy it to keep it.
#[no_mangle]
pub extern "C" fn packlm_last_error() -> *const c_char {
    last_error_ptr()
}

/// The library version ("MAJOR.MINOR.PATCH", static storage). Safe from any thread.
#[no_mangle]
pub extern "C" fn packlm_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

/// The ABI version the library was built with; compare with PACKLM_ABI_VERSION.
#[no_mangle]
pub extern "C" fn packlm_abi_version() -> u32 {
    PACKLM_ABI_VERSION
}
