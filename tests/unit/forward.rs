//! Unit tests of src/engine/forward.rs, compiled as its child module (`#[path]`): they reach
//! the pass's failure hooks, which are private to the crate, and they name the tiny fixtures by
//! their folders, which are family names, so they live here rather than in the engine.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

use super::{Want, ABORT_IN_PROJECTION, PANIC_AFTER_LAYER};
use crate::backend::{BackendKind, Precision};
use crate::engine::{Model, OpenOptions, Session};

fn tiny(name: &str, backend: BackendKind) -> Arc<Model> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny").join(name);
    Arc::new(Model::open(&dir, &OpenOptions::new(backend, 2, Precision::Exact)).unwrap())
}

/// A pass that panics after some layers appended their keys and values leaves the session
/// exactly as before the call: same positions, same snapshot bytes, and the next step gives
/// the bits of a session that never saw the failed call.
#[test]
fn a_panicking_pass_leaves_the_session_as_it_was() {
    for (name, backend) in [("llama", BackendKind::Host), ("gemma4", BackendKind::Host), ("gemma2", BackendKind::Reference)] {
        let m = tiny(name, backend);
        let prefix = [0u32, 17, 42, 99, 5];
        let mut s = Session::new(m.clone(), 0).unwrap();
        s.step_batch(&prefix, Want::Last).unwrap();
        let before = s.snapshot();
        let layer = m.spec.layers.len() / 2;
        PANIC_AFTER_LAYER.with(|p| p.set(Some(layer)));
        let r = catch_unwind(AssertUnwindSafe(|| s.step_batch(&[7, 8, 9], Want::All)));
        PANIC_AFTER_LAYER.with(|p| p.set(None));
        assert!(r.is_err(), "{name}: the injected panic did not happen");
        assert_eq!(s.n_past(), prefix.len(), "{name}: positions held changed");
        assert!(s.snapshot() == before, "{name}: the session state changed");
        let next = s.step(11).unwrap();
        let mut fresh = Session::new(m.clone(), 0).unwrap();
        fresh.step_batch(&prefix, Want::Last).unwrap();
        let want = fresh.step(11).unwrap();
        assert!(next.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{name}: next step differs from a fresh session");
    }
}

/// A verify that panics after its pass (while judging the drafts) leaves the session as it
/// was: positions, snapshot bytes and last logits.
#[test]
fn a_panicking_verify_leaves_the_session_as_it_was() {
    use crate::engine::speculative::{Acceptance, PANIC_IN_ACCEPTANCE};
    let m = tiny("llama", BackendKind::Host);
    let mut s = Session::new(m.clone(), 0).unwrap();
    s.step_batch(&[0, 17, 42, 99, 5], Want::Last).unwrap();
    let (before, last) = (s.snapshot(), s.last_logits().to_vec());
    PANIC_IN_ACCEPTANCE.with(|p| p.set(true));
    let r = catch_unwind(AssertUnwindSafe(|| s.verify(7, &[8, 9, 10], Acceptance::Greedy)));
    PANIC_IN_ACCEPTANCE.with(|p| p.set(false));
    assert!(r.is_err(), "the injected panic did not happen");
    assert_eq!(s.n_past(), 5, "positions held changed");
    assert!(s.snapshot() == before, "the session state changed");
    assert!(s.last_logits().iter().zip(&last).all(|(a, b)| a.to_bits() == b.to_bits()) && s.last_logits().len() == last.len(), "last logits changed");
    // And a verify that fails with Err (a draft out of range) also keeps the last logits.
    assert!(s.verify(7, &[u32::MAX], Acceptance::Greedy).is_err());
    assert_eq!(s.last_logits().len(), last.len(), "a refused verify dropped the last logits");
}

/// An abort raised while the output projection runs stops its matmul (host backend, one
/// thread and several): the pass returns ErrAborted, also for verify, the session is as
/// before, and after clearing the flag the next step is bit-identical to a fresh session's.
#[test]
fn an_abort_inside_the_output_projection_stops_the_pass() {
    use crate::engine::speculative::Acceptance;
    use crate::error::Status;
    use std::sync::atomic::Ordering;
    for threads in [1, 3] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny/gemma3");
        let m = Arc::new(Model::open(&dir, &OpenOptions::new(BackendKind::Host, threads, Precision::Exact)).unwrap());
        let prefix = [0u32, 17, 42, 99, 5];
        let mut s = Session::new(m.clone(), 0).unwrap();
        s.step_batch(&prefix, Want::Last).unwrap();
        let (before, last) = (s.snapshot(), s.last_logits().to_vec());
        ABORT_IN_PROJECTION.with(|p| p.set(true));
        let stepped = s.step_batch(&[7, 8, 9], Want::All).map(|_| ());
        let flag_raised = s.abort_flag().swap(false, Ordering::SeqCst);
        let verified = s.verify(7, &[8, 9], Acceptance::Greedy).map(|_| ());
        s.abort_flag().store(false, Ordering::SeqCst);
        ABORT_IN_PROJECTION.with(|p| p.set(false));
        assert!(flag_raised, "the hook did not raise the flag");
        assert_eq!(stepped.unwrap_err().status, Status::ErrAborted, "{threads} threads: step_batch");
        assert_eq!(verified.unwrap_err().status, Status::ErrAborted, "{threads} threads: verify");
        assert_eq!(s.n_past(), prefix.len());
        assert!(s.snapshot() == before, "{threads} threads: the session state changed");
        assert!(s.last_logits().len() == last.len() && s.last_logits().iter().zip(&last).all(|(a, b)| a.to_bits() == b.to_bits()));
        let next = s.step(11).unwrap();
        let mut fresh = Session::new(m.clone(), 0).unwrap();
        fresh.step_batch(&prefix, Want::Last).unwrap();
        let want = fresh.step(11).unwrap();
        assert!(next.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{threads} threads: next step differs");
    }
}

/// A pass over several sessions that panics after some layers appended every session's keys and
/// values leaves every session as it was (positions and snapshot bytes).
#[test]
fn a_panicking_shared_pass_leaves_every_session_as_it_was() {
    let m = tiny("gemma4", BackendKind::Host);
    let mut ss: Vec<Session> = (0..3).map(|_| Session::new(m.clone(), 0).unwrap()).collect();
    for (i, s) in ss.iter_mut().enumerate() {
        s.step_batch(&[0, 17 + i as u32, 42], Want::Last).unwrap();
    }
    let before: Vec<Vec<u8>> = ss.iter().map(|s| s.snapshot()).collect();
    PANIC_AFTER_LAYER.with(|p| p.set(Some(m.spec.layers.len() / 2)));
    let tokens = [vec![7u32], vec![8, 9, 10], vec![11, 12]];
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut items: Vec<(&mut Session, &[u32], Want)> = ss.iter_mut().zip(&tokens).map(|(s, t)| (s, t.as_slice(), Want::All)).collect();
        Session::step_many(&mut items).map(|_| ())
    }));
    PANIC_AFTER_LAYER.with(|p| p.set(None));
    assert!(r.is_err(), "the injected panic did not happen");
    for (i, (s, b)) in ss.iter().zip(&before).enumerate() {
        assert_eq!(s.n_past(), 3, "session {i}: positions held changed");
        assert!(s.snapshot() == *b, "session {i}: the state changed");
    }
}
