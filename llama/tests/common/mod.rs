//! Shared helpers of the facade's integration tests: the tiny llama fixture as a model and
//! context, a log sink that keeps every line, and running a test in a child process under an
//! address-space limit.
#![allow(dead_code)]

use std::ffi::{c_char, c_void, CStr, CString};
use std::process::Command;
use std::sync::{Mutex, Once};

use llama::abi::{ContextParams, ModelParams, Token};
use llama::context::{llama_context_default_params, llama_init_from_model, LlamaContext};
use llama::model::{llama_model_default_params, llama_model_load_from_file, LlamaModel};

/// The tiny llama fixture (tests/fixtures/tiny/llama): 2 layers, 4 heads, 2 KV heads, hidden
/// 64, vocabulary 300, context 128, BOS 0, EOS 1 (its config.json).
pub fn fixture() -> CString {
    CString::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/tiny/llama")).unwrap()
}

/// llama.cpp's default model params with `n_gpu_layers` 0: the host backend, whose bits the
/// facade's tests compare with packlm's (the default, -1, runs on a GPU where there is one).
pub fn host_params() -> ModelParams {
    ModelParams { n_gpu_layers: 0, ..llama_model_default_params() }
}

/// The tiny llama fixture on the host backend.
pub fn model() -> *mut LlamaModel {
    let m = unsafe { llama_model_load_from_file(fixture().as_ptr(), host_params()) };
    assert!(!m.is_null(), "the fixture opens");
    m
}

/// A context of the fixture's own 128 positions.
pub fn context(m: *mut LlamaModel) -> *mut LlamaContext {
    let params = ContextParams { n_ctx: 0, ..llama_context_default_params() };
    let c = unsafe { llama_init_from_model(m, params) };
    assert!(!c.is_null(), "the context is made");
    c
}

/// Decodes `tokens` (logits of the last) with `llama_batch_get_one`.
pub fn decode(c: *mut LlamaContext, tokens: &[Token]) -> i32 {
    let mut t = tokens.to_vec();
    unsafe { llama::context::llama_decode(c, llama::context::llama_batch_get_one(t.as_mut_ptr(), t.len() as i32)) }
}

/// Every line logged, with its level (`ggml_log_level`: 2 info, 3 warn, 4 error).
static LINES: Mutex<Vec<(i32, String)>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();

type Hook = fn(&str);
static HOOK: Mutex<Option<Hook>> = Mutex::new(None);

unsafe extern "C" fn keep(level: i32, text: *const c_char, _user: *mut c_void) {
    let line = CStr::from_ptr(text).to_string_lossy().into_owned();
    let hook = *HOOK.lock().unwrap();
    if let Some(h) = hook {
        h(&line);
    }
    LINES.lock().unwrap().push((level, line));
}

/// Sends the library's log lines to this test process's list (once per process).
pub fn capture_log() {
    INSTALL.call_once(|| llama::model::llama_log_set(Some(keep), std::ptr::null_mut()));
}

/// Whether a line logged so far contains every one of `parts`.
pub fn logged(parts: &[&str]) -> bool {
    LINES.lock().unwrap().iter().any(|(_, l)| parts.iter().all(|p| l.contains(p)))
}

/// Whether a line logged so far at `level` (2 info, 3 warn, 4 error) contains every one of
/// `parts`.
pub fn logged_at(level: i32, parts: &[&str]) -> bool {
    LINES.lock().unwrap().iter().any(|(v, l)| *v == level && parts.iter().all(|p| l.contains(p)))
}

/// A function every log line is passed to, on the thread that logs it (None: none).
pub fn set_log_hook(hook: Option<Hook>) {
    *HOOK.lock().unwrap() = hook;
}

const CHILD: &str = "LLAMA_TEST_IN_CHILD";
/// The address-space limit of `in_child` (KiB for `ulimit -v`): 1 GiB.
pub const LIMIT_KIB: u64 = 1 << 20;

/// Whether this process is the child `in_child` started.
pub fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// Runs the test `name` of this test binary alone in a child process limited to `LIMIT_KIB` of
/// address space, and asserts that it passed: an allocation the library sizes from an absurd
/// argument fails there (and aborted the process) instead of succeeding on paper.
pub fn in_child(name: &str) {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {LIMIT_KIB} && exec \"$@\""))
        .arg("sh")
        .arg(&exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name} under a {LIMIT_KIB} KiB address-space limit: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the test `name` of this test binary alone in a child process whose environment has
/// `vars` set (Some) or removed (None), and asserts that it passed: for settings read from
/// the environment, and for what the library learns once per process.
pub fn in_child_with(name: &str, vars: &[(&str, Option<&str>)]) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"]).env(CHILD, "1");
    for (k, v) in vars {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name} with {vars:?}: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The folder of tests/fixtures/tiny/`name`.
pub fn tiny(name: &str) -> std::path::PathBuf {
    std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/tiny")).join(name)
}

/// The model at `path` (a fixture folder or file), through the facade, on the host backend.
pub fn model_at(path: &std::path::Path) -> *mut LlamaModel {
    let p = CString::new(path.to_str().unwrap()).unwrap();
    let m = unsafe { llama_model_load_from_file(p.as_ptr(), host_params()) };
    assert!(!m.is_null(), "{} opens", path.display());
    m
}

/// Decodes one batch of (token, position, sequence, logits flag) entries.
pub unsafe fn decode_entries(c: *mut LlamaContext, entries: &[(Token, i32, i32, bool)]) -> i32 {
    use llama::context::{llama_batch_free, llama_batch_init, llama_decode};
    let b = llama_batch_init(entries.len() as i32, 0, 1);
    for (i, &(t, p, s, l)) in entries.iter().enumerate() {
        *b.token.add(i) = t;
        *b.pos.add(i) = p;
        *b.n_seq_id.add(i) = 1;
        **b.seq_id.add(i) = s;
        *b.logits.add(i) = l as i8;
    }
    let b = llama::abi::Batch { n_tokens: entries.len() as i32, ..b };
    let r = llama_decode(c, b);
    llama_batch_free(b);
    r
}

/// `n` floats at `p`, which must not be NULL.
pub unsafe fn floats(p: *const f32, n: usize, what: &str) -> Vec<f32> {
    assert!(!p.is_null(), "{what} is NULL");
    std::slice::from_raw_parts(p, n).to_vec()
}

pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The tokens the offload tests decode (the tiny llama fixture's ids).
pub const TOKENS: [i32; 6] = [0, 5, 6, 7, 250, 3];

/// The fixture's logits of every row of `TOKENS` through `llama_decode` on model `m`.
pub fn decode_all(m: *mut LlamaModel) -> Vec<f32> {
    let c = context(m);
    let entries: Vec<_> = TOKENS.iter().enumerate().map(|(i, &t)| (t, i as i32, 0, true)).collect();
    unsafe {
        assert_eq!(decode_entries(c, &entries), 0);
        let v = floats(llama::context::llama_get_logits(c), TOKENS.len() * 300, "logits");
        llama::context::llama_free(c);
        v
    }
}

/// packlm's logits of every row of `TOKENS` on `model`.
pub fn packlm_all(model: &packlm::Model) -> Vec<f32> {
    let tokens: Vec<u32> = TOKENS.iter().map(|&t| t as u32).collect();
    model.session().unwrap().step_batch(&tokens, packlm::Want::All).unwrap()
}
