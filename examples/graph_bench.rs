//! The npu backend (ONNX Runtime) against the host backend on one pack: open time, prefill and
//! decode tokens per second once every graph is compiled, the compile time of each pass shape
//! (the first pass of a shape less a later one of the same shape), and peak RSS, as one JSON
//! line per backend, each in a process of its own.
//!
//!   cargo run --release --example graph_bench -- PACK [--backend npu|host] [--precision exact|fast]
//!       [--threads N] [--prompt-tokens N] [--decode N]
//!
//! ONNX Runtime's library comes from PACKLM_ONNXRUNTIME (scripts/fetch_onnxruntime.sh).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use packlm::backend::{BackendKind, Precision};
use packlm::engine::{Model, OpenOptions, Session, Want};
use packlm::sample::argmax;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok()).unwrap_or(0.0) / 1024.0
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(pack) = args.first().filter(|a| !a.starts_with("--")) else {
        eprintln!("usage: graph_bench PACK [--backend npu|host] [--precision exact|fast] [--threads N] [--prompt-tokens N] [--decode N]");
        std::process::exit(2);
    };
    let backend: BackendKind = arg(&args, "--backend", "npu".to_string()).parse().unwrap_or_else(|e| panic!("--backend: {e}"));
    let precision: Precision = arg(&args, "--precision", "exact".to_string()).parse().unwrap_or_else(|e| panic!("--precision: {e}"));
    let threads = arg(&args, "--threads", 2usize);
    let n_prompt = arg(&args, "--prompt-tokens", 128usize);
    let n_decode = arg(&args, "--decode", 32usize);
    let t = Instant::now();
    let m = Arc::new(Model::open(Path::new(pack), &OpenOptions { backend, threads, precision: Some(precision), ..Default::default() }).unwrap_or_else(|e| panic!("open: {e}")));
    let open_s = t.elapsed().as_secs_f64();
    let text = "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step. ".repeat(64);
    let mut prompt = m.vocab().encode(&text, true, false).unwrap();
    prompt.truncate(n_prompt);
    let compiles = || m.backend().counters().map_or(0, |c| c.graphs_compiled);
    // Prefill: the first pass compiles its graph; the best of three later ones is the speed.
    let c0 = compiles();
    let mut first_prefill = 0.0;
    let mut best_prefill = f64::MAX;
    for i in 0..4 {
        let mut s = Session::new(m.clone(), 0).unwrap();
        let t = Instant::now();
        s.step_batch(&prompt, Want::Last).unwrap();
        let e = t.elapsed().as_secs_f64();
        if i == 0 {
            first_prefill = e;
        } else {
            best_prefill = best_prefill.min(e);
        }
    }
    let prefill_graphs = compiles() - c0;
    // Decode: the first step at these positions compiles the decode graph (one KV bucket holds
    // every step below: positions n_prompt .. n_prompt + n_decode + 1 stay under a power of two
    // when n_prompt is one).
    let mut s = Session::new(m.clone(), 0).unwrap();
    s.step_batch(&prompt, Want::Last).unwrap();
    let mut tok = argmax(s.last_logits());
    let c1 = compiles();
    let t = Instant::now();
    s.step(tok).unwrap();
    let first_step = t.elapsed().as_secs_f64();
    tok = argmax(s.last_logits());
    let t = Instant::now();
    for _ in 0..n_decode {
        s.step(tok).unwrap();
        tok = argmax(s.last_logits());
    }
    let decode_s = t.elapsed().as_secs_f64();
    let decode_graphs = compiles() - c1;
    let step_s = decode_s / n_decode as f64;
    println!(
        "{}",
        serde_json::json!({
            "pack": pack,
            "backend": m.backend().name(),
            "device": m.backend().device(),
            "precision": m.backend().precision().name(),
            "threads": threads,
            "open_s": open_s,
            "prompt_tokens": prompt.len(),
            "prefill_tok_s": prompt.len() as f64 / best_prefill,
            "prefill_compile_s": first_prefill - best_prefill,
            "prefill_graphs": prefill_graphs,
            "decode_tok_s": 1.0 / step_s,
            "decode_compile_s": first_step - step_s,
            "decode_graphs": decode_graphs,
            "peak_rss_mib": peak_rss_mib(),
        })
    );
}
