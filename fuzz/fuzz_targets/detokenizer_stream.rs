//! The streaming detokenizer on every tokenizer kind packlm reads: the tiny fixture's
//! tokenizer.json (byte-level BPE), the SentencePiece GGUF fixtures with byte fallback (llama's
//! and gemma's rules), and the real GGUFs when models/ holds them (SmolLM2's byte-level BPE,
//! Gemma3's SentencePiece). The input picks the vocabulary, the flag and the ids (biased towards
//! byte tokens and special tokens); its length is the cut point. The outputs of the feeds and
//! the flush must add up to the detokenization of the same ids.
#![no_main]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use packlm::backend::BackendKind;
use packlm::engine::{Model, OpenOptions};
use packlm::pack::decode_stream::DecodeStream;
use packlm::pack::vocab::{TokenKind, Vocab};

#[path = "common.rs"]
mod common;

enum Source {
    Model(Arc<Model>),
    Vocab(Vocab),
}

struct Kind {
    source: Source,
    bytes: Vec<u32>,
    special: Vec<u32>,
}

impl Kind {
    fn new(source: Source) -> Kind {
        let mut k = Kind { source, bytes: Vec::new(), special: Vec::new() };
        let v = k.vocab();
        let bytes = (0..v.size as u32).filter(|&id| v.token_kind(id) == Some(TokenKind::Byte)).collect();
        let special = (0..v.size as u32).filter(|&id| v.token_kind(id) == Some(TokenKind::Control)).collect();
        k.bytes = bytes;
        k.special = special;
        k
    }

    fn vocab(&self) -> &Vocab {
        match &self.source {
            Source::Model(m) => m.vocab(),
            Source::Vocab(v) => v,
        }
    }
}

fn kinds() -> &'static Vec<Kind> {
    static K: OnceLock<Vec<Kind>> = OnceLock::new();
    K.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut out = vec![Kind::new(Source::Model(common::tiny_llama()))];
        for f in ["spm_llama.gguf", "spm_gemma3.gguf"] {
            out.push(Kind::new(Source::Vocab(packlm::pack::gguf_vocab(&root.join("tests/fixtures/gguf").join(f)).expect("GGUF vocabulary fixture"))));
        }
        for f in ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3-270m-Q4_K_M.gguf"] {
            let p = root.join("models").join(f);
            if p.is_file() {
                #[allow(clippy::needless_update)]
                let opts = OpenOptions { backend: BackendKind::Reference, threads: 1, ..Default::default() };
                out.push(Kind::new(Source::Model(Arc::new(Model::open(&p, &opts).expect("real model opens")))));
            }
        }
        out
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else { return };
    let kinds = kinds();
    let k = &kinds[head as usize % kinds.len()];
    let skip = head & 0x80 != 0;
    let v = k.vocab();
    let ids: Vec<u32> = rest
        .chunks_exact(3)
        .map(|c| {
            let n = u16::from_le_bytes([c[1], c[2]]) as usize;
            match c[0] {
                0..=95 if !k.bytes.is_empty() => k.bytes[n % k.bytes.len()],
                96..=111 if !k.special.is_empty() => k.special[n % k.special.len()],
                _ => ((n | (c[0] as usize) << 16) % v.size) as u32,
            }
        })
        .collect();
    let mut s = DecodeStream::new(skip);
    let mut given = String::new();
    for &id in &ids {
        let text = s.peek(v, id).expect("an id inside the vocabulary feeds");
        s.commit(id, &text);
        given.push_str(&text);
    }
    given.push_str(&s.pending(v).expect("the flush of a stream the decoders know never fails"));
    assert_eq!(given, v.decode(&ids, skip).unwrap(), "ids {ids:?}, skip {skip}");
});
