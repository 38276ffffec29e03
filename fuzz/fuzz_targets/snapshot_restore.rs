//! Snapshot restore into a session of the tiny Llama fixture. An input whose first byte is
//! even is a whole snapshot; otherwise it is a list of edits (2-byte offset, 1-byte value,
//! then an optional truncation) applied to a valid snapshot of three tokens, so that the
//! fuzzer reaches the checks past the header. A restore that succeeds is followed by a step.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use packlm::engine::{Model, Session, Want};

#[path = "common.rs"]
mod common;

fn fixture() -> &'static (Arc<Model>, Vec<u8>) {
    static F: OnceLock<(Arc<Model>, Vec<u8>)> = OnceLock::new();
    F.get_or_init(|| {
        let m = common::tiny_llama();
        let mut s = Session::new(m.clone(), 0).expect("session");
        s.step_batch(&[1, 2, 3], Want::Last).expect("three steps");
        let snap = s.snapshot();
        (m, snap)
    })
}

fuzz_target!(|data: &[u8]| {
    let (model, valid) = fixture();
    let bytes = match data.first() {
        None => return,
        Some(b) if b % 2 == 0 => data[1..].to_vec(),
        Some(_) => {
            let mut out = valid.clone();
            let mut edits = data[1..].chunks_exact(3);
            for e in &mut edits {
                let at = u16::from_le_bytes([e[0], e[1]]) as usize;
                if let Some(b) = out.get_mut(at % valid.len().max(1)) {
                    *b = e[2];
                }
            }
            if let [a, b] = edits.remainder() {
                out.truncate(u16::from_le_bytes([*a, *b]) as usize);
            }
            out
        }
    };
    let mut s = Session::new(model.clone(), 0).expect("session");
    if s.restore(&bytes).is_ok() {
        let _ = s.step(4);
    }
});
