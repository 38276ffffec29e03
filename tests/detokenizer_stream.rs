//! The streaming detokenizer through its C calls (packlm_detokenizer_*), on a byte-level BPE
//! vocabulary (SmolLM2 GGUF) and a byte-fallback SentencePiece one (Gemma3 GGUF): fed one token
//! at a time, every output is valid UTF-8, and the outputs plus the flush equal
//! packlm_detokenize of the same tokens byte for byte.

mod common;

use std::ffi::{c_char, CString};
use std::path::Path;
use std::ptr;

use common::*;
use packlm::ffi::model::{packlm_model, packlm_model_free, packlm_model_open};
use packlm::ffi::stream::*;
use packlm::ffi::text::{packlm_detokenize, packlm_token_to_piece, packlm_tokenize, PACKLM_DETOKENIZE_SKIP_SPECIAL, PACKLM_TOKENIZE_PARSE_SPECIAL};

const OK: u32 = 0;

/// Emoji (4-byte, with a skin-tone modifier and a ZWJ sequence), combining marks, CJK, mixed.
const TEXTS: &[&str] = &[
    "Hello 😀👍🏽 and 👩‍💻 done",
    "e\u{0301}cole, n\u{0303}, a\u{0308}\u{0323}, Z\u{0351}\u{0324}",
    "日本語の文章を書きます。中文字符，한국어 텍스트",
    "Mixed: café, 世界! 🎉 ok",
    // Rare characters a large vocabulary still spells in byte tokens: hieroglyphs, CJK extension B.
    "Rare: 𓀀𓁐 𠀋𪚥 🪿🫠 ꙮ",
];

fn open_c(path: &Path) -> *mut packlm_model { unsafe {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    let mut m = ptr::null_mut();
    assert_eq!(packlm_model_open(c.as_ptr(), ptr::null(), &mut m) as u32, OK, "open {}", path.display());
    m
}}

fn tokenize(m: *const packlm_model, text: &str, flags: u32) -> Vec<u32> { unsafe {
    let mut ids = vec![0u32; 4 * text.len() + 8];
    let mut n = 0usize;
    let st = packlm_tokenize(m, text.as_ptr() as *const c_char, text.len(), flags, ids.as_mut_ptr(), ids.len(), &mut n);
    assert_eq!(st as u32, OK);
    ids.truncate(n);
    ids
}}

fn detokenize(m: *const packlm_model, ids: &[u32], flags: u32) -> Vec<u8> { unsafe {
    let mut buf = vec![0u8; 64 * ids.len() + 16];
    let mut n = 0usize;
    let st = packlm_detokenize(m, ids.as_ptr(), ids.len(), flags, buf.as_mut_ptr() as *mut c_char, buf.len(), &mut n);
    assert_eq!(st as u32, OK);
    buf.truncate(n);
    buf
}}

fn piece(m: *const packlm_model, id: u32) -> String { unsafe {
    let mut buf = [0u8; 256];
    let mut n = 0usize;
    assert_eq!(packlm_token_to_piece(m, id, buf.as_mut_ptr() as *mut c_char, buf.len(), &mut n) as u32, OK);
    String::from_utf8(buf[..n].to_vec()).unwrap()
}}

/// Feeds `ids` one by one; returns every feed output, then the flush output, as bytes.
fn stream(m: *const packlm_model, ids: &[u32], flags: u32) -> Vec<Vec<u8>> { unsafe {
    let mut d = ptr::null_mut();
    assert_eq!(packlm_detokenizer_new(m, flags, &mut d) as u32, OK);
    let mut outs = Vec::new();
    let mut buf = [0u8; 256];
    for &id in ids {
        let mut n = usize::MAX;
        assert_eq!(packlm_detokenizer_feed(d, id, buf.as_mut_ptr() as *mut c_char, buf.len(), &mut n) as u32, OK);
        assert_eq!(buf[n], 0, "output is NUL-terminated");
        outs.push(buf[..n].to_vec());
    }
    let mut n = usize::MAX;
    assert_eq!(packlm_detokenizer_flush(d, buf.as_mut_ptr() as *mut c_char, buf.len(), &mut n) as u32, OK);
    outs.push(buf[..n].to_vec());
    packlm_detokenizer_free(d);
    outs
}}

/// The contract on every text; returns how many tokens carried part of a character (their
/// piece alone is U+FFFD), so that a caller can check the texts exercised the hold-back.
fn check_model(path: &Path) -> usize { unsafe {
    let m = open_c(path);
    let mut partial = 0;
    for text in TEXTS {
        let ids = tokenize(m, text, 0);
        partial += ids.iter().filter(|&&id| piece(m, id).contains('\u{FFFD}')).count();
        let outs = stream(m, &ids, 0);
        for (i, o) in outs.iter().enumerate() {
            let s = std::str::from_utf8(o).unwrap_or_else(|e| panic!("{text:?}: output {i} is not UTF-8: {e}"));
            assert!(!s.contains('\u{FFFD}'), "{text:?}: output {i} holds a replacement character: {s:?}");
        }
        let joined: Vec<u8> = outs.concat();
        assert_eq!(joined, detokenize(m, &ids, 0), "{text:?}: stream != packlm_detokenize");
        // The text round-trips, an independent check of what the detokenization is.
        assert_eq!(String::from_utf8(joined).unwrap().trim_start(), *text);
    }
    packlm_model_free(m);
    partial
}}

#[test]
fn byte_level_bpe_streams_whole_characters() {
    let Some(p) = smollm2() else { return };
    assert!(check_model(&p) > 0, "no token of the texts carries part of a character");
}

#[test]
fn byte_fallback_sentencepiece_streams_whole_characters() {
    let Some(p) = gemma3_270m() else { return };
    assert!(check_model(&p) > 0, "no token of the texts carries part of a character");
}

#[test]
fn tiny_fixture_streams_whole_characters() {
    check_model(&tiny("llama"));
}

/// A stream cut inside a character: the flush gives what packlm_detokenize gives for it.
#[test]
fn flush_gives_an_incomplete_character_as_detokenize_does() { unsafe {
    let Some(p) = smollm2() else { return };
    let m = open_c(&p);
    let ids = tokenize(m, "ok 😀", 0);
    // Find a cut inside the emoji: a prefix whose detokenization ends in U+FFFD.
    let cut = (1..ids.len())
        .find(|&k| String::from_utf8(detokenize(m, &ids[..k], 0)).unwrap().ends_with('\u{FFFD}'))
        .expect("the emoji spans several tokens");
    let outs = stream(m, &ids[..cut], 0);
    assert_eq!(outs.concat(), detokenize(m, &ids[..cut], 0));
    assert!(outs.last().unwrap().ends_with("\u{FFFD}".as_bytes()), "the held-back bytes come out at the flush");
    packlm_model_free(m);
}}

/// Special tokens, kept and skipped, agree with packlm_detokenize under the same flag.
#[test]
fn special_tokens_follow_the_flag() { unsafe {
    let Some(p) = smollm2() else { return };
    let m = open_c(&p);
    let ids = tokenize(m, "<|im_start|>user\n日本 😀<|im_end|>", PACKLM_TOKENIZE_PARSE_SPECIAL);
    for flags in [0, PACKLM_DETOKENIZE_SKIP_SPECIAL] {
        assert_eq!(stream(m, &ids, flags).concat(), detokenize(m, &ids, flags), "flags {flags}");
    }
    let mut d = ptr::null_mut();
    assert_eq!(packlm_detokenizer_new(m, 4, &mut d) as u32, packlm::error::PACKLM_ERR_INVALID_ARGUMENT);
    assert!(d.is_null(), "out is written only on success");
    packlm_model_free(m);
}}

/// BUFFER_TOO_SMALL reports the size needed and does not consume the token; an id out of
/// range is refused without consuming anything either. Each retried output equals the output of
/// a stream that was never refused (multi-byte characters, so that a token fed twice shows).
#[test]
fn a_refused_feed_does_not_consume_the_token() { unsafe {
    let m = open_c(&tiny("llama"));
    let ids = tokenize(m, "Hello wörld, café 日本 😀 again", 0);
    let want = detokenize(m, &ids, 0);
    let reference = stream(m, &ids, 0);
    let mut d = ptr::null_mut();
    assert_eq!(packlm_detokenizer_new(m, 0, &mut d) as u32, OK);
    let mut got = Vec::new();
    let mut refused = 0;
    for (i, &id) in ids.iter().enumerate() {
        let mut small = [0u8; 1];
        let mut n = 0usize;
        let st = packlm_detokenizer_feed(d, id, small.as_mut_ptr() as *mut c_char, 1, &mut n) as u32;
        let mut buf = vec![0u8; 64];
        if st == OK {
            assert_eq!(n, 0, "only an empty output fits one byte");
        } else {
            assert_eq!(st, packlm::error::PACKLM_ERR_BUFFER_TOO_SMALL);
            refused += 1;
            let need = n;
            // Exactly the size asked for is enough, and gives the same token's text.
            buf.truncate(need);
            let mut n2 = 0usize;
            assert_eq!(packlm_detokenizer_feed(d, id, buf.as_mut_ptr() as *mut c_char, need, &mut n2) as u32, OK);
            assert_eq!(n2 + 1, need);
            assert_eq!(buf[..n2], reference[i][..], "token {i}: the retried output differs from an unrefused stream's");
            got.extend_from_slice(&buf[..n2]);
        }
        let mut n3 = 0usize;
        let st = packlm_detokenizer_feed(d, u32::MAX, buf.as_mut_ptr() as *mut c_char, buf.len(), &mut n3) as u32;
        assert_eq!(st, packlm::error::PACKLM_ERR_TOKEN_OUT_OF_RANGE);
    }
    let mut buf = [0u8; 64];
    let mut n = 0usize;
    assert_eq!(packlm_detokenizer_flush(d, buf.as_mut_ptr() as *mut c_char, buf.len(), &mut n) as u32, OK);
    got.extend_from_slice(&buf[..n]);
    assert!(refused > 0);
    assert_eq!(got, want, "a refused token was consumed (or lost)");
    packlm_detokenizer_free(d);
    packlm_detokenizer_free(ptr::null_mut());
    packlm_model_free(m);
}}

// ---- Every tokenizer kind, random ids and cut points, and the cost of a feed ----

use packlm::pack::decode_stream::DecodeStream;
use packlm::pack::vocab::{TokenKind, Vocab};

/// A vocabulary to stream over: one a model holds, or a tokenizer-only GGUF fixture.
enum Kind {
    Model(std::sync::Arc<packlm::engine::Model>),
    Vocab(Vocab),
}

impl Kind {
    fn vocab(&self) -> &Vocab {
        match self {
            Kind::Model(m) => m.vocab(),
            Kind::Vocab(v) => v,
        }
    }
}

/// Every tokenizer kind packlm reads: an HF tokenizer.json (byte-level BPE, the tiny fixture),
/// the GGUF SentencePiece vocabularies with byte fallback (llama's, and gemma's rules), and, when
/// fetched, the real GGUFs (SmolLM2's byte-level BPE, Gemma3's SentencePiece).
fn kinds() -> Vec<(String, Kind)> {
    let mut out = vec![("tiny llama (tokenizer.json)".to_string(), Kind::Model(open(&tiny("llama"))))];
    for f in ["spm_llama.gguf", "spm_gemma3.gguf"] {
        out.push((f.to_string(), Kind::Vocab(packlm::pack::gguf_vocab(&fixtures().join("gguf").join(f)).unwrap())));
    }
    for p in [smollm2(), gemma3_270m()].into_iter().flatten() {
        out.push((p.file_name().unwrap().to_string_lossy().into_owned(), Kind::Model(open(&p))));
    }
    out
}

/// Feeds `ids` into a fresh stream; every output, then the flush's.
fn stream_vocab(v: &Vocab, ids: &[u32], skip: bool) -> Vec<String> {
    let mut s = DecodeStream::new(skip);
    let mut outs = Vec::new();
    for &id in ids {
        let text = s.peek(v, id).unwrap();
        s.commit(id, &text);
        outs.push(text);
    }
    outs.push(s.pending(v).unwrap());
    outs
}

/// A small deterministic generator (xorshift64*), so a failure names a reproducible case.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The case: on Gemma3, `x 𠀀𠀁 y` stopped inside its run of byte tokens. The flush
/// used to fail ("decoder changed text it had already given out"): the first character of the
/// run was handed out, and the whole run then decodes to U+FFFD. Every cut of the text, on the
/// real Gemma3 and on the SentencePiece fixtures, now adds up to the detokenization.
#[test]
fn a_stream_cut_inside_a_byte_run_flushes_what_detokenize_gives() {
    let text = "x 𠀀𠀁 y";
    let mut runs = 0;
    for (name, k) in kinds() {
        let v = k.vocab();
        let ids = v.encode(text, false, false).unwrap();
        let bytes = ids.iter().filter(|&&id| v.token_kind(id) == Some(TokenKind::Byte)).count();
        if bytes >= 8 {
            runs += 1;
        }
        for cut in 0..=ids.len() {
            for skip in [false, true] {
                let outs = stream_vocab(v, &ids[..cut], skip);
                assert_eq!(outs.concat(), v.decode(&ids[..cut], skip).unwrap(), "{name}: {text:?} cut after {cut} of {} tokens", ids.len());
            }
        }
    }
    assert!(runs >= 2, "the SentencePiece fixtures spell the two characters in byte tokens");
}

/// Random ids, biased towards byte tokens and special tokens, cut anywhere, both flags, every
/// kind: the outputs add up to `decode` of the same ids.
#[test]
fn random_ids_on_every_tokenizer_kind_add_up_to_the_detokenization() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for (name, k) in kinds() {
        let v = k.vocab();
        let bytes: Vec<u32> = (0..v.size as u32).filter(|&id| v.token_kind(id) == Some(TokenKind::Byte)).collect();
        let special: Vec<u32> = (0..v.size as u32).filter(|&id| v.token_kind(id) == Some(TokenKind::Control)).collect();
        for case in 0..300 {
            let n = 1 + rng.below(40);
            let ids: Vec<u32> = (0..n)
                .map(|_| match rng.below(10) {
                    0..=3 if !bytes.is_empty() => bytes[rng.below(bytes.len())],
                    4 if !special.is_empty() => special[rng.below(special.len())],
                    _ => rng.below(v.size) as u32,
                })
                .collect();
            let skip = case % 2 == 1;
            let outs = stream_vocab(v, &ids, skip);
            assert_eq!(outs.concat(), v.decode(&ids, skip).unwrap(), "{name}: case {case}, ids {ids:?}, skip {skip}");
        }
    }
}

/// CPU time of this thread, in seconds.
fn thread_cpu() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) }, 0);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// The least CPU time (of three tries, each from the same state) to feed `ids` after `s`.
fn feed_time(v: &Vocab, s: &DecodeStream, ids: &[u32]) -> f64 {
    (0..3)
        .map(|_| {
            let mut s = s.clone();
            let t0 = thread_cpu();
            for &id in ids {
                let text = s.peek(v, id).unwrap();
                s.commit(id, &text);
            }
            thread_cpu() - t0
        })
        .fold(f64::INFINITY, f64::min)
}

/// A feed costs the same at token 50,000 as at token 1,000 (it used to decode the whole stream:
/// 394 µs a token at 1k, 1,871 µs at 10k). 2,000 tokens are timed at each point, in CPU time,
/// the least of fifteen tries, the two points' tries taken in turns once the stream is at 50,000
/// (so that a busy stretch of the machine, other tests beside this one, weighs on both alike);
/// the bound is 2x. The text mixes ASCII, CJK, emoji and characters
/// the SentencePiece vocabularies spell in byte tokens.
#[test]
fn a_feed_costs_the_same_at_50k_tokens_as_at_1k() {
    let unit = "The quick brown fox, 日本語の文章 😀👍🏽 and 𠀀𠀁 𓀀 done. ";
    for (name, k) in kinds() {
        let v = k.vocab();
        let one = v.encode(unit, false, false).unwrap();
        let ids: Vec<u32> = one.iter().copied().cycle().take(52_000).collect();
        let mut s = DecodeStream::new(false);
        let mut given = String::new();
        let started = std::time::Instant::now();
        let (mut early, mut late) = (f64::INFINITY, f64::INFINITY);
        let mut at_1k = None;
        for (i, &id) in ids.iter().enumerate() {
            if i == 1_000 {
                at_1k = Some(s.clone());
            }
            if i == 50_000 {
                let at_1k = at_1k.as_ref().expect("the stream passed token 1,000");
                for _ in 0..5 {
                    early = early.min(feed_time(v, at_1k, &ids[1_000..3_000]));
                    late = late.min(feed_time(v, &s, &ids[i..i + 2_000]));
                }
            }
            let text = s.peek(v, id).unwrap();
            s.commit(id, &text);
            given.push_str(&text);
            assert!(started.elapsed().as_secs() < 120, "{name}: 52,000 feeds take over two minutes (at token {i})");
        }
        given.push_str(&s.pending(v).unwrap());
        assert_eq!(given, v.decode(&ids, false).unwrap(), "{name}: the 52,000-token stream differs from its detokenization");
        eprintln!("{name}: 2,000 feeds at token 1,000: {:.1} ms; at token 50,000: {:.1} ms", early * 1e3, late * 1e3);
        assert!(late <= 2.0 * early, "{name}: a feed at 50k tokens costs {late:.4} s per 2,000, at 1k {early:.4} s");
    }
}
