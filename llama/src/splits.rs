//! `llama_model_load_from_splits`: a model split by llama.cpp's gguf-split, given as its files
//! in order. packlm opens a split model from its first file and finds the others beside it by
//! llama.cpp's names (`PREFIX-0000K-of-0000N.gguf`, `llama_split_path`), so the list must be
//! those files: each path is checked to be the file of that name (the same file, however the
//! path is spelled), and a list under other names is refused with a log line naming the first
//! path that differs (llama.cpp takes any names here; decision: one way of finding splits, the
//! one `llama_model_load_from_file` and every packlm door use).

use std::ffi::{c_char, CStr};
use std::path::{Path, PathBuf};
use std::ptr;

use crate::abi::ModelParams;
use crate::log::{error, guard};
use crate::model::{llama_model_load_from_file, LlamaModel};
use crate::names::split_postfix;

/// The prefix of `path` when it is named as split `k` (from 0) of `count` (`llama_split_prefix`).
fn prefix(path: &str, k: usize, count: usize) -> Option<&str> {
    path.strip_suffix(&split_postfix(k as i32, count as i32)).filter(|p| !p.is_empty())
}

/// Whether `a` and `b` name the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    matches!((std::fs::canonicalize(a), std::fs::canonicalize(b)), (Ok(x), Ok(y)) if x == y)
}

#[no_mangle]
pub unsafe extern "C" fn llama_model_load_from_splits(paths: *const *const c_char, n_paths: usize, params: ModelParams) -> *mut LlamaModel {
    const F: &str = "llama_model_load_from_splits";
    guard(F, ptr::null_mut(), || {
        if paths.is_null() || n_paths == 0 {
            error(F, "no split paths given (paths is NULL or n_paths is 0)");
            return ptr::null_mut();
        }
        let mut list = Vec::with_capacity(n_paths);
        for i in 0..n_paths {
            let p = *paths.add(i);
            if p.is_null() {
                error(F, &format!("paths[{i}] is NULL"));
                return ptr::null_mut();
            }
            let Ok(s) = CStr::from_ptr(p).to_str() else {
                error(F, &format!("paths[{i}] is not UTF-8"));
                return ptr::null_mut();
            };
            list.push(s);
        }
        if n_paths > 1 {
            let Some(pre) = prefix(list[0], 0, n_paths) else {
                error(F, &format!("{}: not named as split 1 of {n_paths} (PREFIX-00001-of-{n_paths:05}.gguf): this library finds a model's splits by llama.cpp's split names", list[0]));
                return ptr::null_mut();
            };
            for (k, p) in list.iter().enumerate().skip(1) {
                let want = PathBuf::from(format!("{pre}{}", split_postfix(k as i32, n_paths as i32)));
                if !same_file(Path::new(p), &want) {
                    error(F, &format!("paths[{k}] is {p}, not {}: the splits must be the files named by llama.cpp's split names, in order", want.display()));
                    return ptr::null_mut();
                }
            }
        }
        llama_model_load_from_file(*paths, params)
    })
}
