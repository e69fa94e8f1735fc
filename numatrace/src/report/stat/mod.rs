//! `numatrace stat` report: schema `numatrace.stat/2` (documented in docs/json-schema.md), built from
//! the delta of two snapshots. Owned types, serde both ways: a capture file and an offline
//! report read it back. Text rendering lives in [`text`].

mod text;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{
    bpf::loader::HookReport,
    engine::{InFlight, Snapshot},
    kernel::facts::KernelSummary,
    model::{
        CgroupRecord, Counts, EventTally, Filter, Log2Bucket, NodeRecord, ProcessRecord,
        TaskRecord, Window, log2_buckets,
    },
    report::measured::{Feed, Measured},
    sources::maps::{Counters, NodeFlow},
};
use numatrace_common::Counter;

pub const SCHEMA: &str = "numatrace.stat/2";

/// Everything that could not be counted or delivered. `total` = 0 means the report is complete.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dropped {
    /// Discrete events (or exit snapshots) the ring buffer had no room for.
    pub ringbuf_full: u64,
    /// Events not counted per task because the task map was full and could not take the task.
    pub task_map_full: u64,
    /// Task entries gone from the task table before they were read: their counts are lost
    /// (none since the table frees an entry only once it is read or its exit record sent;
    /// captures of earlier versions, whose table evicted, may hold some).
    pub task_entries_evicted: u64,
    /// Children of a followed process that could not be followed.
    pub tracked_map_full: u64,
    /// Tracepoint fields that could not be read.
    pub read_failed: u64,
    /// Ring buffer records userspace could not decode.
    pub undecodable: u64,
    /// Function calls whose entry and exit could not be paired (a kretprobe return the kernel
    /// did not report): their latency, scan time or migration result is missing.
    #[serde(default)]
    pub inflight_lost: u64,
    /// change_prot_numa calls and skips whose VMA found no room in a per-VMA map
    /// (`--max-vmas`).
    #[serde(default)]
    pub vma_map_full: u64,
    /// pid_inactive skips whose scan-sequence gap could not be read or recorded (seed 002).
    #[serde(default)]
    pub skip_gap_lost: u64,
    /// Hint faults or migrations on a NUMA node beyond the 16 the per-node arrays hold.
    #[serde(default)]
    pub node_out_of_range: u64,
    /// Program runs the kernel skipped because the program was already running on that CPU
    /// (preempted mid-run on a preemptible kernel; `program_misses` says which): the events
    /// they would have counted are missing everywhere, per task and in `kernel_seen`.
    #[serde(default)]
    pub program_misses: u64,
    /// Pages hint faults migrated into the top tier from a node numatrace could not tell
    /// (memory onlined after it started, e.g. dax/kmem): possible promotions not counted.
    #[serde(default)]
    pub promote_source_unknown: u64,
    /// Promotion decisions on slow-tier hint faults numatrace could not class (a refusal whose
    /// latency or threshold could not be read, or a decision whose fault never counted itself).
    #[serde(default)]
    pub promote_unjudged: u64,
    pub total: u64,
}

impl Dropped {
    /// From the kernel's loss counters of a window (a snapshot delta).
    pub fn from_snapshot(s: &Snapshot) -> Self {
        let c = |k| s.counter(k);
        let mut d = Self {
            ringbuf_full: c(Counter::RingbufFull),
            task_map_full: c(Counter::TaskMapFull),
            task_entries_evicted: s.evicted,
            tracked_map_full: c(Counter::TrackedMapFull),
            read_failed: c(Counter::ReadFailed),
            undecodable: s.undecodable,
            inflight_lost: c(Counter::InflightLost),
            vma_map_full: c(Counter::VmaMapFull),
            skip_gap_lost: c(Counter::SkipGapLost),
            node_out_of_range: c(Counter::NodeOutOfRange),
            program_misses: s
                .program_misses
                .values()
                .fold(0u64, |a, b| a.saturating_add(*b)),
            promote_source_unknown: c(Counter::PromoteSourceUnknown),
            promote_unjudged: c(Counter::PromoteUnjudged),
            total: 0,
        };
        // Saturating: from a capture, any of them may be anything.
        d.total = d
            .parts()
            .into_iter()
            .fold(0u64, |a, (_, n)| a.saturating_add(n));
        d
    }

    /// Every count that makes up `total`, with the words the text report gives it.
    pub fn parts(&self) -> [(&'static str, u64); 13] {
        [
            ("ring buffer full", self.ringbuf_full),
            ("task map full", self.task_map_full),
            ("evicted entries", self.task_entries_evicted),
            ("unfollowed children", self.tracked_map_full),
            ("unreadable tracepoint records", self.read_failed),
            ("undecodable", self.undecodable),
            ("unmatched calls", self.inflight_lost),
            ("VMA map full", self.vma_map_full),
            ("gap reads", self.skip_gap_lost),
            ("nodes beyond 16", self.node_out_of_range),
            ("skipped program runs", self.program_misses),
            (
                "promotions from an unknown node",
                self.promote_source_unknown,
            ),
            ("unjudged promotion decisions", self.promote_unjudged),
        ]
    }
}

/// What the kernel programs counted themselves, independently of the per-task map, after the
/// pid filter and without numatrace's own activity: with nothing dropped, the per-task twins
/// equal the unfiltered `totals` at the same path (`kernel_seen.hint_faults.faults` beside
/// `totals.hint_faults.faults`). Keyed by the counter table: each per-task counter with a
/// system-wide twin under its one name, then the system-wide-only tallies, bookkeeping and
/// reclaim counters under theirs (losses are in `dropped`). In JSON the dotted names nest, as
/// in `totals`; a counter whose hook did not attach is left out (`StatReport::to_json`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelSeen(pub Vec<(&'static str, u64)>);

impl KernelSeen {
    /// The twins' and system counters' names, in the table's order.
    pub fn names() -> impl Iterator<Item = (&'static str, Counter)> {
        crate::report::measured::kernel_seen_slots().map(|(_, name, counter)| (name, counter))
    }

    /// The value under `name` (0 if it has none).
    pub fn get(&self, name: &str) -> u64 {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    }
}

impl From<&Counters> for KernelSeen {
    fn from(c: &Counters) -> Self {
        Self(Self::names().map(|(n, k)| (n, c.get(k))).collect())
    }
}

impl Serialize for KernelSeen {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut root = serde_json::Map::new();
        for (name, v) in &self.0 {
            match name.split_once('.') {
                Some((group, field)) => {
                    let g = root
                        .entry(group)
                        .or_insert_with(|| serde_json::Value::Object(Default::default()));
                    if let Some(o) = g.as_object_mut() {
                        o.insert(field.to_owned(), (*v).into());
                    }
                }
                None => {
                    root.insert((*name).to_owned(), (*v).into());
                }
            }
        }
        root.serialize(s)
    }
}

impl<'de> Deserialize<'de> for KernelSeen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        let at = |path: &str| {
            path.split('.')
                .try_fold(&v, |x, k| x.get(k))
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
        };
        Ok(Self(Self::names().map(|(n, _)| (n, at(n))).collect()))
    }
}

/// System-wide histograms of the function hooks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
// A histogram whose hook did not attach is left out of the JSON (see `StatReport::to_json`).
#[serde(default)]
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
        self.hint_faults_per_region_pass = log2_buckets(&buckets);
        self.region_passes = counts.len() as u64;
        let total = counts.iter().fold(0u64, |a, b| a.saturating_add(*b));
        self.mean_hint_faults_per_region_pass =
            (!counts.is_empty()).then(|| total as f64 / counts.len() as f64);
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatReport {
    pub schema: String,
    pub numatrace_version: String,
    pub kernel: KernelSummary,
    pub window: Window,
    pub hooks: Vec<HookReport>,
    pub tasks: Vec<TaskRecord>,
    pub processes: Vec<ProcessRecord>,
    /// Per cgroup v2 directory (the tasks in it, not its descendants).
    #[serde(default)]
    pub cgroups: Vec<CgroupRecord>,
    /// Per NUMA node.
    #[serde(default)]
    pub nodes: Vec<NodeRecord>,
    pub totals: Counts,
    /// numatrace's own activity (left out of tasks, processes, cgroups and totals; the kernel's
    /// counters include it).
    #[serde(rename = "self", default)]
    pub self_counts: Counts,
    /// /proc/vmstat numa_* and pgmigrate_* deltas over a window that contains numatrace's
    /// (system-wide), and over one that lies within it: numatrace's counts (+ self) lie in
    /// [vmstat_delta_min, vmstat_delta].
    pub vmstat_delta: BTreeMap<String, u64>,
    #[serde(default)]
    pub vmstat_delta_min: BTreeMap<String, u64>,
    /// Hint faults the kernel had counted and numatrace not yet (a migration in progress) at
    /// the window's start and end: numatrace's hint faults (+ self) lie in
    /// [vmstat_delta_min - end, vmstat_delta + start].
    #[serde(default)]
    pub faults_in_flight: InFlight,
    /// Skipped runs by program, where there were any (see `dropped.program_misses`).
    #[serde(default)]
    pub program_misses: BTreeMap<String, u64>,
    /// Events the kernel programs saw / ring buffer records received.
    pub kernel_seen: KernelSeen,
    pub events_received: EventTally,
    pub histograms: Histograms,
    /// NUMA-misplaced migrations by source and destination node (function hooks).
    pub node_matrix: Vec<NodeFlow>,
    /// Memory tiering: mode, tiers, knobs, promotions and demotions, findings.
    #[serde(default)]
    pub tiering: crate::report::tiering::TieringReport,
    pub dropped: Dropped,
    /// Counts whose hooks attached but that the command did not count (see `bpf::needs`), and
    /// why: left out of its JSON as not measured. Not serialized (the JSON's `not_measured`
    /// says it).
    #[serde(skip)]
    pub not_counted: Vec<(Feed, String)>,
}

impl StatReport {
    /// The report of a collected window.
    pub fn of(c: &crate::session::Collected) -> Self {
        Self::new(
            KernelSummary::from(&c.facts),
            c.window.clone(),
            c.hooks.clone(),
            &c.last.delta(&c.first),
            &c.filter,
        )
    }

    /// The report of one window: `delta` is the later snapshot minus the earlier.
    pub fn new(
        kernel: KernelSummary,
        window: Window,
        hooks: Vec<HookReport>,
        delta: &Snapshot,
        filter: &Filter,
    ) -> Self {
        let mut histograms = Histograms {
            migrate_latency_ns: log2_buckets(&delta.migrate_latency),
            pages_per_hint_fault: log2_buckets(&delta.fault_pages),
            ..Histograms::default()
        };
        let regions: Vec<u64> = delta
            .region_faults
            .iter()
            .filter(|r| r.tgid != delta.self_tgid)
            .map(|r| r.faults)
            .collect();
        histograms.set_region_faults(&regions);
        let totals = delta.totals(filter);
        let tiering = crate::report::tiering::TieringReport::of(
            delta,
            &totals,
            &Measured::of_window(&hooks, &delta.tiering.source),
        );
        Self {
            schema: SCHEMA.to_owned(),
            numatrace_version: env!("CARGO_PKG_VERSION").to_owned(),
            kernel,
            window,
            hooks,
            tasks: delta.task_rows(filter),
            processes: delta.processes(filter),
            cgroups: delta.cgroups(filter),
            nodes: delta.node_rows(filter),
            tiering,
            totals,
            self_counts: delta.self_counts(),
            vmstat_delta: delta.vmstat_hi.clone(),
            vmstat_delta_min: delta.vmstat_lo.clone(),
            faults_in_flight: delta.in_flight,
            program_misses: delta
                .program_misses
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(k, n)| (k.clone(), *n))
                .collect(),
            kernel_seen: (&delta.counters).into(),
            events_received: delta.events.clone(),
            histograms,
            node_matrix: delta.node_flows(),
            dropped: Dropped::from_snapshot(delta),
            not_counted: Vec::new(),
        }
    }

    /// Which counts this report measured: those whose hooks attached, and that the command
    /// counted.
    pub fn measured(&self) -> Measured {
        let mut m = Measured::of_window(&self.hooks, &self.tiering.source);
        for (f, why) in &self.not_counted {
            m.not_counted(*f, why);
        }
        m
    }

    /// `numatrace.stat/2` as tools get it: the counts whose hooks did not attach left out, and
    /// `not_measured` saying why (a raw serialization would show them as 0).
    pub fn to_json(&self) -> serde_json::Result<serde_json::Value> {
        let mut v = serde_json::to_value(self)?;
        self.measured().prune_stat_json(&mut v);
        Ok(v)
    }
}

/// For `#[serde(serialize_with)]` holders of a [`StatReport`]: its [`StatReport::to_json`].
pub fn serialize_measured<S: serde::Serializer>(r: &StatReport, s: S) -> Result<S::Ok, S::Error> {
    r.to_json().map_err(serde::ser::Error::custom)?.serialize(s)
}

/// A [`StatReport`] that serializes as [`StatReport::to_json`] (also under `#[serde(flatten)]`).
pub struct StatJson<'a>(pub &'a StatReport);

impl Serialize for StatJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_measured(self.0, s)
    }
}

#[cfg(test)]
pub(crate) mod tests {
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
    fn dropped_sums_every_loss_counter() {
        let s = Snapshot {
            counters: counters(&[
                (Counter::RingbufFull, 2),
                (Counter::InflightLost, 1),
                (Counter::VmaMapFull, 4),
                (Counter::SkipGapLost, 8),
            ]),
            evicted: 16,
            ..Snapshot::default()
        };
        let d = Dropped::from_snapshot(&s);
        assert_eq!(d.ringbuf_full, 2);
        assert_eq!(d.vma_map_full, 4);
        assert_eq!(d.task_entries_evicted, 16);
        assert_eq!(d.total, 31);
        assert_eq!(Dropped::from_snapshot(&Snapshot::default()).total, 0);
    }

    pub(crate) fn sample() -> StatReport {
        let mut s = TaskStats::new(100, 100);
        s.comm[..3].copy_from_slice(b"app");
        s.skip_vma[1] = 4;
        s.skip_vma[2] = 2;
        s.migrations.pages_ok = 7;
        s.cgroup_id = 9;
        let mut me = TaskStats::new(5, 5);
        me.hint_faults.faults = 3;
        let mut snap = Snapshot {
            self_tgid: 5,
            tasks: Snapshot::tasks_from(&[s, me], &BTreeMap::new()),
            counters: counters(&[(Counter::TasksCreated, 2), (Counter::SeenSkipVma, 6)]),
            vmstat_hi: BTreeMap::from([("numa_hint_faults".to_owned(), 3)]),
            vmstat_lo: BTreeMap::from([("numa_hint_faults".to_owned(), 3)]),
            ..Snapshot::default()
        };
        snap.tasks[1].cgroup = Some("/app.slice".into());
        StatReport::new(
            KernelSummary {
                release: "6.18.0".into(),
                numa_nodes: 1,
                numa_balancing: Some(1),
            },
            Window {
                duration_s: 1.5,
                scope: crate::model::Scope::Command,
                pid: None,
                command: Some(vec!["app".into(), "-x".into()]),
                exit_code: Some(0),
                comm_filter: None,
                cgroup_filter: None,
                consistent: true,
            },
            vec![],
            &snap,
            &Filter::default(),
        )
    }

    /// The JSON shape is the documented schema: these keys are a contract.
    #[test]
    fn json_schema_v1_shape() {
        let v = serde_json::to_value(sample()).unwrap();
        assert_eq!(v["schema"], "numatrace.stat/2");
        for key in [
            "numatrace_version",
            "kernel",
            "window",
            "hooks",
            "tasks",
            "processes",
            "cgroups",
            "nodes",
            "totals",
            "self",
            "vmstat_delta",
            "vmstat_delta_min",
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
        assert_eq!(t["cgroup_id"], 9);
        assert_eq!(t["cgroup"], "/app.slice");
        assert_eq!(t["skipped_vmas"]["shared_ro"], 4);
        assert_eq!(t["skipped_vmas"]["inaccessible"], 2);
        assert_eq!(t["skipped_vmas_total"], 6);
        assert_eq!(t["migrations"]["pages_ok"], 7);
        assert_eq!(t["placement"]["moves"], 0);
        assert_eq!(
            v["tasks"].as_array().unwrap().len(),
            1,
            "self is not a task row"
        );
        assert_eq!(v["self"]["hint_faults"]["faults"], 3);
        assert_eq!(v["totals"]["hint_faults"]["faults"], 0);
        assert_eq!(v["cgroups"][0]["path"], "/app.slice");
        assert_eq!(v["cgroups"][0]["tasks"], 1);
        assert_eq!(v["processes"][0]["threads"], 1);
        assert_eq!(v["totals"]["skipped_vmas_total"], 6);
        assert_eq!(v["window"]["scope"], "command");
        assert_eq!(v["window"]["exit_code"], 0);
        assert_eq!(v["kernel_seen"]["skip_vma"], 6);
        assert_eq!(v["dropped"]["total"], 0);
        assert_eq!(v["vmstat_delta"]["numa_hint_faults"], 3);
    }

    #[test]
    fn report_round_trips_through_json() {
        let r = sample();
        let back: StatReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        // No hooks listed (made by hand): nothing is left out.
        let mut v = serde_json::to_value(&r).unwrap();
        v.as_object_mut()
            .unwrap()
            .insert("not_measured".into(), serde_json::json!({}));
        assert_eq!(r.to_json().unwrap(), v);
    }

    /// A report whose hooks attached except `missing`.
    fn without(missing: &[&str]) -> StatReport {
        let mut r = sample();
        r.hooks = crate::report::measured::tests::all_but(missing);
        r
    }

    /// `top -b --json` does not count regions: its frames leave them out as not measured,
    /// where its hooks would have them read 0.
    #[test]
    fn json_leaves_out_counts_the_command_did_not_count() {
        let mut r = without(&[]);
        let v = r.to_json().unwrap();
        assert_eq!(v["histograms"]["region_passes"], 0);
        r.not_counted = crate::bpf::needs::TOP_JSON.not_counted();
        let v = r.to_json().unwrap();
        for absent in [
            "region_passes",
            "hint_faults_per_region_pass",
            "mean_hint_faults_per_region_pass",
        ] {
            assert!(v["histograms"].get(absent).is_none(), "{absent}");
        }
        assert!(
            v["not_measured"]["regions"]
                .as_str()
                .is_some_and(|w| w.starts_with("not counted by this command")),
            "{}",
            v["not_measured"]
        );
        assert!(v["tasks"][0]["hint_faults"].get("cow_shared").is_some());
        assert!(v["not_measured"].get("cow").is_none());
    }

    #[test]
    fn json_leaves_out_counts_whose_hook_did_not_attach() {
        let v = without(&["task_numa_fault"]).to_json().unwrap();
        let keys: Vec<_> = v.as_object().unwrap().keys().take(3).cloned().collect();
        assert_eq!(
            keys,
            ["schema", "numatrace_version", "kernel"],
            "struct order"
        );
        for counts in [&v["totals"], &v["self"], &v["tasks"][0], &v["cgroups"][0]] {
            let h = counts["hint_faults"].as_object().unwrap();
            for absent in ["faults", "local", "remote", "pages", "migrated_pages"] {
                assert!(!h.contains_key(absent), "{absent} in {counts}");
            }
            assert!(h.contains_key("cow_shared"), "mpol_misplaced attached");
            assert!(counts["scan"].get("calls").is_some());
        }
        assert_eq!(v["tasks"][0]["skipped_vmas_total"], 6);
        assert!(v["kernel_seen"]["hint_faults"].get("faults").is_none());
        assert_eq!(v["kernel_seen"]["skip_vma"], 6);
        assert!(v["histograms"].get("pages_per_hint_fault").is_none());
        assert_eq!(
            v["not_measured"]["hint_faults"],
            "task_numa_fault not attached"
        );
        assert!(v["not_measured"].get("scan").is_none());
    }

    #[test]
    fn json_with_nothing_measured_reads_back() {
        let mut r = without(
            &crate::plan::HOOKS
                .iter()
                .map(|h| h.name)
                .collect::<Vec<_>>(),
        );
        r.nodes.push(NodeRecord::default());
        r.node_matrix.push(NodeFlow {
            src: Some(0),
            dst: 1,
            migrated: 2,
            not_migrated: 3,
            pages: 4,
        });
        r.processes[0]
            .vmas
            .push(crate::model::VmaRecord::new(0x1000, 0x2000));
        let v = r.to_json().unwrap();
        assert!(v["nodes"][0].get("hint_faults").is_none());
        assert!(v["node_matrix"][0].get("pages").is_none());
        assert!(v["processes"][0]["vmas"][0].get("pte_updates").is_none());
        assert_eq!(v["processes"][0]["vmas"][0]["start"], "0x1000");
        // Every count is gone from the totals: only the (empty) groups remain.
        for (group, fields) in v["totals"].as_object().unwrap() {
            assert_eq!(fields, &serde_json::json!({}), "{group}");
        }
        let back: StatReport = serde_json::from_value(v).unwrap();
        assert_eq!(back.node_matrix[0].migrated, 0);
        assert_eq!(back.tasks.len(), r.tasks.len());
    }

    #[test]
    fn holders_serialize_the_pruned_json() {
        #[derive(Serialize)]
        struct Holder<'a> {
            #[serde(serialize_with = "serialize_measured")]
            stat: StatReport,
            #[serde(flatten)]
            flat: StatJson<'a>,
        }
        let r = without(&["task_numa_fault"]);
        let v = serde_json::to_value(Holder {
            stat: r.clone(),
            flat: StatJson(&r),
        })
        .unwrap();
        assert_eq!(v["stat"], r.to_json().unwrap());
        assert_eq!(v["not_measured"], r.to_json().unwrap()["not_measured"]);
        assert!(v["totals"]["hint_faults"].get("faults").is_none());
    }
}
