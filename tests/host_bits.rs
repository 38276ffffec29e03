//! A regression pin on the host backend's exact bits. The expected values below were recorded
//! from the code as it was before the backend seam (engine over backend-owned tensors) was
//! introduced; they are a regression pin, not a reference: HF agreement is checked by the
//! golden tests. Any change to how the host backend computes (an op reordered, a kernel
//! rewritten) shows up here as a changed bit pattern.
//!
//! Each case runs a fixed prompt through one `step_batch` (all rows), then three `step`s, on the
//! host backend with 2 threads, and pins the f32 bits of a few logits of the last prefill row
//! and of each step: the first logit, the argmax (index and bits) and a few fixed indices.

mod common;

use common::*;
use packlm::backend::BackendKind;
use packlm::engine::{Model, Session, Want};
use packlm::sample::argmax;
use std::sync::Arc;

/// (row label, argmax index, bits at [0, argmax, i1, i2, i3]) for each pinned row.
type Pins = Vec<(u32, [u32; 5])>;

fn pins(m: &Arc<Model>, prompt: &[u32], steps: &[u32], fixed: [usize; 3]) -> Pins {
    let v = m.spec().vocab_size;
    let mut s = Session::new(m.clone(), 0).unwrap();
    let all = s.step_batch(prompt, Want::All).unwrap();
    let mut rows = vec![all[(prompt.len() - 1) * v..].to_vec()];
    for &t in steps {
        rows.push(s.step(t).unwrap());
    }
    rows.iter()
        .map(|r| {
            let a = argmax(r);
            (a, [r[0].to_bits(), r[a as usize].to_bits(), r[fixed[0]].to_bits(), r[fixed[1]].to_bits(), r[fixed[2]].to_bits()])
        })
        .collect()
}

fn check(name: &str, got: Pins, want: &[(u32, [u32; 5])]) {
    if std::env::var("PACKLM_PRINT_PINS").is_ok() {
        for (a, b) in &got {
            eprintln!("PIN {name} ({a}, [{:#010x}, {:#010x}, {:#010x}, {:#010x}, {:#010x}]),", b[0], b[1], b[2], b[3], b[4]);
        }
    }
    assert_eq!(got, want, "{name}: host logits changed bits");
}

#[test]
fn smollm2_host_bits_are_pinned() {
    let Some(p) = smollm2() else { return };
    let m = open_with(&p, BackendKind::Host, 2);
    let prompt = m.vocab().encode("The capital of France is", true, false).unwrap();
    let got = pins(&m, &prompt, &[7042, 28, 1429], [7, 1000, 30000]);
    check(
        "smollm2",
        got,
        &[
            (7042, [0x3fce8b6c, 0x418af854, 0xc12ce3b2, 0x403780c5, 0xc08ad638]),
            (30, [0x4146c5fd, 0x41c92438, 0x3ff39cb4, 0x41456215, 0x40a5e8ac]),
            (284, [0x40d3c7a6, 0x41a96c1b, 0xc06883a6, 0x409b24f9, 0xc011d61e]),
            (2756, [0x4179c6d7, 0x41c140d6, 0x403838ee, 0x415b49e8, 0x3f0f0d60]),
        ],
    );
}

#[test]
fn tiny_gemma4_host_bits_are_pinned() {
    // Per-layer inputs, KV-shared layers, two attention geometries.
    let m = open_with(&tiny("gemma4"), BackendKind::Host, 2);
    let got = pins(&m, &[0, 247, 135, 158, 157, 201, 205, 87, 120], &[223, 19, 239], [7, 100, 299]);
    check(
        "gemma4",
        got,
        &[
            (13, [0x3fed9f0d, 0x40d50f3f, 0x3ed60385, 0x3ef35a14, 0x3fdeda09]),
            (223, [0xbe587ff8, 0x40b05ffc, 0x40417b85, 0x3f9df6a5, 0xbf96d204]),
            (137, [0x3f492a0d, 0x407346a5, 0x400d3ed7, 0xbecc03da, 0x3f7608c0]),
            (56, [0xbfcdef80, 0x40a9f373, 0x3fde40ea, 0xbfb2f25d, 0xbf5488bc]),
        ],
    );
}

#[test]
fn tiny_qwen2_host_bits_are_pinned() {
    // qkv bias, GQA.
    let m = open_with(&tiny("qwen2"), BackendKind::Host, 2);
    let got = pins(&m, &[0, 203, 229, 108, 283, 3, 77, 187, 28, 163, 238], &[112, 266, 132], [7, 100, 319]);
    check(
        "qwen2",
        got,
        &[
            (108, [0x3fc87397, 0x400e7eb4, 0xbf20f4ae, 0x3f1797ab, 0xbf474c2a]),
            (199, [0x3f8ebabb, 0x40110389, 0xbf36d000, 0x3f2931ee, 0x3d48b2b0]),
            (108, [0x3f159220, 0x402205c5, 0xbb7af700, 0xbd77b640, 0xbf1e25bb]),
            (313, [0x3f7f77b8, 0x3ff741a6, 0xbeef3640, 0xbdc63830, 0xbfa011b2]),
        ],
    );
}

#[test]
fn tiny_gemma2_host_bits_are_pinned() {
    // Sliding window, attention and final softcaps, sandwich norms.
    let m = open_with(&tiny("gemma2"), BackendKind::Host, 2);
    let got = pins(&m, &[0, 157, 255, 243, 132, 261, 280, 51, 143, 120, 76, 106, 206], &[271, 84, 91], [7, 100, 299]);
    check(
        "gemma2",
        got,
        &[
            (285, [0x4006b22f, 0x412e4308, 0x407dddf2, 0xbfef3fa7, 0xc018e3c1]),
            (207, [0x406de36b, 0x4143becc, 0xc0282210, 0xc07d21cf, 0x3fba90cd]),
            (214, [0x405d45f4, 0x41398903, 0x3f820c7b, 0x401748ff, 0xc0026006]),
            (27, [0x400a824b, 0x41278b17, 0x41195255, 0xc10fcc9b, 0x3dcecb4d]),
        ],
    );
}
