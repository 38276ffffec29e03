//! Each token's raw bytes and kind (`Vocab::token_bytes`, `Vocab::token_kind`), what
//! llama.cpp's `llama_token_to_piece` gives: pieces of a text, joined, are the text's UTF-8
//! even where one character spans several tokens; control tokens show only when asked.

mod common;

use common::*;

const TEXT: &str = "naïve café, 東京, emoji 😀 — ok";

fn joined(m: &packlm::engine::Model, ids: &[u32]) -> Vec<u8> {
    ids.iter().flat_map(|&t| m.vocab().token_bytes(t, false).unwrap()).collect()
}

#[test]
fn smollm2_byte_level_pieces_join_to_the_text() {
    let Some(p) = smollm2() else { return };
    let m = open(&p);
    assert!(m.vocab().is_byte_level());
    let ids = m.vocab().encode(TEXT, false, false).unwrap();
    assert_eq!(joined(&m, &ids), TEXT.as_bytes());
    // The emoji's four bytes are split over byte-level tokens: none of them alone is UTF-8.
    assert!(ids.iter().any(|&t| std::str::from_utf8(&m.vocab().token_bytes(t, false).unwrap()).is_err()));
    // "Ġ" is GPT-2's stand-in for the space byte.
    let space = m.vocab().encode(" a", false, false).unwrap();
    assert_eq!(m.vocab().token_bytes(space[0], false).unwrap()[0], b' ');
    let im_start = m.vocab().encode("<|im_start|>", false, true).unwrap();
    assert_eq!(im_start.len(), 1);
    assert_eq!(m.vocab().token_kind(im_start[0]), Some(packlm::pack::vocab::TokenKind::Control));
    assert_eq!(m.vocab().token_bytes(im_start[0], false).unwrap(), b"");
    assert_eq!(m.vocab().token_bytes(im_start[0], true).unwrap(), b"<|im_start|>");
}

#[test]
fn gemma3_sentencepiece_pieces_join_to_the_text() {
    let Some(p) = gemma3_270m() else { return };
    let m = open(&p);
    assert!(!m.vocab().is_byte_level());
    let ids = m.vocab().encode(TEXT, false, false).unwrap();
    assert_eq!(joined(&m, &ids), TEXT.as_bytes());
    // A byte-fallback token gives its one byte.
    let byte = (0..m.vocab().size as u32).find(|&t| m.vocab().token_text(t).as_deref() == Some("<0xF0>")).expect("Gemma has byte tokens");
    assert_eq!(m.vocab().token_kind(byte), Some(packlm::pack::vocab::TokenKind::Byte));
    assert_eq!(m.vocab().token_bytes(byte, false).unwrap(), vec![0xF0]);
    // "▁" is SentencePiece's space.
    let word = m.vocab().encode(" hello", false, false).unwrap();
    assert_eq!(m.vocab().token_bytes(word[0], false).unwrap()[0], b' ');
    let bos = m.vocab().bos.unwrap();
    assert_eq!(m.vocab().token_bytes(bos, false).unwrap(), b"");
    assert_eq!(m.vocab().token_bytes(bos, true).unwrap(), b"<bos>");
    assert!(m.vocab().token_bytes(m.vocab().size as u32, false).is_err());
}
