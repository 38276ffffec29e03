//! The `fast` precision's GELU (src/backend/host/act.rs): every kernel path this CPU can run
//! gives the portable path's bits, and the results stay close to the exact (libm) form the
//! `exact` precision uses. (SiLU is the exact form at both precisions; its paths are checked
//! for the portable bits too.)

mod common;

use common::Rng;
use packlm::backend::cpu::gated_activation;
use packlm::backend::host::act::{exp_poly, gated_fast};
use packlm::backend::host::row_dot::Isa;
use packlm::semantics::Activation;

/// Inputs over the range activations take, and beyond it (where exp saturates), with an odd
/// length so that the vector loops leave a tail.
fn inputs(n: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut rng = Rng(seed);
    let gate: Vec<f32> = (0..n).map(|i| rng.sym() * [0.5f32, 4.0, 12.0, 200.0][i % 4]).collect();
    let up = rng.vec(n);
    (gate, up)
}

#[test]
fn every_path_gives_the_portable_bits() {
    // SiLU's paths (8 lanes on AVX2, 16 on AVX-512) against the scalar exact form too: the
    // same bits (exp.rs's exponent at every width).
    for act in [Activation::GeluTanh, Activation::Silu] {
        let (gate, up) = inputs(1001, 3);
        let mut want = gate.clone();
        gated_fast(act, &mut want, &up, Isa::Portable);
        for isa in [Isa::Avx2, Isa::Avx512, Isa::Neon] {
            if !isa.available() {
                continue;
            }
            let mut got = gate.clone();
            gated_fast(act, &mut got, &up, isa);
            common::assert_bits_equal(&got, &want, &format!("{act:?} on {isa:?}"));
        }
    }
}

/// exp_poly against f64's exp: within 2 ulp over the range it is used on.
#[test]
fn exp_poly_is_within_two_ulp() {
    let mut worst = 0f64;
    for i in 0..200_000 {
        let x = -87.0 + 175.0 * (i as f32 / 200_000.0);
        let want = (x as f64).exp();
        let got = exp_poly(x) as f64;
        let ulp = (want as f32).abs() as f64 * f32::EPSILON as f64;
        worst = worst.max((got - want).abs() / ulp);
    }
    assert!(worst <= 2.0, "exp_poly is {worst} ulp from exp");
    assert!(exp_poly(f32::NAN).is_nan());
    assert_eq!(exp_poly(0.0), 1.0);
}

/// The fast forms against the exact ones: within 1e-6 relative, plus 1e-7 |gate * up|
/// absolute: the exact GELU's `1 + tanh(z)` cancels for very negative inputs and is itself only
/// good to 2^-24 |x| there (it gives 0 where GELU(-6.4) is -5e-13 x up).
#[test]
fn the_fast_forms_are_close_to_the_exact_ones() {
    {
        let act = Activation::GeluTanh;
        let (gate, up) = inputs(4001, 5);
        let (mut fast, mut exact) = (gate.clone(), gate.clone());
        gated_fast(act, &mut fast, &up, Isa::Portable);
        gated_activation(act, &mut exact, &up);
        for (i, (f, e)) in fast.iter().zip(&exact).enumerate() {
            assert!((f - e).abs() <= 1e-6 * e.abs() + 1e-7 * (gate[i] * up[i]).abs(), "{act:?} at {} (gate {}): fast {f:e}, exact {e:e}", i, gate[i]);
        }
    }
}

/// The host backend splits a long activation across its threads (`gated_activation`): each
/// element keeps the bits of the whole vector done at once on one thread, at both precisions.
#[test]
fn split_activations_keep_their_bits() {
    use packlm::backend::cpu::Kernels;
    use packlm::backend::host::HostBackend;
    use packlm::backend::Precision;
    let (gate, up) = inputs(9 * 1536 + 5, 11);
    for precision in [Precision::Exact, Precision::Fast] {
        for act in [Activation::Silu, Activation::GeluTanh] {
            let mut want = gate.clone();
            HostBackend::new(1).unwrap().with_precision(precision).gated_activation(act, &mut want, &up);
            for threads in [2, 3] {
                let be = HostBackend::new(threads).unwrap().with_precision(precision);
                for len in [gate.len(), 8192, 8193, 100] {
                    let mut got = gate[..len].to_vec();
                    be.gated_activation(act, &mut got, &up[..len]);
                    common::assert_bits_equal(&got, &want[..len], &format!("{act:?} at {precision:?} on {threads} threads, {len} elements"));
                }
            }
        }
    }
}
