//! A context's settings on the tiny llama fixture: thread counts (applied to the model before
//! each pass, by llama.cpp's rule), n_ctx_seq, causal attention and the abort callback, with
//! llama.cpp's values (llama_context_default_params' 4 threads; n_ctx_seq = n_ctx / n_seq_max,
//! or n_ctx with kv_unified; llama_decode's 2 when aborted).

mod common;

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use llama::abi::{ContextParams, Token};
use llama::context::{llama_context_default_params, llama_free, llama_get_logits, llama_get_memory, llama_init_from_model, llama_memory_seq_pos_max, llama_n_ctx_seq};
use llama::context_settings::*;
use llama::model::{llama_model_free, LlamaModel};

/// The worker-thread cap the facade last set on the model's packlm model (0: none yet).
fn cap(m: *mut LlamaModel) -> usize {
    unsafe { (*m).engine.threads() }
}

/// The cap seen by the abort callback, which `llama_decode` asks once the pass's count is set
/// and then while the pass runs.
static SEEN: AtomicUsize = AtomicUsize::new(usize::MAX);

unsafe extern "C" fn see_cap(data: *mut c_void) -> bool {
    SEEN.store(cap(data as *mut LlamaModel), Ordering::SeqCst);
    false
}

#[test]
fn thread_counts_are_applied_before_each_pass() {
    let m = common::model();
    unsafe {
        let c = llama_init_from_model(m, ContextParams { n_ctx: 0, n_threads: 1, n_threads_batch: 2, ..llama_context_default_params() });
        // Nothing is set before a pass: the model keeps its open's count.
        assert_eq!(cap(m), 0);
        llama_set_abort_callback(c, Some(see_cap), m as *mut c_void);
        // More than one token: n_threads_batch; one: n_threads (llama.cpp's rule).
        assert_eq!(common::decode(c, &[0, 5, 6]), 0);
        assert_eq!((SEEN.load(Ordering::SeqCst), cap(m)), (2, 2));
        assert_eq!(common::decode(c, &[7]), 0);
        assert_eq!((SEEN.load(Ordering::SeqCst), cap(m)), (1, 1));
        // llama_set_n_threads applies from the next pass; 0 is ggml's default, 4.
        llama_set_n_threads(c, 3, 0);
        assert_eq!(cap(m), 1);
        assert_eq!(common::decode(c, &[8]), 0);
        assert_eq!((SEEN.load(Ordering::SeqCst), cap(m)), (3, 3));
        assert_eq!(common::decode(c, &[9, 10]), 0);
        assert_eq!((SEEN.load(Ordering::SeqCst), cap(m)), (4, 4));
        llama_free(c);
        // One token in each of two sequences is a pass of two tokens: n_threads_batch, as
        // llama.cpp's ubatch of two tokens is `batched`.
        let two = llama_init_from_model(m, ContextParams { n_ctx: 64, n_seq_max: 2, n_threads: 1, n_threads_batch: 2, ..llama_context_default_params() });
        assert_eq!(common::decode_entries(two, &[(0, 0, 0, true), (0, 0, 1, true)]), 0);
        assert_eq!(cap(m), 2);
        assert_eq!(common::decode_entries(two, &[(5, 1, 1, true)]), 0);
        assert_eq!(cap(m), 1);
        llama_free(two);
        llama_model_free(m);
    }
}

/// The logits of decoding `prompt` (every row), then one more token, on a new context of `m`
/// with `threads` for both counts.
fn logits_under(m: *mut LlamaModel, threads: i32, prompt: &[Token], next: Token) -> Vec<f32> {
    unsafe {
        let c = llama_init_from_model(m, ContextParams { n_ctx: 64, n_threads: threads, n_threads_batch: threads, ..llama_context_default_params() });
        let n_vocab = llama::vocab::llama_vocab_n_tokens(m) as usize;
        let entries: Vec<_> = prompt.iter().enumerate().map(|(i, &t)| (t, i as i32, 0, true)).collect();
        assert_eq!(common::decode_entries(c, &entries), 0);
        let mut all = common::floats(llama_get_logits(c), prompt.len() * n_vocab, "prompt logits");
        assert_eq!(cap(m), threads as usize);
        assert_eq!(common::decode_entries(c, &[(next, prompt.len() as i32, 0, true)]), 0);
        all.extend(common::floats(llama_get_logits(c), n_vocab, "next logits"));
        llama_free(c);
        all
    }
}

#[test]
fn one_thread_and_two_give_the_same_bits() {
    let m = common::model();
    assert_eq!(common::bits(&logits_under(m, 1, &[0, 5, 6, 7], 8)), common::bits(&logits_under(m, 2, &[0, 5, 6, 7], 8)));
    unsafe { llama_model_free(m) };
    // The tiny fixture's matrices are one task each; SmolLM2's are split among the threads.
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !std::path::Path::new(file).exists() {
        assert!(std::env::var_os("PACKLM_REQUIRE_MODELS").is_none(), "{file} is missing");
        eprintln!("note: {file} absent; the SmolLM2 case is not run");
        return;
    }
    let m = common::model_at(std::path::Path::new(file));
    let prompt = [1, 504, 3458, 282, 4649, 314];
    assert_eq!(common::bits(&logits_under(m, 1, &prompt, 30)), common::bits(&logits_under(m, 2, &prompt, 30)));
    unsafe { llama_model_free(m) };
}

/// The threads of this process named as packlm's host pool names its helpers.
#[cfg(target_os = "linux")]
fn pool_helpers() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter(|t| std::fs::read_to_string(t.as_ref().unwrap().path().join("comm")).is_ok_and(|name| name.starts_with("packlm-host-")))
        .count()
}

/// The count reaches packlm: a context asking for more threads than the pool has makes it
/// grow (packlm's pool grows only when a model's cap asks for more helpers), in a process of
/// its own.
#[cfg(target_os = "linux")]
#[test]
fn a_larger_count_grows_packlms_pool() {
    common::in_child_with("child_pool_grows", &[]);
}

#[cfg(target_os = "linux")]
#[test]
fn child_pool_grows() {
    if !common::is_child() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let want = (cores + 3).min(llama::context_settings::MAX_THREADS);
    let m = common::model();
    unsafe {
        let c = llama_init_from_model(m, ContextParams { n_ctx: 0, n_threads_batch: want as i32, ..llama_context_default_params() });
        assert!(pool_helpers() < want - 1, "{} helpers before the pass", pool_helpers());
        assert_eq!(common::decode(c, &[0, 5, 6]), 0);
        // A new thread names itself once it runs: wait for the names (a few milliseconds).
        let t = std::time::Instant::now();
        while pool_helpers() < want - 1 && t.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(pool_helpers() >= want - 1, "{} helpers after a pass under {want} threads", pool_helpers());
        llama_free(c);
        llama_model_free(m);
    }
}

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
