//! What one refresh of `top` shows, computed from two snapshots: rows with rates per task,
//! process, cgroup and node, and the header. Pure data (the TUI, the batch text and the JSON
//! lines all render it), so it is tested without a kernel.

use std::{
    collections::{BTreeMap, HashMap},
    hash::BuildHasherDefault,
};

use compact_str::{CompactString, format_compact};
use serde::Serialize;

use super::{
    graph::{Series, fmt_rate},
    history::{LastActivity, Recent, WindowData, fmt_window},
};
use crate::{
    bpf::loader::HookReport,
    engine::{Snapshot, tasks::KeyHasher},
    model::{
        CgroupRecord, Counts, Filter, Node, ProcessRecord, TaskRecord, log2_buckets, quantile,
    },
    report::measured::{Feed, Measured},
    sources::maps::NodeFlow,
    text_escape::{Escaped, escape},
};

/// What this kernel lets numatrace supply; a column without it shows `-`, never 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Caps {
    pub scan: bool,
    pub scan_sampled: bool,
    pub pte: bool,
    pub hint: bool,
    /// Pages migrated (MIGR/s): from mm_migrate_pages or from the hint faults.
    pub migr: bool,
    /// Pages that failed to migrate (FAIL): mm_migrate_pages only.
    pub fail: bool,
    pub lat: bool,
    pub cow: bool,
    pub stalls: bool,
    pub skip: bool,
    pub moves: bool,
}

impl From<&Measured> for Caps {
    fn from(m: &Measured) -> Self {
        Self {
            scan: m.is(Feed::ScanShare),
            scan_sampled: !m.is(Feed::Scan) && m.is(Feed::Samples),
            pte: m.is(Feed::Pte),
            hint: m.is(Feed::HintFaults),
            migr: m.is(Feed::PagesMigrated),
            fail: m.is(Feed::MigratePages),
            lat: m.is(Feed::MigrateMisplaced),
            cow: m.is(Feed::Cow),
            stalls: m.is(Feed::Stalls),
            skip: m.is(Feed::SkipVma),
            moves: m.is(Feed::Moves),
        }
    }
}

/// The columns of the task and process tables, in display order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Column {
    Pid,
    Comm,
    ScanPct,
    PteRate,
    HintRate,
    LocalPct,
    MigrRate,
    SkipRate,
    Node,
    ThpPct,
    MigrFail,
    Latency,
    CowRate,
    Stalls,
    Reason,
    Moves,
    Cgroup,
}

pub const COLUMNS: [Column; 17] = {
    let mut all = [Column::Pid; 17];
    let mut i = 0;
    while i < COLUMN_DEFS.len() {
        all[i] = COLUMN_DEFS[i].column;
        i += 1;
    }
    all
};

/// A column as data: its title, width in cells (the last columns only show on wide
/// terminals), whether it sorts as a number (largest first) or as text, the feed it needs (`-`
/// where that was not measured, never 0) and its cell.
struct ColumnDef {
    column: Column,
    title: &'static str,
    width: u16,
    numeric: bool,
    feed: Option<Feed>,
    cell: Value,
}

/// A cell: text, or a number (its sort key; below 0: none, shown `-`) whose text is made only
/// for the rows shown ([`Row::cell`]): at 100 000 tasks, formatting every cell of every row
/// each refresh took longer than the refresh.
#[derive(Clone, Copy)]
enum Value {
    Text(fn(&Cells) -> CompactString),
    Number {
        of: fn(&Cells) -> f64,
        /// The text of a value (never below 0); the flag: the scan share is sampled.
        show: fn(f64, bool) -> String,
    },
}

/// "-" for a value below 0 (none, or not measured), else `show`'s text.
fn shown(v: f64, sampled: bool, show: fn(f64, bool) -> String) -> String {
    if v < 0.0 {
        "-".into()
    } else {
        show(v, sampled)
    }
}

fn show_int(v: f64, _: bool) -> String {
    (v as u64).to_string()
}

fn show_rate(v: f64, _: bool) -> String {
    fmt_rate(v)
}

fn show_pct(v: f64, _: bool) -> String {
    format!("{v:.0}")
}

/// What a cell is computed from: one row's counts over `secs` and its text columns.
struct Cells<'a> {
    c: &'a Counts,
    secs: f64,
    /// The scan share is the sampled estimate (task_numa_work not hooked).
    sampled: bool,
    pid: u64,
    comm: &'a str,
    node: &'a str,
    cgroup: &'a str,
}

const fn rate_cell(of: fn(&Cells) -> f64) -> Value {
    Value::Number {
        of,
        show: show_rate,
    }
}

fn pct_cell(n: u64, d: u64) -> f64 {
    pct(n, d).unwrap_or(-1.0)
}

const fn int_cell(of: fn(&Cells) -> f64) -> Value {
    Value::Number { of, show: show_int }
}

/// The columns, in display order.
const COLUMN_DEFS: [ColumnDef; 17] = [
    ColumnDef {
        column: Column::Pid,
        title: "PID",
        width: 7,
        numeric: true,
        feed: None,
        cell: int_cell(|x| x.pid as f64),
    },
    ColumnDef {
        column: Column::Comm,
        title: "COMM",
        width: 15,
        numeric: false,
        feed: None,
        cell: Value::Text(|x| x.comm.into()),
    },
    ColumnDef {
        column: Column::ScanPct,
        title: "SCAN%",
        width: 7,
        numeric: true,
        feed: Some(Feed::ScanShare),
        cell: Value::Number {
            of: |x| {
                let share = if x.sampled {
                    x.c.scan.sampled_share
                } else {
                    x.c.scan.share
                };
                // No run time (or no sample) seen in the interval: unknown, not 0.
                share.unwrap_or(-1.0)
            },
            show: |s, sampled| format!("{}{:.2}", if sampled { "~" } else { "" }, s * 100.0),
        },
    },
    ColumnDef {
        column: Column::PteRate,
        title: "PTE/s",
        width: 7,
        numeric: true,
        feed: Some(Feed::Pte),
        cell: rate_cell(|x| rate(x.c.scan.pte_updates, x.secs)),
    },
    ColumnDef {
        column: Column::HintRate,
        title: "HINT/s",
        width: 7,
        numeric: true,
        feed: Some(Feed::HintFaults),
        cell: rate_cell(|x| rate(x.c.hint_faults.faults, x.secs)),
    },
    ColumnDef {
        column: Column::LocalPct,
        title: "LOCAL%",
        width: 7,
        numeric: true,
        feed: Some(Feed::HintFaults),
        cell: Value::Number {
            of: |x| pct_cell(x.c.hint_faults.local, x.c.hint_faults.faults),
            show: show_pct,
        },
    },
    ColumnDef {
        column: Column::MigrRate,
        title: "MIGR/s",
        width: 7,
        numeric: true,
        feed: Some(Feed::PagesMigrated),
        // Pages, from mm_migrate_pages or from the hint faults' TNF_MIGRATED (whichever this
        // kernel supplies; both count pages).
        cell: rate_cell(|x| {
            rate(
                x.c.migrations.pages_ok.max(x.c.hint_faults.migrated_pages),
                x.secs,
            )
        }),
    },
    ColumnDef {
        column: Column::SkipRate,
        title: "SKIP/s",
        width: 7,
        numeric: true,
        feed: Some(Feed::SkipVma),
        cell: rate_cell(|x| rate(x.c.skipped_vmas_total, x.secs)),
    },
    ColumnDef {
        column: Column::Node,
        title: "NODE",
        width: 5,
        numeric: false,
        feed: None,
        cell: Value::Text(|x| x.node.into()),
    },
    ColumnDef {
        column: Column::ThpPct,
        title: "THP%",
        width: 7,
        numeric: true,
        feed: Some(Feed::HintFaults),
        cell: Value::Number {
            of: |x| pct_cell(x.c.hint_faults.faults_thp, x.c.hint_faults.faults),
            show: show_pct,
        },
    },
    ColumnDef {
        column: Column::MigrFail,
        title: "FAIL",
        width: 7,
        numeric: true,
        feed: Some(Feed::MigratePages),
        cell: int_cell(|x| x.c.migrations.pages_failed as f64),
    },
    ColumnDef {
        column: Column::Latency,
        title: "LAT",
        width: 7,
        numeric: true,
        feed: Some(Feed::MigrateMisplaced),
        cell: Value::Number {
            of: |x| x.c.migrations.latency_ns_mean.unwrap_or(-1.0),
            show: |ns, _| fmt_ns(ns),
        },
    },
    ColumnDef {
        column: Column::CowRate,
        title: "COW/s",
        width: 7,
        numeric: true,
        feed: Some(Feed::Cow),
        cell: rate_cell(|x| rate(x.c.hint_faults.cow_shared, x.secs)),
    },
    ColumnDef {
        column: Column::Stalls,
        title: "STALLS",
        width: 7,
        numeric: true,
        feed: Some(Feed::Stalls),
        cell: int_cell(|x| x.c.migrations.stalls as f64),
    },
    ColumnDef {
        column: Column::Reason,
        title: "SKIP WHY",
        width: 12,
        numeric: false,
        feed: Some(Feed::SkipVma),
        cell: Value::Text(|x| x.c.skipped_vmas.top().unwrap_or("-").into()),
    },
    ColumnDef {
        column: Column::Moves,
        title: "MOVES",
        width: 7,
        numeric: true,
        feed: Some(Feed::Moves),
        cell: int_cell(|x| x.c.placement.moves as f64),
    },
    ColumnDef {
        column: Column::Cgroup,
        title: "CGROUP",
        width: 24,
        numeric: false,
        feed: None,
        cell: Value::Text(|x| x.cgroup.into()),
    },
];

impl Column {
    fn def(self) -> &'static ColumnDef {
        COLUMN_DEFS
            .iter()
            .find(|d| d.column == self)
            .expect("every column has a definition")
    }

    pub fn title(self) -> &'static str {
        self.def().title
    }

    /// Width in cells (the last columns only show on wide terminals).
    pub fn width(self) -> u16 {
        self.def().width
    }

    /// Text columns sort ascending first; numbers, largest first.
    pub fn numeric(self) -> bool {
        self.def().numeric
    }
}

/// One table row: a key to find it again, its cells, and numbers to sort by.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    /// pid (tasks), tgid (processes), cgroup id (cgroups) or node.
    pub key: u64,
    /// As shown, except where `layout` makes a number's text from `sort` ([`Row::cell`]):
    /// inline up to 24 bytes, so that a task's row is not a handful of allocations.
    pub cells: Vec<CompactString>,
    pub sort: Vec<f64>,
    /// The sort keys over the activity window (empty: not windowed).
    pub window_sort: Vec<f64>,
    /// Seconds since its last activity (0: in this interval; `None`: not windowed).
    pub idle_s: Option<f64>,
    pub(super) layout: Layout,
}

/// What a row's cells are.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) enum Layout {
    /// All in `cells`.
    #[default]
    Ready,
    /// Cell `i` is column `COLUMN_DEFS[pick[i]]`: a number's text is made from its sort key.
    Columns {
        pick: &'static [usize],
        sampled: bool,
    },
}

impl Row {
    /// Cell `i` as shown (empty past the last).
    pub fn cell(&self, i: usize) -> String {
        self.cell_of(i, &self.sort)
    }

    /// Cell `i` over the activity window (`-`: not windowed).
    pub fn window_cell(&self, i: usize) -> String {
        if self.window_sort.is_empty() {
            return "-".into();
        }
        self.cell_of(i, &self.window_sort)
    }

    fn cell_of(&self, i: usize, sort: &[f64]) -> String {
        if let Layout::Columns { pick, sampled } = self.layout
            && let Some(Value::Number { show, .. }) = pick.get(i).map(|&c| COLUMN_DEFS[c].cell)
            && let Some(&v) = sort.get(i)
        {
            return shown(v, sampled, show);
        }
        self.cells
            .get(i)
            .map(CompactString::to_string)
            .unwrap_or_default()
    }

    /// Its cells, as many as it has.
    pub fn len(&self) -> usize {
        self.cells.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }
}

/// Every column, in order: the task and process tables.
const ALL_COLUMNS: [usize; 17] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
/// The cgroup table's: CGROUP, TASKS, SCAN%, PTE/s, HINT/s, LOCAL%, MIGR/s, SKIP/s.
const CGROUP_PICK: [usize; 8] = [1, 0, 2, 3, 4, 5, 6, 7];

fn rate(n: u64, secs: f64) -> f64 {
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

fn pct(n: u64, d: u64) -> Option<f64> {
    (d > 0).then(|| 100.0 * n as f64 / d as f64)
}

fn fmt_ns(v: f64) -> String {
    match v {
        v if v < 1e3 => format!("{v:.0}ns"),
        v if v < 1e6 => format!("{:.0}us", v / 1e3),
        v if v < 1e9 => format!("{:.1}ms", v / 1e6),
        v => format!("{:.1}s", v / 1e9),
    }
}

/// The row of one set of counts (a task, a process or a cgroup) with columns `pick`: the text
/// cells, and every column's sort key (a number's text is made when shown).
#[allow(clippy::too_many_arguments)]
fn counts_row(
    key: u64,
    pick: &'static [usize],
    c: &Counts,
    m: &Measured,
    secs: f64,
    pid: u64,
    comm: &str,
    node: &str,
    cgroup: &str,
) -> Row {
    let sampled = !m.is(Feed::Scan) && m.is(Feed::Samples);
    let x = Cells {
        c,
        secs,
        sampled,
        pid,
        comm,
        node,
        cgroup,
    };
    let (cells, sort) = pick
        .iter()
        .map(|&i| {
            let d = &COLUMN_DEFS[i];
            let text = match d.cell {
                Value::Text(_) if !measured(d, m) => CompactString::const_new("-"),
                Value::Text(text) => text(&x),
                Value::Number { .. } => CompactString::default(),
            };
            (text, sort_key(d, &x, m))
        })
        .unzip();
    Row {
        key,
        cells,
        sort,
        layout: Layout::Columns { pick, sampled },
        ..Row::default()
    }
}

fn measured(d: &ColumnDef, m: &Measured) -> bool {
    d.feed.is_none_or(|f| m.is(f))
}

/// Column `d`'s sort key: -1 where not measured, else a number's value (-1: none), 0 for text.
fn sort_key(d: &ColumnDef, x: &Cells, m: &Measured) -> f64 {
    match d.cell {
        _ if !measured(d, m) => -1.0,
        Value::Number { of, .. } => of(x),
        Value::Text(_) => 0.0,
    }
}

/// The sort keys of columns `pick` of counts `c` over `secs` (no text made).
fn sort_keys(pick: &[usize], c: &Counts, m: &Measured, secs: f64) -> Vec<f64> {
    pick.iter()
        .map(|&i| column_value(&COLUMN_DEFS[i], c, m, secs, 0))
        .collect()
}

/// Column `d`'s sort key of counts `c` over `secs` ([`sort_key`]; `pid`: the PID column's).
fn column_value(d: &ColumnDef, c: &Counts, m: &Measured, secs: f64, pid: u64) -> f64 {
    let x = Cells {
        c,
        secs,
        sampled: !m.is(Feed::Scan) && m.is(Feed::Samples),
        pid,
        comm: "",
        node: "",
        cgroup: "",
    };
    sort_key(d, &x, m)
}

/// The tasks of the interval's table: those that did something in it.
fn interval_tasks<'a>(
    delta: &'a Snapshot,
    filter: &'a Filter,
) -> impl Iterator<Item = &'a TaskRecord> {
    delta
        .traced(filter)
        .filter(|t| !t.exited && !t.counts.is_empty())
}

/// The last component of a cgroup path, which is what tells containers and services apart
/// (escaped for the screen).
pub fn short_cgroup(path: Option<&str>) -> CompactString {
    match path {
        None => "?".into(),
        Some("/") => "/".into(),
        Some(p) => CompactString::from(&*escape(p.rsplit('/').next().unwrap_or(p))),
    }
}

fn node_cell(t: &TaskRecord) -> CompactString {
    let n = |v: Option<Node>| v.map_or(CompactString::const_new("-"), |n| format_compact!("{n}"));
    if t.preferred_node.is_none() && t.last_node.is_none() {
        return "-".into();
    }
    format_compact!("{}>{}", n(t.preferred_node), n(t.last_node))
}

fn task_row(t: &TaskRecord, m: &Measured, secs: f64) -> Row {
    counts_row(
        u64::from(t.pid),
        &ALL_COLUMNS,
        &t.counts(),
        m,
        secs,
        u64::from(t.pid),
        &escape(&t.comm),
        &node_cell(t),
        &short_cgroup(t.cgroup.as_deref()),
    )
}

fn process_row(p: &ProcessRecord, m: &Measured, secs: f64) -> Row {
    counts_row(
        u64::from(p.tgid),
        &ALL_COLUMNS,
        &p.counts,
        m,
        secs,
        u64::from(p.tgid),
        &format!("{} ({})", Escaped(&p.comm), p.threads),
        "-",
        "",
    )
}

fn cgroup_row(c: &CgroupRecord, m: &Measured, secs: f64) -> Row {
    counts_row(
        c.id,
        &CGROUP_PICK,
        &c.counts,
        m,
        secs,
        u64::from(c.tasks),
        &c.path
            .as_deref()
            .map_or_else(|| format!("id {}", c.id), |p| escape(p).into_owned()),
        "",
        "",
    )
}

/// Rows of one view over the activity window: a row for each record active in it (`window`),
/// with this interval's cells where it was active in the interval (`interval`) and those of
/// `quiet` (nothing counted) where not, and its key and sort keys over the window (`over`);
/// `idle` says how long ago it was last active.
fn merge_window<T>(
    interval: Vec<Row>,
    window: &[T],
    over: impl Fn(&T) -> (u64, Vec<f64>),
    quiet: impl Fn(&T) -> Row,
    idle: impl Fn(&T) -> f64,
) -> Vec<Row> {
    // By key, the last of a key winning (as a map built from the list would have it): an
    // index into the list, where a tree of 100 000 rows moved each about.
    let mut at: HashMap<u64, usize, BuildHasherDefault<KeyHasher>> =
        HashMap::with_capacity_and_hasher(interval.len(), Default::default());
    for (i, r) in interval.iter().enumerate() {
        at.insert(r.key, i);
    }
    let mut now: Vec<Option<Row>> = interval.into_iter().map(Some).collect();
    let mut out: Vec<Row> = window
        .iter()
        .map(|w| {
            let (key, sort) = over(w);
            let mut row = at
                .remove(&key)
                .and_then(|i| now[i].take())
                .unwrap_or_else(|| quiet(w));
            row.window_sort = sort;
            row.idle_s = Some(idle(w));
            row
        })
        .collect();
    // Active in the interval but not in the window's record (not expected): as they are, in
    // key order.
    let mut left: Vec<Row> = at.into_values().filter_map(|i| now[i].take()).collect();
    left.sort_unstable_by_key(|r| r.key);
    out.extend(left.into_iter().map(|mut r| {
        r.window_sort = r.sort.clone();
        r.idle_s = Some(0.0);
        r
    }));
    out
}

/// `r` with nothing counted.
fn quiet<T: Clone>(r: &T, counts: impl Fn(&mut T) -> &mut Counts) -> T {
    let mut r = r.clone();
    *counts(&mut r) = Counts::default();
    r
}

/// The system line of the header: rates from the kernel's own /proc/vmstat.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SystemRates {
    pub pte_updates_per_s: f64,
    pub hint_faults_per_s: f64,
    pub hint_faults_local_pct: Option<f64>,
    pub pages_migrated_per_s: f64,
    pub migrate_failed_per_s: f64,
    /// Memory tiering: pgpromote_success and Σ pgdemote_* per second (`None`: the kernel
    /// has no such counter).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promoted_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub demoted_per_s: Option<f64>,
    /// `kernel.numa_balancing` as read with the interval's last snapshot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
}

/// numatrace's own cost over the interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OwnCost {
    /// CPU time of numatrace's process per wall time, in % of one CPU.
    pub cpu_pct: Option<f64>,
    /// Run time of its kernel programs (BPF run-time statistics), in % of one CPU, and runs.
    pub bpf_pct: Option<f64>,
    pub bpf_runs: Option<u64>,
}

/// Which tables a view builds: the TUI shows every one; `top -b` prints the task table alone
/// (its text, and its JSON frames build their own tables from the delta), where a process and a
/// cgroup table each cost another unpack and add of every task's counts a frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tables {
    #[default]
    All,
    /// Tasks and nodes: `processes` and `cgroups` stay empty.
    Tasks,
    /// Nodes only, no task rows: `top -b --json` (its tables are the report's), and `top -b`'s
    /// text by a number column, whose few shown rows [`FrameView::windowed_first`] makes.
    None,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FrameView {
    /// The tables it holds (the others are empty, not quiet).
    pub tables: Tables,
    pub interval_s: f64,
    pub system: SystemRates,
    pub dropped: u64,
    pub hooks_missing: Vec<String>,
    pub caps: Caps,
    /// What `caps` is made of, for the detail pane's sentences.
    pub measured: Measured,
    pub own: OwnCost,
    pub tasks: Vec<Row>,
    /// Rows of the task table left out of `tasks` ([`FrameView::windowed_first`]): the table
    /// has `tasks.len()` + this.
    pub tasks_unlisted: usize,
    pub processes: Vec<Row>,
    pub cgroups: Vec<Row>,
    pub nodes: Vec<Row>,
    pub flows: Vec<NodeFlow>,
    /// Memory tiers with the pages promoted into and demoted out of each over the interval
    /// (empty: the kernel lists no tiers).
    pub tiers: Vec<TierRow>,
    /// The traced tasks' promotion decisions over the interval (`None`: not measured).
    pub decisions: Option<DecisionRates>,
    /// migrate_misplaced latency percentiles over the interval (log2 buckets: upper bounds).
    pub latency_p50_ns: Option<u64>,
    pub latency_p99_ns: Option<u64>,
    /// The activity window in seconds (0: not windowed, the rows are the interval's) and the
    /// seconds its refreshes cover so far.
    pub window_s: u64,
    pub window_span_s: f64,
    /// Node-to-node migrations over the window.
    pub window_flows: Vec<NodeFlow>,
    /// The header's sparklines over the last minute.
    pub trend: Vec<Series>,
    /// What an empty table says.
    pub quiet: Quiet,
}

/// When anything last moved, for a table with no row active in the window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quiet {
    /// Seconds ago, and what and by whom (`None`: nothing since top started).
    pub last: Option<(f64, LastActivity)>,
    /// Seconds since top's first refresh began.
    pub running_s: f64,
}

/// One memory tier over the interval: promotions arrive on its nodes (their pgpromote_success),
/// demotions leave them (their pgdemote_*, per node from 6.8).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TierRow {
    pub tier: u32,
    pub nodes: Vec<u32>,
    pub top: bool,
    pub promoted_per_s: f64,
    pub demoted_per_s: f64,
    /// Hot thresholds (ms) of the tier's nodes that numatrace has read, by node.
    pub hot_threshold_ms: Vec<(u32, u64)>,
}

/// The traced tasks' promotion decisions over the interval, in pages per second, and the mean
/// hint-fault latency of their slow-tier faults.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecisionRates {
    pub hot_per_s: f64,
    pub rate_limited_per_s: f64,
    pub not_hot_per_s: f64,
    pub free_room_per_s: f64,
    pub hint_latency_ms_mean: Option<f64>,
}

fn decision_rates(delta: &Snapshot, m: &Measured, secs: f64) -> Option<DecisionRates> {
    use numatrace_common::Counter as C;
    if !m.is(Feed::PromoteDecisions) {
        return None;
    }
    let c = |k| delta.counters.get(k);
    let timed = c(C::HintLatencyFaults);
    Some(DecisionRates {
        hot_per_s: rate(c(C::PromoteHot), secs),
        rate_limited_per_s: rate(c(C::PromoteRateLimited), secs),
        not_hot_per_s: rate(c(C::PromoteNotHot), secs),
        free_room_per_s: rate(c(C::PromoteFreeRoom), secs),
        hint_latency_ms_mean: (timed > 0).then(|| c(C::HintLatencyMs) as f64 / timed as f64),
    })
}

fn tier_rows(delta: &Snapshot, secs: f64) -> Vec<TierRow> {
    let end = &delta.tiering;
    let start = delta.tiering_start.as_ref().unwrap_or(end);
    // Per node: the counters' growth over the interval (none where the start lacks the node).
    let grew = crate::report::tiering::node_delta(&end.node_counters, &start.node_counters);
    let grew = |node: u32, pick: &dyn Fn(&str) -> bool| -> u64 {
        grew.get(&node)
            .map(|c| c.iter().filter(|(k, _)| pick(k)).map(|(_, v)| *v).sum())
            .unwrap_or(0)
    };
    end.tiers
        .iter()
        .map(|t| {
            let sum = |pick: &dyn Fn(&str) -> bool| t.nodes.iter().map(|n| grew(*n, pick)).sum();
            TierRow {
                tier: t.tier,
                nodes: t.nodes.clone(),
                top: t.top,
                promoted_per_s: rate(sum(&|k| k == "pgpromote_success"), secs),
                demoted_per_s: rate(sum(&|k| k.starts_with("pgdemote_")), secs),
                hot_threshold_ms: t
                    .nodes
                    .iter()
                    .filter_map(|n| Some((*n, *end.node_hot_threshold_ms.get(n)?)))
                    .collect(),
            }
        })
        .collect()
}

/// `tiers: tier4 nodes 0,1 (top) +12/s promoted, tier72 node 2 -3/s demoted`; `None` with
/// fewer than two tiers (nothing to promote between).
pub fn tiers_line(view: &FrameView) -> Option<String> {
    if view.tiers.len() < 2 {
        return None;
    }
    let cells: Vec<String> = view
        .tiers
        .iter()
        .map(|t| {
            format!(
                "tier{} node{} {}{}: {} promoted in/s, {} demoted out/s{}",
                t.tier,
                if t.nodes.len() == 1 { "" } else { "s" },
                t.nodes
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                if t.top { " (top)" } else { "" },
                fmt_rate(t.promoted_per_s),
                fmt_rate(t.demoted_per_s),
                t.hot_threshold_ms
                    .iter()
                    .map(|(n, ms)| format!(", hot threshold {ms} ms (node {n})"))
                    .collect::<String>()
            )
        })
        .collect();
    let decided = view.decisions.as_ref().map_or(String::new(), |d| {
        format!(
            "; decisions: {} hot/s, {} held back/s, {} not hot/s, {} free room/s{}",
            fmt_rate(d.hot_per_s),
            fmt_rate(d.rate_limited_per_s),
            fmt_rate(d.not_hot_per_s),
            fmt_rate(d.free_room_per_s),
            d.hint_latency_ms_mean
                .map_or(String::new(), |ms| format!(", latency {ms:.0} ms"))
        )
    });
    Some(format!("tiers: {}{decided}", cells.join("; ")))
}

pub const NODE_COLUMNS: [&str; 9] = [
    "NODE", "CPUS", "MEM", "HINT/s", "LOCAL%", "IN/s", "OUT/s", "PREFER", "RAN",
];
pub const CGROUP_COLUMNS: [&str; 8] = [
    "CGROUP", "TASKS", "SCAN%", "PTE/s", "HINT/s", "LOCAL%", "MIGR/s", "SKIP/s",
];

impl FrameView {
    /// `delta`: the later snapshot minus the earlier.
    pub fn build(delta: &Snapshot, hooks: &[HookReport], filter: &Filter, own: OwnCost) -> Self {
        Self::build_for(delta, hooks, filter, own, Tables::All)
    }

    /// [`FrameView::build`] with only `tables`.
    pub fn build_for(
        delta: &Snapshot,
        hooks: &[HookReport],
        filter: &Filter,
        own: OwnCost,
        tables: Tables,
    ) -> Self {
        let all = tables == Tables::All;
        let measured = Measured::from_hooks(hooks);
        let caps = Caps::from(&measured);
        let secs = delta.span_ns as f64 / 1e9;
        let v = |k: &str| delta.vmstat_hi.get(k).copied().unwrap_or(0);
        let system = SystemRates {
            pte_updates_per_s: rate(v("numa_pte_updates"), secs),
            hint_faults_per_s: rate(v("numa_hint_faults"), secs),
            hint_faults_local_pct: pct(v("numa_hint_faults_local"), v("numa_hint_faults")),
            pages_migrated_per_s: rate(v("numa_pages_migrated"), secs),
            migrate_failed_per_s: rate(v("pgmigrate_fail"), secs),
            promoted_per_s: delta
                .vmstat_hi
                .get("pgpromote_success")
                .map(|n| rate(*n, secs)),
            demoted_per_s: {
                let d: Vec<u64> = delta
                    .vmstat_hi
                    .iter()
                    .filter(|(k, _)| k.starts_with("pgdemote_"))
                    .map(|(_, v)| *v)
                    .collect();
                (!d.is_empty()).then(|| rate(d.iter().sum(), secs))
            },
            mode: delta.tiering.mode,
        };
        // In the snapshot's (key) order: the table sorts its rows as shown, so task_refs' sort
        // by skipped VMAs was a second sort of 100 000 tasks for nothing.
        let tasks = if tables == Tables::None {
            Vec::new()
        } else {
            interval_tasks(delta, filter)
                .map(|t| task_row(t, &measured, secs))
                .collect()
        };
        let processes = if all {
            delta
                .processes(filter)
                .iter()
                .map(|p| process_row(p, &measured, secs))
                .collect()
        } else {
            Vec::new()
        };
        let cgroups = if all {
            delta
                .cgroups(filter)
                .iter()
                .map(|c| cgroup_row(c, &measured, secs))
                .collect()
        } else {
            Vec::new()
        };
        let nodes = delta
            .node_rows(filter)
            .iter()
            .map(|n| {
                let hint = rate(n.hint_faults, secs);
                let inr = rate(n.pages_migrated_in, secs);
                let outr = rate(n.pages_migrated_out, secs);
                let local = pct(n.hint_faults_local, n.hint_faults);
                let h = |s: String| if caps.hint { s } else { "-".into() };
                // A page's source node is known only from migrate_misplaced_*.
                let src = |s: String| measured.cell(Feed::MigratedFrom, s);
                Row {
                    key: u64::from(n.node),
                    cells: vec![
                        n.node.to_string(),
                        escape(&n.cpus).into_owned(),
                        n.mem_total_bytes
                            .map_or("-".into(), |b| format!("{}M", b >> 20)),
                        h(fmt_rate(hint)),
                        h(local.map_or("-".into(), |p| format!("{p:.0}"))),
                        h(fmt_rate(inr)),
                        src(fmt_rate(outr)),
                        n.tasks_preferring.to_string(),
                        n.tasks_last_ran.to_string(),
                    ]
                    .into_iter()
                    .map(CompactString::from)
                    .collect(),
                    sort: vec![
                        f64::from(n.node),
                        0.0,
                        n.mem_total_bytes.unwrap_or(0) as f64,
                        hint,
                        local.unwrap_or(-1.0),
                        inr,
                        outr,
                        f64::from(n.tasks_preferring),
                        f64::from(n.tasks_last_ran),
                    ],
                    ..Row::default()
                }
            })
            .collect();
        let dropped = crate::report::stat::Dropped::from_snapshot(delta).total;
        let decisions = decision_rates(delta, &measured, secs);
        Self {
            tables,
            interval_s: secs,
            system,
            dropped,
            // A fallback left off because the exact hook works is not missing.
            hooks_missing: hooks
                .iter()
                .filter(|h| !h.attached && !h.reasons.iter().any(|r| r.starts_with("not needed")))
                .map(|h| escape(&h.name).into_owned())
                .collect(),
            caps,
            measured,
            own,
            tasks,
            tasks_unlisted: 0,
            processes,
            cgroups,
            nodes,
            flows: delta.node_flows(),
            tiers: tier_rows(delta, secs),
            decisions,
            latency_p50_ns: quantile(&log2_buckets(&delta.migrate_latency), 0.5),
            latency_p99_ns: quantile(&log2_buckets(&delta.migrate_latency), 0.99),
            window_s: 0,
            window_span_s: 0.0,
            window_flows: Vec::new(),
            trend: Vec::new(),
            quiet: Quiet::default(),
        }
    }

    /// The view over the activity window: every task, process and cgroup (those of its
    /// [`Tables`]) active within the last `window_s` (what `recent` remembers) is listed,
    /// with this interval's cells (zeros where it did nothing in it), its cells over the window
    /// and how long ago it was last active; plus the header's sparklines and when anything last
    /// moved.
    pub fn windowed(mut self, recent: &Recent, window_s: u64) -> Self {
        let mut w = recent.window(window_s);
        let m = self.measured.clone();
        let (secs, ws) = (self.interval_s, w.span_s);
        if self.tables != Tables::None {
            let tasks: Vec<(&TaskRecord, u64)> = w.with_last().filter(|(t, _)| !t.exited).collect();
            self.tasks = merge_window(
                std::mem::take(&mut self.tasks),
                &tasks,
                |(t, _)| {
                    (
                        u64::from(t.pid),
                        sort_keys(&ALL_COLUMNS, &t.counts(), &m, ws),
                    )
                },
                |(t, _)| task_row(&t.with_counts(&Counts::default()), &m, secs),
                |(_, at)| w.ago_s(*at),
            );
        }
        match self.tables {
            Tables::All => self.window_groups(&mut w, recent),
            Tables::Tasks | Tables::None => recent.give_back(std::mem::take(&mut w.tasks)),
        }
        self.window_tail(&w, recent, window_s)
    }

    /// [`FrameView::windowed`]'s task rows for a frame that prints only the first `n` by number
    /// column `col` (`top -b`): the rows [`first_rows`] of its table gives, in that order, and
    /// how many it leaves out (`tasks_unlisted`), without making the others. Each task is
    /// ranked on its column's value in the interval and over the window, as [`row_order`]
    /// ranks rows (a number column's text is empty), in [`merge_window`]'s order. `self` is
    /// built with [`Tables::None`] from `delta` and `filter`.
    #[allow(clippy::too_many_arguments)]
    pub fn windowed_first(
        mut self,
        delta: &Snapshot,
        filter: &Filter,
        recent: &Recent,
        window_s: u64,
        n: usize,
        col: usize,
    ) -> Self {
        debug_assert!(self.tables == Tables::None && COLUMNS.get(col).is_some_and(|c| c.numeric()));
        let mut w = recent.window(window_s);
        let m = self.measured.clone();
        let (secs, ws) = (self.interval_s, w.span_s);
        let d = &COLUMN_DEFS[col.min(COLUMN_DEFS.len() - 1)];
        let zero = Counts::default();
        // build's task rows, each as its column's value (a row's own `sort[col]`).
        let interval: Vec<(&TaskRecord, f64)> = interval_tasks(delta, filter)
            .map(|t| (t, column_value(d, &t.counts(), &m, secs, u64::from(t.pid))))
            .collect();
        // merge_window's rows as what orders them: the last interval row of a pid wins, a
        // window record finds it (a second record of the pid gets a quiet row), and the
        // interval rows no record found go last, by pid, ranked over the window as now.
        struct Rank {
            key: u64,
            now: f64,
            window: f64,
            interval: Option<usize>,
            record: Option<usize>,
        }
        let mut at: HashMap<u64, usize, BuildHasherDefault<KeyHasher>> =
            HashMap::with_capacity_and_hasher(interval.len(), Default::default());
        for (i, (t, _)) in interval.iter().enumerate() {
            at.insert(u64::from(t.pid), i);
        }
        let mut ranks: Vec<Rank> = w
            .tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.exited)
            .map(|(wi, t)| {
                let key = u64::from(t.pid);
                let i = at.remove(&key);
                Rank {
                    key,
                    now: i.map_or_else(|| column_value(d, &zero, &m, secs, key), |i| interval[i].1),
                    window: column_value(d, &t.counts(), &m, ws, 0),
                    interval: i,
                    record: Some(wi),
                }
            })
            .collect();
        let mut left: Vec<usize> = at.into_values().collect();
        left.sort_unstable_by_key(|&i| interval[i].0.pid);
        ranks.extend(left.into_iter().map(|i| Rank {
            key: u64::from(interval[i].0.pid),
            now: interval[i].1,
            window: interval[i].1,
            interval: Some(i),
            record: None,
        }));
        let desc = sort_desc(col);
        let first = first_by(&ranks, n, |a, b| {
            order_of(
                (a.now, a.window),
                (b.now, b.window),
                || std::cmp::Ordering::Equal,
                (a.key, b.key),
                desc,
            )
        });
        self.tasks = first
            .into_iter()
            .map(|r| {
                let mut row = match (r.interval, r.record) {
                    (Some(i), _) => task_row(interval[i].0, &m, secs),
                    (None, Some(wi)) => task_row(&w.tasks[wi].with_counts(&zero), &m, secs),
                    (None, None) => Row::default(),
                };
                match r.record {
                    Some(wi) => {
                        row.window_sort = sort_keys(&ALL_COLUMNS, &w.tasks[wi].counts(), &m, ws);
                        row.idle_s = Some(w.ago_s(w.last_active_ns[wi]));
                    }
                    None => {
                        row.window_sort = row.sort.clone();
                        row.idle_s = Some(0.0);
                    }
                }
                row
            })
            .collect();
        self.tasks_unlisted = ranks.len() - self.tasks.len();
        recent.give_back(std::mem::take(&mut w.tasks));
        self.window_tail(&w, recent, window_s)
    }

    /// The window's header parts: its span and flows, the sparklines and the last activity.
    fn window_tail(mut self, w: &WindowData, recent: &Recent, window_s: u64) -> Self {
        self.window_s = window_s;
        self.window_span_s = w.span_s;
        self.window_flows = w.flows.clone();
        self.trend = recent.system_series(&self.measured);
        self.quiet = Quiet {
            last: recent
                .last_activity()
                .map(|l| (w.ago_s(l.at_ns), l.clone())),
            running_s: recent.running_s(),
        };
        self
    }

    /// The process and cgroup rows over the window `w` (merged with this interval's, as the
    /// task rows are); its records go back to `recent`.
    fn window_groups(&mut self, w: &mut WindowData, recent: &Recent) {
        let m = &self.measured;
        let (secs, ws) = (self.interval_s, w.span_s);
        // Per process and cgroup, its most recently active task.
        let mut by_tgid: BTreeMap<u32, f64> = BTreeMap::new();
        let mut by_cgroup: BTreeMap<u64, f64> = BTreeMap::new();
        for (t, at) in w.with_last() {
            let ago = w.ago_s(at);
            let e = by_tgid.entry(t.tgid).or_insert(ago);
            *e = e.min(ago);
            let e = by_cgroup.entry(t.cgroup_id).or_insert(ago);
            *e = e.min(ago);
        }
        let snap = w.take_snapshot();
        // Every task of the window was active in it.
        let all = Filter::default();
        self.processes = merge_window(
            std::mem::take(&mut self.processes),
            &snap.processes_of(snap.traced(&all)),
            |p| (u64::from(p.tgid), sort_keys(&ALL_COLUMNS, &p.counts, m, ws)),
            |p| process_row(&quiet(p, |p| &mut p.counts), m, secs),
            |p| by_tgid.get(&p.tgid).copied().unwrap_or(0.0),
        );
        self.cgroups = merge_window(
            std::mem::take(&mut self.cgroups),
            &crate::engine::snapshot::cgroups_of(snap.traced(&all)),
            |c| (c.id, sort_keys(&CGROUP_PICK, &c.counts, m, ws)),
            |c| cgroup_row(&quiet(c, |c| &mut c.counts), m, secs),
            |c| by_cgroup.get(&c.id).copied().unwrap_or(0.0),
        );
        recent.give_back(snap.tasks);
    }

    /// What an empty table says: how long ago anything last moved and by whom, or that
    /// nothing has since top started; `kernel.numa_balancing=0` only when it is off.
    pub fn quiet_text(&self, balancing: Option<u32>) -> String {
        let off = match self.system.mode.or(balancing) {
            Some(0) => "; kernel.numa_balancing=0 (off)",
            _ => "",
        };
        if self.window_s == 0 {
            return format!("no NUMA balancing activity in this interval{off}");
        }
        match &self.quiet.last {
            Some((ago, l)) => format!(
                "no NUMA balancing activity for {ago:.0} s (last: {} by {} {}){off}",
                l.what,
                l.pid,
                Escaped(&l.comm)
            ),
            None => format!(
                "no NUMA balancing activity since top started {:.0} s ago{off}",
                self.quiet.running_s
            ),
        }
    }

    /// The header lines, as plain text (the TUI colours them).
    pub fn header(&self, kernel: &str, balancing: Option<u32>, nodes: usize) -> Vec<String> {
        let s = &self.system;
        let lat = match (self.latency_p50_ns, self.latency_p99_ns) {
            (Some(a), Some(b)) => {
                format!("; mig p50<{} p99<{}", fmt_ns(a as f64), fmt_ns(b as f64))
            }
            _ => String::new(),
        };
        let mode = s.mode.or(balancing);
        // Memory tiering: the mode says so, and promotions and demotions have their rates.
        let tiering = match (s.promoted_per_s, s.demoted_per_s) {
            (None, None) => String::new(),
            (p, d) => format!(
                ", {} promote/s, {} demote/s",
                p.map_or("-".into(), fmt_rate),
                d.map_or("-".into(), fmt_rate)
            ),
        };
        vec![
            format!(
                "numatrace top - kernel {}, balancing {}{}, {nodes} node{}, {:.1}s",
                Escaped(kernel),
                mode.map_or("?".into(), |b| b.to_string()),
                if mode.is_some_and(|m| m & 2 != 0) {
                    " (tiering)"
                } else {
                    ""
                },
                if nodes == 1 { "" } else { "s" },
                self.interval_s
            ),
            format!(
                "system: {} PTE/s, {} hint/s ({} local), {} migr/s, {} fail/s (any){tiering}",
                fmt_rate(s.pte_updates_per_s),
                fmt_rate(s.hint_faults_per_s),
                s.hint_faults_local_pct
                    .map_or("-".into(), |p| format!("{p:.0}%")),
                fmt_rate(s.pages_migrated_per_s),
                fmt_rate(s.migrate_failed_per_s),
            ),
            format!(
                "dropped {}; hooks missing {}{}; self {} CPU, BPF {}{lat}",
                self.dropped,
                self.hooks_missing.len(),
                if self.hooks_missing.is_empty() {
                    ""
                } else {
                    " (i)"
                },
                self.own.cpu_pct.map_or("-".into(), |c| format!("{c:.1}%")),
                self.own.bpf_pct.map_or("-".into(), |c| format!("{c:.2}%")),
            ),
        ]
    }
}

/// `1->0 4096 pages, ...`: the migrated pages between nodes (`?`: source unknown).
pub fn flows_text(flows: &[NodeFlow]) -> String {
    flows
        .iter()
        .map(|f| {
            format!(
                "{}->{} {} pages",
                f.src.map_or("?".into(), |s| s.to_string()),
                f.dst,
                f.pages
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The nodes view's line under its table: the interval's node-to-node migrations (pages, which
/// task_numa_fault counts).
pub fn flows_line(view: &FrameView) -> String {
    let m = &view.measured;
    let text = m.says(Feed::HintFaults, || {
        if view.flows.is_empty() {
            "none in this interval".into()
        } else {
            flows_text(&view.flows)
        }
    });
    format!("migrations by node: {text}")
}

/// The nodes view's shaded matrix of pages migrated between nodes over the activity window
/// (empty: not windowed, or task_numa_fault, which counts them, not hooked: the flows line
/// says why).
pub fn grid_lines(view: &FrameView) -> Vec<String> {
    if view.window_s == 0 || !view.measured.is(Feed::HintFaults) {
        return Vec::new();
    }
    let w = fmt_window(view.window_s);
    if view.window_flows.iter().all(|f| f.pages == 0) {
        return vec![format!(
            "node matrix: no pages migrated between nodes in the last {w}"
        )];
    }
    let nodes: Vec<u32> = view.nodes.iter().map(|r| r.key as u32).collect();
    let mut out = vec![format!(
        "pages migrated node to node in the last {w} (row: from, column: to; █: the most):"
    )];
    out.extend(super::graph::node_grid(&view.window_flows, &nodes));
    out
}

/// The task column "busiest" means on this kernel: scan time where it is measured, else hint
/// faults, else skipped VMAs.
pub fn busiest_column(caps: &Caps) -> usize {
    let col = if caps.scan {
        Column::ScanPct
    } else if caps.hint {
        Column::HintRate
    } else {
        Column::SkipRate
    };
    COLUMNS.iter().position(|c| *c == col).unwrap_or(0)
}

/// The columns that mean an amount of NUMA balancing: what the window column can show.
const AMOUNTS: [Column; 12] = [
    Column::ScanPct,
    Column::PteRate,
    Column::HintRate,
    Column::LocalPct,
    Column::MigrRate,
    Column::SkipRate,
    Column::ThpPct,
    Column::MigrFail,
    Column::Latency,
    Column::CowRate,
    Column::Stalls,
    Column::Moves,
];

/// The column the window column shows over the window: the sort column where it is an
/// amount, else the busiest.
pub fn window_metric(sort_col: usize, caps: &Caps) -> usize {
    match COLUMNS.get(sort_col) {
        Some(c) if AMOUNTS.contains(c) => sort_col,
        _ => busiest_column(caps),
    }
}

/// A column of the task and process tables as shown: one of [`COLUMNS`] (by index), the
/// time since the row was last active, or a column over the activity window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    Col(usize),
    Last,
    Window(usize),
}

impl Shown {
    pub fn title(self, window_s: u64) -> String {
        match self {
            Self::Col(i) => COLUMNS[i].title().to_owned(),
            Self::Last => "LAST".to_owned(),
            Self::Window(i) => format!("{}@{}", COLUMNS[i].title(), fmt_window(window_s)),
        }
    }

    pub fn width(self, window_s: u64) -> u16 {
        match self {
            Self::Col(i) => COLUMNS[i].width(),
            Self::Last => 5,
            Self::Window(_) => self.title(window_s).chars().count().max(7) as u16,
        }
    }

    pub fn cell(self, r: &Row) -> String {
        match self {
            Self::Col(i) => r.cell(i),
            Self::Last => r.idle_s.map_or("-".into(), fmt_ago),
            Self::Window(i) => r.window_cell(i),
        }
    }
}

/// `now` (active in the latest interval), `4s`, `12m`.
fn fmt_ago(s: f64) -> String {
    match s.round() as u64 {
        0 => "now".into(),
        s if s < 1000 => format!("{s}s"),
        s => format!("{}m", s / 60),
    }
}

/// The task and process tables' columns as shown: PID, COMM, then where windowed LAST and
/// the window column (the sort column's, or the busiest's, over the window), then the rest.
pub fn shown_columns(view: &FrameView, sort_col: usize) -> Vec<Shown> {
    let mut v: Vec<Shown> = (0..COLUMNS.len()).map(Shown::Col).collect();
    if view.window_s > 0 {
        let w = Shown::Window(window_metric(sort_col, &view.caps));
        v.splice(2..2, [Shown::Last, w]);
    }
    v
}

/// Sorts rows by column `col` (numbers largest first when `desc`); ties by the same column
/// over the activity window (a task busy a moment ago before one idle all along).
pub fn sort_rows<R: std::borrow::Borrow<Row>>(rows: &mut [R], col: usize, desc: bool) {
    rows.sort_by(|a, b| row_order(a.borrow(), b.borrow(), col, desc));
}

/// The first `n` of `rows` in [`sort_rows`]'s order, without sorting the rest.
pub fn first_rows(rows: &[Row], n: usize, col: usize, desc: bool) -> Vec<&Row> {
    first_by(rows, n, |a, b| row_order(a, b, col, desc))
}

/// The first `n` of `items` in `order`, without sorting the rest; equal items (one key twice)
/// keep their order, as in a stable sort.
fn first_by<T>(items: &[T], n: usize, order: impl Fn(&T, &T) -> std::cmp::Ordering) -> Vec<&T> {
    let order = |a: &(usize, &T), b: &(usize, &T)| order(a.1, b.1).then(a.0.cmp(&b.0));
    let mut v: Vec<(usize, &T)> = items.iter().enumerate().collect();
    if n < v.len() {
        if n == 0 {
            return Vec::new();
        }
        v.select_nth_unstable_by(n - 1, order);
        v.truncate(n);
    }
    v.sort_unstable_by(order);
    v.into_iter().map(|(_, r)| r).collect()
}

/// Numbers largest first, except PID; text in order.
pub fn sort_desc(col: usize) -> bool {
    COLUMNS
        .get(col)
        .is_some_and(|c| c.numeric() && *c != Column::Pid)
}

fn row_order(a: &Row, b: &Row, col: usize, desc: bool) -> std::cmp::Ordering {
    let num = |s: &[f64]| s.get(col).copied().unwrap_or(0.0);
    order_of(
        (num(&a.sort), num(&a.window_sort)),
        (num(&b.sort), num(&b.window_sort)),
        // A number's text follows its value: equal values, equal texts (an empty cell).
        || a.cells.get(col).cmp(&b.cells.get(col)),
        (a.key, b.key),
        desc,
    )
}

/// Rows' order by (value now, value over the window), then `text`, then key.
fn order_of(
    (x, wx): (f64, f64),
    (y, wy): (f64, f64),
    text: impl FnOnce() -> std::cmp::Ordering,
    (ka, kb): (u64, u64),
    desc: bool,
) -> std::cmp::Ordering {
    let o = if x != y {
        x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal)
    } else if wx != wy {
        wx.partial_cmp(&wy).unwrap_or(std::cmp::Ordering::Equal)
    } else {
        text()
    };
    let o = o.then(ka.cmp(&kb));
    if desc { o.reverse() } else { o }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two snapshots 2 s apart in tiering mode: 4096 pages promoted into node 0, 512 demoted
    /// out of it to node 2.
    fn tiered_delta() -> Snapshot {
        use crate::kernel::tiering::Tiering;
        use std::collections::BTreeMap;
        let tiering = |promoted: u64, demoted: u64| Tiering {
            mode: Some(2),
            tiers: crate::kernel::tiering::two_tiers(&[0, 1], &[2]),
            node_counters: BTreeMap::from([(
                0,
                BTreeMap::from([
                    ("pgpromote_success".to_owned(), promoted),
                    ("pgdemote_kswapd".to_owned(), demoted),
                ]),
            )]),
            node_hot_threshold_ms: BTreeMap::from([(0, 125)]),
            ..Tiering::default()
        };
        let snap = |mono_ns, k: u64| Snapshot {
            mono_ns,
            vmstat_hi: BTreeMap::from([
                ("pgpromote_success".to_owned(), 4096 * k),
                ("pgdemote_kswapd".to_owned(), 512 * k),
                ("pgdemote_direct".to_owned(), 0),
            ]),
            vmstat_lo: BTreeMap::from([
                ("pgpromote_success".to_owned(), 4096 * k),
                ("pgdemote_kswapd".to_owned(), 512 * k),
                ("pgdemote_direct".to_owned(), 0),
            ]),
            tiering: tiering(4096 * k, 512 * k),
            ..Snapshot::default()
        };
        snap(3_000_000_000, 2).delta(&snap(1_000_000_000, 1))
    }

    #[test]
    fn the_header_and_the_tiers_line_show_tiering() {
        let v = FrameView::build(&tiered_delta(), &[], &Filter::default(), OwnCost::default());
        assert_eq!(v.system.promoted_per_s, Some(2048.0));
        assert_eq!(v.system.demoted_per_s, Some(256.0));
        let h = v.header("6.12", Some(1), 3);
        assert!(h[0].contains("balancing 2 (tiering)"), "{}", h[0]);
        assert!(h[1].ends_with(", 2048 promote/s, 256 demote/s"), "{}", h[1]);
        assert_eq!(v.tiers.len(), 2);
        assert_eq!(v.tiers[0].promoted_per_s, 2048.0);
        assert_eq!(v.tiers[0].demoted_per_s, 256.0);
        assert_eq!(v.tiers[1].promoted_per_s, 0.0);
        let line = tiers_line(&v).unwrap();
        assert!(
            line.starts_with(
                "tiers: tier4 nodes 0,1 (top): 2048 promoted in/s, 256 demoted out/s, hot \
                 threshold 125 ms (node 0); tier72 node 2:"
            ),
            "{line}"
        );
        // No tiering counters (5.10): the header says nothing of it.
        let plain = FrameView::build(
            &Snapshot::default(),
            &[],
            &Filter::default(),
            OwnCost::default(),
        );
        assert!(!plain.header("5.10", Some(1), 2)[1].contains("promote"));
        assert!(tiers_line(&plain).is_none());
    }

    #[test]
    fn sort_column_names_follow_the_columns() {
        use clap::ValueEnum as _;
        for (i, v) in crate::cli::SortColumn::value_variants().iter().enumerate() {
            assert_eq!(v.index(), i);
            let name = v.to_possible_value().unwrap().get_name().to_owned();
            let title = COLUMNS[i].title().to_lowercase();
            assert!(
                title.starts_with(&name)
                    || (name == "scan" && title.starts_with("scan"))
                    || name == "reason",
                "{name} vs {title}"
            );
        }
        assert_eq!(
            crate::cli::SortColumn::value_variants().len(),
            COLUMNS.len()
        );
    }

    #[test]
    fn quantiles_of_log2_buckets() {
        // 10 values < 2, 89 < 1024, 1 < 2^20
        let mut b = vec![0u64; 64];
        b[1] = 10;
        b[10] = 89;
        b[20] = 1;
        let q = |b: &[u64], x| quantile(&log2_buckets(b), x);
        assert_eq!(q(&b, 0.5), Some(1024));
        assert_eq!(q(&b, 0.05), Some(2));
        assert_eq!(q(&b, 1.0), Some(1 << 20));
        assert_eq!(q(&[0, 0], 0.5), None);
    }

    #[test]
    fn rows_sort_by_number_then_key() {
        let r = |k, v: f64| Row {
            key: k,
            cells: vec![format!("{v}").into()],
            sort: vec![v],
            ..Row::default()
        };
        let mut rows = vec![r(1, 2.0), r(2, 9.0), r(3, 2.0)];
        sort_rows(&mut rows, 0, true);
        assert_eq!(rows.iter().map(|r| r.key).collect::<Vec<_>>(), [2, 3, 1]);
        sort_rows(&mut rows, 0, false);
        assert_eq!(rows.iter().map(|r| r.key).collect::<Vec<_>>(), [1, 3, 2]);
        // Ties by the same column over the window: busy a moment ago before idle all along.
        rows[0].window_sort = vec![1.0];
        rows[1].window_sort = vec![5.0];
        sort_rows(&mut rows, 0, true);
        assert_eq!(rows.iter().map(|r| r.key).collect::<Vec<_>>(), [2, 3, 1]);
        let (mut a, mut b) = (r(1, 0.0), r(2, 0.0));
        a.window_sort = vec![1.0];
        b.window_sort = vec![5.0];
        let mut rows = vec![a, b];
        sort_rows(&mut rows, 0, true);
        assert_eq!(rows.iter().map(|r| r.key).collect::<Vec<_>>(), [2, 1]);
    }

    proptest::proptest! {
        /// The first rows are those of the full sort, in its order (ties, one key twice).
        #[test]
        fn first_rows_are_the_sorted_rows_first(
            rows in proptest::collection::vec((0u64..6, 0u8..4, 0u8..3, 0u8..3), 0..40),
            n in 0usize..45,
            col in 0usize..2,
            desc in proptest::bool::ANY,
        ) {
            let rows: Vec<Row> = rows
                .into_iter()
                .map(|(key, a, b, text)| Row {
                    key,
                    cells: vec![format!("{a}").into(), format!("t{text}").into()],
                    sort: vec![f64::from(a), 0.0],
                    window_sort: vec![f64::from(b), 0.0],
                    ..Row::default()
                })
                .collect();
            let mut sorted = rows.clone();
            sort_rows(&mut sorted, col, desc);
            let first: Vec<Row> = first_rows(&rows, n, col, desc).into_iter().cloned().collect();
            proptest::prop_assert_eq!(&first[..], &sorted[..n.min(sorted.len())]);
        }
    }

    #[test]
    fn numbers_are_shown_from_their_sort_keys() {
        let mut t = crate::cmd::top::history::tests::delta(2, 2, &[(7, 4, 10)]).tasks[0].clone();
        let mut c = t.counts();
        c.hint_faults.local = 5;
        c.migrations.attempts = 2;
        c.migrations.latency_ns_total = 3000;
        t.set_counts(&c.finished());
        let all = Measured::from_hooks(&crate::report::measured::tests::all_but(&[]));
        let r = task_row(&t, &all, 2.0);
        let cells: Vec<String> = (0..r.len()).map(|i| r.cell(i)).collect();
        assert_eq!(
            cells[..8],
            ["7", "t7", "1.00", "0.0", "5.0", "50", "0.0", "2.0"],
            "{cells:?}"
        );
        assert_eq!(cells[11], "2us", "{cells:?}");
        assert_eq!(cells[9], "0", "no THP fault of 10: {cells:?}");
        // Not measured: `-`, in the interval and over the window.
        let no_hint = crate::report::measured::tests::all_but(&["task_numa_fault"]);
        let none = task_row(&t, &Measured::from_hooks(&no_hint), 2.0);
        assert_eq!(none.cell(4), "-");
        assert_eq!(r.window_cell(4), "-", "not windowed");
        let w = Row {
            window_sort: r.sort.clone(),
            ..r.clone()
        };
        assert_eq!(w.window_cell(4), "5.0");
        assert_eq!(w.window_cell(1), "t7", "text: the row's");
    }

    #[test]
    fn short_cgroup_is_the_last_component() {
        assert_eq!(
            short_cgroup(Some("/system.slice/foo.service")),
            "foo.service"
        );
        assert_eq!(short_cgroup(Some("/")), "/");
        assert_eq!(short_cgroup(None), "?");
    }
}
