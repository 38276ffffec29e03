//! What a LoRA adapter costs a decode step and a prefill, printed as one JSON line: the base
//! model's session and a session with the adapter, alternating, on one open model.
//!
//!   cargo run --release --example lora_decode -- PACK ADAPTER [--threads N] [--scale S]
//!       [--prompt-tokens N] [--decode N] [--rounds R]
//!
//! Each round makes a fresh session of each kind (base first on even rounds, adapter first on
//! odd ones), prefills the same prompt of `--prompt-tokens` ids in one pass, then decodes
//! `--decode` steps feeding one fixed token (a step's cost does not depend on which token is
//! fed, as in examples/bench.rs). Every round's decode tok/s, prefill tok/s and the ratio of
//! the adapter's time per token to the base's in that round are printed, with medians.
//! ADAPTER is a PEFT folder or an adapter GGUF (scripts/make_random_lora.py writes a random one).

use std::time::Instant;

use packlm::{Adapter, Model, OpenOptions, Session, Want};

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("lora_decode: {what}: {e}");
    std::process::exit(1);
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    match args.iter().position(|a| a == name) {
        None => default,
        Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or_else(|| fail(name, "needs a value")),
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// (prefill tok/s, decode tok/s) of a fresh session with `adapters`.
fn run(m: &Model, adapters: &[(Adapter, f32)], prompt: &[u32], n_decode: usize) -> (f64, f64) {
    let mut s = Session::new(m, 0).unwrap_or_else(|e| fail("session", e));
    s.set_adapters(adapters).unwrap_or_else(|e| fail("set_adapters", e));
    let t = Instant::now();
    s.step_batch(prompt, Want::Last).unwrap_or_else(|e| fail("prefill", e));
    let prefill = prompt.len() as f64 / t.elapsed().as_secs_f64();
    let token = prompt[prompt.len() - 1];
    let t = Instant::now();
    for _ in 0..n_decode {
        s.step(token).unwrap_or_else(|e| fail("decode", e));
    }
    (prefill, n_decode as f64 / t.elapsed().as_secs_f64())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        fail("usage", "lora_decode PACK ADAPTER [--threads N] [--scale S] [--prompt-tokens N] [--decode N] [--rounds R]");
    }
    let (pack, adapter_path) = (&args[0], &args[1]);
    let threads: usize = arg(&args, "--threads", 2);
    let scale: f32 = arg(&args, "--scale", 1.0);
    let n_prompt: usize = arg(&args, "--prompt-tokens", 64);
    let n_decode: usize = arg(&args, "--decode", 128);
    let rounds: usize = arg(&args, "--rounds", 7);
    let m = Model::open_with(pack, &OpenOptions { threads, ..Default::default() }).unwrap_or_else(|e| fail("open", e));
    let adapter = Adapter::open(&m, adapter_path).unwrap_or_else(|e| fail("adapter", e));
    let text = "The history of the city goes back many centuries, to a small settlement by the river where traders met. ".repeat(16);
    let mut prompt = m.tokenize(&text, true, false).unwrap_or_else(|e| fail("tokenize", e));
    if prompt.len() < n_prompt {
        fail("--prompt-tokens", format!("the prompt text has only {} tokens", prompt.len()));
    }
    prompt.truncate(n_prompt);
    let with = [(adapter.clone(), scale)];
    // Warm-up: one of each, not counted.
    run(&m, &[], &prompt, 8);
    run(&m, &with, &prompt, 8);
    let (mut base, mut lora, mut ratio, mut base_pf, mut lora_pf) = (vec![], vec![], vec![], vec![], vec![]);
    for r in 0..rounds {
        let (b, l) = if r % 2 == 0 {
            let b = run(&m, &[], &prompt, n_decode);
            (b, run(&m, &with, &prompt, n_decode))
        } else {
            let l = run(&m, &with, &prompt, n_decode);
            (run(&m, &[], &prompt, n_decode), l)
        };
        base_pf.push(b.0);
        lora_pf.push(l.0);
        base.push(b.1);
        lora.push(l.1);
        ratio.push(b.1 / l.1);
    }
    println!(
        "{}",
        serde_json::json!({
            "threads": threads,
            "precision": m.precision().name(),
            "adapter_rank": adapter.rank(),
            "adapter_maps": adapter.targets().len(),
            "scale": scale,
            "prompt_tokens": n_prompt,
            "decode_steps": n_decode,
            "base_decode_tok_s": base,
            "lora_decode_tok_s": lora,
            "time_per_token_ratio": ratio,
            "base_prefill_tok_s": base_pf,
            "lora_prefill_tok_s": lora_pf,
            "median": {
                "base_decode_tok_s": median(&base),
                "lora_decode_tok_s": median(&lora),
                "time_per_token_ratio": median(&ratio),
                "base_prefill_tok_s": median(&base_pf),
                "lora_prefill_tok_s": median(&lora_pf),
            },
        })
    );
}
