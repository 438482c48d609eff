//! The long stress run: `cargo run --release --example stress -- --minutes N [--seed S]
//! [--accesses A] [--hang-seconds H] [--show-refusals]`. Runs the stress harness's cases (`xlate::stress`: every
//! design and guest@host pair in checked mode under OS churn) from seed S on until N minutes
//! have passed, prints a tally every minute and, for every failing case, its seed and the
//! command that reproduces it; exits 1 if any case failed or hung (a watchdog ends the run
//! naming the seed of a case still running after H seconds, default 120). docs/robustness.md.

use std::time::{Duration, Instant};
use xlate::fuzz::Watchdog;
use xlate::stress::{case, run, Outcome};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: u64| {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let (minutes, first, accesses) = (arg("--minutes", 1), arg("--seed", 0), arg("--accesses", 300_000));
    let show_refusals = args.iter().any(|a| a == "--show-refusals");
    let dir = std::env::temp_dir().join(format!("xlate-stress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    std::panic::set_hook(Box::new(|_| {}));
    let (start, budget) = (Instant::now(), Duration::from_secs(60 * minutes));
    let hang = Duration::from_secs(arg("--hang-seconds", 120));
    let watchdog = Watchdog::start(hang, move |seed| format!("seed {seed}: hung: {}", case(seed, accesses).command()));
    let mut next_report = Duration::from_secs(60);
    let (mut ok, mut refused, mut failed) = (0u64, 0u64, 0u64);
    let mut seed = first;
    while start.elapsed() < budget {
        watchdog.begin(seed);
        let c = case(seed, accesses);
        match run(&c, &dir) {
            Outcome::Ok => ok += 1,
            Outcome::Refused(m) => {
                refused += 1;
                if show_refusals {
                    println!("seed {seed}: refused: {m}\n  {}", c.command());
                }
            }
            Outcome::Failed(m) => {
                failed += 1;
                println!("seed {seed}: {m}\n  {} (traces, if any, in {})", c.command(), dir.display());
            }
        }
        seed += 1;
        if start.elapsed() >= next_report {
            next_report += Duration::from_secs(60);
            println!("{:.0} s: seeds {first}..{seed}: ok {ok}, refused {refused}, failed {failed}", start.elapsed().as_secs_f64());
        }
    }
    if failed == 0 {
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!("done: seeds {first}..{seed} in {:.0} s: ok {ok}, refused {refused}, failed {failed}", start.elapsed().as_secs_f64());
    std::process::exit(i32::from(failed > 0));
}
