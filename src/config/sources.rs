//! Where a preset's values come from: the comments of its TOML file, shown by `--print-config`.
//!
//! A preset cites its source next to each value (`size = "48K" # L1D.sets 64 × L1D.ways 12 × …`,
//! or a comment block directly above the key). [`annotated_toml`] prints a resolved config with
//! each key the preset sets followed by that comment; a key a later layer (the design, `--config`,
//! `--set`) changed says so and shows the preset's value. Keys without a comment are not set by
//! the preset (xlate's defaults).

use super::{preset, to_toml, to_value, Config, Layers};
use crate::error::Result;
use std::collections::BTreeMap;
use toml::Value;

/// The comment next to (or else directly above) each key of a preset's TOML, by dotted path;
/// elements of arrays of tables are `key[i]` (`arch.radix.pwc[0].entries`).
pub fn comments(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Ok(doc) = text.parse::<toml_edit::DocumentMut>() {
        collect_table(doc.as_table(), "", &mut out);
    }
    out
}

fn raw(r: Option<&toml_edit::RawString>) -> &str {
    r.and_then(|r| r.as_str()).unwrap_or("")
}

/// The comment text of a decor suffix (`  # text`), if any.
fn trailing(s: &str) -> Option<String> {
    let t = s.trim().strip_prefix('#')?.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// The last block of comment lines directly above a key (a blank line ends a block).
fn above(s: &str) -> Option<String> {
    let mut block: Vec<&str> = Vec::new();
    for line in s.lines() {
        let l = line.trim();
        match l.strip_prefix('#') {
            Some(c) => block.push(c.trim()),
            None if l.is_empty() => block.clear(),
            None => {}
        }
    }
    (!block.is_empty()).then(|| block.join(" "))
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn collect_table(t: &toml_edit::Table, prefix: &str, out: &mut BTreeMap<String, String>) {
    for (k, item) in t.iter() {
        let path = join(prefix, k);
        let key_above = t.key(k).and_then(|key| above(raw(key.leaf_decor().prefix())));
        match item {
            toml_edit::Item::Value(v) => {
                if let Some(c) = trailing(raw(v.decor().suffix())).or(key_above) {
                    out.insert(path, c);
                }
            }
            toml_edit::Item::Table(sub) => {
                if let Some(c) = trailing(raw(sub.decor().suffix())).or_else(|| above(raw(sub.decor().prefix()))) {
                    out.insert(path.clone(), c);
                }
                collect_table(sub, &path, out);
            }
            toml_edit::Item::ArrayOfTables(a) => {
                for (i, sub) in a.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    if let Some(c) = trailing(raw(sub.decor().suffix())).or_else(|| above(raw(sub.decor().prefix()))) {
                        out.insert(p.clone(), c);
                    }
                    collect_table(sub, &p, out);
                }
            }
            toml_edit::Item::None => {}
        }
    }
}

/// The value at a dotted path with `[i]` indices.
fn lookup<'v>(v: &'v Value, path: &str) -> Option<&'v Value> {
    let mut cur = v;
    for part in path.split('.') {
        let (name, idx) = match part.split_once('[') {
            Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        cur = cur.get(name)?;
        if let Some(i) = idx {
            cur = cur.as_array()?.get(i)?;
        }
    }
    Some(cur)
}

/// `a.b.c` with the current element index inserted after every array-of-tables prefix.
fn indexed(name: &str, aot: &BTreeMap<String, usize>) -> String {
    let (mut plain, mut out) = (String::new(), String::new());
    for part in name.split('.') {
        if !plain.is_empty() {
            plain.push('.');
            out.push('.');
        }
        plain.push_str(part);
        out.push_str(part);
        if let Some(n) = aot.get(&plain) {
            out.push_str(&format!("[{}]", n - 1));
        }
    }
    out
}

/// `cfg` as TOML; with a preset, every key the preset sets carries the preset's comment for it
/// (its source), and says so when a later layer changed the preset's value.
pub fn annotated_toml(cfg: &Config, preset_name: Option<&str>) -> Result<String> {
    let text = to_toml(cfg);
    let Some(name) = preset_name else { return Ok(text) };
    let p = preset(name)?;
    let notes = comments(p.toml);
    // The preset's own values, resolved the same way, to spot keys a later layer changed.
    let given = to_value(&Layers { preset: Some(name.into()), ..Layers::default() }.resolve(None)?);
    let now = to_value(cfg);
    let mut out = format!(
        "# preset {name}: a comment after a value names its source; values without one are xlate's defaults, not set by the preset\n"
    );
    let mut aot: BTreeMap<String, usize> = BTreeMap::new();
    let mut table = String::new();
    for line in text.lines() {
        let t = line.trim();
        let note = if let Some(h) = t.strip_prefix("[[").and_then(|h| h.strip_suffix("]]")) {
            *aot.entry(h.to_string()).or_insert(0) += 1;
            table = indexed(h, &aot);
            notes.get(&table).or_else(|| (aot[h] == 1).then(|| notes.get(h)).flatten()).cloned()
        } else if let Some(h) = t.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            table = indexed(h, &aot);
            notes.get(&table).cloned()
        } else if let Some((k, _)) = t.split_once(" = ") {
            let path = join(&table, k.trim().trim_matches('"'));
            notes.get(&path).map(|c| match (lookup(&given, &path), lookup(&now, &path)) {
                (Some(g), Some(n)) if g != n => format!("changed after the preset, which gives {g} ({c})"),
                _ => c.clone(),
            })
        } else {
            None
        };
        out.push_str(line);
        if let Some(n) = note {
            out.push_str("  # ");
            out.push_str(&n);
        }
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_next_to_and_above_keys() {
        let c = comments(
            "a = 1 # one\n\n# about b\n# more\nb = 2\n[t] # table\nx = \"4K\" # four\n[[arr]]\ny = 1 # first\n[[arr]]\ny = 2 # second\n",
        );
        assert_eq!(c["a"], "one");
        assert_eq!(c["b"], "about b more");
        assert_eq!(c["t"], "table");
        assert_eq!(c["t.x"], "four");
        assert_eq!(c["arr[0].y"], "first");
        assert_eq!(c["arr[1].y"], "second");
    }

    #[test]
    fn champsim_print_config_names_every_preset_value_and_later_changes() {
        let design = crate::arch::lookup("radix4").unwrap();
        let layers = Layers { preset: Some("champsim".into()), sets: vec!["mem.l2.latency=12".into()], ..Layers::default() };
        let cfg = layers.resolve(Some(design)).unwrap();
        let text = annotated_toml(&cfg, Some("champsim")).unwrap();
        let line = |prefix: &str| text.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("{prefix} in\n{text}"));
        assert!(line("size = \"48K\"").contains("L1D.sets 64 × L1D.ways 12"), "{text}");
        assert!(line("pwc_mode = \"champsim\"").contains("src/ptw.cc"));
        assert!(line("entry_write = 200.0").contains("minor_fault_penalty"));
        // radix4 sets 4 levels over the preset's 5; --set changed the L2 latency.
        assert!(line("levels = 4").contains("changed after the preset, which gives 5"), "{text}");
        assert!(line("latency = 12").contains("gives 10 (L2C.latency)"), "{text}");
        // Every value the preset file sets carries a source.
        let p = preset("champsim").unwrap();
        for (path, note) in comments(p.toml) {
            assert!(!note.is_empty(), "{path}");
        }
        let doc: toml::Table = toml::from_str(p.toml).unwrap();
        fn leaves(v: &Value, path: &str, out: &mut Vec<String>) {
            match v {
                Value::Table(t) => t.iter().for_each(|(k, v)| leaves(v, &join(path, k), out)),
                Value::Array(a) if a.iter().all(|x| x.is_table()) && !a.is_empty() => {
                    a.iter().enumerate().for_each(|(i, v)| leaves(v, &format!("{path}[{i}]"), out))
                }
                _ => out.push(path.to_string()),
            }
        }
        let mut all = Vec::new();
        leaves(&Value::Table(doc), "", &mut all);
        let notes = comments(p.toml);
        let missing: Vec<&String> = all.iter().filter(|k| !notes.contains_key(*k)).collect();
        assert!(missing.is_empty(), "champsim preset values without a source comment: {missing:?}");
    }
}
