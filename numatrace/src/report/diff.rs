//! `report --diff BEFORE AFTER`: the same metrics of two windows side by side (an unpatched and
//! a patched kernel, or before and after a tunable), totals and per-second rates.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::stat::StatReport;
use crate::{model::quantile, text_escape::Escaped};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiffRow {
    pub metric: String,
    pub before: f64,
    pub after: f64,
    /// after - before.
    pub change: f64,
    /// Relative change in percent (None when `before` is 0).
    pub change_pct: Option<f64>,
    /// Counts compared as rates (per second of each window), so that windows of different
    /// lengths compare.
    pub per_second: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diff {
    pub schema: String,
    pub before_kernel: String,
    pub after_kernel: String,
    pub before_window_s: f64,
    pub after_window_s: f64,
    pub rows: Vec<DiffRow>,
}

pub const DIFF_SCHEMA: &str = "numatrace.diff/1";

/// The metrics compared: name, whether a rate, and how to read it from a report.
type Metric = (&'static str, bool, fn(&StatReport) -> Option<f64>);

const METRICS: &[Metric] = &[
    ("scan calls/s", true, |r| Some(r.totals.scan.calls as f64)),
    ("scan time ms/s", true, |r| {
        Some(r.totals.scan.time_ns as f64 / 1e6)
    }),
    ("scan share of run time %", false, |r| {
        r.totals.scan.share.map(|s| 100.0 * s)
    }),
    ("PTE updates/s", true, |r| {
        Some(r.totals.scan.pte_updates as f64)
    }),
    ("hint faults/s", true, |r| {
        Some(r.totals.hint_faults.faults as f64)
    }),
    ("hint faults local %", false, |r| {
        let h = &r.totals.hint_faults;
        (h.faults > 0).then(|| 100.0 * h.local as f64 / h.faults as f64)
    }),
    ("hint faults on THPs/s", true, |r| {
        Some(r.totals.hint_faults.faults_thp as f64)
    }),
    ("pages migrated/s", true, |r| {
        Some(r.totals.hint_faults.migrated_pages as f64)
    }),
    ("pages failing migration/s", true, |r| {
        Some(r.totals.migrations.pages_failed as f64)
    }),
    ("migrate_misplaced not migrated/s", true, |r| {
        Some(r.totals.migrations.not_migrated as f64)
    }),
    ("migration latency mean µs", false, |r| {
        r.totals.migrations.latency_ns_mean.map(|n| n / 1e3)
    }),
    ("migration latency p99 < µs", false, |r| {
        quantile(&r.histograms.migrate_latency_ns, 0.99).map(|n| n as f64 / 1e3)
    }),
    ("migration stalls/s", true, |r| {
        Some(r.totals.migrations.stalls as f64)
    }),
    ("COW-shared hint faults/s", true, |r| {
        Some(r.totals.hint_faults.cow_shared as f64)
    }),
    ("skipped VMAs/s", true, |r| {
        Some(r.totals.skipped_vmas_total as f64)
    }),
    ("skipped VMAs pid_inactive/s", true, |r| {
        Some(r.totals.skipped_vmas.get("pid_inactive") as f64)
    }),
    ("task moves/s", true, |r| {
        Some(r.totals.placement.moves as f64)
    }),
    ("task swaps/s", true, |r| {
        Some(r.totals.placement.swaps_out as f64)
    }),
    ("events dropped", false, |r| Some(r.dropped.total as f64)),
];

pub fn diff(before: &StatReport, after: &StatReport) -> Diff {
    let rate = |r: &StatReport, v: f64| {
        if r.window.duration_s > 0.0 {
            v / r.window.duration_s
        } else {
            0.0
        }
    };
    let rows = METRICS
        .iter()
        .filter_map(|(name, per_second, get)| {
            let (b, a) = (get(before), get(after));
            if b.is_none() && a.is_none() {
                return None;
            }
            let (mut b, mut a) = (b.unwrap_or(0.0), a.unwrap_or(0.0));
            if *per_second {
                (b, a) = (rate(before, b), rate(after, a));
            }
            Some(DiffRow {
                metric: (*name).to_owned(),
                before: b,
                after: a,
                change: a - b,
                change_pct: (b != 0.0).then(|| 100.0 * (a - b) / b),
                per_second: *per_second,
            })
        })
        .collect();
    Diff {
        schema: DIFF_SCHEMA.to_owned(),
        before_kernel: before.kernel.release.clone(),
        after_kernel: after.kernel.release.clone(),
        before_window_s: before.window.duration_s,
        after_window_s: after.window.duration_s,
        rows,
    }
}

fn num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

impl Diff {
    pub fn unchanged(&self) -> bool {
        self.rows.iter().all(|r| r.change == 0.0)
    }

    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "before: kernel {}, {:.1} s    after: kernel {}, {:.1} s",
            Escaped(&self.before_kernel),
            self.before_window_s,
            Escaped(&self.after_kernel),
            self.after_window_s
        );
        let _ = writeln!(
            s,
            "{:<34} {:>12} {:>12} {:>12} {:>9}",
            "METRIC", "BEFORE", "AFTER", "CHANGE", "CHANGE%"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<34} {:>12} {:>12} {:>12} {:>9}",
                r.metric,
                num(r.before),
                num(r.after),
                if r.change == 0.0 {
                    "=".to_owned()
                } else if r.change > 0.0 {
                    format!("+{}", num(r.change))
                } else {
                    num(r.change)
                },
                r.change_pct
                    .map_or_else(|| "-".to_owned(), |p| format!("{p:+.1}%"))
            );
        }
        if self.unchanged() {
            let _ = writeln!(s, "No change.");
        }
        s
    }
}
