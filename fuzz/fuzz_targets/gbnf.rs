//! GBNF text of any bytes: translated to llguidance's grammar and compiled over the tiny
//! fixture's vocabulary; where that works, the mask is computed and the first allowed tokens
//! are taken. A bad grammar must be refused with ErrInvalidArgument (or ErrLimitExceeded for
//! size), never a panic, an abort or a hang.
#![no_main]

mod common;

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use packlm::constrain::{gbnf, Constraint, ConstraintEnv, GrammarKind};
use packlm::Status;

fn env() -> Arc<ConstraintEnv> {
    static ENV: OnceLock<Arc<ConstraintEnv>> = OnceLock::new();
    ENV.get_or_init(|| common::tiny_llama().constraint_env().expect("the tiny fixture's token table")).clone()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // The translator alone: an error is a message, never a panic.
    let _ = gbnf::to_lark(text, "root", &|name| (name == "<s>").then_some(1));
    match Constraint::new(env(), GrammarKind::Gbnf, text) {
        Ok(mut c) => {
            let mut row = vec![0f32; env().vocab_size()];
            for _ in 0..4 {
                row.fill(0.0);
                if c.mask(&mut row).is_err() {
                    break;
                }
                let Some(t) = row.iter().position(|v| v.is_finite()) else { break };
                if c.accept(t as u32).is_err() {
                    break;
                }
            }
        }
        Err(e) => assert!(matches!(e.status, Status::ErrInvalidArgument | Status::ErrLimitExceeded), "unexpected status {:?}: {}", e.status, e.message),
    }
});
