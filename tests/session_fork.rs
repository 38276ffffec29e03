//! Forks (`Session::fork`, `packlm_session_fork`): a fork has its source's exact state, and a
//! fork and its source then diverging give both the bits of fresh sessions fed the same tokens,
//! through steps across page boundaries, truncates below the fork point, forks of forks,
//! verify, restore and shared passes, on every family fixture and backend and both real GGUFs.
//! Their keys and values are shared, not copied: 16 forks of 2048 positions hold one copy.

mod common;

use std::sync::Arc;

use common::*;
use packlm::backend::{BackendKind, Precision};
use packlm::engine::speculative::Acceptance;
use packlm::engine::{Job, Model, Session, Want};
use packlm::error::Status;

fn ids(seed: u32, n: usize, vocab: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (seed.wrapping_mul(2_654_435_761).wrapping_add(i * 7919) >> 3) % vocab as u32).collect()
}

/// Every logit of a fresh session fed `history` and then `tail` (one pass each), the rows of
/// `tail`.
fn fresh(m: &Arc<Model>, history: &[u32], tail: &[u32]) -> Vec<f32> {
    let mut s = Session::new(m.clone(), 0).unwrap();
    if !history.is_empty() {
        s.step_batch(history, Want::None).unwrap();
    }
    s.step_batch(tail, Want::All).unwrap()
}

fn check_model(what: &str, m: &Arc<Model>) {
    let vocab = m.spec().vocab_size.min(250);
    // P crosses a page boundary (64 rows); the fork's first step copies the page it shares.
    let (p, x, y, z, w) = (ids(1, 70, vocab), ids(2, 5, vocab), ids(3, 45, vocab), ids(4, 9, vocab), ids(5, 3, vocab));
    let mut a = Session::new(m.clone(), 0).unwrap();
    a.step_batch(&p, Want::Last).unwrap();
    let mut b = a.fork();
    assert_eq!(b.tokens(), a.tokens(), "{what}: a fork's tokens");
    assert_bits_equal(b.last_logits(), a.last_logits(), &format!("{what}: a fork's last logits"));
    assert!(b.snapshot() == a.snapshot(), "{what}: a fork's snapshot is its source's");

    // Both diverge: A a few tokens, B across the next page boundary.
    let ax = a.step_batch(&x, Want::All).unwrap();
    let by = b.step_batch(&y, Want::All).unwrap();
    assert_bits_equal(&ax, &fresh(m, &p, &x), &format!("{what}: the source after the fork"));
    assert_bits_equal(&by, &fresh(m, &p, &y), &format!("{what}: the fork after the fork"));

    // A fork of the fork; then B truncated below the first fork point (inside page 0) and fed
    // other tokens; then the source dropped, and the fork of the fork fed more.
    let mut c = b.fork();
    b.truncate(40).unwrap();
    let bz = b.step_batch(&z, Want::All).unwrap();
    assert_bits_equal(&bz, &fresh(m, &p[..40], &z), &format!("{what}: a fork truncated below the fork point"));
    let a_snapshot = a.snapshot();
    drop(a);
    let cw = c.step_batch(&w, Want::All).unwrap();
    assert_bits_equal(&cw, &fresh(m, &[&p[..], &y].concat(), &w), &format!("{what}: a fork of a fork, its sources changed or dropped"));

    // Verify on a fork: the outcome and state of a fresh session's verify.
    let history = [&p[..], &y, &w].concat();
    let mut d = c.fork();
    let mut e = Session::new(m.clone(), 0).unwrap();
    e.step_batch(&history, Want::Last).unwrap();
    let (pending, draft) = (ids(6, 1, vocab)[0], ids(7, 4, vocab));
    let (od, oe) = (d.verify(pending, &draft, Acceptance::Greedy).unwrap(), e.verify(pending, &draft, Acceptance::Greedy).unwrap());
    assert_eq!(format!("{od:?}"), format!("{oe:?}"), "{what}: verify on a fork");
    assert!(d.snapshot() == e.snapshot(), "{what}: a fork's state after verify");

    // Restore into a fork, then step: the restored session's bits.
    d.restore(&a_snapshot).unwrap();
    let dz = d.step_batch(&z, Want::All).unwrap();
    assert_bits_equal(&dz, &fresh(m, &[&p[..], &x].concat(), &z), &format!("{what}: a fork restored from a snapshot"));

    // A session and its fork in one shared pass.
    let mut f = c.fork();
    let shared = Session::run_many(&mut [(&mut c, Job::Step { tokens: &x, want: Want::All }), (&mut f, Job::Step { tokens: &y[..7], want: Want::All })]).unwrap();
    let got: Vec<Vec<f32>> = shared
        .into_iter()
        .map(|r| match r {
            packlm::engine::JobResult::Logits(l) => l,
            other => panic!("{what}: a step gave {other:?}"),
        })
        .collect();
    let base = [&p[..], &y, &w].concat();
    assert_bits_equal(&got[0], &fresh(m, &base, &x), &format!("{what}: a session beside its fork in one pass"));
    assert_bits_equal(&got[1], &fresh(m, &base, &y[..7]), &format!("{what}: a fork beside its source in one pass"));
}

#[test]
fn a_fork_and_its_source_diverging_give_fresh_bits() {
    let families = ["llama", "llama_llama3", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_pattern", "gemma4", "gemma4_wide"];
    for name in families {
        for (backend, precision) in [(BackendKind::Host, Precision::Exact), (BackendKind::Host, Precision::Fast), (BackendKind::Reference, Precision::Exact)] {
            let m = Arc::new(Model::open(&tiny(name), &packlm::engine::OpenOptions::new(backend, 2, precision)).unwrap());
            check_model(&format!("{name} ({backend:?}, {precision:?})"), &m);
        }
        #[cfg(feature = "gpu")]
        if gpu().is_some() {
            check_model(&format!("{name} (gpu)"), &open_gpu(&tiny(name), false));
        }
    }
    for p in [smollm2(), gemma3_270m()].into_iter().flatten() {
        for precision in [Precision::Exact, Precision::Fast] {
            let m = Arc::new(Model::open(&p, &packlm::engine::OpenOptions::new(BackendKind::Host, 2, precision)).unwrap());
            check_model(&format!("{} ({precision:?})", p.display()), &m);
        }
    }
}

/// A copy of the tiny llama fixture whose context holds 4096 positions.
fn long_llama() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("packlm-fork-long-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(tiny("llama")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    config["max_position_embeddings"] = 4096.into();
    std::fs::write(dir.join("config.json"), serde_json::to_vec(&config).unwrap()).unwrap();
    dir
}

/// KV bytes held, not RSS: one session of 2048 positions holds 2 x 2048 x (its planes' widths)
/// floats; 16 forks of it hold nothing more before they diverge; once each has stepped one
/// token, each holds one page of 64 positions of its own; freed, they hold nothing.
fn sixteen_forks(what: &str, m: &Arc<Model>) {
    let mut a = Session::new(m.clone(), 0).unwrap();
    a.step_batch(&ids(9, 2048, 250), Want::Last).unwrap();
    let widths: usize = a.plane_widths().iter().flatten().sum();
    let one = 2 * 2048 * widths * 4;
    assert_eq!(a.kv_family_bytes(), one, "{what}: one session's KV bytes");
    let mut forks: Vec<Session> = (0..16).map(|_| a.fork()).collect();
    assert!(a.kv_family_bytes() as f64 <= 1.2 * one as f64, "{what}: 16 forks hold {} bytes, one session {one}", a.kv_family_bytes());
    assert_eq!(a.kv_family_bytes(), one, "{what}: forks copy no key or value");
    for (i, f) in forks.iter_mut().enumerate() {
        f.step_batch(&[i as u32 + 1], Want::Last).unwrap();
    }
    let page = 2 * 64 * widths * 4;
    assert_eq!(a.kv_family_bytes(), one + 16 * page, "{what}: each fork's own page");
    drop(forks);
    assert_eq!(a.kv_family_bytes(), one, "{what}: freed forks hold nothing");
}

#[test]
fn sixteen_forks_of_2048_positions_hold_one_copy() {
    let dir = long_llama();
    for backend in [BackendKind::Host, BackendKind::Reference] {
        sixteen_forks(&format!("{backend:?}"), &open_with(&dir, backend, 2));
    }
    #[cfg(feature = "gpu")]
    if gpu().is_some() {
        sixteen_forks("gpu", &open_gpu(&dir, false));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// On a device whose bindings hold one page, a fork's first step needs a second page for the
/// page it shares: refused with ErrOutOfMemory, naming the pool, both sessions unchanged; with
/// the fork freed, the source steps again.
#[cfg(feature = "gpu")]
#[test]
fn a_full_device_pool_refuses_a_step_and_changes_nothing() {
    if gpu().is_none() {
        return;
    }
    let m = open_gpu(&tiny("llama"), true);
    let mut a = Session::new(m.clone(), 0).unwrap();
    let n = m.spec().max_context.min(a.n_ctx());
    let max = packlm::engine::Session::new(m.clone(), 0).unwrap().n_ctx();
    assert!(max < 64, "4 KiB bindings hold fewer than a page of 64 rows ({max} positions, n_ctx {n})");
    a.step_batch(&ids(1, 3, 250), Want::Last).unwrap();
    let mut b = a.fork();
    let (sa, sb) = (a.snapshot(), b.snapshot());
    let e = b.step_batch(&[5], Want::Last).unwrap_err();
    assert_eq!(e.status, Status::ErrOutOfMemory, "{e}");
    assert!(e.to_string().contains("KV pool"), "{e}");
    assert!(a.snapshot() == sa && b.snapshot() == sb, "a refused step changed a session");
    drop(b);
    let got = a.step_batch(&[5], Want::All).unwrap();
    assert_bits_equal(&got, &fresh(&m, &ids(1, 3, 250), &[5]), "the source after its fork is freed");
}

/// The C call: a fork steps to a fresh session's bits; NULLs are refused by name.
#[test]
fn the_c_call_forks() {
    use packlm::ffi::model::{packlm_model_free, packlm_model_open};
    use packlm::ffi::session::*;
    let path = std::ffi::CString::new(tiny("gemma3").to_str().unwrap()).unwrap();
    unsafe {
        let mut model = std::ptr::null_mut();
        assert_eq!(packlm_model_open(path.as_ptr(), std::ptr::null(), &mut model), Status::Ok);
        let mut s = std::ptr::null_mut();
        assert_eq!(packlm_session_new(model, std::ptr::null(), &mut s), Status::Ok);
        let p = ids(3, 70, 250);
        assert_eq!(packlm_step_batch(s, p.as_ptr(), p.len(), PACKLM_WANT_NONE, std::ptr::null_mut()), Status::Ok);
        let mut f = std::ptr::null_mut();
        assert_eq!(packlm_session_fork(s, &mut f), Status::Ok);
        let mut logits = vec![0.0f32; 300];
        assert_eq!(packlm_step(f, 7, logits.as_mut_ptr()), Status::Ok);
        let m = open(&tiny("gemma3"));
        assert_bits_equal(&logits, &fresh(&m, &p, &[7]), "a C fork");
        let (mut bytes_s, mut bytes_f) = (0usize, 0usize);
        assert_eq!(packlm_session_kv_bytes(s, &mut bytes_s), Status::Ok);
        assert_eq!(packlm_session_kv_bytes(f, &mut bytes_f), Status::Ok);
        assert_eq!(bytes_s, bytes_f, "a family's bytes, asked of either");
        assert_eq!(packlm_session_fork(std::ptr::null(), &mut f), Status::ErrNullArgument);
        assert_eq!(packlm_session_fork(s, std::ptr::null_mut()), Status::ErrNullArgument);
        packlm_session_free(f);
        packlm_session_free(s);
        packlm_model_free(model);
    }
}
