//! A fixed amount of forward work for instruction counting (valgrind --tool=callgrind), which
//! counts repeatably where wall-clock timings on a shared machine do not:
//!
//!   cargo build --release --example instructions
//!   valgrind --tool=callgrind target/release/examples/instructions PACK PREFILL DECODE
//!       [PRECISION] [ADAPTER]
//!
//! Opens PACK on the host backend with one thread (at PRECISION, exact or fast, when given;
//! else the pack's default), with the LoRA adapter ADAPTER (a PEFT folder or an adapter GGUF,
//! scale 1) when given, runs one pass over PREFILL fixed token ids, then DECODE single steps. The cost of a prefill is the count with (P, 0) minus the count
//! with (0, 0); of a decode step, the count with (P, D) minus (P, 0), divided by D.

use std::path::Path;
use std::sync::Arc;

use packlm::backend::{BackendKind, Precision};
use packlm::engine::{Model, OpenOptions, Session, Want};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parse = |i: usize| args.get(i).and_then(|v| v.parse::<usize>().ok());
    let (Some(pack), Some(n_prefill), Some(n_decode)) = (args.first(), parse(1), parse(2)) else {
        eprintln!("usage: instructions PACK PREFILL DECODE [PRECISION] [ADAPTER]");
        std::process::exit(2);
    };
    let precision = match args.get(3).map(|p| p.parse::<Precision>()).transpose() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("instructions: {e}");
            std::process::exit(2);
        }
    };
    let m = match Model::open(Path::new(pack), &OpenOptions { backend: BackendKind::Host, threads: 1, precision, ..Default::default() }) {
        Ok(m) => Arc::new(m),
        Err(e) => {
            eprintln!("instructions: {e}");
            std::process::exit(1);
        }
    };
    // The passes start once the backend's work on the weights after the open is done
    // (`weights_ready`: the host's interleaved copies), so that with `--separate-threads=yes`
    // the passes' thread is counted alone, over the kernels a long-running process runs.
    // INSTRUCTIONS_SETTLE_MS=N waits N ms more; INSTRUCTIONS_NO_WAIT=1 counts the passes from
    // the end of the open instead.
    if std::env::var_os("INSTRUCTIONS_NO_WAIT").is_none() {
        while !m.backend().weights_ready() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    if let Some(ms) = std::env::var("INSTRUCTIONS_SETTLE_MS").ok().and_then(|v| v.parse().ok()) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    let mut s = Session::new(m.clone(), 0).expect("session");
    if let Some(path) = args.get(4) {
        let adapter = std::sync::Arc::new(packlm::engine::adapter::Adapter::open(&m, Path::new(path)).expect("adapter"));
        s.set_adapters(packlm::engine::adapter::AdapterSet::new(&m, vec![(adapter, 1.0)]).expect("adapter set")).expect("set_adapters");
    }
    // Token ids spread over the vocabulary, the same on every run.
    let vocab = m.spec().vocab_size as u32;
    let ids: Vec<u32> = (0..n_prefill.max(1) as u32).map(|i| (i * 7919 + 1) % vocab).collect();
    if n_prefill > 0 {
        s.step_batch(&ids[..n_prefill], Want::Last).expect("prefill");
    }
    for i in 0..n_decode {
        s.step(ids[i % ids.len()]).expect("decode");
    }
    println!("positions held: {}", s.n_past());
}
