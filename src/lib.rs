//! packlm: run decoder-only language models inside another program, through a C ABI.
//!
//! Layout (see docs/ARCHITECTURE.md, section 1): `ffi` is the C boundary only; `pack` opens HF folders and GGUF files;
//! `semantics` turns a config into one `LayerSpec` per layer (the only place families differ);
//! `engine` is the forward pass; `kv` holds a session's per-layer KV planes; `backend` holds the
//! kernels behind one trait; `quant` the block formats; `sample` the samplers.

pub mod backend;
pub mod engine;
pub mod error;
pub mod ffi;
pub mod kv;
pub mod log;
pub mod pack;
pub mod quant;
pub mod sample;
pub mod semantics;

pub use error::{Error, Result, Status};
