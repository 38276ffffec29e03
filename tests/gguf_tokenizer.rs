//! The tokenizer rebuilt from GGUF metadata against ids recorded from HF transformers loading the
//! same GGUF (tests/fixtures/make_gguf_tokenizer_vectors.py writes the fixtures).

use packlm::error::Status;
use packlm::pack::gguf::GgufFile;
use packlm::pack::gguf_tokenizer::{vocab_from_gguf, GgufVocab};
use serde_json::Value;

mod common;

use common::{fixtures, ids, smollm2};

fn fixture(name: &str) -> Value {
    common::fixture_json(&format!("gguf/{name}"))
}

/// Every case of a fixture file: ids with special parsing on and off, with the post-processor's
/// specials, and both decodes.
fn check_cases(vocab: &GgufVocab, fx: &Value) {
    let mut tok = vocab.tokenizer.clone();
    for case in fx["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        tok.set_encode_special_tokens(false);
        let got = tok.encode(text, false).unwrap().get_ids().to_vec();
        assert_eq!(got, ids(&case["ids"]), "ids of {text:?}");
        let got = tok.encode(text, true).unwrap().get_ids().to_vec();
        assert_eq!(got, ids(&case["ids_add_special"]), "ids with specials of {text:?}");
        tok.set_encode_special_tokens(true);
        let got = tok.encode(text, false).unwrap().get_ids().to_vec();
        assert_eq!(got, ids(&case["ids_split_special"]), "ids without special parsing of {text:?}");
        let want = ids(&case["ids"]);
        assert_eq!(tok.decode(&want, false).unwrap(), case["decoded"].as_str().unwrap(), "decode of {text:?}");
        assert_eq!(
            tok.decode(&want, true).unwrap(),
            case["decoded_skip_special"].as_str().unwrap(),
            "decode skipping specials of {text:?}"
        );
    }
}

#[test]
fn smollm2_ids_match_hf_transformers() {
    let Some(path) = smollm2() else { return };
    let g = GgufFile::open(&path).unwrap();
    let vocab = vocab_from_gguf(&g).unwrap();
    let fx = fixture("smollm2_tokens.json");
    assert_eq!(fx["sha256"], "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53");
    assert_eq!(vocab.tokenizer.get_vocab_size(true) as u64, fx["vocab_size"].as_u64().unwrap());
    check_cases(&vocab, &fx);
}

#[test]
fn smollm2_special_ids() {
    let Some(path) = smollm2() else { return };
    let g = GgufFile::open(&path).unwrap();
    let vocab = vocab_from_gguf(&g).unwrap();
    // tokenizer.ggml.* as gguf-py reads them: bos 1 "<|im_start|>", eos 2 "<|im_end|>", padding 2,
    // add_bos_token false, no eot key.
    assert_eq!((vocab.bos, vocab.eos, vocab.eot, vocab.pad), (Some(1), Some(2), None, Some(2)));
    assert!(!vocab.add_bos && !vocab.add_eos);
    assert_eq!(vocab.tokenizer.id_to_token(1).as_deref(), Some("<|im_start|>"));
    assert_eq!(vocab.tokenizer.id_to_token(2).as_deref(), Some("<|im_end|>"));
    let template = vocab.chat_template.as_deref().unwrap();
    assert_eq!(template.len(), 368);
    assert!(template.starts_with("{% for message in messages %}"));
    // the 17 control tokens (ids 0..=16) are special added tokens
    let added = vocab.tokenizer.get_added_tokens_decoder();
    assert_eq!(added.len(), 17);
    assert!((0..17).all(|id| added.get(&id).is_some_and(|t| t.special)));
}

#[test]
fn smollm2_vocab_merges_no_digits() {
    // Why the "smollm" split (each numeric character alone, then GPT-2's regex) gives HF's ids
    // although HF 5.24 splits with GPT-2's regex alone: the two differ only inside runs of
    // numeric characters (optionally after a space), and no merge in this vocabulary joins a
    // numeric character to anything else.
    let Some(path) = smollm2() else { return };
    let g = GgufFile::open(&path).unwrap();
    // GPT-2 bytes_to_unicode, inverted: printable Latin-1 stands for itself, the rest from U+0100.
    let mut byte_of = std::collections::HashMap::new();
    let mut shifted = 0u32;
    for b in 0..=255u8 {
        let code = if matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF) {
            b as u32
        } else {
            shifted += 1;
            255 + shifted
        };
        byte_of.insert(char::from_u32(code).unwrap(), b);
    }
    let merges = g.get_array("tokenizer.ggml.merges").unwrap().unwrap();
    let mut checked = 0;
    for m in merges {
        let m = m.as_str().unwrap();
        let bytes: Vec<u8> = m.chars().filter(|&c| c != ' ').map(|c| byte_of[&c]).collect();
        let text = String::from_utf8_lossy(&bytes);
        for c in text.chars().filter(|c| c.is_numeric()) {
            assert_eq!(c.len_utf8(), bytes.len(), "merge {m:?} joins the numeric {c:?} to something");
            checked += 1;
        }
    }
    assert!(checked > 0, "no merge builds a multi-byte numeric character at all?");
}

/// Fixtures for synthetic SentencePiece GGUFs made by make_gguf_tokenizer_vectors.py.
fn spm_case(gguf: &str, json: &str) {
    let path = fixtures().join("gguf").join(gguf);
    let g = GgufFile::open(&path).unwrap();
    let vocab = vocab_from_gguf(&g).unwrap();
    let fx = fixture(json);
    assert_eq!(vocab.tokenizer.get_vocab_size(true) as u64, fx["vocab_size"].as_u64().unwrap(), "{gguf}");
    assert_eq!(vocab.bos.map(u64::from), fx["bos_token_id"].as_u64(), "{gguf}");
    assert_eq!(vocab.eos.map(u64::from), fx["eos_token_id"].as_u64(), "{gguf}");
    assert_eq!(vocab.add_bos, fx["add_bos_token"].as_bool().unwrap(), "{gguf}");
    check_cases(&vocab, &fx);
}

#[test]
fn spm_llama_ids_match_hf_transformers() {
    spm_case("spm_llama.gguf", "spm_llama_tokens.json");
}

#[test]
fn spm_gemma3_ids_match_hf_transformers() {
    spm_case("spm_gemma3.gguf", "spm_gemma3_tokens.json");
}

/// A "gemma4" vocabulary (llama.cpp's Gemma4 converter: the tokens as written and their merges):
/// HF's `GemmaTokenizer` over the file's merges, and no BOS though the file asks for one.
#[test]
fn spm_gemma4_ids_match_hf_transformers() {
    spm_case("spm_gemma4.gguf", "spm_gemma4_tokens.json");
}

fn open_fixture(name: &str) -> GgufFile {
    GgufFile::open(&fixtures().join("gguf").join(name)).unwrap()
}

#[test]
fn unknown_model_and_pre_are_err_unsupported() {
    let mut g = open_fixture("spm_llama.gguf");
    g.metadata.insert("tokenizer.ggml.model".into(), packlm::pack::gguf::GgufValue::Str("rwkv".into()));
    let e = vocab_from_gguf(&g).unwrap_err();
    assert_eq!(e.status, Status::ErrUnsupported, "{e}");
    assert!(e.message.contains("rwkv"), "{e}");

    let Some(path) = smollm2() else { return };
    let mut g = GgufFile::open(&path).unwrap();
    g.metadata.insert("tokenizer.ggml.pre".into(), packlm::pack::gguf::GgufValue::Str("mystery-bpe".into()));
    let e = vocab_from_gguf(&g).unwrap_err();
    assert_eq!(e.status, Status::ErrUnsupported, "{e}");
    assert!(e.message.contains("mystery-bpe") && e.message.contains("tokenizer.ggml.pre"), "{e}");
}

#[test]
fn bad_tokenizer_metadata_is_err_format() {
    use packlm::pack::gguf::GgufValue as V;
    let cases: Vec<(&str, V, &str)> = vec![
        ("tokenizer.ggml.bos_token_id", V::U32(1_000_000), "tokenizer.ggml.bos_token_id"),
        ("tokenizer.ggml.eos_token_id", V::Str("2".into()), "tokenizer.ggml.eos_token_id"),
        ("tokenizer.ggml.token_type", V::Array(vec![V::I32(1)]), "tokenizer.ggml.token_type"),
        ("tokenizer.ggml.scores", V::Array(vec![V::Str("x".into())]), "tokenizer.ggml.scores[0]"),
        ("tokenizer.ggml.tokens", V::Array(vec![]), "tokenizer.ggml.tokens"),
        ("tokenizer.ggml.tokens", V::U8(3), "tokenizer.ggml.tokens"),
        ("tokenizer.ggml.add_bos_token", V::U8(1), "tokenizer.ggml.add_bos_token"),
        ("tokenizer.ggml.merges", V::Array(vec![V::Str("nospace".into())]), "tokenizer.ggml.merges[0]"),
        ("tokenizer.ggml.merges", V::Array(vec![V::Str("a zzz-not-a-token".into())]), "tokenizer.ggml.merges"),
    ];
    for (key, value, needle) in cases {
        let mut g = open_fixture("spm_llama.gguf");
        g.metadata.insert(key.into(), value);
        let e = vocab_from_gguf(&g).unwrap_err();
        assert_eq!(e.status, Status::ErrFormat, "{key}: {e}");
        assert!(e.message.contains(needle), "{key}: {e}");
    }
    let mut g = open_fixture("spm_llama.gguf");
    g.metadata.remove("tokenizer.ggml.tokens");
    let e = vocab_from_gguf(&g).unwrap_err();
    assert!(e.status == Status::ErrFormat && e.message.contains("tokenizer.ggml.tokens"), "{e}");
}
