//! Several sessions in one pass over the weights (`Session::step_many`, `packlm_step_sessions`):
//! every session's logits and state are those of the same session stepped alone, bit for bit,
//! on every family fixture and both real GGUFs, on every backend at both precisions; refused
//! calls and failed passes change nothing; one pass reads each weight once whatever N is.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::*;
use packlm::backend::{BackendKind, Precision};
use packlm::engine::{Model, Session, Want};
use packlm::error::Status;

/// One session's job in a round.
enum J {
    /// Sits the round out.
    Idle,
    Step(Vec<u32>, Want),
    /// A verify of (pending, draft), greedy or sampled (temperature 0.8, the session's own
    /// random state).
    Verify(u32, Vec<u32>, bool),
}

/// The rounds each session goes through: sessions prefill while others decode, with different
/// lengths and every `want`, and verify (greedy and sampled) beside steps.
fn rounds(n_vocab: usize) -> Vec<Vec<J>> {
    let t = |seed: u32, n: usize| -> Vec<u32> { (0..n as u32).map(|i| (seed * 31 + i * 7 + 1) % n_vocab as u32).collect() };
    use J::*;
    vec![
        vec![Step(t(1, 7), Want::All), Step(t(2, 3), Want::Last), Step(t(3, 1), Want::Last), Idle],
        vec![Step(t(4, 1), Want::Last), Step(t(5, 5), Want::All), Step(t(6, 1), Want::None), Step(t(7, 6), Want::Last)],
        vec![Verify(t(8, 1)[0], t(9, 4), false), Step(t(9, 1), Want::Last), Verify(t(10, 1)[0], t(11, 6), true), Step(t(11, 1), Want::All)],
        vec![Idle, Step(t(12, 2), Want::All), Step(t(13, 4), Want::Last), Verify(t(14, 1)[0], t(1, 3), true)],
        vec![Verify(t(2, 1)[0], vec![], false), Verify(t(3, 1)[0], t(4, 2), false), Step(t(5, 1), Want::Last), Step(t(6, 1), Want::Last)],
    ]
}

/// Runs `rounds` on fresh sessions of `m`, each session alone (`step_batch`, `verify`) or all
/// of a round together (`run_many`); returns every logit and verify outcome handed back (as
/// text), and each session's final snapshot, last logits and random state.
fn run(m: &Arc<Model>, shared: bool) -> (Vec<Vec<f32>>, Vec<String>, Vec<(Vec<u8>, Vec<f32>, u64)>) {
    use packlm::engine::speculative::Acceptance;
    use packlm::engine::{Job, JobResult};
    let rounds = rounds(m.spec().vocab_size.min(250));
    let params = packlm::sample::SamplerParams { temperature: 0.8, ..Default::default() };
    let mut sessions: Vec<Session> = (0..4).map(|_| Session::new(m.clone(), 0).unwrap()).collect();
    let mut rngs: Vec<u64> = (0..4).map(|i| 1000 + i).collect();
    let (mut logits, mut outcomes) = (Vec::new(), Vec::new());
    for round in &rounds {
        if shared {
            let mut jobs: Vec<(&mut Session, Job)> = Vec::new();
            for ((s, j), rng) in sessions.iter_mut().zip(round).zip(rngs.iter_mut()) {
                match j {
                    J::Idle => {}
                    J::Step(t, w) => jobs.push((s, Job::Step { tokens: t, want: *w })),
                    J::Verify(p, d, sampled) => {
                        let acceptance = if *sampled { Acceptance::Sampled { params: &params, draft_probs: None, rng } } else { Acceptance::Greedy };
                        jobs.push((s, Job::Verify { pending: *p, draft: d, acceptance }));
                    }
                }
            }
            for r in Session::run_many(&mut jobs).unwrap() {
                match r {
                    JobResult::Logits(l) => logits.push(l),
                    JobResult::Verified(o) => outcomes.push(format!("{o:?}")),
                }
            }
        } else {
            for ((s, j), rng) in sessions.iter_mut().zip(round).zip(rngs.iter_mut()) {
                match j {
                    J::Idle => {}
                    J::Step(t, w) => logits.push(s.step_batch(t, *w).unwrap()),
                    J::Verify(p, d, sampled) => {
                        let acceptance = if *sampled { Acceptance::Sampled { params: &params, draft_probs: None, rng } } else { Acceptance::Greedy };
                        outcomes.push(format!("{:?}", s.verify(*p, d, acceptance).unwrap()));
                    }
                }
            }
        }
    }
    assert!(outcomes.len() == 5, "every verify ran");
    let state = sessions.iter().zip(&rngs).map(|(s, &r)| (s.snapshot(), s.last_logits().to_vec(), r)).collect();
    (logits, outcomes, state)
}

fn check_model(what: &str, m: &Arc<Model>) {
    let (alone, alone_verified, alone_state) = run(m, false);
    let (shared, shared_verified, shared_state) = run(m, true);
    assert_eq!(alone.len(), shared.len());
    for (i, (a, b)) in alone.iter().zip(&shared).enumerate() {
        assert_bits_equal(b, a, &format!("{what}: logits {i} of a shared pass vs the session alone"));
    }
    assert_eq!(shared_verified, alone_verified, "{what}: verify outcomes in shared passes vs alone");
    for (i, (a, b)) in alone_state.iter().zip(&shared_state).enumerate() {
        assert!(a.0 == b.0, "{what}: session {i}'s state after shared passes differs from stepping it alone");
        assert_bits_equal(&b.1, &a.1, &format!("{what}: session {i}'s last logits"));
        assert_eq!(a.2, b.2, "{what}: session {i}'s random state");
    }
}

/// Every family fixture on the host backend (exact and fast), the reference backend, and the
/// GPU when there is one (also with 4 KiB bindings, where the backend caps a pass at 3 rows and
/// items are split across passes).
#[test]
fn every_family_gives_each_session_its_own_bits() {
    let families = ["llama", "llama_llama3", "llama_yarn", "llama_linear", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_pattern", "gemma4", "gemma4_wide", "qwen3_moe", "qwen3_moe_dense", "qwen2_moe", "mixtral", "gpt_oss", "gpt_oss_mxfp4"];
    for name in families {
        for (backend, precision) in [(BackendKind::Host, Precision::Exact), (BackendKind::Host, Precision::Fast), (BackendKind::Reference, Precision::Exact)] {
            let m = Arc::new(Model::open(&tiny(name), &packlm::engine::OpenOptions::new(backend, 2, precision)).unwrap());
            check_model(&format!("{name} ({backend:?}, {precision:?})"), &m);
        }
        for (label, open) in gpu_model_openers() {
            check_model(&format!("{name} ({label})"), &open(&tiny(name)));
        }
    }
}

/// The host with each kernel path this CPU can run forced (AVX2 also on an AVX-512 machine,
/// and the portable kernels), at exact and fast, on a float fixture and both real GGUFs.
#[test]
fn every_forced_kernel_path_gives_each_session_its_own_bits() {
    use packlm::backend::cpu::CpuBackend;
    use packlm::backend::host::row_dot::Isa;
    use packlm::backend::host::HostBackend;
    let isas: Vec<Isa> = [Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::Portable].into_iter().filter(|i| i.available()).collect();
    assert!(!isas.is_empty());
    let mut packs = vec![tiny("llama"), tiny("gemma3")];
    packs.extend([smollm2(), gemma3_270m()].into_iter().flatten());
    for isa in isas {
        for precision in [Precision::Exact, Precision::Fast] {
            for p in &packs {
                let be = HostBackend::with_isa(2, isa).unwrap().with_precision(precision);
                let m = Arc::new(Model::open_on(p, Box::new(CpuBackend::new(be))).unwrap());
                check_model(&format!("{} ({isa:?} forced, {precision:?})", p.display()), &m);
            }
        }
    }
}

/// SmolLM2 Q4_1 and Gemma3 Q4_K_M, at exact and at fast.
#[test]
fn real_ggufs_give_each_session_its_own_bits() {
    for p in [smollm2(), gemma3_270m()].into_iter().flatten() {
        for precision in [Precision::Exact, Precision::Fast] {
            let m = Arc::new(Model::open(&p, &packlm::engine::OpenOptions::new(BackendKind::Host, 2, precision)).unwrap());
            check_model(&format!("{} ({precision:?})", p.display()), &m);
        }
    }
}

/// Sessions holding a prefix each, for the refusal tests.
fn prefilled(m: &Arc<Model>, n: usize) -> Vec<Session> {
    (0..n)
        .map(|i| {
            let mut s = Session::new(m.clone(), 64).unwrap();
            s.step_batch(&[1 + i as u32, 2, 3], Want::Last).unwrap();
            s
        })
        .collect()
}

/// A bad item refuses the whole call before anything runs, naming the item, and no session
/// changes (snapshot bytes and last logits before == after).
#[test]
fn a_refused_item_changes_no_session() {
    let m = open(&tiny("llama"));
    let other = open(&tiny("llama"));
    let vocab = m.spec().vocab_size as u32;
    let cases: Vec<(&str, Vec<Vec<u32>>, Status, &str)> = vec![
        ("a token out of range", vec![vec![5], vec![6, vocab], vec![7]], Status::ErrTokenOutOfRange, "item 1"),
        ("too many tokens", vec![vec![5], vec![6], vec![7; 62]], Status::ErrContextOverflow, "item 2"),
        ("no tokens", vec![vec![], vec![6], vec![7]], Status::ErrInvalidArgument, "item 0"),
    ];
    for (what, tokens, status, item) in cases {
        let mut ss = prefilled(&m, 3);
        let before: Vec<(Vec<u8>, Vec<f32>)> = ss.iter().map(|s| (s.snapshot(), s.last_logits().to_vec())).collect();
        let mut items: Vec<(&mut Session, &[u32], Want)> = ss.iter_mut().zip(&tokens).map(|(s, t)| (s, t.as_slice(), Want::Last)).collect();
        let e = Session::step_many(&mut items).unwrap_err();
        assert_eq!(e.status, status, "{what}: {e}");
        assert!(e.message.starts_with(item), "{what}: the message names {item}: {e}");
        let after: Vec<(Vec<u8>, Vec<f32>)> = ss.iter().map(|s| (s.snapshot(), s.last_logits().to_vec())).collect();
        assert!(before == after, "{what}: a session changed");
    }
    // A session of another model (the same pack opened twice is another model).
    let mut ss = prefilled(&m, 1);
    let mut o = prefilled(&other, 1);
    let before = (ss[0].snapshot(), o[0].snapshot());
    let e = Session::step_many(&mut [(&mut ss[0], &[5][..], Want::Last), (&mut o[0], &[6][..], Want::Last)]).unwrap_err();
    assert!(e.status == Status::ErrInvalidArgument && e.message.starts_with("item 1"), "{e}");
    assert!(before == (ss[0].snapshot(), o[0].snapshot()), "a session changed");
    assert_eq!(Session::step_many(&mut []).unwrap_err().status, Status::ErrInvalidArgument);
}

/// An abort raised through any item's session stops the pass and no session changes; a pass
/// whose logits are not finite (NaN in a weight) is refused naming the item, and no session
/// changes, though every item's keys and values were appended by then.
#[test]
fn a_failed_pass_changes_no_session() {
    let m = open(&tiny("llama"));
    let mut ss = prefilled(&m, 3);
    let before: Vec<Vec<u8>> = ss.iter().map(|s| s.snapshot()).collect();
    ss[2].abort_flag().store(true, Ordering::Relaxed);
    let tokens = [vec![5u32, 6], vec![7], vec![8, 9, 10]];
    let mut items: Vec<(&mut Session, &[u32], Want)> = ss.iter_mut().zip(&tokens).map(|(s, t)| (s, t.as_slice(), Want::All)).collect();
    let e = Session::step_many(&mut items).unwrap_err();
    assert_eq!(e.status, Status::ErrAborted, "{e}");
    assert!(before == ss.iter().map(|s| s.snapshot()).collect::<Vec<_>>(), "an aborted shared pass changed a session");

    let nan = tiny_with_values("llama", "step-many-nan", &[("model.norm.weight", 3, f32::NAN)]);
    let m = open(&nan);
    let mut ss = prefilled_unchecked(&m, 3);
    let before: Vec<Vec<u8>> = ss.iter().map(|s| s.snapshot()).collect();
    let mut items: Vec<(&mut Session, &[u32], Want)> = ss.iter_mut().zip(&tokens).map(|(s, t)| (s, t.as_slice(), Want::Last)).collect();
    let e = Session::step_many(&mut items).unwrap_err();
    assert_eq!(e.status, Status::ErrNonFinite, "{e}");
    assert!(e.message.starts_with("item 0") && e.message.contains("output projection"), "{e}");
    assert!(before == ss.iter().map(|s| s.snapshot()).collect::<Vec<_>>(), "a refused non-finite pass changed a session");
    // Verifies only: the shared pass succeeds and the judging finds item 0's first row not
    // finite; every session is as before, counters included.
    use packlm::engine::speculative::Acceptance;
    use packlm::engine::Job;
    let counters: Vec<_> = ss.iter().map(|s| s.counters()).collect();
    let mut jobs: Vec<(&mut Session, Job)> = Vec::new();
    let (mut a, mut b) = ss.split_at_mut(1);
    jobs.push((&mut a[0], Job::Verify { pending: 4, draft: &[5, 6], acceptance: Acceptance::Greedy }));
    jobs.push((&mut b[0], Job::Verify { pending: 7, draft: &[8], acceptance: Acceptance::Greedy }));
    let e = Session::run_many(&mut jobs).unwrap_err();
    drop(jobs);
    let _ = (&mut a, &mut b);
    assert_eq!(e.status, Status::ErrNonFinite, "{e}");
    assert!(e.message.starts_with("item 0"), "{e}");
    assert!(before == ss.iter().map(|s| s.snapshot()).collect::<Vec<_>>(), "a refused verify pass changed a session");
    assert!(counters == ss.iter().map(|s| s.counters()).collect::<Vec<_>>(), "a refused verify pass changed the counters");
    let _ = std::fs::remove_dir_all(&nan);
}

/// Sessions holding a prefix fed with no logits (the NaN fixture's logits are refused).
fn prefilled_unchecked(m: &Arc<Model>, n: usize) -> Vec<Session> {
    (0..n)
        .map(|i| {
            let mut s = Session::new(m.clone(), 64).unwrap();
            s.step_batch(&[1 + i as u32, 2, 3], Want::None).unwrap();
            s
        })
        .collect()
}

// ---- The C call ----

mod c {
    use std::ffi::{CStr, CString};
    use std::path::Path;
    use std::ptr;

    use packlm::error::Status;
    use packlm::ffi::model::{packlm_model, packlm_model_free, packlm_model_open};
    use packlm::ffi::session::*;
    use packlm::ffi::state::packlm_snapshot;
    use packlm::ffi::status::packlm_last_error;

    pub fn open(path: &Path) -> *mut packlm_model { unsafe {
        let c = CString::new(path.to_str().unwrap()).unwrap();
        let mut m = ptr::null_mut();
        assert_eq!(packlm_model_open(c.as_ptr(), ptr::null(), &mut m), Status::Ok);
        m
    }}

    pub fn session(m: *mut packlm_model, prompt: &[u32]) -> *mut packlm_session { unsafe {
        let mut s = ptr::null_mut();
        assert_eq!(packlm_session_new(m, ptr::null(), &mut s), Status::Ok);
        assert_eq!(packlm_step_batch(s, prompt.as_ptr(), prompt.len(), PACKLM_WANT_LAST, ptr::null_mut()), Status::Ok);
        s
    }}

    pub fn snapshot(s: *mut packlm_session) -> Vec<u8> { unsafe {
        let mut need = 0usize;
        packlm_snapshot(s, ptr::null_mut(), 0, &mut need);
        let mut buf = vec![0u8; need];
        assert_eq!(packlm_snapshot(s, buf.as_mut_ptr(), need, &mut need), Status::Ok);
        buf
    }}

    pub fn last_error() -> String {
        unsafe { CStr::from_ptr(packlm_last_error()) }.to_string_lossy().into_owned()
    }

    pub fn item(s: *mut packlm_session, tokens: &[u32], want: u32, out: &mut [f32]) -> packlm_step_item {
        packlm_step_item {
            session: s,
            tokens: tokens.as_ptr(),
            n_tokens: tokens.len(),
            want,
            logits_out: out.as_mut_ptr(),
            capacity: out.len(),
            n_logits: usize::MAX,
            verify: ptr::null(),
            result: ptr::null_mut(),
        }
    }

    pub fn free(m: *mut packlm_model, ss: &[*mut packlm_session]) { unsafe {
        for &s in ss {
            packlm_session_free(s);
        }
        packlm_model_free(m);
    }}
}

/// packlm_step_sessions: the logits of each item are those packlm_step_batch gives the session
/// alone; every refusal names its item and changes no session (snapshot bytes before == after).
#[test]
fn the_c_call_equals_stepping_alone_and_refuses_bad_items_whole() { unsafe {
    use packlm::ffi::session::*;
    use std::ptr;
    let p = tiny("llama");
    let m = c::open(&p);
    let v = open(&p).spec().vocab_size;
    let (a, b, x) = (c::session(m, &[1, 2, 3]), c::session(m, &[4, 5]), c::session(m, &[6]));
    let (ra, rb) = (c::session(m, &[1, 2, 3]), c::session(m, &[4, 5]));
    let (ta, tb) = ([7u32], [8u32, 9, 10]);
    let (mut la, mut lb) = (vec![0f32; v], vec![0f32; 3 * v]);
    let mut items = [c::item(a, &ta, PACKLM_WANT_LAST, &mut la), c::item(b, &tb, PACKLM_WANT_ALL, &mut lb)];
    assert_eq!(packlm_step_sessions(m as *const _, items.as_mut_ptr(), 2), Status::Ok, "{}", c::last_error());
    assert_eq!((items[0].n_logits, items[1].n_logits), (v, 3 * v));
    let (mut wa, mut wb) = (vec![0f32; v], vec![0f32; 3 * v]);
    assert_eq!(packlm_step_batch(ra, ta.as_ptr(), 1, PACKLM_WANT_LAST, wa.as_mut_ptr()), Status::Ok);
    assert_eq!(packlm_step_batch(rb, tb.as_ptr(), 3, PACKLM_WANT_ALL, wb.as_mut_ptr()), Status::Ok);
    assert_bits_equal(&la, &wa, "item 0 vs alone");
    assert_bits_equal(&lb, &wb, "item 1 vs alone");

    // Refusals: each names its item, and no session changes.
    let other = c::open(&p);
    let y = c::session(other, &[1]);
    let bad_token = [v as u32];
    let mut small = vec![0f32; v - 1];
    type Edit = Box<dyn Fn(&mut [packlm_step_item; 3])>;
    let cases: Vec<(&str, Edit, Status, &str)> = vec![
        ("a session named twice", Box::new(move |it| it[2].session = a), Status::ErrInvalidArgument, "item 2"),
        ("a NULL session", Box::new(|it| it[1].session = ptr::null_mut()), Status::ErrNullArgument, "item 1"),
        ("a session of another model", Box::new(move |it| it[2].session = y), Status::ErrInvalidArgument, "item 2"),
        ("a token out of range", Box::new(move |it| it[1].tokens = bad_token.as_ptr()), Status::ErrTokenOutOfRange, "item 1"),
        ("no tokens", Box::new(|it| it[0].n_tokens = 0), Status::ErrInvalidArgument, "item 0"),
        ("a bad want", Box::new(|it| it[2].want = 9), Status::ErrInvalidArgument, "item 2"),
        ("NULL tokens", Box::new(|it| it[1].tokens = ptr::null()), Status::ErrNullArgument, "item 1"),
    ];
    let t = [11u32];
    for (what, edit, status, name) in cases {
        let before: Vec<Vec<u8>> = [a, b, x].iter().map(|&s| c::snapshot(s)).collect();
        let (mut o0, mut o1, mut o2) = (vec![0f32; v], vec![0f32; v], vec![0f32; v]);
        let mut it = [c::item(a, &t, PACKLM_WANT_LAST, &mut o0), c::item(b, &t, PACKLM_WANT_LAST, &mut o1), c::item(x, &t, PACKLM_WANT_LAST, &mut o2)];
        edit(&mut it);
        assert_eq!(packlm_step_sessions(m as *const _, it.as_mut_ptr(), 3), status, "{what}: {}", c::last_error());
        assert!(c::last_error().starts_with(&format!("packlm_step_sessions: {name}:")), "{what}: the message names {name}: {}", c::last_error());
        assert!(before == [a, b, x].iter().map(|&s| c::snapshot(s)).collect::<Vec<_>>(), "{what}: a session changed");
        assert!(o0.iter().chain(&o1).chain(&o2).all(|&f| f == 0.0), "{what}: logits were written");
    }
    // A buffer too small: the item's n_logits receives the floats it needs.
    let (mut o0, mut o1) = (vec![0f32; v], vec![0f32; v]);
    let mut it = [c::item(a, &t, PACKLM_WANT_LAST, &mut o0), c::item(b, &t, PACKLM_WANT_LAST, &mut small)];
    let before = c::snapshot(a);
    assert_eq!(packlm_step_sessions(m as *const _, it.as_mut_ptr(), 2), Status::ErrBufferTooSmall);
    assert_eq!(it[1].n_logits, v);
    assert!(c::last_error().starts_with("packlm_step_sessions: item 1:"), "{}", c::last_error());
    assert!(before == c::snapshot(a), "item 0's session changed");
    let _ = &mut o1;
    assert_eq!(packlm_step_sessions(m as *const _, it.as_mut_ptr(), 0), Status::ErrInvalidArgument);
    assert_eq!(packlm_step_sessions(ptr::null(), it.as_mut_ptr(), 1), Status::ErrNullArgument);
    assert_eq!(packlm_step_sessions(m as *const _, ptr::null_mut(), 1), Status::ErrNullArgument);
    assert_eq!(packlm_step_sessions(m as *const _, it.as_mut_ptr(), PACKLM_MAX_STEP_ITEMS + 1), Status::ErrLimitExceeded);
    c::free(m, &[a, b, x, ra, rb]);
    c::free(other, &[y]);
}}

/// Verify items of packlm_step_sessions, greedy and sampled, beside a step item: each result
/// (accepted count, next token, logits, counters), random state and session state equals
/// packlm_verify's on a twin session alone.
#[test]
fn the_c_call_takes_verify_items() { unsafe {
    use packlm::ffi::session::*;
    use packlm::ffi::speculative::*;
    use std::ptr;
    let p = tiny("llama");
    let m = c::open(&p);
    let v = open(&p).spec().vocab_size;
    let prompts: [&[u32]; 3] = [&[1, 2, 3], &[4, 5], &[6, 7, 8, 9]];
    let shared: Vec<_> = prompts.iter().map(|t| c::session(m, t)).collect();
    let alone: Vec<_> = prompts.iter().map(|t| c::session(m, t)).collect();
    let sampler = packlm_sampler_params { size: std::mem::size_of::<packlm_sampler_params>(), temperature: 0.8, top_k: 0, top_p: 1.0, min_p: 0.0, repetition_penalty: 1.0, recent: ptr::null(), n_recent: 0 };
    let params = |mode: u32, rng: *mut u64| packlm_verify_params {
        size: std::mem::size_of::<packlm_verify_params>(),
        mode,
        sampler: &sampler,
        draft_probs: ptr::null(),
        n_draft_probs: 0,
        rng_state: rng,
    };
    let result = |logits: &mut Vec<f32>| packlm_verify_result {
        size: std::mem::size_of::<packlm_verify_result>(),
        n_accepted: 0,
        next_token: 0,
        logits_out: logits.as_mut_ptr(),
        rounds: 0,
        drafted: 0,
        accepted: 0,
        logits_capacity: logits.len(),
        n_logits: 0,
    };
    // Item 0: a greedy verify; item 1: a sampled one; item 2: a step.
    let rows0 = [10u32, 11, 12, 13];
    let rows1 = [20u32, 21, 22];
    let step = [30u32];
    let (mut rng_shared, mut rng_alone) = (77u64, 77u64);
    let (mut l0, mut l1, mut l2) = (vec![0f32; v], vec![0f32; v], vec![0f32; v]);
    let (p0, p1) = (params(PACKLM_VERIFY_GREEDY, ptr::null_mut()), params(PACKLM_VERIFY_SAMPLED, &mut rng_shared));
    let (mut r0, mut r1) = (result(&mut l0), result(&mut l1));
    let mut items = [
        packlm_step_item { verify: &p0, result: &mut r0, ..c::item(shared[0], &rows0, 0, &mut []) },
        packlm_step_item { verify: &p1, result: &mut r1, ..c::item(shared[1], &rows1, 0, &mut []) },
        c::item(shared[2], &step, PACKLM_WANT_LAST, &mut l2),
    ];
    items[0].logits_out = ptr::null_mut();
    items[1].logits_out = ptr::null_mut();
    assert_eq!(packlm_step_sessions(m as *const _, items.as_mut_ptr(), 3), Status::Ok, "{}", c::last_error());

    let (mut a0, mut a1, mut a2) = (vec![0f32; v], vec![0f32; v], vec![0f32; v]);
    let (q0, q1) = (params(PACKLM_VERIFY_GREEDY, ptr::null_mut()), params(PACKLM_VERIFY_SAMPLED, &mut rng_alone));
    let (mut s0, mut s1) = (result(&mut a0), result(&mut a1));
    assert_eq!(packlm_verify(alone[0], rows0[0], rows0[1..].as_ptr(), 3, &q0, &mut s0), Status::Ok);
    assert_eq!(packlm_verify(alone[1], rows1[0], rows1[1..].as_ptr(), 2, &q1, &mut s1), Status::Ok);
    assert_eq!(packlm_step_batch(alone[2], step.as_ptr(), 1, PACKLM_WANT_LAST, a2.as_mut_ptr()), Status::Ok);
    for (what, x, y) in [("greedy", &r0, &s0), ("sampled", &r1, &s1)] {
        assert_eq!((x.n_accepted, x.next_token, x.rounds, x.drafted, x.accepted, x.n_logits), (y.n_accepted, y.next_token, y.rounds, y.drafted, y.accepted, y.n_logits), "{what} verify item vs packlm_verify");
    }
    assert_bits_equal(&l0, &a0, "greedy verify item's logits");
    assert_bits_equal(&l1, &a1, "sampled verify item's logits");
    assert_bits_equal(&l2, &a2, "step item's logits");
    assert_eq!(rng_shared, rng_alone, "the sampled verify's random state");
    assert_ne!(rng_shared, 77, "the sampled verify drew");
    for (i, (&x, &y)) in shared.iter().zip(&alone).enumerate() {
        assert!(c::snapshot(x) == c::snapshot(y), "session {i}'s state");
    }
    // A verify item with logits_out set is refused, naming it, and nothing changes.
    let before: Vec<Vec<u8>> = shared.iter().map(|&s| c::snapshot(s)).collect();
    let mut spare = vec![0f32; v];
    let mut bad = [packlm_step_item { verify: &p0, result: &mut r0, ..c::item(shared[0], &rows0, 0, &mut spare) }];
    assert_eq!(packlm_step_sessions(m as *const _, bad.as_mut_ptr(), 1), Status::ErrInvalidArgument);
    assert!(c::last_error().starts_with("packlm_step_sessions: item 0:"), "{}", c::last_error());
    assert!(before == shared.iter().map(|&s| c::snapshot(s)).collect::<Vec<_>>(), "a refused call changed a session");
    c::free(m, &[shared, alone].concat());
}}

/// A session in use by a call on another thread refuses the whole call (SESSION_BUSY, naming
/// the item), and the other items' sessions do not change. The other thread holds the session
/// with a long prefill on SmolLM2; the test waits until packlm_session_n_past reports it busy.
#[test]
fn a_busy_session_refuses_the_call() { unsafe {
    use packlm::ffi::session::*;
    let Some(p) = smollm2() else { return };
    let m = c::open(&p);
    let v = open(&p).spec().vocab_size;
    let (a, b) = (c::session(m, &[1, 2, 3]), c::session(m, &[4]));
    let before = c::snapshot(a);
    struct Send(*mut packlm_session);
    unsafe impl std::marker::Send for Send {}
    let busy = Send(b);
    let prefill = std::thread::spawn(move || {
        let busy = busy;
        let long: Vec<u32> = (0..1500u32).map(|i| 100 + i % 5000).collect();
        packlm_step_batch(busy.0, long.as_ptr(), long.len(), PACKLM_WANT_NONE, std::ptr::null_mut())
    });
    let mut n = 0usize;
    let started = std::time::Instant::now();
    while packlm_session_n_past(b, &mut n) != Status::ErrSessionBusy {
        assert!(started.elapsed().as_secs() < 60, "the other thread's prefill never held the session");
        std::thread::yield_now();
    }
    let t = [5u32];
    let (mut o0, mut o1) = (vec![0f32; v], vec![0f32; v]);
    let mut items = [c::item(a, &t, PACKLM_WANT_LAST, &mut o0), c::item(b, &t, PACKLM_WANT_LAST, &mut o1)];
    let st = packlm_step_sessions(m as *const _, items.as_mut_ptr(), 2);
    let prefilled = prefill.join().unwrap();
    assert_eq!(prefilled, Status::Ok);
    assert_eq!(st, Status::ErrSessionBusy, "{}", c::last_error());
    assert!(c::last_error().starts_with("packlm_step_sessions: item 1:"), "{}", c::last_error());
    assert!(before == c::snapshot(a), "item 0's session changed");
    c::free(m, &[a, b]);
}}
