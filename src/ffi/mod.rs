//! The C boundary: every `extern "C"` function of packlm lives in this folder, one file per C
//! object. Each body runs inside `ffi_boundary!` (a panic becomes PACKLM_ERR_PANIC), converts
//! pointers only through `guard::try_*`, and writes its out-parameters only on success. The
//! bodies drive the public Rust API (`crate::Model`, `crate::Session`, ...): what a C caller can
//! do, a Rust caller can do through the same types.
//!
//! Every function that reads or writes through a caller's pointer is `unsafe extern "C"`: its
//! safety contract is the header's (each pointer NULL or valid for the call as documented;
//! handles made by this library and not yet freed; a session used by one thread at a time).

#![allow(non_camel_case_types)]

pub mod adapter;
pub mod constraint;
pub mod control;
pub mod control_vector;
pub mod embed;
pub mod guard;
pub mod model;
pub mod prefix_cache;
pub mod session;
pub mod speculative;
pub mod state;
pub mod status;
pub mod stream;
pub mod text;
