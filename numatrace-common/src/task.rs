//! The per-task aggregate the programs keep, and the kernel values it is indexed by.

#[allow(unused_imports)]
use crate::*;

/// task_numa_fault flags.
pub const TNF_MIGRATED: u32 = 0x01;
pub const TNF_SHARED: u32 = 0x04;
pub const TNF_FAULT_LOCAL: u32 = 0x08;
pub const TNF_MIGRATE_FAIL: u32 = 0x10;

/// `enum numa_vmaskip_reason` (include/linux/sched/numa_balancing.h), 6.7+.
pub const SKIP_REASON_NAMES: [&str; 7] = [
    "unsuitable",
    "shared_ro",
    "inaccessible",
    "scan_delay",
    "pid_inactive",
    "ignore_pid_inactive",
    "seq_completed",
];
/// Slots in [`TaskStats::skip_vma`]: the known reasons, then one for any reason a newer kernel adds.
pub const SKIP_REASON_SLOTS: usize = 8;
/// The slot counting reasons this build does not know.
pub const SKIP_REASON_OTHER: usize = SKIP_REASON_SLOTS - 1;

/// `enum migrate_reason`: MR_NUMA_MISPLACED, the only reason counted as a NUMA migration.
pub const MR_NUMA_MISPLACED: u32 = 5;
/// `enum migrate_reason`: MR_DEMOTION, reclaim moving pages to a slower memory tier (5.15+).
pub const MR_DEMOTION: u32 = 8;
/// `task_struct.flags`: the task is a kswapd thread.
pub const PF_KSWAPD: u32 = 0x0002_0000;

/// A value of [`MAP_TASK_STATS`]: the task's counts, then its calls in progress. An exit
/// record carries `stats` only.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskEntry {
    pub stats: TaskStats,
    pub inflight: Inflight,
    /// bpf_jiffies64 when the task's comm, cgroup and nodes were last re-read (the kernel
    /// side re-reads them at most every few jiffies of a busy task's events).
    pub noted_jiffies: u64,
}

impl TaskStats {
    /// Userspace only (the kernel side copies a zeroed map value instead: too big for its stack).
    pub fn new(pid: u32, tgid: u32) -> Self {
        Self {
            pid,
            tgid,
            ..Self::default()
        }
    }
}
