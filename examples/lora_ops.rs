//! Where a LoRA adapter's time goes: the ops `engine::forward`'s `lora` runs for each adapted
//! map of a decode step (or of a prefill of M rows), timed alone on the model's own backend.
//!
//!   cargo run --release --example lora_ops -- PACK [--threads N] [--rank R] [--rows M] [--reps N]
//!
//! For each of the seven maps of the model's first layer (their widths: q, k, v, o, gate, up,
//! down), with random f32 A (rank x in) and B (out x rank) prepared as an adapter's are
//! (`Backend::prepare_matrix`), it times the four ops the engine runs per map and adapter:
//! `matmul(A, x)` (M rows), `matmul(B, x A^T)`, `scale` and `add` of the (M, out) delta; the
//! mean of `--reps` runs after a warm-up, in microseconds. The last line sums them over the
//! seven maps times the number of layers: the time an adapter on every map adds to one pass,
//! to set beside examples/lora_decode.rs's measured difference. An internals tool: it reaches
//! the backend through the `internals` feature, as the tests do.

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

fn f32_matrix(rows: usize, cols: usize, seed: &mut u64) -> WeightTensor {
    let bytes: Vec<u8> = (0..rows * cols).flat_map(|_| ((packlm::sample::next_u64(seed) % 2001) as f32 / 50_000.0 - 0.02).to_le_bytes()).collect();
    WeightTensor::new(String::new(), WeightType::F32, vec![rows, cols], TensorBytes::Owned(Arc::new(bytes))).unwrap_or_else(|e| fail("tensor", e))
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
        fail("usage", "lora_ops PACK [--threads N] [--rank R] [--rows M] [--reps N]");
    }
    let threads: usize = arg(&args, "--threads", 2);
    let rank: usize = arg(&args, "--rank", 16);
    let m: usize = arg(&args, "--rows", 1);
    let reps: usize = arg(&args, "--reps", 2000);
    let model = Model::open(std::path::Path::new(&args[0]), &OpenOptions { threads, ..Default::default() }).unwrap_or_else(|e| fail("open", e));
    let spec = model.spec();
    let l0 = &spec.layers[0];
    let hidden = spec.hidden_size;
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
    let (mut total, mut parts) = (0.0, [0.0f64; 4]);
    for (name, n_in, n_out) in maps {
        let a = be.prepare_matrix(&f32_matrix(rank, n_in, &mut seed)).unwrap_or_else(|e| fail("prepare", e));
        let b = be.prepare_matrix(&f32_matrix(n_out, rank, &mut seed)).unwrap_or_else(|e| fail("prepare", e));
        let mut x = be.tensor(m * n_in);
        let xs: Vec<f32> = (0..m * n_in).map(|i| ((i * 7919) % 200) as f32 / 100.0 - 1.0).collect();
        be.upload(&xs, &mut x);
        let mut r = be.tensor(m * rank);
        let mut delta = be.tensor(m * n_out);
        let mut out = be.tensor(m * n_out);
        let t = [
            mean_us(reps, || be.matmul(&a, &x, m, &mut r)),
            mean_us(reps, || be.matmul(&b, &r, m, &mut delta)),
            mean_us(reps, || be.scale(&mut delta, 0.5, m * n_out)),
            mean_us(reps, || be.add(&mut out, &delta, m * n_out)),
        ];
        let sum: f64 = t.iter().sum();
        println!("{name:>4} in {n_in:>4} out {n_out:>4}: A {:7.2} us  B {:7.2} us  scale {:5.2} us  add {:5.2} us  = {sum:7.2} us", t[0], t[1], t[2], t[3]);
        total += sum;
        for (p, v) in parts.iter_mut().zip(t) {
            *p += v;
        }
    }
    let n_layers = spec.layers.len() as f64;
    println!(
        "rank {rank}, {m} row(s), {threads} threads: {:.0} us per layer, {:.2} ms per pass over {n_layers} layers (A {:.2} ms, B {:.2} ms, scale {:.2} ms, add {:.2} ms)",
        total,
        total * n_layers / 1e3,
        parts[0] * n_layers / 1e3,
        parts[1] * n_layers / 1e3,
        parts[2] * n_layers / 1e3,
        parts[3] * n_layers / 1e3
    );
}
