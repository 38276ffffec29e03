//! The cost of opening a pack and tokenizing its first prompt, printed as one JSON line:
//!
//!   cargo run --release --example open_time -- PACK [--runs N] [--prefill N] [--threads N] [--precision exact|fast]
//!
//! Each run (in a fresh process, so that nothing is warm but the page cache) times
//! `Model::open` and the first `encode("Hello, world", add_special, no parse_special)` apart,
//! then, with `--prefill N`, one pass over N token ids (timed: `prefill_s`, and `first_token_s`
//! the three together, the time to a first token from nothing), and reports the peak resident set
//! (VmHWM) after the open, after the encode and at the end, and the resident set after the encode
//! (VmRSS, and its anonymous and file-backed parts). The first tokenize is counted
//! because a tokenizer built lazily would only move the cost of the open there. With `--runs N`
//! the program runs itself N times and prints each run and the best of each time. `--threads`
//! (0, the default: one per core) and `--precision` (default: the pack's) are the open options.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use packlm::backend::{BackendKind, Precision};
use packlm::engine::{Model, OpenOptions, Session, Want};

/// Peak resident set (VmHWM) in MiB, from /proc; 0 where /proc has none.
fn peak_rss_mib() -> f64 {
    proc_status_mib("VmHWM:")
}

/// A /proc/self/status field given in kB, in MiB; 0 where /proc has none.
fn proc_status_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).map(str::to_string))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<f64>().ok()))
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn fail(msg: String) -> ! {
    eprintln!("open_time: {msg}");
    std::process::exit(1)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(pack) = args.first() else {
        eprintln!("usage: open_time PACK [--runs N] [--prefill N] [--threads N] [--precision exact|fast]");
        std::process::exit(2);
    };
    let value = |name: &str| -> usize {
        match args.iter().position(|a| a == name) {
            None => 0,
            Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or_else(|| fail(format!("{name} needs a number"))),
        }
    };
    let runs = value("--runs");
    let prefill = value("--prefill");
    let threads = value("--threads");
    let precision = match args.iter().position(|a| a == "--precision").map(|i| args.get(i + 1).map(String::as_str)) {
        None => None,
        Some(Some("exact")) => Some(Precision::Exact),
        Some(Some("fast")) => Some(Precision::Fast),
        Some(_) => fail("--precision takes exact or fast".into()),
    };
    if runs > 0 {
        // The child gets every argument but --runs.
        let i = args.iter().position(|a| a == "--runs").unwrap_or(0);
        let rest: Vec<&String> = args.iter().enumerate().filter(|&(k, _)| k != 0 && k != i && k != i + 1).map(|(_, a)| a).collect();
        repeat(pack, runs, &rest);
        return;
    }
    let t = Instant::now();
    let m = Model::open(Path::new(pack), &OpenOptions { backend: BackendKind::Host, threads, precision, ..Default::default() })
        .unwrap_or_else(|e| fail(format!("{pack}: {e}")));
    let open_s = t.elapsed().as_secs_f64();
    let rss_open = peak_rss_mib();
    let t = Instant::now();
    let ids = m.vocab().encode("Hello, world", true, false).unwrap_or_else(|e| fail(format!("encode: {e}")));
    let encode_s = t.elapsed().as_secs_f64();
    let rss_encode = peak_rss_mib();
    let rss_now = proc_status_mib("VmRSS:");
    let (rss_anon, rss_file) = (proc_status_mib("RssAnon:"), proc_status_mib("RssFile:"));
    let m = Arc::new(m);
    let mut prefill_s = 0.0;
    if prefill > 0 {
        let mut s = Session::new(m.clone(), 0).unwrap_or_else(|e| fail(format!("session: {e}")));
        let vocab = m.spec().vocab_size as u32;
        let prompt: Vec<u32> = (0..prefill as u32).map(|i| (i * 7919 + 1) % vocab).collect();
        let t = Instant::now();
        s.step_batch(&prompt, Want::Last).unwrap_or_else(|e| fail(format!("prefill: {e}")));
        prefill_s = t.elapsed().as_secs_f64();
    }
    println!(
        "{}",
        serde_json::json!({
            "open_s": open_s,
            "encode_s": encode_s,
            "open_encode_s": open_s + encode_s,
            "prefill_s": prefill_s,
            "first_token_s": open_s + encode_s + prefill_s,
            "ids": ids,
            "peak_rss_open_mib": rss_open,
            "peak_rss_encode_mib": rss_encode,
            "rss_after_encode_mib": rss_now,
            "rss_anon_after_encode_mib": rss_anon,
            "rss_file_after_encode_mib": rss_file,
            "peak_rss_mib": peak_rss_mib(),
        })
    );
}

/// Runs this program `runs` times on `pack` and prints every run, then the best of each field.
fn repeat(pack: &str, runs: usize, rest: &[&String]) {
    let exe = std::env::current_exe().unwrap_or_else(|e| fail(format!("current_exe: {e}")));
    let mut best: Option<serde_json::Map<String, serde_json::Value>> = None;
    for _ in 0..runs {
        let out = Command::new(&exe)
            .arg(pack)
            .args(rest)
            .output()
            .unwrap_or_else(|e| fail(format!("run: {e}")));
        if !out.status.success() {
            fail(format!("run failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        println!("{line}");
        let run: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&line).unwrap_or_else(|e| fail(format!("run output {line:?}: {e}")));
        let merged = match best.take() {
            None => run,
            Some(mut b) => {
                for (k, v) in run {
                    if let (Some(new), Some(old)) = (v.as_f64(), b.get(&k).and_then(|o| o.as_f64())) {
                        if new < old {
                            b.insert(k, v);
                        }
                    }
                }
                b
            }
        };
        best = Some(merged);
    }
    if let Some(b) = best {
        println!("best {}", serde_json::Value::Object(b));
    }
}
