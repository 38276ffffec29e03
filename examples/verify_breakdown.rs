//! Where a verify's extra rows go, by kind of work: the pack opened on the host backend behind
//! a backend that times every call it passes on, then a decode step and a verify of 8 drafts
//! (all rejected, all accepted) at the same position, as examples/verify_cost.rs makes them:
//!
//!   cargo run --release --example verify_breakdown -- PACK [--threads N] [--context N]
//!       [--reps N] [--isa best|avx2|portable] [--precision exact|fast]
//!
//! Prints, per kind, the mean milliseconds a step and each verify spent in it, and what the
//! accepted verify's extra rows cost there in decode steps: (verify - step) / step. The kinds
//! are each weight matrix by its name with the layer numbers taken out and its type (a call of
//! `matmul` or `matmul_lora` on it: the activations' quantization, the kernels and the helper
//! threads' hand-offs), every other backend call by its name (`attention`, `rms_norm`, `rope`,
//! `gated_activation`, `kv_append`, `argmax` for judging a row, ...), and the time outside any
//! backend call (the engine between calls). Timing each call costs some 40 ns, a
//! few hundred times a pass.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use packlm::backend::cpu::CpuBackend;
use packlm::backend::host::row_dot::Isa;
use packlm::backend::host::HostBackend;
use packlm::backend::{AttentionShape, Backend, DeviceCounters, KvStore, LoraArgs, Precision, Tensor, Vector, Weight};
use packlm::engine::speculative::Acceptance;
use packlm::engine::{Model, Session, Want};
use packlm::pack::tensor::WeightTensor;
use packlm::sample::argmax;
use packlm::semantics::rope::RopeSpec;
use packlm::semantics::{Activation, LayerSpec, ModelSpec};
use parking_lot::Mutex;

fn fail(msg: &str) -> ! {
    eprintln!("verify_breakdown: {msg}");
    std::process::exit(1);
}

/// Seconds per kind of work, since the last `take`.
#[derive(Default)]
struct Clock {
    kinds: Vec<String>,
    spent: BTreeMap<String, f64>,
}

/// The host backend with every call timed into `clock`. Every method is passed on, the
/// defaulted ones too, so that the engine sees the host's own behaviour.
struct Timed {
    inner: Box<dyn Backend>,
    clock: Arc<Mutex<Clock>>,
}

impl Timed {
    fn time<R>(&self, kind: &str, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        *self.clock.lock().spent.entry(kind.to_string()).or_default() += t.elapsed().as_secs_f64();
        r
    }

    fn weight_kind(&self, w: &Weight) -> String {
        self.clock.lock().kinds[w.get::<(usize, Weight)>().0].clone()
    }
}

fn inner(w: &Weight) -> &Weight {
    &w.get::<(usize, Weight)>().1
}

impl Backend for Timed {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn threads(&self) -> usize {
        self.inner.threads()
    }
    fn set_threads(&self, threads: usize) -> packlm::Result<()> {
        self.inner.set_threads(threads)
    }
    fn precision(&self) -> Precision {
        self.inner.precision()
    }
    fn device(&self) -> Option<String> {
        self.inner.device()
    }
    fn counters(&self) -> Option<DeviceCounters> {
        self.inner.counters()
    }
    fn accepts(&self, spec: &ModelSpec) -> packlm::Result<()> {
        self.inner.accepts(spec)
    }
    fn max_pass_rows(&self, spec: &ModelSpec) -> usize {
        self.inner.max_pass_rows(spec)
    }
    fn max_positions(&self, spec: &ModelSpec) -> usize {
        self.inner.max_positions(spec)
    }
    fn rows_for_one(&self) -> usize {
        self.inner.rows_for_one()
    }
    fn layer_done(&self) {
        self.inner.layer_done()
    }
    fn prepare_matrix(&self, w: &WeightTensor) -> packlm::Result<Weight> {
        let prepared = self.inner.prepare_matrix(w)?;
        let name: String = w.name.chars().filter(|c| !c.is_ascii_digit()).collect();
        let kind = format!("{} {:?}", name.replace("..", "."), w.ty);
        let mut clock = self.clock.lock();
        let id = clock.kinds.iter().position(|k| *k == kind).unwrap_or_else(|| {
            clock.kinds.push(kind);
            clock.kinds.len() - 1
        });
        Ok(Weight::new(prepared.rows(), prepared.cols(), (id, prepared)))
    }
    fn prepare_vector(&self, v: &[f32]) -> packlm::Result<Vector> {
        self.inner.prepare_vector(v)
    }
    fn weights_prepared(&self) {
        self.inner.weights_prepared()
    }
    fn weights_ready(&self) -> bool {
        self.inner.weights_ready()
    }
    fn tensor(&self, len: usize) -> Tensor {
        self.inner.tensor(len)
    }
    fn read_into(&self, t: &Tensor, start: usize, out: &mut [f32]) {
        self.time("read_into", || self.inner.read_into(t, start, out))
    }
    fn read(&self, t: &Tensor, len: usize) -> Vec<f32> {
        self.time("read", || self.inner.read(t, len))
    }
    fn argmax(&self, t: &Tensor, start: usize, row: &mut [f32]) -> (u32, bool) {
        self.time("argmax", || self.inner.argmax(t, start, row))
    }
    fn all_finite(&self, t: &Tensor, start: usize, len: usize) -> bool {
        self.time("all_finite", || self.inner.all_finite(t, start, len))
    }
    fn upload(&self, data: &[f32], t: &mut Tensor) {
        self.time("upload", || self.inner.upload(data, t))
    }
    fn new_kv(&self, layers: &[LayerSpec]) -> Box<dyn KvStore> {
        self.inner.new_kv(layers)
    }
    fn embed(&self, table: &Weight, tokens: &[u32], scale: Option<f32>, out: &mut Tensor) {
        self.time("embed", || self.inner.embed(inner(table), tokens, scale, out))
    }
    fn rms_norm(&self, x: &Tensor, w: &Vector, eps: f32, rows: usize, width: usize, out: &mut Tensor) {
        self.time("rms_norm", || self.inner.rms_norm(x, w, eps, rows, width, out))
    }
    fn rms_norm_inplace(&self, x: &mut Tensor, w: &Vector, eps: f32, rows: usize, width: usize) {
        self.time("rms_norm_inplace", || self.inner.rms_norm_inplace(x, w, eps, rows, width))
    }
    fn copy(&self, src: &Tensor, dst: &mut Tensor, len: usize) {
        self.time("copy", || self.inner.copy(src, dst, len))
    }
    fn matmul(&self, w: &Weight, x: &Tensor, rows: usize, out: &mut Tensor) {
        let kind = self.weight_kind(w);
        self.time(&kind, || self.inner.matmul(inner(w), x, rows, out))
    }
    fn add_bias(&self, x: &mut Tensor, bias: &Vector, rows: usize) {
        self.time("add_bias", || self.inner.add_bias(x, bias, rows))
    }
    fn head_norm(&self, x: &mut Tensor, w: Option<&Vector>, eps: f32, rows: usize, width: usize, head_dim: usize) {
        self.time("head_norm", || self.inner.head_norm(x, w, eps, rows, width, head_dim))
    }
    fn rope(&self, x: &mut Tensor, rope: &RopeSpec, rows: usize, width: usize, head_dim: usize, start: usize) {
        self.time("rope", || self.inner.rope(x, rope, rows, width, head_dim, start))
    }
    fn gated_activation(&self, act: Activation, gate: &mut Tensor, up: &Tensor, len: usize) {
        self.time("gated_activation", || self.inner.gated_activation(act, gate, up, len))
    }
    fn add(&self, x: &mut Tensor, y: &Tensor, len: usize) {
        self.time("add", || self.inner.add(x, y, len))
    }
    fn scale(&self, x: &mut Tensor, s: f32, len: usize) {
        self.time("scale", || self.inner.scale(x, s, len))
    }
    fn softcap(&self, x: &mut Tensor, cap: f32, len: usize) {
        self.time("softcap", || self.inner.softcap(x, cap, len))
    }
    fn copy_rows(&self, src: &Tensor, src_row: usize, dst: &mut Tensor, dst_row: usize, rows: usize, width: usize) {
        self.time("copy_rows", || self.inner.copy_rows(src, src_row, dst, dst_row, rows, width))
    }
    fn lora(&self, a: &Weight, b: &Weight, bt: &Weight, x: &Tensor, rows: usize, s: f32, r: &mut Tensor, delta: &mut Tensor, out: &mut Tensor) {
        self.time("adapters", || self.inner.lora(inner(a), inner(b), inner(bt), x, rows, s, r, delta, out))
    }
    fn matmul_lora(&self, w: &Weight, bias: Option<&Vector>, x: &Tensor, rows: usize, out: &mut Tensor, updates: &[LoraArgs], r: &mut Tensor, delta: &mut Tensor) {
        let kind = self.weight_kind(w);
        let updates: Vec<LoraArgs> = updates.iter().map(|u| LoraArgs { a: inner(u.a), b: inner(u.b), bt: inner(u.bt), s: u.s }).collect();
        self.time(&kind, || self.inner.matmul_lora(inner(w), bias, x, rows, out, &updates, r, delta))
    }
    fn gather_rows(&self, x: &Tensor, rows: &[usize], width: usize, out: &mut Tensor) {
        self.time("gather_rows", || self.inner.gather_rows(x, rows, width, out))
    }
    fn gather_columns(&self, src: &Tensor, rows: usize, src_width: usize, offset: usize, width: usize, out: &mut Tensor) {
        self.time("gather_columns", || self.inner.gather_columns(src, rows, src_width, offset, width, out))
    }
    fn per_layer_combine(&self, c: &mut Tensor, table: &Weight, tokens: &[u32], table_scale: f32, combine: f32) {
        self.time("per_layer_combine", || self.inner.per_layer_combine(c, inner(table), tokens, table_scale, combine))
    }
    fn kv_append(&self, kv: &mut dyn KvStore, layer: usize, k: &Tensor, v: &Tensor, rows: usize) {
        self.time("kv_append", || self.inner.kv_append(kv, layer, k, v, rows))
    }
    fn attention(&self, kv: &dyn KvStore, plane: usize, shape: &AttentionShape, q: &Tensor, rows: usize, start: usize, out: &mut Tensor) {
        self.time("attention", || self.inner.attention(kv, plane, shape, q, rows, start, out))
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(pack) = args.first().filter(|a| !a.starts_with("--")).cloned() else {
        fail("usage: verify_breakdown PACK [--threads N] [--context N] [--reps N] [--isa best|avx2|portable] [--precision exact|fast]");
    };
    let (mut threads, mut context, mut reps, mut isa, mut precision) = (1usize, 460usize, 30usize, Isa::best(), Precision::Fast);
    let mut it = args[1..].iter();
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| fail(&format!("{flag} needs a value")));
        let number = || value.parse::<usize>().unwrap_or_else(|_| fail(&format!("{flag}: a number")));
        match flag.as_str() {
            "--threads" => threads = number(),
            "--context" => context = number().max(1),
            "--reps" => reps = number().max(1),
            "--isa" => {
                isa = match value.as_str() {
                    "best" => Isa::best(),
                    "avx2" => Isa::Avx2,
                    "portable" => Isa::Portable,
                    other => fail(&format!("--isa: best, avx2 or portable, not {other:?}")),
                }
            }
            "--precision" => precision = value.parse().unwrap_or_else(|e| fail(&format!("--precision: {e}"))),
            other => fail(&format!("unknown option {other}")),
        }
    }
    let host = HostBackend::with_isa(threads, isa).unwrap_or_else(|e| fail(&e.to_string()));
    let clock = Arc::new(Mutex::new(Clock::default()));
    let timed = Timed { inner: Box::new(CpuBackend::new(host.with_precision(precision))), clock: clock.clone() };
    let m = Arc::new(Model::open_on(Path::new(&pack), Box::new(timed)).unwrap_or_else(|e| fail(&e.to_string())));
    while !m.backend().weights_ready() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let vocab = m.spec().vocab_size as u32;
    // The token ids of examples/verify_cost.rs: spread over the vocabulary, the same every run.
    let ids: Vec<u32> = (0..context as u32).map(|i| (i * 7919 + 1) % vocab).collect();
    let mut s = Session::new(m.clone(), 0).unwrap_or_else(|e| fail(&e.to_string()));
    if s.n_ctx() < context + 10 {
        fail(&format!("a context of {context} leaves no room for 8 drafts in {}", s.n_ctx()));
    }
    s.step_batch(&ids, Want::Last).unwrap_or_else(|e| fail(&e.to_string()));
    let base = s.n_past();
    let mut cont = vec![argmax(s.last_logits())];
    for _ in 0..8 {
        let t = *cont.last().unwrap_or(&0);
        s.step(t).unwrap_or_else(|e| fail(&e.to_string()));
        cont.push(argmax(s.last_logits()));
    }
    s.truncate(base).unwrap_or_else(|e| fail(&e.to_string()));
    let wrong: Vec<u32> = (0..8u32).map(|i| (cont[1] + 1 + i) % vocab).collect();
    let pending = cont[0];
    // Per measured call: total wall time, and the seconds per kind, summed over the reps.
    let mut runs: Vec<(f64, BTreeMap<String, f64>)> = vec![(0.0, BTreeMap::new()); 3];
    for _ in 0..reps {
        for (which, run) in runs.iter_mut().enumerate() {
            std::mem::take(&mut clock.lock().spent);
            let t = Instant::now();
            let accepted = match which {
                0 => s.step(pending).map(|_| 0),
                1 => s.verify(pending, &wrong, Acceptance::Greedy).map(|o| o.n_accepted),
                _ => s.verify(pending, &cont[1..=8], Acceptance::Greedy).map(|o| o.n_accepted),
            }
            .unwrap_or_else(|e| fail(&e.to_string()));
            run.0 += t.elapsed().as_secs_f64();
            if accepted != [0, 0, 8][which] {
                fail(&format!("{accepted} drafts accepted where {} were meant to be", [0, 0, 8][which]));
            }
            for (k, v) in std::mem::take(&mut clock.lock().spent) {
                *run.1.entry(k).or_default() += v;
            }
            s.truncate(base).unwrap_or_else(|e| fail(&e.to_string()));
        }
    }
    let n = reps as f64;
    let step = runs[0].0 / n;
    println!("{pack}: {:?}, {}, {threads} thread(s), context {context}, mean of {reps}", isa, precision.name());
    println!("{:<44} {:>9} {:>11} {:>11} {:>12}", "kind", "step ms", "rejected ms", "accepted ms", "extra/step");
    let mut kinds: Vec<&String> = runs.iter().flat_map(|r| r.1.keys()).collect();
    kinds.sort();
    kinds.dedup();
    let ms = |r: usize, k: &str| runs[r].1.get(k).copied().unwrap_or(0.0) / n * 1e3;
    let mut order: Vec<(f64, &String)> = kinds.iter().map(|k| (ms(2, k) - ms(0, k), *k)).collect();
    order.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, k) in order {
        println!("{k:<44} {:>9.3} {:>11.3} {:>11.3} {:>12.3}", ms(0, k), ms(1, k), ms(2, k), (ms(2, k) - ms(0, k)) / (step * 1e3));
    }
    let outside = |r: usize| runs[r].0 / n * 1e3 - runs[r].1.values().sum::<f64>() / n * 1e3;
    println!("{:<44} {:>9.3} {:>11.3} {:>11.3} {:>12.3}", "outside backend calls", outside(0), outside(1), outside(2), (outside(2) - outside(0)) / (step * 1e3));
    let total = |r: usize| runs[r].0 / n * 1e3;
    println!("{:<44} {:>9.3} {:>11.3} {:>11.3} {:>12.3}", "total", total(0), total(1), total(2), (total(2) - total(0)) / (step * 1e3));
    println!("verify(8) / step: rejected {:.2}, accepted {:.2}", total(1) / total(0), total(2) / total(0));
}
