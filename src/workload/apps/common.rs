//! Pieces every application workload shares: a fast hasher for the host-side overlay maps, an
//! invertible permutation (to place implicitly-built nodes where a random-order fill would have put
//! them), a Zipfian sampler, the per-thread stream driver, and the common parameters.

use super::super::pending::Pending;
use super::super::{ParamInfo, ParamKind, Params};
use crate::error::Result;
use crate::rng::{mix64, Rng};
use crate::trace::Access;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A hasher for integer keys: one SplitMix64 round. The overlay maps are hit on every simulated
/// node visit, so SipHash's DoS resistance is not worth its cost here.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        mix64(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 ^= v;
    }
}

/// A `HashMap` keyed by integers with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// Greatest common divisor (for picking a multiplier coprime with a permutation's size).
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Inverse of `a` modulo `n` (gcd(a, n) = 1), by the extended Euclidean algorithm.
fn mod_inverse(a: u64, n: u64) -> u64 {
    let (mut r0, mut r1) = (i128::from(n), i128::from(a));
    let (mut t0, mut t1) = (0i128, 1i128);
    while r1 != 0 {
        let q = r0 / r1;
        (r0, r1) = (r1, r0 - q * r1);
        (t0, t1) = (t1, t0 - q * t1);
    }
    t0.rem_euclid(i128::from(n)) as u64
}

/// An affine bijection `q -> (a*q + b) mod n` of `0..n` and its inverse.
///
/// Used to scatter implicitly-built objects over their arena the way a fill in random key order
/// scatters them (consecutive keys land on unrelated pages), while still letting the host compute
/// an object's slot from its rank and back in O(1), with no per-object memory.
#[derive(Clone, Copy, Debug)]
pub struct Affine {
    n: u64,
    a: u64,
    ainv: u64,
    b: u64,
}

impl Affine {
    /// A permutation of `0..n` drawn from `seed` (the identity when `n <= 2`).
    pub fn new(n: u64, seed: u64) -> Affine {
        if n <= 2 {
            return Affine { n: n.max(1), a: 1, ainv: 1, b: 0 };
        }
        // A multiplier near n/phi spreads neighbours far apart; nudge it until it is coprime.
        let mut a = ((n as f64 * 0.618_033_988_749_895) as u64 ^ (mix64(seed) % n.min(1 << 20))) % n;
        a = a.max(1);
        while gcd(a, n) != 1 {
            a = if a + 1 >= n { 1 } else { a + 1 };
        }
        Affine { n, a, ainv: mod_inverse(a, n), b: mix64(seed ^ 0x5eed) % n }
    }

    /// The image of `q` (`q < n`).
    #[inline]
    pub fn fwd(&self, q: u64) -> u64 {
        ((u128::from(self.a) * u128::from(q) + u128::from(self.b)) % u128::from(self.n)) as u64
    }

    /// The `q` whose image is `s` (`s < n`).
    #[inline]
    pub fn inv(&self, s: u64) -> u64 {
        let d = (s + self.n - self.b) % self.n;
        ((u128::from(self.ainv) * u128::from(d)) % u128::from(self.n)) as u64
    }
}

/// Generalised harmonic number `sum_{i=1..n} i^-theta`: exact for the first 2^20 terms, the
/// Euler-Maclaurin integral for the tail (relative error far below the sampler's own).
fn zeta(n: u64, theta: f64) -> f64 {
    let exact = n.min(1 << 20);
    let mut s: f64 = (1..=exact).map(|i| (i as f64).powf(-theta)).sum();
    if n > exact {
        let a = exact as f64 + 0.5;
        let b = n as f64 + 0.5;
        s += (b.powf(1.0 - theta) - a.powf(1.0 - theta)) / (1.0 - theta);
    }
    s
}

/// Zipfian ranks over `0..n` with exponent `theta` in (0, 1), by the closed-form method of Gray et
/// al. (SIGMOD'94) that YCSB uses. Rank 0 is the most popular.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    /// A sampler over `n >= 1` items.
    pub fn new(n: u64, theta: f64) -> Zipf {
        let zetan = zeta(n, theta);
        let zeta2 = zeta(2.min(n), theta);
        let eta = if n <= 2 { 0.0 } else { (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan) };
        Zipf { n, theta, alpha: 1.0 / (1.0 - theta), zetan, eta }
    }

    /// One rank.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        let uz = u * self.zetan;
        if uz < 1.0 || self.n == 1 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) || self.n == 2 {
            return 1;
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

/// Per-thread access streams of an operation-driven workload: each thread records one whole
/// operation at a time into its [`Pending`] and hands it out in batches, until its share of the
/// access budget is used. Operations run to completion when recorded, so threads sharing a
/// structure interleave at operation granularity, deterministically for a given call order.
pub struct Streams {
    pend: Vec<Pending>,
    emitted: Vec<u64>,
    done: Vec<bool>,
    budget: u64,
}

impl Streams {
    /// `threads` streams sharing a total budget of `max_accesses` (split evenly, at least 1 each).
    pub fn new(threads: usize, max_accesses: u64) -> Streams {
        Streams {
            pend: (0..threads).map(|_| Pending::default()).collect(),
            emitted: vec![0; threads],
            done: vec![false; threads],
            budget: (max_accesses / threads.max(1) as u64).max(1),
        }
    }

    /// Number of streams.
    pub fn threads(&self) -> usize {
        self.pend.len()
    }

    /// Fills `buf` for `thread`, calling `step` to record the next operation whenever the thread's
    /// pending accesses run out. `step` returns `false` when the thread has nothing more to do.
    pub fn fill<F>(&mut self, thread: usize, buf: &mut [Access], mut step: F) -> Result<usize>
    where
        F: FnMut(&mut Pending) -> Result<bool>,
    {
        if thread >= self.pend.len() {
            return Ok(0);
        }
        let mut n = 0;
        let mut idle = 0;
        loop {
            let got = self.pend[thread].drain_into(&mut buf[n..], thread as u16);
            n += got;
            self.emitted[thread] += got as u64;
            if n == buf.len() || self.done[thread] || self.emitted[thread] >= self.budget {
                break;
            }
            if !step(&mut self.pend[thread])? {
                self.done[thread] = true;
            } else if self.pend[thread].is_empty() {
                // An operation that touched no memory: allowed, but never loop forever on them.
                idle += 1;
                if idle > 1_000_000 {
                    self.done[thread] = true;
                }
            }
        }
        Ok(n)
    }
}

/// The `max_accesses` parameter shared by every application workload.
pub const P_MAX_ACCESSES: ParamInfo = ParamInfo {
    name: "max_accesses",
    kind: ParamKind::Count,
    default: "10000000",
    help: "stop after about this many accesses in total (split evenly over the threads)",
};

/// The `populate` parameter: fault the loaded data in before the measured phase.
pub const P_POPULATE: ParamInfo = ParamInfo {
    name: "populate",
    kind: ParamKind::Flag,
    default: "true",
    help: "fault the data built by the (unmeasured) load phase in before the measured phase",
};

/// Reads `max_accesses` (at least 1).
pub fn max_accesses(p: &Params) -> Result<u64> {
    let v = p.u64("max_accesses")?;
    if v == 0 {
        return Err(p.out_of_range("max_accesses", "at least 1"));
    }
    Ok(v)
}

/// Reads `threads` (1..=256).
pub fn threads(p: &Params) -> Result<usize> {
    let t = p.u64("threads")?;
    if !(1..=256).contains(&t) {
        return Err(p.out_of_range("threads", "between 1 and 256"));
    }
    Ok(t as usize)
}

/// Reads a Zipf exponent in (0, 1).
pub fn theta(p: &Params, key: &str) -> Result<f64> {
    let t = p.f64(key)?;
    if !(t > 0.0 && t < 1.0) {
        return Err(p.out_of_range(key, "a Zipf exponent strictly between 0 and 1"));
    }
    Ok(t)
}

/// Reads a footprint of at least `min` bytes and at most 16 TiB.
pub fn footprint(p: &Params, key: &str, min: u64) -> Result<u64> {
    let f = p.bytes(key)?;
    if f < min || f > 16 << 40 {
        return Err(p.out_of_range(key, &format!("between {} and 16T", crate::addr::fmt_bytes(min))));
    }
    Ok(f)
}

#[cfg(test)]
pub mod tests {
    //! Helpers shared by the workloads' tests: building, running every thread, the generic contract.
    use super::*;
    use crate::workload::testvm::TestVm;
    use crate::workload::Workload;
    use std::collections::BTreeMap;

    /// Builds registered workload `name` with `params` (test helper).
    pub fn build(name: &str, params: &[(&str, &str)], seed: u64) -> Box<dyn Workload> {
        let map: BTreeMap<String, String> = params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        crate::workload::build(name, &map, seed).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// Runs every thread of `w` to completion round-robin in batches of `batch`, checking that
    /// every access lies inside a mapping; returns the accesses per thread.
    pub fn run_all(w: &mut dyn Workload, vm: &mut TestVm, batch: usize) -> Vec<Vec<Access>> {
        let t = w.threads();
        let mut out = vec![Vec::new(); t];
        let mut live = vec![true; t];
        let mut buf = vec![Access::default(); batch];
        while live.iter().any(|&l| l) {
            for th in 0..t {
                if !live[th] {
                    continue;
                }
                let n = w.fill(th, &mut buf, vm).unwrap();
                if n == 0 {
                    live[th] = false;
                }
                for a in &buf[..n] {
                    assert!(vm.contains(a.vaddr, u64::from(a.size)), "access {a:?} outside every mapping");
                    assert!(a.instrs >= 1 && a.size >= 1 && a.size <= 64);
                    assert_eq!(usize::from(a.cpu), th);
                }
                out[th].extend_from_slice(&buf[..n]);
            }
        }
        out
    }

    /// Checks the generic contract of a registered workload: determinism for a seed, every access
    /// mapped, every thread busy, budget respected.
    pub fn contract(name: &str, params: &[(&str, &str)]) {
        let mut runs = Vec::new();
        for batch in [1000, 1000, 77] {
            let mut w = build(name, params, 42);
            let mut vm = TestVm::new();
            w.setup(&mut vm).unwrap();
            runs.push(run_all(w.as_mut(), &mut vm, batch));
        }
        assert_eq!(runs[0], runs[1], "{name}: same seed, different stream");
        // Single-threaded streams do not depend on the batch size either.
        if runs[0].len() == 1 {
            assert_eq!(runs[0], runs[2], "{name}: stream depends on batch size");
        }
        for (t, s) in runs[0].iter().enumerate() {
            assert!(!s.is_empty(), "{name}: thread {t} emitted nothing");
        }
        let mut w = build(name, params, 43);
        let mut vm = TestVm::new();
        w.setup(&mut vm).unwrap();
        let other = run_all(w.as_mut(), &mut vm, 1000);
        assert_ne!(runs[0], other, "{name}: seed ignored");
    }

    #[test]
    fn affine_is_a_bijection() {
        for n in [1u64, 2, 3, 10, 97, 1000, 4096] {
            let p = Affine::new(n, n * 7);
            let mut seen = vec![false; n as usize];
            for q in 0..n {
                let s = p.fwd(q);
                assert!(!seen[s as usize]);
                seen[s as usize] = true;
                assert_eq!(p.inv(s), q);
            }
        }
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let z = Zipf::new(1000, 0.99);
        let mut rng = Rng::new(1);
        let mut hist = vec![0u32; 1000];
        for _ in 0..100_000 {
            hist[z.sample(&mut rng) as usize] += 1;
        }
        assert!(hist[0] > hist[10] && hist[10] > hist[500]);
        // Rank 0 carries about 1/zeta(1000, 0.99) ~ 13% of the mass.
        assert!((10_000..16_000).contains(&hist[0]), "{}", hist[0]);
        let big = Zipf::new(10_000_000_000, 0.99);
        for _ in 0..1000 {
            assert!(big.sample(&mut rng) < 10_000_000_000);
        }
    }
}
