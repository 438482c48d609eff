//! Bad input gets one clear error line and exit code 2, never a panic.

use crate::common::{xlate, Scratch};
use std::process::Command;

fn fails_with(args: &[&str], needles: &[&str]) {
    let (code, _, err) = xlate(args);
    assert_eq!(code, 2, "{args:?}: exit code {code}, stderr: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: stderr lacks `{n}`: {err}");
    }
}

#[test]
fn unknown_names() {
    fails_with(&["run", "--design", "nope"], &["unknown design `nope`", "radix4"]);
    fails_with(&["run", "--workload", "nope"], &["unknown workload `nope`", "gups"]);
    fails_with(&["run", "--preset", "nope"], &["unknown preset `nope`", "emt-osdi25"]);
}

#[test]
fn bad_config_keys_and_values() {
    fails_with(&["run", "--set", "mmu.l2.sets=3"], &["mmu.l2.sets", "no such key"]);
    fails_with(&["run", "--set", "mmu.l2.entries=1200"], &["mmu.l2.entries", "power of two"]);
    fails_with(&["run", "--set", "mmu.l2.entries=1000"], &["mmu.l2.entries", "multiple of ways"]);
    fails_with(&["run", "--set", "mmu.l1d[0].ways=0"], &["mmu.l1d[0].ways", "at least 1"]);
    fails_with(&["run", "--set", "mem.l2.ways=0"], &["mem.l2.ways"]);
    fails_with(&["run", "--set", "workload.params.tabel=1G"], &["workload.params.tabel", "table"]);
    fails_with(&["run", "--set", "arch.fpt.flatten=\"l3l1\""], &["l3l1", "l4l3-l2l1"]);
    fails_with(&["run", "--set", "arch.fpt.pwc[0].level=5"], &["arch.fpt.pwc[0].level"]);
    let scratch = Scratch::new("cli-config");
    let dir = scratch.dir();
    let f = dir.join("bad.toml");
    std::fs::write(&f, "[mmu.l2]\nentries = 1536\nwayz = 12\n").unwrap();
    fails_with(&["run", "--config", f.to_str().unwrap()], &["mmu.l2.wayz", "bad.toml"]);
    std::fs::write(&f, "[mmu.l2\n").unwrap();
    fails_with(&["run", "--config", f.to_str().unwrap()], &["bad.toml", "not valid TOML"]);
}

/// Issue 14, item 10: each message names the right key or file and says what to do.
#[test]
fn errors_name_the_culprit() {
    // The footprint, not the stride, is what is wrong.
    fails_with(&["run", "-w", "stream", "--set", "workload.params.footprint=0", "-q"], &["workload.params.footprint", "at least 4K"]);
    // The config's own terms, not serde's `usize`.
    fails_with(&["run", "--set", "cores=-1", "-q"], &["`cores`", "whole number of at least 0, found -1"]);
    // One L1 D-TLB per page size: the error names each indexed form.
    fails_with(&["run", "--set", "mmu.l1d.entries=128", "-q"], &["mmu.l1d[0].entries (4K pages)", "mmu.l1d[1].entries (2M pages)"]);
    let scratch = Scratch::new("cli-culprit");
    let dir = scratch.dir();
    let f = dir.join("syntax.toml");
    std::fs::write(&f, "a = = 1\n").unwrap();
    let (code, _, err) = xlate(&["run", "--config", f.to_str().unwrap(), "-q"]);
    assert_eq!(code, 2);
    assert!(err.contains("config file") && err.contains("not valid TOML at line 1, column 5") && !err.contains("config key"), "{err}");
    let d = dir.to_str().unwrap();
    fails_with(&["run", "--config", d, "-q"], &["config file", "is a directory"]);
    fails_with(&["run", "--trace", d, "-q"], &["trace file", "is a directory"]);
    fails_with(&["run", "--trace", dir.join("missing.xlt").to_str().unwrap(), "-q"], &["trace file", "missing.xlt"]);
    // RestSegs that leave no room say so, not a buddy-allocator failure.
    fails_with(&["run", "-d", "utopia", "--set", "os.memory=1G", "-q"], &["os.memory", "too small for the RestSegs"]);
    // Out of simulated memory says what to change.
    fails_with(
        &["run", "--set", "os.memory=64M", "--set", "os.swap.enabled=false", "--set", "workload.params.updates=1000", "-q"],
        &["out of physical memory", "raise os.memory", "os.swap.enabled=true"],
    );
}

/// Issue 14, item 8: a thrashing run goes on but says so on stderr, once.
#[test]
fn thrashing_runs_say_so() {
    let args = [
        "run",
        "--set",
        "os.thp=always",
        "--set",
        "os.memory=256M",
        "--set",
        "os.swap.enabled=true",
        "--set",
        "workload.params.table=1G",
        "--set",
        "workload.params.updates=10000",
        "--set",
        "workload.params.populate=false",
        "-q",
    ];
    let (code, out, err) = xlate(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("swap_outs"), "{out}");
    assert_eq!(err.matches("warning: the simulated OS has swapped out").count(), 1, "{err}");
    assert!(err.contains("per access") && err.contains("raise os.memory"), "{err}");
}

#[test]
fn bad_traces() {
    let scratch = Scratch::new("cli-trace");
    let dir = scratch.dir();
    // A ChampSim trace cut in the middle of its second record.
    let f = dir.join("cut.champsim");
    let mut bytes = vec![0u8; 64 + 17];
    bytes[0] = 0x10; // ip
    bytes[32] = 0x40; // a load address
    std::fs::write(&f, &bytes).unwrap();
    fails_with(&["run", "--trace", f.to_str().unwrap(), "--quiet"], &["cut.champsim", "offset 64"]);
    // Not an xlate trace at all.
    let g = dir.join("junk.xlt");
    std::fs::write(&g, b"this is not a trace, just text that is long enough to be read").unwrap();
    let (code, _, err) = xlate(&["run", "--trace", g.to_str().unwrap(), "--quiet"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("junk.xlt") && !err.contains("panicked"), "{err}");
    fails_with(&["run", "--trace", dir.join("missing.xlt").to_str().unwrap()], &["missing.xlt"]);
}

/// `xlate bench` measures what it is asked, with units, from a tiny run.
#[test]
fn bench_prints_speed_cpu_time_and_memory() {
    let (code, out, err) = xlate(&["bench", "--accesses", "4000", "--designs", "radix4,ideal", "--workloads", "stream"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("loop M acc/s") && out.contains("loop CPU s/M acc") && out.contains("peak RSS"), "{out}");
    for d in ["radix4", "ideal"] {
        let row = out.lines().find(|l| l.split_whitespace().next() == Some(d)).unwrap_or_else(|| panic!("no {d} row: {out}"));
        assert!(row.contains("stream") && row.contains("MiB"), "{row}");
    }
    // The last column: simulated walk references per access (GUPS walks on about every other
    // access; ideal never walks).
    let (code, out, err) =
        xlate(&["bench", "--accesses", "4000", "--designs", "radix4,ideal", "--workloads", "gups", "-s", "workload.params.table=64M"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("walk refs/acc"), "{out}");
    for d in ["radix4", "ideal"] {
        let row = out.lines().find(|l| l.split_whitespace().next() == Some(d)).unwrap_or_else(|| panic!("no {d} row: {out}"));
        let refs: f64 = row.split_whitespace().last().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{row}"));
        assert_eq!(refs > 0.1, d == "radix4", "{row}");
    }
    fails_with(&["bench", "--accesses", "1000", "--designs", "nosuch"], &["nosuch"]);
    // Rounds: each row names its round, and the summary gives medians and ratios to radix4.
    let (code, out, err) = xlate(&["bench", "--accesses", "4000", "--designs", "radix4,ideal", "--workloads", "stream", "--repeat", "2"]);
    assert_eq!(code, 0, "{err}");
    for round in ["1", "2"] {
        assert!(out.lines().any(|l| l.split_whitespace().take(2).eq([round, "ideal"])), "no round {round} row: {out}");
    }
    let summary = out.split_once("median over 2 rounds:").unwrap_or_else(|| panic!("no summary: {out}")).1;
    let radix = summary.lines().find(|l| l.split_whitespace().next() == Some("radix4")).unwrap_or_else(|| panic!("{out}"));
    assert_eq!(radix.split_whitespace().nth(4), Some("1.00"), "{radix}");
    assert!(summary.lines().any(|l| l.split_whitespace().next() == Some("ideal")), "{out}");
    fails_with(&["bench", "--repeat", "0"], &["repeat"]);
}

#[test]
fn listings() {
    for cmd in ["designs", "workloads", "presets"] {
        let (code, out, _) = xlate(&[cmd]);
        assert_eq!(code, 0);
        assert!(out.lines().count() >= 3, "{cmd}: {out}");
    }
    let (_, out, _) = xlate(&["designs"]);
    for d in ["radix4", "radix5", "radix4-thp", "ideal", "fpt-l4l3-l2l1", "fpt-l3l2", "fpt-l4l3", "fpt-l2l1", "fpt-l3l2-thp"] {
        assert!(out.contains(d));
    }
}

#[test]
fn print_config_shows_each_preset_values_source() {
    let (code, out, err) = xlate(&["run", "--preset", "champsim", "--design", "radix5", "--print-config"]);
    assert_eq!(code, 0, "{err}");
    let line = |prefix: &str| out.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no `{prefix}` in\n{out}"));
    assert!(line("levels = 5").ends_with("# virtual_memory.num_levels = 5"), "{out}");
    assert!(line("pwc_mode = \"champsim\"").contains("src/ptw.cc"), "{out}");
    assert!(line("size = \"512K\"").contains("L2C.sets 1024 × L2C.ways 8 × block_size 64"), "{out}");
    assert!(line("fault_trap_cycles = 200.0").contains("minor_fault_penalty"), "{out}");
    // The default design sets 4 levels over the preset's 5: the line says so.
    let (_, out, _) = xlate(&["run", "--preset", "champsim", "--print-config"]);
    assert!(out.lines().any(|l| l.starts_with("levels = 4") && l.contains("which gives 5")), "{out}");
    // Without a preset the output is plain TOML.
    let (_, out, _) = xlate(&["run", "--print-config"]);
    assert!(!out.contains("  # "), "{out}");
}

#[test]
fn run_writes_json_and_csv_with_units() {
    let scratch = Scratch::new("cli-out");
    let dir = scratch.dir();
    let j = dir.join("r.json");
    let c = dir.join("r.csv");
    let (code, out, err) = xlate(&[
        "compare",
        "--designs",
        "radix4,ideal",
        "--workload",
        "gups",
        "--set",
        "workload.params.table=64M",
        "--set",
        "workload.params.updates=20000",
        "--set",
        "os.memory=1G",
        "--json",
        j.to_str().unwrap(),
        "--csv",
        c.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("l2_tlb_mpki") && out.contains("misses/kinstr") && out.contains("speedup_vs_radix4"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    assert_eq!(v[0]["schema"], "xlate.run.v1");
    assert_eq!(v[1]["design"], "ideal");
    assert_eq!(v[0]["units"]["walk_latency_avg"], "cycles");
    assert_eq!(v[0]["config"]["mmu"]["l2"]["entries"], 1536);
    let csv = std::fs::read_to_string(&c).unwrap();
    assert_eq!(csv.lines().count(), 3);
}

/// `compare --json` writes an array whatever the number of designs; `run --json` one object.
#[test]
fn compare_json_is_an_array_even_of_one_design() {
    let scratch = Scratch::new("cli-json-shape");
    let small = ["--workload", "gups", "--set", "workload.params.table=16M", "--set", "workload.params.updates=2000", "-q", "--json"];
    for (cmd, design) in [("compare", "--designs"), ("run", "--design")] {
        let j = scratch.dir().join(format!("{cmd}.json"));
        let args: Vec<&str> = [cmd, design, "radix4"].iter().chain(&small).copied().chain([j.to_str().unwrap()]).collect();
        let (code, _, err) = xlate(&args);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
        let one = if cmd == "compare" { &v[0] } else { &v };
        assert_eq!(v.is_array(), cmd == "compare", "{cmd}");
        assert_eq!(one["design"], "radix4", "{cmd}");
    }
}

/// A reader that closes stdout early (`xlate workloads | head -5`) ends xlate quietly, and a
/// run's result files are written before its table is printed (issue 14, item 4).
#[test]
fn a_closed_stdout_ends_quietly_without_losing_results() {
    use std::process::Stdio;
    let scratch = Scratch::new("cli-pipe");
    let dir = scratch.dir();
    let json = dir.join("r.json");
    let runs: [Vec<&str>; 2] = [
        vec!["workloads"],
        vec!["run", "-q", "--set", "workload.params.table=64M", "--set", "workload.params.updates=20000", "--json", json.to_str().unwrap()],
    ];
    for args in runs {
        let mut child =
            Command::new(env!("CARGO_BIN_EXE_xlate")).args(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take()); // the reader goes away before anything is printed
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
    }
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["design"], "radix4");
}

/// A ChampSim trace of `(load, store)` address pairs, one record each (0 = none), in `scratch`.
fn champsim_trace(scratch: &Scratch, name: &str, recs: &[(u64, u64)]) -> std::path::PathBuf {
    use xlate::trace::champsim::Record;
    let f = scratch.path(name);
    let mut bytes = Vec::new();
    for (i, &(load, store)) in recs.iter().enumerate() {
        let mut r = Record { ip: 0x40_1000 + 4 * i as u64, ..Record::default() };
        r.source_memory[0] = load;
        r.destination_memory[0] = store;
        bytes.extend_from_slice(&r.encode());
    }
    std::fs::write(&f, bytes).unwrap();
    f
}

/// Addresses beyond the design's user address space are refused, naming the access, instead of
/// aliasing a lower page (radix4: 2^47) or overflowing a page's end (utopia).
#[test]
fn addresses_beyond_user_space_are_refused() {
    let scratch = Scratch::new("cli-addr");
    let alias = champsim_trace(&scratch, "alias.champsim", &[(0x1000, 0), (0x1_0000_0000_1000, 0)]);
    for design in ["radix4", "fpt-l4l3-l2l1", "ecpt"] {
        fails_with(
            &["run", "--design", design, "--trace", alias.to_str().unwrap(), "--quiet"],
            &["alias.champsim", "access 1 of thread 0", "0x1000000001000", "not a user-space address"],
        );
    }
    // 5-level paging reaches 2^56: the same trace runs, with two page faults.
    let (code, out, err) = xlate(&["run", "--design", "radix5", "--trace", alias.to_str().unwrap(), "--quiet", "--checked"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().any(|l| l.starts_with("page_faults ") && l.split_whitespace().nth(2) == Some("2")), "{out}");
    let wrap = champsim_trace(&scratch, "wrap.champsim", &[(0x1000, 0), (0, 0xffff_ffff_ffff_ff00)]);
    for design in ["utopia", "utopia-restrictive-only"] {
        fails_with(
            &["run", "--design", design, "--trace", wrap.to_str().unwrap(), "--quiet"],
            &["0xffffffffffffff00", "not a user-space address"],
        );
    }
}

/// trace-convert never truncates its input: the same file as output is refused, and outputs
/// appear only when complete.
#[test]
fn trace_convert_refuses_to_overwrite_its_input() {
    let scratch = Scratch::new("cli-convert");
    let f = champsim_trace(&scratch, "same.champsim", &[(0x1000, 0), (0x2000, 0x3000)]);
    let before = std::fs::read(&f).unwrap();
    fails_with(&["trace-convert", f.to_str().unwrap(), f.to_str().unwrap()], &["same.champsim", "input file itself"]);
    assert_eq!(std::fs::read(&f).unwrap(), before, "input untouched");
    let out = f.with_file_name("same.xlt");
    let (code, _, err) = xlate(&["trace-convert", f.to_str().unwrap(), out.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let names: Vec<String> =
        std::fs::read_dir(f.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.contains(".tmp-")), "no temporary file left: {names:?}");
}

/// Non-finite and negative numbers are refused wherever they appear in a config.
#[test]
fn nonsense_numbers_are_refused() {
    for (set, key) in [
        ("core.base_cpi=nan", "core.base_cpi"),
        ("core.base_cpi=inf", "core.base_cpi"),
        ("core.translation_exposure=nan", "core.translation_exposure"),
        ("core.translation_exposure=-1", "core.translation_exposure"),
        ("core.translation_exposure=1.5", "core.translation_exposure"),
        ("os.fault_trap_cycles=nan", "os.fault_trap_cycles"),
        ("os.costs.call=-40", "os.costs.call"),
    ] {
        fails_with(&["run", "--set", set], &[key]);
    }
}

/// A run that measures nothing is an error, not an all-zero table: an empty trace, a warm-up
/// as long as the run; and `--workload` beside `--trace` is refused rather than ignored.
#[test]
fn runs_that_simulate_nothing_fail() {
    let scratch = Scratch::new("cli-nothing");
    let empty = champsim_trace(&scratch, "empty.champsim", &[]);
    fails_with(&["run", "--trace", empty.to_str().unwrap(), "--quiet"], &["nothing was simulated"]);
    fails_with(
        &["run", "--set", "workload.params.updates=1000", "--set", "sim.warmup_accesses=2000", "--quiet"],
        &["sim.warmup_accesses", "nothing was measured"],
    );
    let t = champsim_trace(&scratch, "one.champsim", &[(0x1000, 0)]);
    let (code, _, err) = xlate(&["run", "--trace", t.to_str().unwrap(), "--workload", "gups"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
}

/// Configs whose structures would not fit the host are refused before anything is allocated,
/// naming the key; `--max-host-memory` moves the limit.
#[test]
fn configs_too_big_for_the_host_are_refused() {
    fails_with(&["run", "--set", "mem.llc.size=1T"], &["mem.llc.size", "host memory", "--max-host-memory"]);
    fails_with(&["run", "--set", "os.memory=1024T"], &["os.memory", "host memory"]);
    fails_with(&["run", "--set", "mmu.l2.entries=2147483648", "--set", "mmu.l2.ways=1"], &["mmu.l2.entries", "2^28"]);
    fails_with(&["run", "--max-host-memory", "100M", "--set", "mem.llc.size=1G"], &["mem.llc.size", "sim.max_host_memory"]);
    let (code, _, err) =
        xlate(&["run", "--quiet", "--max-host-memory", "2G", "--set", "mem.llc.size=1G", "--set", "workload.params.updates=1000"]);
    assert_eq!(code, 0, "{err}");
}

/// Found by the fuzz harness (seed 104378): a channel count given as a byte size ("1G") made
/// the bank count overflow and panic on the first DRAM access.
#[test]
fn dram_bank_count_is_bounded() {
    fails_with(&["run", "--set", "mem.dram.channels=\"1G\""], &["mem.dram.channels", "65536"]);
}

/// Parses CSV as RFC 4180 reads it: a field may be quoted, a quote inside one doubled.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let (mut rows, mut row, mut field) = (Vec::new(), Vec::new(), String::new());
    let (mut quoted, mut chars) = (false, text.chars().peekable());
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => {
                assert!(c != '"', "a quote inside an unquoted field: {text}");
                field.push(c);
            }
        }
    }
    assert!(!quoted && row.is_empty() && field.is_empty(), "CSV ends inside a record: {text}");
    rows
}

/// The CSV of a comparison carries the preset, the key config values and the workload's
/// parameters beside the metrics, every row as long as the header, fields quoted only when they
/// must be (issue 14).
#[test]
fn csv_has_config_and_workload_columns() {
    let scratch = Scratch::new("cli-csv");
    let dir = scratch.dir();
    let c = dir.join("r.csv");
    let (code, _, err) = xlate(&[
        "compare",
        "-q",
        "--designs",
        "radix4,radix4-thp",
        "--preset",
        "champsim",
        "--set",
        "workload.params.table=64M",
        "--set",
        "workload.params.updates=20000",
        "--set",
        "os.memory=1G",
        "--csv",
        c.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&c).unwrap();
    let rows = parse_csv(&text);
    assert_eq!(rows.len(), 3, "{text}");
    let header = &rows[0];
    for r in &rows {
        assert_eq!(r.len(), header.len(), "{text}");
    }
    let col = |name: &str| header.iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name} in {header:?}"));
    let cell = |row: usize, name: &str| rows[row][col(name)].as_str();
    assert_eq!(&header[..4], ["design", "workload", "interrupted", "preset"]);
    assert_eq!((cell(1, "design"), cell(2, "design")), ("radix4", "radix4-thp"));
    assert_eq!((cell(1, "preset"), cell(1, "cores"), cell(1, "workload")), ("champsim", "1", "gups"));
    assert_eq!((cell(1, "os.thp"), cell(2, "os.thp")), ("never", "always"));
    assert!(cell(1, "mmu.l2.entries").parse::<u32>().unwrap() > 0 && cell(1, "mmu.l2.ways").parse::<u32>().unwrap() > 0);
    // Given parameters and the defaults of the others.
    assert_eq!((cell(1, "workload.table"), cell(1, "workload.updates")), ("64M", "20000"));
    assert!(header.iter().filter(|h| h.starts_with("workload.")).count() > 2, "{header:?}");
    assert!(cell(1, "l2_tlb_mpki").parse::<f64>().unwrap() > 0.0);
    // Plain strings are not quoted: the second line starts with its design and workload bare.
    assert!(text.lines().nth(1).unwrap().starts_with("radix4,gups,false,champsim,"), "{text}");

    // A workload field with a comma in it (a trace's path) is quoted and reads back whole; a
    // trace run has no workload parameters.
    let t = champsim_trace(&scratch, "a,b.champsim", &[(0x1000, 0), (0x2000, 0x3000)]);
    let (code, _, err) = xlate(&["run", "-q", "--trace", t.to_str().unwrap(), "--csv", c.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&c).unwrap();
    assert!(text.contains(&format!(",\"{}\",", t.display())), "{text}");
    let rows = parse_csv(&text);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].len(), rows[0].len());
    assert_eq!(rows[1][1], t.display().to_string());
    assert!(rows[0].iter().all(|h| !h.starts_with("workload.")), "{:?}", rows[0]);
}

/// `--checked` says how many translations it compared once every one agreed; an unchecked run
/// says nothing (issue 14).
#[test]
fn checked_run_reports_what_it_compared() {
    let scratch = Scratch::new("cli-checked");
    let dir = scratch.dir();
    let j = dir.join("r.json");
    let args = ["run", "-q", "--set", "workload.params.table=64M", "--set", "workload.params.updates=20000", "--json", j.to_str().unwrap()];
    let (code, _, err) = xlate(&[&args[..], &["--checked"]].concat());
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    let accesses = v["metrics"]["accesses"].as_f64().unwrap() as u64;
    assert!(accesses > 20_000);
    let line = format!("checked: {accesses} translations of radix4 agreed with the OS's ground truth (0 mismatches)");
    assert!(err.lines().any(|l| l == line), "no `{line}` in: {err}");
    let (code, _, err) = xlate(&args);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("checked:"), "{err}");
}

/// trace-info prints addresses in hex (issue 14).
#[test]
fn trace_info_prints_addresses_in_hex() {
    let scratch = Scratch::new("cli-hex");
    let t = champsim_trace(&scratch, "hex.champsim", &[(0x1000, 0), (0x7f00_0000_2000, 0x3008)]);
    let (code, out, err) = xlate(&["trace-info", t.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["min_vaddr"].as_str(), v["max_vaddr"].as_str()), (Some("0x1000"), Some("0x7f0000002000")), "{out}");
    assert_eq!(v["accesses"], 3);
}

/// Runs xlate with `args`, sends it SIGINT after `after`, and returns its exit code, stdout,
/// stderr and how long it took to end after the signal.
fn interrupted(args: &[&str], after: std::time::Duration) -> (i32, String, String, std::time::Duration) {
    use std::process::Stdio;
    let child = Command::new(env!("CARGO_BIN_EXE_xlate")).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(after);
    let sent = std::time::Instant::now();
    // SAFETY: signalling our own child, which has not been waited for, so its pid is still its own.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) }, 0);
    // Pipes are drained while waiting, so a large table cannot block the child.
    let out = child.wait_with_output().unwrap();
    let took = sent.elapsed();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        took,
    )
}

/// Ctrl-C stops a run within a fraction of a second (the loop looks at it every few thousand
/// accesses), prints the partial table and exits 130, so scripts do not take it for complete.
/// The run outlasts the progress bar's 2 s delay: on a pipe no bar (no escape code) appears.
#[test]
fn ctrl_c_prints_the_partial_results_and_exits_130() {
    // 100 M accesses: a minute here, far beyond the signal. A 256 MiB table keeps the setup short.
    let big = ["--set", "workload.params.table=256M", "--set", "workload.params.updates=50000000"];
    let run: Vec<&str> = ["run"].iter().chain(&big).copied().collect();
    let (code, out, err, took) = interrupted(&run, std::time::Duration::from_millis(2500));
    assert_eq!(code, 130, "stdout: {out}\nstderr: {err}");
    assert!(out.contains("radix4 (partial)"), "{out}");
    assert!(took < std::time::Duration::from_secs(3), "stopped {took:?} after Ctrl-C");
    assert!(!err.contains('\x1b') && !err.contains("accesses/s"), "progress on a pipe: {err:?}");
    // compare stops at the design it is in and reports it; later designs do not run.
    let cmp: Vec<&str> = ["compare", "--designs", "radix4,ideal"].iter().chain(&big).copied().collect();
    let (code, out, err, _) = interrupted(&cmp, std::time::Duration::from_millis(1000));
    assert_eq!(code, 130, "stdout: {out}\nstderr: {err}");
    assert!(out.contains("radix4 (partial)") && !out.contains("ideal"), "{out}");
}

/// Without Ctrl-C the exit code stays 0, and stderr, not a terminal here, has no progress.
#[test]
fn no_progress_output_off_a_terminal() {
    let (code, out, err) = xlate(&["run", "--set", "workload.params.table=64M", "--set", "workload.params.updates=20000"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("radix4"), "{out}");
    assert!(!err.contains('\x1b') && !err.contains("accesses/s"), "{err:?}");
}

/// With Utopia Table 1's prefetchers on, a checked run (stream and bfs, native and nested) still
/// translates every access to the OS's frame, and the results carry the prefetch counters, which
/// runs without prefetchers do not; a bad prefetcher setting names its key.
#[test]
fn prefetchers_run_checked_and_report_their_counters() {
    let scratch = Scratch::new("cli-prefetch");
    let dir = scratch.dir();
    let on = ["--set", "mem.prefetch.l1d.kind=ip-stride", "--set", "mem.prefetch.l2.kind=stream"];
    for (design, workload, extra) in [
        ("radix4", "stream", &["--set", "workload.params.footprint=8M"][..]),
        ("ecpt", "bfs", &["--set", "workload.params.footprint=64M", "--set", "sim.max_accesses=200000"][..]),
        (
            "radix4@radix4",
            "stream",
            &["--set", "workload.params.footprint=8M", "--set", "os.memory=512M", "--set", "host.os.memory=2G"][..],
        ),
    ] {
        let j = dir.join(format!("{workload}.json"));
        let base = ["run", "-q", "--checked", "--design", design, "--workload", workload, "--json", j.to_str().unwrap()];
        let (code, _, err) = xlate(&[&base[..], extra, &on[..]].concat());
        assert_eq!(code, 0, "{design} {workload}: {err}");
        assert!(err.contains("(0 mismatches)"), "{err}");
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
        let p = &v["mem"]["prefetch"]["l1d"];
        assert!(p["issued"].as_u64().unwrap() > 0 && p["useful"].as_u64().unwrap() > 0, "{design} {workload}: {p}");
        let (code, _, err) = xlate(&[&base[..], extra].concat());
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
        assert!(v["mem"].get("prefetch").is_none(), "no prefetch counters without prefetchers");
    }
    fails_with(&["run", "--set", "mem.prefetch.l1d.kind=next-line"], &["mem.prefetch.l1d.kind", "ip-stride"]);
    fails_with(
        &["run", "--set", "mem.prefetch.l2.kind=stream", "--set", "mem.prefetch.l2.degree=0"],
        &["mem.prefetch.l2.degree", "1..=64"],
    );
}
