//! Perplexity and top-1 tokens of a pack over given token ids, printed as one JSON line:
//!
//!   cargo run --release --example perplexity -- PACK IDS.json [--precision exact|fast] [--threads N]
//!
//! IDS.json is a JSON list of token ids. One pass over all of them (WANT_ALL); row i's logits
//! score id i + 1. Prints n (scored ids), nll (their summed negative log-likelihood, nats), ppl
//! = exp(nll / n), and argmax (the top-1 id of each scored row), so that
//! scripts/perplexity_compare.py can compare precisions, and packlm with llama.cpp, on the same ids.

use std::path::Path;
use std::sync::Arc;

use packlm::backend::{BackendKind, Precision};
use packlm::engine::{Model, OpenOptions, Session, Want};
use packlm::sample::argmax;

fn fail(msg: String) -> ! {
    eprintln!("perplexity: {msg}");
    std::process::exit(1);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(pack), Some(ids_path)) = (args.first(), args.get(1)) else {
        eprintln!("usage: perplexity PACK IDS.json [--precision exact|fast] [--threads N]");
        std::process::exit(2);
    };
    let value = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
    let precision = value("--precision").map(|p| p.parse::<Precision>().unwrap_or_else(|e| fail(e.to_string())));
    let threads = value("--threads").map_or(0, |t| t.parse().unwrap_or_else(|_| fail(format!("--threads {t:?}"))));
    let text = std::fs::read_to_string(ids_path).unwrap_or_else(|e| fail(format!("{ids_path}: {e}")));
    let ids: Vec<u32> = serde_json::from_str(&text).unwrap_or_else(|e| fail(format!("{ids_path}: {e}")));
    if ids.len() < 2 {
        fail(format!("{ids_path}: need at least 2 ids"));
    }
    let m = Model::open(Path::new(pack), &OpenOptions { backend: BackendKind::Host, threads, precision, ..Default::default() })
        .unwrap_or_else(|e| fail(e.to_string()));
    let m = Arc::new(m);
    let mut s = Session::new(m.clone(), 0).unwrap_or_else(|e| fail(e.to_string()));
    let logits = s.step_batch(&ids[..ids.len() - 1], Want::All).unwrap_or_else(|e| fail(e.to_string()));
    let v = m.spec().vocab_size;
    let (mut nll, mut top) = (0.0f64, Vec::new());
    for (row, &next) in logits.chunks_exact(v).zip(&ids[1..]) {
        let max = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
        let lse = max + row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
        nll += lse - row[next as usize] as f64;
        top.push(argmax(row));
    }
    let n = ids.len() - 1;
    println!(
        "{}",
        serde_json::json!({
            "engine": "packlm",
            "precision": m.backend().precision().name(),
            "n": n,
            "nll": nll,
            "ppl": (nll / n as f64).exp(),
            "argmax": top,
        })
    );
}
