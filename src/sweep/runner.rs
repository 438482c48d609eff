//! Running points in parallel on local threads, recording each as it finishes.
//!
//! [`execute`] is the executor: `jobs` threads take the next point from an atomic index until
//! none is left or Ctrl-C ([`crate::sim::INTERRUPTED`]) stops the scheduling; a point's error or
//! panic is its outcome and does not stop the others. [`sweep`] runs a grid into a directory
//! with it; `xlate reproduce` runs a study's runs with it.

use super::grid::{Grid, Point};
use super::record::{Manifest, Record, Status, SweepDir};
use crate::error::{Error, Result};
use crate::sim::{RunOutput, INTERRUPTED};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Why a point failed.
#[derive(Debug)]
pub enum PointError {
    /// The run returned an error (a bad value found at run time, out of memory, ...).
    Error(Error),
    /// The run panicked (a simulator bug): the panic's message.
    Panic(String),
}

impl fmt::Display for PointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PointError::Error(e) => write!(f, "{e}"),
            PointError::Panic(m) => write!(f, "the simulator panicked (a bug; please report it): {m}"),
        }
    }
}

/// How one point's run ended.
#[derive(Debug)]
pub enum Outcome {
    /// It finished.
    Done(Box<RunOutput>),
    /// It failed.
    Failed(PointError),
    /// Ctrl-C stopped it before the end; nothing is recorded and a rerun runs it again.
    Interrupted,
}

/// The message of a panic payload (also the fuzz and stress harnesses').
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".into()
    }
}

/// Runs `f`, turning a panic into [`Outcome::Failed`] and an interrupted run into
/// [`Outcome::Interrupted`]. A failure after Ctrl-C counts as interrupted (not recorded).
pub fn guarded(f: impl FnOnce() -> Result<RunOutput>) -> Outcome {
    let o = match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(r)) if r.interrupted => Outcome::Interrupted,
        Ok(Ok(r)) => Outcome::Done(Box::new(r)),
        Ok(Err(e)) => Outcome::Failed(PointError::Error(e)),
        Err(payload) => Outcome::Failed(PointError::Panic(panic_message(payload.as_ref()))),
    };
    match o {
        Outcome::Failed(_) if INTERRUPTED.load(Ordering::Relaxed) => Outcome::Interrupted,
        o => o,
    }
}

/// Runs one point with its panics caught (what a distributed worker calls per point).
pub fn run_point(p: &Point, progress: bool) -> Outcome {
    guarded(|| p.run(progress))
}

/// Stack of each worker thread (deep recursion in a workload's setup must not overflow it).
const STACK: usize = 64 << 20;

/// The number of threads `jobs` asks for: 0 means every host core.
pub fn jobs_or_all(jobs: usize) -> usize {
    if jobs > 0 {
        jobs
    } else {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    }
}

/// Runs `run(i)` for `i` in `0..n` on `jobs` threads (at least 1, at most `n`), each thread
/// taking the next `i` until none is left, Ctrl-C is pressed, or `done` returns false. Each run is
/// [`guarded`]; `done(i, outcome, seconds)` is called on the thread that ran it, as soon as it
/// ends.
pub fn execute<R, D>(n: usize, jobs: usize, run: R, done: D)
where
    R: Fn(usize) -> Result<RunOutput> + Sync,
    D: Fn(usize, Outcome, f64) -> bool + Sync,
{
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let jobs = jobs.clamp(1, n.max(1));
    std::thread::scope(|s| {
        for t in 0..jobs {
            let (next, stop, run, done) = (&next, &stop, &run, &done);
            std::thread::Builder::new()
                .name(format!("sweep-{t}"))
                .stack_size(STACK)
                .spawn_scoped(s, move || loop {
                    if stop.load(Ordering::Relaxed) || INTERRUPTED.load(Ordering::Relaxed) {
                        break;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let started = Instant::now();
                    let o = guarded(|| run(i));
                    if !done(i, o, started.elapsed().as_secs_f64()) {
                        stop.store(true, Ordering::Relaxed);
                    }
                })
                .expect("spawn a sweep thread");
        }
    });
}

/// How `xlate sweep` runs.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Threads; 0: every host core.
    pub jobs: usize,
    /// Run points recorded as failed again.
    pub retry_failed: bool,
    /// Take over a directory that holds another sweep (see [`SweepDir::prepare`]).
    pub force: bool,
    /// One line per finished point on stderr.
    pub progress: bool,
}

/// What a sweep directory holds after [`sweep`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Points of the grid.
    pub points: usize,
    /// Recorded done.
    pub done: usize,
    /// Recorded failed.
    pub failed: usize,
    /// Not recorded (not run yet, interrupted, or an unreadable record).
    pub pending: usize,
    /// Points this invocation ran to a record.
    pub ran: usize,
    /// Points skipped because a record existed.
    pub skipped: usize,
    /// Ctrl-C stopped the sweep with points pending.
    pub interrupted: bool,
}

impl Summary {
    /// The exit status of `xlate sweep`: 130 if interrupted with points pending, 1 if any point
    /// is recorded failed, else 0.
    pub fn exit_code(&self) -> u8 {
        if self.interrupted {
            130
        } else if self.failed > 0 {
            1
        } else {
            0
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} points: {} done, {} failed, {} pending (this run: {} ran, {} skipped as already recorded)",
            self.points, self.done, self.failed, self.pending, self.ran, self.skipped
        )?;
        if self.interrupted {
            write!(f, "; interrupted: rerun the same command to finish")?;
        } else if self.failed > 0 {
            write!(f, "; `xlate sweep --status DIR` lists the errors, --retry-failed runs them again")?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Done,
    Failed,
    Pending,
}

/// What a sweep of `points` into a directory has left to do (the resume rule, shared by every
/// engine): indices into `points`.
#[derive(Debug, Default)]
pub struct Plan {
    /// To run, in grid order: no record, an unreadable one, or (with `retry_failed`) a failed one.
    pub todo: Vec<usize>,
    /// Recorded done.
    pub done: Vec<usize>,
    /// Recorded failed (also in `todo` with `retry_failed`).
    pub failed: Vec<usize>,
    /// Records that could not be read, with why (also in `todo`).
    pub unreadable: Vec<(usize, String)>,
}

/// Which of `points` a sweep into `dir` runs (docs/sweeps.md, "Resume").
pub fn plan(dir: &SweepDir, points: &[Point], retry_failed: bool) -> Plan {
    let mut p = Plan::default();
    for (i, pt) in points.iter().enumerate() {
        match dir.read(&pt.id) {
            Ok(Some(r)) if r.status == Status::Done => p.done.push(i),
            Ok(Some(_)) => {
                p.failed.push(i);
                if retry_failed {
                    p.todo.push(i);
                }
            }
            Ok(None) => p.todo.push(i),
            Err(e) => {
                p.unreadable.push((i, e.to_string()));
                p.todo.push(i);
            }
        }
    }
    p
}

/// Runs `grid` into directory `root` (docs/sweeps.md): prepares the directory, skips the points
/// that have a record (failed ones too unless `retry_failed`), runs the others on `jobs` threads
/// and records each as it finishes.
pub fn sweep(grid: &Grid, root: &Path, opts: &Options) -> Result<Summary> {
    let dir = SweepDir::prepare(root, &Manifest::from_grid(grid), Some(&grid.text), opts.force)?;
    let plan = plan(&dir, &grid.points, opts.retry_failed);
    let mut states = vec![State::Pending; grid.points.len()];
    for &i in &plan.done {
        states[i] = State::Done;
    }
    for &i in &plan.failed {
        states[i] = State::Failed;
    }
    for (_, e) in &plan.unreadable {
        eprintln!("xlate sweep: {e}; running the point again");
    }
    let todo = plan.todo;
    let skipped = grid.points.len() - todo.len();
    let jobs = jobs_or_all(opts.jobs).min(todo.len().max(1));
    if opts.progress {
        eprintln!(
            "xlate sweep: {} points, {skipped} already recorded, {} to run on {jobs} thread(s), records in {}",
            grid.points.len(),
            todo.len(),
            root.display()
        );
    }
    let states = Mutex::new(states);
    let finished = AtomicUsize::new(0);
    let write_error: Mutex<Option<Error>> = Mutex::new(None);
    execute(
        todo.len(),
        jobs,
        |k| grid.points[todo[k]].run(false),
        |k, outcome, secs| {
            let i = todo[k];
            let p = &grid.points[i];
            let Some(rec) = Record::from_outcome(p, &outcome) else {
                if opts.progress {
                    eprintln!("xlate sweep: {} interrupted (not recorded)", p.describe());
                }
                return true;
            };
            if let Err(e) = dir.write(&rec) {
                write_error.lock().expect("lock").get_or_insert(e);
                return false;
            }
            states.lock().expect("lock")[i] = if rec.status == Status::Done { State::Done } else { State::Failed };
            let k = finished.fetch_add(1, Ordering::Relaxed) + 1;
            if opts.progress {
                match &rec.error {
                    None => eprintln!("[{k}/{}] {} done ({secs:.1} s)", todo.len(), p.describe()),
                    Some(e) => eprintln!("[{k}/{}] {} failed ({secs:.1} s): {e}", todo.len(), p.describe()),
                }
            }
            true
        },
    );
    if let Some(e) = write_error.into_inner().expect("lock") {
        return Err(e);
    }
    let states = states.into_inner().expect("lock");
    let count = |s: State| states.iter().filter(|&&x| x == s).count();
    let pending = count(State::Pending);
    Ok(Summary {
        points: grid.points.len(),
        done: count(State::Done),
        failed: count(State::Failed),
        pending,
        ran: finished.into_inner(),
        skipped,
        interrupted: pending > 0 && INTERRUPTED.load(Ordering::Relaxed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic or an error in one point is that point's outcome; every other point still runs.
    #[test]
    fn panics_and_errors_are_outcomes_of_their_point() {
        let seen = Mutex::new(Vec::new());
        execute(
            5,
            2,
            |i| match i {
                1 => panic!("point {i} blew up"),
                3 => Err(Error::config("sim.test", "bad")),
                _ => Ok(RunOutput { cycles: i as f64, ..RunOutput::default() }),
            },
            |i, o, _| {
                let what = match o {
                    Outcome::Done(r) => format!("done {}", r.cycles),
                    Outcome::Failed(e) => format!("failed {e}"),
                    Outcome::Interrupted => "interrupted".into(),
                };
                seen.lock().unwrap().push((i, what));
                true
            },
        );
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(seen.len(), 5);
        assert_eq!(seen[0].1, "done 0");
        assert!(seen[1].1.starts_with("failed the simulator panicked") && seen[1].1.ends_with("point 1 blew up"), "{}", seen[1].1);
        assert_eq!(seen[3].1, "failed config key `sim.test`: bad");
        assert_eq!(seen[4].1, "done 4");
        // An interrupted run is its own outcome (not recorded).
        assert!(matches!(guarded(|| Ok(RunOutput { interrupted: true, ..RunOutput::default() })), Outcome::Interrupted));
    }

    /// `done` returning false stops the scheduling (a record that cannot be written).
    #[test]
    fn done_can_stop_the_scheduling() {
        let ran = AtomicUsize::new(0);
        execute(
            100,
            1,
            |_| {
                ran.fetch_add(1, Ordering::Relaxed);
                Ok(RunOutput::default())
            },
            |i, _, _| i < 2,
        );
        assert_eq!(ran.into_inner(), 3);
    }
}
