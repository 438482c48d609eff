//! The HTML report (`xlate report DIR`, `xlate compare --report F`) end to end: from a real
//! sweep, a real (tiny) study and a real comparison, checked as text and then rendered in
//! headless Chromium, which must show one chart with visible marks and one table per plot, and
//! log no error. Screenshots go to Cargo's target tmp directory, never into the repository.
//!
//! Without a Chromium the browser half is skipped with a message, except on CI (`CI=true`) or
//! with `XLATE_REQUIRE_CHROMIUM=1` (which `.ci/run` sets after installing Debian's `chromium`),
//! where it fails. `XLATE_CHROMIUM=/path` picks the browser.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use xlate::reproduce::{ratio, Finding, Kind, RunSpec, Study};
use xlate::sim::RunOutput;

use crate::common::xlate;

/// A fresh scratch directory under Cargo's target tmp directory (outside the sources).
fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("report-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// 3 designs × 2 workloads × 2 L2 TLB sizes, tiny, and one point that fails.
const GRID: &str = r#"
designs = ["radix4", "radix4-thp", "ecpt"]
workloads = [{ name = "gups", params = { table = "64M", updates = 3000 } },
             { name = "stream", params = { footprint = "8M" } }]
[[zip]]
"mmu.l2.entries" = [768, 1536]
"mmu.l2.ways" = [6, 12]
[[points]]
design = "radix4"
workload = "gups"
"workload.params.table" = "128M"
"os.memory" = "64M"
"#;

/// The text of each `<figure>` of a page.
fn figures(page: &str) -> Vec<&str> {
    page.split("<figure").skip(1).map(|f| f.split("</figure>").next().unwrap()).collect()
}

/// Checks every report must pass as text: one chart and one table per plot, every axis with a
/// unit in parentheses, no script, nothing fetched from anywhere.
fn check_page(page: &str) {
    assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));
    let figs = figures(page);
    assert!(!figs.is_empty());
    for f in &figs {
        assert_eq!(f.matches("<svg").count(), 1, "{f}");
        assert_eq!(f.matches("<table>").count(), 1, "{f}");
        assert!(f.contains("class=\"mark\"") || f.contains("class=\"mark "), "a plot without marks: {f}");
        for label in f.split("class=\"axis-label\"").skip(1) {
            let text = label.split('>').nth(1).unwrap().split('<').next().unwrap();
            assert!(text.contains('(') && text.ends_with(')'), "axis label without unit: {text}");
        }
    }
    assert!(!page.contains("<script"));
    let urls = page.matches("http://").count() + page.matches("https://").count();
    assert_eq!(urls, page.matches("http://www.w3.org/2000/svg").count(), "only the SVG namespace may be a URL");
}

/// The ids of a page's plots.
fn plot_ids(page: &str) -> Vec<String> {
    figures(page).iter().map(|f| f.split("id=\"").nth(1).unwrap().split('"').next().unwrap().to_string()).collect()
}

#[test]
fn sweep_report_has_every_plot_and_renders() {
    let d = scratch("sweep");
    let grid = d.join("grid.toml");
    std::fs::write(&grid, GRID).unwrap();
    let out = d.join("out");
    let (code, o, e) = xlate(&["sweep", grid.to_str().unwrap(), "--out", out.to_str().unwrap(), "-q"]);
    assert_eq!(code, 1, "one point fails: {o}{e}");
    let html = d.join("report.html");
    let (code, o, e) = xlate(&["report", out.to_str().unwrap(), "-o", html.to_str().unwrap()]);
    assert_eq!(code, 0, "{o}{e}");
    assert!(o.contains("12 runs, 1 failed, 0 pending"), "{o}");
    let page = std::fs::read_to_string(&html).unwrap();
    check_page(&page);
    let ids = plot_ids(&page);
    for want in [
        "speedup",
        "l2_tlb_mpki-vs-mmu.l2.entries",
        "walk_latency_avg-vs-mmu.l2.entries",
        "walk-latency",
        "page-sizes",
        "translation-fraction",
    ] {
        assert!(ids.iter().any(|i| i == want), "no plot {want}: {ids:?}");
    }
    // 4 groups (2 workloads × 2 sizes) of 2 bars (radix4-thp, ecpt), plus the geomean's 2.
    let speedup = figures(&page)[ids.iter().position(|i| i == "speedup").unwrap()];
    assert_eq!(speedup.matches("<rect class=\"mark\"").count(), 10, "{speedup}");
    // One line per design and workload: 3 × 2, each through 2 points.
    let mpki = figures(&page)[ids.iter().position(|i| i == "l2_tlb_mpki-vs-mmu.l2.entries").unwrap()];
    assert_eq!(mpki.matches("class=\"mark line\"").count(), 6, "{mpki}");
    assert_eq!(mpki.matches("<circle class=\"mark\"").count(), 12, "{mpki}");
    // The failed point (a table twice the simulated memory) is listed with its error.
    assert!(page.contains("Failed points") && page.contains("out of physical memory"), "{page}");
    // The default file name, and a baseline that is not there.
    let (code, _, e) = xlate(&["report", out.to_str().unwrap(), "--baseline", "nosuch"]);
    assert_eq!(code, 2);
    assert!(e.contains("unknown baseline design `nosuch`; expected one of: radix4, radix4-thp, ecpt"), "{e}");
    let (code, _, e) = xlate(&["report", out.to_str().unwrap(), "--baseline", "ecpt"]);
    assert_eq!(code, 0, "{e}");
    let page2 = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page2.contains("Speedup over ecpt"));
    browser_check(&html, "sweep");
    let _ = std::fs::remove_dir_all(&d);
}

fn study_runs() -> Vec<RunSpec> {
    let w = ["workload.name=\"gups\"", "workload.params.updates=3000", "workload.params.table=64M"];
    let sets = || w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        RunSpec { key: "radix".into(), design: "radix4", sets: sets() },
        RunSpec { key: "thp".into(), design: "radix4-thp", sets: sets() },
        RunSpec { key: "ecpt".into(), design: "ecpt", sets: sets() },
    ]
}

fn thp_speedup(r: &BTreeMap<String, RunOutput>) -> Option<f64> {
    ratio(r, "radix", "thp", "cycles")
}

fn ecpt_latency(r: &BTreeMap<String, RunOutput>) -> Option<f64> {
    Some(xlate::reproduce::metric(r.get("ecpt")?, "walk_latency_avg"))
}

fn study_findings() -> Vec<Finding> {
    vec![
        Finding { name: "THP speedup over 4 KiB", paper: "1.5×", paper_value: Some(1.5), kind: Kind::Ratio, ours: thp_speedup },
        Finding {
            name: "ECPT walk latency",
            paper: "60 cycles",
            paper_value: Some(60.0),
            kind: Kind::Quantity("cycles"),
            ours: ecpt_latency,
        },
    ]
}

/// A study small enough for a test, with findings in two units.
const STUDY: Study =
    Study { name: "tiny", description: "a test study", preset: "utopia-micro23", runs: study_runs, findings: study_findings };

#[test]
fn study_report_puts_the_paper_beside_ours() {
    let d = scratch("study");
    let out = d.join("study");
    let r = xlate::reproduce::run_in(&STUDY, &[], false, Some(&out), false).unwrap();
    let study: Value = serde_json::from_str(&std::fs::read_to_string(out.join("study.json")).unwrap()).unwrap();
    assert_eq!(study["findings"], r.json["findings"]);
    assert_eq!(study["findings"][0]["baseline"], 1.0);
    let html = d.join("report.html");
    let (code, o, e) = xlate(&["report", out.to_str().unwrap(), "-o", html.to_str().unwrap()]);
    assert_eq!(code, 0, "{o}{e}");
    let page = std::fs::read_to_string(&html).unwrap();
    check_page(&page);
    assert!(page.contains("<title>xlate reproduce tiny</title>"));
    let ids = plot_ids(&page);
    assert_eq!(&ids[..2], ["findings-0", "findings-1"], "{ids:?}");
    let f0 = figures(&page)[0];
    assert!(f0.contains("findings in ×") && f0.contains("THP speedup over 4 KiB") && f0.contains("1.5"), "{f0}");
    // Paper and ours, one bar each, and the 1× line.
    assert_eq!(f0.matches("<rect class=\"mark\"").count(), 2, "{f0}");
    assert!(f0.contains("class=\"reference\""));
    assert!(figures(&page)[1].contains("value (cycles)"));
    // The run labels are the study's run keys.
    assert!(page.contains(">ecpt</text>") || page.contains("<td>ecpt</td>"), "{page}");
    browser_check(&html, "study");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn compare_writes_a_report() {
    let d = scratch("compare");
    let html = d.join("cmp.html");
    let (code, o, e) = xlate(&[
        "compare",
        "--designs",
        "radix4,radix4-thp,ideal",
        "-w",
        "gups",
        "-s",
        "workload.params.table=64M",
        "-s",
        "workload.params.updates=3000",
        "-q",
        "--report",
        html.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{o}{e}");
    let page = std::fs::read_to_string(&html).unwrap();
    check_page(&page);
    assert_eq!(plot_ids(&page), ["speedup", "walk-latency", "page-sizes", "translation-fraction"]);
    // ideal makes no walks: two rows in the latency plot.
    let lat = figures(&page)[1];
    assert_eq!(lat.matches("<g class=\"mark\"").count(), 2, "{lat}");
    browser_check(&html, "compare");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn report_of_a_missing_directory_names_it() {
    let (code, _, e) = xlate(&["report", "/nonexistent/sweep-dir"]);
    assert_eq!(code, 2);
    assert!(e.contains("/nonexistent/sweep-dir"), "{e}");
}

// ---- the browser ----------------------------------------------------------------------------

fn chromium() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("XLATE_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

fn browser_required() -> bool {
    std::env::var("XLATE_REQUIRE_CHROMIUM").is_ok_and(|v| v == "1") || std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Runs headless Chromium on `page` with `args`, at most a minute: (stdout, stderr).
fn headless(browser: &Path, page: &Path, args: &[&str]) -> (String, String) {
    let url = format!("file://{}", page.canonicalize().unwrap().display());
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=3000",
        ])
        .args(args)
        .arg(&url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium starts");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("chromium did not finish within a minute on {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The checker injected into a copy of a page: it records error events (a resource that did not
/// load, a script error) from the first byte, and at load writes what each plot shows.
const CHECKER_HEAD: &str = "<script>window.__errors=[];addEventListener('error',e=>__errors.push(String(e.message||(e.target&&(e.target.src||e.target.href))||'error')),true);</script>";
const CHECKER_TAIL: &str = r#"<script>addEventListener('load',()=>{
const figs=[...document.querySelectorAll('figure.plot')].map(f=>{
 const svgs=f.querySelectorAll('svg');const marks=[...f.querySelectorAll('svg .mark')];
 const visible=marks.filter(m=>{const b=m.getBBox();return b.width>0||b.height>0}).length;
 const r=svgs.length?svgs[0].getBoundingClientRect():{width:0,height:0};
 return {id:f.id,svgs:svgs.length,marks:marks.length,visible:visible,tables:f.querySelectorAll('table').length,
   width:r.width,height:r.height,axes:[...f.querySelectorAll('svg .axis-label')].map(t=>t.textContent)}});
const p=document.createElement('pre');p.id='xlate-check';
p.textContent=JSON.stringify({figures:figs,errors:window.__errors});document.body.appendChild(p)});</script>"#;

/// What the checker saw on `page`, and the console lines Chromium logged.
fn inspect(browser: &Path, page: &Path) -> (Value, Vec<String>) {
    let text = std::fs::read_to_string(page).unwrap();
    let with = text.replacen("<head>", &format!("<head>{CHECKER_HEAD}"), 1).replacen("</body>", &format!("{CHECKER_TAIL}</body>"), 1);
    let copy = page.with_extension("check.html");
    std::fs::write(&copy, with).unwrap();
    let (dom, log) = headless(browser, &copy, &["--dump-dom"]);
    let _ = std::fs::remove_file(&copy);
    let json = dom
        .split("<pre id=\"xlate-check\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| panic!("no check output:\n{dom}\n{log}"));
    let json = json.replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
    let console = log.lines().filter(|l| l.contains(":CONSOLE")).map(str::to_string).collect();
    (serde_json::from_str(&json).unwrap(), console)
}

/// Renders the report at `page` in headless Chromium: every plot has exactly one SVG with
/// visible marks, a non-empty size and a table; no error event and no console message (the page
/// has no script, so any console line is the browser complaining). Then a screenshot.
fn browser_check(page: &Path, name: &str) {
    let Some(browser) = chromium() else {
        assert!(!browser_required(), "no Chromium (install Debian's `chromium`, or set XLATE_CHROMIUM)");
        eprintln!("report_html: no Chromium; the browser check of the {name} report is skipped");
        return;
    };
    // The checker itself must see what it looks for: a page with a missing image and a console
    // message is caught.
    let bad = page.with_file_name(format!("{name}-bad.html"));
    std::fs::write(
        &bad,
        "<!DOCTYPE html><html><head></head><body><img src=\"missing.png\"><script>console.error('boom')</script></body></html>",
    )
    .unwrap();
    let (seen, console) = inspect(&browser, &bad);
    let _ = std::fs::remove_file(&bad);
    assert_eq!(seen["errors"].as_array().unwrap().len(), 1, "{seen}");
    assert!(console.iter().any(|l| l.contains("boom")), "{console:?}");

    let (seen, console) = inspect(&browser, page);
    assert!(seen["errors"].as_array().unwrap().is_empty(), "errors while loading {}: {seen}", page.display());
    assert!(console.is_empty(), "console messages on {}: {console:?}", page.display());
    let figs = seen["figures"].as_array().unwrap();
    assert_eq!(figs.len(), figures(&std::fs::read_to_string(page).unwrap()).len());
    for f in figs {
        assert_eq!(f["svgs"], 1, "{f}");
        assert_eq!(f["tables"], 1, "{f}");
        assert!(f["visible"].as_u64().unwrap() > 0, "no visible mark: {f}");
        assert!(f["width"].as_f64().unwrap() > 100.0 && f["height"].as_f64().unwrap() > 40.0, "{f}");
        assert!(!f["axes"].as_array().unwrap().is_empty(), "{f}");
    }
    let png = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("report-{name}.png"));
    let _ = std::fs::remove_file(&png);
    let shot = format!("--screenshot={}", png.display());
    let (_, log) = headless(&browser, page, &[&shot, "--window-size=940,3000", "--hide-scrollbars"]);
    assert!(png.metadata().is_ok_and(|m| m.len() > 10_000), "no screenshot: {log}");
    eprintln!("report_html: {name} report rendered; screenshot {}", png.display());
}
