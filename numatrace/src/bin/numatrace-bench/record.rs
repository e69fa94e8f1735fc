//! What numatrace-bench prints, one `NUMATRACE-BENCH {json}` line per record: the typed record
//! both sides use — the bench binary writes it, `cargo xtask bench` reads it back (xtask includes
//! this file: it depends on serde alone).

use serde::{Deserialize, Serialize};

/// One result line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    Machine {
        kernel: String,
        nodes: u32,
        cpus: usize,
        tunables: Vec<String>,
    },
    Program(ProgramCost),
    Peer(PeerCost),
    HookPeer(HookPeer),
    Lookup(LookupCost),
    Ring(RingLoad),
    Overhead(Overhead),
    Daemon(DaemonCost),
    Snapshot(SnapshotCost),
    Scale(ScaleCost),
    Note {
        text: String,
    },
}

/// A program's BPF run time per run against the empty program on the same hook.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgramCost {
    /// The command whose declared reads the programs were loaded with (`record`, `stat`).
    #[serde(default)]
    pub command: String,
    pub hook: String,
    pub mechanism: String,
    pub program: String,
    pub runs: u64,
    pub ns_per_run: Option<f64>,
    pub floor_runs: u64,
    pub floor_ns_per_run: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RingLoad {
    /// Records the kernel side submitted and userspace decoded during the run.
    pub records: u64,
    pub seconds: f64,
    /// Records the kernel could not submit (ring buffer full).
    pub dropped: u64,
}

/// A numatrace program and a bpftrace one-liner on the same tracepoint, in the same run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerCost {
    /// `system-wide`: numatrace attached as `record` attaches, the mix running; `untracked`:
    /// numatrace following nobody (every task untracked), short-lived tasks only.
    pub pass: String,
    pub program: String,
    pub runs: u64,
    pub ns_per_run: Option<f64>,
    pub peer: String,
    pub peer_runs: u64,
    pub peer_ns_per_run: Option<f64>,
    /// tp_sched_process_exit: runs that handed a tracked task's entry over (its exit record).
    pub tracked: Option<u64>,
}

/// One hook: numatrace's programs on it against bpftrace's (the overhead script, the same
/// aggregation per task), in the same run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HookPeer {
    /// The command whose declared reads numatrace's programs were loaded with.
    #[serde(default)]
    pub command: String,
    pub hook: String,
    /// Runs of numatrace's first program on the hook (its events).
    pub events: u64,
    /// Σ run time of numatrace's programs on the hook / events.
    pub ns_per_event: Option<f64>,
    /// Σ run time of bpftrace's programs on the hook / events.
    pub bpftrace_ns_per_event: Option<f64>,
    /// bpftrace's programs found on the hook (by name).
    pub bpftrace_programs: usize,
}

/// How a program finds the running task's entry, on one hook, in the same run as numatrace's
/// programs there (the `numatrace-lookups` object: each program only finds the entry and counts
/// in it): the pid-keyed hash numatrace used, BPF task storage, and a per-CPU cache of the last
/// task's slot in an array.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LookupCost {
    pub hook: String,
    pub mechanism: String,
    /// Runs of the pid-hash program (the hook's events).
    pub events: u64,
    pub hash_ns_per_run: Option<f64>,
    pub ts_ns_per_run: Option<f64>,
    /// Entries in an array by slot, a per-CPU cache of the last task's slot in front of the
    /// pid hash.
    #[serde(default)]
    pub cpu_ns_per_run: Option<f64>,
    /// The empty program of the same type on the same hook.
    pub floor_ns_per_run: Option<f64>,
}

/// A workload's throughput under one tracer against untraced, per round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Overhead {
    pub workload: String,
    pub config: String,
    /// Throughput / untraced throughput of the same round, per round.
    pub ratios: Vec<f64>,
    pub median: Option<f64>,
}

/// A long-running command's cost with `tasks` live tasks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DaemonCost {
    pub frontend: String,
    pub tasks: usize,
    /// % of one core over the window (after it was ready).
    pub cpu_pct: f64,
    pub peak_rss_mib: f64,
    /// Start to counting: first frame (top), first complete scrape (serve), "counting" (others).
    pub ready_ms: f64,
    /// serve: median scrape time, and scrapes that failed.
    pub scrape_ms: Option<f64>,
    pub scrape_errors: u64,
    /// top: frames printed over the window.
    pub frames: u64,
    pub window_s: f64,
}

/// The engine's snapshot time with `tasks` live tasks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotCost {
    pub tasks: usize,
    /// Tasks in the snapshot (live tasks the kernel side has seen).
    pub tracked: usize,
    pub summary_ms: f64,
    pub full_ms: f64,
}

/// One command with `tasks` entries in the kernel's task map over `cgroups` cgroups (issue 37,
/// item 4): `written` of them by the benchmark, `real` created by the kernel side from real
/// activity before they were written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaleCost {
    /// `engine (in-process)`, `serve` or `top -b`.
    pub command: String,
    pub tasks: usize,
    pub written: usize,
    pub real: usize,
    pub cgroups: usize,
    /// The task map's capacity (`--max-tasks`).
    pub max_tasks: u32,
    /// The engine's snapshot: the first after the entries were written (new cgroups to
    /// resolve), then the median of 5, each after every entry changed.
    pub first_snapshot_ms: Option<f64>,
    pub summary_ms: Option<f64>,
    pub full_ms: Option<f64>,
    /// The summary snapshot's median when only a tenth of the entries changed since the
    /// previous one (`scale::CHANGED_PERCENT`).
    #[serde(default)]
    pub changed_share_ms: Option<f64>,
    /// How the engine read the task map: `iterator` (whole only what changed) or `batched`.
    #[serde(default)]
    pub task_reader: String,
    /// The iterator's part (median of 5): one read with every entry whole, one with every
    /// entry as its key (none stamped since the previous read).
    #[serde(default)]
    pub iter_whole_ms: Option<f64>,
    #[serde(default)]
    pub iter_keys_ms: Option<f64>,
    /// Records the last snapshot with a tenth changed kept from the list the previous one
    /// handed back (`Engine::kept_records`), not built again.
    #[serde(default)]
    pub kept_records: Option<usize>,
    /// Entries the last snapshot with a tenth changed took as unchanged since the previous one
    /// (`Engine::unchanged_entries`: the iterator's keys, or the batched read's entries stamped
    /// before its margin); `None`: it compared every entry.
    #[serde(default)]
    pub unchanged_entries: Option<u64>,
    /// The kernel's part: one batched read of the whole task map (median of 5), nothing done
    /// with the entries.
    pub map_read_ms: Option<f64>,
    /// The size of one snapshot's task list: its records and the counts they hold on the
    /// heap, measured on the engine's in-process snapshot (`None`: that did not run).
    #[serde(default)]
    pub task_list_mib: Option<f64>,
    /// serve: median scrape (default cardinality limits) and the slowest.
    pub scrape_ms: Option<f64>,
    pub scrape_max_ms: Option<f64>,
    pub peak_rss_mib: f64,
    /// % of one core over the window (None: the benchmark's own process).
    pub cpu_pct: Option<f64>,
    /// top: frames printed over the window and the longest time between two.
    pub frames: u64,
    pub max_frame_gap_s: Option<f64>,
    pub window_s: f64,
}

/// The marker of a record line in a log.
pub const MARK: &str = "NUMATRACE-BENCH ";

/// The records in `log` (a console or a program's output), in order; lines that are not one are
/// skipped. (xtask's: the bench binary only writes.)
#[allow(dead_code)]
pub fn read(log: &str) -> Vec<Record> {
    log.lines()
        .filter_map(|l| {
            let i = l.find(MARK)?;
            serde_json::from_str(l[i + MARK.len()..].trim_end_matches('\r')).ok()
        })
        .collect()
}
