//! The log callback may call back into the library: it never runs under a library lock.
//! (Its own test binary: the callback is process-wide.)

mod common;

use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use packlm::ffi::control::packlm_set_log_callback;
use packlm::ffi::model::{packlm_model, packlm_model_free, packlm_model_open};
use packlm::Status;

static CALLS: AtomicUsize = AtomicUsize::new(0);

/// Re-registers itself on every message: under the old read lock this waited forever for the
/// write lock its own caller held.
extern "C" fn reregistering(_level: i32, _msg: *const c_char, user_data: *mut c_void) {
    CALLS.fetch_add(1, Ordering::SeqCst);
    assert_eq!(packlm_set_log_callback(Some(reregistering), user_data), Status::Ok);
}

fn open_tiny() -> Status { unsafe {
    let path = CString::new(tiny("llama").to_str().unwrap()).unwrap();
    let mut m: *mut packlm_model = std::ptr::null_mut();
    let st = packlm_model_open(path.as_ptr(), std::ptr::null(), &mut m);
    packlm_model_free(m);
    st
}}

#[test]
fn a_callback_that_sets_the_callback_returns() {
    assert_eq!(packlm_set_log_callback(Some(reregistering), std::ptr::null_mut()), Status::Ok);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Opening logs one info message, so the callback runs at least once.
        let _ = tx.send(open_tiny());
    });
    let got = rx.recv_timeout(Duration::from_secs(20));
    // (Only after a return: on a deadlock, resetting the callback would wait on the same lock.)
    assert_eq!(got, Ok(Status::Ok), "open with a re-registering log callback did not return");
    packlm_set_log_callback(None, std::ptr::null_mut());
    assert!(CALLS.load(Ordering::SeqCst) >= 1, "the callback never ran");
}
