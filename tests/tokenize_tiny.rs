//! Tokenization of an HF folder against the ids HF transformers gives
//! (tests/fixtures/tiny/golden_tokenize.json).

mod common;

use common::*;

#[test]
fn folder_tokenizer_matches_hf() {
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("tiny/golden_tokenize.json")).unwrap()).unwrap();
    let m = open(&tiny("llama"));
    let ids = |v: &serde_json::Value| -> Vec<u32> { v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect() };
    let cases = j["cases"].as_array().unwrap();
    assert!(cases.len() >= 5);
    for c in cases {
        let text = c["text"].as_str().unwrap();
        assert_eq!(m.vocab().encode(text, true, true).unwrap(), ids(&c["ids_add_special"]), "add_special: {text:?}");
        assert_eq!(m.vocab().encode(text, false, true).unwrap(), ids(&c["ids_no_special"]), "no_special: {text:?}");
        if let Some(d) = c["decoded_no_special"].as_str() {
            assert_eq!(m.vocab().decode(&ids(&c["ids_no_special"]), false).unwrap(), d, "decode: {text:?}");
        }
    }
}
