//! A snapshot: everything the kernel side has counted since attach, read at one moment, and
//! the `/proc/vmstat` readings that bracket it. Two snapshots give a delta (the same type,
//! holding what was counted in between); views cut either by task, process, cgroup and node.
//! Pure data: no aya types, so it is unit-tested and serialised as it is.

use std::{
    collections::{BTreeMap, HashMap},
    hash::BuildHasherDefault,
};

use numatrace_common::{Counter, MAX_NODES, NODE_FAULT_FIELDS, SKIP_REASON_SLOTS};
use serde::{Deserialize, Serialize};

use crate::{
    kernel::{nodes::NodeInfo, tiering::Tiering},
    model::{
        CgroupRecord, Counts, EventTally, Filter, NodeRecord, NodeTasks, PackedCounts,
        ProcessRecord, RegionCount, TaskRecord, VmaRecord, ratio, write_over,
    },
    sources::maps::{Counters, NodeFlow, node_flows},
};

/// Hint faults the kernel had counted in numa_hint_faults (before migrating) whose
/// task_numa_fault, where numatrace counts them, had not yet run when the task map was read:
/// a migrate_misplaced call in progress, or returned and not yet followed by task_numa_fault.
/// They widen the /proc/vmstat bracket: numatrace's hint faults lie in
/// [vmstat_lo - end, vmstat_hi + start] (read between vmstat_lo and the task map; a fault
/// between the kernel's count and its migrate_misplaced call, a few instructions under the
/// page-table lock, is not seen). For a snapshot `start` is 0; for a delta, the earlier
/// snapshot's `end`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub start: u64,
    pub end: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// CLOCK_MONOTONIC (the kernel's `bpf_ktime_get_ns` clock) when it was taken.
    pub mono_ns: u64,
    /// 0 for a snapshot; for a delta, the nanoseconds between its two snapshots.
    pub span_ns: u64,
    /// Nothing was counted while the kernel maps were read (their counters matched before
    /// and after); for a delta, both snapshots were.
    pub consistent: bool,
    /// numatrace's own process: counted, but reported apart (`self`).
    pub self_tgid: u32,
    /// Every task the kernel side has an entry for, live or exited, ordered by (pid, creation).
    pub tasks: Vec<TaskRecord>,
    /// Per-VMA scanning and skips by tgid; present only in detailed snapshots.
    pub detail: bool,
    pub vmas: BTreeMap<u32, Vec<VmaRecord>>,
    /// The kernel side's own counters (indexed by `Counter`), summed over CPUs.
    pub counters: Counters,
    /// Raw per-CPU-summed arrays: latency and pages-per-fault log2 histograms, the migration
    /// matrix (calls), the migrated-pages matrix and hint faults per node.
    pub migrate_latency: Vec<u64>,
    pub fault_pages: Vec<u64>,
    pub migrate_matrix: Vec<u64>,
    pub migrated_pages: Vec<u64>,
    pub node_faults: Vec<u64>,
    pub region_faults: Vec<RegionCount>,
    /// `/proc/vmstat` read just before and just after the kernel maps. For a delta: `lo` is
    /// the kernel's count over a window that surely lies within numatrace's, `hi` over one that
    /// surely contains it (interval arithmetic), so numatrace's count lies in [lo, hi].
    pub vmstat_lo: BTreeMap<String, u64>,
    pub vmstat_hi: BTreeMap<String, u64>,
    /// Hint faults in flight when the task map was read (see [`InFlight`]).
    #[serde(default)]
    pub in_flight: InFlight,
    /// Runs of each program the kernel skipped (recursion protection), cumulative: events
    /// numatrace did not see at all.
    #[serde(default)]
    pub program_misses: BTreeMap<String, u64>,
    pub events: EventTally,
    pub undecodable: u64,
    /// Task entries gone from the kernel's table before userspace read them (created minus
    /// live minus exited), cumulative. A table that only frees an entry once its exit record
    /// is on the ring, or once userspace has read it, loses none: a figure above 0 is a bug.
    pub evicted: u64,
    pub nodes: Vec<NodeInfo>,
    /// Memory tiering as read with this snapshot; for a delta, at its end, and
    /// `tiering_start` at its start.
    #[serde(default)]
    pub tiering: Tiering,
    #[serde(default)]
    pub tiering_start: Option<Tiering>,
}

/// The cgroup rows of `tasks`: each cgroup's tasks and their counts, the most active first.
pub fn cgroups_of<'a>(tasks: impl Iterator<Item = &'a TaskRecord>) -> Vec<CgroupRecord> {
    let mut by_id: BTreeMap<u64, CgroupRecord> = BTreeMap::new();
    for t in tasks {
        let c = by_id.entry(t.cgroup_id).or_insert_with(|| CgroupRecord {
            id: t.cgroup_id,
            path: t.cgroup.as_deref().map(str::to_owned),
            tasks: 0,
            counts: Counts::default(),
        });
        c.tasks += 1;
        t.counts.add_to(&mut c.counts);
    }
    let activity = |c: &CgroupRecord| {
        c.counts
            .hint_faults
            .faults
            .saturating_add(c.counts.scan.pte_updates)
            .saturating_add(c.counts.skipped_vmas_total)
    };
    let mut v: Vec<_> = by_id
        .into_values()
        .map(|mut c| {
            c.counts = c.counts.finished();
            c
        })
        .collect();
    v.sort_by(|a, b| activity(b).cmp(&activity(a)).then(a.id.cmp(&b.id)));
    v
}

/// Tasks by key, hashed as the engine's table hashes them (100 000 per delta).
type ByKey<V> = HashMap<(u32, u64), V, BuildHasherDefault<super::tasks::KeyHasher>>;

fn sub_arrays(a: &[u64], b: &[u64]) -> Vec<u64> {
    a.iter()
        .enumerate()
        .map(|(i, v)| v.saturating_sub(b.get(i).copied().unwrap_or(0)))
        .collect()
}

fn sub_maps(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    a.iter()
        .filter_map(|(k, v)| Some((k.clone(), v.saturating_sub(*b.get(k)?))))
        .collect()
}

/// The tasks of an earlier snapshot, found by key as a later one's are walked: both lists are
/// in key order (the engine's), so a cursor finds each in turn where a hashed index of 100 000
/// records cost a cache miss per task; a list out of order (built by hand) is indexed.
enum Earlier<'a> {
    Ordered { tasks: &'a [TaskRecord], at: usize },
    Indexed(ByKey<&'a TaskRecord>),
}

impl<'a> Earlier<'a> {
    fn new(tasks: &'a [TaskRecord]) -> Self {
        if tasks.is_sorted_by(|a, b| a.key() < b.key()) {
            Self::Ordered { tasks, at: 0 }
        } else {
            Self::Indexed(tasks.iter().map(|t| (t.key(), t)).collect())
        }
    }

    fn find(&mut self, key: (u32, u64)) -> Option<&'a TaskRecord> {
        match self {
            Self::Indexed(by_key) => by_key.get(&key).copied(),
            Self::Ordered { tasks, at } => {
                super::tasks::seek(tasks, at, key, TaskRecord::key).map(|i| &tasks[i])
            }
        }
    }
}

impl Snapshot {
    /// Builds the task list from live map entries and exited tasks' final entries; an exit
    /// entry wins over a live one with the same key (it was read later and only grew). The
    /// engine builds it in one pass of its task table (`TaskTable::commit`); this is the
    /// reference its tests compare with, and the tests' way to make a snapshot.
    #[cfg(test)]
    pub fn tasks_from(
        live: &[numatrace_common::TaskStats],
        exited: &BTreeMap<(u32, u64), numatrace_common::TaskStats>,
    ) -> Vec<TaskRecord> {
        let mut by_key: BTreeMap<(u32, u64), TaskRecord> = BTreeMap::new();
        for s in live {
            // An entry whose task exited while the ring buffer was full is marked in the map.
            by_key.insert(
                (s.pid, s.first_ns),
                TaskRecord::from_stats(s, s.exited != 0),
            );
        }
        for (k, s) in exited {
            by_key.insert(*k, TaskRecord::from_stats(s, true));
        }
        by_key.into_values().collect()
    }

    /// What was counted between `earlier` and `self`.
    pub fn delta(&self, earlier: &Snapshot) -> Snapshot {
        self.delta_into(earlier, Vec::new())
    }

    /// [`Snapshot::delta`] with its task list written over `spare`: the list of a delta the
    /// caller is done with. At 100 000 tasks a fresh list is ~10 MiB faulted in and 100 000
    /// counts allocated, then handed back and freed, each time.
    pub fn delta_into(&self, earlier: &Snapshot, spare: Vec<TaskRecord>) -> Snapshot {
        let mut before = Earlier::new(&earlier.tasks);
        // Not one much larger than needed (a burst of tasks is not held for good).
        let mut tasks = if spare.capacity() <= 2 * self.tasks.len().max(1024) {
            spare
        } else {
            Vec::new()
        };
        write_over(&mut tasks, self.tasks.iter(), |t, r| {
            let d = before
                .find(t.key())
                .map(|e| t.counts().delta(&e.counts()).finished());
            r.assign(t, d.as_ref());
        });
        let vmas = if self.detail && earlier.detail {
            self.vmas
                .iter()
                .map(|(tgid, list)| {
                    let old: HashMap<u64, &VmaRecord> = earlier
                        .vmas
                        .get(tgid)
                        .map(|l| l.iter().map(|v| (v.start_addr, v)).collect())
                        .unwrap_or_default();
                    let list = list
                        .iter()
                        .map(|v| {
                            old.get(&v.start_addr)
                                .map_or_else(|| v.clone(), |e| v.delta(e))
                        })
                        .filter(|v| !v.is_empty())
                        .collect();
                    (*tgid, list)
                })
                .collect()
        } else {
            self.vmas.clone()
        };
        let old_regions: HashMap<(u32, u32, u64), u64> = earlier
            .region_faults
            .iter()
            .map(|r| (r.key(), r.faults))
            .collect();
        let region_faults = self
            .region_faults
            .iter()
            .map(|r| RegionCount {
                faults: r
                    .faults
                    .saturating_sub(old_regions.get(&r.key()).copied().unwrap_or(0)),
                ..*r
            })
            .filter(|r| r.faults > 0)
            .collect();
        Snapshot {
            mono_ns: self.mono_ns,
            span_ns: self.mono_ns.saturating_sub(earlier.mono_ns),
            consistent: self.consistent && earlier.consistent,
            self_tgid: self.self_tgid,
            tasks,
            detail: self.detail,
            vmas,
            counters: Counters(sub_arrays(&self.counters.0, &earlier.counters.0)),
            migrate_latency: sub_arrays(&self.migrate_latency, &earlier.migrate_latency),
            fault_pages: sub_arrays(&self.fault_pages, &earlier.fault_pages),
            migrate_matrix: sub_arrays(&self.migrate_matrix, &earlier.migrate_matrix),
            migrated_pages: sub_arrays(&self.migrated_pages, &earlier.migrated_pages),
            node_faults: sub_arrays(&self.node_faults, &earlier.node_faults),
            region_faults,
            vmstat_lo: sub_maps(&self.vmstat_lo, &earlier.vmstat_hi),
            vmstat_hi: sub_maps(&self.vmstat_hi, &earlier.vmstat_lo),
            in_flight: InFlight {
                start: earlier.in_flight.end,
                end: self.in_flight.end,
            },
            program_misses: sub_maps(&self.program_misses, &earlier.program_misses),
            events: self.events.delta(&earlier.events),
            undecodable: self.undecodable.saturating_sub(earlier.undecodable),
            evicted: self.evicted.saturating_sub(earlier.evicted),
            nodes: self.nodes.clone(),
            tiering: self.tiering.clone(),
            tiering_start: Some(earlier.tiering.clone()),
        }
    }

    /// Counters lower in `self` than in `earlier` (a task's, or a kernel array's): none may
    /// be, since everything the kernel side counts only grows.
    pub fn decreased(&self, earlier: &Snapshot) -> Vec<String> {
        let mut out = Vec::new();
        let later: HashMap<(u32, u64), &TaskRecord> =
            self.tasks.iter().map(|t| (t.key(), t)).collect();
        for e in &earlier.tasks {
            if let Some(t) = later.get(&e.key()) {
                t.counts().decreased(
                    &e.counts(),
                    &format!("task {}/{}: ", e.pid, e.first_ns),
                    &mut out,
                );
            }
        }
        for (name, a, b) in [
            ("counters", &self.counters.0, &earlier.counters.0),
            (
                "migrate_latency",
                &self.migrate_latency,
                &earlier.migrate_latency,
            ),
            ("fault_pages", &self.fault_pages, &earlier.fault_pages),
            (
                "migrate_matrix",
                &self.migrate_matrix,
                &earlier.migrate_matrix,
            ),
            (
                "migrated_pages",
                &self.migrated_pages,
                &earlier.migrated_pages,
            ),
            ("node_faults", &self.node_faults, &earlier.node_faults),
        ] {
            for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
                if x < y {
                    out.push(format!("{name}[{i}]"));
                }
            }
        }
        self.events.decreased(&earlier.events, "events.", &mut out);
        out
    }

    /// Traced tasks the filter keeps (numatrace's own are never among them), active or not.
    pub fn traced<'a>(&'a self, f: &'a Filter) -> impl Iterator<Item = &'a TaskRecord> + 'a {
        self.tasks
            .iter()
            .filter(move |t| t.tgid != self.self_tgid && f.matches(t))
    }

    /// Tasks with anything counted, most skipped VMAs first, then by pid.
    pub fn task_rows(&self, f: &Filter) -> Vec<TaskRecord> {
        self.task_refs(f).into_iter().cloned().collect()
    }

    /// [`Snapshot::task_rows`] without copying them.
    pub fn task_refs<'a>(&'a self, f: &'a Filter) -> Vec<&'a TaskRecord> {
        let mut v: Vec<&TaskRecord> = self.traced(f).filter(|t| !t.counts.is_empty()).collect();
        v.sort_by(|a, b| {
            b.counts
                .skipped_vmas_total()
                .cmp(&a.counts.skipped_vmas_total())
                .then(a.pid.cmp(&b.pid))
        });
        v
    }

    /// Everything the traced tasks the filter keeps counted.
    pub fn totals(&self, f: &Filter) -> Counts {
        let mut c = Counts::default();
        for t in self.traced(f) {
            t.counts.add_to(&mut c);
        }
        c.finished()
    }

    /// The traced tasks' scan shares, exact and sampled, as `totals(f).scan` has them
    /// (`share`, `sampled_share`): the four counters they divide, read in place from each task
    /// (`top`'s trend line, every refresh), not an unpack and add of its whole counts.
    pub fn scan_shares(&self, f: &Filter) -> (Option<f64>, Option<f64>) {
        static AT: std::sync::LazyLock<[usize; 4]> = std::sync::LazyLock::new(|| {
            [
                PackedCounts::word_index(|c| c.scan.runtime_in_scan_ns = 1),
                PackedCounts::word_index(|c| c.scan.task_runtime_ns = 1),
                PackedCounts::word_index(|c| c.scan.scan_samples = 1),
                PackedCounts::word_index(|c| c.scan.samples = 1),
            ]
        });
        let mut sum = [0u64; 4];
        for t in self.traced(f) {
            for (s, &i) in sum.iter_mut().zip(AT.iter()) {
                *s = s.saturating_add(t.counts.word(i));
            }
        }
        (ratio(sum[0], sum[1]), ratio(sum[2], sum[3]))
    }

    /// numatrace's own activity, which the kernel's counters include.
    pub fn self_counts(&self) -> Counts {
        let mut c = Counts::default();
        for t in self.tasks.iter().filter(|t| t.tgid == self.self_tgid) {
            t.counts.add_to(&mut c);
        }
        c.finished()
    }

    pub fn processes(&self, f: &Filter) -> Vec<ProcessRecord> {
        self.processes_of(self.traced(f).filter(|t| !t.counts.is_empty()))
    }

    /// [`Snapshot::processes`] of `tasks` (of this snapshot).
    pub fn processes_of<'a>(
        &self,
        tasks: impl Iterator<Item = &'a TaskRecord>,
    ) -> Vec<ProcessRecord> {
        let mut by_tgid: BTreeMap<u32, ProcessRecord> = BTreeMap::new();
        for t in tasks {
            let p = by_tgid.entry(t.tgid).or_insert_with(|| ProcessRecord {
                tgid: t.tgid,
                comm: t.comm.to_string(),
                threads: 0,
                counts: Counts::default(),
                vmas: self.vmas.get(&t.tgid).cloned().unwrap_or_default(),
            });
            if t.pid == t.tgid {
                p.comm = t.comm.to_string();
            }
            p.threads += 1;
            t.counts.add_to(&mut p.counts);
        }
        let mut v: Vec<_> = by_tgid
            .into_values()
            .map(|mut p| {
                p.counts = p.counts.finished();
                p.vmas.sort_by(|a, b| {
                    b.pte_updates
                        .cmp(&a.pte_updates)
                        .then(a.start_addr.cmp(&b.start_addr))
                });
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

    /// Per cgroup (each directory on its own, not its descendants), busiest first.
    pub fn cgroups(&self, f: &Filter) -> Vec<CgroupRecord> {
        cgroups_of(self.traced(f).filter(|t| !t.counts.is_empty()))
    }

    /// Migrations between nodes: calls (folios) and pages.
    pub fn node_flows(&self) -> Vec<NodeFlow> {
        node_flows(&self.migrate_matrix, &self.migrated_pages)
    }

    /// Per node. The kernel arrays are system-wide over the traced tasks (numatrace's own
    /// faults left out); a comm or cgroup filter narrows only the task columns.
    pub fn node_rows(&self, f: &Filter) -> Vec<NodeRecord> {
        self.node_rows_with(&self.node_tasks(f))
    }

    /// The live traced tasks (as `f` narrows them) by the nodes they prefer and last ran on.
    pub fn node_tasks(&self, f: &Filter) -> NodeTasks {
        let mut tasks = NodeTasks::default();
        for t in self.traced(f).filter(|t| !t.exited) {
            tasks.add(t.preferred_node, t.last_node);
        }
        tasks
    }

    /// Per node, the task columns from `tasks` (counted by whoever walked the tasks: `serve`'s
    /// snapshots list no task records).
    pub fn node_rows_with(&self, tasks: &NodeTasks) -> Vec<NodeRecord> {
        let n = MAX_NODES as usize;
        let mut rows: BTreeMap<u32, NodeRecord> = self
            .nodes
            .iter()
            .map(|i| {
                (
                    i.node,
                    NodeRecord {
                        node: i.node,
                        cpus: i.cpus.clone(),
                        mem_total_bytes: i.mem_total_bytes,
                        mem_free_bytes: i.mem_free_bytes,
                        distances: i.distances.clone(),
                        ..NodeRecord::default()
                    },
                )
            })
            .collect();
        let fields = NODE_FAULT_FIELDS as usize;
        for node in 0..n {
            let cell = |i: usize| {
                self.node_faults
                    .get(node * fields + i)
                    .copied()
                    .unwrap_or(0)
            };
            if cell(0) == 0 && !rows.contains_key(&(node as u32)) {
                continue;
            }
            let r = rows.entry(node as u32).or_insert_with(|| NodeRecord {
                node: node as u32,
                ..NodeRecord::default()
            });
            r.hint_faults = cell(0);
            r.hint_faults_local = cell(1);
            r.hint_faults_remote = cell(0).saturating_sub(cell(1));
            r.hint_pages = cell(2);
        }
        for flow in self.node_flows() {
            if let Some(r) = rows.get_mut(&flow.dst) {
                r.pages_migrated_in = r.pages_migrated_in.saturating_add(flow.pages);
                r.migrations_in = r.migrations_in.saturating_add(flow.migrated);
            }
            if let Some(r) = flow.src.and_then(|s| rows.get_mut(&s)) {
                r.pages_migrated_out = r.pages_migrated_out.saturating_add(flow.pages);
                r.migrations_out = r.migrations_out.saturating_add(flow.migrated);
            }
        }
        for r in rows.values_mut() {
            (r.tasks_preferring, r.tasks_last_ran) = tasks.of(r.node);
        }
        rows.into_values().collect()
    }

    pub fn counter(&self, c: Counter) -> u64 {
        self.counters.get(c)
    }
}

/// Skip slots are part of `TaskStats`; keep the JSON reason list in step with them.
const _: () = assert!(SKIP_REASON_SLOTS == 8);

#[cfg(test)]
mod tests {
    use super::*;
    use numatrace_common::TaskStats;

    fn stats(pid: u32, tgid: u32, first_ns: u64) -> TaskStats {
        let mut s = TaskStats::new(pid, tgid);
        s.first_ns = first_ns;
        s.comm[..4].copy_from_slice(b"work");
        s
    }

    fn snap(mono_ns: u64, live: &[TaskStats], exited: &[TaskStats]) -> Snapshot {
        let exited = exited.iter().map(|s| ((s.pid, s.first_ns), *s)).collect();
        Snapshot {
            mono_ns,
            self_tgid: 999,
            tasks: Snapshot::tasks_from(live, &exited),
            counters: Counters(vec![0; 32]),
            ..Snapshot::default()
        }
    }

    /// The walk over lists in key order and the index of a list out of order find the same
    /// earlier task for every later one: new tasks, gone ones, reused pids.
    #[test]
    fn delta_finds_earlier_tasks_in_any_order() {
        let live = |n: u64| -> Vec<TaskStats> {
            (0..40u32)
                .filter(|p| !(p + n as u32).is_multiple_of(7))
                .map(|p| {
                    let mut s = stats(p / 2, 1, u64::from(p % 2) + 1);
                    s.hint_faults.faults = n * u64::from(p + 1);
                    s
                })
                .collect()
        };
        let (s0, s1) = (snap(1_000, &live(1), &[]), snap(2_000, &live(3), &[]));
        assert!(s0.tasks.is_sorted_by_key(TaskRecord::key));
        let want = s1.delta(&s0);
        let mut shuffled = s0.clone();
        shuffled.tasks.reverse();
        let mut later = s1.clone();
        later.tasks.rotate_left(7);
        let mut got = later.delta(&shuffled);
        got.tasks.sort_by_key(TaskRecord::key);
        assert_eq!(got.tasks, want.tasks);
        // An earlier list in order, a later one not: the cursor falls back to a search.
        let mut got = later.delta(&s0);
        got.tasks.sort_by_key(TaskRecord::key);
        assert_eq!(got.tasks, want.tasks);
        assert!(want.tasks.iter().any(|t| t.counts().hint_faults.faults > 0));
        // Written over another list's records (more of them, fewer, other tasks with other
        // counts), the delta is the same.
        for spare in [s1.tasks.clone(), s0.tasks[..5].to_vec(), {
            let mut v = s0.tasks.clone();
            v.extend(s1.tasks.iter().cloned());
            v
        }] {
            assert_eq!(s1.delta_into(&s0, spare).tasks, want.tasks);
        }
    }

    /// The scan shares read in place are `totals`' to the bit: sums that saturate, numatrace's
    /// own tasks and the filtered-out ones left out.
    #[test]
    fn scan_shares_are_the_totals_shares() {
        let vals: [(u32, u64, u64, u64, u64); 5] = [
            (1, 3, 10, 1, 4),
            (1, u64::MAX - 5, 7, 9, 0),
            (1, 0, 0, 2, 2),
            (999, 1_000, 1, 1_000, 1),
            (2, 40, u64::MAX, 3, 5),
        ];
        let tasks = vals
            .iter()
            .enumerate()
            .map(|(i, &(tgid, a, b, c, d))| {
                let mut st = stats(i as u32 + 1, tgid, 1);
                if tgid == 2 {
                    st.comm[..4].copy_from_slice(b"else");
                }
                let mut t = TaskRecord::from_stats(&st, false);
                let mut k = Counts::default();
                k.scan.runtime_in_scan_ns = a;
                k.scan.task_runtime_ns = b;
                k.scan.scan_samples = c;
                k.scan.samples = d;
                t.counts.set(&k);
                t
            })
            .collect();
        let s = Snapshot {
            tasks,
            self_tgid: 999,
            ..Snapshot::default()
        };
        let work = Filter {
            comm: Some("work".into()),
            ..Filter::default()
        };
        let none = Filter {
            comm: Some("none".into()),
            ..Filter::default()
        };
        for f in [Filter::default(), work, none] {
            let t = s.totals(&f);
            assert_eq!(
                s.scan_shares(&f),
                (t.scan.share, t.scan.sampled_share),
                "{f:?}"
            );
        }
        assert_eq!(
            s.scan_shares(&Filter::default()),
            (Some(1.0), Some(15.0 / 11.0))
        );
    }

    #[test]
    fn delta_of_tasks_appearing_growing_and_exiting() {
        let mut a = stats(10, 10, 1);
        a.hint_faults.faults = 5;
        let s0 = snap(1_000, &[a], &[]);
        // a grows then exits; b appears.
        let mut a1 = a;
        a1.hint_faults.faults = 8;
        let mut b = stats(11, 10, 2);
        b.placement.moves = 2;
        let s1 = snap(3_000, &[b], &[a1]);
        let d = s1.delta(&s0);
        assert_eq!(d.span_ns, 2_000);
        let f = Filter::default();
        let rows = d.task_rows(&f);
        let ta = rows.iter().find(|t| t.pid == 10).unwrap();
        assert_eq!(ta.counts().hint_faults.faults, 3);
        assert!(ta.exited);
        assert_eq!(
            rows.iter()
                .find(|t| t.pid == 11)
                .unwrap()
                .counts()
                .placement
                .moves,
            2
        );
        assert_eq!(d.totals(&f).hint_faults.faults, 3);
        assert!(s1.decreased(&s0).is_empty());
    }

    #[test]
    fn a_reused_pid_is_another_task() {
        let mut a = stats(7, 7, 100);
        a.placement.sticks = 1;
        let s0 = snap(0, &[a], &[]);
        let mut b = stats(7, 7, 200);
        b.placement.sticks = 2;
        let s1 = snap(1, &[b], &[a]);
        let d = s1.delta(&s0);
        assert_eq!(d.tasks.len(), 2);
        // a did nothing more; b is new with its 2 sticks.
        assert_eq!(d.totals(&Filter::default()).placement.sticks, 2);
        assert_eq!(s1.totals(&Filter::default()).placement.sticks, 3);
    }

    #[test]
    fn deltas_telescope() {
        let mut a = stats(1, 1, 0);
        let mut snaps = Vec::new();
        for i in 0..5u64 {
            a.scan.pte_updates = i * i * 10;
            a.skip_vma[1] = i;
            snaps.push(snap(i, &[a], &[]));
        }
        let f = Filter::default();
        let mut sum = Counts::default();
        for w in snaps.windows(2) {
            sum.add(&w[1].delta(&w[0]).totals(&f));
        }
        let whole = snaps[4].delta(&snaps[0]).totals(&f);
        assert_eq!(sum.finished(), whole);
        assert_eq!(whole.scan.pte_updates, 160);
    }

    #[test]
    fn decreases_are_reported() {
        let mut a = stats(1, 1, 0);
        a.hint_faults.faults = 5;
        let s0 = snap(0, &[a], &[]);
        a.hint_faults.faults = 4;
        let s1 = snap(1, &[a], &[]);
        // `remote` is derived (faults − local), never compared.
        assert_eq!(s1.decreased(&s0), vec!["task 1/0: hint_faults.faults"]);
    }

    #[test]
    fn self_is_apart_and_filters_are_views() {
        let mut me = stats(999, 999, 0);
        me.scan.pte_updates = 50;
        let mut a = stats(1, 1, 0);
        a.comm = *b"averyveryverylon";
        a.comm[15] = 0;
        a.placement.moves = 1;
        a.cgroup_id = 5;
        let mut b = stats(2, 2, 0);
        b.placement.moves = 1;
        b.cgroup_id = 6;
        let mut s = snap(0, &[me, a, b], &[]);
        s.tasks[0].cgroup = Some("/app.slice/x".into());
        s.tasks[1].cgroup = Some("/other".into());
        let all = Filter::default();
        assert_eq!(s.totals(&all).placement.moves, 2);
        assert_eq!(s.totals(&all).scan.pte_updates, 0);
        assert_eq!(s.self_counts().scan.pte_updates, 50);
        let comm = Filter {
            comm: Some("averyveryverylongname".into()),
            ..Filter::default()
        };
        assert_eq!(s.task_rows(&comm).len(), 1);
        let cg = Filter {
            cgroup: Some("/app.slice".into()),
            ..Filter::default()
        };
        let rows = s.task_rows(&cg);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].pid, 1);
        assert_eq!(s.tasks.len(), 3, "views do not delete");
        let cgs = s.cgroups(&all);
        assert_eq!(cgs.len(), 2);
        assert!(
            cgs.iter()
                .any(|c| c.path.as_deref() == Some("/app.slice/x"))
        );
    }

    #[test]
    fn vmstat_brackets_by_interval_arithmetic() {
        let m = |v: u64| BTreeMap::from([("numa_hint_faults".to_owned(), v)]);
        let misses = |v: u64| BTreeMap::from([("fentry_task_numa_fault".to_owned(), v)]);
        let s0 = Snapshot {
            vmstat_lo: m(100),
            vmstat_hi: m(103),
            in_flight: InFlight { start: 0, end: 2 },
            program_misses: misses(5),
            ..Snapshot::default()
        };
        let s1 = Snapshot {
            vmstat_lo: m(200),
            vmstat_hi: m(201),
            in_flight: InFlight { start: 0, end: 1 },
            program_misses: misses(7),
            ..Snapshot::default()
        };
        let d = s1.delta(&s0);
        assert_eq!(d.vmstat_lo["numa_hint_faults"], 97);
        assert_eq!(d.vmstat_hi["numa_hint_faults"], 101);
        // In flight at each edge, not a difference; skipped runs are.
        assert_eq!(d.in_flight, InFlight { start: 2, end: 1 });
        assert_eq!(d.program_misses, misses(2));
    }

    #[test]
    fn nodes_sum_faults_and_flows() {
        let n = MAX_NODES as usize;
        let mut s = Snapshot {
            nodes: vec![
                NodeInfo {
                    node: 0,
                    ..NodeInfo::default()
                },
                NodeInfo {
                    node: 1,
                    ..NodeInfo::default()
                },
            ],
            node_faults: vec![0; n * 3],
            migrate_matrix: vec![0; 2 * (n + 1) * n],
            migrated_pages: vec![0; (n + 1) * n],
            ..Snapshot::default()
        };
        s.node_faults[0] = 10; // node 0: 10 faults, 4 local, 12 pages
        s.node_faults[1] = 4;
        s.node_faults[2] = 12;
        s.node_faults[3] = 1; // node 1: 1 remote
        s.node_faults[5] = 512;
        s.migrate_matrix[n] = 3; // 1 -> 0, 3 calls
        s.migrated_pages[n] = 514; // 1 -> 0, 514 pages
        let rows = s.node_rows(&Filter::default());
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].hint_faults_remote, 6);
        assert_eq!(rows[1].hint_faults_remote, 1);
        assert_eq!(rows[0].pages_migrated_in, 514);
        assert_eq!(rows[1].pages_migrated_out, 514);
        assert_eq!(rows[1].migrations_out, 3);
    }

    #[test]
    fn snapshot_round_trips_through_json() {
        let mut a = stats(3, 3, 9);
        a.hint_faults.faults = 2;
        let mut s = snap(5, &[a], &[]);
        s.vmas.insert(3, vec![VmaRecord::new(0x1000, 0x2000)]);
        s.detail = true;
        s.region_faults.push(RegionCount {
            tgid: 3,
            scan_seq: 1,
            region: 7,
            faults: 4,
        });
        let back: Snapshot = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }
}
