//! The implicit R-MAT / Kronecker generator: everything about the graph is a pure function of the
//! seed and a vertex id, so no edge list is ever stored.
//!
//! R-MAT (Chakrabarti et al., SDM'04) with the Graph500 parameters a = 0.57, b = 0.19, c = 0.19,
//! d = 0.05 drops each edge into the quadrant (src bit, dst bit) of the adjacency matrix with those
//! probabilities, once per bit of the vertex id. Two consequences make it computable on demand:
//!
//! * the *expected* out-degree of R-MAT id `r` depends only on the number of 1 bits of `r`:
//!   `λ(r) ∝ (a+b)^(zeros) · (c+d)^(ones)`. We draw the actual out-degree from Poisson(λ(r)) with a
//!   hash of `r` (an R-MAT edge list's out-degree is a sum of independent Bernoullis, i.e. Poisson
//!   in the limit), which keeps the heavy-tailed degree distribution, its hubs and the mean;
//! * given the source id, the destination bits are independent per level:
//!   `P(dst bit = 1 | src bit = 0) = b/(a+b)` and `P(dst bit = 1 | src bit = 1) = d/(c+d)`, so the
//!   k-th neighbour of a vertex is drawn from a hash of (vertex, k) in O(bits).
//!
//! As Graph500 and GAP do, vertex ids are then scrambled by a seeded bijection ([`Perm`]) so that
//! hubs are spread over the id space (and hence over the property arrays) instead of clustering at
//! ids with few 1 bits.

use crate::rng::{hash2, mix64};

/// R-MAT probability of the (0,0) quadrant (Graph500).
pub const RMAT_A: f64 = 0.57;
/// R-MAT probability of the (0,1) quadrant (Graph500).
pub const RMAT_B: f64 = 0.19;
/// R-MAT probability of the (1,0) quadrant (Graph500).
pub const RMAT_C: f64 = 0.19;

/// `P(dst bit = 1 | src bit = 0) = b/(a+b) = 0.25`, as a threshold on a random byte.
const DST1_GIVEN_SRC0: u64 = 64;
/// `P(dst bit = 1 | src bit = 1) = d/(c+d) ≈ 0.208`, as a threshold on a random byte (53/256 ≈ 0.207).
const DST1_GIVEN_SRC1: u64 = 53;

/// Number of bits needed for ids `0..n` (at least 1).
pub fn id_bits(n: u64) -> u32 {
    (64 - (n.max(2) - 1).leading_zeros()).max(1)
}

/// A seeded bijection of `0..n`: an invertible mix of `bits`-bit words (xor, odd multiply,
/// xorshift, add) restricted to `0..n` by cycle walking. Both directions cost a few multiplies, which
/// is what lets the degree of a *layout* id be computed from its R-MAT id and back.
#[derive(Clone, Debug)]
pub struct Perm {
    n: u64,
    mask: u64,
    shift: u32,
    identity: bool,
    xor: [u64; 3],
    add: u64,
    mul: [u64; 2],
    inv: [u64; 2],
}

/// Inverse of an odd number modulo 2^64 (Newton's iteration doubles the correct bits each step).
fn inverse_odd(m: u64) -> u64 {
    let mut x = m;
    for _ in 0..6 {
        x = x.wrapping_mul(2u64.wrapping_sub(m.wrapping_mul(x)));
    }
    x
}

impl Perm {
    /// A permutation of `0..n` keyed by `seed`; the identity when `scramble` is false.
    pub fn new(n: u64, seed: u64, scramble: bool) -> Perm {
        let bits = id_bits(n);
        let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let k = |i: u64| hash2(seed, 0x5045_524d_0000 + i);
        let mul = [k(3) | 1, k(4) | 1];
        Perm {
            n,
            mask,
            shift: bits / 2 + 1,
            identity: !scramble,
            xor: [k(0) & mask, k(1) & mask, k(2) & mask],
            add: k(5) & mask,
            mul,
            inv: [inverse_odd(mul[0]), inverse_odd(mul[1])],
        }
    }

    /// Inverse of `x ^ (x >> shift)` on `bits`-bit words: since `2·shift > bits`, the bits shifted
    /// in come only from the untouched top `shift` bits, so one step undoes it.
    #[inline]
    fn unshift(&self, y: u64) -> u64 {
        y ^ (y >> self.shift)
    }

    #[inline]
    fn fwd_raw(&self, mut x: u64) -> u64 {
        x ^= self.xor[0];
        x = x.wrapping_mul(self.mul[0]) & self.mask;
        x ^= x >> self.shift;
        x = x.wrapping_add(self.add) & self.mask;
        x = x.wrapping_mul(self.mul[1]) & self.mask;
        x ^= x >> self.shift;
        x ^ self.xor[2]
    }

    #[inline]
    fn inv_raw(&self, mut x: u64) -> u64 {
        x ^= self.xor[2];
        x = self.unshift(x);
        x = x.wrapping_mul(self.inv[1]) & self.mask;
        x = x.wrapping_sub(self.add) & self.mask;
        x = self.unshift(x);
        x = x.wrapping_mul(self.inv[0]) & self.mask;
        x ^ self.xor[0]
    }

    /// Layout id of R-MAT id `r` (< n).
    #[inline]
    pub fn fwd(&self, r: u64) -> u64 {
        if self.identity {
            return r;
        }
        let mut y = self.fwd_raw(r);
        while y >= self.n {
            y = self.fwd_raw(y);
        }
        y
    }

    /// R-MAT id of layout id `v` (< n).
    #[inline]
    pub fn inv(&self, v: u64) -> u64 {
        if self.identity {
            return v;
        }
        let mut y = self.inv_raw(v);
        while y >= self.n {
            y = self.inv_raw(y);
        }
        y
    }
}

/// How the out-degree of a vertex is drawn for one popcount class.
#[derive(Clone, Debug)]
enum Class {
    /// Poisson CDF, for small means (inversion: the first degree whose CDF exceeds the uniform).
    Table(Cdf),
    /// Normal approximation of Poisson(mean), for large means (hubs).
    Normal(f64),
}

/// A CDF and its guide table (Chen and Asau's inversion): `guide[j]` is the first index whose
/// value exceeds `j / guide.len()`, where the search for a uniform `u` in that slice of [0, 1)
/// starts. Every index before it has a value at most `j / len <= u`, so the walk forward from it
/// ends at the index a search from 0 would: the same draw, in one or two steps instead of a
/// binary search's dependent ones (which were most of a large graph's degree pass).
#[derive(Clone, Debug)]
struct Cdf {
    cdf: Vec<f64>,
    guide: Vec<u32>,
}

impl Cdf {
    fn new(cdf: Vec<f64>) -> Cdf {
        let slots = cdf.len().next_power_of_two();
        let guide = (0..slots).map(|j| cdf.partition_point(|&c| c <= j as f64 / slots as f64) as u32).collect();
        Cdf { cdf, guide }
    }

    /// The first index whose value exceeds `u` (in [0, 1)); the length if none does.
    #[inline]
    fn invert(&self, u: f64) -> u64 {
        let mut k = self.guide[(u * self.guide.len() as f64) as usize] as usize;
        while k < self.cdf.len() && self.cdf[k] <= u {
            k += 1;
        }
        k as u64
    }
}

/// Out-degree distribution of the implicit R-MAT graph: Poisson around the R-MAT expected degree
/// of the vertex's popcount class.
#[derive(Clone, Debug)]
pub struct DegreeModel {
    classes: Vec<Class>,
}

/// Above this mean the Poisson draw uses the normal approximation (error < 1 % in the tails).
const TABLE_MAX_MEAN: f64 = 256.0;

impl DegreeModel {
    /// The model for `n` vertices of `bits`-bit R-MAT ids with average out-degree `avg`.
    pub fn new(n: u64, bits: u32, avg: f64) -> DegreeModel {
        let p = RMAT_A + RMAT_B;
        let q = 1.0 - p;
        // Total R-MAT source weight of ids below n: for each 1 bit of n, the ids that share n's
        // prefix above it and have a 0 there contribute prefix·p·(p+q)^(lower bits) = prefix·p.
        let total = if n == 1u64 << bits {
            1.0
        } else {
            let (mut w, mut prefix) = (0.0, 1.0);
            for i in (0..bits).rev() {
                if (n >> i) & 1 == 1 {
                    w += prefix * p;
                    prefix *= q;
                } else {
                    prefix *= p;
                }
            }
            w
        };
        let classes = (0..=bits)
            .map(|ones| {
                let mean = avg * n as f64 * p.powi((bits - ones) as i32) * q.powi(ones as i32) / total;
                if mean > TABLE_MAX_MEAN {
                    return Class::Normal(mean);
                }
                let mut cdf = Vec::new();
                let mut pmf = (-mean).exp();
                let mut acc = pmf;
                cdf.push(acc);
                let limit = (mean + 12.0 * mean.sqrt() + 30.0) as usize;
                for k in 1..=limit {
                    pmf *= mean / k as f64;
                    acc += pmf;
                    cdf.push(acc);
                    if acc >= 1.0 - 1e-15 {
                        break;
                    }
                }
                Class::Table(Cdf::new(cdf))
            })
            .collect();
        DegreeModel { classes }
    }

    /// The out-degree of a vertex whose R-MAT id has `ones` 1 bits, from its random word `h`.
    pub fn draw(&self, ones: u32, h: u64) -> u64 {
        match &self.classes[ones as usize] {
            Class::Table(cdf) => cdf.invert((h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)),
            Class::Normal(mean) => {
                // Box–Muller from the two halves of h.
                let u1 = ((h >> 32) as f64 + 0.5) / 4_294_967_296.0;
                let u2 = (h & 0xffff_ffff) as f64 / 4_294_967_296.0;
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (mean + mean.sqrt() * z).round().max(0.0) as u64
            }
        }
    }
}

/// The R-MAT destination for a source with R-MAT id `src` (of `bits` bits), from random word `h`:
/// one biased coin per level, conditioned on the source's bit at that level. Coin `j` of a word
/// is its byte `j` against the level's threshold, most significant level first; eight coins per
/// 64-bit word, further words continuing the hash chain from `h`.
///
/// The eight coins of a word are tossed at once, in the word's bytes (SWAR, no bit loop): the
/// graph kernels draw a neighbour per edge, and the per-level loop was 13 % of a bfs run's
/// instructions. `rmat_dst_by_level` in the tests is the per-level definition it must equal.
#[inline]
pub fn rmat_dst(src: u64, bits: u32, h: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Both thresholds are in 1..=128, so `byte < t` is "the byte's high bit is clear and its low
    // seven bits are at most t - 1", which a byte-wise subtraction with no borrow tells.
    const T0: u64 = DST1_GIVEN_SRC0 - 1;
    const STEP: u64 = DST1_GIVEN_SRC0 - DST1_GIVEN_SRC1;
    const { assert!(DST1_GIVEN_SRC1 >= 1 && DST1_GIVEN_SRC1 <= DST1_GIVEN_SRC0 && DST1_GIVEN_SRC0 <= 128) };
    let mut dst = 0u64;
    let mut state = h;
    let mut word = h;
    // `top` is the level of the word's first coin; the word covers levels top, top-1, ... .
    let mut top = i64::from(bits) - 1;
    while top >= 0 {
        let m = top.min(7) as u32 + 1;
        // The source's bits at the word's levels: bit 7 - j is level top - j's.
        let field = if top >= 7 { src >> (top - 7) } else { src << (7 - top) } & 0xff;
        // Byte j = 1 where level top - j's source bit is 1.
        let spread = (field.wrapping_mul(ONES) & 0x0102_0408_1020_4080).wrapping_add(!HIGH) >> 7 & ONES;
        // Byte j = that level's threshold minus 1 (63 or 52).
        let t = T0 * ONES - STEP * spread;
        // Byte j's high bit = coin j: byte j of `word` below its threshold.
        let coins = ((t | HIGH) - (word & !HIGH)) & !word & HIGH;
        // Coin j to bit m - 1 - j (the byte gather reverses the order, bit 7 - j).
        let gathered = ((coins >> 7).wrapping_mul(0x8040_2010_0804_0201) >> 56) >> (8 - m);
        dst = (dst << m) | gathered;
        top -= 8;
        if top >= 0 {
            state = mix64(state ^ 0x726d_6174);
            word = state;
        }
    }
    dst
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition [`rmat_dst`] tosses a word at a time: one coin per level, in a loop.
    fn rmat_dst_by_level(src: u64, bits: u32, h: u64) -> u64 {
        let mut dst = 0u64;
        let (mut state, mut word) = (h, h);
        let mut avail = 8;
        for i in (0..bits).rev() {
            if avail == 0 {
                state = mix64(state ^ 0x726d_6174);
                word = state;
                avail = 8;
            }
            let byte = word & 0xff;
            word >>= 8;
            avail -= 1;
            let thr = if (src >> i) & 1 == 1 { DST1_GIVEN_SRC1 } else { DST1_GIVEN_SRC0 };
            dst = (dst << 1) | u64::from(byte < thr);
        }
        dst
    }

    /// Every width of id, random and extreme sources and words (bytes at and around both
    /// thresholds included): the word-at-a-time toss equals the per-level one.
    #[test]
    fn rmat_dst_equals_the_per_level_toss() {
        let mut r = crate::rng::Rng::new(11);
        let edge = [0u64, u64::MAX, 0x3f3f_3f3f_3f3f_3f3f, 0x4040_4040_4040_4040, 0x3435_3334_4041_3f80, 0x8080_8080_8080_8080];
        for bits in 0..=64u32 {
            let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
            for k in 0..400 {
                let src = if k % 7 == 0 { mask } else { r.next_u64() & mask };
                let h = if k < edge.len() { edge[k] } else { r.next_u64() };
                assert_eq!(rmat_dst(src, bits, h), rmat_dst_by_level(src, bits, h), "src {src:#x} bits {bits} h {h:#x}");
            }
        }
    }

    #[test]
    fn perm_is_a_bijection_and_inverts() {
        for &(n, scramble) in &[(1000u64, true), (1024, true), (17, true), (300, false)] {
            let p = Perm::new(n, 42, scramble);
            let mut seen = vec![false; n as usize];
            for r in 0..n {
                let v = p.fwd(r);
                assert!(v < n);
                assert!(!seen[v as usize]);
                seen[v as usize] = true;
                assert_eq!(p.inv(v), r);
            }
        }
        // Scrambling actually moves ids.
        let p = Perm::new(1 << 16, 1, true);
        assert!((0..100).filter(|&r| p.fwd(r) == r).count() < 5);
    }

    /// The guide table's inversion is the search from 0 (`partition_point`), on the model's own
    /// CDFs and on ones with repeated values and a last value below 1, at random uniforms and at
    /// every value and slice boundary.
    #[test]
    fn guided_inversion_equals_the_search_from_zero() {
        let mut r = crate::rng::Rng::new(5);
        let m = DegreeModel::new(1 << 20, 20, 16.0);
        let mut cdfs: Vec<Vec<f64>> =
            m.classes.iter().filter_map(|c| if let Class::Table(t) = c { Some(t.cdf.clone()) } else { None }).collect();
        cdfs.push(vec![0.25, 0.25, 0.5, 0.5, 0.75]);
        cdfs.push(vec![0.0, 0.0, 0.999]);
        cdfs.push(vec![1.0]);
        for cdf in cdfs {
            let g = Cdf::new(cdf.clone());
            let slots = g.guide.len() as f64;
            let edges = cdf.iter().flat_map(|&c| [c, c - f64::EPSILON, c + f64::EPSILON]);
            let bounds = (0..g.guide.len()).map(|j| j as f64 / slots);
            let random = (0..20_000).map(|_| (r.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64));
            for u in edges.chain(bounds).chain(random).filter(|u| (0.0..1.0).contains(u)) {
                assert_eq!(g.invert(u), cdf.partition_point(|&c| c <= u) as u64, "u {u} in {cdf:?}");
            }
        }
    }

    #[test]
    fn degree_model_mean_and_skew() {
        let n = 1u64 << 14;
        let bits = id_bits(n);
        let m = DegreeModel::new(n, bits, 16.0);
        let degs: Vec<u64> = (0..n).map(|r| m.draw(r.count_ones(), hash2(7, r))).collect();
        let mean = degs.iter().sum::<u64>() as f64 / n as f64;
        assert!((mean - 16.0).abs() < 0.5, "mean {mean}");
        // Heavy tail: the hub (id 0) is far above the mean and many vertices have degree 0.
        assert!(degs[0] > 1000, "hub degree {}", degs[0]);
        assert!(degs.iter().filter(|&&d| d == 0).count() > n as usize / 10);
        // Non-power-of-two n keeps the mean.
        let n2 = 10_000;
        let m2 = DegreeModel::new(n2, id_bits(n2), 8.0);
        let s: u64 = (0..n2).map(|r| m2.draw(r.count_ones(), hash2(9, r))).sum();
        assert!((s as f64 / n2 as f64 - 8.0).abs() < 0.4);
    }

    #[test]
    fn destinations_follow_rmat_skew() {
        // Destination bits are mostly 0: ids with few 1 bits receive most edges.
        let bits = 16;
        let ones: u64 = (0..10_000u64).map(|k| u64::from(rmat_dst(0xffff, bits, hash2(3, k)).count_ones())).sum();
        let frac = ones as f64 / (10_000.0 * bits as f64);
        assert!((frac - 0.207).abs() < 0.01, "{frac}");
    }
}
