//! The hostile corpus: malformed packs (HF folders and GGUF files) built in a temp folder, each
//! run through open + a few steps by the `packlm` command line in a child process under an
//! address-space limit and a timeout. Every case must end with an exit status (never a signal,
//! a panic or a timeout); a case that opens must give finite logits; the cases that name the
//! defect they guard must fail with that status and name the key, file or limit.
//!
//! Unix only (FIFOs, links to /dev/zero, `ulimit -v`).
#![cfg(unix)]

mod common;

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Address-space limit of each child (KiB for `ulimit -v`): 4 GiB.
const AS_LIMIT_KIB: u64 = 4 * 1024 * 1024;
const TIMEOUT: Duration = Duration::from_secs(20);

/// What a case must end with.
enum Expect {
    /// Exit 1 with this status number, the message containing `needle`.
    Status(i32, &'static str),
    /// Exit 0 with finite logits, or exit 1 with any status.
    Any,
}

/// What the child does after open.
enum Run {
    /// `packlm logits PACK --tokens 1,2,3`: open and one batched pass of three tokens.
    Logits,
    /// `packlm generate PACK --chat -n 2`: open, the chat template, and two steps.
    Chat,
}

struct Corpus {
    root: PathBuf,
    failures: Vec<String>,
    n_cases: usize,
}

impl Corpus {
    fn new(tag: &str) -> Corpus {
        let root = std::env::temp_dir().join(format!("packlm-hostile-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        Corpus { root, failures: Vec::new(), n_cases: 0 }
    }

    /// A copy of the tiny fixture `base` as a new pack folder named `name`.
    fn folder(&self, name: &str, base: &str) -> PathBuf {
        let dir = self.root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(common::tiny(base)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
        }
        dir
    }

    /// A folder whose config.json is the fixture's with `edit` applied.
    fn config_case(&self, name: &str, base: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
        let dir = self.folder(name, base);
        let path = dir.join("config.json");
        let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        edit(&mut v);
        std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
        dir
    }

    /// Runs one case in a child process and records a failure instead of panicking, so that
    /// one run reports every case that misbehaves.
    fn check(&mut self, name: &str, pack: &Path, run: Run, expect: Expect) {
        self.n_cases += 1;
        let out = self.root.join(format!("{name}.logits"));
        let mut args: Vec<String> = vec![];
        match run {
            Run::Logits => args.extend(["logits".into(), pack.display().to_string(), "--tokens".into(), "1,2,3".into()]),
            Run::Chat => args.extend(["generate".into(), pack.display().to_string(), "--chat".into(), "--prompt".into(), "hi".into(), "-n".into(), "2".into()]),
        }
        args.extend(["--out".into(), out.display().to_string()].into_iter().filter(|_| matches!(run, Run::Logits)));
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -v {AS_LIMIT_KIB} && exec \"$@\""))
            .arg("sh")
            .arg(env!("CARGO_BIN_EXE_packlm"))
            .args(&args)
            .env("PACKLM_LOG", "off")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if start.elapsed() > TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut stderr);
        }
        let stderr = stderr.trim().to_string();
        let fail = |why: String| format!("{name}: {why}; stderr: {stderr}");
        let Some(status) = status else {
            self.failures.push(fail(format!("no exit within {TIMEOUT:?}")));
            return;
        };
        let Some(code) = status.code() else {
            self.failures.push(fail(format!("killed by a signal ({status})")));
            return;
        };
        // "error N (text)" as the command line prints it.
        let reported = stderr
            .split("error ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse::<i32>().ok());
        match (&expect, code) {
            (_, 101) => self.failures.push(fail("panicked".into())),
            (Expect::Status(want, needle), 1) => {
                if reported != Some(*want) || !stderr.contains(needle) {
                    self.failures.push(fail(format!("wanted status {want} naming {needle:?}")));
                }
            }
            (Expect::Status(want, _), c) => self.failures.push(fail(format!("exit {c}, wanted status {want}"))),
            (Expect::Any, 0) if matches!(run, Run::Logits) => {
                let bytes = std::fs::read(&out).unwrap_or_default();
                let finite = !bytes.is_empty()
                    && bytes.chunks_exact(4).all(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite());
                if !finite {
                    self.failures.push(fail("opened, but the logits are not all finite".into()));
                }
            }
            (Expect::Any, 0 | 1) => {}
            (Expect::Any, c) => self.failures.push(fail(format!("exit {c}"))),
        }
    }

    fn finish(self) {
        let _ = std::fs::remove_dir_all(&self.root);
        assert!(self.failures.is_empty(), "{} of {} cases misbehaved:\n{}", self.failures.len(), self.n_cases, self.failures.join("\n"));
    }
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo {}", path.display());
}

fn link_to_dev_zero(path: &Path) {
    let _ = std::fs::remove_file(path);
    std::os::unix::fs::symlink("/dev/zero", path).unwrap();
}

// Status numbers (src/error.rs).
const IO: i32 = 3;
const FORMAT: i32 = 4;
const UNSUPPORTED: i32 = 5;
const TENSOR: i32 = 6;
const LIMIT: i32 = 17;

#[test]
fn hostile_folders_end_with_a_status() {
    let mut c = Corpus::new("folders");

    // The untouched fixtures open and give finite logits (the harness itself works).
    let p = c.folder("plain_llama", "llama");
    c.check("plain_llama", &p, Run::Logits, Expect::Any);

    // Sizes taken on trust (they used to allocate per-layer tables before any check).
    let p = c.config_case("layers_1e8", "llama", |v| v["num_hidden_layers"] = json!(100_000_000u64));
    c.check("layers_1e8", &p, Run::Logits, Expect::Status(TENSOR, "num_hidden_layers"));
    let p = c.config_case("layers_one_more", "llama", |v| v["num_hidden_layers"] = json!(3));
    c.check("layers_one_more", &p, Run::Logits, Expect::Status(TENSOR, "num_hidden_layers"));
    let p = c.config_case("head_dim_2_31", "llama", |v| v["head_dim"] = json!(1u64 << 31));
    c.check("head_dim_2_31", &p, Run::Logits, Expect::Status(TENSOR, "head_dim"));
    let p = c.config_case("gemma4_global_head_dim_2_31", "gemma4", |v| v["global_head_dim"] = json!(1u64 << 31));
    c.check("gemma4_global_head_dim_2_31", &p, Run::Logits, Expect::Status(TENSOR, "global_head_dim"));
    for key in ["num_attention_heads", "intermediate_size", "vocab_size", "hidden_size"] {
        let name = format!("{key}_2_40");
        let p = c.config_case(&name, "llama", |v| {
            v[key] = json!(1u64 << 40);
            if key == "num_attention_heads" {
                v["num_key_value_heads"] = json!(1u64 << 40);
            }
        });
        c.check(&name, &p, Run::Logits, Expect::Status(TENSOR, key));
    }

    // Values that made every logit NaN.
    let p = c.config_case("rope_theta_0", "llama", |v| v["rope_parameters"]["rope_theta"] = json!(0.0));
    c.check("rope_theta_0", &p, Run::Logits, Expect::Status(FORMAT, "rope_theta"));
    let p = c.config_case("rope_theta_negative", "llama", |v| v["rope_parameters"]["rope_theta"] = json!(-10000.0));
    c.check("rope_theta_negative", &p, Run::Logits, Expect::Status(FORMAT, "rope_theta"));
    let p = c.config_case("rms_norm_eps_negative", "llama", |v| v["rms_norm_eps"] = json!(-1.0));
    c.check("rms_norm_eps_negative", &p, Run::Logits, Expect::Status(FORMAT, "rms_norm_eps"));
    let p = c.config_case("rms_norm_eps_beyond_f32", "llama", |v| v["rms_norm_eps"] = json!(1e300));
    c.check("rms_norm_eps_beyond_f32", &p, Run::Logits, Expect::Status(FORMAT, "rms_norm_eps"));
    let p = c.config_case("rms_norm_eps_0", "llama", |v| v["rms_norm_eps"] = json!(0.0));
    c.check("rms_norm_eps_0", &p, Run::Logits, Expect::Any);
    let p = c.config_case("yarn_factor_0", "llama_yarn", |v| v["rope_parameters"]["factor"] = json!(0.0));
    c.check("yarn_factor_0", &p, Run::Logits, Expect::Status(FORMAT, "factor"));
    let p = c.config_case("query_pre_attn_scalar_0", "gemma2", |v| v["query_pre_attn_scalar"] = json!(0));
    c.check("query_pre_attn_scalar_0", &p, Run::Logits, Expect::Status(FORMAT, "query_pre_attn_scalar"));
    let p = c.config_case("query_pre_attn_scalar_negative", "gemma2", |v| v["query_pre_attn_scalar"] = json!(-1));
    c.check("query_pre_attn_scalar_negative", &p, Run::Logits, Expect::Status(FORMAT, "query_pre_attn_scalar"));
    let p = c.config_case("softcap_0", "gemma2", |v| v["final_logit_softcapping"] = json!(0.0));
    c.check("softcap_0", &p, Run::Logits, Expect::Status(FORMAT, "final_logit_softcapping"));
    let p = c.config_case("heads_0", "llama", |v| v["num_attention_heads"] = json!(0));
    c.check("heads_0", &p, Run::Logits, Expect::Status(FORMAT, "num_attention_heads"));
    let p = c.config_case("layers_negative", "llama", |v| v["num_hidden_layers"] = json!(-2));
    c.check("layers_negative", &p, Run::Logits, Expect::Status(TENSOR, "num_hidden_layers"));
    let p = c.config_case("context_beyond_u32", "llama", |v| v["max_position_embeddings"] = json!(1u64 << 33));
    c.check("context_beyond_u32", &p, Run::Logits, Expect::Status(UNSUPPORTED, "max_position_embeddings"));
    let p = c.config_case("bos_beyond_vocab", "llama", |v| v["bos_token_id"] = json!(100_000));
    c.check("bos_beyond_vocab", &p, Run::Logits, Expect::Status(FORMAT, "bos_token_id"));
    let p = c.config_case("eos_beyond_vocab", "llama", |v| v["eos_token_id"] = json!([1, 300]));
    c.check("eos_beyond_vocab", &p, Run::Logits, Expect::Status(FORMAT, "eos_token_id"));
    let p = c.config_case("model_type_number", "llama", |v| v["model_type"] = json!(7));
    c.check("model_type_number", &p, Run::Logits, Expect::Status(FORMAT, "model_type"));

    // Files that are not what they claim.
    let p = c.folder("bad_json", "llama");
    std::fs::write(p.join("config.json"), b"{\"model_type\": \"llama\",").unwrap();
    c.check("bad_json", &p, Run::Logits, Expect::Status(FORMAT, "config.json"));
    let p = c.folder("config_fifo", "llama");
    mkfifo(&p.join("config.json"));
    c.check("config_fifo", &p, Run::Logits, Expect::Status(IO, "not a regular file"));
    let p = c.folder("config_dev_zero", "llama");
    link_to_dev_zero(&p.join("config.json"));
    c.check("config_dev_zero", &p, Run::Logits, Expect::Status(IO, "not a regular file"));
    let p = c.folder("tokenizer_dev_zero", "llama");
    link_to_dev_zero(&p.join("tokenizer.json"));
    c.check("tokenizer_dev_zero", &p, Run::Logits, Expect::Status(IO, "tokenizer.json"));
    let p = c.folder("generation_config_fifo", "llama");
    mkfifo(&p.join("generation_config.json"));
    c.check("generation_config_fifo", &p, Run::Logits, Expect::Status(IO, "generation_config.json"));
    let p = c.folder("shard_fifo", "llama");
    std::fs::write(p.join("model.safetensors.index.json"), br#"{"weight_map": {"a": "shard.safetensors"}}"#).unwrap();
    mkfifo(&p.join("shard.safetensors"));
    c.check("shard_fifo", &p, Run::Logits, Expect::Status(IO, "shard.safetensors"));
    let p = c.folder("config_over_cap", "llama");
    let mut big = vec![b' '; 17 * 1024 * 1024];
    big.extend_from_slice(b"{}");
    std::fs::write(p.join("config.json"), big).unwrap();
    c.check("config_over_cap", &p, Run::Logits, Expect::Status(LIMIT, "config.json"));

    // Hostile safetensors headers.
    let st = std::fs::read(common::tiny("llama").join("model.safetensors")).unwrap();
    let header_len = u64::from_le_bytes(st[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&st[8..8 + header_len]).unwrap();
    let with_header = |c: &Corpus, name: &str, h: &Value, data: &[u8]| -> PathBuf {
        let p = c.folder(name, "llama");
        let hb = serde_json::to_vec(h).unwrap();
        let mut f = (hb.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(&hb);
        f.extend_from_slice(data);
        std::fs::write(p.join("model.safetensors"), f).unwrap();
        p
    };
    let data = &st[8 + header_len..];
    for cut in [4usize, 8 + header_len / 2, st.len() - 1] {
        let name = format!("safetensors_cut_{cut}");
        let p = c.folder(&name, "llama");
        std::fs::write(p.join("model.safetensors"), &st[..cut]).unwrap();
        c.check(&name, &p, Run::Logits, Expect::Status(FORMAT, "model.safetensors"));
    }
    let p = c.folder("safetensors_header_len_huge", "llama");
    let mut f = st.clone();
    f[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(p.join("model.safetensors"), f).unwrap();
    c.check("safetensors_header_len_huge", &p, Run::Logits, Expect::Status(FORMAT, "model.safetensors"));
    let first = header.as_object().unwrap().keys().find(|k| *k != "__metadata__").unwrap().clone();
    let mut h = header.clone();
    h[&first]["data_offsets"] = json!([0u64, u64::MAX]);
    let p = with_header(&c, "safetensors_offsets_huge", &h, data);
    c.check("safetensors_offsets_huge", &p, Run::Logits, Expect::Status(FORMAT, "model.safetensors"));
    let mut h = header.clone();
    h[&first]["shape"] = json!([1u64 << 62, 1u64 << 62]);
    let p = with_header(&c, "safetensors_shape_huge", &h, data);
    c.check("safetensors_shape_huge", &p, Run::Logits, Expect::Any);
    let mut h = header.clone();
    h[&first]["dtype"] = json!("I64");
    let p = with_header(&c, "safetensors_dtype_i64", &h, data);
    c.check("safetensors_dtype_i64", &p, Run::Logits, Expect::Any);
    let mut h = header.clone();
    h[&first]["shape"] = json!([]);
    let p = with_header(&c, "safetensors_scalar", &h, data);
    c.check("safetensors_scalar", &p, Run::Logits, Expect::Any);

    // Chat templates without end.
    let p = c.folder("template_nested_loops", "llama");
    std::fs::write(p.join("chat_template.jinja"), "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}{% endfor %}{% endfor %}{% endfor %}").unwrap();
    c.check("template_nested_loops", &p, Run::Chat, Expect::Status(LIMIT, "fuel"));
    let p = c.folder("template_print_loop", "llama");
    std::fs::write(p.join("chat_template.jinja"), "{% for a in range(100000) %}{% for b in range(100000) %}{{ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' * 1000 }}{% endfor %}{% endfor %}").unwrap();
    c.check("template_print_loop", &p, Run::Chat, Expect::Status(LIMIT, "output"));
    let p = c.folder("template_raises", "llama");
    std::fs::write(p.join("chat_template.jinja"), "{{ raise_exception('no') }}").unwrap();
    c.check("template_raises", &p, Run::Chat, Expect::Status(10, "no"));
    let p = c.folder("template_fifo", "llama");
    mkfifo(&p.join("chat_template.jinja"));
    c.check("template_fifo", &p, Run::Chat, Expect::Status(IO, "chat_template.jinja"));

    c.finish();
}

/// The offset of the value of GGUF metadata key `key` (just after its type field), and the type.
fn gguf_value_at(bytes: &[u8], key: &str) -> (usize, u32) {
    let mut needle = (key.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(key.as_bytes());
    let at = bytes.windows(needle.len()).position(|w| w == needle.as_slice()).unwrap_or_else(|| panic!("{key} not in the GGUF"));
    let ty_at = at + needle.len();
    let ty = u32::from_le_bytes(bytes[ty_at..ty_at + 4].try_into().unwrap());
    (ty_at + 4, ty)
}

/// A copy of `bytes` with `key`'s value replaced by `value` (same type and width).
fn patch(bytes: &[u8], key: &str, value: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let (at, _) = gguf_value_at(bytes, key);
    out[at..at + value.len()].copy_from_slice(value);
    out
}

/// One GGUF case: `data` written to `<name>.gguf`, run for logits, then removed.
fn gguf_case(c: &mut Corpus, name: &str, data: &[u8], expect: Expect) {
    let p = c.root.join(format!("{name}.gguf"));
    std::fs::write(&p, data).unwrap();
    c.check(name, &p, Run::Logits, expect);
    let _ = std::fs::remove_file(&p);
}

#[test]
fn hostile_gguf_files_end_with_a_status() {
    let Some(model) = common::smollm2() else { return };
    let bytes = std::fs::read(&model).unwrap();
    let mut c = Corpus::new("gguf");
    let case = gguf_case;
    case(&mut c, "plain_smollm2", &bytes, Expect::Any);
    // The pack path itself: a FIFO, a link to /dev/zero.
    let fifo = c.root.join("pack.fifo");
    mkfifo(&fifo);
    c.check("pack_is_a_fifo", &fifo, Run::Logits, Expect::Status(IO, "not a regular file"));
    let zero = c.root.join("pack.zero");
    link_to_dev_zero(&zero);
    c.check("pack_is_dev_zero", &zero, Run::Logits, Expect::Status(IO, "not a regular file"));
    assert_eq!(gguf_value_at(&bytes, "llama.block_count").1, 4, "llama.block_count is a u32");
    case(&mut c, "block_count_u32_max", &patch(&bytes, "llama.block_count", &u32::MAX.to_le_bytes()), Expect::Status(TENSOR, "llama.block_count"));
    case(&mut c, "block_count_0", &patch(&bytes, "llama.block_count", &0u32.to_le_bytes()), Expect::Status(TENSOR, "llama.block_count"));
    assert_eq!(gguf_value_at(&bytes, "llama.rope.freq_base").1, 6, "llama.rope.freq_base is an f32");
    case(&mut c, "freq_base_0", &patch(&bytes, "llama.rope.freq_base", &0f32.to_le_bytes()), Expect::Status(FORMAT, "llama.rope.freq_base"));
    case(&mut c, "freq_base_nan", &patch(&bytes, "llama.rope.freq_base", &f32::NAN.to_le_bytes()), Expect::Status(FORMAT, "llama.rope.freq_base"));
    case(&mut c, "freq_base_inf", &patch(&bytes, "llama.rope.freq_base", &f32::INFINITY.to_le_bytes()), Expect::Status(FORMAT, "llama.rope.freq_base"));
    case(&mut c, "eps_negative", &patch(&bytes, "llama.attention.layer_norm_rms_epsilon", &(-1f32).to_le_bytes()), Expect::Status(FORMAT, "rms_norm_eps"));
    case(&mut c, "eps_nan", &patch(&bytes, "llama.attention.layer_norm_rms_epsilon", &f32::NAN.to_le_bytes()), Expect::Status(FORMAT, "llama.attention.layer_norm_rms_epsilon"));
    case(&mut c, "head_count_u32_max", &patch(&bytes, "llama.attention.head_count", &u32::MAX.to_le_bytes()), Expect::Any);
    case(&mut c, "head_count_0", &patch(&bytes, "llama.attention.head_count", &0u32.to_le_bytes()), Expect::Any);
    case(&mut c, "embedding_length_u32_max", &patch(&bytes, "llama.embedding_length", &u32::MAX.to_le_bytes()), Expect::Any);
    case(&mut c, "feed_forward_length_u32_max", &patch(&bytes, "llama.feed_forward_length", &u32::MAX.to_le_bytes()), Expect::Status(TENSOR, "intermediate_size"));
    case(&mut c, "context_length_u32_max", &patch(&bytes, "llama.context_length", &u32::MAX.to_le_bytes()), Expect::Any);
    case(&mut c, "bos_beyond_vocab", &patch(&bytes, "tokenizer.ggml.bos_token_id", &1_000_000u32.to_le_bytes()), Expect::Any);
    // Counts in the file header: tensors at 8..16, metadata entries at 16..24.
    let mut f = bytes.clone();
    f[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    case(&mut c, "tensor_count_huge", &f, Expect::Status(FORMAT, ""));
    let mut f = bytes.clone();
    f[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    case(&mut c, "kv_count_huge", &f, Expect::Status(FORMAT, ""));
    // A tensor entry: name, n_dims (u32), dims (u64 each), type (u32), offset (u64).
    let name = b"token_embd.weight";
    let mut needle = (name.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(name);
    let at = bytes.windows(needle.len()).position(|w| w == needle.as_slice()).unwrap() + needle.len();
    let n_dims = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let (dims_at, ty_at) = (at + 4, at + 4 + 8 * n_dims);
    let mut f = bytes.clone();
    f[dims_at..dims_at + 8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    case(&mut c, "tensor_dim_huge", &f, Expect::Status(FORMAT, "token_embd.weight"));
    let mut f = bytes.clone();
    f[ty_at..ty_at + 4].copy_from_slice(&99u32.to_le_bytes());
    case(&mut c, "tensor_type_99", &f, Expect::Status(UNSUPPORTED, "token_embd.weight"));
    let mut f = bytes.clone();
    f[at..at + 4].copy_from_slice(&9u32.to_le_bytes());
    case(&mut c, "tensor_n_dims_9", &f, Expect::Any);
    for cut in [24usize, 1000, ty_at, bytes.len() / 2] {
        case(&mut c, &format!("truncated_at_{cut}"), &bytes[..cut], Expect::Any);
    }
    c.finish();
}

/// A Gemma4 GGUF (llama.cpp's layout) whose per-layer keys or rope factors say what the
/// Gemma4 rule cannot: refused naming the key, never read as something else.
#[test]
fn hostile_gemma4_gguf_keys_are_refused() {
    let bytes = std::fs::read(common::tiny("gemma4").join("model.gguf")).unwrap();
    let mut c = Corpus::new("gemma4_gguf");
    let case = gguf_case;
    // An array value: element type (u32), count (u64), then the elements (int32 here).
    let element = |key: &str, i: usize, v: i32| {
        let (at, ty) = gguf_value_at(&bytes, key);
        assert_eq!(ty, 9, "{key} is an array");
        let mut out = bytes.clone();
        let e = at + 12 + 4 * i;
        out[e..e + 4].copy_from_slice(&v.to_le_bytes());
        out
    };
    case(&mut c, "plain", &bytes, Expect::Any);
    case(&mut c, "ffn_not_doubled", &element("gemma4.feed_forward_length", 1, 25), Expect::Status(UNSUPPORTED, "feed_forward_length"));
    case(&mut c, "sliding_kv_differ", &element("gemma4.attention.head_count_kv", 0, 1), Expect::Status(UNSUPPORTED, "head_count_kv"));
    case(&mut c, "full_kv_3_of_4", &element("gemma4.attention.head_count_kv", 1, 3), Expect::Status(UNSUPPORTED, "kv heads must divide"));
    case(&mut c, "value_length_swa_4", &patch(&bytes, "gemma4.attention.value_length_swa", &4u32.to_le_bytes()), Expect::Status(UNSUPPORTED, "value_length_swa"));
    case(&mut c, "rope_dims_8", &patch(&bytes, "gemma4.rope.dimension_count", &8u32.to_le_bytes()), Expect::Status(UNSUPPORTED, "rope.dimension_count"));
    // rope_freqs.weight = [1, 1, 1e30 x 6]: a factor of 0.5 is a scaling packlm does not read.
    let freqs: Vec<u8> = [1f32, 1.0, 1e30].iter().flat_map(|x| x.to_le_bytes()).collect();
    let at = bytes.windows(freqs.len()).position(|w| w == freqs.as_slice()).expect("rope_freqs data");
    let mut f = bytes.clone();
    f[at + 4..at + 8].copy_from_slice(&0.5f32.to_le_bytes());
    case(&mut c, "rope_freqs_half", &f, Expect::Status(UNSUPPORTED, "rope_freqs.weight"));
    c.finish();
}
