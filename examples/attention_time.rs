//! Times the host backend's attention alone, on random keys, values and queries of two real
//! models' geometries, at one position:
//!
//!   cargo run --release --example attention_time [-- ISA [THREADS]]
//!
//! ISA is portable, avx2 or avx512 (default: the CPU's best); THREADS defaults to 1. For
//! SmolLM2-135M (30 layers, 9 query heads over 3 KV heads of 64) and Gemma3-270m (18 layers, 4
//! over 1 of 256), with 460 keys already in every layer's plane, prints the best of 15 passes
//! over all layers of a decode step's one query row and a verify's 9 (8 drafts), in ms and in
//! ns per query head and key. A tool for comparing attention changes on one machine; the
//! model-level share comes from examples/verify_breakdown.rs.

use std::time::Instant;

use packlm::backend::attention::AttentionArgs;
use packlm::backend::cpu::Kernels;
use packlm::backend::host::row_dot::Isa;
use packlm::backend::host::HostBackend;
use packlm::backend::AttentionShape;
use packlm::kv::pages::PagedPlane;

/// Positions already in the planes (examples/verify_cost.rs's default context).
const CONTEXT: usize = 460;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let isa = match args.get(1).map(String::as_str) {
        None => Isa::best(),
        Some("portable") => Isa::Portable,
        Some("avx2") => Isa::Avx2,
        Some("avx512") => Isa::Avx512,
        Some(other) => fail(&format!("unknown ISA {other:?} (portable, avx2, avx512)")),
    };
    let threads = match args.get(2).map(|s| s.parse::<usize>()) {
        None => 1,
        Some(Ok(n)) if n >= 1 => n,
        Some(_) => fail("THREADS is a whole number of at least 1"),
    };
    let host = HostBackend::with_isa(threads, isa).unwrap_or_else(|e| fail(&e.to_string()));
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || ((packlm::sample::next_u64(&mut seed) >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0;
    // (name, query heads, KV heads, head size, layers).
    for (name, nh, nkv, d, layers) in [("SmolLM2-135M", 9, 3, 64, 30), ("Gemma3-270m", 4, 1, 256, 18)] {
        let kvw = nkv * d;
        let n = CONTEXT + 9;
        let planes: Vec<PagedPlane> = (0..layers)
            .map(|_| {
                let k: Vec<f32> = (0..n * kvw).map(|_| next()).collect();
                let v: Vec<f32> = (0..n * kvw).map(|_| next()).collect();
                PagedPlane::from_rows(kvw, &k, &v, &Default::default())
            })
            .collect();
        let q: Vec<f32> = (0..9 * nh * d).map(|_| next()).collect();
        let mut out = vec![0f32; 9 * nh * d];
        for rows in [1usize, 9] {
            let shape = AttentionShape { n_heads: nh, n_kv_heads: nkv, head_dim: d, scale: 0.125, softcap: None, window: None, causal: true };
            let mut best = f64::MAX;
            for _ in 0..15 {
                let t = Instant::now();
                for plane in &planes {
                    let a = AttentionArgs { shape, plane, first_position: CONTEXT, keys: CONTEXT + rows, sinks: None };
                    host.attention(&a, &q[..rows * nh * d], rows, &mut out[..rows * nh * d]);
                }
                best = best.min(t.elapsed().as_secs_f64());
            }
            // Query heads times the keys each sees (CONTEXT + 1 up to CONTEXT + rows).
            let pairs: usize = (0..rows).map(|r| nh * (CONTEXT + 1 + r)).sum::<usize>() * layers;
            println!("{name} {isa:?} {threads} thread(s), {rows} row(s): {:.3} ms, {:.2} ns per query head and key", best * 1e3, best * 1e9 / pairs as f64);
        }
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("attention_time: {msg}");
    std::process::exit(2)
}
