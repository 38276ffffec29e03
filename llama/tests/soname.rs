//! The library cargo builds is named as a llama.cpp client records it: SONAME libllama.so.0
//! (llama/build.rs), not packlm's, whatever the build that made it (a bare `cargo build -p
//! llama` included, without the Makefile).
#![cfg(target_os = "linux")]

use std::process::Command;

#[test]
fn the_built_library_has_libllama_s_soname() {
    // This test's executable lies in <target>/<profile>/deps, beside the cdylib cargo built for it.
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().join("libllama.so");
    assert!(lib.is_file(), "{} is missing", lib.display());
    let out = Command::new("objdump").arg("-p").arg(&lib).output().expect("objdump (binutils) runs");
    assert!(out.status.success(), "objdump -p {}", lib.display());
    let text = String::from_utf8_lossy(&out.stdout);
    let soname: Vec<&str> = text.lines().filter_map(|l| l.trim().strip_prefix("SONAME")).map(str::trim).collect();
    assert_eq!(soname, ["libllama.so.0"], "{}", lib.display());
}
