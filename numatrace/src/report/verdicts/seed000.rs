//! Seed 000 — "mm: numa: Do not trap faults on shared data section pages".

use super::*;

pub const SEED: Seed = Seed {
    id: "000",
    title: TITLE_000,
    needs: &["mpol_misplaced", "task_numa_fault"],
};

pub const TITLE_000: &str = "mm: numa: Do not trap faults on shared data section pages";

/// Below this many hint faults in the control, scanning never really reached the pages.
pub const MIN_CONTROL_FAULTS: u64 = 100;

/// Seed 000 from a reproducer run and its control. `shared`: children only read the parent's
/// COW-shared 4K pages; `control`: children wrote their copy first. `array_pages`: the shared
/// array's size in pages. A patched kernel does not make COW-shared PTEs PROT_NONE, so (almost)
/// no hint fault lands on them, while the control's private pages are faulted.
pub fn verdict_000(shared: &Counts, control: &Counts, array_pages: u64) -> (Verdict, String) {
    let (s, c) = (&shared.hint_faults, &control.hint_faults);
    let small_cow = s.cow_shared.saturating_sub(s.cow_shared_large);
    if c.faults < MIN_CONTROL_FAULTS {
        return (
            Verdict::NotExercised,
            format!(
                "The control took only {} hint faults (< {MIN_CONTROL_FAULTS}): NUMA balancing \
                 never reached the pages, so the absence of faults on COW-shared pages proves nothing.",
                c.faults
            ),
        );
    }
    // Allow 1% of the array: a page can be faulted just before the children map it shared.
    if small_cow * 100 > array_pages {
        return (
            Verdict::BehavesAsUnpatched,
            format!(
                "{small_cow} hint faults hit COW-shared 4K pages ({} of them migrated): the kernel \
                 still traps faults on shared copy-on-write pages.",
                s.cow_shared_migrated
            ),
        );
    }
    (
        Verdict::BehavesAsPatched,
        format!(
            "COW-shared 4K pages took {small_cow} hint faults while the control's private copies \
             took {}: the kernel leaves shared copy-on-write pages alone{}.",
            c.faults,
            if s.cow_shared_large > 0 {
                format!(
                    " (but {} faults hit COW-shared THPs, which the patch does not cover)",
                    s.cow_shared_large
                )
            } else {
                String::new()
            }
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(faults: u64, cow: u64, cow_large: u64) -> Counts {
        let mut c = Counts::default();
        c.hint_faults.faults = faults;
        c.hint_faults.cow_shared = cow;
        c.hint_faults.cow_shared_large = cow_large;
        c
    }

    #[test]
    fn patched_when_shared_pages_are_left_alone() {
        let (v, why) = verdict_000(&counts(3, 0, 0), &counts(8000, 0, 0), 8192);
        assert_eq!(v, Verdict::BehavesAsPatched);
        assert!(why.contains("8000"), "{why}");
    }

    #[test]
    fn unpatched_when_shared_4k_pages_fault() {
        let (v, _) = verdict_000(&counts(5000, 4000, 0), &counts(8000, 0, 0), 8192);
        assert_eq!(v, Verdict::BehavesAsUnpatched);
    }

    #[test]
    fn thp_faults_do_not_count_against_the_patch() {
        let (v, why) = verdict_000(&counts(120, 112, 112), &counts(8000, 0, 0), 8192);
        assert_eq!(v, Verdict::BehavesAsPatched);
        assert!(why.contains("THP"), "{why}");
    }

    #[test]
    fn a_silent_control_means_not_exercised() {
        let (v, _) = verdict_000(&counts(0, 0, 0), &counts(4, 0, 0), 8192);
        assert_eq!(v, Verdict::NotExercised);
    }
}
