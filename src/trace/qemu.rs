//! Tracing a real program: runs it under user-mode QEMU (`qemu-x86_64`, or `qemu-ARCH` for the
//! host's architecture) with xlate's TCG plugin (`tools/qemu-plugin/`) and reads the plugin's
//! record stream from a pipe as an [`AccessSource`]. `docs/tracing.md` documents the stream.
//!
//! A [`Tracer`] can be read two ways:
//!
//! - [`AccessSource::fill`]: every access in the order the stream delivers them, all guest threads
//!   merged, each access's `cpu` set to its thread's number (what `xlate trace` writes);
//! - [`AccessSource::fill_thread`]: the accesses of one guest thread, for the simulator, which runs
//!   each thread as a stream of its own. The tracer demultiplexes the pipe into one queue per
//!   thread. A thread with nothing queued while the other threads' queues hold
//!   [`Tracer::stall_limit`] accesses is reported as stalled (0 accesses, not
//!   [`AccessSource::thread_done`]): it is blocked or descheduled in the real run, and the
//!   simulator runs the others meanwhile. This bounds the memory the queues take.
//!
//! Threads are numbered in the order they start; a thread started after another one exited gets a
//! new number even though QEMU reuses the exited thread's vCPU index.

use super::{Access, AccessKind, AccessSource};
use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};

/// The first eight bytes of the stream.
pub const MAGIC: [u8; 8] = *b"XLQTRACE";
/// The stream version this build reads.
pub const VERSION: u32 = 1;
/// Bytes per record (the header is one record long too).
pub const RECORD_LEN: usize = 24;
/// Header flag: instruction fetches are recorded.
pub const FLAG_FETCHES: u32 = 1;
/// Record kinds beyond the access kinds 0 (load), 1 (store), 2 (fetch).
const KIND_THREAD_START: u8 = 0x80;
const KIND_THREAD_EXIT: u8 = 0x81;
const KIND_END: u8 = 0x82;
const KIND_EXEC: u8 = 0x83;
/// Records read from the pipe at a time.
const CHUNK_RECORDS: usize = 1 << 16;
/// Default [`Tracer::stall_limit`]: 2 Mi accesses, 64 MiB of queues.
pub const STALL_LIMIT: usize = 2 << 20;
/// What the stream is called in error messages.
const STREAM: &str = "qemu plugin stream";
/// The command that builds the plugin, for error messages.
pub const BUILD_HINT: &str = "tools/qemu-plugin/build.sh";

/// A program to trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceCommand {
    /// The program and its arguments. The program is looked up in `PATH` unless it contains a `/`.
    pub argv: Vec<String>,
    /// Also record instruction fetches.
    pub fetches: bool,
}

impl TraceCommand {
    /// A command without fetches.
    pub fn new(argv: Vec<String>) -> TraceCommand {
        TraceCommand { argv, fetches: false }
    }
}

/// The QEMU user-mode emulator for the host's architecture: `$XLATE_QEMU`, else
/// `qemu-ARCH` in `PATH`.
pub fn find_qemu() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("XLATE_QEMU") {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(not_found(&p.display().to_string(), "(from XLATE_QEMU) does not exist")) };
    }
    let name = format!("qemu-{}", std::env::consts::ARCH);
    search_path(&name).ok_or_else(|| {
        not_found(&name, &format!("not found in PATH; install QEMU user mode (`apt-get install qemu-user`, or run {BUILD_HINT}, which also builds the plugin)"))
    })
}

/// Where the plugin is looked for when `$XLATE_QEMU_PLUGIN` is unset: `target/qemu-plugin/`
/// beside the running executable's `target/<profile>/`, then under this source tree's `target/`.
pub fn plugin_candidates() -> Vec<PathBuf> {
    let mut v = Vec::new();
    let rel = Path::new("qemu-plugin").join("libxlate_trace.so");
    if let Ok(exe) = std::env::current_exe() {
        // target/release/xlate, or target/release/deps/test-binary
        for up in exe.ancestors().skip(2).take(2) {
            v.push(up.join(&rel));
        }
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        v.push(PathBuf::from(t).join(&rel));
    }
    v.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join(&rel));
    v.dedup();
    v
}

/// The built plugin: `$XLATE_QEMU_PLUGIN`, else the first of [`plugin_candidates`] that exists.
pub fn find_plugin() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("XLATE_QEMU_PLUGIN") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(not_found(
                &p.display().to_string(),
                &format!("(from XLATE_QEMU_PLUGIN) does not exist; build the plugin with {BUILD_HINT}"),
            ))
        };
    }
    let cands = plugin_candidates();
    cands.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        let tried = cands.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
        not_found(
            "libxlate_trace.so",
            &format!(
                "the xlate QEMU plugin is not built (looked for {tried}); build it with {BUILD_HINT}, or point XLATE_QEMU_PLUGIN at it"
            ),
        )
    })
}

fn not_found(what: &str, msg: &str) -> Error {
    Error::io(what, io::Error::new(io::ErrorKind::NotFound, msg.to_string()))
}

fn search_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false))
}

/// One guest thread's demultiplexed accesses.
#[derive(Default)]
struct Thread {
    queue: VecDeque<Access>,
    /// Its exit record (or the end of the stream) was read.
    exited: bool,
}

/// How a traced program ended, from [`Tracer::finish`].
#[derive(Clone, Debug)]
pub struct TraceEnd {
    /// QEMU's exit status (the program's, as QEMU passes it on); `None` if it was not waited for.
    pub status: Option<ExitStatus>,
    /// The stream ended with the plugin's end record: nothing was lost.
    pub complete: bool,
    /// The stream ended right after a thread called execve: the program replaced itself with
    /// another one, which ran untraced.
    pub exec: bool,
    /// Guest threads seen.
    pub threads: usize,
    /// The tracer was stopped before the program ended ([`Tracer::stop`]).
    pub stopped: bool,
}

/// A running program's accesses, read from the plugin's stream (see the module doc).
pub struct Tracer {
    input: Box<dyn Read>,
    child: Option<Child>,
    /// Raw bytes read and not yet decoded: `raw[pos..len]`.
    raw: Vec<u8>,
    pos: usize,
    len: usize,
    /// Stream bytes decoded so far (for error offsets).
    offset: u64,
    /// Records read after the header (control records included).
    records: u64,
    fetches: bool,
    threads: Vec<Thread>,
    /// The current thread of each vCPU index.
    vcpu_thread: Vec<Option<usize>>,
    queued: usize,
    eof: bool,
    ended: bool,
    /// The last record was an execve notice.
    exec: bool,
    stopped: bool,
    /// Queued accesses of other threads at which a thread with none is reported stalled.
    pub stall_limit: usize,
}

impl Tracer {
    /// Starts `cmd` under QEMU with the plugin ([`find_qemu`], [`find_plugin`]) and reads the
    /// stream's header and first thread. The program's standard streams are this process's.
    pub fn spawn(cmd: &TraceCommand) -> Result<Tracer> {
        let qemu = find_qemu()?;
        let plugin = find_plugin()?;
        let Some(prog) = cmd.argv.first() else {
            return Err(Error::io("trace command", io::Error::new(io::ErrorKind::InvalidInput, "no program given")));
        };
        let prog_path =
            if prog.contains('/') { PathBuf::from(prog) } else { search_path(prog).ok_or_else(|| not_found(prog, "not found in PATH"))? };
        if !prog_path.is_file() {
            return Err(not_found(prog, "no such program"));
        }
        let plugin_s = plugin.display().to_string();
        if plugin_s.contains(',') {
            return Err(Error::io(
                plugin_s,
                io::Error::new(io::ErrorKind::InvalidInput, "QEMU cannot load a plugin whose path contains a comma"),
            ));
        }
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(Error::io("pipe", io::Error::last_os_error()));
        }
        // SAFETY: both descriptors were just created and are owned here alone.
        let (read_end, write_end) = unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let wfd = fds[1];
        // A bigger pipe means fewer context switches between QEMU and this process (best effort).
        // SAFETY: plain fcntl on a descriptor we own.
        unsafe { libc::fcntl(fds[0], libc::F_SETPIPE_SZ, 1 << 20) };
        let mut c = Command::new(&qemu);
        c.arg("-plugin").arg(format!("{plugin_s},outfd={wfd}{}", if cmd.fetches { ",fetches=on" } else { "" }));
        c.arg(&prog_path).args(&cmd.argv[1..]);
        // SAFETY: only async-signal-safe fcntl between fork and exec: keep the write end open
        // across exec (it was created close-on-exec so no other child inherits it).
        unsafe {
            c.pre_exec(move || if libc::fcntl(wfd, libc::F_SETFD, 0) < 0 { Err(io::Error::last_os_error()) } else { Ok(()) });
        }
        let child = c.spawn().map_err(|e| Error::io(qemu.display().to_string(), e))?;
        drop(write_end); // the stream ends when QEMU closes its copy
        let mut t = Tracer::from_reader(Box::new(read_end));
        t.child = Some(child);
        match t.start() {
            Ok(()) => Ok(t),
            Err(e) => {
                // Say why QEMU failed (its own message is on stderr already). A QEMU still
                // running after a malformed stream is stopped first.
                let status = t.child.as_mut().and_then(|c| {
                    if matches!(c.try_wait(), Ok(None)) && !t.eof {
                        let _ = c.kill();
                    }
                    c.wait().ok()
                });
                t.child = None;
                match status {
                    Some(s) if !s.success() && t.records == 0 => Err(Error::io(
                        qemu.display().to_string(),
                        io::Error::other(format!(
                            "exited with {} before the plugin streamed anything (see its message above): {e}",
                            describe(s)
                        )),
                    )),
                    _ => Err(e),
                }
            }
        }
    }

    /// A tracer over an already open stream (no process): for tests and for raw streams saved
    /// with the plugin's `out=PATH`. Call through [`Tracer::open_stream`] to read the header.
    fn from_reader(input: Box<dyn Read>) -> Tracer {
        Tracer {
            input,
            child: None,
            raw: vec![0; CHUNK_RECORDS * RECORD_LEN],
            pos: 0,
            len: 0,
            offset: 0,
            records: 0,
            fetches: false,
            threads: Vec::new(),
            vcpu_thread: Vec::new(),
            queued: 0,
            eof: false,
            ended: false,
            exec: false,
            stopped: false,
            stall_limit: STALL_LIMIT,
        }
    }

    /// Reads a stream (a file the plugin wrote with `out=PATH`, or any reader).
    pub fn open_stream(input: Box<dyn Read>) -> Result<Tracer> {
        let mut t = Tracer::from_reader(input);
        t.start()?;
        Ok(t)
    }

    /// Reads the header, then records until the first thread has started.
    fn start(&mut self) -> Result<()> {
        if !self.ensure(1)? {
            return Err(trace_err(self.offset, format!("the stream ended after {} bytes, inside its 24-byte header", self.len - self.pos)));
        }
        let h = &self.raw[self.pos..self.pos + RECORD_LEN];
        if h[..8] != MAGIC {
            return Err(trace_err(
                0,
                format!("not an xlate QEMU plugin stream: expected magic XLQTRACE, found {:?}", String::from_utf8_lossy(&h[..8])),
            ));
        }
        let word = |i: usize| u32::from_le_bytes(h[8 + 4 * i..12 + 4 * i].try_into().unwrap());
        let (version, rec_len, flags) = (word(0), word(1), word(2));
        if version != VERSION || rec_len as usize != RECORD_LEN {
            return Err(trace_err(
                8,
                format!("plugin stream version {version} with {rec_len}-byte records; this xlate reads version {VERSION}, {RECORD_LEN}-byte records: rebuild the plugin with {BUILD_HINT}"),
            ));
        }
        self.fetches = flags & FLAG_FETCHES != 0;
        self.pos += RECORD_LEN;
        self.offset += RECORD_LEN as u64;
        while self.threads.is_empty() {
            if !self.ensure(1)? {
                self.at_eof()?;
                return Err(trace_err(self.offset, "the stream ended before any guest thread started"));
            }
            if let Some((t, a)) = self.decode_one()? {
                self.threads[t].queue.push_back(a);
                self.queued += 1;
            }
        }
        Ok(())
    }

    /// Whether the stream holds fetches.
    pub fn has_fetches(&self) -> bool {
        self.fetches
    }

    /// Makes at least `n` whole records available in `raw` unless the stream ends first
    /// (returns false then, having read everything).
    fn ensure(&mut self, n: usize) -> Result<bool> {
        while self.len - self.pos < n * RECORD_LEN {
            if self.eof {
                return Ok(false);
            }
            if self.pos > 0 {
                self.raw.copy_within(self.pos..self.len, 0);
                self.len -= self.pos;
                self.pos = 0;
            }
            match self.input.read(&mut self.raw[self.len..]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.len += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(STREAM, e)),
            }
        }
        Ok(true)
    }

    /// Reads whatever is available (one read), returning false at the end of the stream.
    fn read_more(&mut self) -> Result<bool> {
        let have = (self.len - self.pos) / RECORD_LEN;
        self.ensure(have + 1)
    }

    /// At the end of the stream: every thread has ended; a partial record is an error.
    fn at_eof(&mut self) -> Result<()> {
        for t in &mut self.threads {
            t.exited = true;
        }
        let left = self.len - self.pos;
        if left != 0 && !self.stopped {
            return Err(trace_err(self.offset, format!("the stream ends {left} byte(s) into a 24-byte record")));
        }
        Ok(())
    }

    /// Decodes the record at `pos` (which must be whole); an access comes back with the
    /// thread it belongs to.
    #[inline]
    fn decode_one(&mut self) -> Result<Option<(usize, Access)>> {
        let r: &[u8; RECORD_LEN] = self.raw[self.pos..self.pos + RECORD_LEN].try_into().unwrap();
        let vaddr = u64::from_le_bytes(r[0..8].try_into().unwrap());
        let pc = u64::from_le_bytes(r[8..16].try_into().unwrap());
        let instrs = u32::from_le_bytes(r[16..20].try_into().unwrap());
        let vcpu = u16::from_le_bytes([r[20], r[21]]) as usize;
        let (size, kind) = (r[22], r[23]);
        let at = self.offset;
        self.pos += RECORD_LEN;
        self.offset += RECORD_LEN as u64;
        if self.ended {
            return Err(trace_err(at, "data after the end record"));
        }
        let count_before = self.records;
        self.records += 1;
        self.exec = kind == KIND_EXEC;
        let kind = match kind {
            0 => AccessKind::Load,
            1 => AccessKind::Store,
            2 => AccessKind::Fetch,
            KIND_THREAD_START => {
                self.new_thread(vcpu);
                return Ok(None);
            }
            KIND_THREAD_EXIT => {
                if let Some(t) = self.vcpu_thread.get_mut(vcpu).and_then(|t| t.take()) {
                    self.threads[t].exited = true;
                }
                return Ok(None);
            }
            KIND_EXEC => return Ok(None),
            KIND_END => {
                if vaddr != count_before {
                    return Err(trace_err(at, format!("the plugin wrote {vaddr} records but {count_before} arrived: records were lost")));
                }
                self.ended = true;
                return Ok(None);
            }
            k => return Err(trace_err(at, format!("record {count_before}: unknown kind {k:#x} (expected 0-2 or 0x80-0x83)"))),
        };
        let t = match self.vcpu_thread.get(vcpu).copied().flatten() {
            Some(t) => t,
            None => self.new_thread(vcpu), // an access after its thread's exit (a restarted exit syscall)
        };
        Ok(Some((t, Access { cpu: t.min(u16::MAX as usize) as u16, asid: 0, ip: pc, vaddr, kind, size: size.clamp(1, 64), instrs })))
    }

    /// The fast path of [`Tracer::fill`]: decodes the run of access records of known threads
    /// at `pos` into `out`, stopping before anything else; returns how many.
    #[inline]
    fn decode_run(&mut self, out: &mut [Access]) -> usize {
        if self.ended {
            return 0;
        }
        let whole = (self.len - self.pos) / RECORD_LEN;
        let recs = self.raw[self.pos..self.pos + whole * RECORD_LEN].chunks_exact(RECORD_LEN);
        let mut n = 0;
        for (r, slot) in recs.zip(out.iter_mut()) {
            let kind = match r[23] {
                0 => AccessKind::Load,
                1 => AccessKind::Store,
                2 => AccessKind::Fetch,
                _ => break,
            };
            let vcpu = u16::from_le_bytes([r[20], r[21]]) as usize;
            let Some(&Some(t)) = self.vcpu_thread.get(vcpu) else { break };
            *slot = Access {
                cpu: t.min(u16::MAX as usize) as u16,
                asid: 0,
                ip: u64::from_le_bytes(r[8..16].try_into().unwrap()),
                vaddr: u64::from_le_bytes(r[0..8].try_into().unwrap()),
                kind,
                size: r[22].clamp(1, 64),
                instrs: u32::from_le_bytes(r[16..20].try_into().unwrap()),
            };
            n += 1;
        }
        if n > 0 {
            self.pos += n * RECORD_LEN;
            self.offset += (n * RECORD_LEN) as u64;
            self.records += n as u64;
            self.exec = false;
        }
        n
    }

    fn new_thread(&mut self, vcpu: usize) -> usize {
        if self.vcpu_thread.len() <= vcpu {
            self.vcpu_thread.resize(vcpu + 1, None);
        }
        if let Some(old) = self.vcpu_thread[vcpu] {
            self.threads[old].exited = true;
        }
        self.threads.push(Thread::default());
        let t = self.threads.len() - 1;
        self.vcpu_thread[vcpu] = Some(t);
        t
    }

    /// Decodes every whole record read so far into the threads' queues.
    fn distribute(&mut self) -> Result<()> {
        while self.len - self.pos >= RECORD_LEN {
            if let Some((t, a)) = self.decode_one()? {
                self.threads[t].queue.push_back(a);
                self.queued += 1;
            }
        }
        Ok(())
    }

    /// Stops the program (SIGKILL) and reads no more; what was read stays readable.
    pub fn stop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stopped = true;
        self.eof = true;
        self.len = self.pos;
        for t in &mut self.threads {
            t.exited = true;
        }
    }

    /// Waits for the program (after its stream ended or [`Tracer::stop`]) and says how it ended.
    pub fn finish(mut self) -> Result<TraceEnd> {
        let status = match self.child.take() {
            Some(mut c) => Some(c.wait().map_err(|e| Error::io("qemu", e))?),
            None => None,
        };
        Ok(TraceEnd { status, complete: self.ended, exec: self.exec && self.eof, threads: self.threads.len(), stopped: self.stopped })
    }
}

impl Drop for Tracer {
    /// A program whose stream was read to its end is about to exit and is waited for; one
    /// abandoned earlier (the simulation stopped at its access limit) is killed.
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            if !self.eof && matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

/// "status 3" or "signal 9".
pub fn describe(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("status {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => s.to_string(),
    }
}

fn trace_err(offset: u64, msg: impl Into<String>) -> Error {
    Error::Trace { path: STREAM.to_string(), offset, msg: msg.into() }
}

impl AccessSource for Tracer {
    /// All threads' accesses in stream order (queued ones first), `cpu` = thread number.
    fn fill(&mut self, buf: &mut [Access]) -> Result<usize> {
        let mut n = 0;
        if self.queued > 0 {
            for t in &mut self.threads {
                while n < buf.len() {
                    match t.queue.pop_front() {
                        Some(a) => {
                            buf[n] = a;
                            n += 1;
                            self.queued -= 1;
                        }
                        None => break,
                    }
                }
            }
            if n > 0 {
                return Ok(n);
            }
        }
        loop {
            while n < buf.len() && self.len - self.pos >= RECORD_LEN {
                n += self.decode_run(&mut buf[n..]);
                if n < buf.len() && self.len - self.pos >= RECORD_LEN {
                    // A control record, or an access of a thread not seen yet.
                    if let Some((_, a)) = self.decode_one()? {
                        buf[n] = a;
                        n += 1;
                    }
                }
            }
            if n > 0 {
                return Ok(n);
            }
            if !self.read_more()? {
                self.at_eof()?;
                return Ok(0);
            }
        }
    }

    fn threads(&self) -> usize {
        self.threads.len()
    }

    fn fill_thread(&mut self, thread: usize, buf: &mut [Access]) -> Result<usize> {
        loop {
            let th = &mut self.threads[thread];
            if !th.queue.is_empty() {
                let n = buf.len().min(th.queue.len());
                for (slot, a) in buf.iter_mut().zip(th.queue.drain(..n)) {
                    *slot = a;
                }
                self.queued -= n;
                return Ok(n);
            }
            if th.exited || self.queued >= self.stall_limit {
                return Ok(0);
            }
            if self.len - self.pos < RECORD_LEN && !self.read_more()? {
                self.at_eof()?;
                continue;
            }
            self.distribute()?;
        }
    }

    fn thread_done(&self, thread: usize) -> bool {
        let t = &self.threads[thread];
        t.queue.is_empty() && t.exited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(flags: u32) -> Vec<u8> {
        let mut v = MAGIC.to_vec();
        for w in [VERSION, RECORD_LEN as u32, flags, 0] {
            v.extend_from_slice(&w.to_le_bytes());
        }
        v
    }

    fn rec(v: &mut Vec<u8>, vaddr: u64, pc: u64, instrs: u32, vcpu: u16, size: u8, kind: u8) {
        v.extend_from_slice(&vaddr.to_le_bytes());
        v.extend_from_slice(&pc.to_le_bytes());
        v.extend_from_slice(&instrs.to_le_bytes());
        v.extend_from_slice(&vcpu.to_le_bytes());
        v.push(size);
        v.push(kind);
    }

    /// Two threads on vCPU 0 and 1; vCPU 1 exits and is reused by a third thread.
    fn sample() -> Vec<u8> {
        let mut v = header(0);
        rec(&mut v, 0, 0, 0, 0, 0, KIND_THREAD_START);
        rec(&mut v, 0x1000, 0x400000, 3, 0, 8, 0);
        rec(&mut v, 0, 0, 0, 1, 0, KIND_THREAD_START);
        rec(&mut v, 0x2000, 0x400010, 1, 1, 4, 1);
        rec(&mut v, 0x1008, 0x400004, 0, 0, 1, 1);
        rec(&mut v, 0, 0, 0, 1, 0, KIND_THREAD_EXIT);
        rec(&mut v, 0, 0, 0, 1, 0, KIND_THREAD_START);
        rec(&mut v, 0x3000, 0x400020, 7, 1, 2, 2);
        rec(&mut v, 8, 0, 0, 0, 0, KIND_END);
        v
    }

    fn all(src: &mut dyn AccessSource) -> Vec<Access> {
        let mut out = Vec::new();
        let mut buf = vec![Access::default(); 2];
        loop {
            let n = src.fill(&mut buf).unwrap();
            if n == 0 {
                return out;
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    #[test]
    fn merged_order_and_thread_numbers() {
        let mut t = Tracer::open_stream(Box::new(io::Cursor::new(sample()))).unwrap();
        let got = all(&mut t);
        let summary: Vec<(u16, u64, AccessKind, u8, u32)> = got.iter().map(|a| (a.cpu, a.vaddr, a.kind, a.size, a.instrs)).collect();
        assert_eq!(
            summary,
            vec![
                (0, 0x1000, AccessKind::Load, 8, 3),
                (1, 0x2000, AccessKind::Store, 4, 1),
                (0, 0x1008, AccessKind::Store, 1, 0),
                (2, 0x3000, AccessKind::Fetch, 2, 7),
            ]
        );
        assert_eq!(got[0].ip, 0x400000);
        assert_eq!(t.threads(), 3);
        let end = t.finish().unwrap();
        assert!(end.complete && end.status.is_none() && end.threads == 3);
    }

    #[test]
    fn per_thread_streams() {
        let mut t = Tracer::open_stream(Box::new(io::Cursor::new(sample()))).unwrap();
        let mut buf = vec![Access::default(); 8];
        assert_eq!(t.fill_thread(0, &mut buf).unwrap(), 2);
        assert_eq!((buf[0].vaddr, buf[1].vaddr), (0x1000, 0x1008));
        assert_eq!(t.threads(), 3);
        assert!(!t.thread_done(1));
        assert_eq!(t.fill_thread(1, &mut buf).unwrap(), 1);
        assert_eq!(buf[0].vaddr, 0x2000);
        assert_eq!(t.fill_thread(1, &mut buf).unwrap(), 0);
        assert!(t.thread_done(1));
        assert_eq!(t.fill_thread(2, &mut buf).unwrap(), 1);
        assert_eq!((buf[0].vaddr, buf[0].cpu), (0x3000, 2));
        assert_eq!(t.fill_thread(0, &mut buf).unwrap(), 0);
        assert!(t.thread_done(0) && t.thread_done(2));
    }

    #[test]
    fn ended_thread_is_done_not_stalled() {
        let mut v = header(0);
        rec(&mut v, 0, 0, 0, 0, 0, KIND_THREAD_START);
        rec(&mut v, 0, 0, 0, 1, 0, KIND_THREAD_START);
        for i in 0..10 {
            rec(&mut v, 0x1000 + i, 0, 1, 1, 1, 0);
        }
        rec(&mut v, 0x9000, 0, 1, 0, 1, 0);
        let mut t = Tracer::open_stream(Box::new(io::Cursor::new(v))).unwrap();
        t.stall_limit = 20;
        let mut buf = vec![Access::default(); 8];
        assert_eq!(t.fill_thread(0, &mut buf).unwrap(), 1);
        // Thread 1's accesses are queued; the stream has ended: thread 0 is done, not stalled.
        assert_eq!(t.fill_thread(0, &mut buf).unwrap(), 0);
        assert!(t.thread_done(0));
        assert_eq!(t.fill_thread(1, &mut buf).unwrap(), 8);
        assert_eq!(t.fill_thread(1, &mut buf).unwrap(), 2);
        assert_eq!(t.fill_thread(1, &mut buf).unwrap(), 0);
        assert!(t.thread_done(1));
    }

    #[test]
    fn stalled_thread_is_not_done() {
        // A reader that hands out one record per read and never ends, so the stall is seen.
        struct Trickle(Vec<u8>, usize);
        impl Read for Trickle {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.1 >= self.0.len() {
                    panic!("read past the prepared records: the tracer should have stalled");
                }
                let n = RECORD_LEN.min(buf.len());
                buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
                self.1 += n;
                Ok(n)
            }
        }
        let mut v = header(0);
        rec(&mut v, 0, 0, 0, 0, 0, KIND_THREAD_START);
        rec(&mut v, 0, 0, 0, 1, 0, KIND_THREAD_START);
        for i in 0..4 {
            rec(&mut v, 0x1000 + i, 0, 1, 1, 1, 0);
        }
        let mut t = Tracer::open_stream(Box::new(Trickle(v, 0))).unwrap();
        t.stall_limit = 4;
        let mut buf = vec![Access::default(); 8];
        assert_eq!(t.fill_thread(0, &mut buf).unwrap(), 0);
        assert!(!t.thread_done(0));
        assert_eq!(t.threads(), 2);
        assert_eq!(t.fill_thread(1, &mut buf).unwrap(), 4);
    }

    #[test]
    fn malformed_streams() {
        let err = |bytes: Vec<u8>| {
            Tracer::open_stream(Box::new(io::Cursor::new(bytes))).and_then(|mut t| all_res(&mut t)).unwrap_err().to_string()
        };
        fn all_res(t: &mut Tracer) -> Result<()> {
            let mut buf = vec![Access::default(); 4];
            while t.fill(&mut buf)? > 0 {}
            Ok(())
        }
        assert!(err(b"XLQTRA".to_vec()).contains("inside its 24-byte header"));
        assert!(err(b"NOTATRACE_______________".to_vec()).contains("expected magic XLQTRACE"));
        let mut v = header(0);
        v[12] = 99;
        assert!(err(v).contains("rebuild the plugin"));
        assert!(err(header(0)).contains("before any guest thread started"));
        let mut v = sample();
        v.truncate(v.len() - 5);
        assert!(err(v).contains("19 byte(s) into a 24-byte record"));
        let mut v = sample();
        let n = v.len();
        v[n - 24] = 5; // end record claims 5 records
        assert!(err(v).contains("records were lost"));
        let mut v = header(0);
        rec(&mut v, 0, 0, 0, 0, 0, KIND_THREAD_START);
        rec(&mut v, 0, 0, 0, 0, 0, 7);
        assert!(err(v).contains("unknown kind 0x7"));
    }
}
