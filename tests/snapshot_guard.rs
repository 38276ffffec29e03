//! Snapshots are refused by a model whose weights differ, and when their KV holds values a
//! session's own passes never store (NaN, infinities), with the session left bit-identical.

mod common;

use common::*;
use packlm::engine::{Session, Want};
use packlm::Status;

/// A copy of the tiny llama folder with one weight byte changed (the lowest mantissa byte of
/// the file's last f32, so the value stays finite).
fn flipped_copy() -> std::path::PathBuf {
    let src = tiny("llama");
    let dst = std::env::temp_dir().join(format!("packlm-flipped-llama-{}", std::process::id()));
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    let st = dst.join("model.safetensors");
    let mut bytes = std::fs::read(&st).unwrap();
    let at = bytes.len() - 4;
    bytes[at] ^= 1;
    std::fs::write(&st, bytes).unwrap();
    dst
}

#[test]
fn a_snapshot_of_a_model_with_other_weights_is_refused() {
    let a = open(&tiny("llama"));
    let dir = flipped_copy();
    let b = open(&dir);
    assert_eq!(a.fingerprint(), b.fingerprint(), "same config and tensor table: only the bytes differ");
    let t = golden(&tiny("llama")).tokens;
    let mut sa = Session::new(a.clone(), 0).unwrap();
    sa.step_batch(&t[..5], Want::None).unwrap();
    let snap = sa.snapshot();
    let mut sb = Session::new(b, 0).unwrap();
    let e = sb.restore(&snap).unwrap_err();
    assert_eq!(e.status, Status::ErrSnapshot, "{}", e.message);
    assert!(e.message.contains("another model"), "{}", e.message);
    assert_eq!(sb.n_past(), 0);
    // The same model, in another session: restores.
    let mut sa2 = Session::new(a, 0).unwrap();
    sa2.restore(&snap).unwrap();
    assert_eq!(sa2.n_past(), 5);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_snapshot_holding_nan_with_a_valid_checksum_is_refused_and_changes_nothing() {
    let m = open(&tiny("llama"));
    let t = golden(&tiny("llama")).tokens;
    let mut src = Session::new(m.clone(), 0).unwrap();
    src.step_batch(&t[..4], Want::None).unwrap();
    let good = src.snapshot();
    let width = m.spec().layers[0].kv_width();
    // Layer 0's keys start after the 32-byte header, 4 tokens and the layer's source byte and
    // width (see the format in src/kv/snapshot.rs); put NaN at position 2, column 3.
    let keys = 32 + 4 * 4 + 1 + 4;
    for (value, name) in [(f32::NAN, "NaN"), (f32::INFINITY, "inf")] {
        let mut bad = good.clone();
        let at = keys + (2 * width + 3) * 4;
        bad[at..at + 4].copy_from_slice(&value.to_le_bytes());
        let body = bad.len() - 8;
        let sum = packlm::kv::snapshot::fnv1a64(&bad[..body]);
        bad[body..].copy_from_slice(&sum.to_le_bytes());

        let mut s = Session::new(m.clone(), 0).unwrap();
        s.step_batch(&t[..6], Want::None).unwrap();
        let before = s.snapshot();
        let e = s.restore(&bad).unwrap_err();
        assert_eq!(e.status, Status::ErrSnapshot, "{}", e.message);
        assert!(e.message.contains("layer 0") && e.message.contains("position 2") && e.message.contains(name), "{}", e.message);
        assert_eq!(s.snapshot(), before, "session changed by a refused restore");
        let got = s.step(t[6]).unwrap();
        let mut fresh = Session::new(m.clone(), 0).unwrap();
        assert_bits_equal(&got, &fresh.step_batch(&t[..7], Want::Last).unwrap(), "after a refused restore");
    }
}
