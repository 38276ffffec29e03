//! llama.cpp's random draws, reproduced: its samplers hold a C++ `std::mt19937` seeded with the
//! sampler's seed and draw `std::uniform_real_distribution<double>(0, 1)` from it, which
//! libstdc++ computes as `generate_canonical<double, 53>`: two 32-bit outputs `a`, `b` give
//! `(a + b * 2^32) / 2^64`, and a result that rounds to 1 becomes the largest double below 1.
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
}
