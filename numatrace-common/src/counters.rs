//! The kernel side's own counters (losses, tallies).

#[allow(unused_imports)]
use crate::*;

/// Indices into [`MAP_COUNTERS`]: the kernel side's own accounting. Values are never reused.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// A ring buffer reservation failed: a discrete event was not delivered.
    RingbufFull = 0,
    /// A [`TaskStats`] entry could not be created: that event was not counted per task.
    TaskMapFull = 1,
    /// [`TaskStats`] entries created (userspace derives LRU evictions from it).
    TasksCreated = 2,
    /// A forked child of a followed process could not be followed.
    TrackedMapFull = 3,
    /// A tracepoint field could not be read.
    ReadFailed = 4,
    /// Events seen (after filtering), per tracepoint.
    SeenSkipVma = 5,
    SeenMove = 6,
    SeenSwap = 7,
    SeenStick = 8,
    /// `mm_migrate_pages` events with reason MR_NUMA_MISPLACED.
    SeenMigrateNuma = 9,
    /// Task exit snapshots handed to userspace.
    ExitSnapshots = 10,
    /// Function-hook totals over every followed task (per-CPU: they are on the fault path).
    HintFaults = 11,
    HintFaultsLocal = 12,
    HintPages = 13,
    HintMigratedPages = 14,
    PteUpdates = 15,
    /// An entry/exit pair could not be matched: a kretprobe return the kernel did not report
    /// (the next call found its slot still in use).
    InflightLost = 16,
    ScanCalls = 17,
    MigrateAttempts = 18,
    MigrateSucceeded = 19,
    MigrationWaits = 20,
    Samples = 21,
    ScanSamples = 22,
    CowSharedFaults = 23,
    CowSharedMigrations = 24,
    /// A VMA's PTE updates could not be recorded (per-VMA map full).
    VmaMapFull = 25,
    /// pid_inactive skips the gap program saw, and those it could not read or record.
    SeenSkipGap = 26,
    SkipGapLost = 27,
    /// sched_skip_vma_numa events (any reason) the tp_btf program saw: a second, independent
    /// count of what the classic tracepoint program counts as [`Counter::SeenSkipVma`].
    SeenSkipVmaBtf = 28,
    /// A CPU or page on a NUMA node beyond [`MAX_NODES`]: left out of the per-node arrays.
    NodeOutOfRange = 29,
    /// `mm_migrate_pages` with reason MR_DEMOTION, system-wide (reclaim demotes on behalf of
    /// no followed task): calls, pages demoted / not demoted, and the pages demoted by kswapd
    /// and by khugepaged (the rest: direct or proactive reclaim).
    DemoteCalls = 30,
    DemotePages = 31,
    DemoteFailed = 32,
    DemoteKswapd = 33,
    DemoteKhugepaged = 34,
    /// `sched_skip_cpuset_numa` events (6.16+): scans skipped for a one-node cpuset.
    SeenSkipCpuset = 35,
    /// Pages the followed tasks' hint faults promoted (slow tier to top tier), and their hint
    /// faults on pages of a slow-tier node.
    PromotedPages = 36,
    SlowTierFaults = 37,
    /// Pages hint faults migrated into a top-tier node, where a slower tier exists, from a
    /// node that could not be told (memory onlined after start, e.g. dax/kmem, or no node
    /// ranges): possibly promotions, not counted as such.
    PromoteSourceUnknown = 38,
    /// The promotion decisions on the followed tasks' slow-tier hint faults, in pages (see
    /// `TaskStats::promote_hot`), and the faults whose latency was measured, Σ latency.
    PromoteHot = 39,
    PromoteRateLimited = 40,
    PromoteNotHot = 41,
    PromoteFreeRoom = 42,
    HintLatencyFaults = 43,
    HintLatencyMs = 44,
    /// Pages of promotion decisions numatrace could not class: a refusal whose latency or
    /// threshold could not be read, or a decision its fault never counted (task_numa_fault not
    /// reached, or reached for another page).
    PromoteUnjudged = 45,
    /// Hint-fault migrations refused before they started (`TaskStats::migrate_refused`).
    MigrateRefused = 46,
}

impl Counter {
    /// Every counter, in slot order.
    pub const ALL: [Counter; 47] = [
        Self::RingbufFull,
        Self::TaskMapFull,
        Self::TasksCreated,
        Self::TrackedMapFull,
        Self::ReadFailed,
        Self::SeenSkipVma,
        Self::SeenMove,
        Self::SeenSwap,
        Self::SeenStick,
        Self::SeenMigrateNuma,
        Self::ExitSnapshots,
        Self::HintFaults,
        Self::HintFaultsLocal,
        Self::HintPages,
        Self::HintMigratedPages,
        Self::PteUpdates,
        Self::InflightLost,
        Self::ScanCalls,
        Self::MigrateAttempts,
        Self::MigrateSucceeded,
        Self::MigrationWaits,
        Self::Samples,
        Self::ScanSamples,
        Self::CowSharedFaults,
        Self::CowSharedMigrations,
        Self::VmaMapFull,
        Self::SeenSkipGap,
        Self::SkipGapLost,
        Self::SeenSkipVmaBtf,
        Self::NodeOutOfRange,
        Self::DemoteCalls,
        Self::DemotePages,
        Self::DemoteFailed,
        Self::DemoteKswapd,
        Self::DemoteKhugepaged,
        Self::SeenSkipCpuset,
        Self::PromotedPages,
        Self::SlowTierFaults,
        Self::PromoteSourceUnknown,
        Self::PromoteHot,
        Self::PromoteRateLimited,
        Self::PromoteNotHot,
        Self::PromoteFreeRoom,
        Self::HintLatencyFaults,
        Self::HintLatencyMs,
        Self::PromoteUnjudged,
        Self::MigrateRefused,
    ];

    /// Tallies of what the traced tasks did (not losses or bookkeeping): numatrace's own
    /// activity is left out of them, so that they equal the traced tasks' totals.
    pub const fn is_tally(self) -> bool {
        !matches!(
            self,
            Self::RingbufFull
                | Self::TaskMapFull
                | Self::TasksCreated
                | Self::TrackedMapFull
                | Self::ReadFailed
                | Self::ExitSnapshots
                | Self::InflightLost
                | Self::VmaMapFull
                | Self::SkipGapLost
                | Self::NodeOutOfRange
                | Self::PromoteSourceUnknown
                | Self::PromoteUnjudged
                | Self::DemoteCalls
                | Self::DemotePages
                | Self::DemoteFailed
                | Self::DemoteKswapd
                | Self::DemoteKhugepaged
        )
    }
}

/// Length of [`MAP_COUNTERS`].
pub const COUNTER_SLOTS: u32 = 48;
