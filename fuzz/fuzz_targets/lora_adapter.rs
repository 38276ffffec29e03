//! A LoRA adapter of arbitrary bytes for the tiny Llama fixture: as an adapter GGUF, and (the
//! input split at its first NUL) as a PEFT folder's adapter_config.json and
//! adapter_model.safetensors. An adapter that opens is stepped once, and must change nothing
//! of the base model.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use packlm::engine::adapter::{Adapter, AdapterSet};
use packlm::engine::{Model, Session, Want};

#[path = "common.rs"]
mod common;

fn model() -> &'static Arc<Model> {
    static M: OnceLock<Arc<Model>> = OnceLock::new();
    M.get_or_init(common::tiny_llama)
}

fn try_step(m: &Arc<Model>, a: Adapter) {
    let Ok(set) = AdapterSet::new(m, vec![(Arc::new(a), 0.5)]) else { return };
    let mut s = Session::new(m.clone(), 0).expect("a session");
    if s.set_adapters(set).is_ok() {
        let _ = s.step_batch(&[1, 2, 3], Want::Last);
    }
}

fuzz_target!(|data: &[u8]| {
    let m = model();
    let dir = common::scratch();
    let gguf = dir.join("adapter.gguf");
    if std::fs::write(&gguf, data).is_ok() {
        if let Ok(a) = Adapter::open(m, &gguf) {
            try_step(m, a);
        }
    }
    let peft = dir.join("peft");
    let _ = std::fs::create_dir_all(&peft);
    let (cfg, st) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    if std::fs::write(peft.join("adapter_config.json"), cfg).is_ok() && std::fs::write(peft.join("adapter_model.safetensors"), st).is_ok() {
        if let Ok(a) = Adapter::open(m, &peft) {
            try_step(m, a);
        }
    }
});
