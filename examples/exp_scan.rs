//! Compares exp.rs's exponent with libm's `expf` on every f32 (2^32 inputs, about a minute on
//! one core): the scalar form, and the 8-lane AVX2 form where the CPU has AVX2 and FMA.
//!
//!   cargo run --release --example exp_scan
//!
//! On glibc with FMA (x86-64 with AVX2 and FMA) every result should have libm's bits, NaN for
//! NaN; the unit tests in src/backend/exp.rs check a sample of 1.4 million inputs, this checks
//! them all. Exits 1 if any differ.

fn main() {
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    let mut buf = vec![0f32; 1 << 16];
    let (mut scalar_off, mut lanes_off) = (0u64, 0u64);
    #[cfg(target_arch = "x86_64")]
    let lanes = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    let lanes = false;
    for hi in 0..(1u32 << 16) {
        for (i, v) in buf.iter_mut().enumerate() {
            *v = f32::from_bits((hi << 16) | i as u32);
        }
        let want: Vec<f32> = buf.iter().map(|x| x.exp()).collect();
        for (x, w) in buf.iter().zip(&want) {
            let got = packlm::backend::exp::expf(*x);
            if !same(got, *w) {
                if scalar_off < 5 {
                    eprintln!("scalar: expf({x:e}) = {:#x}, libm {:#x}", got.to_bits(), w.to_bits());
                }
                scalar_off += 1;
            }
        }
        #[cfg(target_arch = "x86_64")]
        if lanes {
            // SAFETY: AVX2 and FMA were detected above.
            unsafe { avx2_exp(&mut buf) };
            for (got, w) in buf.iter().zip(&want) {
                lanes_off += !same(*got, *w) as u64;
            }
        }
    }
    println!("inputs: 2^32; scalar differs from libm on {scalar_off}");
    if lanes {
        println!("8-lane AVX2 differs from libm on {lanes_off}");
    } else {
        println!("8-lane AVX2: not run (no AVX2 and FMA here)");
    }
    if scalar_off + lanes_off > 0 {
        std::process::exit(1);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_exp(x: &mut [f32]) {
    // SAFETY: the caller's promise.
    unsafe { packlm::backend::exp::avx2::exp_sub(x, 0.0) }
}
