//! A one-line progress display on stderr, shown only on a terminal and only once a run has taken
//! more than a couple of seconds.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Progress of one run.
pub struct Progress {
    enabled: bool,
    label: String,
    limit: u64,
    start: Instant,
    last: Instant,
    shown: bool,
}

impl Progress {
    /// A display for `label`; `limit` is the access cap (0 = unknown).
    pub fn new(want: bool, label: &str, limit: u64) -> Progress {
        let now = Instant::now();
        Progress { enabled: want && std::io::stderr().is_terminal(), label: label.to_string(), limit, start: now, last: now, shown: false }
    }

    /// Redraws if due.
    pub fn update(&mut self, done: u64) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.start) < Duration::from_secs(2) || now.duration_since(self.last) < Duration::from_millis(250) {
            return;
        }
        self.last = now;
        self.shown = true;
        let rate = done as f64 / now.duration_since(self.start).as_secs_f64();
        let pct = if self.limit > 0 { format!("{:5.1}% ", 100.0 * done as f64 / self.limit as f64) } else { String::new() };
        eprint!(
            "\r\x1b[2K{}: {pct}{:.1} M accesses, {:.1} M accesses/s (Ctrl-C stops and reports)",
            self.label,
            done as f64 / 1e6,
            rate / 1e6
        );
        let _ = std::io::stderr().flush();
    }

    /// Clears the line.
    pub fn finish(&mut self, _done: u64) {
        if self.shown {
            eprint!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
        }
    }
}
