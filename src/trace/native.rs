//! xlate's own trace format: a fixed 64-byte header followed by a zstd-compressed body of
//! delta/varint-encoded records. `docs/trace-format.md` documents it byte by byte.
//!
//! The format is built for decode speed (the simulator replays billions of accesses): a record is
//! usually 2-4 bytes before compression, decoding is a handful of branches, and the reader
//! decompresses into one reused buffer.
//!
//! Header (little-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `XLTRACE\0` |
//! | 8 | 2 | version (1) |
//! | 10 | 2 | flags (bit 0 = complete: the writer finished and the counts are valid) |
//! | 12 | 4 | reserved, 0 |
//! | 16 | 8 | record count |
//! | 24 | 8 | instruction count (sum of `instrs` over all records) |
//! | 32 | 32 | reserved, 0 |
//!
//! Record (in the decompressed body): a tag byte, then fields in this order, present as the tag
//! says:
//!
//! - tag bits 0-1: kind (0 load, 1 store, 2 fetch; 3 is invalid);
//! - tag bits 2-4: size code `c`: size is `1 << c` for `c` in 0..=6, and `c = 7` means an explicit
//!   size byte follows;
//! - tag bit 5: `instrs` is 1 and is not stored;
//! - tag bit 6: the ip changed and its delta is stored;
//! - tag bit 7: cpu or asid changed and both are stored.
//!
//! Fields: vaddr delta (zigzag LEB128 varint, from the previous vaddr of the same class, where
//! loads and stores form one class and fetches another, so interleaved code and data addresses
//! each stay close to their own predecessor); `instrs` (LEB128 varint, unless tag bit 5); size
//! (one byte, if size code 7); ip delta (zigzag varint from the previous ip, if tag bit 6); cpu
//! and asid (u16 LE each, if tag bit 7). Every "previous" value starts at 0. Deltas use
//! wrapping 64-bit arithmetic, so every address round-trips exactly.

use super::stream::{self, read_error, trace_err, IO_BUF};
use super::{Access, AccessKind, AccessSink, AccessSource, BatchReader};
use crate::error::{Error, Result};
use crate::fsutil::PendingFile;
use std::fs::File;
use std::io::{BufRead, BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

/// The first eight bytes of every native trace.
pub const MAGIC: [u8; 8] = *b"XLTRACE\0";
/// The format version this build writes and reads.
pub const VERSION: u16 = 1;
/// Bytes in the uncompressed header; the zstd body starts right after it.
pub const HEADER_LEN: usize = 64;
/// Header flag: the writer finished, so the record and instruction counts are valid.
pub const FLAG_COMPLETE: u16 = 1;
/// The longest a record can be: tag, 10-byte vaddr varint, 5-byte instrs varint, size byte,
/// 10-byte ip varint, cpu and asid.
pub const MAX_RECORD_LEN: usize = 1 + 10 + 5 + 1 + 10 + 4;

/// zstd level of the body: level 3 compresses these records about as well as level 9 (the
/// delta coding already removed most redundancy) at several times the speed.
const ZSTD_LEVEL: i32 = 3;

const KIND_MASK: u8 = 0b11;
const SIZE_SHIFT: u32 = 2;
const SIZE_EXPLICIT: u8 = 7;
const TAG_INSTRS_ONE: u8 = 1 << 5;
const TAG_IP: u8 = 1 << 6;
const TAG_CTX: u8 = 1 << 7;

/// Bytes of decompressed body the reader holds at once.
const READ_BUF: usize = 1 << 18;
/// Encoded bytes the writer gathers before handing them to zstd, so the compressor sees large
/// writes rather than one call per record.
const WRITE_CHUNK: usize = 1 << 16;

/// The header of a native trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Format version.
    pub version: u16,
    /// Flag bits ([`FLAG_COMPLETE`]).
    pub flags: u16,
    /// Number of records in the body.
    pub records: u64,
    /// Sum of `instrs` over all records.
    pub instrs: u64,
}

impl Header {
    /// The 64 header bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&self.version.to_le_bytes());
        b[10..12].copy_from_slice(&self.flags.to_le_bytes());
        b[16..24].copy_from_slice(&self.records.to_le_bytes());
        b[24..32].copy_from_slice(&self.instrs.to_le_bytes());
        b
    }

    /// Parses and validates the first `b.len()` bytes of a file (`b` may be short when the file
    /// is); errors name `path` and the offending offset.
    pub fn parse(b: &[u8], path: &str) -> Result<Header> {
        let magic_len = b.len().min(MAGIC.len());
        if b[..magic_len] != MAGIC[..magic_len] || b.is_empty() {
            return Err(trace_err(
                path,
                0,
                format!("not an xlate trace: expected magic XLTRACE\\0, found \"{}\"", b[..magic_len].escape_ascii()),
            ));
        }
        if b.len() < HEADER_LEN {
            return Err(trace_err(path, b.len() as u64, format!("truncated header: expected {HEADER_LEN} bytes, found {}", b.len())));
        }
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u64_at = |o: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(x)
        };
        let h = Header { version: u16_at(8), flags: u16_at(10), records: u64_at(16), instrs: u64_at(24) };
        if h.version != VERSION {
            return Err(trace_err(path, 8, format!("unsupported version {}, this build reads {VERSION}", h.version)));
        }
        if h.flags & !FLAG_COMPLETE != 0 {
            return Err(trace_err(path, 10, format!("unknown header flags {:#06x}, this build knows {FLAG_COMPLETE:#06x}", h.flags)));
        }
        if h.flags & FLAG_COMPLETE == 0 {
            return Err(trace_err(
                path,
                10,
                "unfinished trace: expected the header's complete flag, which the writer sets when it \
                 finishes; the writer stopped early, so the counts and the body's end are unknown",
            ));
        }
        Ok(h)
    }
}

/// Values the next record is coded against. Shared by writer and reader so they cannot drift.
#[derive(Clone, Copy, Debug, Default)]
struct Prev {
    data: u64,
    fetch: u64,
    ip: u64,
    cpu: u16,
    asid: u16,
}

#[inline(always)]
fn zigzag(d: u64) -> u64 {
    let s = d as i64;
    ((s << 1) ^ (s >> 63)) as u64
}

#[inline(always)]
fn unzigzag(z: u64) -> u64 {
    (z >> 1) ^ 0u64.wrapping_sub(z & 1)
}

#[inline(always)]
fn put_varint(out: &mut [u8; MAX_RECORD_LEN], p: &mut usize, mut x: u64) {
    while x >= 0x80 {
        out[*p] = x as u8 | 0x80;
        *p += 1;
        x >>= 7;
    }
    out[*p] = x as u8;
    *p += 1;
}

/// Encodes `a` into `out`, returns its length, and advances `prev`.
fn encode(prev: &mut Prev, a: &Access, out: &mut [u8; MAX_RECORD_LEN]) -> usize {
    let size_code = if a.size.is_power_of_two() && a.size <= 64 { a.size.trailing_zeros() as u8 } else { SIZE_EXPLICIT };
    let mut tag = a.kind as u8 | size_code << SIZE_SHIFT;
    if a.instrs == 1 {
        tag |= TAG_INSTRS_ONE;
    }
    if a.ip != prev.ip {
        tag |= TAG_IP;
    }
    if a.cpu != prev.cpu || a.asid != prev.asid {
        tag |= TAG_CTX;
    }
    out[0] = tag;
    let mut p = 1;
    let base = if a.kind == AccessKind::Fetch { &mut prev.fetch } else { &mut prev.data };
    put_varint(out, &mut p, zigzag(a.vaddr.wrapping_sub(*base)));
    *base = a.vaddr;
    if a.instrs != 1 {
        put_varint(out, &mut p, a.instrs as u64);
    }
    if size_code == SIZE_EXPLICIT {
        out[p] = a.size;
        p += 1;
    }
    if tag & TAG_IP != 0 {
        put_varint(out, &mut p, zigzag(a.ip.wrapping_sub(prev.ip)));
        prev.ip = a.ip;
    }
    if tag & TAG_CTX != 0 {
        out[p..p + 2].copy_from_slice(&a.cpu.to_le_bytes());
        out[p + 2..p + 4].copy_from_slice(&a.asid.to_le_bytes());
        p += 4;
        prev.cpu = a.cpu;
        prev.asid = a.asid;
    }
    p
}

/// Why a record could not be decoded.
#[derive(Debug)]
enum Stop {
    /// The bytes ran out mid-record: refill, or at the end of the body, a truncated record.
    Incomplete,
    /// The record is malformed at this position relative to its start.
    Bad(usize, &'static str),
}

#[inline(always)]
fn get_varint(b: &[u8], p: &mut usize, start: usize) -> Result<u64, Stop> {
    // Most deltas fit one byte; keep that path free of the loop.
    if let Some(&c) = b.get(*p) {
        if c < 0x80 {
            *p += 1;
            return Ok(c as u64);
        }
    }
    get_varint_long(b, p, start)
}

#[inline(never)]
fn get_varint_long(b: &[u8], p: &mut usize, start: usize) -> Result<u64, Stop> {
    let mut x = 0u64;
    let mut shift = 0u32;
    loop {
        let Some(&c) = b.get(*p) else {
            return Err(Stop::Incomplete);
        };
        *p += 1;
        x |= ((c & 0x7f) as u64) << shift;
        if c < 0x80 {
            // The tenth byte may only carry bit 63.
            if shift == 63 && c > 1 {
                return Err(Stop::Bad(*p - 1 - start, "varint overflows 64 bits"));
            }
            return Ok(x);
        }
        shift += 7;
        if shift > 63 {
            return Err(Stop::Bad(*p - 1 - start, "varint longer than 10 bytes"));
        }
    }
}

/// The access kind a record tag names; `None` for the invalid kind 3.
#[inline(always)]
fn kind_of(tag: u8) -> Option<AccessKind> {
    match tag & KIND_MASK {
        0 => Some(AccessKind::Load),
        1 => Some(AccessKind::Store),
        2 => Some(AccessKind::Fetch),
        _ => None,
    }
}

/// Decodes the record starting at `b[start]`; on success returns the access and the position
/// after it, and advances `prev`. Leaves `prev` untouched on failure so the same record can be
/// decoded again after a refill.
#[inline(always)]
fn decode(b: &[u8], start: usize, prev: &mut Prev) -> Result<(Access, usize), Stop> {
    let Some(&tag) = b.get(start) else {
        return Err(Stop::Incomplete);
    };
    let mut p = start + 1;
    let Some(kind) = kind_of(tag) else {
        return Err(Stop::Bad(0, "invalid access kind 3 in record tag (expected 0 load, 1 store or 2 fetch)"));
    };
    let base = if kind == AccessKind::Fetch { prev.fetch } else { prev.data };
    let vaddr = base.wrapping_add(unzigzag(get_varint(b, &mut p, start)?));
    let instrs = if tag & TAG_INSTRS_ONE != 0 {
        1
    } else {
        let at = p - start;
        u32::try_from(get_varint(b, &mut p, start)?).map_err(|_| Stop::Bad(at, "instruction count exceeds 32 bits"))?
    };
    let size_code = (tag >> SIZE_SHIFT) & 7;
    let size = if size_code == SIZE_EXPLICIT {
        let Some(&s) = b.get(p) else {
            return Err(Stop::Incomplete);
        };
        p += 1;
        s
    } else {
        1u8 << size_code
    };
    let ip = if tag & TAG_IP != 0 { prev.ip.wrapping_add(unzigzag(get_varint(b, &mut p, start)?)) } else { prev.ip };
    let (cpu, asid) = if tag & TAG_CTX != 0 {
        let Some(c) = b.get(p..p + 4) else {
            return Err(Stop::Incomplete);
        };
        p += 4;
        (u16::from_le_bytes([c[0], c[1]]), u16::from_le_bytes([c[2], c[3]]))
    } else {
        (prev.cpu, prev.asid)
    };
    if kind == AccessKind::Fetch {
        prev.fetch = vaddr;
    } else {
        prev.data = vaddr;
    }
    prev.ip = ip;
    prev.cpu = cpu;
    prev.asid = asid;
    Ok((Access { cpu, asid, ip, vaddr, kind, size, instrs }, p))
}

/// The little-endian word of `b[p..p + 8]`.
#[inline(always)]
fn word_at(b: &[u8], p: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[p..p + 8]);
    u64::from_le_bytes(w)
}

/// The varint at the start of the little-endian word `w` and its length, if it is at most 8
/// bytes long (a value below 2^56). Branch-free: the first byte without a continuation bit ends
/// it, and the 7-bit groups are gathered pairwise, into 14-, 28- and then 56-bit lanes.
#[inline(always)]
fn varint_in_word(w: u64) -> Option<(u64, usize)> {
    // Most deltas and counts fit one byte: keep that path short.
    if w & 0x80 == 0 {
        return Some((w & 0x7f, 1));
    }
    let ends = !w & 0x8080_8080_8080_8080;
    if ends == 0 {
        return None;
    }
    let len = ends.trailing_zeros() as usize / 8 + 1;
    let x = w & (u64::MAX >> (64 - 8 * len));
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    let x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4);
    Some((x, len))
}

/// Bytes [`decode_run`] may read after a record's start: the tag, and the words of up to three
/// varints of at most 8 bytes and the size byte after it.
const FAST_READ: usize = 26;

/// Decodes records into `out` from `b[*pos]` on, like [`decode`] record after record, while each
/// starts before `end`, which leaves [`FAST_READ`] bytes after it, so no field can be cut off:
/// whole words are read, varints decoded by [`varint_in_word`], and the previous values stay in
/// registers. It stops at the first record that changes the cpu or asid, has a varint longer
/// than 8 bytes, or is malformed, which [`decode`] then takes (and names what is wrong with a
/// bad one). Returns how many it decoded and the sum of their instruction counts, and leaves
/// `*pos` and `prev` after the last. The unit test `decode_run_equals_decode` compares the two.
#[inline(always)]
fn decode_run(b: &[u8], pos: &mut usize, end: usize, prev: &mut Prev, out: &mut [Access]) -> (usize, u64) {
    let Prev { mut data, mut fetch, mut ip, cpu, asid } = *prev;
    let (mut p, mut n, mut instrs) = (*pos, 0, 0u64);
    while n < out.len() && p < end {
        let tag = b[p];
        let Some(kind) = kind_of(tag) else { break };
        if tag & TAG_CTX != 0 {
            break;
        }
        let Some((delta, len)) = varint_in_word(word_at(b, p + 1)) else { break };
        let mut q = p + 1 + len;
        let count = if tag & TAG_INSTRS_ONE != 0 {
            1
        } else {
            match varint_in_word(word_at(b, q)) {
                Some((c, len)) if c <= u64::from(u32::MAX) => {
                    q += len;
                    c as u32
                }
                _ => break,
            }
        };
        let size_code = (tag >> SIZE_SHIFT) & 7;
        let size = if size_code == SIZE_EXPLICIT {
            q += 1;
            b[q - 1]
        } else {
            1u8 << size_code
        };
        if tag & TAG_IP != 0 {
            let Some((d, len)) = varint_in_word(word_at(b, q)) else { break };
            q += len;
            ip = ip.wrapping_add(unzigzag(d));
        }
        let base = if kind == AccessKind::Fetch { &mut fetch } else { &mut data };
        *base = base.wrapping_add(unzigzag(delta));
        out[n] = Access { cpu, asid, ip, vaddr: *base, kind, size, instrs: count };
        instrs += u64::from(count);
        n += 1;
        p = q;
    }
    *pos = p;
    *prev = Prev { data, fetch, ip, cpu, asid };
    (n, instrs)
}

/// Streams a native trace. Validates the header on open and, at the end of the body, that the
/// body holds exactly the records and instructions the header promises.
pub struct Reader {
    path: String,
    header: Header,
    body: zstd::stream::read::Decoder<'static, Box<dyn BufRead + Send>>,
    /// Decompressed body bytes; `buf[pos..end]` are not decoded yet.
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    /// Body offset of `buf[0]`.
    base: u64,
    eof: bool,
    done: bool,
    prev: Prev,
    records: u64,
    instrs: u64,
    /// An error met after decoding some accesses, returned by the next `fill`.
    failed: Option<Error>,
}

impl Reader {
    /// Opens the native trace at `path`. The file is read raw when it starts with the magic, and
    /// otherwise decompressed by suffix (a `.gz`/`.xz`/`.zst` wrapped native trace also reads).
    pub fn open(path: &Path) -> Result<Reader> {
        let p = stream::display(path);
        let mut raw = stream::open_raw(path)?;
        let starts_with_magic = raw.fill_buf().map_err(|e| read_error(&p, 0, "file", e))?.starts_with(&MAGIC);
        let input = if starts_with_magic { raw } else { stream::open_decompressed(path)?.0 };
        Reader::new(input, &p)
    }

    /// Reads a native trace from `input` (already decompressed by any outer layer); `path` names
    /// it in errors.
    pub fn new(mut input: Box<dyn BufRead + Send>, path: &str) -> Result<Reader> {
        let mut hb = [0u8; HEADER_LEN];
        let n = stream::read_full(&mut input, &mut hb).map_err(|e| read_error(path, 0, "header", e))?;
        let header = Header::parse(&hb[..n], path)?;
        let body = zstd::stream::read::Decoder::with_buffer(input).map_err(|e| Error::io(path, e))?;
        Ok(Reader {
            path: path.to_string(),
            header,
            body,
            buf: vec![0u8; READ_BUF].into_boxed_slice(),
            pos: 0,
            end: 0,
            base: 0,
            eof: false,
            done: false,
            prev: Prev::default(),
            records: 0,
            instrs: 0,
            failed: None,
        })
    }

    /// The validated header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Moves the undecoded tail to the front of the buffer and reads more body after it.
    fn refill(&mut self) -> Result<()> {
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        let at = HEADER_LEN as u64 + self.base + self.end as u64;
        let n = stream::read_some(&mut self.body, &mut self.buf[self.end..]).map_err(|e| read_error(&self.path, at, "zstd body", e))?;
        if n == 0 {
            self.eof = true;
        }
        self.end += n;
        Ok(())
    }

    /// Offset of body position `pos` in the file as if the body were stored uncompressed, which
    /// is how every body error reports its place.
    fn offset(&self, pos: usize) -> u64 {
        HEADER_LEN as u64 + self.base + pos as u64
    }
}

impl BatchReader for Reader {
    fn kept_error(&mut self) -> &mut Option<Error> {
        &mut self.failed
    }

    /// Decodes into `out[*n..]`, advancing `*n` past every access decoded, also when it fails.
    fn fill_some(&mut self, out: &mut [Access], done_n: &mut usize) -> Result<()> {
        let mut n = *done_n;
        while n < out.len() && !self.done {
            // Hot loop on locals so the state stays in registers.
            let buf = &self.buf[..self.end];
            // Records starting before `fast_end` cannot run past the buffer's end.
            let fast_end = buf.len().saturating_sub(FAST_READ);
            let mut pos = self.pos;
            let mut prev = self.prev;
            let mut instrs = 0u64;
            let start_n = n;
            let stop = loop {
                if n == out.len() {
                    break None;
                }
                if pos < fast_end {
                    let (k, sum) = decode_run(buf, &mut pos, fast_end, &mut prev, &mut out[n..]);
                    n += k;
                    instrs += sum;
                    if n == out.len() {
                        break None;
                    }
                }
                match decode(buf, pos, &mut prev) {
                    Ok((a, next)) => {
                        instrs += a.instrs as u64;
                        out[n] = a;
                        n += 1;
                        pos = next;
                    }
                    Err(stop) => break Some(stop),
                }
            };
            self.pos = pos;
            self.prev = prev;
            self.records += (n - start_n) as u64;
            self.instrs += instrs;
            *done_n = n;
            match stop {
                None => break,
                Some(Stop::Bad(at, msg)) => {
                    let rec = self.records;
                    return Err(trace_err(&self.path, self.offset(pos + at), format!("record {rec}: {msg}")));
                }
                Some(Stop::Incomplete) if !self.eof => self.refill()?,
                Some(Stop::Incomplete) if self.pos < self.end => {
                    let left = self.end - self.pos;
                    return Err(trace_err(
                        &self.path,
                        self.offset(self.pos),
                        format!(
                            "truncated record {}: the body ends {left} byte(s) into it (body offset {})",
                            self.records,
                            self.base + self.pos as u64
                        ),
                    ));
                }
                Some(Stop::Incomplete) => {
                    self.done = true;
                    if self.records != self.header.records || self.instrs != self.header.instrs {
                        return Err(trace_err(
                            &self.path,
                            self.offset(self.end),
                            format!(
                                "count mismatch: header says {} records and {} instructions, body holds {} \
                                 records and {} instructions",
                                self.header.records, self.header.instrs, self.records, self.instrs
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

impl AccessSource for Reader {
    fn fill(&mut self, out: &mut [Access]) -> Result<usize> {
        self.fill_batch(out)
    }

    fn total_instrs(&self) -> Option<u64> {
        Some(self.header.instrs)
    }

    fn total_accesses(&self) -> Option<u64> {
        Some(self.header.records)
    }
}

/// Writes a native trace. Streams records through zstd and, at [`AccessSink::finish`], seeks
/// back to fill in the header's counts and set its complete flag; a trace whose writer never
/// finished is rejected by the reader instead of being silently short.
pub struct Writer {
    path: String,
    /// The temporary file being written, renamed to the destination by `finish`.
    pending: Option<PendingFile>,
    enc: zstd::stream::write::Encoder<'static, BufWriter<File>>,
    /// Encoded records not yet handed to zstd: `chunk[..used]`. Records are encoded in place
    /// (a small copy per record costs more than the encoding).
    chunk: Box<[u8]>,
    used: usize,
    prev: Prev,
    records: u64,
    instrs: u64,
}

impl Writer {
    /// Creates (or truncates) `path`. The body is already zstd-compressed, so a `.gz`, `.xz`,
    /// `.zst` or `.bz2` suffix is refused rather than silently ignored.
    pub fn create(path: &Path) -> Result<Writer> {
        let p = stream::display(path);
        if stream::Compression::of(path)? != stream::Compression::None {
            return Err(stream::invalid_input(
                path,
                "native traces are compressed internally; name the file without a .gz/.xz/.zst suffix \
                 (e.g. .xlt)",
            ));
        }
        let (pending, file) = PendingFile::create(path)?;
        let mut w = BufWriter::with_capacity(IO_BUF, file);
        // A placeholder with the complete flag clear; finish() rewrites it.
        let placeholder = Header { version: VERSION, flags: 0, records: 0, instrs: 0 };
        w.write_all(&placeholder.encode()).map_err(|e| Error::io(&p, e))?;
        let mut enc = zstd::stream::write::Encoder::new(w, ZSTD_LEVEL).map_err(|e| Error::io(&p, e))?;
        // The frame checksum makes a corrupted body an error instead of wrong accesses.
        enc.include_checksum(true).map_err(|e| Error::io(&p, e))?;
        Ok(Writer {
            path: p,
            pending: Some(pending),
            enc,
            chunk: vec![0; WRITE_CHUNK + MAX_RECORD_LEN].into_boxed_slice(),
            used: 0,
            prev: Prev::default(),
            records: 0,
            instrs: 0,
        })
    }

    fn flush_chunk(&mut self) -> Result<()> {
        self.enc.write_all(&self.chunk[..self.used]).map_err(|e| Error::io(&self.path, e))?;
        self.used = 0;
        Ok(())
    }
}

impl AccessSink for Writer {
    fn write(&mut self, a: &Access) -> Result<()> {
        let rec: &mut [u8; MAX_RECORD_LEN] = (&mut self.chunk[self.used..self.used + MAX_RECORD_LEN]).try_into().expect("chunk has room");
        self.used += encode(&mut self.prev, a, rec);
        self.records += 1;
        self.instrs += a.instrs as u64;
        if self.used >= WRITE_CHUNK {
            self.flush_chunk()?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        self.flush_chunk()?;
        let p = self.path.clone();
        let w = self.enc.finish().map_err(|e| Error::io(&p, e))?;
        let mut file = w.into_inner().map_err(|e| Error::io(&p, e.into_error()))?;
        let header = Header { version: VERSION, flags: FLAG_COMPLETE, records: self.records, instrs: self.instrs };
        file.seek(SeekFrom::Start(0)).map_err(|e| Error::io(&p, e))?;
        file.write_all(&header.encode()).map_err(|e| Error::io(&p, e))?;
        file.flush().map_err(|e| Error::io(&p, e))?;
        drop(file);
        self.pending.take().expect("finished once").commit()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Rng, TempDir};
    use super::*;

    /// Accesses that exercise every field and every tag bit: all kinds, all size codes and odd
    /// sizes, instrs 0/1/large, ip and cpu/asid changes, and huge vaddr jumps in both directions.
    pub(crate) fn random_accesses(seed: u64, n: usize) -> Vec<Access> {
        let mut r = Rng::new(seed);
        let mut v = Vec::with_capacity(n);
        let (mut data, mut code, mut cpu, mut asid) = (0x7fff_0000_1000u64, 0x40_1000u64, 0u16, 0u16);
        for _ in 0..n {
            let kind = [AccessKind::Load, AccessKind::Store, AccessKind::Fetch][r.below(3) as usize];
            match r.below(10) {
                0 => data = r.next(),                               // anywhere in 64 bits
                1 => data = data.wrapping_sub(r.below(1 << 40)),    // big jump down
                2..=5 => data = data.wrapping_add(r.below(64) * 8), // streaming
                _ => data = data.wrapping_add(r.below(1 << 20)).wrapping_sub(1 << 19),
            }
            if r.below(20) == 0 {
                cpu = r.next() as u16;
                asid = if r.below(2) == 0 { asid } else { r.next() as u16 };
            }
            if r.below(4) == 0 {
                code = if r.below(50) == 0 { r.next() } else { code.wrapping_add(r.below(32)) };
            }
            let vaddr = if kind == AccessKind::Fetch { code } else { data };
            let size = match r.below(4) {
                0 => r.next() as u8,
                _ => 1 << r.below(7),
            };
            let instrs = match r.below(5) {
                0 => 0,
                1 => r.next() as u32,
                2 => r.below(300) as u32,
                _ => 1,
            };
            v.push(Access { cpu, asid, ip: code, vaddr, kind, size, instrs });
        }
        v
    }

    fn write_all(path: &Path, accesses: &[Access]) {
        let mut w: Box<dyn AccessSink> = Box::new(Writer::create(path).unwrap());
        for a in accesses {
            w.write(a).unwrap();
        }
        w.finish().unwrap();
    }

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

    fn trace_error(e: Error) -> (String, u64, String) {
        match e {
            Error::Trace { path, offset, msg } => (path, offset, msg),
            other => panic!("expected Error::Trace, got {other}"),
        }
    }

    #[test]
    fn varint_and_zigzag_edges() {
        for d in [0u64, 1, u64::MAX, 1 << 63, (1 << 63) - 1, 0x7f, 0x80] {
            assert_eq!(unzigzag(zigzag(d)), d);
            let mut out = [0u8; MAX_RECORD_LEN];
            let mut p = 0;
            put_varint(&mut out, &mut p, d);
            let mut q = 0;
            assert_eq!(get_varint(&out[..p], &mut q, 0).unwrap(), d);
            assert_eq!(p, q);
        }
        // An eleven-byte varint and a tenth byte with more than bit 63 are both malformed.
        let mut q = 0;
        assert!(matches!(get_varint(&[0xff; 11], &mut q, 0), Err(Stop::Bad(..))));
        let mut bytes = [0xffu8; 10];
        bytes[9] = 2;
        let mut q = 0;
        assert!(matches!(get_varint(&bytes, &mut q, 0), Err(Stop::Bad(..))));
    }

    /// The worked example of docs/trace-format.md, byte for byte.
    #[test]
    fn documented_example_bytes() {
        use AccessKind::*;
        let acc = |kind, vaddr, ip, size, instrs, cpu, asid| Access { cpu, asid, ip, vaddr, kind, size, instrs };
        let records = [
            (
                acc(Load, 0x7fff_0000_1000, 0x40_1000, 8, 1, 0, 0),
                &[0x6c, 0x80, 0xc0, 0x80, 0x80, 0xe0, 0xff, 0x3f, 0x80, 0xc0, 0x80, 0x04][..],
            ),
            (acc(Load, 0x7fff_0000_1008, 0x40_1000, 8, 1, 0, 0), &[0x2c, 0x10][..]),
            (acc(Store, 0x7fff_0000_0008, 0x40_1000, 8, 0, 1, 7), &[0x8d, 0xff, 0x3f, 0x00, 0x01, 0x00, 0x07, 0x00][..]),
            (acc(Fetch, 0x40_1000, 0x40_1000, 4, 2, 1, 7), &[0x0a, 0x80, 0xc0, 0x80, 0x04, 0x02][..]),
            (acc(Load, 0x7fff_0000_0008, 0x40_1004, 12, 1, 1, 7), &[0x7c, 0x00, 0x0c, 0x08][..]),
        ];
        let (mut wp, mut rp) = (Prev::default(), Prev::default());
        for (a, bytes) in records {
            let mut out = [0u8; MAX_RECORD_LEN];
            let len = encode(&mut wp, &a, &mut out);
            assert_eq!(&out[..len], bytes, "{a:?}");
            let (back, next) = decode(bytes, 0, &mut rp).unwrap();
            assert_eq!((back, next), (a, len));
        }
    }

    /// Every record [`decode`] decodes one by one, or the error it stops at.
    fn decode_each(b: &[u8]) -> (Vec<Access>, Option<usize>) {
        let (mut prev, mut pos, mut out) = (Prev::default(), 0, Vec::new());
        while pos < b.len() {
            match decode(b, pos, &mut prev) {
                Ok((a, next)) => {
                    out.push(a);
                    pos = next;
                }
                Err(_) => return (out, Some(pos)),
            }
        }
        (out, None)
    }

    /// The same through [`decode_run`] wherever a record starts [`FAST_READ`] bytes before the
    /// end, in runs of at most `chunk`, and [`decode`] elsewhere; and how many `decode_run` took.
    fn decode_in_runs(b: &[u8], chunk: usize) -> (Vec<Access>, Option<usize>, usize) {
        let (mut prev, mut pos, mut out, mut fast) = (Prev::default(), 0, Vec::new(), 0);
        let end = b.len().saturating_sub(FAST_READ);
        let mut run = vec![Access::default(); chunk];
        while pos < b.len() {
            if pos < end {
                let (k, instrs) = decode_run(b, &mut pos, end, &mut prev, &mut run);
                assert_eq!(instrs, run[..k].iter().map(|a| u64::from(a.instrs)).sum::<u64>());
                out.extend_from_slice(&run[..k]);
                fast += k;
                if k == chunk {
                    continue;
                }
            }
            match decode(b, pos, &mut prev) {
                Ok((a, next)) => {
                    out.push(a);
                    pos = next;
                }
                Err(_) => return (out, Some(pos), fast),
            }
        }
        (out, None, fast)
    }

    /// The run decoder agrees with the record decoder on well-formed records of every kind
    /// (where it takes nearly all) and on random bytes, up to the same malformed record.
    #[test]
    fn decode_run_equals_decode() {
        let accesses = random_accesses(7, 20_000);
        let mut body = Vec::new();
        let mut wp = Prev::default();
        for a in &accesses {
            let mut rec = [0u8; MAX_RECORD_LEN];
            let len = encode(&mut wp, a, &mut rec);
            body.extend_from_slice(&rec[..len]);
        }
        let want = decode_each(&body);
        assert_eq!(want, (accesses.clone(), None));
        for chunk in [1, 3, 1000, 50_000] {
            let (got, err, fast) = decode_in_runs(&body, chunk);
            assert_eq!((&got, err), (&accesses, None), "chunk {chunk}");
            // Only cpu/asid changes (1 in 20) and varints over 8 bytes go the slow way.
            assert!(fast > accesses.len() * 3 / 4, "chunk {chunk}: {fast} of {}", accesses.len());
        }
        // Random bytes: the same records, up to the same malformed or cut-off one.
        let mut r = Rng::new(3);
        for _ in 0..200 {
            let bytes: Vec<u8> = (0..r.below(400)).map(|_| r.next() as u8).collect();
            let (want, want_err) = decode_each(&bytes);
            let (got, err, _) = decode_in_runs(&bytes, 1 + r.below(40) as usize);
            assert_eq!((got, err), (want, want_err));
        }
    }

    #[test]
    fn round_trip_every_field() {
        let dir = TempDir::new("native-rt");
        let path = dir.path("t.xlt");
        let accesses = random_accesses(42, 200_000);
        write_all(&path, &accesses);
        let mut r = Reader::open(&path).unwrap();
        assert_eq!(r.header().records, accesses.len() as u64);
        let total: u64 = accesses.iter().map(|a| a.instrs as u64).sum();
        assert_eq!(r.total_instrs(), Some(total));
        // Odd batch sizes make records straddle batch and buffer boundaries.
        let back = read_all(&mut r, 777).unwrap();
        assert_eq!(back.len(), accesses.len());
        for (i, (a, b)) in accesses.iter().zip(&back).enumerate() {
            assert_eq!(a, b, "record {i}");
        }
        assert_eq!(r.fill(&mut [Access::default(); 4]).unwrap(), 0, "stays at end");
    }

    #[test]
    fn empty_trace_round_trips() {
        let dir = TempDir::new("native-empty");
        let path = dir.path("e.xlt");
        write_all(&path, &[]);
        let mut r = Reader::open(&path).unwrap();
        assert!(read_all(&mut r, 16).unwrap().is_empty());
    }

    #[test]
    fn truncated_files_are_errors_not_panics() {
        let dir = TempDir::new("native-cut");
        let path = dir.path("full.xlt");
        write_all(&path, &random_accesses(7, 50_000));
        let full = std::fs::read(&path).unwrap();
        let cut_path = dir.path("cut.xlt");
        let cuts = [0, 3, 8, 20, HEADER_LEN - 1, HEADER_LEN, HEADER_LEN + 5, full.len() / 2, full.len() - 1];
        for cut in cuts {
            std::fs::write(&cut_path, &full[..cut]).unwrap();
            let res = Reader::open(&cut_path).and_then(|mut r| read_all(&mut r, 1000));
            let (p, off, msg) = trace_error(res.expect_err(&format!("cut at {cut} must fail")));
            assert!(p.ends_with("cut.xlt"), "{p}");
            if cut == 0 {
                // A magic prefix ("XLT") is reported as a short header, nothing at all as no magic.
                assert_eq!(off, 0);
                assert!(msg.contains("expected magic XLTRACE"), "cut {cut}: {msg}");
            } else if cut < HEADER_LEN {
                assert_eq!(off, cut as u64);
                assert!(msg.contains("truncated header: expected 64 bytes"), "cut {cut}: {msg}");
            } else {
                assert!(off >= HEADER_LEN as u64, "cut {cut}: offset {off}");
                assert!(msg.contains("count mismatch") || msg.contains("truncated") || msg.contains("zstd body"), "cut {cut}: {msg}");
            }
        }
    }

    #[test]
    fn cut_body_reports_truncated_record_offset() {
        // Re-compress a body cut mid-record, so zstd itself is fine and only the record is short.
        let dir = TempDir::new("native-midrec");
        let path = dir.path("m.xlt");
        let a = Access { cpu: 1, asid: 2, ip: 0x1234_5678, vaddr: 0xdead_beef_0000, kind: AccessKind::Store, size: 8, instrs: 3 };
        let mut rec = [0u8; MAX_RECORD_LEN];
        let len = encode(&mut Prev::default(), &a, &mut rec);
        let mut body = rec[..len].to_vec();
        body.extend_from_slice(&rec[..len - 2]);
        let header = Header { version: VERSION, flags: FLAG_COMPLETE, records: 2, instrs: 6 };
        let mut file = header.encode().to_vec();
        file.extend_from_slice(&zstd::encode_all(&body[..], 3).unwrap());
        std::fs::write(&path, file).unwrap();
        let mut r = Reader::open(&path).unwrap();
        let (_, off, msg) = trace_error(read_all(&mut r, 8).unwrap_err());
        assert_eq!(off, (HEADER_LEN + len) as u64);
        assert!(msg.contains("truncated record 1"), "{msg}");
        assert!(msg.contains(&format!("body offset {len}")), "{msg}");
    }

    #[test]
    fn header_problems_are_named() {
        let dir = TempDir::new("native-hdr");
        let path = dir.path("h.xlt");
        write_all(&path, &random_accesses(3, 100));
        let good = std::fs::read(&path).unwrap();
        let cases: [(usize, u8, u64, &str); 4] = [
            (0, b'Y', 0, "not an xlate trace: expected magic XLTRACE\\0, found \"YLTRACE\\x00\""),
            (8, 2, 8, "unsupported version 2, this build reads 1"),
            (10, 0, 10, "unfinished trace"),
            (11, 0x80, 10, "unknown header flags"),
        ];
        for (at, byte, off, want) in cases {
            let mut bad = good.clone();
            bad[at] = byte;
            std::fs::write(&path, &bad).unwrap();
            let (p, o, msg) = trace_error(Reader::open(&path).err().expect("must fail"));
            assert!(p.ends_with("h.xlt"));
            assert_eq!(o, off, "{msg}");
            assert!(msg.contains(want), "{msg}");
        }
        // A header count that disagrees with the body.
        let mut bad = good.clone();
        bad[16] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let (_, _, msg) = trace_error(read_all(&mut Reader::open(&path).unwrap(), 64).unwrap_err());
        assert!(msg.contains("count mismatch: header says"), "{msg}");
    }

    #[test]
    fn corrupt_body_is_an_error() {
        let dir = TempDir::new("native-corrupt");
        let path = dir.path("c.xlt");
        write_all(&path, &random_accesses(5, 20_000));
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x55;
        std::fs::write(&path, &bytes).unwrap();
        let res = Reader::open(&path).and_then(|mut r| read_all(&mut r, 100));
        trace_error(res.unwrap_err());
        // An invalid kind inside an intact zstd body.
        let header = Header { version: VERSION, flags: FLAG_COMPLETE, records: 1, instrs: 1 };
        let mut file = header.encode().to_vec();
        file.extend_from_slice(&zstd::encode_all(&[0x03u8, 0][..], 3).unwrap());
        std::fs::write(&path, file).unwrap();
        let (_, off, msg) = trace_error(read_all(&mut Reader::open(&path).unwrap(), 8).unwrap_err());
        assert_eq!(off, HEADER_LEN as u64);
        assert!(msg.contains("invalid access kind 3"), "{msg}");
    }

    #[test]
    fn refuses_compression_suffix() {
        let dir = TempDir::new("native-suffix");
        assert!(matches!(Writer::create(&dir.path("t.xlt.zst")), Err(Error::Io { .. })));
    }

    /// Decode throughput; run with
    /// `cargo test --release native_decode_speed -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn native_decode_speed() {
        let dir = TempDir::new("native-speed");
        let path = dir.path("s.xlt");
        // A realistic mix: mostly small strides, some random jumps, occasional fetches.
        let mut r = Rng::new(1);
        let n = 30_000_000u64;
        {
            let mut w: Box<dyn AccessSink> = Box::new(Writer::create(&path).unwrap());
            let mut a = Access { vaddr: 0x7f00_0000_0000, ip: 0x40_0000, size: 8, instrs: 1, ..Access::default() };
            let t = std::time::Instant::now();
            for i in 0..n {
                a.kind = if i % 8 == 0 { AccessKind::Store } else { AccessKind::Load };
                a.vaddr = if r.below(16) == 0 { 0x7f00_0000_0000 + r.below(1 << 32) } else { a.vaddr + 8 };
                a.ip = 0x40_0000 + (i % 64) * 4;
                a.instrs = 1 + (r.below(4) == 0) as u32;
                w.write(&a).unwrap();
            }
            w.finish().unwrap();
            let s = t.elapsed().as_secs_f64();
            eprintln!("encode: {:.1} M records/s", n as f64 / s / 1e6);
        }
        let bytes = std::fs::metadata(&path).unwrap().len();
        eprintln!("file: {bytes} bytes, {:.2} bytes/record", bytes as f64 / n as f64);
        let mut rd = Reader::open(&path).unwrap();
        let mut buf = vec![Access::default(); 4096];
        let t = std::time::Instant::now();
        let mut total = 0u64;
        let mut sum = 0u64;
        loop {
            let k = rd.fill(&mut buf).unwrap();
            if k == 0 {
                break;
            }
            total += k as u64;
            sum = sum.wrapping_add(buf[k - 1].vaddr);
        }
        let s = t.elapsed().as_secs_f64();
        assert_eq!(total, n);
        eprintln!("decode: {:.1} M records/s ({sum:x})", n as f64 / s / 1e6);
    }
}
