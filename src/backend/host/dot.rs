//! f32 dot product with a fixed reduction order: 32 lanes (four 8-wide accumulators), combined
//! in a fixed tree, then the tail left to right. With AVX2+FMA the lanes use fused multiply-add;
//! the portable version does the same lane structure with separate multiply and add. Which one
//! runs is decided once per process, so every call in a process rounds the same way.

#[cfg(target_arch = "x86_64")]
static HAS_AVX2_FMA: once_cell::sync::Lazy<bool> =
    once_cell::sync::Lazy::new(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"));

#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if *HAS_AVX2_FMA {
        // SAFETY: the CPU supports AVX2 and FMA (checked above); slices are read in bounds.
        return unsafe { dot_avx2_fma(a, b) };
    }
    dot_portable(a, b)
}

pub fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = [0.0f32; 32];
    let body = n / 32 * 32;
    for (ca, cb) in a[..body].chunks_exact(32).zip(b[..body].chunks_exact(32)) {
        for i in 0..32 {
            acc[i] += ca[i] * cb[i];
        }
    }
    let mut s = reduce32(&acc);
    for i in body..n {
        s += a[i] * b[i];
    }
    s
}

/// Fixed tree: lane i of the four 8-wide accumulators summed as ((a0+a1)+(a2+a3)), then the 8
/// lanes pairwise. row_dot.rs's float kernels end with it too.
pub(super) fn reduce32(acc: &[f32; 32]) -> f32 {
    let mut v = [0.0f32; 8];
    for i in 0..8 {
        v[i] = (acc[i] + acc[8 + i]) + (acc[16 + i] + acc[24 + i]);
    }
    let w = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    let y = [w[0] + w[2], w[1] + w[3]];
    y[0] + y[1]
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn dot_avx2_fma(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let body = n / 32 * 32;
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i < body {
        for (k, lane) in acc.iter_mut().enumerate() {
            let va = _mm256_loadu_ps(pa.add(i + 8 * k));
            let vb = _mm256_loadu_ps(pb.add(i + 8 * k));
            *lane = _mm256_fmadd_ps(va, vb, *lane);
        }
        i += 32;
    }
    // reduce32's tree in registers, each add the same operands in the same order: lane i
    // (a0 + a1) + (a2 + a3), then the two 4-lane halves, then the pairs (storing the lanes and
    // adding them one by one took as long as the products at head_dim 64).
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let w = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let y = _mm_add_ps(w, _mm_movehl_ps(w, w));
    let mut s = _mm_cvtss_f32(_mm_add_ss(y, _mm_movehdup_ps(y)));
    for j in body..n {
        s += a[j] * b[j];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_exact_integer_sums_and_tails() {
        // Small integers are exact in f32, so every order gives the same answer: this checks
        // indexing (body, tail, lanes), not rounding.
        for n in [0usize, 1, 7, 31, 32, 33, 64, 100, 577] {
            let a: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
            let b: Vec<f32> = (0..n).map(|i| (i % 5) as f32).collect();
            let want: f32 = (0..n).map(|i| ((i % 7) as f32 - 3.0) * (i % 5) as f32).sum();
            assert_eq!(dot(&a, &b), want, "n={n}");
            assert_eq!(dot_portable(&a, &b), want, "n={n}");
        }
    }

    /// The AVX2 version is the lane structure with fused multiply-adds and reduce32's tree:
    /// the same bits as that written out in scalar code, on values where order matters.
    #[test]
    fn avx2_is_fused_lanes_then_the_tree() {
        #[cfg(target_arch = "x86_64")]
        if *HAS_AVX2_FMA {
            let mut seed = 0x2545_f491_4f6c_dd1du64;
            let mut next = move || {
                let r = crate::sample::next_u64(&mut seed);
                ((r >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * (1 << (r % 12)) as f32
            };
            for n in [32usize, 64, 96, 128, 200, 256] {
                let (a, b): (Vec<f32>, Vec<f32>) = (0..n).map(|_| (next(), next())).unzip();
                let mut acc = [0.0f32; 32];
                let body = n / 32 * 32;
                for (ca, cb) in a[..body].chunks_exact(32).zip(b[..body].chunks_exact(32)) {
                    for i in 0..32 {
                        acc[i] = ca[i].mul_add(cb[i], acc[i]);
                    }
                }
                let mut want = reduce32(&acc);
                for i in body..n {
                    want += a[i] * b[i];
                }
                // SAFETY: HAS_AVX2_FMA checked above.
                let got = unsafe { dot_avx2_fma(&a, &b) };
                assert_eq!(got.to_bits(), want.to_bits(), "n={n}: {got} vs {want}");
            }
        }
    }
}
