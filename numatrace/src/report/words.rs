//! The words that turn counts into text, written once: `stat`'s lines about the totals and
//! `top`'s detail pane about a task or process say the same things in the same words, and a
//! counter no sentence here says (a new one, say) is said anyway, in the words numatrace-common's
//! counter table gives it. What the kernel did not measure says so, never 0.

use numatrace_common::{COUNTERS, CounterDef, Unit};

use crate::{
    model::{CountValue, Counts, SkipCounts},
    report::measured::{Feed, Measured},
};

/// One clause of a line: a label, the feed that must have been measured, the counters it says
/// (their one names) and the words.
struct Clause {
    label: &'static str,
    feed: Feed,
    says: &'static [&'static str],
    text: fn(&Counts, &Measured) -> String,
}

/// The lines, each a subject and its clauses.
const LINES: &[(&str, &[Clause])] = &[
    (
        "totals",
        &[
            Clause {
                label: "skipped VMAs",
                feed: Feed::SkipVma,
                says: &[],
                text: |c, _| {
                    format!(
                        "{} ({})",
                        c.skipped_vmas_total,
                        if c.skipped_vmas.is_empty() {
                            "-".into()
                        } else {
                            reasons(&c.skipped_vmas)
                        }
                    )
                },
            },
            Clause {
                label: "moves",
                feed: Feed::Moves,
                says: &["placement.moves"],
                text: |c, _| c.placement.moves.to_string(),
            },
            Clause {
                label: "swaps",
                feed: Feed::Swaps,
                says: &["placement.swaps_out", "placement.swaps_in"],
                text: |c, _| format!("{}/{}", c.placement.swaps_out, c.placement.swaps_in),
            },
            Clause {
                label: "sticks",
                feed: Feed::Sticks,
                says: &["placement.sticks", "placement.stick_no_target"],
                text: |c, _| {
                    format!(
                        "{} ({} without target)",
                        c.placement.sticks, c.placement.stick_no_target
                    )
                },
            },
            Clause {
                label: "NUMA migrations",
                feed: Feed::MigratePages,
                says: &[
                    "migrations.calls",
                    "migrations.pages_ok",
                    "migrations.pages_failed",
                    "migrations.thp_ok",
                    "migrations.thp_failed",
                ],
                text: |c, _| {
                    let g = &c.migrations;
                    format!(
                        "{} pages ok, {} failed in {} calls (THP {} ok, {} failed)",
                        g.pages_ok, g.pages_failed, g.calls, g.thp_ok, g.thp_failed
                    )
                },
            },
        ],
    ),
    (
        "scan",
        &[
            Clause {
                label: "task_numa_work",
                feed: Feed::Scan,
                says: &[
                    "scan.calls",
                    "scan.time_ns",
                    "scan.max_ns",
                    "scan.node_stamp_advance_ns",
                    "scan.runtime_in_scan_ns",
                    "scan.stamp_violations",
                ],
                text: |c, _| {
                    let s = &c.scan;
                    format!(
                        "{} calls, {} in them (longest {}), node_stamp advanced {} for {} of \
                         scan runtime, {} node_stamp>runtime violations",
                        s.calls,
                        ns(s.time_ns),
                        ns(s.max_ns),
                        ns(s.node_stamp_advance_ns),
                        ns(s.runtime_in_scan_ns),
                        s.stamp_violations,
                    )
                },
            },
            Clause {
                label: "share",
                feed: Feed::ScanShare,
                says: &["scan.share", "scan.sampled_share"],
                text: |c, _| scan_share(c),
            },
            Clause {
                label: "change_prot_numa",
                feed: Feed::Pte,
                says: &["scan.pte_updates", "scan.prot_numa_calls"],
                text: |c, _| {
                    format!(
                        "{} PTEs updated in {} calls",
                        c.scan.pte_updates, c.scan.prot_numa_calls
                    )
                },
            },
        ],
    ),
    (
        "",
        &[
            Clause {
                label: "hint faults",
                feed: Feed::HintFaults,
                says: &[
                    "hint_faults.faults",
                    "hint_faults.local",
                    "hint_faults.remote",
                    "hint_faults.faults_4k",
                    "hint_faults.faults_thp",
                    "hint_faults.faults_large",
                    "hint_faults.pages",
                    "hint_faults.migrated_pages",
                    "hint_faults.migrate_failed",
                ],
                text: |c, _| {
                    let h = &c.hint_faults;
                    format!(
                        "{} ({} local, {} remote; {} 4K, {} THP, {} large folio; {} pages), {} \
                         pages migrated, {} failed",
                        h.faults,
                        h.local,
                        h.remote,
                        h.faults_4k,
                        h.faults_thp,
                        h.faults_large,
                        h.pages,
                        h.migrated_pages,
                        h.migrate_failed,
                    )
                },
            },
            Clause {
                label: "COW-shared",
                feed: Feed::Cow,
                says: &["hint_faults.cow_shared", "hint_faults.cow_shared_migrated"],
                text: |c, m| {
                    format!(
                        "{} ({})",
                        c.hint_faults.cow_shared,
                        m.clause(Feed::CowMigrated, "migrated", || c
                            .hint_faults
                            .cow_shared_migrated
                            .to_string())
                    )
                },
            },
            Clause {
                label: "migrate_misplaced",
                feed: Feed::MigrateMisplaced,
                says: &[
                    "migrations.attempts",
                    "migrations.succeeded",
                    "migrations.latency_ns_mean",
                ],
                text: |c, _| {
                    let g = &c.migrations;
                    format!(
                        "{} calls, {} migrated, mean {}",
                        g.attempts,
                        g.succeeded,
                        g.latency_ns_mean.map_or("-".into(), |v| ns(v as u64))
                    )
                },
            },
            Clause {
                label: "migration stalls",
                feed: Feed::Stalls,
                says: &["migrations.stalls", "migrations.stall_ns"],
                text: |c, _| format!("{} ({})", c.migrations.stalls, ns(c.migrations.stall_ns)),
            },
        ],
    ),
];

/// A line about `c`: its subject (`totals`, `scan`, or none) and its text.
pub struct Line {
    pub subject: &'static str,
    pub text: String,
}

impl Line {
    /// `subject: text`, or the text alone.
    pub fn joined(&self) -> String {
        if self.subject.is_empty() {
            self.text.clone()
        } else {
            format!("{}: {}", self.subject, self.text)
        }
    }
}

/// What `c` counted, a line per subject, then `more`: every counter of the table no clause says
/// and `elsewhere` does not name (what the caller prints in a block of its own), by group, in the
/// table's words. Counters whose feed was not measured are left out of `more` (a group with
/// none measured says so).
pub fn lines(c: &Counts, m: &Measured, elsewhere: &[&str]) -> Vec<Line> {
    let mut out: Vec<Line> = LINES
        .iter()
        .map(|(subject, clauses)| Line {
            subject,
            text: clauses
                .iter()
                .map(|k| m.clause(k.feed, k.label, || (k.text)(c, m)))
                .collect::<Vec<_>>()
                .join("; "),
        })
        .collect();
    let more = more(c, m, elsewhere);
    if !more.is_empty() {
        out.push(Line {
            subject: "more",
            text: more,
        });
    }
    out
}

/// Whether some clause says the counter `path`.
pub fn said(path: &str) -> bool {
    LINES
        .iter()
        .flat_map(|(_, clauses)| clauses.iter())
        .any(|k| k.says.contains(&path))
}

/// The counters no clause says, by group: "migrations: refused before starting 3, …"; those
/// not measured by their words and why: "… (not measured: HOOK not attached)".
fn more(c: &Counts, m: &Measured, elsewhere: &[&str]) -> String {
    /// Why not measured, and the words of the counters it takes out.
    type Missing<'a> = Vec<(&'a str, Vec<&'static str>)>;
    let mut groups: Vec<(&str, Vec<String>, Missing)> = Vec::new();
    for d in COUNTERS
        .iter()
        .filter(|d| !said(d.path) && !elsewhere.contains(&d.path))
    {
        if groups.last().is_none_or(|(g, _, _)| *g != d.group) {
            groups.push((d.group, Vec::new(), Vec::new()));
        }
        let (_, said_here, missing) = groups.last_mut().expect("pushed above");
        match m.why(d.feed) {
            None => said_here.push(value_words(d, c)),
            Some(why) => match missing.iter_mut().find(|(w, _)| *w == why) {
                Some((_, words)) => words.push(d.words),
                None => missing.push((why, vec![d.words])),
            },
        }
    }
    groups
        .into_iter()
        .map(|(group, said_here, missing)| {
            let mut parts = said_here;
            parts.extend(
                missing
                    .iter()
                    .map(|(why, words)| format!("{} (not measured: {why})", words.join(", "))),
            );
            format!("{group}: {}", parts.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// "refused before starting 3", "time in migrate_misplaced 1.2 ms", "scan share 12.50%".
fn value_words(d: &CounterDef, c: &Counts) -> String {
    let v = c.value(d.path);
    let shown = match (v, d.unit) {
        (Some(CountValue::Count(n)), Unit::Ns) => ns(n),
        (Some(CountValue::Count(n)), Unit::Ms) => format!("{n} ms"),
        (Some(CountValue::Ratio(Some(r))), Unit::Ns) => ns(r as u64),
        (Some(CountValue::Ratio(Some(r))), Unit::Ms) => format!("{r:.0} ms"),
        (Some(CountValue::Ratio(Some(r))), _) => format!("{:.2}%", r * 100.0),
        (Some(CountValue::Ratio(None)), _) => "-".to_owned(),
        (Some(CountValue::Count(n)), _) => n.to_string(),
        (None, _) => "?".to_owned(),
    };
    format!("{} {shown}", d.words)
}

/// Skipped VMAs by reason: `reason=n …`.
pub fn reasons(s: &SkipCounts) -> String {
    s.iter()
        .map(|(r, n)| format!("{r}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `n` of `d` in percent, whole (`-` when there is no `d`).
pub fn pct(n: u64, d: u64) -> String {
    if d == 0 {
        "-".into()
    } else {
        format!("{:.0}", 100.0 * n as f64 / d as f64)
    }
}

/// The scan share: measured, else the sampled estimate marked with `~`, else `-`.
pub fn scan_share(c: &Counts) -> String {
    match (c.scan.share, c.scan.sampled_share) {
        (Some(s), _) => format!("{:.2}", s * 100.0),
        (None, Some(s)) => format!("~{:.2}", s * 100.0),
        _ => "-".into(),
    }
}

/// A duration in the unit that reads best.
pub fn ns(v: u64) -> String {
    match v {
        0..1_000 => format!("{v} ns"),
        1_000..1_000_000 => format!("{:.1} us", v as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} ms", v as f64 / 1e6),
        _ => format!("{:.2} s", v as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::measured::tests::all_but;

    #[test]
    fn clauses_name_counters_of_the_table() {
        for (_, clauses) in LINES {
            for k in *clauses {
                for p in k.says {
                    assert!(COUNTERS.iter().any(|d| d.path == *p), "{p}");
                }
            }
        }
    }

    /// A counter no sentence says is said anyway, in the table's words; one whose hook did
    /// not attach says so instead of 0.
    #[test]
    fn every_counter_is_said_once() {
        let mut c = Counts::default();
        c.migrations.refused = 3;
        c.scan.requeued_calls = 2;
        let text = lines(&c, &Measured::default(), &[])
            .iter()
            .map(Line::joined)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            text.contains("migrations: not migrated 0, refused before starting 3"),
            "{text}"
        );
        assert!(text.contains("re-queued calls 2"), "{text}");
        for d in COUNTERS {
            assert!(said(d.path) || text.contains(d.words), "{} unsaid", d.path);
        }
        let m = Measured::from_hooks(&all_but(&["migrate_misplaced_folio_prepare"]));
        let more = lines(&c, &m, &[]).pop().unwrap();
        assert_eq!(more.subject, "more");
        // Said by its words and why, without a number (others on the hook may share the why).
        let at = more.text.find("refused before starting").expect("said");
        let said_why = &more.text[at..at + more.text[at..].find(')').expect("a why")];
        assert!(
            said_why.ends_with("(not measured: migrate_misplaced_folio_prepare not attached"),
            "{}",
            more.text
        );
        assert!(!said_why.contains(char::is_numeric), "{}", more.text);
        // What the caller says elsewhere is not said again.
        let tiering: Vec<&str> = COUNTERS
            .iter()
            .filter(|d| d.group == "tiering")
            .map(|d| d.path)
            .collect();
        let more = lines(&c, &Measured::default(), &tiering).pop().unwrap();
        assert!(!more.text.contains("tiering:"), "{}", more.text);
    }
}
