//! Tracing real programs under QEMU user mode with xlate's plugin (tools/qemu-plugin/). Each test
//! compiles a small C program, traces it and checks the exact accesses it makes to a mapping of
//! its own. Without the plugin, QEMU or a C compiler the tests print why and pass (skip), except
//! on CI (`CI=true`) or with `XLATE_REQUIRE_QEMU=1`, where they fail; build the plugin with
//! `tools/qemu-plugin/build.sh`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use xlate::trace::{self, Access, AccessKind};

use crate::common::Scratch;

const PAGE: u64 = 4096;

/// One byte stored to each of pages 0..63 of a fresh 64-page mapping, in order, then N rounds
/// of loads from pages 0, 8, 16. Prints the mapping's base first.
const PAGES_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    volatile char *p = mmap(NULL, 64 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    printf("base %p\n", (void *)p);
    fflush(stdout);
    for (int i = 0; i < 64; i++) p[i * 4096] = (char)i;
    int s = 0;
    for (int r = 0; r < n; r++) { s += p[0]; s += p[8 * 4096]; s += p[16 * 4096]; }
    return s == 12345678;
}
"#;

/// Three threads, each storing one byte to each of 16 pages of its own mapping; the main thread
/// maps them and prints their bases, then joins.
const THREADS_C: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
static void *work(void *arg) {
    volatile char *p = arg;
    for (int i = 0; i < 16; i++) p[i * 4096] = 1;
    return NULL;
}
int main(void) {
    pthread_t t[3];
    char *m[3];
    for (int i = 0; i < 3; i++) {
        m[i] = mmap(NULL, 16 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m[i] == MAP_FAILED) return 1;
        printf("base %p\n", (void *)m[i]);
    }
    fflush(stdout);
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, work, m[i]);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    return 0;
}
"#;

fn xlate_bin() -> &'static str {
    env!("CARGO_BIN_EXE_xlate")
}

/// Why the tests cannot run here, if they cannot.
fn missing() -> Option<String> {
    if let Err(e) = trace::qemu::find_qemu() {
        return Some(e.to_string());
    }
    if let Err(e) = trace::qemu::find_plugin() {
        return Some(e.to_string());
    }
    if Command::new("cc").arg("--version").output().is_err() {
        return Some("no C compiler `cc`".into());
    }
    None
}

/// Why a missing prerequisite fails the test instead of skipping it, if it does: on CI (`CI` set
/// to `true` or `1`, as CI services do: a skipped QEMU test there would pass unnoticed), or with
/// `XLATE_REQUIRE_QEMU=1`, which `.ci/run` sets when it built the plugin.
fn qemu_required() -> Option<&'static str> {
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        Some("CI=true")
    } else if std::env::var("XLATE_REQUIRE_QEMU").is_ok_and(|v| v == "1") {
        Some("XLATE_REQUIRE_QEMU=1")
    } else {
        None
    }
}

macro_rules! require_qemu {
    ($name:expr) => {
        if let Some(why) = missing() {
            if let Some(by) = qemu_required() {
                panic!("{}: {by} but the QEMU tests cannot run: {why}", $name);
            }
            eprintln!("SKIP {}: {why}", $name);
            return;
        }
    };
}

fn compile(dir: &Scratch, name: &str, src: &str, extra: &[&str]) -> PathBuf {
    let c = dir.path(&format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let exe = dir.path(name);
    let out = Command::new("cc").args(["-O2", "-o"]).arg(&exe).arg(&c).args(extra).output().expect("cc runs");
    assert!(out.status.success(), "cc failed: {}", String::from_utf8_lossy(&out.stderr));
    exe
}

fn run(args: &[&str]) -> Output {
    let out = Command::new(xlate_bin()).args(args).output().expect("xlate runs");
    assert!(
        out.status.success(),
        "xlate {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn bases(stdout: &[u8]) -> Vec<u64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("base 0x"))
        .map(|h| u64::from_str_radix(h.trim(), 16).expect("hex base"))
        .collect()
}

fn read_trace(path: &Path) -> Vec<Access> {
    let mut src = trace::open(path).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![Access::default(); 4096];
    loop {
        let n = src.fill(&mut buf).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn trace_records_exact_pages_in_order() {
    require_qemu!("trace_records_exact_pages_in_order");
    let dir = Scratch::new("qemu-pages");
    let exe = compile(&dir, "pages", PAGES_C, &[]);
    let out_file = dir.path("pages.xlt");
    let rounds = 50u64;
    let out = run(&["trace", "--out", out_file.to_str().unwrap(), "--", exe.to_str().unwrap(), &rounds.to_string()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("accesses") && stderr.contains("instructions") && stderr.contains("bytes"), "{stderr}");
    let base = bases(&out.stdout)[0];
    assert_eq!(base % PAGE, 0);
    let all = read_trace(&out_file);
    let mine: Vec<&Access> = all.iter().filter(|a| a.vaddr >= base && a.vaddr < base + 64 * PAGE).collect();
    let mut expected: Vec<(AccessKind, u64)> = (0..64).map(|p| (AccessKind::Store, p)).collect();
    for _ in 0..rounds {
        expected.extend([0, 8, 16].map(|p| (AccessKind::Load, p)));
    }
    let got: Vec<(AccessKind, u64)> = mine.iter().map(|a| (a.kind, (a.vaddr - base) / PAGE)).collect();
    assert_eq!(got, expected);
    for a in &mine {
        assert_eq!((a.vaddr % PAGE, a.size, a.cpu), (0, 1, 0), "{a:?}");
        assert!(a.ip != 0 && a.instrs >= 1, "{a:?}");
    }
    // Everything else the process did is there too (loader, libc), with instruction counts.
    assert!(all.len() > mine.len() + 1000);
    assert!(all.iter().map(|a| a.instrs as u64).sum::<u64>() > all.len() as u64);
    assert!(all.iter().all(|a| a.kind != AccessKind::Fetch));
}

#[test]
fn trace_with_fetches_and_cap() {
    require_qemu!("trace_with_fetches_and_cap");
    let dir = Scratch::new("qemu-fetch");
    let exe = compile(&dir, "pages", PAGES_C, &[]);
    let out_file = dir.path("f.xlt");
    run(&["trace", "--fetches", "--out", out_file.to_str().unwrap(), "--", exe.to_str().unwrap(), "5"]);
    let all = read_trace(&out_file);
    let fetches = all.iter().filter(|a| a.kind == AccessKind::Fetch).count();
    assert!(fetches > 1000, "{fetches} fetches");
    assert!(all.iter().filter(|a| a.kind == AccessKind::Fetch).all(|a| a.vaddr == a.ip && (1..=15).contains(&a.size)));
    // The cap stops the program and keeps exactly that many accesses.
    let capped = dir.path("c.xlt");
    let out = run(&["trace", "--max-accesses", "1000", "--out", capped.to_str().unwrap(), "--", exe.to_str().unwrap(), "5"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-accesses 1000"));
    assert_eq!(read_trace(&capped).len(), 1000);
}

#[test]
fn threads_get_streams_of_their_own() {
    require_qemu!("threads_get_streams_of_their_own");
    let dir = Scratch::new("qemu-threads");
    let exe = compile(&dir, "threads", THREADS_C, &["-pthread"]);
    let out_file = dir.path("t.xlt");
    let out = run(&["trace", "--out", out_file.to_str().unwrap(), "--", exe.to_str().unwrap()]);
    let bs = bases(&out.stdout);
    assert_eq!(bs.len(), 3);
    let all = read_trace(&out_file);
    let mut cpus = Vec::new();
    for b in bs {
        let mine: Vec<&Access> = all.iter().filter(|a| a.vaddr >= b && a.vaddr < b + 16 * PAGE).collect();
        let pages: Vec<u64> = mine.iter().map(|a| (a.vaddr - b) / PAGE).collect();
        assert_eq!(pages, (0..16).collect::<Vec<_>>());
        assert!(mine.iter().all(|a| a.kind == AccessKind::Store && a.cpu == mine[0].cpu));
        cpus.push(mine[0].cpu);
    }
    cpus.sort();
    cpus.dedup();
    assert_eq!(cpus.len(), 3, "each worker is its own stream");
    assert!(!cpus.contains(&0), "thread 0 is main");
    let max_cpu = all.iter().map(|a| a.cpu).max().unwrap();
    assert_eq!(max_cpu, 3);
}

fn json_metric(path: &Path, key: &str) -> f64 {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["metrics"][key].as_f64().unwrap_or_else(|| panic!("metrics.{key} in {v}"))
}

#[test]
fn run_simulates_a_live_program() {
    require_qemu!("run_simulates_a_live_program");
    let dir = Scratch::new("qemu-run");
    let pages = compile(&dir, "pages", PAGES_C, &[]);
    let json = dir.path("r.json");
    run(&["run", "-q", "--design", "radix4", "--json", json.to_str().unwrap(), "--trace-cmd", "--", pages.to_str().unwrap(), "100"]);
    let accesses = json_metric(&json, "accesses");
    assert!(accesses > 64.0 + 300.0 + 1000.0, "{accesses}");
    assert!(json_metric(&json, "instructions") > accesses);
    // A threaded program on 4 cores: every thread's stream is simulated to its end.
    let threads = compile(&dir, "threads", THREADS_C, &["-pthread"]);
    let trace_file = dir.path("t.xlt");
    run(&["trace", "--out", trace_file.to_str().unwrap(), "--", threads.to_str().unwrap()]);
    let traced = read_trace(&trace_file).len() as f64;
    run(&["run", "-q", "--set", "cores=4", "--json", json.to_str().unwrap(), "--trace-cmd", "--", threads.to_str().unwrap()]);
    let simulated = json_metric(&json, "accesses");
    // Two runs of the program differ slightly (environment, scheduling); the streams are whole.
    assert!((simulated - traced).abs() < traced * 0.05, "simulated {simulated}, traced {traced}");
}

#[test]
fn trace_cmd_arguments_are_checked() {
    for args in [&["run", "--trace-cmd"][..], &["run", "--", "/bin/true"], &["trace"], &["run", "--trace-fetches", "--", "/bin/true"]] {
        let out = Command::new(xlate_bin()).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("required") || err.contains("requires"), "{args:?}: {err}");
    }
}

#[test]
fn missing_plugin_is_a_clear_error() {
    let out = Command::new(xlate_bin())
        .args(["trace", "--out", "/nonexistent/x.xlt", "--", "/bin/true"])
        .env("XLATE_QEMU", "/bin/true")
        .env("XLATE_QEMU_PLUGIN", "/nonexistent/libxlate_trace.so")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("/nonexistent/libxlate_trace.so") && err.contains("tools/qemu-plugin/build.sh"), "{err}");
    let out = Command::new(xlate_bin()).args(["trace", "--", "/bin/true"]).env("XLATE_QEMU", "/nonexistent/qemu").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("/nonexistent/qemu"), "{err}");
}
