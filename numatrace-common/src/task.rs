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
/// record carries `stats` only. A free slot has pid 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskEntry {
    pub stats: TaskStats,
    pub inflight: Inflight,
    /// bpf_jiffies64 when the task's comm, cgroup and nodes were last re-read (the kernel
    /// side re-reads them at most every few jiffies of a busy task's events).
    pub noted_jiffies: u64,
    /// The entry's index in [`MAP_TASK_STATS`] and its generation: bumped each time the slot
    /// is freed, so that a [`SlotRef`] kept from before (a CPU's [`LastTask`], a lookup in
    /// progress) no longer matches. 0: never used.
    pub slot: u32,
    pub generation: u32,
}

/// A slot of [`MAP_TASK_STATS`] as [`MAP_TASK_SLOT`] and [`MAP_FREE_SLOTS`] hold it: the index,
/// and the generation of the entry there that it names.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotRef {
    pub slot: u32,
    pub generation: u32,
}

/// The value of [`MAP_TASK_LAST`] (per CPU): the last task this CPU counted for, and its slot,
/// so that its next event finds its entry without hashing its pid.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastTask {
    pub pid: u32,
    pub at: SlotRef,
    pub _pad: u32,
}

/// A record of the task-map iterator ([`PROG_ITER_TASKS`]): a [`TaskEntry`] after a
/// `TaskIterHead` of tag [`TASK_ITER_VALUE`], or a [`TaskIterKey`] alone for an entry untouched
/// since the reader's previous read (its value is the one that read had).
pub const TASK_ITER_VALUE: u32 = 0x7661_6c31;
/// Tag of a [`TaskIterKey`].
pub const TASK_ITER_KEY: u32 = 0x6b65_7931;

/// Precedes a whole [`TaskEntry`] in the iterator's output.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskIterHead {
    pub tag: u32,
    pub _pad: u32,
}

/// An entry the iterator did not send in full: the key the engine knows it by.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskIterKey {
    pub tag: u32,
    pub pid: u32,
    pub first_ns: u64,
}

/// [`TaskIterControl::mode`]: entries stamped since `since` whole, the others as keys.
pub const TASK_ITER_CHANGED: u32 = 0;
/// Every entry whole.
pub const TASK_ITER_ALL: u32 = 1;
/// Nothing sent: the read only stamps `started` (before a batched read of the map).
pub const TASK_ITER_CLOCK: u32 = 2;

/// The value of [`MAP_TASK_ITER`], set by userspace before each read of the iterator.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskIterControl {
    /// Entries whose `touched` is at or after this (wrapping compare) are sent in full.
    pub since: u32,
    /// [`TASK_ITER_CHANGED`], [`TASK_ITER_ALL`] or [`TASK_ITER_CLOCK`].
    pub mode: u32,
    /// Written by the iterator at its first call: `jiffies` when this read began.
    pub started: u64,
}

/// Whether an entry stamped `touched` changed since a read whose clock gave `since`: a wrapping
/// compare of the low 32 bits of jiffies (an entry untouched for over 2^31 jiffies may read as
/// changed: read whole, which costs a copy and is never wrong). The one rule of both readers of
/// the task map: the iterator's ([`TaskIterControl::sends`]) and the batched read's.
#[inline(always)]
pub fn stamped_since(touched: u32, since: u32) -> bool {
    touched.wrapping_sub(since) as i32 >= 0
}

impl TaskIterControl {
    /// Whether an entry stamped `touched` goes out in full (see [`stamped_since`]).
    #[inline(always)]
    pub fn sends(&self, touched: u32) -> bool {
        self.mode == TASK_ITER_ALL || stamped_since(touched, self.since)
    }
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
