//! The C boundary: every `extern "C"` function of packlm lives in this folder, one file per C
//! object. Each body runs inside `ffi_boundary!` (a panic becomes PACKLM_ERR_PANIC), converts
//! pointers only through `guard::try_*`, and writes its out-parameters only on success.

#![allow(non_camel_case_types)]
// Every extern function takes raw pointers from C: their validity is the documented C contract
// (NULL is checked in guard.rs), so these functions are safe to call from Rust's point of view.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod control;
pub mod guard;
pub mod model;
pub mod prefix_cache;
pub mod session;
pub mod speculative;
pub mod state;
pub mod status;
pub mod stream;
pub mod text;
