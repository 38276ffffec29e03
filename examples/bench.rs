//! packlm's side of a side-by-side benchmark: open time, prefill and decode tokens per second,
//! the cost of a verify row relative to a decode step, and peak RSS, printed as one JSON line.
//!
//!   cargo run --release --example bench -- PACK [--threads N] [--prompt-tokens N] [--decode N]
//!
//! scripts/bench_compare.py runs this and llama.cpp (through an installed llama-cpp-python) on
//! the same file, token ids and thread count, and prints the ratios.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use packlm::backend::BackendKind;
use packlm::engine::speculative::Acceptance;
use packlm::engine::{Model, OpenOptions, Session, Want};
use packlm::sample::argmax;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Peak resident set (VmHWM) in MiB, from /proc.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| l.to_string()))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<f64>().ok()))
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(pack) = args.first() else {
        eprintln!("usage: bench PACK [--threads N] [--prompt-tokens N] [--decode N] [--draft-k K]");
        std::process::exit(2);
    };
    let threads = arg(&args, "--threads", 2usize);
    let n_prompt = arg(&args, "--prompt-tokens", 128usize);
    let n_decode = arg(&args, "--decode", 64usize);
    let k = arg(&args, "--draft-k", 8usize);
    let t = Instant::now();
    let m = match Model::open(Path::new(pack), &OpenOptions { backend: BackendKind::Host, threads, precision: None }) {
        Ok(m) => Arc::new(m),
        Err(e) => {
            eprintln!("bench: {e}");
            std::process::exit(1);
        }
    };
    let open_s = t.elapsed().as_secs_f64();
    // A fixed prompt: the ids of a repeated English text, cut to n_prompt.
    let text = "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step. ".repeat(64);
    let mut prompt = m.vocab().encode(&text, true, false).unwrap_or_default();
    prompt.truncate(n_prompt);

    let mut best_prefill = f64::MAX;
    for _ in 0..3 {
        let mut s = Session::new(m.clone(), 0).expect("session");
        let t = Instant::now();
        s.step_batch(&prompt, Want::Last).expect("prefill");
        best_prefill = best_prefill.min(t.elapsed().as_secs_f64());
    }
    let mut s = Session::new(m.clone(), 0).expect("session");
    s.step_batch(&prompt, Want::Last).expect("prefill");
    let t = Instant::now();
    let mut tok = argmax(s.last_logits());
    for _ in 0..n_decode {
        s.step(tok).expect("decode");
        tok = argmax(s.last_logits());
    }
    let decode_s = t.elapsed().as_secs_f64();
    // verify of k drafted rows (drafts taken from the prompt, so most are rejected: the cost
    // of the pass is what is measured), against the time of one decode step.
    let base = s.n_past();
    let rounds = 8;
    let t = Instant::now();
    for r in 0..rounds {
        let draft: Vec<u32> = prompt[r..r + k].to_vec();
        s.verify(tok, &draft, Acceptance::Greedy).expect("verify");
        s.truncate(base).expect("truncate");
        // Restore the logits state for the next round's pending token.
        tok = prompt[r];
    }
    let verify_s = t.elapsed().as_secs_f64() / rounds as f64;
    let step_s = decode_s / n_decode as f64;
    println!(
        "{}",
        serde_json::json!({
            "engine": "packlm",
            "threads": threads,
            "open_s": open_s,
            "prompt_tokens": prompt.len(),
            "prefill_tok_s": prompt.len() as f64 / best_prefill,
            "decode_tok_s": n_decode as f64 / decode_s,
            "verify_rows": k + 1,
            "verify_cost_per_row_in_steps": verify_s / (k + 1) as f64 / step_s,
            "peak_rss_mib": peak_rss_mib(),
        })
    );
}
