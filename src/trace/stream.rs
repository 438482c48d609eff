//! Byte streams under the trace formats: choosing a (de)compressor by file suffix, and telling a
//! failing disk apart from malformed data when a read goes wrong.
//!
//! Every reader here streams through a `BufReader`; nothing ever reads a whole file into memory
//! because traces can be tens of gigabytes.

use crate::error::{Error, Result};
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Buffer size of file readers, decompressors and writers: big enough that system calls and
/// decompressor calls are amortised over thousands of records.
pub(crate) const IO_BUF: usize = 1 << 18;

/// Compression wrapped around a trace file, chosen by the file's last suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Compression {
    /// No known compression suffix: raw bytes.
    None,
    /// `.gz` (possibly several concatenated gzip members, as `pigz` and `cat a.gz b.gz` make).
    Gzip,
    /// `.xz` (possibly several concatenated streams, as parallel `xz -T` makes).
    Xz,
    /// `.zst`.
    Zstd,
}

impl Compression {
    /// The compression implied by `path`'s last suffix. `.bz2` is refused with a clear error
    /// rather than read as raw bytes, which would produce garbage accesses.
    pub(crate) fn of(path: &Path) -> Result<Compression> {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        Ok(match ext.to_ascii_lowercase().as_str() {
            "gz" => Compression::Gzip,
            "xz" => Compression::Xz,
            "zst" => Compression::Zstd,
            "bz2" => {
                return Err(invalid_input(
                    path,
                    "bzip2-compressed traces are not supported; recompress with xz, gzip or zstd \
                     (e.g. `bzcat t.bz2 | xz -T0 > t.xz`)",
                ))
            }
            _ => Compression::None,
        })
    }

    /// What the data layer is called in error messages.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Compression::None => "file",
            Compression::Gzip => "gzip stream",
            Compression::Xz => "xz stream",
            Compression::Zstd => "zstd stream",
        }
    }
}

/// The file name of `path` in lower case with a compression suffix (`.gz`, `.xz`, `.zst`, `.bz2`)
/// removed, so format suffixes can be matched whatever the compression.
pub(crate) fn inner_name(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    for ext in [".gz", ".xz", ".zst", ".bz2"] {
        if let Some(stem) = name.strip_suffix(ext) {
            return stem.to_string();
        }
    }
    name
}

/// `path` as it appears in error messages.
pub(crate) fn display(path: &Path) -> String {
    path.display().to_string()
}

/// An `Error::Io` of kind `InvalidInput` whose message says what to do instead.
pub(crate) fn invalid_input(path: &Path, msg: &str) -> Error {
    Error::io(display(path), io::Error::new(io::ErrorKind::InvalidInput, msg.to_string()))
}

/// A malformed-input error.
pub(crate) fn trace_err(path: &str, offset: u64, msg: impl Into<String>) -> Error {
    Error::Trace { path: path.to_string(), offset, msg: msg.into() }
}

/// Marks errors that come from the file itself (as opposed to a decompressor rejecting its
/// input), so a read failure can be reported as I/O or as malformed data. Decompressors pass
/// their inner reader's errors through unchanged, so the mark survives them.
#[derive(Debug)]
struct FileError(io::Error);

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for FileError {}

/// A file whose read errors carry the [`FileError`] mark, counting the bytes read from it.
struct MarkedFile(File, Arc<AtomicU64>);

impl Read for MarkedFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n =
            self.0
                .read(buf)
                .map_err(|e| if e.kind() == io::ErrorKind::Interrupted { e } else { io::Error::new(e.kind(), FileError(e)) })?;
        // Once per buffer refill (256 KiB), not per record.
        self.1.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// How much of a file its reader has read, and the file's size: a progress display's measure
/// for traces whose access count is unknown until they are read (ChampSim, lackey). The count
/// runs ahead of the records decoded by the read-ahead buffers, a few hundred KiB.
#[derive(Clone, Debug)]
pub(crate) struct ReadCount {
    read: Arc<AtomicU64>,
    size: u64,
}

impl ReadCount {
    /// (bytes read, file size); `None` for a file of unknown size (a pipe).
    pub(crate) fn get(&self) -> Option<(u64, u64)> {
        (self.size > 0).then(|| (self.read.load(Ordering::Relaxed).min(self.size), self.size))
    }
}

/// Turns a failed read at `offset` of the (decompressed) stream into the crate error: a failure
/// of the file itself is `Error::Io`; anything else (a decompressor rejecting corrupt or
/// truncated data) is `Error::Trace` saying which layer (`what`) failed.
pub(crate) fn read_error(path: &str, offset: u64, what: &str, err: io::Error) -> Error {
    // Render before taking the error apart: payload-less errors have nothing to downcast.
    let msg = err.to_string();
    if let Some(inner) = err.into_inner() {
        if let Ok(file_err) = inner.downcast::<FileError>() {
            return Error::io(path, file_err.0);
        }
    }
    trace_err(path, offset, format!("corrupt or truncated {what}: {msg} (expected a complete, valid {what})"))
}

/// Opens `path` without decompressing it.
pub(crate) fn open_raw(path: &Path) -> Result<Box<dyn BufRead + Send>> {
    let f = File::open(path).map_err(|e| Error::io(display(path), e))?;
    Ok(Box::new(BufReader::with_capacity(IO_BUF, MarkedFile(f, Arc::default()))))
}

/// Opens `path` and decompresses it according to its suffix (see [`Compression::of`]).
pub(crate) fn open_decompressed(path: &Path) -> Result<(Box<dyn BufRead + Send>, Compression)> {
    open_counted(path).map(|(r, comp, _)| (r, comp))
}

/// [`open_decompressed`], and how much of the file has been read.
pub(crate) fn open_counted(path: &Path) -> Result<(Box<dyn BufRead + Send>, Compression, ReadCount)> {
    let comp = Compression::of(path)?;
    let f = File::open(path).map_err(|e| Error::io(display(path), e))?;
    let count = ReadCount { read: Arc::default(), size: f.metadata().map(|m| m.len()).unwrap_or(0) };
    let raw = BufReader::with_capacity(IO_BUF, MarkedFile(f, count.read.clone()));
    let r: Box<dyn BufRead + Send> = match comp {
        Compression::None => Box::new(raw),
        Compression::Gzip => Box::new(BufReader::with_capacity(IO_BUF, flate2::bufread::MultiGzDecoder::new(raw))),
        Compression::Xz => Box::new(BufReader::with_capacity(IO_BUF, xz2::bufread::XzDecoder::new_multi_decoder(raw))),
        Compression::Zstd => {
            let d = zstd::stream::read::Decoder::with_buffer(raw).map_err(|e| Error::io(display(path), e))?;
            Box::new(BufReader::with_capacity(IO_BUF, d))
        }
    };
    Ok((r, comp, count))
}

/// Reads until `buf` is full or the stream ends; returns the bytes read. Unlike `read_exact`, a
/// short stream is not an error here, so callers can say exactly how much they found.
pub(crate) fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// One `read` call that retries when interrupted; 0 means end of stream.
pub(crate) fn read_some(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            res => return res,
        }
    }
}

/// A buffered output file, compressed according to its suffix. Compressors must be finished
/// explicitly to write their trailers, hence [`Sink::finish`] rather than relying on drop.
pub(crate) enum Sink {
    /// Raw bytes.
    Plain(BufWriter<File>),
    /// gzip at the default level.
    Gzip(flate2::write::GzEncoder<BufWriter<File>>),
    /// xz at level 6, the `xz` tool's default.
    Xz(xz2::write::XzEncoder<BufWriter<File>>),
    /// zstd at level 3, the `zstd` tool's default.
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<File>>),
}

impl Sink {
    /// Writes `f`, compressing by the suffix of `path` (its destination).
    pub(crate) fn create(path: &Path, f: File) -> Result<Sink> {
        let comp = Compression::of(path)?;
        let w = BufWriter::with_capacity(IO_BUF, f);
        Ok(match comp {
            Compression::None => Sink::Plain(w),
            Compression::Gzip => Sink::Gzip(flate2::write::GzEncoder::new(w, flate2::Compression::default())),
            Compression::Xz => Sink::Xz(xz2::write::XzEncoder::new(w, 6)),
            Compression::Zstd => Sink::Zstd(zstd::stream::write::Encoder::new(w, 3).map_err(|e| Error::io(display(path), e))?),
        })
    }

    /// Writes the compressor's trailer and flushes everything to the file.
    pub(crate) fn finish(self) -> io::Result<()> {
        match self {
            Sink::Plain(mut w) => w.flush(),
            Sink::Gzip(e) => e.finish()?.flush(),
            Sink::Xz(e) => e.finish()?.flush(),
            Sink::Zstd(e) => e.finish()?.flush(),
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(buf),
            Sink::Gzip(w) => w.write(buf),
            Sink::Xz(w) => w.write(buf),
            Sink::Zstd(w) => w.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.write_all(buf),
            Sink::Gzip(w) => w.write_all(buf),
            Sink::Xz(w) => w.write_all(buf),
            Sink::Zstd(w) => w.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Gzip(w) => w.flush(),
            Sink::Xz(w) => w.flush(),
            Sink::Zstd(w) => w.flush(),
        }
    }
}
