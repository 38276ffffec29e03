//! libllama.so: the llama.cpp C API, as llama-cpp-python 0.3.36 declares it, over packlm.
//!
//! A llama.cpp client (llama-cpp-python loads the library named by `LLAMA_CPP_LIB_PATH`) runs
//! on packlm unchanged. What a client of one sequence needs is real: models, contexts,
//! vocabulary, `llama_decode`, logits, memory rollback, state bytes, metadata and the sampler
//! chain. Every other function of the API exists and fails loudly (a log line naming it, and
//! NULL, an error code or false), never silently wrong.
//!
//! Layout: `abi` the C structs; `adapter` the only calls into packlm; `offload` where a model
//! runs (`n_gpu_layers`: the GPU backend or the host); `model`, `model_facts`
//! (the hyperparameter getters), `context` (its settings in `context_settings`, its
//! embeddings in `embeddings`, its LoRA adapters in `lora`, its control vector in `cvec`), `vocab`, `sampler` (its grammar
//! sampler in `grammar`, its generator in `rng`) the implemented API; `names` the pure
//! functions over names (enum names, split-file names); `unsupported` the rest; `log` the log
//! sink and the panic guard every entry point runs in.

// Every `unsafe extern "C" fn` here is an entry point of the C API: its safety contract is the
// one llama.h states for that function (valid pointers of the stated types and lengths).
#![allow(clippy::missing_safety_doc)]

pub mod abi;
pub mod adapter;
pub mod backend_sampling;
pub mod batch_ext;
pub mod chat;
pub mod chat_builtin;
pub mod context;
pub mod context_perf;
pub mod context_settings;
pub mod cvec;
pub mod embeddings;
pub mod file_ptr;
pub mod grammar;
pub mod log;
pub mod lora;
pub mod model;
pub mod model_facts;
pub mod names;
pub mod offload;
pub mod rng;
pub mod sampler;
pub mod splits;
pub mod state_file;
pub mod unsupported;
pub mod vocab;
