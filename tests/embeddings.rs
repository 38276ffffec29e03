//! Embeddings against sentence-transformers (tests/fixtures/make_embed_fixtures.py): an
//! EmbeddingGemma-shaped gemma3_text (bidirectional attention, a sliding window both ways, mean
//! pooling, two Dense layers, Normalize) and a Qwen3 with last-token pooling, each within 1e-4
//! (max-abs, f32) of `SentenceTransformer.encode` on the same texts and tokens; batched ==
//! one at a time, bit for bit; the pack's declaration read; bad packs refused by name.

mod common;

use std::path::Path;

use packlm::{EmbedOptions, Model, Pooling, Session, Status};
use serde_json::Value;

struct Expected {
    texts: Vec<String>,
    tokens: Vec<Vec<u32>>,
    embeddings: Vec<Vec<f32>>,
    token_text: usize,
    token_embeddings: Vec<Vec<f32>>,
}

fn expected(dir: &Path) -> Expected {
    let v: Value = serde_json::from_slice(&std::fs::read(dir.join("embeddings.json")).unwrap()).unwrap();
    let list = |k: &str| v[k].as_array().unwrap().clone();
    let floats = |r: &Value| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    Expected {
        texts: list("texts").iter().map(|t| t.as_str().unwrap().to_string()).collect(),
        tokens: list("tokens").iter().map(common::ids).collect(),
        embeddings: list("embeddings").iter().map(floats).collect(),
        token_text: v["token_embeddings_text_index"].as_u64().unwrap() as usize,
        token_embeddings: list("token_embeddings").iter().map(floats).collect(),
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The pack's own pooling and Dense layers reproduce sentence-transformers' encode, the
/// tokenizer gives its token ids, per-token vectors are its token_embeddings, and a batch of
/// every text gives each text's bits alone.
fn check_against_st(name: &str, pooling: Pooling) {
    let dir = common::tiny(name);
    let e = expected(&dir);
    let model = Model::open(&dir).unwrap();
    assert_eq!(
        model.embedding_defaults().unwrap(),
        (pooling, true),
        "{name}: the pack's declaration"
    );
    assert_eq!(model.embedding_dim(pooling), e.embeddings[0].len());
    for (t, want) in e.texts.iter().zip(&e.tokens) {
        assert_eq!(
            &model.tokenize(t, true, false).unwrap(),
            want,
            "{name}: tokens of {t:?}"
        );
    }
    let mut s = Session::new(&model, 0).unwrap();
    let texts: Vec<&[u32]> = e.tokens.iter().map(|t| t.as_slice()).collect();
    let batch = s.embed(&texts, &EmbedOptions::default()).unwrap();
    assert_eq!(
        (batch.rows(), batch.pooling, batch.normalized),
        (texts.len(), pooling, true)
    );
    for (i, want) in e.embeddings.iter().enumerate() {
        let d = common::max_abs_diff(batch.row(i), want);
        eprintln!("{name} text {i}: max |packlm - sentence-transformers| = {d:e}");
        assert!(
            d <= 1e-4,
            "{name} text {i}: max-abs {d} from sentence-transformers"
        );
        let alone = s.embed(&texts[i..=i], &EmbedOptions::default()).unwrap();
        assert_eq!(
            bits(alone.row(0)),
            bits(batch.row(i)),
            "{name} text {i}: batched != alone"
        );
    }
    // Reversed order: the same bits per text.
    let rev: Vec<&[u32]> = texts.iter().rev().copied().collect();
    let r = s.embed(&rev, &EmbedOptions::default()).unwrap();
    for i in 0..texts.len() {
        assert_eq!(bits(r.row(texts.len() - 1 - i)), bits(batch.row(i)));
    }
    let none = s
        .embed(
            &texts[e.token_text..=e.token_text],
            &EmbedOptions {
                pooling: Some(Pooling::None),
                normalize: None,
            },
        )
        .unwrap();
    assert_eq!(none.rows(), e.token_embeddings.len());
    assert!(!none.normalized);
    for (j, want) in e.token_embeddings.iter().enumerate() {
        let d = common::max_abs_diff(none.row(j), want);
        assert!(
            d <= 1e-4,
            "{name} token {j}: max-abs {d} from token_embeddings"
        );
    }
    assert_eq!(
        s.n_past(),
        0,
        "embedding leaves the session's positions alone"
    );
}

#[test]
fn embedding_gemma_matches_sentence_transformers() {
    check_against_st("embed_gemma3", Pooling::Mean);
}

#[test]
fn qwen3_last_token_matches_sentence_transformers() {
    check_against_st("embed_qwen3", Pooling::Last);
}

/// A bidirectional model has no next-token logits: steps are refused, naming why.
#[test]
fn bidirectional_model_refuses_steps() {
    let model = Model::open(common::tiny("embed_gemma3")).unwrap();
    assert!(!model.is_causal());
    let mut s = Session::new(&model, 0).unwrap();
    let e = s.step(5).unwrap_err();
    assert_eq!(e.status, Status::ErrUnsupported);
    assert!(e.message.contains("bidirectional"), "{}", e.message);
    assert_eq!(s.n_past(), 0);
}

/// Pooling by request: cls is the first token vector, last the last, mean their mean; the
/// normalize flag is honoured; each matches the per-token rows.
#[test]
fn poolings_agree_with_token_vectors() {
    let model = Model::open(common::tiny("embed_qwen3")).unwrap();
    let mut s = Session::new(&model, 0).unwrap();
    let text: &[u32] = &[282, 222, 69, 80, 72, 268, 296, 70];
    let raw = EmbedOptions {
        pooling: Some(Pooling::None),
        normalize: Some(false),
    };
    let toks = s.embed(&[text], &raw).unwrap();
    let first = s
        .embed(
            &[text],
            &EmbedOptions {
                pooling: Some(Pooling::Cls),
                normalize: Some(false),
            },
        )
        .unwrap();
    let last = s
        .embed(
            &[text],
            &EmbedOptions {
                pooling: Some(Pooling::Last),
                normalize: Some(false),
            },
        )
        .unwrap();
    let mean = s
        .embed(
            &[text],
            &EmbedOptions {
                pooling: Some(Pooling::Mean),
                normalize: Some(false),
            },
        )
        .unwrap();
    assert_eq!(bits(first.row(0)), bits(toks.row(0)));
    assert_eq!(bits(last.row(0)), bits(toks.row(text.len() - 1)));
    for c in 0..toks.dim {
        let m: f32 = (0..text.len()).map(|r| toks.row(r)[c]).sum::<f32>() / text.len() as f32;
        assert!((m - mean.row(0)[c]).abs() <= 1e-6);
    }
    let n = s
        .embed(
            &[text],
            &EmbedOptions {
                pooling: Some(Pooling::Last),
                normalize: Some(true),
            },
        )
        .unwrap();
    let norm: f32 = n.row(0).iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
    let scale = last.row(0).iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!(
        common::max_abs_diff(
            &n.row(0).iter().map(|x| x * scale).collect::<Vec<_>>(),
            last.row(0)
        ) < 1e-5
    );
}

/// Bad calls: no texts, an empty text, a token beyond the vocabulary, a text longer than the
/// context; each a specific status naming the text.
#[test]
fn bad_texts_are_refused() {
    let model = Model::open(common::tiny("embed_qwen3")).unwrap();
    let mut s = Session::new(&model, 8).unwrap();
    let o = EmbedOptions::default();
    assert_eq!(
        s.embed(&[], &o).unwrap_err().status,
        Status::ErrInvalidArgument
    );
    let e = s.embed(&[&[1, 2], &[]], &o).unwrap_err();
    assert_eq!(e.status, Status::ErrInvalidArgument);
    assert!(e.message.contains("text 1"), "{}", e.message);
    let e = s.embed(&[&[1, 100_000]], &o).unwrap_err();
    assert_eq!(e.status, Status::ErrTokenOutOfRange);
    let e = s.embed(&[&[1; 9]], &o).unwrap_err();
    assert_eq!(e.status, Status::ErrContextOverflow);
}

/// Copies a fixture folder to a scratch folder for a test that breaks it.
fn scratch_copy(name: &str, tag: &str) -> std::path::PathBuf {
    let src = common::tiny(name);
    let dst = std::env::temp_dir().join(format!("packlm-embed-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dst);
    copy_dir(&src, &dst);
    dst
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), to).unwrap();
        }
    }
}

/// Opens a copy of `name` with `file` written as `text` (or removed when None): the open fails
/// with `status`, naming each of `names`.
fn refused(name: &str, file: &str, text: Option<&str>, status: Status, names: &[&str]) {
    let d = scratch_copy(name, &file.replace('/', "_"));
    match text {
        Some(t) => std::fs::write(d.join(file), t).unwrap(),
        None => std::fs::remove_file(d.join(file)).unwrap(),
    }
    let e = Model::open(&d).unwrap_err();
    std::fs::remove_dir_all(&d).unwrap();
    assert_eq!(e.status, status, "{file}: {}", e.message);
    for n in names {
        assert!(e.message.contains(n), "{file}: {n:?} not in {:?}", e.message);
    }
}

/// A missing Dense weight file, a pooling packlm does not compute, prompts left out of the
/// pooling, an unknown activation and Dense layers that do not chain are refused at open,
/// naming the file.
#[test]
fn bad_sentence_transformers_files_are_refused() {
    refused("embed_gemma3", "3_Dense/model.safetensors", None, Status::ErrIo, &["3_Dense", "model.safetensors"]);
    refused("embed_gemma3", "1_Pooling/config.json", Some(r#"{"pooling_mode": "max"}"#), Status::ErrUnsupported, &["\"max\"", "1_Pooling"]);
    refused("embed_gemma3", "1_Pooling/config.json", Some(r#"{"pooling_mode": "mean", "include_prompt": false}"#), Status::ErrUnsupported, &["include_prompt"]);
    let gelu = r#"{"in_features": 64, "out_features": 96, "bias": false, "activation_function": "torch.nn.modules.activation.GELU"}"#;
    refused("embed_gemma3", "2_Dense/config.json", Some(gelu), Status::ErrUnsupported, &["GELU", "2_Dense"]);
    let square = r#"{"in_features": 64, "out_features": 64, "bias": false, "activation_function": "torch.nn.modules.linear.Identity"}"#;
    refused("embed_gemma3", "3_Dense/config.json", Some(square), Status::ErrTensor, &["linear.weight", "3_Dense"]);
}

/// Any thread count gives one thread's bits.
#[test]
fn embeddings_do_not_depend_on_threads() {
    let dir = common::tiny("embed_gemma3");
    let e = expected(&dir);
    let texts: Vec<&[u32]> = e.tokens.iter().map(|t| t.as_slice()).collect();
    let run = |threads: usize| {
        let model = Model::open_with(&dir, &packlm::OpenOptions::default().threads(threads)).unwrap();
        Session::new(&model, 0).unwrap().embed(&texts, &EmbedOptions::default()).unwrap().values
    };
    let one = run(1);
    for t in [2, 3] {
        assert_eq!(bits(&run(t)), bits(&one), "{t} threads");
    }
}

/// A base model's save (EmbeddingGemma's checkpoint is a Gemma3TextModel's: no `model.` prefix
/// on its tensor names) opens and gives the prefixed fixture's bits.
#[test]
fn a_base_model_save_without_the_model_prefix_opens() {
    let d = scratch_copy("embed_gemma3", "noprefix");
    let bytes = std::fs::read(d.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let renamed: Vec<(String, safetensors::tensor::TensorView)> =
        st.tensors().into_iter().map(|(n, t)| (n.strip_prefix("model.").unwrap_or(&n).to_string(), t)).collect();
    assert!(renamed.iter().all(|(n, _)| !n.starts_with("model.")) && renamed.iter().any(|(n, _)| n == "layers.0.self_attn.q_proj.weight"));
    safetensors::serialize_to_file(renamed, None, &d.join("model.safetensors")).unwrap();
    let e = expected(&common::tiny("embed_gemma3"));
    let texts: Vec<&[u32]> = e.tokens.iter().map(|t| t.as_slice()).collect();
    let run = |dir: &Path| {
        let m = Model::open(dir).unwrap();
        Session::new(&m, 0).unwrap().embed(&texts, &EmbedOptions::default()).unwrap().values
    };
    let got = run(&d);
    std::fs::remove_dir_all(&d).unwrap();
    assert_eq!(bits(&got), bits(&run(&common::tiny("embed_gemma3"))));
}
