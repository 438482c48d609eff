//! An elastic cuckoo hash table of 64-byte lines: the storage engine of ECPT's page tables (one per
//! page size) and of its cuckoo walk tables.
//!
//! - `d` ways, each a physically contiguous array of 64-byte slots taken from the buddy allocator,
//!   so every probe has a real physical address (`array base + slot × 64`).
//! - A line is found by hashing its tag once per way (a 64-bit mixing hash seeded per array) and
//!   reading that slot in each way: d probes, in parallel in hardware.
//! - Insertion is cuckoo hashing (Pagh & Rodler, J. Algorithms 2004) with a random walk: if none of
//!   the d slots is free, the line evicts the occupant of one of them (never the way it was itself
//!   just evicted from) and the evicted line is re-inserted the same way, up to `max_kicks` times.
//! - Elastic resizing (Skarlatos et al., ASPLOS'20): when one way's occupancy passes the threshold,
//!   that way gets a new array `scale` times larger; the old array stays live and its lines move
//!   over gradually, `migrate_per_step` of them each time the owner calls [`Cuckoo::migrate_step`]
//!   (EMT: on later inserts). Until the old array is empty, lookups probe both. A cuckoo insertion
//!   that exhausts its kicks also resizes (the fullest way that is not already migrating).
//!
//! Host-side, slots hold indices into an arena of lines, and each line remembers where it is, so
//! moving a line is an index swap. A slot also keeps the low 32 bits of its line's tag, so a probe
//! turns away another tag's line without reading it: the arena is large and read at random, and a
//! walk probes every way (host-side only; what the simulated walk reads does not change).
//!
//! OS work is counted through [`OsCost`]: one hash per hash computed, one read per slot inspected,
//! one write per slot written.

use crate::addr::Pfn;
use crate::error::{Error, Result};
use crate::rng::{mix64, Rng};
use crate::tapi::{OsCost, TdbEnv};

/// Line index of an empty slot.
pub const EMPTY: u32 = u32::MAX;

/// One slot of a way's array: the index of the line it holds ([`EMPTY`] if none) and the low 32
/// bits of that line's tag (module doc).
#[derive(Clone, Copy)]
struct Slot {
    id: u32,
    key: u32,
}

/// An empty slot.
const FREE: Slot = Slot { id: EMPTY, key: 0 };

/// The part of a tag a slot keeps.
#[inline(always)]
fn key_of(tag: u64) -> u32 {
    tag as u32
}

/// Bytes per slot (one cache line).
pub const LINE: u64 = 64;

/// Sizing and resizing policy of one table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// Ways (d).
    pub ways: usize,
    /// Initial slots per way.
    pub entries: u64,
    /// Occupancy of a way's array above which it is resized.
    pub threshold: f64,
    /// Growth factor of a resized way.
    pub scale: u64,
    /// Cuckoo evictions tried before an insertion resizes the table.
    pub max_kicks: u32,
    /// Lines moved from an old array per migration step (0: all at once when the resize starts).
    pub migrate_per_step: u32,
}

/// Where a line lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    /// Way (u8::MAX: never placed yet).
    pub way: u8,
    /// In the way's old array (a migration is in progress).
    pub old: bool,
    /// Slot in that array.
    pub slot: u32,
}

/// One 64-byte line: a tag, a count of valid items, and the payload.
#[derive(Clone, Debug)]
pub struct Line<P> {
    /// Tag (cluster VPN, or section group of a walk table).
    pub tag: u64,
    /// Valid items in the payload (the line is freed when it reaches 0; maintained by the owner).
    pub count: u16,
    /// Payload.
    pub data: P,
    /// Current location.
    pub loc: Loc,
}

/// One way's array of slots.
pub struct Arr {
    n: u64,
    seed: u64,
    slots: Vec<Slot>,
    used: u64,
    blocks: Vec<Pfn>,
    order: u32,
}

fn ceil_log2(x: u64) -> u32 {
    if x <= 1 {
        0
    } else {
        64 - (x - 1).leading_zeros()
    }
}

impl Arr {
    /// Allocates an array of `n` slots: one naturally aligned buddy block if possible; otherwise
    /// (fragmented memory) the smallest number of smaller blocks, flagged non-contiguous.
    fn alloc(n: u64, seed: u64, env: &mut TdbEnv) -> Result<(Arr, bool)> {
        if n == 0 || n > u32::MAX as u64 - 1 {
            return Err(Error::Check(format!("cuckoo way of {n} slots is out of range")));
        }
        let pages = (n * LINE).div_ceil(4096);
        let order = ceil_log2(pages);
        let mut chunk = order;
        loop {
            let count = pages.div_ceil(1 << chunk);
            let mut blocks = Vec::with_capacity(count as usize);
            let mut failed = false;
            for _ in 0..count {
                match env.alloc_table(chunk) {
                    Ok(p) => blocks.push(p),
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            if !failed {
                let arr = Arr { n, seed, slots: vec![FREE; n as usize], used: 0, blocks, order: chunk };
                return Ok((arr, chunk == order));
            }
            for p in blocks {
                env.free_table(p, chunk)?;
            }
            if chunk == 0 {
                return Err(Error::OutOfMemory(format!("no memory for a cuckoo way of {n} slots ({} KiB)", n * LINE / 1024)));
            }
            chunk -= 1;
        }
    }

    fn release(self, env: &mut TdbEnv) -> Result<()> {
        for p in self.blocks {
            env.free_table(p, self.order)?;
        }
        Ok(())
    }

    /// Slots hashed over.
    #[inline]
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Occupied slots.
    #[inline]
    pub fn used(&self) -> u64 {
        self.used
    }

    /// The slot `tag` hashes to (multiply-shift range reduction, so any `n` works).
    #[inline(always)]
    pub fn slot(&self, tag: u64) -> usize {
        ((mix64(tag ^ self.seed) as u128 * self.n as u128) >> 64) as usize
    }

    /// The line in `slot` if it may be tagged `tag`: the slot is full and keeps the low bits of
    /// `tag`. The caller compares the line's whole tag; a line this rejects is not `tag`'s.
    #[inline(always)]
    pub fn candidate(&self, slot: usize, tag: u64) -> Option<u32> {
        let s = self.slots[slot];
        (s.id != EMPTY && s.key == key_of(tag)).then_some(s.id)
    }

    /// Host prefetch of `slot` (a hint: changes nothing).
    #[inline(always)]
    pub fn prefetch(&self, slot: usize) {
        crate::mem::host_prefetch(&self.slots[slot]);
    }

    /// Physical address of `slot`.
    #[inline(always)]
    pub fn paddr(&self, slot: usize) -> u64 {
        let per_shift = self.order + 12 - 6; // log2(slots per block)
        let b = slot >> per_shift;
        self.blocks[b].addr() + ((slot as u64) & ((1 << per_shift) - 1)) * LINE
    }

    /// Bytes of memory allocated.
    pub fn bytes(&self) -> u64 {
        (self.blocks.len() as u64) << (self.order + 12)
    }
}

/// A way: its current array and, while it is being resized, the old one with the migration cursor.
pub struct Way {
    /// Current array (new lines go here).
    pub cur: Arr,
    /// Old array still being drained.
    pub old: Option<Arr>,
    cursor: u64,
}

impl Way {
    /// Arrays to probe: current, then old.
    #[inline]
    pub fn arrays(&self) -> impl Iterator<Item = (&Arr, bool)> {
        std::iter::once((&self.cur, false)).chain(self.old.as_ref().map(|a| (a, true)))
    }

    /// Calls `f` on the current array, then on the old one if the way is being resized: the
    /// order of [`Way::arrays`], without the chained iterator's state (the walk's hot loops).
    #[inline(always)]
    pub fn each_array(&self, mut f: impl FnMut(&Arr)) {
        f(&self.cur);
        if let Some(o) = &self.old {
            f(o);
        }
    }
}

/// Event counters of a table (taken and reset by the owner).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Cuckoo evictions.
    pub kicks: u64,
    /// Ways resized.
    pub resizes: u64,
    /// Lines moved from old arrays to current ones.
    pub moved: u64,
    /// Insertions that exhausted `max_kicks`.
    pub failures: u64,
    /// Arrays that could not be allocated contiguously.
    pub noncontiguous: u64,
}

/// An elastic cuckoo table of lines with payload `P`.
pub struct Cuckoo<P> {
    p: Params,
    seed: u64,
    gen: u64,
    ways: Vec<Way>,
    /// Arrays a lookup probes: the ways plus the old arrays being drained (every walk reads it).
    arrays: u32,
    lines: Vec<Line<P>>,
    free: Vec<u32>,
    rng: Rng,
    queue: Vec<u32>,
    track: bool,
    /// Lines that changed way since the owner last drained this (only if tracking was asked for).
    pub moved_log: Vec<u32>,
    /// Counters since the owner last took them.
    pub stats: Stats,
}

impl<P: Copy> Cuckoo<P> {
    /// A table with `p.ways` arrays of `p.entries` slots; `seed` seeds its hashes and kick choices;
    /// `track` records lines that change way in [`Cuckoo::moved_log`].
    pub fn new(p: Params, seed: u64, track: bool, env: &mut TdbEnv) -> Result<Cuckoo<P>> {
        let mut t = Cuckoo {
            p,
            seed,
            gen: 0,
            ways: Vec::with_capacity(p.ways),
            arrays: 0,
            lines: Vec::new(),
            free: Vec::new(),
            rng: Rng::new(seed ^ 0x6b69_636b),
            queue: Vec::new(),
            track,
            moved_log: Vec::new(),
            stats: Stats::default(),
        };
        for w in 0..p.ways {
            let cur = t.new_arr(w, p.entries, env)?;
            t.ways.push(Way { cur, old: None, cursor: 0 });
            t.arrays += 1;
        }
        Ok(t)
    }

    fn new_arr(&mut self, way: usize, n: u64, env: &mut TdbEnv) -> Result<Arr> {
        self.gen += 1;
        let seed = mix64(self.seed ^ mix64(((way as u64) << 48) ^ self.gen));
        let (a, contiguous) = Arr::alloc(n, seed, env)?;
        if !contiguous {
            self.stats.noncontiguous += 1;
        }
        Ok(a)
    }

    /// Frees every array.
    pub fn release(self, env: &mut TdbEnv) -> Result<()> {
        for w in self.ways {
            w.cur.release(env)?;
            if let Some(o) = w.old {
                o.release(env)?;
            }
        }
        Ok(())
    }

    /// The ways.
    #[inline]
    pub fn ways(&self) -> &[Way] {
        &self.ways
    }

    /// Number of arrays a lookup probes (ways plus old arrays being drained).
    #[inline]
    pub fn arrays(&self) -> u32 {
        debug_assert_eq!(self.arrays, self.ways.iter().map(|w| 1 + w.old.is_some() as u32).sum::<u32>());
        self.arrays
    }

    /// Whether some way is being resized.
    pub fn migrating(&self) -> bool {
        self.ways.iter().any(|w| w.old.is_some())
    }

    /// Bytes of memory held (current and old arrays).
    pub fn bytes(&self) -> u64 {
        self.ways.iter().map(|w| w.cur.bytes() + w.old.as_ref().map_or(0, |o| o.bytes())).sum()
    }

    /// Line `id`.
    #[inline(always)]
    pub fn line(&self, id: u32) -> &Line<P> {
        &self.lines[id as usize]
    }

    /// Line `id`, mutably (the owner keeps `count` right).
    #[inline]
    pub fn line_mut(&mut self, id: u32) -> &mut Line<P> {
        &mut self.lines[id as usize]
    }

    /// Every live line (host-side, uncounted: for tests and checks).
    #[cfg(test)]
    pub fn live_lines(&self) -> impl Iterator<Item = &Line<P>> {
        self.ways
            .iter()
            .flat_map(|w| w.arrays())
            .flat_map(|(a, _)| a.slots.iter().filter(|s| s.id != EMPTY))
            .map(|s| &self.lines[s.id as usize])
    }

    /// The line tagged `tag`, probing way by way (current array, then old) and stopping at the
    /// first match, as the OS's software lookup does; counts a hash and a read per probe.
    pub fn find(&self, tag: u64, cost: &mut OsCost) -> Option<u32> {
        for w in &self.ways {
            for (a, _) in w.arrays() {
                cost.hash(1);
                cost.read(1);
                if let Some(id) = a.candidate(a.slot(tag), tag) {
                    if self.lines[id as usize].tag == tag {
                        return Some(id);
                    }
                }
            }
        }
        None
    }

    /// [`Cuckoo::find`] without counting (host-side checks).
    pub fn peek(&self, tag: u64) -> Option<u32> {
        self.find(tag, &mut OsCost::default())
    }

    /// Inserts a new line (its tag must not be present) and returns its index.
    pub fn insert(&mut self, tag: u64, data: P, count: u16, env: &mut TdbEnv) -> Result<u32> {
        let line = Line { tag, count, data, loc: Loc { way: u8::MAX, old: false, slot: 0 } };
        let id = match self.free.pop() {
            Some(id) => {
                self.lines[id as usize] = line;
                id
            }
            None => {
                self.lines.push(line);
                (self.lines.len() - 1) as u32
            }
        };
        self.queue.push(id);
        self.run_queue(env)?;
        Ok(id)
    }

    /// Removes line `id` from its slot and frees it.
    pub fn remove(&mut self, id: u32, cost: &mut OsCost) {
        let loc = self.lines[id as usize].loc;
        let w = &mut self.ways[loc.way as usize];
        let a = if loc.old { w.old.as_mut().expect("line in a live old array") } else { &mut w.cur };
        debug_assert_eq!(a.slots[loc.slot as usize].id, id);
        a.slots[loc.slot as usize] = FREE;
        a.used -= 1;
        cost.write(1);
        self.lines[id as usize].loc.way = u8::MAX;
        self.free.push(id);
    }

    /// One gradual-migration step: moves up to `migrate_per_step` lines out of each old array
    /// (re-inserting them by cuckoo hashing) and frees old arrays that became empty.
    pub fn migrate_step(&mut self, env: &mut TdbEnv) -> Result<()> {
        for w in 0..self.ways.len() {
            let budget = self.p.migrate_per_step.max(1) as u64;
            let way = &mut self.ways[w];
            let Some(old) = way.old.as_mut() else { continue };
            let mut moved = 0;
            let mut c = way.cursor;
            while c < old.n && moved < budget {
                env.cost.read(1);
                let id = old.slots[c as usize].id;
                if id != EMPTY {
                    old.slots[c as usize] = FREE;
                    old.used -= 1;
                    env.cost.write(1);
                    self.queue.push(id);
                    moved += 1;
                }
                c += 1;
            }
            let done = c >= old.n;
            way.cursor = c;
            self.stats.moved += moved;
            if done {
                let o = self.ways[w].old.take().expect("checked above");
                self.arrays -= 1;
                debug_assert_eq!(o.used, 0);
                o.release(env)?;
            }
        }
        self.run_queue(env)
    }

    /// Places every queued line.
    fn run_queue(&mut self, env: &mut TdbEnv) -> Result<()> {
        while let Some(x) = self.queue.pop() {
            self.place(x, env)?;
        }
        Ok(())
    }

    /// Puts line `x` into slot `s` of way `w`'s current array; returns the line that was there.
    #[inline]
    fn put(&mut self, x: u32, w: usize, s: usize) -> u32 {
        let l = &mut self.lines[x as usize];
        let a = &mut self.ways[w].cur;
        let prev = a.slots[s].id;
        a.slots[s] = Slot { id: x, key: key_of(l.tag) };
        if prev == EMPTY {
            a.used += 1;
        }
        if self.track && l.loc.way != u8::MAX && l.loc.way as usize != w {
            self.moved_log.push(x);
        }
        l.loc = Loc { way: w as u8, old: false, slot: s as u32 };
        prev
    }

    /// Cuckoo insertion of homeless line `x` into the current arrays.
    fn place(&mut self, mut x: u32, env: &mut TdbEnv) -> Result<()> {
        let d = self.ways.len();
        let mut from = usize::MAX;
        let mut kicks = 0;
        loop {
            let tag = self.lines[x as usize].tag;
            for w in 0..d {
                env.cost.hash(1);
                env.cost.read(1);
                let a = &self.ways[w].cur;
                let s = a.slot(tag);
                if a.slots[s].id == EMPTY {
                    self.put(x, w, s);
                    env.cost.write(1);
                    return self.check_load(w, env);
                }
            }
            if kicks >= self.p.max_kicks {
                break;
            }
            // Evict from a random way other than the one `x` was just evicted from.
            let w = if d == 1 {
                0
            } else if from == usize::MAX {
                self.rng.below(d as u64) as usize
            } else {
                let r = self.rng.below(d as u64 - 1) as usize;
                if r >= from {
                    r + 1
                } else {
                    r
                }
            };
            let s = self.ways[w].cur.slot(tag);
            let victim = self.put(x, w, s);
            env.cost.write(1);
            self.stats.kicks += 1;
            kicks += 1;
            x = victim;
            from = w;
        }
        // Too many kicks: grow the fullest way not already migrating (or finish a migration and
        // grow that way), then place the homeless line again.
        self.stats.failures += 1;
        let occ = |w: &Way| w.cur.used as f64 / w.cur.n as f64;
        let pick = (0..d)
            .filter(|&w| self.ways[w].old.is_none())
            .max_by(|&a, &b| occ(&self.ways[a]).total_cmp(&occ(&self.ways[b])))
            .unwrap_or_else(|| (0..d).max_by(|&a, &b| occ(&self.ways[a]).total_cmp(&occ(&self.ways[b]))).expect("at least one way"));
        self.queue.push(x);
        self.resize(pick, env)
    }

    /// Starts a resize of way `w` if its current array is over the threshold.
    fn check_load(&mut self, w: usize, env: &mut TdbEnv) -> Result<()> {
        let a = &self.ways[w].cur;
        if a.used as f64 > self.p.threshold * a.n as f64 {
            self.resize(w, env)?;
        }
        Ok(())
    }

    /// Moves every line of way `w`'s old array (if any) to the queue and frees the array.
    fn drain(&mut self, w: usize, env: &mut TdbEnv) -> Result<()> {
        let Some(old) = self.ways[w].old.take() else { return Ok(()) };
        self.arrays -= 1;
        for c in self.ways[w].cursor..old.n {
            env.cost.read(1);
            let id = old.slots[c as usize].id;
            if id != EMPTY {
                env.cost.write(1);
                self.queue.push(id);
                self.stats.moved += 1;
            }
        }
        self.ways[w].cursor = 0;
        old.release(env)
    }

    /// Gives way `w` a new array `scale` times larger; the current one becomes the old array
    /// (finishing any migration already in progress first).
    fn resize(&mut self, w: usize, env: &mut TdbEnv) -> Result<()> {
        self.drain(w, env)?;
        let n = self.ways[w].cur.n.saturating_mul(self.p.scale);
        let new = self.new_arr(w, n, env)?;
        let old = std::mem::replace(&mut self.ways[w].cur, new);
        for s in old.slots.iter().filter(|s| s.id != EMPTY) {
            self.lines[s.id as usize].loc.old = true;
        }
        // `drain` above left the way without an old array.
        self.ways[w].old = Some(old);
        self.arrays += 1;
        self.ways[w].cursor = 0;
        self.stats.resizes += 1;
        if self.p.migrate_per_step == 0 {
            self.drain(w, env)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::phys::PhysMem;

    fn params(entries: u64) -> Params {
        Params { ways: 3, entries, threshold: 0.6, scale: 4, max_kicks: 128, migrate_per_step: 16 }
    }

    #[test]
    fn slots_have_distinct_line_addresses_inside_the_blocks() {
        let mut phys = PhysMem::new(64 << 20, 14);
        let mut cost = OsCost::default();
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let t: Cuckoo<u64> = Cuckoo::new(params(1000), 7, false, &mut env).unwrap();
        for w in t.ways() {
            let a = &w.cur;
            assert_eq!(a.bytes(), 64 << 10, "1000 lines round up to a 64 KiB block");
            let base = a.paddr(0);
            assert_eq!(base % (64 << 10), 0);
            assert_eq!(a.paddr(999), base + 999 * 64);
        }
        assert_eq!(cost.get(crate::tapi::Path::Other, crate::tapi::Func::Zero, crate::tapi::Event::Page), 3 * 16);
    }

    #[test]
    fn ways_larger_than_the_largest_buddy_block_stay_contiguous() {
        // 4 MiB of memory, largest buddy block 16 KiB: a 64 KiB way is a run of aligned blocks.
        let mut phys = PhysMem::new(4 << 20, 3);
        let mut cost = OsCost::default();
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut t: Cuckoo<u64> = Cuckoo::new(params(1024), 7, false, &mut env).unwrap();
        assert_eq!(t.stats.noncontiguous, 0, "orders above the largest are allocated as runs of blocks");
        let a = &t.ways()[0].cur;
        assert_eq!(a.paddr(1023) - a.paddr(0), 1023 * 64);
        for tag in 0..400u64 {
            t.insert(tag, tag, 1, &mut env).unwrap();
        }
        for tag in 0..400u64 {
            assert_eq!(t.line(t.peek(tag).unwrap()).data, tag);
        }
    }

    /// Every full slot keeps the low bits of its line's tag, through kicks, resizes, migration and
    /// removals; tags that share their low 32 bits are told apart by the full compare.
    #[test]
    fn slot_keys_follow_their_lines_and_twin_tags_are_told_apart() {
        let mut phys = PhysMem::new(64 << 20, 14);
        let mut cost = OsCost::default();
        let mut env = TdbEnv { phys: &mut phys, cost: &mut cost };
        let mut t: Cuckoo<u64> = Cuckoo::new(params(16), 3, false, &mut env).unwrap();
        let twin = |tag: u64| tag | 1 << 32;
        let mut ids = Vec::new();
        for tag in 0..300u64 {
            ids.push((tag, t.insert(tag, tag, 1, &mut env).unwrap()));
            ids.push((twin(tag), t.insert(twin(tag), twin(tag), 1, &mut env).unwrap()));
            t.migrate_step(&mut env).unwrap();
        }
        assert!(t.stats.resizes > 0 && t.stats.kicks > 0, "the table was exercised: {:?}", t.stats);
        let check = |t: &Cuckoo<u64>| {
            for w in t.ways() {
                for (a, _) in w.arrays() {
                    for s in a.slots.iter().filter(|s| s.id != EMPTY) {
                        assert_eq!(s.key, key_of(t.line(s.id).tag));
                    }
                }
            }
        };
        check(&t);
        for &(tag, id) in &ids {
            assert_eq!(t.peek(tag), Some(id));
        }
        for &(tag, id) in ids.iter().step_by(2) {
            t.remove(id, &mut OsCost::default());
            assert_eq!(t.peek(tag), None);
            assert_eq!(t.peek(twin(tag)).map(|i| t.line(i).data), Some(twin(tag)), "its twin stays");
        }
        check(&t);
    }
}
