//! Deterministic, seedable randomness shared by every part of xlate (workloads, fragmentation,
//! hashing of implicit data). No external RNG crate, so the numbers are the same on every machine
//! and every build.

/// SplitMix64 finaliser: a fast, well-mixed 64-bit hash of one word (Steele et al., OOPSLA'14).
#[inline(always)]
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hash of two words (e.g. a seed and an index), for implicit data generated on demand.
#[inline(always)]
pub fn hash2(a: u64, b: u64) -> u64 {
    mix64(a ^ mix64(b))
}

/// A small deterministic PRNG (SplitMix64 stream).
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng { state: mix64(seed) }
    }

    /// Next 64 random bits.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.state)
    }

    /// Uniform in `0..n` (n > 0), by multiply-shift (no modulo bias worth modelling).
    #[inline(always)]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Fisher-Yates shuffle.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }

    /// Uniform in `[0, 1)`.
    #[inline(always)]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}
