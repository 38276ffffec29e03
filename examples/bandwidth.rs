//! The machine's memory read bandwidth, for the roofline of a decode step (each step reads
//! every weight once): sums a buffer far larger than the caches with 1..=N threads, each thread
//! its own contiguous part, best of several passes. Prints one JSON line.
//!
//!   cargo run --release --example bandwidth -- [--threads N] [--mib 1024]

use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str, default: usize| {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let (threads, mib) = (value("--threads", 2).max(1), value("--mib", 1024).max(64));
    let words = mib << 17; // 8-byte words
    let buf: Vec<u64> = (0..words as u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
    let chunk = words.div_ceil(threads);
    let mut best = f64::MAX;
    let mut check = 0u64;
    for _ in 0..5 {
        let t = Instant::now();
        let sum: u64 = std::thread::scope(|s| {
            let parts: Vec<_> = buf.chunks(chunk).map(|part| s.spawn(move || part.iter().fold(0u64, |a, &b| a.wrapping_add(b)))).collect();
            parts.into_iter().map(|h| h.join().unwrap_or(0)).fold(0u64, u64::wrapping_add)
        });
        best = best.min(t.elapsed().as_secs_f64());
        check ^= sum;
    }
    let gb_s = (words * 8) as f64 / best / 1e9;
    println!("{}", serde_json::json!({"threads": threads, "mib": mib, "read_gb_s": gb_s, "checksum": check}));
}
