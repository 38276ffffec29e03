//! packlm's side of a side-by-side benchmark: open time, prefill and decode tokens per second,
//! the cost of a verify relative to a decode step (drafts all rejected, and all accepted), the
//! speedup of n-gram drafting on a code-editing request, and peak RSS, printed as one JSON line.
//!
//!   cargo run --release --example bench -- PACK [--threads N] [--backend host|gpu] [--isa avx2|avx512|portable] [--precision exact|fast]
//!       [--prompt-tokens N] [--decode N] [--draft-k K] [--spec-n N] [--spec-k K]
//!
//! `--precision` defaults to the pack's (fast for block-quantized weights, exact for float ones);
//! the JSON's "precision" is the one in use. `spec_speedup_code` is the time of a greedy
//! generation of `--spec-n` tokens after examples/bench/code_edit.txt (through the pack's chat
//! template when it has one), plain over with the n-gram drafter proposing up to `--spec-k`; the
//! two outputs must be equal, or the bench stops. With `--backend gpu` the JSON's "device"
//! names the adapter. `peak_rss_mib` is the peak resident set after the open, prefill, decode
//! and verify timings (llama.cpp's side does the open, prefill and decode); `peak_rss_all_mib`
//! is the peak of the whole run, the code-edit generations' sessions included. The verify keys
//! are over a decode step timed at the same position right before the verifies (`time_step`),
//! not over the decode loop's steps.
//!
//! With `--sessions N1,N2,..` (for example 1,2,4,8,16) it measures many sessions in one pass
//! instead, one JSON line per N: N sessions prefill N different prompts of `--prompt-tokens`
//! in one `step_many` (aggregate prefill tok/s), then decode `--decode` greedy steps of all N
//! in one `step_many` each (aggregate decode tok/s, and the per-session latency of a step); the
//! line carries the prompts' ids (`prompt_ids`) for scripts/bench_sessions_compare.py.
//!
//! scripts/bench_compare.py runs this and llama.cpp (through an installed llama-cpp-python) on
//! the same file, token ids and thread count, and prints the ratios.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use packlm::backend::{BackendKind, Precision};
use packlm::engine::draft::{Drafter, NgramDrafter};
use packlm::engine::speculative::{generate, Acceptance, Generated};
use packlm::engine::{Model, OpenOptions, Session, Want};
use packlm::sample::{argmax, SamplerParams};

#[path = "bench/code_prompt.rs"]
mod code_prompt;

/// The request of `spec_speedup_code`: a ~40-line function to be repeated back with a small
/// change, so that most of the reply can be drafted from the prompt.
const CODE_EDIT: &str = include_str!("bench/code_edit.txt");

/// Drafted rows of the `verify_k8_*` keys, whatever `--draft-k` says.
const K8: usize = 8;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Stops the bench with a message.
fn fail(what: &str) -> ! {
    eprintln!("bench: {what}");
    std::process::exit(1)
}

/// The value of `r`, or the bench stops naming `what` and the error.
fn or_fail<T>(r: packlm::Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| fail(&format!("{what}: {e}")))
}

/// `--precision exact|fast`; None (the pack's default) when absent. A bad value stops the bench.
fn precision_arg(args: &[String]) -> Option<Precision> {
    let i = args.iter().position(|a| a == "--precision")?;
    match args.get(i + 1).map(|v| v.parse::<Precision>()) {
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => {
            eprintln!("bench: --precision: {e}");
            std::process::exit(2)
        }
        None => {
            eprintln!("bench: --precision needs a value: exact or fast");
            std::process::exit(2)
        }
    }
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

/// The `n` greedy tokens after `pending`, found by stepping; the session is then truncated back
/// to the positions it held.
fn greedy_continuation(s: &mut Session, pending: u32, n: usize) -> Vec<u32> {
    let base = s.n_past();
    let mut out = Vec::with_capacity(n);
    let mut tok = pending;
    for _ in 0..n {
        tok = argmax(&or_fail(s.step(tok), "greedy step"));
        out.push(tok);
    }
    or_fail(s.truncate(base), "truncate");
    out
}

/// Mean seconds of one decode step of `pending` (with its argmax, as the decode loop takes it),
/// `rounds` times at the session's position, truncated back after each: the step a verify's
/// cost is counted in, taken at the same position and moment as the verifies. The decode loop's
/// own steps can run while the backend is still writing its copies of the weights after the
/// open (host, two threads: not done 0.47-0.55 s after the open of Gemma3 Q4_0, in the middle
/// of the loop), the verifies after it.
fn time_step(s: &mut Session, pending: u32, rounds: usize) -> f64 {
    let base = s.n_past();
    let t = Instant::now();
    for _ in 0..rounds {
        argmax(&or_fail(s.step(pending), "step"));
        or_fail(s.truncate(base), "truncate");
    }
    t.elapsed().as_secs_f64() / rounds as f64
}

/// Mean seconds of one greedy verify of each draft after `pending`, the session truncated back
/// after each; every verify must accept exactly `want_accepted` drafts, or the bench stops (a
/// cost measured on other drafts than the ones named would be a different number).
fn time_verify(s: &mut Session, pending: u32, drafts: &[Vec<u32>], want_accepted: usize, what: &str) -> f64 {
    let base = s.n_past();
    let t = Instant::now();
    for d in drafts {
        let r = or_fail(s.verify(pending, d, Acceptance::Greedy), what);
        if r.n_accepted != want_accepted {
            fail(&format!("{what}: verify accepted {} of {} drafts, {want_accepted} expected", r.n_accepted, d.len()));
        }
        or_fail(s.truncate(base), "truncate");
    }
    t.elapsed().as_secs_f64() / drafts.len() as f64
}

/// `rounds` drafts of `k` tokens taken from `prompt` (rotating through it), each with its first
/// token moved off `greedy` (the model's argmax after the pending token), so that greedy
/// acceptance rejects it and the whole draft.
fn rejected_drafts(prompt: &[u32], greedy: u32, n_vocab: usize, k: usize, rounds: usize) -> Vec<Vec<u32>> {
    (0..rounds)
        .map(|r| {
            let mut d: Vec<u32> = (0..k).map(|j| prompt[(r + j) % prompt.len()]).collect();
            if d.first() == Some(&greedy) {
                d[0] = ((greedy as usize + 1) % n_vocab) as u32;
            }
            d
        })
        .collect()
}

/// The best of `runs` greedy generations of up to `n` tokens after `prompt` (all but its last
/// token prefilled untimed, as `packlm generate` does), with or without the n-gram drafter
/// proposing up to `k`: seconds of the fastest, and what the last one generated.
fn time_generate(m: &Arc<Model>, prompt: &[u32], n: usize, k: usize, ngram: bool, runs: usize) -> (f64, Generated) {
    let Some(split) = prompt.len().checked_sub(1) else { fail("the code-edit prompt has no tokens") };
    let (head, last) = prompt.split_at(split);
    let mut best = f64::MAX;
    let mut out = Generated::default();
    for _ in 0..runs {
        let mut s = or_fail(Session::new(m.clone(), 0), "session");
        if !head.is_empty() {
            or_fail(s.step_batch(head, Want::None), "prefill of the code-edit prompt");
        }
        let mut drafter = NgramDrafter::default();
        let drafter: Option<&mut (dyn Drafter + 'static)> = if ngram { Some(&mut drafter) } else { None };
        let mut rng = 0u64;
        let t = Instant::now();
        out = or_fail(generate(&mut s, last, n, &SamplerParams::default(), &mut rng, drafter, k), "generate");
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best, out)
}

/// One JSON line for `--sessions`: N sessions' prefill and decode in shared passes.
fn bench_sessions(m: &Arc<Model>, text: &str, n_prompt: usize, n_decode: usize, n: usize, threads: usize) {
    // Different prompts of the same length: the text from a different word for each session.
    let words: Vec<&str> = text.split(' ').collect();
    let prompts: Vec<Vec<u32>> = (0..n)
        .map(|i| {
            let t = words[i * 3 % 20..].join(" ");
            let mut p = or_fail(m.vocab().encode(&t, true, false), "tokenize the prompt");
            p.truncate(n_prompt);
            p
        })
        .collect();
    let mut ss: Vec<Session> = (0..n).map(|_| or_fail(Session::new(m.clone(), 0), "session")).collect();
    let t = Instant::now();
    {
        let mut items: Vec<(&mut Session, &[u32], Want)> = ss.iter_mut().zip(&prompts).map(|(s, p)| (s, p.as_slice(), Want::Last)).collect();
        or_fail(Session::step_many(&mut items), "prefill");
    }
    let prefill_s = t.elapsed().as_secs_f64();
    let mut next: Vec<[u32; 1]> = ss.iter().map(|s| [argmax(s.last_logits())]).collect();
    let t = Instant::now();
    for _ in 0..n_decode {
        let mut items: Vec<(&mut Session, &[u32], Want)> = ss.iter_mut().zip(&next).map(|(s, t)| (s, &t[..], Want::Last)).collect();
        let logits = or_fail(Session::step_many(&mut items), "decode");
        next = logits.iter().map(|l| [argmax(l)]).collect();
    }
    let decode_s = t.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "engine": "packlm",
            "sessions": n,
            "threads": threads,
            "precision": m.backend().precision().name(),
            "prompt_tokens": n_prompt,
            "decode_steps": n_decode,
            "prefill_tok_s": (n * n_prompt) as f64 / prefill_s,
            "decode_tok_s": (n * n_decode) as f64 / decode_s,
            "step_latency_ms": decode_s / n_decode as f64 * 1e3,
            "peak_rss_mib": peak_rss_mib(),
            "prompt_ids": prompts,
        })
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(pack) = args.first() else {
        eprintln!(
            "usage: bench PACK [--threads N] [--backend host|gpu] [--isa avx2|avx512|portable] [--precision exact|fast] [--prompt-tokens N] [--decode N] [--draft-k K] [--spec-n N] [--spec-k K]"
        );
        std::process::exit(2);
    };
    let threads = arg(&args, "--threads", 2usize);
    let n_prompt = arg(&args, "--prompt-tokens", 128usize);
    let n_decode = arg(&args, "--decode", 64usize);
    let k = arg(&args, "--draft-k", 8usize);
    let spec_n = arg(&args, "--spec-n", 128usize);
    let spec_k = arg(&args, "--spec-k", 8usize);
    let precision = precision_arg(&args);
    let backend = match args.iter().position(|a| a == "--backend").map(|i| args.get(i + 1).map(|v| v.parse::<BackendKind>())) {
        None => BackendKind::Host,
        Some(Some(Ok(b))) => b,
        Some(Some(Err(e))) => fail(&format!("--backend: {e}")),
        Some(None) => fail("--backend needs a value: host, reference or gpu"),
    };
    // `--isa avx2|avx512|portable` forces the host kernels' instruction set (an AVX2 run on an
    // AVX-512 machine stands in for an AVX2-only one; it is not one: same caches and clocks).
    let isa = args.iter().position(|a| a == "--isa").map(|i| match args.get(i + 1).map(String::as_str) {
        Some("avx2") => packlm::backend::host::row_dot::Isa::Avx2,
        Some("avx512") => packlm::backend::host::row_dot::Isa::Avx512,
        Some("portable") => packlm::backend::host::row_dot::Isa::Portable,
        other => fail(&format!("--isa: {other:?}: avx2, avx512 or portable")),
    });
    let t = Instant::now();
    let opened = match isa {
        Some(isa) => packlm::backend::host::HostBackend::with_isa(threads, isa).and_then(|be| {
            let be = be.with_precision(precision.unwrap_or(Precision::Fast));
            Model::open_on(Path::new(pack), Box::new(packlm::backend::cpu::CpuBackend::new(be)))
        }),
        None => Model::open(Path::new(pack), &OpenOptions { backend, threads, precision, ..Default::default() }),
    };
    let m = match opened {
        Ok(m) => Arc::new(m),
        Err(e) => {
            eprintln!("bench: {e}");
            std::process::exit(1);
        }
    };
    let open_s = t.elapsed().as_secs_f64();
    // Open and the first tokenize of a short prompt, as a host sees it (a tokenizer built
    // lazily would show here).
    or_fail(m.vocab().encode("Hello, world", true, false), "tokenize a short prompt");
    let open_tokenize_s = t.elapsed().as_secs_f64();
    // A fixed prompt: the ids of a repeated English text, cut to n_prompt.
    let text = "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step. ".repeat(64);
    let mut prompt = or_fail(m.vocab().encode(&text, true, false), "tokenize the prompt");
    prompt.truncate(n_prompt);
    if prompt.is_empty() {
        fail("--prompt-tokens 0: the prefill, decode and verify timings need a prompt");
    }
    if let Some(i) = args.iter().position(|a| a == "--sessions") {
        let list = args.get(i + 1).map(String::as_str).unwrap_or("");
        let ns: Vec<usize> = list.split(',').map(|v| v.trim().parse().ok().filter(|&n| n > 0)).collect::<Option<_>>().unwrap_or_else(|| fail(&format!("--sessions {list:?}: a list of session counts such as 1,2,4,8")));
        for n in ns {
            bench_sessions(&m, &text, n_prompt, n_decode, n, threads);
        }
        return;
    }

    let mut best_prefill = f64::MAX;
    for _ in 0..3 {
        let mut s = or_fail(Session::new(m.clone(), 0), "session");
        let t = Instant::now();
        or_fail(s.step_batch(&prompt, Want::Last), "prefill");
        best_prefill = best_prefill.min(t.elapsed().as_secs_f64());
    }
    let mut s = or_fail(Session::new(m.clone(), 0), "session");
    or_fail(s.step_batch(&prompt, Want::Last), "prefill");
    let t = Instant::now();
    let mut tok = argmax(s.last_logits());
    for _ in 0..n_decode {
        or_fail(s.step(tok), "decode");
        tok = argmax(s.last_logits());
    }
    let decode_s = t.elapsed().as_secs_f64();
    // verify of k drafted rows against the time of one decode step at the same position
    // (`time_step`). The drafts come from the
    // prompt with their first token moved off the model's greedy choice, so every one is
    // rejected at the first row (checked): the cost of the pass is what is measured.
    let rounds = 8;
    let n_vocab = m.spec().vocab_size;
    let greedy = greedy_continuation(&mut s, tok, K8);
    let step_s = time_step(&mut s, tok, 2 * rounds);
    let verify_s = time_verify(&mut s, tok, &rejected_drafts(&prompt, greedy[0], n_vocab, k, rounds), 0, "rejected drafts");
    let verify_k8_s =
        if k == K8 { verify_s } else { time_verify(&mut s, tok, &rejected_drafts(&prompt, greedy[0], n_vocab, K8, rounds), 0, "rejected drafts") };
    // The same pass with the model's own greedy continuation as the draft: all 8 accepted.
    let verify_k8_accepted_s = time_verify(&mut s, tok, &vec![greedy; rounds], K8, "the greedy continuation as the draft");
    // The peak so far is that of llama.cpp's side of the comparison (open, prefill, decode) and
    // the verifies; the code-edit generation below adds a second session of some 600 positions.
    let peak_rss = peak_rss_mib();

    // Greedy generation on a code-editing request, plain and with n-gram drafting: same output.
    let code_prompt = or_fail(code_prompt::code_prompt(&m, CODE_EDIT), "tokenize the code-edit prompt");
    let (plain_s, plain) = time_generate(&m, &code_prompt, spec_n, spec_k, false, 3);
    let (spec_s, spec) = time_generate(&m, &code_prompt, spec_n, spec_k, true, 3);
    let decoded = |g: &Generated| or_fail(m.vocab().decode(&g.tokens, false), "detokenize");
    if plain.tokens.len() < spec_n / 2 {
        fail(&format!("the code-edit generation stopped after {} of {spec_n} tokens: {:?}", plain.tokens.len(), decoded(&plain)));
    }
    if plain.tokens != spec.tokens || decoded(&plain).as_bytes() != decoded(&spec).as_bytes() {
        fail(&format!("greedy output with the n-gram drafter differs from plain greedy: {:?} vs {:?}", decoded(&spec), decoded(&plain)));
    }
    println!(
        "{}",
        serde_json::json!({
            "engine": "packlm",
            "threads": threads,
            "precision": m.backend().precision().name(),
            "backend": m.backend().name(),
            "device": m.backend().device(),
            "open_s": open_s,
            "open_tokenize_s": open_tokenize_s,
            "prompt_tokens": prompt.len(),
            "prefill_tok_s": prompt.len() as f64 / best_prefill,
            "decode_tok_s": n_decode as f64 / decode_s,
            "verify_rows": k + 1,
            "verify_cost_per_row_in_steps": verify_s / (k + 1) as f64 / step_s,
            "verify_k8_over_step": verify_k8_s / step_s,
            "verify_k8_over_step_accepted": verify_k8_accepted_s / step_s,
            "spec_n": spec_n,
            "spec_k": spec_k,
            "spec_prompt_tokens": code_prompt.len(),
            "spec_tokens": plain.tokens.len(),
            "spec_drafted": spec.drafted,
            "spec_accepted": spec.accepted,
            "spec_speedup_code": plain_s / spec_s,
            "peak_rss_mib": peak_rss,
            "peak_rss_all_mib": peak_rss_mib(),
        })
    );
}
