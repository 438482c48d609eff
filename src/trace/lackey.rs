//! valgrind `--tool=lackey --trace-mem=yes` output: one text line per instruction or data access.
//!
//! ```text
//! ==12345== Lackey, an example Valgrind tool
//! I  04010173,3
//!  L 04222cac,8
//!  S 7ff000398,8
//!  M 0421c7f0,4
//! ```
//!
//! `I` is an instruction (fetch address, length), `L` a load, `S` a store and `M` a modify (a load
//! then a store of the same address, emitted as those two accesses). Addresses are hexadecimal
//! without `0x`, sizes decimal. Lines starting with `==` (valgrind's banner and summary) or with
//! `--` followed by a digit (valgrind's `--PID--` warnings) and empty lines are skipped. Each `I`
//! line is one instruction; instructions are attributed to accesses as for ChampSim (the first
//! access after them carries their count, and the later accesses of the same instruction carry
//! 0). A data access's ip is the address of the `I` line before it. Sizes are clamped to 1..=64,
//! the range of [`Access::size`].

use super::stream::{self, read_error, trace_err, Compression};
use super::{Access, AccessKind, AccessSource, BatchReader};
use crate::error::{Error, Result};
use std::io::{self, BufRead};
use std::path::Path;

/// Longest line accepted. Lackey lines are under 40 bytes; the cap stops a misnamed binary file
/// without newlines from growing the line buffer without bound.
pub const MAX_LINE: usize = 256;

/// What the parser expects, for error messages.
const SHAPE: &str = "expected a lackey line `I  ADDR,SIZE`, ` L ADDR,SIZE`, ` S ADDR,SIZE` or ` M ADDR,SIZE` \
                     (ADDR hexadecimal, SIZE decimal) or a `==` valgrind banner line";

/// One parsed line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line {
    /// Banner, warning or empty line.
    Skip,
    /// `I`: an instruction at `addr` of `size` bytes.
    Instr(u64, u8),
    /// ` L`, ` S`, ` M` (the byte), address and size.
    Data(u8, u64, u8),
}

/// Parses one line (without its newline); `None` when malformed.
fn parse(line: &[u8]) -> Option<Line> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() || line.starts_with(b"==") {
        return Some(Line::Skip);
    }
    if line.len() > 2 && line.starts_with(b"--") && line[2].is_ascii_digit() {
        return Some(Line::Skip);
    }
    if line.len() < 3 {
        return None;
    }
    let (head, rest) = line.split_at(3);
    let rest = rest.trim_ascii_end();
    let comma = rest.iter().position(|&c| c == b',')?;
    let (hex, dec) = (&rest[..comma], &rest[comma + 1..]);
    if hex.is_empty() || hex.len() > 16 || dec.is_empty() || dec.len() > 9 {
        return None;
    }
    let mut addr = 0u64;
    for &c in hex {
        let d = (c as char).to_digit(16)?;
        addr = addr << 4 | d as u64;
    }
    let mut size = 0u32;
    for &c in dec {
        if !c.is_ascii_digit() {
            return None;
        }
        size = size * 10 + (c - b'0') as u32;
    }
    let size = size.clamp(1, 64) as u8;
    match head {
        b"I  " => Some(Line::Instr(addr, size)),
        b" L " | b" S " | b" M " => Some(Line::Data(head[1], addr, size)),
        _ => None,
    }
}

/// Whether `head` (the first bytes of a file) looks like lackey output: its first non-empty
/// complete line is a banner or an access line. Used by format detection.
pub(crate) fn looks_like(head: &[u8], whole_file: bool) -> bool {
    let mut rest = head;
    loop {
        let (line, complete) = match rest.iter().position(|&c| c == b'\n') {
            Some(i) => (&rest[..i], true),
            None => (rest, whole_file),
        };
        if !complete || line.len() > MAX_LINE {
            return false;
        }
        match parse(line) {
            None => return false,
            Some(Line::Skip) if line.trim_ascii().is_empty() => {
                if line.len() == rest.len() {
                    return false;
                }
                rest = &rest[line.len() + 1..];
            }
            Some(_) => return true,
        }
    }
}

/// Streams lackey text.
pub struct Reader {
    path: String,
    what: &'static str,
    /// How much of the file has been read (a reader of a file, not of any `BufRead`).
    count: Option<stream::ReadCount>,
    input: Box<dyn BufRead + Send>,
    with_fetches: bool,
    line: Vec<u8>,
    /// Stream offset of the next unread byte.
    off: u64,
    /// Instructions since the last emitted access.
    pending: u64,
    /// Address of the latest `I` line.
    ip: u64,
    /// The store half of an `M` line that did not fit in the caller's buffer.
    staged: Option<Access>,
    /// An error met after parsing some accesses, returned by the next `fill`.
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

    /// Reads lackey text from `input`; `path` names it in errors. With `with_fetches`, every `I`
    /// line also yields a fetch of its address and length.
    pub fn new(input: Box<dyn BufRead + Send>, path: &str, with_fetches: bool) -> Reader {
        Reader {
            path: path.to_string(),
            what: Compression::None.describe(),
            count: None,
            input,
            with_fetches,
            line: Vec::with_capacity(MAX_LINE),
            off: 0,
            pending: 0,
            ip: 0,
            staged: None,
            failed: None,
        }
    }

    /// Reads the next line (newline stripped) into `self.line`; false at end of input.
    fn next_line(&mut self) -> Result<bool> {
        self.line.clear();
        let start = self.off;
        loop {
            let avail = match self.input.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(read_error(&self.path, self.off, self.what, e)),
            };
            if avail.is_empty() {
                // A last line without a newline still counts.
                return Ok(!self.line.is_empty());
            }
            let (take, done) = match avail.iter().position(|&c| c == b'\n') {
                Some(i) => (i + 1, true),
                None => (avail.len(), false),
            };
            let keep = if done { take - 1 } else { take };
            if self.line.len() + keep > MAX_LINE {
                return Err(trace_err(&self.path, start, format!("line longer than {MAX_LINE} bytes; {SHAPE}")));
            }
            self.line.extend_from_slice(&avail[..keep]);
            self.input.consume(take);
            self.off += take as u64;
            if done {
                return Ok(true);
            }
        }
    }

    /// Instructions owed to the next access.
    fn take_instrs(&mut self) -> u32 {
        // Saturate: 4 billion instructions without a memory access do not occur in practice.
        let n = u32::try_from(self.pending).unwrap_or(u32::MAX);
        self.pending = 0;
        n
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

    /// Parses lines into `out[*done_n..]`, advancing `*done_n` past every access written, also
    /// when it fails.
    fn fill_some(&mut self, out: &mut [Access], done_n: &mut usize) -> Result<()> {
        let mut n = *done_n;
        while n < out.len() {
            *done_n = n;
            if let Some(a) = self.staged.take() {
                out[n] = a;
                n += 1;
                continue;
            }
            let line_start = self.off;
            if !self.next_line()? {
                break;
            }
            let Some(parsed) = parse(&self.line) else {
                let shown: String = String::from_utf8_lossy(&self.line).chars().take(60).collect();
                return Err(trace_err(&self.path, line_start, format!("{SHAPE}, found `{}`", shown.escape_debug())));
            };
            let access = |kind, vaddr, ip, size, instrs| Access { cpu: 0, asid: 0, ip, vaddr, kind, size, instrs };
            match parsed {
                Line::Skip => {}
                Line::Instr(addr, size) => {
                    self.pending += 1;
                    self.ip = addr;
                    if self.with_fetches {
                        out[n] = access(AccessKind::Fetch, addr, addr, size, self.take_instrs());
                        n += 1;
                    }
                }
                Line::Data(op, addr, size) => {
                    let kind = if op == b'S' { AccessKind::Store } else { AccessKind::Load };
                    out[n] = access(kind, addr, self.ip, size, self.take_instrs());
                    n += 1;
                    if op == b'M' {
                        self.staged = Some(access(AccessKind::Store, addr, self.ip, size, 0));
                    }
                }
            }
        }
        *done_n = n;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    const SAMPLE: &str = "==1234== Lackey, an example Valgrind tool\n\
                          ==1234== Command: ./a.out\n\
                          --1234-- warning: something\n\
                          I  04010173,3\n\
                          I  04010176,5\n \
                          L 04222cac,8\n \
                          M 0421c7f0,4\n\
                          I  0401017b,2\n \
                          S 7ff000398,8\n\
                          I  04010180,4\n\
                          I  04010184,4\n\
                          \n \
                          L 1fff000000,128\n\
                          ==1234== \n\
                          ==1234== I   refs:      5";

    fn read(text: &str, fetches: bool, batch: usize) -> Result<Vec<Access>> {
        let mut r = Reader::new(Box::new(io::Cursor::new(text.as_bytes().to_vec())), "t.lackey", fetches);
        let mut out = Vec::new();
        let mut buf = vec![Access::default(); batch];
        loop {
            let n = r.fill(&mut buf)?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    fn acc(kind: AccessKind, vaddr: u64, ip: u64, size: u8, instrs: u32) -> Access {
        Access { cpu: 0, asid: 0, ip, vaddr, kind, size, instrs }
    }

    #[test]
    fn parses_sample_with_modify_and_banners() {
        use AccessKind::*;
        let want = vec![
            acc(Load, 0x4222cac, 0x4010176, 8, 2),
            acc(Load, 0x421c7f0, 0x4010176, 4, 0),
            acc(Store, 0x421c7f0, 0x4010176, 4, 0),
            acc(Store, 0x7ff000398, 0x401017b, 8, 1),
            acc(Load, 0x1fff000000, 0x4010184, 64, 2),
        ];
        // Batch of 1 forces the M line's store through the staging slot.
        for batch in [1, 2, 100] {
            assert_eq!(read(SAMPLE, false, batch).unwrap(), want, "batch {batch}");
        }
        let with = read(SAMPLE, true, 3).unwrap();
        let want = vec![
            acc(Fetch, 0x4010173, 0x4010173, 3, 1),
            acc(Fetch, 0x4010176, 0x4010176, 5, 1),
            acc(Load, 0x4222cac, 0x4010176, 8, 0),
            acc(Load, 0x421c7f0, 0x4010176, 4, 0),
            acc(Store, 0x421c7f0, 0x4010176, 4, 0),
            acc(Fetch, 0x401017b, 0x401017b, 2, 1),
            acc(Store, 0x7ff000398, 0x401017b, 8, 0),
            acc(Fetch, 0x4010180, 0x4010180, 4, 1),
            acc(Fetch, 0x4010184, 0x4010184, 4, 1),
            acc(Load, 0x1fff000000, 0x4010184, 64, 0),
        ];
        assert_eq!(with, want);
    }

    #[test]
    fn malformed_lines_name_offset_and_shape() {
        let cases = [
            ("I  04010173,3\n X 1234,8\n", 14),
            ("I  04010173,3\n L 12g4,8\n", 14),
            ("I  04010173\n", 0),
            (" L 1234,\n", 0),
            ("I  04010173,3\r\nI 0401,3\n", 15),
        ];
        for (text, off) in cases {
            match read(text, false, 16).unwrap_err() {
                Error::Trace { path, offset, msg } => {
                    assert_eq!(path, "t.lackey");
                    assert_eq!(offset, off, "{text:?}");
                    assert!(msg.starts_with("expected a lackey line `I  ADDR,SIZE`"), "{msg}");
                    assert!(msg.contains("found `"), "{msg}");
                }
                other => panic!("{other}"),
            }
        }
        let long = format!("I  04010173,3\n{}\n", "x".repeat(1000));
        assert!(matches!(read(&long, false, 4), Err(Error::Trace { offset: 14, .. })));
    }

    #[test]
    fn sniffing() {
        assert!(looks_like(SAMPLE.as_bytes(), false));
        assert!(looks_like(b"\nI  04010173,3\n", false));
        assert!(looks_like(b" S 7ff000398,8", true));
        assert!(!looks_like(b" S 7ff000398,8", false), "an incomplete line proves nothing");
        assert!(!looks_like(b"XLTRACE\0", true));
        assert!(!looks_like(&[0x49, 0x20, 0x20, 0xff, 0x00, 0x10], true));
        assert!(!looks_like(b"", true));
    }
}
