//! Where a verify's extra rows go, by kind of work: the pack opened on the host backend behind
//! a backend that times every call it passes on (`packlm::backend::watched`), then a decode step and a verify of 8 drafts
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
use packlm::backend::watched::{Call, Watch, Watched};
use packlm::backend::Precision;
use packlm::engine::speculative::Acceptance;
use packlm::engine::{Model, Session, Want};
use packlm::pack::tensor::WeightTensor;
use packlm::sample::argmax;
use parking_lot::Mutex;

fn fail(msg: &str) -> ! {
    eprintln!("verify_breakdown: {msg}");
    std::process::exit(1);
}

/// Seconds per kind of work, since the last `take`, and each prepared matrix's kind.
#[derive(Default)]
struct Clock {
    kinds: Vec<String>,
    spent: BTreeMap<String, f64>,
}

/// Times every call of the watched host backend into its clock.
struct Timer(Arc<Mutex<Clock>>);

impl Watch for Timer {
    fn matrix(&self, w: &WeightTensor) -> usize {
        let name: String = w.name.chars().filter(|c| !c.is_ascii_digit()).collect();
        let kind = format!("{} {:?}", name.replace("..", "."), w.ty);
        let mut clock = self.0.lock();
        clock.kinds.iter().position(|k| *k == kind).unwrap_or_else(|| {
            clock.kinds.push(kind);
            clock.kinds.len() - 1
        })
    }
    fn around(&self, call: Call, run: &mut dyn FnMut()) {
        let t = Instant::now();
        run();
        let spent = t.elapsed().as_secs_f64();
        let mut clock = self.0.lock();
        let kind = match call {
            Call::Matrix { id, .. } => clock.kinds[id].clone(),
            Call::Op(name) => name.to_string(),
        };
        *clock.spent.entry(kind).or_default() += spent;
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
    let timed = Watched { inner: Box::new(CpuBackend::new(host.with_precision(precision))), watcher: Timer(clock.clone()) };
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
