//! The facade is as strict as packlm: a chain holding a sampler that could not be built never
//! selects a token (nested or not), tokenize has packlm's input limit, absurd sizes are refused
//! instead of aborting on allocation, a context used by two threads at once refuses the second
//! call, and the deprecated names give what their replacements give.

mod common;

use std::ptr;

use common::*;
use llama::abi::{SamplerChainParams, Token, TokenData, TokenDataArray};
use llama::context::*;
use llama::model::*;
use llama::sampler::*;
use llama::vocab::*;

fn chain() -> *mut llama::abi::Sampler {
    llama_sampler_chain_init(SamplerChainParams { no_perf: true })
}

/// Applies `s` to the logits [1, 2, 3, 4]; the candidates after it and `selected`.
fn apply(s: *mut llama::abi::Sampler) -> (Vec<TokenData>, i64) {
    let mut data: Vec<TokenData> = (0..4).map(|i| TokenData { id: i, logit: (i + 1) as f32, p: 0.0 }).collect();
    let mut cur = TokenDataArray { data: data.as_mut_ptr(), size: 4, selected: -1, sorted: false };
    unsafe { llama_sampler_apply(s, &mut cur) };
    data.truncate(cur.size);
    (data, cur.selected)
}

#[test]
fn a_chain_holding_a_sampler_that_could_not_be_built_never_selects() {
    capture_log();
    let m = model();
    let c = context(m);
    assert_eq!(decode(c, &[0, 5, 7]), 0);
    unsafe {
        // inner: a grammar that does not parse (NULL) then greedy; outer: inner then greedy.
        let inner = chain();
        let bad = llama_sampler_init_grammar(m, c"root ::= (".as_ptr(), c"root".as_ptr());
        assert!(bad.is_null());
        llama_sampler_chain_add(inner, bad);
        llama_sampler_chain_add(inner, llama_sampler_init_greedy());
        let outer = chain();
        llama_sampler_chain_add(outer, inner);
        llama_sampler_chain_add(outer, llama_sampler_init_greedy());
        assert_eq!(llama_sampler_sample(outer, c, -1), -1, "the outer chain samples");
        let (data, selected) = apply(outer);
        assert_eq!(selected, -1, "llama_sampler_apply on the outer chain selected a token");
        assert_eq!(data.len(), 4, "the candidates were changed");
        assert_eq!(apply(inner).0.len(), 4);
        assert_eq!(apply(inner).1, -1, "llama_sampler_apply on the inner chain selected a token");
        assert!(logged(&["llama_sampler_apply", "could not be built"]), "no log line");

        // Three deep, the NULL at the bottom.
        let deep = chain();
        let mid = chain();
        let bottom = chain();
        llama_sampler_chain_add(bottom, ptr::null_mut());
        llama_sampler_chain_add(mid, bottom);
        llama_sampler_chain_add(deep, mid);
        llama_sampler_chain_add(deep, llama_sampler_init_greedy());
        assert_eq!(llama_sampler_sample(deep, c, -1), -1);
        assert_eq!(apply(deep).1, -1);

        // A chain added to itself (which would apply itself without end) is refused.
        let own = chain();
        llama_sampler_chain_add(own, llama_sampler_init_greedy());
        llama_sampler_chain_add(own, own);
        assert_eq!(llama_sampler_chain_n(own), 1);
        assert_eq!(llama_sampler_sample(own, c, -1), -1);

        // The same chains without the NULL sample.
        let good = chain();
        let good_inner = chain();
        llama_sampler_chain_add(good_inner, llama_sampler_init_top_k(2));
        llama_sampler_chain_add(good, good_inner);
        llama_sampler_chain_add(good, llama_sampler_init_greedy());
        assert!(llama_sampler_sample(good, c, -1) >= 0);
        assert_eq!(apply(good).1, 0, "top-2 then greedy: the largest, first after sorting");

        for s in [outer, deep, own, good] {
            llama_sampler_free(s);
        }
        llama_free(c);
        llama_model_free(m);
    }
}

#[test]
fn tokenize_has_packlm_s_input_limit() {
    capture_log();
    let m = model();
    let limit = 1 << 20; // PACKLM_DEFAULT_MAX_TOKENIZE_BYTES
    let text = "ab ".repeat(limit / 3 + 1);
    assert!(text.len() > limit);
    let mut out = vec![0 as Token; 16];
    let n = unsafe { llama_tokenize(m, text.as_ptr().cast(), text.len() as i32, out.as_mut_ptr(), 16, false, false) };
    assert_eq!(n, i32::MIN, "text over the limit");
    assert!(logged(&["llama_tokenize", &format!("text of {} bytes is over this model's tokenize limit of {limit} bytes", text.len())]));
    // Text within it tokenizes (a size query, then the fill).
    let short = "ab ab ab";
    let need = unsafe { llama_tokenize(m, short.as_ptr().cast(), short.len() as i32, out.as_mut_ptr(), 0, false, false) };
    assert!(need < 0 && need != i32::MIN, "{need}");
    assert_eq!(unsafe { llama_tokenize(m, short.as_ptr().cast(), short.len() as i32, out.as_mut_ptr(), 16, false, false) }, -need);
    unsafe { llama_model_free(m) };
}

#[test]
fn absurd_batch_sizes_give_the_empty_batch() {
    if !is_child() {
        return in_child("absurd_batch_sizes_give_the_empty_batch");
    }
    capture_log();
    for (n_tokens, n_seq_max) in [(i32::MAX, i32::MAX), (i32::MAX, 1), (1, i32::MAX), (40_000_000, 1)] {
        let b = llama_batch_init(n_tokens, 0, n_seq_max);
        assert!(b.token.is_null() && b.pos.is_null() && b.seq_id.is_null() && b.logits.is_null(), "{n_tokens} x {n_seq_max}");
        assert!(logged(&["llama_batch_init", &format!("n_tokens {n_tokens} x n_seq_max {n_seq_max}")]));
        unsafe { llama_batch_free(b) };
    }
    // Within the 1 GiB bound but past what this process may map: the allocation fails, which
    // gives the empty batch too.
    let b = llama_batch_init(2, 0, 130_000_000);
    assert!(b.token.is_null() && b.seq_id.is_null());
    assert!(logged(&["llama_batch_init", "could not allocate a batch of 2 tokens x 130000000 sequences"]));
    // A usual batch is made, and freed.
    let b = llama_batch_init(512, 0, 1);
    assert!(!b.token.is_null() && !b.seq_id.is_null());
    unsafe {
        assert_eq!(*(*b.seq_id.add(511)).offset(-1), 1, "each row holds n_seq_max ids");
        assert!((*b.seq_id.add(512)).is_null());
        llama_batch_free(b);
    }
}

#[test]
fn an_absurd_penalty_window_allocates_nothing() {
    if !is_child() {
        return in_child("an_absurd_penalty_window_allocates_nothing");
    }
    let pen = llama_sampler_init_penalties(300, i32::MAX, 2.0, 0.0, 0.0);
    assert!(!pen.is_null());
    unsafe {
        llama_sampler_accept(pen, 3);
        llama_sampler_accept(pen, 3);
        // Token 3's logit 4 is divided by the repeat penalty 2; the others stay.
        let (data, _) = apply(pen);
        assert_eq!(data.iter().map(|d| d.logit).collect::<Vec<_>>(), vec![1.0, 2.0, 3.0, 2.0]);
        llama_sampler_free(pen);
    }
}

thread_local! {
    /// Set on the test thread: the next log line on this thread makes a second thread decode
    /// on this context (lines other tests log on their threads leave it alone).
    static REENTER: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}
static SECOND: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(i32::MAX);

fn decode_from_another_thread(_line: &str) {
    let ctx = REENTER.with(|r| r.replace(0));
    if ctx != 0 {
        let rc = std::thread::spawn(move || decode(ctx as *mut LlamaContext, &[4])).join().unwrap();
        SECOND.store(rc, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn a_context_used_by_two_threads_at_once_refuses_the_second() {
    capture_log();
    let m = model();
    let c = context(m);
    assert_eq!(decode(c, &[0, 5]), 0);
    // A call that is refused logs while it still holds the context; the log line makes a
    // second thread decode on it then: that call must be refused, not run beside the first.
    set_log_hook(Some(decode_from_another_thread));
    REENTER.with(|r| r.set(c as usize));
    assert_eq!(decode(c, &[1000]), -1, "a token outside the vocabulary");
    REENTER.with(|r| r.set(0));
    assert_eq!(SECOND.load(std::sync::atomic::Ordering::SeqCst), -2, "the second thread's decode");
    assert!(logged(&["llama_decode", "in use by a call on another thread"]));
    assert_eq!(unsafe { llama_memory_seq_pos_max(llama_get_memory(c), 0) }, 1, "the refused decode changed nothing");

    // Two threads decoding and rolling back on one context: each call runs alone or is refused.
    let n_ok = std::sync::atomic::AtomicUsize::new(0);
    let ctx = c as usize;
    std::thread::scope(|s| {
        for t in 0..2 {
            let n_ok = &n_ok;
            s.spawn(move || {
                let c = ctx as *mut LlamaContext;
                for i in 0..300 {
                    match decode(c, &[(t * 50 + i % 50) as Token]) {
                        0 => {
                            n_ok.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        1 | -2 => {}
                        rc => panic!("decode returned {rc}"),
                    }
                    if i % 40 == 39 {
                        unsafe { llama_memory_seq_rm(llama_get_memory(c), 0, 2, -1) };
                    }
                }
            });
        }
    });
    assert!(n_ok.load(std::sync::atomic::Ordering::SeqCst) > 0);
    let held = unsafe { llama_memory_seq_pos_max(llama_get_memory(c), 0) } + 1;
    assert!((2..=128).contains(&held), "{held} positions held");
    unsafe {
        llama_free(c);
        llama_model_free(m);
    }
}

#[test]
fn the_deprecated_names_give_what_their_replacements_give() {
    let m = model();
    let v = llama_model_get_vocab(m);
    unsafe {
        // The fixture's config.json: context 128, hidden 64, 2 layers, 4 heads (2 KV heads),
        // vocabulary 300, BOS 0, EOS 1.
        assert_eq!(llama_n_ctx_train(m), 128);
        assert_eq!(llama_n_embd(m), 64);
        assert_eq!(llama_n_layer(m), 2);
        assert_eq!(llama_n_head(m), 4);
        assert_eq!(llama_model_n_head_kv(m), 2);
        assert_eq!(llama_n_vocab(v), 300);
        assert_eq!(llama_token_bos(v), 0);
        assert_eq!(llama_token_eos(v), 1);
        assert_eq!(llama_vocab_cls(v), 0, "llama.h: CLS is equivalent to BOS");
        assert!(llama_token_is_eog(v, 1), "EOS ends generation");
        assert!(!llama_token_is_eog(v, 5));
        assert_eq!(llama_add_bos_token(v), llama_vocab_get_add_bos(v));
        assert_eq!(llama_add_eos_token(v), llama_vocab_get_add_eos(v));
        for t in [0, 1, 5, 299] {
            assert_eq!(llama_token_is_control(v, t), llama_vocab_is_control(v, t));
            assert_eq!(llama_token_get_attr(v, t), llama_vocab_get_attr(v, t));
            assert_eq!(llama_token_get_score(v, t), llama_vocab_get_score(v, t));
            assert_eq!(llama_token_get_text(v, t), llama_vocab_get_text(v, t));
        }
        let pairs: [(unsafe extern "C" fn(*const LlamaModel) -> Token, unsafe extern "C" fn(*const LlamaModel) -> Token); 12] = [
            (llama_token_eot, llama_vocab_eot),
            (llama_token_cls, llama_vocab_cls),
            (llama_token_sep, llama_vocab_sep),
            (llama_token_nl, llama_vocab_nl),
            (llama_token_pad, llama_vocab_pad),
            (llama_token_fim_pre, llama_vocab_fim_pre),
            (llama_token_fim_suf, llama_vocab_fim_suf),
            (llama_token_fim_mid, llama_vocab_fim_mid),
            (llama_token_fim_pad, llama_vocab_fim_pad),
            (llama_token_fim_rep, llama_vocab_fim_rep),
            (llama_token_fim_sep, llama_vocab_fim_sep),
            (llama_token_bos, llama_vocab_bos),
        ];
        for (old, new) in pairs {
            assert_eq!(old(v), new(v));
        }
        llama_model_free(m);
    }
}
