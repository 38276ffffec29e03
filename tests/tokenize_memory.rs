//! Peak memory of tokenizing N bytes, as a multiple of N (its own test binary: the peak is
//! process-wide).

mod common;

use std::ffi::CString;

use common::*;
use packlm::ffi::model::{packlm_model, packlm_model_free, packlm_model_open};
use packlm::ffi::text::{packlm_tokenize, PACKLM_DEFAULT_MAX_TOKENIZE_BYTES};
use packlm::Status;

fn vm_hwm_kib() -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn vm_rss_kib() -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Peak bytes above the resident size while tokenizing `text` (size query and fill).
fn peak_of(m: *mut packlm_model, text: &str) -> usize { unsafe {
    // Writing 5 to clear_refs resets the peak to the current resident size (Linux 4.0+).
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    let base = vm_rss_kib();
    let mut n = 0;
    assert_eq!(packlm_tokenize(m, text.as_ptr() as _, text.len(), 0, std::ptr::null_mut(), 0, &mut n), Status::ErrBufferTooSmall);
    let mut ids = vec![0u32; n];
    assert_eq!(packlm_tokenize(m, text.as_ptr() as _, text.len(), 0, ids.as_mut_ptr(), n, &mut n), Status::Ok);
    (vm_hwm_kib().saturating_sub(base)) * 1024
}}

#[test]
fn tokenizing_n_bytes_peaks_under_a_stated_multiple_of_n() { unsafe {
    let mut models = vec![tiny("llama")];
    models.extend(smollm2());
    let n = PACKLM_DEFAULT_MAX_TOKENIZE_BYTES;
    let prose: String = "The quick brown fox jumps over the lazy dog. ".chars().cycle().take(n).collect();
    let digits: String = "3141592653589793238462643383279502884197".chars().cycle().take(n).collect();
    for path in models {
        let path_c = CString::new(path.to_str().unwrap()).unwrap();
        let mut m: *mut packlm_model = std::ptr::null_mut();
        assert_eq!(packlm_model_open(path_c.as_ptr(), std::ptr::null(), &mut m), Status::Ok);
        for (name, text) in [("prose", &prose), ("digits", &digits)] {
            let peak = peak_of(m, text);
            let multiple = peak as f64 / n as f64;
            eprintln!("{}: {name}: peak {peak} bytes above resident for {n} bytes = {multiple:.1} x N", path.display());
            assert!(multiple <= MAX_MULTIPLE, "{name}: {multiple:.1} x N > {MAX_MULTIPLE}");
        }
        packlm_model_free(m);
    }
}}

/// The stated bound (README, "Limits").
const MAX_MULTIPLE: f64 = 400.0;
