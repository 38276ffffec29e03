//! Times the `fast` integer kernels alone, one thread, on weights that do not fit the caches:
//!
//!   [KT_MIB=64] cargo run --release --example kernel_time [-- ISA]
//!
//! For each block format, a matrix of KT_MIB MiB (default 64; Gemma3's output matrix is 180)
//! and a few activation row counts (1: decode; 9: a verify of 8 drafted rows; 64: prefill, on
//! an eighth of the rows), prints the best of 5 runs in ns per weight row per activation row. ISA is
//! portable, avx2, vnni or neon (default: the CPU's best); with vnni or avx2, the block-sum
//! formats (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1) are also timed through the group kernels
//! (host/packed/) as the host backend runs them, over the stored rows and over the interleaved
//! copy. A tool for comparing kernel changes on one machine; the model-level numbers come from
//! examples/bench.rs.
//!
//! `kernel_time exp` times exp.rs's exponent instead (a softmax's and SiLU's), on each form
//! this CPU runs: 4096 values from the L1, best of 5 runs less the refill of the values before
//! each (timed alone), ns per value.

use std::time::Instant;

use packlm::backend::host::int8::{Int8Isa, Int8Kernel, Q8Rows, QTile};
#[cfg(target_arch = "x86_64")]
use packlm::backend::host::packed::{Arena, Packed};
#[cfg(target_arch = "x86_64")]
use packlm::pack::tensor::{TensorBytes, WeightTensor};
use packlm::quant::WeightType;

fn main() {
    let isa = match std::env::args().nth(1).as_deref() {
        None => Int8Isa::best(),
        Some("portable") => Int8Isa::Portable,
        Some("avx2") => Int8Isa::Avx2,
        Some("vnni") => Int8Isa::Avx512Vnni,
        Some("neon") => Int8Isa::Neon,
        Some("exp") => return exp_time(),
        Some(other) => {
            eprintln!("kernel_time: unknown ISA {other:?} (portable, avx2, vnni, neon, exp)");
            std::process::exit(2);
        }
    };
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || packlm::sample::next_u64(&mut seed);
    let types = WeightType::ALL.into_iter().filter(|t| t.is_quantized());
    for ty in types {
        let n_in = if ty.block_elems() == 256 { 768 } else { 640 };
        let row_bytes = ty.row_bytes(n_in).expect("a block format");
        let n_out = (std::env::var("KT_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(64usize) << 20) / row_bytes;
        let mut w: Vec<u8> = (0..n_out * row_bytes).map(|_| next() as u8).collect();
        // Small finite f16 scales where each format keeps them (0x2000..0x27ff: about 2^-7).
        let bb = ty.block_bytes();
        for b in w.chunks_exact_mut(bb) {
            let at = if ty == WeightType::Q6_K { bb - 2 } else { 0 };
            b[at + 1] = 0x20 | (b[at + 1] & 0x07);
            if matches!(ty, WeightType::Q4_1 | WeightType::Q5_1 | WeightType::Q4_K | WeightType::Q5_K) {
                b[3] = 0x20 | (b[3] & 0x07);
            }
        }
        let kernel = Int8Kernel::new(ty, isa).expect("a block format");
        // On VNNI machines the block-sum formats' stored-order kernel is the AVX2 one (what rows
        // after a packed matrix's last group of 16 take); the group kernels' lines follow.
        let mut line = format!("{ty:>5} {isa:?}:");
        for m in [1, 2, 3, 4, 9, 12, 64] {
            let x: Vec<f32> = (0..m * n_in).map(|_| (next() % 2001) as f32 / 1000.0 - 1.0).collect();
            let mut q8 = Q8Rows::default();
            q8.quantize(&x, n_in);
            let mut out = vec![0.0f32; n_out * m];
            let rows = if m == 64 { n_out / 8 } else { n_out };
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let t = Instant::now();
                kernel.run(QTile { w: &w[..rows * row_bytes], row_bytes, n_in, x: &q8, m, out: &mut out[..rows * m] });
                best = best.min(t.elapsed().as_secs_f64());
            }
            line += &format!("  m={m}: {:.2} ns", best * 1e9 / (rows * m) as f64);
        }
        println!("{line}");
        #[cfg(target_arch = "x86_64")]
        if matches!(isa, Int8Isa::Avx512Vnni | Int8Isa::Avx2) && packlm::backend::host::packed::takes(ty) {
            // The same matrix through the group kernels, as the host backend runs it on this
            // CPU: over the stored rows (from the open on), then over the interleaved copy.
            let tensor = WeightTensor::new(String::new(), ty, vec![n_out, n_in], TensorBytes::Owned(std::sync::Arc::new(w))).expect("whole rows");
            let lanes = if isa == Int8Isa::Avx2 { 8 } else { 16 };
            let arena = Arena::new();
            let p = Packed::new(&tensor, lanes).expect("a format the group kernels take");
            assert!(p.side_table(&arena, &|n, task| (0..n).for_each(task), true), "the side table's memory");
            for order in ["stored", "interleaved"] {
                if order == "interleaved" {
                    p.interleave(&arena, &std::sync::atomic::AtomicBool::new(false), &mut || ());
                }
                let mut line = format!("{ty:>5} {order}:");
                for m in [1, 2, 3, 4, 9, 12, 64] {
                    let x: Vec<f32> = (0..m * n_in).map(|_| (next() % 2001) as f32 / 1000.0 - 1.0).collect();
                    let mut q8 = Q8Rows::default();
                    q8.quantize(&x, n_in);
                    let groups = if m == 64 { p.groups / 8 } else { p.groups };
                    let mut out = vec![0.0f32; groups * lanes * m];
                    let mut best = f64::INFINITY;
                    for _ in 0..5 {
                        let t = Instant::now();
                        // SAFETY: `isa` is the VNNI or AVX2 kernels (16 or 8 lanes), which
                        // Int8Kernel::new found this CPU runs.
                        // `out` holds m rows of groups * lanes results.
                        unsafe { p.run(0, groups, &q8, n_in, m, out.as_mut_ptr(), groups * lanes) };
                        best = best.min(t.elapsed().as_secs_f64());
                    }
                    line += &format!("  m={m}: {:.2} ns", best * 1e9 / (groups * lanes * m) as f64);
                }
                println!("{line}");
            }
        }
    }
}

/// `kernel_time exp`: exp.rs's `exp_sub` in each form this CPU runs.
fn exp_time() {
    use packlm::backend::exp;
    let src: Vec<f32> = (0..4096).map(|i| -(((i * 7919) % 2000) as f32) / 100.0).collect();
    let mut x = src.clone();
    let reps = 2000;
    // Each run refills the values first (an exponent's output is no input for the next); the
    // refill's own best time, alone, is taken off each form's.
    let mut best_of = |f: &dyn Fn(&mut [f32])| {
        (0..5)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..reps {
                    x.copy_from_slice(&src);
                    f(std::hint::black_box(&mut x));
                }
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let refill = best_of(&|_| {});
    let mut time = |name: &str, f: &dyn Fn(&mut [f32])| {
        let best = best_of(f) - refill;
        println!("exp {name:<8} {:.3} ns per value", best * 1e9 / (reps * src.len()) as f64);
    };
    time("scalar", &|x| exp::exp_sub_scalar(x, 0.0));
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(x: &mut [f32]) {
            // SAFETY: called only where the CPU has AVX2 and FMA (checked below).
            unsafe { exp::avx2::exp_sub(x, 0.0) }
        }
        #[target_feature(enable = "avx2,fma,avx512f")]
        unsafe fn avx512(x: &mut [f32]) {
            // SAFETY: called only where the CPU has AVX-512 F (checked below).
            unsafe { exp::avx512::exp_sub(x, 0.0) }
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the features were just detected.
            time("avx2", &|x| unsafe { avx2(x) });
        }
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: as above.
            time("avx512", &|x| unsafe { avx512(x) });
        }
    }
}
