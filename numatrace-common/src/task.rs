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

/// Per-task aggregates kept in [`MAP_TASK_STATS`]. Counters only grow.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskStats {
    /// Kernel pid (thread id).
    pub pid: u32,
    /// Thread-group id (the userspace "pid").
    pub tgid: u32,
    /// `comm` when the entry was created, or when the task was last seen running an event.
    pub comm: [u8; 16],
    /// Non-zero once the task has exited and this entry could not be handed over as a
    /// [`TaskExitEvent`] (ring buffer full), or when the entry was created while the task was
    /// already in do_exit (no exit record need follow); userspace then takes it from the map.
    pub exited: u32,
    pub _pad: u32,
    /// `sched_skip_vma_numa` events by reason (index = reason, last slot: unknown reasons).
    pub skip_vma: [u64; SKIP_REASON_SLOTS],
    /// `sched_move_numa`: the task was moved to its preferred node.
    pub numa_moves: u64,
    /// `sched_swap_numa` with this task as the source (it initiated the swap).
    pub numa_swaps_out: u64,
    /// `sched_swap_numa` with this task as the destination (swapped by another task).
    pub numa_swaps_in: u64,
    /// `sched_stick_numa`: a NUMA placement attempt that left the task where it was.
    pub numa_sticks: u64,
    /// `sched_stick_numa` with no candidate CPU at all (dst_cpu = -1).
    pub numa_stick_no_target: u64,
    /// `mm_migrate_pages` events with reason MR_NUMA_MISPLACED issued by this task.
    pub migrate_calls: u64,
    /// Pages (of any size) migrated / not migrated by those calls.
    pub migrate_ok: u64,
    pub migrate_failed: u64,
    /// Of which THPs migrated / not migrated (0 on kernels without the fields).
    pub migrate_thp_ok: u64,
    pub migrate_thp_failed: u64,
    /// `bpf_ktime_get_ns` of the first and the last counted event.
    pub first_ns: u64,
    pub last_ns: u64,
    /// `se.sum_exec_runtime` first and last seen (task_numa_work entry/exit, task exit).
    pub runtime_first_ns: u64,
    pub runtime_last_ns: u64,
    /// task_numa_work: calls, time inside, Σ Δsum_exec_runtime and Σ Δnode_stamp across calls,
    /// longest call, entries where node_stamp > sum_exec_runtime (seed 003 invariant 1).
    pub scan_calls: u64,
    pub scan_ns: u64,
    pub scan_runtime_ns: u64,
    pub scan_node_stamp_ns: u64,
    pub scan_max_ns: u64,
    pub scan_stamp_violations: u64,
    /// change_prot_numa: PTEs made PROT_NONE (a huge PMD counts 512), calls.
    pub pte_updates: u64,
    pub prot_numa_calls: u64,
    /// task_numa_fault: hint faults, local ones, pages, by size (1 page, 512, other), pages
    /// migrated (TNF_MIGRATED), faults whose migration failed (TNF_MIGRATE_FAIL).
    pub hint_faults: u64,
    pub hint_faults_local: u64,
    pub hint_pages: u64,
    pub hint_faults_4k: u64,
    pub hint_faults_thp: u64,
    pub hint_faults_large: u64,
    pub hint_migrated_pages: u64,
    pub hint_migrate_failed: u64,
    /// do_numa_page / do_huge_pmd_numa_page entries.
    pub numa_page_entries: u64,
    pub huge_pmd_numa_entries: u64,
    /// migrate_misplaced_*: calls, migrated, not migrated, Σ latency.
    pub migrate_attempts: u64,
    pub migrate_succeeded: u64,
    pub migrate_not_migrated: u64,
    pub migrate_ns: u64,
    /// migration_entry_wait: stalls on a page under migration, Σ time stalled.
    pub migration_waits: u64,
    pub migration_wait_ns: u64,
    /// CPU-clock samples of this task, and of those with task_numa_work on the kernel stack.
    pub samples: u64,
    pub scan_samples: u64,
    /// mm->numa_scan_seq after the last task_numa_work call: how many full passes the scanner
    /// has made over this address space.
    pub scan_seq: u64,
    /// Hint faults on COW-shared pages (mpol_misplaced), and those pages migrated.
    pub cow_shared_faults: u64,
    pub cow_shared_migrations: u64,
    /// Of `cow_shared_faults`, those on large folios (THP): the seed-000 skip covers PTEs only.
    pub cow_shared_faults_large: u64,
    /// task_numa_work calls during which the task's runtime advanced (the 3% cap applies), and
    /// of those, calls where node_stamp advanced less than 32× that runtime (seed 003's cap
    /// missing).
    pub scan_cap_calls: u64,
    pub scan_cap_violations: u64,
    /// Runtime consumed by the latest task_numa_work call, and sum_exec_runtime at its entry:
    /// the share the cap bounds is measured up to the start of the latest call.
    pub scan_last_call_rt: u64,
    pub scan_last_entry_runtime: u64,
    /// task_numa_work calls queued while the task's previous call ran (a call longer than the
    /// scan period: a tick inside it re-queued the work, which runs as soon as it returns),
    /// entered with node_stamp as that call left it. The kernel's normal course, not seed
    /// 003's underflow: such a call is judged with the one before it (stamp and share).
    pub scan_requeued: u64,
    /// Memory tiering: pages this task's hint faults promoted (migrated from a node outside
    /// the top tier to one in it, counted as the kernel counts `pgpromote_success`), hint
    /// faults on slow-tier pages whose migration was refused or failed (TNF_MIGRATE_FAIL), and
    /// hint faults on pages of a node outside the top tier.
    pub promoted_pages: u64,
    pub promote_failed: u64,
    pub slow_tier_faults: u64,
    /// `sched_skip_cpuset_numa`: scans skipped because the task's cpuset allows one node.
    pub skip_cpuset: u64,
    /// Memory tiering: the kernel's promotion decision on this task's slow-tier hint faults
    /// (should_numa_migrate_memory), in pages, four disjoint outcomes: hot (hint-fault latency
    /// under the node's hot threshold) and let through; hot and held back by the rate limit
    /// (the two together are the kernel's `pgpromote_candidate`); not hot (latency at or over
    /// the threshold); let through past both because the node had free room (the kernel's
    /// `pgpromote_candidate_nrl`, 6.18+). "Let through" is a decision to migrate, which can
    /// still be refused or fail (`promote_failed`).
    pub promote_hot: u64,
    pub promote_rate_limited: u64,
    pub promote_not_hot: u64,
    pub promote_free_room: u64,
    /// Slow-tier hint faults whose latency was measured (ms from the scanner's stamp of the
    /// page's access time to the fault), and Σ that latency.
    pub hint_latency_faults: u64,
    pub hint_latency_ms: u64,
    /// Hint-fault migrations refused before they started (migrate_misplaced_folio_prepare,
    /// 6.11+: the target node nearly full — in tiering mode kswapd is woken to demote — a
    /// dirty or shared executable file folio, or the folio could not be isolated).
    pub migrate_refused: u64,
    /// cgroup v2 id (`bpf_get_current_cgroup_id`) when the entry was created, refreshed at
    /// each scan and hint fault; 0: never seen running.
    pub cgroup_id: u64,
    /// `task_struct.numa_preferred_nid + 1` at the last scan or hint fault (0: no preferred
    /// node, or never read).
    pub preferred_nid: u32,
    /// NUMA node + 1 of the CPU the task last ran a counted event on (0: unknown).
    pub last_nid: u32,
}

/// A value of [`MAP_TASK_STATS`]: the task's counts, then its calls in progress. An exit
/// record carries `stats` only.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskEntry {
    pub stats: TaskStats,
    pub inflight: Inflight,
    /// bpf_ktime_get_ns when the task's comm, cgroup and nodes were last re-read (the kernel
    /// side re-reads them at most every few milliseconds of a busy task's events).
    pub noted_ns: u64,
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
