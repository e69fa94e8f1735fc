//! Verdicts on whether the running kernel behaves as a seed patch intends, from measured
//! evidence. Pure functions over [`Counts`]: the orchestration is in `cmd::check`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{Counts, GapRecord};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    BehavesAsPatched,
    BehavesAsUnpatched,
    /// The workload never produced the situation the patch is about.
    NotExercised,
    /// A hook or field the check needs is missing on this kernel.
    Unsupported,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::BehavesAsPatched => "behaves-as-patched",
            Self::BehavesAsUnpatched => "behaves-as-unpatched",
            Self::NotExercised => "not-exercised",
            Self::Unsupported => "unsupported",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckResult {
    pub patch: &'static str,
    pub title: &'static str,
    pub verdict: Verdict,
    /// One plain sentence.
    pub sentence: String,
    /// The numbers the verdict rests on.
    pub evidence: BTreeMap<String, serde_json::Value>,
    /// What the check relied on about this kernel (hooks and how they were attached, nodes).
    pub kernel_facts: BTreeMap<String, String>,
}

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

pub const TITLE_003: &str = "sched,numa: cap pte scanning overhead to 3% of run time";

/// Above this many task_numa_work calls per second of a task's run time, the work is being
/// queued on (almost) every tick: the underflow seed 003 fixed (HZ is 100 to 1000).
pub const MAX_CALLS_PER_RUNTIME_SECOND: f64 = 50.0;
/// The cap is ~1/33; a little slack for the ticks' granularity.
pub const MAX_SCAN_SHARE: f64 = 0.05;
/// Tasks with less run time than this say little about rates and shares.
pub const MIN_TASK_RUNTIME_NS: u64 = 200_000_000;

/// One task's scanning, as seed 003's invariants need it.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskScan {
    pub task: String,
    pub calls: u64,
    pub runtime_ns: u64,
    /// CPU share up to the start of the latest call (`Scan::share_between_calls`).
    pub share: Option<f64>,
}

/// Seed 003 from a whole run: invariant 1 (node_stamp never ahead of the runtime at entry),
/// invariant 2 (node_stamp moves on 32x the runtime a call consumed), no per-tick queueing,
/// and the scan share of the worst task.
pub fn verdict_003(
    total: &Counts,
    tasks: &[TaskScan],
) -> (Verdict, String, BTreeMap<String, serde_json::Value>) {
    let s = &total.scan;
    let mut ev = BTreeMap::new();
    let busy: Vec<&TaskScan> = tasks
        .iter()
        .filter(|t| t.runtime_ns >= MIN_TASK_RUNTIME_NS)
        .collect();
    let rate = |t: &TaskScan| t.calls as f64 / (t.runtime_ns as f64 / 1e9);
    let worst_rate = busy
        .iter()
        .copied()
        .max_by(|a, b| rate(a).total_cmp(&rate(b)));
    let worst_share = busy
        .iter()
        .copied()
        .filter(|t| t.share.is_some())
        .max_by(|a, b| a.share.unwrap_or(0.0).total_cmp(&b.share.unwrap_or(0.0)));
    ev.insert("scan_calls".into(), s.calls.into());
    ev.insert("scan_time_ns".into(), s.time_ns.into());
    ev.insert("stamp_violations".into(), s.stamp_violations.into());
    ev.insert("cap_calls".into(), s.cap_calls.into());
    ev.insert("cap_violations".into(), s.cap_violations.into());
    ev.insert(
        "node_stamp_advance_ns".into(),
        s.node_stamp_advance_ns.into(),
    );
    ev.insert("runtime_in_scan_ns".into(), s.runtime_in_scan_ns.into());
    if let Some(t) = worst_rate {
        ev.insert(
            "max_calls_per_runtime_second".into(),
            serde_json::json!(rate(t)),
        );
        ev.insert("max_calls_task".into(), t.task.clone().into());
    }
    if let Some(t) = worst_share {
        ev.insert("max_scan_share".into(), serde_json::json!(t.share));
        ev.insert("max_scan_share_task".into(), t.task.clone().into());
    }
    if s.calls == 0 || busy.is_empty() {
        return (
            Verdict::NotExercised,
            "task_numa_work never ran for a task with enough run time to judge.".into(),
            ev,
        );
    }
    let rate_bad = worst_rate.is_some_and(|t| rate(t) > MAX_CALLS_PER_RUNTIME_SECOND);
    let share_bad = worst_share.is_some_and(|t| t.share.unwrap_or(0.0) > MAX_SCAN_SHARE);
    if s.stamp_violations > 0 || s.cap_violations > 0 || rate_bad || share_bad {
        let mut why = Vec::new();
        if s.stamp_violations > 0 {
            why.push(format!(
                "{} calls entered with node_stamp ahead of the runtime",
                s.stamp_violations
            ));
        }
        if s.cap_violations > 0 {
            why.push(format!(
                "{} of {} calls left node_stamp less than 32x their runtime ahead",
                s.cap_violations, s.cap_calls
            ));
        }
        if rate_bad {
            why.push("task_numa_work ran on almost every tick".into());
        }
        if share_bad {
            why.push(format!(
                "a task spent more than {:.0}% of its run time scanning",
                MAX_SCAN_SHARE * 100.0
            ));
        }
        return (
            Verdict::BehavesAsUnpatched,
            format!("{}.", why.join("; ")),
            ev,
        );
    }
    if s.cap_calls == 0 {
        return (
            Verdict::NotExercised,
            format!(
                "No task_numa_work call consumed measurable run time ({} calls), so the cap never had to act; \
                 node_stamp and the call rate were sound.",
                s.calls
            ),
            ev,
        );
    }
    (
        Verdict::BehavesAsPatched,
        format!(
            "All {} calls that consumed run time pushed node_stamp 32x further, none started with node_stamp \
             ahead of the runtime, and the busiest task scanned {:.2}% of its run time.",
            s.cap_calls,
            worst_share.and_then(|t| t.share).unwrap_or(0.0) * 100.0
        ),
        ev,
    )
}

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

pub const TITLE_004: &str = "mm, thp: Add mm flag to control THP (PR_SET_THP_DISABLE)";

/// One process's THP state as the reproducer recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThpState {
    pub role: String,
    pub pid: u32,
    /// PR_GET_THP_DISABLE's answer.
    pub prctl: i64,
    /// /proc/PID/status `THP_enabled:` (-1 when the kernel does not show it).
    pub thp_enabled: i64,
}

/// Parses the reproducer's `role pid prctl=N thp_enabled=N` lines.
pub fn parse_thp_states(text: &str) -> Vec<ThpState> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let role = it.next()?.to_owned();
            let pid = it.next()?.parse().ok()?;
            let prctl = it.next()?.strip_prefix("prctl=")?.parse().ok()?;
            let thp_enabled = it.next()?.strip_prefix("thp_enabled=")?.parse().ok()?;
            Some(ThpState {
                role,
                pid,
                prctl,
                thp_enabled,
            })
        })
        .collect()
}

/// Seed 004: the exec'd child of a PR_SET_THP_DISABLE parent must have THP disabled
/// (inherited across fork, kept across exec) and take no THP hint faults, while the control's
/// child does take them.
pub fn verdict_004(
    disabled_thp_faults: u64,
    control_thp_faults: u64,
    disabled_child: Option<&ThpState>,
) -> (Verdict, String) {
    let Some(child) = disabled_child else {
        return (
            Verdict::NotExercised,
            "The reproducer's child did not report its THP state.".into(),
        );
    };
    if child.prctl != 1 || child.thp_enabled == 1 {
        return (
            Verdict::BehavesAsUnpatched,
            format!(
                "The exec'd child of a PR_SET_THP_DISABLE parent reports prctl={} THP_enabled={}: the flag was not inherited.",
                child.prctl, child.thp_enabled
            ),
        );
    }
    if control_thp_faults == 0 {
        return (
            Verdict::NotExercised,
            "The control took no THP hint faults (THP off, or its memory never scanned): nothing to compare.".into(),
        );
    }
    if disabled_thp_faults > 0 {
        return (
            Verdict::BehavesAsUnpatched,
            format!("{disabled_thp_faults} THP hint faults in a process with THP disabled."),
        );
    }
    (
        Verdict::BehavesAsPatched,
        format!(
            "THP stayed disabled across fork and exec (prctl=1), and that child took no THP hint faults while the control's took {control_thp_faults}."
        ),
    )
}

pub const TITLE_002: &str = "sched/numa: scan the vma if it has not been scanned for a while";

/// One VMA's pid_inactive skips, for seed 002.
#[derive(Clone, Debug, PartialEq)]
pub struct VmaGaps {
    /// `START-END` (hex) and the mapping's name when known.
    pub vma: String,
    pub gaps: GapRecord,
}

/// Seed 002 from every VMA's pid_inactive skips. At each skip the program read
/// gap = `mm->numa_scan_seq - vma->numab_state->prev_scan_seq` and the task's thread count;
/// the patched `vma_is_accessed` returns true once gap > threads, so a skip beyond that is
/// the unpatched kernel. Skips *at* the threshold show the VMA got there, i.e. the situation
/// the patch is about occurred.
pub fn verdict_002(vmas: &[VmaGaps]) -> (Verdict, String, BTreeMap<String, serde_json::Value>) {
    let sum = |f: fn(&GapRecord) -> u64| vmas.iter().map(|v| f(&v.gaps)).sum::<u64>();
    let (skips, over, at) = (
        sum(|g| g.skips),
        sum(|g| g.over_threads),
        sum(|g| g.at_threshold),
    );
    let mut ev = BTreeMap::new();
    ev.insert("pid_inactive_skips".into(), skips.into());
    ev.insert("skips_gap_over_threads".into(), over.into());
    ev.insert("skips_gap_at_threads".into(), at.into());
    // Largest gap per VMA, the ten largest.
    let mut by_gap: Vec<&VmaGaps> = vmas.iter().filter(|v| v.gaps.skips > 0).collect();
    by_gap.sort_by(|a, b| b.gaps.max_gap.cmp(&a.gaps.max_gap).then(a.vma.cmp(&b.vma)));
    let largest: BTreeMap<String, serde_json::Value> = by_gap
        .iter()
        .take(10)
        .map(|v| {
            (
                v.vma.clone(),
                serde_json::json!({
                    "max_gap": v.gaps.max_gap,
                    "threads_then": v.gaps.max_gap_threads,
                    "skips": v.gaps.skips,
                    "over_threads": v.gaps.over_threads,
                }),
            )
        })
        .collect();
    ev.insert("largest_gap_per_vma".into(), serde_json::json!(largest));
    if over > 0 {
        let worst = by_gap[0];
        return (
            Verdict::BehavesAsUnpatched,
            format!(
                "{over} of {skips} pid_inactive skips left a VMA unscanned for more scan sequences \
                 than its process has threads (largest gap {} with {} thread(s), VMA {}): the \
                 kernel does not scan VMAs that have not been scanned for a while.",
                worst.gaps.max_gap, worst.gaps.max_gap_threads, worst.vma
            ),
            ev,
        );
    }
    if at > 0 {
        return (
            Verdict::BehavesAsPatched,
            format!(
                "{at} pid_inactive skips reached the threshold (gap = thread count) and none went \
                 beyond it: VMAs unscanned for longer than that were scanned, not skipped."
            ),
            ev,
        );
    }
    let sentence = if skips == 0 {
        "No VMA was skipped for lack of recent access (pid_inactive): the workload never left a \
         VMA idle long enough."
            .to_owned()
    } else {
        format!(
            "{skips} pid_inactive skips, but no VMA went as many scan sequences unscanned as its \
             process has threads, where the patch would act."
        )
    };
    (Verdict::NotExercised, sentence, ev)
}

/// What `numatrace-workload idle-vma --state-file` wrote: VMA A's and B's ranges and the
/// CLOCK_MONOTONIC start of each phase.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdleVmaState {
    pub a: Option<(u64, u64)>,
    pub b: Option<(u64, u64)>,
    pub phases: BTreeMap<String, u64>,
}

pub fn parse_idle_vma_state(text: &str) -> IdleVmaState {
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    let mut st = IdleVmaState::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["a", s, e] => st.a = hex(s).zip(hex(e)),
            ["b", s, e] => st.b = hex(s).zip(hex(e)),
            ["phase", name, ns] => {
                if let Ok(ns) = ns.parse() {
                    st.phases.insert((*name).to_owned(), ns);
                }
            }
            _ => {}
        }
    }
    st
}

/// The first of `times` (sorted) at or after `from`, as milliseconds after it.
pub fn first_after_ms(times: &[u64], from: u64) -> Option<f64> {
    let i = times.partition_point(|&t| t < from);
    times.get(i).map(|&t| (t - from) as f64 / 1e6)
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

    #[test]
    fn seed_004_states_and_verdicts() {
        let s = parse_thp_states(
            "parent 10 prctl=1 thp_enabled=0\nchild 11 prctl=1 thp_enabled=0\ngarbage\n",
        );
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[1],
            ThpState {
                role: "child".into(),
                pid: 11,
                prctl: 1,
                thp_enabled: 0
            }
        );
        assert_eq!(verdict_004(0, 40, Some(&s[1])).0, Verdict::BehavesAsPatched);
        assert_eq!(
            verdict_004(3, 40, Some(&s[1])).0,
            Verdict::BehavesAsUnpatched
        );
        assert_eq!(verdict_004(0, 0, Some(&s[1])).0, Verdict::NotExercised);
        let lost = ThpState {
            prctl: 0,
            thp_enabled: 1,
            ..s[1].clone()
        };
        assert_eq!(
            verdict_004(0, 40, Some(&lost)).0,
            Verdict::BehavesAsUnpatched
        );
        assert_eq!(verdict_004(0, 40, None).0, Verdict::NotExercised);
    }

    fn scan(calls: u64, cap_calls: u64, cap_violations: u64, stamp_violations: u64) -> Counts {
        let mut c = Counts::default();
        c.scan.calls = calls;
        c.scan.cap_calls = cap_calls;
        c.scan.cap_violations = cap_violations;
        c.scan.stamp_violations = stamp_violations;
        c
    }

    fn task(calls: u64, runtime_s: f64, share: f64) -> TaskScan {
        TaskScan {
            task: "1 w".into(),
            calls,
            runtime_ns: (runtime_s * 1e9) as u64,
            share: Some(share),
        }
    }

    #[test]
    fn seed_003_patched() {
        let (v, why, ev) = verdict_003(&scan(40, 12, 0, 0), &[task(20, 10.0, 0.004)]);
        assert_eq!(v, Verdict::BehavesAsPatched, "{why}");
        assert_eq!(ev["cap_calls"], 12);
    }

    #[test]
    fn seed_003_unpatched_signatures() {
        assert_eq!(
            verdict_003(&scan(40, 12, 3, 0), &[task(20, 10.0, 0.004)]).0,
            Verdict::BehavesAsUnpatched
        );
        assert_eq!(
            verdict_003(&scan(40, 12, 0, 5), &[task(20, 10.0, 0.004)]).0,
            Verdict::BehavesAsUnpatched
        );
        // Queued every tick: 250 calls per second of run time.
        assert_eq!(
            verdict_003(&scan(2500, 12, 0, 0), &[task(2500, 10.0, 0.004)]).0,
            Verdict::BehavesAsUnpatched
        );
        assert_eq!(
            verdict_003(&scan(40, 12, 0, 0), &[task(20, 10.0, 0.2)]).0,
            Verdict::BehavesAsUnpatched
        );
    }

    #[test]
    fn seed_003_not_exercised() {
        assert_eq!(verdict_003(&scan(0, 0, 0, 0), &[]).0, Verdict::NotExercised);
        assert_eq!(
            verdict_003(&scan(40, 0, 0, 0), &[task(20, 10.0, 0.001)]).0,
            Verdict::NotExercised
        );
        // A task with too little run time is not judged.
        assert_eq!(
            verdict_003(&scan(4, 2, 0, 0), &[task(4, 0.01, 0.3)]).0,
            Verdict::NotExercised
        );
    }

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

    #[test]
    fn verdicts_serialize_kebab_case() {
        assert_eq!(
            serde_json::to_value(Verdict::BehavesAsPatched).unwrap(),
            "behaves-as-patched"
        );
        assert_eq!(Verdict::NotExercised.to_string(), "not-exercised");
    }

    fn gaps(vma: &str, skips: u64, over: u64, at: u64, max_gap: u64) -> VmaGaps {
        VmaGaps {
            vma: vma.into(),
            gaps: GapRecord {
                skips,
                over_threads: over,
                at_threshold: at,
                max_gap,
                max_gap_threads: 1,
            },
        }
    }

    #[test]
    fn seed_002_verdicts() {
        // 6.8-6.11: the idle VMA's gap grows past the single thread.
        let (v, s, ev) = verdict_002(&[gaps("a", 12, 9, 3, 11), gaps("b", 2, 0, 2, 1)]);
        assert_eq!(v, Verdict::BehavesAsUnpatched, "{s}");
        assert!(s.contains("largest gap 11"), "{s}");
        assert_eq!(ev["skips_gap_over_threads"], 9);
        assert_eq!(ev["largest_gap_per_vma"]["a"]["max_gap"], 11);
        // 6.12: skipped at gap 1 = threads, then scanned.
        let (v, s, _) = verdict_002(&[gaps("a", 7, 0, 7, 1)]);
        assert_eq!(v, Verdict::BehavesAsPatched, "{s}");
        // Never idle long enough, or never skipped.
        assert_eq!(
            verdict_002(&[gaps("a", 4, 0, 0, 0)]).0,
            Verdict::NotExercised
        );
        assert_eq!(verdict_002(&[]).0, Verdict::NotExercised);
    }

    #[test]
    fn first_scan_after_a_time() {
        let t = [10_000_000, 25_000_000, 40_000_000];
        assert_eq!(first_after_ms(&t, 20_000_000), Some(5.0));
        assert_eq!(first_after_ms(&t, 10_000_000), Some(0.0));
        assert_eq!(first_after_ms(&t, 41_000_000), None);
    }

    #[test]
    fn idle_vma_state_file() {
        let st = parse_idle_vma_state(
            "a 0x7f0000000000 0x7f0004000000\nb 0x7f0004200000 0x7f0014200000\n\
             phase both 100\nphase b-only 200\ngarbage\nphase a-only x\n",
        );
        assert_eq!(st.a, Some((0x7f00_0000_0000, 0x7f00_0400_0000)));
        assert_eq!(st.b.map(|b| b.1), Some(0x7f00_1420_0000));
        assert_eq!(st.phases.get("b-only"), Some(&200));
        assert_eq!(st.phases.get("a-only"), None);
    }
}
