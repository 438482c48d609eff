//! Grid files and their expansion into points (docs/sweeps.md, "Grid file").
//!
//! ```toml
//! designs = ["radix4", "ecpt"]
//! workloads = ["gups"]                 # or [{ name = "gups", params = { table = "1G" } }]
//! presets = []                         # optional; empty = built-in defaults
//! [set]                                # fixed overrides for every point
//! "workload.params.updates" = 200000
//! [axes]                               # cartesian product over these
//! "os.thp" = ["never", "always"]
//! [[zip]]                              # keys varied together, crossed with the rest
//! "mmu.l2.entries" = [1024, 2048]
//! "mmu.l2.ways" = [8, 16]
//! [[points]]                           # explicit extra points
//! design = "radix4"
//! "mmu.l2.entries" = 3072
//! ```
//!
//! Expansion order (the grid order of the manifest and the CSV): for each preset, each workload,
//! each combination of the axes (the first `[axes]` key varies slowest, then each `[[zip]]` group
//! as one axis), each design; then the explicit `[[points]]` in file order, each crossed with the
//! grid's designs, workloads and presets it does not name. A point's settings apply in this
//! order: `workload.name`, the workload entry's parameters, `[set]`, then the axis values or the
//! explicit point's keys. Points whose resolved configurations are the same run (same id) are
//! kept once, at their first place.

use crate::arch;
use crate::config::{self, Config, Layers};
use crate::error::{Error, Result};
use crate::sim::RunOutput;
use crate::workload;
use serde_json::Value as Json;
use toml::Value;

/// The keys a grid file may have at its top level.
const GRID_KEYS: &[&str] = &["designs", "workloads", "presets", "set", "axes", "zip", "points"];

/// Keys of an explicit point that name what runs rather than a config key.
const POINT_NAMES: &[&str] = &["design", "workload", "preset"];

/// Grids larger than this are refused (each point is resolved up front).
const MAX_POINTS: usize = 1_000_000;

/// One run of a sweep: a design, a workload, a preset and its settings, resolved.
#[derive(Clone, Debug)]
pub struct Point {
    /// Stable id: 16 hex digits of a 64-bit FNV-1a hash of the resolved configuration (its TOML),
    /// the design name and the xlate version. The same grid gives the same ids on every machine.
    pub id: String,
    /// Design name.
    pub design: String,
    /// Workload name (a mix's names joined by `+`), from the resolved configuration.
    pub workload: String,
    /// Machine preset, if any.
    pub preset: Option<String>,
    /// The `key=value` settings applied over the preset and the design, in order (what
    /// `xlate run --set` would take).
    pub sets: Vec<String>,
    /// The values this point varies (workload parameters of its workload entry, axis and zip
    /// values, an explicit point's keys), in grid order.
    pub swept: Vec<(String, Json)>,
    /// The resolved configuration.
    pub config: Config,
}

impl Point {
    /// Resolves a point: `design` under `preset` with `sets` applied in order (as
    /// `config::Layers { preset, file: None, sets }.resolve(Some(design))`), and checks that its
    /// workload(s) exist and take the parameters given. `swept` is carried along for the
    /// records. Errors are the same as `xlate run --set`'s (a bad key names the key).
    pub fn new(design: &str, preset: Option<&str>, sets: Vec<String>, swept: Vec<(String, Json)>) -> Result<Point> {
        let d = arch::lookup(design)?;
        let config = Layers { preset: preset.map(str::to_string), file: None, sets: sets.clone() }.resolve(Some(d))?;
        for (name, params) in dedup_processes(&config) {
            workload::Params::new(workload::lookup(name)?, params)?;
        }
        let workload = if config.workload.mix.is_empty() {
            config.workload.name.clone()
        } else {
            config.workload.mix.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join("+")
        };
        Ok(Point {
            id: point_id(&keyed(&config)?, design),
            design: design.to_string(),
            workload,
            preset: preset.map(str::to_string),
            sets,
            swept,
            config,
        })
    }

    /// One line naming the point: design, workload, then each swept `key=value`.
    pub fn describe(&self) -> String {
        let mut s = format!("{} {}", self.design, self.workload);
        if let Some(p) = &self.preset {
            s.push_str(&format!(" preset={p}"));
        }
        for (k, v) in &self.swept {
            s.push_str(&format!(" {k}={}", json_text(v)));
        }
        s
    }

    /// Runs the point (no panic catching: see [`super::runner::run_point`]).
    pub fn run(&self, progress: bool) -> Result<RunOutput> {
        let mut r = crate::sim::run(arch::lookup(&self.design)?, &self.config, &[], progress)?;
        // The record's configuration is the point's: a run may rewrite its own copy with
        // host-specific scratch paths (offline Leshy's hint file), which must not make records
        // differ between machines or reruns.
        r.config = self.config.clone();
        Ok(r)
    }
}

/// A workload's distinct (name, params) pairs (a config of 4096 identical processes checks one).
fn dedup_processes(c: &Config) -> Vec<(&str, &std::collections::BTreeMap<String, String>)> {
    let mut v: Vec<(&str, &std::collections::BTreeMap<String, String>)> = Vec::new();
    for p in c.workload.processes() {
        if !v.contains(&p) {
            v.push(p);
        }
    }
    v
}

/// `c` as a point's id names it: every workload's parameters as its run reads them, defaults
/// included, in one spelling per value ([`workload::Params::canonical`]), so that `table = "16M"`,
/// `table = 16777216` and no `table` at all (its default being 16M) are one point.
fn keyed(c: &Config) -> Result<Config> {
    let mut k = c.clone();
    let canonical = |name: &str, given: &std::collections::BTreeMap<String, String>| {
        Ok(workload::Params::new(workload::lookup(name)?, given)?.canonical())
    };
    if k.workload.mix.is_empty() {
        k.workload.params = canonical(&c.workload.name, &c.workload.params)?;
    }
    for m in &mut k.workload.mix {
        m.params = canonical(&m.name, &m.params)?;
    }
    Ok(k)
}

/// A swept value as text: strings bare, everything else as JSON.
pub fn json_text(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The swept values of a list of `key=value` settings (each value parsed as TOML, else kept as
/// text; a key set twice keeps its last value, at its last place).
pub fn swept_of_sets(sets: &[String]) -> Vec<(String, Json)> {
    let mut out: Vec<(String, Json)> = Vec::new();
    for s in sets {
        let (k, raw) = s.split_once('=').unwrap_or((s.as_str(), ""));
        let k = k.trim().to_string();
        let v = toml::from_str::<toml::Table>(&format!("v = {}", raw.trim()))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .map(|v| to_json(&v))
            .unwrap_or_else(|| Json::String(raw.trim().to_string()));
        out.retain(|(x, _)| *x != k);
        out.push((k, v));
    }
    out
}

/// Every swept key of `points`, in the order first seen.
pub fn swept_keys(points: &[Point]) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for p in points {
        for (k, _) in &p.swept {
            if !keys.contains(k) {
                keys.push(k.clone());
            }
        }
    }
    keys
}

/// 64-bit FNV-1a.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator so ("ab", "c") and ("a", "bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The id of a run of `design` with the resolved `config` in this xlate version.
pub fn point_id(config: &Config, design: &str) -> String {
    let text = config::to_toml(config);
    format!("{:016x}", fnv1a(&[text.as_bytes(), design.as_bytes(), super::VERSION.as_bytes()]))
}

/// An expanded grid.
#[derive(Clone, Debug)]
pub struct Grid {
    /// Where it came from (the file name, for errors and the manifest).
    pub name: String,
    /// The grid file's text (copied to `DIR/grid.toml`).
    pub text: String,
    /// Its points, in grid order, without duplicates.
    pub points: Vec<Point>,
    /// Every swept key, in grid order (the CSV's swept columns).
    pub swept_keys: Vec<String>,
}

/// A grid error: names the file and where in it.
fn grid_err(name: &str, msg: impl Into<String>) -> Error {
    Error::io(format!("grid {name}"), std::io::Error::new(std::io::ErrorKind::InvalidInput, msg.into()))
}

/// A workload entry of `workloads` (or of a point): its name and parameters.
#[derive(Clone, Debug)]
struct WorkloadEntry {
    name: String,
    params: Vec<(String, Value)>,
}

impl WorkloadEntry {
    fn sets(&self) -> Vec<String> {
        let mut v = vec![format!("workload.name={}", Value::String(self.name.clone()))];
        v.extend(self.params.iter().map(|(k, x)| format!("workload.params.{k}={x}")));
        v
    }

    fn swept(&self) -> Vec<(String, Value)> {
        self.params.iter().map(|(k, x)| (format!("workload.params.{k}"), x.clone())).collect()
    }
}

/// A TOML value from the order-preserving parser.
fn value(v: &toml_edit::Value) -> Value {
    match v {
        toml_edit::Value::String(s) => Value::String(s.value().clone()),
        toml_edit::Value::Integer(i) => Value::Integer(*i.value()),
        toml_edit::Value::Float(f) => Value::Float(*f.value()),
        toml_edit::Value::Boolean(b) => Value::Boolean(*b.value()),
        toml_edit::Value::Datetime(d) => Value::Datetime(*d.value()),
        toml_edit::Value::Array(a) => Value::Array(a.iter().map(value).collect()),
        toml_edit::Value::InlineTable(t) => Value::Table(t.iter().map(|(k, x)| (k.to_string(), value(x))).collect()),
    }
}

/// An item as a TOML value (arrays of tables included).
fn item_value(item: &toml_edit::Item) -> Option<Value> {
    match item {
        toml_edit::Item::None => None,
        toml_edit::Item::Value(v) => Some(value(v)),
        toml_edit::Item::Table(t) => Some(Value::Table(t.iter().filter_map(|(k, i)| Some((k.to_string(), item_value(i)?))).collect())),
        toml_edit::Item::ArrayOfTables(a) => Some(Value::Array(
            a.iter().map(|t| Value::Table(t.iter().filter_map(|(k, i)| Some((k.to_string(), item_value(i)?))).collect())).collect(),
        )),
    }
}

fn join(prefix: &str, k: &str) -> String {
    if prefix.is_empty() {
        k.to_string()
    } else {
        format!("{prefix}.{k}")
    }
}

/// Flattens a table of settings into dotted keys in file order: `mmu.l2.entries = 4` (dotted,
/// unquoted), `"mmu.l2.entries" = 4` and `[x.mmu.l2] entries = 4` all give `mmu.l2.entries`.
/// Arrays (of values or of tables) are values, not flattened.
fn flatten(item: &toml_edit::Item, prefix: &str, out: &mut Vec<(String, Value)>) {
    if let Some(t) = item.as_table_like() {
        for (k, it) in t.iter() {
            flatten(it, &join(prefix, k), out);
        }
    } else if let Some(v) = item_value(item) {
        out.push((prefix.to_string(), v));
    }
}

/// The tables of an array of tables, `[[x]]` or `x = [{...}, ...]`.
fn tables<'a>(item: &'a toml_edit::Item, name: &str, what: &str) -> Result<Vec<&'a dyn toml_edit::TableLike>> {
    if let Some(a) = item.as_array_of_tables() {
        return Ok(a.iter().map(|t| t as &dyn toml_edit::TableLike).collect());
    }
    if let Some(a) = item.as_array() {
        return a
            .iter()
            .map(|v| v.as_inline_table().map(|t| t as &dyn toml_edit::TableLike))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| grid_err(name, format!("`{what}` must be a list of tables ([[{what}]])")));
    }
    Err(grid_err(name, format!("`{what}` must be a list of tables ([[{what}]])")))
}

/// A list of strings (`designs`, `presets`).
fn strings(item: &toml_edit::Item, name: &str, what: &str, may_be_empty: bool) -> Result<Vec<String>> {
    let bad = || grid_err(name, format!("`{what}` must be a list of names, e.g. {what} = [\"a\", \"b\"]"));
    let a = item.as_array().ok_or_else(bad)?;
    let v: Vec<String> = a.iter().map(|x| x.as_str().map(str::to_string)).collect::<Option<_>>().ok_or_else(bad)?;
    if v.is_empty() && !may_be_empty {
        return Err(grid_err(name, format!("`{what}` is an empty list")));
    }
    Ok(v)
}

/// One workload entry: `"gups"` or `{ name = "gups", params = { table = "1G" } }`.
fn workload_entry(v: &Value, name: &str, at: &str) -> Result<WorkloadEntry> {
    let bad = |msg: String| grid_err(name, format!("{at}: {msg}"));
    let entry = match v {
        Value::String(s) => WorkloadEntry { name: s.clone(), params: Vec::new() },
        Value::Table(t) => {
            for k in t.keys() {
                if k != "name" && k != "params" {
                    return Err(bad(format!("unknown key `{k}` in a workload entry; expected name and params")));
                }
            }
            let wname = t.get("name").and_then(|n| n.as_str()).ok_or_else(|| bad("a workload entry needs `name = \"...\"`".into()))?;
            let params = match t.get("params") {
                None => Vec::new(),
                Some(Value::Table(p)) => p.iter().map(|(k, x)| (k.clone(), x.clone())).collect(),
                Some(_) => return Err(bad("`params` must be a table, e.g. params = { table = \"1G\" }".into())),
            };
            WorkloadEntry { name: wname.to_string(), params }
        }
        _ => return Err(bad("a workload is a name or { name = \"...\", params = { ... } }".into())),
    };
    workload::lookup(&entry.name).map_err(|e| bad(e.to_string()))?;
    Ok(entry)
}

/// The same workload entry, with parameter order kept from the file (a `toml::Table` sorts).
fn workload_entry_item(v: &toml_edit::Value, name: &str, at: &str) -> Result<WorkloadEntry> {
    let mut e = workload_entry(&value(v), name, at)?;
    if let Some(p) = v.as_inline_table().and_then(|t| t.get("params")).and_then(|p| p.as_inline_table()) {
        let order: Vec<&str> = p.iter().map(|(k, _)| k).collect();
        e.params.sort_by_key(|(k, _)| order.iter().position(|o| o == k));
    }
    Ok(e)
}

/// What one point is before it is resolved.
struct Spec {
    design: String,
    workload: WorkloadEntry,
    preset: Option<String>,
    /// Its axis or explicit-point settings.
    vary: Vec<(String, Value)>,
}

/// A settings key given where a grid name belongs.
fn check_setting_key(key: &str, name: &str, at: &str) -> Result<()> {
    if POINT_NAMES.contains(&key) || GRID_KEYS.contains(&key) {
        return Err(grid_err(
            name,
            format!("{at}: `{key}` is not a config key; list designs, workloads and presets at the top of the grid (or name one in a [[points]] entry)"),
        ));
    }
    Ok(())
}

/// A `key=value` setting for [`Layers`].
fn set_string(key: &str, v: &Value) -> String {
    format!("{key}={v}")
}

fn to_json(v: &Value) -> Json {
    serde_json::to_value(v).unwrap_or(Json::Null)
}

/// Adds context to an error resolving a point: config errors keep their key.
fn in_point(e: Error, name: &str, desc: &str) -> Error {
    match e {
        Error::Config { key, msg } => {
            Error::Config { key, msg: format!("{} (grid {name}, point {desc})", msg.trim_start_matches("--set: ")) }
        }
        other => grid_err(name, format!("point {desc}: {other}")),
    }
}

impl Grid {
    /// Reads and expands a grid file.
    pub fn from_file(path: &std::path::Path) -> Result<Grid> {
        let name = path.display().to_string();
        if path.is_dir() {
            return Err(grid_err(&name, "is a directory, not a grid file"));
        }
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(format!("grid {name}"), e))?;
        Grid::parse(&text, &name)
    }

    /// Expands the grid in `text`; `name` names it in errors.
    pub fn parse(text: &str, name: &str) -> Result<Grid> {
        if let Err(e) = toml::from_str::<toml::Table>(text) {
            let first = e.to_string();
            let at = first.lines().next().and_then(|l| l.find(" at ").map(|i| l[i + 4..].trim().to_string()));
            let msg = e.message().trim().replace('\n', " ");
            return Err(grid_err(
                name,
                match at {
                    Some(p) => format!("not valid TOML at {p}: {msg}"),
                    None => format!("not valid TOML: {msg}"),
                },
            ));
        }
        let doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| grid_err(name, e.message().to_string()))?;
        let root = doc.as_table();
        for (k, _) in root.iter() {
            if !GRID_KEYS.contains(&k) {
                return Err(grid_err(name, format!("unknown key `{k}`; a grid has: {}", GRID_KEYS.join(", "))));
            }
        }
        let designs = match root.get("designs") {
            Some(i) => strings(i, name, "designs", false)?,
            None => Vec::new(),
        };
        for d in &designs {
            arch::lookup(d).map_err(|e| grid_err(name, format!("designs: {e}")))?;
        }
        let workloads = match root.get("workloads") {
            Some(i) => {
                let a = i.as_array().ok_or_else(|| grid_err(name, "`workloads` must be a list of names or { name, params } tables"))?;
                if a.is_empty() {
                    return Err(grid_err(name, "`workloads` is an empty list"));
                }
                a.iter().enumerate().map(|(j, v)| workload_entry_item(v, name, &format!("workloads[{j}]"))).collect::<Result<Vec<_>>>()?
            }
            None => Vec::new(),
        };
        let presets = match root.get("presets") {
            Some(i) => strings(i, name, "presets", true)?,
            None => Vec::new(),
        };
        for p in &presets {
            config::preset(p).map_err(|e| grid_err(name, format!("presets: {e}")))?;
        }
        let presets: Vec<Option<String>> = if presets.is_empty() { vec![None] } else { presets.into_iter().map(Some).collect() };

        let mut fixed = Vec::new();
        if let Some(i) = root.get("set") {
            if !i.is_table_like() {
                return Err(grid_err(name, "`set` must be a table of config keys ([set])"));
            }
            flatten(i, "", &mut fixed);
        }
        for (k, _) in &fixed {
            check_setting_key(k, name, "[set]")?;
        }

        // Axes: each a list of alternatives, each alternative the settings it makes.
        let mut axes: Vec<Vec<Vec<(String, Value)>>> = Vec::new();
        let mut swept_keys: Vec<String> = Vec::new();
        let list = |v: &Value, at: &str| -> Result<Vec<Value>> {
            match v {
                Value::Array(a) if a.is_empty() => Err(grid_err(name, format!("{at} is an empty list"))),
                Value::Array(a) => Ok(a.clone()),
                _ => Err(grid_err(name, format!("{at} must be a list of values, e.g. [512, 1024]"))),
            }
        };
        if let Some(i) = root.get("axes") {
            if !i.is_table_like() {
                return Err(grid_err(name, "`axes` must be a table of config keys with lists of values ([axes])"));
            }
            let mut keys = Vec::new();
            flatten(i, "", &mut keys);
            for (k, v) in keys {
                check_setting_key(&k, name, "[axes]")?;
                let vals = list(&v, &format!("[axes] `{k}`"))?;
                axes.push(vals.into_iter().map(|x| vec![(k.clone(), x)]).collect());
                swept_keys.push(k);
            }
        }
        if let Some(i) = root.get("zip") {
            for (z, t) in tables(i, name, "zip")?.into_iter().enumerate() {
                let mut keys = Vec::new();
                for (k, it) in t.iter() {
                    flatten(it, k, &mut keys);
                }
                if keys.is_empty() {
                    return Err(grid_err(name, format!("[[zip]] {} has no keys", z + 1)));
                }
                let mut cols = Vec::new();
                for (k, v) in &keys {
                    check_setting_key(k, name, &format!("[[zip]] {}", z + 1))?;
                    cols.push(list(v, &format!("[[zip]] {} `{k}`", z + 1))?);
                }
                let n = cols[0].len();
                if let Some(j) = cols.iter().position(|c| c.len() != n) {
                    return Err(grid_err(
                        name,
                        format!(
                            "[[zip]] {}: `{}` has {n} values but `{}` has {} (a zip's lists must have equal lengths)",
                            z + 1,
                            keys[0].0,
                            keys[j].0,
                            cols[j].len()
                        ),
                    ));
                }
                axes.push((0..n).map(|r| keys.iter().zip(&cols).map(|((k, _), c)| (k.clone(), c[r].clone())).collect()).collect());
                for (k, _) in &keys {
                    if swept_keys.contains(k) {
                        return Err(grid_err(
                            name,
                            format!(
                                "[[zip]] {}: `{k}` already varies in [axes] or an earlier [[zip]]; a key varies in one place only",
                                z + 1
                            ),
                        ));
                    }
                    swept_keys.push(k.clone());
                }
            }
        }
        let mut combos: Vec<Vec<(String, Value)>> = vec![Vec::new()];
        for axis in &axes {
            if combos.len().saturating_mul(axis.len()) > MAX_POINTS {
                return Err(grid_err(name, format!("the axes make more than {MAX_POINTS} points")));
            }
            combos = combos.iter().flat_map(|c| axis.iter().map(move |alt| c.iter().chain(alt).cloned().collect())).collect();
        }

        // What each point is: (design, workload entry, preset, swept settings).
        let mut specs: Vec<Spec> = Vec::new();
        if !axes.is_empty() && designs.is_empty() {
            return Err(grid_err(name, "axes need `designs = [...]` to cross them with"));
        }
        if !designs.is_empty() {
            if workloads.is_empty() {
                return Err(grid_err(name, "`designs` needs `workloads = [...]` to run them on"));
            }
            if presets.len() * workloads.len() * combos.len() * designs.len() > MAX_POINTS {
                return Err(grid_err(name, format!("the grid makes more than {MAX_POINTS} points")));
            }
            for p in &presets {
                for w in &workloads {
                    for c in &combos {
                        for d in &designs {
                            specs.push(Spec { design: d.clone(), workload: w.clone(), preset: p.clone(), vary: c.clone() });
                        }
                    }
                }
            }
        } else if root.get("workloads").is_some() && root.get("points").is_none() {
            return Err(grid_err(name, "no `designs = [...]` and no [[points]]: the grid has no points"));
        }
        if let Some(i) = root.get("points") {
            for (n, t) in tables(i, name, "points")?.into_iter().enumerate() {
                let at = format!("[[points]] {}", n + 1);
                let (mut pd, mut pw, mut pp) = (None, None, None);
                let mut keys = Vec::new();
                for (k, it) in t.iter() {
                    let s = |what: &str| {
                        it.as_str().map(str::to_string).ok_or_else(|| grid_err(name, format!("{at}: `{what}` must be a name")))
                    };
                    match k {
                        "design" => {
                            let d = s("design")?;
                            arch::lookup(&d).map_err(|e| grid_err(name, format!("{at}: {e}")))?;
                            pd = Some(d);
                        }
                        "preset" => {
                            let p = s("preset")?;
                            config::preset(&p).map_err(|e| grid_err(name, format!("{at}: {e}")))?;
                            pp = Some(p);
                        }
                        "workload" => {
                            let v = it
                                .as_value()
                                .ok_or_else(|| grid_err(name, format!("{at}: `workload` must be a name or an inline table")))?;
                            pw = Some(workload_entry_item(v, name, &at)?);
                        }
                        _ => {
                            flatten(it, k, &mut keys);
                        }
                    }
                }
                for (k, _) in &keys {
                    check_setting_key(k, name, &at)?;
                    if !swept_keys.contains(k) {
                        swept_keys.push(k.clone());
                    }
                }
                let ds = match pd {
                    Some(d) => vec![d],
                    None if designs.is_empty() => {
                        return Err(grid_err(name, format!("{at} names no design and the grid has no `designs`")))
                    }
                    None => designs.clone(),
                };
                let ws = match pw {
                    Some(w) => vec![w],
                    None if workloads.is_empty() => {
                        return Err(grid_err(name, format!("{at} names no workload and the grid has no `workloads`")))
                    }
                    None => workloads.clone(),
                };
                let ps = match pp {
                    Some(p) => vec![Some(p)],
                    None => presets.clone(),
                };
                for p in &ps {
                    for w in &ws {
                        for d in &ds {
                            specs.push(Spec { design: d.clone(), workload: w.clone(), preset: p.clone(), vary: keys.clone() });
                        }
                    }
                }
            }
        }
        if specs.is_empty() {
            return Err(grid_err(name, "the grid has no points: give `designs` and `workloads`, or [[points]]"));
        }
        // Workload parameters of the entries are swept too, before the axes.
        let mut wkeys: Vec<String> = Vec::new();
        for s in &specs {
            for (k, _) in s.workload.swept() {
                if !wkeys.contains(&k) {
                    wkeys.push(k);
                }
            }
        }
        swept_keys.retain(|k| !wkeys.contains(k));
        wkeys.extend(swept_keys);
        let swept_keys = wkeys;

        let mut points: Vec<Point> = Vec::with_capacity(specs.len());
        let mut seen = std::collections::HashSet::new();
        for Spec { design: d, workload: w, preset: p, vary } in specs {
            let mut sets = w.sets();
            sets.extend(fixed.iter().map(|(k, v)| set_string(k, v)));
            sets.extend(vary.iter().map(|(k, v)| set_string(k, v)));
            let swept: Vec<(String, Json)> = w.swept().iter().chain(&vary).map(|(k, v)| (k.clone(), to_json(v))).collect();
            let desc = {
                let mut s = format!("{d} {}", w.name);
                if let Some(p) = &p {
                    s.push_str(&format!(" preset={p}"));
                }
                for (k, v) in &swept {
                    s.push_str(&format!(" {k}={}", json_text(v)));
                }
                s
            };
            let point = Point::new(&d, p.as_deref(), sets, swept).map_err(|e| in_point(e, name, &desc))?;
            if seen.insert(point.id.clone()) {
                points.push(point);
            }
        }
        Ok(Grid { name: name.to_string(), text: text.to_string(), points, swept_keys })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = "[set]\n\"workload.params.updates\" = 2000\n\"workload.params.table\" = \"64M\"\n";

    fn grid(text: &str) -> Result<Grid> {
        Grid::parse(text, "test.toml")
    }

    fn swept(p: &Point, k: &str) -> Json {
        p.swept.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone()).unwrap_or(Json::Null)
    }

    #[test]
    fn cartesian_zip_and_explicit_points() {
        let g = grid(&format!(
            "designs = [\"radix4\", \"ecpt\"]\nworkloads = [\"gups\"]\n{SMALL}\
             [axes]\n\"mmu.l2.entries\" = [768, 1536, 3072]\n\
             [[zip]]\n\"mmu.l1d[0].entries\" = [32, 64]\n\"core.mlp\" = [1.0, 3.0]\n\
             [[points]]\ndesign = \"radix4\"\n\"mmu.l2.entries\" = 6144\n"
        ))
        .unwrap();
        // 2 designs × 3 entries × 2 zip rows, + 1 explicit point.
        assert_eq!(g.points.len(), 13);
        assert_eq!(g.swept_keys, ["mmu.l2.entries", "mmu.l1d[0].entries", "core.mlp"]);
        // Design innermost, then the zip, then the first axis slowest.
        let p0 = &g.points[0];
        assert_eq!((p0.design.as_str(), p0.workload.as_str()), ("radix4", "gups"));
        assert_eq!(g.points[1].design, "ecpt");
        assert_eq!(swept(p0, "mmu.l2.entries"), 768);
        assert_eq!(swept(&g.points[2], "mmu.l1d[0].entries"), 64);
        assert_eq!(swept(&g.points[2], "mmu.l2.entries"), 768);
        assert_eq!(swept(&g.points[4], "mmu.l2.entries"), 1536);
        assert_eq!(g.points[2].config.mmu.l1d[0].entries, 64);
        assert_eq!(g.points[2].config.core.mlp, 3.0);
        assert_eq!(g.points[4].config.mmu.l2.entries, 1536);
        let last = &g.points[12];
        assert_eq!(last.design, "radix4");
        assert_eq!(last.config.mmu.l2.entries, 6144);
        assert_eq!(last.swept, vec![("mmu.l2.entries".to_string(), Json::from(6144))]);
        assert_eq!(last.config.workload.params["updates"], "2000");
        assert!(last.sets.contains(&"workload.params.table=\"64M\"".to_string()), "{:?}", last.sets);
        // Ids: distinct, 16 hex digits, the same on a second expansion.
        let ids: std::collections::HashSet<&str> = g.points.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids.len(), 13);
        assert!(g.points.iter().all(|p| p.id.len() == 16 && p.id.chars().all(|c| c.is_ascii_hexdigit())));
        let again = grid(&g.text).unwrap();
        assert_eq!(g.points.iter().map(|p| &p.id).collect::<Vec<_>>(), again.points.iter().map(|p| &p.id).collect::<Vec<_>>());
    }

    /// The id depends on the resolved configuration, not on how it was spelled.
    #[test]
    fn ids_are_stable_and_follow_the_resolved_config() {
        let a = grid(&format!("designs = [\"radix4\"]\nworkloads = [\"gups\"]\n{SMALL}[axes]\n\"mmu.l2.entries\" = [768]\n")).unwrap();
        let b = grid("designs = [\"radix4\"]\nworkloads = [{ name = \"gups\", params = { updates = \"2000\", table = \"64M\" } }]\n[axes]\nmmu.l2.entries = [768]\n").unwrap();
        assert_eq!(a.points[0].id, b.points[0].id);
        // Workload-entry parameters are swept (and first).
        assert_eq!(b.swept_keys, ["workload.params.updates", "workload.params.table", "mmu.l2.entries"]);
        let c = grid(&format!("designs = [\"radix4\"]\nworkloads = [\"gups\"]\n{SMALL}[axes]\n\"mmu.l2.entries\" = [3072]\n")).unwrap();
        assert_ne!(a.points[0].id, c.points[0].id);
        // The hash itself: pinned so an accidental change of the scheme (which would orphan every
        // existing record) fails here.
        assert_eq!(fnv1a(&[b"a"]), 0x089b_c907_b544_c769);
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
        assert_eq!(fnv1a(&[]), 0xcbf2_9ce4_8422_2325);
        // Duplicates (an explicit point equal to a product point) are kept once.
        let d = grid(&format!(
            "designs = [\"radix4\"]\nworkloads = [\"gups\"]\n{SMALL}[axes]\n\"mmu.l2.entries\" = [768, 3072]\n[[points]]\n\"mmu.l2.entries\" = 3072\n"
        ))
        .unwrap();
        assert_eq!(d.points.len(), 2);
        // A workload parameter is keyed as its workload reads it: a size in any spelling, a flag
        // as 1 or true, a default written out or left out, are one point; other values are not.
        let w = |params: &str| {
            grid(&format!("designs = [\"radix4\"]\nworkloads = [{{ name = \"gups\", params = {{ {params} }} }}]\n")).unwrap().points[0]
                .id
                .clone()
        };
        let base = w("table = \"16M\", updates = \"2000\"");
        for same in [
            "table = \"16777216\", updates = \"2_000\"",
            "table = \"16 MiB\", updates = \"2000\", populate = \"1\"",
            "table = \"16M\", updates = \"2000\", madvise_huge = \"no\"",
        ] {
            assert_eq!(w(same), base, "{same}");
        }
        assert_ne!(w("table = \"32M\", updates = \"2000\""), base);
        assert_ne!(w("table = \"16M\", updates = \"2000\", populate = \"false\""), base);
        let axis =
            grid("designs = [\"radix4\"]\nworkloads = [\"gups\"]\n[axes]\n\"workload.params.table\" = [\"16M\", 16777216, \"32M\"]\n")
                .unwrap();
        assert_eq!(axis.points.len(), 2);
    }

    #[test]
    fn presets_and_points_cross_what_they_do_not_name() {
        let g = grid(
            "designs = [\"radix4\", \"ecpt\"]\nworkloads = [\"gups\", \"stream\"]\npresets = [\"emt-osdi25\", \"champsim\"]\n\
             [[points]]\nworkload = \"gups\"\npreset = \"champsim\"\n\"mmu.l2.entries\" = 3072\n",
        );
        let g = match g {
            Ok(g) => g,
            // Preset names change rarely; name the real ones if this fails.
            Err(e) => panic!("{e} (presets: {:?})", config::PRESETS.iter().map(|p| p.name).collect::<Vec<_>>()),
        };
        assert_eq!(g.points.len(), 2 * 2 * 2 + 2);
        assert_eq!(g.points[0].preset.as_deref(), Some("emt-osdi25"));
        assert_eq!(g.points[2].workload, "stream");
        let tail: Vec<(&str, &str)> = g.points[8..].iter().map(|p| (p.design.as_str(), p.workload.as_str())).collect();
        assert_eq!(tail, [("radix4", "gups"), ("ecpt", "gups")]);
        assert!(g.points[8..].iter().all(|p| p.preset.as_deref() == Some("champsim") && p.config.mmu.l2.entries == 3072));
    }

    fn err(text: &str) -> String {
        grid(text).map(|g| format!("expanded to {} points", g.points.len())).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_grid_and_the_key() {
        let base = "designs = [\"radix4\"]\nworkloads = [\"gups\"]\n";
        for (text, needles) in [
            (format!("{base}axis = 1\n"), &["grid test.toml", "unknown key `axis`"][..]),
            ("designs = []\nworkloads = [\"gups\"]\n".into(), &["grid test.toml", "`designs` is an empty list"]),
            (format!("{base}[axes]\n\"mmu.l2.entries\" = []\n"), &["grid test.toml", "`mmu.l2.entries` is an empty list"]),
            (format!("{base}[axes]\n\"mmu.l2.entries\" = 512\n"), &["`mmu.l2.entries` must be a list"]),
            (
                format!("{base}[[zip]]\n\"mmu.l2.entries\" = [1, 2]\n\"mmu.l2.ways\" = [4]\n"),
                &["grid test.toml", "[[zip]] 1", "`mmu.l2.ways` has 1", "equal lengths"],
            ),
            ("designs = [\"radix9\"]\nworkloads = [\"gups\"]\n".into(), &["grid test.toml", "designs", "unknown design `radix9`"]),
            ("designs = [\"radix4\"]\nworkloads = [\"gupz\"]\n".into(), &["grid test.toml", "workloads[0]", "unknown workload `gupz`"]),
            (format!("{base}presets = [\"nope\"]\n"), &["grid test.toml", "unknown preset `nope`"]),
            (format!("{base}[axes]\n\"mmu.l2.entriez\" = [512]\n"), &["mmu.l2.entriez", "grid test.toml", "no such key"]),
            (format!("{base}[set]\n\"mmu.l2.entries\" = \"many\"\n"), &["mmu.l2.entries", "grid test.toml", "expected an integer"]),
            (format!("{base}[[points]]\n\"sim.nonsense\" = 1\n"), &["sim.nonsense", "grid test.toml", "radix4 gups sim.nonsense=1"]),
            (
                "designs = [\"radix4\"]\nworkloads = [{ name = \"gups\", params = { tabel = \"1G\" } }]\n".into(),
                &["workload.params.tabel", "grid test.toml", "has no parameter"],
            ),
            (
                format!("{base}[axes]\n\"mmu.l2.ways\" = [8]\n[[zip]]\n\"mmu.l2.ways\" = [4]\n"),
                &["grid test.toml", "[[zip]] 1: `mmu.l2.ways` already varies"],
            ),
            (format!("{base}[axes]\ndesign = [\"ecpt\"]\n"), &["grid test.toml", "[axes]", "`design` is not a config key"]),
            ("workloads = [\"gups\"]\n[[points]]\n\"mmu.l2.entries\" = 1024\n".into(), &["[[points]] 1 names no design"]),
            (format!("{base}[axes\n"), &["grid test.toml", "not valid TOML at line 3"]),
        ] {
            let e = err(&text);
            for n in needles {
                assert!(e.contains(n), "{text:?}: error {e:?} lacks {n:?}");
            }
        }
    }
}
