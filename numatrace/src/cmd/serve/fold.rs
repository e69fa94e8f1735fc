//! What `serve` exports per task, per cgroup and in total, kept monotonic across scrapes.
//!
//! Each scrape takes a snapshot (cumulative since attach) and what every task counted since the
//! previous scrape, summed by the engine as it read the tasks' entries (by cgroup, and apart
//! for the tasks exported on their own: [`Increments`]), and hands both to [`Fold::advance`],
//! which adds the increments to the running totals, to their (depth-bounded) cgroup's series,
//! and to the `other` series unless the task was and stays exported on its own. Every exported aggregate therefore only grows, even
//! when a task moves cgroups, leaves the top N, exits, or is forgotten by the engine. A task
//! exported on its own carries its own cumulative counts (also only growing); a task entering
//! the top N starts its series at its lifetime counts, which Prometheus' `rate()` does not count
//! as an increase (what it counted since the previous scrape goes to `other`), so rates still
//! add up: Σ task rates + `other` = the total's rate.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    hash::BuildHasherDefault,
    sync::Arc,
};

use crate::{
    engine::{
        Snapshot,
        increments::Increments,
        tasks::{Key, KeyHasher},
    },
    model::{CgroupPath, Comm, Counts, NodeTasks, TaskRecord, TaskRow},
};

/// Label of the series that collects what is not exported on its own.
pub const OTHER: &str = "other";
/// Cgroup label of tasks whose cgroup could not be resolved (removed before it was seen, or no
/// cgroup2 mount).
pub const UNKNOWN_CGROUP: &str = "unknown";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FoldLimits {
    /// Tasks exported on their own.
    pub top_tasks: usize,
    /// Path components kept of a cgroup path (deeper cgroups count for their ancestor).
    pub cgroup_depth: usize,
    /// Distinct cgroup series; further cgroups count under `other`.
    pub max_cgroups: usize,
}

/// Where a fold's tasks and increments come from: the engine in `serve`, the snapshots (and
/// their differences) in the tests. [`Fold::advance`] takes the increments, walks the rows,
/// asks for the counts of the tasks it exports, and says which tasks to sum apart next, in
/// that order (the tasks exported by one scrape are the ones whose next increments stay out
/// of `other`).
pub trait Feed {
    /// What the tasks counted up to `snap`, the snapshot just taken, since the previous call.
    fn increments(&mut self, snap: &Snapshot) -> anyhow::Result<Increments>;
    /// Sums what the tasks of `keys` count from now on apart from the others.
    fn watch(&mut self, keys: Vec<Key>);
    /// Each task of `snap`, in the snapshot's order (the one [`Increments::counted`] follows).
    fn rows(&mut self, snap: &Snapshot, each: &mut dyn FnMut(&TaskRow));
    /// The whole counts of the tasks of `keys` (tasks of `snap`), in that order.
    fn counts(&mut self, snap: &Snapshot, keys: &[Key]) -> Vec<Counts>;
}

/// [`Feed::rows`] of a snapshot that lists its tasks' records.
fn rows_of_records(snap: &Snapshot, each: &mut dyn FnMut(&TaskRow)) {
    for t in &snap.tasks {
        each(&TaskRow::of(t));
    }
}

/// [`Feed::counts`] of a snapshot that lists its tasks' records (in key order, as the
/// engine's; any other order is searched the long way).
fn counts_of_records(snap: &Snapshot, keys: &[Key]) -> Vec<Counts> {
    let tasks = &snap.tasks;
    let find = |k: &Key| match tasks.binary_search_by_key(k, TaskRecord::key) {
        Ok(i) => Some(&tasks[i]),
        Err(_) => tasks.iter().find(|t| t.key() == *k),
    };
    keys.iter()
        .map(|k| find(k).map(|t| t.counts().finished()).unwrap_or_default())
        .collect()
}

impl Feed for crate::engine::Engine {
    fn increments(&mut self, _snap: &Snapshot) -> anyhow::Result<Increments> {
        self.take_increments()
            .ok_or_else(|| anyhow::anyhow!("the engine sums no increments"))
    }

    fn watch(&mut self, keys: Vec<Key>) {
        self.watch_increments(keys);
    }

    fn rows(&mut self, snap: &Snapshot, each: &mut dyn FnMut(&TaskRow)) {
        if self.rows_only() {
            self.task_rows(each);
        } else {
            rows_of_records(snap, each);
        }
    }

    fn counts(&mut self, snap: &Snapshot, keys: &[Key]) -> Vec<Counts> {
        if self.rows_only() {
            self.task_counts(keys)
        } else {
            counts_of_records(snap, keys)
        }
    }
}

#[cfg(test)]
impl Feed for crate::engine::increments::Differ {
    fn increments(&mut self, snap: &Snapshot) -> anyhow::Result<Increments> {
        Ok(self.take(snap))
    }

    fn watch(&mut self, keys: Vec<Key>) {
        self.watch = keys.into_iter().collect();
    }

    fn rows(&mut self, snap: &Snapshot, each: &mut dyn FnMut(&TaskRow)) {
        rows_of_records(snap, each);
    }

    fn counts(&mut self, snap: &Snapshot, keys: &[Key]) -> Vec<Counts> {
        counts_of_records(snap, keys)
    }
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
    pub totals: Counts,
    /// numatrace's own tasks (the kernel's counters include them).
    pub own: Counts,
    /// By cgroup label, including `other` once there are more than `max_cgroups`.
    pub cgroups: BTreeMap<String, Counts>,
    /// Increments of tasks while they were not exported on their own.
    pub other_tasks: Counts,
    /// Tasks exported at the latest scrape.
    pub tasks: Vec<TaskSeries>,
    /// By pid, the comm of the previous scrape's task series, and whose it was (one series
    /// per pid).
    exported: HashMap<u32, (String, Key), BuildHasherDefault<KeyHasher>>,
    /// Scrapes taken, and the latest scrape at which each cgroup label had a live task.
    scrapes: u64,
    cgroup_live: BTreeMap<String, u64>,
    /// Each cgroup id's path and label, as last worked out (a label per task and scrape was
    /// most of a scrape's own work at 100 000 tasks).
    labels: Labels,
    /// Tasks exited at the previous scrape and at the latest (see [`Fold::settled`]).
    exited_before: HashSet<Key>,
    exited_now: HashSet<Key>,
    /// Tasks in the latest snapshot (live or exited, numatrace's own too).
    pub tasks_read: usize,
    /// By node id, the latest snapshot's live traced tasks that prefer it and that last ran
    /// on it.
    pub node_tasks: NodeTasks,
}

/// Cgroup labels by cgroup id: a label is worked out again only when the id's path changes
/// (resolved late, or looked up again). Each is stamped with the latest walk whose tasks had
/// its id.
#[derive(Debug, Default)]
struct Labels {
    by_id: HashMap<u64, Label, BuildHasherDefault<KeyHasher>>,
    /// The walk in progress.
    walk: u64,
}

/// A cgroup id's path as last seen, its label, and the latest walk whose tasks had the id.
type Label = (Option<CgroupPath>, Arc<str>, u64);

impl Labels {
    /// A walk of the snapshot's tasks begins.
    fn begin_walk(&mut self) {
        self.walk += 1;
    }

    /// The label of a task of the walk.
    fn of(&mut self, id: u64, path: Option<&CgroupPath>, depth: usize) -> Arc<str> {
        let walk = self.walk;
        let fresh = || {
            (
                path.cloned(),
                Arc::from(cgroup_label(path.map(|p| &**p), depth)),
                walk,
            )
        };
        let e = self.by_id.entry(id).or_insert_with(fresh);
        // `Arc<str>`'s == compares pointers first: the engine shares one path per cgroup.
        if e.0.as_ref() != path {
            *e = fresh();
        }
        e.2 = walk;
        Arc::clone(&e.1)
    }

    /// A task of the walk that has no label of its own (numatrace's) has id `id`.
    fn touch(&mut self, id: u64) {
        if let Some(e) = self.by_id.get_mut(&id) {
            e.2 = self.walk;
        }
    }

    /// The label of `id` as last worked out (`unknown` for an id never labelled).
    fn of_known(&mut self, id: u64, depth: usize) -> Arc<str> {
        match self.by_id.get(&id) {
            Some(e) => Arc::clone(&e.1),
            None => {
                let label: Arc<str> = Arc::from(cgroup_label(None, depth));
                // No task of the walk has it.
                let e = (None, Arc::clone(&label), self.walk.wrapping_sub(1));
                self.by_id.insert(id, e);
                label
            }
        }
    }

    /// Forgets, when there are many more labels than the walk's `tasks`, the ids no task of
    /// the walk had (cgroups come and go).
    fn keep_seen(&mut self, tasks: usize) {
        if self.by_id.len() > 2 * tasks + 64 {
            let walk = self.walk;
            self.by_id.retain(|_, e| e.2 == walk);
        }
    }
}

/// One scrape's increments of a cgroup series, and whether a live task was in it.
#[derive(Default)]
struct Pending {
    /// Its series was started at this scrape.
    started: bool,
    live: bool,
}

/// A cgroup series with no live task for this many scrapes is dropped (its counts stay in the
/// totals), so that cgroups that come and go (pods) do not fill `--max-cgroups` for good.
pub const CGROUP_IDLE_SCRAPES: u64 = 60;

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

/// A task that may be exported on their own, with what orders the top N.
#[derive(Debug)]
struct Candidate {
    /// Highest rank first, then by pid (unique among candidates).
    order: (Reverse<Rank>, u32),
    key: Key,
    comm: Comm,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.order == other.order
    }
}

impl Eq for Candidate {}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.order.cmp(&other.order)
    }
}

/// The tasks that may be exported on their own: live, not numatrace's, ranked above nothing,
/// and the newest live entry of their pid; of those that `keep` keeps, the first `cap` in
/// ranking order. Fed rows in key order (pid, then entry creation), as the engine lists them,
/// a pid's newest entry is the last of its run: one walk, holding the best `cap` only (not a
/// list of 100 000 candidates); rows out of that order are taken the long way.
struct Candidates<F> {
    self_tgid: u32,
    cap: usize,
    keep: F,
    /// The latest candidate of the pid being walked, until a newer live entry of it comes.
    held: Option<Candidate>,
    last: Option<Key>,
    ordered: bool,
    /// The best so far, the worst of them on top.
    best: std::collections::BinaryHeap<Candidate>,
}

impl<F: Fn(&Candidate) -> bool> Candidates<F> {
    fn new(self_tgid: u32, cap: usize, keep: F) -> Self {
        Self {
            self_tgid,
            cap,
            keep,
            held: None,
            last: None,
            ordered: true,
            best: Default::default(),
        }
    }

    fn push(&mut self, t: &TaskRow) {
        let key = t.key();
        if self.last.is_some_and(|l| l >= key) {
            self.ordered = false;
        }
        self.last = Some(key);
        if let Some(h) = self.held.take_if(|h| h.key.0 != t.id.pid) {
            self.offer(h);
        }
        if !t.id.exited {
            // A newer live entry of the held task's pid.
            self.held = None;
            if t.id.tgid != self.self_tgid && rank(t) > (0, 0, 0) {
                self.held = Some(Candidate {
                    order: (Reverse(rank(t)), t.id.pid),
                    key,
                    comm: t.id.comm.clone(),
                });
            }
        }
    }

    fn offer(&mut self, c: Candidate) {
        if self.cap == 0 || !(self.keep)(&c) {
            return;
        }
        self.best.push(c);
        if self.best.len() > self.cap {
            self.best.pop();
        }
    }

    /// The candidates kept, in ranking order; `None`: the rows were not in key order.
    fn finish(&mut self) -> Option<Vec<Candidate>> {
        if !self.ordered {
            return None;
        }
        if let Some(h) = self.held.take() {
            self.offer(h);
        }
        Some(std::mem::take(&mut self.best).into_sorted_vec())
    }
}

/// What `pick` kept of a walk, in ranking order; where the rows were out of key order, the
/// candidates of the rows `walk_again` feeds, found the long way.
fn best_of<F: Fn(&Candidate) -> bool>(
    mut pick: Candidates<F>,
    walk_again: impl FnOnce(&mut dyn FnMut(&TaskRow)),
) -> Vec<Candidate> {
    if let Some(best) = pick.finish() {
        return best;
    }
    pick.best.clear();
    let mut rows = Vec::new();
    walk_again(&mut |t| rows.push(t.clone()));
    for t in candidates_unordered(&rows, pick.self_tgid) {
        pick.offer(Candidate {
            order: (Reverse(rank(t)), t.id.pid),
            key: t.key(),
            comm: t.id.comm.clone(),
        });
    }
    pick.best.into_sorted_vec()
}

/// The keys of the first `cap` candidates (see [`Candidates`]) of the rows `walk` feeds, in
/// ranking order.
#[cfg(test)]
fn ranked(mut walk: impl FnMut(&mut dyn FnMut(&TaskRow)), self_tgid: u32, cap: usize) -> Vec<Key> {
    let mut pick = Candidates::new(self_tgid, cap, |_: &Candidate| true);
    walk(&mut |t| pick.push(t));
    let best = best_of(pick, walk);
    best.into_iter().map(|c| c.key).collect()
}

/// The candidates of [`Candidates`] among rows in any order (as first written: the reference
/// test's).
pub(super) fn candidates_unordered(rows: &[TaskRow], self_tgid: u32) -> Vec<&TaskRow> {
    let mut newest: HashMap<u32, u64, BuildHasherDefault<KeyHasher>> = HashMap::default();
    for t in rows.iter().filter(|t| !t.id.exited) {
        let e = newest.entry(t.id.pid).or_insert(t.id.first_ns);
        *e = (*e).max(t.id.first_ns);
    }
    rows.iter()
        .filter(|t| !t.id.exited && t.id.tgid != self_tgid && rank(t) > (0, 0, 0))
        .filter(|t| newest.get(&t.id.pid) == Some(&t.id.first_ns))
        .collect()
}

/// Of the live tasks in ranking order, `n`: those of `before` among the first 2N, then the
/// first.
pub(super) fn keep_or_pick(live: &[Key], before: &BTreeSet<Key>, n: usize) -> BTreeSet<Key> {
    let mut chosen: BTreeSet<Key> = live
        .iter()
        .take(2 * n)
        .filter(|k| before.contains(k))
        .take(n)
        .copied()
        .collect();
    for k in live {
        if chosen.len() >= n {
            break;
        }
        chosen.insert(*k);
    }
    chosen
}

/// Records that `label` had a live task at scrape `now` (no allocation once it has).
fn mark_live(live: &mut BTreeMap<String, u64>, label: &str, now: u64) {
    match live.get_mut(label) {
        Some(v) => *v = now,
        None => {
            live.insert(label.to_owned(), now);
        }
    }
}

type Rank = (u64, u64, u64);

/// Ranking of live tasks for the top N: PTE-scan time (or, where only sampled, samples in
/// task_numa_work), then hint faults, then pid.
pub(super) fn rank(t: &TaskRow) -> Rank {
    t.activity
}

impl Fold {
    pub fn new(limits: FoldLimits) -> Self {
        Self {
            limits,
            totals: Counts::default(),
            own: Counts::default(),
            cgroups: BTreeMap::new(),
            other_tasks: Counts::default(),
            tasks: Vec::new(),
            exported: HashMap::default(),
            scrapes: 0,
            cgroup_live: BTreeMap::new(),
            labels: Labels::default(),
            exited_before: HashSet::new(),
            exited_now: HashSet::new(),
            tasks_read: 0,
            node_tasks: NodeTasks::default(),
        }
    }

    pub fn limits(&self) -> FoldLimits {
        self.limits
    }

    /// Takes in the next snapshot (cumulative, like every engine snapshot) and what the tasks
    /// counted since the previous one, from `feed` right after it; then has `feed` sum the
    /// tasks it now exports apart.
    pub fn advance(&mut self, feed: &mut impl Feed, snap: &Snapshot) -> anyhow::Result<()> {
        let incs = feed.increments(snap)?;
        let picked = self.fold_in(feed, snap, incs);
        let keys: Vec<Key> = picked.iter().map(|(_, _, k)| *k).collect();
        let counts = feed.counts(snap, &keys);
        self.exported = HashMap::default();
        self.tasks = Vec::with_capacity(picked.len());
        for ((pid, comm, key), counts) in picked.into_iter().zip(counts) {
            self.exported.insert(pid, (comm.clone(), key));
            self.tasks.push(TaskSeries { comm, pid, counts });
        }
        feed.watch(keys);
        Ok(())
    }

    /// Adds `incs` (the tasks exported at the previous scrape summed apart) to the series, as
    /// the tasks of `snap` that `feed` walks (once) say, and chooses the tasks exported on
    /// their own ([`Fold::choose`]): (pid, comm, key) in key order.
    fn fold_in(
        &mut self,
        feed: &mut impl Feed,
        snap: &Snapshot,
        incs: Increments,
    ) -> Vec<(u32, String, Key)> {
        // Only the first 2N in ranking order are ever looked at.
        let exported = &self.exported;
        let keep = |c: &Candidate| {
            exported
                .get(&c.order.1)
                .filter(|(comm, _)| *comm == c.comm)
                .is_none_or(|(_, k)| *k == c.key)
        };
        let mut pick = Candidates::new(snap.self_tgid, 2 * self.limits.top_tasks, keep);
        let depth = self.limits.cgroup_depth;
        // Named cgroup series: past `max_cgroups`, a new cgroup's increments go to `other`.
        let mut named = self.cgroups.keys().filter(|k| *k != OTHER).count();
        // This scrape's series by label, marked live after the walk: a hashed lookup per task
        // where one in the sorted map by label (string compares over 10 000 labels) was most
        // of a scrape's own work at 100 000 tasks.
        let mut pending: HashMap<Arc<str>, Pending> = HashMap::new();
        let other: Arc<str> = Arc::from(OTHER);
        let existing: HashSet<&str> = self.cgroups.keys().map(String::as_str).collect();
        // A series exists from before this scrape or was started in it.
        let exists = |p: &HashMap<Arc<str>, Pending>, l: &Arc<str>| {
            existing.contains(&**l) || p.get(l).is_some_and(|p| p.started)
        };
        // The series each cgroup id's increments go to: decided at the first of its tasks that
        // counted something, in the snapshot's (key) order.
        let mut series_of: HashMap<u64, Arc<str>, BuildHasherDefault<KeyHasher>> =
            HashMap::default();
        self.exited_before = std::mem::take(&mut self.exited_now);
        self.labels.begin_walk();
        let mut node_tasks = NodeTasks::default();
        let mut n = 0;
        let (labels, exited_now, limits) = (&mut self.labels, &mut self.exited_now, self.limits);
        feed.rows(snap, &mut |t| {
            pick.push(t);
            let counted = incs.counted.get(n).copied().unwrap_or(false);
            n += 1;
            let key = t.key();
            if t.id.exited {
                exited_now.insert(key);
            }
            if t.id.tgid == snap.self_tgid {
                labels.touch(t.id.cgroup_id);
                return;
            }
            if !t.id.exited {
                node_tasks.add(t.id.preferred_node, t.id.last_node);
            }
            // An unchanged task (an exited one, until forgotten) adds nothing, and must not
            // bring back a cgroup series that was dropped.
            let label = labels.of(t.id.cgroup_id, t.id.cgroup.as_ref(), depth);
            let known = exists(&pending, &label);
            if counted {
                // A new series while there is room (labels are never `other`).
                let slot = if known || named < limits.max_cgroups {
                    named += usize::from(!known);
                    label
                } else {
                    Arc::clone(&other)
                };
                series_of
                    .entry(t.id.cgroup_id)
                    .or_insert_with(|| Arc::clone(&slot));
                let p = pending.entry(slot).or_default();
                p.started = true;
                p.live |= !t.id.exited;
            } else if !t.id.exited && known {
                pending.entry(label).or_default().live = true;
            }
        });
        drop(existing);
        let best = best_of(pick, |each| feed.rows(snap, each));
        let chosen = self.choose(&best);
        let mut picked: Vec<(u32, String, Key)> = (best.into_iter())
            .filter(|c| chosen.contains(&c.key))
            .map(|c| (c.order.1, c.comm.to_string(), c.key))
            .collect();
        picked.sort_unstable_by_key(|(_, _, k)| *k);
        self.tasks_read = n;
        self.node_tasks = node_tasks;
        // Each sum to its cgroup's series and to the totals. An id none of whose tasks counted
        // in the walk was summed from an entry read before its task moved cgroups (a read
        // repeated within one snapshot): to its series as last labelled.
        // What tasks counted while not exported on their own goes to `other` too: all but what
        // the tasks exported at the previous scrape and again now counted.
        let unwatched = incs.by_cgroup.iter().map(|(id, c)| (id, c, true));
        let watched = (incs.watched.iter()).map(|(k, (id, c))| (id, c, !chosen.contains(k)));
        for (id, inc, to_other) in unwatched.chain(watched) {
            let inc = &inc.counts();
            if to_other {
                self.other_tasks.add(inc);
            }
            let slot = match series_of.get(id) {
                Some(s) => Arc::clone(s),
                None => {
                    let label = self.labels.of_known(*id, depth);
                    let known = self.cgroups.contains_key(&*label)
                        || pending.get(&label).is_some_and(|p| p.started);
                    let slot = if known || named < self.limits.max_cgroups {
                        named += usize::from(!known);
                        label
                    } else {
                        Arc::clone(&other)
                    };
                    pending.entry(Arc::clone(&slot)).or_default().started = true;
                    slot
                }
            };
            // Every increment goes to one series: the totals are their sum.
            self.totals.add(inc);
            match self.cgroups.get_mut(&*slot) {
                Some(c) => c.add(inc),
                None => {
                    self.cgroups.insert(slot.to_string(), inc.clone());
                }
            }
        }
        self.own.add(&incs.own);
        for (label, p) in pending {
            if p.live {
                mark_live(&mut self.cgroup_live, &label, self.scrapes);
            }
        }
        self.labels.keep_seen(n);
        let now = self.scrapes;
        let idle: Vec<String> = self
            .cgroups
            .keys()
            .filter(|k| *k != OTHER)
            .filter(|k| {
                now.saturating_sub(self.cgroup_live.get(*k).copied().unwrap_or(0))
                    >= CGROUP_IDLE_SCRAPES
            })
            .cloned()
            .collect();
        for k in idle {
            self.cgroups.remove(&k);
            self.cgroup_live.remove(&k);
        }
        self.scrapes += 1;
        self.totals = std::mem::take(&mut self.totals).finished();
        self.own = std::mem::take(&mut self.own).finished();
        self.other_tasks = std::mem::take(&mut self.other_tasks).finished();
        for c in self.cgroups.values_mut() {
            *c = std::mem::take(c).finished();
        }
        picked
    }

    /// The live tasks exported on their own this time, of the candidates `best` (in ranking
    /// order, the first 2N): those exported last time that are still among them (so that
    /// series do not flap at the boundary), then the busiest. A (comm, pid) pair that named
    /// another task at the previous scrape (a reused pid) waits one scrape (see `keep` in
    /// [`Fold::fold_in`]), so that no series restarts lower than it was; of two live entries
    /// with one pid (an evicted entry carried forward), the newer counts.
    fn choose(&self, best: &[Candidate]) -> BTreeSet<Key> {
        let live: Vec<Key> = best.iter().map(|c| c.key).collect();
        let before: BTreeSet<Key> = self.exported.values().map(|(_, k)| *k).collect();
        keep_or_pick(&live, &before, self.limits.top_tasks)
    }

    /// Tasks exited in the latest snapshot taken in that were exited in the one before too:
    /// their counts are in the aggregates for good, so the engine and the fold may forget them.
    pub fn settled(&self) -> Vec<(u32, u64)> {
        let mut v: Vec<Key> = self
            .exited_now
            .intersection(&self.exited_before)
            .copied()
            .collect();
        v.sort_unstable();
        v
    }

    /// Forgets tasks the engine forgot too (see [`Fold::settled`]).
    pub fn forget(&mut self, keys: &[(u32, u64)]) {
        if keys.is_empty() {
            return;
        }
        for k in keys {
            self.exited_now.remove(k);
        }
    }
}

/// A fold fed as `serve` feeds it, its increments worked out from consecutive snapshots (see
/// [`Differ`]).
#[cfg(test)]
pub(super) struct Diffed {
    fold: Fold,
    differ: crate::engine::increments::Differ,
}

#[cfg(test)]
impl Diffed {
    pub(super) fn new(limits: FoldLimits) -> Self {
        Self {
            fold: Fold::new(limits),
            differ: Default::default(),
        }
    }

    pub(super) fn advance(&mut self, snap: &Snapshot) {
        self.fold.advance(&mut self.differ, snap).unwrap();
    }

    pub(super) fn forget(&mut self, keys: &[Key]) {
        self.fold.forget(keys);
        for k in keys {
            self.differ.forget(k);
        }
    }
}

#[cfg(test)]
impl std::ops::Deref for Diffed {
    type Target = Fold;
    fn deref(&self) -> &Fold {
        &self.fold
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Filter, Node, PackedCounts};

    fn task(pid: u32, first_ns: u64, comm: &str, cgroup: &str, faults: u64) -> TaskRecord {
        let mut counts = Counts::default();
        counts.hint_faults.faults = faults;
        counts.scan.pte_updates = faults * 2;
        TaskRecord {
            pid,
            tgid: pid,
            comm: comm.into(),
            exited: false,
            // One id per path, as the engine's records have.
            cgroup_id: cgroup.bytes().fold(0, |h, b| h * 31 + u64::from(b)),
            cgroup: Some(cgroup.into()),
            preferred_node: None,
            last_node: None,
            first_ns,
            counts: PackedCounts::pack(&counts),
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

    /// The walk of a list in key order and the table for any order pick the same tasks: the
    /// newest live entry of each pid (an older live one, an exited newer one), never
    /// numatrace's own or one that ranks at nothing.
    #[test]
    fn candidates_are_the_newest_live_entry_of_each_pid_in_any_order() {
        let mut tasks = vec![
            task(1, 1, "a", "/", 1),
            task(1, 2, "a", "/", 2),
            task(2, 3, "b", "/", 1),
            task(2, 4, "b", "/", 1),
            task(3, 5, "c", "/", 0),
            task(4, 6, "own", "/", 9),
            task(5, 7, "e", "/", 3),
        ];
        tasks[3].exited = true;
        tasks[5].tgid = 999;
        let rows = |tasks: &[TaskRecord]| tasks.iter().map(TaskRow::of).collect::<Vec<_>>();
        let walked = |rows: &[TaskRow]| {
            let mut k = ranked(|each| rows.iter().for_each(&mut *each), 999, 100);
            k.sort_unstable();
            k
        };
        let unordered = |rows: &[TaskRow]| {
            let mut k: Vec<Key> = candidates_unordered(rows, 999)
                .into_iter()
                .map(TaskRow::key)
                .collect();
            k.sort_unstable();
            k
        };
        let sorted = rows(&tasks);
        let expect = vec![(1, 2), (2, 3), (5, 7)];
        assert_eq!(walked(&sorted), expect);
        assert_eq!(unordered(&sorted), expect);
        // Ranked, the best `cap` kept.
        let top = ranked(|each| sorted.iter().for_each(&mut *each), 999, 2);
        assert_eq!(top, vec![(5, 7), (1, 2)]);
        // Out of key order: the long way, the same answer; with a key twice, as the table's.
        tasks.reverse();
        assert_eq!(walked(&rows(&tasks)), expect);
        tasks.push(tasks[0].clone());
        let twice = rows(&tasks);
        assert_eq!(walked(&twice), unordered(&twice));
    }

    /// The walk's node columns are the snapshot's own (`Snapshot::node_tasks`): live traced
    /// tasks only, numatrace's own left out.
    #[test]
    fn the_walk_counts_node_tasks_as_the_snapshot_does() {
        let mut tasks = vec![
            task(1, 1, "a", "/", 1),
            task(2, 2, "b", "/", 0),
            task(3, 3, "c", "/", 4),
            task(4, 4, "own", "/", 9),
        ];
        let (n0, n1) = (Node::from_entry(1), Node::from_entry(2));
        tasks[0].preferred_node = n1;
        tasks[0].last_node = n0;
        tasks[1].last_node = n1;
        tasks[2].preferred_node = n1;
        tasks[2].last_node = n1;
        tasks[2].exited = true;
        tasks[3].preferred_node = n0;
        tasks[3].tgid = 999;
        let s = snap(tasks);
        let mut f = Diffed::new(limits(1));
        f.advance(&s);
        let want = s.node_tasks(&Filter::default());
        assert_eq!(f.node_tasks, want);
        assert_eq!(
            (want.of(0), want.of(1), want.of(2)),
            ((0, 1), (1, 1), (0, 0))
        );
        let rows = s.node_rows_with(&f.node_tasks);
        assert!(rows.is_empty(), "no node known to the snapshot: no row");
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
        let mut f = Diffed::new(limits(1));
        f.advance(&snap(vec![
            task(1, 1, "a", "/x", 10),
            task(2, 2, "b", "/y", 5),
        ]));
        assert_eq!(f.totals.hint_faults.faults, 15);
        assert_eq!(f.tasks.len(), 1);
        assert_eq!(f.tasks[0].pid, 1);
        // Both tasks' counts at the first scrape: a's series begins with its lifetime counts.
        assert_eq!(f.other_tasks.hint_faults.faults, 15);
        // b overtakes a and moves cgroup: nothing decreases anywhere.
        let mut b = task(2, 2, "b", "/z/deep/er", 50);
        let mut c = b.counts();
        c.scan.pte_updates = 100;
        b.set_counts(&c);
        f.advance(&snap(vec![task(1, 1, "a", "/x", 12), b]));
        assert_eq!(f.totals.hint_faults.faults, 62);
        // a is still in the top 2N: it keeps its series; b's increments stay in other.
        assert_eq!(f.tasks[0].pid, 1);
        assert_eq!(f.tasks[0].counts.hint_faults.faults, 12);
        assert_eq!(f.other_tasks.hint_faults.faults, 15 + 45);
        assert_eq!(f.cgroups["/x"].hint_faults.faults, 12);
        assert_eq!(f.cgroups["/y"].hint_faults.faults, 5);
        // max_cgroups = 2: the third cgroup counts under other.
        assert_eq!(f.cgroups[OTHER].hint_faults.faults, 45);
        let sum: u64 = f.cgroups.values().map(|c| c.hint_faults.faults).sum();
        assert_eq!(sum, f.totals.hint_faults.faults);
    }

    #[test]
    fn exited_and_forgotten_tasks_stay_in_the_totals() {
        let mut f = Diffed::new(limits(5));
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
        assert!(f.settled().is_empty());
        f.advance(&s3);
        assert_eq!(f.settled(), vec![(1, 1)]);
        f.forget(&[(1, 1)]);
        f.advance(&snap(vec![]));
        assert_eq!(f.totals.hint_faults.faults, 11);
        assert_eq!(f.cgroups["/x"].hint_faults.faults, 11);
    }

    #[test]
    fn a_reused_pid_waits_a_scrape_before_it_is_exported() {
        let mut f = Diffed::new(limits(5));
        f.advance(&snap(vec![task(7, 1, "w", "/x", 100)]));
        assert_eq!(f.tasks[0].counts.hint_faults.faults, 100);
        let mut old = task(7, 1, "w", "/x", 100);
        old.exited = true;
        // The same pid and comm, a new task with fewer counts.
        f.advance(&snap(vec![old.clone(), task(7, 9, "w", "/x", 3)]));
        assert!(f.tasks.is_empty(), "would restart series w/7 lower");
        assert_eq!(f.other_tasks.hint_faults.faults, 100 + 3);
        f.advance(&snap(vec![old, task(7, 9, "w", "/x", 4)]));
        assert_eq!(f.tasks.len(), 1);
        assert_eq!(f.tasks[0].counts.hint_faults.faults, 4);
        // Its series begins at 4: the one it counted meanwhile is other's.
        assert_eq!(f.other_tasks.hint_faults.faults, 104);
    }

    #[test]
    fn a_cgroup_without_live_tasks_is_dropped_after_a_while() {
        let mut f = Diffed::new(limits(5));
        let mut gone = task(1, 1, "a", "/pod1", 10);
        f.advance(&snap(vec![gone.clone(), task(2, 2, "b", "/pod2", 1)]));
        gone.exited = true;
        for _ in 0..CGROUP_IDLE_SCRAPES {
            assert!(f.cgroups.contains_key("/pod1"));
            f.advance(&snap(vec![gone.clone(), task(2, 2, "b", "/pod2", 1)]));
        }
        assert!(!f.cgroups.contains_key("/pod1"), "{:?}", f.cgroups.keys());
        assert!(f.cgroups.contains_key("/pod2"));
        assert_eq!(
            f.totals.hint_faults.faults, 11,
            "its counts stay in the totals"
        );
    }

    #[test]
    fn exported_tasks_stay_while_in_the_top_2n() {
        let mut f = Diffed::new(limits(1));
        f.advance(&snap(vec![
            task(1, 1, "a", "/x", 10),
            task(2, 2, "b", "/x", 9),
        ]));
        assert_eq!(f.tasks[0].pid, 1);
        // b overtakes a, but a is still in the top 2: it keeps its series.
        f.advance(&snap(vec![
            task(1, 1, "a", "/x", 10),
            task(2, 2, "b", "/x", 11),
        ]));
        assert_eq!(f.tasks[0].pid, 1);
        // A third task pushes a out of the top 2.
        f.advance(&snap(vec![
            task(1, 1, "a", "/x", 10),
            task(2, 2, "b", "/x", 11),
            task(3, 3, "c", "/x", 12),
        ]));
        assert_eq!(f.tasks[0].pid, 3);
    }

    #[test]
    fn one_series_per_pid_even_with_a_carried_entry() {
        let mut f = Diffed::new(limits(5));
        f.advance(&snap(vec![
            task(4, 1, "w", "/x", 100),
            task(4, 9, "w", "/x", 2),
        ]));
        assert_eq!(f.tasks.len(), 1);
        assert_eq!(f.tasks[0].counts.hint_faults.faults, 2, "the newer entry");
    }

    #[test]
    fn own_tasks_are_apart() {
        let mut f = Diffed::new(limits(5));
        let mut own = task(999, 1, "numatrace", "/x", 3);
        own.tgid = 999;
        f.advance(&snap(vec![own, task(1, 1, "a", "/x", 1)]));
        assert_eq!(f.own.hint_faults.faults, 3);
        assert_eq!(f.totals.hint_faults.faults, 1);
        assert_eq!(f.tasks.len(), 1);
    }
}
