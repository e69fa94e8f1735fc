//! What each command reads from the kernel side, declared once: the loader hands it to the
//! programs as read-only globals, so the verifier removes the code of whatever no one reads
//! (a record that is not sent costs no header, no reservation; an aggregate that is not kept
//! costs no map update).

use numatrace_common::{
    EMIT_ALL, EMIT_VMA_SCAN, Feed, READ_ALL, READ_REGIONS, READ_VMA_SKIPS, READ_VMAS,
};

/// One command's consumption.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    /// Ring-buffer record kinds (`EMIT_*`); task exits are always sent.
    pub emit_events: u32,
    /// Timed calls for a timeline.
    pub emit_spans: bool,
    /// Optional aggregates (`READ_*`).
    pub reads: u32,
}

/// Every record kind and aggregate, no timeline: a load that no command declares (the
/// engine's tests, the benchmark's own loads).
pub const EVERYTHING: Needs = Needs {
    emit_events: EMIT_ALL,
    emit_spans: false,
    reads: READ_ALL,
};

/// `record`: every record, the timeline's spans, every aggregate.
pub const RECORD: Needs = Needs {
    emit_events: EMIT_ALL,
    emit_spans: true,
    reads: READ_ALL,
};

/// `stat`: a report — its text's most scanned VMAs and pid_inactive gaps; placements and
/// migrations are counted per task without records. Its text shows no scan times, no seed
/// 001's region counts and no VMA's skips by reason, so change_prot_numa sends no record,
/// mpol_misplaced counts no region and sched_skip_vma_numa keeps no per-VMA reasons.
pub const STAT: Needs = Needs {
    emit_events: 0,
    emit_spans: false,
    reads: READ_VMAS,
};

/// `stat --json` and `check`: `stat`'s, and each VMA's scan times as records (the JSON's
/// `scan_times_ns`, seed 002's evidence), its skips by reason (counted in the tp_btf
/// program's map, or sent as records by the classic program where it is the hook's) and the
/// region counts (its `histograms`, seed 001's).
pub const STAT_JSON: Needs = Needs {
    emit_events: EMIT_VMA_SCAN,
    emit_spans: false,
    reads: READ_ALL,
};

/// `top`: the detail pane's VMA table with its skips and scans; no report, so no region counts,
/// and no scan times (the pane shows none).
pub const TOP: Needs = Needs {
    emit_events: 0,
    emit_spans: false,
    reads: READ_VMAS | READ_VMA_SKIPS,
};

/// `top -b`'s text: the task table and the node lines, no VMA (the detail pane is the terminal
/// view's).
pub const TOP_BATCH: Needs = Needs {
    emit_events: 0,
    emit_spans: false,
    reads: 0,
};

/// `top -b --json`: its frames carry `stat --json`'s VMA rows, scan times included.
pub const TOP_JSON: Needs = Needs {
    emit_events: EMIT_VMA_SCAN,
    ..TOP
};

/// `serve`: the kernel maps' per-task and system-wide aggregates only; the ring buffer carries
/// task exits alone.
pub const SERVE: Needs = Needs {
    emit_events: 0,
    emit_spans: false,
    reads: 0,
};

/// `probes`: attaches to report what attaches, counts nothing.
pub const PROBES: Needs = SERVE;

impl Needs {
    /// What a command with these needs leaves uncounted where the hooks attached, and why:
    /// its reports say "not measured" there, not 0.
    pub fn not_counted(&self) -> Vec<(Feed, String)> {
        let mut v = Vec::new();
        if self.reads & READ_REGIONS == 0 {
            v.push((
                Feed::Regions,
                "not counted by this command (`stat --json`, `check` and `record` count it)"
                    .to_owned(),
            ));
        }
        v
    }
}

/// Every command's declaration, by name (the tests hold each to what its output needs; the
/// benchmark measures `record`'s and `stat`'s).
pub const ALL: [(&str, Needs); 8] = [
    ("record", RECORD),
    ("stat", STAT),
    ("stat --json", STAT_JSON),
    ("check", STAT_JSON),
    ("top", TOP),
    ("top -b", TOP_BATCH),
    ("top -b --json", TOP_JSON),
    ("serve", SERVE),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reports_pay_for_region_counts_and_only_record_for_spans() {
        for (name, n) in ALL {
            assert_eq!(
                n.reads & READ_REGIONS != 0,
                matches!(name, "record" | "stat --json" | "check"),
                "{name}"
            );
            assert_eq!(n.emit_spans, name == "record", "{name}");
        }
        assert_eq!(SERVE.emit_events | SERVE.reads, 0);
        assert_eq!(TOP_BATCH.emit_events | TOP_BATCH.reads, 0);
    }

    #[test]
    fn skips_by_reason_per_vma_only_for_what_shows_them() {
        for (name, n) in ALL {
            assert_eq!(
                n.reads & READ_VMA_SKIPS != 0,
                !matches!(name, "stat" | "top -b" | "serve"),
                "{name}"
            );
        }
    }

    #[test]
    fn what_is_not_counted_is_said_so() {
        for (name, n) in ALL {
            let regions = n.not_counted().iter().any(|(f, _)| *f == Feed::Regions);
            assert_eq!(regions, n.reads & READ_REGIONS == 0, "{name}");
        }
    }

    #[test]
    fn scan_times_go_only_to_what_prints_vma_rows_as_json() {
        for (name, n) in ALL {
            assert_eq!(
                n.emit_events & EMIT_VMA_SCAN != 0,
                matches!(name, "record" | "stat --json" | "check" | "top -b --json"),
                "{name}"
            );
        }
    }
}
