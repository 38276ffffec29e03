//! Embeddings per second, printed as one JSON line: all texts in one `Session::embed` call
//! (batched), and the same texts one call each (single), alternating.
//!
//!   cargo run --release --example embed_bench -- PACK TEXTS.json [--threads N] [--repeats R]
//!       [--pooling none|mean|cls|last] [--out VECTORS.json] [--groups 4,16]
//!
//! TEXTS.json is a JSON array of strings; each is tokenized as `packlm embed` does
//! (`Model::tokenize(text, true, false)`: the pack's BOS/EOS added, special-token text plain).
//! After one batched call to warm up, R rounds of (batched, single); each timing covers the
//! embed calls only (tokenizing is done before). `batched_texts_s` and `single_texts_s` list
//! every round's texts per second. The vectors are not normalized (llama.cpp's
//! `Llama.embed` default), pooled as `--pooling` says (default mean). `--out` writes the
//! batched call's vectors and each text's token ids as JSON, for scripts/embed_compare.py to
//! set beside llama.cpp's. The single calls' vectors are checked bit-equal to the batched
//! ones (a text's vector does not depend on the texts beside it), or the bench stops.
//! `--groups 4,16` also times calls of 4 texts at a time, then 16 (`group_texts_s`), in each
//! round after the single calls: how the rate depends on how many texts share a pass.

use std::time::Instant;

use packlm::{EmbedOptions, Model, OpenOptions, Pooling, Session};

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("embed_bench: {what}: {e}");
    std::process::exit(1);
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    match args.iter().position(|a| a == name) {
        None => default,
        Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or_else(|| fail(name, "needs a value")),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        fail("usage", "embed_bench PACK TEXTS.json [--threads N] [--repeats R] [--pooling none|mean|cls|last] [--out VECTORS.json]");
    }
    let (pack, texts_path) = (&args[0], &args[1]);
    let threads: usize = arg(&args, "--threads", 2);
    let repeats: usize = arg(&args, "--repeats", 3);
    let pooling_name: String = arg(&args, "--pooling", "mean".to_string());
    let out: String = arg(&args, "--out", String::new());
    let groups: Vec<usize> = arg(&args, "--groups", String::new()).split(',').filter(|g| !g.is_empty()).map(|g| g.parse().unwrap_or_else(|_| fail("--groups", g))).collect();
    if groups.contains(&0) {
        fail("--groups", "a group has at least one text");
    }
    let pooling = Pooling::from_name(&pooling_name).unwrap_or_else(|| fail("--pooling", &pooling_name));
    let bytes = std::fs::read(texts_path).unwrap_or_else(|e| fail(texts_path, e));
    let texts: Vec<String> = serde_json::from_slice(&bytes).unwrap_or_else(|e| fail(texts_path, e));

    let t = Instant::now();
    let m = Model::open_with(pack, &OpenOptions { threads, ..Default::default() }).unwrap_or_else(|e| fail("open", e));
    let open_s = t.elapsed().as_secs_f64();
    let ids: Vec<Vec<u32>> = texts.iter().map(|x| m.tokenize(x, true, false).unwrap_or_else(|e| fail("tokenize", e))).collect();
    let rows: Vec<&[u32]> = ids.iter().map(Vec::as_slice).collect();
    let options = EmbedOptions { pooling: Some(pooling), normalize: Some(false) };
    let mut s = Session::new(&m, 0).unwrap_or_else(|e| fail("session", e));
    let warm = s.embed(&rows, &options).unwrap_or_else(|e| fail("embed", e));

    let (mut batched, mut single) = (Vec::new(), Vec::new());
    let mut grouped: Vec<Vec<f64>> = vec![Vec::new(); groups.len()];
    for _ in 0..repeats {
        let t = Instant::now();
        let e = s.embed(&rows, &options).unwrap_or_else(|e| fail("embed", e));
        batched.push(rows.len() as f64 / t.elapsed().as_secs_f64());
        std::hint::black_box(&e);
        let t = Instant::now();
        let each: Vec<_> = rows.iter().map(|r| s.embed(&[r], &options).unwrap_or_else(|e| fail("embed", e))).collect();
        single.push(rows.len() as f64 / t.elapsed().as_secs_f64());
        if pooling != Pooling::None {
            for (i, one) in each.iter().enumerate() {
                let same = one.row(0).iter().zip(warm.row(i)).all(|(a, b)| a.to_bits() == b.to_bits());
                if !same {
                    fail("check", format!("text {i}: its vector alone differs from its vector in the batch"));
                }
            }
        }
        for (&g, rates) in groups.iter().zip(&mut grouped) {
            let t = Instant::now();
            for chunk in rows.chunks(g) {
                std::hint::black_box(s.embed(chunk, &options).unwrap_or_else(|e| fail("embed", e)));
            }
            rates.push(rows.len() as f64 / t.elapsed().as_secs_f64());
        }
    }
    let group_rates: serde_json::Map<String, serde_json::Value> = groups.iter().zip(grouped).map(|(g, r)| (g.to_string(), r.into())).collect();
    if !out.is_empty() {
        let vectors: Vec<&[f32]> = (0..warm.rows()).map(|i| warm.row(i)).collect();
        let v = serde_json::json!({ "ids": ids, "vectors": vectors });
        std::fs::write(&out, v.to_string()).unwrap_or_else(|e| fail(&out, e));
    }
    let lens: Vec<usize> = ids.iter().map(Vec::len).collect();
    println!(
        "{}",
        serde_json::json!({
            "engine": "packlm",
            "threads": threads,
            "precision": m.precision().name(),
            "pooling": pooling.name(),
            "texts": rows.len(),
            "tokens_min": lens.iter().min(),
            "tokens_max": lens.iter().max(),
            "open_s": open_s,
            "batched_texts_s": batched,
            "single_texts_s": single,
            "group_texts_s": group_rates,
        })
    );
}
