//! Generates include/packlm.h from the C boundary (src/ffi and the status constants) with
//! cbindgen, and gives the Linux shared library its SONAME, libpacklm.so.<ABI version>.
//! The header is checked in; CI rebuilds and fails when it differs.

/// The one ABI version constant, read from its definition in src/ffi/status.rs (a build script
/// cannot import the crate it builds), so that the SONAME never disagrees with the header.
fn abi_version(dir: &str) -> u32 {
    let path = format!("{dir}/src/ffi/status.rs");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let prefix = "pub const PACKLM_ABI_VERSION: u32 = ";
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|rest| rest.trim_end_matches(';').trim().parse().ok())
        .unwrap_or_else(|| panic!("{path}: no line `{prefix}N;`"))
}

fn main() {
    println!("cargo:rerun-if-changed=src/ffi");
    println!("cargo:rerun-if-changed=src/error.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let version = std::env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let abi = abi_version(&dir);
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        // Programs linked with -lpacklm record NEEDED libpacklm.so.<abi>; the Makefile's build
        // target puts that name beside libpacklm.so. `rustc-link-arg` (this package's own
        // links), not `rustc-link-arg-cdylib`: cargo passes a cdylib link argument of a package
        // on to every cdylib that depends on it (cargo issue 9562), after that cdylib's own
        // arguments, so libllama.so (llama/) came out with this SONAME. The cost: this
        // package's executables (the command line, tests) carry the SONAME too, which the
        // loader ignores for an executable.
        println!("cargo:rustc-link-arg=-Wl,-soname,libpacklm.so.{abi}");
    }
    let mut parts = version.split('.').map(|p| p.split('-').next().unwrap_or("0").to_string());
    let (major, minor, patch) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let mut config = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml parses");
    config.after_includes = Some(format!(
        "\n#define PACKLM_VERSION \"{version}\"\n#define PACKLM_VERSION_MAJOR {major}\n#define PACKLM_VERSION_MINOR {minor}\n#define PACKLM_VERSION_PATCH {patch}\n"
    ));
    // Only the boundary is parsed: src/ffi (and the modules it declares) and the status constants.
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(format!("{dir}/src/ffi/mod.rs"))
        .with_src(format!("{dir}/src/error.rs"))
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen: {e}"));
    let mut text = Vec::new();
    bindings.write(&mut text);
    let text = String::from_utf8(text).expect("cbindgen writes UTF-8");
    let path = format!("{dir}/include/packlm.h");
    // Rewrite only on change, so that the header's mtime follows its content.
    if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
        std::fs::write(&path, text).expect("write include/packlm.h");
    }
}
