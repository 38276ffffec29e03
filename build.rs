//! Generates include/packlm.h from the C boundary (src/ffi and the status enum) with cbindgen.
//! The header is checked in; CI rebuilds and fails when it differs.

fn main() {
    println!("cargo:rerun-if-changed=src/ffi");
    println!("cargo:rerun-if-changed=src/error.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let version = std::env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
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
    // Only the boundary is parsed: src/ffi (and the modules it declares) and the status enum.
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(format!("{dir}/src/ffi/mod.rs"))
        .with_src(format!("{dir}/src/error.rs"))
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen: {e}"));
    let mut text = Vec::new();
    bindings.write(&mut text);
    // Status values are spelled PACKLM_OK / PACKLM_ERR_* in C (cbindgen would qualify them with
    // the whole type name).
    let text = String::from_utf8(text).expect("cbindgen writes UTF-8").replace("PACKLM_STATUS_", "PACKLM_");
    let path = format!("{dir}/include/packlm.h");
    // Rewrite only on change, so that the header's mtime follows its content.
    if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
        std::fs::write(&path, text).expect("write include/packlm.h");
    }
}
