//! Findings: plain sentences, with their numbers, about what in a window deserves a kernel
//! developer's attention. Each rule reads only the report, so a capture gives the same findings
//! on any machine.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::{
    model::{Counts, quantile},
    report::measured::{Feed, Measured},
    report::stat::StatReport,
    report::verdicts::seed003::MIN_TASK_RUNTIME_NS,
};

/// seed 003's cap on the share of run time spent scanning.
pub const SCAN_SHARE_CAP: f64 = 0.03;
/// Migrations at least this slow at the 99th percentile are called slow.
pub const SLOW_MIGRATION_NS: u64 = 1_000_000;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// A stable name for the rule (`scan_share_over_cap`, ...).
    pub rule: String,
    pub sentence: String,
    pub evidence: BTreeMap<String, serde_json::Value>,
}

fn finding(rule: &str, sentence: String, evidence: serde_json::Value) -> Finding {
    let evidence = match evidence {
        serde_json::Value::Object(m) => m.into_iter().collect(),
        _ => BTreeMap::new(),
    };
    Finding {
        rule: rule.to_owned(),
        sentence,
        evidence,
    }
}

fn ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// Every rule that fires, in a fixed order.
pub fn findings(r: &StatReport) -> Vec<Finding> {
    let mut out = Vec::new();
    let t = &r.totals;

    if r.kernel.numa_balancing == Some(0) {
        out.push(finding(
            "balancing_off",
            "NUMA balancing was off (kernel.numa_balancing=0): nothing below reflects it.".into(),
            json!({"kernel.numa_balancing": 0}),
        ));
    }

    // Scan share above seed 003's cap, per task with enough run time to judge.
    let mut over: Vec<_> = r
        .tasks
        .iter()
        .map(|x| (x, x.counts().scan))
        .filter(|(_, sc)| sc.task_runtime_ns >= MIN_TASK_RUNTIME_NS)
        .filter_map(|(x, sc)| sc.share.map(|s| (s, x, sc)))
        .filter(|(s, _, _)| *s > SCAN_SHARE_CAP)
        .collect();
    over.sort_by(|a, b| b.0.total_cmp(&a.0));
    if let Some((share, worst, sc)) = over.first() {
        out.push(finding(
            "scan_share_over_cap",
            format!(
                "{} task(s) spent more than 3% of their run time scanning PTEs (the cap of seed \
                 003); the most, {} {}, {} ({} of {}).",
                over.len(),
                worst.pid,
                worst.comm,
                pct(*share),
                ms(sc.runtime_in_scan_ns),
                ms(sc.task_runtime_ns)
            ),
            json!({"tasks_over_cap": over.len(), "max_share": share, "task": format!("{} {}", worst.pid, worst.comm)}),
        ));
    }

    let m = r.measured();
    out.extend(migrations_failing(&m, t));

    // Migrations slow.
    let lat = &r.histograms.migrate_latency_ns;
    // A log2 bucket holds [lt/2, lt): the 99th percentile is at least p99/2.
    if let (Some(p50), Some(p99)) = (quantile(lat, 0.5), quantile(lat, 0.99))
        && p99 / 2 >= SLOW_MIGRATION_NS
    {
        out.push(finding(
            "migrations_slow",
            format!(
                "Migrations were slow: 1% of migrate_misplaced calls took {} or more (half under \
                 {}).",
                ms(p99 / 2),
                ms(p50)
            ),
            json!({"p99_below_ns": p99, "p50_below_ns": p50}),
        ));
    }

    // COW-shared pages faulted, and tasks stalled on migrating pages.
    let h = &t.hint_faults;
    if m.is(Feed::Cow) && h.cow_shared > 0 {
        let migrated = m.value(Feed::CowMigrated, h.cow_shared_migrated);
        let mut evidence = json!({"cow_shared_faults": h.cow_shared, "large": h.cow_shared_large});
        if let Some(n) = migrated {
            evidence["migrated"] = json!(n);
        }
        out.push(finding(
            "cow_shared_faults",
            format!(
                "{} hint faults hit copy-on-write pages mapped by more than one process ({} on \
                 large folios; migrated: {}): seed 000's patch stops trapping such 4K pages.",
                h.cow_shared,
                h.cow_shared_large,
                m.says(Feed::CowMigrated, || h.cow_shared_migrated.to_string())
            ),
            evidence,
        ));
    }
    let g = &t.migrations;
    if m.is(Feed::Stalls) && g.stalls > 0 {
        out.push(finding(
            "migration_stalls",
            format!(
                "Tasks waited {} times ({} in all) for pages under migration \
                 (migration_entry_wait).",
                g.stalls,
                ms(g.stall_ns)
            ),
            json!({"stalls": g.stalls, "stall_ns": g.stall_ns}),
        ));
    }

    // VMAs starved past seed 002's threshold.
    let gaps: Vec<_> = r
        .processes
        .iter()
        .flat_map(|p| p.vmas.iter().map(move |v| (p, v)))
        .filter_map(|(p, v)| v.pid_inactive.map(|g| (p, v, g)))
        .filter(|(_, _, g)| g.over_threads > 0)
        .collect();
    if let Some((p, v, g)) = gaps.iter().max_by_key(|(_, _, g)| g.max_gap) {
        let skips = gaps
            .iter()
            .fold(0u64, |a, (_, _, g)| a.saturating_add(g.over_threads));
        out.push(finding(
            "vmas_starved",
            format!(
                "{skips} pid_inactive skip(s) of {} VMA(s) came after more scan sequences than the \
                 task has threads (seed 002 would have scanned them); the longest, {}-{} of {} {}, \
                 went {} sequences unscanned with {} threads.",
                gaps.len(),
                v.start,
                v.end,
                p.tgid,
                p.comm,
                g.max_gap,
                g.max_gap_threads
            ),
            json!({"skips_over_threads": skips, "vmas": gaps.len(), "max_gap": g.max_gap, "threads": g.max_gap_threads}),
        ));
    }

    // Mostly remote, nothing migrated.
    if m.is(Feed::HintFaults)
        && h.faults >= 100
        && h.remote.saturating_mul(2) >= h.faults
        && h.migrated_pages == 0
    {
        out.push(finding(
            "remote_without_migration",
            format!(
                "{} of {} hint faults were remote, yet no page migrated: the memory stayed where \
                 it was (pinned or shared pages, a memory policy, or migration failing).",
                h.remote, h.faults
            ),
            json!({"remote": h.remote, "faults": h.faults, "migrated_pages": 0}),
        ));
    }

    out.extend(scan_without_locality(&m, t));

    if r.dropped.total > 0 {
        out.push(finding(
            "events_lost",
            format!(
                "numatrace could not count {} events (see `dropped`): the numbers above are lower \
                 bounds.",
                r.dropped.total
            ),
            json!({"dropped": r.dropped.total}),
        ));
    }
    // Memory tiering: the tiering block's own sentences, with its counts as evidence.
    for sentence in &r.tiering.findings {
        out.push(finding(
            "tiering",
            format!("Memory tiering: {sentence}."),
            json!({
                "promoted_pages": r.tiering.promoted_pages,
                "demoted_pages": r.tiering.demotions.pages,
                "kernel": r.tiering.kernel,
                "mode": r.tiering.mode_end,
                "promote_rate_limit_mbps": r.tiering.promote_rate_limit_mbps_end,
            }),
        ));
    }
    out
}

/// migrate_pages or migrate_misplaced failing for at least 1% of what they tried, in a sentence
/// of the halves that were measured.
fn migrations_failing(m: &Measured, t: &Counts) -> Option<Finding> {
    let g = &t.migrations;
    let tried = g.pages_ok.saturating_add(g.pages_failed);
    let attempts = g.succeeded.saturating_add(g.not_migrated);
    let pages = m.is(Feed::MigratePages);
    let calls = m.is(Feed::MigrateMisplaced);
    let fails = |n: u64, of: u64| n > 0 && n.saturating_mul(100) >= of;
    if !(pages && fails(g.pages_failed, tried) || calls && fails(g.not_migrated, attempts)) {
        return None;
    }
    let mut parts = Vec::new();
    let mut evidence = serde_json::Map::new();
    if pages {
        parts.push(format!(
            "{} of {} pages migrate_pages() was asked to move for NUMA balancing stayed put",
            g.pages_failed, tried
        ));
        evidence.insert("pages_failed".into(), json!(g.pages_failed));
        evidence.insert("pages_tried".into(), json!(tried));
    }
    if calls {
        parts.push(format!(
            "{} of {} migrate_misplaced calls did not migrate",
            g.not_migrated, attempts
        ));
        evidence.insert("not_migrated".into(), json!(g.not_migrated));
        evidence.insert("attempts".into(), json!(attempts));
    }
    Some(finding(
        "migrations_failing",
        format!("Migrations failed: {}.", parts.join(", and ")),
        serde_json::Value::Object(evidence),
    ))
}

/// Many PTEs made PROT_NONE, yet no page migrated and no task moved. Only where all of that
/// was measured: a 0 from a hook that did not attach proves nothing.
fn scan_without_locality(m: &Measured, t: &Counts) -> Option<Finding> {
    let needs = [Feed::Pte, Feed::HintFaults, Feed::Moves, Feed::Swaps];
    let (h, p) = (&t.hint_faults, &t.placement);
    if !needs.iter().all(|f| m.is(*f))
        || t.scan.pte_updates < 1000
        || h.migrated_pages != 0
        || p.moves.saturating_add(p.swaps_out) != 0
    {
        return None;
    }
    let scan_ns = m.value(Feed::Scan, t.scan.time_ns);
    let mut evidence = json!({"pte_updates": t.scan.pte_updates, "hint_faults": h.faults});
    if let Some(ns) = scan_ns {
        evidence["scan_time_ns"] = json!(ns);
    }
    Some(finding(
        "scan_without_locality",
        format!(
            "Scanning made {} PTEs PROT_NONE and took {} hint faults{}, but neither migrated a \
             page nor moved a task: it bought no locality.",
            t.scan.pte_updates,
            h.faults,
            scan_ns.map_or(String::new(), |ns| format!(" ({} of scanning)", ms(ns)))
        ),
        evidence,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        engine::Snapshot,
        kernel::facts::KernelSummary,
        model::{Filter, Log2Bucket, TaskRecord, Window},
    };
    use numatrace_common::TaskStats;

    fn report(f: impl Fn(&mut TaskStats)) -> StatReport {
        let mut s = TaskStats::new(5, 5);
        s.comm[..2].copy_from_slice(b"db");
        f(&mut s);
        let snap = Snapshot {
            self_tgid: 999,
            tasks: vec![TaskRecord::from_stats(&s, false)],
            ..Snapshot::default()
        };
        StatReport::new(
            KernelSummary {
                release: "6.12".into(),
                numa_nodes: 2,
                numa_balancing: Some(1),
            },
            Window::system_wide(10.0, true),
            vec![],
            &snap.delta(&Snapshot::default()),
            &Filter::default(),
        )
    }

    fn rules(r: &StatReport) -> Vec<String> {
        findings(r).into_iter().map(|f| f.rule).collect()
    }

    #[test]
    fn quiet_window_has_no_findings() {
        assert!(rules(&report(|_| {})).is_empty());
    }

    #[test]
    fn each_rule_fires_on_its_evidence() {
        let r = report(|s| {
            s.scan.runtime_in_scan_ns = 50_000_000;
            s.runtime_first_ns = 1;
            s.runtime_last_ns = 1 + 1_000_000_000;
            s.scan.pte_updates = 5000;
            s.hint_faults.faults = 400;
            s.hint_faults.local = 100;
        });
        let got = rules(&r);
        assert!(got.contains(&"scan_share_over_cap".to_owned()), "{got:?}");
        assert!(got.contains(&"remote_without_migration".to_owned()));
        assert!(got.contains(&"scan_without_locality".to_owned()));
        let r = report(|s| {
            s.migrations.pages_ok = 90;
            s.migrations.pages_failed = 10;
            s.hint_faults.cow_shared = 3;
            s.migrations.stalls = 2;
            s.migrations.stall_ns = 4_000_000;
            s.hint_faults.migrated_pages = 90;
        });
        let got = rules(&r);
        for want in [
            "migrations_failing",
            "cow_shared_faults",
            "migration_stalls",
        ] {
            assert!(got.contains(&want.to_owned()), "{want} in {got:?}");
        }
        assert!(!got.contains(&"scan_without_locality".to_owned()));
    }

    #[test]
    fn a_zero_whose_hook_did_not_attach_proves_nothing() {
        let scanning = |s: &mut TaskStats| {
            s.scan.pte_updates = 5000;
            s.migrations.pages_ok = 90;
            s.migrations.pages_failed = 10;
            s.hint_faults.cow_shared = 3;
        };
        let all = report(scanning);
        assert!(rules(&all).contains(&"scan_without_locality".to_owned()));
        let mut r = report(scanning);
        r.hooks = crate::report::measured::tests::all_but(&[
            "task_numa_fault",
            "migrate_misplaced_folio|_page",
        ]);
        let got = findings(&r);
        let names: Vec<_> = got.iter().map(|f| f.rule.as_str()).collect();
        assert!(!names.contains(&"scan_without_locality"), "{names:?}");
        let failing = got.iter().find(|f| f.rule == "migrations_failing").unwrap();
        assert!(
            !failing.sentence.contains("migrate_misplaced"),
            "{}",
            failing.sentence
        );
        assert!(!failing.evidence.contains_key("attempts"));
        let cow = got.iter().find(|f| f.rule == "cow_shared_faults").unwrap();
        assert!(
            cow.sentence
                .contains("migrated: not measured: migrate_misplaced_folio|_page not attached"),
            "{}",
            cow.sentence
        );
        assert!(!cow.evidence.contains_key("migrated"));
    }

    #[test]
    fn slow_only_when_the_bucket_lies_beyond_a_millisecond() {
        let mut r = report(|_| {});
        r.histograms.migrate_latency_ns = vec![Log2Bucket {
            lt: 1 << 20,
            count: 100,
        }];
        assert!(
            !rules(&r).contains(&"migrations_slow".to_owned()),
            "[0.52, 1.05) ms"
        );
        r.histograms.migrate_latency_ns[0].lt = 1 << 21;
        assert!(
            rules(&r).contains(&"migrations_slow".to_owned()),
            "[1.05, 2.1) ms"
        );
    }
}
