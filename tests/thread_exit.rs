//! packlm called from a thread-exit destructor, after the thread's own error store is gone,
//! returns its status instead of aborting the process. (Its own test binary: a regression
//! aborts the whole process.)

use std::cell::Cell;
use std::ffi::CStr;
use std::sync::atomic::{AtomicI32, Ordering};

use packlm::ffi::model::{packlm_model_open, packlm_model};
use packlm::ffi::status::packlm_last_error;
use packlm::Status;

static STATUS_IN_DTOR: AtomicI32 = AtomicI32::new(-1);

struct CallsPacklmOnDrop;

impl Drop for CallsPacklmOnDrop {
    fn drop(&mut self) { unsafe {
        // A failing call: it records a message in the (destroyed) error store.
        let mut m: *mut packlm_model = std::ptr::null_mut();
        let st = packlm_model_open(std::ptr::null(), std::ptr::null(), &mut m);
        // And reading the message must not abort either.
        let msg = CStr::from_ptr(packlm_last_error()).to_string_lossy().into_owned();
        assert!(!msg.is_empty());
        STATUS_IN_DTOR.store(st as i32, Ordering::SeqCst);
    }}
}

thread_local! {
    static ON_EXIT: Cell<Option<CallsPacklmOnDrop>> = const { Cell::new(None) };
}

#[test]
fn a_call_from_a_thread_exit_destructor_returns_its_status() { unsafe {
    std::thread::spawn(|| {
        // Registered first, so destroyed after packlm's error store (destructors run in
        // reverse order of registration).
        ON_EXIT.with(|c| c.set(Some(CallsPacklmOnDrop)));
        let mut m: *mut packlm_model = std::ptr::null_mut();
        assert_eq!(packlm_model_open(std::ptr::null(), std::ptr::null(), &mut m), Status::ErrNullArgument);
    })
    .join()
    .unwrap();
    assert_eq!(STATUS_IN_DTOR.load(Ordering::SeqCst), Status::ErrNullArgument as i32);
}}
