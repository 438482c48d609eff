//! Application workloads from the evaluations of Utopia, EMT and SPARTA (see
//! `docs/workloads-apps.md`).

pub mod ascy;
pub mod bst_ext;
pub mod bst_int;
pub mod btree;
pub mod common;
pub mod dlrm;
pub mod hashjoin;
pub mod hashtable;
pub mod heap;
pub mod implicit;
pub mod kmer;
pub mod kvstore;
pub mod pagefault;
pub mod skiplist;
pub mod sysbench;
pub mod xsbench;

use super::WorkloadEntry;

/// Every application workload, in the order `xlate workloads` lists them.
pub static ENTRIES: &[WorkloadEntry] = &[
    xsbench::ENTRY,
    dlrm::ENTRY,
    kmer::ENTRY,
    btree::ENTRY,
    bst_ext::ENTRY,
    bst_int::ENTRY,
    hashtable::ENTRY,
    skiplist::ENTRY,
    kvstore::ENTRY,
    hashjoin::ENTRY,
    sysbench::ENTRY,
    pagefault::ENTRY,
];

#[cfg(test)]
mod tests {
    use super::ENTRIES;
    use std::collections::BTreeMap;

    #[test]
    fn every_entry_builds_with_its_defaults_and_names_bad_keys() {
        let mut names: Vec<&str> = ENTRIES.iter().map(|e| e.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ENTRIES.len(), "duplicate names");
        for e in ENTRIES {
            assert!(crate::workload::build(e.name, &BTreeMap::new(), 1).is_ok(), "{}", e.name);
            for p in e.params {
                let map = [(p.name.to_string(), "x".to_string())].into_iter().collect();
                let err = crate::workload::build(e.name, &map, 1).err().unwrap_or_else(|| panic!("{}.{} accepted x", e.name, p.name));
                assert!(err.to_string().contains(p.name), "{}: {err}", e.name);
            }
        }
    }

    #[test]
    fn out_of_range_values_are_errors_not_panics() {
        let bad = [
            ("bst-ext", "search", "90"),
            ("bst-int", "range", "2"),
            ("skiplist", "threads", "0"),
            ("hashtable", "footprint", "1K"),
            ("btree", "node_size", "100"),
            ("btree", "fill", "20"),
            ("kvstore", "theta", "1.5"),
            ("kvstore", "value_max", "1G"),
            ("xsbench", "nuclides", "1"),
            ("dlrm", "dist", "normal"),
            ("dlrm", "tables", "0"),
            ("kmer", "k", "33"),
            ("kmer", "prefill", "95"),
            ("hashjoin", "match", "0"),
            ("sysbench-mem", "block_size", "12"),
        ];
        for (w, k, v) in bad {
            let map = [(k.to_string(), v.to_string())].into_iter().collect();
            let err = crate::workload::build(w, &map, 1).err().unwrap_or_else(|| panic!("{w}.{k}={v} accepted"));
            assert!(err.to_string().contains(k), "{w}: {err}");
        }
    }
}
