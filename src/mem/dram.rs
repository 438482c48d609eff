//! DRAM: channels × ranks × banks, each bank with an open-row buffer.
//!
//! The model is a latency model of an idle memory system: each access pays the row-buffer outcome of its
//! bank (hit, closed, conflict) plus the data burst and a fixed controller overhead. Queueing, bank and
//! bus contention, bandwidth limits, refresh, write-to-read turnarounds and tFAW/tRRD are not modelled;
//! what the model keeps is what translation traffic changes: which row each bank has open, so page-table
//! references that land between data references turn row hits into conflicts (Utopia §3, Fig. 8).
//!
//! # Address mapping (row : rank : bank : column-high : channel : column-low : offset)
//!
//! From the least significant bit of the physical address:
//!
//! | bits | field |
//! |---|---|
//! | 6 | byte offset in a 64 B line |
//! | 2 | low column bits: 4 lines = 256 B stay in one channel |
//! | log2(channels) | channel |
//! | log2(row_bytes / 64) - 2 | high column bits |
//! | log2(banks) | bank |
//! | log2(ranks) | rank |
//! | the rest | row |
//!
//! Interleaving channels every 256 B spreads a sequential stream over all channels at a fine grain (as
//! Intel client memory controllers are commonly reported to do) while keeping a few consecutive lines in
//! the same row; the column bits sit below the bank bits so a whole row (8 KiB by default) is a contiguous
//! run of the address space (per channel), which gives streaming code row hits. A bank is the triple
//! (channel, rank, bank); there is no bank-address hashing.
//!
//! `mapping = "champsim"` is ChampSim's instead (`src/dram_controller.cc`, `make_slicer` and the
//! `get_*` functions): from the least significant bit, byte offset in a line (6), channel, bank
//! (bank groups and banks together), column (log2(row_bytes / 64)), rank, row. Consecutive lines
//! go to different banks, and the bank bits are XORed with every bank-wide chunk of the row number,
//! the channel bit with the parity of the row number. (ChampSim swizzles bank-group and bank bits
//! separately with the same chunks, which is the same XOR on the joint field, so bank groups need
//! no key of their own.)
//!
//! # Open-page policy
//!
//! A row stays open after an access until another row of the same bank is needed. Outcome latencies:
//! row hit = tCL; closed bank (first access to the bank) = tRCD + tCL; conflict = tRP + tRCD + tCL; each
//! plus tBURST + the controller overhead, converted to core cycles with `ceil(ns × core_GHz)`.
//! Reads and writes are timed alike and both move the row buffer; writes are write-backs that the
//! hierarchy does not charge to any access, but they still close rows that later reads would have hit.

use crate::addr::LINE_SHIFT;
use crate::error::{Error, Result};

/// How a physical address selects channel, rank, bank and row (`mem.dram.mapping`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DramMapping {
    /// xlate's own: a row is a contiguous run per channel (row : rank : bank : column-high :
    /// channel : column-low : offset).
    #[default]
    RowContiguous,
    /// ChampSim's: row : rank : column : bank : channel : offset, bank and channel bits XORed
    /// with the row number.
    Champsim,
}

/// DRAM organisation and timing (the `[mem.dram]` config table).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DramConfig {
    /// Independent channels (power of two).
    pub channels: u32,
    /// Ranks per channel (power of two).
    pub ranks: u32,
    /// Banks per rank, all bank groups together (power of two).
    pub banks: u32,
    /// Row-buffer size of one bank in bytes (power of two, at least 256).
    #[serde(with = "crate::addr::bytes_serde")]
    pub row_bytes: u64,
    /// ACTIVATE to READ/WRITE delay, ns.
    pub t_rcd_ns: f64,
    /// PRECHARGE to ACTIVATE delay, ns.
    pub t_rp_ns: f64,
    /// READ to first data (CAS latency), ns.
    pub t_cl_ns: f64,
    /// Time to transfer one 64 B line on the data bus, ns.
    pub t_burst_ns: f64,
    /// Fixed memory-controller overhead per access, ns.
    pub controller_ns: f64,
    /// Every access costs this many core cycles, whatever the row buffer holds (EMT's analytical
    /// model: a flat 200). 0 = the row-buffer timings above. Row outcomes are counted either way.
    pub fixed_cycles: u32,
    /// Address mapping (see the module doc).
    pub mapping: DramMapping,
}

impl Default for DramConfig {
    /// DDR4-3200 as in Utopia MICRO'23 Table 1 ("32 GB, DDR4-3200, tRCD = 12.5 ns, tCL = 12.5 ns").
    fn default() -> Self {
        DramConfig {
            // Assumption: Table 1 gives no organisation; 2 channels × 1 rank is the common desktop/server
            // DDR4 build of the Sniper-era configurations.
            channels: 2,
            ranks: 1,
            // DDR4 x8 devices: 4 bank groups × 4 banks (JESD79-4).
            banks: 16,
            // 8 KiB per rank row: 1 KiB page per x8 device × 8 devices (JESD79-4 page size for 8 Gb x8).
            row_bytes: 8 << 10,
            // Utopia MICRO'23 Table 1.
            t_rcd_ns: 12.5,
            // Utopia MICRO'23 Table 1 as restated in reference/parameters.md: the extracted paper text
            // reads "2.5 ns", which no DDR4-3200 speed bin has; 12.5 ns = 20 tCK at 1600 MHz, like tRCD and
            // tCL (the DDR4-3200W 20-20-20 bin).
            t_rp_ns: 12.5,
            // Utopia MICRO'23 Table 1.
            t_cl_ns: 12.5,
            // BL8 on a 1600 MHz DDR bus: 8 transfers = 4 clocks × 0.625 ns (64 B over a 64-bit channel).
            t_burst_ns: 2.5,
            // Assumption (no source): request/response pass through the controller front end and PHY of an
            // idle controller. Real idle load-to-use latencies are larger because of on-chip network and
            // queueing, which xlate does not model.
            controller_ns: 5.0,
            fixed_cycles: 0,
            mapping: DramMapping::RowContiguous,
        }
    }
}

impl DramConfig {
    /// Checks the organisation and timings; `key` is the config path of this table (`"mem.dram"`).
    pub fn validate(&self, key: &str) -> Result<()> {
        for (name, v) in [("channels", self.channels), ("ranks", self.ranks), ("banks", self.banks)] {
            if !v.is_power_of_two() {
                return Err(Error::config(
                    format!("{key}.{name}"),
                    format!("must be a power of two, at least 1 (got {v}); address bits select it"),
                ));
            }
        }
        // Documented bound (docs/robustness.md): one open-row slot per bank of the machine.
        let total = u64::from(self.channels) * u64::from(self.ranks) * u64::from(self.banks);
        if total > 1 << 16 {
            return Err(Error::config(format!("{key}.channels"), format!("channels × ranks × banks must be at most 65536 (got {total})")));
        }
        if !self.row_bytes.is_power_of_two() || self.row_bytes < 256 {
            return Err(Error::config(
                format!("{key}.row_bytes"),
                format!("must be a power of two of at least 256 bytes (got {})", self.row_bytes),
            ));
        }
        let bits = self.channels.trailing_zeros() + self.ranks.trailing_zeros() + self.banks.trailing_zeros();
        if self.row_bytes.trailing_zeros() + bits >= 48 {
            return Err(Error::config(
                format!("{key}.row_bytes"),
                "row_bytes × channels × ranks × banks must be below 2^48 bytes (leave bits for the row)",
            ));
        }
        for (name, v) in [
            ("t_rcd_ns", self.t_rcd_ns),
            ("t_rp_ns", self.t_rp_ns),
            ("t_cl_ns", self.t_cl_ns),
            ("t_burst_ns", self.t_burst_ns),
            ("controller_ns", self.controller_ns),
        ] {
            if !(v.is_finite() && (0.0..1e6).contains(&v)) {
                return Err(Error::config(format!("{key}.{name}"), format!("must be a finite time in ns, 0 <= t < 1e6 (got {v})")));
            }
        }
        Ok(())
    }
}

/// DRAM counters, each split data / translation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DramStats {
    /// Line reads (cache fills) for data.
    pub data_reads: u64,
    /// Line reads for translation structures.
    pub translation_reads: u64,
    /// Line writes (dirty evictions from the LLC) of data lines.
    pub data_writes: u64,
    /// Line writes of translation lines (page-table entries whose accessed/dirty bits were set).
    pub translation_writes: u64,
    /// Accesses (reads and writes) that found their row open.
    pub data_row_hits: u64,
    /// Translation accesses that found their row open.
    pub translation_row_hits: u64,
    /// Data accesses to a bank with no open row.
    pub data_row_misses: u64,
    /// Translation accesses to a bank with no open row.
    pub translation_row_misses: u64,
    /// Data accesses that had to close another row first.
    pub data_row_conflicts: u64,
    /// Translation accesses that had to close another row first.
    pub translation_row_conflicts: u64,
}

impl DramStats {
    /// Adds `o` into `self` (the channels of a multi-socket machine).
    pub fn add(&mut self, o: &DramStats) {
        self.data_reads += o.data_reads;
        self.translation_reads += o.translation_reads;
        self.data_writes += o.data_writes;
        self.translation_writes += o.translation_writes;
        self.data_row_hits += o.data_row_hits;
        self.translation_row_hits += o.translation_row_hits;
        self.data_row_misses += o.data_row_misses;
        self.translation_row_misses += o.translation_row_misses;
        self.data_row_conflicts += o.data_row_conflicts;
        self.translation_row_conflicts += o.translation_row_conflicts;
    }
}

/// Row-buffer outcome of one access; the discriminant indexes `Dram::cycles` and the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Hit = 0,
    Closed = 1,
    Conflict = 2,
}

/// Marks a bank with no open row.
const NO_ROW: u64 = u64::MAX;

/// Low column bits kept below the channel bits: 2 bits of lines = 256 B channel-interleave granularity.
const COL_LO_BITS: u32 = 2;

/// The DRAM model. See the module doc for mapping and timing.
#[derive(Clone, Debug)]
pub struct Dram {
    /// Open row per bank, indexed `(channel × ranks + rank) × banks + bank`; `NO_ROW` if closed.
    open_row: Vec<u64>,
    ch_shift: u32,
    ch_mask: u64,
    bank_shift: u32,
    bank_mask: u64,
    rank_shift: u32,
    rank_mask: u64,
    row_shift: u32,
    rank_bits: u32,
    bank_bits: u32,
    /// ChampSim's bank/channel XOR with the row number.
    swizzle: bool,
    /// Core cycles of a row hit, closed-bank access and conflict.
    cycles: [u32; 3],
    /// `[outcome][translation]` counters.
    outcomes: [[u64; 2]; 3],
    reads: [u64; 2],
    writes: [u64; 2],
}

/// `ns` at `ghz` in whole core cycles, rounded up. The tiny slack keeps exact products such as
/// 15 ns × 2.6 GHz = 39 from rounding up to 40 through floating-point error.
fn to_cycles(ns: f64, ghz: f64) -> u32 {
    let c = (ns * ghz - 1e-9).ceil();
    if c <= 0.0 {
        0
    } else {
        c as u32
    }
}

impl Dram {
    /// All banks closed. `cfg` must have passed [`DramConfig::validate`]; `core_ghz` (> 0) converts
    /// nanoseconds to core cycles.
    pub fn new(cfg: &DramConfig, core_ghz: f64) -> Self {
        assert!(core_ghz.is_finite() && core_ghz > 0.0, "core frequency must be positive (got {core_ghz} GHz)");
        let ch_bits = cfg.channels.trailing_zeros();
        let rank_bits = cfg.ranks.trailing_zeros();
        let bank_bits = cfg.banks.trailing_zeros();
        let col_bits = (cfg.row_bytes >> LINE_SHIFT).trailing_zeros();
        debug_assert!(col_bits >= COL_LO_BITS, "unvalidated DRAM config: {cfg:?}");
        let swizzle = cfg.mapping == DramMapping::Champsim;
        let (ch_shift, bank_shift, rank_shift) = if swizzle {
            (LINE_SHIFT, LINE_SHIFT + ch_bits, LINE_SHIFT + ch_bits + bank_bits + col_bits)
        } else {
            let ch_shift = LINE_SHIFT + COL_LO_BITS;
            let bank_shift = ch_shift + ch_bits + (col_bits - COL_LO_BITS);
            (ch_shift, bank_shift, bank_shift + bank_bits)
        };
        let row_shift = rank_shift + rank_bits;
        let hit = cfg.t_cl_ns + cfg.t_burst_ns + cfg.controller_ns;
        Dram {
            open_row: vec![NO_ROW; (cfg.channels * cfg.ranks * cfg.banks) as usize],
            ch_shift,
            ch_mask: (1u64 << ch_bits) - 1,
            bank_shift,
            bank_mask: (1u64 << bank_bits) - 1,
            rank_shift,
            rank_mask: (1u64 << rank_bits) - 1,
            row_shift,
            rank_bits,
            bank_bits,
            swizzle,
            cycles: if cfg.fixed_cycles > 0 {
                [cfg.fixed_cycles; 3]
            } else {
                [to_cycles(hit, core_ghz), to_cycles(cfg.t_rcd_ns + hit, core_ghz), to_cycles(cfg.t_rp_ns + cfg.t_rcd_ns + hit, core_ghz)]
            },
            outcomes: [[0; 2]; 3],
            reads: [0; 2],
            writes: [0; 2],
        }
    }

    /// Flat bank index and row of `paddr`.
    #[inline(always)]
    fn locate(&self, paddr: u64) -> (usize, u64) {
        let mut ch = (paddr >> self.ch_shift) & self.ch_mask;
        let rank = (paddr >> self.rank_shift) & self.rank_mask;
        let mut bank = (paddr >> self.bank_shift) & self.bank_mask;
        let row = paddr >> self.row_shift;
        if self.swizzle {
            if self.bank_bits > 0 {
                let mut r = row;
                while r != 0 {
                    bank ^= r & self.bank_mask;
                    r >>= self.bank_bits;
                }
            }
            ch ^= (row.count_ones() as u64 & 1) & self.ch_mask;
        }
        let idx = (((ch << self.rank_bits) | rank) << self.bank_bits) | bank;
        (idx as usize, row)
    }

    /// One 64 B access at `paddr`; returns its latency in core cycles and leaves the row open.
    #[inline]
    pub fn access(&mut self, paddr: u64, translation: bool, write: bool) -> u32 {
        let t = translation as usize;
        let (bank, row) = self.locate(paddr);
        let open = &mut self.open_row[bank];
        let outcome = if *open == row {
            Outcome::Hit
        } else if *open == NO_ROW {
            Outcome::Closed
        } else {
            Outcome::Conflict
        };
        *open = row;
        self.outcomes[outcome as usize][t] += 1;
        if write {
            self.writes[t] += 1;
        } else {
            self.reads[t] += 1;
        }
        self.cycles[outcome as usize]
    }

    /// Counters since construction or the last [`Dram::reset_stats`].
    pub fn stats(&self) -> DramStats {
        let o = &self.outcomes;
        DramStats {
            data_reads: self.reads[0],
            translation_reads: self.reads[1],
            data_writes: self.writes[0],
            translation_writes: self.writes[1],
            data_row_hits: o[Outcome::Hit as usize][0],
            translation_row_hits: o[Outcome::Hit as usize][1],
            data_row_misses: o[Outcome::Closed as usize][0],
            translation_row_misses: o[Outcome::Closed as usize][1],
            data_row_conflicts: o[Outcome::Conflict as usize][0],
            translation_row_conflicts: o[Outcome::Conflict as usize][1],
        }
    }

    /// Zeroes the counters; open rows stay open.
    pub fn reset_stats(&mut self) {
        self.outcomes = [[0; 2]; 3];
        self.reads = [0; 2];
        self.writes = [0; 2];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Default mapping: offset 0-5, column-low 6-7, channel 8, column-high 9-13, bank 14-17, row 18+.
    const CHANNEL: u64 = 1 << 8;
    const BANK: u64 = 1 << 14;
    const ROW: u64 = 1 << 18;

    fn dram(ghz: f64) -> Dram {
        let cfg = DramConfig::default();
        cfg.validate("mem.dram").unwrap();
        Dram::new(&cfg, ghz)
    }

    #[test]
    fn latencies_follow_the_formula() {
        // At 2 GHz: hit = (12.5 + 2.5 + 5) × 2 = 40; closed = +12.5 ns = 65; conflict = +12.5 ns = 90.
        assert_eq!(dram(2.0).cycles, [40, 65, 90]);
        // At Utopia's 2.6 GHz: 20 ns → 52, 32.5 ns → 84.5 → 85, 45 ns → 117.
        assert_eq!(dram(2.6).cycles, [52, 85, 117]);
        assert_eq!(to_cycles(15.0, 2.6), 39);
    }

    #[test]
    fn fixed_latency_ignores_the_row_buffer_but_counts_it() {
        let cfg = DramConfig { fixed_cycles: 200, ..DramConfig::default() };
        let mut d = Dram::new(&cfg, 2.6);
        assert_eq!(d.access(0, false, false), 200, "closed");
        assert_eq!(d.access(64, false, false), 200, "hit");
        assert_eq!(d.access(ROW, true, false), 200, "conflict");
        let s = d.stats();
        assert_eq!((s.data_row_hits, s.translation_row_conflicts), (1, 1));
    }

    #[test]
    fn row_buffer_outcomes() {
        let mut d = dram(2.0);
        assert_eq!(d.access(0, false, false), 65, "first access to a bank: closed");
        assert_eq!(d.access(64, false, false), 40, "same row: hit");
        assert_eq!(d.access(8 * 64 * 4, false, false), 40, "column-high bits stay in the row");
        assert_eq!(d.access(ROW, true, false), 90, "other row, same bank: conflict");
        assert_eq!(d.access(0, false, true), 90, "and back: conflict again");
        assert_eq!(d.access(BANK, true, false), 65, "another bank starts closed");
        assert_eq!(d.access(CHANNEL, false, false), 65, "the same bank number on the other channel is another bank");
        assert_eq!(d.access(ROW + BANK, true, false), 90);
        let s = d.stats();
        assert_eq!(
            s,
            DramStats {
                data_reads: 4,
                translation_reads: 3,
                data_writes: 1,
                translation_writes: 0,
                data_row_hits: 2,
                translation_row_hits: 0,
                data_row_misses: 2,
                translation_row_misses: 1,
                data_row_conflicts: 1,
                translation_row_conflicts: 2,
            }
        );
        d.reset_stats();
        assert_eq!(d.stats(), DramStats::default());
        assert_eq!(d.access(ROW + BANK, false, false), 40, "rows stay open across a stats reset");
    }

    #[test]
    fn mapping_covers_every_bank() {
        let d = dram(2.0);
        let mut seen = [false; 32];
        for ch in 0..2u64 {
            for b in 0..16u64 {
                let (idx, row) = d.locate(ch * CHANNEL + b * BANK + 7 * ROW + 0x3f);
                assert_eq!(row, 7);
                seen[idx] = true;
            }
        }
        assert!(seen.iter().all(|&s| s));
        // A 16 KiB aligned block is one row in each channel's bank 0: 128 lines per row × 2 channels.
        let banks: std::collections::BTreeSet<_> = (0..256u64).map(|l| d.locate(l * 64)).collect();
        assert_eq!(banks.len(), 2);
    }

    #[test]
    fn ranks_and_other_geometries() {
        let cfg = DramConfig { channels: 4, ranks: 2, banks: 8, row_bytes: 1024, ..DramConfig::default() };
        cfg.validate("mem.dram").unwrap();
        let d = Dram::new(&cfg, 1.0);
        // offset 6, col-lo 2 (6-7), channel 2 (8-9), col-hi 2 (10-11), bank 3 (12-14), rank 1 (15), row 16+.
        assert_eq!(d.locate(1 << 8).0, 16);
        assert_eq!(d.locate(1 << 12).0, 1);
        assert_eq!(d.locate(1 << 15).0, 8);
        assert_eq!(d.locate(1 << 16), (0, 1));
        assert_eq!(d.locate(3 << 10), (0, 0));
    }

    /// ChampSim's mapping for its shipped physical_memory (1 channel, 8 bank groups × 4 banks,
    /// 1024 columns of 8 B): offset 0-5, bank 6-10, column 11-17, row 18+, bank XOR row chunks.
    #[test]
    fn champsim_mapping() {
        let cfg = DramConfig { channels: 1, banks: 32, mapping: DramMapping::Champsim, ..DramConfig::default() };
        cfg.validate("mem.dram").unwrap();
        let d = Dram::new(&cfg, 4.0);
        assert_eq!(d.locate(0x3f), (0, 0));
        // Consecutive lines go to consecutive banks; the column bits stay in the row.
        assert_eq!((0..32u64).map(|l| d.locate(l * 64).0).collect::<Vec<_>>(), (0..32).collect::<Vec<_>>());
        assert_eq!(d.locate(1 << 11), (0, 0));
        assert_eq!(d.locate(127 << 11), (0, 0));
        // Row 1 flips bank bit 0; row 0b100001 (chunks 0b00001 and 0b1) flips it twice.
        assert_eq!(d.locate(1 << 18), (1, 1));
        assert_eq!(d.locate(33 << 18), (0, 33));
        assert_eq!(d.locate((3 << 18) | (5 << 6)), (5 ^ 3, 3));
        // Two channels: the channel bit sits just above the offset and flips with the row's parity.
        let cfg = DramConfig { channels: 2, mapping: DramMapping::Champsim, ..cfg };
        let d = Dram::new(&cfg, 4.0);
        assert_eq!(d.locate(64).0, 32, "channel 1, bank 0");
        assert_eq!(d.locate(1 << 19), (32 + 1, 1), "row 1: odd parity flips the channel; bank bit 0 flips");
    }

    #[test]
    fn validation_names_key() {
        let msg = |c: DramConfig| c.validate("mem.dram").unwrap_err().to_string();
        let m = msg(DramConfig { banks: 12, ..DramConfig::default() });
        assert!(m.contains("`mem.dram.banks`") && m.contains("power of two"), "{m}");
        let m = msg(DramConfig { channels: 0, ..DramConfig::default() });
        assert!(m.contains("`mem.dram.channels`"), "{m}");
        let m = msg(DramConfig { row_bytes: 128, ..DramConfig::default() });
        assert!(m.contains("`mem.dram.row_bytes`") && m.contains("at least 256"), "{m}");
        let m = msg(DramConfig { t_rp_ns: f64::NAN, ..DramConfig::default() });
        assert!(m.contains("`mem.dram.t_rp_ns`"), "{m}");
        let m = msg(DramConfig { controller_ns: -1.0, ..DramConfig::default() });
        assert!(m.contains("`mem.dram.controller_ns`"), "{m}");
    }

    #[test]
    fn config_defaults_fill_missing_keys() {
        let c: DramConfig = toml::from_str("channels = 4\nrow_bytes = \"2K\"").unwrap();
        assert_eq!(c, DramConfig { channels: 4, row_bytes: 2048, ..DramConfig::default() });
        assert!(toml::from_str::<DramConfig>("tRCD = 1.0").is_err());
    }
}
