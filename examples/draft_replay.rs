//! What the n-gram drafter proposes on code-editing requests, counted rather than timed:
//!
//!   cargo run --release --example draft_replay -- PACK [--threads N] [--n 128] [--k 8]
//!       [--verify-cost A,B] [REQUEST_FILE...]
//!
//! For each request (default: examples/bench/code_edit.txt, the benchmark's, and the three
//! under examples/bench/replay/, which no drafter setting was chosen on), a greedy generation of
//! `--n` tokens with `NgramDrafter::default()` proposing up to `--k`, as examples/bench.rs times
//! it; greedy output does not depend on the drafter, so the rounds are a function of the text.
//! Prints one JSON line per request: the rounds, tokens drafted and accepted, and the speedup a
//! verify of d drafts costing A + B d decode steps would give (`--verify-cost`, default
//! 1.1,0.12: examples/bench's `verify_k8_over_step` of about 2 on these models), then the
//! geometric mean of those speedups. A drafter change can be judged on these counts without the
//! noise of timing; `spec_speedup_code` in examples/bench.rs is the timed number.

use std::path::Path;
use std::sync::Arc;

use packlm::engine::draft::{Drafter, NgramDrafter};
use packlm::engine::speculative::generate;
use packlm::engine::{Model, OpenOptions, Session, Want};
use packlm::error::Result;
use packlm::sample::SamplerParams;

#[path = "bench/code_prompt.rs"]
mod code_prompt;

const DEFAULT_REQUESTS: [&str; 4] = [
    "examples/bench/code_edit.txt",
    "examples/bench/replay/invoice_report.js.txt",
    "examples/bench/replay/parse_settings.rs.txt",
    "examples/bench/replay/inventory.py.txt",
];

/// The drafter under test, keeping the length of each proposal. `generate` asks it once before
/// each token but the last: an empty proposal is followed by a decode step, any other by a
/// verify.
struct Counted {
    inner: NgramDrafter,
    lengths: Vec<usize>,
    steps: usize,
}

impl Drafter for Counted {
    fn propose(&mut self, history: &[u32], pending: u32, k: usize) -> Result<Vec<u32>> {
        let d = self.inner.propose(history, pending, k)?;
        match d.len() {
            0 => self.steps += 1,
            len => self.lengths.push(len),
        }
        Ok(d)
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("draft_replay: {msg}");
    std::process::exit(1);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(pack) = args.first().filter(|a| !a.starts_with("--")) else {
        fail("usage: draft_replay PACK [--threads N] [--n 128] [--k 8] [--verify-cost A,B] [REQUEST_FILE...]");
    };
    let mut files = Vec::new();
    let (mut threads, mut n, mut k, mut cost) = (0usize, 128usize, 8usize, (1.1f64, 0.12f64));
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_else(|| fail(&format!("{a} needs a value")));
        match a.as_str() {
            "--threads" => threads = value().parse().unwrap_or_else(|_| fail("--threads: a number")),
            "--n" => n = value().parse().unwrap_or_else(|_| fail("--n: a number")),
            "--k" => k = value().parse().unwrap_or_else(|_| fail("--k: a number")),
            "--verify-cost" => {
                let v = value();
                let parsed = v.split_once(',').and_then(|(x, y)| Some((x.parse().ok()?, y.parse().ok()?)));
                cost = parsed.unwrap_or_else(|| fail("--verify-cost: A,B (two numbers)"));
            }
            f if f.starts_with("--") => fail(&format!("unknown option {f}")),
            f => files.push(f.to_string()),
        }
    }
    if files.is_empty() {
        files = DEFAULT_REQUESTS.iter().map(|s| s.to_string()).collect();
    }
    let m = Arc::new(Model::open(Path::new(pack), &OpenOptions { threads, ..Default::default() }).unwrap_or_else(|e| fail(&e.to_string())));
    let mut log_sum = 0.0;
    for file in &files {
        let request = std::fs::read_to_string(file).unwrap_or_else(|e| fail(&format!("{file}: {e}")));
        let prompt = code_prompt::code_prompt(&m, &request).unwrap_or_else(|e| fail(&format!("{file}: {e}")));
        let Some((&last, head)) = prompt.split_last() else { fail(&format!("{file}: no tokens")) };
        let mut s = Session::new(m.clone(), 0).unwrap_or_else(|e| fail(&e.to_string()));
        s.step_batch(head, Want::None).unwrap_or_else(|e| fail(&e.to_string()));
        let mut drafter = Counted { inner: NgramDrafter::default(), lengths: Vec::new(), steps: 0 };
        let g = generate(&mut s, &[last], n, &SamplerParams::default(), &mut 0, Some(&mut drafter), k).unwrap_or_else(|e| fail(&e.to_string()));
        // Plain greedy takes a step for each token but the first (it comes from the prompt's
        // logits); with the drafter, the steps and verifies counted.
        let tokens = g.tokens.len();
        let verify: f64 = drafter.lengths.iter().map(|&d| cost.0 + cost.1 * d as f64).sum();
        let speedup = tokens.saturating_sub(1) as f64 / (drafter.steps as f64 + verify);
        log_sum += speedup.ln();
        println!(
            "{{\"request\": {file:?}, \"tokens\": {tokens}, \"rounds\": {}, \"drafted\": {}, \"accepted\": {}, \"modeled_speedup\": {speedup:.3}}}",
            g.rounds, g.drafted, g.accepted
        );
    }
    println!("{{\"pack\": {pack:?}, \"verify_cost\": [{}, {}], \"geometric_mean_speedup\": {:.3}}}", cost.0, cost.1, (log_sum / files.len() as f64).exp());
}
