//! Gives the Linux shared library the SONAME a llama.cpp client records: libllama.so.0.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-cdylib=-Wl,-soname,libllama.so.0");
    }
}
