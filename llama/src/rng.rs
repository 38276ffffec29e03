//! llama.cpp's random draws, reproduced: its samplers hold a C++ `std::mt19937` seeded with the
//! sampler's seed and draw `std::uniform_real_distribution<double>(0, 1)` from it, which
//! libstdc++ computes as `generate_canonical<double, 53>`: two 32-bit outputs `a`, `b` give
//! `(a + b * 2^32) / 2^64`, and a result that rounds to 1 becomes the largest double below 1.
//! XTC draws `std::uniform_real_distribution<float>(0, 1)` (`uniform_f32`), and mirostat and
//! adaptive-p pick through `std::discrete_distribution<int>` (`discrete`), both as libstdc++
//! (bits/random.tcc, GCC 12) computes them.
//! With the same seed the facade draws the same numbers, so a seeded reply is the same as
//! llama.cpp's wherever the logits agree.

/// The 32-bit Mersenne Twister with the parameters of C++'s `std::mt19937`.
#[derive(Clone)]
pub struct Mt19937 {
    state: [u32; 624],
    index: usize,
}

impl Mt19937 {
    /// `std::mt19937(seed)`.
    pub fn new(seed: u32) -> Mt19937 {
        let mut state = [0u32; 624];
        state[0] = seed;
        for i in 1..624 {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)).wrapping_add(i as u32);
        }
        Mt19937 { state, index: 624 }
    }

    fn twist(&mut self) {
        for i in 0..624 {
            let y = (self.state[i] & 0x8000_0000) | (self.state[(i + 1) % 624] & 0x7fff_ffff);
            let mut next = self.state[(i + 397) % 624] ^ (y >> 1);
            if y & 1 != 0 {
                next ^= 0x9908_b0df;
            }
            self.state[i] = next;
        }
        self.index = 0;
    }

    /// The next output, `rng()`.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= 624 {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `std::uniform_real_distribution<double>(0, 1)(rng)` as libstdc++ computes it.
    pub fn uniform(&mut self) -> f64 {
        let a = self.next_u32() as f64;
        let b = self.next_u32() as f64;
        let r = (a + b * 4_294_967_296.0) / 18_446_744_073_709_551_616.0;
        if r >= 1.0 {
            1.0 - f64::EPSILON / 2.0
        } else {
            r
        }
    }

    /// `std::uniform_real_distribution<float>(0, 1)(rng)` as libstdc++ computes it:
    /// `generate_canonical<float, 24>` takes one 32-bit output `a` and gives `float(a) / 2^32`
    /// (`float(a)` rounded to nearest, so it can reach 1), and a result of 1 becomes the
    /// largest float below 1.
    pub fn uniform_f32(&mut self) -> f32 {
        let r = self.next_u32() as f32 / 4_294_967_296.0f32;
        if r >= 1.0 {
            1.0 - f32::EPSILON / 2.0
        } else {
            r
        }
    }

    /// `std::discrete_distribution<int>(weights)(rng)` as libstdc++ computes it: fewer than two
    /// weights give 0 and draw nothing; else the weights, as doubles, are divided by their sum
    /// (added left to right), the quotients summed into a cumulative table whose last entry is
    /// then set to 1, and one `uniform()` `u` picks the first entry not below `u`
    /// (`std::lower_bound`). Rounding can lift an entry before the last above 1, but every
    /// entry past `u` stays at or above it, so the bisection finds what a scan would.
    pub fn discrete(&mut self, weights: &[f32]) -> usize {
        let n = weights.len();
        if n < 2 {
            return 0;
        }
        let sum = weights.iter().fold(0.0f64, |s, &w| s + w as f64);
        let mut cumulative = Vec::with_capacity(n);
        let mut run = 0.0f64;
        for &w in weights {
            run += w as f64 / sum;
            cumulative.push(run);
        }
        cumulative[n - 1] = 1.0;
        let u = self.uniform();
        // The last entry is 1 and u < 1, so the pick is inside the table.
        cumulative.partition_point(|&c| c < u).min(n - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C++ standard ([rand.predef]) requires the 10000th output of a default-constructed
    /// `std::mt19937` (seed 5489) to be 4123659995.
    #[test]
    fn the_standards_check_value() {
        let mut r = Mt19937::new(5489);
        let mut last = 0;
        for _ in 0..10_000 {
            last = r.next_u32();
        }
        assert_eq!(last, 4_123_659_995);
    }

    /// The first outputs of seed 5489 as published with the reference implementation
    /// (mt19937ar.c's init_genrand(5489)): 3499211612, 581869302, 3890346734.
    #[test]
    fn the_first_outputs_of_the_default_seed() {
        let mut r = Mt19937::new(5489);
        assert_eq!([r.next_u32(), r.next_u32(), r.next_u32()], [3_499_211_612, 581_869_302, 3_890_346_734]);
    }

    /// generate_canonical's two-output formula, and its bound below 1.
    #[test]
    fn uniform_is_two_outputs_over_two_to_the_64() {
        let mut a = Mt19937::new(42);
        let mut b = a.clone();
        let (x, y) = (b.next_u32() as f64, b.next_u32() as f64);
        assert_eq!(a.uniform(), (x + y * 2f64.powi(32)) / 2f64.powi(64));
        for _ in 0..1000 {
            let u = a.uniform();
            assert!((0.0..1.0).contains(&u));
        }
    }

    /// generate_canonical<float, 24>: one output over 2^32, rounded to float; an output that
    /// rounds to 2^32 gives the largest float below 1.
    #[test]
    fn uniform_f32_is_one_output_over_two_to_the_32() {
        let mut a = Mt19937::new(42);
        let mut b = a.clone();
        // Seed 42's first output is 1608637542 (mt19937ar.c's init_genrand(42)); as a float
        // that is 1608637568 (24 bits), over 2^32: 0.37454012.
        assert_eq!(b.next_u32(), 1_608_637_542);
        assert_eq!(a.uniform_f32(), 1_608_637_568.0f32 / 4_294_967_296.0f32);
        assert_eq!(a.uniform_f32(), b.next_u32() as f32 / 4_294_967_296.0f32);
        // Outputs of 2^32 - 128 and above round to 2^32.
        assert_eq!((u32::MAX - 127) as f32, 4_294_967_296.0f32);
        let mut r = Mt19937::new(7);
        for _ in 0..100_000 {
            let u = r.uniform_f32();
            assert!((0.0..1.0).contains(&u), "{u}");
        }
    }

    /// discrete_distribution: one or no weight draws nothing; otherwise one uniform double
    /// picks the first cumulative entry not below it.
    #[test]
    fn discrete_is_a_cumulative_pick_by_one_uniform() {
        let mut a = Mt19937::new(3);
        let mut b = a.clone();
        assert_eq!(a.discrete(&[0.5]), 0);
        assert_eq!(a.discrete(&[]), 0);
        // Nothing was drawn: a and b still agree.
        assert_eq!(a.clone().next_u32(), b.clone().next_u32());
        // Weights 1, 2, 1: the table is 0.25, 0.75, 1.
        for _ in 0..1000 {
            let u = b.uniform();
            let want = if u <= 0.25 { 0 } else if u <= 0.75 { 1 } else { 2 };
            assert_eq!(a.discrete(&[1.0, 2.0, 1.0]), want, "u = {u}");
        }
        // A zero weight is never picked past the first entry: [0, 1] picks 1 unless u is 0.
        for _ in 0..1000 {
            assert_eq!(a.discrete(&[0.0, 1.0]), 1);
        }
    }

    /// Values libstdc++ itself gives (g++ 12.2, this program):
    ///     std::mt19937 r(42); std::uniform_real_distribution<float> u(0.0f, 1.0f);
    ///     4 x u(r), printed as float bits;
    ///     std::mt19937 r2(3); std::vector<float> w = {0.1f, 0.2f, 0.3f, 0.15f, 0.25f};
    ///     20 x std::discrete_distribution<int>(w.begin(), w.end())(r2)
    /// (a new distribution each time, as llama.cpp's llama_sample_dist makes one per draw).
    #[test]
    fn libstdcxx_own_draws() {
        let mut r = Mt19937::new(42);
        let bits: Vec<u32> = (0..4).map(|_| r.uniform_f32().to_bits()).collect();
        assert_eq!(bits, [0x3ebf_c3b9, 0x3f4b_ea3e, 0x3f73_6203, 0x3e3b_d654]);
        let mut r2 = Mt19937::new(3);
        let w = [0.1f32, 0.2, 0.3, 0.15, 0.25];
        let picks: Vec<usize> = (0..20).map(|_| r2.discrete(&w)).collect();
        assert_eq!(picks, [0, 4, 1, 2, 2, 0, 0, 1, 0, 3, 1, 2, 1, 2, 2, 4, 4, 4, 2, 2]);
    }
}
