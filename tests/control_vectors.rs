//! Control vectors (llama.cpp's "cvec") against transformers (tests/fixtures/make_cvec_fixtures.py:
//! a forward hook adding v[il] to each decoder layer's output): tiny llama and gemma3 within 1e-4
//! (max-abs, f32) of the hooked logits, from data (every layer, and a one-layer range) and from
//! two llama.cpp control-vector GGUFs summed with scales; and the session invariants: batched ==
//! sequential, snapshot/restore with the same vector == fresh, restore under another refused,
//! sessions with different vectors stepped alternately or in one shared pass each give their
//! own bits, one thread == two, a zero vector == no vector; bad vectors refused.

mod common;

use packlm::{Adapter, ControlVector, Model, OpenOptions, Session, Status, StepItem, Want};

struct Fixture {
    tokens: Vec<u32>,
    n_layers: usize,
    hidden: usize,
    vectors: Vec<f32>,
}

fn fixture(base: &str) -> Fixture {
    let dir = common::tiny(&format!("cvec_{base}"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("cvec.json")).unwrap()).unwrap();
    let tokens = v["tokens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    Fixture {
        tokens,
        n_layers: v["n_layers"].as_u64().unwrap() as usize,
        hidden: v["hidden"].as_u64().unwrap() as usize,
        vectors: common::read_f32(&dir.join("vectors.f32")),
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Every row's logits of `tokens` in one pass, on a fresh session with `control`.
fn logits(model: &Model, control: Option<&ControlVector>, tokens: &[u32]) -> Vec<f32> {
    let mut s = Session::new(model, 0).unwrap();
    s.set_control_vector(control).unwrap();
    s.step_batch(tokens, Want::All).unwrap()
}

fn check_against_hf(base: &str) {
    let model = Model::open(common::tiny(base)).unwrap();
    let f = fixture(base);
    let dir = common::tiny(&format!("cvec_{base}"));
    let plain = logits(&model, None, &f.tokens);
    let last = f.n_layers - 1;
    let from_data = ControlVector::from_data(&model, &f.vectors, f.hidden, 0, last).unwrap();
    let one_layer = ControlVector::from_data(&model, &f.vectors, f.hidden, 1, 1).unwrap();
    assert_eq!(one_layer.layers(), vec![1]);
    let files = [(dir.join("a.gguf"), 0.75f32), (dir.join("b.gguf"), -0.5)];
    let from_gguf = ControlVector::open_gguf(&model, &files, 1, last).unwrap();
    assert_eq!(from_gguf.layers(), (1..=last).collect::<Vec<_>>());
    for (cv, file) in [(&from_data, "logits_data.f32"), (&one_layer, "logits_range.f32"), (&from_gguf, "logits_gguf.f32")] {
        let want = common::read_f32(&dir.join(file));
        let got = logits(&model, Some(cv), &f.tokens);
        let d = common::max_abs_diff(&got, &want);
        eprintln!("{base} {file}: max |packlm - transformers| = {d:e}");
        assert!(d <= 1e-4, "{base} {file}: max-abs {d} from transformers");
        // The vector is load-bearing: without it the logits are far from the hooked ones.
        let without = common::max_abs_diff(&plain, &want);
        assert!(without > 0.1, "{base} {file}: no vector is only {without} away");
    }
    // One GGUF at scale 1 holds vectors.f32's rows 1.. exactly (llama.cpp's layout from layer 1).
    let a = ControlVector::open_gguf(&model, &[(dir.join("a.gguf"), 1.0)], 1, last).unwrap();
    for il in 1..=last {
        assert_eq!(bits(a.values(il).unwrap()), bits(&f.vectors[il * f.hidden..(il + 1) * f.hidden]), "layer {il}");
    }
    assert!(a.values(0).is_none());
    assert_eq!(bits(&logits(&model, Some(&a), &f.tokens)), bits(&logits(&model, Some(&ControlVector::from_data(&model, &f.vectors, f.hidden, 1, last).unwrap()), &f.tokens)));
}

#[test]
fn llama_control_vector_matches_transformers() {
    check_against_hf("llama");
}

#[test]
fn gemma3_control_vector_matches_transformers() {
    check_against_hf("gemma3");
}

/// A zero vector (all +0.0, or all -0.0) holds no layer and gives no vector's bits; so does a
/// vector whose only nonzero layer lies outside its range.
#[test]
fn zero_vector_gives_the_bits_of_none() {
    let model = Model::open(common::tiny("llama")).unwrap();
    let f = fixture("llama");
    let plain = logits(&model, None, &f.tokens);
    for zero in [0.0f32, -0.0] {
        let cv = ControlVector::from_data(&model, &vec![zero; f.n_layers * f.hidden], f.hidden, 0, f.n_layers - 1).unwrap();
        assert!(cv.layers().is_empty());
        assert_eq!(bits(&logits(&model, Some(&cv), &f.tokens)), bits(&plain), "zero {zero}");
    }
    let mut data = vec![0.0f32; f.n_layers * f.hidden];
    data[..f.hidden].copy_from_slice(&f.vectors[..f.hidden]);
    let cv = ControlVector::from_data(&model, &data, f.hidden, 1, f.n_layers - 1).unwrap();
    assert_eq!(bits(&logits(&model, Some(&cv), &f.tokens)), bits(&plain));
    // A snapshot of a session with a zero vector is one of no vector.
    let mut s = Session::new(&model, 0).unwrap();
    s.set_control_vector(Some(&cv)).unwrap();
    s.step_batch(&f.tokens[..5], Want::None).unwrap();
    let mut r = Session::new(&model, 0).unwrap();
    r.restore(&s.snapshot()).unwrap();
}

/// Batched == one at a time with a vector (and an adapter beside it); a snapshot restored into a
/// session with the same vector continues with fresh bits; another vector or none refuses it.
#[test]
fn control_vector_sessions_keep_the_invariants() {
    let model = Model::open(common::tiny("llama")).unwrap();
    let f = fixture("llama");
    let cv = ControlVector::from_data(&model, &f.vectors, f.hidden, 0, f.n_layers - 1).unwrap();
    let batch = logits(&model, Some(&cv), &f.tokens);
    let v = model.n_vocab();
    let mut s = Session::new(&model, 0).unwrap();
    s.set_control_vector(Some(&cv)).unwrap();
    for (i, &t) in f.tokens.iter().enumerate() {
        assert_eq!(bits(&s.step(t).unwrap()), bits(&batch[i * v..(i + 1) * v]), "row {i}: step != batch");
    }
    let mut s = Session::new(&model, 0).unwrap();
    s.set_control_vector(Some(&cv)).unwrap();
    s.step_batch(&f.tokens[..12], Want::None).unwrap();
    let snap = s.snapshot();
    let mut r = Session::new(&model, 0).unwrap();
    r.set_control_vector(Some(&cv)).unwrap();
    r.restore(&snap).unwrap();
    assert_eq!(bits(&r.step_batch(&f.tokens[12..], Want::All).unwrap()), bits(&batch[12 * v..]));
    let other = ControlVector::from_data(&model, &f.vectors, f.hidden, 1, 1).unwrap();
    for o in [Some(&other), None] {
        let mut o_s = Session::new(&model, 0).unwrap();
        o_s.set_control_vector(o).unwrap();
        let e = o_s.restore(&snap).unwrap_err();
        assert_eq!(e.status, Status::ErrSnapshot);
        assert!(e.message.contains("control vector"), "{}", e.message);
        assert_eq!(o_s.n_past(), 0);
    }
    // Changed on an empty session only; adapters and the vector are kept apart.
    let e = s.set_control_vector(None).unwrap_err();
    assert_eq!(e.status, Status::ErrInvalidArgument);
    assert!(e.message.contains("empty session"), "{}", e.message);
    s.truncate(0).unwrap();
    let a = Adapter::open(&model, common::tiny("lora_llama")).unwrap();
    s.set_adapters(&[(a.clone(), 1.0)]).unwrap();
    let both = s.step_batch(&f.tokens, Want::All).unwrap();
    s.truncate(0).unwrap();
    s.set_control_vector(None).unwrap();
    let adapter_only = s.step_batch(&f.tokens, Want::All).unwrap();
    let mut t = Session::new(&model, 0).unwrap();
    t.set_adapters(&[(a, 1.0)]).unwrap();
    assert_eq!(bits(&t.step_batch(&f.tokens, Want::All).unwrap()), bits(&adapter_only));
    assert!(common::max_abs_diff(&both, &adapter_only) > 0.1);
}

/// Sessions of one model with different vectors (and none): stepped alternately, and in one
/// shared pass (`step_many`), each gives the bits it gives alone.
#[test]
fn different_vectors_share_a_model_and_a_pass() {
    let model = Model::open(common::tiny("gemma3")).unwrap();
    let f = fixture("gemma3");
    let last = f.n_layers - 1;
    let dir = common::tiny("cvec_gemma3");
    let cvs = [
        Some(ControlVector::from_data(&model, &f.vectors, f.hidden, 0, last).unwrap()),
        None,
        Some(ControlVector::from_data(&model, &f.vectors, f.hidden, 2, 3).unwrap()),
        Some(ControlVector::open_gguf(&model, &[(dir.join("b.gguf"), 2.0)], 1, last).unwrap()),
    ];
    let alone: Vec<Vec<f32>> = cvs.iter().map(|c| logits(&model, c.as_ref(), &f.tokens)).collect();
    let v = model.n_vocab();
    let mut sessions: Vec<Session> = cvs
        .iter()
        .map(|c| {
            let mut s = Session::new(&model, 0).unwrap();
            s.set_control_vector(c.as_ref()).unwrap();
            s
        })
        .collect();
    for (i, &t) in f.tokens.iter().enumerate().take(8) {
        for (k, s) in sessions.iter_mut().enumerate() {
            assert_eq!(bits(&s.step(t).unwrap()), bits(&alone[k][i * v..(i + 1) * v]), "session {k} row {i} stepped alternately");
        }
    }
    let feeds: Vec<&[u32]> = vec![&f.tokens[8..12], &f.tokens[8..9], &f.tokens[8..15], &f.tokens[8..10]];
    let mut items: Vec<StepItem> = sessions.iter_mut().zip(&feeds).map(|(s, t)| StepItem { session: s, tokens: t, want: Want::All }).collect();
    let out = Session::step_many(&mut items).unwrap();
    for (k, (l, t)) in out.iter().zip(&feeds).enumerate() {
        assert_eq!(bits(l), bits(&alone[k][8 * v..(8 + t.len()) * v]), "session {k} in a shared pass");
    }
}

/// One thread and two give the same bits with a vector.
#[test]
fn control_vector_logits_do_not_depend_on_threads() {
    let f = fixture("gemma3");
    let run = |threads: usize| {
        let model = Model::open_with(common::tiny("gemma3"), &OpenOptions::default().threads(threads)).unwrap();
        let cv = ControlVector::from_data(&model, &f.vectors, f.hidden, 0, f.n_layers - 1).unwrap();
        logits(&model, Some(&cv), &f.tokens)
    };
    assert_eq!(bits(&run(2)), bits(&run(1)));
}

/// A GGUF tensor to write: name, ggml type (0 f32, 1 f16), dims (ggml order), bytes.
type RawTensor<'a> = (&'a str, u32, Vec<u64>, Vec<u8>);
/// A bad GGUF case: file name, general.architecture, tensors, the status, words of the message.
type BadFile<'a> = (&'a str, &'a str, Vec<RawTensor<'a>>, Status, Vec<&'a str>);

fn write_gguf(path: &std::path::Path, arch: &str, tensors: &[RawTensor]) {
    // GGUF v3 (ggml's gguf.h): magic, version, tensor count, kv count; one string kv
    // (general.architecture); tensor infos (name, n_dims, dims, type, offset); data at 32 bytes.
    let mut b = Vec::new();
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    let s = |b: &mut Vec<u8>, x: &str| {
        b.extend_from_slice(&(x.len() as u64).to_le_bytes());
        b.extend_from_slice(x.as_bytes());
    };
    s(&mut b, "general.architecture");
    b.extend_from_slice(&8u32.to_le_bytes()); // GGUF_TYPE_STRING
    s(&mut b, arch);
    let mut off = 0u64;
    for (name, ty, dims, data) in tensors {
        s(&mut b, name);
        b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(&off.to_le_bytes());
        off += (data.len() as u64).div_ceil(32) * 32;
    }
    while b.len() % 32 != 0 {
        b.push(0);
    }
    for (_, _, _, data) in tensors {
        b.extend_from_slice(data);
        while b.len() % 32 != 0 {
            b.push(0);
        }
    }
    std::fs::write(path, b).unwrap();
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Bad vectors: wrong width, wrong length, a range past the layers, non-finite values; GGUFs
/// that are not control vectors, for another hidden size, for layer 0 or a layer the model
/// lacks; a vector of another model handle. Each refused naming what was wrong, the session
/// unchanged.
#[test]
fn bad_control_vectors_are_refused() {
    let model = Model::open(common::tiny("llama")).unwrap();
    let f = fixture("llama");
    let (n, h) = (f.n_layers, f.hidden);
    let check = |r: packlm::Result<ControlVector>, status: Status, words: &[&str]| {
        let e = r.unwrap_err();
        assert_eq!(e.status, status, "{}", e.message);
        for w in words {
            assert!(e.message.contains(w), "{:?} lacks {w:?}", e.message);
        }
    };
    check(ControlVector::from_data(&model, &f.vectors, h + 1, 0, n - 1), Status::ErrInvalidArgument, &["width 65", "hidden size is 64"]);
    check(ControlVector::from_data(&model, &f.vectors[..h], h, 0, n - 1), Status::ErrInvalidArgument, &["64 floats", "2 layers x 64 = 128"]);
    check(ControlVector::from_data(&model, &f.vectors, h, 0, 2), Status::ErrInvalidArgument, &["0..=2", "0..=1"]);
    check(ControlVector::from_data(&model, &f.vectors, h, 1, 0), Status::ErrInvalidArgument, &["1..=0"]);
    let mut nan = f.vectors.clone();
    nan[h + 3] = f32::NAN;
    check(ControlVector::from_data(&model, &nan, h, 0, n - 1), Status::ErrNonFinite, &["layer 1, element 3"]);

    let dir = std::env::temp_dir().join(format!("packlm-cvec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = f32_bytes(&f.vectors[h..]);
    let cases: Vec<BadFile> = vec![
        ("arch.gguf", "llama", vec![("direction.1", 0, vec![h as u64], good.clone())], Status::ErrFormat, vec!["\"llama\"", "not a control vector"]),
        ("empty.gguf", "controlvector", vec![], Status::ErrFormat, vec!["no direction.N"]),
        ("name.gguf", "controlvector", vec![("blk.1.weight", 0, vec![h as u64], good.clone())], Status::ErrFormat, vec!["blk.1.weight"]),
        ("width.gguf", "controlvector", vec![("direction.1", 0, vec![32], good[..128].to_vec())], Status::ErrTensor, vec!["direction.1", "32 values", "hidden size is 64"]),
        ("layer0.gguf", "controlvector", vec![("direction.0", 0, vec![h as u64], good.clone())], Status::ErrTensor, vec!["direction.0", "layer 0"]),
        ("layer2.gguf", "controlvector", vec![("direction.2", 0, vec![h as u64], good.clone())], Status::ErrTensor, vec!["direction.2", "layer 2"]),
        ("f16.gguf", "controlvector", vec![("direction.1", 1, vec![h as u64], good[..128].to_vec())], Status::ErrTensor, vec!["direction.1", "f32"]),
        ("inf.gguf", "controlvector", vec![("direction.1", 0, vec![h as u64], f32_bytes(&[f32::INFINITY; 64]))], Status::ErrNonFinite, vec!["direction.1", "inf"]),
    ];
    for (file, arch, tensors, status, words) in cases {
        let p = dir.join(file);
        write_gguf(&p, arch, &tensors);
        check(ControlVector::open_gguf(&model, &[(&p, 1.0)], 1, n - 1), status, &words);
    }
    let a = common::tiny("cvec_llama").join("a.gguf");
    check(ControlVector::open_gguf(&model, &[(&a, f32::NAN)], 1, n - 1), Status::ErrInvalidArgument, &["scale NaN"]);
    check(ControlVector::open_gguf(&model, &[(&a, 1.0)], 1, 5), Status::ErrInvalidArgument, &["1..=5"]);
    check(ControlVector::open_gguf::<&std::path::Path>(&model, &[], 1, 1), Status::ErrInvalidArgument, &["no control vector files"]);
    // gemma3's vectors have the same width but more layers: direction.2 is past llama's.
    check(ControlVector::open_gguf(&model, &[(common::tiny("cvec_gemma3").join("a.gguf"), 1.0)], 1, n - 1), Status::ErrTensor, &["direction.2"]);
    std::fs::remove_dir_all(&dir).unwrap();

    let model2 = Model::open(common::tiny("llama")).unwrap();
    let cv2 = ControlVector::from_data(&model2, &f.vectors, h, 0, n - 1).unwrap();
    let mut s = Session::new(&model, 0).unwrap();
    let e = s.set_control_vector(Some(&cv2)).unwrap_err();
    assert_eq!(e.status, Status::ErrInvalidArgument);
    assert!(e.message.contains("another model"), "{}", e.message);
}
