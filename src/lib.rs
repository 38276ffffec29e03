//! packlm runs decoder-only language models inside another program: open a model pack (a
//! Hugging Face folder or a GGUF file) once, create a [`Session`] per conversation, and drive it
//! token by token: [`Session::step`], [`Session::step_batch`] (many tokens in one pass over the
//! weights), [`Session::verify`] (a drafted block scored, a prefix accepted, the rest rolled
//! back), [`Session::truncate`], [`Session::snapshot`] / [`Session::restore`] (exact, portable
//! bytes). The same calls are the C ABI of `libpacklm` (`include/packlm.h`).
//!
//! Every result is exact in the library's sense: the logits of a batched pass are bit-identical
//! to stepping the tokens one by one, a restored or truncated session continues bit-identically
//! to one that only saw those tokens, and any thread count gives the bits of one thread.
//!
//! ```
//! use packlm::{Model, Want};
//!
//! # fn main() -> packlm::Result<()> {
//! # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny/llama");
//! let model = Model::open(path)?;              // a folder with config.json, or a .gguf file
//! let mut session = model.session()?;
//! let prompt = model.tokenize("Hello", true, false)?;
//! let logits = session.step_batch(&prompt, Want::Last)?;  // prefill in one pass
//! assert_eq!(logits.len(), model.info().n_vocab);
//! let next = packlm::argmax(&logits);
//! let snapshot = session.snapshot();           // exact, portable bytes
//! let after = session.step(next)?;
//! session.restore(&snapshot)?;                 // back to the prompt...
//! assert_eq!(session.step(next)?, after);      // ...and the same bits again
//! # Ok(())
//! # }
//! ```
//!
//! Streaming a reply is an iterator ([`Session::generate`]); a [`Detokenizer`] turns tokens into
//! whole UTF-8 text as they come. Failures are [`Error`]s carrying a [`Status`] (the number a C
//! caller sees) and a message naming what was wrong.
//!
//! The layers inside (docs/ARCHITECTURE.md has the whole account): `pack` opens packs;
//! `semantics` turns a config into one layer table, its `families` holding one descriptor per model
//! family (its config rule, GGUF spelling and tensor names: the only place families differ);
//! `engine` is the forward pass; `kv` holds a session's planes; `backend` the kernels behind one trait;
//! `quant` the block formats; `sample` the samplers; `ffi` the C boundary. They are private: the
//! cargo feature `internals` exposes them, without any stability promise, for this crate's own
//! tests, benchmarks and fuzz targets.

mod api;
pub use api::*;
pub use error::{Error, Result, Status};

// The internal modules: crate-private, or public (and hidden from the docs) under the
// `internals` feature, which the crate's integration tests, examples and fuzz targets enable.
macro_rules! internal_modules {
    ($($name:ident),* $(,)?) => {
        $(
            #[cfg(feature = "internals")]
            #[doc(hidden)]
            pub mod $name;
            // Items the crate's own tests and benchmarks use through `internals` would otherwise
            // warn as unused in the library build.
            #[cfg(not(feature = "internals"))]
            #[allow(dead_code)]
            pub(crate) mod $name;
        )*
    };
}
internal_modules!(backend, constrain, engine, error, ffi, kv, log, pack, quant, sample, semantics);
