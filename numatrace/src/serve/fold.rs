//! What `serve` exports per task, per cgroup and in total, kept monotonic across scrapes.
//!
//! Each scrape takes a snapshot (cumulative since attach) and hands it to [`Fold::advance`],
//! which works out what every task counted since the previous scrape and adds that increment
//! to the running totals, to the task's (depth-bounded) cgroup, and to the `other` series
//! unless the task is exported on its own. Every exported aggregate therefore only grows, even
//! when a task moves cgroups, leaves the top N, exits, or is forgotten by the engine. A task
//! exported on its own carries its own cumulative counts (also only growing); a task entering
//! the top N starts its series at its lifetime counts, which Prometheus' `rate()` does not count
//! as an increase, so rates still add up: Σ task rates + `other` = the total's rate.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::{
    engine::Snapshot,
    model::{Counts, TaskRecord},
};

/// Label of the series that collects what is not exported on its own.
pub const OTHER: &str = "other";
/// Cgroup label of tasks whose cgroup could not be resolved (removed before it was seen, or no
/// cgroup2 mount).
pub const UNKNOWN_CGROUP: &str = "unknown";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoldLimits {
    /// Tasks exported on their own.
    pub top_tasks: usize,
    /// Path components kept of a cgroup path (deeper cgroups count for their ancestor).
    pub cgroup_depth: usize,
    /// Distinct cgroup series; further cgroups count under `other`.
    pub max_cgroups: usize,
}

/// One exported task: its labels and cumulative counts.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSeries {
    pub comm: String,
    pub pid: u32,
    pub counts: Counts,
}

#[derive(Debug)]
pub struct Fold {
    limits: FoldLimits,
    /// Each known task's counts at the previous scrape.
    last: HashMap<(u32, u64), Counts>,
    pub totals: Counts,
    /// numatrace's own tasks (the kernel's counters include them).
    pub own: Counts,
    /// By cgroup label, including `other` once there are more than `max_cgroups`.
    pub cgroups: BTreeMap<String, Counts>,
    /// Increments of tasks while they were not exported on their own.
    pub other_tasks: Counts,
    /// Tasks exported at the latest scrape.
    pub tasks: Vec<TaskSeries>,
    /// (comm, pid) of the previous scrape's task series, and whose they were.
    exported: HashMap<(String, u32), (u32, u64)>,
}

/// `/a/b/c` with depth 2 is `/a/b`; the root stays `/`.
pub fn cgroup_label(path: Option<&str>, depth: usize) -> String {
    let Some(path) = path else {
        return UNKNOWN_CGROUP.to_owned();
    };
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if parts.is_empty() || depth == 0 {
        return "/".to_owned();
    }
    format!("/{}", parts[..parts.len().min(depth)].join("/"))
}

/// Ranking of live tasks for the top N: PTE-scan time, then hint faults, then pid.
fn rank(t: &TaskRecord) -> (u64, u64) {
    (t.counts.scan.time_ns, t.counts.hint_faults.faults)
}

impl Fold {
    pub fn new(limits: FoldLimits) -> Self {
        Self {
            limits,
            last: HashMap::new(),
            totals: Counts::default(),
            own: Counts::default(),
            cgroups: BTreeMap::new(),
            other_tasks: Counts::default(),
            tasks: Vec::new(),
            exported: HashMap::new(),
        }
    }

    pub fn limits(&self) -> FoldLimits {
        self.limits
    }

    /// Tasks whose counts the fold remembers.
    pub fn remembered(&self) -> usize {
        self.last.len()
    }

    fn cgroup_slot(&mut self, path: Option<&str>) -> &mut Counts {
        let mut label = cgroup_label(path, self.limits.cgroup_depth);
        if !self.cgroups.contains_key(&label) {
            let named = self.cgroups.keys().filter(|k| *k != OTHER).count();
            if named >= self.limits.max_cgroups {
                label = OTHER.to_owned();
            }
        }
        self.cgroups.entry(label).or_default()
    }

    /// Takes in the next snapshot (cumulative, like every engine snapshot).
    pub fn advance(&mut self, snap: &Snapshot) {
        let chosen = self.choose(snap);
        let mut exported = HashMap::new();
        let mut series = Vec::new();
        for t in &snap.tasks {
            let key = t.key();
            let inc = match self.last.get(&key) {
                Some(prev) => t.counts.delta(prev),
                None => t.counts.clone(),
            };
            self.last.insert(key, t.counts.clone());
            if t.tgid == snap.self_tgid {
                self.own.add(&inc);
                continue;
            }
            self.totals.add(&inc);
            self.cgroup_slot(t.cgroup.as_deref()).add(&inc);
            if chosen.contains(&key) {
                exported.insert((t.comm.clone(), t.pid), key);
                series.push(TaskSeries {
                    comm: t.comm.clone(),
                    pid: t.pid,
                    counts: t.counts.clone().finished(),
                });
            } else {
                self.other_tasks.add(&inc);
            }
        }
        self.exported = exported;
        self.tasks = series;
        self.totals = std::mem::take(&mut self.totals).finished();
        self.own = std::mem::take(&mut self.own).finished();
        self.other_tasks = std::mem::take(&mut self.other_tasks).finished();
        for c in self.cgroups.values_mut() {
            *c = std::mem::take(c).finished();
        }
    }

    /// The live tasks exported on their own this time. A (comm, pid) pair that named another
    /// task at the previous scrape (a reused pid) waits one scrape, so that no series restarts
    /// lower than it was.
    fn choose(&self, snap: &Snapshot) -> BTreeSet<(u32, u64)> {
        let mut live: Vec<&TaskRecord> = snap
            .tasks
            .iter()
            .filter(|t| !t.exited && t.tgid != snap.self_tgid && rank(t) > (0, 0))
            .filter(|t| {
                self.exported
                    .get(&(t.comm.clone(), t.pid))
                    .is_none_or(|k| *k == t.key())
            })
            .collect();
        live.sort_by(|a, b| rank(b).cmp(&rank(a)).then(a.pid.cmp(&b.pid)));
        live.iter()
            .take(self.limits.top_tasks)
            .map(|t| t.key())
            .collect()
    }

    /// Exited tasks that were already exited at the previous scrape: their counts are in the
    /// aggregates for good, so the engine and the fold may forget them.
    pub fn settled(&self, prev: &Snapshot, cur: &Snapshot) -> Vec<(u32, u64)> {
        let before: BTreeSet<(u32, u64)> = prev
            .tasks
            .iter()
            .filter(|t| t.exited)
            .map(TaskRecord::key)
            .collect();
        cur.tasks
            .iter()
            .filter(|t| t.exited && before.contains(&t.key()))
            .map(TaskRecord::key)
            .collect()
    }

    /// Forgets tasks the engine forgot too (see [`Fold::settled`]).
    pub fn forget(&mut self, keys: &[(u32, u64)]) {
        for k in keys {
            self.last.remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(pid: u32, first_ns: u64, comm: &str, cgroup: &str, faults: u64) -> TaskRecord {
        let mut counts = Counts::default();
        counts.hint_faults.faults = faults;
        counts.scan.pte_updates = faults * 2;
        TaskRecord {
            pid,
            tgid: pid,
            comm: comm.to_owned(),
            exited: false,
            cgroup_id: 1,
            cgroup: Some(cgroup.to_owned()),
            preferred_node: None,
            last_node: None,
            first_ns,
            counts,
        }
    }

    fn snap(tasks: Vec<TaskRecord>) -> Snapshot {
        Snapshot {
            self_tgid: 999,
            tasks,
            ..Snapshot::default()
        }
    }

    fn limits(top: usize) -> FoldLimits {
        FoldLimits {
            top_tasks: top,
            cgroup_depth: 2,
            max_cgroups: 2,
        }
    }

    #[test]
    fn cgroup_labels_are_bounded_by_depth() {
        assert_eq!(cgroup_label(Some("/a/b/c"), 2), "/a/b");
        assert_eq!(cgroup_label(Some("/a"), 2), "/a");
        assert_eq!(cgroup_label(Some("/"), 2), "/");
        assert_eq!(cgroup_label(Some("/a/b"), 0), "/");
        assert_eq!(cgroup_label(None, 2), UNKNOWN_CGROUP);
    }

    #[test]
    fn increments_follow_moves_and_top_n_changes_monotonically() {
        let mut f = Fold::new(limits(1));
        f.advance(&snap(vec![
            task(1, 1, "a", "/x", 10),
            task(2, 2, "b", "/y", 5),
        ]));
        assert_eq!(f.totals.hint_faults.faults, 15);
        assert_eq!(f.tasks.len(), 1);
        assert_eq!(f.tasks[0].pid, 1);
        assert_eq!(f.other_tasks.hint_faults.faults, 5);
        // b overtakes a and moves cgroup: nothing decreases anywhere.
        let mut b = task(2, 2, "b", "/z/deep/er", 50);
        b.counts.scan.pte_updates = 100;
        f.advance(&snap(vec![task(1, 1, "a", "/x", 12), b]));
        assert_eq!(f.totals.hint_faults.faults, 62);
        assert_eq!(f.tasks[0].pid, 2);
        assert_eq!(f.tasks[0].counts.hint_faults.faults, 50);
        // a's +2 went to other now; b's earlier 5 stayed there.
        assert_eq!(f.other_tasks.hint_faults.faults, 7);
        assert_eq!(f.cgroups["/x"].hint_faults.faults, 12);
        assert_eq!(f.cgroups["/y"].hint_faults.faults, 5);
        // max_cgroups = 2: the third cgroup counts under other.
        assert_eq!(f.cgroups[OTHER].hint_faults.faults, 45);
        let sum: u64 = f.cgroups.values().map(|c| c.hint_faults.faults).sum();
        assert_eq!(sum, f.totals.hint_faults.faults);
    }

    #[test]
    fn exited_and_forgotten_tasks_stay_in_the_totals() {
        let mut f = Fold::new(limits(5));
        let s1 = snap(vec![task(1, 1, "a", "/x", 10)]);
        f.advance(&s1);
        let mut gone = task(1, 1, "a", "/x", 11);
        gone.exited = true;
        let s2 = snap(vec![gone.clone()]);
        f.advance(&s2);
        assert!(
            f.tasks.is_empty(),
            "exited tasks are not exported on their own"
        );
        let s3 = snap(vec![gone]);
        assert!(f.settled(&s1, &s2).is_empty());
        assert_eq!(f.settled(&s2, &s3), vec![(1, 1)]);
        f.advance(&s3);
        f.forget(&[(1, 1)]);
        f.advance(&snap(vec![]));
        assert_eq!(f.totals.hint_faults.faults, 11);
        assert_eq!(f.cgroups["/x"].hint_faults.faults, 11);
        assert_eq!(f.remembered(), 0);
    }

    #[test]
    fn a_reused_pid_waits_a_scrape_before_it_is_exported() {
        let mut f = Fold::new(limits(5));
        f.advance(&snap(vec![task(7, 1, "w", "/x", 100)]));
        assert_eq!(f.tasks[0].counts.hint_faults.faults, 100);
        let mut old = task(7, 1, "w", "/x", 100);
        old.exited = true;
        // The same pid and comm, a new task with fewer counts.
        f.advance(&snap(vec![old.clone(), task(7, 9, "w", "/x", 3)]));
        assert!(f.tasks.is_empty(), "would restart series w/7 lower");
        assert_eq!(f.other_tasks.hint_faults.faults, 3);
        f.advance(&snap(vec![old, task(7, 9, "w", "/x", 4)]));
        assert_eq!(f.tasks.len(), 1);
        assert_eq!(f.tasks[0].counts.hint_faults.faults, 4);
    }

    #[test]
    fn own_tasks_are_apart() {
        let mut f = Fold::new(limits(5));
        let mut own = task(999, 1, "numatrace", "/x", 3);
        own.tgid = 999;
        f.advance(&snap(vec![own, task(1, 1, "a", "/x", 1)]));
        assert_eq!(f.own.hint_faults.faults, 3);
        assert_eq!(f.totals.hint_faults.faults, 1);
        assert_eq!(f.tasks.len(), 1);
    }
}
