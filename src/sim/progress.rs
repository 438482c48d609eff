//! Progress bars on stderr (the `indicatif` crate), shown only on a terminal and only once the
//! work has taken more than a couple of seconds, so short runs and tests print nothing.
//!
//! A bar shows done/total, percentage, rate and ETA when the total is known up front (built-in
//! workloads that know their access count, native traces whose header has it, or a
//! `sim.max_accesses` cap); the share of the input file read when only its size is known
//! (ChampSim and lackey traces); otherwise a spinner with the count and the rate.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// A bar appears only after this long: short runs (and `compare`'s quick designs) stay quiet.
const SHOW_AFTER: Duration = Duration::from_secs(2);
/// Redraw interval, kept by a ticker thread even while the caller is busy (an OS epoch, a slow
/// walk), so ETA and spinner move at least twice a second.
const TICK: Duration = Duration::from_millis(250);
/// The caller's `update` hands numbers to the bar at most this often: the access loop calls it
/// every few thousand accesses, and a clock read is all that costs in between.
const FEED: Duration = Duration::from_millis(100);

/// What a piece of work knows of its size before it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Total {
    /// This many accesses.
    Accesses(u64),
    /// Unknown access count, input files of this many bytes in all (progress = bytes read).
    Bytes(u64),
    /// Nothing: a spinner.
    Unknown,
}

/// Whether and where work shows its progress: passed down to [`crate::sim::run`] and friends.
/// `false.into()` is off; `true.into()` is a bar labelled with the design's name.
#[derive(Clone, Debug)]
pub struct Show {
    on: bool,
    label: Option<String>,
    hint: &'static str,
    multi: Option<MultiProgress>,
}

impl Default for Show {
    fn default() -> Show {
        Show { on: false, label: None, hint: "Ctrl-C stops and reports", multi: None }
    }
}

impl From<bool> for Show {
    fn from(on: bool) -> Show {
        Show { on, ..Show::default() }
    }
}

impl Show {
    /// A bar labelled `label` (on a terminal only).
    pub fn labelled(label: impl Into<String>) -> Show {
        Show { on: true, label: Some(label.into()), ..Show::default() }
    }

    /// What Ctrl-C does, shown at the end of the line (default "Ctrl-C stops and reports").
    pub fn hint(self, hint: &'static str) -> Show {
        Show { hint, ..self }
    }
}

/// Lines and bars of work done in parallel (`reproduce`): the bars share the bottom of the
/// terminal through one [`MultiProgress`] and the lines scroll above them, so the two never
/// overwrite each other.
pub struct Group {
    on: bool,
    multi: Option<MultiProgress>,
}

impl Group {
    /// A group; `on = false` (`--quiet`) prints nothing.
    pub fn new(on: bool) -> Group {
        let multi = (on && std::io::stderr().is_terminal()).then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        Group { on, multi }
    }

    /// Prints `line` on stderr: above the bars on a terminal, as a plain line otherwise.
    pub fn println(&self, line: &str) {
        match &self.multi {
            Some(m) => {
                let _ = m.println(line);
            }
            None if self.on => eprintln!("{line}"),
            None => {}
        }
    }

    /// How one piece of the group shows its bar.
    pub fn show(&self, label: impl Into<String>) -> Show {
        Show { on: self.on, label: Some(label.into()), multi: self.multi.clone(), ..Show::default() }
    }
}

/// The progress display of one piece of work. Disabled (every call a no-op) unless asked for and
/// stderr is a terminal.
pub struct Progress {
    /// The bar, hidden until [`SHOW_AFTER`]; `None` when disabled.
    bar: Option<ProgressBar>,
    multi: Option<MultiProgress>,
    total: Total,
    start: Instant,
    next_feed: Instant,
    shown: bool,
}

impl Progress {
    /// A display of `total`, labelled as `show` says or else `label`.
    pub fn new(show: &Show, label: &str, total: Total) -> Progress {
        let start = Instant::now();
        let mut p = Progress { bar: None, multi: show.multi.clone(), total, start, next_feed: start, shown: false };
        if !show.on || !std::io::stderr().is_terminal() {
            return p;
        }
        let hint = show.hint;
        let template = match total {
            Total::Accesses(_) => format!("{{prefix}} [{{bar:20}}] {{percent:>3}}% {{msg}}, ETA {{eta}} ({hint})"),
            Total::Bytes(_) => format!("{{prefix}} [{{bar:20}}] {{percent:>3}}% of the input, {{msg}}, ETA {{eta}} ({hint})"),
            Total::Unknown => format!("{{spinner}} {{prefix}}: {{msg}} ({hint})"),
        };
        let style = ProgressStyle::with_template(&template).expect("a valid template").progress_chars("=> ");
        let len = match total {
            Total::Accesses(n) | Total::Bytes(n) => Some(n),
            Total::Unknown => None,
        };
        // Hidden from the start, not created late, so its ETA estimate has seen the whole run.
        let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::hidden()).with_style(style);
        bar.set_prefix(show.label.clone().unwrap_or_else(|| label.to_string()));
        p.bar = Some(bar);
        p
    }

    /// Reports `done` accesses; `input` gives (bytes read, bytes in all) of the input files and
    /// is called only for a [`Total::Bytes`] display, when the bar is fed.
    #[inline]
    pub fn update(&mut self, done: u64, input: impl FnOnce() -> (u64, u64)) {
        if self.bar.is_some() {
            self.feed(done, input);
        }
    }

    /// [`Progress::update`] when enabled: kept out of line so the access loop it is called from
    /// carries only the test above.
    #[inline(never)]
    fn feed(&mut self, done: u64, input: impl FnOnce() -> (u64, u64)) {
        let Some(bar) = &self.bar else { return };
        let now = Instant::now();
        if now < self.next_feed {
            return;
        }
        self.next_feed = now + FEED;
        bar.set_position(match self.total {
            Total::Bytes(_) => input().0,
            _ => done,
        });
        let total = match self.total {
            Total::Accesses(n) => Some(n),
            _ => None,
        };
        bar.set_message(counts(done, total, now.duration_since(self.start).as_secs_f64()));
        if !self.shown && now.duration_since(self.start) >= SHOW_AFTER {
            self.shown = true;
            match &self.multi {
                Some(m) => drop(m.add(bar.clone())),
                None => bar.set_draw_target(ProgressDrawTarget::stderr()),
            }
            bar.enable_steady_tick(TICK);
        }
    }

    /// Removes the bar; what the work printed stays.
    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
            if let Some(m) = &self.multi {
                m.remove(&bar);
            }
        }
    }
}

impl Drop for Progress {
    /// An error leaves the loop early: the bar must not stay on the screen above the message.
    fn drop(&mut self) {
        self.finish();
    }
}

/// `x` in millions, with two decimals below 10 M so slow runs still show movement.
fn mega(x: f64) -> String {
    let m = x / 1e6;
    if m < 10.0 {
        format!("{m:.2} M")
    } else {
        format!("{m:.1} M")
    }
}

/// The text of a bar: accesses done (of `total` if known) and the mean rate over `secs`.
pub fn counts(done: u64, total: Option<u64>, secs: f64) -> String {
    let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
    match total {
        Some(t) => format!("{} / {} accesses, {} accesses/s", mega(done as f64), mega(t as f64), mega(rate)),
        None => format!("{} accesses, {} accesses/s", mega(done as f64), mega(rate)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_in_millions() {
        assert_eq!(counts(1_234_567, Some(40_000_000), 2.0), "1.23 M / 40.0 M accesses, 0.62 M accesses/s");
        assert_eq!(counts(12_345_678, None, 1.0), "12.3 M accesses, 12.3 M accesses/s");
        // Before any time has passed there is no rate yet, not a division by zero.
        assert_eq!(counts(0, None, 0.0), "0.00 M accesses, 0.00 M accesses/s");
    }

    #[test]
    fn off_unless_asked_and_on_a_terminal() {
        // `false` never draws; in a test stderr is not a terminal, so `true` does not draw either.
        for show in [Show::from(false), Show::from(true), Show::labelled("[1/2] radix4")] {
            let mut p = Progress::new(&show, "radix4", Total::Accesses(10));
            p.update(5, || unreachable!("only a bytes display reads the input"));
            assert_eq!(p.bar.is_some(), show.on && std::io::stderr().is_terminal());
            p.finish();
        }
    }
}
