//! The cost of a verify by draft length, in decode steps, drafts all rejected and all accepted:
//!
//!   cargo run --release --example verify_cost -- PACK [--threads N] [--context N] [--max-k K]
//!       [--reps N] [--isa best|avx2|portable] [--precision exact|fast]
//!
//! Opens PACK on the host backend at `--precision` (default fast, what a block-quantized pack
//! gets) with the kernels of `--isa` (default the CPU's best; `avx2` shows an AVX2-only
//! machine's costs on an AVX-512 one), waits until the backend's weights are in their lasting
//! layout (`weights_ready`), prefills `--context` (460) fixed token ids, then times at that
//! position one decode step and, for each draft length d from 1 to `--max-k` (8), a verify of d
//! drafts that are all rejected (tokens the model does not predict) and one of d drafts that are
//! all accepted (the model's own greedy continuation). Each time is the best of `--reps` (30),
//! the session truncated back after each. Prints one JSON line: the step in ms, then per d the
//! two costs over the step. examples/bench.rs reports d = 8 alone (`verify_k8_over_step*`);
//! this gives the curve, from which a drafter's rounds can be costed (examples/draft_replay.rs
//! takes a linear fit of it as `--verify-cost A,B`).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use packlm::backend::cpu::CpuBackend;
use packlm::backend::host::row_dot::Isa;
use packlm::backend::host::HostBackend;
use packlm::backend::Precision;
use packlm::engine::speculative::Acceptance;
use packlm::engine::{Model, Session, Want};
use packlm::sample::argmax;

fn fail(msg: &str) -> ! {
    eprintln!("verify_cost: {msg}");
    std::process::exit(1);
}

struct Args {
    pack: String,
    threads: usize,
    context: usize,
    max_k: usize,
    reps: usize,
    isa: Isa,
    precision: Option<Precision>,
}

fn parse() -> Args {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(pack) = args.first().filter(|a| !a.starts_with("--")).cloned() else {
        fail("usage: verify_cost PACK [--threads N] [--context N] [--max-k K] [--reps N] [--isa best|avx2|portable] [--precision exact|fast]");
    };
    let mut a = Args { pack, threads: 1, context: 460, max_k: 8, reps: 30, isa: Isa::best(), precision: None };
    let mut it = args[1..].iter();
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| fail(&format!("{flag} needs a value")));
        let number = || value.parse::<usize>().unwrap_or_else(|_| fail(&format!("{flag}: a number")));
        match flag.as_str() {
            "--threads" => a.threads = number(),
            "--context" => a.context = number().max(1),
            "--max-k" => a.max_k = number().max(1),
            "--reps" => a.reps = number().max(1),
            "--isa" => {
                a.isa = match value.as_str() {
                    "best" => Isa::best(),
                    "avx2" => Isa::Avx2,
                    "portable" => Isa::Portable,
                    other => fail(&format!("--isa: best, avx2 or portable, not {other:?}")),
                }
            }
            "--precision" => a.precision = Some(value.parse().unwrap_or_else(|e| fail(&format!("--precision: {e}")))),
            other => fail(&format!("unknown option {other}")),
        }
    }
    a
}

fn main() {
    let a = parse();
    let host = HostBackend::with_isa(a.threads, a.isa).unwrap_or_else(|e| fail(&e.to_string()));
    let pack = Path::new(&a.pack);
    let precision = a.precision.unwrap_or(Precision::Fast);
    let m = Arc::new(Model::open_on(pack, Box::new(CpuBackend::new(host.with_precision(precision)))).unwrap_or_else(|e| fail(&e.to_string())));
    while !m.backend().weights_ready() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let vocab = m.spec().vocab_size as u32;
    // Token ids spread over the vocabulary, the same on every run (as examples/instructions.rs).
    let ids: Vec<u32> = (0..a.context as u32).map(|i| (i * 7919 + 1) % vocab).collect();
    let mut s = Session::new(m.clone(), 0).unwrap_or_else(|e| fail(&e.to_string()));
    let room = s.n_ctx().saturating_sub(a.context);
    if room < a.max_k + 2 {
        fail(&format!("a context of {} leaves no room for {} drafts in {}", a.context, a.max_k, s.n_ctx()));
    }
    s.step_batch(&ids, Want::Last).unwrap_or_else(|e| fail(&e.to_string()));
    let base = s.n_past();
    // The greedy continuation: pending = cont[0], then the drafts a verify accepts whole.
    let mut cont = vec![argmax(s.last_logits())];
    for _ in 0..a.max_k {
        let t = *cont.last().unwrap_or(&0);
        s.step(t).unwrap_or_else(|e| fail(&e.to_string()));
        cont.push(argmax(s.last_logits()));
    }
    s.truncate(base).unwrap_or_else(|e| fail(&e.to_string()));
    let reps = a.reps;
    let best_of = |s: &mut Session, f: &mut dyn FnMut(&mut Session) -> usize, want: usize| -> f64 {
        let mut best = f64::INFINITY;
        for _ in 0..reps {
            let t = Instant::now();
            let accepted = f(s);
            best = best.min(t.elapsed().as_secs_f64());
            if accepted != want {
                fail(&format!("{accepted} drafts accepted where {want} were meant to be"));
            }
            s.truncate(base).unwrap_or_else(|e| fail(&e.to_string()));
        }
        best
    };
    let step = best_of(&mut s, &mut |s| s.step(cont[0]).map(|_| 0).unwrap_or_else(|e| fail(&e.to_string())), 0);
    let mut rejected = Vec::new();
    let mut accepted = Vec::new();
    for d in 1..=a.max_k {
        // Tokens other than the model's next one: the first is rejected, so all are.
        let wrong: Vec<u32> = (0..d as u32).map(|i| (cont[1] + 1 + i) % vocab).collect();
        let pending = cont[0];
        let verify = |draft: &[u32]| {
            let draft = draft.to_vec();
            move |s: &mut Session| s.verify(pending, &draft, Acceptance::Greedy).map(|o| o.n_accepted).unwrap_or_else(|e| fail(&e.to_string()))
        };
        rejected.push(best_of(&mut s, &mut verify(&wrong), 0) / step);
        accepted.push(best_of(&mut s, &mut verify(&cont[1..=d]), d) / step);
    }
    let list = |v: &[f64]| v.iter().map(|x| format!("{x:.3}")).collect::<Vec<_>>().join(", ");
    println!(
        "{{\"pack\": {:?}, \"isa\": \"{:?}\", \"precision\": \"{}\", \"threads\": {}, \"context\": {}, \"step_ms\": {:.3}, \"rejected_over_step\": [{}], \"accepted_over_step\": [{}]}}",
        a.pack,
        a.isa,
        precision.name(),
        a.threads,
        a.context,
        step * 1e3,
        list(&rejected),
        list(&accepted)
    );
}
