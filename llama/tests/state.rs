//! State bytes (`llama_state_*`): every byte is under a checksum, the kept logits included, and
//! logits that are not finite are refused even under a valid checksum; a refused state leaves
//! the context as it was. The sweep is packlm's snapshot sweep (tests/session_state.rs): every
//! truncation and a flipped bit in every byte.

mod common;

use common::*;
use llama::abi::Token;
use llama::context::*;

/// The context's state bytes.
fn state(c: *mut LlamaContext) -> Vec<u8> {
    unsafe {
        let n = llama_state_get_size(c);
        let mut b = vec![0u8; n];
        assert_eq!(llama_state_get_data(c, b.as_mut_ptr(), n), n);
        b
    }
}

fn set(c: *mut LlamaContext, b: &[u8]) -> usize {
    unsafe { llama_state_set_data(c, b.as_ptr(), b.len()) }
}

/// The last output row's logits.
fn last_logits(c: *mut LlamaContext, n_vocab: usize) -> Vec<f32> {
    let p = unsafe { llama_get_logits_ith(c, -1) };
    assert!(!p.is_null());
    unsafe { std::slice::from_raw_parts(p, n_vocab) }.to_vec()
}

/// FNV-1a 64, written out from its definition (offset basis 0xcbf29ce484222325, prime
/// 0x100000001b3), for states made by hand.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

/// `good` with kept logit `i` set to `x` and its trailer made valid again (the format in
/// llama/src/context.rs: header 16 bytes, the logits, the snapshot ending in its own 8-byte
/// checksum, then FNV-1a 64 of header, logits and that checksum).
fn with_logit(good: &[u8], n_vocab: usize, i: usize, x: f32) -> Vec<u8> {
    let mut b = good.to_vec();
    b[16 + 4 * i..20 + 4 * i].copy_from_slice(&x.to_le_bytes());
    let end = 16 + 4 * n_vocab;
    let len = b.len();
    let mut covered = b[..end].to_vec();
    covered.extend_from_slice(&b[len - 16..len - 8]);
    let sum = fnv1a64(&covered);
    b[len - 8..].copy_from_slice(&sum.to_le_bytes());
    b
}

#[test]
fn corrupt_states_are_refused_and_the_context_is_unchanged() {
    capture_log();
    let m = model();
    let n_vocab = 300;
    let src = context(m);
    assert_eq!(decode(src, &[0, 5, 7]), 0);
    let good = state(src);
    assert_eq!(good.len(), unsafe { llama_state_get_size(src) });

    let c = context(m);
    assert_eq!(decode(c, &[0, 9, 11, 13, 2]), 0);
    let before = state(c);
    let logits_before = last_logits(c, n_vocab);
    let check = |bytes: &[u8], what: &str| {
        assert_eq!(set(c, bytes), 0, "{what}: accepted");
        assert!(state(c) == before, "{what}: the context changed");
    };
    for len in 0..good.len() {
        check(&good[..len], &format!("cut to {len} bytes"));
    }
    for i in 0..good.len() {
        let mut b = good.clone();
        b[i] ^= 0x10;
        check(&b, &format!("byte {i} flipped"));
    }
    // The logits of another state with this state's snapshot (each part valid alone).
    let mut joined = before[..16 + 4 * n_vocab].to_vec();
    joined.extend_from_slice(&good[16 + 4 * n_vocab..]);
    check(&joined, "logits of another state");
    assert!(logged(&["llama_state_set_data", "checksum"]), "the refusal is logged");

    // Logits that are not finite, under a valid checksum: refused, naming the logit.
    for (x, name) in [(f32::NAN, "NaN"), (f32::NEG_INFINITY, "-inf"), (f32::INFINITY, "inf")] {
        check(&with_logit(&good, n_vocab, 42, x), name);
        assert!(logged(&["llama_state_set_data", "logit 42 is", name]), "{name}: the refusal names the logit");
    }
    // A finite change under a valid checksum is a valid state (the hand-made trailer is right).
    assert_eq!(set(c, &with_logit(&good, n_vocab, 42, 1.5)), good.len());

    // The context still samples from its own logits after every refusal above, and the good
    // state restores: its logits, and the next step's, are the source's.
    assert_eq!(set(c, &before), before.len());
    assert_eq!(last_logits(c, n_vocab), logits_before);
    assert_eq!(set(c, &good), good.len());
    assert_eq!(last_logits(c, n_vocab), last_logits(src, n_vocab));
    assert_eq!(decode(c, &[21]), 0);
    assert_eq!(decode(src, &[21]), 0);
    assert_eq!(last_logits(c, n_vocab), last_logits(src, n_vocab));
    unsafe {
        llama_free(c);
        llama_free(src);
        llama::model::llama_model_free(m);
    }
}

#[test]
fn the_deprecated_state_calls_are_the_state_calls() {
    let m = model();
    let n_vocab = 300;
    let (a, b) = (context(m), context(m));
    let tokens: [Token; 4] = [0, 3, 4, 5];
    assert_eq!(decode(a, &tokens), 0);
    let size = unsafe { llama_get_state_size(a) };
    assert_eq!(size, unsafe { llama_state_get_size(a) });
    let mut buf = vec![0u8; size + 64];
    assert_eq!(unsafe { llama_copy_state_data(a, buf.as_mut_ptr()) }, size);
    assert!(buf[..size] == state(a)[..]);
    // Given no size, llama_set_state_data reads the length from the state's headers: exactly
    // the state, not the 64 bytes after it.
    buf[size..].fill(0xAB);
    assert_eq!(unsafe { llama_set_state_data(b, buf.as_ptr()) }, size);
    assert_eq!(last_logits(b, n_vocab), last_logits(a, n_vocab));
    assert!(state(b) == state(a));
    // A corrupt one is refused as by llama_state_set_data.
    buf[40] ^= 1;
    assert_eq!(unsafe { llama_set_state_data(b, buf.as_ptr()) }, 0);
    unsafe {
        llama_free(a);
        llama_free(b);
        llama::model::llama_model_free(m);
    }
}
