//! Tokenize arbitrary text with the tiny Llama fixture's tokenizer (every flag combination),
//! and decode arbitrary ids.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use packlm::engine::Model;

#[path = "common.rs"]
mod common;

fn model() -> &'static Arc<Model> {
    static M: OnceLock<Arc<Model>> = OnceLock::new();
    M.get_or_init(common::tiny_llama)
}

fuzz_target!(|data: &[u8]| {
    let m = model();
    if let Ok(text) = std::str::from_utf8(data) {
        for (add, parse) in [(false, false), (true, false), (false, true), (true, true)] {
            if let Ok(ids) = m.vocab().encode(text, add, parse) {
                let _ = m.vocab().decode(&ids, false);
            }
        }
    }
    let ids: Vec<u32> = data.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let _ = m.vocab().decode(&ids, true);
    for &id in ids.iter().take(4) {
        let _ = m.vocab().token_to_piece(id);
    }
});
