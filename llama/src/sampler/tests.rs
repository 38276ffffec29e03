//! Each sampler against values worked out by hand from llama.cpp's definitions
//! (src/llama-sampler.cpp), on the logits [1, 2, 3, 4] of tokens 0..3; DRY and infill on the
//! tiny llama fixture's vocabulary. (The algorithms of `filters`, `mirostat` and `dry` have
//! their own tests beside them.)
use super::*;

fn run(samplers: Vec<*mut Sampler>, logits: &[f32]) -> (Vec<TokenData>, i64) {
    let chain = llama_sampler_chain_init(SamplerChainParams { no_perf: true });
    for s in samplers {
        unsafe { llama_sampler_chain_add(chain, s) };
    }
    let mut data: Vec<TokenData> = logits.iter().enumerate().map(|(i, &l)| TokenData { id: i as Token, logit: l, p: 0.0 }).collect();
    let mut cur = TokenDataArray { data: data.as_mut_ptr(), size: data.len(), selected: -1, sorted: false };
    unsafe { llama_sampler_apply(chain, &mut cur) };
    let (size, selected) = (cur.size, cur.selected);
    unsafe { llama_sampler_free(chain) };
    data.truncate(size);
    (data, selected)
}

fn ids(v: &[TokenData]) -> Vec<Token> {
    v.iter().map(|d| d.id).collect()
}

const L: [f32; 4] = [1.0, 2.0, 3.0, 4.0];

#[test]
fn top_k_keeps_the_k_largest_sorted() {
    assert_eq!(ids(&run(vec![llama_sampler_init_top_k(2)], &L).0), vec![3, 2]);
    // k <= 0 leaves the array as it is.
    assert_eq!(ids(&run(vec![llama_sampler_init_top_k(0)], &L).0), vec![0, 1, 2, 3]);
}

#[test]
fn top_p_keeps_the_smallest_prefix_reaching_p() {
    // softmax([4, 3, 2, 1]) = 0.6439, 0.2369, 0.0871, 0.0321.
    assert_eq!(ids(&run(vec![llama_sampler_init_top_p(0.5, 1)], &L).0), vec![3]);
    assert_eq!(ids(&run(vec![llama_sampler_init_top_p(0.7, 1)], &L).0), vec![3, 2]);
    assert_eq!(ids(&run(vec![llama_sampler_init_top_p(0.5, 3)], &L).0), vec![3, 2, 1]);
}

#[test]
fn min_p_keeps_logits_within_log_p_of_the_max() {
    // 4 + ln 0.3 = 2.796: tokens 2 and 3 stay, in their order.
    assert_eq!(ids(&run(vec![llama_sampler_init_min_p(0.3, 1)], &L).0), vec![2, 3]);
}

#[test]
fn temperature_is_its_own_step_wherever_it_stands() {
    let (v, _) = run(vec![llama_sampler_init_temp(0.5)], &L);
    assert_eq!(v.iter().map(|d| d.logit).collect::<Vec<_>>(), vec![2.0, 4.0, 6.0, 8.0]);
    // After top-p (which saw the unscaled logits) temperature changes no membership.
    let (v, _) = run(vec![llama_sampler_init_top_p(0.7, 1), llama_sampler_init_temp(0.5)], &L);
    assert_eq!(ids(&v), vec![3, 2]);
    // Before it, the sharper distribution (softmax([8, 6, 4, 2]) = 0.8668, 0.1173, ...)
    // reaches 0.7 with one token.
    let (v, _) = run(vec![llama_sampler_init_temp(0.5), llama_sampler_init_top_p(0.7, 1)], &L);
    assert_eq!(ids(&v), vec![3]);
    // Temperature 0 leaves only the largest logit finite.
    let (v, _) = run(vec![llama_sampler_init_temp(0.0)], &L);
    assert_eq!(v.iter().filter(|d| d.logit.is_finite()).map(|d| d.id).collect::<Vec<_>>(), vec![3]);
}

#[test]
fn penalties_divide_positive_logits_multiply_negative_and_subtract_counts() {
    let pen = llama_sampler_init_penalties(4, 8, 2.0, 0.5, 0.25);
    unsafe {
        llama_sampler_accept(pen, 3);
        llama_sampler_accept(pen, 3);
        llama_sampler_accept(pen, 0);
    }
    let (v, _) = run(vec![pen], &[-1.0, 2.0, 3.0, 4.0]);
    // token 3: 4 / 2 - 2 * 0.5 - 0.25 = 0.75; token 0: -1 * 2 - 0.5 - 0.25 = -2.75.
    assert_eq!(v.iter().map(|d| d.logit).collect::<Vec<_>>(), vec![-2.75, 2.0, 3.0, 0.75]);
}

#[test]
fn logit_bias_then_greedy_selects_the_new_maximum() {
    let bias = [LogitBias { token: 3, bias: -10.0 }];
    let b = unsafe { llama_sampler_init_logit_bias(4, 1, bias.as_ptr()) };
    let (v, selected) = run(vec![b, llama_sampler_init_greedy()], &L);
    assert_eq!(v[selected as usize].id, 2);
    // A token outside the vocabulary is refused.
    let bad = [LogitBias { token: 4, bias: 1.0 }];
    assert!(unsafe { llama_sampler_init_logit_bias(4, 1, bad.as_ptr()) }.is_null());
}

#[test]
fn dist_is_reproducible_per_seed_and_follows_the_distribution() {
    let draw = |seed| {
        let s = llama_sampler_init_dist(seed);
        let mut counts = [0usize; 4];
        for _ in 0..4000 {
            let (v, sel) = run(vec![unsafe { llama_sampler_clone(s) }], &L);
            counts[v[sel as usize].id as usize] += 1;
            // Advance the original's state as a real chain would.
            let mut data: Vec<TokenData> = L.iter().enumerate().map(|(i, &l)| TokenData { id: i as Token, logit: l, p: 0.0 }).collect();
            let mut cur = TokenDataArray { data: data.as_mut_ptr(), size: 4, selected: -1, sorted: false };
            unsafe { llama_sampler_apply(s, &mut cur) };
        }
        unsafe { llama_sampler_free(s) };
        counts
    };
    let a = draw(42);
    assert_eq!(a, draw(42));
    // Expected 0.6439 * 4000 = 2576 for token 3; 0.0321 * 4000 = 128 for token 0.
    assert!((2400..2750).contains(&a[3]), "{a:?}");
    assert!((70..200).contains(&a[0]), "{a:?}");
}

#[test]
fn a_chain_given_null_refuses_to_sample() {
    // A real context (the tiny llama fixture) with logits to sample from.
    let path = std::ffi::CString::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/tiny/llama")).unwrap();
    unsafe {
        let model = crate::model::llama_model_load_from_file(path.as_ptr(), crate::model::llama_model_default_params());
        assert!(!model.is_null());
        // n_ctx 0: the fixture's own 128 positions (more than a model's length is refused).
        let params = crate::abi::ContextParams { n_ctx: 0, ..crate::context::llama_context_default_params() };
        let ctx = crate::context::llama_init_from_model(model, params);
        assert!(!ctx.is_null());
        let mut toks = [0 as Token, 5, 7];
        assert_eq!(crate::context::llama_decode(ctx, crate::context::llama_batch_get_one(toks.as_mut_ptr(), 3)), 0);

        let plain = llama_sampler_chain_init(SamplerChainParams { no_perf: true });
        llama_sampler_chain_add(plain, llama_sampler_init_greedy());
        let t = llama_sampler_sample(plain, ctx, -1);
        assert!(t >= 0, "greedy alone samples");

        // A grammar that does not parse gives NULL.
        let chain = llama_sampler_chain_init(SamplerChainParams { no_perf: true });
        let bad = llama_sampler_init_grammar(model, c"root ::= (".as_ptr(), c"root".as_ptr());
        assert!(bad.is_null());
        llama_sampler_chain_add(chain, bad);
        llama_sampler_chain_add(chain, llama_sampler_init_greedy());
        assert_eq!(llama_sampler_sample(chain, ctx, -1), -1, "the chain must refuse");

        llama_sampler_free(plain);
        llama_sampler_free(chain);
        crate::context::llama_free(ctx);
        crate::model::llama_model_free(model);
    }
}

pub(crate) fn tiny() -> *mut LlamaModel {
    let path = std::ffi::CString::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/tiny/llama")).unwrap();
    let model = unsafe { crate::model::llama_model_load_from_file(path.as_ptr(), crate::model::llama_model_default_params()) };
    assert!(!model.is_null());
    model
}

fn name(s: *const Sampler) -> String {
    unsafe { std::ffi::CStr::from_ptr(llama_sampler_name(s)) }.to_string_lossy().into_owned()
}

/// The tiny fixture's tokens (a byte-level BPE of 300): `</s>` 1 ends generation; "e" 70,
/// "r" 83, "a" 66, "b" 67, "re" 262, "er" 266.
pub(crate) const EOS: Token = 1;
pub(crate) const E: Token = 70;
pub(crate) const R: Token = 83;
pub(crate) const A: Token = 66;
pub(crate) const B: Token = 67;
pub(crate) const RE: Token = 262;
pub(crate) const ER: Token = 266;

#[test]
fn the_tiny_fixture_tokens_are_as_named() {
    let model = tiny();
    let mut buf = [0u8; 16];
    for (t, text) in [(E, "e"), (R, "r"), (A, "a"), (B, "b"), (RE, "re"), (ER, "er")] {
        let n = unsafe { crate::vocab::llama_token_to_piece(model, t, buf.as_mut_ptr() as *mut c_char, 16, 0, false) };
        assert_eq!(&buf[..n as usize], text.as_bytes(), "token {t}");
    }
    assert!(unsafe { crate::vocab::llama_vocab_is_eog(model, EOS) });
    unsafe { crate::model::llama_model_free(model) };
}

#[test]
fn settings_that_change_nothing_give_llama_cpps_empty_samplers() {
    for (s, want) in [
        (llama_sampler_init_temp_ext(1.0, 0.0, 1.0), "?temp-ext"),
        (llama_sampler_init_xtc(0.0, 0.1, 1, 1), "?xtc"),
        (llama_sampler_init_xtc(0.5, 0.6, 1, 1), "?xtc"),
        (llama_sampler_init_top_n_sigma(0.0), "?top-n-sigma"),
        (unsafe { llama_sampler_init_dry(ptr::null(), 0.0, 1.75, 2, 64, ptr::null(), 0) }, "?dry"),
        (unsafe { llama_sampler_init_dry(ptr::null(), 0.8, 1.75, 2, -1, ptr::null(), 0) }, "?dry"),
        (llama_sampler_init_temp_ext(0.8, 0.5, 1.0), "temp-ext"),
        (llama_sampler_init_xtc(0.5, 0.1, 1, 1), "xtc"),
        (llama_sampler_init_top_n_sigma(1.0), "top-n-sigma"),
        (llama_sampler_init_mirostat(512, 1, 5.0, 0.1, 100), "mirostat"),
        (llama_sampler_init_mirostat_v2(1, 5.0, 0.1), "mirostat-v2"),
        (llama_sampler_init_adaptive_p(0.5, 0.9, 1), "adaptive-p"),
    ] {
        assert_eq!(name(s), want);
        let (v, _) = run(vec![s], &L);
        if want.starts_with('?') {
            assert_eq!(v.iter().map(|d| (d.id, d.logit)).collect::<Vec<_>>(), vec![(0, 1.0), (1, 2.0), (2, 3.0), (3, 4.0)], "{want}");
        }
    }
}

#[test]
fn xtc_moves_the_arrays_start_past_what_it_drops() {
    // softmax(4, 3, 2, 1) = 0.6439, 0.2369, 0.0871, 0.0321; threshold 0.2: the last at or
    // above it is index 1, so index 0 (token 3) goes by moving `data` one on.
    let s = llama_sampler_init_xtc(1.0, 0.2, 1, 3);
    let mut data: Vec<TokenData> = L.iter().enumerate().map(|(i, &l)| TokenData { id: i as Token, logit: l, p: 0.0 }).collect();
    let mut cur = TokenDataArray { data: data.as_mut_ptr(), size: 4, selected: -1, sorted: false };
    unsafe { llama_sampler_apply(s, &mut cur) };
    assert_eq!(cur.data, unsafe { data.as_mut_ptr().add(1) });
    assert_eq!(cur.size, 3);
    assert_eq!(data.iter().map(|d| d.id).collect::<Vec<_>>(), vec![3, 2, 1, 0]);
    unsafe { llama_sampler_free(s) };
}

#[test]
fn seeds_are_reported_by_dist_and_the_mirostats_the_last_first() {
    let chain = llama_sampler_chain_init(SamplerChainParams { no_perf: true });
    unsafe {
        llama_sampler_chain_add(chain, llama_sampler_init_dist(5));
        llama_sampler_chain_add(chain, llama_sampler_init_xtc(0.5, 0.1, 1, 6));
        llama_sampler_chain_add(chain, llama_sampler_init_mirostat_v2(7, 5.0, 0.1));
        assert_eq!(llama_sampler_get_seed(chain), 7);
        llama_sampler_free(chain);
    }
}

#[test]
fn infill_merges_prefixes_then_drops_unlikely_text() {
    let model = tiny();
    let infill = || unsafe { llama_sampler_init_infill(model) };
    // Weights re 4, a 3, r 2, </s> 0.5 (logits their logs; total 9.5): 3 p(EOG) n =
    // 3 * 0.0526 * 4 = 0.63 is below p(text) 0.947, so no end yet. "r" begins "re" and is
    // less likely: re takes its 2 (p 6 / 9.5), r goes. Below 0.2 no text goes; then below
    // 1 / (2 + 1) "a" (3 / 9.5) goes: re and </s> remain, 6 / 6.5 and 0.5 / 6.5.
    let logits = |w: [f32; 4]| w.map(f32::ln);
    let ids = [RE, A, R, EOS];
    let apply = |s: *mut Sampler, w: [f32; 4]| {
        let mut data: Vec<TokenData> = ids.iter().zip(logits(w)).map(|(&id, logit)| TokenData { id, logit, p: 0.0 }).collect();
        let mut cur = TokenDataArray { data: data.as_mut_ptr(), size: 4, selected: -1, sorted: false };
        unsafe { llama_sampler_apply(s, &mut cur) };
        data.truncate(cur.size);
        unsafe { llama_sampler_free(s) };
        data
    };
    let v = apply(infill(), [4.0, 3.0, 2.0, 0.5]);
    assert_eq!(v.iter().map(|d| d.id).collect::<Vec<_>>(), vec![RE, EOS]);
    assert!((v[0].p - 6.0 / 6.5).abs() < 1e-6 && (v[1].p - 0.5 / 6.5).abs() < 1e-6, "{:?}", v.iter().map(|d| d.p).collect::<Vec<_>>());
    // </s> at 1: 3 * (1 / 10) * 4 = 1.2 > 0.9: only the end of generation stays, p 1.
    let v = apply(infill(), [4.0, 3.0, 2.0, 1.0]);
    assert_eq!(v.iter().map(|d| (d.id, d.p)).collect::<Vec<_>>(), vec![(EOS, 1.0)]);
    // Six single letters of 1/6 each and no end of generation: every text token is below
    // 0.2, none is left, and the one candidate becomes the EOS (no end-of-turn token
    // here) with logit 1.
    let s = infill();
    let mut data: Vec<TokenData> = (0..6).map(|i| TokenData { id: A + i, logit: 0.0, p: 0.0 }).collect();
    let mut cur = TokenDataArray { data: data.as_mut_ptr(), size: 6, selected: -1, sorted: false };
    unsafe { llama_sampler_apply(s, &mut cur) };
    assert_eq!((cur.size, data[0].id, data[0].logit), (1, EOS, 1.0));
    unsafe {
        llama_sampler_free(s);
        crate::model::llama_model_free(model);
    }
}

#[test]
fn dry_breakers_are_texts_matched_over_the_vocabulary() {
    let model = tiny();
    let breakers = [c"er".as_ptr()];
    let s = unsafe { llama_sampler_init_dry(model, 1.0, 2.0, 2, 16, breakers.as_ptr(), 1) };
    let Some(Kind::Dry(d)) = (unsafe { kind(s) }) else { panic!("not a DRY sampler") };
    // "er" itself is a breaker alone; "e" and "re" end with the beginning of "er" and
    // need the tokens of the rest, "r", after them. "a" has none of it.
    assert_eq!(d.breakers.get(&ER), Some(&vec![vec![]]));
    assert_eq!(d.breakers.get(&E), Some(&vec![vec![R]]));
    assert_eq!(d.breakers.get(&RE), Some(&vec![vec![R]]));
    assert_eq!(d.breakers.get(&A), None);
    // History a b e r a b: the breaker "e r" three places back bounds the repeat "a b"
    // to 2 = allowed: e, which followed "a b" before, loses 1 * 2^0.
    for t in [A, B, E, R, A, B] {
        unsafe { llama_sampler_accept(s, t) };
    }
    let ids = [A, B, E, R];
    let mut data: Vec<TokenData> = ids.iter().map(|&id| TokenData { id, logit: 0.0, p: 0.0 }).collect();
    let mut cur = TokenDataArray { data: data.as_mut_ptr(), size: 4, selected: -1, sorted: true };
    unsafe { llama_sampler_apply(s, &mut cur) };
    assert_eq!(data.iter().map(|d| d.logit).collect::<Vec<_>>(), vec![0.0, 0.0, -1.0, 0.0]);
    assert!(!cur.sorted);
    // A clone keeps the history; reset clears it.
    let c = unsafe { llama_sampler_clone(s) };
    unsafe { llama_sampler_reset(s) };
    let Some(Kind::Dry(dc)) = (unsafe { kind(c) }) else { panic!() };
    assert_eq!(dc.last_tokens.len(), 6);
    let Some(Kind::Dry(d)) = (unsafe { kind(s) }) else { panic!() };
    assert!(d.last_tokens.is_empty());
    unsafe {
        llama_sampler_free(s);
        llama_sampler_free(c);
        crate::model::llama_model_free(model);
    }
}

/// llama_sampler_copy: a seeded dist given another's state draws what that one draws next
/// (its generator copied, not its seed); a chain's children are copied with it; samplers of
/// different kinds are left as they are.
#[test]
fn copy_gives_the_destination_the_sources_state() {
    let draw = |s: *mut Sampler| {
        let mut data: Vec<TokenData> = L.iter().enumerate().map(|(i, &l)| TokenData { id: i as Token, logit: l, p: 0.0 }).collect();
        let mut cur = TokenDataArray { data: data.as_mut_ptr(), size: 4, selected: -1, sorted: false };
        unsafe { llama_sampler_apply(s, &mut cur) };
        cur.selected
    };
    unsafe {
        let (src, dst) = (llama_sampler_init_dist(42), llama_sampler_init_dist(7));
        for _ in 0..5 {
            draw(src);
        }
        llama_sampler_copy(src, dst);
        let a: Vec<i64> = (0..50).map(|_| draw(src)).collect();
        let b: Vec<i64> = (0..50).map(|_| draw(dst)).collect();
        assert_eq!(a, b);
        // Not what a fresh dist(42) draws: the state, not the seed, was copied.
        let fresh = llama_sampler_init_dist(42);
        let c: Vec<i64> = (0..55).map(|_| draw(fresh)).collect();
        assert_eq!(&c[5..], &a[..], "five draws in, a fresh generator agrees");
        // Chains: the copy's child draws as the source's child.
        let (ca, cb) = (llama_sampler_chain_init(SamplerChainParams { no_perf: true }), llama_sampler_chain_init(SamplerChainParams { no_perf: true }));
        llama_sampler_chain_add(ca, llama_sampler_init_dist(3));
        llama_sampler_chain_add(cb, llama_sampler_init_greedy());
        draw(ca);
        llama_sampler_copy(ca, cb);
        assert_eq!(name(llama_sampler_chain_get(cb, 0)), "dist");
        assert_eq!((0..20).map(|_| draw(ca)).collect::<Vec<_>>(), (0..20).map(|_| draw(cb)).collect::<Vec<_>>());
        // Different kinds: nothing changes.
        let g = llama_sampler_init_greedy();
        llama_sampler_copy(src, g);
        assert_eq!(name(g), "greedy");
        for s in [src, dst, fresh, ca, cb, g] {
            llama_sampler_free(s);
        }
    }
}
