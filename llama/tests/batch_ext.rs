//! The extended batch (`llama_batch_ext_*`, `llama_process`), as llama.cpp's examples simple and
//! simple-chat drive it: a prompt, then one token at a time, each entry's position set. The
//! logits equal those of the same tokens decoded with `llama_batch_get_one`, bit for bit; the
//! add functions give llama.cpp's error codes; only entries flagged for output have logits.

mod common;

use common::*;
use llama::abi::Token;
use llama::batch_ext::*;
use llama::context::*;

const N_VOCAB: usize = 300;

unsafe fn last_row(c: *mut LlamaContext) -> Vec<f32> {
    let p = llama_get_logits_ith(c, -1);
    assert!(!p.is_null(), "logits of the last output");
    std::slice::from_raw_parts(p, N_VOCAB).to_vec()
}

/// simple.cpp's batch_set_tokens: the tokens at consecutive positions from `pos_0`, logits for
/// the last one only.
unsafe fn set_tokens(b: *mut BatchExt, tokens: &[Token], pos_0: i32) {
    llama_batch_ext_clear(b);
    for (i, &t) in tokens.iter().enumerate() {
        let idx = llama_batch_ext_add_token(b, 0, t);
        assert_eq!(idx, i as i32, "the entry's index");
        let pos = pos_0 + i as i32;
        assert!(llama_batch_ext_set_pos(b, idx, &pos));
    }
    assert!(llama_batch_ext_set_output_logits(b, tokens.len() as i32 - 1, true));
}

#[test]
fn process_gives_the_logits_of_decode() {
    let m = model();
    let (plain, ext) = (context(m), context(m));
    let prompt: [Token; 5] = [0, 17, 42, 99, 5];
    unsafe {
        let b = llama_batch_ext_init(ext);
        assert!(!b.is_null());
        assert_eq!(decode(plain, &prompt), 0);
        set_tokens(b, &prompt, 0);
        assert_eq!(llama_process(ext, 1, b), 0);
        let mut pos = prompt.len() as i32;
        for step in 0..6 {
            let want = last_row(plain);
            assert_eq!(last_row(ext), want, "step {step}: the logits differ");
            let next = want.iter().enumerate().fold((0, f32::MIN), |best, (i, &x)| if x > best.1 { (i, x) } else { best }).0 as Token;
            assert_eq!(decode(plain, &[next]), 0);
            set_tokens(b, &[next], pos);
            assert_eq!(llama_process(ext, 1, b), 0);
            pos += 1;
        }
        assert_eq!(llama_memory_seq_pos_max(llama_get_memory(ext), 0), pos - 1, "the memory holds every position");
        llama_batch_ext_free(b);
        llama_free(plain);
        llama_free(ext);
        llama::model::llama_model_free(m);
    }
}

#[test]
fn adding_gives_llama_cpp_s_error_codes() {
    let m = model();
    let c = context(m);
    unsafe {
        let b = llama_batch_ext_init(c);
        assert_eq!(llama_batch_ext_add_token(b, 0, N_VOCAB as Token), -2, "a token outside the vocabulary");
        assert_eq!(llama_batch_ext_add_token(b, 0, -1), -2, "LLAMA_TOKEN_NULL");
        assert_eq!(llama_batch_ext_add_token(b, 1, 5), -3, "a sequence the context lacks");
        assert_eq!(llama_batch_ext_add_token(b, -1, 5), -3, "a negative sequence id");
        assert_eq!(llama_batch_ext_add_token(b, 0, 5), 0, "nothing was added by the failures");
        assert!(!llama_batch_ext_add_seq(b, 0, 1), "a sequence the context lacks");
        assert!(!llama_batch_ext_set_pos(b, 1, &0), "an index past the last");
        assert!(!llama_batch_ext_set_pos(b, 0, std::ptr::null()), "a NULL position");
        assert!(!llama_batch_ext_set_output_logits(b, -1, true), "a negative index");
        // n_batch entries fit (the context's, taken at init); one more does not.
        let n_batch = llama_n_batch(c) as i32;
        for i in 1..n_batch {
            assert_eq!(llama_batch_ext_add_token(b, 0, 5), i);
        }
        assert_eq!(llama_batch_ext_add_token(b, 0, 5), -1, "the batch is full");
        llama_batch_ext_clear(b);
        assert_eq!(llama_batch_ext_add_token(b, 0, 5), 0, "clear empties the batch");
        llama_batch_ext_free(b);
        llama_batch_ext_free(std::ptr::null_mut());
        llama_free(c);
        llama::model::llama_model_free(m);
    }
}

#[test]
fn process_runs_only_what_decode_runs() {
    capture_log();
    let m = model();
    let c = context(m);
    unsafe {
        let b = llama_batch_ext_init(c);
        assert_eq!(llama_process(c, 1, b), -1, "an empty batch");
        // Every position left at 0 (llama.cpp's default): the second entry is not next.
        assert_eq!(llama_batch_ext_add_token(b, 0, 3), 0);
        assert_eq!(llama_batch_ext_add_token(b, 0, 4), 1);
        assert_eq!(llama_process(c, 1, b), -1, "two tokens at position 0");
        assert_eq!(llama_memory_seq_pos_max(llama_get_memory(c), 0), -1, "nothing was decoded");
        assert_eq!(llama_process(c, 0, b), -1, "LLAMA_PROCESS_TYPE_ENCODE");
        assert!(logged(&["llama_process (LLAMA_PROCESS_TYPE_ENCODE)", "not supported"]));
        // An entry without a token (llama_batch_ext_add) is refused, as an embedding input.
        llama_batch_ext_clear(b);
        assert_eq!(llama_batch_ext_add(b, 0), 0);
        assert_eq!(llama_process(c, 1, b), -1);
        assert!(logged(&["llama_process", "entry 0 has no token"]));
        // Outputs: entries 0 and 2 of three asked for; batch index 1 has none.
        set_tokens(b, &[3, 4, 5], 0);
        assert!(llama_batch_ext_set_output_logits(b, 2, false));
        assert!(llama_batch_ext_set_output_embd(b, 0, true));
        assert!(llama_batch_ext_set_output_logits(b, 2, true));
        assert_eq!(llama_process(c, 1, b), 0);
        assert!(!llama_get_logits_ith(c, 0).is_null());
        assert!(llama_get_logits_ith(c, 1).is_null());
        assert!(!llama_get_logits_ith(c, 2).is_null());
        llama_batch_ext_free(b);
        llama_free(c);
        llama::model::llama_model_free(m);
    }
}
