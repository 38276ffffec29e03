//! State files (`llama_state_save_file` / `_load_file`, the deprecated session names, and the
//! per-sequence `llama_state_seq_save_file` / `_load_file`): the header is llama.h's (magic,
//! version, token count, tokens: checked here byte by byte against llama.h's constants), a
//! loaded file restores the state exactly (the next decode's logits are the source's), and a
//! bad file (another magic or version, cut, a changed state byte, too many tokens for the
//! buffer, a missing path) is refused, logged, with the context unchanged.

mod common;

use std::ffi::CString;

use common::*;
use llama::abi::Token;
use llama::context::*;
use llama::state_file::*;

fn last_logits(c: *mut LlamaContext) -> Vec<f32> {
    let p = unsafe { llama_get_logits_ith(c, -1) };
    assert!(!p.is_null());
    unsafe { std::slice::from_raw_parts(p, 300) }.to_vec()
}

fn scratch(name: &str) -> (std::path::PathBuf, CString) {
    let p = std::env::temp_dir().join(format!("packlm-llama-state-{}-{name}", std::process::id()));
    let c = CString::new(p.to_str().unwrap()).unwrap();
    (p, c)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[test]
fn a_session_file_restores_the_context_and_bad_files_are_refused() {
    capture_log();
    let m = model();
    let (a, b) = (context(m), context(m));
    let prompt: [Token; 4] = [0, 3, 4, 5];
    assert_eq!(decode(a, &prompt), 0);
    let (path, cpath) = scratch("session");
    assert!(unsafe { llama_state_save_file(a, cpath.as_ptr(), prompt.as_ptr(), prompt.len()) });
    let file = std::fs::read(&path).unwrap();
    // llama.h: LLAMA_SESSION_MAGIC 'ggsn' = 0x6767736e, LLAMA_SESSION_VERSION 10.
    assert_eq!((u32_at(&file, 0), u32_at(&file, 4), u32_at(&file, 8)), (0x6767_736e, 10, 4));
    assert_eq!((0..4).map(|i| u32_at(&file, 12 + 4 * i) as Token).collect::<Vec<_>>(), prompt);
    assert_eq!(file.len(), 12 + 16 + unsafe { llama_state_get_size(a) });

    // Another context, after other tokens, loads it: the tokens come back and the next step's
    // logits are the source's, bit for bit.
    assert_eq!(decode(b, &[0, 9, 9]), 0);
    let mut toks = [0 as Token; 8];
    let mut n = 0usize;
    assert!(unsafe { llama_load_session_file(b, cpath.as_ptr(), toks.as_mut_ptr(), toks.len(), &mut n) });
    assert_eq!(&toks[..n], &prompt);
    assert_eq!(last_logits(b), last_logits(a));
    assert_eq!(decode(a, &[21]), 0);
    assert_eq!(decode(b, &[21]), 0);
    assert_eq!(last_logits(b), last_logits(a));

    // Refusals leave b as it is.
    let before = last_logits(b);
    let (bad, cbad) = scratch("bad");
    let refused = |bytes: &[u8], capacity: usize, what: &str| {
        std::fs::write(&bad, bytes).unwrap();
        let mut n = 77usize;
        let mut t = [0 as Token; 8];
        assert!(!unsafe { llama_state_load_file(b, cbad.as_ptr(), t.as_mut_ptr(), capacity, &mut n) }, "{what}: taken");
        assert_eq!(n, 77, "{what}: the count was written");
        assert_eq!(last_logits(b), before, "{what}: the context changed");
    };
    let mut other = file.clone();
    other[0] ^= 1;
    refused(&other, 8, "another magic");
    let mut other = file.clone();
    other[4] = 9;
    refused(&other, 8, "another version");
    refused(&file[..10], 8, "cut in the header");
    refused(&file[..20], 8, "cut in the tokens");
    refused(&file[..file.len() - 1], 8, "cut in the state");
    let mut other = file.clone();
    let k = other.len() - 40;
    other[k] ^= 0x10;
    refused(&other, 8, "a state byte changed");
    refused(&file, 3, "four tokens for a buffer of three");
    assert!(logged(&["llama_state_load_file", "unknown (magic, version)"]));
    let missing = CString::new("/nonexistent/packlm/session").unwrap();
    assert!(!unsafe { llama_state_load_file(b, missing.as_ptr(), toks.as_mut_ptr(), 8, &mut n) });
    assert!(!unsafe { llama_state_save_file(a, missing.as_ptr(), prompt.as_ptr(), 4) });
    std::fs::remove_file(&path).ok();
    std::fs::remove_file(&bad).ok();
    unsafe {
        llama_free(a);
        llama_free(b);
        llama::model::llama_model_free(m);
    }
}

#[test]
fn a_sequence_file_restores_that_sequence() {
    let m = model();
    let (a, b) = (context(m), context(m));
    let prompt: [Token; 3] = [0, 7, 8];
    assert_eq!(decode(a, &prompt), 0);
    let (path, cpath) = scratch("seq");
    let size = unsafe { llama_state_seq_save_file(a, cpath.as_ptr(), 0, prompt.as_ptr(), prompt.len()) };
    let file = std::fs::read(&path).unwrap();
    assert_eq!(size, file.len());
    // llama.h: LLAMA_STATE_SEQ_MAGIC 'ggsq' = 0x67677371, LLAMA_STATE_SEQ_VERSION 3.
    assert_eq!((u32_at(&file, 0), u32_at(&file, 4), u32_at(&file, 8)), (0x6767_7371, 3, 3));
    // Without tokens_out: the count only, and the header's size.
    let mut n = 0usize;
    assert_eq!(unsafe { llama_state_seq_load_file(b, cpath.as_ptr(), 0, std::ptr::null_mut(), 0, &mut n) }, 12 + 12);
    assert_eq!(n, 3);
    let mut toks = [0 as Token; 4];
    assert_eq!(unsafe { llama_state_seq_load_file(b, cpath.as_ptr(), 0, toks.as_mut_ptr(), toks.len(), &mut n) }, file.len());
    assert_eq!(&toks[..n], &prompt);
    // The sequence continues as the source does.
    assert_eq!(decode(a, &[30]), 0);
    assert_eq!(decode(b, &[30]), 0);
    assert_eq!(last_logits(b), last_logits(a));
    std::fs::remove_file(&path).ok();
    unsafe {
        llama_free(a);
        llama_free(b);
        llama::model::llama_model_free(m);
    }
}

/// The `_ext` state calls: flags 0 and LLAMA_STATE_SEQ_FLAGS_ON_DEVICE (2) are the plain calls;
/// LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY (1) is refused (0) with the context unchanged.
#[test]
fn the_ext_state_calls_take_the_device_hint_and_refuse_partial_states() {
    let m = model();
    let (a, b) = (context(m), context(m));
    assert_eq!(decode(a, &[0, 4, 6]), 0);
    unsafe {
        let n = llama_state_seq_get_size(a, 0);
        for flags in [0u32, 2] {
            assert_eq!(llama_state_seq_get_size_ext(a, 0, flags), n);
            let mut buf = vec![0u8; n];
            assert_eq!(llama_state_seq_get_data_ext(a, buf.as_mut_ptr(), n, 0, flags), n);
            let mut plain = vec![0u8; n];
            assert_eq!(llama_state_seq_get_data(a, plain.as_mut_ptr(), n, 0), n);
            assert!(buf == plain);
            assert_eq!(llama_state_seq_set_data_ext(b, buf.as_ptr(), n, 0, flags), n);
        }
        assert_eq!(llama_state_seq_get_size_ext(a, 0, 1), 0);
        let mut buf = vec![0u8; n];
        assert_eq!(llama_state_seq_get_data_ext(a, buf.as_mut_ptr(), n, 0, 1), 0);
        assert_eq!(llama_state_seq_set_data_ext(b, buf.as_ptr(), n, 0, 1), 0);
        assert_eq!(decode(a, &[9]), 0);
        assert_eq!(decode(b, &[9]), 0);
        assert_eq!(last_logits(b), last_logits(a));
        llama_free(a);
        llama_free(b);
        llama::model::llama_model_free(m);
    }
}
