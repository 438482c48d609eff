//! Nested (two-dimensional) translation: any guest driver on any host driver, each under its own
//! OS, composed rather than copied (`--design radix4@radix4`, guest@host).
//!
//! The guest OS is the ordinary [`Os`] running this driver: its physical memory is guest-physical
//! memory (gPA), its page tables live there, and every translation-database call goes to the
//! guest driver unchanged. The hypervisor is a second [`Os`] (the *host*, `host.os.*`,
//! `host.arch.*`) owned by this driver: one host process is the VM, and guest-physical memory is
//! one host VMA starting at [`Nested::base`], backed on demand — the first hardware reference to
//! a guest frame that the host has not backed is an EPT / stage-2 violation, a host page fault
//! that maps 4 KiB or a host huge page under the host's THP policy.
//!
//! A 2-D walk runs the guest driver's walk, then translates every guest-physical reference of
//! its plan — each table read, and finally the guest frame of the data — with the host driver's
//! walk, emitting one flattened plan: the host references of a guest reference come in serial
//! steps before it, host walks of references in the same guest step go out in parallel. A cold
//! 4-level guest on a 4-level host makes 4 × (4 + 1) + 4 = 24 references (Bhargava et al.,
//! ASPLOS'08), 5 on 5 makes 35. The walker and the rest of the pipeline do not change.
//!
//! Hardware of a nested MMU, each part configurable: the TLBs cache guest-virtual →
//! host-physical translations of the smaller of the guest and host page sizes; the guest's walk
//! caches (its own `WalkCache`, tagged by guest-physical table pointers) and the host's (the host
//! driver's, for the VM's ASID) are separate per-core structures; a nested TLB (`host.ntlb`, AMD's
//! NTLB) caches gPA → hPA for the references of guest walks and the final guest frame, or those
//! stage-2 entries share the core's L2 TLB (`host.ntlb.in_l2_tlb`, Neoverse N1), reached through
//! [`Driver::walk_beside`].
//!
//! When the guest OS maps a page it zeroes it, and it zeroes every page-table page it allocates:
//! with `host.back_on_guest_map` (the default) those writes are what touches the frame first, so
//! the host backs it then, and the EPT violation's host work and VM exit are charged to the
//! guest's page fault. Otherwise the first hardware reference (a 2-D walk's) takes the violation
//! and its cost is charged to that walk.
//!
//! The host OS's background work (khugepaged and the compaction it triggers) and its swap remap
//! guest-physical memory behind the guest's back; every VM TLB entry may depend on a remapped
//! page, so each host remap flushes the VM's TLBs (docs/virtualization.md).

use super::{ArchConfig, Design, Registered};
use crate::addr::{PageSize, Pfn};
use crate::error::{Error, Result};
use crate::mmu::tlb::{Tlb, TlbConfig};
use crate::os::{Os, OsConfig};
use crate::tapi::{Driver, Frames, MapFlags, NoSharedTlb, Path, SharedTlb, TObj, Tdb, TdbEnv, Translation, WalkPlan, WalkRef};
use serde_json::{json, Map, Value};

/// Host ASID of the VM in the host OS.
const VM: u16 = 0;

/// Host memory a host that does not swap needs beyond the guest's, for its own tables.
const HOST_TABLE_ROOM: u64 = 64 << 20;

/// The tag of stage-2 entries kept in the core's L2 TLB (`host.ntlb.in_l2_tlb`), in the ASID's
/// place: above every guest ASID (at most 4096 processes), so they never answer a guest lookup.
const STAGE2: u16 = u16::MAX;

/// The nested TLB (`host.ntlb`): gPA → hPA for the references of 2-D walks.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NtlbConfig {
    /// Model a nested TLB at all.
    pub enabled: bool,
    /// Entries (4 KiB, 2 MiB and 1 GiB host pages).
    pub entries: u32,
    /// Associativity.
    pub ways: u32,
    /// Lookup latency in cycles, paid on the walk's critical path for every guest-physical
    /// reference it translates.
    pub latency: u32,
    /// Keep the stage-2 entries in the core's unified L2 TLB instead of a structure of their own,
    /// sharing its capacity and paying its latency (Neoverse N1: reference/elastic-translations.md
    /// §1.5); `entries`, `ways` and `latency` are then unused.
    pub in_l2_tlb: bool,
    /// Host page sizes whose entries are cached (a contiguous group of a size not listed is
    /// cached as its piece if that is listed); empty: every size the host may back guest memory
    /// with. N1 keeps stage-2 entries of 2 MiB and 1 GiB blocks only.
    pub sizes: Vec<PageSize>,
}

impl Default for NtlbConfig {
    /// A nested TLB of its own, 32 entries, 4-way, 2 cycles: an estimate (AMD describes an NTLB
    /// without sizes), see docs/virtualization.md; `--preset altra` keeps N1's in the L2 TLB.
    fn default() -> Self {
        NtlbConfig { enabled: true, entries: 32, ways: 4, latency: 2, in_l2_tlb: false, sizes: Vec::new() }
    }
}

impl NtlbConfig {
    /// The host page sizes cached: `sizes`, or every size a host under `os` may back with.
    fn cached_sizes(&self, os: &OsConfig) -> Vec<PageSize> {
        if self.sizes.is_empty() {
            host_sizes(os)
        } else {
            self.sizes.clone()
        }
    }

    /// The nested TLB of its own, for a host under `os` (a lookup probes each size it holds).
    fn tlb(&self, os: &OsConfig) -> TlbConfig {
        TlbConfig::new(self.entries, self.ways, self.latency, &self.cached_sizes(os))
    }
}

/// The page sizes a host under `os` may back guest memory with.
fn host_sizes(os: &OsConfig) -> Vec<PageSize> {
    let mut v = vec![PageSize::K4];
    if os.thp != crate::os::ThpMode::Never {
        v.push(PageSize::M2);
    }
    if os.hugetlb_1g > 0 {
        v.push(PageSize::G1);
    }
    if os.hugetlb_size != PageSize::K4 && !v.contains(&os.hugetlb_size) {
        v.push(os.hugetlb_size);
    }
    v.sort();
    v
}

/// The hypervisor's configuration (`host.*`): its OS, its drivers' sections, the nested TLB.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    /// The host OS (`host.os.memory`, `host.os.thp`, `host.os.fragmentation.*`, ...).
    pub os: OsConfig,
    /// The host drivers' sections (`host.arch.radix.levels`, ...).
    pub arch: ArchConfig,
    /// The nested TLB.
    pub ntlb: NtlbConfig,
    /// The host backs a guest frame when the guest OS maps it or allocates it for a page table
    /// (the guest zeroes it: the first touch); `false`: at the first hardware reference.
    pub back_on_guest_map: bool,
}

impl Default for HostConfig {
    /// A 64 GiB host, so the default 32 GiB guest fits with room for the host's tables.
    fn default() -> Self {
        HostConfig {
            os: OsConfig { memory: 64 << 30, ..OsConfig::default() },
            arch: ArchConfig::default(),
            ntlb: NtlbConfig::default(),
            back_on_guest_map: true,
        }
    }
}

impl HostConfig {
    /// Sizes the host for a guest of `guest_memory` bytes when no layer of the configuration
    /// set `host.os.memory`: the default 64 GiB while the guest fits in it with the 64 MiB the
    /// host's tables need ([`Driver::from_config`] of [`Nested`]), else the guest's memory and
    /// an eighth more for the host's tables and its own use, in whole GiB. A host that swaps
    /// keeps its size: overcommitting the guest is then the point. Only configurations that the
    /// fixed 64 GiB refused change.
    pub fn fit_guest(&mut self, guest_memory: u64) {
        if self.os.swap.enabled || guest_memory.saturating_add(HOST_TABLE_ROOM) <= self.os.memory {
            return;
        }
        self.os.memory = guest_memory.saturating_add(guest_memory / 8).next_multiple_of(1 << 30);
    }

    /// Checks every section; errors name `host.*` keys.
    pub fn validate(&self) -> Result<()> {
        let host = |e: Error| match e {
            Error::Config { key, msg } => Error::Config { key: format!("host.{key}"), msg },
            e => e,
        };
        self.os.validate().map_err(host)?;
        self.arch.validate().map_err(host)?;
        if self.ntlb.enabled && !self.ntlb.in_l2_tlb {
            self.ntlb.tlb(&self.os).validate("host.ntlb")?;
        }
        Ok(())
    }
}

/// A design run as a guest on a host design (see [`nest`]).
#[derive(Clone, Copy)]
pub struct Nesting {
    /// The guest's design.
    pub guest: &'static Design,
    /// The host's design.
    pub host: &'static Design,
}

/// Drivers that can be a guest or a host of a 2-D walk. Utopia's RestSegs and RMM's ranges are
/// not nestable: their papers evaluate no nested form (Utopia §9 leaves it to future work).
pub const NESTABLE: &[&str] = &["radix", "fpt", "ecpt", "arm64"];

/// Drivers that nest in their own way, as guests only. POM-TLB's paper is about virtualized
/// systems: its in-memory TLB, in host-physical memory, caches guest-virtual → host-physical
/// translations in front of the 2-D walk of a radix guest (`PomTlb<Nested<Radix, H>>`,
/// src/arch/pomtlb.rs).
pub const GUEST_ONLY: &[&str] = &["pomtlb"];

/// The design `guest@host`: checks both are nestable and builds the pair's entry (kept for the
/// life of the program, like the built-in designs).
pub fn nest(guest: &'static Design, host: &'static Design) -> Result<&'static Design> {
    if GUEST_ONLY.contains(&host.driver) {
        return Err(Error::config(
            "design",
            format!("`{}` ({} driver) nests only as a guest: hosts are {}", host.name, host.driver, NESTABLE.join(", ")),
        ));
    }
    for d in [guest, host] {
        if !NESTABLE.contains(&d.driver) && !GUEST_ONLY.contains(&d.driver) {
            return Err(Error::config(
                "design",
                format!(
                    "`{}` ({} driver) cannot be nested: nestable drivers are {} (and, as guests only, {})",
                    d.name,
                    d.driver,
                    NESTABLE.join(", "),
                    GUEST_ONLY.join(", ")
                ),
            ));
        }
        if d.settings.iter().any(|s| s.starts_with("mmu.perfect_tlb")) {
            return Err(Error::config("design", format!("`{}` is a perfect-TLB baseline and cannot be nested", d.name)));
        }
        if d.settings.iter().any(|s| s.starts_with("accel.enabled")) {
            return Err(Error::config(
                "design",
                format!("`{}` runs on accelerators and cannot be nested (their virtualization is not modelled)", d.name),
            ));
        }
    }
    let name: &'static str = Box::leak(format!("{}@{}", guest.name, host.name).into_boxed_str());
    let description: &'static str =
        Box::leak(format!("{} as a guest on {} as the host (2-D walks)", guest.name, host.name).into_boxed_str());
    Ok(Box::leak(Box::new(Design {
        name,
        description,
        driver: "nested",
        arch: guest.arch,
        settings: guest.settings,
        nested: Some(Nesting { guest, host }),
    })))
}

/// How a guest design's driver runs on a host driver `H`: composed with the host's walk
/// ([`Composed`]), or nested its own way (POM-TLB's [`super::pomtlb::PomTlbGuest`]). The
/// simulator monomorphises a nested run for each (guest kind, host driver) pair
/// (`guests!` and `nestable!` in arch/mod.rs).
pub trait Guest {
    /// The driver of this guest on host driver `H`.
    type On<H: Registered>: Driver;
    /// Builds it from the guest's `arch` sections, the hypervisor's `host` section and the
    /// guest's memory size, with the hypervisor's OS.
    fn build<H: Registered>(arch: &ArchConfig, host: &HostConfig, guest_memory: u64, seed: u64) -> Result<Self::On<H>>;
}

/// Guest driver `G` composed with the host's walk: `Nested<G, H>`.
pub struct Composed<G>(std::marker::PhantomData<G>);

impl<G: Registered> Guest for Composed<G> {
    type On<H: Registered> = Nested<G, H>;
    fn build<H: Registered>(arch: &ArchConfig, host: &HostConfig, guest_memory: u64, seed: u64) -> Result<Nested<G, H>> {
        Nested::from_config(&NestedConfig::new(arch, host, guest_memory), seed)
    }
}

/// What a nested driver is built from.
pub struct NestedConfig<G: Driver, H: Driver> {
    /// The guest driver's configuration.
    pub guest: G::Config,
    /// The host driver's configuration.
    pub host: H::Config,
    /// The host OS.
    pub host_os: OsConfig,
    /// The nested TLB.
    pub ntlb: NtlbConfig,
    /// Guest-physical memory (the guest's `os.memory`): the size of the VM's host VMA.
    pub guest_memory: u64,
    /// See [`HostConfig::back_on_guest_map`].
    pub back_on_guest_map: bool,
}

impl<G: Registered, H: Registered> NestedConfig<G, H> {
    /// The configuration of `G` on `H` from the guest's `arch` sections, the hypervisor's
    /// `host` section and the guest's memory size (`os.memory`).
    pub fn new(arch: &ArchConfig, host: &HostConfig, guest_memory: u64) -> Self {
        NestedConfig {
            guest: G::config(arch),
            host: H::config(&host.arch),
            host_os: host.os.clone(),
            ntlb: host.ntlb.clone(),
            guest_memory,
            back_on_guest_map: host.back_on_guest_map,
        }
    }
}

/// One guest address space: the guest driver's structures.
pub struct NestedSpace<G: Driver> {
    guest: G::Space,
}

/// Per-core walk caches of a nested MMU.
pub struct NestedWc<G: Driver, H: Driver> {
    guest: G::WalkCache,
    host: H::WalkCache,
    ntlb: Option<Tlb>,
    /// The host-flush epoch these caches have seen (see [`Nested::host_epoch`]).
    epoch: u64,
}

#[derive(Clone, Debug, Default)]
struct Stats {
    walks: u64,
    guest_refs: u64,
    host_refs: u64,
    guest_unfiltered: u64,
    host_unfiltered: u64,
    ept_violations: u64,
    host_fault_cycles: f64,
    ept_violations_at_guest_map: u64,
    host_fault_cycles_at_guest_map: f64,
    ntlb_lookups: u64,
    ntlb_hits: u64,
}

/// Where a nested MMU caches stage-2 (gPA → hPA) entries for its 2-D walks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage2 {
    /// Nowhere: every guest-physical reference takes a host walk.
    Off,
    /// A nested TLB of its own per core (AMD's NTLB).
    Ntlb,
    /// The core's unified L2 TLB, beside its guest-virtual entries (Neoverse N1).
    L2Tlb,
}

/// A guest driver `G` on a host driver `H`, with the hypervisor's OS.
pub struct Nested<G: Driver, H: Driver> {
    guest: G,
    /// The hypervisor.
    pub host: Os<H>,
    /// Host virtual address of guest-physical address 0.
    pub base: u64,
    ntlb: TlbConfig,
    /// Where stage-2 entries are cached.
    stage2: Stage2,
    /// The host page sizes whose entries the core's L2 TLB keeps ([`Stage2::L2Tlb`]).
    l2_sizes: Vec<PageSize>,
    /// Bumped whenever the host OS sends shootdowns: every core's host walk caches and nested
    /// TLB are flushed before their next use.
    host_epoch: u64,
    /// Host remaps so far: the VM's TLBs are flushed on each ([`Driver::generation`]).
    remaps: u64,
    trap_cycles: f64,
    back_on_guest_map: bool,
    /// Guest frames allocated during the current translation-database call.
    allocated: Vec<(u64, u32)>,
    gplan: WalkPlan,
    hpa: Vec<u64>,
    stats: Stats,
}

impl<G: Driver, H: Driver> Nested<G, H> {
    /// The guest driver.
    pub fn guest(&self) -> &G {
        &self.guest
    }

    /// Translates guest-physical `gpa` through the nested TLB or the host's walk, appending the
    /// host references to `plan` in serial steps from `step` (marked `needed` like the guest
    /// reference they serve). Takes EPT violations (host faults) as they come. Returns the
    /// host-physical address, the host page size, and the first step after the host references;
    /// `None` only if the host cannot back the page (then `plan.violation` says so).
    #[inline(always)]
    fn host_translate<T: SharedTlb>(
        &mut self,
        wc: &mut NestedWc<G, H>,
        l2: &mut T,
        gpa: u64,
        needed: bool,
        mut step: u8,
        plan: &mut WalkPlan,
    ) -> Option<(u64, PageSize, u8)> {
        let cached = match (self.stage2, wc.ntlb.as_mut()) {
            (Stage2::Ntlb, Some(ntlb)) => Some((ntlb.latency, ntlb.lookup(VM, gpa))),
            (Stage2::L2Tlb, _) => Some((l2.latency(), l2.lookup(STAGE2, gpa))),
            _ => None,
        };
        if let Some((latency, hit)) = cached {
            self.stats.ntlb_lookups += 1;
            plan.fixed_cycles += latency;
            if let Some(t) = hit {
                self.stats.ntlb_hits += 1;
                // The frame of this address, as checked mode compares: the entry may be a piece of
                // a larger host page (a contiguous group the nested TLB holds at its entry size).
                if plan.checked && self.host.truth(VM, self.base + gpa).map(|h| h.paddr(self.base + gpa)) != Some(t.paddr(gpa)) {
                    plan.violation = Some("stale nested-TLB entry");
                }
                return Some((t.paddr(gpa), t.size, step));
            }
        }
        let hva = self.base + gpa;
        loop {
            // The host walk appends to the 2-D walk's plan (its counts and any violation add up
            // there too); its references are then moved to the steps after `step`.
            let (start, unfiltered) = (plan.refs.len(), plan.unfiltered);
            let space = &mut self.host.procs[VM as usize].space;
            let r = self.host.driver.walk(space, &mut wc.host, VM, hva, plan);
            // A plan's steps never decrease, so the host walk's last reference has its last step.
            if let Some(last) = plan.refs[start..].last().map(|h| h.step) {
                for h in &mut plan.refs[start..] {
                    *h =
                        WalkRef { paddr: h.paddr, step: step.saturating_add(h.step), needed: needed && h.needed, host: true, write: false };
                }
                step = step.saturating_add(last + 1);
            }
            self.stats.host_refs += (plan.refs.len() - start) as u64;
            self.stats.host_unfiltered += u64::from(plan.unfiltered - unfiltered);
            match r {
                Some(t) => {
                    // Keyed by guest-physical address: the host page covers the same aligned range of
                    // gPAs as of host VAs, since the VM's base is aligned to the host page.
                    if self.base.is_multiple_of(t.size.bytes()) {
                        match (self.stage2, wc.ntlb.as_mut()) {
                            (Stage2::Ntlb, Some(ntlb)) => ntlb.insert(VM, gpa, t),
                            (Stage2::L2Tlb, _) => {
                                if let Some(e) = self.l2_entry(t, hva) {
                                    l2.insert(STAGE2, gpa, e);
                                }
                            }
                            _ => {}
                        }
                    }
                    return Some((t.paddr(hva), t.size, step));
                }
                None => {
                    if !self.back_guest_page(wc, l2, hva, plan) {
                        return None;
                    }
                }
            }
        }
    }

    /// An EPT / stage-2 violation at `hva`: the hypervisor backs the page (its cost and the VM
    /// exit charged to the walk), and the walk resumes. `false` (with `plan.violation` set) if the
    /// host cannot. Out of line: a violation is rare after the guest's memory is populated, and
    /// the walk's common path, [`Nested::host_translate`], is inlined into the 2-D walk.
    #[cold]
    #[inline(never)]
    fn back_guest_page<T: SharedTlb>(&mut self, wc: &mut NestedWc<G, H>, l2: &mut T, hva: u64, plan: &mut WalkPlan) -> bool {
        self.stats.ept_violations += 1;
        let before = self.host.cycles(Path::Fault);
        if self.host.fault(VM, hva).is_err() {
            plan.violation = Some("the host cannot back guest memory (host out of memory)");
            return false;
        }
        let c = self.host.cycles(Path::Fault) - before + self.trap_cycles;
        self.stats.host_fault_cycles += c;
        plan.fixed_cycles += c as u32;
        self.drain_host_shootdowns();
        // The host fault may have remapped other pages (swap): this core's host caches are
        // flushed before the walk goes on.
        self.sync_host_caches(wc, l2);
        true
    }

    /// Runs a guest translation-database call; with `back_on_guest_map`, the host then backs
    /// every guest frame the call allocated for tables, and `[gpa, gpa + len)` (the page it
    /// mapped), charging the host's work and VM exits to the guest's current OS path.
    fn guest_call<R>(&mut self, env: &mut TdbEnv, data: Option<(u64, u64)>, f: impl FnOnce(&mut G, &mut TdbEnv) -> R) -> R {
        if !self.back_on_guest_map {
            return f(&mut self.guest, env);
        }
        let mut allocated = std::mem::take(&mut self.allocated);
        allocated.clear();
        let r = {
            let mut rec = Recording { inner: &mut *env.phys, allocated: &mut allocated };
            f(&mut self.guest, &mut TdbEnv { phys: &mut rec, cost: &mut *env.cost })
        };
        let ranges = allocated.iter().map(|&(pa, order)| (pa, 4096u64 << order)).chain(data);
        let faults = self.host.stats.faults();
        let before = self.host.cycles(Path::Fault);
        for (pa, len) in ranges {
            // A host out of memory leaves the frame unbacked; the first walk that references it
            // takes the violation again and reports the failure.
            let _ = self.host.populate(VM, self.base + pa, len);
        }
        let n = self.host.stats.faults() - faults;
        if n > 0 {
            let c = self.host.cycles(Path::Fault) - before + n as f64 * self.trap_cycles;
            self.stats.ept_violations_at_guest_map += n;
            self.stats.host_fault_cycles_at_guest_map += c;
            env.cost.add_fixed_cycles(c as u64);
            self.drain_host_shootdowns();
        }
        self.allocated = allocated;
        r
    }

    /// The entry the L2 TLB keeps for host translation `t` of `hva`: `t` if its size is one
    /// of `host.ntlb.sizes`, else the piece of a contiguous group if that size is, else none.
    fn l2_entry(&self, t: Translation, hva: u64) -> Option<Translation> {
        if self.l2_sizes.contains(&t.size) {
            return Some(t);
        }
        let piece = t.size.descriptor().filter(|p| self.l2_sizes.contains(p))?;
        Some(Translation { pbase: t.paddr(hva) & !piece.offset_mask(), size: piece })
    }

    /// Flushes this core's host walk caches and stage-2 entries if the host sent shootdowns
    /// since they were last flushed.
    fn sync_host_caches<T: SharedTlb>(&self, wc: &mut NestedWc<G, H>, l2: &mut T) {
        if wc.epoch != self.host_epoch {
            self.host.driver.invalidate_walk_cache(&mut wc.host, VM, 0, u64::MAX);
            if let Some(n) = wc.ntlb.as_mut() {
                n.flush();
            }
            if self.stage2 == Stage2::L2Tlb {
                l2.drop_tag(STAGE2);
            }
            wc.epoch = self.host_epoch;
        }
    }

    /// Host shootdowns bump the host epoch: cores flush their host walk caches and nested TLB
    /// when they see it and, for a host remap (a page swapped out or moved), every TLB entry of
    /// the VM, since any guest-virtual translation may depend on it ([`Driver::generation`]).
    /// The cached lines of the moved host frames are not dropped from the memory hierarchy (a
    /// timing effect only; docs/virtualization.md).
    fn drain_host_shootdowns(&mut self) {
        if !self.host.pending.is_empty() {
            if self.host.pending.iter().any(|sd| sd.tlb) {
                self.remaps += 1;
            }
            self.host.pending.clear();
            self.host_epoch += 1;
        }
        self.host.pending_flush.clear();
    }
}

/// Guest physical memory that records the blocks the guest driver allocates (its table pages),
/// so the host can back them.
struct Recording<'a> {
    inner: &'a mut dyn Frames,
    allocated: &'a mut Vec<(u64, u32)>,
}

impl Frames for Recording<'_> {
    fn alloc(&mut self, order: u32) -> Option<Pfn> {
        let p = self.inner.alloc(order)?;
        self.allocated.push((p.addr(), order));
        Some(p)
    }
    fn free(&mut self, pfn: Pfn, order: u32) -> std::result::Result<(), String> {
        self.inner.free(pfn, order)
    }
    fn free_pages(&self) -> u64 {
        self.inner.free_pages()
    }
    fn reserve_contiguous(&mut self, pages: u64, align_order: u32) -> Option<Pfn> {
        self.inner.reserve_contiguous(pages, align_order)
    }
    fn total_pages(&self) -> u64 {
        self.inner.total_pages()
    }
    fn alloc_in_range(&mut self, order: u32, lo: u64, hi: u64) -> Option<Pfn> {
        let p = self.inner.alloc_in_range(order, lo, hi)?;
        self.allocated.push((p.addr(), order));
        Some(p)
    }
}

impl<G: Driver, H: Driver> Tdb for Nested<G, H> {
    type Space = NestedSpace<G>;

    fn create_space(&mut self, asid: u16, env: &mut TdbEnv) -> Result<NestedSpace<G>> {
        Ok(NestedSpace { guest: self.guest_call(env, None, |g, env| g.create_space(asid, env))? })
    }
    fn destroy_space(&mut self, s: NestedSpace<G>, env: &mut TdbEnv) -> Result<()> {
        self.guest.destroy_space(s.guest, env)
    }
    fn find(&mut self, s: &mut NestedSpace<G>, va: u64, env: &mut TdbEnv) -> Option<TObj> {
        self.guest.find(&mut s.guest, va, env)
    }
    fn update(&mut self, s: &mut NestedSpace<G>, obj: &TObj, env: &mut TdbEnv) -> Result<()> {
        self.guest_call(env, Some((obj.pa, obj.size.bytes())), |g, env| g.update(&mut s.guest, obj, env))
    }
    fn remove(&mut self, s: &mut NestedSpace<G>, va: u64, size: PageSize, env: &mut TdbEnv) -> Option<TObj> {
        self.guest.remove(&mut s.guest, va, size, env)
    }
    fn for_each(&mut self, s: &mut NestedSpace<G>, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
        self.guest.for_each(&mut s.guest, start, end, env, f)
    }
    fn range_is_empty(&mut self, s: &mut NestedSpace<G>, start: u64, end: u64, env: &mut TdbEnv) -> bool {
        self.guest.range_is_empty(&mut s.guest, start, end, env)
    }
    fn map_range(&mut self, s: &mut NestedSpace<G>, first: &TObj, len: u64, env: &mut TdbEnv) -> Result<()> {
        self.guest_call(env, Some((first.pa, len)), |g, env| g.map_range(&mut s.guest, first, len, env))
    }
    fn table_bytes(&self, s: &NestedSpace<G>) -> u64 {
        self.guest.table_bytes(&s.guest)
    }
    fn take_stale_walk_caches(&mut self, out: &mut Vec<(u64, u64)>) {
        self.guest.take_stale_walk_caches(out)
    }
}

impl<G: Driver, H: Driver> Driver for Nested<G, H> {
    type Config = NestedConfig<G, H>;
    type WalkCache = NestedWc<G, H>;

    fn from_config(cfg: &NestedConfig<G, H>, seed: u64) -> Result<Self> {
        if cfg.host_os.memory < cfg.guest_memory + HOST_TABLE_ROOM && !cfg.host_os.swap.enabled {
            return Err(Error::config(
                "host.os.memory",
                format!(
                    "is {}, and must exceed the guest's os.memory ({}) by at least {} for the host's own tables, unless the host swaps (host.os.swap.enabled); leave it unset to size the host for the guest",
                    crate::addr::fmt_bytes(cfg.host_os.memory),
                    crate::addr::fmt_bytes(cfg.guest_memory),
                    crate::addr::fmt_bytes(HOST_TABLE_ROOM)
                ),
            ));
        }
        let mut host = Os::boot(H::from_config(&cfg.host, seed ^ 0x4057)?, &cfg.host_os, seed ^ 0x4057)?;
        let vm = host.spawn(false)?;
        debug_assert_eq!(vm, VM);
        let base = host.mmap(vm, cfg.guest_memory, MapFlags::default())?;
        host.settle();
        Ok(Nested {
            guest: G::from_config(&cfg.guest, seed)?,
            trap_cycles: cfg.host_os.fault_trap_cycles,
            back_on_guest_map: cfg.back_on_guest_map,
            allocated: Vec::new(),
            host,
            base,
            ntlb: cfg.ntlb.tlb(&cfg.host_os),
            stage2: match (cfg.ntlb.enabled, cfg.ntlb.in_l2_tlb) {
                (false, _) => Stage2::Off,
                (true, false) => Stage2::Ntlb,
                (true, true) => Stage2::L2Tlb,
            },
            l2_sizes: cfg.ntlb.cached_sizes(&cfg.host_os),
            host_epoch: 0,
            remaps: 0,
            gplan: WalkPlan::default(),
            hpa: Vec::new(),
            stats: Stats::default(),
        })
    }

    fn new_walk_cache(&self) -> NestedWc<G, H> {
        NestedWc {
            guest: self.guest.new_walk_cache(),
            host: self.host.driver.new_walk_cache(),
            ntlb: (self.stage2 == Stage2::Ntlb).then(|| Tlb::new(&self.ntlb)),
            epoch: self.host_epoch,
        }
    }

    fn walk(&mut self, s: &mut NestedSpace<G>, wc: &mut NestedWc<G, H>, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        self.walk_beside(s, wc, &mut NoSharedTlb, asid, va, plan)
    }

    /// The 2-D walk (see the module's documentation), with the core's L2 TLB for stage-2
    /// entries kept there.
    fn walk_beside<T: SharedTlb>(
        &mut self,
        s: &mut NestedSpace<G>,
        wc: &mut NestedWc<G, H>,
        l2: &mut T,
        asid: u16,
        va: u64,
        plan: &mut WalkPlan,
    ) -> Option<Translation> {
        self.sync_host_caches(wc, l2);
        self.stats.walks += 1;
        // The guest dimension: the guest driver's own walk over guest-physical tables.
        // The guest plan and the host addresses stay in `self` and are indexed there (taking
        // them out and putting them back copied the plan on every walk).
        self.gplan.clear();
        self.gplan.checked = plan.checked;
        let gt = self.guest.walk(&mut s.guest, &mut wc.guest, asid, va, &mut self.gplan);
        if self.gplan.violation.is_some() {
            plan.violation = self.gplan.violation;
        }
        plan.add_counts(&self.gplan);
        self.stats.guest_refs += self.gplan.refs.len() as u64;
        self.stats.guest_unfiltered += self.gplan.unfiltered as u64;
        // The host dimension: each guest step's references are translated (host walks in
        // parallel), then read.
        let n = self.gplan.refs.len();
        let mut step = 0u8;
        let mut i = 0;
        let mut ok = true;
        while i < n && ok {
            let gstep = self.gplan.refs[i].step;
            if self.gplan.refs.get(i + 1).is_none_or(|r| r.step != gstep) {
                // A step of one reference (every step of a radix guest): read where its host
                // translation ends.
                let r = self.gplan.refs[i];
                match self.host_translate(wc, l2, r.paddr, r.needed, step, plan) {
                    Some((a, _, next)) => {
                        plan.push(a, next, r.needed);
                        step = next.saturating_add(1);
                    }
                    None => ok = false,
                }
                i += 1;
                continue;
            }
            let mut j = i;
            self.hpa.clear();
            let mut after = step;
            while j < n && self.gplan.refs[j].step == gstep {
                let r = self.gplan.refs[j];
                match self.host_translate(wc, l2, r.paddr, r.needed, step, plan) {
                    Some((a, _, next)) => {
                        self.hpa.push(a);
                        after = after.max(next);
                    }
                    None => ok = false,
                }
                j += 1;
            }
            if ok {
                for (r, &a) in self.gplan.refs[i..j].iter().zip(&self.hpa) {
                    plan.push(a, after, r.needed);
                }
                step = after.saturating_add(1);
            }
            i = j;
        }
        let gt = gt.filter(|_| ok)?;
        // The guest frame of the data, translated by the host; the TLB entry is the smaller page.
        let gpa = gt.paddr(va);
        let (a, hsize, _) = self.host_translate(wc, l2, gpa, true, step, plan)?;
        let size = gt.size.min(hsize);
        Some(Translation { pbase: a & !size.offset_mask(), size })
    }

    fn invalidate_walk_cache(&self, wc: &mut NestedWc<G, H>, asid: u16, start: u64, end: u64) {
        self.guest.invalidate_walk_cache(&mut wc.guest, asid, start, end);
    }

    /// The guest driver's prefetch (its walk's last entry, a guest-physical address), then the
    /// host driver's for that address: the host entry the 2-D walk reads to translate the guest
    /// table page, whose host-physical address is returned. The host entry of the data page
    /// itself needs the guest entry's contents, which this prefetch is still bringing in.
    #[inline]
    fn prefetch(&self, s: &NestedSpace<G>, va: u64) -> Option<u64> {
        let gpa = self.guest.prefetch(&s.guest, va)?;
        let space = &self.host.procs.get(VM as usize)?.space;
        self.host.driver.prefetch(space, self.base + gpa)
    }

    const PREFETCHES_FRAME: bool = true;

    const PREFETCHES_LATE: bool = G::PREFETCHES_LATE;

    const HINTS_FRAME: bool = G::HINTS_FRAME;

    /// The guest driver's: the guest frame, from the guest entry the first stage brought in.
    #[inline]
    fn frame_hint(&self, s: &NestedSpace<G>, va: u64) -> Option<u64> {
        self.guest.frame_hint(&s.guest, va)
    }

    /// The guest driver's second stage (its walk is the guest dimension of the 2-D walk).
    #[inline]
    fn prefetch_late(&self, s: &NestedSpace<G>, va: u64) {
        self.guest.prefetch_late(&s.guest, va);
    }

    /// The host driver's prefetch for the guest frame `gpa`: the host entry the 2-D walk's last
    /// host walk reads, which `prefetch` could not name without the guest entry's contents. (The
    /// guest leaf's host-physical address, which the host's ground truth would give, costs a
    /// lookup that misses the host's caches more often than it saves: measured slower.)
    #[inline]
    fn prefetch_frame(&self, gpa: u64) -> Option<u64> {
        let space = &self.host.procs.get(VM as usize)?.space;
        self.host.driver.prefetch(space, self.base + gpa)
    }

    fn leaf_sizes(&self) -> &[PageSize] {
        self.guest.leaf_sizes()
    }

    fn user_va_limit(&self) -> u64 {
        self.guest.user_va_limit()
    }

    fn can_map(&self, va: u64, size: PageSize) -> Result<(), &'static str> {
        self.guest.can_map(va, size)
    }

    /// The hypervisor's background work (migrations it was asked for, khugepaged) runs at the
    /// guest's epochs; its remaps flush the VM's TLBs like any other.
    fn tick(&mut self, now_ms: f64, now_cycles: f64) -> Result<()> {
        self.host.now = now_cycles;
        self.host.tick(now_ms)?;
        self.drain_host_shootdowns();
        Ok(())
    }

    #[inline(always)]
    fn generation(&self) -> Option<u64> {
        Some(self.remaps)
    }

    fn machine_translation(&self, va: u64, t: Translation) -> Option<Translation> {
        let gpa = t.paddr(va);
        let ht = self.host.truth(VM, self.base + gpa)?;
        let size = t.size.min(ht.size);
        Some(Translation { pbase: ht.paddr(self.base + gpa) & !size.offset_mask(), size })
    }

    fn restart_metrics(&mut self) {
        // The hypervisor's OS counters restart with the guest's (sim restarts the guest OS).
        // `remaps` stays: it is the VM's TLB generation, not only a count.
        self.stats = Stats::default();
        self.host.stats = Default::default();
        self.host.cost = Default::default();
        self.host.driver.restart_metrics();
        self.guest.restart_metrics();
    }

    fn metrics(&self) -> Map<String, Value> {
        let st = &self.stats;
        let per = |a: f64, b: u64| if b == 0 { 0.0 } else { a / b as f64 };
        // Host coverage by translation size: contiguous groups count as their group's size.
        let cov = match self.host.driver.translations_by_size() {
            Some(t) => std::array::from_fn(|i| t[i] * PageSize::ALL[i].bytes()),
            None => self.host.coverage(),
        };
        let mut m = Map::new();
        m.insert("nested_walks".into(), json!(st.walks));
        m.insert("guest_refs".into(), json!(st.guest_refs));
        m.insert("host_refs".into(), json!(st.host_refs));
        m.insert("guest_refs_per_walk".into(), json!(per(st.guest_refs as f64, st.walks)));
        m.insert("host_refs_per_walk".into(), json!(per(st.host_refs as f64, st.walks)));
        m.insert("guest_refs_unfiltered".into(), json!(st.guest_unfiltered));
        m.insert("host_refs_unfiltered".into(), json!(st.host_unfiltered));
        m.insert("ept_violations".into(), json!(st.ept_violations + st.ept_violations_at_guest_map));
        m.insert("ept_violations_in_walks".into(), json!(st.ept_violations));
        m.insert("host_fault_cycles_in_walks".into(), json!(st.host_fault_cycles));
        m.insert("host_fault_cycles_at_guest_map".into(), json!(st.host_fault_cycles_at_guest_map));
        m.insert("host_remaps".into(), json!(self.remaps));
        m.insert("ntlb_lookups".into(), json!(st.ntlb_lookups));
        m.insert("ntlb_hit_rate".into(), json!(per(st.ntlb_hits as f64, st.ntlb_lookups)));
        for size in PageSize::ALL {
            m.insert(format!("host_coverage_{}", size.label().to_lowercase()), json!(cov[size.index()]));
        }
        m.insert("host_table_bytes".into(), json!(self.host.table_bytes()));
        m.insert("host_os".into(), json!(self.host.stats));
        m.insert("guest".into(), Value::Object(self.guest.metrics()));
        m
    }
}
