//! `top`'s memory of the recent past. NUMA balancing works in bursts (a scan every 1–60 s), so
//! one refresh alone shows a task in some frames and not in others. This keeps, bounded by a
//! horizon (a minute, or the activity window if longer):
//! - per refresh, the system-wide series the header draws as sparklines (hint faults/s and
//!   pages migrated/s from /proc/vmstat, the traced tasks' scan share) and the node-to-node
//!   migrations;
//! - per task active within the horizon, what it counted in each refresh since (the amounts its
//!   rows and sparklines show, not every counter: at 100 000 busy tasks a full set of counts per
//!   task and refresh was gigabytes), so that it stays listed for the activity window after a
//!   burst, with its counts over it;
//! - the last activity seen, to say when something last moved.
//!
//! Pure data, unit-tested without a kernel.

use std::{
    cell::RefCell,
    collections::{HashMap, VecDeque},
    hash::BuildHasherDefault,
};

use serde::Serialize;

use super::{
    graph::Series,
    packed::{Packed, Pos},
};
use crate::{
    engine::{Snapshot, tasks::KeyHasher},
    model::{Counts, Filter, TaskIdentity, TaskRecord, write_over},
    report::measured::{Feed, Measured},
    sources::maps::NodeFlow,
};

/// The header's and the detail's sparklines cover this long.
pub const SPARK_S: u64 = 60;
/// What `w` cycles through.
pub const WINDOWS: [u64; 4] = [5, 10, 30, 60];
pub const DEFAULT_WINDOW_S: u64 = 10;
pub const MAX_WINDOW_S: u64 = crate::cli::TOP_WINDOW_MAX_S;
/// Whatever --delay, at most this many refreshes are kept.
const MAX_SAMPLES: usize = 4096;
/// A trail is given room for at most this many refreshes ahead (more grow as they come).
const ROOM_MAX: u64 = 64;

/// The window after `cur` in the `w` cycle (5, 10, 30, 60 s, and round again).
pub fn next_window(cur: u64) -> u64 {
    WINDOWS
        .iter()
        .copied()
        .find(|&w| w > cur)
        .unwrap_or(WINDOWS[0])
}

/// `10s`, `1m30s`: a window as the screen says it.
pub fn fmt_window(s: u64) -> String {
    match (s / 60, s % 60) {
        (0, s) => format!("{s}s"),
        (m, 0) => format!("{m}m"),
        (m, s) => format!("{m}m{s}s"),
    }
}

/// One refresh, system-wide.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// CLOCK_MONOTONIC at its end, and its length.
    pub end_ns: u64,
    pub secs: f64,
    /// From /proc/vmstat (`None`: the kernel has no such counter).
    pub hint_per_s: Option<f64>,
    pub migr_per_s: Option<f64>,
    /// The traced tasks' share of run time in task_numa_work (sampled where it is not
    /// hooked; 0 without run time).
    pub scan_share: f64,
    /// Node-to-node migrations of the traced tasks.
    pub flows: Vec<NodeFlow>,
}

impl Sample {
    pub fn of(delta: &Snapshot, filter: &Filter, m: &Measured) -> Self {
        let secs = delta.span_ns as f64 / 1e9;
        let rate = |k: &str| {
            delta
                .vmstat_hi
                .get(k)
                .map(|n| if secs > 0.0 { *n as f64 / secs } else { 0.0 })
        };
        let (exact, sampled) = delta.scan_shares(filter);
        let share = if !m.is(Feed::Scan) && m.is(Feed::Samples) {
            sampled
        } else {
            exact
        };
        Self {
            end_ns: delta.mono_ns,
            secs,
            hint_per_s: rate("numa_hint_faults"),
            migr_per_s: rate("numa_pages_migrated"),
            scan_share: share.unwrap_or(0.0),
            flows: delta.node_flows(),
        }
    }
}

/// What a task last did, and when.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LastActivity {
    #[serde(skip)]
    pub at_ns: u64,
    pub pid: u32,
    pub comm: String,
    /// "hint faults", "migrations", "PTE updates", "scanning", "skipped VMAs", "task placement".
    pub what: &'static str,
}

/// The kind of activity that dominates `c`, in the order a reader cares about.
fn what(c: &Counts) -> &'static str {
    if c.hint_faults.faults > 0 {
        "hint faults"
    } else if c.migrations.pages_ok.max(c.hint_faults.migrated_pages) > 0 {
        "migrations"
    } else if c.scan.pte_updates > 0 {
        "PTE updates"
    } else if c.scan.calls > 0 || c.scan.scan_samples > 0 {
        "scanning"
    } else if c.skipped_vmas_total > 0 {
        "skipped VMAs"
    } else if c.placement.moves > 0 {
        "task placement"
    } else {
        "NUMA balancing events"
    }
}

/// How much happened, to pick the busiest task of a refresh.
fn amount(c: &Counts) -> u64 {
    [
        c.hint_faults.faults,
        c.migrations.pages_ok,
        c.scan.pte_updates,
        c.scan.calls,
        c.scan.scan_samples,
        c.skipped_vmas_total,
        c.placement.moves,
    ]
    .iter()
    .fold(0u64, |a, b| a.saturating_add(*b))
}

/// Declares [`Amounts`]: the counters of [`Counts`] that a window's rows (the table's columns,
/// the process and cgroup rows made of them) and the detail's sparklines read.
macro_rules! amounts {
    ($( $($f:ident).+ ),* $(,)?) => {
        /// How many counters [`Amounts`] holds.
        const AMOUNTS: usize = [$(stringify!($($f).+)),*].len();

        /// What one refresh of a task added to the counters a window shows.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        struct Amounts([u64; AMOUNTS]);

        impl Amounts {
            fn of(c: &Counts) -> Self {
                Self([$(c.$($f).+),*])
            }

            /// As counts (the others zero; ratios left to `finished()`).
            fn counts(&self) -> Counts {
                let mut c = Counts::default();
                let mut v = self.0.iter();
                $( c.$($f).+ = v.next().copied().unwrap_or(0); )*
                c
            }
        }
    };
}

amounts!(
    scan.runtime_in_scan_ns,
    scan.task_runtime_ns,
    scan.scan_samples,
    scan.samples,
    scan.pte_updates,
    hint_faults.faults,
    hint_faults.local,
    hint_faults.faults_thp,
    hint_faults.cow_shared,
    hint_faults.migrated_pages,
    migrations.pages_ok,
    migrations.pages_failed,
    migrations.latency_ns_total,
    migrations.attempts,
    migrations.stalls,
    placement.moves,
    skipped_vmas_total,
);

impl Amounts {
    fn add(&mut self, o: &Self) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a = a.saturating_add(b);
        }
    }
}

/// A running sum of [`Amounts`]: wide enough that taking out what was put in is exact, and read
/// saturated, as [`Amounts::add`] sums.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sum([u128; AMOUNTS]);

impl Sum {
    fn put(&mut self, o: &Amounts) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += u128::from(b);
        }
    }

    fn take(&mut self, o: &Amounts) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a -= u128::from(b);
        }
    }

    fn amounts(&self) -> Amounts {
        Amounts(self.0.map(|a| u64::try_from(a).unwrap_or(u64::MAX)))
    }
}

/// One refresh of a recently active task (from its first activity within the horizon on): its
/// amounts when it did something, else only its run time and CPU samples (what the scan share
/// over the window divides by).
type Entry = super::packed::Entry<AMOUNTS>;

fn entry(end_ns: u64, t: &Counts, active: bool) -> Entry {
    let amounts = if active {
        Amounts::of(t)
    } else {
        let mut c = Counts::default();
        c.scan.task_runtime_ns = t.scan.task_runtime_ns;
        c.scan.samples = t.scan.samples;
        Amounts::of(&c)
    };
    Entry {
        end_ns,
        active,
        amounts: amounts.0,
    }
}

/// What an entry adds to a window's amounts.
fn amounts(e: &Entry) -> Amounts {
    Amounts(e.amounts)
}

#[derive(Clone, Debug)]
struct Trail {
    /// The task as last seen.
    seen: TaskIdentity,
    /// When it last did something: it is remembered while that lies within the horizon.
    last_active_ns: u64,
    /// Its refreshes since its first activity within the horizon (the latest active one ends
    /// at `last_active_ns`: older ones go first).
    entries: Packed<AMOUNTS>,
    /// The amounts of its entries from `sum_from` on: those within the window [`Recent`] keeps
    /// (`kept_ns`), kept as entries come and leave it, so that a window is not summed afresh
    /// over every entry of every task each refresh.
    sum: Sum,
    sum_from: Pos,
    /// Room was made for a horizon of entries (at its second refresh: a task seen once, as
    /// many short-lived ones are, keeps only its one entry).
    roomy: bool,
}

impl Trail {
    /// Takes the entries at the front of its sum that `keep` does not keep out of it.
    fn slide(&mut self, keep: impl Fn(u64) -> bool) {
        // The end alone first: most refreshes leave the sum as it is.
        while self
            .entries
            .end_ns_at(self.sum_from)
            .is_some_and(|end| !keep(end))
        {
            let Some((e, next)) = self.entries.read(self.sum_from) else {
                break;
            };
            self.sum.take(&amounts(&e));
            self.sum_from = next;
        }
    }

    /// Where the entries `within` keeps (the latest ones: ends do not decrease) start, and
    /// their sum, afresh.
    fn sum_within(&self, within: impl Fn(u64) -> bool) -> (Pos, Sum) {
        let from = self
            .entries
            .from(self.entries.start())
            .find(|(_, e)| within(e.end_ns))
            .map_or(self.entries.end(), |(at, _)| at);
        let mut sum = Sum::default();
        for (_, e) in self.entries.from(from) {
            sum.put(&amounts(&e));
        }
        (from, sum)
    }
}

/// The tasks active within a window, with their counts over it.
#[derive(Clone, Debug, Default)]
pub struct WindowData {
    pub window_s: u64,
    /// The seconds its refreshes cover (less than the window while top is young).
    pub span_s: f64,
    /// The latest refresh's end.
    pub now_ns: u64,
    /// Each with its counts summed over the window (the counters a window shows, finished),
    /// and beside it when it was last active (one list each, so that the records become a
    /// snapshot's without a copy).
    pub tasks: Vec<TaskRecord>,
    pub last_active_ns: Vec<u64>,
    pub flows: Vec<NodeFlow>,
    pub self_tgid: u32,
}

impl WindowData {
    /// Seconds since `at_ns` (0: within the latest refresh).
    pub fn ago_s(&self, at_ns: u64) -> f64 {
        self.now_ns.saturating_sub(at_ns) as f64 / 1e9
    }

    /// Each task with when it was last active.
    pub fn with_last(&self) -> impl Iterator<Item = (&TaskRecord, u64)> {
        self.tasks.iter().zip(self.last_active_ns.iter().copied())
    }

    /// As a snapshot, for the process and cgroup aggregations: its tasks move there.
    pub fn take_snapshot(&mut self) -> Snapshot {
        self.last_active_ns.clear();
        Snapshot {
            mono_ns: self.now_ns,
            span_ns: (self.span_s * 1e9) as u64,
            self_tgid: self.self_tgid,
            tasks: std::mem::take(&mut self.tasks),
            ..Snapshot::default()
        }
    }
}

/// The history: bounded by `horizon_ns` and [`MAX_SAMPLES`].
#[derive(Clone, Debug)]
pub struct Recent {
    horizon_ns: u64,
    /// How long a task's refreshes are kept (the task itself is kept while it was active within
    /// the horizon): the horizon, for the terminal view's per-task sparklines; the window, for
    /// `top -b`, which shows no task's history beyond it ([`Recent::batch`]).
    task_horizon_ns: u64,
    /// The window each trail keeps a running sum for (see [`Trail::sum`]): the one shown.
    kept_ns: u64,
    samples: VecDeque<Sample>,
    /// By task key, hashed as the engine's table does (a lookup per task and refresh).
    tasks: HashMap<(u32, u64), Trail, BuildHasherDefault<KeyHasher>>,
    /// CLOCK_MONOTONIC at the start of the first refresh.
    started_ns: Option<u64>,
    last: Option<LastActivity>,
    self_tgid: u32,
    /// A window's record list handed back ([`Recent::give_back`]): the next window's records
    /// are written over it, its memory already mapped and its records' counts allocated.
    spare: RefCell<Vec<TaskRecord>>,
}

impl Recent {
    /// Keeps a minute, or `window_s` if longer.
    pub fn new(window_s: u64) -> Self {
        let horizon_ns = SPARK_S.max(window_s.min(MAX_WINDOW_S)) * 1_000_000_000;
        Self {
            horizon_ns,
            task_horizon_ns: horizon_ns,
            kept_ns: window_s.saturating_mul(1_000_000_000),
            samples: VecDeque::new(),
            tasks: HashMap::default(),
            started_ns: None,
            last: None,
            self_tgid: 0,
            spare: RefCell::default(),
        }
    }

    /// [`Recent::new`] for `top -b`: the system's series over a minute (the trend line), each
    /// task's refreshes over the window alone (at 100 000 busy tasks, a minute of them was most
    /// of its memory). Windows longer than `window_s` then miss older refreshes: `top -b` never
    /// changes its window. Tasks are kept as long as in the terminal view.
    pub fn batch(window_s: u64) -> Self {
        let r = Self::new(window_s);
        Self {
            task_horizon_ns: r.kept_ns.clamp(1_000_000_000, r.horizon_ns),
            ..r
        }
    }

    /// Adds one refresh: `delta` is what was counted in it; tasks the filter leaves out are
    /// not remembered.
    pub fn push(&mut self, delta: &Snapshot, filter: &Filter, sample: Sample) {
        let end = delta.mono_ns;
        let secs = delta.span_ns as f64 / 1e9;
        self.started_ns
            .get_or_insert(delta.mono_ns.saturating_sub(delta.span_ns));
        self.self_tgid = delta.self_tgid;
        // Room for a horizon of refreshes of this length (a second at least: top's first
        // refresh is shorter; a minute's at most) in a trail: grown in steps, the trails of
        // tasks that became busy together all grew at the same refresh (100 000 of them took
        // it to 0.8 s).
        let room =
            (self.task_horizon_ns / delta.span_ns.max(1_000_000_000)).min(ROOM_MAX) as usize + 1;
        let mut busiest: Option<(&TaskRecord, u64)> = None;
        for t in delta.traced(filter) {
            let active = !t.counts.is_empty();
            let counts = t.counts();
            if active {
                let a = amount(&counts);
                if busiest.is_none_or(|(_, b)| a > b) {
                    busiest = Some((t, a));
                }
            }
            let trail = match self.tasks.get_mut(&t.key()) {
                Some(tr) => tr,
                None if active => self.tasks.entry(t.key()).or_insert_with(|| Trail {
                    seen: TaskIdentity::of(t),
                    last_active_ns: end,
                    entries: Packed::default(),
                    sum: Sum::default(),
                    sum_from: 0,
                    roomy: false,
                }),
                None => continue,
            };
            trail.seen = TaskIdentity::of(t);
            if active {
                trail.last_active_ns = end;
            }
            let e = entry(end, &counts, active);
            let at = trail.entries.end();
            let first = at == 0;
            trail.entries.push(&e);
            // The latest refresh is within any window.
            trail.sum.put(&amounts(&e));
            if !first && !trail.roomy {
                trail.entries.reserve_like_last(room, at);
                trail.roomy = true;
            }
        }
        if let Some((t, _)) = busiest {
            self.last = Some(LastActivity {
                at_ns: end,
                pid: t.pid,
                comm: t.comm.to_string(),
                what: what(&t.counts()),
            });
        }
        // Its times are the delta's, whatever the caller filled in.
        self.samples.push_back(Sample {
            end_ns: end,
            secs,
            ..sample
        });
        self.prune(end);
    }

    /// Forgets refreshes older than the horizon, and tasks not active within it.
    fn prune(&mut self, now: u64) {
        let keep = |end: u64| end.saturating_add(self.horizon_ns) > now;
        while self.samples.front().is_some_and(|s| !keep(s.end_ns))
            || self.samples.len() > MAX_SAMPLES
        {
            self.samples.pop_front();
        }
        // A task is remembered while it was active within the horizon (its idle refreshes'
        // run time is what a window's scan share divides by, should it become active again);
        // its refreshes, within the task horizon too (an end `e` is kept while
        // e + task_horizon > now).
        let oldest = self.samples.front().map_or(now, |s| s.end_ns);
        let oldest_entry = oldest.max((now + 1).saturating_sub(self.task_horizon_ns));
        let kept = self.kept_ns;
        self.tasks.retain(|_, tr| {
            tr.slide(|end| end >= oldest_entry && end.saturating_add(kept) > now);
            tr.entries.drop_before(oldest_entry);
            tr.last_active_ns >= oldest
        });
    }

    /// Keeps running sums for `window_s` from now on (the window shown changed): each trail's
    /// sum afresh, once.
    pub fn keep_window(&mut self, window_s: u64) {
        self.kept_ns = window_s.saturating_mul(1_000_000_000);
        // Never shorter than the window kept (a batch history keeps no more from now on).
        self.task_horizon_ns = self.task_horizon_ns.max(self.kept_ns).min(self.horizon_ns);
        let now = self.now_ns();
        let kept = self.kept_ns;
        for tr in self.tasks.values_mut() {
            (tr.sum_from, tr.sum) = tr.sum_within(|end| end.saturating_add(kept) > now);
        }
    }

    /// The latest refresh's end.
    pub fn now_ns(&self) -> u64 {
        self.samples.back().map_or(0, |s| s.end_ns)
    }

    /// Seconds since the first refresh began.
    pub fn running_s(&self) -> f64 {
        self.now_ns().saturating_sub(self.started_ns.unwrap_or(0)) as f64 / 1e9
    }

    /// The last activity of a traced task since top started (`None`: none yet).
    pub fn last_activity(&self) -> Option<&LastActivity> {
        self.last.as_ref()
    }

    /// Whether a refresh ending at `end` lies within `window_s` of the latest.
    fn within(&self, end: u64, window_s: u64) -> bool {
        end.saturating_add(window_s * 1_000_000_000) > self.now_ns()
    }

    /// The tasks active within the last `window_s`, with their counts over it.
    pub fn window(&self, window_s: u64) -> WindowData {
        let in_window: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| self.within(s.end_ns, window_s))
            .collect();
        let span_s = in_window.iter().map(|s| s.secs).sum();
        // In key order: the (small) trails are ordered before the records are made, where
        // sorting the records moved 100 000 of them about.
        // The keys by value: a sort that read them through the table's slots missed the cache
        // at most of its ~2 million comparisons.
        let mut active: Vec<((u32, u64), &Trail, u64)> = self
            .tasks
            .iter()
            .filter_map(|(k, tr)| {
                let last = tr.last_active_ns;
                self.within(last, window_s).then_some((*k, tr, last))
            })
            .collect();
        active.sort_unstable_by_key(|(k, _, _)| *k);
        let last_active_ns = active.iter().map(|(_, _, last)| *last).collect();
        let mut tasks = self.spare.take();
        let kept = window_s.saturating_mul(1_000_000_000) == self.kept_ns;
        write_over(&mut tasks, active.into_iter(), |(_, tr, _), t| {
            let sum = if kept {
                tr.sum
            } else {
                // Another window than the one kept: summed afresh.
                tr.sum_within(|end| self.within(end, window_s)).1
            };
            t.set_identity(&tr.seen);
            t.counts.set(&sum.amounts().counts().finished());
        });
        let mut flows: Vec<NodeFlow> = Vec::new();
        for f in in_window.iter().flat_map(|s| &s.flows) {
            match flows.iter_mut().find(|g| g.src == f.src && g.dst == f.dst) {
                Some(g) => {
                    g.migrated += f.migrated;
                    g.not_migrated += f.not_migrated;
                    g.pages += f.pages;
                }
                None => flows.push(f.clone()),
            }
        }
        flows.sort_by_key(|f| (f.src.map_or(u64::MAX, u64::from), f.dst));
        WindowData {
            window_s,
            span_s,
            now_ns: self.now_ns(),
            tasks,
            last_active_ns,
            flows,
            self_tgid: self.self_tgid,
        }
    }

    /// Hands back a window's records the caller is done with (see `spare`): kept unless much
    /// larger than the window needed (so that a burst of tasks is not held for good), its
    /// records too (the next window writes over them, keeping their counts' allocations).
    pub fn give_back(&self, tasks: Vec<TaskRecord>) {
        let fits = tasks.capacity() <= 2 * tasks.len().max(1024);
        let mut spare = self.spare.borrow_mut();
        if fits && tasks.capacity() > spare.capacity() {
            *spare = tasks;
        }
    }

    /// The refreshes of the last [`SPARK_S`] seconds, oldest first.
    pub fn spark_samples(&self) -> impl Iterator<Item = &Sample> {
        self.samples
            .iter()
            .filter(|s| self.within(s.end_ns, SPARK_S))
    }

    /// Per refresh of the last minute (oldest first), the hint faults/s, pages migrated/s and
    /// scan share of the tasks `pick` selects (a task, or a process's threads), summed: 0 where
    /// none of them did anything.
    /// `pick`: from a task's pid and tgid.
    pub fn task_series(&self, pick: impl Fn(u32, u32) -> bool, sampled: bool) -> TaskSeries {
        let times: Vec<(u64, f64)> = self.spark_samples().map(|s| (s.end_ns, s.secs)).collect();
        let index: HashMap<u64, usize> = times
            .iter()
            .enumerate()
            .map(|(i, (t, _))| (*t, i))
            .collect();
        let mut sums = vec![Amounts::default(); times.len()];
        for tr in self
            .tasks
            .values()
            .filter(|tr| pick(tr.seen.pid, tr.seen.tgid))
        {
            for e in tr.entries.iter() {
                let Some(&i) = index.get(&e.end_ns) else {
                    continue;
                };
                sums[i].add(&amounts(&e));
            }
        }
        let mut out = TaskSeries::default();
        for (c, (_, secs)) in sums.into_iter().zip(&times) {
            let c = c.counts().finished();
            let rate = |n: u64| if *secs > 0.0 { n as f64 / secs } else { 0.0 };
            out.hint.push(rate(c.hint_faults.faults));
            out.migr.push(rate(
                c.migrations.pages_ok.max(c.hint_faults.migrated_pages),
            ));
            let share = if sampled {
                c.scan.sampled_share
            } else {
                c.scan.share
            };
            out.scan.push(share.unwrap_or(0.0));
        }
        out
    }
}

/// The scan share is the sampled estimate (task_numa_work not hooked).
pub fn scan_sampled(m: &Measured) -> bool {
    !m.is(Feed::Scan) && m.is(Feed::Samples)
}

fn scan_series(values: Vec<f64>, m: &Measured) -> Series {
    Series {
        label: "scan%",
        values,
        missing: m.why(Feed::ScanShare).map(str::to_owned),
        share: true,
        sampled: scan_sampled(m),
    }
}

impl Recent {
    /// The header's sparklines over the last minute: hint faults/s and pages migrated/s
    /// system-wide (/proc/vmstat), and the traced tasks' scan share.
    pub fn system_series(&self, m: &Measured) -> Vec<Series> {
        let samples: Vec<&Sample> = self.spark_samples().collect();
        let vmstat = |label, key: &str, f: fn(&Sample) -> Option<f64>| Series {
            label,
            values: samples.iter().map(|s| f(s).unwrap_or(0.0)).collect(),
            missing: samples
                .iter()
                .any(|s| f(s).is_none())
                .then(|| format!("/proc/vmstat has no {key}")),
            ..Series::default()
        };
        vec![
            vmstat("hint/s", "numa_hint_faults", |s| s.hint_per_s),
            vmstat("migr/s", "numa_pages_migrated", |s| s.migr_per_s),
            scan_series(samples.iter().map(|s| s.scan_share).collect(), m),
        ]
    }
}

/// A task's (or a process's) series for the detail's sparklines.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskSeries {
    pub hint: Vec<f64>,
    pub migr: Vec<f64>,
    pub scan: Vec<f64>,
}

impl TaskSeries {
    /// As sparklines: what this kernel does not measure says so instead of a flat line.
    pub fn series(&self, m: &Measured) -> Vec<Series> {
        let s = |label, values: &Vec<f64>, f: Feed| Series {
            label,
            values: values.clone(),
            missing: m.why(f).map(str::to_owned),
            ..Series::default()
        };
        vec![
            s("hint/s", &self.hint, Feed::HintFaults),
            s("migr/s", &self.migr, Feed::PagesMigrated),
            scan_series(self.scan.clone(), m),
        ]
    }
}

#[cfg(test)]
#[path = "history_reference.rs"]
pub(crate) mod reference;

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A delta of `span_s` ending at `end_s`, in which each `(pid, skips, hint faults)` task
    /// counted that much (0, 0: present but idle, with some run time).
    pub fn delta(end_s: u64, span_s: u64, tasks: &[(u32, u64, u64)]) -> Snapshot {
        Snapshot {
            mono_ns: end_s * 1_000_000_000,
            span_ns: span_s * 1_000_000_000,
            self_tgid: 1,
            tasks: tasks
                .iter()
                .map(|&(pid, skips, hints)| {
                    let mut counts = Counts {
                        skipped_vmas_total: skips,
                        ..Counts::default()
                    };
                    counts.hint_faults.faults = hints;
                    counts.scan.task_runtime_ns = 100_000_000;
                    counts.scan.runtime_in_scan_ns = if skips + hints > 0 { 1_000_000 } else { 0 };
                    TaskRecord {
                        pid,
                        tgid: 100,
                        comm: format!("t{pid}").into(),
                        exited: false,
                        cgroup_id: 0,
                        cgroup: None,
                        preferred_node: None,
                        last_node: None,
                        first_ns: 1,
                        counts: crate::model::PackedCounts::pack(&counts.finished()),
                    }
                })
                .collect(),
            vmstat_hi: [("numa_hint_faults".to_owned(), hints_of(tasks))].into(),
            ..Snapshot::default()
        }
    }

    fn hints_of(tasks: &[(u32, u64, u64)]) -> u64 {
        tasks.iter().map(|t| t.2).sum()
    }

    fn push(r: &mut Recent, d: &Snapshot) {
        let s = Sample::of(d, &Filter::default(), &Measured::default());
        r.push(d, &Filter::default(), s);
    }

    fn pids(w: &WindowData) -> Vec<u32> {
        w.tasks.iter().map(|t| t.pid).collect()
    }

    /// `top -b`'s history keeps a task's refreshes over the window, not the minute the
    /// terminal view's sparklines need; its windows are the same, and the trend's series too.
    #[test]
    fn a_batch_history_keeps_each_task_over_the_window_alone() {
        let (mut full, mut batch) = (Recent::new(5), Recent::batch(5));
        for s in 1..=30 {
            let d = delta(s, 1, &[(7, 1, 10), (8, 0, 0)]);
            push(&mut full, &d);
            push(&mut batch, &d);
        }
        let entries = |r: &Recent| -> usize {
            r.tasks
                .values()
                .map(|t| t.entries.from(t.entries.start()).count())
                .sum()
        };
        assert_eq!(entries(&batch), 5, "refreshes ending at 26..=30 s");
        assert_eq!(entries(&full), 30);
        let (a, b) = (full.window(5), batch.window(5));
        assert_eq!(pids(&a), pids(&b));
        assert_eq!(a.last_active_ns, b.last_active_ns);
        assert_eq!(a.tasks[0].counts(), b.tasks[0].counts());
        assert_eq!(full.samples.len(), batch.samples.len());
        // Idle for longer than the window: still known (as in the terminal view), with none of
        // its refreshes left, and listed in neither window.
        for s in 31..=36 {
            let d = delta(s, 1, &[]);
            push(&mut full, &d);
            push(&mut batch, &d);
        }
        assert_eq!((full.tasks.len(), batch.tasks.len()), (1, 1));
        assert_eq!(entries(&batch), 0);
        assert!(pids(&batch.window(5)).is_empty() && pids(&full.window(5)).is_empty());
    }

    #[test]
    fn a_burst_stays_in_the_window_and_then_leaves_it() {
        let mut r = Recent::new(10);
        // t=1: task 7 skips 5 VMAs; then 12 quiet seconds.
        push(&mut r, &delta(1, 1, &[(7, 5, 0), (8, 0, 0)]));
        for s in 2..=13 {
            push(&mut r, &delta(s, 1, &[(7, 0, 0), (8, 0, 0)]));
            let w = r.window(10);
            // Active at the end of second 1: within 10 s until second 10.
            assert_eq!(pids(&w), if s <= 10 { vec![7] } else { vec![] }, "{s}");
            if let Some((t, last)) = w.with_last().next() {
                assert_eq!(t.counts().skipped_vmas_total, 5);
                assert_eq!(w.ago_s(last), (s - 1) as f64);
                // Its scan share over the window divides by all its run time in it.
                let share = t.counts().scan.share.unwrap();
                let expect = 1e6 / (1e8 * s.min(10) as f64);
                assert!((share - expect).abs() < 1e-12, "{s}: {share} vs {expect}");
            }
            assert_eq!(w.span_s, s.min(10) as f64);
        }
        // A longer window still has it; the last activity is remembered after it left.
        assert_eq!(pids(&r.window(30)), [7]);
        let last = r.last_activity().unwrap();
        assert_eq!((last.pid, last.what), (7, "skipped VMAs"));
        assert_eq!(r.running_s(), 13.0);
        // Beyond the horizon (a minute here) the task is forgotten, the last activity is not.
        for s in 14..=70 {
            push(&mut r, &delta(s, 1, &[(7, 0, 0)]));
        }
        assert!(r.tasks.is_empty());
        assert!(r.samples.len() <= 60);
        assert_eq!(r.last_activity().unwrap().pid, 7);
    }

    #[test]
    fn window_counts_sum_the_refreshes_in_it() {
        let mut r = Recent::new(10);
        push(&mut r, &delta(1, 1, &[(7, 0, 100)]));
        push(&mut r, &delta(2, 1, &[(7, 0, 0), (9, 3, 0)]));
        push(&mut r, &delta(3, 1, &[(7, 0, 50)]));
        let mut w = r.window(10);
        assert_eq!(pids(&w), [7, 9]);
        assert_eq!(w.tasks[0].counts().hint_faults.faults, 150);
        assert_eq!(w.ago_s(w.last_active_ns[0]), 0.0);
        assert_eq!(w.ago_s(w.last_active_ns[1]), 1.0);
        // A 1-second window is the latest refresh only.
        assert_eq!(pids(&r.window(1)), [7]);
        assert_eq!(r.window(1).tasks[0].counts().hint_faults.faults, 50);
        // The process and cgroup views aggregate the window like a delta.
        let p = w.take_snapshot().processes(&Filter::default());
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].threads, p[0].counts.hint_faults.faults), (2, 150));
        // Series for the detail: hint faults/s per refresh, 0 where it did nothing.
        let s = r.task_series(|pid, _| pid == 7, false);
        assert_eq!(s.hint, [100.0, 0.0, 50.0]);
        let s = r.task_series(|_, tgid| tgid == 100, false);
        assert_eq!(s.hint, [100.0, 0.0, 50.0]);
        assert!(s.scan[1] > 0.0, "task 9's scan in refresh 2: {:?}", s.scan);
        // The system series.
        let hints: Vec<_> = r.spark_samples().map(|s| s.hint_per_s).collect();
        assert_eq!(hints, [Some(100.0), Some(0.0), Some(50.0)]);
    }

    #[test]
    fn the_filter_and_numatrace_itself_are_left_out() {
        let mut r = Recent::new(10);
        let mut d = delta(1, 1, &[(7, 1, 0), (8, 1, 0)]);
        d.tasks[1].tgid = 1; // numatrace's own
        let f = Filter {
            comm: Some("t7".into()),
            cgroup: None,
        };
        r.push(&d, &f, Sample::default());
        assert_eq!(pids(&r.window(10)), [7]);
        let f = Filter {
            comm: Some("t9".into()),
            cgroup: None,
        };
        let mut r = Recent::new(10);
        r.push(&d, &f, Sample::default());
        assert!(r.window(10).tasks.is_empty());
        assert!(r.last_activity().is_none());
    }

    #[test]
    fn windows_cycle_and_parse() {
        assert_eq!(next_window(5), 10);
        assert_eq!(next_window(10), 30);
        assert_eq!(next_window(60), 5);
        assert_eq!(next_window(20), 30);
        assert_eq!(next_window(600), 5);
        use crate::cli::parse_window;
        assert_eq!(parse_window("10s"), Ok(10));
        assert_eq!(parse_window("2m"), Ok(120));
        assert_eq!(parse_window("30"), Ok(30));
        assert!(parse_window("11m").is_err());
        assert!(parse_window("0.2").is_err());
        assert!(parse_window("0").is_err());
        assert_eq!(fmt_window(10), "10s");
        assert_eq!(fmt_window(120), "2m");
        assert_eq!(fmt_window(90), "1m30s");
        // The horizon covers a minute, or a longer window.
        assert_eq!(Recent::new(10).horizon_ns, 60_000_000_000);
        assert_eq!(Recent::new(300).horizon_ns, 300_000_000_000);
    }
}
