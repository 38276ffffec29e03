//! Misuse at the C boundary that once aborted or hung the host: a verify of 2^40 drafts, a
//! thread count of 2^32 - 1, and an open that could not be cancelled midway. Each must return a
//! specific status, with the objects as they were.

mod common;

use std::ffi::{c_void, CString};
use std::path::Path;
use std::ptr;

use common::*;
use packlm::ffi::model::{packlm_model, packlm_model_free, packlm_model_open, packlm_model_set_threads, packlm_open_options, packlm_open_options_default};
use packlm::ffi::session::{packlm_session, packlm_session_free, packlm_session_n_past, packlm_session_new, packlm_step_batch, PACKLM_WANT_LAST};
use packlm::ffi::speculative::{packlm_verify, packlm_sampler_params, packlm_verify_params, packlm_verify_result, PACKLM_VERIFY_GREEDY, PACKLM_VERIFY_SAMPLED};
use packlm::Status;

fn options() -> packlm_open_options { unsafe {
    let mut o: packlm_open_options = std::mem::zeroed();
    assert_eq!(packlm_open_options_default(&mut o), Status::Ok);
    o
}}

fn open_c(path: &Path, o: &packlm_open_options) -> (Status, *mut packlm_model) { unsafe {
    let path = CString::new(path.to_str().unwrap()).unwrap();
    let mut m = ptr::null_mut();
    let st = packlm_model_open(path.as_ptr(), o, &mut m);
    (st, m)
}}

/// threads = 2^32 - 1 is refused at open (on every backend) and by set_threads, with
/// LIMIT_EXCEEDED and the setting unchanged; 256 is accepted.
#[test]
fn thread_counts_are_bounded() { unsafe {
    for backend in [0u32, 1] {
        let mut o = options();
        o.backend = backend;
        o.threads = u32::MAX;
        let (st, m) = open_c(&tiny("llama"), &o);
        assert_eq!(st, Status::ErrLimitExceeded, "backend {backend}: open with 2^32 - 1 threads");
        assert!(m.is_null());
    }
    let (st, m) = open_c(&tiny("llama"), &options());
    assert_eq!(st, Status::Ok);
    assert_eq!(packlm_model_set_threads(m, u32::MAX), Status::ErrLimitExceeded);
    assert_eq!(packlm_model_set_threads(m, 257), Status::ErrLimitExceeded);
    assert_eq!(packlm_model_set_threads(m, 256), Status::Ok);
    assert_eq!(packlm_model_set_threads(m, 2), Status::Ok);
    packlm_model_free(m);
}}

fn session(m: *mut packlm_model) -> *mut packlm_session { unsafe {
    let mut s = ptr::null_mut();
    assert_eq!(packlm_session_new(m, ptr::null(), &mut s), Status::Ok);
    s
}}

/// k = 2^40 (and a sampled k whose k x n_vocab wraps) returns CONTEXT_OVERFLOW without reading
/// the draft buffer (one element long here) or allocating; the session keeps its positions.
#[test]
fn verify_refuses_an_absurd_k_before_reading_or_allocating() { unsafe {
    let (st, m) = open_c(&tiny("llama"), &options());
    assert_eq!(st, Status::Ok);
    let s = session(m);
    assert_eq!(packlm_step_batch(s, [1u32, 2, 3].as_ptr(), 3, PACKLM_WANT_LAST, ptr::null_mut()), Status::Ok);
    let draft = [5u32];
    let probs = [0.5f32];
    let mut rng = 1u64;
    let mut sampler: packlm_sampler_params = std::mem::zeroed();
    sampler.size = std::mem::size_of::<packlm_sampler_params>();
    sampler.top_p = 1.0;
    sampler.repetition_penalty = 1.0;
    for (mode, k) in [(PACKLM_VERIFY_GREEDY, 1usize << 40), (PACKLM_VERIFY_SAMPLED, 1 << 40), (PACKLM_VERIFY_SAMPLED, usize::MAX / 3)] {
        let mut p: packlm_verify_params = std::mem::zeroed();
        p.size = std::mem::size_of::<packlm_verify_params>();
        p.mode = mode;
        p.sampler = &sampler;
        p.draft_probs = probs.as_ptr();
        p.rng_state = &mut rng;
        let mut r: packlm_verify_result = std::mem::zeroed();
        r.size = std::mem::size_of::<packlm_verify_result>();
        r.n_accepted = 77;
        assert_eq!(packlm_verify(s, 4, draft.as_ptr(), k, &p, &mut r), Status::ErrContextOverflow, "mode {mode}, k = {k}");
        assert_eq!(r.n_accepted, 77, "the result was written on failure");
        let mut n = 0;
        assert_eq!(packlm_session_n_past(s, &mut n), Status::Ok);
        assert_eq!(n, 3);
    }
    packlm_session_free(s);
    packlm_model_free(m);
}}

struct Progress {
    seen: Vec<f32>,
    stop_at: usize,
    /// Reports that came from a thread other than the one that called open.
    other_thread: usize,
    caller: std::thread::ThreadId,
}

extern "C" fn record(fraction: f32, user: *mut c_void) -> bool {
    let p = unsafe { &mut *(user as *mut Progress) };
    p.seen.push(fraction);
    if std::thread::current().id() != p.caller {
        p.other_thread += 1;
    }
    p.seen.len() != p.stop_at
}

fn open_reporting(path: &Path, stop_at: usize) -> (Status, Vec<f32>) { unsafe {
    let mut p = Progress { seen: Vec::new(), stop_at, other_thread: 0, caller: std::thread::current().id() };
    let mut o = options();
    o.progress = Some(record);
    o.user_data = &mut p as *mut Progress as *mut c_void;
    let (st, m) = open_c(path, &o);
    if st == Status::Ok {
        packlm_model_free(m);
    } else {
        assert!(m.is_null());
    }
    assert_eq!(p.other_thread, 0, "{}: progress reported from another thread", path.display());
    (st, p.seen)
}}

/// Open reports progress per layer, on the thread that called open: from 0 to 1, never
/// decreasing, with more than two distinct values; a callback that returns false at the 3rd report cancels the open with ABORTED and is
/// not called again.
#[test]
fn open_reports_progress_and_can_be_cancelled_midway() {
    let mut packs = vec![tiny("llama")];
    packs.extend(smollm2());
    packs.extend(gemma3_270m());
    for path in packs {
        let (st, seen) = open_reporting(&path, 0);
        assert_eq!(st, Status::Ok, "{}", path.display());
        assert_eq!(seen.first(), Some(&0.0));
        assert_eq!(seen.last(), Some(&1.0));
        assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{}: fractions decrease: {seen:?}", path.display());
        let mut distinct = seen.clone();
        distinct.dedup();
        // One report per layer, plus start, files read, model-level tensors and end.
        let layers = open(&path).spec().layers.len();
        assert!(distinct.len() > 2 && seen.len() >= layers + 3, "{}: {seen:?}", path.display());
        let (st, seen) = open_reporting(&path, 3);
        assert_eq!(st, Status::ErrAborted, "{}: cancelled at the 3rd report", path.display());
        assert_eq!(seen.len(), 3, "{}: called again after returning false", path.display());
        assert!(seen[2] < 1.0, "{}: the 3rd report is not midway", path.display());
    }
}
