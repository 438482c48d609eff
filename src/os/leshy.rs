//! Leshy, Elastic Translations' translation-size selector (MICRO'24), as a pure function from
//! sampled L2-TLB misses to translation-size hints.
//!
//! Specification: `elastic-translations.md` §4 (4.1 sampling, 4.2 offline decision rule, 4.3
//! online variant, 4.4 the mixes it should produce) and §3 (how the hints are consumed: a work list
//! for the hint-driven khugepaged, plus fault-time placement). Nothing here touches the OS: the input
//! is a list of [`LeshySample`]s (data VA and walk latency of a sampled L2-TLB miss), the output a
//! sorted list of non-overlapping, size-aligned [`Hint`]s.
//!
//! The rule (§4.2): *use the fewest large translations such that all hinted translations fit in
//! the budget and still cover the target fraction of sampled misses; a region is promoted only if
//! more than one of its sub-regions missed (subentries > 1).* Concretely:
//!
//! 1. Misses are bucketed per 4K page and rolled up into aligned 64K, 2M and 32M regions, each with
//!    its misses, total latency and *subentries*: the number of distinct child regions (one size
//!    down: 4K pages for 64K, 64K regions for 2M, 2M regions for 32M) that missed. This follows the
//!    reference's "distinct child regions" wording; the artifact's code instead sums subentries down
//!    to 4K pages, which would let a 32M region whose misses all fall in one 2M region be promoted.
//!    Regions are ranked by (misses, latency, subentries) descending, then by address.
//! 2. Budget B = `tlb_entries × slack / 100`; target T = `total misses × target / 100000`.
//! 3. S* is the smallest size whose top-B regions cover T. S* = 4K means the TLB already holds the
//!    footprint: no hints. If no size covers T, S* is the largest size and B grows to the number of
//!    its regions needed to cover T (times the slack when the slack exceeds 100).
//! 4. Mix search: with n large regions (starting at the eligible ones in S*'s cover), the rest of the
//!    budget is filled by smaller sizes (`Search::fill`); n is lowered in steps of `MIX_STEP` (8)
//!    while the mix still covers T, then one by one, and the last mix that covered T is kept.
//!
//! Simplifications, each documented where it happens: the smaller-size fill looks for its fewest
//! entries by bisection (the reference recurses with steps of 8 and a level-skipping cutoff; an empty
//! level here is the skip); when the search finds no mix at all, the cover of S* is used with its
//! ineligible regions demoted to their only child; the online variant keeps a plain two-epoch window
//! (no decay, no skip list of already promoted regions, which the WIP Rust online version has).
//! 4K entries are counted against the budget (they occupy TLB entries) but never emitted as hints.

use crate::addr::PageSize;
use crate::error::{Error, Result};
use std::collections::{BTreeMap, VecDeque};
use std::io::{self, Write};
use std::path::Path;

/// The sizes Leshy chooses between, smallest first; a size's position is its *level*.
const LEVELS: [PageSize; 4] = [PageSize::K4, PageSize::K64, PageSize::M2, PageSize::M32];

/// How far the top-level mix search lowers the number of large regions per step before it refines
/// one by one (the reference recursion's step of 8).
const MIX_STEP: usize = 8;

/// The denominator of [`LeshyParams::target`]: 100000 = every sampled miss.
pub const TARGET_ALL: u32 = 100_000;

/// Epochs the online window merges (§4.3: each snapshot is merged with the previous one).
pub const WINDOW_EPOCHS: usize = 2;

/// One sampled L2-TLB miss (an SPE "TLB walk" sample, §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeshySample {
    /// Data virtual address of the access that walked.
    pub va: u64,
    /// Translation latency of the walk in cycles.
    pub latency: u32,
}

/// Leshy's knobs (§4.2, §4.3, §6.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeshyParams {
    /// L2-TLB entries Leshy budgets for: 1280, the `TLBSIZE` constant of etutils-rs (Neoverse N1).
    pub tlb_entries: u32,
    /// Percentage of `tlb_entries` the hints may use: 100 for offline hints, 70 online.
    pub slack: u32,
    /// Fraction of sampled misses to cover, per [`TARGET_ALL`]: 100000 = all misses (the
    /// artifact's setting, offline and online). Values above 100000 count as 100000.
    pub target: u32,
    /// Whether 32M translations may be chosen (false = the "no 32M" ablation).
    pub allow_32m: bool,
}

impl Default for LeshyParams {
    /// The offline setting used for the artifact's shipped hints: B = 1280, all misses, 32M allowed.
    fn default() -> Self {
        LeshyParams { tlb_entries: 1280, slack: 100, target: TARGET_ALL, allow_32m: true }
    }
}

impl LeshyParams {
    /// The online setting of `epochs.sh` (§4.3): slack 70, so B = 896 with 1280 entries.
    pub fn online() -> Self {
        LeshyParams { slack: 70, ..LeshyParams::default() }
    }

    /// The TLB budget B in entries.
    pub fn budget(&self) -> usize {
        (u64::from(self.tlb_entries) * u64::from(self.slack) / 100) as usize
    }

    /// The target T in misses for `total` sampled misses (floor, as the reference does).
    fn target_misses(&self, total: u64) -> u64 {
        let target = u64::from(self.target.min(TARGET_ALL));
        (u128::from(total) * u128::from(target) / u128::from(TARGET_ALL)) as u64
    }

    /// The largest level allowed.
    fn top_level(&self) -> usize {
        if self.allow_32m {
            3
        } else {
            2
        }
    }

    /// The budget when no size reaches the target within B: `needed` regions of the largest size,
    /// times the slack. A slack under 100 would shrink it below what is needed, so it counts as 100
    /// (the artifact does the same).
    fn enlarged_budget(&self, needed: usize) -> usize {
        (needed as u64 * u64::from(self.slack.max(100)) / 100) as usize
    }
}

/// A size hint: the aligned VA range `[start, end)` should be mapped with `size` translations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hint {
    /// First byte (aligned to `size`).
    pub start: u64,
    /// One past the last byte (`start + size.bytes()`).
    pub end: u64,
    /// The translation size.
    pub size: PageSize,
}

impl Hint {
    /// The hint covering the one `size` region that contains `va`.
    pub fn new(va: u64, size: PageSize) -> Hint {
        let start = size.align_down(va);
        Hint { start, end: start + size.bytes(), size }
    }

    /// Length in 4 KiB pages (the unit of the online promotion budget).
    pub fn pages(&self) -> u64 {
        (self.end - self.start) / PageSize::K4.bytes()
    }
}

/// One aligned region of one size and what was sampled inside it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Region {
    base: u64,
    misses: u64,
    latency: u64,
    subentries: u64,
}

impl Region {
    /// Rank key: more misses, then more latency, then more subentries first; the address breaks
    /// ties so the order never depends on input order.
    fn rank(&self) -> (std::cmp::Reverse<(u64, u64, u64)>, u64) {
        (std::cmp::Reverse((self.misses, self.latency, self.subentries)), self.base)
    }

    /// Whether the region may be hinted at `level`: 4K always (it is never emitted anyway), larger
    /// sizes only when more than one child missed, the guard against bloat.
    fn eligible(&self, level: usize) -> bool {
        level == 0 || self.subentries > 1
    }
}

/// The regions of every level, by address and by rank.
struct Buckets {
    by_base: Vec<BTreeMap<u64, Region>>,
    ranked: Vec<Vec<Region>>,
    /// `up[level][i]`: for the region of rank `i` at `level`, the rank of the region holding it
    /// at each level above, indexed by that level (entries up to `level` unused). The mix
    /// search asks "is this region inside a chosen one?" for every 4K page it passes, hundreds
    /// of times per decision; with ranks, that is a few array reads instead of a set search
    /// per level (docs/performance.md, "Leshy's offline decision").
    up: Vec<Vec<[u32; LEVELS.len()]>>,
}

impl Buckets {
    /// Buckets `samples` at levels `0..=top`.
    fn new(samples: &[LeshySample], top: usize) -> Buckets {
        let mut by_base = vec![base_pages(samples)];
        for level in 1..=top {
            let up = roll_up(&by_base[level - 1], LEVELS[level]);
            by_base.push(up);
        }
        let ranked: Vec<Vec<Region>> = by_base.iter().map(rank_order).collect();
        // From the top down: a region's ancestors are its parent and the parent's ancestors.
        let mut up: Vec<Vec<[u32; LEVELS.len()]>> = vec![Vec::new(); top + 1];
        up[top] = vec![[0; LEVELS.len()]; ranked[top].len()];
        for level in (0..top).rev() {
            let parent_rank: BTreeMap<u64, u32> = ranked[level + 1].iter().enumerate().map(|(i, r)| (r.base, i as u32)).collect();
            let size = LEVELS[level + 1];
            up[level] = ranked[level]
                .iter()
                .map(|r| {
                    let p = parent_rank[&size.align_down(r.base)];
                    let mut a = up[level + 1][p as usize];
                    a[level + 1] = p;
                    a
                })
                .collect();
        }
        Buckets { by_base, ranked, up }
    }

    fn total_misses(&self) -> u64 {
        self.by_base[0].values().map(|r| r.misses).sum()
    }
}

/// Misses and latency per 4K page.
fn base_pages(samples: &[LeshySample]) -> BTreeMap<u64, Region> {
    let mut pages = BTreeMap::new();
    for s in samples {
        let base = PageSize::K4.align_down(s.va);
        let r = pages.entry(base).or_insert(Region { base, subentries: 1, ..Region::default() });
        r.misses += 1;
        r.latency += u64::from(s.latency);
    }
    pages
}

/// The regions of `size` holding `children` (regions one size down); each child adds one subentry.
fn roll_up(children: &BTreeMap<u64, Region>, size: PageSize) -> BTreeMap<u64, Region> {
    let mut up = BTreeMap::new();
    for c in children.values() {
        let base = size.align_down(c.base);
        let r = up.entry(base).or_insert(Region { base, ..Region::default() });
        r.misses += c.misses;
        r.latency += c.latency;
        r.subentries += 1;
    }
    up
}

/// The regions best first.
fn rank_order(regions: &BTreeMap<u64, Region>) -> Vec<Region> {
    let mut v: Vec<Region> = regions.values().copied().collect();
    v.sort_by_key(Region::rank);
    v
}

/// How many of the top `regions` are taken before `budget` entries are used or `need` misses are
/// covered, and the misses they cover.
fn cover<'r>(regions: impl IntoIterator<Item = &'r Region>, budget: usize, need: u64) -> (usize, u64) {
    let (mut n, mut covered) = (0, 0);
    for r in regions {
        if n == budget || covered >= need {
            break;
        }
        n += 1;
        covered += r.misses;
    }
    (n, covered)
}

/// A candidate answer: the chosen regions with their levels.
#[derive(Clone, Debug, Default)]
struct Mix {
    picks: Vec<(usize, Region)>,
}

impl Mix {
    fn add(&mut self, level: usize, regions: impl IntoIterator<Item = Region>) {
        self.picks.extend(regions.into_iter().map(|r| (level, r)));
    }
}

/// The mix search over one set of buckets. Regions are named by their rank at their level;
/// `taken` marks, per level, the regions chosen so far, so smaller regions inside them are
/// skipped (hints never overlap).
struct Search<'a> {
    b: &'a Buckets,
    taken: Vec<Vec<bool>>,
}

impl<'a> Search<'a> {
    fn new(b: &'a Buckets) -> Search<'a> {
        Search { b, taken: b.ranked.iter().map(|r| vec![false; r.len()]).collect() }
    }

    /// Whether the region of rank `i` at `level` lies outside every region chosen at a larger
    /// level.
    #[inline]
    fn is_free(&self, level: usize, i: usize) -> bool {
        let up = &self.b.up[level][i];
        (level + 1..self.taken.len()).all(|l| !self.taken[l][up[l] as usize])
    }

    /// The ranks of the best `max` eligible regions at `level` that do not overlap a chosen
    /// region.
    fn candidates(&self, level: usize, max: usize) -> Vec<u32> {
        let ranked = self.b.ranked[level].iter().enumerate();
        let free = ranked.filter(|&(i, r)| r.eligible(level) && self.is_free(level, i));
        free.take(max).map(|(i, _)| i as u32).collect()
    }

    /// `picks` (ranks) at `level` plus the fill of the smaller sizes with the rest of `budget`,
    /// if together they cover `need` misses.
    fn with(&mut self, level: usize, picks: &[u32], budget: usize, need: u64) -> Option<Mix> {
        let regions = &self.b.ranked[level];
        let covered: u64 = picks.iter().map(|&i| regions[i as usize].misses).sum();
        for &i in picks {
            self.taken[level][i as usize] = true;
        }
        let rest = self.fill(level - 1, budget - picks.len(), need.saturating_sub(covered));
        for &i in picks {
            self.taken[level][i as usize] = false;
        }
        let mut mix = rest?;
        mix.add(level, picks.iter().map(|&i| regions[i as usize]));
        Some(mix)
    }

    /// Covers `need` misses with at most `budget` free regions of sizes up to `level`, using as few
    /// regions of `level` as possible (the net rule, applied again one size down).
    ///
    /// The fewest count is found by bisection between 0 and as many as fit, assuming that more
    /// large regions never hurt (each covers at least the misses of any of its children). That keeps
    /// the nested search at O(log B) trials per size where the reference's walk needs O(B / 8);
    /// a count of 0 skips the size, which is what the reference's "cutoff" achieves. The assumption
    /// can fail when an ineligible region's only child would serve better than an eligible region,
    /// and then the whole search may find nothing: `decide` falls back to `demoted_cover`.
    fn fill(&mut self, level: usize, budget: usize, need: u64) -> Option<Mix> {
        if need == 0 {
            return Some(Mix::default());
        }
        if level == 0 {
            return self.fill_base(budget, need);
        }
        let cands = self.candidates(level, budget);
        let mut best = self.with(level, &cands, budget, need)?;
        let (mut lo, mut hi) = (0, cands.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.with(level, &cands[..mid], budget, need) {
                Some(mix) => (best, hi) = (mix, mid),
                None => lo = mid + 1,
            }
        }
        Some(best)
    }

    /// The smallest size: the best free 4K pages, as many as the budget allows ([`cover`]'s
    /// rule over the free pages, in one pass that also collects them).
    fn fill_base(&self, budget: usize, need: u64) -> Option<Mix> {
        let mut mix = Mix::default();
        let mut covered = 0;
        for (i, r) in self.b.ranked[0].iter().enumerate() {
            if mix.picks.len() == budget || covered >= need {
                break;
            }
            if self.is_free(0, i) {
                mix.picks.push((0, *r));
                covered += r.misses;
            }
        }
        (covered >= need).then_some(mix)
    }

    /// The mix with the fewest regions of `level` (at most `n0`) that covers `need` within
    /// `budget`: lower n by [`MIX_STEP`] while it succeeds, then by one from the last success, and
    /// keep the last success. `None` when even `n0` fails.
    fn fewest_large(&mut self, level: usize, n0: usize, budget: usize, need: u64) -> Option<Mix> {
        let cands = self.candidates(level, n0);
        let mut best = self.with(level, &cands, budget, need)?;
        let mut good = cands.len();
        let mut bad = None;
        while good > 0 && bad.is_none() {
            let n = good.saturating_sub(MIX_STEP);
            match self.with(level, &cands[..n], budget, need) {
                Some(mix) => (best, good) = (mix, n),
                None => bad = Some(n),
            }
        }
        if let Some(bad) = bad {
            for n in (bad + 1..good).rev() {
                let Some(mix) = self.with(level, &cands[..n], budget, need) else { break };
                best = mix;
            }
        }
        Some(best)
    }
}

/// The cover of the top `n` regions of `level`, each ineligible region replaced by its chain of
/// only children down to the first eligible one (or its 4K page). Same entries, same misses, so it
/// always meets the target the cover met; the fallback when the mix search finds nothing.
fn demoted_cover(b: &Buckets, level: usize, n: usize) -> Mix {
    let mut mix = Mix::default();
    for &r in &b.ranked[level][..n] {
        let (mut l, mut r) = (level, r);
        while !r.eligible(l) {
            let end = r.base + LEVELS[l].bytes();
            let Some(&child) = b.by_base[l - 1].range(r.base..end).next().map(|(_, c)| c) else { break };
            (l, r) = (l - 1, child);
        }
        mix.add(l, [r]);
    }
    mix
}

/// Leshy's decision (§4.2): the hints for `samples` under `p`, with each hint's region statistics.
/// Sorted by start; 4K regions are left out.
fn choose(samples: &[LeshySample], p: &LeshyParams) -> Vec<(Hint, Region)> {
    let top = p.top_level();
    let b = Buckets::new(samples, top);
    let need = p.target_misses(b.total_misses());
    let budget = p.budget();
    let reaching = (0..=top).find(|&l| cover(&b.ranked[l], budget, need).1 >= need);
    let (level, budget, n) = match reaching {
        Some(l) => (l, budget, cover(&b.ranked[l], budget, need).0),
        None => {
            let needed = cover(&b.ranked[top], usize::MAX, need).0;
            (top, p.enlarged_budget(needed), needed)
        }
    };
    if level == 0 {
        return Vec::new();
    }
    let n0 = b.ranked[level][..n].iter().filter(|r| r.eligible(level)).count();
    let mix = Search::new(&b).fewest_large(level, n0, budget, need).unwrap_or_else(|| demoted_cover(&b, level, n));
    let mut out: Vec<(Hint, Region)> =
        mix.picks.into_iter().filter(|&(l, _)| l > 0).map(|(l, r)| (Hint::new(r.base, LEVELS[l]), r)).collect();
    out.sort_by_key(|(h, _)| h.start);
    out
}

/// Leshy's offline decision (§4.2): the fewest large translations such that all hinted
/// translations fit in `p`'s TLB budget and cover its target fraction of the sampled misses.
/// Returns non-overlapping, aligned hints of 64K, 2M or 32M sorted by start; empty when 4K pages
/// alone fit the budget.
pub fn decide(samples: &[LeshySample], p: &LeshyParams) -> Vec<Hint> {
    choose(samples, p).into_iter().map(|(h, _)| h).collect()
}

/// The online promotion budget of `epochs.sh` in 4 KiB pages: 2 × 3 × 2 × (pages khugepaged scans
/// per interval), i.e. 491 520 pages for 8192 pages per 1 s scan and a 5 s interval.
pub fn online_budget_pages(pages_to_scan: u64, interval_ms: u64, scan_sleep_ms: u64) -> u64 {
    12 * pages_to_scan * interval_ms / scan_sleep_ms.max(1)
}

/// The result of one online decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnlineHints {
    /// The hints, sorted by start.
    pub hints: Vec<Hint>,
    /// False when they equal the previous decision's (the caller then skips reloading, §4.3).
    pub changed: bool,
}

/// The online variant's state (§4.3): a window of the last [`WINDOW_EPOCHS`] epochs of samples
/// and the last hint set handed out.
#[derive(Clone, Debug, Default)]
pub struct Online {
    epochs: VecDeque<Vec<LeshySample>>,
    last: Vec<Hint>,
}

impl Online {
    /// An empty window; the first decision is compared against an empty hint set.
    pub fn new() -> Online {
        Online::default()
    }

    /// Adds one epoch's samples, forgetting the oldest epoch beyond the window.
    pub fn push_epoch(&mut self, samples: &[LeshySample]) {
        self.epochs.push_back(samples.to_vec());
        while self.epochs.len() > WINDOW_EPOCHS {
            self.epochs.pop_front();
        }
    }

    /// Decides on the merged window with `p` as given (use [`LeshyParams::online`] for the
    /// artifact's slack of 70), drops 4K hints, and keeps hints totalling at most `budget_pages`
    /// 4 KiB pages: in order of misses (then latency, then address), each hint that still fits is
    /// kept, so one large hint over the budget does not block smaller ones behind it.
    pub fn hints(&mut self, p: &LeshyParams, budget_pages: u64) -> OnlineHints {
        let window: Vec<LeshySample> = self.epochs.iter().flatten().copied().collect();
        let mut chosen = choose(&window, p);
        chosen.retain(|(h, _)| h.size != PageSize::K4);
        chosen.sort_by_key(|(h, r)| (r.rank(), h.start));
        let mut left = budget_pages;
        let mut hints = Vec::new();
        for (h, _) in chosen {
            if h.pages() <= left {
                left -= h.pages();
                hints.push(h);
            }
        }
        hints.sort();
        let changed = hints != self.last;
        self.last.clone_from(&hints);
        OnlineHints { hints, changed }
    }
}

/// What a hint line must look like, for error messages.
const LINE_SHAPE: &str = "`0xSTART-0xEND SIZE` (hexadecimal VA range aligned to SIZE, SIZE one of 4K, 64K, 2M, 32M)";

/// Writes `hints` one per line as `0xSTART-0xEND SIZE`, after a `#` header line.
pub fn write_hints<W: Write>(w: &mut W, hints: &[Hint]) -> io::Result<()> {
    writeln!(w, "# Leshy hints: 0xSTART-0xEND SIZE")?;
    for h in hints {
        writeln!(w, "{:#x}-{:#x} {}", h.start, h.end, h.size)?;
    }
    Ok(())
}

/// Reads a hint file (see [`parse_hints`]); errors name the file and, for bad content, the line.
pub fn read_hints(path: &Path) -> Result<Vec<Hint>> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(name.clone(), e))?;
    parse_hints(&text, &name)
}

/// Parses hint-file text from `origin` (a file name, for errors). One hint per line,
/// `0xSTART-0xEND SIZE` (the `0x` is optional; without SIZE the size is the range's length, as in
/// the artifact's `start-end` files); `#` starts a comment; blank lines are skipped. The hints must
/// not overlap. Returns them sorted by start; a bad line gives a config error keyed `origin:LINE`.
pub fn parse_hints(text: &str, origin: &str) -> Result<Vec<Hint>> {
    let mut hints: Vec<(Hint, usize)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let err = |msg: String| Error::config(format!("{origin}:{}", i + 1), format!("Leshy hint: {msg}"));
        let line = raw.split('#').next().unwrap_or("").trim();
        if !line.is_empty() {
            let hint = parse_line(line).map_err(|m| err(format!("{m}; expected {LINE_SHAPE}, got `{line}`")))?;
            hints.push((hint, i + 1));
        }
    }
    hints.sort();
    for w in hints.windows(2) {
        let ((a, a_line), (b, b_line)) = (w[0], w[1]);
        if b.start < a.end {
            let msg = format!("{:#x}-{:#x} overlaps the hint on line {a_line}", b.start, b.end);
            return Err(Error::config(format!("{origin}:{b_line}"), format!("Leshy hint: {msg}")));
        }
    }
    Ok(hints.into_iter().map(|(h, _)| h).collect())
}

/// One non-empty, comment-free line; the error says what is wrong with it.
fn parse_line(line: &str) -> std::result::Result<Hint, String> {
    let mut words = line.split_whitespace();
    let range = words.next().unwrap_or("");
    let size = words.next();
    if let Some(extra) = words.next() {
        return Err(format!("unexpected `{extra}` after the size"));
    }
    let (start, end) = range.split_once('-').ok_or_else(|| format!("`{range}` is not a `START-END` range"))?;
    let (start, end) = (parse_hex(start)?, parse_hex(end)?);
    let len = end.checked_sub(start).filter(|&l| l > 0).ok_or_else(|| format!("empty range {start:#x}-{end:#x}"))?;
    let size = match size {
        Some(s) => LEVELS.into_iter().find(|p| p.label().eq_ignore_ascii_case(s)).ok_or_else(|| format!("unknown size `{s}`"))?,
        None => LEVELS.into_iter().find(|p| p.bytes() == len).ok_or_else(|| format!("a range of {len:#x} bytes is no size"))?,
    };
    if len != size.bytes() {
        return Err(format!("range {start:#x}-{end:#x} is {len:#x} bytes, not {size}"));
    }
    if !size.is_aligned(start) {
        return Err(format!("start {start:#x} is not aligned to {size}"));
    }
    Ok(Hint { start, end, size })
}

fn parse_hex(s: &str) -> std::result::Result<u64, String> {
    let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
    u64::from_str_radix(digits, 16).map_err(|_| format!("`{s}` is not a hexadecimal address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const K64: u64 = 0x1_0000;
    const M2: u64 = 0x20_0000;
    const M32: u64 = 0x200_0000;

    /// `misses` samples on the 4K page at `va`, 100 cycles each.
    fn page(va: u64, misses: usize) -> Vec<LeshySample> {
        vec![LeshySample { va, latency: 100 }; misses]
    }

    /// One miss on each of the first `pages` 4K pages of the 64K region at `base`.
    fn region64(base: u64, pages: u64) -> Vec<LeshySample> {
        (0..pages).flat_map(|i| page(base + i * 0x1000, 1)).collect()
    }

    fn params(tlb_entries: u32) -> LeshyParams {
        LeshyParams { tlb_entries, ..LeshyParams::default() }
    }

    fn hint(start: u64, size: PageSize) -> Hint {
        Hint::new(start, size)
    }

    #[test]
    fn footprint_that_fits_in_4k_entries_gets_no_hints() {
        // 16 pages of one 64K region: 16 4K entries fit in B = 1280, so S* = 4K.
        assert!(decide(&region64(0x4000_0000, 16), &LeshyParams::default()).is_empty());
        assert!(decide(&[], &LeshyParams::default()).is_empty());
    }

    /// Eight 64K regions of one 2M region, two pages (one miss each) per 64K region: 16 misses.
    fn eight_64k() -> Vec<LeshySample> {
        (0..8).flat_map(|i| region64(0x4000_0000 + i * K64, 2)).collect()
    }

    #[test]
    fn smallest_covering_size_is_chosen() {
        let s = eight_64k();
        // B = 16: the 16 pages fit as 4K entries.
        assert!(decide(&s, &params(16)).is_empty());
        // B = 8: 4K covers 8 of 16; the eight 64K regions cover all. Fewer 64K fail: 7 × 2 + 1 page.
        let want: Vec<Hint> = (0..8).map(|i| hint(0x4000_0000 + i * K64, PageSize::K64)).collect();
        assert_eq!(decide(&s, &params(8)), want);
        // B = 4: 64K covers 8 of 16; the one 2M region covers all.
        assert_eq!(decide(&s, &params(4)), vec![hint(0x4000_0000, PageSize::M2)]);
    }

    #[test]
    fn mix_uses_the_fewest_large_entries() {
        // R1: four 64K regions × 2 pages (8 misses); R2: two 64K regions b1, b2 × 2 pages (4).
        // B = 4: 4K and 64K cover 4 and 8 of 12, 2M covers all with 2 entries, so S* = 2M, n0 = 2.
        // n = 0 fails (four 64K = 8); n = 1 works: R1 + b1 (64K) + b2's two pages (4K) = 4 entries,
        // and one 64K is the fewest (R1 + three 4K pages cover only 11).
        let (r1, r2) = (0x4000_0000, 0x4020_0000);
        let mut s: Vec<LeshySample> = (0..4).flat_map(|i| region64(r1 + i * K64, 2)).collect();
        s.extend(region64(r2, 2));
        s.extend(region64(r2 + K64, 2));
        let want = vec![hint(r1, PageSize::M2), hint(r2, PageSize::K64)];
        assert_eq!(decide(&s, &params(4)), want);
        // Input order does not matter.
        s.reverse();
        assert_eq!(decide(&s, &params(4)), want);
    }

    /// X (32M) holds one 2M region C with two 64K regions of 2 pages; Y (32M) holds two 2M regions,
    /// each with one 64K region (e1, e2) of 2 pages. 8 misses.
    fn one_child_32m() -> (u64, u64, Vec<LeshySample>) {
        let (x, y) = (0x1_0000_0000, 0x1_0200_0000);
        let mut s = region64(x, 2);
        s.extend(region64(x + K64, 2));
        s.extend(region64(y, 2));
        s.extend(region64(y + M2, 2));
        (x, y, s)
    }

    #[test]
    fn region_with_one_missing_child_is_not_promoted() {
        // B = 2: 64K covers 4, 2M covers 6 (C, d1), 32M covers 8 (Y, X) of 8, so S* = 32M. X has
        // one 2M child, so only Y is eligible (n0 = 1); X's misses go to C as a 2M hint.
        let (x, y, s) = one_child_32m();
        assert_eq!(decide(&s, &params(2)), vec![hint(x, PageSize::M2), hint(y, PageSize::M32)]);
    }

    /// Three 32M regions, each with two 2M regions holding one missing page each: 6 misses.
    fn three_32m() -> (u64, Vec<LeshySample>) {
        let z = 0x2_0000_0000;
        let s = (0..3).flat_map(|k| [page(z + k * M32, 1), page(z + k * M32 + M2, 1)]).flatten().collect();
        (z, s)
    }

    #[test]
    fn unreachable_target_uses_32m_with_enlarged_budget() {
        let (z, s) = three_32m();
        // B = 1 reaches 2 misses at best: 32M with B = 3 needed × 100 / 100, and no mix with fewer
        // 32M entries fits (two 32M + one page = 5 misses).
        let all: Vec<Hint> = (0..3).map(|k| hint(z + k * M32, PageSize::M32)).collect();
        assert_eq!(decide(&s, &params(1)), all);
        // Slack 150: B = 3 × 150 / 100 = 4, so two 32M entries + the third region's two pages fit.
        let p = LeshyParams { slack: 150, ..params(1) };
        assert_eq!(decide(&s, &p), all[..2].to_vec());
    }

    #[test]
    fn no_32m_ablation_never_emits_32m() {
        let (x, y, s) = one_child_32m();
        let p = LeshyParams { allow_32m: false, ..params(2) };
        // No size up to 2M covers 8 with 2 entries: 2M with B = 3 (C, d1, d2). C is the only
        // eligible 2M region; d1 and d2 (one child each) become their 64K regions e1, e2.
        let want = vec![hint(x, PageSize::M2), hint(y, PageSize::K64), hint(y + M2, PageSize::K64)];
        assert_eq!(decide(&s, &p), want);
        let (_, s) = three_32m();
        assert!(decide(&s, &LeshyParams { allow_32m: false, ..params(1) }).iter().all(|h| h.size != PageSize::M32));
    }

    #[test]
    fn mix_falls_back_to_the_demoted_cover() {
        // R1: two 64K regions with one page of 5 misses each; R2: one 64K region with one page of
        // 8 misses; R3: one 64K region with two pages of 1 miss. Target 90%: T = 18 of 20, B = 2.
        // S* = 2M (R1 + R2 = 18), n0 = 1. The 64K fill can only pick R3's region (R2's has one
        // page), which fails, so the cover is used with R2 demoted to its 4K page (not emitted).
        let (r1, r2, r3) = (0x4000_0000, 0x4020_0000, 0x4040_0000);
        let mut s = page(r1, 5);
        s.extend(page(r1 + K64, 5));
        s.extend(page(r2, 8));
        s.extend(region64(r3, 2));
        let p = LeshyParams { target: 90_000, ..params(2) };
        assert_eq!(decide(&s, &p), vec![hint(r1, PageSize::M2)]);
    }

    /// Epoch `k`: three 64K regions (one page each, `misses` per page) of the 2M region at 32M × k.
    fn epoch(k: u64, misses: usize) -> (u64, Vec<LeshySample>) {
        let base = 0x8000_0000 + k * M32;
        (base, (0..3).flat_map(|j| page(base + j * K64, misses)).collect())
    }

    #[test]
    fn online_window_merges_two_epochs_and_respects_the_page_budget() {
        let p = LeshyParams { tlb_entries: 4, ..LeshyParams::online() }; // B = 2
        let mut o = Online::new();
        assert_eq!(o.hints(&p, 1 << 20), OnlineHints { hints: vec![], changed: false });
        let ((r1, e1), (r2, e2), (r3, e3)) = (epoch(1, 1), epoch(2, 2), epoch(3, 1));
        o.push_epoch(&e1);
        o.push_epoch(&e2);
        let both = vec![hint(r1, PageSize::M2), hint(r2, PageSize::M2)];
        assert_eq!(o.hints(&p, 1024), OnlineHints { hints: both.clone(), changed: true });
        assert_eq!(o.hints(&p, 1024), OnlineHints { hints: both, changed: false });
        // 512 pages hold one 2M hint: R2's, which has more misses.
        assert_eq!(o.hints(&p, 512), OnlineHints { hints: vec![hint(r2, PageSize::M2)], changed: true });
        assert!(o.hints(&p, 511).hints.is_empty());
        // A third epoch pushes the first out of the window.
        o.push_epoch(&e3);
        let newer = vec![hint(r2, PageSize::M2), hint(r3, PageSize::M2)];
        assert_eq!(o.hints(&p, 1024), OnlineHints { hints: newer, changed: true });
        assert_eq!(online_budget_pages(8192, 5000, 1000), 491_520);
    }

    /// Hints of a pseudo-random sample set: sorted, aligned, non-overlapping, within the budget.
    fn check_invariants(n: usize, span: u64, p: &LeshyParams) -> Vec<Hint> {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let s: Vec<LeshySample> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Squaring skews the addresses towards the start, so some regions are hot.
                let f = (x % 1024) * (x % 1024) / 1024;
                LeshySample { va: 0x10_0000_0000 + f * (span / 1024) + (x >> 40) % (span / 1024), latency: (x % 300) as u32 }
            })
            .collect();
        let hints = decide(&s, p);
        for w in hints.windows(2) {
            assert!(w[0].end <= w[1].start, "{w:?}");
        }
        assert!(hints.iter().all(|h| h.size.is_aligned(h.start) && h.end - h.start == h.size.bytes()));
        assert!(hints.iter().all(|h| h.size != PageSize::K4 && (p.allow_32m || h.size != PageSize::M32)));
        hints
    }

    #[test]
    fn random_samples_give_well_formed_hints() {
        for (n, span, tlb) in [(2000, 1 << 24, 64), (2000, 1 << 30, 64), (5000, 1 << 33, 256)] {
            let p = params(tlb);
            assert!(check_invariants(n, span, &p).len() <= p.budget().max(span as usize >> 25));
            check_invariants(n, span, &LeshyParams { allow_32m: false, ..p });
        }
    }

    #[test]
    fn hint_file_round_trip() {
        let hints = vec![hint(0x40_0000, PageSize::K64), hint(0x7f00_0000_0000, PageSize::M32), hint(0x7f00_0020_0000 + M32, PageSize::M2)];
        let mut buf = Vec::new();
        write_hints(&mut buf, &hints).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains("0x7f0000000000-0x7f0002000000 32M\n"), "{text}");
        let path = std::env::temp_dir().join(format!("xlate-leshy-{}.hints", std::process::id()));
        std::fs::write(&path, &text).unwrap();
        let back = read_hints(&path);
        let _ = std::fs::remove_file(&path);
        assert_eq!(back.unwrap(), hints);
        // The artifact's size-less lines, comments and blank lines.
        let art = "# from the artifact\n\n0x200000-0x400000\n10000-20000 # 64K\n";
        assert_eq!(parse_hints(art, "a").unwrap(), vec![hint(0x10000, PageSize::K64), hint(0x20_0000, PageSize::M2)]);
    }

    #[test]
    fn malformed_hint_lines_name_file_and_line() {
        let path = std::env::temp_dir().join(format!("xlate-leshy-bad-{}.hints", std::process::id()));
        std::fs::write(&path, "# ok\n0x0-0x10000 64K\n0x10000-0x20000 3M\n").unwrap();
        let err = read_hints(&path).unwrap_err().to_string();
        let _ = std::fs::remove_file(&path);
        assert!(err.contains(&format!("{}:3", path.display())), "{err}");
        assert!(err.contains("unknown size `3M`") && err.contains("expected"), "{err}");
        for (text, what) in [
            ("0x10000 64K", "not a `START-END` range"),
            ("0xg-0x10000 64K", "not a hexadecimal address"),
            ("0x10000-0x10000 64K", "empty range"),
            ("0x0-0x20000 64K", "not 64K"),
            ("0x1000-0x11000 64K", "not aligned to 64K"),
            ("0x0-0x3000", "is no size"),
            ("0x0-0x10000 64K extra", "unexpected `extra`"),
            ("0x0-0x200000 2M\n0x10000-0x20000 64K", "overlaps the hint on line 1"),
            ("0x0-0x40000000 1G", "unknown size `1G`"),
        ] {
            let err = parse_hints(text, "h.txt").unwrap_err().to_string();
            assert!(err.contains("h.txt:") && err.contains(what), "{text}: {err}");
        }
        assert!(matches!(read_hints(Path::new("/nonexistent/leshy.hints")), Err(Error::Io { .. })));
    }

    /// The ranks a region keeps of the regions holding it name exactly those regions (the
    /// aligned region of each larger size), so "inside a chosen region" read from flags by rank
    /// is "inside a chosen region" by address. Random clustered samples, every level.
    #[test]
    fn ranks_name_the_regions_that_hold_each_region() {
        let mut rng = crate::rng::Rng::new(7);
        for _ in 0..50 {
            let mut samples = Vec::new();
            for _ in 0..1 + rng.below(12) {
                // A cluster: a 32M-aligned area, a spread of 4K to 32M, some misses in it.
                let base = rng.below(64) << 25;
                let spread = 1u64 << (12 + rng.below(14));
                for _ in 0..1 + rng.below(200) {
                    samples.push(LeshySample { va: base + rng.below(spread), latency: 50 + rng.below(200) as u32 });
                }
            }
            let b = Buckets::new(&samples, 3);
            for level in 0..=3 {
                assert_eq!(b.up[level].len(), b.ranked[level].len());
                for (r, up) in b.ranked[level].iter().zip(&b.up[level]) {
                    for l in level + 1..=3 {
                        assert_eq!(b.ranked[l][up[l] as usize].base, LEVELS[l].align_down(r.base), "level {level} region {:#x}", r.base);
                    }
                }
            }
        }
    }
}
