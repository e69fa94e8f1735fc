//! Seed 002 — "sched/numa: scan the vma if it has not been scanned for a while".

use super::*;

pub const SEED: Seed = Seed {
    id: "002",
    title: TITLE_002,
    needs: &[GAP_HOOK],
};

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

pub const GAP_HOOK: &str = crate::kernel::catalogue::SKIP_VMA_BTF_HOOK;
pub fn label(v: &crate::model::VmaRecord) -> String {
    match &v.mapping {
        Some(m) => format!("{}-{} {m}", v.start, v.end),
        None => format!("{}-{}", v.start, v.end),
    }
}

/// Every VMA of the report with pid_inactive gap records.
pub fn gaps_of(r: &StatReport) -> Vec<VmaGaps> {
    r.processes
        .iter()
        .flat_map(|p| p.vmas.iter())
        .filter_map(|v| {
            v.pid_inactive.map(|g| VmaGaps {
                vma: label(v),
                gaps: g,
            })
        })
        .collect()
}

/// Seed 002 from any window's report (a user's workload, a capture): no reproducer, so no
/// claim about VMA A, only what the gaps say.
pub fn judge(r: &StatReport) -> CheckResult {
    let facts = match require(r, &[GAP_HOOK]) {
        Ok(f) => f,
        Err(why) => return SEED.unsupported(why),
    };
    let (mut verdict, mut sentence, evidence) = verdict_002(&gaps_of(r));
    (verdict, sentence) = offline(verdict, sentence);
    if let Some(off) = balancing_off(verdict, r) {
        sentence = off;
    }
    SEED.result(verdict, sentence, evidence, facts)
}

/// Without the reproducer only an unpatched kernel shows itself (a skip beyond the threshold):
/// a VMA that stopped being skipped at the threshold may simply have been touched again, which
/// only the reproducer's idle VMA rules out.
pub fn offline(verdict: Verdict, sentence: String) -> (Verdict, String) {
    match verdict {
        Verdict::BehavesAsPatched => (
            Verdict::NotExercised,
            format!(
                "{sentence} Whether the kernel scans a VMA that stays idle needs the reproducer: \
                 run `sudo numatrace check --patch 002` on the machine."
            ),
        ),
        v => (v, sentence),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offline_never_claims_patched() {
        let (v, why) = offline(Verdict::BehavesAsPatched, "At the threshold.".into());
        assert_eq!(v, Verdict::NotExercised);
        assert!(why.contains("check --patch 002"));
        let (v, _) = offline(Verdict::BehavesAsUnpatched, String::new());
        assert_eq!(v, Verdict::BehavesAsUnpatched);
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
