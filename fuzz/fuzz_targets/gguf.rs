//! A GGUF file of arbitrary bytes, opened as a pack and as a model (reference backend):
//! the reader, the metadata -> config mapping, the tokenizer, the size checks, the tensor table.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packlm::backend::BackendKind;
use packlm::engine::{Model, OpenOptions};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let path = common::scratch().join("input.gguf");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    #[allow(clippy::needless_update)]
    let opts = OpenOptions { backend: BackendKind::Reference, threads: 1, ..Default::default() };
    let _ = Model::open(&path, &opts);
});
