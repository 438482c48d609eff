//! `xlate sweep` end to end through the binary: records, resume after a kill or Ctrl-C with
//! results identical to an uninterrupted sweep, failing points, `--status` and `--export`; and
//! `reproduce`'s records through the library.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{xlate, Scratch};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// 2 designs × 2 L2 TLB sizes of a tiny GUPS.
const TINY: &str = r#"
designs = ["radix4", "ecpt"]
workloads = ["gups"]
[set]
"workload.params.updates" = 2000
"workload.params.table" = "64M"
[axes]
"mmu.l2.entries" = [768, 1536]
"#;

/// The same shape, with points long enough (≈0.3 s) to be caught in flight, and epochs short
/// enough that Ctrl-C stops a point mid-run.
const SLOW: &str = r#"
designs = ["radix4", "ecpt"]
workloads = ["gups"]
[set]
"workload.params.updates" = 300000
"workload.params.table" = "64M"
"sim.epoch_accesses" = 20000
[axes]
"mmu.l2.entries" = [768, 1536]
"#;

/// Every record of a sweep directory, by id, without the host-timing fields (`result.host`,
/// `run.wall_s`, `run.setup_s`).
fn records(dir: &Path) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir.join("points")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        if let Some(r) = v.get_mut("result").and_then(|r| r.as_object_mut()) {
            assert!(r.remove("host").is_some());
        }
        if let Some(r) = v.get_mut("run").and_then(|r| r.as_object_mut()) {
            assert!(r.remove("wall_s").is_some() && r.remove("setup_s").is_some());
        }
        out.insert(name.trim_end_matches(".json").to_string(), v);
    }
    out
}

fn manifest_ids(dir: &Path) -> Vec<String> {
    let m: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    m["points"].as_array().unwrap().iter().map(|p| p["id"].as_str().unwrap().to_string()).collect()
}

fn finished_lines(stderr: &str) -> usize {
    stderr.lines().filter(|l| l.starts_with('[') && (l.contains(" done (") || l.contains(" failed ("))).count()
}

/// Runs, reruns nothing, resumes after a deleted record, reports status, exports CSV, and refuses
/// another grid in the same directory.
#[test]
fn sweep_records_resumes_and_exports() {
    let scratch = Scratch::new("sweep-basic");
    let d = scratch.dir();
    let grid = write(d, "tiny.toml", TINY);
    let (a, b) = (d.join("a"), d.join("b"));
    let (code, out, err) = xlate(&["sweep", grid.to_str().unwrap(), "--out", a.to_str().unwrap(), "--jobs", "2"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(finished_lines(&err), 4, "{err}");
    assert!(err.contains("radix4 gups mmu.l2.entries=768 done ("), "{err}");
    assert!(out.contains("4 points: 4 done, 0 failed, 0 pending"), "{out}");
    assert_eq!(std::fs::read_to_string(a.join("grid.toml")).unwrap(), TINY);
    let ids = manifest_ids(&a);
    assert_eq!(ids.len(), 4);
    let ra = records(&a);
    assert_eq!(ra.keys().cloned().collect::<std::collections::BTreeSet<_>>(), ids.iter().cloned().collect());
    for (id, r) in &ra {
        assert_eq!(r["record_schema"], 1);
        assert_eq!(r["id"], id.as_str());
        assert_eq!(r["status"], "done");
        assert!(r["error"].is_null());
        assert_eq!(r["result"]["metrics"]["accesses"], r["run"]["core"]["accesses"].as_f64().unwrap());
        assert!(r["swept"]["mmu.l2.entries"].is_u64());
        // The stored run rebuilds the RunOutput exactly: its report equals the stored result.
        let text = std::fs::read_to_string(a.join("points").join(format!("{id}.json"))).unwrap();
        let rec: xlate::sweep::Record = serde_json::from_str(&text).unwrap();
        let run = rec.run.unwrap();
        assert_eq!(xlate::report::json(&run), rec.result.unwrap());
        let again: xlate::sim::RunOutput = serde_json::from_str(&serde_json::to_string(&run).unwrap()).unwrap();
        assert_eq!(again, run);
    }

    // One thread gives the same records as two (apart from timing); a rerun runs nothing.
    let (code, _, err) = xlate(&["sweep", grid.to_str().unwrap(), "--out", b.to_str().unwrap(), "--jobs", "1", "-q"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(finished_lines(&err), 0, "-q: {err}");
    assert_eq!(records(&b), ra);
    let (code, out, err) = xlate(&["sweep", grid.to_str().unwrap(), "--out", b.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!(finished_lines(&err), 0, "{err}");
    assert!(out.contains("4 points: 4 done, 0 failed, 0 pending (this run: 0 ran, 4 skipped"), "{out}");

    // Delete one record: only that point runs again, and gives the same record.
    let victim = &ids[2];
    let others: BTreeMap<String, Vec<u8>> = ids
        .iter()
        .filter(|i| *i != victim)
        .map(|i| (i.clone(), std::fs::read(b.join("points").join(format!("{i}.json"))).unwrap()))
        .collect();
    std::fs::remove_file(b.join("points").join(format!("{victim}.json"))).unwrap();
    let (code, out, err) = xlate(&["sweep", grid.to_str().unwrap(), "--out", b.to_str().unwrap(), "--jobs", "1"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(finished_lines(&err), 1, "{err}");
    assert!(err.contains("[1/1] radix4 gups mmu.l2.entries=1536 done"), "{err}");
    assert!(out.contains("(this run: 1 ran, 3 skipped"), "{out}");
    for (i, bytes) in &others {
        assert_eq!(&std::fs::read(b.join("points").join(format!("{i}.json"))).unwrap(), bytes, "{i} was rewritten");
    }
    assert_eq!(records(&b), ra);

    let (code, out, _) = xlate(&["sweep", "--status", b.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("4 points: 4 done, 0 failed, 0 pending"), "{out}");

    let csv = d.join("b.csv");
    let (code, out, err) = xlate(&["sweep", "--export", b.to_str().unwrap(), "--csv", csv.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("wrote 4 rows"), "{out}");
    let text = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(
        lines[0]
            .starts_with("id,design,workload,preset,status,error,mmu.l2.entries,instructions [instr],accesses [accesses],cycles [cycles],"),
        "{}",
        lines[0]
    );
    let header: Vec<&str> = lines[0].split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no column {name}"));
    for (row, id) in lines[1..].iter().zip(&ids) {
        let f: Vec<&str> = row.split(',').collect();
        assert_eq!(f.len(), header.len(), "{row}");
        assert_eq!(f[0], id);
        assert_eq!(f[4], "done");
        assert_eq!(f[5], "");
        let rec = &ra[id];
        assert_eq!(f[col("mmu.l2.entries")], rec["swept"]["mmu.l2.entries"].to_string());
        let mpki: f64 = f[col("l2_tlb_mpki [misses/kinstr]")].parse().unwrap();
        assert_eq!(mpki, rec["result"]["metrics"]["l2_tlb_mpki"].as_f64().unwrap());
    }
    assert_eq!(lines[1].split(',').nth(1), Some("radix4"));
    assert_eq!(lines[2].split(',').nth(1), Some("ecpt"));

    // Another grid into the same directory is refused, unless --force (shared points stay).
    let other = write(d, "other.toml", &TINY.replace("[768, 1536]", "[1536, 3072]"));
    let (code, _, err) = xlate(&["sweep", other.to_str().unwrap(), "--out", b.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("holds another sweep") && err.contains("--force"), "{err}");
    let (code, out, err) = xlate(&["sweep", other.to_str().unwrap(), "--out", b.to_str().unwrap(), "--force"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(this run: 2 ran, 2 skipped"), "{out}");
    // A directory that is not a sweep is refused too.
    let (code, _, err) = xlate(&["sweep", grid.to_str().unwrap(), "--out", d.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("not a sweep directory"), "{err}");
    let (code, _, err) = xlate(&["sweep", "--status", d.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("not a sweep directory"), "{err}");
}

/// A point that fails at run time is recorded as failed with its error; the others finish;
/// the exit status is 1; failed points rerun only with --retry-failed.
#[test]
fn failing_points_are_recorded_and_the_rest_finish() {
    let scratch = Scratch::new("sweep-failing");
    let d = scratch.dir();
    // A table twice the simulated memory: the config is valid, the run runs out of memory.
    let text = format!("{TINY}\n[[points]]\ndesign = \"radix4\"\n\"workload.params.table\" = \"128M\"\n\"os.memory\" = \"64M\"\n");
    let grid = write(d, "grid.toml", &text);
    let out_dir = d.join("out");
    let (code, out, err) = xlate(&["sweep", grid.to_str().unwrap(), "--out", out_dir.to_str().unwrap(), "--jobs", "2"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("5 points: 4 done, 1 failed, 0 pending"), "{out}");
    assert!(err.contains("failed (") && err.contains("out of physical memory"), "{err}");
    let recs = records(&out_dir);
    let failed: Vec<&Value> = recs.values().filter(|r| r["status"] == "failed").collect();
    assert_eq!(failed.len(), 1);
    let f = failed[0];
    assert!(f["error"].as_str().unwrap().contains("raise os.memory"), "{f}");
    assert!(f["result"].is_null() && f["run"].is_null());
    assert_eq!(f["swept"]["workload.params.table"], "128M");
    assert_eq!(f["swept"]["os.memory"], "64M");

    let (code, out, _) = xlate(&["sweep", "--status", out_dir.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("5 points: 4 done, 1 failed, 0 pending"), "{out}");
    assert!(
        out.contains(&format!(
            "  {} radix4 gups workload.params.table=128M os.memory=64M: simulated machine out of physical memory",
            f["id"].as_str().unwrap()
        )),
        "{out}"
    );

    // Failed points are skipped on a rerun (still exit 1), and run again with --retry-failed.
    let (code, _, err) = xlate(&["sweep", grid.to_str().unwrap(), "--out", out_dir.to_str().unwrap()]);
    assert_eq!((code, finished_lines(&err)), (1, 0), "{err}");
    let (code, _, err) = xlate(&["sweep", grid.to_str().unwrap(), "--out", out_dir.to_str().unwrap(), "--retry-failed"]);
    assert_eq!((code, finished_lines(&err)), (1, 1), "{err}");

    // The CSV quotes the error (it holds commas).
    let csv = d.join("out.csv");
    let (code, _, err) = xlate(&["sweep", "--export", out_dir.to_str().unwrap(), "--csv", csv.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&csv).unwrap();
    let last = text.lines().last().unwrap();
    assert!(last.contains(",failed,\"simulated machine out of physical memory: 4 KiB page for "), "{last}");
    assert!(last.contains("(raise os.memory, or host.os.memory for a guest@host design, or let the OS swap"), "{last}");
    assert_eq!(text.lines().count(), 6);
}

/// A workload parameter whose value does not parse as its kind is refused when the grid is
/// expanded, naming the key and the value, before any point runs (and nothing is written).
#[test]
fn a_workload_parameter_of_the_wrong_kind_refuses_the_grid() {
    let scratch = Scratch::new("sweep-bad-kind");
    let d = scratch.dir();
    let text = format!("{TINY}\n[[points]]\ndesign = \"radix4\"\n\"workload.params.updates\" = \"lots, really\"\n");
    let grid = write(d, "grid.toml", &text);
    let out_dir = d.join("out");
    let (code, out, err) = xlate(&["sweep", grid.to_str().unwrap(), "--out", out_dir.to_str().unwrap()]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("workload.params.updates") && err.contains("`lots, really` is not an unsigned integer"), "{err}");
    assert_eq!(finished_lines(&err), 0, "{err}");
    assert!(!out_dir.join("points").exists() || std::fs::read_dir(out_dir.join("points")).unwrap().next().is_none());
}

/// Waits until `dir/points` holds at least one record, or the child exits.
fn wait_for_a_record(child: &mut std::process::Child, dir: &Path) {
    let started = Instant::now();
    loop {
        let n = std::fs::read_dir(dir.join("points"))
            .map(|r| r.filter_map(|e| e.ok()).filter(|e| !e.file_name().to_string_lossy().starts_with('.')).count())
            .unwrap_or(0);
        if n > 0 || child.try_wait().unwrap().is_some() || started.elapsed() > Duration::from_secs(60) {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A sweep killed (SIGKILL) after its first point, or stopped with Ctrl-C (SIGINT), finishes on
/// a rerun with records identical to an uninterrupted sweep's, running no finished point again.
#[test]
fn killed_or_interrupted_sweeps_resume_to_identical_results() {
    let scratch = Scratch::new("sweep-kill");
    let d = scratch.dir();
    let grid = write(d, "slow.toml", SLOW);
    let g = grid.to_str().unwrap();
    let reference = d.join("ref");
    let (code, _, err) = xlate(&["sweep", g, "--out", reference.to_str().unwrap(), "--jobs", "2"]);
    assert_eq!(code, 0, "{err}");
    let want = records(&reference);
    assert_eq!(want.len(), 4);

    for (signal, name) in [(libc::SIGKILL, "killed"), (libc::SIGINT, "interrupted")] {
        let dir = d.join(name);
        let mut child = Command::new(env!("CARGO_BIN_EXE_xlate"))
            .args(["sweep", g, "--out", dir.to_str().unwrap(), "--jobs", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_a_record(&mut child, &dir);
        // SAFETY: signalling our own child process, which has not been reaped yet.
        unsafe { libc::kill(child.id() as i32, signal) };
        let status = child.wait().unwrap();
        let before = records(&dir);
        assert!(!before.is_empty() && before.len() < 4, "{name}: {} records when stopped: make the points slower", before.len());
        if signal == libc::SIGINT {
            assert_eq!(status.code(), Some(130), "{name}");
        }
        for (id, r) in &before {
            assert_eq!(r, &want[id], "{name}: record {id} differs from the uninterrupted sweep's");
        }
        let (code, out, err) = xlate(&["sweep", g, "--out", dir.to_str().unwrap(), "--jobs", "2"]);
        assert_eq!(code, 0, "{name}: {err}");
        assert_eq!(finished_lines(&err), 4 - before.len(), "{name}: reran a finished point: {err}");
        assert!(out.contains(&format!("(this run: {} ran, {} skipped", 4 - before.len(), before.len())), "{name}: {out}");
        assert_eq!(records(&dir), want, "{name}");
    }
}

/// The grid is checked before anything runs: errors name the grid file and the key.
#[test]
fn bad_grids_name_the_file_and_key() {
    let scratch = Scratch::new("sweep-bad");
    let d = scratch.dir();
    for (text, needles) in [
        (TINY.replace("[axes]", "[axis]"), &["grid ", "bad.toml", "unknown key `axis`"][..]),
        (TINY.replace("\"mmu.l2.entries\"", "\"mmu.l2.entriez\""), &["mmu.l2.entriez", "bad.toml", "no such key"]),
        (TINY.replace("[768, 1536]", "[]"), &["bad.toml", "`mmu.l2.entries` is an empty list"]),
    ] {
        let grid = write(d, "bad.toml", &text);
        let out_dir = d.join("out");
        let (code, _, err) = xlate(&["sweep", grid.to_str().unwrap(), "--out", out_dir.to_str().unwrap()]);
        assert_eq!(code, 2, "{err}");
        for n in needles {
            assert!(err.contains(n), "{err} lacks {n}");
        }
        assert!(!out_dir.exists(), "nothing is created for a bad grid");
    }
}

mod study {
    use std::collections::BTreeMap;
    use xlate::reproduce::{ratio, Finding, RunSpec, Study};
    use xlate::sim::RunOutput;

    fn runs() -> Vec<RunSpec> {
        let w = ["workload.name=\"gups\"", "workload.params.updates=2000", "workload.params.table=64M"];
        let sets = || w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        vec![
            RunSpec { key: "radix".into(), design: "radix4", sets: sets() },
            RunSpec { key: "ecpt".into(), design: "ecpt", sets: sets() },
            // The same run under a second key runs once.
            RunSpec { key: "radix-again".into(), design: "radix4", sets: sets() },
        ]
    }

    fn ours(r: &BTreeMap<String, RunOutput>) -> Option<f64> {
        ratio(r, "ecpt", "radix", "cycles")
    }

    fn findings() -> Vec<Finding> {
        vec![Finding { name: "cycles ECPT / radix", paper: "1×", paper_value: Some(1.0), kind: xlate::reproduce::Kind::Ratio, ours }]
    }

    pub const TINY: Study = Study { name: "tiny", description: "a test study", preset: "utopia-micro23", runs, findings };
}

/// `reproduce --out`: a study's runs are records; a rerun loads them (same findings, nothing run)
/// and runs only a missing one.
#[test]
fn reproduce_records_its_runs_and_resumes() {
    let scratch = Scratch::new("sweep-reproduce");
    let d = scratch.dir();
    let out = d.join("study");
    let first = xlate::reproduce::run_in(&study::TINY, &[], false, Some(&out), false).unwrap();
    let recs = records(&out);
    assert_eq!(recs.len(), 2, "the duplicate run ran once");
    let m: Value = serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["source"], "xlate reproduce tiny");
    assert_eq!(m["points"][0]["label"], "radix,radix-again");
    let second = xlate::reproduce::run_in(&study::TINY, &[], false, Some(&out), false).unwrap();
    assert_eq!(first.table, second.table);
    assert_eq!(first.json["findings"], second.json["findings"]);
    let id = m["points"][1]["id"].as_str().unwrap();
    std::fs::remove_file(out.join("points").join(format!("{id}.json"))).unwrap();
    let third = xlate::reproduce::run_in(&study::TINY, &[], false, Some(&out), false).unwrap();
    assert_eq!(first.table, third.table);
    assert_eq!(records(&out), recs);
    // Without --out the same numbers.
    let plain = xlate::reproduce::run(&study::TINY, &[], false).unwrap();
    assert_eq!(first.table, plain.table);
    // Other settings are other runs: refused in the same directory unless forced.
    let extra = ["workload.params.updates=3000".to_string()];
    let Err(e) = xlate::reproduce::run_in(&study::TINY, &extra, false, Some(&out), false) else {
        panic!("another study's settings were not refused")
    };
    let e = e.to_string();
    assert!(e.contains("holds another sweep"), "{e}");
    xlate::reproduce::run_in(&study::TINY, &extra, false, Some(&out), true).unwrap();
}
