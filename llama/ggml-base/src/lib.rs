//! libggml-base.so: the ggml.h functions a program built against llama.cpp calls directly,
//! beside libllama.so (a llama.cpp program links `-lllama -lggml -lggml-base`). Its sibling
//! libggml.so (llama/ggml) has the ggml-backend.h and ggml-cpu.h ones.
//!
//! What is included: a function is here when a program built against llama.cpp calls it
//! (llama.cpp's examples simple and simple-chat, and tests/llama/ggml_app.c, which calls what an
//! application's start-up typically does) and its answer can be true over packlm: a fact
//! (the clock, the tensor type table) or ggml's own behaviour where it is self-contained
//! (ggml_abort, the log callback, threadpool parameters). Tensors, graphs and compute are
//! absent: packlm does not run ggml graphs, and a program calling them fails to link instead
//! of getting a wrong answer. Signatures are those of ggml.h of the llama.cpp in
//! llama-cpp-python 0.3.36; each function says what it does where ggml's source documents it.
//!
//! Layout: `time` the clock; `abort` ggml_abort (its C body in abort.c); `log` the log
//! callback; `types` the type table; `threadpool` the threadpool parameters.

// Every `unsafe extern "C" fn` here is an entry point of ggml's C API: its safety contract is the
// one ggml.h states for that function (valid pointers of the stated types).
#![allow(clippy::missing_safety_doc)]

pub mod abort;
pub mod log;
pub mod threadpool;
pub mod time;
pub mod types;
