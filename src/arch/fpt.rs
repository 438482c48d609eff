//! Flattened Page Table (FPT; Park et al., ASPLOS'22), as EMT (OSDI'25 §6, §8.5.2) implemented it
//! on Linux: the x86-64 radix table with pairs of adjacent levels merged into one 2 MiB node.
//!
//! A *flattened* node is an order-9 (2 MiB, 2 MiB-aligned) block from the buddy allocator holding
//! 2^18 eight-byte entries, indexed by the 18 VA bits of the two levels it merges; its entries are
//! entries of the lower of the two levels (an L4L3 node holds PDPTEs, an L3L2 node PDEs, an L2L1
//! node PTEs). Unflattened levels stay 4 KiB radix tables. Which pairs are merged is the
//! `arch.fpt.flatten` pattern:
//!
//! | pattern | nodes root → leaf (VA bits indexing each) | walk references |
//! |---|---|---|
//! | `l4l3-l2l1` (EMT's default) | L4L3 `[47:30]` → L2L1 `[29:12]` | 2 |
//! | `l3l2` (the FPT paper's Linux prototype) | L4 `[47:39]` → L3L2 `[38:21]` → L1 `[20:12]` | 3 |
//! | `l4l3` | L4L3 `[47:30]` → L2 `[29:21]` → L1 `[20:12]` | 3 |
//! | `l2l1` | L4 `[47:39]` → L3 `[38:30]` → L2L1 `[29:12]` | 3 |
//!
//! Flattening is opportunistic, as in EMT's driver: when no order-9 block is free, the node is
//! allocated as an ordinary 4 KiB table of its upper level (`arch.fpt.fallback`, default on) and the
//! level below it is then an ordinary table too. Host-side every node records its own shape (the
//! hardware's "next level flattened" bit in the parent entry), so walks, PWCs and iterators handle
//! mixed trees.
//!
//! Huge pages: a leaf lives in the node whose entry level is the leaf's level, as in radix (a 2 MiB
//! leaf is a PDE: an entry of an L3L2 node or of an L2 table; a 1 GiB leaf is a PDPTE: an entry of an
//! L4L3 node or of an L3 table). A 1 GiB leaf in an L3L2 node, whose entries are 2 MiB PDEs, is
//! written into all 512 merged entries it covers, each marked with [`UPSIZE`] so the walker — which
//! reads exactly one entry — returns a 1 GiB translation. L2L1 flattening maps 4 KiB pages only
//! (what EMT implemented and evaluated): [`Driver::can_map`] refuses 2 MiB, the OS falls back to
//! 4 KiB and counts `thp_fallback_driver`.
//!
//! Page-walk caches follow the merged levels: a PWC caches entries of one level that point to a
//! node, keyed by the VA bits selecting that (possibly merged) entry, `va >> entry_shift(level)`.
//! Of the configured `arch.fpt.pwc` levels, those whose entries are table pointers in the pattern
//! exist: `l4l3-l2l1` → 3 (the L4L3 entries); `l3l2` → 4, 2; `l4l3` → 3, 2; `l2l1` → 4, 3.
//!
//! Invariant kept by `remove`: no node other than the root is ever empty (see `radix.rs`).

use super::x86pte::{decode, default_pwcs, encode, entry_shift, leaf_level, level_size, validate_pwcs, PwcLevel, SplitPwc};
use super::x86pte::{ACCESSED, ADDR_MASK, HUGE, PRESENT, WRITE};
use super::{ArchConfig, Design, Registered};
use crate::addr::{PageSize, Pfn};
use crate::error::{Error, Result};
use crate::tapi::{Driver, TObj, Tdb, TdbEnv, Translation, WalkPlan};

/// Which adjacent radix levels are merged into 2 MiB nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Flatten {
    /// L4 + L3 (root is a 2 MiB node).
    #[serde(rename = "l4l3")]
    L4L3,
    /// L2 + L1 (4 KiB pages only).
    #[serde(rename = "l2l1")]
    L2L1,
    /// L4 + L3 and L2 + L1: two references per walk (EMT's default; 4 KiB pages only).
    #[serde(rename = "l4l3-l2l1")]
    L4L3L2L1,
    /// L3 + L2 (the FPT paper's Linux prototype).
    #[serde(rename = "l3l2")]
    L3L2,
}

impl Flatten {
    /// Whether the node whose upper level is `top` merges levels `top` and `top - 1`.
    #[inline]
    pub fn merges(self, top: u8) -> bool {
        match self {
            Flatten::L4L3 => top == 4,
            Flatten::L2L1 => top == 2,
            Flatten::L4L3L2L1 => top == 4 || top == 2,
            Flatten::L3L2 => top == 3,
        }
    }

    /// Config spelling.
    pub fn name(self) -> &'static str {
        match self {
            Flatten::L4L3 => "l4l3",
            Flatten::L2L1 => "l2l1",
            Flatten::L4L3L2L1 => "l4l3-l2l1",
            Flatten::L3L2 => "l3l2",
        }
    }

    /// Levels whose entries point to a node when every flattened node of the pattern could be
    /// allocated, root first.
    pub fn pointer_levels(self) -> Vec<u8> {
        let mut v = Vec::new();
        let mut top = 4u8;
        loop {
            let low = if self.merges(top) { top - 1 } else { top };
            if low == 1 {
                return v;
            }
            v.push(low);
            top = low - 1;
        }
    }
}

/// FPT driver configuration (`arch.fpt`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FptConfig {
    /// Flattening pattern (EMT's default: `l4l3-l2l1`; reference/parameters.md, FPT row).
    pub flatten: Flatten,
    /// Allocate an ordinary 4 KiB table when no 2 MiB block is free (EMT's driver does).
    pub fallback: bool,
    /// Split page-walk caches by entry level; only the pattern's pointer levels are built.
    /// Default: radix's (Utopia MICRO'23 Table 1: 32 entries, 4-way, 2 cycles per level).
    pub pwc: Vec<PwcLevel>,
}

impl Default for FptConfig {
    fn default() -> Self {
        FptConfig { flatten: Flatten::L4L3L2L1, fallback: true, pwc: default_pwcs() }
    }
}

impl FptConfig {
    /// Checks PWC levels (2..=4) and geometry.
    pub fn validate(&self, key: &str) -> Result<()> {
        validate_pwcs(&self.pwc, key, 4)
    }
}

/// Bit 9 of a leaf entry (ignored by x86, available to software): the leaf maps a page one level
/// larger than the node's entries (a 1 GiB page replicated over 512 merged L3L2 entries).
pub const UPSIZE: u64 = 1 << 9;

const NO_CHILD: u32 = u32::MAX;
/// Log2 of the entries of a flattened node.
const FLAT_BITS: u32 = 18;
/// Buddy order of a flattened node (2 MiB).
const FLAT_ORDER: u32 = 9;

/// Node kinds for the metrics: 4 KiB tables by level, then flattened nodes by their upper level.
const KINDS: [&str; 7] = ["l4", "l3", "l2", "l1", "l4l3", "l3l2", "l2l1"];

fn kind(top: u8, low: u8) -> usize {
    if top == low {
        (4 - top) as usize
    } else {
        (8 - top) as usize
    }
}

/// One table: a 4 KiB radix table (`top == low`) or a 2 MiB flattened node (`top == low + 1`).
struct Node {
    pfn: Pfn,
    /// Upper level covered.
    top: u8,
    /// Level of the node's entries.
    low: u8,
    /// Nodes above this one on the path from the root.
    depth: u8,
    /// `entry_shift(low)`.
    shift: u32,
    /// Entries - 1.
    mask: u64,
    /// Present entries (each replica of an upsized leaf counts).
    used: u32,
    pte: Box<[u64]>,
    /// Host id of each entry's child node; empty for leaf-only nodes (`low == 1`).
    child: Box<[u32]>,
}

impl Node {
    #[inline(always)]
    fn index(&self, va: u64) -> usize {
        ((va >> self.shift) & self.mask) as usize
    }

    #[inline(always)]
    fn is_table(&self, e: u64) -> bool {
        e & PRESENT != 0 && self.low > 1 && e & HUGE == 0
    }

    /// Size of the page mapped by present leaf entry `e`.
    #[inline(always)]
    fn leaf_size(&self, e: u64) -> PageSize {
        level_size(self.low + (e & UPSIZE != 0) as u8)
    }

    fn order(&self) -> u32 {
        if self.top != self.low {
            FLAT_ORDER
        } else {
            0
        }
    }
}

/// One address space's flattened page table.
pub struct FptSpace {
    nodes: Vec<Option<Node>>,
    free_ids: Vec<u32>,
    root: u32,
    bytes: u64,
}

impl FptSpace {
    #[inline(always)]
    fn node(&self, id: u32) -> &Node {
        self.nodes[id as usize].as_ref().expect("live FPT node")
    }
    #[inline(always)]
    fn node_mut(&mut self, id: u32) -> &mut Node {
        self.nodes[id as usize].as_mut().expect("live FPT node")
    }

    /// Flattened (2 MiB) nodes in this space.
    pub fn flattened_nodes(&self) -> usize {
        self.nodes.iter().flatten().filter(|n| n.top != n.low).count()
    }
}

/// Per-core PWCs.
pub type FptPwc = SplitPwc;

/// The FPT driver.
pub struct Fpt {
    flatten: Flatten,
    fallback: bool,
    pwc: Vec<PwcLevel>,
    sizes: &'static [PageSize],
    /// Live nodes by [`KINDS`], across spaces.
    live: [u64; KINDS.len()],
    peak_flat: u64,
    /// Flattened nodes wanted but allocated as 4 KiB tables.
    fallbacks: u64,
}

const SIZES_ALL: [PageSize; 3] = [PageSize::K4, PageSize::M2, PageSize::G1];
const SIZES_NO_2M: [PageSize; 2] = [PageSize::K4, PageSize::G1];

impl Fpt {
    /// A driver for `cfg`.
    pub fn new(cfg: &FptConfig) -> Fpt {
        Fpt {
            flatten: cfg.flatten,
            fallback: cfg.fallback,
            pwc: cfg.pwc.clone(),
            sizes: if cfg.flatten.merges(2) { &SIZES_NO_2M } else { &SIZES_ALL },
            live: [0; KINDS.len()],
            peak_flat: 0,
            fallbacks: 0,
        }
    }

    fn flat_live(&self) -> u64 {
        self.live[4..].iter().sum()
    }

    /// Allocates the node whose upper level is `top`: flattened if the pattern merges `top` with
    /// the level below and a 2 MiB block is free, else a 4 KiB table (fallback).
    fn new_node(&mut self, s: &mut FptSpace, top: u8, depth: u8, env: &mut TdbEnv) -> Result<u32> {
        let (pfn, low) = if self.flatten.merges(top) {
            match env.alloc_table(FLAT_ORDER) {
                Ok(p) => (p, top - 1),
                Err(e) if !self.fallback => return Err(e),
                Err(_) => {
                    self.fallbacks += 1;
                    (env.alloc_table(0)?, top)
                }
            }
        } else {
            (env.alloc_table(0)?, top)
        };
        let bits = if top != low { FLAT_BITS } else { 9 };
        let n = 1usize << bits;
        let node = Node {
            pfn,
            top,
            low,
            depth,
            shift: entry_shift(low),
            mask: n as u64 - 1,
            used: 0,
            pte: vec![0u64; n].into_boxed_slice(),
            child: if low > 1 { vec![NO_CHILD; n].into_boxed_slice() } else { Box::new([]) },
        };
        s.bytes += 4096 << node.order();
        self.live[kind(top, low)] += 1;
        self.peak_flat = self.peak_flat.max(self.flat_live());
        Ok(match s.free_ids.pop() {
            Some(id) => {
                s.nodes[id as usize] = Some(node);
                id
            }
            None => {
                s.nodes.push(Some(node));
                (s.nodes.len() - 1) as u32
            }
        })
    }

    fn free_node(&mut self, s: &mut FptSpace, id: u32, env: &mut TdbEnv) -> Result<()> {
        let n = s.nodes[id as usize].take().expect("live FPT node");
        s.free_ids.push(id);
        s.bytes -= 4096 << n.order();
        self.live[kind(n.top, n.low)] -= 1;
        env.free_table(n.pfn, n.order())
    }

    /// Visits every leaf of node `id` (covering VA from `base`) that starts in `[start, end)`,
    /// stepping entry by entry inside the node (EMT Fig. 8b's pointer-stepping iterator).
    #[allow(clippy::too_many_arguments)]
    fn visit(&self, s: &FptSpace, id: u32, base: u64, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
        let n = s.node(id);
        let span = 1u64 << n.shift;
        let len = n.pte.len();
        let mut i = if start > base { ((start - base) >> n.shift) as usize } else { 0 };
        while i < len {
            let va = base + ((i as u64) << n.shift);
            if va >= end {
                break;
            }
            let e = n.pte[i];
            env.cost.read(1);
            if e & PRESENT == 0 {
                i += 1;
                continue;
            }
            if n.is_table(e) {
                if va + span > start {
                    self.visit(s, n.child[i], va, start, end, env, f);
                }
                i += 1;
                continue;
            }
            let size = n.leaf_size(e);
            // An upsized leaf fills a group of entries: report it once, from its first entry.
            let group = (size.bytes() >> n.shift) as usize;
            let first = i & !(group - 1);
            let ova = base + ((first as u64) << n.shift);
            if ova >= start {
                f(&decode(e, ova, size));
            }
            i = first + group;
        }
    }

    /// Whether node `id`'s subtree has no leaf overlapping `[start, end)`.
    fn empty_in(&self, s: &FptSpace, id: u32, base: u64, start: u64, end: u64, env: &mut TdbEnv) -> bool {
        let n = s.node(id);
        let span = 1u64 << n.shift;
        let len = n.pte.len();
        let first = if start > base { ((start - base) >> n.shift) as usize } else { 0 };
        for i in first..len {
            let va = base + ((i as u64) << n.shift);
            if va >= end {
                break;
            }
            let e = n.pte[i];
            env.cost.read(1);
            if e & PRESENT == 0 {
                continue;
            }
            if !n.is_table(e) {
                return false;
            }
            // A non-root node is never empty: if the range covers the whole child, it is occupied.
            if start <= va && va + span <= end {
                return false;
            }
            if !self.empty_in(s, n.child[i], va, start, end, env) {
                return false;
            }
        }
        true
    }

    /// The node whose upper level is `top` on the path to `va`, without timing (checked mode).
    fn table_at(&self, s: &FptSpace, va: u64, top: u8) -> Option<u32> {
        let mut id = s.root;
        loop {
            let n = s.node(id);
            if n.top == top {
                return Some(id);
            }
            if n.low <= top {
                return None; // `top` is merged into this node: no node starts there
            }
            let i = n.index(va);
            if !n.is_table(n.pte[i]) {
                return None;
            }
            id = n.child[i];
        }
    }
}

impl Tdb for Fpt {
    type Space = FptSpace;

    fn create_space(&mut self, _asid: u16, env: &mut TdbEnv) -> Result<FptSpace> {
        let mut s = FptSpace { nodes: Vec::new(), free_ids: Vec::new(), root: 0, bytes: 0 };
        s.root = self.new_node(&mut s, 4, 0, env)?;
        Ok(s)
    }

    fn destroy_space(&mut self, mut s: FptSpace, env: &mut TdbEnv) -> Result<()> {
        for id in 0..s.nodes.len() as u32 {
            if s.nodes[id as usize].is_some() {
                self.free_node(&mut s, id, env)?;
            }
        }
        Ok(())
    }

    fn find(&mut self, s: &mut FptSpace, va: u64, env: &mut TdbEnv) -> Option<TObj> {
        let mut id = s.root;
        loop {
            let n = s.node(id);
            let i = n.index(va);
            let e = n.pte[i];
            env.cost.read(1);
            if e & PRESENT == 0 {
                return None;
            }
            if !n.is_table(e) {
                return Some(decode(e, va, n.leaf_size(e)));
            }
            id = n.child[i];
        }
    }

    fn update(&mut self, s: &mut FptSpace, o: &TObj, env: &mut TdbEnv) -> Result<()> {
        let t = leaf_level(o.size).ok_or_else(|| Error::Check(format!("FPT cannot map a {} page", o.size)))?;
        if let Err(why) = self.can_map(o.va, o.size) {
            return Err(Error::Check(format!("{:#x}: {why}", o.va)));
        }
        if !o.size.is_aligned(o.va) || !o.size.is_aligned(o.pa) {
            return Err(Error::Check(format!("unaligned {} mapping va {:#x} pa {:#x}", o.size, o.va, o.pa)));
        }
        // Down to the node whose entries are at or below the leaf's level.
        let mut id = s.root;
        while t < s.node(id).low {
            let n = s.node(id);
            let i = n.index(o.va);
            let e = n.pte[i];
            env.cost.read(1);
            if e & PRESENT == 0 {
                let (top, depth) = (n.low - 1, n.depth + 1);
                let child = self.new_node(s, top, depth, env)?;
                let cpfn = s.node(child).pfn;
                let n = s.node_mut(id);
                n.pte[i] = PRESENT | WRITE | (cpfn.addr() & ADDR_MASK);
                n.child[i] = child;
                n.used += 1;
                env.cost.write(1);
            } else if e & HUGE != 0 {
                return Err(Error::Check(format!("{:#x}: a larger page already maps this range", o.va)));
            }
            id = s.node(id).child[i];
        }
        let n = s.node(id);
        let group = 1usize << (9 * (t - n.low) as u32);
        let i0 = n.index(o.va);
        let mut fresh = 0;
        for &e in &n.pte[i0..i0 + group] {
            if e & PRESENT == 0 {
                fresh += 1;
            } else if n.is_table(e) {
                return Err(Error::Check(format!("{:#x}: smaller pages still map part of this {} range", o.va, o.size)));
            } else if n.leaf_size(e) != o.size {
                return Err(Error::Check(format!("{:#x}: a {} page overlaps this {} mapping", o.va, n.leaf_size(e), o.size)));
            }
        }
        env.cost.read(group as u64);
        let mut e = encode(o);
        if t > n.low {
            e |= UPSIZE;
        }
        let n = s.node_mut(id);
        n.pte[i0..i0 + group].fill(e);
        n.used += fresh;
        env.cost.write(group as u64);
        Ok(())
    }

    fn remove(&mut self, s: &mut FptSpace, va: u64, size: PageSize, env: &mut TdbEnv) -> Option<TObj> {
        let t = leaf_level(size)?;
        let va = size.align_down(va);
        let mut path = [(0u32, 0usize); 4];
        let mut depth = 0;
        let mut id = s.root;
        while t < s.node(id).low {
            let n = s.node(id);
            let i = n.index(va);
            let e = n.pte[i];
            env.cost.read(1);
            if !n.is_table(e) {
                return None; // nothing there, or a larger page
            }
            path[depth] = (id, i);
            depth += 1;
            id = n.child[i];
        }
        let n = s.node(id);
        let group = 1usize << (9 * (t - n.low) as u32);
        let i0 = n.index(va);
        let e = n.pte[i0];
        env.cost.read(1);
        if e & PRESENT == 0 || n.is_table(e) || n.leaf_size(e) != size {
            return None;
        }
        let old = decode(e, va, size);
        let n = s.node_mut(id);
        n.pte[i0..i0 + group].fill(0);
        n.used -= group as u32;
        env.cost.write(group as u64);
        // Free nodes that became empty, bottom-up (never the root).
        let mut cur = id;
        while cur != s.root && s.node(cur).used == 0 {
            depth -= 1;
            let (pid, pi) = path[depth];
            let p = s.node_mut(pid);
            p.pte[pi] = 0;
            p.child[pi] = NO_CHILD;
            p.used -= 1;
            env.cost.write(1);
            let freed = self.free_node(s, cur, env);
            debug_assert!(freed.is_ok(), "freeing an FPT node: {freed:?}");
            cur = pid;
        }
        Some(old)
    }

    fn for_each(&mut self, s: &mut FptSpace, start: u64, end: u64, env: &mut TdbEnv, f: &mut dyn FnMut(&TObj)) {
        if start < end {
            self.visit(s, s.root, 0, start, end, env, f);
        }
    }

    fn range_is_empty(&mut self, s: &mut FptSpace, start: u64, end: u64, env: &mut TdbEnv) -> bool {
        start >= end || self.empty_in(s, s.root, 0, start, end, env)
    }

    fn table_bytes(&self, s: &FptSpace) -> u64 {
        s.bytes
    }
}

impl Registered for Fpt {
    type Section = FptConfig;
    const DESIGNS: &'static [Design] = &[
        Design {
            name: "fpt-l4l3-l2l1",
            description: "FPT flattening L4+L3 and L2+L1 into 2 MiB nodes (EMT's default): 2 references per walk, 4 KiB pages",
            driver: "fpt",
            arch: |a| a.fpt.flatten = Flatten::L4L3L2L1,
            settings: &["os.thp=never"],
            nested: None,
        },
        Design {
            name: "fpt-l3l2",
            description: "FPT flattening L3+L2 into 2 MiB nodes (the FPT paper's Linux prototype), 4 KiB pages",
            driver: "fpt",
            arch: |a| a.fpt.flatten = Flatten::L3L2,
            settings: &["os.thp=never"],
            nested: None,
        },
        Design {
            name: "fpt-l4l3",
            description: "FPT flattening L4+L3 into a 2 MiB root node, 4 KiB pages",
            driver: "fpt",
            arch: |a| a.fpt.flatten = Flatten::L4L3,
            settings: &["os.thp=never"],
            nested: None,
        },
        Design {
            name: "fpt-l2l1",
            description: "FPT flattening L2+L1 into 2 MiB leaf nodes (4 KiB pages only), 4 KiB pages",
            driver: "fpt",
            arch: |a| a.fpt.flatten = Flatten::L2L1,
            settings: &["os.thp=never"],
            nested: None,
        },
        Design {
            name: "fpt-l3l2-thp",
            description: "FPT flattening L3+L2 with transparent huge pages always (2 MiB leaves in the merged node)",
            driver: "fpt",
            arch: |a| a.fpt.flatten = Flatten::L3L2,
            settings: &["os.thp=always"],
            nested: None,
        },
    ];

    fn validate(s: &FptConfig, key: &str) -> Result<()> {
        s.validate(key)
    }

    fn config(arch: &ArchConfig) -> FptConfig {
        arch.fpt.clone()
    }
}

impl Driver for Fpt {
    type Config = FptConfig;
    type WalkCache = FptPwc;

    fn from_config(cfg: &FptConfig, _seed: u64) -> Result<Self> {
        Ok(Fpt::new(cfg))
    }

    fn new_walk_cache(&self) -> FptPwc {
        let levels = self.flatten.pointer_levels();
        SplitPwc::new(&self.pwc, |l| levels.contains(&l))
    }

    #[inline]
    fn walk(&mut self, s: &mut FptSpace, wc: &mut FptPwc, asid: u16, va: u64, plan: &mut WalkPlan) -> Option<Translation> {
        let mut id = s.root;
        if let Some((l, child)) = wc.probe(asid, va, plan) {
            if plan.checked && self.table_at(s, va, l - 1) != Some(child as u32) {
                plan.violation = Some("stale page-walk-cache entry (table freed or remapped without shootdown)");
            }
            id = child as u32;
        }
        // One serial step per node; a walk without PWCs reads one entry per node on the path.
        let mut step = 0u8;
        loop {
            let n = s.node(id);
            let i = n.index(va);
            plan.push(n.pfn.addr() + (i as u64) * 8, step, true);
            step += 1;
            let e = n.pte[i];
            if e & PRESENT == 0 {
                plan.unfiltered += n.depth as u32 + 1;
                return None;
            }
            if !n.is_table(e) {
                plan.unfiltered += n.depth as u32 + 1;
                let size = n.leaf_size(e);
                // The walker sets the accessed bit of the entry it read (as radix's walk does); of
                // an upsized 1 GiB leaf's 512 replicas, that is the one `va` indexes.
                if e & ACCESSED == 0 {
                    s.node_mut(id).pte[i] = e | ACCESSED;
                }
                return Some(Translation { pbase: e & ADDR_MASK & !size.offset_mask(), size });
            }
            let child = n.child[i];
            // Below the deepest PWC hit: the probe looked this level up and missed.
            wc.fill_missed(asid, n.low, va, child as u64);
            id = child;
        }
    }

    fn invalidate_walk_cache(&self, wc: &mut FptPwc, asid: u16, start: u64, end: u64) {
        wc.invalidate(asid, start, end);
    }

    fn leaf_sizes(&self) -> &[PageSize] {
        self.sizes
    }

    fn can_map(&self, _va: u64, size: PageSize) -> Result<(), &'static str> {
        if size == PageSize::M2 && self.flatten.merges(2) {
            return Err(
                "FPT with L2L1 flattening maps 4 KiB pages only (as EMT's driver): a 2 MiB leaf would fill 512 merged L2L1 entries",
            );
        }
        if self.sizes.contains(&size) {
            Ok(())
        } else {
            Err("page size not supported by the translation structure")
        }
    }

    fn restart_metrics(&mut self) {
        // The peak and the live node counts are state, not events.
        self.fallbacks = 0;
    }

    fn metrics(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("flatten".into(), self.flatten.name().into());
        m.insert("flattened_nodes".into(), self.flat_live().into());
        m.insert("flattened_nodes_peak".into(), self.peak_flat.into());
        m.insert("flatten_fallbacks".into(), self.fallbacks.into());
        for (k, name) in KINDS.iter().enumerate() {
            let bytes = if k >= 4 { 4096u64 << FLAT_ORDER } else { 4096 };
            m.insert(format!("nodes_{name}"), self.live[k].into());
            m.insert(format!("table_bytes_{name}"), (self.live[k] * bytes).into());
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::phys::PhysMem;
    use crate::tapi::{prot, OsCost};

    const ALL: [Flatten; 4] = [Flatten::L4L3L2L1, Flatten::L3L2, Flatten::L4L3, Flatten::L2L1];

    fn driver(flatten: Flatten) -> Fpt {
        Fpt::new(&FptConfig { flatten, ..FptConfig::default() })
    }

    fn phys() -> (PhysMem, OsCost) {
        (PhysMem::new(1 << 30, 14), OsCost::default())
    }

    /// (top, low, pfn) of every node on the path to `va`, root first.
    fn path(s: &FptSpace, va: u64) -> Vec<(u8, u8, Pfn)> {
        let mut v = Vec::new();
        let mut id = s.root;
        loop {
            let n = s.node(id);
            v.push((n.top, n.low, n.pfn));
            let e = n.pte[n.index(va)];
            if !n.is_table(e) {
                return v;
            }
            id = n.child[n.index(va)];
        }
    }

    #[test]
    fn patterns_merge_the_right_levels() {
        assert_eq!(Flatten::L4L3L2L1.pointer_levels(), vec![3]);
        assert_eq!(Flatten::L3L2.pointer_levels(), vec![4, 2]);
        assert_eq!(Flatten::L4L3.pointer_levels(), vec![3, 2]);
        assert_eq!(Flatten::L2L1.pointer_levels(), vec![4, 3]);
        for f in ALL {
            let cfg: FptConfig = toml::from_str(&format!("flatten = \"{}\"", f.name())).unwrap();
            assert_eq!(cfg.flatten, f);
        }
        assert!(toml::from_str::<FptConfig>("flatten = \"l3l1\"").is_err());
    }

    /// Which VA bits index which node, and the physical address of the entry each walk step reads,
    /// computed by hand for va 0x7f12_3456_7000: L4 index 0xfe, L3 0x48, L2 0x1a2, L1 0x167.
    #[test]
    fn index_arithmetic_of_every_pattern() {
        let va = 0x7f12_3456_7000u64;
        type Steps = &'static [(u8, u8, u64)];
        let expect: [(Flatten, Steps); 4] = [
            // (top, low, byte offset of the entry inside the node)
            (Flatten::L4L3L2L1, &[(4, 3, 0x1fc48 * 8), (2, 1, 0x34567 * 8)]),
            (Flatten::L3L2, &[(4, 4, 0xfe * 8), (3, 2, 0x91a2 * 8), (1, 1, 0x167 * 8)]),
            (Flatten::L4L3, &[(4, 3, 0x1fc48 * 8), (2, 2, 0x1a2 * 8), (1, 1, 0x167 * 8)]),
            (Flatten::L2L1, &[(4, 4, 0xfe * 8), (3, 3, 0x48 * 8), (2, 1, 0x34567 * 8)]),
        ];
        for (f, nodes) in expect {
            let mut d = driver(f);
            let (mut phys, mut cost) = phys();
            let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
            let mut s = d.create_space(1, &mut env).unwrap();
            d.update(&mut s, &TObj::new(va, 0x1234_5000, PageSize::K4, prot::RW), &mut env).unwrap();
            let p = path(&s, va);
            assert_eq!(p.len(), nodes.len(), "{f:?}");
            let mut wc = d.new_walk_cache();
            let mut plan = WalkPlan::default();
            let t = d.walk(&mut s, &mut wc, 1, va + 0x123, &mut plan).unwrap();
            assert_eq!(t.paddr(va + 0x123), 0x1234_5123);
            assert_eq!(plan.refs.len(), nodes.len(), "{f:?}");
            for (k, &(top, low, off)) in nodes.iter().enumerate() {
                let (ntop, nlow, pfn) = p[k];
                assert_eq!((ntop, nlow), (top, low), "{f:?} node {k}");
                if top != low {
                    assert_eq!(pfn.addr() % (2 << 20), 0, "{f:?}: flattened node 2 MiB-aligned");
                }
                assert_eq!(plan.refs[k].paddr, pfn.addr() + off, "{f:?} entry address at node {k}");
                assert_eq!(plan.refs[k].step, k as u8);
            }
            // The neighbouring 4 KiB page lies in the same flattened L2L1 node / L1 table.
            let va2 = va + 0x1000;
            d.update(&mut s, &TObj::new(va2, 0x9000, PageSize::K4, prot::RW), &mut env).unwrap();
            plan.clear();
            d.walk(&mut s, &mut wc, 1, va2, &mut plan).unwrap();
            assert_eq!(plan.refs.last().unwrap().paddr, p.last().unwrap().2.addr() + nodes.last().unwrap().2 + 8);
        }
    }

    #[test]
    fn walks_set_the_accessed_bit() {
        for f in ALL {
            let mut d = driver(f);
            let (mut phys, mut cost) = phys();
            let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
            let mut s = d.create_space(1, &mut env).unwrap();
            let va = 0x40_0000_0000u64;
            d.update(&mut s, &TObj::new(va, 0x8000, PageSize::K4, prot::RW), &mut env).unwrap();
            d.update(&mut s, &TObj::new(va + 0x1000, 0x9000, PageSize::K4, prot::RW), &mut env).unwrap();
            assert!(!d.find(&mut s, va, &mut env).unwrap().accessed, "{f:?}");
            let mut wc = d.new_walk_cache();
            d.walk(&mut s, &mut wc, 1, va + 0x10, &mut WalkPlan::default()).unwrap();
            assert!(d.find(&mut s, va, &mut env).unwrap().accessed, "{f:?}");
            assert!(!d.find(&mut s, va + 0x1000, &mut env).unwrap().accessed, "{f:?}: only the leaf walked");
            let o = d.find(&mut s, va, &mut env).unwrap();
            d.update(&mut s, &TObj { accessed: false, ..o }, &mut env).unwrap();
            assert_eq!(d.find(&mut s, va, &mut env).unwrap(), TObj::new(va, 0x8000, PageSize::K4, prot::RW), "{f:?}");
        }
    }

    #[test]
    fn walk_lengths_cold_and_warm() {
        for (f, cold, warm) in [(Flatten::L4L3L2L1, 2, 1), (Flatten::L3L2, 3, 1), (Flatten::L4L3, 3, 1), (Flatten::L2L1, 3, 1)] {
            let mut d = driver(f);
            let (mut phys, mut cost) = phys();
            let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
            let mut s = d.create_space(1, &mut env).unwrap();
            d.update(&mut s, &TObj::new(0x40_0000_0000, 0x8000, PageSize::K4, prot::RW), &mut env).unwrap();
            d.update(&mut s, &TObj::new(0x40_0000_1000, 0x9000, PageSize::K4, prot::RW), &mut env).unwrap();
            let mut wc = d.new_walk_cache();
            let mut plan = WalkPlan::default();
            d.walk(&mut s, &mut wc, 1, 0x40_0000_0000, &mut plan).unwrap();
            assert_eq!((plan.serial_steps(), plan.refs.len() as u32, plan.unfiltered, plan.wc_hits), (cold, cold, cold, 0), "{f:?} cold");
            plan.clear();
            d.walk(&mut s, &mut wc, 1, 0x40_0000_1000, &mut plan).unwrap();
            assert_eq!((plan.serial_steps(), plan.unfiltered, plan.wc_hits), (warm, cold, 1), "{f:?} warm");
            // A shootdown of the range drops the PWC entries covering it.
            d.invalidate_walk_cache(&mut wc, 1, 0x40_0000_0000, 0x40_0000_2000);
            plan.clear();
            d.walk(&mut s, &mut wc, 1, 0x40_0000_1000, &mut plan).unwrap();
            assert_eq!(plan.serial_steps(), cold, "{f:?} after invalidation");
        }
    }

    #[test]
    fn map_find_walk_remove_every_pattern() {
        for f in ALL {
            let mut d = driver(f);
            let (mut phys, mut cost) = phys();
            let free0 = phys.free_pages();
            let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
            let mut s = d.create_space(1, &mut env).unwrap();
            let root_bytes = d.table_bytes(&s);
            assert_eq!(root_bytes, if f.merges(4) { 2 << 20 } else { 4096 }, "{f:?}");
            let mut objs = vec![
                TObj::new(0x1000, 0x5000, PageSize::K4, prot::READ),
                TObj::new(0x7f00_0020_3000, 0x6000, PageSize::K4, prot::RW),
                TObj::new(0x80_4000_0000, 0x4000_0000, PageSize::G1, prot::RW),
            ];
            if d.can_map(0, PageSize::M2).is_ok() {
                objs.push(TObj::new(0x7f00_0040_0000, 0x20_0000, PageSize::M2, prot::RW));
            }
            for o in &objs {
                d.update(&mut s, o, &mut env).unwrap();
            }
            let mut wc = d.new_walk_cache();
            for o in &objs {
                for off in [0, o.size.bytes() / 2 + 0x10, o.size.bytes() - 8] {
                    let got = d.find(&mut s, o.va + off, &mut env).unwrap_or_else(|| panic!("{f:?} {:#x}", o.va + off));
                    // The walks before set the accessed bit (walks_set_the_accessed_bit).
                    assert_eq!(TObj { accessed: false, ..got }, *o, "{f:?}");
                    let mut plan = WalkPlan { checked: true, ..WalkPlan::default() };
                    let t = d.walk(&mut s, &mut wc, 1, o.va + off, &mut plan).unwrap();
                    assert_eq!((t.paddr(o.va + off), t.size), (o.pa + off, o.size), "{f:?}");
                    assert!(plan.violation.is_none());
                }
            }
            assert!(d.find(&mut s, 0x2000, &mut env).is_none());
            let mut plan = WalkPlan::default();
            assert!(d.walk(&mut s, &mut wc, 1, 0x2000, &mut plan).is_none());
            // Overlaps are errors, never silently accepted.
            assert!(d.update(&mut s, &TObj::new(0x80_4020_0000, 0x9000, PageSize::K4, prot::RW), &mut env).is_err());
            assert!(d.update(&mut s, &TObj::new(0, 0, PageSize::G1, prot::RW), &mut env).is_err(), "{f:?}: 4K pages below");
            // Replacing a mapping of the same size in place is allowed.
            let moved = TObj::new(0x80_4000_0000, 0x8000_0000, PageSize::G1, prot::READ);
            d.update(&mut s, &moved, &mut env).unwrap();
            assert_eq!(d.find(&mut s, 0x80_7fff_f000, &mut env), Some(moved));
            // Wrong size or absent: nothing removed.
            assert!(d.remove(&mut s, 0x80_4000_0000, PageSize::M2, &mut env).is_none());
            assert!(d.remove(&mut s, 0x3000, PageSize::K4, &mut env).is_none());
            for o in objs.iter().rev() {
                let got = d.remove(&mut s, o.va, o.size, &mut env).unwrap();
                assert_eq!(got.va, o.va);
                assert!(d.find(&mut s, o.va, &mut env).is_none());
            }
            assert_eq!(d.table_bytes(&s), root_bytes, "{f:?}: emptied nodes freed, root kept");
            assert_eq!(s.nodes.iter().flatten().count(), 1);
            d.destroy_space(s, &mut env).unwrap();
            assert_eq!(phys.free_pages(), free0, "{f:?}: every table page returned");
            assert_eq!(d.live, [0; KINDS.len()]);
        }
    }

    #[test]
    fn huge_pages_in_flattened_nodes() {
        // L3L2: a 2 MiB page is one merged entry; a 1 GiB page fills the 512 it covers.
        let mut d = driver(Flatten::L3L2);
        let (mut phys, mut cost) = phys();
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut s = d.create_space(1, &mut env).unwrap();
        d.update(&mut s, &TObj::new(0x7f00_0020_0000, 0x4000_0000, PageSize::M2, prot::RW), &mut env).unwrap();
        let before = env.cost.get(crate::tapi::Path::Other, crate::tapi::Func::Lookup, crate::tapi::Event::Write);
        d.update(&mut s, &TObj::new(0x80_4000_0000, 0x8000_0000, PageSize::G1, prot::RW), &mut env).unwrap();
        let writes = env.cost.get(crate::tapi::Path::Other, crate::tapi::Func::Lookup, crate::tapi::Event::Write) - before;
        assert_eq!(writes, 1 + 512, "the L4 entry to a new L3L2 node, then 512 replicas");
        let mut wc = d.new_walk_cache();
        let mut plan = WalkPlan::default();
        let t = d.walk(&mut s, &mut wc, 1, 0x80_5234_5678, &mut plan).unwrap();
        assert_eq!((t.size, t.paddr(0x80_5234_5678)), (PageSize::G1, 0x9234_5678));
        assert_eq!(plan.refs.len(), 2, "L4, then the one merged entry");
        let p = path(&s, 0x80_5234_5678);
        assert_eq!(plan.refs[1].paddr, p[1].2.addr() + (((0x80_5234_5678u64 >> 21) & 0x3ffff) * 8));
        // A 2 MiB page inside the 1 GiB one, and a 1 GiB page over the 2 MiB one, are refused.
        assert!(d.update(&mut s, &TObj::new(0x80_4020_0000, 0x20_0000, PageSize::M2, prot::RW), &mut env).is_err());
        assert!(d.update(&mut s, &TObj::new(0x7f00_0000_0000, 0xc000_0000, PageSize::G1, prot::RW), &mut env).is_err());
        assert_eq!(d.find(&mut s, 0x80_7fff_ffff, &mut env).unwrap().size, PageSize::G1);
        let mut seen = Vec::new();
        d.for_each(&mut s, 0x80_4000_0000, 0x80_8000_0000, &mut env, &mut |o| seen.push(*o));
        assert_eq!(seen.len(), 1, "one object for 512 replicas");
        d.remove(&mut s, 0x80_4000_0000, PageSize::G1, &mut env).unwrap();
        assert!(d.find(&mut s, 0x80_5000_0000, &mut env).is_none());
        assert_eq!(s.flattened_nodes(), 1, "the node holding the 2 MiB page stays");

        // L4L3: a 1 GiB page is one entry of the merged root.
        let mut d = driver(Flatten::L4L3);
        let mut s = d.create_space(2, &mut env).unwrap();
        d.update(&mut s, &TObj::new(0x80_4000_0000, 0x8000_0000, PageSize::G1, prot::RW), &mut env).unwrap();
        d.update(&mut s, &TObj::new(0x7f00_0020_0000, 0x4000_0000, PageSize::M2, prot::RW), &mut env).unwrap();
        plan.clear();
        let mut wc = d.new_walk_cache();
        assert_eq!(d.walk(&mut s, &mut wc, 2, 0x80_4000_1000, &mut plan).unwrap().size, PageSize::G1);
        assert_eq!(plan.refs.len(), 1);
        plan.clear();
        assert_eq!(d.walk(&mut s, &mut wc, 2, 0x7f00_0020_1000, &mut plan).unwrap().size, PageSize::M2);
        assert_eq!(plan.refs.len(), 2, "L4L3 root, then the PDE in an L2 table");
    }

    #[test]
    fn l2l1_refuses_2m_pages() {
        for f in [Flatten::L2L1, Flatten::L4L3L2L1] {
            let mut d = driver(f);
            assert!(d.can_map(0x20_0000, PageSize::M2).unwrap_err().contains("4 KiB"));
            assert!(d.can_map(0x4000_0000, PageSize::G1).is_ok());
            assert!(!d.leaf_sizes().contains(&PageSize::M2));
            let (mut phys, mut cost) = phys();
            let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
            let mut s = d.create_space(1, &mut env).unwrap();
            assert!(d.update(&mut s, &TObj::new(0x20_0000, 0x20_0000, PageSize::M2, prot::RW), &mut env).is_err());
        }
        for f in [Flatten::L3L2, Flatten::L4L3] {
            assert!(driver(f).can_map(0x20_0000, PageSize::M2).is_ok());
        }
    }

    #[test]
    fn falls_back_to_4k_tables_without_2m_blocks() {
        // Memory whose every 2 MiB block is in use except one split block: no order-9 allocation.
        let mut phys = PhysMem::new(64 << 20, 14);
        let mut blocks = Vec::new();
        while let Some(p) = phys.alloc(9) {
            blocks.push(p);
        }
        phys.free(blocks.pop().unwrap(), 9).unwrap();
        phys.alloc(0).unwrap();
        assert!(phys.free_pages() > 0 && phys.free_blocks(9) == 0);
        let mut cost = OsCost::default();
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut d = driver(Flatten::L4L3L2L1);
        let mut s = d.create_space(1, &mut env).unwrap();
        let va = 0x7f12_3456_7000u64;
        d.update(&mut s, &TObj::new(va, 0x1000, PageSize::K4, prot::RW), &mut env).unwrap();
        let p: Vec<(u8, u8)> = path(&s, va).iter().map(|&(t, l, _)| (t, l)).collect();
        assert_eq!(p, vec![(4, 4), (3, 3), (2, 2), (1, 1)], "an ordinary 4-level radix path");
        assert_eq!(d.fallbacks, 2, "root and L2L1 node");
        assert_eq!(d.table_bytes(&s), 4 * 4096);
        let mut wc = d.new_walk_cache();
        let mut plan = WalkPlan { checked: true, ..WalkPlan::default() };
        assert_eq!(d.walk(&mut s, &mut wc, 1, va, &mut plan).unwrap().pbase, 0x1000);
        assert_eq!((plan.refs.len(), plan.unfiltered), (4, 4));
        assert_eq!(d.metrics()["flatten_fallbacks"], 2);
        assert_eq!(d.metrics()["nodes_l1"], 1);
        d.remove(&mut s, va, PageSize::K4, &mut env).unwrap();
        assert_eq!(d.table_bytes(&s), 4096);
        // Without fallback, the missing block is an out-of-memory error.
        let mut strict = Fpt::new(&FptConfig { fallback: false, ..FptConfig::default() });
        assert!(matches!(strict.create_space(2, &mut env), Err(Error::OutOfMemory(_))));
    }

    #[test]
    fn stale_pwc_entry_is_caught_in_checked_mode() {
        let mut d = driver(Flatten::L4L3L2L1);
        let (mut phys, mut cost) = phys();
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut s = d.create_space(1, &mut env).unwrap();
        d.update(&mut s, &TObj::new(0x4000_0000, 0x1000, PageSize::K4, prot::RW), &mut env).unwrap();
        let mut wc = d.new_walk_cache();
        let mut plan = WalkPlan { checked: true, ..WalkPlan::default() };
        d.walk(&mut s, &mut wc, 1, 0x4000_0000, &mut plan).unwrap();
        // The L2L1 node is freed; a new one for another GiB may reuse the host id.
        d.remove(&mut s, 0x4000_0000, PageSize::K4, &mut env).unwrap();
        d.update(&mut s, &TObj::new(0x8000_0000, 0x2000, PageSize::K4, prot::RW), &mut env).unwrap();
        plan.clear();
        d.walk(&mut s, &mut wc, 1, 0x4000_0000, &mut plan);
        assert!(plan.violation.is_some(), "walk through a PWC entry for a freed node");
    }

    #[test]
    fn metrics_count_nodes_by_kind() {
        let mut d = driver(Flatten::L3L2);
        let (mut phys, mut cost) = phys();
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut s = d.create_space(1, &mut env).unwrap();
        d.update(&mut s, &TObj::new(0x1000, 0x1000, PageSize::K4, prot::RW), &mut env).unwrap();
        d.update(&mut s, &TObj::new(0x80_0000_0000, 0x2000, PageSize::K4, prot::RW), &mut env).unwrap();
        let m = d.metrics();
        assert_eq!(m["flatten"], "l3l2");
        assert_eq!((m["nodes_l4"].as_u64(), m["nodes_l3l2"].as_u64(), m["nodes_l1"].as_u64()), (Some(1), Some(2), Some(2)));
        assert_eq!(m["flattened_nodes"], 2);
        assert_eq!(m["table_bytes_l3l2"], 4 << 20);
        assert_eq!(d.table_bytes(&s), 3 * 4096 + (4 << 20));
        d.remove(&mut s, 0x1000, PageSize::K4, &mut env).unwrap();
        assert_eq!(d.metrics()["flattened_nodes"], 1);
        assert_eq!(d.metrics()["flattened_nodes_peak"], 2);
    }
}
