//! mmtests' NUMA rows, computed from a capture's `/proc/vmstat` at the start and the end of
//! its window exactly as mmtests' `MonitorMmtestsvmstat.pm` computes them, and printed as its
//! `compare-mmtests.pl` prints its "Ops" block — the terms NUMA-balancing regression threads on
//! LKML are argued in.
//!
//! Labels are those of mmtests 2014–2019, which most threads quote (newer mmtests calls the
//! PTE rows "NUMA base-page range updates", "NUMA PTE updates", "NUMA PMD updates"). As mmtests
//! does: "NUMA page range updates" adds 512 × huge PMD updates to `numa_pte_updates`, which
//! already counts a huge PMD as 512 pages; "NUMA hint local percent" is 100 when there was no
//! hint fault; "AutoNUMA cost" is (7 × PTE updates + 5000 × hint faults + 19 × pages
//! migrated) / 10⁶ (the 519 × pages-migrated term of its source never takes effect).

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::{capture::state::State, text_escape::Escaped};

/// One row: its value over the window, or why it cannot be computed (a counter this kernel
/// lacks; numa_hit and its siblings frozen by `vm.numa_stat=0`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpsRow {
    pub label: String,
    pub value: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub absent: Option<String>,
}

/// A row's formula over the window's vmstat deltas (`None`: a counter is missing).
type Formula = fn(&dyn Fn(&str) -> Option<f64>) -> Option<f64>;

/// mmtests' rows, in its order; `true`: an allocation counter (`vm.numa_stat` gates it).
const ROWS: &[(&str, bool, Formula)] = &[
    ("NUMA alloc hit", true, |d| d("numa_hit")),
    ("NUMA alloc miss", true, |d| d("numa_miss")),
    ("NUMA interleave hit", true, |d| d("numa_interleave")),
    ("NUMA alloc local", true, |d| d("numa_local")),
    ("NUMA base PTE updates", false, |d| d("numa_pte_updates")),
    ("NUMA huge PMD updates", false, |d| {
        d("numa_huge_pte_updates")
    }),
    ("NUMA page range updates", false, |d| {
        Some(d("numa_pte_updates")? + 512.0 * d("numa_huge_pte_updates")?)
    }),
    ("NUMA hint faults", false, |d| d("numa_hint_faults")),
    ("NUMA hint local faults", false, |d| {
        d("numa_hint_faults_local")
    }),
    ("NUMA hint local percent", false, |d| {
        let faults = d("numa_hint_faults")?;
        let local = d("numa_hint_faults_local")?;
        Some(if faults == 0.0 {
            100.0
        } else {
            local * 100.0 / faults
        })
    }),
    ("NUMA pages migrated", false, |d| d("numa_pages_migrated")),
    ("AutoNUMA cost", false, |d| {
        Some(
            (7.0 * d("numa_pte_updates")?
                + 5000.0 * d("numa_hint_faults")?
                + 19.0 * d("numa_pages_migrated")?)
                / 1e6,
        )
    }),
    ("Page migrate success", false, |d| d("pgmigrate_success")),
    ("Page migrate failure", false, |d| d("pgmigrate_fail")),
    ("THP fault alloc", false, |d| d("thp_fault_alloc")),
    ("THP fault fallback", false, |d| d("thp_fault_fallback")),
];

/// The labels of every row, in order.
pub fn labels() -> impl Iterator<Item = &'static str> {
    ROWS.iter().map(|(l, _, _)| *l)
}

/// The rows over the window from `start` to `end`.
pub fn ops(start: &State, end: &State) -> Vec<OpsRow> {
    let frozen = start
        .system
        .sysctls
        .get("vm.numa_stat")
        .and_then(|v| v.value())
        .is_some_and(|v| v == "0");
    ROWS.iter()
        .map(|(label, alloc, formula)| {
            let missing = std::cell::RefCell::new(Vec::new());
            let backwards = std::cell::RefCell::new(Vec::new());
            let delta = |name: &str| -> Option<f64> {
                match (start.counter(name), end.counter(name)) {
                    (Some(a), Some(b)) if b >= a => Some((b - a) as f64),
                    // Went backwards (a crafted capture): no window can be computed from it.
                    (Some(_), Some(_)) => {
                        backwards.borrow_mut().push(name.to_owned());
                        None
                    }
                    _ => {
                        missing.borrow_mut().push(name.to_owned());
                        None
                    }
                }
            };
            let value = formula(&delta);
            let absent = if *alloc && frozen {
                Some("vm.numa_stat=0: the kernel did not count NUMA allocations".to_owned())
            } else if value.is_none() {
                let names = missing.borrow().join(", ");
                Some(
                    match (
                        start.system.vmstat.why_absent(),
                        end.system.vmstat.why_absent(),
                    ) {
                        (Some(why), _) | (_, Some(why)) => why.to_owned(),
                        _ if !backwards.borrow().is_empty() => {
                            format!(
                                "{} went backwards in this capture",
                                backwards.borrow().join(", ")
                            )
                        }
                        _ => format!("no {names} in this kernel's /proc/vmstat"),
                    },
                )
            } else {
                None
            };
            OpsRow {
                label: (*label).to_owned(),
                value: if absent.is_some() { None } else { value },
                absent,
            }
        })
        .collect()
}

/// mmtests' cell: `%15.2f`, or `-` for a row that cannot be computed.
fn cell(v: Option<f64>) -> String {
    v.map_or_else(|| format!("{:>15}", "-"), |v| format!("{v:>15.2}"))
}

/// The "Ops" block of one window (mmtests' layout: `Ops`, the label in 28 columns, the value
/// in 15), then why any row is `-`.
pub fn ops_text(rows: &[OpsRow]) -> String {
    let mut s = String::new();
    for r in rows {
        let _ = writeln!(s, "{:<3} {:<28}{}", "Ops", r.label, cell(r.value));
    }
    notes(
        &mut s,
        rows.iter().map(|r| (r.label.as_str(), r.absent.as_deref())),
    );
    s
}

fn notes<'a>(s: &mut String, rows: impl Iterator<Item = (&'a str, Option<&'a str>)>) {
    for (label, why) in rows {
        if let Some(why) = why {
            let _ = writeln!(s, "  - {label}: not measured: {}", Escaped(why));
        }
    }
}

/// One row of two windows side by side.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpsDiffRow {
    pub label: String,
    pub base: Option<f64>,
    pub patched: Option<f64>,
    /// (patched − base) / base × 100; `None` when either is not measured or base is 0.
    pub change_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub absent: Option<String>,
}

pub fn ops_diff(base: &[OpsRow], patched: &[OpsRow]) -> Vec<OpsDiffRow> {
    base.iter()
        .zip(patched)
        .map(|(b, p)| OpsDiffRow {
            label: b.label.clone(),
            base: b.value,
            patched: p.value,
            change_pct: match (b.value, p.value) {
                (Some(b), Some(p)) if b != 0.0 => Some((p - b) / b * 100.0),
                _ => None,
            },
            absent: b.absent.clone().or_else(|| p.absent.clone()),
        })
        .collect()
}

/// Two windows side by side in mmtests' columns — base and patched in 15 columns, then the
/// change as compare-mmtests prints it for benchmark results, `(  12.34%)` (it prints none for
/// "Ops" rows; maintainers ask for one) — in 73 columns, so that it pastes into a mail.
pub fn ops_diff_text(rows: &[OpsDiffRow], base_name: &str, patched_name: &str) -> String {
    let mut s = String::new();
    let head = |n: &str| {
        let mut n = Escaped(n).to_string();
        if n.chars().count() > 14 {
            n = n.chars().take(14).collect();
        }
        n
    };
    let _ = writeln!(
        s,
        "{:>32}{:>15}{:>15}",
        "",
        head(base_name),
        head(patched_name)
    );
    for r in rows {
        let pct = match r.change_pct {
            Some(p) => format!(" ({p:>7.2}%)"),
            None => format!(" ({:>7} )", "-"),
        };
        let _ = writeln!(
            s,
            "{:<3} {:<28}{}{}{pct}",
            "Ops",
            r.label,
            cell(r.base),
            cell(r.patched)
        );
    }
    notes(
        &mut s,
        rows.iter().map(|r| (r.label.as_str(), r.absent.as_deref())),
    );
    s
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::Item;

    fn state(counters: &[(&str, u64)]) -> State {
        let mut s = State::default();
        s.system.vmstat = Item::Present(
            counters
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect::<BTreeMap<_, _>>(),
        );
        s
    }

    fn row<'a>(rows: &'a [OpsRow], label: &str) -> &'a OpsRow {
        rows.iter().find(|r| r.label == label).unwrap()
    }

    /// Hand-computed from the raw counters, as mmtests' perl computes them.
    #[test]
    fn derived_rows_are_computed_as_mmtests_does() {
        let start = state(&[
            ("numa_hit", 1000),
            ("numa_miss", 0),
            ("numa_interleave", 5),
            ("numa_local", 990),
            ("numa_pte_updates", 10_000),
            ("numa_huge_pte_updates", 10),
            ("numa_hint_faults", 400),
            ("numa_hint_faults_local", 100),
            ("numa_pages_migrated", 50),
            ("pgmigrate_success", 60),
            ("pgmigrate_fail", 1),
            ("thp_fault_alloc", 3),
            ("thp_fault_fallback", 0),
        ]);
        let end = state(&[
            ("numa_hit", 3000),
            ("numa_miss", 7),
            ("numa_interleave", 5),
            ("numa_local", 2990),
            ("numa_pte_updates", 30_480),
            ("numa_huge_pte_updates", 30),
            ("numa_hint_faults", 1400),
            ("numa_hint_faults_local", 850),
            ("numa_pages_migrated", 1050),
            ("pgmigrate_success", 1060),
            ("pgmigrate_fail", 2),
            ("thp_fault_alloc", 13),
            ("thp_fault_fallback", 0),
        ]);
        let r = ops(&start, &end);
        let v = |l: &str| row(&r, l).value.unwrap();
        assert_eq!(v("NUMA alloc hit"), 2000.0);
        assert_eq!(v("NUMA alloc miss"), 7.0);
        assert_eq!(v("NUMA interleave hit"), 0.0);
        assert_eq!(v("NUMA base PTE updates"), 20_480.0);
        assert_eq!(v("NUMA huge PMD updates"), 20.0);
        // 20 480 + 512 × 20 = 30 720.
        assert_eq!(v("NUMA page range updates"), 30_720.0);
        assert_eq!(v("NUMA hint faults"), 1000.0);
        assert_eq!(v("NUMA hint local faults"), 750.0);
        assert_eq!(v("NUMA hint local percent"), 75.0);
        assert_eq!(v("NUMA pages migrated"), 1000.0);
        // (7 × 20 480 + 5000 × 1000 + 19 × 1000) / 10⁶ = 5.162 36.
        assert!((v("AutoNUMA cost") - 5.16236).abs() < 1e-12);
        assert_eq!(v("Page migrate success"), 1000.0);
        let text = ops_text(&r);
        // mmtests' layout: "Ops", the label in 28 columns, the value as %15.2f.
        for (label, value) in [
            ("NUMA page range updates", "30720.00"),
            ("AutoNUMA cost", "5.16"),
            ("NUMA hint local percent", "75.00"),
        ] {
            let line = format!("Ops {label:<28}{value:>15}\n");
            assert!(text.contains(&line), "{line:?} in\n{text}");
            assert_eq!(line.len(), 3 + 1 + 28 + 15 + 1);
        }
    }

    #[test]
    fn no_hint_fault_is_100_percent_local_and_a_missing_counter_is_not_zero() {
        let start = state(&[("numa_hint_faults", 5), ("numa_hint_faults_local", 5)]);
        let end = state(&[("numa_hint_faults", 5), ("numa_hint_faults_local", 5)]);
        let r = ops(&start, &end);
        assert_eq!(row(&r, "NUMA hint local percent").value, Some(100.0));
        let huge = row(&r, "NUMA huge PMD updates");
        assert_eq!(huge.value, None);
        assert!(
            huge.absent
                .as_deref()
                .unwrap()
                .contains("no numa_huge_pte_updates")
        );
        let text = ops_text(&r);
        assert!(
            text.contains(&format!("Ops {:<28}{:>15}\n", "NUMA huge PMD updates", "-")),
            "{text}"
        );
        assert!(text.contains("NUMA huge PMD updates: not measured: no numa_huge_pte_updates"));
    }

    #[test]
    fn numa_stat_off_leaves_the_allocation_rows_unmeasured() {
        let mut start = state(&[("numa_hit", 1)]);
        start
            .system
            .sysctls
            .insert("vm.numa_stat".into(), Item::Present("0".into()));
        let end = state(&[("numa_hit", 1)]);
        let r = ops(&start, &end);
        assert_eq!(row(&r, "NUMA alloc hit").value, None);
        assert!(
            row(&r, "NUMA alloc hit")
                .absent
                .as_deref()
                .unwrap()
                .contains("vm.numa_stat=0")
        );
    }

    #[test]
    fn the_diff_has_mmtests_columns_and_fits_a_mail() {
        let base = vec![
            OpsRow {
                label: "NUMA hint faults".into(),
                value: Some(1000.0),
                absent: None,
            },
            OpsRow {
                label: "NUMA alloc miss".into(),
                value: Some(0.0),
                absent: None,
            },
        ];
        let patched = vec![
            OpsRow {
                label: "NUMA hint faults".into(),
                value: Some(250.0),
                absent: None,
            },
            OpsRow {
                label: "NUMA alloc miss".into(),
                value: Some(3.0),
                absent: None,
            },
        ];
        let d = ops_diff(&base, &patched);
        assert_eq!(d[0].change_pct, Some(-75.0));
        assert_eq!(d[1].change_pct, None);
        let t = ops_diff_text(&d, "6.12-base", "6.12-patched\x1b[2J");
        assert!(
            t.contains(
                "Ops NUMA hint faults                    1000.00         250.00 ( -75.00%)\n"
            ),
            "{t}"
        );
        assert!(
            t.contains(
                "Ops NUMA alloc miss                        0.00           3.00 (      - )\n"
            ),
            "{t}"
        );
        assert!(t.lines().all(|l| l.chars().count() <= 80), "{t}");
        assert!(!t.contains('\x1b'));
    }
}
