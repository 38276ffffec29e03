//! Embeddings through the facade (llama_set_embeddings, llama_get_embeddings / _ith / _seq,
//! llama_pooling_type, the embeddings and pooling_type params) on the tiny fixtures: every
//! vector equals packlm's `Session::embed` of the same tokens with the same pooling, bit for
//! bit; pooled vectors equal the pooling of the per-token ones (an independent route); the
//! sentence-transformers fixtures' declared pooling is the context's, and its vectors are
//! within 1e-4 of sentence-transformers' own (tests/fixtures/make_embed_fixtures.py); a
//! sequence continued from held positions gets the vectors of its batch's tokens attending to
//! them; bad reads give NULL and a log line.

mod common;

use common::*;
use llama::abi::{ContextParams, Token};
use llama::context::*;
use llama::context_settings::{llama_get_causal_attn, llama_set_causal_attn};
use llama::embeddings::*;
use llama::model::{llama_model_free, LlamaModel};
use packlm::{EmbedOptions, Model, Pooling};

/// A context of `n_seq` sequences (unified: each holds the whole context) on `m`.
fn embd_context(m: *mut LlamaModel, embeddings: bool, pooling_type: i32, n_seq: u32) -> *mut LlamaContext {
    let params = ContextParams { n_ctx: 0, embeddings, pooling_type, n_seq_max: n_seq, kv_unified: true, ..llama_context_default_params() };
    let c = unsafe { llama_init_from_model(m, params) };
    assert!(!c.is_null(), "the context is made");
    c
}

/// packlm's vectors of `texts` under `pooling`, not normalized.
fn reference(path: &std::path::Path, texts: &[&[u32]], pooling: Pooling) -> Vec<f32> {
    let model = Model::open(path).unwrap();
    let mut s = model.session().unwrap();
    s.embed(texts, &EmbedOptions { pooling: Some(pooling), normalize: Some(false) }).unwrap().values
}

/// Entries of `tokens` in sequence `seq` from position `start`, logits flags off.
fn entries(tokens: &[Token], start: i32, seq: i32) -> Vec<(Token, i32, i32, bool)> {
    tokens.iter().enumerate().map(|(i, &t)| (t, start + i as i32, seq, false)).collect()
}

fn u32s(t: &[Token]) -> Vec<u32> {
    t.iter().map(|&x| x as u32).collect()
}

const TEXT: [Token; 7] = [0, 17, 42, 99, 5, 23, 7];
const OTHER: [Token; 4] = [0, 250, 3, 61];
const HIDDEN: usize = 64;

#[test]
fn per_token_vectors_are_packlms() { unsafe {
    capture_log();
    let m = model();
    let c = embd_context(m, true, -1, 1);
    // The fixture declares no pooling: llama.cpp's NONE.
    assert_eq!(llama_pooling_type(c), 0);
    // Every token is an output with embeddings on, whatever its logits flag says.
    assert_eq!(decode_entries(c, &entries(&TEXT, 0, 0)), 0);
    let want = reference(&fixture_path(), &[&u32s(&TEXT)], Pooling::None);
    let all = floats(llama_get_embeddings(c), TEXT.len() * HIDDEN, "llama_get_embeddings");
    assert_eq!(bits(&all), bits(&want), "the rows are packlm's, in batch order");
    for i in 0..TEXT.len() {
        let row = floats(llama_get_embeddings_ith(c, i as i32), HIDDEN, "a row");
        assert_eq!(bits(&row), bits(&want[i * HIDDEN..(i + 1) * HIDDEN]), "row {i}");
    }
    let last = floats(llama_get_embeddings_ith(c, -1), HIDDEN, "the last row");
    assert_eq!(bits(&last), bits(&want[want.len() - HIDDEN..]));
    // The logits come with them, for every row: those of a plain decode.
    let plain = model_session_logits(&TEXT);
    for i in 0..TEXT.len() {
        let row = floats(llama_get_logits_ith(c, i as i32), 300, "logits");
        assert_eq!(bits(&row), bits(&plain[i * 300..(i + 1) * 300]), "logits row {i}");
    }
    // Out of range, a pooled read of a NONE context: NULL and a log line.
    assert!(llama_get_embeddings_ith(c, TEXT.len() as i32).is_null());
    assert!(logged(&["llama_get_embeddings_ith", "invalid embeddings id 7"]));
    assert!(llama_get_embeddings_ith(c, -8).is_null());
    assert!(llama_get_embeddings_seq(c, 0).is_null());
    assert!(logged(&["llama_get_embeddings_seq", "LLAMA_POOLING_TYPE_NONE"]));
    // A cleared memory drops them, as it drops the logits.
    llama_memory_clear(llama_get_memory(c), true);
    assert!(llama_get_embeddings(c).is_null());
    llama_free(c);
    llama_model_free(m);
}}

/// Every row's logits of `tokens` from packlm, on the fixture.
fn model_session_logits(tokens: &[Token]) -> Vec<f32> {
    let model = Model::open(fixture_path()).unwrap();
    let mut s = model.session().unwrap();
    s.step_batch(&u32s(tokens), packlm::Want::All).unwrap()
}

fn fixture_path() -> std::path::PathBuf {
    tiny("llama")
}

#[test]
fn pooled_vectors_per_sequence_in_one_batch() { unsafe {
    capture_log();
    let m = model();
    let per_token_a = reference(&fixture_path(), &[&u32s(&TEXT)], Pooling::None);
    let per_token_b = reference(&fixture_path(), &[&u32s(&OTHER)], Pooling::None);
    for (code, pooling) in [(1, Pooling::Mean), (2, Pooling::Cls), (3, Pooling::Last)] {
        let c = embd_context(m, true, code, 3);
        assert_eq!(llama_pooling_type(c), code);
        // Sequences 0 and 2 interleaved in one batch; sequence 1 not in it.
        let mut batch = entries(&TEXT, 0, 0);
        for (k, e) in entries(&OTHER, 0, 2).into_iter().enumerate() {
            batch.insert(2 * k + 1, e);
        }
        assert_eq!(decode_entries(c, &batch), 0);
        for (seq, text, rows) in [(0, &TEXT[..], &per_token_a), (2, &OTHER[..], &per_token_b)] {
            let got = floats(llama_get_embeddings_seq(c, seq), HIDDEN, "a pooled vector");
            assert_eq!(bits(&got), bits(&reference(&fixture_path(), &[&u32s(text)], pooling)), "{pooling:?} sequence {seq}: packlm's");
            // The independent route: the pooling of the per-token vectors.
            let n = text.len();
            let want: Vec<f32> = match pooling {
                Pooling::Mean => (0..HIDDEN).map(|d| (0..n).map(|r| rows[r * HIDDEN + d]).sum::<f32>() / n as f32).collect(),
                Pooling::Cls => rows[..HIDDEN].to_vec(),
                _ => rows[rows.len() - HIDDEN..].to_vec(),
            };
            let d = max_abs_diff(&got, &want);
            assert!(d <= 1e-5, "{pooling:?} sequence {seq}: {d} from the pooled per-token vectors");
        }
        assert!(llama_get_embeddings_seq(c, 1).is_null());
        assert!(logged(&["llama_get_embeddings_seq", "sequence 1 was not in the last batch"]));
        assert!(llama_get_embeddings(c).is_null());
        assert!(logged(&["llama_get_embeddings", "llama_get_embeddings_seq"]));
        assert!(llama_get_embeddings_ith(c, 0).is_null());
        llama_free(c);
    }
    llama_model_free(m);
}}

#[test]
fn a_continued_sequence_attends_to_its_held_positions() { unsafe {
    let m = model();
    let whole = reference(&fixture_path(), &[&u32s(&TEXT)], Pooling::None);
    let held = 3;
    for (code, pooling) in [(0, Pooling::None), (1, Pooling::Mean), (3, Pooling::Last)] {
        let c = embd_context(m, false, code, 1);
        assert_eq!(decode_entries(c, &entries(&TEXT[..held], 0, 0)), 0);
        llama_set_embeddings(c, true);
        assert_eq!(decode_entries(c, &entries(&TEXT[held..], held as i32, 0)), 0);
        assert_eq!(llama_memory_seq_pos_max(llama_get_memory(c), 0), TEXT.len() as i32 - 1);
        let tail = &whole[held * HIDDEN..];
        let n = TEXT.len() - held;
        if pooling == Pooling::None {
            for i in 0..n {
                let row = floats(llama_get_embeddings_ith(c, i as i32), HIDDEN, "a row");
                assert_eq!(bits(&row), bits(&tail[i * HIDDEN..(i + 1) * HIDDEN]), "row {i} of the continuation");
            }
        } else {
            let got = floats(llama_get_embeddings_seq(c, 0), HIDDEN, "a pooled vector");
            let want: Vec<f32> = if pooling == Pooling::Mean {
                (0..HIDDEN).map(|d| (0..n).map(|r| tail[r * HIDDEN + d]).sum::<f32>() / n as f32).collect()
            } else {
                tail[tail.len() - HIDDEN..].to_vec()
            };
            assert!(max_abs_diff(&got, &want) <= 1e-6, "{pooling:?}: pooled over the batch's tokens");
        }
        llama_free(c);
    }
    llama_model_free(m);
}}

#[test]
fn embeddings_follow_llama_set_embeddings() { unsafe {
    capture_log();
    let m = model();
    let c = embd_context(m, false, -1, 1);
    assert_eq!(decode(c, &TEXT), 0);
    assert!(llama_get_embeddings(c).is_null());
    assert!(logged(&["llama_get_embeddings", "computed no embeddings"]));
    // Only the last token asked for logits.
    assert!(llama_get_logits_ith(c, 0).is_null());
    llama_memory_clear(llama_get_memory(c), true);
    llama_set_embeddings(c, true);
    assert_eq!(decode(c, &TEXT), 0);
    assert!(!llama_get_embeddings_ith(c, 0).is_null());
    assert!(!llama_get_logits_ith(c, 0).is_null(), "every token is an output");
    llama_set_embeddings(c, false);
    assert_eq!(decode(c, &[9]), 0);
    assert!(llama_get_embeddings(c).is_null());
    llama_free(c);
    // NULL contexts.
    assert!(llama_get_embeddings(std::ptr::null_mut()).is_null());
    assert!(llama_get_embeddings_ith(std::ptr::null_mut(), 0).is_null());
    assert!(llama_get_embeddings_seq(std::ptr::null_mut(), 0).is_null());
    llama_set_embeddings(std::ptr::null_mut(), true);
    assert_eq!(llama_pooling_type(std::ptr::null()), -1);
    // A pooling packlm does not compute (RANK, a reranker's): refused for embeddings.
    let p = ContextParams { n_ctx: 0, embeddings: true, pooling_type: 4, ..llama_context_default_params() };
    assert!(llama_init_from_model(m, p).is_null());
    assert!(logged(&["llama_init_from_model", "pooling_type 4"]));
    let c = embd_context(m, false, 4, 1);
    assert_eq!(llama_pooling_type(c), 4);
    llama_set_embeddings(c, true);
    assert!(logged(&["llama_set_embeddings", "embeddings stay off"]));
    assert_eq!(decode(c, &TEXT), 0);
    assert!(llama_get_embeddings(c).is_null());
    llama_free(c);
    llama_model_free(m);
}}

/// The sentence-transformers fixtures' `unnormalized` vectors (after the pooling and Dense
/// layers, before Normalize) and tokens.
fn st_fixture(name: &str) -> (Vec<Vec<u32>>, Vec<Vec<f32>>) {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(tiny(name).join("embeddings.json")).unwrap()).unwrap();
    let list = |k: &str| v[k].as_array().unwrap().clone();
    let tokens = list("tokens").iter().map(|t| t.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()).collect();
    let vecs = list("unnormalized").iter().map(|t| t.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()).collect();
    (tokens, vecs)
}

/// Each text decoded alone after a memory clear (as Llama.embed does): the declared pooling's
/// vector, equal to packlm's and within 1e-4 of sentence-transformers'.
unsafe fn check_st(name: &str, code: i32, pooling: Pooling) -> (*mut LlamaModel, *mut LlamaContext) {
    let m = model_at(&tiny(name));
    let c = embd_context(m, true, -1, 1);
    assert_eq!(llama_pooling_type(c), code, "{name}: the declared pooling");
    let (tokens, want) = st_fixture(name);
    for (t, w) in tokens.iter().zip(&want) {
        llama_memory_clear(llama_get_memory(c), true);
        let ids: Vec<Token> = t.iter().map(|&x| x as Token).collect();
        assert_eq!(decode_entries(c, &entries(&ids, 0, 0)), 0);
        let got = floats(llama_get_embeddings_seq(c, 0), w.len(), "a pooled vector");
        assert_eq!(bits(&got), bits(&reference(&tiny(name), &[t], pooling)), "{name} {t:?}: packlm's");
        let d = max_abs_diff(&got, w);
        assert!(d <= 1e-4, "{name} {t:?}: {d} from sentence-transformers");
    }
    (m, c)
}

#[test]
fn a_declared_pooling_is_the_contexts() { unsafe {
    // Qwen3, causal, last-token pooling (1_Pooling/config.json).
    let (m, c) = check_st("embed_qwen3", 3, Pooling::Last);
    assert!(llama_get_causal_attn(c));
    llama_free(c);
    llama_model_free(m);
}}

#[test]
fn a_bidirectional_model_serves_embeddings_only() { unsafe {
    capture_log();
    // Gemma3 with use_bidirectional_attention, mean pooling, two Dense layers.
    let (m, c) = check_st("embed_gemma3", 1, Pooling::Mean);
    assert!(!llama_get_causal_attn(c));
    // No steps: the sequence holds no positions and there are no logits.
    assert_eq!(llama_memory_seq_pos_max(llama_get_memory(c), 0), -1);
    assert!(llama_get_logits_ith(c, 0).is_null());
    // Its attention is the model's: causal is refused.
    llama_set_causal_attn(c, true);
    assert!(logged(&["llama_set_causal_attn", "causal attention is not supported for this model"]));
    let p = ContextParams { n_ctx: 0, attention_type: 0, ..llama_context_default_params() };
    assert!(llama_init_from_model(m, p).is_null());
    // Without embeddings a decode has nothing to give: packlm refuses the step.
    llama_set_embeddings(c, false);
    assert_eq!(decode(c, &[0, 66, 1]), -1);
    llama_free(c);
    llama_model_free(m);
}}
