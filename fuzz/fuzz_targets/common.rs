//! Shared by the fuzz targets: a scratch folder per process, and the tiny fixtures.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use packlm::backend::BackendKind;
use packlm::engine::{Model, OpenOptions};

/// A scratch folder of this process (removed by nobody: it holds one small file at a time).
pub fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("packlm-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

pub fn tiny(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny").join(name)
}

/// The tiny Llama fixture on the reference backend, one thread.
pub fn tiny_llama() -> Arc<Model> {
    #[allow(clippy::needless_update)]
    let opts = OpenOptions { backend: BackendKind::Reference, threads: 1, ..Default::default() };
    Arc::new(Model::open(&tiny("llama"), &opts).expect("tiny llama fixture opens"))
}
