//! Misuse through the C API (called from Rust): bad logits, unknown flags, huge counts, lengths
//! checked before the caller's buffer is read.

mod common;

use std::ffi::CString;

use common::*;
use packlm::engine::{Session, Want};
use packlm::ffi::model::{packlm_model, packlm_model_free, packlm_model_open};
use packlm::ffi::session::{packlm_session, packlm_session_free, packlm_session_new, packlm_step, packlm_step_batch, PACKLM_WANT_NONE};
use packlm::ffi::speculative::{packlm_drafter, packlm_drafter_free, packlm_drafter_new_ngram, packlm_drafter_propose, packlm_sample, packlm_sampler_params};
use packlm::ffi::text::packlm_detokenize;
use packlm::Status;

fn open_model(name: &str) -> *mut packlm_model { unsafe {
    let path = CString::new(tiny(name).to_str().unwrap()).unwrap();
    let mut m: *mut packlm_model = std::ptr::null_mut();
    assert_eq!(packlm_model_open(path.as_ptr(), std::ptr::null(), &mut m), Status::Ok);
    m
}}

fn sampler(temperature: f32) -> packlm_sampler_params {
    packlm_sampler_params {
        size: std::mem::size_of::<packlm_sampler_params>(),
        temperature,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        repetition_penalty: 1.0,
        recent: std::ptr::null(),
        n_recent: 0,
    }
}

#[test]
fn sample_refuses_nan_and_positive_infinity_and_leaves_the_rng_alone() { unsafe {
    for temperature in [0.0f32, 0.8] {
        for bad in [f32::NAN, f32::INFINITY] {
            let logits = [0.1f32, 0.2, bad, 0.3];
            let p = sampler(temperature);
            let (mut rng, mut token) = (42u64, 77u32);
            let st = packlm_sample(logits.as_ptr(), logits.len(), &p, &mut rng, &mut token);
            assert_eq!(st, Status::ErrInvalidArgument, "temperature {temperature}, logit {bad}");
            assert_eq!((rng, token), (42, 77), "out-parameters written on failure");
        }
    }
    // -inf masks: with every other logit finite the draw never lands on a masked token.
    let logits = [f32::NEG_INFINITY, 0.2, f32::NEG_INFINITY, 0.3];
    let p = sampler(0.8);
    let mut rng = 1u64;
    for _ in 0..50 {
        let mut token = 0;
        assert_eq!(packlm_sample(logits.as_ptr(), logits.len(), &p, &mut rng, &mut token), Status::Ok);
        assert!(token == 1 || token == 3, "drew masked token {token}");
    }
}}

#[test]
fn detokenize_refuses_unknown_flag_bits() { unsafe {
    let m = open_model("llama");
    let ids = [41u32, 283];
    let mut buf = [0i8; 64];
    let mut n = usize::MAX;
    assert_eq!(packlm_detokenize(m, ids.as_ptr(), ids.len(), 1, buf.as_mut_ptr() as _, buf.len(), &mut n), Status::Ok);
    let mut n2 = usize::MAX;
    assert_eq!(packlm_detokenize(m, ids.as_ptr(), ids.len(), 1 | 4, buf.as_mut_ptr() as _, buf.len(), &mut n2), Status::ErrInvalidArgument);
    assert_eq!(n2, usize::MAX);
    packlm_model_free(m);
}}

#[test]
fn ngram_drafter_with_size_max_proposes_the_continuation() { unsafe {
    let m = open_model("llama");
    let mut s: *mut packlm_session = std::ptr::null_mut();
    assert_eq!(packlm_session_new(m, std::ptr::null(), &mut s), Status::Ok);
    // History "1 2 3 4 5 8 9 7 1 2", pending 3: the one earlier "1 2 3" (at 0) is followed by
    // "4 5 8 9 7 1 2 3".
    let history = [1u32, 2, 3, 4, 5, 8, 9, 7, 1, 2];
    assert_eq!(packlm_step_batch(s, history.as_ptr(), history.len(), PACKLM_WANT_NONE, std::ptr::null_mut()), Status::Ok);
    let mut d: *mut packlm_drafter = std::ptr::null_mut();
    assert_eq!(packlm_drafter_new_ngram(3, &mut d), Status::Ok);
    let mut out = [0u32; 32];
    let mut n = 0usize;
    // The buffer is smaller than k: only what is proposed is written, and that fits.
    assert_eq!(packlm_drafter_propose(d, s, 3, usize::MAX, out.as_mut_ptr(), &mut n), Status::Ok);
    assert_eq!(&out[..n], &[4, 5, 8, 9, 7, 1, 2, 3]);
    packlm_drafter_free(d);
    packlm_session_free(s);
    packlm_model_free(m);
}}

#[test]
fn a_batch_longer_than_the_context_is_refused_before_its_ids_are_read() {
    let model = open(&tiny("llama"));
    let mut s = Session::new(model, 4).unwrap();
    // Five tokens into a context of four, the last one outside the vocabulary of 300: the
    // length is the error, found without scanning the ids.
    let e = s.step_batch(&[1, 2, 3, 4, 100_000], Want::None).unwrap_err();
    assert_eq!(e.status, Status::ErrContextOverflow, "{}", e.message);
    s.step_batch(&[1, 2], Want::None).unwrap();
    let e = s.step_batch(&[1, 2, 100_000], Want::None).unwrap_err();
    assert_eq!(e.status, Status::ErrContextOverflow, "{}", e.message);
    assert_eq!(s.n_past(), 2);
}

/// A raw handle shared by two threads on purpose (the misuse under test).
#[derive(Clone, Copy)]
struct Shared(*mut packlm_session);
unsafe impl Send for Shared {}

#[test]
fn one_session_from_two_threads_gives_busy_never_a_crash() { unsafe {
    use packlm::ffi::session::{packlm_session_n_past, packlm_session_options};
    use packlm::ffi::state::{packlm_snapshot, packlm_truncate};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    let m = open_model("llama");
    let opts = packlm_session_options { size: std::mem::size_of::<packlm_session_options>(), n_ctx: 48 };
    let mut s: *mut packlm_session = std::ptr::null_mut();
    assert_eq!(packlm_session_new(m, &opts, &mut s), Status::Ok);
    let shared = Shared(s);
    let busy = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for thread in 0..2 {
            let busy = &busy;
            scope.spawn(move || {
                let s = shared;
                let mut logits = vec![0f32; 300];
                let mut ops = 0;
                while ops < 3000 || (busy.load(Ordering::SeqCst) == 0 && start.elapsed() < Duration::from_secs(20)) {
                    ops += 1;
                    let st = match (ops + thread) % 4 {
                        0 | 1 => match packlm_step(s.0, 5, logits.as_mut_ptr()) {
                            Status::ErrContextOverflow => packlm_truncate(s.0, 0),
                            other => other,
                        },
                        2 => {
                            let mut need = 0;
                            match packlm_snapshot(s.0, std::ptr::null_mut(), 0, &mut need) {
                                Status::ErrBufferTooSmall => Status::Ok,
                                other => other,
                            }
                        }
                        _ => {
                            let mut n = 0;
                            packlm_session_n_past(s.0, &mut n)
                        }
                    };
                    match st {
                        Status::Ok => {}
                        Status::ErrSessionBusy => {
                            busy.fetch_add(1, Ordering::SeqCst);
                        }
                        other => panic!("thread {thread}: unexpected status {other:?}"),
                    }
                }
            });
        }
    });
    assert!(busy.load(Ordering::SeqCst) > 0, "the two threads never overlapped");
    // The session holds n fives and nothing else: its next step equals a fresh session's.
    let mut n = 0;
    assert_eq!(packlm_session_n_past(s, &mut n), Status::Ok);
    let mut got = vec![0f32; 300];
    if n == 48 {
        assert_eq!(packlm_truncate(s, 47), Status::Ok);
        n = 47;
    }
    assert_eq!(packlm_step(s, 5, got.as_mut_ptr()), Status::Ok);
    let mut fresh = Session::new(open(&tiny("llama")), 48).unwrap();
    let want = fresh.step_batch(&vec![5; n + 1], Want::Last).unwrap();
    assert_bits_equal(&got, &want, "the shared session vs a fresh one");
    packlm_session_free(s);
    packlm_model_free(m);
}}
