//! A context's settings on the tiny llama fixture: thread counts, n_ctx_seq, causal attention
//! and the abort callback, with llama.cpp's values (llama_context_default_params' 4 threads;
//! n_ctx_seq = n_ctx / n_seq_max, or n_ctx with kv_unified; llama_decode's 2 when aborted).

mod common;

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use llama::abi::ContextParams;
use llama::context::{llama_context_default_params, llama_free, llama_get_memory, llama_init_from_model, llama_memory_seq_pos_max, llama_n_ctx_seq};
use llama::context_settings::*;
use llama::model::llama_model_free;

#[test]
fn thread_counts_are_kept() {
    let m = common::model();
    let c = common::context(m);
    unsafe {
        assert_eq!((llama_n_threads(c), llama_n_threads_batch(c)), (4, 4));
        llama_set_n_threads(c, 2, 3);
        assert_eq!((llama_n_threads(c), llama_n_threads_batch(c)), (2, 3));
        llama_free(c);
        llama_model_free(m);
    }
}

#[test]
fn n_ctx_seq_shares_n_ctx_unless_unified() {
    let m = common::model();
    unsafe {
        let shared = llama_init_from_model(m, ContextParams { n_ctx: 128, n_seq_max: 2, ..llama_context_default_params() });
        assert_eq!(llama_n_ctx_seq(shared), 64);
        let unified = llama_init_from_model(m, ContextParams { n_ctx: 128, n_seq_max: 2, kv_unified: true, ..llama_context_default_params() });
        assert_eq!(llama_n_ctx_seq(unified), 128);
        llama_free(shared);
        llama_free(unified);
        llama_model_free(m);
    }
}

#[test]
fn attention_stays_causal() {
    common::capture_log();
    let m = common::model();
    let c = common::context(m);
    unsafe {
        assert!(llama_get_causal_attn(c));
        llama_set_causal_attn(c, false);
        assert!(common::logged(&["llama_set_causal_attn", "non-causal"]));
        assert!(llama_get_causal_attn(c));
        // Not a recurrent model: llama.cpp clamps n_rs_seq to 0.
        assert_eq!(llama::context::llama_n_rs_seq(c), 0);
        // LLAMA_ATTENTION_TYPE_NON_CAUSAL is refused at creation.
        assert!(llama_init_from_model(m, ContextParams { attention_type: 1, ..llama_context_default_params() }).is_null());
        llama_free(c);
        llama_model_free(m);
    }
}

static ASKED: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn stop(data: *mut c_void) -> bool {
    ASKED.fetch_add(1, Ordering::SeqCst);
    (*(data as *const AtomicBool)).load(Ordering::SeqCst)
}

#[test]
fn abort_callback_stops_decode_with_2() {
    let m = common::model();
    let c = common::context(m);
    let answer = AtomicBool::new(true);
    unsafe {
        llama_set_abort_callback(c, Some(stop), &answer as *const AtomicBool as *mut c_void);
        assert_eq!(common::decode(c, &[0, 5, 6]), 2);
        assert!(ASKED.load(Ordering::SeqCst) >= 1);
        // Nothing was decoded.
        assert_eq!(llama_memory_seq_pos_max(llama_get_memory(c), 0), -1);
        answer.store(false, Ordering::SeqCst);
        assert_eq!(common::decode(c, &[0, 5, 6]), 0);
        assert_eq!(llama_memory_seq_pos_max(llama_get_memory(c), 0), 2);
        // Cleared: decodes without asking.
        llama_set_abort_callback(c, None, std::ptr::null_mut());
        let asked = ASKED.load(Ordering::SeqCst);
        assert_eq!(common::decode(c, &[7]), 0);
        assert_eq!(ASKED.load(Ordering::SeqCst), asked);
        llama_free(c);
        llama_model_free(m);
    }
}
