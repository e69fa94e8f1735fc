//! [`Fold`] against the fold as it was first written, kept here as the reference: a task's
//! counts cloned and differenced every scrape, its cgroup label worked out from its path every
//! time, the cgroup limit counted afresh for each new label, the candidates found with a table
//! of each pid's newest entry and every one of them sorted (the pick from them is the fold's
//! own), and the previous snapshot kept to tell settled tasks. Over random histories (tasks
//! growing, moving cgroups, exiting, being forgotten, pids reused, numatrace's own tasks, tight
//! limits) both export the same series after every scrape. The fold is fed increments as the
//! engine sums them (here worked out from the snapshots: the engine's own are held to the same
//! in its table's test).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use proptest::prelude::*;

use super::fold::{
    CGROUP_IDLE_SCRAPES, Diffed, FoldLimits, OTHER, TaskSeries, candidates_unordered, cgroup_label,
    keep_or_pick, rank,
};
use crate::{
    engine::{Snapshot, tasks::tests::Rng},
    model::{Counts, PackedCounts, TaskRecord, TaskRow},
};

type Key = (u32, u64);

#[derive(Default)]
struct Reference {
    limits: FoldLimits,
    last: HashMap<Key, Counts>,
    totals: Counts,
    own: Counts,
    cgroups: BTreeMap<String, Counts>,
    other_tasks: Counts,
    tasks: Vec<TaskSeries>,
    exported: HashMap<(String, u32), Key>,
    scrapes: u64,
    cgroup_live: BTreeMap<String, u64>,
}

impl Reference {
    fn new(limits: FoldLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    fn slot(&self, path: Option<&str>) -> String {
        let label = cgroup_label(path, self.limits.cgroup_depth);
        let named = self.cgroups.keys().filter(|k| *k != OTHER).count();
        if !self.cgroups.contains_key(&label) && named >= self.limits.max_cgroups {
            return OTHER.to_owned();
        }
        label
    }

    fn choose(&self, snap: &Snapshot) -> BTreeSet<Key> {
        let rows: Vec<TaskRow> = snap.tasks.iter().map(TaskRow::of).collect();
        let mut live: Vec<&TaskRow> = candidates_unordered(&rows, snap.self_tgid)
            .into_iter()
            .filter(|t| {
                self.exported
                    .get(&(t.id.comm.to_string(), t.id.pid))
                    .is_none_or(|k| *k == t.key())
            })
            .collect();
        live.sort_by(|a, b| rank(b).cmp(&rank(a)).then(a.id.pid.cmp(&b.id.pid)));
        let n = self.limits.top_tasks;
        let before: BTreeSet<Key> = self.exported.values().copied().collect();
        let live: Vec<Key> = live.into_iter().map(TaskRow::key).collect();
        keep_or_pick(&live, &before, n)
    }

    fn advance(&mut self, snap: &Snapshot) {
        let chosen = self.choose(snap);
        let before: BTreeSet<Key> = self.exported.values().copied().collect();
        let mut exported = HashMap::new();
        let mut series = Vec::new();
        for t in &snap.tasks {
            let key = t.key();
            let inc = match self.last.get(&key) {
                Some(prev) => t.counts().delta(prev),
                None => t.counts(),
            };
            self.last.insert(key, t.counts());
            if t.tgid == snap.self_tgid {
                self.own.add(&inc);
                continue;
            }
            let q = inc.counted_nothing();
            if !q {
                self.totals.add(&inc);
                let label = self.slot(t.cgroup.as_deref());
                if !t.exited {
                    self.cgroup_live.insert(label.clone(), self.scrapes);
                }
                self.cgroups.entry(label).or_default().add(&inc);
            } else if !t.exited {
                let label = cgroup_label(t.cgroup.as_deref(), self.limits.cgroup_depth);
                if self.cgroups.contains_key(&label) {
                    self.cgroup_live.insert(label, self.scrapes);
                }
            }
            if chosen.contains(&key) {
                exported.insert((t.comm.to_string(), t.pid), key);
                series.push(TaskSeries {
                    comm: t.comm.to_string(),
                    pid: t.pid,
                    counts: t.counts().finished(),
                });
            }
            // A task exported before and now is its own series; what one entering the top N
            // counted meanwhile is in no series' rate but `other`'s.
            if !q && !(chosen.contains(&key) && before.contains(&key)) {
                self.other_tasks.add(&inc);
            }
        }
        self.exported = exported;
        self.tasks = series;
        let now = self.scrapes;
        self.cgroups.retain(|k, _| {
            k == OTHER
                || now.saturating_sub(self.cgroup_live.get(k).copied().unwrap_or(0))
                    < CGROUP_IDLE_SCRAPES
        });
        self.cgroup_live
            .retain(|k, _| k == OTHER || self.cgroups.contains_key(k));
        self.scrapes += 1;
        for c in [&mut self.totals, &mut self.own, &mut self.other_tasks]
            .into_iter()
            .chain(self.cgroups.values_mut())
        {
            *c = std::mem::take(c).finished();
        }
    }

    fn settled(prev: &Snapshot, cur: &Snapshot) -> Vec<Key> {
        let before: BTreeSet<Key> = prev
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
}

const PATHS: [Option<&str>; 6] = [
    None,
    Some("/"),
    Some("/a"),
    Some("/a/b/c"),
    Some("/a/x"),
    Some("/k/pod1/c"),
];
const SELF_TGID: u32 = 99;

/// One random history of `scrapes` snapshots, checked scrape by scrape.
fn check(seed: u64, scrapes: usize) {
    let mut r = Rng(seed | 1);
    let limits = FoldLimits {
        top_tasks: r.below(4) as usize,
        cgroup_depth: r.below(4) as usize,
        max_cgroups: r.below(4) as usize,
    };
    let (mut fold, mut reference) = (Diffed::new(limits), Reference::new(limits));
    // The engine's task list: by key, counts only growing.
    let mut tasks: BTreeMap<Key, TaskRecord> = BTreeMap::new();
    let mut clock = 1u64;
    let mut prev: Option<Snapshot> = None;
    for scrape in 0..scrapes {
        // Two ids whose path differs from scrape to scrape (resolved late), one path per id in
        // a snapshot as the engine's.
        let late = [0, 1].map(|_| PATHS[r.below(PATHS.len() as u64) as usize]);
        for _ in 0..r.below(4) {
            clock += 1;
            let pid = 1 + r.below(6) as u32;
            let tgid = if r.chance(15) { SELF_TGID } else { pid };
            let comm = ["a", "b"][r.below(2) as usize];
            tasks.insert(
                (pid, clock),
                TaskRecord {
                    pid,
                    tgid,
                    comm: comm.into(),
                    exited: false,
                    cgroup_id: 0,
                    cgroup: PATHS[r.below(PATHS.len() as u64) as usize].map(Into::into),
                    preferred_node: None,
                    last_node: None,
                    first_ns: clock,
                    counts: PackedCounts::default(),
                },
            );
        }
        for t in tasks.values_mut().filter(|t| !t.exited) {
            let mut c = t.counts();
            if r.chance(50) {
                c.hint_faults.faults += r.below(5);
                c.hint_faults.local += r.below(2);
            }
            if r.chance(30) {
                c.scan.time_ns += r.below(1000);
                c.scan.calls += 1;
                c.scan.max_ns = c.scan.max_ns.max(r.below(1000));
                c.scan.scan_seq += r.below(2);
            }
            if r.chance(20) {
                c.scan.scan_samples += 1;
                c.scan.samples += 1 + r.below(3);
            }
            if r.chance(10) {
                c.scan.share_between_calls = Some(r.below(100) as f64 / 100.0);
            }
            if r.chance(10) {
                t.cgroup = PATHS[r.below(PATHS.len() as u64) as usize].map(Into::into);
            }
            if r.chance(10) {
                t.exited = true;
            }
            // Mostly one id per path; sometimes one id whose path changes (resolved late).
            t.cgroup_id = if r.chance(70) {
                t.cgroup.as_deref().map_or(0, |p| p.len() as u64 + 1)
            } else {
                let j = r.below(2);
                t.cgroup = late[j as usize].map(Into::into);
                100 + j
            };
            t.set_counts(&c.finished());
        }
        let snap = Snapshot {
            self_tgid: SELF_TGID,
            tasks: tasks.values().cloned().collect(),
            ..Snapshot::default()
        };
        fold.advance(&snap);
        reference.advance(&snap);
        let what = format!("seed {seed}, scrape {scrape}, {limits:?}");
        assert_eq!(fold.totals, reference.totals, "totals: {what}");
        assert_eq!(fold.own, reference.own, "own: {what}");
        assert_eq!(fold.cgroups, reference.cgroups, "cgroups: {what}");
        assert_eq!(fold.other_tasks, reference.other_tasks, "other: {what}");
        assert_eq!(fold.tasks, reference.tasks, "tasks: {what}");
        // Settled tasks are forgotten by both (and by the engine: gone from its list).
        let settled = fold.settled();
        let expect = prev
            .as_ref()
            .map_or_else(Vec::new, |p| Reference::settled(p, &snap));
        assert_eq!(settled, expect, "settled: {what}");
        let gone: Vec<Key> = settled.into_iter().filter(|_| r.chance(70)).collect();
        fold.forget(&gone);
        for k in &gone {
            reference.last.remove(k);
            tasks.remove(k);
        }
        prev = Some(Snapshot {
            tasks: snap
                .tasks
                .into_iter()
                .filter(|t| !gone.contains(&t.key()))
                .collect(),
            ..Snapshot::default()
        });
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn the_fold_exports_what_the_reference_does(seed in any::<u64>()) {
        check(seed, 40);
    }
}

/// Long enough for cgroup series to go idle and be dropped.
#[test]
fn long_histories_agree_too() {
    for seed in 1..20 {
        check(seed * 7919, 3 * CGROUP_IDLE_SCRAPES as usize);
    }
}
