//! Reading a trace on a thread of its own, so that decompressing and decoding it overlaps the
//! simulation that consumes it (docs/performance.md, "Trace replay").
//!
//! The reader thread owns the [`AccessSource`] and fills fixed-size batches of accesses; a
//! bounded channel carries each full batch to the consumer, and a second channel carries the
//! emptied batch back, so a fixed set of [`BUFFERS`] batches circulates and nothing is allocated
//! per access. A consumer that reads with [`AccessSource::fill_thread_vec`] (the simulator)
//! gets each batch by exchanging its own buffer for it, so nothing is copied either. The stream the consumer sees is exactly the source's: the same accesses in the
//! same order, then its end or its error, returned after every access decoded before it (as the
//! readers themselves do, see [`super::BatchReader`]). Dropping the consumer disconnects both
//! channels; the reader thread notices at its next send or receive, at most one batch later, and
//! the drop waits for it to end (so the file is closed when the drop returns).

use super::{Access, AccessSource};
use crate::error::{Error, Result};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};
use std::thread::JoinHandle;

/// Accesses per batch: large enough that the channel, and the wake-up of the reader thread when
/// a batch comes back, cost nothing per access (8192 spent 4 % of the simulating thread on
/// futex wake-ups; docs/performance.md, "Trace replay").
pub const BATCH: usize = 32768;
/// Batches in circulation: how far the reader thread may run ahead of the consumer.
pub const BUFFERS: usize = 4;

/// What the reader thread sends.
enum Msg {
    /// A batch whose first `.1` accesses are valid, and the source's
    /// [`AccessSource::bytes_read`] after filling it.
    Batch(Vec<Access>, usize, Option<(u64, u64)>),
    /// The source ended (`None`) or failed; nothing follows.
    End(Option<Error>),
}

/// The consumer's ends of the two channels.
struct Link {
    full: Receiver<Msg>,
    free: Sender<Vec<Access>>,
}

/// An [`AccessSource`] read ahead on a thread of its own; see the module documentation.
pub struct ReadAhead {
    link: Option<Link>,
    thread: Option<JoinHandle<()>>,
    /// The batch being handed out: `cur[pos..len]` are not handed out yet.
    cur: Option<Vec<Access>>,
    pos: usize,
    len: usize,
    /// The stream ended or failed; `failed` holds an error still to be returned.
    ended: bool,
    failed: Option<Error>,
    total_instrs: Option<u64>,
    total_accesses: Option<u64>,
    bytes_read: Option<(u64, u64)>,
}

impl ReadAhead {
    /// Starts reading `src` on a new thread. Only single-stream sources (files) are read
    /// ahead: `src` is read with [`AccessSource::fill`].
    pub fn spawn(mut src: Box<dyn AccessSource + Send>) -> ReadAhead {
        let (total_instrs, total_accesses, bytes_read) = (src.total_instrs(), src.total_accesses(), src.bytes_read());
        let (full_tx, full_rx) = sync_channel(BUFFERS);
        let (free_tx, free_rx) = channel::<Vec<Access>>();
        for _ in 0..BUFFERS {
            free_tx.send(vec![Access::default(); BATCH]).expect("the receiver is alive");
        }
        let thread = std::thread::Builder::new()
            .name("xlate-trace-reader".into())
            .spawn(move || {
                // Ends when the consumer is gone (either channel disconnected) or the source is.
                for mut buf in free_rx {
                    // A buffer the consumer swapped in (`fill_thread_vec`) may be shorter: every
                    // batch is BATCH long (this grows each of the few buffers once, not per batch).
                    buf.resize(BATCH, Access::default());
                    let msg = match src.fill(&mut buf) {
                        Ok(0) => Msg::End(None),
                        Ok(n) => Msg::Batch(buf, n, src.bytes_read()),
                        Err(e) => Msg::End(Some(e)),
                    };
                    let last = matches!(msg, Msg::End(_));
                    if full_tx.send(msg).is_err() || last {
                        return;
                    }
                }
            })
            .expect("cannot start the trace reader thread");
        ReadAhead {
            link: Some(Link { full: full_rx, free: free_tx }),
            thread: Some(thread),
            cur: None,
            pos: 0,
            len: 0,
            ended: false,
            failed: None,
            total_instrs,
            total_accesses,
            bytes_read,
        }
    }

    /// Returns the exhausted batch and waits for the next one; false when the stream has ended
    /// (`self.failed` then holds its error, if any).
    fn next_batch(&mut self) -> bool {
        let link = self.link.as_ref().expect("the link lives until drop");
        if let Some(buf) = self.cur.take() {
            // The reader thread may have ended (after the last batch): then nobody needs it.
            let _ = link.free.send(buf);
        }
        match link.full.recv() {
            Ok(Msg::Batch(buf, n, bytes)) => {
                self.cur = Some(buf);
                (self.pos, self.len) = (0, n);
                self.bytes_read = bytes;
                true
            }
            Ok(Msg::End(err)) => {
                self.ended = true;
                self.failed = err;
                false
            }
            Err(_) => {
                // The thread quit without a last message: it panicked. Panic here too, as reading
                // on this thread would have.
                self.ended = true;
                if let Some(Err(panic)) = self.thread.take().map(JoinHandle::join) {
                    std::panic::resume_unwind(panic);
                }
                false
            }
        }
    }
}

impl AccessSource for ReadAhead {
    fn fill(&mut self, out: &mut [Access]) -> Result<usize> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let mut n = 0;
        while n < out.len() {
            if self.pos == self.len && (self.ended || !self.next_batch()) {
                break;
            }
            let cur = self.cur.as_ref().expect("a batch is being handed out");
            let take = (self.len - self.pos).min(out.len() - n);
            out[n..n + take].copy_from_slice(&cur[self.pos..self.pos + take]);
            self.pos += take;
            n += take;
        }
        // An error found while filling: hand out what came before it first.
        match self.failed.take() {
            Some(e) if n == 0 => Err(e),
            failed => {
                self.failed = failed;
                Ok(n)
            }
        }
    }

    /// Hands a whole unread batch over by exchanging it for `buf` (which goes back to the
    /// reader thread as a free buffer): no copy. A batch partly handed out by `fill` is copied.
    fn fill_thread_vec(&mut self, thread: usize, buf: &mut Vec<Access>) -> Result<usize> {
        if thread != 0 {
            return Ok(0);
        }
        if self.failed.is_none() && self.pos == self.len && !self.ended {
            self.next_batch();
        }
        match self.cur.as_mut() {
            Some(cur) if self.pos == 0 && self.len > 0 => {
                std::mem::swap(cur, buf);
                self.pos = self.len;
                Ok(self.len)
            }
            _ => self.fill(buf),
        }
    }

    fn total_instrs(&self) -> Option<u64> {
        self.total_instrs
    }

    fn total_accesses(&self) -> Option<u64> {
        self.total_accesses
    }

    fn bytes_read(&self) -> Option<(u64, u64)> {
        self.bytes_read
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Disconnect first, so a reader thread blocked on either channel wakes up and ends.
        drop(self.link.take());
        if let Some(t) = self.thread.take() {
            // A panic of the reader thread after the consumer stopped listening has nobody to
            // report to; do not panic in drop for it.
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Rng, TempDir};
    use super::super::{create, native, open_direct, AccessKind, Format};
    use super::*;
    use std::io::Write;
    use std::path::Path;

    /// Accesses with every kind, scattered and streaming addresses, and varying sizes and counts.
    fn accesses(seed: u64, n: usize) -> Vec<Access> {
        let mut r = Rng::new(seed);
        let mut vaddr = 0x7f00_0000_0000u64;
        (0..n)
            .map(|i| {
                vaddr = if r.below(8) == 0 { r.below(1 << 47) } else { vaddr.wrapping_add(r.below(16) * 8) };
                let kind = [AccessKind::Load, AccessKind::Store, AccessKind::Fetch][r.below(3) as usize];
                Access {
                    ip: 0x40_0000 + 4 * (i as u64 % 97),
                    vaddr,
                    kind,
                    size: 1 << r.below(4),
                    instrs: r.below(3) as u32,
                    ..Access::default()
                }
            })
            .collect()
    }

    /// Everything `src` yields through buffers of `chunk` accesses, and the error it ends with.
    fn drain(src: &mut dyn AccessSource, chunk: usize) -> (Vec<Access>, Option<String>) {
        let mut out = Vec::new();
        let mut buf = vec![Access::default(); chunk];
        loop {
            match src.fill(&mut buf) {
                Ok(0) => return (out, None),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => return (out, Some(e.to_string())),
            }
        }
    }

    /// Like [`drain`], but every other call is [`AccessSource::fill_thread_vec`], which swaps
    /// whole batches in, so both the swap and the copy of a partly handed-out batch are used.
    fn drain_swapping(src: &mut dyn AccessSource, chunk: usize) -> (Vec<Access>, Option<String>) {
        let mut out = Vec::new();
        let mut buf = vec![Access::default(); chunk];
        for call in 0.. {
            let got = if call % 2 == 0 {
                src.fill_thread_vec(0, &mut buf)
            } else {
                buf.resize(chunk, Access::default());
                src.fill(&mut buf)
            };
            match got {
                Ok(0) => return (out, None),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => return (out, Some(e.to_string())),
            }
        }
        unreachable!()
    }

    /// Reads `path` directly and read ahead, through buffer sizes below, at and above [`BATCH`],
    /// by copies and by swapped batches; all must agree. Returns what was read.
    fn same_both_ways(path: &Path) -> (Vec<Access>, Option<String>) {
        let want = drain(&mut *open_direct(path, true).unwrap(), 4096);
        for chunk in [1, 7, 1000, BATCH, BATCH + 1, 3 * BATCH + 5] {
            assert_eq!(drain(&mut *open_direct(path, true).unwrap(), chunk), want, "direct, chunk {chunk}");
            let mut ahead = ReadAhead::spawn(open_direct(path, true).unwrap());
            assert_eq!(drain(&mut ahead, chunk), want, "read ahead, chunk {chunk}");
            let mut swapping = ReadAhead::spawn(open_direct(path, true).unwrap());
            assert_eq!(drain_swapping(&mut swapping, chunk), want, "read ahead swapping batches, chunk {chunk}");
            // After the end or the error, the stream stays ended.
            assert_eq!(ahead.fill(&mut [Access::default(); 4]).unwrap(), 0);
        }
        want
    }

    #[test]
    fn read_ahead_yields_the_same_accesses() {
        let dir = TempDir::new("readahead");
        let acc = accesses(1, 5 * BATCH + 123);
        for name in ["t.xlt", "t.champsim.xz", "t.champsim"] {
            let path = dir.path(name);
            let mut w = create(&path, if name.ends_with(".xlt") { Format::Native } else { Format::ChampSim }).unwrap();
            for a in &acc {
                w.write(a).unwrap();
            }
            w.finish().unwrap();
            let (got, err) = same_both_ways(&path);
            assert_eq!(err, None, "{name}");
            if name.ends_with(".xlt") {
                assert_eq!(got, acc);
                let ahead = ReadAhead::spawn(open_direct(&path, false).unwrap());
                assert_eq!(
                    (ahead.total_accesses(), ahead.total_instrs()),
                    (Some(acc.len() as u64), Some(acc.iter().map(|a| a.instrs as u64).sum()))
                );
            } else {
                // Fetches are not written to ChampSim; the reader makes its own.
                assert!(got.len() > 3 * BATCH, "{name}: {}", got.len());
            }
        }
        // An empty trace ends at once.
        let path = dir.path("empty.xlt");
        create(&path, Format::Native).unwrap().finish().unwrap();
        assert_eq!(same_both_ways(&path), (Vec::new(), None));
    }

    #[test]
    fn errors_surface_after_the_same_accesses() {
        let dir = TempDir::new("readahead-err");
        // Native: a body of 2-byte records (load, size 8, instrs 1, vaddr + 8) after a first
        // record that sets the ip; record `bad` gets the invalid kind 3.
        let (records, bad) = (4 * BATCH as u64 + 10, 2 * BATCH as u64 + 77);
        let mut body = vec![(3 << 2) | (1 << 5) | (1 << 6), 0x10, 0x02];
        for _ in 1..records {
            body.extend_from_slice(&[(3 << 2) | (1 << 5), 0x10]);
        }
        body[3 + 2 * (bad as usize - 1)] |= 3;
        let header = native::Header { version: native::VERSION, flags: native::FLAG_COMPLETE, records, instrs: records };
        let path = dir.path("bad.xlt");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&header.encode()).unwrap();
        f.write_all(&zstd::encode_all(&body[..], 3).unwrap()).unwrap();
        drop(f);
        let (got, err) = same_both_ways(&path);
        assert_eq!(got.len() as u64, bad);
        assert_eq!((got[0].ip, got[1].vaddr, got[bad as usize - 1].vaddr), (1, 16, 8 * bad));
        let err = err.unwrap();
        assert!(err.contains("bad.xlt") && err.contains(&format!("record {bad}: invalid access kind 3")), "{err}");

        // Lackey: a malformed line after 3000 accesses.
        let path = dir.path("bad.lackey");
        let mut text: String = (0..3000).map(|i| format!(" L {:08x},8\n", 0x1000 + 8 * i)).collect();
        text.push_str(" X oops\n L 1000,8\n");
        std::fs::write(&path, text).unwrap();
        let (got, err) = same_both_ways(&path);
        assert_eq!(got.len(), 3000);
        assert!(err.unwrap().contains("bad.lackey"));

        // ChampSim .xz: a truncated last record after 2 * BATCH + 3 records of one load each.
        let path = dir.path("bad.champsim.xz");
        let mut raw = Vec::new();
        for i in 0..2 * BATCH as u64 + 3 {
            let rec = crate::trace::champsim::Record { ip: 0x40_0000, source_memory: [0x1000 + 8 * i, 0, 0, 0], ..Default::default() };
            raw.extend_from_slice(&rec.encode());
        }
        raw.extend_from_slice(&[1, 2, 3]);
        let mut e = xz2::write::XzEncoder::new(Vec::new(), 1);
        e.write_all(&raw).unwrap();
        std::fs::write(&path, e.finish().unwrap()).unwrap();
        let (got, err) = same_both_ways(&path);
        // One fetch (the reader makes one for the records' single ip line), then the loads.
        assert_eq!(got.len(), 2 * BATCH + 4);
        let err = err.unwrap();
        assert!(err.contains("bad.champsim.xz") && err.contains("truncated input_instr record"), "{err}");
    }

    #[test]
    fn dropping_the_consumer_ends_the_reader() {
        let dir = TempDir::new("readahead-drop");
        let path = dir.path("long.xlt");
        let mut w = create(&path, Format::Native).unwrap();
        for a in accesses(2, 20 * BATCH) {
            w.write(&a).unwrap();
        }
        w.finish().unwrap();
        // Dropped before reading, after a little, and with every batch full and waiting: each
        // drop returns (the test would hang otherwise).
        drop(ReadAhead::spawn(open_direct(&path, false).unwrap()));
        let mut ahead = ReadAhead::spawn(open_direct(&path, false).unwrap());
        assert_eq!(ahead.fill(&mut [Access::default(); 10]).unwrap(), 10);
        drop(ahead);
        let ahead = ReadAhead::spawn(open_direct(&path, false).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(ahead);
    }

    /// A source that panics after one batch.
    struct Panics(bool);

    impl AccessSource for Panics {
        fn fill(&mut self, buf: &mut [Access]) -> Result<usize> {
            assert!(!self.0, "reader failure");
            self.0 = true;
            Ok(buf.len())
        }
    }

    #[test]
    fn a_reader_panic_reaches_the_consumer() {
        let mut ahead = ReadAhead::spawn(Box::new(Panics(false)));
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drain(&mut ahead, 100)));
        let msg = got.unwrap_err();
        let text = msg.downcast_ref::<&str>().copied().or(msg.downcast_ref::<String>().map(String::as_str));
        assert_eq!(text, Some("reader failure"));
    }
}
