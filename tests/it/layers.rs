//! The import order of DESIGN.md, enforced: every `crate::<module>` a source file names (in a
//! `use` or a path, outside comments) must be in its own layer or a lower one. A driver that
//! reaches into the simulator, or an OS that names a concrete design, fails here. A file's
//! trailing `#[cfg(test)]` module is not scanned: unit tests may build on a concrete driver.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Layers, lowest first; modules on one line are siblings and may not import each other.
/// `error` and `rng` are utilities every layer may use, and `hostmem` (the global allocator)
/// imports nothing of the crate; `fsutil` (writing output files) uses
/// only `error`; `fuzz` and `stress` (the fuzz and stress harnesses) drive everything and sit
/// on top. `sweep` (grids,
/// records, the parallel runner) sits under `reproduce`, whose studies run on its runner.
const LAYERS: &[&[&str]] = &[
    &["error", "rng", "hostmem"],
    &["fsutil"],
    &["addr"],
    &["tapi"],
    &["mem", "trace"],
    &["mmu", "workload"],
    &["os"],
    &["arch"],
    &["config"],
    &["timing"],
    &["sim"],
    &["report"],
    &["sweep"],
    &["reproduce"],
    &["fuzz", "stress"],
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a line without its `//` comment (string literals holding `//` are rare enough in
/// this crate that a plain split is good enough).
fn code(line: &str) -> &str {
    line.split("//").next().unwrap_or("")
}

/// `crate::x` paths named in `text`, with the line they are on.
fn crate_refs(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let c = code(line);
        let mut rest = c;
        while let Some(i) = rest.find("crate::") {
            let before = rest[..i].chars().next_back();
            let after = &rest[i + "crate::".len()..];
            // `$crate::` in macros names the crate too.
            if before.is_none_or(|b| !(b.is_alphanumeric() || b == '_') || b == '$') {
                let m: String = after.chars().take_while(|ch| ch.is_alphanumeric() || *ch == '_').collect();
                if !m.is_empty() {
                    out.push((n + 1, m));
                }
            }
            rest = after;
        }
    }
    out
}

#[test]
fn imports_run_downward_only() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut bad = Vec::new();
    let mut seen = BTreeMap::new();
    for f in &all {
        let rel = f.strip_prefix(&src).unwrap();
        let top = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if top == "lib" || top == "main" {
            continue; // the crate root and the binary sit above every layer
        }
        let Some(own) = rank(&top) else {
            bad.push(format!("{}: module `{top}` is in no layer of tests/it/layers.rs", rel.display()));
            continue;
        };
        *seen.entry(top.clone()).or_insert(0) += 1;
        let text = std::fs::read_to_string(f).unwrap();
        // A file's unit tests (its trailing `#[cfg(test)]` module) may build on a concrete
        // driver: they are not part of the layered program.
        let code = text.split("\n#[cfg(test)]").next().unwrap_or(&text);
        for (line, m) in crate_refs(code) {
            if m == top {
                continue;
            }
            match rank(&m) {
                Some(r) if r < own || r == 0 => {}
                Some(r) if r == own => bad.push(format!("{}:{line}: `{top}` names its sibling layer `crate::{m}`", rel.display())),
                Some(_) => bad.push(format!("{}:{line}: `{top}` imports upward from `crate::{m}`", rel.display())),
                None => bad.push(format!("{}:{line}: `crate::{m}` is in no layer", rel.display())),
            }
        }
    }
    assert!(seen.contains_key("tapi") && seen.contains_key("arch") && seen.contains_key("os"), "scanned the source tree: {seen:?}");
    assert!(bad.is_empty(), "imports that break DESIGN.md's layer order:\n{}", bad.join("\n"));
}

#[test]
fn the_scanner_sees_paths_and_skips_comments() {
    let text = "use crate::os::Os;\n// crate::sim is only named here\nlet x = crate::arch::lookup(n); // crate::report\nmacro: $crate::arch::radix::Radix";
    let refs: Vec<String> = crate_refs(text).into_iter().map(|(_, m)| m).collect();
    assert_eq!(refs, ["os", "arch", "arch"]);
}
