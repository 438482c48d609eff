//! The long fuzz run: `cargo run --release --example fuzz -- --minutes N [--seed S]`. Runs the
//! harness's cases (`xlate::fuzz`) from seed S on until N minutes have passed, prints a tally
//! every minute and every failing seed; exits 1 if any case panicked or printed a multi-line
//! error, or hung: a watchdog thread ends the run naming the seed of a case that has taken more
//! than `--hang-seconds` (default 60; a case simulates at most a few thousand accesses, well
//! under a second). docs/robustness.md.

use std::time::{Duration, Instant};
use xlate::fuzz::{case, Kind, Outcome, Watchdog};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: u64| {
        args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let (minutes, first) = (arg("--minutes", 1), arg("--seed", 0));
    let dir = std::env::temp_dir().join(format!("xlate-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    std::panic::set_hook(Box::new(|_| {}));
    let (start, budget) = (Instant::now(), Duration::from_secs(60 * minutes));
    let watchdog = Watchdog::start(Duration::from_secs(arg("--hang-seconds", 60)), |seed| format!("seed {seed}: hung"));
    let mut next_report = Duration::from_secs(60);
    let (mut ok, mut refused, mut failed) = ([0u64; 4], [0u64; 4], 0u64);
    let mut seed = first;
    while start.elapsed() < budget {
        watchdog.begin(seed);
        let (kind, out) = case(seed, &dir);
        let k = [Kind::Native, Kind::ChampSim, Kind::Lackey, Kind::Config].iter().position(|&x| x == kind).unwrap_or(0);
        match out {
            Outcome::Ok => ok[k] += 1,
            Outcome::Refused(_) => refused[k] += 1,
            Outcome::Panicked(m) => {
                failed += 1;
                println!("seed {seed} ({kind:?}): panicked: {m}");
            }
            Outcome::BadError(m) => {
                failed += 1;
                println!("seed {seed} ({kind:?}): multi-line error: {m}");
            }
        }
        seed += 1;
        if start.elapsed() >= next_report {
            next_report += Duration::from_secs(60);
            println!(
                "{:.0} s: seeds {first}..{seed}: ok {ok:?} refused {refused:?} (native, champsim, lackey, config), failed {failed}",
                start.elapsed().as_secs_f64()
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "done: seeds {first}..{seed} in {:.0} s: ok {ok:?}, refused {refused:?} (native, champsim, lackey, config), failed {failed}",
        start.elapsed().as_secs_f64()
    );
    std::process::exit(i32::from(failed > 0));
}
