//! packlm's tokenizer against llama.cpp's own on the same GGUF: for every case of
//! tests/fixtures/llama_cpp/tokens.json (recorded with llama-cpp-python 0.3.36's libllama by
//! tests/fixtures/llama_cpp/make_token_fixtures.py), `Vocab::encode(text, add_bos, special)`
//! gives llama.cpp's ids, and `Vocab::token_bytes` gives each of its tokens' bytes
//! (`llama_token_to_piece`, special false and true). A case the fixture records as a known
//! difference ("packlm": packlm never adds a second BOS) gets packlm's ids by that rule.

mod common;

use common::*;
use serde_json::Value;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn fixture() -> Value {
    let p = fixtures().join("llama_cpp/tokens.json");
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn check_model(path: &std::path::Path) -> usize {
    let all = fixture();
    let name = path.file_name().unwrap().to_str().unwrap();
    let fx = &all["models"][name];
    assert_eq!(
        std::fs::metadata(path).unwrap().len(),
        fx["size"].as_u64().unwrap(),
        "{name} is not the GGUF tokens.json was recorded from"
    );
    let m = open(path);
    let v = m.vocab();
    assert_eq!(v.bos.map(i64::from), fx["bos"].as_i64(), "{name}: BOS id");
    assert_eq!(v.add_bos, fx["add_bos"].as_bool().unwrap(), "{name}: add_bos");
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 60, "{name}: the fixture has {} cases", cases.len());
    let mut failures = Vec::new();
    let mut known = 0;
    for c in cases {
        let text = c["text"].as_str().unwrap();
        let add_bos = c["add_bos"].as_bool().unwrap();
        let special = c["special"].as_bool().unwrap();
        let want: Vec<u32> = c["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        let what = format!("{name}: {text:?} add_bos={add_bos} special={special}");
        let got = v.encode(text, add_bos, special).unwrap();
        // A recorded difference: packlm's ids by its own stated rule, which llama.cpp's are not.
        if let Some(diff) = c.get("packlm") {
            let ours: Vec<u32> = diff["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            assert!(!diff["reason"].as_str().unwrap().is_empty() && ours != want, "{what}: a known difference without a reason or a difference");
            known += 1;
            if got != ours {
                failures.push(format!("{what}: ids {got:?} != packlm's rule {ours:?} ({})", diff["reason"]));
            }
        } else if got != want {
            failures.push(format!("{what}: ids {got:?} != llama.cpp's {want:?}"));
        }
        for (render, key) in [(false, "pieces"), (true, "pieces_special")] {
            let pieces: Vec<Vec<u8>> = c[key].as_array().unwrap().iter().map(|h| hex(h.as_str().unwrap())).collect();
            for (&id, piece) in want.iter().zip(&pieces) {
                let got = v.token_bytes(id, render).unwrap();
                if &got != piece {
                    failures.push(format!("{what}: token {id} bytes (special={render}) {got:?} != llama.cpp's {piece:?}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} differences from llama.cpp:\n{}", failures.len(), failures.join("\n"));
    known
}

#[test]
fn smollm2_ids_and_pieces_equal_llama_cpp() {
    let Some(p) = smollm2() else { return };
    // SmolLM2's GGUF adds no BOS: nothing differs.
    assert_eq!(check_model(&p), 0);
}

#[test]
fn gemma3_ids_and_pieces_equal_llama_cpp() {
    let Some(p) = gemma3_270m() else { return };
    // One recorded difference: "<bos>..." with add_bos and special, where llama.cpp gives two
    // BOS and packlm one.
    assert_eq!(check_model(&p), 1);
}
