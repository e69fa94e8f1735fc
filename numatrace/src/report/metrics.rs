//! Every metric family `serve` exports: name, type, labels and meaning. The one list that the
//! exposition, the collector's descriptors, `serve --help`, the docs check and the dashboard
//! check all read.

use std::fmt::Write as _;

use numatrace_common::{COUNTERS, CountKind, CounterDef, SKIP_REASON_SLOTS, Unit};

use crate::{
    model::{Counts, skip_reason_name},
    report::measured::{Feed, Measured},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub name: String,
    pub help: String,
    pub kind: Kind,
    pub labels: Vec<&'static str>,
}

/// Every family's name, written once: the catalogue lists them and the exposition emits them,
/// so a name that one side spells and the other does not fails to compile.
pub mod family {
    pub const HINT_FAULT_PAGES: &str = "numatrace_hint_fault_pages_total";
    pub const HINT_FAULTS_BY_PAGE_SIZE: &str = "numatrace_hint_faults_by_page_size_total";
    pub const HINT_FAULT_MIGRATE_FAILURES: &str = "numatrace_hint_fault_migrate_failures_total";
    pub const COW_SHARED_HINT_FAULTS: &str = "numatrace_cow_shared_hint_faults_total";
    pub const COW_SHARED_MIGRATIONS: &str = "numatrace_cow_shared_migrations_total";
    pub const MIGRATE_CALLS: &str = "numatrace_migrate_calls_total";
    pub const MIGRATE_PAGES: &str = "numatrace_migrate_pages_total";
    pub const MIGRATE_THPS: &str = "numatrace_migrate_thps_total";
    pub const MIGRATE_MISPLACED: &str = "numatrace_migrate_misplaced_total";
    pub const MIGRATION_LATENCY_SECONDS: &str = "numatrace_migration_latency_seconds";
    pub const MIGRATION_STALLS: &str = "numatrace_migration_stalls_total";
    pub const MIGRATION_STALL_SECONDS: &str = "numatrace_migration_stall_seconds_total";
    pub const PLACEMENT_EVENTS: &str = "numatrace_placement_events_total";
    pub const PID_INACTIVE_SKIPS: &str = "numatrace_pid_inactive_skips_total";
    pub const PID_INACTIVE_SKIPS_OVER_THREADS: &str =
        "numatrace_pid_inactive_skips_over_threads_total";
    pub const PID_INACTIVE_SKIPS_AT_THRESHOLD: &str =
        "numatrace_pid_inactive_skips_at_threshold_total";
    pub const NODE_HINT_FAULTS: &str = "numatrace_node_hint_faults_total";
    pub const NODE_HINT_FAULT_PAGES: &str = "numatrace_node_hint_fault_pages_total";
    pub const NODE_MIGRATIONS: &str = "numatrace_node_migrations_total";
    pub const NODE_MIGRATED_PAGES: &str = "numatrace_node_migrated_pages_total";
    pub const NODE_MEMORY_BYTES: &str = "numatrace_node_memory_bytes";
    pub const NODE_TASKS: &str = "numatrace_node_tasks";
    pub const DROPPED_EVENTS: &str = "numatrace_dropped_events_total";
    pub const RINGBUF_RECORDS: &str = "numatrace_ringbuf_records_total";
    pub const BPF_RUN_SECONDS: &str = "numatrace_bpf_run_seconds_total";
    pub const BPF_RUNS: &str = "numatrace_bpf_runs_total";
    pub const BPF_STATS_ENABLED: &str = "numatrace_bpf_stats_enabled";
    pub const SCRAPE_DURATION_SECONDS: &str = "numatrace_scrape_duration_seconds";
    pub const CPU_SECONDS: &str = "numatrace_cpu_seconds_total";
    pub const SNAPSHOT_CONSISTENT: &str = "numatrace_snapshot_consistent";
    pub const TASKS_TRACKED: &str = "numatrace_tasks_tracked";
    pub const NUMA_BALANCING: &str = "numatrace_numa_balancing";
    pub const HOOK_INFO: &str = "numatrace_hook_info";
    pub const DEMOTED_PAGES: &str = "numatrace_demoted_pages_total";
    pub const NODE_TIER: &str = "numatrace_node_tier";
    pub const PROMOTE_RATE_LIMIT: &str = "numatrace_promote_rate_limit_bytes_per_second";
    pub const HOT_THRESHOLD_SECONDS: &str = "numatrace_hot_threshold_seconds";
    pub const NODE_HOT_THRESHOLD_SECONDS: &str = "numatrace_node_hot_threshold_seconds";
    pub const BUILD_INFO: &str = "numatrace_build_info";
}

/// The per-scope workload families' names, after the scope's prefix.
pub mod workload {
    pub const SCAN_SECONDS: &str = "scan_seconds_total";
    pub const SCAN_CPU_SECONDS: &str = "scan_cpu_seconds_total";
    pub const SCAN_CALLS: &str = "scan_calls_total";
    pub const CPU_SAMPLES: &str = "scan_samples_total";
    pub const SCAN_CPU_SAMPLES: &str = "scan_scan_samples_total";
    pub const RUN_SECONDS: &str = "run_seconds_total";
    pub const PTE_UPDATES: &str = "pte_updates_total";
    pub const HINT_FAULTS: &str = "hint_faults_total";
    pub const MIGRATED_PAGES: &str = "migrated_pages_total";
    pub const PROMOTED_PAGES: &str = "promoted_pages_total";
    pub const PROMOTE_DECISIONS: &str = "promote_decision_pages_total";
    pub const HINT_LATENCY_SECONDS: &str = "slow_tier_hint_latency_seconds_total";
    pub const HINT_LATENCY_FAULTS: &str = "slow_tier_hint_latency_faults_total";
    pub const SKIPPED_VMAS: &str = "skipped_vmas_total";
}

/// The prefixes of the workload families' scopes.
pub mod scope {
    pub const ALL: &str = "numatrace_";
    pub const CGROUP: &str = "numatrace_cgroup_";
    pub const TASK: &str = "numatrace_task_";
    pub const SELF: &str = "numatrace_self_";
}

/// Label values and the value of one sample.
pub type Sample = (Vec<&'static str>, f64);

/// A family built from counts, as data: exported per scope (`scoped`: in total as
/// `numatrace_NAME`, per cgroup, per task and for numatrace itself, see [`SCOPES`]) or in total
/// only. Several rows may fill one family (one per feed). A row is left out of a scrape where its
/// feed was not measured: [`counted`] is the one place that says so.
pub struct CountFamily {
    /// The family's name after the scope's prefix (scoped), or its whole name.
    pub name: &'static str,
    pub scoped: bool,
    pub labels: &'static [&'static str],
    pub help: &'static str,
    pub feed: Feed,
    /// The counters it exports (their one names in the counter table): every other counter of
    /// the table gets a family of its own ([`AUTO`]).
    pub counters: &'static [&'static str],
    /// The samples of one scope's counts; `whole`: a scope without labels of its own (all
    /// tasks, numatrace itself), whose series exist from the start even at 0.
    pub samples: fn(&Counts, bool) -> Vec<Sample>,
}

fn one(v: u64) -> Vec<Sample> {
    vec![(Vec::new(), v as f64)]
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The families built from counts.
pub const COUNT_FAMILIES: &[CountFamily] = &[
    CountFamily {
        name: workload::SCAN_SECONDS,
        scoped: true,
        labels: &[],
        help: "Wall-clock time inside task_numa_work, the PTE scanner (seconds).",
        feed: Feed::Scan,
        counters: &["scan.time_ns"],
        samples: |c, _| vec![(vec![], secs(c.scan.time_ns))],
    },
    CountFamily {
        name: workload::SCAN_CPU_SECONDS,
        scoped: true,
        labels: &[],
        help: "CPU time spent inside task_numa_work (sum_exec_runtime across the calls, \
               seconds); divided by run_seconds_total it is the scan share that the 3% cap \
               bounds.",
        feed: Feed::Scan,
        counters: &["scan.runtime_in_scan_ns"],
        samples: |c, _| vec![(vec![], secs(c.scan.runtime_in_scan_ns))],
    },
    CountFamily {
        name: workload::SCAN_CALLS,
        scoped: true,
        labels: &[],
        help: "task_numa_work calls.",
        feed: Feed::Scan,
        counters: &["scan.calls"],
        samples: |c, _| one(c.scan.calls),
    },
    // Where task_numa_work cannot be hooked, the CPU-clock sampler estimates the scan share
    // (top's `~SCAN%`): exported per scope under names that say they are samples, never as
    // scan seconds.
    CountFamily {
        name: workload::CPU_SAMPLES,
        scoped: true,
        labels: &[],
        help: "CPU-clock samples of the tasks, taken only where task_numa_work cannot be hooked \
               (--sample-hz per CPU). With scan_scan_samples_total: the sampled scan share, an \
               estimate, not a measurement.",
        feed: Feed::Samples,
        counters: &["scan.samples"],
        samples: |c, _| one(c.scan.samples),
    },
    CountFamily {
        name: workload::SCAN_CPU_SAMPLES,
        scoped: true,
        labels: &[],
        help: "Of those CPU-clock samples, the ones taken inside task_numa_work: \
               rate(scan_scan_samples_total) / rate(scan_samples_total) is the sampled scan \
               share (top's ~SCAN%), an estimate where scan time cannot be measured.",
        feed: Feed::Samples,
        counters: &["scan.scan_samples"],
        samples: |c, _| one(c.scan.scan_samples),
    },
    CountFamily {
        name: workload::RUN_SECONDS,
        scoped: true,
        labels: &[],
        help: "CPU time of the tasks between the first and the latest event numatrace saw of \
               each (sum_exec_runtime, seconds).",
        feed: Feed::Scan,
        counters: &["scan.task_runtime_ns"],
        samples: |c, _| vec![(vec![], secs(c.scan.task_runtime_ns))],
    },
    CountFamily {
        name: workload::PTE_UPDATES,
        scoped: true,
        labels: &[],
        help: "Page-table entries change_prot_numa made PROT_NONE (the kernel's \
               numa_pte_updates).",
        feed: Feed::Pte,
        counters: &["scan.pte_updates"],
        samples: |c, _| one(c.scan.pte_updates),
    },
    CountFamily {
        name: workload::HINT_FAULTS,
        scoped: true,
        labels: &["locality"],
        help: "NUMA hint faults, local (the page was on the faulting CPU's node) or remote.",
        feed: Feed::HintFaults,
        counters: &[
            "hint_faults.faults",
            "hint_faults.local",
            "hint_faults.remote",
        ],
        samples: |c, _| {
            let local = c.hint_faults.local;
            let remote = c.hint_faults.faults.saturating_sub(local);
            vec![
                (vec!["local"], local as f64),
                (vec!["remote"], remote as f64),
            ]
        },
    },
    CountFamily {
        name: workload::MIGRATED_PAGES,
        scoped: true,
        labels: &[],
        help: "Pages migrated by NUMA hint faults (TNF_MIGRATED; the kernel's \
               numa_pages_migrated).",
        feed: Feed::HintFaults,
        counters: &["hint_faults.migrated_pages"],
        samples: |c, _| one(c.hint_faults.migrated_pages),
    },
    CountFamily {
        name: workload::PROMOTED_PAGES,
        scoped: true,
        labels: &[],
        help: "Pages NUMA hint faults promoted: migrated from a node outside the top memory \
               tier into it (memory tiering; the kernel's pgpromote_success).",
        feed: Feed::Promotions,
        counters: &["tiering.promoted_pages"],
        samples: |c, _| one(c.tiering.promoted_pages),
    },
    CountFamily {
        name: workload::PROMOTE_DECISIONS,
        scoped: true,
        labels: &["decision"],
        help: "Pages of slow-tier NUMA hint faults by the kernel's promotion decision \
               (should_numa_migrate_memory, tiering mode): hot (latency under the node's hot \
               threshold, decided to promote), rate_limited (as hot, held back by the promotion \
               rate limit; hot + rate_limited is the kernel's pgpromote_candidate), not_hot, \
               free_room (decided to promote past both: the node had room; \
               pgpromote_candidate_nrl). A decision to promote can still be refused or fail.",
        feed: Feed::PromoteDecisions,
        counters: &[
            "tiering.promote_hot",
            "tiering.promote_rate_limited",
            "tiering.promote_not_hot",
            "tiering.promote_free_room",
            "tiering.promote_candidates",
        ],
        samples: |c, total| {
            let t = &c.tiering;
            // Per cgroup and task only where there were slow-tier faults: a scrape should not
            // grow by zero series per task on a machine without tiers.
            if !total && t.slow_tier_faults == 0 {
                return Vec::new();
            }
            vec![
                (vec!["hot"], t.promote_hot as f64),
                (vec!["rate_limited"], t.promote_rate_limited as f64),
                (vec!["not_hot"], t.promote_not_hot as f64),
                (vec!["free_room"], t.promote_free_room as f64),
            ]
        },
    },
    CountFamily {
        name: workload::HINT_LATENCY_SECONDS,
        scoped: true,
        labels: &[],
        help: "Sum of the hint-fault latency of slow-tier faults: time from the scanner's stamp \
               of the page to the fault, what the kernel compares with the hot threshold \
               (seconds).",
        feed: Feed::PromoteDecisions,
        counters: &[
            "tiering.hint_latency_ms_total",
            "tiering.hint_latency_ms_mean",
        ],
        samples: |c, total| {
            if !total && c.tiering.slow_tier_faults == 0 {
                return Vec::new();
            }
            vec![(vec![], c.tiering.hint_latency_ms_total as f64 / 1e3)]
        },
    },
    CountFamily {
        name: workload::HINT_LATENCY_FAULTS,
        scoped: true,
        labels: &[],
        help: "Slow-tier hint faults whose latency was measured (divide the latency sum by it).",
        feed: Feed::PromoteDecisions,
        counters: &["tiering.hint_latency_faults"],
        samples: |c, total| {
            if !total && c.tiering.slow_tier_faults == 0 {
                return Vec::new();
            }
            one(c.tiering.hint_latency_faults)
        },
    },
    CountFamily {
        name: workload::SKIPPED_VMAS,
        scoped: true,
        labels: &["reason"],
        help: "VMAs the scanner skipped (sched_skip_vma_numa), by the kernel's reason.",
        feed: Feed::SkipVma,
        counters: &[],
        samples: |c, total| {
            // Reasons that occurred (all of them in total, where the set is fixed and small).
            (0..SKIP_REASON_SLOTS)
                .filter(|&slot| total || c.skipped_vmas.0[slot] > 0)
                .map(|slot| (vec![skip_reason_name(slot)], c.skipped_vmas.0[slot] as f64))
                .collect()
        },
    },
    CountFamily {
        name: family::HINT_FAULT_PAGES,
        scoped: false,
        labels: &[],
        help: "Pages the hint faults covered (a PMD THP fault covers 512).",
        feed: Feed::HintFaults,
        counters: &["hint_faults.pages"],
        samples: |c, _| one(c.hint_faults.pages),
    },
    CountFamily {
        name: family::HINT_FAULTS_BY_PAGE_SIZE,
        scoped: false,
        labels: &["page_size"],
        help: "Hint faults by the size of the faulting page: base, pmd (THP) or large (other \
               large folios).",
        feed: Feed::HintFaults,
        counters: &[
            "hint_faults.faults_4k",
            "hint_faults.faults_thp",
            "hint_faults.faults_large",
        ],
        samples: |c, _| {
            let h = &c.hint_faults;
            vec![
                (vec!["base"], h.faults_4k as f64),
                (vec!["pmd"], h.faults_thp as f64),
                (vec!["large"], h.faults_large as f64),
            ]
        },
    },
    CountFamily {
        name: family::HINT_FAULT_MIGRATE_FAILURES,
        scoped: false,
        labels: &[],
        help: "Hint faults whose page migration failed (TNF_MIGRATE_FAIL).",
        feed: Feed::HintFaults,
        counters: &["hint_faults.migrate_failed"],
        samples: |c, _| one(c.hint_faults.migrate_failed),
    },
    CountFamily {
        name: family::COW_SHARED_HINT_FAULTS,
        scoped: false,
        labels: &["page_size"],
        help: "Hint faults on copy-on-write pages mapped more than once (seed 000), base or \
               large.",
        feed: Feed::Cow,
        counters: &["hint_faults.cow_shared", "hint_faults.cow_shared_large"],
        samples: |c, _| {
            let h = &c.hint_faults;
            vec![
                (
                    vec!["base"],
                    h.cow_shared.saturating_sub(h.cow_shared_large) as f64,
                ),
                (vec!["large"], h.cow_shared_large as f64),
            ]
        },
    },
    CountFamily {
        name: family::COW_SHARED_MIGRATIONS,
        scoped: false,
        labels: &[],
        help: "COW-shared pages those faults migrated.",
        feed: Feed::CowMigrated,
        counters: &["hint_faults.cow_shared_migrated"],
        samples: |c, _| one(c.hint_faults.cow_shared_migrated),
    },
    CountFamily {
        name: family::MIGRATE_CALLS,
        scoped: false,
        labels: &[],
        help: "migrate_pages() calls for NUMA balancing (mm_migrate_pages, reason \
               numa_misplaced).",
        feed: Feed::MigratePages,
        counters: &["migrations.calls"],
        samples: |c, _| one(c.migrations.calls),
    },
    CountFamily {
        name: family::MIGRATE_PAGES,
        scoped: false,
        labels: &["result"],
        help: "Pages those calls migrated (succeeded) or not (failed), from mm_migrate_pages.",
        feed: Feed::MigratePages,
        counters: &["migrations.pages_ok", "migrations.pages_failed"],
        samples: |c, _| {
            vec![
                (vec!["succeeded"], c.migrations.pages_ok as f64),
                (vec!["failed"], c.migrations.pages_failed as f64),
            ]
        },
    },
    CountFamily {
        name: family::MIGRATE_THPS,
        scoped: false,
        labels: &["result"],
        help: "Transparent huge pages among them.",
        feed: Feed::MigratePages,
        counters: &["migrations.thp_ok", "migrations.thp_failed"],
        samples: |c, _| {
            vec![
                (vec!["succeeded"], c.migrations.thp_ok as f64),
                (vec!["failed"], c.migrations.thp_failed as f64),
            ]
        },
    },
    CountFamily {
        name: family::MIGRATE_MISPLACED,
        scoped: false,
        labels: &["result"],
        help: "migrate_misplaced_folio/_page calls that migrated or not_migrated.",
        feed: Feed::MigrateMisplaced,
        counters: &[
            "migrations.attempts",
            "migrations.succeeded",
            "migrations.not_migrated",
        ],
        samples: |c, _| {
            vec![
                (vec!["migrated"], c.migrations.succeeded as f64),
                (vec!["not_migrated"], c.migrations.not_migrated as f64),
            ]
        },
    },
    CountFamily {
        name: family::MIGRATION_STALLS,
        scoped: false,
        labels: &[],
        help: "Waits on a page under migration (migration_entry_wait).",
        feed: Feed::Stalls,
        counters: &["migrations.stalls"],
        samples: |c, _| one(c.migrations.stalls),
    },
    CountFamily {
        name: family::MIGRATION_STALL_SECONDS,
        scoped: false,
        labels: &[],
        help: "Time spent in those waits (seconds).",
        feed: Feed::Stalls,
        counters: &["migrations.stall_ns"],
        samples: |c, _| vec![(vec![], secs(c.migrations.stall_ns))],
    },
    CountFamily {
        name: family::PLACEMENT_EVENTS,
        scoped: false,
        labels: &["kind"],
        help: "Task placement: move (sched_move_numa), swap_out / swap_in (sched_swap_numa as \
               initiator / as the other task), stick and stick_no_target (sched_stick_numa).",
        feed: Feed::Moves,
        counters: &["placement.moves"],
        samples: |c, _| vec![(vec!["move"], c.placement.moves as f64)],
    },
    CountFamily {
        name: family::PLACEMENT_EVENTS,
        scoped: false,
        labels: &["kind"],
        help: "",
        feed: Feed::Swaps,
        counters: &["placement.swaps_out", "placement.swaps_in"],
        samples: |c, _| {
            vec![
                (vec!["swap_out"], c.placement.swaps_out as f64),
                (vec!["swap_in"], c.placement.swaps_in as f64),
            ]
        },
    },
    CountFamily {
        name: family::PLACEMENT_EVENTS,
        scoped: false,
        labels: &["kind"],
        help: "",
        feed: Feed::Sticks,
        counters: &["placement.sticks", "placement.stick_no_target"],
        samples: |c, _| {
            vec![
                (vec!["stick"], c.placement.sticks as f64),
                (vec!["stick_no_target"], c.placement.stick_no_target as f64),
            ]
        },
    },
];

/// Counters exported by families built from something besides the counts (the migration
/// latency histogram's sum).
const EXPORTED_ELSEWHERE: &[&str] = &["migrations.latency_ns_total", "migrations.latency_ns_mean"];

/// A family of its own for a counter no [`COUNT_FAMILIES`] row exports, named after the
/// counter's one name: `numatrace_GROUP_NAME_total` (durations in seconds:
/// `..._seconds_total`; a level: a gauge without `_total`). In total only.
pub struct AutoFamily {
    pub counter: &'static CounterDef,
    pub name: String,
    pub kind: Kind,
    /// What the counter's value is multiplied by (durations into seconds).
    pub scale: f64,
}

/// The families of their own, in the table's order: every counter of kind sum, computed or
/// max that no row exports (derived counters and ratios follow from others).
pub fn auto_families() -> Vec<AutoFamily> {
    COUNTERS
        .iter()
        .filter(|d| {
            matches!(
                d.kind,
                CountKind::Sum | CountKind::Computed | CountKind::Max
            )
        })
        .filter(|d| {
            !EXPORTED_ELSEWHERE.contains(&d.path)
                && !COUNT_FAMILIES.iter().any(|f| f.counters.contains(&d.path))
        })
        .map(|d| {
            let (stem, scale) = match d.unit {
                Unit::Ns => (time_stem(d.name, "ns"), 1e-9),
                Unit::Ms => (time_stem(d.name, "ms"), 1e-3),
                _ => (d.name.to_owned(), 1.0),
            };
            let seconds = matches!(d.unit, Unit::Ns | Unit::Ms);
            let (kind, suffix) = match (d.kind, seconds) {
                (CountKind::Max, true) => (Kind::Gauge, "_seconds"),
                (CountKind::Max, false) => (Kind::Gauge, ""),
                (_, true) => (Kind::Counter, "_seconds_total"),
                (_, false) => (Kind::Counter, "_total"),
            };
            AutoFamily {
                counter: d,
                name: format!("numatrace_{}_{stem}{suffix}", d.group),
                kind,
                scale,
            }
        })
        .collect()
}

/// A duration counter's name without its unit: `time_ns` → `time`, `latency_ms_total` →
/// `latency`.
fn time_stem(name: &str, unit: &str) -> String {
    let name = name.strip_suffix("_total").unwrap_or(name);
    name.strip_suffix(&format!("_{unit}"))
        .unwrap_or(name)
        .to_owned()
}

/// The row's samples where its feed was measured, none where it was not: a family whose hook
/// did not attach is absent from a scrape, never 0.
pub fn counted(f: &CountFamily, c: &Counts, total: bool, m: &Measured) -> Vec<Sample> {
    if m.is(f.feed) {
        (f.samples)(c, total)
    } else {
        Vec::new()
    }
}

pub const SCOPES: [(&str, &[&str], &str); 4] = [
    (scope::ALL, &[], "All traced tasks"),
    (scope::CGROUP, &["cgroup"], "Per cgroup"),
    (scope::TASK, &["comm", "pid"], "Per task (top N)"),
    (scope::SELF, &[], "numatrace's own threads"),
];

fn spec(name: &str, kind: Kind, labels: &[&'static str], help: &str) -> Spec {
    Spec {
        name: name.to_owned(),
        help: help.to_owned(),
        kind,
        labels: labels.to_vec(),
    }
}

/// The families besides the per-scope workload ones.
fn fixed() -> Vec<Spec> {
    use Kind::*;
    vec![
        spec(
            family::DEMOTED_PAGES,
            Counter,
            &["reclaimer"],
            "Pages reclaim demoted to a slower memory tier, system-wide (mm_migrate_pages, \
             reason demotion), by who reclaimed: kswapd, khugepaged, or direct_or_proactive \
             (the kernel's pgdemote_*).",
        ),
        spec(
            family::NODE_TIER,
            Gauge,
            &["node", "tier", "top"],
            "1 for each node in a memory tier (memory_tierN; top=\"true\" for the tiers \
             promotions go into).",
        ),
        spec(
            family::PROMOTE_RATE_LIMIT,
            Gauge,
            &[],
            "kernel.numa_balancing_promote_rate_limit_MBps, in bytes per second (6.0+).",
        ),
        spec(
            family::HOT_THRESHOLD_SECONDS,
            Gauge,
            &[],
            "debugfs sched/numa_balancing/hot_threshold_ms, in seconds: the reference the \
             kernel adjusts each node's promotion threshold around (6.0+).",
        ),
        spec(
            family::NODE_HOT_THRESHOLD_SECONDS,
            Gauge,
            &["node"],
            "Each node's promotion hot threshold in seconds as its latest slow-tier hint fault \
             in tiering mode found it (the kernel's pglist_data.nbp_threshold, read by \
             numatrace; 6.0+): a page accessed within it of its scan is a promotion candidate. \
             The kernel moves it between 1/8 and twice the reference to hold promotions to the \
             rate limit.",
        ),
        spec(
            family::MIGRATION_LATENCY_SECONDS,
            Histogram,
            &[],
            "Duration of migrate_misplaced_folio/_page calls (seconds, from log2 buckets).",
        ),
        spec(
            family::PID_INACTIVE_SKIPS,
            Counter,
            &[],
            "pid_inactive VMA skips whose scan-sequence gap was recorded (seed 002).",
        ),
        spec(
            family::PID_INACTIVE_SKIPS_OVER_THREADS,
            Counter,
            &[],
            "Of those, skips with a gap larger than the task's thread count (a VMA seed 002 \
             would have scanned).",
        ),
        spec(
            family::PID_INACTIVE_SKIPS_AT_THRESHOLD,
            Counter,
            &[],
            "Of those, skips with a gap equal to the thread count.",
        ),
        spec(
            family::NODE_HINT_FAULTS,
            Counter,
            &["node", "locality"],
            "Hint faults by the faulting CPU's node, local or remote.",
        ),
        spec(
            family::NODE_HINT_FAULT_PAGES,
            Counter,
            &["node"],
            "Pages those faults covered.",
        ),
        spec(
            family::NODE_MIGRATIONS,
            Counter,
            &["src", "dst", "result"],
            "migrate_misplaced_folio/_page calls (folios) by source and destination node; src \
             \"unknown\" when the source could not be resolved.",
        ),
        spec(
            family::NODE_MIGRATED_PAGES,
            Counter,
            &["src", "dst"],
            "Pages hint faults migrated, by source and destination node.",
        ),
        spec(
            family::NODE_MEMORY_BYTES,
            Gauge,
            &["node", "state"],
            "Memory of the node (state total or free), from sysfs.",
        ),
        spec(
            family::NODE_TASKS,
            Gauge,
            &["node", "role"],
            "Live traced tasks whose preferred node it is (role preferred) or that last ran \
             an event on it (role last_ran).",
        ),
        spec(
            family::DROPPED_EVENTS,
            Counter,
            &["cause"],
            "What could not be counted or delivered, by cause (see the stat report's `dropped`).",
        ),
        spec(
            family::RINGBUF_RECORDS,
            Counter,
            &["kind"],
            "Ring-buffer records read, by kind.",
        ),
        spec(
            family::BPF_RUN_SECONDS,
            Counter,
            &["program"],
            "Time the kernel spent running each of numatrace's programs (BPF run-time \
             statistics, on while serving; seconds).",
        ),
        spec(
            family::BPF_RUNS,
            Counter,
            &["program"],
            "Runs of each program.",
        ),
        spec(
            family::BPF_STATS_ENABLED,
            Gauge,
            &[],
            "1 when the kernel's BPF run-time statistics are on (numatrace_bpf_* are counted).",
        ),
        spec(
            family::SCRAPE_DURATION_SECONDS,
            Gauge,
            &[],
            "Time this response took to read the kernel side and build (seconds).",
        ),
        spec(
            family::CPU_SECONDS,
            Counter,
            &[],
            "numatrace's own CPU time (user + system, seconds; process_cpu_seconds_total counts \
             whole seconds only).",
        ),
        spec(
            family::SNAPSHOT_CONSISTENT,
            Gauge,
            &[],
            "1 when nothing was counted while the kernel maps were read.",
        ),
        spec(
            family::TASKS_TRACKED,
            Gauge,
            &[],
            "Tasks whose counts numatrace holds (live, and exited ones not yet folded away).",
        ),
        spec(
            family::NUMA_BALANCING,
            Gauge,
            &[],
            "kernel.numa_balancing as read at this scrape (0 off, 1 normal, 2 memory tiering, 3 both).",
        ),
        spec(
            family::HOOK_INFO,
            Gauge,
            &["hook", "mechanism", "attached", "kernel"],
            "One series per hook: how it is attached on this kernel (fentry, kprobe, \
             tracepoint, tp_btf, perf_event or none).",
        ),
        spec(
            family::BUILD_INFO,
            Gauge,
            &["version"],
            "numatrace's version.",
        ),
    ]
}

/// `/proc/vmstat` counters exported typed, as `numatrace_vmstat_<name>_total`.
pub fn vmstat_exported(name: &str) -> bool {
    ["numa_", "pgmigrate_", "pgpromote_", "pgdemote_"]
        .iter()
        .any(|p| name.starts_with(p))
}

pub fn vmstat_family(name: &str) -> String {
    format!("numatrace_vmstat_{name}_total")
}

/// Every family, for a kernel whose /proc/vmstat has `vmstat_names`.
pub fn families<'a>(vmstat_names: impl IntoIterator<Item = &'a String>) -> Vec<Spec> {
    let mut out = Vec::new();
    for (prefix, scope_labels, scope) in SCOPES {
        for f in COUNT_FAMILIES.iter().filter(|f| f.scoped) {
            let mut l = scope_labels.to_vec();
            l.extend_from_slice(f.labels);
            out.push(Spec {
                name: format!("{prefix}{}", f.name),
                help: format!("{scope}: {}", f.help),
                kind: Kind::Counter,
                labels: l,
            });
        }
    }
    // One spec per family: the first row of a family says what it is.
    for f in COUNT_FAMILIES.iter().filter(|f| !f.scoped) {
        if !out.iter().any(|s| s.name == f.name) {
            out.push(spec(f.name, Kind::Counter, f.labels, f.help));
        }
    }
    for a in auto_families() {
        out.push(Spec {
            name: a.name,
            help: format!(
                "{} (counter {}; in total).",
                a.counter.doc.trim().trim_end_matches('.'),
                a.counter.path
            ),
            kind: a.kind,
            labels: Vec::new(),
        });
    }
    out.extend(fixed());
    for n in vmstat_names.into_iter().filter(|n| vmstat_exported(n)) {
        out.push(Spec {
            name: vmstat_family(n),
            help: format!("The kernel's /proc/vmstat {n}."),
            kind: Kind::Counter,
            labels: Vec::new(),
        });
    }
    out
}

/// The catalogue as text, for `serve --help`.
/// The families `serve --help` and the docs list: the workload ones once, not per scope.
fn listed() -> impl Iterator<Item = Spec> {
    families(&[]).into_iter().filter(|f| {
        ![scope::CGROUP, scope::TASK, scope::SELF]
            .iter()
            .any(|p| f.name.starts_with(p))
    })
}

const SCOPES_NOTE: &str = "every workload family also exists per cgroup, per task and for \
                           numatrace itself: numatrace_cgroup_*, numatrace_task_*, \
                           numatrace_self_*";
const VMSTAT_HELP: &str = "The kernel's own numa_*, pgmigrate_*, pgpromote_* and pgdemote_* \
                           counters from /proc/vmstat, to cross-check against.";

/// The catalogue as a Markdown table: the generated part of docs/metrics.md.
pub fn markdown() -> String {
    let mut s =
        format!("Metrics ({SCOPES_NOTE}):\n\n| name | type | labels | help |\n|---|---|---|---|\n");
    let rows = listed()
        .map(|f| {
            let labels: Vec<String> = f.labels.iter().map(|l| format!("`{l}`")).collect();
            let help = f.help.trim_start_matches("All traced tasks: ").to_owned();
            (f.name, f.kind.as_str(), labels.join(", "), help)
        })
        .chain(std::iter::once((
            "numatrace_vmstat_<name>_total".to_owned(),
            "counter",
            String::new(),
            VMSTAT_HELP.to_owned(),
        )));
    for (name, kind, labels, help) in rows {
        let _ = writeln!(
            s,
            "| `{name}` | {kind} | {labels} | {} |",
            help.replace('|', "\\|")
        );
    }
    s
}

pub fn describe() -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Metrics ({SCOPES_NOTE}):");
    for f in listed() {
        let labels = if f.labels.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", f.labels.join(","))
        };
        let help = f.help.trim_start_matches("All traced tasks: ");
        let _ = writeln!(
            s,
            "  {}{labels} ({})\n      {help}",
            f.name,
            f.kind.as_str()
        );
    }
    let _ = writeln!(
        s,
        "  numatrace_vmstat_<name>_total (counter)\n      {VMSTAT_HELP}"
    );
    s
}

/// Where the counter `path` goes in a scrape.
fn prometheus_of(path: &str) -> String {
    let rows: Vec<&CountFamily> = COUNT_FAMILIES
        .iter()
        .filter(|f| f.counters.contains(&path))
        .collect();
    if let Some(f) = rows.first() {
        return if f.scoped {
            format!("`numatrace_{}` (and per scope)", f.name)
        } else {
            format!("`{}`", f.name)
        };
    }
    if EXPORTED_ELSEWHERE.contains(&path) {
        return format!("`{}` (sum)", family::MIGRATION_LATENCY_SECONDS);
    }
    auto_families()
        .into_iter()
        .find(|a| a.counter.path == path)
        .map_or_else(
            || "— (follows from the others)".to_owned(),
            |a| format!("`{}`", a.name),
        )
}

/// Every counter of numatrace-common's table: its one name (the JSON path in COUNTS and, where
/// the kernel side keeps a twin, in `kernel_seen`), kind, unit, the hooks that feed it, where
/// it goes in a scrape and what it means. The generated part of docs/counters.md.
pub fn counters_markdown() -> String {
    let mut s = String::from(
        "| counter | kind | unit | feed (hooks) | `kernel_seen` | Prometheus | meaning |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for d in COUNTERS {
        let hooks = d
            .feed
            .hooks()
            .iter()
            .map(|g| g.join(" or "))
            .collect::<Vec<_>>()
            .join(" and ");
        let seen = match d.slot {
            Some(_) => "yes",
            None => "",
        };
        let _ = writeln!(
            s,
            "| `{}` | {:?} | {:?} | `{}` ({hooks}) | {seen} | {} | {} |",
            d.path,
            d.kind,
            d.unit,
            d.feed.name(),
            prometheus_of(d.path),
            d.doc.trim()
        );
    }
    s.replace("|_page", "\\|_page")
        .replace("|page_cpupid", "\\|page_cpupid")
}

#[cfg(test)]
mod tests {
    /// docs/counters.md ends with the counter table: regenerated with
    /// `NUMATRACE_UPDATE_DOCS=1 cargo test -p numatrace --lib metrics`, checked otherwise.
    #[test]
    fn the_counters_doc_is_the_table() {
        const MARK: &str = "<!-- generated from numatrace-common/src/table.rs by \
                            `NUMATRACE_UPDATE_DOCS=1 cargo test -p numatrace --lib metrics`; \
                            do not edit below -->\n";
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/counters.md");
        let doc = std::fs::read_to_string(&path).unwrap();
        let at = doc
            .find(MARK)
            .expect("docs/counters.md lacks the generated-part marker");
        let want = format!("{}{MARK}\n{}", &doc[..at], super::counters_markdown());
        if std::env::var("NUMATRACE_UPDATE_DOCS").is_ok_and(|v| v == "1") {
            std::fs::write(&path, &want).unwrap();
        }
        assert!(
            doc == want,
            "docs/counters.md differs from the counter table: run with NUMATRACE_UPDATE_DOCS=1"
        );
    }

    /// Every counter of the table reaches Prometheus: a row exports it, or a family of its
    /// own, or it follows from others (derived, ratio, level).
    #[test]
    fn every_counter_reaches_prometheus() {
        use numatrace_common::{COUNTERS, CountKind};
        for d in COUNTERS {
            let place = super::prometheus_of(d.path);
            let follows = matches!(
                d.kind,
                CountKind::Derived | CountKind::Ratio | CountKind::Level
            );
            assert!(
                follows || !place.starts_with('—'),
                "{} goes nowhere in a scrape",
                d.path
            );
        }
        for f in super::COUNT_FAMILIES {
            for p in f.counters {
                assert!(COUNTERS.iter().any(|d| d.path == *p), "{}: {p}", f.name);
            }
        }
    }

    /// docs/metrics.md ends with the catalogue's table: regenerated with
    /// `NUMATRACE_UPDATE_DOCS=1 cargo test -p numatrace --lib metrics`, checked otherwise.
    #[test]
    fn the_docs_table_is_the_catalogue() {
        const MARK: &str = "<!-- generated from numatrace/src/report/metrics.rs by \
                            `NUMATRACE_UPDATE_DOCS=1 cargo test -p numatrace --lib metrics`; \
                            do not edit below -->\n";
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md");
        let doc = std::fs::read_to_string(&path).unwrap();
        let at = doc
            .find(MARK)
            .expect("docs/metrics.md lacks the generated-part marker");
        let want = format!("{}{MARK}\n{}", &doc[..at], super::markdown());
        if std::env::var("NUMATRACE_UPDATE_DOCS").is_ok_and(|v| v == "1") {
            std::fs::write(&path, &want).unwrap();
        }
        assert!(
            doc == want,
            "docs/metrics.md's table differs from the catalogue: run with NUMATRACE_UPDATE_DOCS=1"
        );
    }
}
