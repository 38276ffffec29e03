//! Gives the Linux shared library the SONAME a program linked with -lggml records
//! (libggml.so.0, as llama.cpp's build names it).
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-cdylib=-Wl,-soname,libggml.so.0");
    }
}
