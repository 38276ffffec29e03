//! Threads: one pool of helper threads per process, grown to the largest count any model asks
//! for, capped per model, changeable after open, never changing a bit. One test function only,
//! so that no other test of this binary starts threads while the OS thread count is compared.

mod common;

use common::*;
use packlm::backend::{BackendKind, MAX_THREADS};
use packlm::engine::{Model, OpenOptions};
use packlm::error::Status;

/// The process's OS threads, from /proc/self/status.
fn os_threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn one_pool_per_process_and_a_thread_cap_per_model() {
    let (target_dir, draft_dir) = (tiny("llama"), tiny("qwen2"));
    let (t_tokens, d_tokens) = (golden(&target_dir).tokens, golden(&draft_dir).tokens);

    // A target on 3 threads, then a draft model on 2: the second open starts no thread.
    let target = open_with(&target_dir, BackendKind::Host, 3);
    let want = all_rows(&target, &t_tokens);
    let before = os_threads();
    let draft = open_with(&draft_dir, BackendKind::Host, 2);
    let draft_rows = all_rows(&draft, &d_tokens);
    assert_eq!(os_threads(), before, "opening and running a second model started threads");
    let again = open_with(&target_dir, BackendKind::Host, 3);
    assert_bits_equal(&all_rows(&again, &t_tokens), &want, "a second target model");
    assert_eq!(os_threads(), before, "a third model on as many threads started threads");

    // The cap changes after open; the bits do not.
    for threads in [1, 2, 5, 0, 3] {
        target.set_threads(threads).unwrap();
        assert_bits_equal(&all_rows(&target, &t_tokens), &want, &format!("target after set_threads({threads})"));
    }
    draft.set_threads(1).unwrap();
    assert_bits_equal(&all_rows(&draft, &d_tokens), &draft_rows, "draft after set_threads(1)");

    // More than the maximum is refused, not clamped, and the setting stays as it was.
    let e = target.set_threads(MAX_THREADS + 1).unwrap_err();
    assert_eq!(e.status, Status::ErrLimitExceeded, "{e:?}");
    assert!(e.message.contains(&(MAX_THREADS + 1).to_string()), "{}", e.message);
    assert_eq!(target.backend().threads(), 3);
    let e = Model::open(&target_dir, &OpenOptions { backend: BackendKind::Host, threads: MAX_THREADS + 1, precision: None, ..Default::default() }).err().unwrap();
    assert_eq!(e.status, Status::ErrLimitExceeded, "{e:?}");
}
