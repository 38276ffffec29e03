//! The graph backend's own tests (the rest are in tests/graph_backend.rs and the conformance
//! suite).

use super::*;
use crate::engine::{Model, Session, Want};
use std::cell::Cell;

thread_local! {
    /// n > 0: this thread's n-th compile from now fails, as a provider that rejects a graph.
    pub(super) static FAIL_COMPILE: Cell<u32> = const { Cell::new(0) };
}

/// A graph the provider rejects fails the pass with the provider's status and message (not
/// ErrNonFinite from the NaN it leaves), and the session is as it was: the next pass equals
/// a fresh session's, bit for bit. Needs ONNX Runtime (PACKLM_ONNXRUNTIME); skips, saying
/// so, without it unless PACKLM_REQUIRE_ONNXRUNTIME is set.
#[test]
fn a_rejected_graph_fails_the_pass_and_leaves_the_session() {
    let be = match GraphBackend::new(&GraphOptions::default(), 1) {
        Ok(b) => b,
        Err(e) if std::env::var_os("PACKLM_REQUIRE_ONNXRUNTIME").is_none() => return eprintln!("skipped: {e}"),
        Err(e) => panic!("{e}"),
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny/llama");
    let m = Arc::new(Model::open_on(&dir, Box::new(be)).unwrap());
    let mut s = Session::new(m.clone(), 0).unwrap();
    s.step_batch(&[1, 2, 3], Want::Last).unwrap();
    FAIL_COMPILE.with(|f| f.set(1));
    // Four rows: a shape not compiled yet.
    let e = s.step_batch(&[4, 5, 6, 7], Want::Last).unwrap_err();
    FAIL_COMPILE.with(|f| f.set(0));
    assert_eq!(e.status, crate::error::Status::ErrBackendUnavailable, "{e:?}");
    assert!(e.message.contains("rejected the graph"), "{}", e.message);
    assert_eq!(s.n_past(), 3);
    let mut fresh = Session::new(m.clone(), 0).unwrap();
    fresh.step_batch(&[1, 2, 3], Want::Last).unwrap();
    let (a, b) = (s.step_batch(&[4, 5, 6, 7], Want::Last).unwrap(), fresh.step_batch(&[4, 5, 6, 7], Want::Last).unwrap());
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "after the failure vs fresh");
    // An embedding whose layers run and whose final norm's graph is rejected: the
    // provider's error, not the NaN it left.
    FAIL_COMPILE.with(|f| f.set(2));
    let e = s.embed(&[&[9, 8, 7, 6, 5]], &crate::engine::embed::EmbedOptions::default()).unwrap_err();
    FAIL_COMPILE.with(|f| f.set(0));
    assert_eq!(e.status, crate::error::Status::ErrBackendUnavailable, "{e:?}");
}

#[test]
fn passes_compiled_ahead_cover_every_bucket_and_part() {
    assert!(ahead_passes(0).is_empty());
    // 40 positions: bucket 64 only, parts of 1 .. 32 rows ending at 40.
    assert_eq!(ahead_passes(40), vec![(39, 1), (38, 2), (36, 4), (32, 8), (24, 16), (8, 32)]);
    let p = ahead_passes(200);
    for (start, rows) in &p {
        assert!(rows.is_power_of_two() && *rows <= PASS_ROWS && start + rows <= 200);
    }
    // Buckets 64, 128, 256: 7 + 8 + 8 parts, each ending in its bucket's upper half.
    assert_eq!(p.len(), 23);
    for b in [64, 128, 256] {
        let n = p.iter().filter(|(s, r)| kv_bucket(s + r) == b).count();
        assert_eq!(n, if b == 64 { 7 } else { 8 }, "bucket {b}");
    }
}

#[test]
fn kv_buckets_double_from_64() {
    assert_eq!(kv_bucket(0), 64);
    assert_eq!(kv_bucket(1), 64);
    assert_eq!(kv_bucket(64), 64);
    assert_eq!(kv_bucket(65), 128);
    assert_eq!(kv_bucket(1000), 1024);
}
