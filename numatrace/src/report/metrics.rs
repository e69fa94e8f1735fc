//! Every metric family `serve` exports: name, type, labels and meaning. The one list that the
//! exposition, the collector's descriptors, `serve --help`, the docs check and the dashboard
//! check all read.

use std::fmt::Write as _;

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

/// Families exported at each level of aggregation: in total (`numatrace_`), per cgroup
/// (`numatrace_cgroup_`, label `cgroup`), per task (`numatrace_task_`, labels `comm`, `pid`) and
/// for numatrace's own threads (`numatrace_self_`).
pub const WORKLOAD: [(&str, &[&str], &str); 12] = [
    (
        workload::SCAN_SECONDS,
        &[],
        "Wall-clock time inside task_numa_work, the PTE scanner (seconds).",
    ),
    (
        workload::SCAN_CPU_SECONDS,
        &[],
        "CPU time spent inside task_numa_work (sum_exec_runtime across the calls, seconds); \
         divided by run_seconds_total it is the scan share that the 3% cap bounds.",
    ),
    (workload::SCAN_CALLS, &[], "task_numa_work calls."),
    (
        workload::RUN_SECONDS,
        &[],
        "CPU time of the tasks between the first and the latest event numatrace saw of each \
         (sum_exec_runtime, seconds).",
    ),
    (
        workload::PTE_UPDATES,
        &[],
        "Page-table entries change_prot_numa made PROT_NONE (the kernel's numa_pte_updates).",
    ),
    (
        workload::HINT_FAULTS,
        &["locality"],
        "NUMA hint faults, local (the page was on the faulting CPU's node) or remote.",
    ),
    (
        workload::MIGRATED_PAGES,
        &[],
        "Pages migrated by NUMA hint faults (TNF_MIGRATED; the kernel's numa_pages_migrated).",
    ),
    (
        workload::PROMOTED_PAGES,
        &[],
        "Pages NUMA hint faults promoted: migrated from a node outside the top memory tier \
         into it (memory tiering; the kernel's pgpromote_success).",
    ),
    (
        workload::PROMOTE_DECISIONS,
        &["decision"],
        "Pages of slow-tier NUMA hint faults by the kernel's promotion decision \
         (should_numa_migrate_memory, tiering mode): hot (latency under the node's hot \
         threshold, decided to promote), rate_limited (as hot, held back by the promotion rate \
         limit; hot + rate_limited is the kernel's pgpromote_candidate), not_hot, free_room \
         (decided to promote past both: the node had room; pgpromote_candidate_nrl). A decision \
         to promote can still be refused or fail.",
    ),
    (
        workload::HINT_LATENCY_SECONDS,
        &[],
        "Sum of the hint-fault latency of slow-tier faults: time from the scanner's stamp of \
         the page to the fault, what the kernel compares with the hot threshold (seconds).",
    ),
    (
        workload::HINT_LATENCY_FAULTS,
        &[],
        "Slow-tier hint faults whose latency was measured (divide the latency sum by it).",
    ),
    (
        workload::SKIPPED_VMAS,
        &["reason"],
        "VMAs the scanner skipped (sched_skip_vma_numa), by the kernel's reason.",
    ),
];

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
            family::HINT_FAULT_PAGES,
            Counter,
            &[],
            "Pages the hint faults covered (a PMD THP fault covers 512).",
        ),
        spec(
            family::HINT_FAULTS_BY_PAGE_SIZE,
            Counter,
            &["page_size"],
            "Hint faults by the size of the faulting page: base, pmd (THP) or large (other \
             large folios).",
        ),
        spec(
            family::HINT_FAULT_MIGRATE_FAILURES,
            Counter,
            &[],
            "Hint faults whose page migration failed (TNF_MIGRATE_FAIL).",
        ),
        spec(
            family::COW_SHARED_HINT_FAULTS,
            Counter,
            &["page_size"],
            "Hint faults on copy-on-write pages mapped more than once (seed 000), base or large.",
        ),
        spec(
            family::COW_SHARED_MIGRATIONS,
            Counter,
            &[],
            "COW-shared pages those faults migrated.",
        ),
        spec(
            family::MIGRATE_CALLS,
            Counter,
            &[],
            "migrate_pages() calls for NUMA balancing (mm_migrate_pages, reason numa_misplaced).",
        ),
        spec(
            family::MIGRATE_PAGES,
            Counter,
            &["result"],
            "Pages those calls migrated (succeeded) or not (failed), from mm_migrate_pages.",
        ),
        spec(
            family::MIGRATE_THPS,
            Counter,
            &["result"],
            "Transparent huge pages among them.",
        ),
        spec(
            family::MIGRATE_MISPLACED,
            Counter,
            &["result"],
            "migrate_misplaced_folio/_page calls that migrated or not_migrated.",
        ),
        spec(
            family::MIGRATION_LATENCY_SECONDS,
            Histogram,
            &[],
            "Duration of migrate_misplaced_folio/_page calls (seconds, from log2 buckets).",
        ),
        spec(
            family::MIGRATION_STALLS,
            Counter,
            &[],
            "Waits on a page under migration (migration_entry_wait).",
        ),
        spec(
            family::MIGRATION_STALL_SECONDS,
            Counter,
            &[],
            "Time spent in those waits (seconds).",
        ),
        spec(
            family::PLACEMENT_EVENTS,
            Counter,
            &["kind"],
            "Task placement: move (sched_move_numa), swap_out / swap_in (sched_swap_numa as \
             initiator / as the other task), stick and stick_no_target (sched_stick_numa).",
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
        for (suffix, labels, help) in WORKLOAD {
            let mut l = scope_labels.to_vec();
            l.extend_from_slice(labels);
            out.push(Spec {
                name: format!("{prefix}{suffix}"),
                help: format!("{scope}: {help}"),
                kind: Kind::Counter,
                labels: l,
            });
        }
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

#[cfg(test)]
mod tests {
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
