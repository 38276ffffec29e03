//! libggml.so: the ggml-backend.h and ggml-cpu.h functions a program built against llama.cpp
//! calls directly, beside libllama.so (a llama.cpp program links `-lllama -lggml
//! -lggml-base`). Its sibling libggml-base.so (llama/ggml-base) has the ggml.h ones.
//!
//! What is included: a function is here when a program built against llama.cpp calls it
//! (tests/llama/ggml_app.c calls what an application's start-up typically does: load the
//! backends, list the devices, ask the CPU's features) and its answer can be true over packlm:
//! one backend, "CPU", with one device, "CPU" (packlm's host kernels; libllama offloads
//! nothing), whose facts are the machine's, and ggml's neutral answer where there is nothing
//! to do (no backend library to load). Backend streams, buffers, graphs and schedulers are
//! absent: a program calling them fails to link instead of getting a wrong answer.
//! Signatures are those of ggml-backend.h and ggml-cpu.h of the llama.cpp in llama-cpp-python
//! 0.3.36.
//!
//! Self-contained: ggml splits these between libggml (the registry), libggml-base (device and
//! backend accessors) and libggml-cpu (the CPU backend); here the registry's objects and every
//! function that reads them are in this one library, so it needs no other (a program links
//! both libraries all the same, as it does with llama.cpp's).
//!
//! Layout: `backend` the registry, the CPU backend and device, and their accessors; `cpu` the
//! CPU feature queries.

// Every `unsafe extern "C" fn` here is an entry point of ggml's C API: its safety contract is the
// one ggml-backend.h states for that function (valid pointers of the stated types).
#![allow(clippy::missing_safety_doc)]

pub mod backend;
pub mod cpu;
