//! Where a LoRA adapter's time goes: `Backend::lora`, the one op `engine::forward`'s `lora` runs
//! for each adapted map of a decode step (or of a prefill of M rows), timed alone on the model's
//! own backend.
//!
//!   cargo run --release --example lora_ops -- PACK [--threads N] [--rank R] [--rows M]
//!       [--reps N] [--type f32|f16|bf16]
//!
//! For each of the seven maps of the model's layers (their widths: q, k, v, o, gate, up, down),
//! random A (rank x in), B (out x rank) and B^T are prepared as an adapter's are
//! (`Backend::prepare_matrix`), one set per layer, in `--type`. Two timings per map, the mean of
//! `--reps` runs in microseconds: "hot", the first layer's matrices every time (they stay in the
//! core's caches), and "cold", each run on the next layer's matrices (the whole adapter's bytes
//! cycle through, as in a decode step). The last line sums them over the seven maps times the
//! number of layers: the time an adapter on every map adds to one pass, to set beside
//! examples/lora_decode.rs's measured difference. An internals tool: it reaches the backend
//! through the `internals` feature, as the tests do.

use std::sync::Arc;
use std::time::Instant;

use packlm::engine::{Model, OpenOptions};
use packlm::pack::tensor::{TensorBytes, WeightTensor};
use packlm::quant::WeightType;

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("lora_ops: {what}: {e}");
    std::process::exit(1);
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    match args.iter().position(|a| a == name) {
        None => default,
        Some(i) => args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or_else(|| fail(name, "needs a value")),
    }
}

/// `m` (rows x cols, row-major) in `ty` (f32, f16 or bf16).
fn matrix(ty: WeightType, rows: usize, cols: usize, m: &[f32]) -> WeightTensor {
    let bytes: Vec<u8> = match ty {
        WeightType::F16 => m.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect(),
        WeightType::BF16 => m.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect(),
        _ => m.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    WeightTensor::new(String::new(), ty, vec![rows, cols], TensorBytes::Owned(Arc::new(bytes))).unwrap_or_else(|e| fail("tensor", e))
}

fn random(n: usize, seed: &mut u64) -> Vec<f32> {
    (0..n).map(|_| (packlm::sample::next_u64(seed) % 2001) as f32 / 50_000.0 - 0.02).collect()
}

/// Mean microseconds of `f` over `reps` runs, after one run not counted.
fn mean_us(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let t = Instant::now();
    for _ in 0..reps {
        f();
    }
    t.elapsed().as_secs_f64() * 1e6 / reps as f64
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        fail("usage", "lora_ops PACK [--threads N] [--rank R] [--rows M] [--reps N] [--type f32|f16|bf16]");
    }
    let threads: usize = arg(&args, "--threads", 2);
    let rank: usize = arg(&args, "--rank", 16);
    let m: usize = arg(&args, "--rows", 1);
    let reps: usize = arg(&args, "--reps", 2000);
    let ty = match arg(&args, "--type", String::from("f32")).as_str() {
        "f32" => WeightType::F32,
        "f16" => WeightType::F16,
        "bf16" => WeightType::BF16,
        other => fail("--type", format!("{other}: f32, f16 or bf16")),
    };
    let model = Model::open(std::path::Path::new(&args[0]), &OpenOptions { threads, ..Default::default() }).unwrap_or_else(|e| fail("open", e));
    let spec = model.spec();
    let l0 = &spec.layers[0];
    let hidden = spec.hidden_size;
    let n_layers = spec.layers.len();
    let maps = [
        ("q", hidden, l0.q_width()),
        ("k", hidden, l0.kv_width()),
        ("v", hidden, l0.kv_width()),
        ("o", l0.q_width(), hidden),
        ("gate", hidden, l0.mlp_width),
        ("up", hidden, l0.mlp_width),
        ("down", l0.mlp_width, hidden),
    ];
    let be = model.backend();
    let mut seed = 0x5eed_u64;
    let (mut hot_total, mut cold_total) = (0.0, 0.0);
    for (name, n_in, n_out) in maps {
        let sets: Vec<_> = (0..n_layers)
            .map(|_| {
                let (a, b) = (random(rank * n_in, &mut seed), random(n_out * rank, &mut seed));
                let bt: Vec<f32> = (0..rank * n_out).map(|i| b[(i % n_out) * rank + i / n_out]).collect();
                let prep = |rows, cols, v: &[f32]| be.prepare_matrix(&matrix(ty, rows, cols, v)).unwrap_or_else(|e| fail("prepare", e));
                (prep(rank, n_in, &a), prep(n_out, rank, &b), prep(rank, n_out, &bt))
            })
            .collect();
        let mut x = be.tensor(m * n_in);
        let xs: Vec<f32> = (0..m * n_in).map(|i| ((i * 7919) % 200) as f32 / 100.0 - 1.0).collect();
        be.upload(&xs, &mut x);
        let (mut r, mut delta, mut out) = (be.tensor(m * rank), be.tensor(m * n_out), be.tensor(m * n_out));
        let hot = mean_us(reps, || {
            let (a, b, bt) = &sets[0];
            be.lora(a, b, bt, &x, m, 0.5, &mut r, &mut delta, &mut out)
        });
        let mut next = 0;
        let cold = mean_us(reps, || {
            let (a, b, bt) = &sets[next % n_layers];
            next += 1;
            be.lora(a, b, bt, &x, m, 0.5, &mut r, &mut delta, &mut out)
        });
        println!("{name:>4} in {n_in:>4} out {n_out:>4}: hot {hot:7.2} us  cold {cold:7.2} us");
        hot_total += hot;
        cold_total += cold;
    }
    println!(
        "rank {rank}, {ty:?}, {m} row(s), {threads} threads, {n_layers} layers: {:.3} ms per pass hot, {:.3} ms cold",
        hot_total * n_layers as f64 / 1e3,
        cold_total * n_layers as f64 / 1e3
    );
}
