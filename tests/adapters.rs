//! LoRA adapters against PEFT (tests/fixtures/make_embed_fixtures.py): tiny llama (alpha 8,
//! r 4) and tiny gemma3 (alpha 6, r 4, rslora), all seven target maps, within 1e-4 (max-abs,
//! f32) of PEFT's logits at scales 1 and 0.5; the same adapters as llama.cpp adapter GGUFs
//! (tests/fixtures/lora_to_gguf.py) give the same bits; and the session invariants: batched ==
//! sequential, snapshot/restore with the same adapters == fresh, restore under another set
//! refused, sessions with different adapters stepped alternately or in one shared pass each
//! give their own bits.

mod common;

use packlm::{Adapter, Model, Session, Status, StepItem, Want};

fn golden_tokens(name: &str) -> Vec<u32> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(common::tiny(name).join("lora.json")).unwrap())
            .unwrap();
    v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Every row's logits of `tokens` in one pass, on a fresh session with `adapters`.
fn logits(model: &Model, adapters: &[(Adapter, f32)], tokens: &[u32]) -> Vec<f32> {
    let mut s = Session::new(model, 0).unwrap();
    s.set_adapters(adapters).unwrap();
    s.step_batch(tokens, Want::All).unwrap()
}

fn check_against_peft(adapter: &str, base: &str) {
    let model = Model::open(common::tiny(base)).unwrap();
    let dir = common::tiny(adapter);
    let tokens = golden_tokens(adapter);
    let peft = Adapter::open(&model, &dir).unwrap();
    let gguf = Adapter::open(&model, dir.join("adapter.gguf")).unwrap();
    assert_eq!(peft.rank(), 4);
    assert_eq!(peft.targets().len(), 7 * model.info().n_layers);
    for (scale, file) in [(1.0f32, "logits_scale1.f32"), (0.5, "logits_scale0.5.f32")] {
        let want = common::read_f32(&dir.join(file));
        let got = logits(&model, &[(peft.clone(), scale)], &tokens);
        let d = common::max_abs_diff(&got, &want);
        eprintln!("{adapter} scale {scale}: max |packlm - PEFT| = {d:e}");
        assert!(d <= 1e-4, "{adapter} scale {scale}: max-abs {d} from PEFT");
        let from_gguf = logits(&model, &[(gguf.clone(), scale)], &tokens);
        assert_eq!(
            bits(&from_gguf),
            bits(&got),
            "{adapter} scale {scale}: the GGUF adapter differs from the PEFT folder"
        );
    }
    // The base is untouched: no adapters gives the base golden logits' bits as before.
    let base_logits = logits(&model, &[], &tokens);
    let with = logits(&model, &[(peft.clone(), 1.0)], &tokens);
    assert!(
        common::max_abs_diff(&base_logits, &with) > 0.1,
        "{adapter}: the adapter changes the logits"
    );
}

#[test]
fn llama_lora_matches_peft() {
    check_against_peft("lora_llama", "llama");
}

#[test]
fn gemma3_rslora_matches_peft() {
    check_against_peft("lora_gemma3", "gemma3");
}

/// Batched == one at a time with an adapter; a snapshot restored into another session with the
/// same adapter continues with fresh bits; a session with another set refuses it.
#[test]
fn adapter_sessions_keep_the_invariants() {
    let model = Model::open(common::tiny("llama")).unwrap();
    let a = Adapter::open(&model, common::tiny("lora_llama")).unwrap();
    let tokens = golden_tokens("lora_llama");
    let set = [(a.clone(), 0.75f32)];
    let batch = logits(&model, &set, &tokens);
    let mut s = Session::new(&model, 0).unwrap();
    s.set_adapters(&set).unwrap();
    let v = model.n_vocab();
    for (i, &t) in tokens.iter().enumerate() {
        let l = s.step(t).unwrap();
        assert_eq!(
            bits(&l),
            bits(&batch[i * v..(i + 1) * v]),
            "row {i}: step != batch"
        );
    }
    // Snapshot at 12, restore into a new session with the same set: the next rows are fresh.
    let mut s = Session::new(&model, 0).unwrap();
    s.set_adapters(&set).unwrap();
    s.step_batch(&tokens[..12], Want::None).unwrap();
    let snap = s.snapshot();
    let mut r = Session::new(&model, 0).unwrap();
    r.set_adapters(&set).unwrap();
    r.restore(&snap).unwrap();
    let rest = r.step_batch(&tokens[12..], Want::All).unwrap();
    assert_eq!(bits(&rest), bits(&batch[12 * v..]));
    // Another scale, no adapters: refused, the session unchanged.
    for other in [vec![(a.clone(), 0.5f32)], vec![]] {
        let mut o = Session::new(&model, 0).unwrap();
        o.set_adapters(&other).unwrap();
        let e = o.restore(&snap).unwrap_err();
        assert_eq!(e.status, Status::ErrSnapshot);
        assert!(e.message.contains("adapter"), "{}", e.message);
        assert_eq!(o.n_past(), 0);
    }
    // Adapters change on an empty session only.
    let e = s.set_adapters(&[]).unwrap_err();
    assert_eq!(e.status, Status::ErrInvalidArgument);
    assert!(e.message.contains("empty session"), "{}", e.message);
    s.truncate(0).unwrap();
    s.set_adapters(&[]).unwrap();
}

/// Sessions of one model with different adapters: stepped alternately, and in one shared
/// pass (`step_many`), each gives the bits it gives alone.
#[test]
fn different_adapters_share_a_model_and_a_pass() {
    let model = Model::open(common::tiny("llama")).unwrap();
    let a = Adapter::open(&model, common::tiny("lora_llama")).unwrap();
    let tokens = golden_tokens("lora_llama");
    let sets: Vec<Vec<(Adapter, f32)>> = vec![
        vec![(a.clone(), 1.0)],
        vec![],
        vec![(a.clone(), 0.5)],
        vec![(a.clone(), 1.0), (a.clone(), -0.25)],
    ];
    let alone: Vec<Vec<f32>> = sets
        .iter()
        .map(|set| logits(&model, set, &tokens))
        .collect();
    let v = model.n_vocab();
    let mut sessions: Vec<Session> = sets
        .iter()
        .map(|set| {
            let mut s = Session::new(&model, 0).unwrap();
            s.set_adapters(set).unwrap();
            s
        })
        .collect();
    for (i, &t) in tokens.iter().enumerate().take(8) {
        for (k, s) in sessions.iter_mut().enumerate() {
            assert_eq!(
                bits(&s.step(t).unwrap()),
                bits(&alone[k][i * v..(i + 1) * v]),
                "session {k} row {i} stepped alternately"
            );
        }
    }
    // One shared pass over every session's next rows, of different lengths.
    let feeds: Vec<&[u32]> = vec![
        &tokens[8..12],
        &tokens[8..9],
        &tokens[8..15],
        &tokens[8..10],
    ];
    let mut items: Vec<StepItem> = sessions
        .iter_mut()
        .zip(&feeds)
        .map(|(s, f)| StepItem {
            session: s,
            tokens: f,
            want: Want::All,
        })
        .collect();
    let out = Session::step_many(&mut items).unwrap();
    for (k, (l, f)) in out.iter().zip(&feeds).enumerate() {
        assert_eq!(
            bits(l),
            bits(&alone[k][8 * v..(8 + f.len()) * v]),
            "session {k} in a shared pass"
        );
    }
}

/// Bad adapters: another base's (shape, and architecture for a GGUF), a rank its tensors
/// disagree with, a missing B; each refused naming what was wrong.
#[test]
fn bad_adapters_are_refused() {
    let model = Model::open(common::tiny("llama")).unwrap();
    let other = common::tiny("lora_other_base");
    let e = Adapter::open(&model, &other).unwrap_err();
    assert_eq!(e.status, Status::ErrTensor);
    assert!(
        e.message.contains("lora_B") && e.message.contains("q_proj"),
        "{}",
        e.message
    );
    let e = Adapter::open(&model, other.join("adapter.gguf")).unwrap_err();
    assert_eq!(e.status, Status::ErrTensor);
    assert!(
        e.message.contains("qwen3") && e.message.contains("llama"),
        "{}",
        e.message
    );
    let e = Adapter::open(&model, other.join("adapter_as_llama.gguf")).unwrap_err();
    assert_eq!(e.status, Status::ErrTensor);
    assert!(
        e.message.contains("blk.0.attn_q.weight.lora_b"),
        "{}",
        e.message
    );
    // gemma3's adapter on llama: another base.
    assert_eq!(
        Adapter::open(&model, common::tiny("lora_gemma3"))
            .unwrap_err()
            .status,
        Status::ErrTensor
    );

    let dir = std::env::temp_dir().join(format!("packlm-adapter-rank-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = common::tiny("lora_llama");
    std::fs::copy(
        src.join("adapter_model.safetensors"),
        dir.join("adapter_model.safetensors"),
    )
    .unwrap();
    let cfg = std::fs::read_to_string(src.join("adapter_config.json")).unwrap();
    std::fs::write(
        dir.join("adapter_config.json"),
        cfg.replace("\"r\": 4", "\"r\": 8"),
    )
    .unwrap();
    let e = Adapter::open(&model, &dir).unwrap_err();
    assert_eq!(e.status, Status::ErrTensor);
    assert!(
        e.message.contains("rank 4") && e.message.contains("r = 8"),
        "{}",
        e.message
    );
    std::fs::write(
        dir.join("adapter_config.json"),
        cfg.replace("\"use_dora\": false", "\"use_dora\": true"),
    )
    .unwrap();
    let e = Adapter::open(&model, &dir).unwrap_err();
    assert_eq!(e.status, Status::ErrUnsupported);
    assert!(e.message.contains("use_dora"), "{}", e.message);
    std::fs::remove_file(dir.join("adapter_config.json")).unwrap();
    assert_eq!(
        Adapter::open(&model, &dir).unwrap_err().status,
        Status::ErrIo
    );
    std::fs::remove_dir_all(&dir).unwrap();

    // An adapter of another model handle is refused by set_adapters.
    let model2 = Model::open(common::tiny("llama")).unwrap();
    let a2 = Adapter::open(&model2, common::tiny("lora_llama")).unwrap();
    let mut s = Session::new(&model, 0).unwrap();
    let e = s.set_adapters(&[(a2, 1.0)]).unwrap_err();
    assert_eq!(e.status, Status::ErrInvalidArgument);
    let a = Adapter::open(&model, common::tiny("lora_llama")).unwrap();
    assert_eq!(
        s.set_adapters(&[(a, f32::NAN)]).unwrap_err().status,
        Status::ErrInvalidArgument
    );
}

/// Any thread count gives one thread's bits, with an adapter.
#[test]
fn adapter_logits_do_not_depend_on_threads() {
    let tokens = golden_tokens("lora_gemma3");
    let run = |threads: usize| {
        let model = Model::open_with(common::tiny("gemma3"), &packlm::OpenOptions::default().threads(threads)).unwrap();
        let a = Adapter::open(&model, common::tiny("lora_gemma3")).unwrap();
        logits(&model, &[(a, 0.5)], &tokens)
    };
    let one = run(1);
    for t in [2, 3] {
        assert_eq!(bits(&run(t)), bits(&one), "{t} threads");
    }
}
