//! ChampSim `input_instr` traces: one 64-byte little-endian record per instruction.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | ip |
//! | 8 | 1 | is_branch |
//! | 9 | 1 | branch_taken |
//! | 10 | 2 | destination_registers (u8 each) |
//! | 12 | 4 | source_registers (u8 each) |
//! | 16 | 16 | destination_memory: 2 store addresses (u64 each) |
//! | 32 | 32 | source_memory: 4 load addresses (u64 each) |
//!
//! An address of 0 is an unused slot. Reading emits, per record, an optional fetch (see
//! [`Reader::new`]), then one load per nonzero `source_memory` slot, then one store per nonzero
//! `destination_memory` slot, in slot order. ChampSim records no access sizes, so every data
//! access has size 8; cpu and asid are 0. The first access of a record carries the instructions
//! retired since the previous access (records without memory operands add to the next access's
//! count); later accesses of the same record carry 0. Instructions after the last access are not
//! attributed to any access.

use super::stream::{self, read_error, trace_err, Compression, Sink};
use super::{Access, AccessKind, AccessSink, AccessSource, BatchReader};
use crate::addr::LINE_SHIFT;
use crate::error::{Error, Result};
use crate::fsutil::PendingFile;
use std::io::{BufRead, Write};
use std::path::Path;

/// Bytes in one `input_instr` record.
pub const RECORD_BYTES: usize = 64;
/// Size given to data accesses, which ChampSim does not record.
pub const DATA_SIZE: u8 = 8;
/// Size given to synthesized instruction fetches: ChampSim records no instruction lengths, and 4
/// bytes keeps the fetch inside the line that contains the ip in all but the last 3 bytes.
pub const FETCH_SIZE: u8 = 4;

/// Records the reader holds at once.
const READ_RECORDS: usize = 4096;

/// One `input_instr` record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// Instruction pointer.
    pub ip: u64,
    /// Nonzero for branches.
    pub is_branch: u8,
    /// Nonzero for taken branches.
    pub branch_taken: u8,
    /// Registers written (0 = unused).
    pub destination_registers: [u8; 2],
    /// Registers read (0 = unused).
    pub source_registers: [u8; 4],
    /// Store addresses (0 = unused).
    pub destination_memory: [u64; 2],
    /// Load addresses (0 = unused).
    pub source_memory: [u64; 4],
}

#[inline(always)]
fn u64_at(b: &[u8; RECORD_BYTES], o: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(x)
}

impl Record {
    /// The record's 64 bytes.
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[0..8].copy_from_slice(&self.ip.to_le_bytes());
        b[8] = self.is_branch;
        b[9] = self.branch_taken;
        b[10..12].copy_from_slice(&self.destination_registers);
        b[12..16].copy_from_slice(&self.source_registers);
        for (i, a) in self.destination_memory.iter().enumerate() {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        for (i, a) in self.source_memory.iter().enumerate() {
            b[32 + 8 * i..40 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        b
    }

    /// Parses 64 record bytes; every bit pattern is a valid record.
    pub fn decode(b: &[u8; RECORD_BYTES]) -> Record {
        Record {
            ip: u64_at(b, 0),
            is_branch: b[8],
            branch_taken: b[9],
            destination_registers: [b[10], b[11]],
            source_registers: [b[12], b[13], b[14], b[15]],
            destination_memory: [u64_at(b, 16), u64_at(b, 24)],
            source_memory: [u64_at(b, 32), u64_at(b, 40), u64_at(b, 48), u64_at(b, 56)],
        }
    }
}

/// Streams a ChampSim trace.
pub struct Reader {
    path: String,
    what: &'static str,
    /// How much of the file has been read (a reader of a file, not of any `BufRead`).
    count: Option<stream::ReadCount>,
    input: Box<dyn BufRead + Send>,
    with_fetches: bool,
    /// Whole records read but not yet expanded, `buf[pos..end]`.
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    /// Stream offset of `buf[0]`.
    base: u64,
    eof: bool,
    /// Instructions since the last emitted access.
    pending: u64,
    /// Cache line of the previous record's ip (for fetches); `u64::MAX` before the first record,
    /// which no ip's line number can equal.
    prev_line: u64,
    /// Accesses of the current record not yet handed out (a record yields up to 7).
    staged: [Access; 7],
    staged_pos: usize,
    staged_len: usize,
    /// An error met after expanding some accesses, returned by the next `fill`.
    failed: Option<Error>,
}

impl Reader {
    /// Opens `path`, decompressing by suffix (`.gz`, `.xz`, `.zst`).
    pub fn open(path: &Path, with_fetches: bool) -> Result<Reader> {
        let (input, comp, count) = stream::open_counted(path)?;
        let mut r = Reader::new(input, &stream::display(path), with_fetches);
        r.what = comp.describe();
        r.count = Some(count);
        Ok(r)
    }

    /// Reads records from `input`; `path` names it in errors. With `with_fetches`, a fetch of
    /// [`FETCH_SIZE`] bytes at the record's ip precedes its data accesses whenever the ip's
    /// 64-byte line differs from the previous record's (a stand-in for the front end fetching a
    /// new line: a straight run through one line is one fetch, and every taken branch to
    /// another line is a new one).
    pub fn new(input: Box<dyn BufRead + Send>, path: &str, with_fetches: bool) -> Reader {
        Reader {
            path: path.to_string(),
            what: Compression::None.describe(),
            count: None,
            input,
            with_fetches,
            buf: vec![0u8; READ_RECORDS * RECORD_BYTES].into_boxed_slice(),
            pos: 0,
            end: 0,
            base: 0,
            eof: false,
            pending: 0,
            prev_line: u64::MAX,
            staged: [Access::default(); 7],
            staged_pos: 0,
            staged_len: 0,
            failed: None,
        }
    }

    /// Reads until the buffer holds at least one whole record or the stream ends; a partial
    /// record at the end of the stream is an error.
    fn refill(&mut self) -> Result<()> {
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        while self.end < RECORD_BYTES {
            let at = self.base + self.end as u64;
            let n = stream::read_some(&mut self.input, &mut self.buf[self.end..]).map_err(|e| read_error(&self.path, at, self.what, e))?;
            if n == 0 {
                self.eof = true;
                if self.end > 0 {
                    return Err(trace_err(
                        &self.path,
                        self.base,
                        format!("truncated input_instr record: expected {RECORD_BYTES} bytes, found {}", self.end),
                    ));
                }
                return Ok(());
            }
            self.end += n;
        }
        Ok(())
    }

    /// Expands one record into `staged`.
    #[inline]
    fn stage(&mut self, rec: &[u8; RECORD_BYTES]) {
        self.pending += 1;
        let ip = u64_at(rec, 0);
        let mut k = 0;
        let mut push = |staged: &mut [Access; 7], pending: &mut u64, kind, vaddr, size| {
            // Saturate: 4 billion instructions without a memory access do not occur in practice.
            let instrs = u32::try_from(*pending).unwrap_or(u32::MAX);
            *pending = 0;
            staged[k] = Access { cpu: 0, asid: 0, ip, vaddr, kind, size, instrs };
            k += 1;
        };
        if self.with_fetches {
            let line = ip >> LINE_SHIFT;
            if line != self.prev_line {
                push(&mut self.staged, &mut self.pending, AccessKind::Fetch, ip, FETCH_SIZE);
            }
            self.prev_line = line;
        }
        for o in [32, 40, 48, 56] {
            let a = u64_at(rec, o);
            if a != 0 {
                push(&mut self.staged, &mut self.pending, AccessKind::Load, a, DATA_SIZE);
            }
        }
        for o in [16, 24] {
            let a = u64_at(rec, o);
            if a != 0 {
                push(&mut self.staged, &mut self.pending, AccessKind::Store, a, DATA_SIZE);
            }
        }
        self.staged_pos = 0;
        self.staged_len = k;
    }
}

impl AccessSource for Reader {
    fn bytes_read(&self) -> Option<(u64, u64)> {
        self.count.as_ref().and_then(|c| c.get())
    }

    fn fill(&mut self, out: &mut [Access]) -> Result<usize> {
        self.fill_batch(out)
    }
}

impl BatchReader for Reader {
    fn kept_error(&mut self) -> &mut Option<Error> {
        &mut self.failed
    }

    /// Expands records into `out[*n..]`, advancing `*n` past every access written, also when it
    /// fails.
    fn fill_some(&mut self, out: &mut [Access], n: &mut usize) -> Result<()> {
        loop {
            let take = (self.staged_len - self.staged_pos).min(out.len() - *n);
            out[*n..*n + take].copy_from_slice(&self.staged[self.staged_pos..self.staged_pos + take]);
            self.staged_pos += take;
            *n += take;
            if *n == out.len() {
                return Ok(());
            }
            if self.end - self.pos < RECORD_BYTES {
                if self.eof {
                    return Ok(());
                }
                self.refill()?;
                continue;
            }
            let mut rec = [0u8; RECORD_BYTES];
            rec.copy_from_slice(&self.buf[self.pos..self.pos + RECORD_BYTES]);
            self.pos += RECORD_BYTES;
            self.stage(&rec);
        }
    }
}

/// Writes a ChampSim trace (for tests and `trace-convert`), compressed by suffix (`.gz`, `.xz`,
/// `.zst`, raw otherwise).
///
/// Each access becomes one record, preceded by `instrs - 1` filler records (same ip, no memory
/// operands) so instruction counts survive. An access with `instrs == 0` joins the previous
/// record when it has the same ip and a free slot that keeps the reader's loads-then-stores order;
/// otherwise it needs a record of its own, and the extra instruction is taken back from the next
/// access's fillers. Fetches are not written (ChampSim fetches are implied by the ips; read with
/// fetches to get them back), nor are accesses to address 0 (0 marks an unused slot); their
/// instructions move to the next access. ChampSim has no sizes, cpu or asid: those are lost.
pub struct Writer {
    path: String,
    out: Sink,
    /// The temporary file `out` writes, renamed to the destination by `finish`.
    pending: Option<PendingFile>,
    /// The record being filled; written when the next record starts.
    rec: Option<Record>,
    loads: usize,
    stores: usize,
    /// Instructions of skipped accesses, owed to the next written one.
    carry: u64,
    /// Instructions written beyond the stream's (records forced by `instrs == 0`).
    debt: u64,
    last_ip: u64,
}

impl Writer {
    /// Creates (or truncates) `path`.
    pub fn create(path: &Path) -> Result<Writer> {
        let (pending, file) = PendingFile::create(path)?;
        let out = Sink::create(path, file)?;
        Ok(Writer {
            path: stream::display(path),
            out,
            pending: Some(pending),
            rec: None,
            loads: 0,
            stores: 0,
            carry: 0,
            debt: 0,
            last_ip: 0,
        })
    }

    fn emit(&mut self, rec: &Record) -> Result<()> {
        self.out.write_all(&rec.encode()).map_err(|e| Error::io(&self.path, e))
    }

    fn flush_rec(&mut self) -> Result<()> {
        if let Some(rec) = self.rec.take() {
            self.emit(&rec)?;
        }
        Ok(())
    }

    /// Writes `n` records without memory operands at `ip`.
    fn fillers(&mut self, ip: u64, n: u64) -> Result<()> {
        let filler = Record { ip, ..Record::default() };
        for _ in 0..n {
            self.emit(&filler)?;
        }
        Ok(())
    }

    fn start(&mut self, a: &Access) {
        let mut rec = Record { ip: a.ip, ..Record::default() };
        (self.loads, self.stores) = (0, 0);
        self.add(&mut rec, a);
        self.rec = Some(rec);
    }

    fn add(&mut self, rec: &mut Record, a: &Access) {
        if a.kind == AccessKind::Store {
            rec.destination_memory[self.stores] = a.vaddr;
            self.stores += 1;
        } else {
            rec.source_memory[self.loads] = a.vaddr;
            self.loads += 1;
        }
    }
}

impl AccessSink for Writer {
    fn write(&mut self, a: &Access) -> Result<()> {
        if a.kind == AccessKind::Fetch || a.vaddr == 0 {
            self.carry += a.instrs as u64;
            return Ok(());
        }
        let n = self.carry + a.instrs as u64;
        self.carry = 0;
        self.last_ip = a.ip;
        if n == 0 {
            let fits = match a.kind {
                AccessKind::Store => self.stores < 2,
                _ => self.stores == 0 && self.loads < 4,
            };
            // `Option<Record>` is `Copy`: filtering a copy leaves `self.rec` in place when the
            // access does not join it.
            if let Some(mut rec) = self.rec.filter(|r| r.ip == a.ip && fits) {
                self.add(&mut rec, a);
                self.rec = Some(rec);
                return Ok(());
            }
            self.flush_rec()?;
            self.debt += 1;
            self.start(a);
            return Ok(());
        }
        self.flush_rec()?;
        let repaid = self.debt.min(n - 1);
        self.debt -= repaid;
        self.fillers(a.ip, n - 1 - repaid)?;
        self.start(a);
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        self.flush_rec()?;
        // Trailing instructions (e.g. of dropped fetches) are kept so the file's instruction
        // count matches the stream's.
        let tail = self.carry.saturating_sub(self.debt);
        self.fillers(self.last_ip, tail)?;
        let p = self.path.clone();
        self.out.finish().map_err(|e| Error::io(p, e))?;
        self.pending.take().expect("finished once").commit()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Rng, TempDir};
    use super::*;

    fn read_all(src: &mut dyn AccessSource, batch: usize) -> Result<Vec<Access>> {
        let mut out = Vec::new();
        let mut buf = vec![Access::default(); batch];
        loop {
            let n = src.fill(&mut buf)?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    /// Accesses ChampSim can represent exactly: data only, size 8, cpu/asid 0, nonzero
    /// addresses, and `instrs == 0` only for a same-ip follower that fits the record.
    fn representable(seed: u64, n: usize) -> Vec<Access> {
        let mut r = Rng::new(seed);
        let mut v: Vec<Access> = Vec::with_capacity(n);
        let (mut loads, mut stores) = (0, 0);
        let mut ip = 0x40_0000u64;
        for _ in 0..n {
            let follower = !v.is_empty() && r.below(3) == 0;
            let kind = if r.below(3) == 0 { AccessKind::Store } else { AccessKind::Load };
            let fits = match kind {
                AccessKind::Store => stores < 2,
                _ => stores == 0 && loads < 4,
            };
            let instrs = if follower && fits {
                0
            } else {
                ip = ip.wrapping_add(r.below(64)).max(1);
                (loads, stores) = (0, 0);
                let span = if r.below(10) == 0 { 100 } else { 3 };
                1 + r.below(span) as u32
            };
            if kind == AccessKind::Store {
                stores += 1;
            } else {
                loads += 1;
            }
            let vaddr = if r.below(8) == 0 { r.next() | 1 } else { 0x7ff0_0000 + r.below(1 << 24) * 8 };
            v.push(Access { cpu: 0, asid: 0, ip, vaddr, kind, size: DATA_SIZE, instrs });
        }
        v
    }

    fn round_trip(name: &str) {
        let dir = TempDir::new("champsim-rt");
        let path = dir.path(name);
        let accesses = representable(9, 30_000);
        let mut w: Box<dyn AccessSink> = Box::new(Writer::create(&path).unwrap());
        for a in &accesses {
            w.write(a).unwrap();
        }
        w.finish().unwrap();
        let back = read_all(&mut Reader::open(&path, false).unwrap(), 333).unwrap();
        assert_eq!(back.len(), accesses.len());
        for (i, (a, b)) in accesses.iter().zip(&back).enumerate() {
            assert_eq!(a, b, "access {i} of {name}");
        }
    }

    #[test]
    fn round_trip_raw() {
        round_trip("t.champsimtrace");
    }

    #[test]
    fn round_trip_gz() {
        round_trip("t.champsimtrace.gz");
    }

    #[test]
    fn round_trip_xz() {
        round_trip("t.champsimtrace.xz");
    }

    #[test]
    fn round_trip_zst() {
        round_trip("t.trace.zst");
    }

    /// Three hand-built records: two loads and a store; no operands; one store.
    fn three_records() -> Vec<u8> {
        let r1 = Record {
            ip: 0x40_1000,
            source_memory: [0x1000, 0, 0x2000, 0],
            destination_memory: [0, 0x3000],
            source_registers: [1, 2, 0, 0],
            ..Record::default()
        };
        let r2 = Record { ip: 0x40_1004, is_branch: 1, branch_taken: 1, ..Record::default() };
        let r3 = Record { ip: 0x40_2000, destination_memory: [0x4000, 0], ..Record::default() };
        [r1, r2, r3].iter().flat_map(|r| r.encode()).collect()
    }

    #[test]
    fn hand_built_records() {
        let dir = TempDir::new("champsim-hand");
        let path = dir.path("h.champsim");
        std::fs::write(&path, three_records()).unwrap();
        let acc = |ip, vaddr, kind, size, instrs| Access { cpu: 0, asid: 0, ip, vaddr, kind, size, instrs };
        use AccessKind::*;
        let got = read_all(&mut Reader::open(&path, false).unwrap(), 2).unwrap();
        let want = vec![
            acc(0x40_1000, 0x1000, Load, 8, 1),
            acc(0x40_1000, 0x2000, Load, 8, 0),
            acc(0x40_1000, 0x3000, Store, 8, 0),
            acc(0x40_2000, 0x4000, Store, 8, 2),
        ];
        assert_eq!(got, want);
        // With fetches: lines 0x40_1000 (records 1 and 2 share it) and 0x40_2000.
        let got = read_all(&mut Reader::open(&path, true).unwrap(), 1).unwrap();
        let want = vec![
            acc(0x40_1000, 0x40_1000, Fetch, 4, 1),
            acc(0x40_1000, 0x1000, Load, 8, 0),
            acc(0x40_1000, 0x2000, Load, 8, 0),
            acc(0x40_1000, 0x3000, Store, 8, 0),
            acc(0x40_2000, 0x40_2000, Fetch, 4, 2),
            acc(0x40_2000, 0x4000, Store, 8, 0),
        ];
        assert_eq!(got, want);
        // Record layout round-trips.
        let bytes = three_records();
        let mut first = [0u8; RECORD_BYTES];
        first.copy_from_slice(&bytes[..64]);
        assert_eq!(Record::decode(&first).encode(), first);
    }

    #[test]
    fn truncated_final_record() {
        let dir = TempDir::new("champsim-cut");
        for name in ["c.champsim", "c.champsim.gz"] {
            let path = dir.path(name);
            let mut bytes = three_records();
            bytes.truncate(2 * 64 + 17);
            if name.ends_with(".gz") {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(&bytes).unwrap();
                bytes = e.finish().unwrap();
            }
            std::fs::write(&path, bytes).unwrap();
            match read_all(&mut Reader::open(&path, false).unwrap(), 64).unwrap_err() {
                Error::Trace { path: p, offset, msg } => {
                    assert!(p.ends_with(name));
                    assert_eq!(offset, 128);
                    assert_eq!(msg, "truncated input_instr record: expected 64 bytes, found 17");
                }
                other => panic!("{other}"),
            }
        }
    }

    #[test]
    fn corrupt_xz_is_a_trace_error() {
        let dir = TempDir::new("champsim-xz");
        let path = dir.path("x.champsimtrace.xz");
        let mut e = xz2::write::XzEncoder::new(Vec::new(), 1);
        e.write_all(&three_records().repeat(100)).unwrap();
        let bytes = e.finish().unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let err = read_all(&mut Reader::open(&path, false).unwrap(), 64).unwrap_err();
        assert!(matches!(&err, Error::Trace { msg, .. } if msg.contains("xz stream")), "{err}");
    }

    #[test]
    fn writer_moves_fetch_instructions() {
        let dir = TempDir::new("champsim-fetch");
        let path = dir.path("f.champsim");
        let mut w: Box<dyn AccessSink> = Box::new(Writer::create(&path).unwrap());
        let f = Access { ip: 0x100, vaddr: 0x100, kind: AccessKind::Fetch, size: 4, instrs: 3, ..Access::default() };
        let l = Access { ip: 0x100, vaddr: 0x9000, kind: AccessKind::Load, size: 8, instrs: 0, ..Access::default() };
        w.write(&f).unwrap();
        w.write(&l).unwrap();
        w.write(&Access { instrs: 2, ..f }).unwrap();
        w.finish().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 5 * 64, "3 + 2 instructions");
        let got = read_all(&mut Reader::open(&path, false).unwrap(), 8).unwrap();
        assert_eq!(got, vec![Access { instrs: 3, ..l }]);
    }
}
