//! Allocations in the hot path: after a warm-up, a decode step and a verify-sized pass allocate
//! only what they hand back (the logits), at any thread count: per-pass scratch buffers,
//! rounded activations, task lists and attention buffers are reused. (Its own test binary: the
//! global allocator counts every thread's allocations.)

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use packlm::backend::{BackendKind, Precision};
use packlm::engine::{Model, OpenOptions, Session, Want};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: System's allocator, with a count beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's promise, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's promise, passed on.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's promise, passed on.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Allocations a pass may make whatever the model's size: the logits it returns, and now and
/// then a session's own lists growing (tokens, positions). A buffer allocated per layer, per
/// matmul or per task would be tens to hundreds. Measured: 6 or 7 on one thread, 6 to 9 on two
/// (how the pool's helper takes tasks varies from run to run, and a helper's buffers grow when
/// it first meets a size), so the bound leaves room above 9 while still far below one per layer.
const PER_PASS: usize = 12;

#[test]
fn decode_steps_and_batches_allocate_only_their_results() {
    // The tiny Qwen3-MoE and gpt-oss GGUFs: a mixture routes on the host from buffers made once
    // (gpt-oss's with attention sinks, biases and the top-k-first router).
    let models: Vec<_> = [smollm2(), gemma3_270m(), Some(tiny("qwen3_moe").join("model.gguf")), Some(tiny("gpt_oss").join("model.gguf"))].into_iter().flatten().collect();
    for p in &models {
        passes_allocate_little(p);
    }
}

fn passes_allocate_little(p: &std::path::Path) {
    for precision in [Precision::Fast, Precision::Exact] {
        for threads in [1, 2] {
            let m = std::sync::Arc::new(Model::open(p, &OpenOptions::new(BackendKind::Host, threads, precision)).unwrap());
            let mut s = Session::new(m.clone(), 0).unwrap();
            let vocab = m.spec().vocab_size as u32;
            let prompt: Vec<u32> = (0..48).map(|i| (100 + i * 37) % vocab).collect();
            s.step_batch(&prompt[..16], Want::Last).unwrap();
            // Warm-up: every thread's buffers grown to a verify's 9 rows and a step's 1.
            for r in 0..3 {
                s.step_batch(&prompt[16 + 9 * r..25 + 9 * r], Want::All).unwrap();
                s.step(7).unwrap();
            }
            // The interleaved copies of the weights are written after the open, partly by the
            // pool's idle helpers between passes, and that writing allocates on its own threads:
            // the passes are counted once it is done (the counter sees every thread).
            let t = std::time::Instant::now();
            while !m.backend().weights_ready() {
                s.step(7).unwrap();
                s.truncate(s.n_past() - 1).unwrap();
                assert!(t.elapsed().as_secs() < 300, "the interleaved copies were not written in 300 s");
            }
            let before = ALLOCS.load(Ordering::Relaxed);
            for _ in 0..4 {
                s.step(9).unwrap();
            }
            let steps = ALLOCS.load(Ordering::Relaxed) - before;
            let before = ALLOCS.load(Ordering::Relaxed);
            s.truncate(s.n_past() - 4).unwrap();
            s.step_batch(&prompt[..9], Want::All).unwrap();
            let batch = ALLOCS.load(Ordering::Relaxed) - before;
            let what = format!("{}, {precision:?}, {threads} threads", p.display());
            eprintln!("{what}: {steps} allocations in 4 steps, {batch} in a 9-row pass");
            assert!(steps <= 4 * PER_PASS, "{what}: {steps} allocations in 4 decode steps");
            assert!(batch <= PER_PASS, "{what}: {batch} allocations in a pass of 9 rows");
        }
    }
}
