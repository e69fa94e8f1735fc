//! Seed 003 — "sched,numa: cap pte scanning overhead to 3% of run time".

use super::*;

pub const SEED: Seed = Seed {
    id: "003",
    title: TITLE_003,
    needs: &["task_numa_work"],
};

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
    ev.insert("requeued_calls".into(), s.requeued_calls.into());
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

/// Every task's scanning, as seed 003 judges it.
pub fn task_scans(r: &StatReport) -> Vec<TaskScan> {
    r.tasks
        .iter()
        .map(|t| {
            let scan = t.counts().scan;
            TaskScan {
                task: format!("{} {}", t.pid, t.comm),
                calls: scan.calls,
                runtime_ns: scan.task_runtime_ns,
                share: scan.share_between_calls,
            }
        })
        .collect()
}

/// Seed 003 from any window's report (a user's workload, a capture).
pub fn judge(r: &StatReport) -> CheckResult {
    let facts = match require(r, &["task_numa_work"]) {
        Ok(f) => f,
        Err(why) => return SEED.unsupported(why),
    };
    let (verdict, mut sentence, evidence) = verdict_003(&r.totals, &task_scans(r));
    if let Some(off) = balancing_off(verdict, r) {
        sentence = off;
    }
    SEED.result(verdict, sentence, evidence, facts)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
