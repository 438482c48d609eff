//! Hardware data prefetchers of the private caches: an IP-stride prefetcher for the L1D and a
//! stream prefetcher for the L2, as Utopia's machine has them (MICRO'23 Table 1: "IP-stride
//! prefetcher", "stream prefetcher"). Off by default (`mem.prefetch.l1d.kind = "none"`), which
//! leaves every result as it was; docs/memory-model.md ("Prefetchers") gives the model.
//!
//! Parameters and rules follow the configuration of Utopia's artifact (the Sniper tree of
//! CMU-SAFARI/Victima, `config/utopia_motivation_baseline.cfg`, which its
//! `virtual_memory_configs_utopia/common_translation.cfg` includes): for the L1D `ip_stride` with
//! `num_prefetches = 2`, `num_streams = 64`, `lookahead = 4`, `stop_at_page_boundary = true`,
//! `allocate_on_miss = false`; for the L2 `streamer` with `num_prefetches = 2`, `num_streams = 64`,
//! `prefetch_front = 4`, `conf_thresh = 2`, `max_conf = 7`, `allocate_on_miss = true`. Both train on
//! loads only and never cross a 4 KiB physical page (a cache sees physical addresses).
//!
//! - **IP-stride** (a reference prediction table, Chen & Baer): a fully associative LRU table of
//!   `entries` load IPs, each with the line offset (within its 4 KiB page) it last touched, the
//!   stride between its last two offsets and a state (initial, transient, steady, no prediction).
//!   A load whose stride repeats moves its entry towards steady; in steady state it prefetches the
//!   lines `distance + 1 ..= distance + degree` strides ahead in the same page. A load of an IP
//!   not in the table takes the least recently used entry.
//! - **Stream**: a fully associative LRU table of `entries` 4 KiB pages, each with the line offset
//!   last touched, the direction of the last move and a confidence counter (up by one, to
//!   `max_confidence`, when a move keeps the direction, down by one otherwise). At `confidence` or
//!   more it prefetches the lines `distance + 1 ..= distance + degree` ahead in that direction, in
//!   the page. A page not in the table takes an entry only on a miss.

use crate::error::{Error, Result};

/// Which prefetcher a cache has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PrefetcherKind {
    /// No prefetcher (the default).
    None,
    /// Per-IP stride detection (Utopia Table 1's L1D prefetcher).
    IpStride,
    /// Per-page stream detection (Utopia Table 1's L2 prefetcher).
    Stream,
}

/// One cache's prefetcher (`mem.prefetch.l1d`, `mem.prefetch.l2`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrefetcherConfig {
    /// The prefetcher (`"none"`, `"ip-stride"`, `"stream"`).
    pub kind: PrefetcherKind,
    /// Lines prefetched per trigger (the artifact's `num_prefetches`: 2).
    pub degree: u32,
    /// Lines (strides, for IP-stride) skipped before the first one prefetched (the artifact's
    /// `lookahead` and `prefetch_front`: 4).
    pub distance: u32,
    /// Table entries: IPs or pages tracked (the artifact's `num_streams`: 64).
    pub entries: u32,
    /// Stream only: the confidence at which it prefetches (the artifact's `conf_thresh`: 2).
    pub confidence: u32,
    /// Stream only: where its confidence saturates (the artifact's `max_conf`: 7).
    pub max_confidence: u32,
}

impl Default for PrefetcherConfig {
    fn default() -> Self {
        PrefetcherConfig { kind: PrefetcherKind::None, degree: 2, distance: 4, entries: 64, confidence: 2, max_confidence: 7 }
    }
}

/// The prefetchers of the private caches (`[mem.prefetch]`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrefetchConfig {
    /// Each core's L1D prefetcher (Utopia Table 1: IP-stride).
    pub l1d: PrefetcherConfig,
    /// Each core's L2 prefetcher (Utopia Table 1: stream).
    pub l2: PrefetcherConfig,
}

impl PrefetchConfig {
    /// Whether any cache has a prefetcher.
    pub fn any(&self) -> bool {
        self.l1d.kind != PrefetcherKind::None || self.l2.kind != PrefetcherKind::None
    }

    /// Checks both prefetchers; `key` is this table's path (`"mem.prefetch"`).
    pub fn validate(&self, key: &str) -> Result<()> {
        self.l1d.validate(&format!("{key}.l1d"))?;
        self.l2.validate(&format!("{key}.l2"))
    }
}

impl PrefetcherConfig {
    fn validate(&self, key: &str) -> Result<()> {
        if self.kind == PrefetcherKind::None {
            return Ok(());
        }
        let check = |name: &str, v: u32, lo: u32, hi: u32| {
            if v < lo || v > hi {
                return Err(Error::config(format!("{key}.{name}"), format!("must be {lo}..={hi} (got {v})")));
            }
            Ok(())
        };
        check("degree", self.degree, 1, LINES_PER_PAGE as u32)?;
        check("distance", self.distance, 0, LINES_PER_PAGE as u32 - 1)?;
        check("entries", self.entries, 1, 4096)?;
        if self.kind == PrefetcherKind::Stream {
            check("max_confidence", self.max_confidence, 1, 255)?;
            check("confidence", self.confidence, 0, self.max_confidence)?;
        }
        Ok(())
    }
}

/// Cache lines in a 4 KiB page: a prefetch stays in the page of the line that triggered it.
const LINES_PER_PAGE: u64 = 64;

/// Reference-prediction states of an IP-stride entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Initial,
    Transient,
    Steady,
    NoPrediction,
}

/// One table entry: an IP (IP-stride) or a page (stream).
#[derive(Clone, Copy, Debug)]
struct Entry {
    key: u64,
    /// Line offset in its 4 KiB page last touched.
    offset: i32,
    /// IP-stride: the last stride in lines; stream: the last direction (−1, 0, +1).
    step: i32,
    state: State,
    confidence: u32,
    /// LRU stamp: the table's clock when last touched (distinct for every entry touched).
    stamp: u64,
}

/// One cache's prefetcher and its table.
#[derive(Clone, Debug)]
pub struct Prefetcher {
    cfg: PrefetcherConfig,
    table: Vec<Entry>,
    clock: u64,
}

impl Prefetcher {
    /// An empty table; `None` for [`PrefetcherKind::None`]. `cfg` must have been validated.
    pub fn new(cfg: &PrefetcherConfig) -> Option<Prefetcher> {
        (cfg.kind != PrefetcherKind::None).then(|| Prefetcher {
            cfg: cfg.clone(),
            table: Vec::with_capacity(cfg.entries as usize),
            clock: 0,
        })
    }

    /// The index of `key`'s entry and whether it was there: if absent and `allocate`, the least
    /// recently used entry (or a free one), reset to `offset` and touched; `None` and no change
    /// otherwise. A found entry is not touched: the caller touches it ([`Prefetcher::touch`])
    /// when it changes it, as the artifact ages its table only then.
    fn entry(&mut self, key: u64, offset: i32, allocate: bool) -> Option<(usize, bool)> {
        if let Some(i) = self.table.iter().position(|e| e.key == key) {
            return Some((i, true));
        }
        if !allocate {
            return None;
        }
        let fresh = Entry { key, offset, step: 0, state: State::Initial, confidence: 0, stamp: 0 };
        let i = if self.table.len() < self.cfg.entries as usize {
            self.table.push(fresh);
            self.table.len() - 1
        } else {
            let (i, _) = self.table.iter().enumerate().min_by_key(|(_, e)| e.stamp).expect("a full table has entries");
            self.table[i] = fresh;
            i
        };
        self.touch(i);
        Some((i, false))
    }

    /// Makes entry `i` the most recently used.
    fn touch(&mut self, i: usize) {
        self.clock += 1;
        self.table[i].stamp = self.clock;
    }

    /// Trains on a load of `line` (`paddr >> 6`) by instruction `ip` that hit (`hit`) or missed in
    /// this prefetcher's cache, and calls `issue` with each line to prefetch.
    pub fn train(&mut self, ip: u64, line: u64, hit: bool, mut issue: impl FnMut(u64)) {
        let page = line / LINES_PER_PAGE;
        let offset = (line % LINES_PER_PAGE) as i32;
        let (degree, distance) = (self.cfg.degree as i32, self.cfg.distance as i32);
        let (step, prefetch) = match self.cfg.kind {
            PrefetcherKind::None => return,
            PrefetcherKind::IpStride => {
                let Some((i, true)) = self.entry(ip, offset, true) else { return };
                let stride = offset - self.table[i].offset;
                if stride == 0 {
                    return;
                }
                self.touch(i);
                let e = &mut self.table[i];
                e.state = match (stride == e.step, e.state) {
                    (true, State::NoPrediction) => State::Transient,
                    (true, _) => State::Steady,
                    (false, State::Initial) => State::Transient,
                    (false, State::Steady) => State::Initial,
                    (false, _) => State::NoPrediction,
                };
                (e.offset, e.step) = (offset, stride);
                (stride, e.state == State::Steady)
            }
            PrefetcherKind::Stream => {
                let (thresh, max) = (self.cfg.confidence, self.cfg.max_confidence);
                let Some((i, true)) = self.entry(page, offset, !hit) else { return };
                if offset == self.table[i].offset {
                    return;
                }
                self.touch(i);
                let e = &mut self.table[i];
                let dir = if offset > e.offset { 1 } else { -1 };
                e.confidence = if dir == e.step { (e.confidence + 1).min(max) } else { e.confidence.saturating_sub(1) };
                (e.offset, e.step) = (offset, dir);
                (dir, e.confidence >= thresh)
            }
        };
        if !prefetch {
            return;
        }
        for i in 1..=degree {
            let target = offset + (distance + i) * step;
            if (0..LINES_PER_PAGE as i32).contains(&target) {
                issue(page * LINES_PER_PAGE + target as u64);
            }
        }
    }
}

/// Counters of one level's prefetches, summed over cores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PrefetchLevelStats {
    /// Lines the prefetcher asked for.
    pub generated: u64,
    /// Of those, lines already in its cache (nothing done).
    pub redundant: u64,
    /// Lines fetched into its cache (and the levels below it that lacked them).
    pub issued: u64,
    /// Of the issued, lines that came from DRAM.
    pub from_dram: u64,
    /// Demand hits on a line a prefetch brought into this cache, the first hit of each.
    pub useful: u64,
}

/// Prefetch counters of the hierarchy (`mem.prefetch` in the results; only when a prefetcher is
/// configured).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PrefetchStats {
    /// The L1D prefetchers'.
    pub l1d: PrefetchLevelStats,
    /// The L2 prefetchers'.
    pub l2: PrefetchLevelStats,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pf(kind: PrefetcherKind) -> Prefetcher {
        Prefetcher::new(&PrefetcherConfig { kind, ..PrefetcherConfig::default() }).unwrap()
    }

    fn train(p: &mut Prefetcher, ip: u64, line: u64, hit: bool) -> Vec<u64> {
        let mut v = Vec::new();
        p.train(ip, line, hit, |l| v.push(l));
        v
    }

    /// An IP with a constant stride prefetches from its third access on (allocate, then a first
    /// stride: transient, then the same stride again: steady), 5 and 6 strides ahead, in the page.
    #[test]
    fn ip_stride_prefetches_once_a_stride_repeats() {
        let mut p = pf(PrefetcherKind::IpStride);
        let base = 100 * LINES_PER_PAGE;
        assert!(train(&mut p, 7, base, false).is_empty());
        assert!(train(&mut p, 7, base + 2, false).is_empty());
        assert_eq!(train(&mut p, 7, base + 4, false), vec![base + 14, base + 16]);
        // A re-access of the same line changes nothing; another IP has its own entry.
        assert!(train(&mut p, 7, base + 4, true).is_empty());
        assert!(train(&mut p, 8, base + 5, false).is_empty());
        assert_eq!(train(&mut p, 7, base + 6, true), vec![base + 16, base + 18]);
        // Near the page's end only the targets inside it are issued.
        let mut q = pf(PrefetcherKind::IpStride);
        for off in [40, 44, 48] {
            train(&mut q, 1, base + off, false);
        }
        assert!(train(&mut q, 1, base + 52, false).is_empty());
        // A broken stride leaves steady state, and a repeat of the new one gets it back.
        let mut r = pf(PrefetcherKind::IpStride);
        for off in [0, 1, 2] {
            train(&mut r, 1, base + off, false);
        }
        assert!(train(&mut r, 1, base + 10, false).is_empty(), "steady → initial");
        assert_eq!(train(&mut r, 1, base + 18, false), vec![base + 58], "initial, same stride → steady; 66 is past the page");
    }

    /// Backward strides prefetch backwards; a full table replaces its least recently used IP.
    #[test]
    fn ip_stride_goes_backwards_and_replaces_the_lru_ip() {
        let cfg = PrefetcherConfig { kind: PrefetcherKind::IpStride, entries: 2, ..PrefetcherConfig::default() };
        let mut p = Prefetcher::new(&cfg).unwrap();
        let base = 7 * LINES_PER_PAGE;
        for off in [60, 59, 58] {
            train(&mut p, 1, base + off, false);
        }
        assert_eq!(train(&mut p, 1, base + 57, false), vec![base + 52, base + 51]);
        train(&mut p, 2, base, false);
        train(&mut p, 3, base, false); // evicts IP 1, the least recently used
        assert!(train(&mut p, 1, base + 56, false).is_empty(), "IP 1 starts over");
    }

    /// A page's stream prefetches once its confidence reaches 2: the first move sets the
    /// direction, each further move the same way adds one; a page enters the table on a miss only.
    #[test]
    fn stream_prefetches_after_two_moves_the_same_way() {
        let mut p = pf(PrefetcherKind::Stream);
        let base = 3 * LINES_PER_PAGE;
        assert!(train(&mut p, 0, base + 10, true).is_empty(), "a hit does not allocate");
        assert!(train(&mut p, 0, base + 11, true).is_empty());
        assert!(train(&mut p, 0, base + 10, false).is_empty(), "allocated at 10");
        assert!(train(&mut p, 0, base + 11, true).is_empty(), "direction set, confidence 0");
        assert!(train(&mut p, 0, base + 12, true).is_empty(), "confidence 1");
        assert_eq!(train(&mut p, 0, base + 13, true), vec![base + 18, base + 19], "confidence 2");
        assert!(train(&mut p, 0, base + 12, true).is_empty(), "turned: confidence 1");
        assert_eq!(train(&mut p, 0, base + 11, true), vec![base + 6, base + 5], "backwards: confidence 2 again");
    }

    #[test]
    fn validation_names_the_key() {
        let bad = PrefetchConfig {
            l2: PrefetcherConfig { kind: PrefetcherKind::Stream, confidence: 9, ..PrefetcherConfig::default() },
            ..PrefetchConfig::default()
        };
        let e = bad.validate("mem.prefetch").unwrap_err().to_string();
        assert!(e.contains("mem.prefetch.l2.confidence") && e.contains("0..=7"), "{e}");
        let off = PrefetchConfig { l1d: PrefetcherConfig { degree: 0, ..PrefetcherConfig::default() }, ..PrefetchConfig::default() };
        assert!(off.validate("mem.prefetch").is_ok(), "a prefetcher that is off is not checked");
    }
}
