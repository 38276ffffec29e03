//! Gives the Linux shared library the SONAME a program linked with -lggml-base records
//! (libggml-base.so.0, as llama.cpp's build names it), and compiles ggml_abort's C part.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-cdylib=-Wl,-soname,libggml-base.so.0");
    }
    println!("cargo:rerun-if-changed=src/abort.c");
    cc::Build::new().file("src/abort.c").warnings(true).extra_warnings(true).warnings_into_errors(true).compile("ggml_base_abort");
}
