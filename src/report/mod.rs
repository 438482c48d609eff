//! Results: the metrics of `reference/metrics.md` computed from a run's counters, printed as a
//! table with units, and written as JSON (schema in docs/results-schema.md) and CSV.

pub mod html;
pub mod svg;

use crate::addr::PageSize;
use crate::sim::RunOutput;
use crate::tapi::{Func, Path};
use serde_json::{json, Map, Value};

/// JSON schema identifier; bump when a key changes meaning.
pub const SCHEMA: &str = "xlate.run.v1";

/// One reported number.
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    /// snake_case key (JSON and CSV).
    pub key: String,
    /// Value.
    pub value: f64,
    /// Unit as printed.
    pub unit: &'static str,
}

fn per(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        0.0
    } else {
        a / b
    }
}

/// Every metric of a run, in report order. Host timing is not among them (see [`json`]).
pub fn metrics(r: &RunOutput) -> Vec<Metric> {
    let c = &r.core;
    let instrs = c.instrs as f64;
    let pki = |x: u64| per(x as f64 * 1000.0, instrs);
    let w = &c.walk;
    let walks = w.walks as f64;
    let costs = &r.config.os.costs;
    let os_fault = r.os_cost.cycles(Path::Fault, costs);
    let os_all: f64 = Path::ALL.iter().map(|&p| r.os_cost.cycles(p, costs)).sum();
    let mut m = Vec::new();
    let mut add = |key: &str, value: f64, unit: &'static str| m.push(Metric { key: key.to_string(), value, unit });
    add("instructions", instrs, "instr");
    add("accesses", c.accesses as f64, "accesses");
    add("cycles", r.cycles, "cycles");
    add("ipc", per(instrs, r.cycles), "instr/cycle");
    add("l1_tlb_mpki", pki(c.tlb.l1d_misses + c.tlb.l1i_misses), "misses/kinstr");
    add("l1d_tlb_mpki", pki(c.tlb.l1d_misses), "misses/kinstr");
    add("l1i_tlb_mpki", pki(c.tlb.l1i_misses), "misses/kinstr");
    add("l2_tlb_mpki", pki(c.tlb.l2_misses), "misses/kinstr");
    for s in [PageSize::K4, PageSize::M2, PageSize::G1] {
        add(&format!("l2_tlb_mpki_{}", s.label().to_lowercase()), pki(c.tlb.l2_misses_by_size[s.index()]), "misses/kinstr");
    }
    add("walks", walks, "walks");
    add("walks_pki", pki(w.walks), "walks/kinstr");
    add("walk_latency_avg", per(w.latency_sum as f64, walks), "cycles");
    add("walk_latency_p50", w.quantile(0.5) as f64, "cycles");
    add("walk_latency_p99", w.quantile(0.99) as f64, "cycles");
    // Nested runs: the share of the walk's memory steps that waited for host references.
    add("walk_latency_host_avg", per(w.host_latency_sum as f64, walks), "cycles");
    add("walk_latency_host_p50", w.host_quantile(0.5) as f64, "cycles");
    add("walk_latency_host_p99", w.host_quantile(0.99) as f64, "cycles");
    add("walk_refs", w.refs as f64, "refs");
    add("walk_refs_per_walk", per(w.refs as f64, walks), "refs/walk");
    add("walk_refs_unfiltered", w.refs_unfiltered as f64, "refs");
    add("walk_refs_unfiltered_per_walk", per(w.refs_unfiltered as f64, walks), "refs/walk");
    add("walk_serial_steps_per_walk", per(w.serial_steps as f64, walks), "steps/walk");
    for (i, lvl) in ["l1", "l2", "llc", "dram"].iter().enumerate() {
        add(&format!("walk_refs_{lvl}"), w.refs_by_level[i] as f64, "refs");
    }
    // Nested runs: the host dimension's share (0 natively; the guest's is the rest).
    add("walk_refs_host", w.host_refs_by_level.iter().sum::<u64>() as f64, "refs");
    for (i, lvl) in ["l1", "l2", "llc", "dram"].iter().enumerate() {
        add(&format!("walk_refs_host_{lvl}"), w.host_refs_by_level[i] as f64, "refs");
    }
    let sw = &c.side;
    add("side_walks", sw.walks as f64, "lookups");
    add("side_walk_hit_rate", per(c.side_hits as f64, sw.walks as f64), "fraction");
    add("side_walk_latency_avg", per(sw.latency_sum as f64, sw.walks as f64), "cycles");
    add("side_walk_refs", sw.refs as f64, "refs");
    add("walk_cache_hit_rate", per(w.wc_hits as f64, (w.wc_hits + w.wc_misses) as f64), "fraction");
    add("translation_cycles", c.translation_cycles, "cycles");
    add("translation_fraction", per(c.translation_cycles, r.cycles), "fraction");
    add("data_stall_cycles", c.data_cycles, "cycles");
    add("page_faults", r.os.faults() as f64, "faults");
    add("page_faults_4k", r.os.faults_4k as f64, "faults");
    add("page_faults_thp", r.os.faults_thp as f64, "faults");
    add("page_faults_1g", r.os.faults_1g as f64, "faults");
    add("page_faults_file", r.os.faults_file as f64, "faults");
    add("thp_fallbacks", (r.os.thp_fallback_range + r.os.thp_fallback_nomem + r.os.thp_fallback_driver) as f64, "faults");
    add("promotions", r.os.promotions as f64, "collapses");
    add("shootdowns", r.os.shootdowns as f64, "shootdowns");
    add("context_switches", c.context_switches as f64, "switches");
    add("page_migrations", r.os.migrations as f64, "pages");
    add("page_evictions", r.os.evictions as f64, "pages");
    add("migration_stall_cycles", r.os.migration_stall_cycles as f64, "cycles");
    add("page_faults_swapin", r.os.faults_swapin as f64, "faults");
    add("swap_outs", r.os.swap_outs as f64, "4K pages");
    add("swap_ins", r.os.swap_ins as f64, "4K pages");
    for f in Func::ALL {
        add(&format!("os_ops_fault_{}", f.name()), r.os_cost.ops(Path::Fault, f) as f64, "ops");
    }
    add("os_ops_fault", Func::ALL.iter().map(|&f| r.os_cost.ops(Path::Fault, f)).sum::<u64>() as f64, "ops");
    add("os_ops_promote", Func::ALL.iter().map(|&f| r.os_cost.ops(Path::Promote, f)).sum::<u64>() as f64, "ops");
    add("os_cycles_fault", os_fault, "cycles");
    add("os_cycles", os_all, "cycles");
    add("os_cycles_per_fault", per(os_fault, r.os.faults() as f64), "cycles/fault");
    add("pt_lines_fraction_l2", r.mem.pt_lines_fraction_l2, "fraction");
    add("pt_lines_fraction_llc", r.mem.pt_lines_fraction_llc, "fraction");
    let d = &r.mem.dram;
    add("dram_row_conflicts", (d.data_row_conflicts + d.translation_row_conflicts) as f64, "conflicts");
    add("dram_row_conflicts_data", d.data_row_conflicts as f64, "conflicts");
    add("dram_row_conflicts_translation", d.translation_row_conflicts as f64, "conflicts");
    add("translation_table_bytes", r.table_bytes as f64, "bytes");
    for s in [PageSize::K4, PageSize::M2, PageSize::G1] {
        add(&format!("coverage_{}", s.label().to_lowercase()), r.coverage[s.index()] as f64, "bytes");
    }
    if let Some(a) = &r.accel {
        accel_metrics(a, &mut add);
    }
    m
}

/// The accelerator metrics of SPARTA §7 (runs with `accel.enabled`).
fn accel_metrics(a: &crate::sim::accel::AccelStats, add: &mut impl FnMut(&str, f64, &'static str)) {
    let pki = |x: u64| per(x as f64 * 1000.0, a.instrs as f64);
    add("accelerators", a.accelerators as f64, "accelerators");
    add("memory_partitions", a.partitions as f64, "partitions");
    add("accel_cache_hit_rate", per(a.cache_hits as f64, (a.cache_hits + a.cache_misses) as f64), "fraction");
    add("accel_tlb_miss_ratio", per(a.accel_tlb_misses as f64, a.accel_tlb_lookups as f64), "fraction");
    add("accel_tlb_mpki", pki(a.accel_tlb_misses), "misses/kinstr");
    add("memory_tlb_miss_ratio", per(a.memory_tlb_misses as f64, a.memory_tlb_lookups as f64), "fraction");
    add("memory_tlb_mpki", pki(a.memory_tlb_misses), "misses/kinstr");
    add("tlb_entries_total", a.tlb_entries_total as f64, "entries");
    add("accel_tlb_replication", per(a.accel_tlb_valid as f64, a.accel_tlb_distinct as f64), "copies/translation");
    let misses = (a.accel_tlb_misses + a.memory_tlb_misses) as f64;
    add("tlb_miss_penalty_avg", per(a.miss_penalty_network + a.miss_penalty_dram, a.walks as f64), "cycles");
    add("tlb_miss_penalty_network_avg", per(a.miss_penalty_network, a.walks as f64), "cycles");
    add("tlb_miss_penalty_dram_avg", per(a.miss_penalty_dram, a.walks as f64), "cycles");
    add("tlb_misses", misses, "misses");
    add("translation_overhead_cycles", a.translation_cycles, "cycles");
    add("ideal_cycles", a.ideal_cycles, "cycles");
    add("accel_mean_cycles", a.mean_cycles, "cycles");
    add("fraction_of_ideal", per(a.ideal_cycles, a.cycles), "fraction");
    add("remote_data_fraction", per(a.remote_data_refs as f64, a.data_refs as f64), "fraction");
    add("way_prediction_accuracy", per(a.predictions_correct as f64, a.predictions as f64), "fraction");
    add("accel_os_cycles", a.os_cycles, "cycles");
}

/// The run as JSON. Everything but the `host` object is deterministic for a given config.
pub fn json(r: &RunOutput) -> Value {
    let ms = metrics(r);
    let mut values = Map::new();
    let mut units = Map::new();
    for m in &ms {
        values.insert(m.key.clone(), json!(m.value));
        units.insert(m.key.clone(), json!(m.unit));
    }
    let mut os_ops = Map::new();
    for p in Path::ALL {
        let mut row = Map::new();
        for f in Func::ALL {
            row.insert(f.name().into(), json!(r.os_cost.ops(p, f)));
        }
        os_ops.insert(p.name().into(), Value::Object(row));
    }
    let mut v = json!({
        "schema": SCHEMA,
        "design": r.design,
        "workload": r.workload,
        "interrupted": r.interrupted,
        "metrics": values,
        "units": units,
        "os": r.os,
        "os_ops": os_ops,
        "mem": r.mem,
        "driver": r.driver,
        "config": crate::config::to_json(&r.config),
        "host": {
            "wall_seconds": r.wall_s,
            "sim_accesses_per_sec": per(r.core.accesses as f64, r.wall_s),
        },
    });
    // Accelerator runs only: their counters (docs/results-schema.md).
    if let Some(a) = &r.accel {
        v["accel"] = json!(a);
    }
    v
}

fn fmt_value(v: f64, unit: &str) -> String {
    if unit == "bytes" {
        return crate::addr::fmt_bytes(v as u64);
    }
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.4}")
    }
}

/// A human table: one column per run, plus speedup over the first run.
pub fn table(runs: &[RunOutput]) -> String {
    let all: Vec<Vec<Metric>> = runs.iter().map(metrics).collect();
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header = vec!["metric".to_string(), "unit".to_string()];
    header.extend(runs.iter().map(|r| if r.interrupted { format!("{} (partial)", r.design) } else { r.design.clone() }));
    rows.push(header);
    // Rows by the first run's keys; a run without that metric (a CPU run beside accelerator
    // runs) shows "-".
    for m in &all[0] {
        let mut row = vec![m.key.clone(), m.unit.to_string()];
        row.extend(
            all.iter().map(|ms| ms.iter().find(|x| x.key == m.key).map(|x| fmt_value(x.value, x.unit)).unwrap_or_else(|| "-".into())),
        );
        rows.push(row);
    }
    if runs.len() > 1 {
        let mut row = vec![format!("speedup_vs_{}", runs[0].design), "x".into()];
        row.extend(runs.iter().map(|r| format!("{:.3}", per(runs[0].cycles, r.cycles))));
        rows.push(row);
    }
    let mut row = vec!["sim_accesses_per_sec".into(), "accesses/s (host)".into()];
    row.extend(runs.iter().map(|r| format!("{:.2e}", per(r.core.accesses as f64, r.wall_s))));
    rows.push(row);
    let widths: Vec<usize> = (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    let mut out = format!("workload: {}\n", runs[0].workload);
    for (ri, r) in rows.iter().enumerate() {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, s)| if c < 2 { format!("{s:<w$}", w = widths[c]) } else { format!("{s:>w$}", w = widths[c]) })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
        if ri == 0 {
            out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1)));
            out.push('\n');
        }
    }
    out
}

/// The line `--checked` prints for a run whose checks all passed (a mismatch ends the run with
/// an error instead); `None` for a run that was not checked.
pub fn checked_summary(r: &RunOutput) -> Option<String> {
    r.config
        .sim
        .checked
        .then(|| format!("checked: {} translations of {} agreed with the OS's ground truth (0 mismatches)", r.core.checked, r.design))
}

/// Config values every CSV row carries (dotted paths into the resolved config), after the
/// design, workload and preset.
const CSV_CONFIG: &[&str] = &["seed", "cores", "os.thp", "os.memory", "mmu.l2.entries", "mmu.l2.ways", "sim.max_accesses"];

/// The workload's parameters as the run used them (defaults included), for a run of one built-in
/// workload; none for a trace or a multiprogrammed mix.
fn workload_params(r: &RunOutput) -> Vec<(String, String)> {
    let w = &r.config.workload;
    if !w.mix.is_empty() || r.workload != w.name {
        return Vec::new();
    }
    match crate::workload::lookup(&w.name).and_then(|e| crate::workload::Params::new(e, &w.params)) {
        Ok(p) => p.values().map(|(k, v)| (format!("workload.{k}"), v.to_string())).collect(),
        Err(_) => Vec::new(),
    }
}

/// One CSV field (RFC 4180): quoted, with its quotes doubled, only if it holds a comma, a quote
/// or a line break.
pub fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

/// CSV (RFC 4180; docs/results-schema.md): a header row, then one row per run: design, workload,
/// interrupted, `preset` (the `--preset` the runs were resolved with, empty for none), the config
/// values of [`CSV_CONFIG`], the workload's parameters (`workload.<param>`), then every metric.
/// Parameter and metric columns are the union over the runs, in order of first appearance; a
/// run without one leaves it empty.
pub fn csv(runs: &[RunOutput], preset: Option<&str>) -> String {
    let mut columns: Vec<String> = ["design", "workload", "interrupted", "preset"].iter().map(|s| s.to_string()).collect();
    columns.extend(CSV_CONFIG.iter().map(|s| s.to_string()));
    let fixed = columns.len();
    let rows: Vec<Vec<(String, String)>> = runs
        .iter()
        .map(|r| {
            let config = crate::config::to_json(&r.config);
            let mut row = vec![
                ("design".to_string(), r.design.clone()),
                ("workload".into(), r.workload.clone()),
                ("interrupted".into(), r.interrupted.to_string()),
                ("preset".into(), preset.unwrap_or("").to_string()),
            ];
            for path in CSV_CONFIG {
                let v = config.pointer(&format!("/{}", path.replace('.', "/"))).unwrap_or(&Value::Null);
                let text = match v {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    v => v.to_string(),
                };
                row.push((path.to_string(), text));
            }
            row.extend(workload_params(r));
            row.extend(metrics(r).into_iter().map(|m| (m.key, m.value.to_string())));
            row
        })
        .collect();
    // The union of the parameter and metric columns; parameters first.
    for pass in [true, false] {
        for row in &rows {
            for (k, _) in &row[fixed..] {
                if k.starts_with("workload.") == pass && !columns.contains(k) {
                    columns.push(k.clone());
                }
            }
        }
    }
    let mut out = csv_line(columns.iter().map(String::as_str));
    for row in &rows {
        let by_key: std::collections::HashMap<&str, &str> = row.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        out.push_str(&csv_line(columns.iter().map(|c| by_key.get(c.as_str()).copied().unwrap_or(""))));
    }
    out
}

/// One CSV record and its line end.
fn csv_line<'a>(cells: impl Iterator<Item = &'a str>) -> String {
    let mut line = cells.map(csv_field).collect::<Vec<_>>().join(",");
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_only_when_they_must_be() {
        assert_eq!(csv_field("gups"), "gups");
        assert_eq!(csv_field("/tmp/a b.xlt"), "/tmp/a b.xlt");
        assert_eq!(csv_field("a.xlt,b.xlt"), "\"a.xlt,b.xlt\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
        assert_eq!(csv_line(["a", "b,c", ""].into_iter()), "a,\"b,c\",\n");
    }
}
