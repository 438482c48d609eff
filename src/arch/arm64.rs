//! ARMv8-A stage-1 translation with a 4 KiB granule: a 4-level (48-bit VA) radix table with block
//! entries at 2 MiB and 1 GiB, and the contiguous bit at two levels — 16 PTEs make one 64 KiB
//! translation, 16 PMD blocks one 32 MiB translation (reference elastic-translations.md §1.1).
//!
//! The table is the radix driver's (composed, not copied: [`Radix`] with 4 levels): the same
//! real table pages and the same walk, so a walk for a contiguous group reads exactly what a walk
//! for one of its members reads — the contiguous bit changes reach, not depth (§1.5). Entries use
//! the radix entry format; the two arm64 bits the model needs sit where arm64 has them or in
//! software bits: [`CONT`] is bit 52 (arm64's Contiguous bit), [`FOLIO`] a software bit (Linux
//! keeps such facts in software PTE bits or the VMA).
//!
//! # The contiguous bit
//! Rules of §1.2, kept as invariants: a group is the 16 entries at indices `[16k, 16k + 15]` of one
//! table, all present leaves of the same level, mapping `anchor + i × size` with `anchor` aligned to
//! 16 × size, with identical attributes ignoring AF/dirty, and either all carry CONT or none. In
//! checked mode every walk that returns a contiguous translation re-checks its group; a violation
//! is an error (the architecture's outcome would be CONSTRAINED UNPREDICTABLE, §1.2 item 7).
//!
//! Who sets the bit ([`ContMode`]):
//! - `none`: nobody (Linux 5.18 on user memory: the THP and 4 KiB baselines).
//! - `folio`: only for translations the OS installs as one 64 KiB or 32 MiB object — an mTHP folio
//!   or a HugeTLB page (upstream contpte, §1.4: CONT only for whole-folio groups).
//! - `et`: Elastic Translations' transparent management (§1.3): every 4 KiB or 2 MiB entry update
//!   checks whether its group became eligible and sets CONT on all 16; any change to a member other
//!   than AF/dirty breaks the group. Whole-object installs are contiguous too.
//!
//! Breaking a group is break-before-make (§1.2 item 6): the 16 entries are zeroed, the group's
//! range is invalidated in the TLBs (reported through [`Tdb::take_stale_translations`], so the OS
//! counts a shootdown), and the entries are rewritten without CONT. Creating a group does not
//! flush (ET's `flush_full=0` default); `arch.arm64.flush_on_create` gives upstream's
//! clear-flush-rewrite instead.
//!
//! Simplified (docs/elastic-translations.md): the walk caches are split per-level caches like
//! x86's PWCs; Neoverse N1 keeps walk intermediates in its L2 TLB, sharing its capacity.

use super::radix::{PwcLevel, Radix, RadixConfig, RadixPwc, RadixSpace};
use super::x86pte::{decode, default_pwcs, encode, entry_shift, level_size, validate_pwcs, ADDR_MASK, HUGE, NX, PRESENT, WRITE};
use super::{ArchConfig, Design, Registered};
use crate::addr::PageSize;
use crate::error::{Error, Result};
use crate::tapi::{Driver, TObj, Tdb, TdbEnv, Translation, WalkPlan};

/// arm64's Contiguous bit (bit 52 of a stage-1 block or page descriptor).
pub const CONT: u64 = 1 << 52;
/// Software bit: the group was installed as one 64 KiB / 32 MiB object (an mTHP folio or a
/// HugeTLB page), so the OS sees one translation of that size, not 16.
pub const FOLIO: u64 = 1 << 55;
/// Entries in a contiguous group at either level (CONFIG_ARM64_CONT_{PTE,PMD}_SHIFT = 4, §1.1).
pub const GROUP: usize = 16;
/// Bits that must be identical across a group (§1.2 item 3: protections and attributes; AF,
/// dirty, CONT and software bits are ignored).
const ATTRS: u64 = WRITE | NX;

/// Who sets the contiguous bit (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContMode {
    /// Never.
    None,
    /// Whole 64 KiB / 32 MiB objects only (upstream contpte with mTHP; HugeTLB).
    Folio,
    /// Transparent management of every update (Elastic Translations).
    Et,
}

/// arm64 driver configuration (`arch.arm64`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Arm64Config {
    /// Who sets the contiguous bit.
    pub cont: ContMode,
    /// Creating a group flushes its range first (upstream contpte) instead of setting CONT in
    /// place (ET's `flush_full=0`, the artifact's setting).
    pub flush_on_create: bool,
    /// Walk caches for table entries, by level as x86's PWCs (4 = L0, 3 = L1, 2 = L2 table
    /// descriptors). Default: Utopia Table 1's, the machine the other designs use; the `altra`
    /// preset sets Neoverse N1's.
    pub pwc: Vec<PwcLevel>,
}

impl Default for Arm64Config {
    fn default() -> Self {
        Arm64Config { cont: ContMode::None, flush_on_create: false, pwc: default_pwcs() }
    }
}

/// The level whose entries map `size` directly (1 = page, 2 = PMD block, 3 = PUD block), and
/// whether `size` is a contiguous group of such entries.
fn level_of(size: PageSize) -> Option<(u8, bool)> {
    match size {
        PageSize::K4 => Some((1, false)),
        PageSize::K64 => Some((1, true)),
        PageSize::M2 => Some((2, false)),
        PageSize::M32 => Some((2, true)),
        PageSize::G1 => Some((3, false)),
    }
}

/// Size of one entry at `level` (1 or 2) and of a contiguous group of them.
fn sizes_at(level: u8) -> (PageSize, PageSize) {
    if level == 1 {
        (PageSize::K4, PageSize::K64)
    } else {
        (PageSize::M2, PageSize::M32)
    }
}

/// Contiguous-bit events (reported in the driver's metrics).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ContStats {
    /// Groups formed at 64 KiB / 32 MiB (transparently or as whole objects).
    pub formed_64k: u64,
    /// 32 MiB groups formed.
    pub formed_32m: u64,
    /// Groups broken (break-before-make) at 64 KiB.
    pub broken_64k: u64,
    /// 32 MiB groups broken.
    pub broken_32m: u64,
    /// Eligibility checks made by transparent management.
    pub checks: u64,
    /// Entries read by those checks.
    pub check_reads: u64,
}

/// The arm64 driver.
pub struct Arm64 {
    table: Radix,
    cfg: Arm64Config,
    stats: ContStats,
    /// Present leaf entries per level (index 1 = pages, 2 = PMD blocks, 3 = PUD blocks).
    leaves: [u64; 4],
    /// Contiguous groups present per level (1 = 64 KiB, 2 = 32 MiB).
    groups: [u64; 3],
    /// Ranges whose TLB entries a group change made stale, for the OS to shoot down.
    stale: Vec<(u64, u64)>,
}

const SIZES: [PageSize; 5] = [PageSize::K4, PageSize::K64, PageSize::M2, PageSize::M32, PageSize::G1];
const SIZES_NO_CONT: [PageSize; 3] = [PageSize::K4, PageSize::M2, PageSize::G1];

impl Arm64 {
    /// A driver as `cfg` configures it.
    pub fn new(cfg: &Arm64Config) -> Arm64 {
        let table = Radix::new(&RadixConfig { levels: 4, pwc: cfg.pwc.clone(), ..RadixConfig::default() });
        Arm64 { table, cfg: cfg.clone(), stats: ContStats::default(), leaves: [0; 4], groups: [0; 3], stale: Vec::new() }
    }

    /// Contiguous-bit counters.
    pub fn cont_stats(&self) -> &ContStats {
        &self.stats
    }

    /// Translations present now, by size (4K, 64K, 2M, 32M, 1G): a contiguous group is one
    /// translation (the artifact's Fig. 9 counts).
    pub fn translations(&self) -> [u64; PageSize::COUNT] {
        let g = GROUP as u64;
        [self.leaves[1] - g * self.groups[1], self.groups[1], self.leaves[2] - g * self.groups[2], self.groups[2], self.leaves[3]]
    }

    /// The table at `level` for `va` and the index of `va`'s entry in it (not a counted read:
    /// bookkeeping and checks the model makes, not work the kernel does).
    fn slot(&self, s: &RadixSpace, va: u64, level: u8) -> Option<(u32, usize)> {
        let id = self.table.table_at(s, va, level)?;
        Some((id, ((va >> entry_shift(level)) & 511) as usize))
    }

    /// The leaf entry of `level` at `va`, if one is there (uncounted).
    fn leaf(&self, s: &RadixSpace, va: u64, level: u8) -> Option<u64> {
        let (id, i) = self.slot(s, va, level)?;
        let e = self.table.entries(s, id)[i];
        (e & PRESENT != 0 && (level == 1 || e & HUGE != 0)).then_some(e)
    }

    /// Whether the 16 entries starting at `first` form a valid contiguous group of leaves at
    /// `level` (§1.2 items 1–4; item 5 is checked apart). Counts the entries it reads.
    fn eligible(entries: &[u64; 512], first: usize, level: u8, reads: &mut u64) -> bool {
        let (one, group) = sizes_at(level);
        let e0 = entries[first];
        let anchor = e0 & ADDR_MASK;
        if anchor & group.offset_mask() != 0 {
            *reads += 1;
            return false;
        }
        for (k, &e) in entries[first..first + GROUP].iter().enumerate() {
            *reads += 1;
            let leaf = e & PRESENT != 0 && (level == 1 || e & HUGE != 0);
            if !leaf || e & ADDR_MASK != anchor + k as u64 * one.bytes() || (e ^ e0) & ATTRS != 0 {
                return false;
            }
        }
        true
    }

    /// Checked mode: the group of the contiguous leaf mapping `va` at `level` obeys every rule
    /// (§1.2 items 1–5).
    fn group_is_valid(&self, s: &RadixSpace, va: u64, level: u8) -> bool {
        let Some((id, i)) = self.slot(s, va, level) else { return false };
        let first = i & !(GROUP - 1);
        let entries = self.table.entries(s, id);
        let mut reads = 0;
        Self::eligible(entries, first, level, &mut reads) && entries[first..first + GROUP].iter().all(|e| e & CONT != 0)
    }

    /// ET's check after an update at `va` (§1.3): if the group is now eligible, set CONT on all 16.
    fn try_form(&mut self, s: &mut RadixSpace, va: u64, level: u8, env: &mut TdbEnv) {
        let Some((id, i)) = self.slot(s, va, level) else { return };
        let first = i & !(GROUP - 1);
        self.stats.checks += 1;
        let mut reads = 0;
        let entries = self.table.entries(s, id);
        let ok = entries[first] & CONT == 0 && Self::eligible(entries, first, level, &mut reads);
        self.stats.check_reads += reads;
        env.cost.read(reads);
        if ok {
            self.set_group(s, va, level, CONT, env);
        }
    }

    /// Marks the 16 entries of `va`'s group at `level` with `bits` (CONT, plus FOLIO for whole
    /// objects).
    fn set_group(&mut self, s: &mut RadixSpace, va: u64, level: u8, bits: u64, env: &mut TdbEnv) {
        let (id, i) = self.slot(s, va, level).expect("the group's table exists");
        let first = i & !(GROUP - 1);
        for e in &mut self.table.entries_mut(s, id)[first..first + GROUP] {
            *e |= bits;
        }
        env.cost.write(GROUP as u64);
        self.groups[level as usize] += 1;
        let (_, group) = sizes_at(level);
        if level == 1 {
            self.stats.formed_64k += 1;
        } else {
            self.stats.formed_32m += 1;
        }
        if self.cfg.flush_on_create {
            let base = group.align_down(va);
            self.stale.push((base, base + group.bytes()));
        }
    }

    /// Breaks `va`'s group at `level` (break-before-make): zero the 16 entries, invalidate the
    /// range, rewrite them without CONT / FOLIO.
    fn break_group(&mut self, s: &mut RadixSpace, va: u64, level: u8, env: &mut TdbEnv) {
        let Some((id, i)) = self.slot(s, va, level) else { return };
        let first = i & !(GROUP - 1);
        for e in &mut self.table.entries_mut(s, id)[first..first + GROUP] {
            *e &= !(CONT | FOLIO);
        }
        // Zeroing and rewriting are two writes per entry.
        env.cost.write(2 * GROUP as u64);
        self.groups[level as usize] -= 1;
        let (_, group) = sizes_at(level);
        if level == 1 {
            self.stats.broken_64k += 1;
        } else {
            self.stats.broken_32m += 1;
        }
        let base = group.align_down(va);
        self.stale.push((base, base + group.bytes()));
    }

    /// Writes one leaf through the table, keeping the leaf count.
    fn write_leaf(&mut self, s: &mut RadixSpace, o: &TObj, level: u8, env: &mut TdbEnv) -> Result<()> {
        let existed = self.leaf(s, o.va, level).is_some();
        self.table.update(s, o, env)?;
        if !existed {
            self.leaves[level as usize] += 1;
        }
        Ok(())
    }

    /// Installs a whole 64 KiB / 32 MiB object (mTHP folio, HugeTLB page) as 16 contiguous
    /// entries.
    fn update_group(&mut self, s: &mut RadixSpace, o: &TObj, level: u8, env: &mut TdbEnv) -> Result<()> {
        if self.cfg.cont == ContMode::None {
            return Err(Error::Check(format!("arm64 with arch.arm64.cont = \"none\" cannot map a {} translation", o.size)));
        }
        if !o.size.is_aligned(o.va) || !o.size.is_aligned(o.pa) {
            return Err(Error::Check(format!("unaligned {} mapping va {:#x} pa {:#x}", o.size, o.va, o.pa)));
        }
        if let Some(e) = self.leaf(s, o.va, level) {
            if e & CONT != 0 {
                self.break_group(s, o.va, level, env);
            }
        }
        let (one, _) = sizes_at(level);
        for k in 0..GROUP as u64 {
            let member = TObj { va: o.va + k * one.bytes(), pa: o.pa + k * one.bytes(), size: one, ..*o };
            self.write_leaf(s, &member, level, env)?;
        }
        self.set_group(s, o.va, level, CONT | FOLIO, env);
        Ok(())
    }
}

impl Tdb for Arm64 {
    type Space = RadixSpace;

    fn create_space(&mut self, asid: u16, env: &mut TdbEnv) -> Result<RadixSpace> {
        self.table.create_space(asid, env)
    }

    fn destroy_space(&mut self, s: RadixSpace, env: &mut TdbEnv) -> Result<()> {
        self.table.destroy_space(s, env)
    }

    fn find(&mut self, s: &mut RadixSpace, va: u64, env: &mut TdbEnv) -> Option<TObj> {
        let (_, level, e) = self.table.descend(s, va, env);
        if e & PRESENT == 0 {
            return None;
        }
        let o = decode(e, va, level_size(level));
        if e & FOLIO == 0 {
            return Some(o);
        }
        let (_, group) = sizes_at(level);
        Some(TObj { va: group.align_down(va), pa: group.align_down(o.pa), size: group, ..o })
    }

    fn update(&mut self, s: &mut RadixSpace, o: &TObj, env: &mut TdbEnv) -> Result<()> {
        let (level, whole) = level_of(o.size).ok_or_else(|| Error::Check(format!("arm64 cannot map a {} page", o.size)))?;
        if whole {
            return self.update_group(s, o, level, env);
        }
        if self.cfg.cont != ContMode::None && level <= 2 {
            if let Some(old) = self.leaf(s, o.va, level) {
                if old & CONT != 0 {
                    // §1.3: a change of AF/dirty only keeps the group; anything else breaks it.
                    if old & ADDR_MASK == o.pa && (old ^ encode(o)) & ATTRS == 0 {
                        self.table.update(s, o, env)?;
                        let (id, i) = self.slot(s, o.va, level).expect("just written");
                        self.table.entries_mut(s, id)[i] |= old & (CONT | FOLIO);
                        return Ok(());
                    }
                    self.break_group(s, o.va, level, env);
                }
            }
        }
        self.write_leaf(s, o, level, env)?;
        if self.cfg.cont == ContMode::Et && level <= 2 {
            self.try_form(s, o.va, level, env);
        }
        Ok(())
    }

    fn remove(&mut self, s: &mut RadixSpace, va: u64, size: PageSize, env: &mut TdbEnv) -> Option<TObj> {
        let (level, whole) = level_of(size)?;
        let e = self.leaf(s, va, level)?;
        if whole {
            if e & FOLIO == 0 || !size.is_aligned(va) {
                return None;
            }
            // Tearing the whole object down needs no break: every member goes.
            let (one, _) = sizes_at(level);
            let first = self.table.remove(s, va, one, env)?;
            for k in 1..GROUP as u64 {
                self.table.remove(s, va + k * one.bytes(), one, env);
            }
            self.leaves[level as usize] -= GROUP as u64;
            self.groups[level as usize] -= 1;
            return Some(TObj { size, ..first });
        }
        if e & CONT != 0 {
            self.break_group(s, va, level, env);
        }
        let old = self.table.remove(s, va, size, env)?;
        self.leaves[level as usize] -= 1;
        Some(old)
    }

    fn for_each(&mut self, s: &mut RadixSpace, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
        self.table.for_each_entry(s, start, end, env, &mut |o, e| {
            if e & FOLIO == 0 {
                f(o);
            } else {
                // One translation per whole object, reported at its first member.
                let group = if o.size == PageSize::K4 { PageSize::K64 } else { PageSize::M32 };
                if group.is_aligned(o.va) {
                    f(&TObj { size: group, ..*o });
                }
            }
        });
    }

    fn range_is_empty(&mut self, s: &mut RadixSpace, start: u64, end: u64, env: &mut TdbEnv) -> bool {
        self.table.range_is_empty(s, start, end, env)
    }

    fn table_bytes(&self, s: &RadixSpace) -> u64 {
        self.table.table_bytes(s)
    }

    fn take_stale_translations(&mut self, out: &mut Vec<(u64, u64)>) {
        out.append(&mut self.stale);
    }
}

/// A design on this driver: `cont` picks who sets the contiguous bit, `settings` the OS
/// policies (as `--set`).
const fn design(name: &'static str, description: &'static str, cont: ContMode, settings: &'static [&'static str]) -> Design {
    let arch: fn(&mut ArchConfig) = match cont {
        ContMode::None => |a| a.arm64.cont = ContMode::None,
        ContMode::Folio => |a| a.arm64.cont = ContMode::Folio,
        ContMode::Et => |a| a.arm64.cont = ContMode::Et,
    };
    Design { name, description, driver: "arm64", arch, settings, nested: None }
}

impl Registered for Arm64 {
    type Section = Arm64Config;
    const DESIGNS: &'static [Design] = &[
        design("arm64-4k", "arm64 (4 KiB granule, 4 levels), 4 KiB pages, no contiguous bit (ET's 4KiB baseline)", ContMode::None, &["os.thp=never"]),
        design("arm64-thp", "arm64 with THP always (2 MiB at fault, khugepaged), no contiguous bit (ET's THP baseline, Linux 5.18)", ContMode::None, &["os.thp=always"]),
        design("arm64-cont", "arm64 with THP always and ET's transparent contiguous-bit management (64 KiB / 32 MiB groups wherever pages happen to be contiguous; no CoalaPaging)", ContMode::Et, &["os.thp=always"]),
        design("arm64-mthp", "arm64 THP with 64 KiB mTHP folios as the fault fallback, upstream contpte (CONT only for whole folios, no 32 MiB; the artifact's thp-mthp)", ContMode::Folio, &["os.thp=always", "os.mthp=true"]),
        design("arm64-hugetlb-64k", "arm64, anonymous memory in HugeTLB 64 KiB contiguous pages", ContMode::Folio, &["os.thp=never", "os.hugetlb_size=\"64K\""]),
        design("arm64-hugetlb-2m", "arm64, anonymous memory in HugeTLB 2 MiB pages", ContMode::None, &["os.thp=never", "os.hugetlb_size=\"2M\""]),
        design("arm64-hugetlb-32m", "arm64, anonymous memory in HugeTLB 32 MiB contiguous blocks", ContMode::Folio, &["os.thp=never", "os.hugetlb_size=\"32M\""]),
        design("arm64-hugetlb-1g", "arm64, anonymous memory in HugeTLB 1 GiB blocks", ContMode::None, &["os.thp=never", "os.hugetlb_size=\"1G\""]),
        design("et", "Elastic Translations (the artifact's ET bars): greedy CoalaPaging, transparent contiguous bit, online Leshy hints driving CoalaKhugepaged", ContMode::Et, &["os.thp=always", "os.khugepaged.enabled=false", "os.coala.paging=\"greedy\"", "os.coala.khugepaged=true", "os.leshy.mode=\"online\""]),
        design("et-offline", "ET-offline: a previous run's Leshy hints (--set os.leshy.hints=FILE) drive fault placement and CoalaKhugepaged", ContMode::Et, &["os.thp=always", "os.khugepaged.enabled=false", "os.coala.paging=\"hinted\"", "os.coala.khugepaged=true", "os.leshy.mode=\"offline\"", "os.leshy.slack=100"]),
        design("et-no32m", "ET ablation: no 32 MiB translations (64 KiB and 2 MiB only)", ContMode::Et, &["os.thp=always", "os.khugepaged.enabled=false", "os.coala.paging=\"greedy\"", "os.coala.khugepaged=true", "os.coala.allow_32m=false", "os.leshy.mode=\"online\""]),
        design("et-nofaulthints", "ET-offline ablation: hints drive CoalaKhugepaged only; faults are greedy", ContMode::Et, &["os.thp=always", "os.khugepaged.enabled=false", "os.coala.paging=\"greedy\"", "os.coala.khugepaged=true", "os.leshy.mode=\"offline\"", "os.leshy.slack=100"]),
        design("arm64-hawkeye", "Hawkeye (ASPLOS'19) as the ET artifact runs it: THP at fault, 2 MiB promotion ordered by access-coverage bins instead of khugepaged's scan, asynchronous pre-zeroing; no contiguous bit", ContMode::None, &["os.thp=always", "os.khugepaged.enabled=false", "os.hawkeye.enabled=true", "os.hawkeye.prezero=true"]),
        design("et-greedy", "ET ablation: greedy CoalaPaging and the contiguous bit, no asynchronous promotion (no Leshy, no khugepaged)", ContMode::Et, &["os.thp=always", "os.khugepaged.enabled=false", "os.coala.paging=\"greedy\""]),
    ];

    fn validate(s: &Arm64Config, key: &str) -> Result<()> {
        validate_pwcs(&s.pwc, key, 4)
    }

    fn config(arch: &ArchConfig) -> Arm64Config {
        arch.arm64.clone()
    }
}

impl Driver for Arm64 {
    type Config = Arm64Config;
    type WalkCache = RadixPwc;

    fn from_config(cfg: &Arm64Config, _seed: u64) -> Result<Self> {
        Ok(Arm64::new(cfg))
    }

    fn new_walk_cache(&self) -> RadixPwc {
        self.table.new_walk_cache()
    }

    #[inline]
    fn walk(&mut self, s: &mut RadixSpace, wc: &mut RadixPwc, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        let (t, e) = self.table.walk_entry(s, wc, asid, va, plan)?;
        if e & CONT == 0 {
            return Some(t);
        }
        // The walk read the member's entry, as for a single page; the hint widens the reach.
        let level = if t.size == PageSize::K4 { 1 } else { 2 };
        if plan.checked && !self.group_is_valid(s, va, level) {
            plan.violation = Some("contiguous bit on a group that breaks the ARMv8 rules (reference elastic-translations.md §1.2)");
        }
        let (_, group) = sizes_at(level);
        Some(Translation { pbase: t.pbase & !group.offset_mask(), size: group })
    }

    fn invalidate_walk_cache(&self, wc: &mut RadixPwc, asid: u16, start: u64, end: u64) {
        self.table.invalidate_walk_cache(wc, asid, start, end);
    }

    /// TTBR0's 48-bit user range (4 KiB granule, 4 levels): the whole 2^48 is user space.
    fn user_va_limit(&self) -> u64 {
        1 << 48
    }

    fn leaf_sizes(&self) -> &[PageSize] {
        if self.cfg.cont == ContMode::None {
            &SIZES_NO_CONT
        } else {
            &SIZES
        }
    }

    fn restart_metrics(&mut self) {
        self.stats = ContStats::default();
    }

    fn translations_by_size(&self) -> Option<[u64; PageSize::COUNT]> {
        Some(self.translations())
    }

    fn metrics(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        let t = self.translations();
        let by_size: serde_json::Map<_, _> = PageSize::ALL.iter().map(|p| (p.label().to_string(), t[p.index()].into())).collect();
        m.insert("translations_by_size".into(), by_size.into());
        m.insert("cont".into(), serde_json::to_value(&self.stats).expect("stats serialize"));
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::phys::PhysMem;
    use crate::tapi::{prot, OsCost};

    const VA: u64 = 0x40_0000_0000; // 32 MiB aligned
    const PA: u64 = 0x1000_0000; // 32 MiB aligned

    struct Rig {
        d: Arm64,
        s: RadixSpace,
        phys: PhysMem,
        cost: OsCost,
    }

    impl Rig {
        fn new(cont: ContMode) -> Rig {
            let mut d = Arm64::new(&Arm64Config { cont, ..Arm64Config::default() });
            let mut phys = PhysMem::new(1 << 30, 14);
            let mut cost = OsCost::default();
            let s = d.create_space(1, &mut TdbEnv { phys: &mut phys, cost: &mut cost }).unwrap();
            Rig { d, s, phys, cost }
        }
        fn map(&mut self, va: u64, pa: u64, size: PageSize, p: u8) {
            let o = TObj::new(va, pa, size, p);
            self.d.update(&mut self.s, &o, &mut TdbEnv { phys: &mut self.phys, cost: &mut self.cost }).unwrap();
        }
        fn unmap(&mut self, va: u64, size: PageSize) -> Option<TObj> {
            self.d.remove(&mut self.s, va, size, &mut TdbEnv { phys: &mut self.phys, cost: &mut self.cost })
        }
        fn find(&mut self, va: u64) -> Option<TObj> {
            self.d.find(&mut self.s, va, &mut TdbEnv { phys: &mut self.phys, cost: &mut self.cost })
        }
        /// A checked walk with cold walk caches: (translation, references, violation).
        fn walk(&mut self, va: u64) -> (Option<Translation>, usize, Option<&'static str>) {
            let mut wc = self.d.new_walk_cache();
            let mut plan = WalkPlan { checked: true, ..WalkPlan::default() };
            let t = self.d.walk(&mut self.s, &mut wc, 1, va, &mut plan);
            (t, plan.refs.len(), plan.violation)
        }
        fn stale(&mut self) -> Vec<(u64, u64)> {
            let mut v = Vec::new();
            self.d.take_stale_translations(&mut v);
            v
        }
        /// Maps the 16 pages of the 64 KiB group at `va` to `pa + i × 4K`, page `skip` excepted.
        fn map_group(&mut self, va: u64, pa: u64, skip: Option<u64>) {
            for i in (0..16).filter(|&i| Some(i) != skip) {
                self.map(va + i * 4096, pa + i * 4096, PageSize::K4, prot::RW);
            }
        }
    }

    #[test]
    fn an_eligible_group_becomes_one_64k_translation_with_a_4k_walk() {
        let mut r = Rig::new(ContMode::Et);
        r.map_group(VA, PA, None);
        assert_eq!(r.d.cont_stats().formed_64k, 1);
        let (t, refs, v) = r.walk(VA + 0x5123);
        assert_eq!(t, Some(Translation { pbase: PA, size: PageSize::K64 }));
        assert_eq!(t.unwrap().paddr(VA + 0x5123), PA + 0x5123);
        assert_eq!(refs, 4, "the contiguous bit changes reach, not depth");
        assert!(v.is_none());
        assert_eq!(r.d.translations(), [0, 1, 0, 0, 0]);
        // The OS still sees its sixteen 4 KiB pages.
        assert_eq!(r.find(VA + 0x5000).unwrap().size, PageSize::K4);
        assert!(r.stale().is_empty(), "ET creates groups without a flush");
    }

    #[test]
    fn ineligible_groups_stay_4k() {
        // Misaligned: the physical run starts one frame past a 64 KiB boundary.
        let mut r = Rig::new(ContMode::Et);
        r.map_group(VA, PA + 4096, None);
        // One missing.
        r.map_group(VA + 0x10000, PA + 0x10000, Some(7));
        // Not contiguous: page 3 maps elsewhere.
        for i in 0..16u64 {
            let pa = if i == 3 { PA + 0x80_0000 } else { PA + 0x20000 + i * 4096 };
            r.map(VA + 0x20000 + i * 4096, pa, PageSize::K4, prot::RW);
        }
        // Mixed attributes: page 9 read-only.
        for i in 0..16u64 {
            r.map(VA + 0x30000 + i * 4096, PA + 0x30000 + i * 4096, PageSize::K4, if i == 9 { prot::READ } else { prot::RW });
        }
        assert_eq!(r.d.cont_stats().formed_64k, 0);
        for g in 0..4u64 {
            let (t, _, _) = r.walk(VA + g * 0x10000);
            assert_eq!(t.unwrap().size, PageSize::K4, "group {g}");
        }
        // The missing page arrives: that group forms.
        r.map(VA + 0x17000, PA + 0x17000, PageSize::K4, prot::RW);
        assert_eq!(r.walk(VA + 0x10000).0.unwrap().size, PageSize::K64);
    }

    #[test]
    fn changes_other_than_access_flags_break_the_group_before_making() {
        let mut r = Rig::new(ContMode::Et);
        r.map_group(VA, PA, None);
        // Setting AF/dirty keeps the group.
        let mut o = TObj::new(VA + 0x2000, PA + 0x2000, PageSize::K4, prot::RW);
        o.accessed = true;
        o.dirty = true;
        r.d.update(&mut r.s, &o, &mut TdbEnv { phys: &mut r.phys, cost: &mut r.cost }).unwrap();
        assert_eq!(r.walk(VA).0.unwrap().size, PageSize::K64);
        assert_eq!(r.d.cont_stats().broken_64k, 0);
        // mprotect of one page breaks it, with an invalidation of the whole group.
        r.map(VA + 0x2000, PA + 0x2000, PageSize::K4, prot::READ);
        assert_eq!(r.d.cont_stats().broken_64k, 1);
        assert_eq!(r.stale(), vec![(VA, VA + 0x10000)]);
        assert_eq!(r.walk(VA).0.unwrap().size, PageSize::K4);
        // Restoring it re-forms the group; unmapping one page breaks it again.
        r.map(VA + 0x2000, PA + 0x2000, PageSize::K4, prot::RW);
        assert_eq!(r.walk(VA).0.unwrap().size, PageSize::K64);
        assert_eq!(r.unmap(VA + 0xf000, PageSize::K4).unwrap().pa, PA + 0xf000);
        assert_eq!(r.stale(), vec![(VA, VA + 0x10000)]);
        assert_eq!(r.walk(VA + 0x1000).0.unwrap().size, PageSize::K4);
        assert_eq!(r.d.translations(), [15, 0, 0, 0, 0]);
        // Migration of a member (new frame) also breaks.
        r.map(VA + 0xf000, PA + 0xf000, PageSize::K4, prot::RW);
        r.map(VA + 0x4000, PA + 0x90_0000, PageSize::K4, prot::RW);
        assert_eq!(r.d.cont_stats().broken_64k, 3);
    }

    #[test]
    fn sixteen_aligned_2m_blocks_make_a_32m_translation() {
        let mut r = Rig::new(ContMode::Et);
        for i in 0..16u64 {
            r.map(VA + i * (2 << 20), PA + i * (2 << 20), PageSize::M2, prot::RW);
        }
        let (t, refs, v) = r.walk(VA + (5 << 20) + 77);
        assert_eq!(t, Some(Translation { pbase: PA, size: PageSize::M32 }));
        assert_eq!(refs, 3, "a PMD block walk");
        assert!(v.is_none());
        assert_eq!(r.d.translations(), [0, 0, 0, 1, 0]);
        // A 2 MiB block whose neighbours are a table of 4 KiB pages does not join.
        r.unmap(VA + (6 << 20), PageSize::M2);
        r.map(VA + (6 << 20), PA + (6 << 20), PageSize::K4, prot::RW);
        assert_eq!(r.walk(VA).0.unwrap().size, PageSize::M2);
        assert_eq!(r.d.cont_stats().broken_32m, 1);
    }

    #[test]
    fn whole_objects_are_one_translation_for_the_os_and_need_cont() {
        let mut r = Rig::new(ContMode::Folio);
        r.map(VA, PA, PageSize::K64, prot::RW);
        let o = r.find(VA + 0x3000).unwrap();
        assert_eq!((o.va, o.pa, o.size), (VA, PA, PageSize::K64));
        assert_eq!(r.walk(VA + 0x3000).0.unwrap().size, PageSize::K64);
        // Folio mode does not fold independent pages.
        r.map_group(VA + 0x10000, PA + 0x10000, None);
        assert_eq!(r.walk(VA + 0x10000).0.unwrap().size, PageSize::K4);
        let mut seen = Vec::new();
        r.d.for_each(&mut r.s, VA, VA + 0x20000, &mut TdbEnv { phys: &mut r.phys, cost: &mut r.cost }, &mut |o| seen.push(o.size));
        assert_eq!(seen.len(), 17, "one 64K object, then sixteen 4K pages");
        assert_eq!(seen[0], PageSize::K64);
        assert_eq!(r.unmap(VA, PageSize::K64).unwrap().size, PageSize::K64);
        assert!(r.find(VA).is_none() && r.find(VA + 0xf000).is_none());
        assert_eq!(r.d.translations(), [16, 0, 0, 0, 0]);
        // Without the contiguous bit a 64 KiB object cannot be mapped.
        let mut n = Rig::new(ContMode::None);
        let o = TObj::new(VA, PA, PageSize::K64, prot::RW);
        assert!(n.d.update(&mut n.s, &o, &mut TdbEnv { phys: &mut n.phys, cost: &mut n.cost }).is_err());
    }

    #[test]
    fn checked_walks_reject_a_group_that_breaks_the_rules() {
        let mut r = Rig::new(ContMode::Et);
        r.map_group(VA, PA, None);
        // Corrupt one member's frame behind the driver's back (what a buggy OS change would do).
        let (id, i) = r.d.slot(&r.s, VA + 0x3000, 1).unwrap();
        r.d.table.entries_mut(&mut r.s, id)[i] += 0x10_0000;
        let (_, _, v) = r.walk(VA);
        assert!(v.is_some(), "a violated contiguous group must be reported");
    }
}
