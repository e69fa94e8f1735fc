//! `numatrace stat` report: schema `numatrace.stat/1` (documented in the README).

use std::collections::BTreeMap;

use serde::Serialize;

use super::table;
use crate::{
    bpf::loader::HookReport,
    kernel::facts::KernelFacts,
    model::{Counts, EventTally, Model, ProcessRecord, TaskRecord},
    sources::maps::{Counters, Log2Bucket, NodeFlow},
};
use numatrace_common::Counter;

pub const SCHEMA: &str = "numatrace.stat/1";

#[derive(Clone, Debug, Serialize)]
pub struct KernelSummary {
    pub release: String,
    pub numa_nodes: u32,
    pub numa_balancing: Option<u32>,
}

impl From<&KernelFacts> for KernelSummary {
    fn from(f: &KernelFacts) -> Self {
        Self {
            release: f.release.clone(),
            numa_nodes: f.numa_nodes,
            numa_balancing: f.numa_balancing,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Every task on the system.
    System,
    /// One process (`--pid`) and the processes it forks.
    Pid,
    /// A command started by numatrace and its descendants.
    Command,
}

#[derive(Clone, Debug, Serialize)]
pub struct Window {
    pub duration_s: f64,
    pub scope: Scope,
    pub pid: Option<u32>,
    pub command: Option<Vec<String>>,
    /// The command's exit status (128 + signal number if a signal ended it).
    pub exit_code: Option<i32>,
    pub comm_filter: Option<String>,
}

/// Everything that could not be counted or delivered. `total` = 0 means the report is complete.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Dropped {
    /// Discrete events (or exit snapshots) the ring buffer had no room for.
    pub ringbuf_full: u64,
    /// Events not counted per task because the task map was full and could not take the task.
    pub task_map_full: u64,
    /// Task entries the LRU map evicted before they were read: their counts are lost.
    pub task_entries_evicted: u64,
    /// Children of a followed process that could not be followed.
    pub tracked_map_full: u64,
    /// Tracepoint fields that could not be read.
    pub read_failed: u64,
    /// Ring buffer records userspace could not decode.
    pub undecodable: u64,
    pub total: u64,
}

impl Dropped {
    pub fn compute(c: &Counters, live_entries: u64, exit_snapshots: u64, undecodable: u64) -> Self {
        let created = c.get(Counter::TasksCreated);
        let mut d = Self {
            ringbuf_full: c.get(Counter::RingbufFull),
            task_map_full: c.get(Counter::TaskMapFull),
            task_entries_evicted: created.saturating_sub(live_entries + exit_snapshots),
            tracked_map_full: c.get(Counter::TrackedMapFull),
            read_failed: c.get(Counter::ReadFailed),
            undecodable,
            total: 0,
        };
        d.total = d.ringbuf_full
            + d.task_map_full
            + d.task_entries_evicted
            + d.tracked_map_full
            + d.read_failed
            + d.undecodable;
        d
    }
}

/// Events the kernel programs counted (after the pid filter), to compare with what arrived.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KernelSeen {
    pub skip_vma: u64,
    /// The same events as seen by the tp_btf program (0 where it is not attached).
    pub skip_vma_tp_btf: u64,
    pub numa_move: u64,
    pub numa_swap: u64,
    pub numa_stick: u64,
    pub migrate_numa: u64,
    pub exit_snapshots: u64,
}

impl From<&Counters> for KernelSeen {
    fn from(c: &Counters) -> Self {
        Self {
            skip_vma: c.get(Counter::SeenSkipVma),
            skip_vma_tp_btf: c.get(Counter::SeenSkipVmaBtf),
            numa_move: c.get(Counter::SeenMove),
            numa_swap: c.get(Counter::SeenSwap),
            numa_stick: c.get(Counter::SeenStick),
            migrate_numa: c.get(Counter::SeenMigrateNuma),
            exit_snapshots: c.get(Counter::ExitSnapshots),
        }
    }
}

/// System-wide histograms of the function hooks (empty where they are not attached).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Histograms {
    pub migrate_latency_ns: Vec<Log2Bucket>,
    pub pages_per_hint_fault: Vec<Log2Bucket>,
    /// Hint faults taken in one 2 MiB region during one scan pass (seed 001): ~1 when faults
    /// are batched per PMD (THP), up to 512 when every 4K PTE faults on its own.
    pub hint_faults_per_region_pass: Vec<Log2Bucket>,
    pub region_passes: u64,
    pub mean_hint_faults_per_region_pass: Option<f64>,
}

impl Histograms {
    pub fn set_region_faults(&mut self, counts: &[u64]) {
        let mut buckets = vec![0u64; 11];
        for &c in counts {
            let b = (64 - c.leading_zeros()) as usize;
            buckets[b.min(10)] += 1;
        }
        self.hint_faults_per_region_pass = crate::sources::maps::log2_buckets(&buckets);
        self.region_passes = counts.len() as u64;
        let total: u64 = counts.iter().sum();
        self.mean_hint_faults_per_region_pass =
            (!counts.is_empty()).then(|| total as f64 / counts.len() as f64);
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct StatReport {
    pub schema: &'static str,
    pub numatrace_version: &'static str,
    pub kernel: KernelSummary,
    pub window: Window,
    pub hooks: Vec<HookReport>,
    pub tasks: Vec<TaskRecord>,
    pub processes: Vec<ProcessRecord>,
    pub totals: Counts,
    /// /proc/vmstat numa_* and pgmigrate_* deltas over the same window (system-wide).
    pub vmstat_delta: BTreeMap<String, u64>,
    /// Events the kernel programs saw / ring buffer records received.
    pub kernel_seen: KernelSeen,
    pub events_received: EventTally,
    pub histograms: Histograms,
    /// NUMA-misplaced migrations by source and destination node (function hooks).
    pub node_matrix: Vec<NodeFlow>,
    pub dropped: Dropped,
}

impl StatReport {
    pub fn new(
        kernel: KernelSummary,
        window: Window,
        hooks: Vec<HookReport>,
        model: &Model,
        vmstat_delta: BTreeMap<String, u64>,
        counters: &Counters,
        dropped: Dropped,
    ) -> Self {
        Self {
            schema: SCHEMA,
            numatrace_version: env!("CARGO_PKG_VERSION"),
            kernel,
            window,
            hooks,
            tasks: model.tasks().into_iter().cloned().collect(),
            processes: model.processes(),
            totals: model.totals(),
            vmstat_delta,
            kernel_seen: counters.into(),
            events_received: model.events.clone(),
            histograms: Histograms::default(),
            node_matrix: Vec::new(),
            dropped,
        }
    }

    pub fn to_text(&self, max_rows: usize) -> String {
        let w = &self.window;
        let scope = match w.scope {
            Scope::System => "system-wide".to_owned(),
            Scope::Pid => format!("pid {} and its children", w.pid.unwrap_or(0)),
            Scope::Command => format!(
                "command `{}`{}",
                w.command.as_deref().unwrap_or_default().join(" "),
                w.exit_code
                    .map_or(String::new(), |c| format!(" (exit {c})"))
            ),
        };
        let mut out = format!(
            "numatrace stat: {:.1} s, {scope}{}, kernel {} ({} NUMA node{}, numa_balancing={})\n",
            w.duration_s,
            w.comm_filter
                .as_ref()
                .map_or(String::new(), |c| format!(", comm {c}")),
            self.kernel.release,
            self.kernel.numa_nodes,
            if self.kernel.numa_nodes == 1 { "" } else { "s" },
            self.kernel
                .numa_balancing
                .map_or("?".into(), |v| v.to_string()),
        );
        let attached: Vec<_> = self.hooks.iter().filter(|h| h.attached).collect();
        out.push_str(&format!(
            "hooks: {} of {} attached ({}); `numatrace probes` says why not\n",
            attached.len(),
            self.hooks.len(),
            attached
                .iter()
                .map(|h| h.name)
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if self.kernel.numa_balancing == Some(0) {
            out.push_str(
                "note: kernel.numa_balancing is 0: NUMA balancing is off, nothing to see\n",
            );
        }
        out.push('\n');

        let mut rows = vec![
            [
                "PID",
                "TGID",
                "COMM",
                "SCAN%",
                "PTES",
                "HINTS",
                "LOCAL%",
                "SKIPPED",
                "MOVES",
                "SWAPS",
                "STICKS",
                "MIGRATED",
                "MIG_FAIL",
                "SKIPPED BY REASON",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for t in self.tasks.iter().take(max_rows) {
            let c = &t.counts;
            rows.push(vec![
                t.pid.to_string(),
                t.tgid.to_string(),
                format!("{}{}", t.comm, if t.exited { "*" } else { "" }),
                scan_share(c),
                c.scan.pte_updates.to_string(),
                c.hint_faults.faults.to_string(),
                pct(c.hint_faults.local, c.hint_faults.faults),
                c.skipped_vmas_total.to_string(),
                c.placement.moves.to_string(),
                format!("{}/{}", c.placement.swaps_out, c.placement.swaps_in),
                c.placement.sticks.to_string(),
                c.migrations.pages_ok.to_string(),
                c.migrations.pages_failed.to_string(),
                reasons(&c.skipped_vmas),
            ]);
        }
        if self.tasks.is_empty() {
            out.push_str("no NUMA balancing activity recorded for the traced tasks\n");
        } else {
            out.push_str(&table(&rows));
            if self.tasks.len() > max_rows {
                out.push_str(&format!(
                    "... {} more tasks (--json lists all)\n",
                    self.tasks.len() - max_rows
                ));
            }
            out.push_str("(* exited; SCAN% measured, or ~ sampled; SWAPS = initiated/received)\n");
        }

        let t = &self.totals;
        out.push_str(&format!(
            "\ntotals: {} skipped VMAs ({}); placement: {} moves, {}/{} swaps, {} sticks ({} without target); \
             NUMA migrations: {} pages ok, {} failed in {} calls (THP {} ok, {} failed)\n",
            t.skipped_vmas_total,
            if t.skipped_vmas.is_empty() { "-".into() } else { reasons(&t.skipped_vmas) },
            t.placement.moves,
            t.placement.swaps_out,
            t.placement.swaps_in,
            t.placement.sticks,
            t.placement.stick_no_target,
            t.migrations.pages_ok,
            t.migrations.pages_failed,
            t.migrations.calls,
            t.migrations.thp_ok,
            t.migrations.thp_failed,
        ));
        out.push_str(&format!(
            "scan: {} task_numa_work calls, {} in them (longest {}), share {}; {} PTEs updated in {} change_prot_numa calls; \
             node_stamp advanced {} for {} of scan runtime; {} node_stamp>runtime violations\n",
            t.scan.calls,
            ns(t.scan.time_ns),
            ns(t.scan.max_ns),
            scan_share(t),
            t.scan.pte_updates,
            t.scan.prot_numa_calls,
            ns(t.scan.node_stamp_advance_ns),
            ns(t.scan.runtime_in_scan_ns),
            t.scan.stamp_violations,
        ));
        let h = &t.hint_faults;
        out.push_str(&format!(
            "hint faults: {} ({} local, {} remote; {} 4K, {} THP, {} large folio; {} pages), {} pages migrated, {} failed; \
             {} on COW-shared pages ({} migrated); migrate_misplaced: {} calls, {} migrated, mean {}; {} migration stalls ({})\n",
            h.faults,
            h.local,
            h.remote,
            h.faults_4k,
            h.faults_thp,
            h.faults_large,
            h.pages,
            h.migrated_pages,
            h.migrate_failed,
            h.cow_shared,
            h.cow_shared_migrated,
            t.migrations.attempts,
            t.migrations.succeeded,
            t.migrations
                .latency_ns_mean
                .map_or("-".into(), |m| ns(m as u64)),
            t.migrations.stalls,
            ns(t.migrations.stall_ns),
        ));
        if !self.node_matrix.is_empty() {
            out.push_str(&format!(
                "migrations by node: {}\n",
                self.node_matrix
                    .iter()
                    .map(|f| format!(
                        "{}->{} {} ok/{} failed",
                        f.src.map_or("?".into(), |s| s.to_string()),
                        f.dst,
                        f.migrated,
                        f.not_migrated
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mut vmas: Vec<_> = self
            .processes
            .iter()
            .flat_map(|p| p.vmas.iter().map(move |v| (p, v)))
            .collect();
        vmas.sort_by_key(|(_, v)| std::cmp::Reverse(v.pte_updates));
        if vmas.first().is_some_and(|(_, v)| v.pte_updates > 0) {
            out.push_str(&format!(
                "most scanned VMAs: {}\n",
                vmas.iter()
                    .take(3)
                    .map(|(p, v)| format!(
                        "{} {}-{} {} ({} PTEs)",
                        p.tgid,
                        v.start,
                        v.end,
                        v.mapping.as_deref().unwrap_or("?"),
                        v.pte_updates
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        // Seed 002's view: VMAs skipped as inactive, longest unscanned first.
        let mut idle: Vec<_> = vmas
            .iter()
            .filter_map(|(p, v)| v.pid_inactive.map(|g| (p, v, g)))
            .collect();
        idle.sort_by_key(|(_, _, g)| std::cmp::Reverse(g.max_gap));
        if !idle.is_empty() {
            out.push_str(&format!(
                "longest unscanned VMAs (pid_inactive skips: scan sequences since last scan / threads): {}\n",
                idle.iter()
                    .take(3)
                    .map(|(p, v, g)| format!(
                        "{} {}-{} {}/{}{}",
                        p.tgid,
                        v.start,
                        v.end,
                        g.max_gap,
                        g.max_gap_threads,
                        if g.over_threads > 0 {
                            format!(" ({} skips beyond the thread count)", g.over_threads)
                        } else {
                            String::new()
                        }
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        out.push_str(&format!(
            "kernel /proc/vmstat (system-wide): {}\n",
            self.vmstat_delta
                .iter()
                .map(|(k, v)| format!("{k} +{v}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let d = &self.dropped;
        if d.total == 0 {
            out.push_str("dropped: 0 (complete)\n");
        } else {
            out.push_str(&format!(
                "dropped: {} (ring buffer full {}, task map full {}, evicted entries {}, \
                 unfollowed children {}, unreadable fields {}, undecodable {}): raise --max-tasks / --ringbuf-size\n",
                d.total,
                d.ringbuf_full,
                d.task_map_full,
                d.task_entries_evicted,
                d.tracked_map_full,
                d.read_failed,
                d.undecodable
            ));
        }
        out
    }
}

fn pct(n: u64, d: u64) -> String {
    if d == 0 {
        "-".into()
    } else {
        format!("{:.0}", 100.0 * n as f64 / d as f64)
    }
}

/// Measured share, else the sampled estimate marked with `~`, else `-`.
fn scan_share(c: &Counts) -> String {
    match (c.scan.share, c.scan.sampled_share) {
        (Some(s), _) => format!("{:.2}", s * 100.0),
        (None, Some(s)) => format!("~{:.2}", s * 100.0),
        _ => "-".into(),
    }
}

fn ns(v: u64) -> String {
    match v {
        0..1_000 => format!("{v} ns"),
        1_000..1_000_000 => format!("{:.1} us", v as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} ms", v as f64 / 1e6),
        _ => format!("{:.2} s", v as f64 / 1e9),
    }
}

fn reasons(m: &BTreeMap<String, u64>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use numatrace_common::{COUNTER_SLOTS, TaskStats};

    use super::*;

    fn counters(pairs: &[(Counter, u64)]) -> Counters {
        let mut v = vec![0; COUNTER_SLOTS as usize];
        for (c, n) in pairs {
            v[*c as usize] = *n;
        }
        Counters(v)
    }

    #[test]
    fn dropped_derives_evictions() {
        let c = counters(&[(Counter::TasksCreated, 10), (Counter::RingbufFull, 2)]);
        let d = Dropped::compute(&c, 5, 3, 0);
        assert_eq!(d.task_entries_evicted, 2);
        assert_eq!(d.ringbuf_full, 2);
        assert_eq!(d.total, 4);
        assert_eq!(Dropped::compute(&counters(&[]), 0, 0, 0).total, 0);
    }

    fn sample() -> StatReport {
        let mut m = Model::default();
        let mut s = TaskStats::new(100, 100);
        s.comm[..3].copy_from_slice(b"app");
        s.skip_vma[1] = 4;
        s.skip_vma[2] = 2;
        s.migrate_ok = 7;
        m.merge_live(&[s]);
        let c = counters(&[(Counter::TasksCreated, 1), (Counter::SeenSkipVma, 6)]);
        StatReport::new(
            KernelSummary {
                release: "6.18.0".into(),
                numa_nodes: 1,
                numa_balancing: Some(1),
            },
            Window {
                duration_s: 1.5,
                scope: Scope::Command,
                pid: None,
                command: Some(vec!["app".into(), "-x".into()]),
                exit_code: Some(0),
                comm_filter: None,
            },
            vec![],
            &m,
            BTreeMap::from([("numa_hint_faults".to_owned(), 3)]),
            &c,
            Dropped::compute(&c, 1, 0, 0),
        )
    }

    /// The JSON shape is the documented schema: these keys are a contract.
    #[test]
    fn json_schema_v1_shape() {
        let v = serde_json::to_value(sample()).unwrap();
        assert_eq!(v["schema"], "numatrace.stat/1");
        for key in [
            "numatrace_version",
            "kernel",
            "window",
            "hooks",
            "tasks",
            "processes",
            "totals",
            "vmstat_delta",
            "kernel_seen",
            "events_received",
            "dropped",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        let t = &v["tasks"][0];
        assert_eq!(t["pid"], 100);
        assert_eq!(t["comm"], "app");
        assert_eq!(t["exited"], false);
        assert_eq!(t["skipped_vmas"]["shared_ro"], 4);
        assert_eq!(t["skipped_vmas"]["inaccessible"], 2);
        assert_eq!(t["skipped_vmas_total"], 6);
        assert_eq!(t["migrations"]["pages_ok"], 7);
        assert_eq!(t["placement"]["moves"], 0);
        assert_eq!(v["processes"][0]["threads"], 1);
        assert_eq!(v["totals"]["skipped_vmas_total"], 6);
        assert_eq!(v["window"]["scope"], "command");
        assert_eq!(v["window"]["exit_code"], 0);
        assert_eq!(v["kernel_seen"]["skip_vma"], 6);
        assert_eq!(v["dropped"]["total"], 0);
        assert_eq!(v["vmstat_delta"]["numa_hint_faults"], 3);
    }

    #[test]
    fn text_names_reasons_and_completeness() {
        let t = sample().to_text(20);
        assert!(t.contains("command `app -x` (exit 0)"), "{t}");
        assert!(t.contains("inaccessible=2 shared_ro=4"), "{t}");
        assert!(t.contains("dropped: 0 (complete)"), "{t}");
        assert!(t.contains("numa_hint_faults +3"), "{t}");
    }
}
