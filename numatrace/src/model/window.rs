//! What a window was: its scope (system, a process, a command), its length, its filters.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Every task on the system.
    System,
    /// One process (`--pid`) and the processes it forks.
    Pid,
    /// A command started by numatrace and its descendants.
    Command,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub duration_s: f64,
    pub scope: Scope,
    pub pid: Option<u32>,
    pub command: Option<Vec<String>>,
    /// The command's exit status (128 + signal number if a signal ended it).
    pub exit_code: Option<i32>,
    pub comm_filter: Option<String>,
    /// `--cgroup`, as a path under the cgroup2 mount.
    #[serde(default)]
    pub cgroup_filter: Option<String>,
    /// Both snapshots were read while the kernel side counted nothing (its counters matched
    /// before and after the read). When false, `kernel_seen` and `nodes` may differ from the
    /// totals by the events counted during a read.
    #[serde(default)]
    pub consistent: bool,
}

impl Window {
    /// The view this window's report shows: its `--comm` and its resolved `--cgroup`.
    pub fn filter(&self) -> super::Filter {
        super::Filter {
            comm: self.comm_filter.clone(),
            cgroup: self.cgroup_filter.clone(),
        }
    }

    /// A system-wide window with no command and no filter.
    pub fn system_wide(duration_s: f64, consistent: bool) -> Self {
        Self {
            duration_s,
            scope: Scope::System,
            pid: None,
            command: None,
            exit_code: None,
            comm_filter: None,
            cgroup_filter: None,
            consistent,
        }
    }
}
