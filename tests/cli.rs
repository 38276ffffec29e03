//! The `packlm` command line, driven as scripts drive it.

mod common;

use std::process::Command;

use common::*;

fn packlm(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_packlm")).args(args).output().expect("run packlm")
}

#[test]
fn logits_all_rows_match_the_golden_file() {
    let dir = tiny("qwen2");
    let g = golden(&dir);
    let toks: Vec<String> = g.tokens.iter().map(|t| t.to_string()).collect();
    let out = std::env::temp_dir().join(format!("packlm-cli-logits-{}", std::process::id()));
    let o = packlm(&["logits", dir.to_str().unwrap(), "--tokens", &toks.join(","), "--all", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = read_f32(&out);
    std::fs::remove_file(&out).ok();
    assert!(max_abs_diff(&got, &g.logits) <= 1e-4);
    // Last row only by default.
    let o = packlm(&["logits", dir.to_str().unwrap(), "--tokens", &toks.join(","), "--out", out.to_str().unwrap()]);
    assert!(o.status.success());
    let last = read_f32(&out);
    std::fs::remove_file(&out).ok();
    assert_eq!(last.len(), g.n_vocab);
    assert_bits_equal(&last, &got[got.len() - g.n_vocab..], "last row");
}

#[test]
fn info_and_tokenize_print_json() {
    let dir = tiny("llama");
    let o = packlm(&["info", dir.to_str().unwrap(), "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["family"], "llama");
    assert_eq!(v["n_vocab"], 300);
    assert_eq!(v["layers"].as_array().unwrap().len(), v["n_layers"].as_u64().unwrap() as usize);
    let o = packlm(&["tokenize", dir.to_str().unwrap(), "--text", "Hello world"]);
    let ids: Vec<u32> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(ids, vec![0, 41, 283, 77, 80, 265, 272, 77, 69]); // golden_tokenize.json, from HF
    let o = packlm(&["tokenize", dir.to_str().unwrap(), "--text", "Hello world", "--no-special"]);
    let ids: Vec<u32> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(ids, vec![41, 283, 77, 80, 265, 272, 77, 69]);
}

/// A mixture's counts, routing and dense layers (qwen3_moe_dense's config: 8 experts, 2 per
/// token, width 32, norm_topk_prob false, mlp_only_layers [1]), from the folder and, for the
/// Mixtral, gpt-oss and Qwen2-MoE GGUFs, from the file.
#[test]
fn info_shows_the_experts_and_the_dense_layers() {
    let o = packlm(&["info", tiny("qwen3_moe_dense").to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["experts"],
        serde_json::json!({"experts": 8, "experts_per_token": 2, "expert_width": 32, "routing": "softmax_top_k", "biases": false,
                           "shared_expert_width": null, "sparse_layers": [0, 2], "dense_layers": [1]})
    );
    assert_eq!(v["layers"][1]["experts"], serde_json::Value::Null);
    let o = packlm(&["info", tiny("mixtral").join("model.gguf").to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["family"], "mixtral");
    assert_eq!(v["experts"]["dense_layers"], serde_json::json!([]));
    // gpt-oss's GGUF (its config: 8 experts, 2 per token, width 32, four layers, all sparse).
    let o = packlm(&["info", tiny("gpt_oss").join("model.gguf").to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["family"], "gpt_oss");
    assert_eq!(
        v["experts"],
        serde_json::json!({"experts": 8, "experts_per_token": 2, "expert_width": 32, "routing": "top_k_softmax", "biases": true,
                           "shared_expert_width": null, "sparse_layers": [0, 1, 2, 3], "dense_layers": []})
    );
    assert_eq!((&v["layers"][0]["attention_sinks"], &v["layers"][0]["o_bias"], &v["layers"][0]["activation"]), (&serde_json::json!(true), &serde_json::json!(true), &serde_json::json!("clamped_swiglu")));
    // Qwen2-MoE's GGUF (config: shared_expert_intermediate_size 48; llama.cpp's qwen2moe does not
    // renormalize).
    let o = packlm(&["info", tiny("qwen2_moe").join("model.gguf").to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((&v["experts"]["shared_expert_width"], &v["experts"]["routing"]), (&serde_json::json!(48), &serde_json::json!("softmax_top_k")));
    let o = packlm(&["info", tiny("llama").to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["experts"], serde_json::Value::Null);
}

#[test]
fn generate_json_reports_tokens_and_rates() {
    let dir = tiny("llama");
    let o = packlm(&["generate", dir.to_str().unwrap(), "--prompt", "Hello", "-n", "5", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["tokens"].as_array().unwrap().len() <= 5);
    assert!(v["prompt_tokens"].as_u64().unwrap() >= 2);
    assert!(v["prefill_tok_s"].as_f64().unwrap() > 0.0);
}

/// `generate --prompt` parses special-token text as `tokenize` does (one BOS, not the pieces of
/// "<s>"), and `--no-special` makes it plain text.
#[test]
fn generate_parses_special_tokens_in_the_prompt_unless_told_not_to() {
    let dir = tiny("llama");
    let prompt_tokens = |extra: &[&str]| {
        let mut args = vec!["generate", dir.to_str().unwrap(), "--prompt", "<s>Hello world", "-n", "1", "--json"];
        args.extend_from_slice(extra);
        let o = packlm(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["prompt_tokens"].as_u64().unwrap()
    };
    // HF: "<s>" is BOS (id 0), then "Hello world" is 8 tokens (golden_tokenize.json); BOS once.
    let o = packlm(&["tokenize", dir.to_str().unwrap(), "--text", "<s>Hello world"]);
    let ids: Vec<u32> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(ids, vec![0, 41, 283, 77, 80, 265, 272, 77, 69]);
    assert_eq!(prompt_tokens(&[]), 9);
    // Plain text: BOS, then "<s>" spelled in ordinary tokens, then the 8.
    assert!(prompt_tokens(&["--no-special"]) > 10);
    let o = packlm(&["generate", dir.to_str().unwrap(), "--prompt", "x", "--chat", "--no-special"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--no-special applies to a plain --prompt"));
}

#[test]
fn errors_exit_non_zero_with_the_status() {
    let o = packlm(&["info", "/nonexistent/pack", "--json"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("error 3") && err.contains("/nonexistent/pack"), "{err}");
    let o = packlm(&["logits", tiny("llama").to_str().unwrap(), "--tokens", "1,99999", "--out", "/dev/null"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("outside the vocabulary"));
}

/// Exit code of a Rust panic in main: never acceptable, whatever the input.
const PANIC_EXIT: i32 = 101;

#[test]
fn a_closed_stdout_gives_a_message_and_a_non_zero_exit() {
    use std::process::Stdio;
    let dir = tiny("llama");
    // The read end is closed before packlm starts, as `| head -c0` would have it (closing it
    // after the spawn raced with packlm's write: on a loaded machine the write came first).
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let o = Command::new(env!("CARGO_BIN_EXE_packlm"))
        .args(["info", dir.to_str().unwrap(), "--json"])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("run packlm");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert_ne!(o.status.code(), Some(PANIC_EXIT), "{err}");
    assert!(err.contains("writing to stdout"), "{err}");
}

#[test]
fn an_argument_that_is_not_utf8_gives_a_message_and_a_non_zero_exit() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tiny("llama");
    let bad = std::ffi::OsStr::from_bytes(b"caf\xe9");
    let o = Command::new(env!("CARGO_BIN_EXE_packlm")).arg("tokenize").arg(&dir).arg("--text").arg(bad).output().expect("run packlm");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert_ne!(o.status.code(), Some(PANIC_EXIT), "{err}");
    assert!(err.contains("argument 4") && err.contains("not valid UTF-8"), "{err}");
}

#[test]
fn a_temperature_that_is_not_finite_is_refused() {
    let dir = tiny("llama");
    for t in ["nan", "inf", "-inf"] {
        let o = packlm(&["generate", dir.to_str().unwrap(), "--prompt", "Hello", "-n", "3", "--temp", t]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "--temp {t}: {err}");
        assert!(err.contains("--temp") && err.contains("temperature"), "--temp {t}: {err}");
        assert!(o.stdout.is_empty(), "--temp {t} printed {:?}", String::from_utf8_lossy(&o.stdout));
    }
}

/// `--precision` takes exact or fast; any other value exits non-zero with a message naming it,
/// before anything is printed.
#[test]
fn a_precision_that_is_not_exact_or_fast_is_refused() {
    let dir = tiny("llama");
    for (cmd, extra) in [("info", &["--json"][..]), ("generate", &["--prompt", "Hello", "-n", "1"][..])] {
        let mut args = vec![cmd, dir.to_str().unwrap()];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--precision", "bogus"]);
        let o = packlm(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{cmd} --precision bogus: {err}");
        assert!(err.contains("--precision") && err.contains("\"bogus\"") && err.contains("error 19"), "{cmd}: {err}");
        assert!(o.stdout.is_empty(), "{cmd} --precision bogus printed {:?}", String::from_utf8_lossy(&o.stdout));
    }
    let o = packlm(&["info", dir.to_str().unwrap(), "--precision"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--precision needs a value"));
}

/// `info` prints the precision in use: exact for the tiny float pack by default, exact on the
/// reference backend whatever is asked (it has no reduced-precision kernels).
#[test]
fn info_prints_the_precision_in_use() {
    let dir = tiny("llama");
    let precision = |extra: &[&str]| {
        let mut args = vec!["info", dir.to_str().unwrap(), "--json"];
        args.extend_from_slice(extra);
        let o = packlm(&args);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["precision"].as_str().map(str::to_string)
    };
    assert_eq!(precision(&[]).as_deref(), Some("exact"));
    assert_eq!(precision(&["--precision", "exact"]).as_deref(), Some("exact"));
    assert_eq!(precision(&["--backend", "reference", "--precision", "fast"]).as_deref(), Some("exact"));
}

/// Without a usable adapter (here: only the GL backend allowed, which this build leaves out),
/// `--backend gpu` fails with "backend unavailable" and says why; the process exits normally.
#[test]
fn the_gpu_backend_without_an_adapter_says_why() {
    let dir = tiny("llama");
    let o = Command::new(env!("CARGO_BIN_EXE_packlm")).args(["info", dir.to_str().unwrap(), "--backend", "gpu"]).env("WGPU_BACKEND", "gl").output().expect("run packlm");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("backend unavailable") || err.contains("BACKEND_UNAVAILABLE"), "{err}");
    assert!(err.contains("GPU"), "{err}");
}

/// `generate --parallel N` answers each prompt with the tokens a lone `generate` gives it (its
/// sessions step together), greedy and sampled with the same seed, with N below and above the
/// number of prompts.
#[test]
fn generate_parallel_answers_each_prompt_as_alone() {
    let dir = tiny("llama");
    let d = dir.to_str().unwrap();
    let prompts = ["Hello", "The quick brown fox", "a", "Once upon a time there"];
    for temp in ["0", "0.9"] {
        let alone: Vec<serde_json::Value> = prompts
            .iter()
            .map(|p| {
                let o = packlm(&["generate", d, "--prompt", p, "-n", "12", "--temp", temp, "--seed", "5", "--json"]);
                assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
                serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["tokens"].clone()
            })
            .collect();
        for n in ["1", "3", "8"] {
            let mut args = vec!["generate", d, "--parallel", n, "-n", "12", "--temp", temp, "--seed", "5", "--json"];
            for p in &prompts {
                args.extend(["--prompt", p]);
            }
            let o = packlm(&args);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let lines: Vec<serde_json::Value> = String::from_utf8(o.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            assert_eq!(lines.len(), prompts.len() + 1, "a line per prompt and a summary");
            for (i, want) in alone.iter().enumerate() {
                assert_eq!(lines[i]["prompt"], i);
                assert_eq!(&lines[i]["tokens"], want, "--parallel {n}, --temp {temp}: prompt {i}");
            }
            assert!(alone.iter().any(|t| !t.as_array().unwrap().is_empty()), "some prompt generated tokens");
        }
    }
    let o = packlm(&["generate", d, "--parallel", "0", "--prompt", "x"]);
    assert!(!o.status.success());
}

/// `generate --parallel N --samples K` answers each prompt K times, reply j with the tokens a
/// lone `generate --seed S+j` gives (the prompt prefilled once, the other sessions its forks).
#[test]
fn generate_samples_answer_as_alone_with_successive_seeds() {
    let dir = tiny("llama");
    let d = dir.to_str().unwrap();
    let prompts = ["Hello", "Once upon a time there"];
    let alone = |p: &str, seed: u64| {
        let seed = seed.to_string();
        let o = packlm(&["generate", d, "--prompt", p, "-n", "10", "--temp", "1", "--seed", &seed, "--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["tokens"].clone()
    };
    for n in ["2", "6"] {
        let o = packlm(&["generate", d, "--parallel", n, "--samples", "3", "--prompt", prompts[0], "--prompt", prompts[1], "-n", "10", "--temp", "1", "--seed", "7", "--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let lines: Vec<serde_json::Value> = String::from_utf8(o.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 7, "a line per reply and a summary");
        let mut distinct = std::collections::HashSet::new();
        for (i, line) in lines[..6].iter().enumerate() {
            let (p, j) = (i / 3, i % 3);
            assert!(line["prompt"] == p && line["sample"] == j, "{line}");
            assert_eq!(line["tokens"], alone(prompts[p], 7 + j as u64), "--parallel {n}: prompt {p}, sample {j}");
            distinct.insert(line["tokens"].to_string());
        }
        assert!(distinct.len() > 2, "samples of one prompt differ: {distinct:?}");
    }
    assert!(!packlm(&["generate", d, "--parallel", "2", "--samples", "0", "--prompt", "x"]).status.success());
}

/// `generate --grammar FILE` reads llama.cpp's GBNF (a line defines a rule with `::=`) and
/// llguidance's Lark otherwise: a reply under either grammar of the language (ab|cd){1,3}"."
/// is a sentence of it, at several seeds; a GBNF syntax error names its line.
#[test]
fn generate_grammar_reads_gbnf_and_lark() {
    let dir = std::env::temp_dir().join(format!("packlm-cli-grammar-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gbnf = dir.join("g.gbnf");
    let lark = dir.join("g.lark");
    let bad = dir.join("bad.gbnf");
    std::fs::write(&gbnf, "# two letters, up to three times\nroot ::= pair{1,3} \".\"\npair ::= \"ab\" | \"cd\"\n").unwrap();
    std::fs::write(&lark, "start: (\"ab\" | \"cd\")~1..3 \".\"\n").unwrap();
    std::fs::write(&bad, "root ::= \"a\"\npair ::= \"ab\" )\n").unwrap();
    let pack = tiny("llama");
    for file in [&gbnf, &lark] {
        for seed in ["1", "2", "3"] {
            let o = packlm(&["generate", pack.to_str().unwrap(), "--prompt", "Hello", "-n", "12", "--temp", "1", "--seed", seed, "--grammar", file.to_str().unwrap()]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let reply = String::from_utf8(o.stdout).unwrap();
            let body = reply.trim_end_matches('\n').strip_suffix('.').unwrap_or_else(|| panic!("{file:?}, seed {seed}: {reply:?} does not end with '.'"));
            assert!(!body.is_empty() && body.len() <= 6 && body.len() % 2 == 0, "{file:?}, seed {seed}: {reply:?}");
            assert!(body.as_bytes().chunks(2).all(|p| p == b"ab" || p == b"cd"), "{file:?}, seed {seed}: {reply:?}");
        }
    }
    let o = packlm(&["generate", pack.to_str().unwrap(), "--prompt", "Hello", "--grammar", bad.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("GBNF line 2"), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_dir_all(&dir).ok();
}

/// The texts, token ids and vectors of a sentence-transformers fixture's embeddings.json.
fn embeddings_fixture(name: &str) -> (Vec<String>, serde_json::Value, Vec<Vec<f32>>) {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(tiny(name).join("embeddings.json")).unwrap()).unwrap();
    let texts = v["texts"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect();
    let vectors = v["embeddings"].as_array().unwrap().iter().map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()).collect();
    (texts, v["tokens"].clone(), vectors)
}

fn f32_rows(v: &serde_json::Value) -> Vec<Vec<f32>> {
    v.as_array().unwrap().iter().map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()).collect()
}

/// `embed` on the texts of a sentence-transformers fixture gives its vectors within 1e-4, with
/// the pack's declared pooling (last, for embed_qwen3) and normalization, and its token ids.
#[test]
fn embed_matches_sentence_transformers() {
    let dir = tiny("embed_qwen3");
    let (texts, tokens, want) = embeddings_fixture("embed_qwen3");
    let mut args = vec!["embed", dir.to_str().unwrap()];
    for t in &texts {
        args.extend(["--text", t.as_str()]);
    }
    let o = packlm(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["model"], dir.to_str().unwrap());
    assert_eq!(v["pooling"], "last");
    assert_eq!(v["normalized"], true);
    assert_eq!(v["dim"], 64);
    assert_eq!(v["tokens"], tokens);
    let got = f32_rows(&v["embeddings"]);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let d = max_abs_diff(g, w);
        assert!(d <= 1e-4, "text {i} ({:?}): max-abs {d} from sentence-transformers", texts[i]);
    }
}

/// `--pooling none` gives each text its list of token vectors (one per token id, unnormalized
/// by default); `--pooling last --no-normalize` is the last of them; `--normalize` makes mean's
/// vectors unit length; a bad pooling, or both normalize flags, exit non-zero naming them.
#[test]
fn embed_pooling_and_normalize_flags() {
    let dir = tiny("embed_qwen3");
    let d = dir.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["embed", d, "--text", "Hi", "--text", "The dog sleeps."];
        args.extend_from_slice(extra);
        let o = packlm(&args);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let none = run(&["--pooling", "none"]);
    assert_eq!(none["pooling"], "none");
    assert_eq!(none["normalized"], false);
    let per_text = none["embeddings"].as_array().unwrap();
    assert_eq!(per_text.len(), 2);
    let mut token_rows = Vec::new();
    for (text, ids) in per_text.iter().zip(none["tokens"].as_array().unwrap()) {
        let rows = f32_rows(text);
        assert_eq!(rows.len(), ids.as_array().unwrap().len(), "one vector per token");
        assert!(rows.iter().all(|r| r.len() == 64));
        token_rows.push(rows);
    }
    let last = run(&["--pooling", "last", "--no-normalize"]);
    assert_eq!(last["normalized"], false);
    for (rows, pooled) in token_rows.iter().zip(f32_rows(&last["embeddings"])) {
        assert_bits_equal(&pooled, rows.last().unwrap(), "last pooling = the last token vector");
    }
    let mean = run(&["--pooling", "mean", "--normalize"]);
    assert_eq!((mean["pooling"].as_str(), mean["normalized"].as_bool()), (Some("mean"), Some(true)));
    for row in f32_rows(&mean["embeddings"]) {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
    }
    let o = packlm(&["embed", d, "--text", "Hi", "--pooling", "average"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("--pooling") && err.contains("\"average\""), "{err}");
    assert!(o.stdout.is_empty());
    let o = packlm(&["embed", d, "--text", "Hi", "--normalize", "--no-normalize"]);
    assert_eq!(o.status.code(), Some(1));
    let o = packlm(&["embed", d]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--text is required"));
}

/// The greedy tokens `generate` gives on tiny llama with `extra` arguments.
fn greedy_tokens(prompt: &str, extra: &[&str]) -> serde_json::Value {
    let dir = tiny("llama");
    let mut args = vec!["generate", dir.to_str().unwrap(), "--prompt", prompt, "-n", "8", "--json"];
    args.extend_from_slice(extra);
    let o = packlm(&args);
    assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["tokens"].clone()
}

/// `generate --lora` changes tiny llama's greedy continuation (the PEFT folder and its GGUF
/// alike), `--lora PATH:0` gives the base's, two `--lora` apply together; `--parallel`
/// applies it to every session;
/// `logits --lora` gives PEFT's logits (lora.json's tokens, scale 1) within 1e-4.
#[test]
fn lora_changes_generate_and_scale_zero_is_the_base() {
    let lora = tiny("lora_llama");
    let l = lora.to_str().unwrap();
    let gguf = lora.join("adapter.gguf");
    // Tokens checked when this test was written: the base gives [152, 220, 152, ...], the
    // adapter at scale 1 [142, 267, 220, ...].
    let prompt = "Once upon a time there";
    let base = greedy_tokens(prompt, &[]);
    let adapted = greedy_tokens(prompt, &["--lora", l]);
    assert_ne!(adapted, base, "the adapter changes the greedy continuation");
    assert_eq!(greedy_tokens(prompt, &["--lora", &format!("{l}:0")]), base);
    assert_eq!(greedy_tokens(prompt, &["--lora", &format!("{l}:1")]), adapted);
    assert_eq!(greedy_tokens(prompt, &["--lora", gguf.to_str().unwrap()]), adapted);
    // Two adapters apply together: +0.5 and -0.5 of the same one cancel.
    assert_eq!(greedy_tokens(prompt, &["--lora", &format!("{l}:0.5"), "--lora", &format!("{l}:-0.5")]), base);

    let dir = tiny("llama");
    let o = packlm(&["generate", dir.to_str().unwrap(), "--parallel", "2", "--prompt", prompt, "--prompt", "Hello", "-n", "8", "--json", "--lora", l]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let first: serde_json::Value = serde_json::from_str(String::from_utf8(o.stdout).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(first["tokens"], adapted, "--parallel applies the adapter");

    let golden: serde_json::Value = serde_json::from_slice(&std::fs::read(lora.join("lora.json")).unwrap()).unwrap();
    let toks: Vec<String> = golden["tokens"].as_array().unwrap().iter().map(|t| t.to_string()).collect();
    let out = std::env::temp_dir().join(format!("packlm-cli-lora-logits-{}", std::process::id()));
    let o = packlm(&["logits", dir.to_str().unwrap(), "--tokens", &toks.join(","), "--all", "--out", out.to_str().unwrap(), "--lora", l]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = read_f32(&out);
    std::fs::remove_file(&out).ok();
    let d = max_abs_diff(&got, &read_f32(&lora.join("logits_scale1.f32")));
    assert!(d <= 1e-4, "logits --lora: max-abs {d} from PEFT");
}

/// An adapter of another base fails naming the tensor that does not fit; a scale that is not a
/// finite number is refused naming it; nothing is printed.
#[test]
fn lora_of_another_base_or_a_bad_scale_is_refused() {
    let dir = tiny("llama");
    let other = tiny("lora_other_base");
    let o = packlm(&["generate", dir.to_str().unwrap(), "--prompt", "Hello", "-n", "4", "--lora", other.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("--lora") && err.contains("layers.0.self_attn.q_proj.lora_B"), "{err}");
    assert!(o.stdout.is_empty());
    let o = packlm(&["generate", dir.to_str().unwrap(), "--prompt", "Hello", "-n", "4", "--lora", other.join("adapter_as_llama.gguf").to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("blk.0.attn_q.weight.lora_b"), "{err}");
    let lora = tiny("lora_llama");
    for scale in ["x", "inf"] {
        let o = packlm(&["generate", dir.to_str().unwrap(), "--prompt", "Hello", "--lora", &format!("{}:{scale}", lora.to_str().unwrap())]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains("--lora") && err.contains(scale), "{err}");
    }
}

/// `logits --control-vector a.gguf:0.75 --control-vector b.gguf:-0.5` (default range 1 to the
/// last layer, as llama.cpp's) gives transformers' hooked logits (make_cvec_fixtures.py's
/// logits_gguf.f32) within 1e-4, `--control-vector-layers 1-1` the same on tiny llama's two
/// layers; `generate --control-vector` changes the greedy continuation and scale 0 gives the
/// base's; a range past the layers, a file that is not a control vector, a bad range are refused
/// naming the flag.
#[test]
fn control_vector_flags_match_transformers_and_refuse_bad_input() {
    let dir = tiny("llama");
    let cv = tiny("cvec_llama");
    let a = format!("{}:0.75", cv.join("a.gguf").to_str().unwrap());
    let b = format!("{}:-0.5", cv.join("b.gguf").to_str().unwrap());
    let info: serde_json::Value = serde_json::from_slice(&std::fs::read(cv.join("cvec.json")).unwrap()).unwrap();
    let toks: Vec<String> = info["tokens"].as_array().unwrap().iter().map(|t| t.to_string()).collect();
    let toks = toks.join(",");
    let want = read_f32(&cv.join("logits_gguf.f32"));
    for extra in [&[][..], &["--control-vector-layers", "1-1"][..]] {
        let out = std::env::temp_dir().join(format!("packlm-cli-cvec-logits-{}", std::process::id()));
        let mut args = vec!["logits", dir.to_str().unwrap(), "--tokens", &toks, "--all", "--out", out.to_str().unwrap(), "--control-vector", &a, "--control-vector", &b];
        args.extend_from_slice(extra);
        let o = packlm(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let got = read_f32(&out);
        std::fs::remove_file(&out).ok();
        let d = max_abs_diff(&got, &want);
        assert!(d <= 1e-4, "logits --control-vector {extra:?}: max-abs {d} from transformers");
    }
    let prompt = "Once upon a time there";
    let base = greedy_tokens(prompt, &[]);
    let a1 = cv.join("a.gguf");
    let a1 = a1.to_str().unwrap();
    assert_ne!(greedy_tokens(prompt, &["--control-vector", &format!("{a1}:2")]), base, "the vector changes the greedy continuation");
    assert_eq!(greedy_tokens(prompt, &["--control-vector", &format!("{a1}:0")]), base);

    let lora_gguf = tiny("lora_llama").join("adapter.gguf");
    for (extra, words) in [
        (vec!["--control-vector", a1, "--control-vector-layers", "0-5"], vec!["--control-vector", "0..=5"]),
        (vec!["--control-vector", a1, "--control-vector-layers", "x"], vec!["--control-vector-layers", "START-END"]),
        (vec!["--control-vector-layers", "1-1"], vec!["needs at least one --control-vector"]),
        (vec!["--control-vector", lora_gguf.to_str().unwrap()], vec!["--control-vector", "not a control vector"]),
        (vec!["--control-vector", &format!("{a1}:nan")], vec!["--control-vector", "not finite"]),
    ] {
        let mut args = vec!["generate", dir.to_str().unwrap(), "--prompt", "Hello", "-n", "4"];
        args.extend_from_slice(&extra);
        let o = packlm(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {err}");
        for w in words {
            assert!(err.contains(w), "{extra:?}: {err} lacks {w:?}");
        }
        assert!(o.stdout.is_empty());
    }
}

/// `--compile-ahead N` reaches the npu backend: `export-onnx` writes, besides the graphs of its
/// prefill and step, every graph an open compiles ahead for sessions of up to 100 positions
/// (the tiny llama's context is 128): parts of 1 to 64 rows in the KV buckets of 64 and 128
/// positions (`graph::ahead_passes`), where without it a prefill of 3 tokens and a step write
/// the parts of 2 and 1 rows of the bucket of 64. The other commands take it with the npu's
/// other options and generate the same tokens; a value that is not a count is refused, named.
/// Skipped, saying so, without ONNX Runtime unless PACKLM_REQUIRE_ONNXRUNTIME is set.
#[test]
fn compile_ahead_compiles_the_graphs_of_sessions_up_to_that_length() {
    if graph(1).is_none() {
        return;
    }
    let dir = tiny("llama");
    let shapes = |extra: &[&str]| {
        let out = std::env::temp_dir().join(format!("packlm-cli-ahead-{}-{}", extra.len(), std::process::id()));
        let mut args = vec!["export-onnx", dir.to_str().unwrap(), out.to_str().unwrap(), "--tokens", "1,2,3"];
        args.extend_from_slice(extra);
        let o = packlm(&args);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("graphs.json")).unwrap()).unwrap();
        std::fs::remove_dir_all(&out).unwrap();
        let mut shapes: Vec<(u64, u64)> = v["graphs"].as_array().unwrap().iter().map(|g| (g["rows"].as_u64().unwrap(), g["kv_rows"].as_u64().unwrap())).collect();
        shapes.sort();
        shapes.dedup();
        shapes
    };
    assert_eq!(shapes(&[]), vec![(1, 64), (2, 64)]);
    let ahead: Vec<(u64, u64)> = [1, 2, 4, 8, 16, 32, 64].iter().flat_map(|&r| [(r, 64), (r, 128)]).collect();
    assert_eq!(shapes(&["--compile-ahead", "100"]), ahead);

    let generated = |extra: &[&str]| {
        let mut args = vec!["generate", dir.to_str().unwrap(), "--prompt", "Hello world", "-n", "6", "--json", "--backend", "npu", "--ep", "cpu"];
        args.extend_from_slice(extra);
        let o = packlm(&args);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["tokens"].clone()
    };
    assert_eq!(generated(&["--compile-ahead", "100"]), generated(&[]));
    for bad in ["-1", "many"] {
        let o = packlm(&["info", dir.to_str().unwrap(), "--backend", "npu", "--compile-ahead", bad]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "--compile-ahead {bad}: {err}");
        assert!(err.contains("--compile-ahead") && err.contains(bad), "--compile-ahead {bad}: {err}");
    }
}
