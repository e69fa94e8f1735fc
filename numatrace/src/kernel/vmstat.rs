//! /proc/vmstat: the kernel's own NUMA balancing totals, to report beside ours.

use std::{collections::BTreeMap, fs};

/// Counters numatrace reports deltas of.
pub const NUMA_COUNTERS: &[&str] = &[
    "numa_pte_updates",
    "numa_huge_pte_updates",
    "numa_hint_faults",
    "numa_hint_faults_local",
    "numa_pages_migrated",
    "pgmigrate_success",
    "pgmigrate_fail",
    // Memory tiering (absent where the kernel lacks them: pgpromote_success 5.18+, candidate
    // 6.0+, demotions 5.15+, khugepaged 6.3+, proactive 6.17+, candidate_nrl 6.18+).
    "pgpromote_success",
    "pgpromote_candidate",
    "pgpromote_candidate_nrl",
    "pgdemote_kswapd",
    "pgdemote_direct",
    "pgdemote_khugepaged",
    "pgdemote_proactive",
];

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vmstat(pub BTreeMap<String, u64>);

impl Vmstat {
    pub fn parse(text: &str) -> Self {
        Self(
            text.lines()
                .filter_map(|l| {
                    let (k, v) = l.split_once(' ')?;
                    NUMA_COUNTERS
                        .contains(&k)
                        .then(|| Some((k.to_owned(), v.trim().parse().ok()?)))?
                })
                .collect(),
        )
    }

    /// Folds every CPU's pending counter changes into the totals /proc/vmstat prints
    /// (`vm.stat_refresh`, root, 4.8+). The node counters (`pgpromote_*`, `pgdemote_*`) are
    /// kept per CPU and folded about once a second, so without this a window's last
    /// promotions may be missing from its vmstat delta (seen: 16 of 813 pages); the event
    /// counters (`numa_*`) are summed on every read and need none. Done at a window's edges
    /// only: it runs work on every CPU.
    pub fn fold_per_cpu() {
        if let Err(e) = fs::write("/proc/sys/vm/stat_refresh", "1") {
            tracing::debug!("vm.stat_refresh: {e}");
        }
    }

    pub fn read() -> std::io::Result<Self> {
        Ok(Self::parse(&super::read_text("/proc/vmstat")?))
    }

    /// `self - before`, for counters present in both (they only grow; wrap is not expected).
    pub fn delta(&self, before: &Self) -> BTreeMap<String, u64> {
        self.0
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.saturating_sub(*before.0.get(k)?))))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_diffs() {
        let a = Vmstat::parse("nr_free_pages 10\nnuma_hint_faults 5\nnuma_pte_updates 7\n");
        let b = Vmstat::parse("numa_hint_faults 9\nnuma_pte_updates 7\npgmigrate_fail 1\n");
        assert_eq!(a.0.len(), 2, "only NUMA counters are kept");
        let d = b.delta(&a);
        assert_eq!(d["numa_hint_faults"], 4);
        assert_eq!(d["numa_pte_updates"], 0);
        assert!(!d.contains_key("pgmigrate_fail"), "absent before: no delta");
    }
}
