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

/// `dot_avx2_fma(q, key i)` for the eight keys `k[i * stride..i * stride + q.len()]`, side by
/// side, for a `q` whose length is a multiple of 32 (no tail). Each key's lanes are its own
/// fused multiply-adds, as in `dot_avx2_fma`; the tree after them is done for the eight keys at
/// once by transposes, each add taking the same two operands as in the one-key tree, so every
/// result has `dot_avx2_fma`'s bits. One key at a time, the tree's shuffles and the stores of
/// single floats cost as much as the products at head_dim 64.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) unsafe fn dot8_avx2_fma(q: &[f32], k: &[f32], stride: usize) -> [f32; 8] {
    use std::arch::x86_64::*;
    let d = q.len();
    assert!(d % 32 == 0 && k.len() >= 7 * stride + d);
    let (pq, pk) = (q.as_ptr(), k.as_ptr());
    // Keys i and i + 1 together (each query load serves both; eight accumulators, no spills):
    // each key's lanes after the first level of the tree, (a0 + a1) + (a2 + a3), then
    // w[j] = v[j] + v[j + 4] for both keys: [w_i | w_i+1].
    let pair = |i: usize| {
        let z = _mm256_setzero_ps();
        let (mut a0, mut a1, mut a2, mut a3, mut b0, mut b1, mut b2, mut b3) = (z, z, z, z, z, z, z, z);
        let (ka, kb) = (pk.wrapping_add(i * stride), pk.wrapping_add((i + 1) * stride));
        let mut j = 0;
        while j < d {
            // SAFETY: j + 32 <= d, and keys i and i + 1's d values lie in k (asserted above).
            unsafe {
                let (q0, q1, q2, q3) =
                    (_mm256_loadu_ps(pq.add(j)), _mm256_loadu_ps(pq.add(j + 8)), _mm256_loadu_ps(pq.add(j + 16)), _mm256_loadu_ps(pq.add(j + 24)));
                a0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(ka.add(j)), a0);
                a1 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(ka.add(j + 8)), a1);
                a2 = _mm256_fmadd_ps(q2, _mm256_loadu_ps(ka.add(j + 16)), a2);
                a3 = _mm256_fmadd_ps(q3, _mm256_loadu_ps(ka.add(j + 24)), a3);
                b0 = _mm256_fmadd_ps(q0, _mm256_loadu_ps(kb.add(j)), b0);
                b1 = _mm256_fmadd_ps(q1, _mm256_loadu_ps(kb.add(j + 8)), b1);
                b2 = _mm256_fmadd_ps(q2, _mm256_loadu_ps(kb.add(j + 16)), b2);
                b3 = _mm256_fmadd_ps(q3, _mm256_loadu_ps(kb.add(j + 24)), b3);
            }
            j += 32;
        }
        let va = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
        let vb = _mm256_add_ps(_mm256_add_ps(b0, b1), _mm256_add_ps(b2, b3));
        halves(va, vb)
    };
    tree8([pair(0), pair(2), pair(4), pair(6)])
}

/// Keys i and i + 1's lanes after the first level of the tree, `va` and `vb` (lane j of each:
/// (a0 + a1) + (a2 + a3)), to the second level side by side: [w_i | w_i+1], w[j] = v[j] + v[j + 4].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn halves(va: std::arch::x86_64::__m256, vb: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(va, vb), _mm256_permute2f128_ps::<0x31>(va, vb))
}

/// The rest of reduce32's tree for eight keys at once, from `halves` of keys (0, 1), (2, 3),
/// (4, 5) and (6, 7), by transposes: each add takes the same two operands as in the one-key tree.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn tree8([w01, w23, w45, w67]: [std::arch::x86_64::__m256; 4]) -> [f32; 8] {
    use std::arch::x86_64::*;
    // y[j] = w[j] + w[j + 2]: [y0 y0' y2 y2' | y1 y1' y3 y3'] from keys 0..4 (y0, y0' its two lanes).
    let pairs = |a: __m256, b: __m256| {
        _mm256_add_ps(_mm256_shuffle_ps::<0b01_00_01_00>(a, b), _mm256_shuffle_ps::<0b11_10_11_10>(a, b))
    };
    let (y0123, y4567) = (pairs(w01, w23), pairs(w45, w67));
    // s = y[0] + y[1]: [s0 s2 s4 s6 | s1 s3 s5 s7].
    let s = _mm256_add_ps(_mm256_shuffle_ps::<0b10_00_10_00>(y0123, y4567), _mm256_shuffle_ps::<0b11_01_11_01>(y0123, y4567));
    let s = _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    let mut out = [0.0f32; 8];
    // SAFETY: out holds 8 floats; storeu has no alignment requirement.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), s) };
    out
}

/// `dot8_avx2_fma` with 512-bit registers: key i's accumulators a0 and a1 (elements 0..16 of
/// each 32) share one register, a2 and a3 another, so each lane gets the same fused
/// multiply-adds in the same order, and the tree starts with a0 + a1 and a2 + a3 taken from the
/// halves: every result has `dot_avx2_fma`'s bits. All eight keys at once (16 accumulators), so
/// that each load of the query serves eight keys.
///
/// # Safety
/// The CPU has AVX2, FMA and AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f")]
#[inline]
pub(crate) unsafe fn dot8_avx512(q: &[f32], k: &[f32], stride: usize) -> [f32; 8] {
    use std::arch::x86_64::*;
    let d = q.len();
    assert!(d % 32 == 0 && k.len() >= 7 * stride + d);
    let (pq, pk) = (q.as_ptr(), k.as_ptr());
    let keys: [*const f32; 8] = std::array::from_fn(|i| pk.wrapping_add(i * stride));
    let (mut lo, mut hi) = ([_mm512_setzero_ps(); 8], [_mm512_setzero_ps(); 8]);
    let mut j = 0;
    while j < d {
        // SAFETY: j + 32 <= d, and the eight keys' d values lie in k (asserted above).
        unsafe {
            let (q0, q1) = (_mm512_loadu_ps(pq.add(j)), _mm512_loadu_ps(pq.add(j + 16)));
            for i in 0..8 {
                lo[i] = _mm512_fmadd_ps(q0, _mm512_loadu_ps(keys[i].add(j)), lo[i]);
                hi[i] = _mm512_fmadd_ps(q1, _mm512_loadu_ps(keys[i].add(j + 16)), hi[i]);
            }
        }
        j += 32;
    }
    // (a0 + a1) + (a2 + a3) for key i, from the halves of its two registers.
    let half = |z: __m512, upper: bool| {
        if upper {
            _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(z)))
        } else {
            _mm512_castps512_ps256(z)
        }
    };
    let v = |i: usize| _mm256_add_ps(_mm256_add_ps(half(lo[i], false), half(lo[i], true)), _mm256_add_ps(half(hi[i], false), half(hi[i], true)));
    tree8(std::array::from_fn(|p| halves(v(2 * p), v(2 * p + 1))))
}

/// Defines `$name::<M, Q>(q, kt, out)`: `dot_avx2_fma(q[k], key i)` into `out[k][i]` for Q
/// queries and the `$lanes` keys held transposed, element j of key i at `kt[$lanes * j + i]`,
/// each query of 32 M elements (no tail; M a constant, so that each lane's chain of M products
/// is unrolled), each register of keys loaded once for all Q queries; and `$by_len::<Q>`, which
/// takes M from the queries' length. Lane i is key i throughout: each of the one-key sum's 32
/// lanes (lane l of accumulator k sums the elements j = 8k + l mod 32, fused multiply-adds from
/// 0 in the order of j) is a register here, and reduce32's tree adds whole registers, each add
/// the same two operands as in the one-key tree; so every result has `dot_avx2_fma`'s bits,
/// with no shuffle, and each query element broadcast once serves all the keys.
macro_rules! transposed_dots {
    ($name:ident, $by_len:ident, $features:literal, $lanes:literal, $v:ident, $zero:ident, $set1:ident, $load:ident, $fma:ident, $add:ident, $store:ident) => {
        /// See `transposed_dots`.
        ///
        /// # Safety
        /// The CPU has the features this is compiled for.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        #[inline]
        pub(crate) unsafe fn $name<const M: usize, const Q: usize>(q: [&[f32]; Q], kt: &[f32], out: [&mut [f32]; Q]) {
            use std::arch::x86_64::*;
            let d = 32 * M;
            assert!(q.iter().all(|q| q.len() == d) && kt.len() >= $lanes * d && out.iter().all(|o| o.len() >= $lanes));
            let (pq, pk) = (q.map(|q| q.as_ptr()), kt.as_ptr());
            let z = $zero();
            // Lane l's sums (its four accumulators added) for each query.
            let v = |l: usize| -> [$v; Q] {
                let a: [[$v; Q]; 4] = std::array::from_fn(|k| {
                    let mut acc = [z; Q];
                    for m in 0..M {
                        let j = 32 * m + 8 * k + l;
                        // SAFETY: j < 32 M = d, and element j's keys lie in kt (asserted above).
                        let keys = unsafe { $load(pk.add($lanes * j)) };
                        for (acc, pq) in acc.iter_mut().zip(pq) {
                            // SAFETY: j < d = each query's length (asserted above).
                            *acc = $fma($set1(unsafe { *pq.add(j) }), keys, *acc);
                        }
                    }
                    acc
                });
                std::array::from_fn(|i| $add($add(a[0][i], a[1][i]), $add(a[2][i], a[3][i])))
            };
            // Lanes l and l + 4 taken one after the other, so that only four sums a query wait.
            let w: [[$v; Q]; 4] = std::array::from_fn(|l| {
                let (x, y) = (v(l), v(l + 4));
                std::array::from_fn(|i| $add(x[i], y[i]))
            });
            for (i, out) in out.into_iter().enumerate() {
                let s = $add($add(w[0][i], w[2][i]), $add(w[1][i], w[3][i]));
                // SAFETY: out holds $lanes floats (asserted); the store has no alignment requirement.
                unsafe { $store(out.as_mut_ptr(), s) };
            }
        }

        /// `$name` with M from the queries' length: 64, 128, else 256.
        ///
        /// # Safety
        /// As `$name`.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        #[inline]
        pub(crate) unsafe fn $by_len<const Q: usize>(q: [&[f32]; Q], kt: &[f32], out: [&mut [f32]; Q]) {
            // SAFETY: the caller's promise; `$name` asserts the lengths.
            unsafe {
                match q[0].len() {
                    64 => $name::<2, Q>(q, kt, out),
                    128 => $name::<4, Q>(q, kt, out),
                    _ => $name::<8, Q>(q, kt, out),
                }
            }
        }
    };
}

transposed_dots!(dot8_transposed_avx2, dots8_transposed_avx2, "avx2,fma", 8, __m256, _mm256_setzero_ps, _mm256_set1_ps, _mm256_loadu_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps);
transposed_dots!(dot16_transposed_avx512, dots16_transposed_avx512, "avx2,fma,avx512f", 16, __m512, _mm512_setzero_ps, _mm512_set1_ps, _mm512_loadu_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps);

/// Eight keys' `d` elements (`keys[i]`, d a multiple of 8) into the transposed layout of
/// `dot8_transposed_avx2` (`lanes` 8) or `dot16_transposed_avx512` (`lanes` 16, these keys in
/// lanes `first..first + 8`): element j of key i to `kt[lanes * j + first + i]`, by 8 x 8
/// transposes. Copies only: no value changes.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn transpose8_avx2(keys: [&[f32]; 8], kt: &mut [f32], lanes: usize, first: usize) {
    use std::arch::x86_64::*;
    let d = keys[0].len();
    assert!(d % 8 == 0 && keys.iter().all(|k| k.len() == d) && first + 8 <= lanes && kt.len() >= lanes * d);
    let out = kt.as_mut_ptr();
    for jb in (0..d).step_by(8) {
        // SAFETY: jb + 8 <= d for every key, and rows jb..jb + 8 of kt lie in it (asserted).
        unsafe {
            let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(keys[i].as_ptr().add(jb)));
            let t: [__m256; 8] = std::array::from_fn(|i| {
                let (a, b) = (r[2 * (i / 2)], r[2 * (i / 2) + 1]);
                if i % 2 == 0 { _mm256_unpacklo_ps(a, b) } else { _mm256_unpackhi_ps(a, b) }
            });
            let u: [__m256; 8] = std::array::from_fn(|i| {
                let (a, b) = (t[4 * (i / 4) + i % 2], t[4 * (i / 4) + i % 2 + 2]);
                if (i / 2) % 2 == 0 { _mm256_shuffle_ps::<0x44>(a, b) } else { _mm256_shuffle_ps::<0xEE>(a, b) }
            });
            for c in 0..8 {
                // Element jb + c of the eight keys: column c of the 8 x 8 block.
                let (lo, hi) = (u[[0, 2, 1, 3][c % 4]], u[[0, 2, 1, 3][c % 4] + 4]);
                let col = if c < 4 { _mm256_permute2f128_ps::<0x20>(lo, hi) } else { _mm256_permute2f128_ps::<0x31>(lo, hi) };
                _mm256_storeu_ps(out.add(lanes * (jb + c) + first), col);
            }
        }
    }
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

    /// Values of magnitudes 2^-1 to 2^10, where the order of a sum changes its rounding.
    #[cfg(target_arch = "x86_64")]
    fn spread(mut seed: u64) -> impl FnMut() -> f32 {
        move || {
            let r = crate::sample::next_u64(&mut seed);
            ((r >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * (1 << (r % 12)) as f32
        }
    }

    /// The AVX2 version is the lane structure with fused multiply-adds and reduce32's tree:
    /// the same bits as that written out in scalar code, on values where order matters.
    #[test]
    fn avx2_is_fused_lanes_then_the_tree() {
        #[cfg(target_arch = "x86_64")]
        if *HAS_AVX2_FMA {
            let mut next = spread(0x2545_f491_4f6c_dd1d);
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

    /// Keys held transposed (laid out by `transpose8_avx2`) give each key's `dot_avx2_fma`
    /// bits, eight and sixteen at a time, at the head sizes the host sends that way, for one
    /// query a call and for two.
    #[test]
    fn transposed_keys_are_one_dot_each() {
        #[cfg(target_arch = "x86_64")]
        if *HAS_AVX2_FMA {
            let mut next = spread(0x51_7cc1_b727_220a);
            for d in [64usize, 128, 256] {
                let qs: [Vec<f32>; 2] = std::array::from_fn(|_| (0..d).map(|_| next()).collect());
                let keys: Vec<Vec<f32>> = (0..16).map(|_| (0..d).map(|_| next()).collect()).collect();
                // SAFETY (the calls below): HAS_AVX2_FMA checked above; AVX-512 F where called.
                let want: [Vec<f32>; 2] = std::array::from_fn(|i| keys.iter().map(|k| unsafe { dot_avx2_fma(&qs[i], k) }).collect());
                let row = |i: usize| -> [&[f32]; 8] { std::array::from_fn(|j| &keys[i + j][..]) };
                let check = |got: &[[f32; 16]], lanes: usize| {
                    let queries = got.len();
                    for (qi, (got, want)) in got.iter().zip(&want).enumerate() {
                        for (i, (g, w)) in got.iter().zip(want).take(lanes).enumerate() {
                            assert_eq!(g.to_bits(), w.to_bits(), "d={d} query {qi} of {queries}, key {i} of {lanes}: {g} vs {w}");
                        }
                    }
                };
                // `$kernel::<Q>` for the first Q queries, into fresh outputs.
                macro_rules! run {
                    ($kernel:ident, $q:literal, $kt:expr) => {{
                        let mut out = [[0.0f32; 16]; $q];
                        let outs = out.each_mut().map(|o| &mut o[..]);
                        unsafe { $kernel::<$q>(std::array::from_fn(|i| &qs[i][..]), $kt, outs) };
                        out
                    }};
                }
                let mut kt = vec![0.0f32; 8 * d];
                unsafe { transpose8_avx2(row(0), &mut kt, 8, 0) };
                check(&run!(dots8_transposed_avx2, 1, &kt), 8);
                check(&run!(dots8_transposed_avx2, 2, &kt), 8);
                if is_x86_feature_detected!("avx512f") {
                    let mut kt = vec![0.0f32; 16 * d];
                    unsafe { transpose8_avx2(row(0), &mut kt, 16, 0) };
                    unsafe { transpose8_avx2(row(8), &mut kt, 16, 8) };
                    check(&run!(dots16_transposed_avx512, 1, &kt), 16);
                    check(&run!(dots16_transposed_avx512, 2, &kt), 16);
                }
            }
        }
    }

    /// Eight keys at once give each key's `dot_avx2_fma` bits, on values where order matters
    /// and keys spaced by a stride wider than the query; so do the 512-bit registers where the
    /// CPU has them.
    #[test]
    fn eight_keys_are_eight_dots() {
        #[cfg(target_arch = "x86_64")]
        if *HAS_AVX2_FMA {
            let mut next = spread(0x9e37_79b9_7f4a_7c15);
            for (d, stride) in [(32usize, 32usize), (64, 64), (64, 192), (128, 160), (256, 256)] {
                let q: Vec<f32> = (0..d).map(|_| next()).collect();
                let k: Vec<f32> = (0..7 * stride + d).map(|_| next()).collect();
                // SAFETY: HAS_AVX2_FMA checked above.
                let got = unsafe { dot8_avx2_fma(&q, &k, stride) };
                for (i, g) in got.iter().enumerate() {
                    // SAFETY: as above.
                    let want = unsafe { dot_avx2_fma(&q, &k[i * stride..i * stride + d]) };
                    assert_eq!(g.to_bits(), want.to_bits(), "d={d} stride={stride} key {i}: {g} vs {want}");
                }
                if is_x86_feature_detected!("avx512f") {
                    // SAFETY: AVX2 and FMA checked above, AVX-512 F here.
                    let wide = unsafe { dot8_avx512(&q, &k, stride) };
                    for (i, (w, g)) in wide.iter().zip(&got).enumerate() {
                        assert_eq!(w.to_bits(), g.to_bits(), "d={d} stride={stride} key {i}: 512-bit {w} vs {g}");
                    }
                }
            }
        }
    }
}
