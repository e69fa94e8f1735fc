//! Every metric family `serve` exports: name, type, labels and meaning. The one list that the
//! exposition, the collector's descriptors, `serve --help`, the README check and the dashboard
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

/// Families exported at each level of aggregation: in total (`numatrace_`), per cgroup
/// (`numatrace_cgroup_`, label `cgroup`), per task (`numatrace_task_`, labels `comm`, `pid`) and
/// for numatrace's own threads (`numatrace_self_`).
pub const WORKLOAD: [(&str, &[&str], &str); 8] = [
    (
        "scan_seconds_total",
        &[],
        "Wall-clock time inside task_numa_work, the PTE scanner (seconds).",
    ),
    (
        "scan_cpu_seconds_total",
        &[],
        "CPU time spent inside task_numa_work (sum_exec_runtime across the calls, seconds); \
         divided by run_seconds_total it is the scan share that the 3% cap bounds.",
    ),
    ("scan_calls_total", &[], "task_numa_work calls."),
    (
        "run_seconds_total",
        &[],
        "CPU time of the tasks between the first and the latest event numatrace saw of each \
         (sum_exec_runtime, seconds).",
    ),
    (
        "pte_updates_total",
        &[],
        "Page-table entries change_prot_numa made PROT_NONE (the kernel's numa_pte_updates).",
    ),
    (
        "hint_faults_total",
        &["locality"],
        "NUMA hint faults, local (the page was on the faulting CPU's node) or remote.",
    ),
    (
        "migrated_pages_total",
        &[],
        "Pages migrated by NUMA hint faults (TNF_MIGRATED; the kernel's numa_pages_migrated).",
    ),
    (
        "skipped_vmas_total",
        &["reason"],
        "VMAs the scanner skipped (sched_skip_vma_numa), by the kernel's reason.",
    ),
];

pub const SCOPES: [(&str, &[&str], &str); 4] = [
    ("numatrace_", &[], "All traced tasks"),
    ("numatrace_cgroup_", &["cgroup"], "Per cgroup"),
    ("numatrace_task_", &["comm", "pid"], "Per task (top N)"),
    ("numatrace_self_", &[], "numatrace's own threads"),
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
            "numatrace_hint_fault_pages_total",
            Counter,
            &[],
            "Pages the hint faults covered (a PMD THP fault covers 512).",
        ),
        spec(
            "numatrace_hint_faults_by_page_size_total",
            Counter,
            &["page_size"],
            "Hint faults by the size of the faulting page: base, pmd (THP) or large (other \
             large folios).",
        ),
        spec(
            "numatrace_hint_fault_migrate_failures_total",
            Counter,
            &[],
            "Hint faults whose page migration failed (TNF_MIGRATE_FAIL).",
        ),
        spec(
            "numatrace_cow_shared_hint_faults_total",
            Counter,
            &["page_size"],
            "Hint faults on copy-on-write pages mapped more than once (seed 000), base or large.",
        ),
        spec(
            "numatrace_cow_shared_migrations_total",
            Counter,
            &[],
            "COW-shared pages those faults migrated.",
        ),
        spec(
            "numatrace_migrate_calls_total",
            Counter,
            &[],
            "migrate_pages() calls for NUMA balancing (mm_migrate_pages, reason numa_misplaced).",
        ),
        spec(
            "numatrace_migrate_pages_total",
            Counter,
            &["result"],
            "Pages those calls migrated (succeeded) or not (failed), from mm_migrate_pages.",
        ),
        spec(
            "numatrace_migrate_thps_total",
            Counter,
            &["result"],
            "Transparent huge pages among them.",
        ),
        spec(
            "numatrace_migrate_misplaced_total",
            Counter,
            &["result"],
            "migrate_misplaced_folio/_page calls that migrated or not_migrated.",
        ),
        spec(
            "numatrace_migration_latency_seconds",
            Histogram,
            &[],
            "Duration of migrate_misplaced_folio/_page calls (seconds, from log2 buckets).",
        ),
        spec(
            "numatrace_migration_stalls_total",
            Counter,
            &[],
            "Waits on a page under migration (migration_entry_wait).",
        ),
        spec(
            "numatrace_migration_stall_seconds_total",
            Counter,
            &[],
            "Time spent in those waits (seconds).",
        ),
        spec(
            "numatrace_placement_events_total",
            Counter,
            &["kind"],
            "Task placement: move (sched_move_numa), swap_out / swap_in (sched_swap_numa as \
             initiator / as the other task), stick and stick_no_target (sched_stick_numa).",
        ),
        spec(
            "numatrace_pid_inactive_skips_total",
            Counter,
            &[],
            "pid_inactive VMA skips whose scan-sequence gap was recorded (seed 002).",
        ),
        spec(
            "numatrace_pid_inactive_skips_over_threads_total",
            Counter,
            &[],
            "Of those, skips with a gap larger than the task's thread count (a VMA seed 002 \
             would have scanned).",
        ),
        spec(
            "numatrace_pid_inactive_skips_at_threshold_total",
            Counter,
            &[],
            "Of those, skips with a gap equal to the thread count.",
        ),
        spec(
            "numatrace_node_hint_faults_total",
            Counter,
            &["node", "locality"],
            "Hint faults by the faulting CPU's node, local or remote.",
        ),
        spec(
            "numatrace_node_hint_fault_pages_total",
            Counter,
            &["node"],
            "Pages those faults covered.",
        ),
        spec(
            "numatrace_node_migrations_total",
            Counter,
            &["src", "dst", "result"],
            "migrate_misplaced_folio/_page calls (folios) by source and destination node; src \
             \"unknown\" when the source could not be resolved.",
        ),
        spec(
            "numatrace_node_migrated_pages_total",
            Counter,
            &["src", "dst"],
            "Pages hint faults migrated, by source and destination node.",
        ),
        spec(
            "numatrace_node_memory_bytes",
            Gauge,
            &["node", "state"],
            "Memory of the node (state total or free), from sysfs.",
        ),
        spec(
            "numatrace_node_tasks",
            Gauge,
            &["node", "role"],
            "Live traced tasks whose preferred node it is (role preferred) or that last ran \
             an event on it (role last_ran).",
        ),
        spec(
            "numatrace_dropped_events_total",
            Counter,
            &["cause"],
            "What could not be counted or delivered, by cause (see the stat report's `dropped`).",
        ),
        spec(
            "numatrace_ringbuf_records_total",
            Counter,
            &["kind"],
            "Ring-buffer records read, by kind.",
        ),
        spec(
            "numatrace_bpf_run_seconds_total",
            Counter,
            &["program"],
            "Time the kernel spent running each of numatrace's programs (BPF run-time \
             statistics, on while serving; seconds).",
        ),
        spec(
            "numatrace_bpf_runs_total",
            Counter,
            &["program"],
            "Runs of each program.",
        ),
        spec(
            "numatrace_bpf_stats_enabled",
            Gauge,
            &[],
            "1 when the kernel's BPF run-time statistics are on (numatrace_bpf_* are counted).",
        ),
        spec(
            "numatrace_scrape_duration_seconds",
            Gauge,
            &[],
            "Time this response took to read the kernel side and build (seconds).",
        ),
        spec(
            "numatrace_cpu_seconds_total",
            Counter,
            &[],
            "numatrace's own CPU time (user + system, seconds; process_cpu_seconds_total counts \
             whole seconds only).",
        ),
        spec(
            "numatrace_snapshot_consistent",
            Gauge,
            &[],
            "1 when nothing was counted while the kernel maps were read.",
        ),
        spec(
            "numatrace_tasks_tracked",
            Gauge,
            &[],
            "Tasks whose counts numatrace holds (live, and exited ones not yet folded away).",
        ),
        spec(
            "numatrace_numa_balancing",
            Gauge,
            &[],
            "kernel.numa_balancing when serve started (0 off, 1 normal, 2 memory tiering, 3 both).",
        ),
        spec(
            "numatrace_hook_info",
            Gauge,
            &["hook", "mechanism", "attached", "kernel"],
            "One series per hook: how it is attached on this kernel (fentry, kprobe, \
             tracepoint, tp_btf, perf_event or none).",
        ),
        spec(
            "numatrace_build_info",
            Gauge,
            &["version"],
            "numatrace's version.",
        ),
    ]
}

/// `/proc/vmstat` counters exported typed, as `numatrace_vmstat_<name>_total`.
pub fn vmstat_exported(name: &str) -> bool {
    name.starts_with("numa_") || name.starts_with("pgmigrate_")
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
pub fn describe() -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Metrics (every workload family also exists per cgroup, per task and for numatrace \
         itself: numatrace_cgroup_*, numatrace_task_*, numatrace_self_*):"
    );
    for f in families(&[]) {
        if f.name.starts_with("numatrace_cgroup_")
            || f.name.starts_with("numatrace_task_")
            || f.name.starts_with("numatrace_self_")
        {
            continue;
        }
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
        "  numatrace_vmstat_<name>_total (counter)\n      The kernel's own numa_* and \
         pgmigrate_* counters from /proc/vmstat, to cross-check against."
    );
    s
}
