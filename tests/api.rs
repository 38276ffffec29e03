//! The public Rust API (`packlm::Model`, `packlm::Session`, ...) as a Rust program uses it:
//! only items of the crate root, no `unsafe`, no internal module.

use packlm::{Acceptance, Backend, ChatMessage, Detokenizer, Error, GenerateOptions, Model, NgramDrafter, OpenOptions, Precision, SamplerParams, Status, Want};

fn tiny() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny/llama").to_string()
}

fn model() -> Model {
    Model::open_with(tiny(), &OpenOptions::default().threads(2).precision(Precision::Exact)).unwrap()
}

fn status(e: Error) -> Status {
    e.status
}

#[test]
fn info_describes_the_tiny_fixture() {
    let m = model();
    let i = m.info();
    // tests/fixtures/tiny/llama/config.json: vocab_size 256? read it independently.
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(format!("{}/config.json", tiny())).unwrap()).unwrap();
    assert_eq!(i.n_vocab as u64, cfg["vocab_size"].as_u64().unwrap());
    assert_eq!(i.n_layers as u64, cfg["num_hidden_layers"].as_u64().unwrap());
    assert_eq!(i.hidden_size as u64, cfg["hidden_size"].as_u64().unwrap());
    assert_eq!(i.family, "llama");
    assert_eq!(i.precision, Precision::Exact);
    assert_eq!(i.kv_widths.len(), i.n_layers);
    assert!(i.kv_widths.iter().all(|w| w.is_some()));
    assert_eq!(m.n_vocab(), i.n_vocab);
    let json: serde_json::Value = serde_json::from_str(&m.info_json()).unwrap();
    assert_eq!(json["precision"], "exact");
}

#[test]
fn batched_equals_stepped_and_restore_equals_fresh() {
    let m = model();
    let prompt = m.tokenize("Hello there, general", true, false).unwrap();
    assert!(prompt.len() >= 4, "{prompt:?}");
    let mut a = m.session().unwrap();
    let all = a.step_batch(&prompt, Want::All).unwrap();
    let mut b = m.session().unwrap();
    for (i, &t) in prompt.iter().enumerate() {
        let row = b.step(t).unwrap();
        assert_eq!(row[..], all[i * m.n_vocab()..(i + 1) * m.n_vocab()], "row {i}");
    }
    assert_eq!(a.tokens(), &prompt[..]);
    // Snapshot, step on, restore, step again: the same bits.
    let snap = a.snapshot();
    assert_eq!(snap.len(), a.snapshot_len());
    assert_eq!(a.snapshot_len_at(a.n_past()), Some(snap.len()));
    assert_eq!(a.snapshot_len_at(usize::MAX), None);
    let next = packlm::argmax(a.last_logits());
    let after = a.step(next).unwrap();
    a.restore(&snap).unwrap();
    assert_eq!(a.step(next).unwrap(), after);
    // Truncate to 2 positions equals a session that only saw those 2 tokens.
    a.truncate(2).unwrap();
    let mut fresh = m.session().unwrap();
    fresh.step_batch(&prompt[..2], Want::None).unwrap();
    assert_eq!(a.step(prompt[2]).unwrap(), fresh.step(prompt[2]).unwrap());
    // Another model's snapshot, or corrupted bytes, are refused and change nothing.
    let before = a.snapshot();
    let mut bad = snap.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x40;
    assert_eq!(a.restore(&bad).map_err(status), Err(Status::ErrSnapshot));
    assert_eq!(a.snapshot(), before);
}

#[test]
fn bad_input_gets_a_status_and_leaves_the_session_as_it_was() {
    let m = model();
    let mut s = m.session_with_context(8).unwrap();
    s.step_batch(&[1, 2, 3], Want::None).unwrap();
    let before = s.snapshot();
    let n_vocab = m.n_vocab() as u32;
    assert_eq!(s.step(n_vocab).map_err(status), Err(Status::ErrTokenOutOfRange));
    assert_eq!(s.step_batch(&[1; 6], Want::Last).map_err(status), Err(Status::ErrContextOverflow));
    assert_eq!(s.verify(1, &[2; 8], Acceptance::Greedy).map_err(status), Err(Status::ErrContextOverflow));
    assert_eq!(s.snapshot(), before);
    assert_eq!(m.detokenize(&[n_vocab], false).map_err(status), Err(Status::ErrTokenOutOfRange));
    assert_eq!(Model::open("/nonexistent/pack").map_err(status).err(), Some(Status::ErrIo));
    assert_eq!("tpu".parse::<Backend>().map_err(status), Err(Status::ErrInvalidArgument));
    // The tokenize limit.
    m.set_max_tokenize_bytes(4);
    assert_eq!(m.tokenize("hello", false, false).map_err(status), Err(Status::ErrLimitExceeded));
    m.set_max_tokenize_bytes(0);
    assert_eq!(m.max_tokenize_bytes(), packlm::DEFAULT_MAX_TOKENIZE_BYTES);
    // Sampling settings and logits are checked.
    let bad = SamplerParams { top_p: 0.0, ..Default::default() };
    assert_eq!(packlm::sample(&[0.0, 1.0], &bad, &[], &mut 0).map_err(status), Err(Status::ErrInvalidArgument));
    assert_eq!(packlm::sample(&[0.0, f32::NAN], &SamplerParams::default(), &[], &mut 0).map_err(status), Err(Status::ErrInvalidArgument));
    assert_eq!(packlm::sample(&[0.0, 1.0], &SamplerParams::default(), &[], &mut 0), Ok(1));
}

#[test]
fn an_aborted_pass_changes_nothing() {
    let m = model();
    let mut s = m.session().unwrap();
    s.step_batch(&[1, 2], Want::None).unwrap();
    let before = s.snapshot();
    let abort = s.abort_handle();
    abort.abort();
    assert!(abort.is_aborted());
    assert_eq!(s.step(3).map_err(status), Err(Status::ErrAborted));
    assert_eq!(s.snapshot(), before);
    abort.clear();
    s.step(3).unwrap();
    assert_eq!(s.n_past(), 3);
}

/// The streaming iterator yields the tokens greedy stepping chooses, its text is the
/// detokenized whole, and an n-gram drafter changes nothing but the number of passes.
#[test]
fn generate_streams_what_greedy_stepping_gives() {
    let m = model();
    let prompt = m.tokenize("one two one two one two", true, false).unwrap();
    // Greedy by hand, stopping at a stop token.
    let mut s = m.session().unwrap();
    let mut logits = s.step_batch(&prompt, Want::Last).unwrap();
    let mut want = Vec::new();
    while want.len() < 24 {
        let t = packlm::argmax(&logits);
        if m.is_stop(t) {
            break;
        }
        want.push(t);
        logits = s.step(t).unwrap();
    }
    for drafted in [false, true] {
        let mut s = m.session().unwrap();
        let mut drafter = NgramDrafter::default();
        let options = GenerateOptions {
            max_tokens: 24,
            drafter: if drafted { Some(&mut drafter) } else { None },
            draft_k: 4,
            skip_special: false,
            ..Default::default()
        };
        let mut stream = s.generate(&prompt, options);
        let (mut ids, mut text) = (Vec::new(), String::new());
        for t in &mut stream {
            let t = t.unwrap();
            ids.push(t.id);
            text.push_str(&t.text);
        }
        text.push_str(&stream.rest().unwrap());
        assert_eq!(ids, want, "drafted: {drafted}");
        assert_eq!(text, m.detokenize(&ids, false).unwrap());
    }
}

#[test]
fn detokenizer_stream_equals_detokenize() {
    let m = model();
    let ids = m.tokenize("héllo wörld, ünïcode ✓", false, false).unwrap();
    let mut d = Detokenizer::new(&m, false);
    let mut text = String::new();
    for &t in &ids {
        text.push_str(&d.feed(t).unwrap());
    }
    text.push_str(&d.flush().unwrap());
    assert_eq!(text, m.detokenize(&ids, false).unwrap());
    assert_eq!(d.feed(m.n_vocab() as u32).map_err(status), Err(Status::ErrTokenOutOfRange));
}

#[test]
fn chat_apply_renders_the_packs_template() {
    let m = model();
    let msgs = [ChatMessage { role: "user".into(), content: "Hi".into() }];
    match m.chat_template() {
        Some(_) => assert!(m.chat_apply(&msgs, true).unwrap().contains("Hi")),
        None => assert_eq!(m.chat_apply(&msgs, true).map_err(status), Err(Status::ErrUnsupported)),
    }
}

/// A model and its sessions move across threads; sessions of one model run in parallel with
/// the bits of one thread.
#[test]
fn models_and_sessions_are_send_and_sync_where_documented() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Model>();
    send::<packlm::Session>();
    send_sync::<packlm::AbortHandle>();
    let m = model();
    let one = m.session().unwrap().step_batch(&[1, 2, 3], Want::Last).unwrap();
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || m.session().unwrap().step_batch(&[1, 2, 3], Want::Last).unwrap())
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), one);
    }
}

/// A mixture of experts through the safe API: tiny gpt-oss (attention sinks, biased top-k-first
/// router, clamped SwiGLU; tests/fixtures/make_moe_fixtures.py) from llama.cpp's GGUF layout and
/// from its HF folders (f32, and MXFP4 experts): every row within 1e-4 of transformers' golden logits,
/// a pass equal to stepping bit for bit, and the info JSON stating the experts.
#[test]
fn a_mixture_of_experts_matches_transformers() {
    let base = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny");
    for (fixture, pack) in [("gpt_oss", "gpt_oss/model.gguf"), ("gpt_oss", "gpt_oss"), ("gpt_oss_mxfp4", "gpt_oss_mxfp4")] {
        let golden: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(format!("{base}/{fixture}/golden.json")).unwrap()).unwrap();
        let tokens: Vec<u32> = golden["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
        let want: Vec<f32> = std::fs::read(format!("{base}/{fixture}/golden.f32")).unwrap().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        // Exact: at `fast` the MXFP4 experts take 8-bit activations (about 0.1 from HF here).
        let m = Model::open_with(format!("{base}/{pack}"), &OpenOptions::default().threads(2).precision(Precision::Exact)).unwrap();
        let all = m.session().unwrap().step_batch(&tokens, Want::All).unwrap();
        assert_eq!(all.len(), want.len(), "{pack}");
        let worst = all.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(worst <= 1e-4, "{pack}: max abs {worst} from transformers");
        let mut s = m.session().unwrap();
        let stepped: Vec<f32> = tokens.iter().flat_map(|&t| s.step(t).unwrap()).collect();
        assert_eq!(stepped, all, "{pack}: stepping vs one pass");
        let info: serde_json::Value = serde_json::from_str(&m.info_json()).unwrap();
        assert_eq!(info["experts"]["experts"], golden["n_experts"], "{pack}: {}", info["experts"]);
        assert_eq!(info["experts"]["experts_per_token"], 2, "{pack}");
    }
}
