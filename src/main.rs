//! The `xlate` command line.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use xlate::config::{self, Layers};
use xlate::error::{Error, Result};
use xlate::sim::progress::{Progress, Show, Total};
use xlate::{arch, report, sim, trace, workload};

/// Large blocks on the host's transparent huge pages (`xlate::hostmem`).
#[global_allocator]
static ALLOC: xlate::hostmem::HugePageAlloc = xlate::hostmem::HugePageAlloc;

#[derive(Parser)]
#[command(name = "xlate", version, about = "Simulate virtual-memory translation designs side by side under one OS model")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Clone)]
struct RunOpts {
    /// Built-in workload (see `xlate workloads`); default gups.
    #[arg(long, short, conflicts_with_all = ["trace", "trace_cmd"])]
    workload: Option<String>,
    /// Trace file(s) to run instead of a workload (native, ChampSim, lackey; .gz/.xz/.zst); one process each.
    #[arg(long, num_args = 1..)]
    trace: Vec<PathBuf>,
    /// Simulate the program given after `--`, traced live under QEMU (no trace file); one stream per guest thread.
    #[arg(long, requires = "program")]
    trace_cmd: bool,
    /// With --trace-cmd: also record instruction fetches.
    #[arg(long, requires = "trace_cmd")]
    trace_fetches: bool,
    /// The program and its arguments for --trace-cmd.
    #[arg(last = true, value_name = "PROGRAM ARGS", requires = "trace_cmd")]
    program: Vec<String>,
    /// Machine preset (see `xlate presets`).
    #[arg(long, short)]
    preset: Option<String>,
    /// TOML file overriding the preset and design.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Override any config key: --set mmu.l2.entries=2048 (repeatable).
    #[arg(long = "set", short = 's')]
    sets: Vec<String>,
    /// Compare every walk and TLB hit with the OS's ground truth.
    #[arg(long)]
    checked: bool,
    /// Host memory the simulator may use (e.g. 64G; default: 3/4 of this machine's): a config
    /// whose structures need more is refused before anything is allocated.
    #[arg(long, value_name = "SIZE")]
    max_host_memory: Option<String>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the results as CSV to this file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write an HTML report (plots with their tables; self-contained) to this file.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Print the resolved configuration (TOML) and exit.
    #[arg(long)]
    print_config: bool,
    /// No progress display.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one design on one workload or trace.
    Run {
        /// Design (see `xlate designs`).
        #[arg(long, short, default_value = "radix4")]
        design: String,
        #[command(flatten)]
        opts: RunOpts,
    },
    /// Run several designs on the same workload and compare them.
    Compare {
        /// Comma-separated designs; the first is the baseline of the speedups.
        #[arg(long, value_delimiter = ',', default_value = "radix4,radix4-thp,ideal")]
        designs: Vec<String>,
        #[command(flatten)]
        opts: RunOpts,
    },
    /// List the designs.
    Designs,
    /// List the built-in workloads and their parameters.
    Workloads,
    /// List the machine presets.
    Presets,
    /// Measure the simulator's speed (accesses per second of host time).
    Bench {
        /// Accesses per benchmark.
        #[arg(long, default_value_t = 20_000_000)]
        accesses: u64,
        /// Designs to measure, comma-separated (default: radix4, radix4-thp, ecpt, utopia, ideal, radix4@radix4).
        #[arg(long, value_delimiter = ',')]
        designs: Option<Vec<String>>,
        /// Workloads to measure, comma-separated (default: gups, stream, bfs).
        #[arg(long, value_delimiter = ',')]
        workloads: Option<Vec<String>>,
        /// Override any config key in every benchmark, after the benchmark's own workload
        /// settings (e.g. --set workload.params.table=64M).
        #[arg(long = "set", short = 's')]
        sets: Vec<String>,
        /// Rounds of the whole list; with more than one, a summary gives each benchmark's median
        /// CPU time and its median ratio to radix4 within a round (for a noisy host).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        repeat: u32,
    },
    /// Re-run a paper's comparisons and print our numbers beside the paper's (`emt`, ...).
    Reproduce {
        /// The paper (see `xlate reproduce --list`).
        #[arg(default_value = "emt")]
        study: String,
        /// List the studies.
        #[arg(long)]
        list: bool,
        /// Override any config key in every run (e.g. a smaller scale).
        #[arg(long = "set", short = 's')]
        sets: Vec<String>,
        /// Write the findings and every run's results as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
        /// No progress display.
        #[arg(long, short)]
        quiet: bool,
        /// Record every run in this sweep directory; a rerun resumes (docs/sweeps.md).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// With --out: take over a directory that holds other runs.
        #[arg(long, requires = "out")]
        force: bool,
    },
    /// Run a grid of points in parallel, recording each as it finishes; rerunning resumes
    /// (docs/sweeps.md). Exit status 0: every point done; 1: some failed; 130: interrupted.
    Sweep(SweepArgs),
    /// Write an HTML report of a sweep or `reproduce --out` directory: plots with their tables,
    /// one self-contained file (docs/sweeps.md, "Report").
    Report {
        /// The directory (`xlate sweep --out DIR`, `xlate reproduce --out DIR`).
        dir: PathBuf,
        /// The HTML file to write (default: DIR/report.html).
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// The design speedups are relative to (default: the first design of the sweep).
        #[arg(long)]
        baseline: Option<String>,
    },
    /// Summarize a trace file.
    TraceInfo {
        /// The trace.
        file: PathBuf,
        /// Stop after this many accesses.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Trace a program under QEMU user mode into a native trace: xlate trace [--out F] -- PROGRAM ARGS...
    Trace {
        /// Output trace (native format, compressed inside); default PROGRAM-NAME.xlt.
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// Also record instruction fetches (one per new 64-byte code line).
        #[arg(long)]
        fetches: bool,
        /// Stop the program after this many accesses (bounds the file: under 1 byte per access).
        #[arg(long, default_value_t = 200_000_000)]
        max_accesses: u64,
        /// No progress display.
        #[arg(long, short)]
        quiet: bool,
        /// The program and its arguments.
        #[arg(last = true, required = true, value_name = "PROGRAM ARGS")]
        program: Vec<String>,
    },
    /// Convert a trace between formats (the output format follows its name: *.champsim[.gz|.xz] or native).
    TraceConvert {
        /// Input trace.
        input: PathBuf,
        /// Output trace.
        output: PathBuf,
        /// No progress display.
        #[arg(long, short)]
        quiet: bool,
    },
}

#[derive(Args)]
struct SweepArgs {
    /// The grid file (TOML; docs/sweeps.md).
    #[arg(required_unless_present_any = ["status", "export"], conflicts_with_all = ["status", "export"])]
    grid: Option<PathBuf>,
    /// Directory of the records (created; a rerun skips the points recorded there).
    #[arg(long, short, value_name = "DIR", required_unless_present_any = ["status", "export"])]
    out: Option<PathBuf>,
    /// Points run at a time (default: every core).
    #[arg(long, short)]
    jobs: Option<usize>,
    /// Run the points recorded as failed again.
    #[arg(long)]
    retry_failed: bool,
    /// Make this grid the directory's even if it holds another sweep (shared points are kept).
    #[arg(long)]
    force: bool,
    /// No line per finished point.
    #[arg(long, short)]
    quiet: bool,
    /// Print the done / failed / pending points of a sweep directory.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["export", "out"])]
    status: Option<PathBuf>,
    /// Export a sweep directory's points (with --csv).
    #[arg(long, value_name = "DIR", requires = "csv", conflicts_with = "out")]
    export: Option<PathBuf>,
    /// With --export: the CSV file to write (one row per point).
    #[arg(long, requires = "export")]
    csv: Option<PathBuf>,
}

/// `xlate sweep`: exits 1 if points failed, 130 if interrupted (after printing the summary).
fn sweep_cmd(a: SweepArgs) -> Result<()> {
    use xlate::sweep;
    if let Some(dir) = a.status {
        print!("{}", sweep::export::status(&dir)?);
        return Ok(());
    }
    if let (Some(dir), Some(csv)) = (a.export, a.csv) {
        let text = sweep::export::csv(&dir)?;
        xlate::fsutil::write_atomic(&csv, text.as_bytes())?;
        println!("wrote {} rows to {}", text.lines().count().saturating_sub(1), csv.display());
        return Ok(());
    }
    let (Some(grid), Some(out)) = (a.grid, a.out) else { unreachable!("clap requires a grid and --out") };
    let grid = sweep::Grid::from_file(&grid)?;
    let opts = sweep::Options { jobs: a.jobs.unwrap_or(0), retry_failed: a.retry_failed, force: a.force, progress: !a.quiet };
    let summary = sweep::runner::sweep(&grid, &out, &opts)?;
    println!("xlate sweep: {summary}");
    let code = summary.exit_code();
    if code != 0 {
        let _ = std::io::Write::flush(&mut std::io::stdout());
        std::process::exit(code.into());
    }
    Ok(())
}

fn layers(opts: &RunOpts) -> Result<Layers> {
    let mut sets = Vec::new();
    if let Some(w) = &opts.workload {
        workload::lookup(w)?;
        sets.push(format!("workload.name=\"{w}\""));
    }
    if opts.checked {
        sets.push("sim.checked=true".into());
    }
    if let Some(m) = &opts.max_host_memory {
        sets.push(format!("sim.max_host_memory=\"{m}\""));
    }
    sets.extend(opts.sets.iter().cloned());
    let file = match &opts.config {
        Some(p) => Some((p.display().to_string(), config::read_file(p)?)),
        None => None,
    };
    Ok(Layers { preset: opts.preset.clone(), file, sets })
}

/// `--json`: `run` writes one object, `compare` an array in `--designs` order (also of one run,
/// as a single design or an interrupted first one gives), so a script reads either the same way.
fn write_outputs(runs: &[sim::RunOutput], opts: &RunOpts, compare: bool) -> Result<()> {
    if let Some(p) = &opts.json {
        let v = match runs {
            [one] if !compare => report::json(one),
            _ => serde_json::Value::Array(runs.iter().map(report::json).collect()),
        };
        let text = serde_json::to_string_pretty(&v).expect("json");
        xlate::fsutil::write_atomic(p, (text + "\n").as_bytes())?;
    }
    if let Some(p) = &opts.csv {
        xlate::fsutil::write_atomic(p, report::csv(runs, opts.preset.as_deref()).as_bytes())?;
    }
    if let Some(p) = &opts.report {
        let d = report::html::Dataset::of_runs(runs, opts.preset.as_deref());
        xlate::fsutil::write_atomic(p, report::html::render(&d).as_bytes())?;
    }
    Ok(())
}

/// Runs designs one after the other (`compare`, or `run` of one); an interrupt or error keeps
/// what finished.
fn run_designs(names: &[String], opts: &RunOpts, compare: bool) -> Result<()> {
    let layers = layers(opts)?;
    let designs: Vec<&arch::Design> = names.iter().map(|n| arch::lookup(n)).collect::<Result<_>>()?;
    let configs: Vec<config::Config> = designs.iter().map(|d| layers.resolve(Some(d))).collect::<Result<_>>()?;
    if opts.print_config {
        for (d, c) in designs.iter().zip(&configs) {
            println!("# design {}\n{}", d.name, config::sources::annotated_toml(c, layers.preset.as_deref())?);
        }
        return Ok(());
    }
    let mut inputs: Vec<trace::TraceInput> = opts.trace.iter().cloned().map(trace::TraceInput::Path).collect();
    if opts.trace_cmd {
        // Each design runs the program anew.
        inputs.push(trace::TraceInput::Command(trace::qemu::TraceCommand { argv: opts.program.clone(), fetches: opts.trace_fetches }));
    }
    let mut runs = Vec::new();
    let mut failure = None;
    for (k, (d, c)) in designs.iter().zip(&configs).enumerate() {
        let show = match (opts.quiet, designs.len()) {
            (true, _) => Show::from(false),
            (false, 1) => Show::from(true),
            (false, n) => Show::labelled(format!("[{}/{n}] {}", k + 1, d.name)),
        };
        match sim::run_inputs(d, c, &inputs, show) {
            Ok(r) => {
                let stop = r.interrupted;
                runs.push(r);
                if stop {
                    break;
                }
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if !runs.is_empty() {
        // Files first: a reader that closes stdout early (`| head`) ends the process at the
        // table (SIGPIPE), and the results must be on disk by then.
        let written = write_outputs(&runs, opts, compare);
        print!("{}", report::table(&runs));
        for line in runs.iter().filter_map(report::checked_summary) {
            eprintln!("{line}");
        }
        written?;
    }
    if let Some(e) = failure {
        return Err(e);
    }
    // A run that simulated nothing is an input problem, not a result: its table above must not
    // pass for one.
    for r in &runs {
        r.check_simulated()?;
    }
    Ok(())
}

/// The designs `xlate bench` measures by default (issue 16's list), and the nested pair.
const BENCH_DESIGNS: &[&str] = &["radix4", "radix4-thp", "ecpt", "utopia", "ideal", "radix4@radix4"];
/// The workloads it measures: random (GUPS over 4 GiB), sequential, and a graph.
const BENCH_WORKLOADS: &[&str] = &["gups", "stream", "bfs"];

/// The `--set`s that make `workload` issue about `accesses` accesses in `xlate bench`.
fn bench_params(workload: &str, accesses: u64) -> Vec<String> {
    match workload {
        // Each update is a load and a store.
        "gups" => vec!["workload.params.table=4G".into(), format!("workload.params.updates={}", accesses / 2)],
        // A read and a write per 8-byte word.
        "stream" => vec![format!("workload.params.footprint={}", accesses / 2 * 8)],
        // The default 1 GiB graph, stopped after `accesses`.
        "bfs" => vec![format!("workload.params.max_accesses={accesses}")],
        _ => vec![],
    }
}

/// The host's peak resident set so far (`VmHWM`), in bytes; resets it when `reset` (Linux
/// `clear_refs` 5), so each benchmark reports its own. `None` where /proc does not say.
fn peak_rss(reset: bool) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    if reset {
        let _ = std::fs::write("/proc/self/clear_refs", "5");
    }
    Some(kib << 10)
}

fn bench(accesses: u64, designs: Option<Vec<String>>, workloads: Option<Vec<String>>, extra: &[String], repeat: u32) -> Result<()> {
    // The default nested pair runs on GUPS only (the other workloads add nothing its walk does
    // not show); designs the user names run on every workload.
    let nested_gups_only = designs.is_none();
    let designs = designs.unwrap_or_else(|| BENCH_DESIGNS.iter().map(|d| d.to_string()).collect());
    let workloads = workloads.unwrap_or_else(|| BENCH_WORKLOADS.iter().map(|w| w.to_string()).collect());
    let mut list = Vec::new();
    for wl in &workloads {
        for design in &designs {
            if !(nested_gups_only && design.contains('@') && wl != "gups") {
                list.push((design.as_str(), wl.as_str()));
            }
        }
    }
    println!("xlate bench: about {accesses} accesses each, full model (TLBs, PWCs, caches, DRAM), release build expected");
    let w = designs.iter().map(|d| d.len()).max().unwrap_or(0).max(14);
    let round_col = if repeat > 1 { format!("{:>5} ", "round") } else { String::new() };
    println!(
        "{round_col}{:>w$} {:<7} {:>10} {:>12} {:>15} {:>10} {:>10} {:>13}",
        "design", "workload", "accesses", "loop M acc/s", "loop CPU s/M acc", "setup s", "peak RSS", "walk refs/acc"
    );
    // CPU seconds per million accesses, per benchmark of `list`, per round. Rounds run the whole
    // list in turn, so a slow spell of the host lands on every benchmark alike.
    let mut cpu = vec![Vec::new(); list.len()];
    // Simulated walk references per access, per benchmark (the same in every round).
    let mut refs = vec![0.0; list.len()];
    for round in 1..=repeat {
        for (k, &(design, wl)) in list.iter().enumerate() {
            let mut sets = vec![format!("workload.name=\"{wl}\"")];
            sets.extend(bench_params(wl, accesses));
            sets.extend(extra.iter().cloned());
            let cfg = Layers { sets, ..Layers::default() }.resolve(Some(arch::lookup(design)?))?;
            // Each benchmark on its own: a degree index an earlier bfs run left behind would
            // count in this run's peak memory and spare its setup the drawing.
            xlate::workload::graph::csr::release_shared_degrees();
            peak_rss(true);
            let r = sim::run(arch::lookup(design)?, &cfg, &[], false)?;
            let n = r.core.accesses as f64;
            let rss = peak_rss(false).map_or("n/a".to_string(), |b| format!("{:.0} MiB", b as f64 / (1u64 << 20) as f64));
            let round_col = if repeat > 1 { format!("{round:>5} ") } else { String::new() };
            // The simulated work behind the speed: a design whose walks make more memory
            // references per access (a 2-D walk, ECPT's parallel probes) costs more per access.
            let walk_refs = (r.core.walk.refs + r.core.side.refs) as f64 / n;
            println!(
                "{round_col}{design:>w$} {wl:<7} {:>10} {:>12.2} {:>15.3} {:>10.3} {:>10} {:>13.2}",
                r.core.accesses,
                n / (r.wall_s - r.setup_s) / 1e6,
                r.loop_cpu_s / (n / 1e6),
                r.setup_s,
                rss,
                walk_refs
            );
            cpu[k].push(r.loop_cpu_s / (n / 1e6));
            refs[k] = walk_refs;
        }
    }
    if repeat > 1 {
        print!("{}", bench_summary(&list, &cpu, &refs, w));
    }
    Ok(())
}

/// The summary of `xlate bench --repeat`: per benchmark, the median CPU seconds per million
/// accesses over the rounds, their range, the median over rounds of its ratio to radix4 on the
/// same workload in the same round (blank without a radix4 run of that workload), its simulated
/// walk references per access (`refs`), and for a nested pair `G@H` its ratio, taken the same
/// way, to the guest design `G` run natively (blank if `G` did not run on that workload), per
/// access and per simulated memory reference (the data reference and the walk's: issue 10's
/// "within 2x of native" read with a 2-D walk's extra references counted as work).
fn bench_summary(list: &[(&str, &str)], cpu: &[Vec<f64>], refs: &[f64], w: usize) -> String {
    let mut out = format!(
        "median over {} rounds:\n{:>w$} {:<7} {:>15} {:>17} {:>10} {:>13} {:>10} {:>12}\n",
        cpu.first().map_or(0, |c| c.len()),
        "design",
        "workload",
        "loop CPU s/M acc",
        "range",
        "x radix4",
        "walk refs/acc",
        "x native",
        "x native/ref"
    );
    // The median within-round ratio of benchmark `k` to the run of `base` on the same workload,
    // and the same per simulated reference (one data reference per access, and the walk's).
    let ratio_to = |k: usize, base: &str| {
        let wl = list[k].1;
        list.iter().position(|&(d, l)| d == base && l == wl).map_or((String::new(), String::new()), |b| {
            let ratios: Vec<f64> = cpu[k].iter().zip(&cpu[b]).map(|(x, r)| x / r).collect();
            let m = median(&ratios);
            (format!("{m:.2}"), format!("{:.2}", m * (1.0 + refs[b]) / (1.0 + refs[k])))
        })
    };
    for (k, &(design, wl)) in list.iter().enumerate() {
        let ratio = ratio_to(k, "radix4").0;
        let (native, per_ref) = design.split_once('@').map_or_else(Default::default, |(guest, _)| ratio_to(k, guest));
        let (lo, hi) = cpu[k].iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        let line = format!(
            "{design:>w$} {wl:<7} {:>15.3} {:>17} {ratio:>10} {:>13.2} {native:>10} {per_ref:>12}",
            median(&cpu[k]),
            format!("{lo:.3}-{hi:.3}"),
            refs[k]
        );
        out += line.trim_end();
        out.push('\n');
    }
    out
}

/// The median of `v` (the mean of the middle two for an even count; 0 for none).
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `xlate trace`: runs the program under QEMU and writes what it accesses as a native trace.
fn trace_program(out: Option<PathBuf>, fetches: bool, max_accesses: u64, program: Vec<String>, quiet: bool) -> Result<()> {
    let out = out.unwrap_or_else(|| {
        let name =
            std::path::Path::new(&program[0]).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "trace".into());
        PathBuf::from(format!("{name}.xlt"))
    });
    let started = std::time::Instant::now();
    let program_name = program[0].clone();
    let mut tracer = trace::qemu::Tracer::spawn(&trace::qemu::TraceCommand { argv: program, fetches })?;
    let mut sink = trace::create(&out, trace::Format::Native)?;
    let mut buf = vec![trace::Access::default(); 4096];
    let (mut total, mut instrs, mut counts) = (0u64, 0u64, [0u64; 3]);
    let mut capped = false;
    // How long the program runs is unknown (--max-accesses is only a bound): a spinner.
    let show = Show::from(!quiet).hint("Ctrl-C stops the program, keeps the trace");
    let mut progress = Progress::new(&show, "xlate trace", Total::Unknown);
    loop {
        progress.update(total, || (0, 0));
        let want = (max_accesses - total).min(buf.len() as u64) as usize;
        if want == 0 || sim::INTERRUPTED.load(Ordering::Relaxed) {
            capped = want == 0;
            tracer.stop();
            break;
        }
        let n = trace::AccessSource::fill(&mut tracer, &mut buf[..want])?;
        if n == 0 {
            break;
        }
        for a in &buf[..n] {
            sink.write(a)?;
            instrs += a.instrs as u64;
            counts[a.kind as usize] += 1;
        }
        total += n as u64;
    }
    progress.finish();
    if total == 0 {
        // Dropping the unfinished sink removes its temporary file: no empty trace is left.
        drop(sink);
        let end = tracer.finish()?;
        let why = match end.status.filter(|s| !s.success()) {
            Some(s) => format!("the program exited with {} before any access was traced", trace::qemu::describe(s)),
            None => "the program made no memory access under the tracer (is it a script or not an ELF executable?)".into(),
        };
        return Err(Error::Workload { name: program_name, msg: format!("{why}; no trace written") });
    }
    sink.finish()?;
    let secs = started.elapsed().as_secs_f64();
    let end = tracer.finish()?;
    let bytes = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "xlate trace: {total} accesses ({} loads, {} stores, {} fetches), {instrs} instructions, {} thread(s) in {secs:.2} s ({:.2} M accesses/s)",
        counts[0],
        counts[1],
        counts[2],
        end.threads,
        total as f64 / secs.max(1e-9) / 1e6
    );
    eprintln!("xlate trace: wrote {} ({bytes} bytes, {:.3} bytes/access)", out.display(), bytes as f64 / total.max(1) as f64);
    if capped {
        eprintln!("xlate trace: stopped the program at --max-accesses {max_accesses}");
    } else if end.stopped {
        eprintln!("xlate trace: interrupted; the trace holds what was recorded until then");
    } else {
        if end.exec {
            eprintln!("xlate trace: the program called execve; what it ran after that was not traced");
        } else if !end.complete {
            eprintln!("xlate trace: warning: the plugin's stream ended without its end record (the program was killed?); the trace holds what arrived");
        }
        if let Some(s) = end.status.filter(|s| !s.success()) {
            eprintln!("xlate trace: the program exited with {}", trace::qemu::describe(s));
        }
    }
    Ok(())
}

/// `xlate trace-convert`.
fn convert(input: PathBuf, output: PathBuf, quiet: bool) -> Result<()> {
    let name = output.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    let fmt = if name.contains(".champsim") { trace::Format::ChampSim } else { trace::Format::Native };
    if xlate::fsutil::same_file(&input, &output) {
        let why = std::io::Error::new(std::io::ErrorKind::InvalidInput, "is the input file itself; name a different output file");
        return Err(Error::io(output.display().to_string(), why));
    }
    let mut src = trace::open(&input)?;
    let mut sink = trace::create(&output, fmt)?;
    let mut buf = vec![trace::Access::default(); 4096];
    let mut n_total = 0u64;
    let total = match (src.total_accesses(), src.bytes_read()) {
        (Some(n), _) => Total::Accesses(n),
        (None, Some((_, size))) => Total::Bytes(size),
        (None, None) => Total::Unknown,
    };
    let show = Show::from(!quiet).hint("Ctrl-C stops, writes nothing");
    let mut progress = Progress::new(&show, "xlate trace-convert", total);
    loop {
        progress.update(n_total, || src.bytes_read().unwrap_or_default());
        if sim::INTERRUPTED.load(Ordering::Relaxed) {
            // A prefix of the input would pass for the whole trace: dropping the unfinished sink
            // removes its temporary file, and the output is not created.
            progress.finish();
            drop(sink);
            eprintln!("xlate trace-convert: interrupted after {n_total} accesses; {} was not written", output.display());
            return Ok(());
        }
        let n = src.fill(&mut buf)?;
        if n == 0 {
            break;
        }
        for a in &buf[..n] {
            sink.write(a)?;
        }
        n_total += n as u64;
    }
    progress.finish();
    sink.finish()?;
    println!("wrote {n_total} accesses to {}", output.display());
    Ok(())
}

/// Makes the first Ctrl-C set [`sim::INTERRUPTED`] (the work stops soon and reports what it
/// has; the process then exits 130) and a second one exit 130 at once. Only for the commands that
/// look at the flag: the others end at Ctrl-C as any program does.
fn catch_ctrl_c() {
    let _ = ctrlc::set_handler(|| {
        if sim::INTERRUPTED.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
    });
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    if matches!(
        cli.cmd,
        Cmd::Run { .. } | Cmd::Compare { .. } | Cmd::Reproduce { .. } | Cmd::Sweep(_) | Cmd::Trace { .. } | Cmd::TraceConvert { .. }
    ) {
        catch_ctrl_c();
    }
    match cli.cmd {
        Cmd::Run { design, opts } => run_designs(&[design], &opts, false),
        Cmd::Compare { designs, opts } => run_designs(&designs, &opts, true),
        Cmd::Designs => {
            for d in arch::designs() {
                println!("{:<14} {}", d.name, d.description);
            }
            println!(
                "{:<14} any two designs of the {} drivers (and a {} guest): GUEST as a guest on HOST under a hypervisor (docs/virtualization.md)",
                "GUEST@HOST",
                arch::nested::NESTABLE.join(", "),
                arch::nested::GUEST_ONLY.join(", ")
            );
            Ok(())
        }
        Cmd::Workloads => {
            for w in workload::all() {
                println!("{:<14} {}", w.name, w.description);
                for p in w.params {
                    println!("    {:<16} {:<7} default {:<10} {}", p.name, p.kind.label(), p.default, p.help);
                }
            }
            Ok(())
        }
        Cmd::Presets => {
            for p in config::PRESETS {
                println!("{:<16} {}", p.name, p.description);
            }
            Ok(())
        }
        Cmd::Bench { accesses, designs, workloads, sets, repeat } => bench(accesses, designs, workloads, &sets, repeat),
        Cmd::Reproduce { study, list, sets, json, quiet, out, force } => {
            if list {
                for s in xlate::reproduce::STUDIES {
                    println!("{:<10} {}", s.name, s.description);
                }
                return Ok(());
            }
            let dir = out;
            let out = xlate::reproduce::run_in(xlate::reproduce::lookup(&study)?, &sets, !quiet, dir.as_deref(), force)?;
            // Files first, as for `run` (see `run_designs`).
            let written = match json {
                Some(p) => xlate::fsutil::write_atomic(&p, (serde_json::to_string_pretty(&out.json).expect("json") + "\n").as_bytes()),
                None => Ok(()),
            };
            print!("{}", out.table);
            written
        }
        Cmd::Sweep(a) => sweep_cmd(a),
        Cmd::Report { dir, out, baseline } => {
            let (out, d) = xlate::sweep::export::write_report(&dir, out.as_deref(), baseline.as_deref())?;
            println!("{}: {} runs, {} failed, {} pending", out.display(), d.runs.len(), d.failed.len(), d.pending);
            Ok(())
        }
        Cmd::Trace { out, fetches, max_accesses, quiet, program } => trace_program(out, fetches, max_accesses, program, quiet),
        Cmd::TraceInfo { file, limit } => {
            let mut src = trace::open(&file)?;
            let info = trace::info(src.as_mut(), limit)?;
            println!("{}", serde_json::to_string_pretty(&info).expect("json"));
            Ok(())
        }
        Cmd::TraceConvert { input, output, quiet } => convert(input, output, quiet),
    }
}

fn main() -> ExitCode {
    // A closed stdout (`xlate workloads | head -5`) ends the process quietly, as Unix tools do,
    // instead of panicking in `println!` (Rust ignores SIGPIPE by default). Result files are
    // written before anything is printed, so nothing is lost.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of one signal before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let r = real_main();
    if let Err(e) = &r {
        eprintln!("xlate: error: {e}");
    }
    // Stopped by Ctrl-C: what was printed and written stays, and the exit status says the work
    // is incomplete (128 + SIGINT, as a shell reports a program the signal ended), so a script
    // does not take the partial results for complete ones.
    if sim::INTERRUPTED.load(Ordering::SeqCst) {
        return ExitCode::from(130);
    }
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Medians over rounds, and ratios to radix4 taken within each round before the median:
    /// a round where the host ran everything slower moves neither. Walk references per access
    /// close each row.
    #[test]
    fn bench_summary_takes_medians_and_ratios_within_rounds() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        let list = [("radix4", "gups"), ("ecpt", "gups"), ("ecpt", "bfs"), ("ecpt@radix4", "gups"), ("ecpt@radix4", "stream")];
        let cpu = vec![vec![0.2, 0.4, 0.3], vec![0.3, 0.6, 0.9], vec![0.5, 0.7, 0.6], vec![0.6, 1.2, 0.9], vec![0.1, 0.1, 0.1]];
        let s = bench_summary(&list, &cpu, &[0.87, 3.9, 1.2, 9.0, 0.01], 8);
        let rows: Vec<Vec<&str>> = s.lines().skip(2).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows[0], ["radix4", "gups", "0.300", "0.200-0.400", "1.00", "0.87"]);
        // Per-round ratios 1.5, 1.5, 3: median 1.5 (the ratio of the medians would be 2).
        assert_eq!(rows[1], ["ecpt", "gups", "0.600", "0.300-0.900", "1.50", "3.90"]);
        assert_eq!(rows[2], ["ecpt", "bfs", "0.600", "0.500-0.700", "1.20"], "no radix4 bfs run: no ratio");
        // A nested pair: its ratio to radix4, then to its guest design run natively (per-round
        // ratios 2, 2, 1: median 2), and that per simulated reference (2 × 4.9 / 10 = 0.98);
        // none where the guest design did not run on that workload.
        assert_eq!(rows[3], ["ecpt@radix4", "gups", "0.900", "0.600-1.200", "3.00", "9.00", "2.00", "0.98"]);
        assert_eq!(rows[4], ["ecpt@radix4", "stream", "0.100", "0.100-0.100", "0.01"]);
        assert!(s.starts_with("median over 3 rounds:"));
    }
}
