//! Known answers on the real SmolLM2-135M-Instruct Q4_1 GGUF (scripts/fetch_models.sh), against
//! what HF transformers produced from the same file (tests/fixtures/smollm2/reference.json,
//! written by tests/fixtures/make_fixtures.py). Skipped with a note when the model is absent,
//! unless PACKLM_REQUIRE_MODELS is set (make test sets it).

mod common;

use common::*;
use packlm::backend::BackendKind;
use packlm::engine::{Session, Want};
use packlm::pack::chat::Message;
use packlm::sample::argmax;
use serde_json::Value;

fn reference() -> Value {
    fixture_json("smollm2/reference.json")
}

fn greedy(m: &std::sync::Arc<packlm::engine::Model>, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = Session::new(m.clone(), 0).unwrap();
    s.step_batch(prompt, Want::Last).unwrap();
    let mut out = Vec::new();
    for _ in 0..n {
        let t = argmax(s.last_logits());
        out.push(t);
        if m.vocab().stop.contains(&t) {
            break;
        }
        s.step(t).unwrap();
    }
    out
}

#[test]
fn prompts_tokenize_as_hf() {
    let Some(p) = smollm2() else { return };
    let m = open(&p);
    let r = reference();
    assert_eq!(m.vocab().encode("The capital of France is", true, false).unwrap(), ids(&r["prompt"]["ids"]));
    assert_eq!(m.vocab().encode("def fibonacci(n):", true, false).unwrap(), ids(&r["prompt2"]["ids"]));
    assert!(!m.vocab().add_bos, "SmolLM2's GGUF says add_bos_token = false");
}

#[test]
fn greedy_continuations_equal_hf() {
    let Some(p) = smollm2() else { return };
    let m = open(&p);
    let r = reference();
    let want = ids(&r["prompt"]["greedy_24"]["ids"]);
    assert_eq!(greedy(&m, &ids(&r["prompt"]["ids"]), want.len()), want);
    let text = m.vocab().decode(&want, true).unwrap();
    assert_eq!(text, r["prompt"]["greedy_24"]["text"].as_str().unwrap());
    let want2 = ids(&r["prompt2"]["greedy_32"]["ids"]);
    assert_eq!(greedy(&m, &ids(&r["prompt2"]["ids"]), want2.len()), want2);
}

#[test]
fn chat_answers_paris_as_hf() {
    let Some(p) = smollm2() else { return };
    let m = open(&p);
    let r = reference();
    let msgs = [Message { role: "user".into(), content: "What is the capital of France? Answer with one word.".into() }];
    let text = m.render_chat(&msgs, true).unwrap();
    assert_eq!(text, r["chat"]["text"].as_str().unwrap(), "chat template rendering");
    let prompt = m.vocab().encode(&text, true, true).unwrap();
    assert_eq!(prompt, ids(&r["chat"]["ids"]));
    let reply = greedy(&m, &prompt, 16);
    assert_eq!(reply, ids(&r["chat"]["reply"]["ids"]));
    let answer = m.vocab().decode(&reply, true).unwrap();
    assert!(answer.contains("Paris"), "reply {answer:?}");
}

/// Q4_1/Q8_0 weights dequantized to f32 on both sides, f32 compute: differences are summation
/// order only, over 30 layers.
#[test]
fn last_logits_close_to_hf() {
    let Some(p) = smollm2() else { return };
    let m = open(&p);
    let r = reference();
    let (got, d) = last_row_vs_fixture(&m, &ids(&r["prompt"]["ids"]), "smollm2/last_logits.f32");
    assert!(d <= 2e-3, "max abs diff {d}");
    assert_eq!(argmax(&got) as u64, r["prompt"]["last_logits_argmax"].as_u64().unwrap());
}

#[test]
fn real_model_batched_equals_sequential_and_threads_agree() {
    let Some(p) = smollm2() else { return };
    let r = reference();
    let prompt = ids(&r["chat"]["ids"]);
    let two = open_with(&p, BackendKind::Host, 2);
    let batched = all_rows(&two, &prompt);
    assert_bits_equal(&batched, &stepped(&two, &prompt), "batched vs sequential");
    let one = open_with(&p, BackendKind::Host, 1);
    assert_bits_equal(&batched, &all_rows(&one, &prompt), "1 vs 2 threads");
}

/// Speculative greedy generation with the n-gram drafter gives exactly plain greedy's tokens on
/// the real model, on a code-edit prompt (long n-gram drafts) and a prose prompt.
#[test]
fn speculative_greedy_equals_plain_greedy_on_the_real_model() {
    use packlm::engine::draft::NgramDrafter;
    use packlm::engine::speculative::generate;
    use packlm::sample::SamplerParams;
    let Some(p) = smollm2() else { return };
    let m = open(&p);
    let code = "Rename the variable `total` to `sum` in this function and return the code.\n\ndef mean(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(values)\n\nAnswer:\ndef mean(values):\n";
    let prose = "The history of the printing press begins in";
    for prompt in [code, prose] {
        let ids = m.vocab().encode(prompt, true, false).unwrap();
        let params = SamplerParams::default();
        let plain = generate(&mut Session::new(m.clone(), 0).unwrap(), &ids, 40, &params, &mut 0, None, 0).unwrap();
        let mut d = NgramDrafter::default();
        let spec = generate(&mut Session::new(m.clone(), 0).unwrap(), &ids, 40, &params, &mut 0, Some(&mut d), 6).unwrap();
        assert_eq!(spec.tokens, plain.tokens, "prompt {prompt:?}");
        eprintln!("{:?}: drafted {} accepted {} rounds {}", &prompt[..20], spec.drafted, spec.accepted, spec.rounds);
    }
}

/// At `fast` on x86-64 the host backend writes an interleaved copy of each block-quantized
/// matrix after the open, on a thread of its own, and reads the stored rows until then: a
/// pass while it writes, during which some groups come from the copy and some from the stored
/// rows, gives the bits of a pass after it, and it ends with every matrix read from its copy
/// (`weights_ready`). Where nothing is interleaved (no AVX2, another architecture) the
/// weights are ready at once.
#[test]
fn passes_during_and_after_the_interleaving_agree() {
    use packlm::backend::Precision;
    use packlm::engine::{Model, OpenOptions};
    let Some(p) = smollm2() else { return };
    let r = reference();
    let prompt = ids(&r["chat"]["ids"]);
    for threads in [1, 2] {
        let m = std::sync::Arc::new(Model::open(&p, &OpenOptions::new(BackendKind::Host, threads, Precision::Fast)).unwrap());
        let packs = cfg!(target_arch = "x86_64") && std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
        // Some 100 MB to write: not done as the open returns.
        assert_eq!(m.backend().weights_ready(), !packs, "{threads} threads: ready right after the open");
        let mut during = Vec::new();
        let t = std::time::Instant::now();
        while !m.backend().weights_ready() {
            during.push(all_rows(&m, &prompt[..8]));
            assert!(t.elapsed().as_secs() < 300, "{threads} threads: the interleaved copies were not written in 300 s");
        }
        let after = all_rows(&m, &prompt[..8]);
        eprintln!("{threads} threads: {} passes during the writing, {:.2} s", during.len(), t.elapsed().as_secs_f64());
        assert!(!packs || !during.is_empty());
        for (i, rows) in during.iter().enumerate() {
            assert_bits_equal(rows, &after, &format!("{threads} threads: pass {i} during the writing vs after it"));
        }
        // The whole prompt on 2 threads after the writing, against 1 thread during it.
        if threads == 2 {
            let one = std::sync::Arc::new(Model::open(&p, &OpenOptions::new(BackendKind::Host, 1, Precision::Fast)).unwrap());
            assert_bits_equal(&all_rows(&m, &prompt), &all_rows(&one, &prompt), "fast: 2 threads after the writing vs 1 thread during it");
        }
    }
}

/// n_params and size_bytes are the sums of the pack's tensors' elements and stored bytes: on
/// SmolLM2's GGUF the sums gguf-py's reader gives (134,515,008 and 96,576,768, which
/// llama.cpp's llama_model_n_params / llama_model_size report too).
#[test]
fn n_params_and_size_are_the_packs_tensor_sums() {
    let Some(path) = common::smollm2() else { return };
    let m = packlm::Model::open(&path).unwrap();
    assert_eq!(m.n_params(), 134_515_008);
    assert_eq!(m.size_bytes(), 96_576_768);
}
