//! A `model.safetensors` of arbitrary bytes, loaded as a folder's tensor table (header parse,
//! offsets, dtypes, shapes against byte counts).
#![no_main]

use libfuzzer_sys::fuzz_target;
use packlm::pack::safetensors_files::load_folder;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let dir = common::scratch().join("st");
    let _ = std::fs::create_dir_all(&dir);
    if std::fs::write(dir.join("model.safetensors"), data).is_err() {
        return;
    }
    if let Ok(tensors) = load_folder(&dir) {
        for t in tensors.values() {
            // Every accepted tensor's bytes must be readable.
            let _ = t.bytes().iter().fold(0u8, |a, &b| a ^ b);
        }
    }
});
