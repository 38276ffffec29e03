//! packlm_tokenize: the input limit, one tokenizer pass per size query + fill, and peak memory
//! as a multiple of the text's length.

mod common;

use std::ffi::CString;

use common::*;
use packlm::ffi::model::{packlm_model, packlm_model_free, packlm_model_open};
use packlm::ffi::text::{packlm_model_set_max_tokenize_bytes, packlm_tokenize, tokenize_passes, PACKLM_DEFAULT_MAX_TOKENIZE_BYTES, PACKLM_TOKENIZE_ADD_SPECIAL};
use packlm::Status;

fn open_model(path: &std::path::Path) -> *mut packlm_model { unsafe {
    let path = CString::new(path.to_str().unwrap()).unwrap();
    let mut m: *mut packlm_model = std::ptr::null_mut();
    assert_eq!(packlm_model_open(path.as_ptr(), std::ptr::null(), &mut m), Status::Ok);
    m
}}

fn tokenize(m: *mut packlm_model, text: &str, flags: u32, cap: usize) -> (Status, Vec<u32>, usize) { unsafe {
    let mut out = vec![0u32; cap];
    let mut n = usize::MAX;
    let st = packlm_tokenize(m, text.as_ptr() as _, text.len(), flags, if cap == 0 { std::ptr::null_mut() } else { out.as_mut_ptr() }, cap, &mut n);
    out.truncate(if st == Status::Ok { n } else { 0 });
    (st, out, n)
}}

#[test]
fn text_over_the_limit_is_refused_and_the_limit_is_settable() { unsafe {
    let m = open_model(&tiny("llama"));
    // The default: 1 MiB accepted, one byte more refused.
    let big = "a".repeat(PACKLM_DEFAULT_MAX_TOKENIZE_BYTES + 1);
    let (st, _, n) = tokenize(m, &big, 0, 0);
    assert_eq!(st, Status::ErrLimitExceeded);
    assert_eq!(n, usize::MAX, "n written on a refused call");
    let (st, _, _) = tokenize(m, &big[1..], 0, 0);
    assert_eq!(st, Status::ErrBufferTooSmall, "1 MiB is within the default");
    // Lowered to 16 bytes: 16 pass, 17 do not.
    assert_eq!(packlm_model_set_max_tokenize_bytes(m, 16), Status::Ok);
    assert_eq!(tokenize(m, "sixteen bytes ok", 0, 64).0, Status::Ok);
    assert_eq!(tokenize(m, "seventeen bytes!!", 0, 64).0, Status::ErrLimitExceeded);
    // 0 restores the default.
    assert_eq!(packlm_model_set_max_tokenize_bytes(m, 0), Status::Ok);
    assert_eq!(tokenize(m, "seventeen bytes!!", 0, 64).0, Status::Ok);
    packlm_model_free(m);
}}

#[test]
fn a_size_query_and_its_fill_tokenize_once() { unsafe {
    let m = open_model(&tiny("llama"));
    let text = "Hello world, hello again";
    let (st, want, _) = tokenize(m, text, PACKLM_TOKENIZE_ADD_SPECIAL, 64);
    assert_eq!(st, Status::Ok);
    let passes = tokenize_passes(&*m);
    let (st, _, need) = tokenize(m, text, PACKLM_TOKENIZE_ADD_SPECIAL, 0);
    assert_eq!((st, need), (Status::ErrBufferTooSmall, want.len()));
    let (st, got, _) = tokenize(m, text, PACKLM_TOKENIZE_ADD_SPECIAL, need);
    assert_eq!(st, Status::Ok);
    assert_eq!(got, want);
    assert_eq!(tokenize_passes(&*m), passes + 1, "the fill tokenized again");
    // Other flags or other text are tokenized afresh, and still right.
    let (_, _, need) = tokenize(m, text, PACKLM_TOKENIZE_ADD_SPECIAL, 0);
    let (st, plain, _) = tokenize(m, text, 0, need);
    assert_eq!(st, Status::Ok);
    assert_eq!(&plain[..], &want[1..], "without BOS");
    assert_eq!(tokenize_passes(&*m), passes + 3);
    packlm_model_free(m);
}}
