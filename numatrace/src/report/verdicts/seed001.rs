//! Seed 001 — "mm, numa: Turn 4K pte NUMA faults into effective hugepage ones".

use super::*;

pub const SEED: Seed = Seed {
    id: "001",
    title: TITLE_001,
    needs: &["mpol_misplaced", "task_numa_fault"],
};

pub const TITLE_001: &str = "mm, numa: Turn 4K pte NUMA faults into effective hugepage ones";

/// Below this many 4K hint faults, the reproducer did not get the memory scanned.
pub const MIN_4K_FAULTS: u64 = 100;

/// Seed 001 (never merged): with 4K pages, does one hint fault handle a whole 2 MiB region per
/// scan pass (patched: ~1 fault per region-pass), or does every PTE fault on its own
/// (unpatched: many)? `thp_mean` is the THP run's value for reference (1 fault per PMD).
pub fn verdict_001(
    faults_4k: u64,
    mean_4k: Option<f64>,
    thp_mean: Option<f64>,
) -> (Verdict, String) {
    let Some(mean) = mean_4k.filter(|_| faults_4k >= MIN_4K_FAULTS) else {
        return (
            Verdict::NotExercised,
            format!(
                "Only {faults_4k} hint faults on 4K pages: the memory was not scanned enough to judge."
            ),
        );
    };
    let thp = thp_mean.map_or(String::new(), |m| format!(" (THP run: {m:.1})"));
    if mean <= 2.0 {
        (
            Verdict::BehavesAsPatched,
            format!(
                "4K hint faults came {mean:.1} per 2 MiB region per scan pass{thp}: faults are batched like hugepage faults."
            ),
        )
    } else {
        (
            Verdict::BehavesAsUnpatched,
            format!(
                "4K hint faults came {mean:.1} per 2 MiB region per scan pass{thp}: each fault restores a single PTE."
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_001_verdicts() {
        assert_eq!(
            verdict_001(8000, Some(180.0), Some(1.0)).0,
            Verdict::BehavesAsUnpatched
        );
        assert_eq!(
            verdict_001(8000, Some(1.2), Some(1.0)).0,
            Verdict::BehavesAsPatched
        );
        assert_eq!(verdict_001(20, Some(1.0), None).0, Verdict::NotExercised);
        assert_eq!(verdict_001(500, None, None).0, Verdict::NotExercised);
    }
}
