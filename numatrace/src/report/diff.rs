//! `report --diff BASE PATCHED`: two windows side by side as a regression thread argues them —
//! mmtests' "Ops" rows with the change in percent, numatrace's own per-hook counts (totals as
//! rates), the verdicts and findings of each, and the settings that differ — in 80 columns.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{
    context::wrap_words,
    findings::findings,
    measured::Feed,
    mmtests::{OpsDiffRow, OpsRow, ops_diff, ops_diff_text},
    stat::StatReport,
    verdicts::{Verdict, offline_verdicts},
};
use crate::{
    capture::state::{State, SystemState},
    model::{Item, quantile},
    text_escape::{Escaped, escape},
};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiffRow {
    pub metric: String,
    /// `None` (null): not measured in that window.
    pub before: Option<f64>,
    pub after: Option<f64>,
    /// after - before, when both were measured.
    pub change: Option<f64>,
    /// Relative change in percent (None when `before` is 0 or either is not measured).
    pub change_pct: Option<f64>,
    /// Counts compared as rates (per second of each window), so that windows of different
    /// lengths compare.
    pub per_second: bool,
}

/// One seed's verdict on each window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VerdictPair {
    pub patch: String,
    pub before: Option<Verdict>,
    pub after: Option<Verdict>,
}

/// A setting whose value differs between the windows' starts (`absent (why)` when missing).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SettingDiff {
    pub setting: String,
    pub before: String,
    pub after: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diff {
    pub schema: String,
    #[serde(default)]
    pub before_name: String,
    #[serde(default)]
    pub after_name: String,
    pub before_kernel: String,
    pub after_kernel: String,
    pub before_window_s: f64,
    pub after_window_s: f64,
    /// mmtests' rows of both windows (empty when either capture lacks them: see
    /// `mmtests_absent`).
    #[serde(default)]
    pub mmtests: Vec<OpsDiffRow>,
    #[serde(default)]
    pub mmtests_absent: Option<String>,
    pub rows: Vec<DiffRow>,
    #[serde(default)]
    pub verdicts: Vec<VerdictPair>,
    #[serde(default)]
    pub findings_before: Vec<String>,
    #[serde(default)]
    pub findings_after: Vec<String>,
    /// Settings (sysctls, tunables, THP, kernel config, command line, nodes) that differ at the
    /// start of the windows; `settings_compared` of them were compared.
    #[serde(default)]
    pub settings: Vec<SettingDiff>,
    #[serde(default)]
    pub settings_compared: usize,
}

/// One window of a diff: a name for its column, its report, and what the capture holds.
pub struct Side<'a> {
    pub name: String,
    pub stat: &'a StatReport,
    pub mmtests: Option<&'a [OpsRow]>,
    pub start: Option<&'a State>,
}

/// /2: `before`, `after` and `change` of a row may be null (not measured), and the mmtests
/// rows, verdicts, findings and settings came in.
pub const DIFF_SCHEMA: &str = "numatrace.diff/2";

/// The metrics compared: name, the hooks that feed it (`None`: numatrace's own), whether a
/// rate, and how to read it from a report.
type Metric = (
    &'static str,
    Option<Feed>,
    bool,
    fn(&StatReport) -> Option<f64>,
);

const METRICS: &[Metric] = &[
    ("scan calls/s", Some(Feed::Scan), true, |r| {
        Some(r.totals.scan.calls as f64)
    }),
    ("scan time ms/s", Some(Feed::Scan), true, |r| {
        Some(r.totals.scan.time_ns as f64 / 1e6)
    }),
    ("scan share of run time %", Some(Feed::Scan), false, |r| {
        r.totals.scan.share.map(|s| 100.0 * s)
    }),
    ("PTE updates/s", Some(Feed::Pte), true, |r| {
        Some(r.totals.scan.pte_updates as f64)
    }),
    ("hint faults/s", Some(Feed::HintFaults), true, |r| {
        Some(r.totals.hint_faults.faults as f64)
    }),
    ("hint faults local %", Some(Feed::HintFaults), false, |r| {
        let h = &r.totals.hint_faults;
        (h.faults > 0).then(|| 100.0 * h.local as f64 / h.faults as f64)
    }),
    ("hint faults on THPs/s", Some(Feed::HintFaults), true, |r| {
        Some(r.totals.hint_faults.faults_thp as f64)
    }),
    ("pages migrated/s", Some(Feed::HintFaults), true, |r| {
        Some(r.totals.hint_faults.migrated_pages as f64)
    }),
    (
        "pages failing migration/s",
        Some(Feed::MigratePages),
        true,
        |r| Some(r.totals.migrations.pages_failed as f64),
    ),
    (
        "migrate_misplaced not migrated/s",
        Some(Feed::MigrateMisplaced),
        true,
        |r| Some(r.totals.migrations.not_migrated as f64),
    ),
    (
        "migration latency mean µs",
        Some(Feed::MigrateMisplaced),
        false,
        |r| r.totals.migrations.latency_ns_mean.map(|n| n / 1e3),
    ),
    (
        "migration latency p99 < µs",
        Some(Feed::MigrateMisplaced),
        false,
        |r| quantile(&r.histograms.migrate_latency_ns, 0.99).map(|n| n as f64 / 1e3),
    ),
    ("migration stalls/s", Some(Feed::Stalls), true, |r| {
        Some(r.totals.migrations.stalls as f64)
    }),
    ("COW-shared hint faults/s", Some(Feed::Cow), true, |r| {
        Some(r.totals.hint_faults.cow_shared as f64)
    }),
    ("skipped VMAs/s", Some(Feed::SkipVma), true, |r| {
        Some(r.totals.skipped_vmas_total as f64)
    }),
    (
        "skipped VMAs pid_inactive/s",
        Some(Feed::SkipVma),
        true,
        |r| Some(r.totals.skipped_vmas.get("pid_inactive") as f64),
    ),
    ("task moves/s", Some(Feed::Moves), true, |r| {
        Some(r.totals.placement.moves as f64)
    }),
    ("task swaps/s", Some(Feed::Swaps), true, |r| {
        Some(r.totals.placement.swaps_out as f64)
    }),
    ("events dropped", None, false, |r| {
        Some(r.dropped.total as f64)
    }),
];

pub fn diff(before: &Side, after: &Side) -> Diff {
    // A window of no length has no rate.
    let rate =
        |r: &StatReport, v: f64| (r.window.duration_s > 0.0).then(|| v / r.window.duration_s);
    let rows = METRICS
        .iter()
        .filter_map(|(name, feed, per_second, get)| {
            // Not measured in a window (its hook did not attach): `None`, never 0.
            let read = |r: &StatReport| {
                let measured = feed.is_none_or(|f| r.measured().is(f));
                get(r).filter(|_| measured)
            };
            let (mut b, mut a) = (read(before.stat), read(after.stat));
            if b.is_none() && a.is_none() {
                return None;
            }
            if *per_second {
                b = b.and_then(|b| rate(before.stat, b));
                a = a.and_then(|a| rate(after.stat, a));
            }
            let change = b.zip(a).map(|(b, a)| a - b);
            Some(DiffRow {
                metric: (*name).to_owned(),
                before: b,
                after: a,
                change,
                change_pct: b
                    .zip(a)
                    .filter(|(b, _)| *b != 0.0)
                    .map(|(b, a)| 100.0 * (a - b) / b),
                per_second: *per_second,
            })
        })
        .collect();
    let (mmtests, mmtests_absent) = match (before.mmtests, after.mmtests) {
        (Some(b), Some(a)) => (ops_diff(b, a), None),
        (b, _) => (
            Vec::new(),
            Some(format!(
                "{} has no /proc/vmstat of both ends of its window (written by an older \
                 numatrace, or cut short)",
                if b.is_none() {
                    &before.name
                } else {
                    &after.name
                }
            )),
        ),
    };
    let (vb, va) = (offline_verdicts(before.stat), offline_verdicts(after.stat));
    let mut verdicts: Vec<VerdictPair> = vb
        .iter()
        .map(|v| VerdictPair {
            patch: v.patch.to_owned(),
            before: Some(v.verdict),
            after: va.iter().find(|w| w.patch == v.patch).map(|w| w.verdict),
        })
        .collect();
    for w in va.iter().filter(|w| !vb.iter().any(|v| v.patch == w.patch)) {
        verdicts.push(VerdictPair {
            patch: w.patch.to_owned(),
            before: None,
            after: Some(w.verdict),
        });
    }
    let sentences = |r: &StatReport| findings(r).into_iter().map(|f| f.sentence).collect();
    let (settings, settings_compared) = match (before.start, after.start) {
        (Some(b), Some(a)) => setting_diffs(&b.system, &a.system),
        _ => (Vec::new(), 0),
    };
    Diff {
        schema: DIFF_SCHEMA.to_owned(),
        before_name: before.name.clone(),
        after_name: after.name.clone(),
        before_kernel: before.stat.kernel.release.clone(),
        after_kernel: after.stat.kernel.release.clone(),
        before_window_s: before.stat.window.duration_s,
        after_window_s: after.stat.window.duration_s,
        mmtests,
        mmtests_absent,
        rows,
        verdicts,
        findings_before: sentences(before.stat),
        findings_after: sentences(after.stat),
        settings,
        settings_compared,
    }
}

/// A setting as the diff shows it.
fn item_text(i: Option<&Item<String>>) -> String {
    match i {
        Some(Item::Present(v)) => v.clone(),
        Some(Item::Absent { absent }) => format!("absent ({absent})"),
        None => "absent".to_owned(),
    }
}

/// Every setting of both starts, flattened to `kind name` → value.
fn settings_of(s: &SystemState) -> std::collections::BTreeMap<String, Item<String>> {
    let mut out = std::collections::BTreeMap::new();
    for (k, v) in &s.sysctls {
        out.insert(format!("sysctl {k}"), v.clone());
    }
    for (k, v) in &s.tiering {
        out.insert(format!("tiering {k}"), v.clone());
    }
    let mut map = |kind: &str, m: &Item<std::collections::BTreeMap<String, String>>| match m {
        Item::Present(m) => {
            for (k, v) in m {
                out.insert(format!("{kind} {k}"), Item::Present(v.clone()));
            }
        }
        Item::Absent { absent } => {
            out.insert(kind.to_owned(), Item::absent(absent.clone()));
        }
    };
    map("tunable", &s.tunables);
    map("THP", &s.thp);
    // khugepaged's counters are activity, not settings.
    for counter in [
        "THP khugepaged/full_scans",
        "THP khugepaged/pages_collapsed",
    ] {
        out.remove(counter);
    }
    match &s.config {
        Item::Present(c) => {
            for (k, v) in &c.options {
                out.insert(format!("config {k}"), Item::Present(v.clone()));
            }
        }
        Item::Absent { absent } => {
            out.insert("config".into(), Item::absent(absent.clone()));
        }
    }
    out.insert("kernel command line".into(), s.cmdline.clone());
    let nodes = match &s.nodes {
        Item::Present(n) => Item::Present(
            n.iter()
                .map(|n| {
                    format!(
                        "node{} cpus {} distances {}",
                        n.node,
                        n.cpus,
                        n.distances
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(" ")
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        ),
        Item::Absent { absent } => Item::absent(absent.clone()),
    };
    out.insert("nodes".into(), nodes);
    out
}

fn setting_diffs(before: &SystemState, after: &SystemState) -> (Vec<SettingDiff>, usize) {
    let (b, a) = (settings_of(before), settings_of(after));
    let mut names: Vec<&String> = b.keys().chain(a.keys()).collect();
    names.sort();
    names.dedup();
    let compared = names.len();
    let diffs = names
        .into_iter()
        .filter(|n| b.get(*n) != a.get(*n))
        .map(|n| SettingDiff {
            setting: n.clone(),
            before: item_text(b.get(n)),
            after: item_text(a.get(n)),
        })
        .collect();
    (diffs, compared)
}

fn num(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(0.0) => "0".into(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) => format!("{v:.2}"),
    }
}

/// A column head: the capture's name, cut to fit.
fn head(name: &str, width: usize) -> String {
    escape(name).chars().take(width).collect()
}

impl Diff {
    /// Every row the same in both windows (a row measured in one window only has changed).
    pub fn unchanged(&self) -> bool {
        self.rows
            .iter()
            .all(|r| r.before.is_some() == r.after.is_some() && r.change.is_none_or(|c| c == 0.0))
            && self.mmtests.iter().all(|r| r.base == r.patched)
    }

    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for (role, name, kernel, secs) in [
            (
                "base:    ",
                &self.before_name,
                &self.before_kernel,
                self.before_window_s,
            ),
            (
                "patched: ",
                &self.after_name,
                &self.after_kernel,
                self.after_window_s,
            ),
        ] {
            let line = format!("{} (kernel {}, {secs:.1} s)", escape(name), escape(kernel));
            s.push_str(&wrap_words(role, "         ", &line));
        }
        let _ = writeln!(
            s,
            "\nmmtests \"Ops\" over each window (/proc/vmstat at its start and end):"
        );
        match &self.mmtests_absent {
            Some(why) => {
                s.push_str(&wrap_words("  not compared: ", "    ", &escape(why)));
            }
            None => s.push_str(&ops_diff_text(
                &self.mmtests,
                &self.before_name,
                &self.after_name,
            )),
        }
        let _ = writeln!(
            s,
            "\nnumatrace's own counts (per-second rates of each window):"
        );
        let _ = writeln!(
            s,
            "{:<32} {:>11} {:>11} {:>12} {:>9}",
            "METRIC",
            head(&self.before_name, 11),
            head(&self.after_name, 11),
            "CHANGE",
            "CHANGE%"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<32} {:>11} {:>11} {:>12} {:>9}",
                r.metric,
                num(r.before),
                num(r.after),
                match r.change {
                    None => "-".to_owned(),
                    Some(0.0) => "=".to_owned(),
                    Some(c) if c > 0.0 => format!("+{}", num(Some(c))),
                    c => num(c),
                },
                r.change_pct
                    .map_or_else(|| "-".to_owned(), |p| format!("{p:+.1}%"))
            );
        }
        if self
            .rows
            .iter()
            .any(|r| r.before.is_none() || r.after.is_none())
        {
            let _ = writeln!(
                s,
                "(- : not measured in that window: its hook did not attach, or nothing to divide)"
            );
        }
        if self.unchanged() {
            let _ = writeln!(s, "No change.");
        }
        let _ = writeln!(s, "\nVerdicts (from each capture's evidence):");
        for v in &self.verdicts {
            let show = |v: Option<Verdict>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
            let _ = writeln!(
                s,
                "  {}  base: {:<22} patched: {}",
                Escaped(&v.patch),
                show(v.before),
                show(v.after)
            );
        }
        for (name, list) in [
            ("base", &self.findings_before),
            ("patched", &self.findings_after),
        ] {
            let _ = writeln!(s, "\nFindings, {name}:");
            if list.is_empty() {
                let _ = writeln!(s, "  nothing stands out.");
            }
            for f in list {
                s.push_str(&wrap_words("  - ", "    ", &escape(f)));
            }
        }
        let _ = writeln!(
            s,
            "\nSettings that differ at the start of the windows ({} of {} compared):",
            self.settings.len(),
            self.settings_compared
        );
        if self.settings_compared == 0 {
            let _ = writeln!(s, "  not compared: a capture has no state at its start");
        }
        for d in &self.settings {
            let _ = writeln!(s, "  {}:", Escaped(&d.setting));
            s.push_str(&wrap_words(
                "    base:    ",
                "             ",
                &escape(&d.before),
            ));
            s.push_str(&wrap_words(
                "    patched: ",
                "             ",
                &escape(&d.after),
            ));
        }
        s
    }
}
