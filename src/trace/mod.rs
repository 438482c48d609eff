//! Trace files: streams of [`Access`]es read from (and written to) xlate's native format,
//! ChampSim `input_instr` traces and valgrind lackey text. `docs/trace-format.md` documents the
//! byte layouts and how each format maps onto [`Access`].

mod access;
pub mod champsim;
pub mod lackey;
pub mod native;
pub mod qemu;
pub mod readahead;
mod stream;
#[cfg(test)]
mod testutil;

pub use access::{Access, AccessKind};

use crate::addr::PageSize;
use crate::error::{Error, Result};
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use stream::Compression;

/// A stream of accesses read from somewhere. Batch-oriented so the simulator pays one dynamic
/// call per batch rather than per access.
pub trait AccessSource {
    /// Fills `buf` with the next accesses and returns how many; 0 = end of stream. Malformed
    /// input = `Err` naming the file and byte offset.
    fn fill(&mut self, buf: &mut [Access]) -> Result<usize>;
    /// Total instructions if the format records it (native header).
    fn total_instrs(&self) -> Option<u64> {
        None
    }
    /// Total accesses if known before reading them (native header); for progress displays.
    fn total_accesses(&self) -> Option<u64> {
        None
    }
    /// (bytes of its file read so far, the file's size) if the source reads a file of known
    /// size; for progress displays when [`AccessSource::total_accesses`] is unknown.
    fn bytes_read(&self) -> Option<(u64, u64)> {
        None
    }
    /// Threads (separate access streams of one address space) produced so far, numbered from 0.
    /// Files hold one stream; a traced program ([`qemu::Tracer`]) starts with one and grows as it
    /// starts threads, so a consumer checks again after each [`AccessSource::fill_thread`].
    fn threads(&self) -> usize {
        1
    }
    /// Fills `buf` with the next accesses of `thread` (< [`AccessSource::threads`]) and returns
    /// how many. 0 means the thread has ended if [`AccessSource::thread_done`] says so, or else
    /// that it has nothing ready now (it is blocked in the real run): run other threads and ask
    /// again. A source is read either with `fill` or with `fill_thread`, not both.
    fn fill_thread(&mut self, thread: usize, buf: &mut [Access]) -> Result<usize> {
        if thread == 0 {
            self.fill(buf)
        } else {
            Ok(0)
        }
    }
    /// [`AccessSource::fill_thread`] into a buffer the source may exchange for one of its own
    /// (same contents: the next accesses, `buf[..n]`): a source that already holds a decoded
    /// batch hands it over instead of copying it ([`readahead::ReadAhead`]). `buf` may come back
    /// with another length; everything beyond `n` is unspecified.
    fn fill_thread_vec(&mut self, thread: usize, buf: &mut Vec<Access>) -> Result<usize> {
        self.fill_thread(thread, buf)
    }
    /// After `fill_thread(thread, ..)` returned 0: whether the thread has ended (true) or is
    /// only stalled (false).
    fn thread_done(&self, _thread: usize) -> bool {
        true
    }
}

/// A file reader that decodes a batch at a time and keeps an error met after some accesses of a
/// batch for its next call, which returns it first: every access before a malformed record is
/// handed out, however the caller sizes its buffers. [`BatchReader::fill_batch`] is the readers'
/// [`AccessSource::fill`].
trait BatchReader {
    /// Decodes into `out[*n..]`, advancing `*n` past every access written, also when it fails.
    fn fill_some(&mut self, out: &mut [Access], n: &mut usize) -> Result<()>;

    /// The error kept for the next call.
    fn kept_error(&mut self) -> &mut Option<Error>;

    /// Fills `out`, returning how many accesses it holds; the kept error first, if any.
    fn fill_batch(&mut self, out: &mut [Access]) -> Result<usize> {
        if let Some(e) = self.kept_error().take() {
            return Err(e);
        }
        let mut n = 0;
        match self.fill_some(out, &mut n) {
            Ok(()) => Ok(n),
            Err(e) if n > 0 => {
                *self.kept_error() = Some(e);
                Ok(n)
            }
            Err(e) => Err(e),
        }
    }
}

/// Where a simulated process's accesses come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceInput {
    /// A trace file in any format [`open`] reads.
    Path(PathBuf),
    /// A program traced while it runs under QEMU ([`qemu::Tracer`]); one stream per guest thread.
    Command(qemu::TraceCommand),
}

impl TraceInput {
    /// How the input is named in results: the path, or `qemu:` and the command line.
    pub fn name(&self) -> String {
        match self {
            TraceInput::Path(p) => p.display().to_string(),
            TraceInput::Command(c) => format!("qemu:{}", c.argv.join(" ")),
        }
    }
}

impl From<PathBuf> for TraceInput {
    fn from(p: PathBuf) -> TraceInput {
        TraceInput::Path(p)
    }
}

/// Opens `input`: a file with [`open`], a command by starting it under QEMU.
pub fn open_input(input: &TraceInput) -> Result<Box<dyn AccessSource>> {
    match input {
        TraceInput::Path(p) => open(p),
        TraceInput::Command(c) => Ok(Box::new(qemu::Tracer::spawn(c)?)),
    }
}

/// A sink of accesses (trace writers).
pub trait AccessSink {
    /// Appends one access.
    fn write(&mut self, a: &Access) -> Result<()>;
    /// Completes the file (compressor trailers, native header counts). A writer dropped without
    /// `finish` leaves an incomplete file that readers reject.
    fn finish(self: Box<Self>) -> Result<()>;
}

/// The trace formats xlate reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// xlate's own format ([`native`]).
    Native,
    /// ChampSim `input_instr` ([`champsim`]).
    ChampSim,
    /// valgrind lackey text ([`lackey`]).
    Lackey,
}

/// Bytes of (decompressed) content looked at to recognise a format.
const SNIFF: usize = 4096;

/// Detects the format of `path`. The rule, first match wins:
///
/// 1. the raw file starts with the native magic `XLTRACE\0` → [`Format::Native`];
/// 2. the compression is taken from the last suffix (`.gz`, `.xz`, `.zst`; `.bz2` is an error
///    saying to recompress) and the name without it is matched: `.champsim` or `.champsimtrace`
///    → ChampSim, `.lackey` → Lackey, `.xlt` → Native (a wrong magic is then reported as such);
/// 3. the first 4 KiB of decompressed content start with the native magic → Native, or their
///    first non-empty line is a lackey line (`I  ADDR,SIZE`, ` L|S|M ADDR,SIZE`) or a `==`
///    valgrind banner → Lackey;
/// 4. the name without compression ends in `.trace` → ChampSim (checked after the content because
///    `.trace` is a common name for text traces too);
/// 5. otherwise an error listing what was expected.
pub fn detect(path: &Path) -> Result<Format> {
    let p = stream::display(path);
    let mut head = [0u8; 8];
    let n = stream::read_full(&mut stream::open_raw(path)?, &mut head).map_err(|e| stream::read_error(&p, 0, "file", e))?;
    if head[..n] == native::MAGIC {
        return Ok(Format::Native);
    }
    let comp = Compression::of(path)?;
    let name = stream::inner_name(path);
    if name.ends_with(".champsim") || name.ends_with(".champsimtrace") {
        return Ok(Format::ChampSim);
    }
    if name.ends_with(".lackey") {
        return Ok(Format::Lackey);
    }
    if name.ends_with(".xlt") {
        return Ok(Format::Native);
    }
    let (mut input, _) = stream::open_decompressed(path)?;
    let mut sniff = vec![0u8; SNIFF];
    let got = stream::read_full(&mut input, &mut sniff).map_err(|e| stream::read_error(&p, 0, comp.describe(), e))?;
    let sniff = &sniff[..got];
    if sniff.starts_with(&native::MAGIC) {
        return Ok(Format::Native);
    }
    // Whether the sniffed bytes are the whole content, so a last line without newline counts.
    let whole = got < SNIFF || input.read(&mut [0u8; 1]).map(|k| k == 0).unwrap_or(false);
    if lackey::looks_like(sniff, whole) {
        return Ok(Format::Lackey);
    }
    if name.ends_with(".trace") {
        return Ok(Format::ChampSim);
    }
    Err(Error::Trace {
        path: p,
        offset: 0,
        msg: "cannot tell the trace format: expected an xlate trace (magic XLTRACE), a ChampSim trace \
              named *.champsim, *.champsimtrace or *.trace (optionally .gz/.xz/.zst), or valgrind lackey \
              text (*.lackey, or lines such as `I  04010173,3`)"
            .to_string(),
    })
}

/// Opens a streaming reader for `path` in whatever format it is (see [`detect`]), without
/// synthesized instruction fetches.
pub fn open(path: &Path) -> Result<Box<dyn AccessSource>> {
    open_with(path, false)
}

/// Like [`open`]; `with_fetches` makes the ChampSim and lackey readers emit instruction fetches
/// (see [`champsim::Reader::new`] and [`lackey::Reader::new`]). Native traces return exactly
/// the accesses they hold, fetches included, whatever `with_fetches` says.
///
/// The file is decompressed and decoded on a thread of its own that runs ahead of the caller
/// ([`readahead::ReadAhead`]), so a simulation overlaps the decoding.
pub fn open_with(path: &Path, with_fetches: bool) -> Result<Box<dyn AccessSource>> {
    Ok(Box::new(readahead::ReadAhead::spawn(open_direct(path, with_fetches)?)))
}

/// Like [`open_with`], but decoding on the calling thread rather than on a reader thread of its
/// own ([`readahead`]); the accesses and errors are the same.
pub fn open_direct(path: &Path, with_fetches: bool) -> Result<Box<dyn AccessSource + Send>> {
    // A missing file or a directory says that it was the trace that could not be read (a run
    // also names a config file, and `File::open` of a directory succeeds on Linux).
    let whose = |e| Error::io(format!("trace file {}", path.display()), e);
    let meta = std::fs::metadata(path).map_err(whose)?;
    if meta.is_dir() {
        return Err(whose(std::io::Error::new(std::io::ErrorKind::InvalidInput, "is a directory, not a trace file")));
    }
    Ok(match detect(path)? {
        Format::Native => Box::new(native::Reader::open(path)?),
        Format::ChampSim => Box::new(champsim::Reader::open(path, with_fetches)?),
        Format::Lackey => Box::new(lackey::Reader::open(path, with_fetches)?),
    })
}

/// Creates a writer of `format` at `path` (native and ChampSim; lackey is read-only).
pub fn create(path: &Path, format: Format) -> Result<Box<dyn AccessSink>> {
    Ok(match format {
        Format::Native => Box::new(native::Writer::create(path)?),
        Format::ChampSim => Box::new(champsim::Writer::create(path)?),
        Format::Lackey => {
            return Err(stream::invalid_input(path, "writing valgrind lackey traces is not supported; write native or ChampSim"))
        }
    })
}

/// Summary used by `xlate trace-info`.
#[derive(serde::Serialize, Default, Debug, Clone, PartialEq, Eq)]
pub struct TraceInfo {
    /// Accesses read.
    pub accesses: u64,
    /// Of which loads.
    pub loads: u64,
    /// Of which stores.
    pub stores: u64,
    /// Of which instruction fetches.
    pub fetches: u64,
    /// Sum of `instrs` over the accesses read.
    pub instructions: u64,
    /// Instruction count in the file's header, if the format records one (native).
    pub header_instructions: Option<u64>,
    /// Distinct 4 KiB pages touched, per address space ((asid, page) pairs).
    pub pages_4k: u64,
    /// Distinct 2 MiB pages touched, per address space.
    pub pages_2m: u64,
    /// Distinct 1 GiB pages touched, per address space.
    pub pages_1g: u64,
    /// `pages_4k` × 4 KiB.
    pub footprint_bytes: u64,
    /// Lowest virtual address accessed (`None` for an empty trace); hex in JSON.
    #[serde(serialize_with = "hex_addr")]
    pub min_vaddr: Option<u64>,
    /// Highest virtual address accessed (`None` for an empty trace); hex in JSON.
    #[serde(serialize_with = "hex_addr")]
    pub max_vaddr: Option<u64>,
    /// Reading stopped at the `limit` given to [`info`] (the trace may hold more).
    pub limited: bool,
}

/// An address as the string `"0x…"` (JSON numbers are decimal), `null` for none.
fn hex_addr<S: serde::Serializer>(a: &Option<u64>, s: S) -> std::result::Result<S::Ok, S::Error> {
    match a {
        Some(a) => s.serialize_str(&format!("{a:#x}")),
        None => s.serialize_none(),
    }
}

/// Multiplicative hash for page numbers: the default SipHash costs more than everything else
/// `info` does per access, and page numbers need no protection against adversarial keys.
#[derive(Default)]
struct PageHasher(u64);

impl Hasher for PageHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u16(&mut self, x: u16) {
        self.write_u64(x as u64);
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(26) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn finish(&self) -> u64 {
        // Fold the well-mixed high bits down: the table indexes by the low bits.
        self.0 ^ (self.0 >> 32)
    }
}

type PageSet = HashSet<(u16, u64), BuildHasherDefault<PageHasher>>;

/// Reads `src` to its end, or to `limit` accesses, and summarises it.
pub fn info(src: &mut dyn AccessSource, limit: Option<u64>) -> Result<TraceInfo> {
    let mut t = TraceInfo { header_instructions: src.total_instrs(), ..TraceInfo::default() };
    let mut pages = PageSet::default();
    let (mut min, mut max) = (u64::MAX, 0u64);
    // Consecutive accesses mostly hit the same page; skipping the set for them is a big saving.
    let mut last: Option<(u16, u64)> = None;
    let mut buf = vec![Access::default(); 4096];
    let limit = limit.unwrap_or(u64::MAX);
    while t.accesses < limit {
        let want = (limit - t.accesses).min(buf.len() as u64) as usize;
        let n = src.fill(&mut buf[..want])?;
        if n == 0 {
            break;
        }
        for a in &buf[..n] {
            match a.kind {
                AccessKind::Load => t.loads += 1,
                AccessKind::Store => t.stores += 1,
                AccessKind::Fetch => t.fetches += 1,
            }
            t.instructions += a.instrs as u64;
            min = min.min(a.vaddr);
            max = max.max(a.vaddr);
            let key = (a.asid, a.vaddr >> PageSize::K4.shift());
            if last != Some(key) {
                pages.insert(key);
                last = Some(key);
            }
        }
        t.accesses += n as u64;
    }
    t.limited = t.accesses >= limit;
    if t.accesses > 0 {
        t.min_vaddr = Some(min);
        t.max_vaddr = Some(max);
    }
    let coarser = |order: u32| pages.iter().map(|&(asid, p)| (asid, p >> order)).collect::<PageSet>().len() as u64;
    t.pages_4k = pages.len() as u64;
    t.pages_2m = coarser(PageSize::M2.order());
    t.pages_1g = coarser(PageSize::G1.order());
    t.footprint_bytes = t.pages_4k * PageSize::K4.bytes();
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::testutil::TempDir;
    use super::*;
    use std::io::Write;

    fn read_all(src: &mut dyn AccessSource) -> Vec<Access> {
        let mut out = Vec::new();
        let mut buf = vec![Access::default(); 100];
        loop {
            let n = src.fill(&mut buf).unwrap();
            if n == 0 {
                return out;
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    /// A source over a vector, for `info` tests.
    struct VecSource(Vec<Access>, usize);

    impl AccessSource for VecSource {
        fn fill(&mut self, buf: &mut [Access]) -> Result<usize> {
            let n = buf.len().min(self.0.len() - self.1);
            buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
            self.1 += n;
            Ok(n)
        }
    }

    fn load(asid: u16, vaddr: u64) -> Access {
        Access { asid, vaddr, kind: AccessKind::Load, size: 8, instrs: 1, ..Access::default() }
    }

    #[test]
    fn info_counts_distinct_pages() {
        const G: u64 = 1 << 30;
        const M: u64 = 1 << 21;
        let mut v = vec![
            load(0, 0x1000),
            load(0, 0x1ff8),   // same 4K page
            load(0, 0x2000),   // new 4K page, same 2M
            load(0, M + 0x10), // new 2M page, same 1G
            load(0, G + 5),    // new 1G page
            load(1, 0x1000),   // same page number, other address space
            load(0, 0x1000),   // revisit (not consecutive)
            load(0, u64::MAX), // top of the address space
        ];
        v[2].kind = AccessKind::Store;
        v[3].kind = AccessKind::Fetch;
        v[4].instrs = 10;
        let t = info(&mut VecSource(v.clone(), 0), None).unwrap();
        assert_eq!((t.accesses, t.loads, t.stores, t.fetches), (8, 6, 1, 1));
        assert_eq!(t.instructions, 17);
        assert_eq!((t.pages_4k, t.pages_2m, t.pages_1g), (6, 5, 4));
        assert_eq!(t.footprint_bytes, 6 * 4096);
        assert_eq!((t.min_vaddr, t.max_vaddr), (Some(0x1000), Some(u64::MAX)));
        let j = serde_json::to_value(&t).unwrap();
        assert_eq!((&j["min_vaddr"], &j["max_vaddr"]), (&serde_json::json!("0x1000"), &serde_json::json!("0xffffffffffffffff")));
        assert!(!t.limited);
        assert_eq!(t.header_instructions, None);
        let t = info(&mut VecSource(v, 0), Some(3)).unwrap();
        assert_eq!((t.accesses, t.pages_4k, t.pages_2m, t.limited), (3, 2, 1, true));
        let empty = info(&mut VecSource(Vec::new(), 0), None).unwrap();
        assert_eq!(empty, TraceInfo::default());
        assert_eq!(serde_json::to_value(&empty).unwrap()["min_vaddr"], serde_json::Value::Null);
    }

    #[test]
    fn detect_open_and_convert() {
        let dir = TempDir::new("detect");
        let accesses: Vec<Access> = (1..=500u64)
            .map(|i| Access {
                ip: 0x40_0000 + i * 4,
                vaddr: 0x1000 * i,
                kind: if i % 3 == 0 { AccessKind::Store } else { AccessKind::Load },
                size: 8,
                instrs: 1,
                ..Access::default()
            })
            .collect();
        // Native under an arbitrary name is found by its magic; ChampSim by suffix.
        for (name, fmt) in [
            ("a.bin", Format::Native),
            ("a.xlt", Format::Native),
            ("b.champsim", Format::ChampSim),
            ("b.champsimtrace.xz", Format::ChampSim),
            ("b.trace.gz", Format::ChampSim),
            ("b.trace.zst", Format::ChampSim),
        ] {
            let path = dir.path(name);
            let mut w = create(&path, fmt).unwrap();
            for a in &accesses {
                w.write(a).unwrap();
            }
            w.finish().unwrap();
            assert_eq!(detect(&path).unwrap(), fmt, "{name}");
            let mut src = open(&path).unwrap();
            assert_eq!(read_all(&mut *src), accesses, "{name}");
            if fmt == Format::Native {
                assert_eq!(open(&path).unwrap().total_instrs(), Some(500));
            }
        }
        // Lackey by content under neutral and `.trace` names, and by suffix, compressed too.
        let text = "==1== Lackey\nI  0400000,4\n L 00001000,8\n";
        for name in ["l.txt", "l.trace", "l.lackey", "l.log.gz"] {
            let path = dir.path(name);
            let bytes = if name.ends_with(".gz") {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(text.as_bytes()).unwrap();
                e.finish().unwrap()
            } else {
                text.as_bytes().to_vec()
            };
            std::fs::write(&path, bytes).unwrap();
            assert_eq!(detect(&path).unwrap(), Format::Lackey, "{name}");
            let got = read_all(&mut *open_with(&path, true).unwrap());
            assert_eq!(got.len(), 2, "{name}");
            assert_eq!(got[1].vaddr, 0x1000);
        }
        // Unknown content, bzip2 and writing lackey are clear errors.
        let path = dir.path("x.dat");
        std::fs::write(&path, [0u8, 1, 2, 3]).unwrap();
        let err = detect(&path).unwrap_err().to_string();
        assert!(err.contains("cannot tell the trace format") && err.contains("x.dat"), "{err}");
        let path = dir.path("y.champsimtrace.bz2");
        std::fs::write(&path, b"BZh9").unwrap();
        let err = detect(&path).unwrap_err().to_string();
        assert!(err.contains("bzip2") && err.contains("y.champsimtrace.bz2"), "{err}");
        assert!(create(&dir.path("z.lackey"), Format::Lackey).is_err());
        // A missing file is an I/O error naming it.
        let err = open(&dir.path("missing.xlt")).err().unwrap();
        assert!(matches!(&err, Error::Io { path, .. } if path.ends_with("missing.xlt")), "{err}");
        // A read failure of the file itself (here: a directory) is I/O, not malformed data.
        let err = detect(dir.dir()).unwrap_err();
        assert!(matches!(&err, Error::Io { .. }), "{err}");
        // `.xlt` with a wrong magic reaches the native reader's message.
        let path = dir.path("bad.xlt");
        std::fs::write(&path, b"hello world").unwrap();
        let err = open(&path).err().unwrap().to_string();
        assert!(err.contains("not an xlate trace: expected magic XLTRACE"), "{err}");
    }

    #[test]
    fn compressed_native_reads() {
        let dir = TempDir::new("native-gz");
        let plain = dir.path("p.xlt");
        let a = load(3, 0xabc000);
        let mut w = create(&plain, Format::Native).unwrap();
        w.write(&a).unwrap();
        w.finish().unwrap();
        let gz = dir.path("p.xlt.gz");
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&std::fs::read(&plain).unwrap()).unwrap();
        std::fs::write(&gz, e.finish().unwrap()).unwrap();
        assert_eq!(detect(&gz).unwrap(), Format::Native);
        assert_eq!(read_all(&mut *open(&gz).unwrap()), vec![a]);
    }
}
