//! Aggregation: per task, per process (thread group) and in total. Plain data in, plain data
//! out: no aya types, so it is tested on its own and shared by every frontend.

use std::collections::BTreeMap;

use numatrace_common::{
    EventKind, SKIP_REASON_NAMES, SKIP_REASON_OTHER, SKIP_REASON_SLOTS, TaskStats,
};
use serde::Serialize;

use crate::sources::ringbuf::Event;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// Moved to its preferred node (sched_move_numa).
    pub moves: u64,
    /// Swapped with a task on another node, as the initiator / as the other task.
    pub swaps_out: u64,
    pub swaps_in: u64,
    /// Placement attempts that changed nothing (sched_stick_numa), of which with no target CPU.
    pub sticks: u64,
    pub stick_no_target: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Migrations {
    /// migrate_pages() calls with reason numa_misplaced (tracepoint).
    pub calls: u64,
    /// Pages (any size) migrated / not migrated; of which THPs.
    pub pages_ok: u64,
    pub pages_failed: u64,
    pub thp_ok: u64,
    pub thp_failed: u64,
    /// migrate_misplaced_folio/_page calls (function hook): migrated, not migrated, and the
    /// mean latency in nanoseconds.
    pub attempts: u64,
    pub succeeded: u64,
    pub not_migrated: u64,
    pub latency_ns_total: u64,
    pub latency_ns_mean: Option<f64>,
    /// migration_entry_wait: stalls on a page under migration, and time stalled.
    pub stalls: u64,
    pub stall_ns: u64,
}

/// task_numa_work, change_prot_numa and the sampled fallback.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Scan {
    /// task_numa_work calls, time inside, longest call.
    pub calls: u64,
    pub time_ns: u64,
    pub max_ns: u64,
    /// Σ Δse.sum_exec_runtime and Σ Δnode_stamp across the calls (seed 003: node_stamp should
    /// advance 32× the runtime spent scanning).
    pub runtime_in_scan_ns: u64,
    pub node_stamp_advance_ns: u64,
    /// Calls entered with node_stamp > sum_exec_runtime (seed 003 invariant 1; expected 0).
    pub stamp_violations: u64,
    /// Calls during which runtime advanced, and those after which node_stamp had advanced less
    /// than 32x that runtime (seed 003's cap; expected 0).
    pub cap_calls: u64,
    pub cap_violations: u64,
    /// The task's run time over the window, from its sum_exec_runtime (first to last seen).
    pub task_runtime_ns: u64,
    /// runtime_in_scan_ns / task_runtime_ns: the share of the task's CPU time spent in
    /// task_numa_work (what seed 003 caps near 3%; tick-granular, like sum_exec_runtime).
    pub share: Option<f64>,
    /// time_ns / task_runtime_ns: wall-clock time inside task_numa_work per CPU time; larger
    /// than `share` when the task is preempted while scanning.
    pub wall_share: Option<f64>,
    /// The CPU share up to the start of the latest call: what seed 003's cap bounds (the
    /// latest call has not been followed by its 32x yet). Per task only.
    pub share_between_calls: Option<f64>,
    /// mm->numa_scan_seq after the last scan: full passes over the address space (the highest
    /// across tasks when summed).
    pub scan_seq: u64,
    /// PTEs made PROT_NONE (change_prot_numa) and its calls.
    pub pte_updates: u64,
    pub prot_numa_calls: u64,
    /// CPU-clock samples of the task, those inside task_numa_work, and their ratio.
    pub samples: u64,
    pub scan_samples: u64,
    pub sampled_share: Option<f64>,
}

/// task_numa_fault and the fault entry points.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HintFaults {
    pub faults: u64,
    pub local: u64,
    pub remote: u64,
    pub pages: u64,
    /// By pages per fault: 1 (4K), 512 (PMD THP), other (mTHP / large folio).
    pub faults_4k: u64,
    pub faults_thp: u64,
    pub faults_large: u64,
    /// Pages whose fault migrated them (TNF_MIGRATED), faults whose migration failed.
    pub migrated_pages: u64,
    pub migrate_failed: u64,
    pub numa_page_entries: u64,
    pub huge_pmd_numa_entries: u64,
    /// Hint faults on COW-shared pages (mpol_misplaced: copy-on-write mapping, mapcount > 1),
    /// and how many of those pages were migrated. Seed 000 expects ~0 (4K pages).
    pub cow_shared: u64,
    pub cow_shared_migrated: u64,
    /// Of `cow_shared`, faults on large folios (THP), which the kernel's skip does not cover.
    pub cow_shared_large: u64,
}

/// The counters of one task, process or the whole window.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Counts {
    /// Skipped VMAs by reason name (only reasons that occurred).
    pub skipped_vmas: BTreeMap<String, u64>,
    pub skipped_vmas_total: u64,
    pub placement: Placement,
    pub migrations: Migrations,
    pub scan: Scan,
    pub hint_faults: HintFaults,
}

fn ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

pub fn skip_reason_name(slot: usize) -> &'static str {
    SKIP_REASON_NAMES.get(slot).copied().unwrap_or("other")
}

impl Counts {
    pub fn from_stats(s: &TaskStats) -> Self {
        let mut skipped_vmas = BTreeMap::new();
        for (slot, &n) in s.skip_vma.iter().enumerate() {
            if n > 0 {
                let name = if slot >= SKIP_REASON_OTHER {
                    "other"
                } else {
                    skip_reason_name(slot)
                };
                *skipped_vmas.entry(name.to_owned()).or_insert(0) += n;
            }
        }
        Self {
            skipped_vmas_total: skipped_vmas.values().sum(),
            skipped_vmas,
            placement: Placement {
                moves: s.numa_moves,
                swaps_out: s.numa_swaps_out,
                swaps_in: s.numa_swaps_in,
                sticks: s.numa_sticks,
                stick_no_target: s.numa_stick_no_target,
            },
            migrations: Migrations {
                calls: s.migrate_calls,
                pages_ok: s.migrate_ok,
                pages_failed: s.migrate_failed,
                thp_ok: s.migrate_thp_ok,
                thp_failed: s.migrate_thp_failed,
                attempts: s.migrate_attempts,
                succeeded: s.migrate_succeeded,
                not_migrated: s.migrate_not_migrated,
                latency_ns_total: s.migrate_ns,
                latency_ns_mean: None,
                stalls: s.migration_waits,
                stall_ns: s.migration_wait_ns,
            },
            scan: Scan {
                calls: s.scan_calls,
                time_ns: s.scan_ns,
                max_ns: s.scan_max_ns,
                runtime_in_scan_ns: s.scan_runtime_ns,
                node_stamp_advance_ns: s.scan_node_stamp_ns,
                stamp_violations: s.scan_stamp_violations,
                cap_calls: s.scan_cap_calls,
                cap_violations: s.scan_cap_violations,
                task_runtime_ns: s.runtime_last_ns.saturating_sub(s.runtime_first_ns),
                scan_seq: s.scan_seq,
                share: None,
                wall_share: None,
                share_between_calls: {
                    let den = s.scan_last_entry_runtime.saturating_sub(s.runtime_first_ns);
                    let num = s.scan_runtime_ns.saturating_sub(s.scan_last_call_rt);
                    (s.scan_calls >= 2 && den > 0).then(|| num as f64 / den as f64)
                },
                pte_updates: s.pte_updates,
                prot_numa_calls: s.prot_numa_calls,
                samples: s.samples,
                scan_samples: s.scan_samples,
                sampled_share: None,
            },
            hint_faults: HintFaults {
                faults: s.hint_faults,
                local: s.hint_faults_local,
                remote: s.hint_faults.saturating_sub(s.hint_faults_local),
                pages: s.hint_pages,
                faults_4k: s.hint_faults_4k,
                faults_thp: s.hint_faults_thp,
                faults_large: s.hint_faults_large,
                migrated_pages: s.hint_migrated_pages,
                migrate_failed: s.hint_migrate_failed,
                numa_page_entries: s.numa_page_entries,
                huge_pmd_numa_entries: s.huge_pmd_numa_entries,
                cow_shared: s.cow_shared_faults,
                cow_shared_migrated: s.cow_shared_migrations,
                cow_shared_large: s.cow_shared_faults_large,
            },
        }
        .finished()
    }

    /// Computes the ratios, which are not additive: call after summing.
    pub fn finished(mut self) -> Self {
        let sc = &mut self.scan;
        sc.share = ratio(sc.runtime_in_scan_ns, sc.task_runtime_ns);
        sc.wall_share = ratio(sc.time_ns, sc.task_runtime_ns);
        sc.sampled_share = ratio(sc.scan_samples, sc.samples);
        let m = &mut self.migrations;
        m.latency_ns_mean = ratio(m.latency_ns_total, m.attempts);
        self
    }

    pub fn add(&mut self, o: &Counts) {
        for (k, v) in &o.skipped_vmas {
            *self.skipped_vmas.entry(k.clone()).or_insert(0) += v;
        }
        self.skipped_vmas_total += o.skipped_vmas_total;
        let (p, q) = (&mut self.placement, &o.placement);
        p.moves += q.moves;
        p.swaps_out += q.swaps_out;
        p.swaps_in += q.swaps_in;
        p.sticks += q.sticks;
        p.stick_no_target += q.stick_no_target;
        let (m, n) = (&mut self.migrations, &o.migrations);
        m.calls += n.calls;
        m.pages_ok += n.pages_ok;
        m.pages_failed += n.pages_failed;
        m.thp_ok += n.thp_ok;
        m.thp_failed += n.thp_failed;
        m.attempts += n.attempts;
        m.succeeded += n.succeeded;
        m.not_migrated += n.not_migrated;
        m.latency_ns_total += n.latency_ns_total;
        m.stalls += n.stalls;
        m.stall_ns += n.stall_ns;
        let (a, b) = (&mut self.scan, &o.scan);
        a.calls += b.calls;
        a.time_ns += b.time_ns;
        a.max_ns = a.max_ns.max(b.max_ns);
        a.scan_seq = a.scan_seq.max(b.scan_seq);
        a.runtime_in_scan_ns += b.runtime_in_scan_ns;
        a.node_stamp_advance_ns += b.node_stamp_advance_ns;
        a.stamp_violations += b.stamp_violations;
        a.cap_calls += b.cap_calls;
        a.cap_violations += b.cap_violations;
        a.task_runtime_ns += b.task_runtime_ns;
        a.pte_updates += b.pte_updates;
        a.prot_numa_calls += b.prot_numa_calls;
        a.samples += b.samples;
        a.scan_samples += b.scan_samples;
        let (f, g) = (&mut self.hint_faults, &o.hint_faults);
        f.faults += g.faults;
        f.local += g.local;
        f.remote += g.remote;
        f.pages += g.pages;
        f.faults_4k += g.faults_4k;
        f.faults_thp += g.faults_thp;
        f.faults_large += g.faults_large;
        f.migrated_pages += g.migrated_pages;
        f.migrate_failed += g.migrate_failed;
        f.numa_page_entries += g.numa_page_entries;
        f.huge_pmd_numa_entries += g.huge_pmd_numa_entries;
        f.cow_shared += g.cow_shared;
        f.cow_shared_migrated += g.cow_shared_migrated;
        f.cow_shared_large += g.cow_shared_large;
    }

    /// Nothing NUMA-balancing related happened (samples alone do not count).
    pub fn is_empty(&self) -> bool {
        let mut c = self.clone();
        c.scan.samples = 0;
        c.scan.task_runtime_ns = 0;
        c.scan.share = None;
        c.scan.wall_share = None;
        c.scan.share_between_calls = None;
        c.scan.sampled_share = None;
        c == Self::default()
    }
}

pub fn comm_str(comm: &[u8; 16]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaskRecord {
    pub pid: u32,
    pub tgid: u32,
    pub comm: String,
    /// The task exited during the window.
    pub exited: bool,
    #[serde(flatten)]
    pub counts: Counts,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProcessRecord {
    pub tgid: u32,
    /// comm of the thread-group leader if seen, else of its first thread.
    pub comm: String,
    pub threads: u32,
    #[serde(flatten)]
    pub counts: Counts,
    /// VMAs change_prot_numa worked on, most PTE updates first.
    pub vmas: Vec<VmaRecord>,
}

/// One VMA's share of the scanning (change_prot_numa calls on it), and how long the scanner
/// left it alone (pid_inactive skips).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VmaRecord {
    /// Hex start and end addresses.
    pub start: String,
    pub end: String,
    pub pte_updates: u64,
    pub calls: u64,
    /// From /proc/PID/maps while the process lives; `None` once it has exited.
    pub mapping: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid_inactive: Option<GapRecord>,
    /// sched_skip_vma_numa events on it, by reason (from the ring buffer).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub skips: BTreeMap<&'static str, u64>,
    #[serde(skip)]
    pub start_addr: u64,
    /// CLOCK_MONOTONIC times of its change_prot_numa calls, oldest first (at most
    /// [`MAX_SCAN_TIMES`]).
    #[serde(skip)]
    pub scan_times_ns: Vec<u64>,
}

/// Kept per VMA: enough for minutes of scanning at the fastest scan period.
pub const MAX_SCAN_TIMES: usize = 65536;

/// pid_inactive skips of one VMA and the scan-sequence gap at each (seed 002, tp_btf).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GapRecord {
    pub skips: u64,
    /// Skips with gap > the task's thread count: a patched kernel scans instead.
    pub over_threads: u64,
    /// Skips with gap == the thread count: the VMA reached the patch's threshold.
    pub at_threshold: u64,
    pub max_gap: u64,
    pub max_gap_threads: u64,
}

/// One row of per-VMA data from the kernel maps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmaRow {
    pub tgid: u32,
    pub start: u64,
    pub end: u64,
    pub pte_updates: u64,
    pub calls: u64,
    pub mapping: Option<String>,
    pub gap: Option<GapRecord>,
}

/// Ring buffer records received, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EventTally {
    pub skip_vma: u64,
    pub numa_move: u64,
    pub numa_swap: u64,
    pub numa_stick: u64,
    pub migrate_pages: u64,
    pub task_exit: u64,
    pub vma_scan: u64,
}

#[derive(Clone, Debug, Default)]
pub struct Model {
    /// Keyed by (pid, creation time): a pid reused within the window is another task.
    tasks: BTreeMap<(u32, u64), TaskRecord>,
    pub events: EventTally,
    vmas: BTreeMap<u32, Vec<VmaRecord>>,
    /// (tgid, vm_start) -> change_prot_numa times.
    scan_times: BTreeMap<(u32, u64), Vec<u64>>,
    /// (tgid, vm_start) -> skip events by reason slot.
    vma_skips: BTreeMap<(u32, u64), [u64; SKIP_REASON_SLOTS]>,
}

impl Model {
    fn put(&mut self, s: &TaskStats, exited: bool) {
        self.tasks.insert(
            (s.pid, s.first_ns),
            TaskRecord {
                pid: s.pid,
                tgid: s.tgid,
                comm: comm_str(&s.comm),
                exited,
                counts: Counts::from_stats(s),
            },
        );
    }

    pub fn apply(&mut self, ev: &Event) {
        let t = &mut self.events;
        match ev {
            Event::SkipVma(e) => {
                t.skip_vma += 1;
                let slot = (e.reason as usize).min(SKIP_REASON_OTHER);
                self.vma_skips
                    .entry((e.hdr.tgid, e.vm_start))
                    .or_insert([0; SKIP_REASON_SLOTS])[slot] += 1;
            }
            Event::Placement(EventKind::NumaMove, _) => t.numa_move += 1,
            Event::Placement(EventKind::NumaSwap, _) => t.numa_swap += 1,
            Event::Placement(_, _) => t.numa_stick += 1,
            Event::MigratePages(_) => t.migrate_pages += 1,
            Event::TaskExit(e) => {
                t.task_exit += 1;
                self.put(&e.stats, true);
            }
            Event::VmaScan(e) => {
                t.vma_scan += 1;
                let v = self.scan_times.entry((e.hdr.tgid, e.vm_start)).or_default();
                if v.len() < MAX_SCAN_TIMES {
                    v.push(e.hdr.ts_ns);
                }
            }
        }
    }

    /// Adds the live entries of the task map, read after the ring buffer was drained.
    pub fn merge_live(&mut self, live: &[TaskStats]) {
        for s in live {
            // An entry whose task exited while the ring buffer was full is marked in the map.
            self.put(s, s.exited != 0);
        }
    }

    /// Adds the per-VMA rows of the kernel maps, with the scan times the ring buffer gave.
    pub fn merge_vmas(&mut self, vmas: impl IntoIterator<Item = VmaRow>) {
        for r in vmas {
            // Moved, not copied: each VMA row is merged once.
            let mut scan_times_ns = self
                .scan_times
                .remove(&(r.tgid, r.start))
                .unwrap_or_default();
            scan_times_ns.sort_unstable();
            let skips = self
                .vma_skips
                .get(&(r.tgid, r.start))
                .map(|c| {
                    c.iter()
                        .enumerate()
                        .filter(|(_, n)| **n > 0)
                        .map(|(i, n)| (skip_reason_name(i), *n))
                        .collect()
                })
                .unwrap_or_default();
            self.vmas.entry(r.tgid).or_default().push(VmaRecord {
                start: format!("{:#x}", r.start),
                end: format!("{:#x}", r.end),
                pte_updates: r.pte_updates,
                calls: r.calls,
                mapping: r.mapping,
                pid_inactive: r.gap,
                skips,
                start_addr: r.start,
                scan_times_ns,
            });
        }
        for v in self.vmas.values_mut() {
            v.sort_by(|a, b| {
                b.pte_updates
                    .cmp(&a.pte_updates)
                    .then(a.start.cmp(&b.start))
            });
        }
    }

    /// Keeps only tasks whose comm is `comm` (as the kernel truncates it: 15 bytes).
    pub fn retain_comm(&mut self, comm: &str) {
        let want: String = comm.chars().take(15).collect();
        self.tasks.retain(|_, t| t.comm == want);
    }

    pub fn task_count(&self) -> usize {
        self.tasks.len()
    }

    /// Tasks with anything counted, most skipped VMAs first, then by pid.
    pub fn tasks(&self) -> Vec<&TaskRecord> {
        let mut v: Vec<_> = self
            .tasks
            .values()
            .filter(|t| !t.counts.is_empty())
            .collect();
        v.sort_by(|a, b| {
            b.counts
                .skipped_vmas_total
                .cmp(&a.counts.skipped_vmas_total)
                .then(a.pid.cmp(&b.pid))
        });
        v
    }

    pub fn processes(&self) -> Vec<ProcessRecord> {
        let mut by_tgid: BTreeMap<u32, ProcessRecord> = BTreeMap::new();
        for t in self.tasks.values().filter(|t| !t.counts.is_empty()) {
            let p = by_tgid.entry(t.tgid).or_insert_with(|| ProcessRecord {
                tgid: t.tgid,
                comm: t.comm.clone(),
                threads: 0,
                counts: Counts::default(),
                vmas: self.vmas.get(&t.tgid).cloned().unwrap_or_default(),
            });
            if t.pid == t.tgid {
                p.comm = t.comm.clone();
            }
            p.threads += 1;
            p.counts.add(&t.counts);
        }
        let mut v: Vec<_> = by_tgid
            .into_values()
            .map(|mut p| {
                p.counts = p.counts.finished();
                p
            })
            .collect();
        v.sort_by(|a, b| {
            b.counts
                .skipped_vmas_total
                .cmp(&a.counts.skipped_vmas_total)
                .then(a.tgid.cmp(&b.tgid))
        });
        v
    }

    pub fn totals(&self) -> Counts {
        let mut c = Counts::default();
        for t in self.tasks.values() {
            c.add(&t.counts);
        }
        c.finished()
    }
}

#[cfg(test)]
mod tests {
    use numatrace_common::{EventHeader, TaskExitEvent};

    use super::*;

    fn stats(pid: u32, tgid: u32, first_ns: u64) -> TaskStats {
        let mut s = TaskStats::new(pid, tgid);
        s.first_ns = first_ns;
        s.comm[..4].copy_from_slice(b"work");
        s
    }

    fn exit(s: TaskStats) -> Event {
        Event::TaskExit(Box::new(TaskExitEvent {
            hdr: EventHeader {
                kind: EventKind::TaskExit as u32,
                pid: s.pid,
                tgid: s.tgid,
                cpu: 0,
                ts_ns: 0,
            },
            stats: s,
        }))
    }

    #[test]
    fn counts_map_reasons_and_unknown_slot() {
        let mut s = stats(1, 1, 0);
        s.skip_vma[1] = 3; // shared_ro
        s.skip_vma[4] = 2; // pid_inactive
        s.skip_vma[7] = 1; // a reason newer than this build
        s.migrate_ok = 10;
        let c = Counts::from_stats(&s);
        assert_eq!(c.skipped_vmas["shared_ro"], 3);
        assert_eq!(c.skipped_vmas["pid_inactive"], 2);
        assert_eq!(c.skipped_vmas["other"], 1);
        assert_eq!(c.skipped_vmas_total, 6);
        assert_eq!(c.migrations.pages_ok, 10);
        assert!(!c.skipped_vmas.contains_key("unsuitable"));
    }

    #[test]
    fn exit_snapshots_and_live_entries_add_up() {
        let mut m = Model::default();
        let mut a = stats(10, 10, 1);
        a.skip_vma[1] = 4;
        let mut b = stats(11, 10, 2);
        b.skip_vma[1] = 1;
        b.skip_vma[2] = 2;
        b.numa_moves = 1;
        let mut c = stats(20, 20, 3);
        c.numa_swaps_in = 5;
        m.apply(&exit(a));
        m.merge_live(&[b, c]);
        assert_eq!(m.events.task_exit, 1);
        let t = m.totals();
        assert_eq!(t.skipped_vmas["shared_ro"], 5);
        assert_eq!(t.skipped_vmas["inaccessible"], 2);
        assert_eq!(t.skipped_vmas_total, 7);
        assert_eq!(t.placement.moves, 1);
        assert_eq!(t.placement.swaps_in, 5);
        let procs = m.processes();
        assert_eq!(procs[0].tgid, 10);
        assert_eq!(procs[0].threads, 2);
        assert_eq!(procs[0].counts.skipped_vmas_total, 7);
        let tasks = m.tasks();
        assert_eq!(tasks[0].pid, 10, "most skipped first");
        assert!(tasks[0].exited);
        assert!(!tasks[1].exited);
    }

    #[test]
    fn shares_are_computed_on_sums_not_summed() {
        let mut m = Model::default();
        let mut a = stats(1, 1, 0);
        a.scan_calls = 1;
        a.scan_ns = 20;
        a.scan_runtime_ns = 10;
        a.runtime_first_ns = 100;
        a.runtime_last_ns = 1100; // 1% share
        a.samples = 100;
        a.scan_samples = 1;
        let mut b = stats(2, 1, 0);
        b.scan_calls = 1;
        b.scan_ns = 60;
        b.scan_runtime_ns = 30;
        b.runtime_first_ns = 0;
        b.runtime_last_ns = 1000; // 3% share
        b.samples = 100;
        b.scan_samples = 3;
        b.hint_faults = 4;
        b.hint_faults_local = 1;
        b.migrate_attempts = 2;
        b.migrate_ns = 300;
        m.merge_live(&[a, b]);
        let t = m.totals();
        assert_eq!(t.scan.share, Some(40.0 / 2000.0));
        assert_eq!(t.scan.wall_share, Some(80.0 / 2000.0));
        assert_eq!(t.scan.sampled_share, Some(4.0 / 200.0));
        assert_eq!(t.hint_faults.remote, 3);
        assert_eq!(t.migrations.latency_ns_mean, Some(150.0));
        let task2 = m.tasks().into_iter().find(|t| t.pid == 2).unwrap();
        assert_eq!(task2.counts.scan.share, Some(0.03));
    }

    #[test]
    fn samples_alone_are_not_activity() {
        let mut m = Model::default();
        let mut a = stats(1, 1, 0);
        a.samples = 5;
        a.runtime_last_ns = 10;
        m.merge_live(&[a]);
        assert!(m.tasks().is_empty());
    }

    #[test]
    fn reused_pid_is_another_task() {
        let mut m = Model::default();
        let mut a = stats(7, 7, 100);
        a.numa_sticks = 1;
        let mut b = stats(7, 7, 200);
        b.numa_sticks = 2;
        m.apply(&exit(a));
        m.merge_live(&[b]);
        assert_eq!(m.task_count(), 2);
        assert_eq!(m.totals().placement.sticks, 3);
    }

    #[test]
    fn comm_filter_truncates_like_the_kernel() {
        let mut m = Model::default();
        let mut a = stats(1, 1, 0);
        a.comm = *b"averyveryverylon";
        a.comm[15] = 0;
        a.numa_moves = 1;
        let mut b = stats(2, 2, 0);
        b.numa_moves = 1;
        m.merge_live(&[a, b]);
        m.retain_comm("averyveryverylongname");
        assert_eq!(m.task_count(), 1);
        assert_eq!(m.tasks()[0].pid, 1);
    }
}
