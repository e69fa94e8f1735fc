//! Keys and values of the per-VMA, per-region and in-flight maps.

#[allow(unused_imports)]
use crate::*;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionKey {
    pub tgid: u32,
    /// mm->numa_scan_seq when the fault was taken: one scan pass.
    pub scan_seq: u32,
    /// Fault address >> 21.
    pub region: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmaKey {
    pub tgid: u32,
    pub _pad: u32,
    pub vm_start: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmaStats {
    pub vm_end: u64,
    pub pte_updates: u64,
    pub calls: u64,
}

/// One task's calls in progress, kept in its entry ([`TaskEntry`]): an exit frees them with the
/// entry, and every hook finds them with the lookup it makes anyway. Only the task itself
/// writes them (every hook reaches its own entry through `current`), one slot per hook, so
/// plain stores do not race. A slot is empty while its first field is 0 (times come from
/// bpf_ktime_get_ns, never 0 once booted).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inflight {
    /// task_numa_work: entry time, `se.sum_exec_runtime` and `node_stamp` at entry.
    pub scan_ts_ns: u64,
    pub scan_runtime_ns: u64,
    pub scan_node_stamp: u64,
    /// task_numa_work: node_stamp when the task's previous call returned (0: no call seen
    /// yet); non-zero when that call's runtime had passed the node_stamp it ran under (before
    /// the 32x push): only then can a tick inside it have re-queued the work on a patched
    /// kernel; non-zero while the current call is a re-queue (see `TaskStats::scan_requeued`).
    pub scan_exit_stamp: u64,
    pub scan_exit_passed: u64,
    pub scan_requeue: u64,
    /// migrate_misplaced_*: entry time, target node, source node (`MAX_NODES`: unknown).
    pub migrate_ts_ns: u64,
    pub migrate_node: u64,
    pub migrate_src: u64,
    /// migration_entry_wait: entry time.
    pub wait_ts_ns: u64,
    /// Source node + 1 of the current hint fault's successful migration (set when
    /// migrate_misplaced_* returns, read by task_numa_fault for the pages matrix); 0: none.
    pub fault_src: u64,
    /// Non-zero: the current hint fault is on a COW-shared page (set by mpol_misplaced, read
    /// when the fault's migration ends, cleared by task_numa_fault).
    pub cow_shared: u64,
    /// The VMA of the current change_prot_numa call (kprobe to kretprobe); 0: none.
    pub prot_vma: u64,
    /// The current hint fault's promotion decision (set when should_numa_migrate_memory
    /// returns, taken by task_numa_fault, which knows the pages and the access-time mask):
    /// `PROMOTE_*` flags, the page's node + 1 in bits 8-23, the hot threshold (ms) it was
    /// judged by in the high 32 bits.
    pub promote_decision: u64,
    /// The access-time exchange inside that decision: the time written (low 32 bits) and the
    /// time the page held (high 32 bits), both in the kernel's access-time units.
    pub promote_times: u64,
}

/// [`Inflight::promote_decision`] flags: a decision was taken; the page's access time was
/// exchanged in it (its latency was judged); it said promote; the threshold is known.
pub const PROMOTE_DECIDED: u64 = 1;
pub const PROMOTE_EXCHANGED: u64 = 2;
pub const PROMOTE_YES: u64 = 4;
pub const PROMOTE_THRESHOLD_KNOWN: u64 = 8;
/// [`Inflight::promote_decision`]: where the page's node + 1 sits.
pub const PROMOTE_NODE_SHIFT: u32 = 8;
pub const PROMOTE_NODE_MASK: u64 = 0xffff;

/// A slow-tier hint fault's latency in ms, as numa_hint_fault_latency computes it, from the
/// exchange's new and old values and LAST_CPUPID_MASK (task_numa_fault's `last_cpupid` on
/// such a fault: the kernel passes `-1 & LAST_CPUPID_MASK`); `None` if `mask` is not one.
pub fn access_latency_ms(new: u32, old: u32, mask: u32) -> Option<u32> {
    // A mask of W low bits; the kernel keeps the time in buckets of 2^(12 - W) ms when the
    // field is narrower than 12 bits (PAGE_ACCESS_TIME_BUCKETS).
    if mask < 0xff || mask & mask.wrapping_add(1) != 0 {
        return None;
    }
    let buckets = match mask {
        0xff => 4,
        0x1ff => 3,
        0x3ff => 2,
        0x7ff => 1,
        _ => 0,
    };
    Some((new.wrapping_sub(old) & mask) << buckets)
}

impl Inflight {
    /// A hint fault the kernel has counted (numa_hint_faults) whose task_numa_fault has not
    /// run yet: its migration is in progress or returned successfully.
    pub fn fault_in_flight(&self) -> bool {
        self.migrate_ts_ns != 0 || self.fault_src != 0
    }
}

/// One VMA's skips, as the tp_btf `sched_skip_vma_numa` program counts them: by reason (where
/// it is the hook's only program, [`GapOffsets::whole_hook`]), and the pid_inactive ones with
/// their gap = `mm->numa_scan_seq - prev_scan_seq` at the skip; the seed 002 patch scans a VMA
/// once the gap exceeds the thread count instead of skipping it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmaGap {
    pub vm_end: u64,
    /// pid_inactive skips.
    pub skips: u64,
    /// Skips with gap > nr_threads: impossible on a patched kernel.
    pub over_threads: u64,
    /// Skips with gap == nr_threads: the VMA reached the patch's threshold.
    pub at_threshold: u64,
    pub max_gap: u64,
    /// nr_threads at the skip with the largest gap.
    pub max_gap_threads: u64,
    /// Skips by reason (index = reason, last slot: unknown reasons); zero where the classic
    /// program counts the hook (its records carry them instead).
    pub reasons: [u64; SKIP_REASON_SLOTS],
}

/// Memory tiering as userspace last read it: the one value of [`MAP_TIERING`], rewritten when
/// the mode or the tiers change, so that a hint fault's migration is classed as a promotion
/// exactly where the kernel counts `pgpromote_success`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierConfig {
    /// Bit n: node n is in a top tier (the kernel's `node_is_toptier`).
    pub toptier_mask: u64,
    /// Non-zero: tiers are known (6.1+ memory tiers, or nodes with CPUs on 5.18-6.0); zero:
    /// nothing is classed by tier.
    pub known: u32,
    /// Non-zero: the kernel counts a promotion only while `kernel.numa_balancing` has the
    /// tiering bit (6.12+); before, every top-tier-bound migration from a slower tier counts.
    pub mode_gated: u32,
    /// `kernel.numa_balancing` as last read.
    pub mode: u32,
    /// Byte offset of `nbp_threshold` in `struct pglist_data` (BTF, 6.0+); 0: the per-node
    /// hot thresholds are not read.
    pub threshold_off: u32,
    /// Address of the kernel's `node_data[]` (kallsyms); 0: the thresholds are not read.
    pub node_data: u64,
    /// Non-zero: some node is outside the top tier (something can be promoted).
    pub has_slow: u32,
    /// Non-zero: the kernel keeps no per-node threshold (`pglist_data.nbp_threshold`, 6.0+):
    /// every decision is judged by `sysctl_numa_balancing_hot_threshold`.
    pub threshold_is_sysctl: u32,
    /// Address of `sysctl_numa_balancing_hot_threshold` (kallsyms): the threshold a node
    /// whose `nbp_threshold` is 0 is judged by; 0: unknown.
    pub hot_threshold_sym: u64,
    /// Address of `sysctl_numa_balancing_mode` (kallsyms): the mode as the kernel has it now,
    /// where `mode` is as userspace last read it; 0: unknown.
    pub mode_sym: u64,
}

/// A value of [`MAP_HOT_THRESHOLD`] has this bit once read: the low 32 bits are then the
/// node's `nbp_threshold` in ms at its latest slow-tier hint fault (0: not adjusted yet, the
/// reference `hot_threshold_ms` applies).
pub const HOT_THRESHOLD_SEEN: u64 = 1 << 32;

/// `kernel.numa_balancing`'s memory-tiering bit (NUMA_BALANCING_MEMORY_TIERING).
pub const NUMA_BALANCING_MEMORY_TIERING: u32 = 0x2;

impl TierConfig {
    /// Whether `node` is in a top tier (a node beyond the mask's 64 bits is taken as one, as
    /// the kernel takes a node with no tier).
    pub fn toptier(&self, node: u64) -> bool {
        node >= 64 || self.toptier_mask & (1u64 << node) != 0
    }

    /// Whether a migration from `src` to `dst` counts as a promotion now.
    pub fn promotes(&self, src: u64, dst: u64) -> bool {
        self.known != 0
            && (self.mode_gated == 0 || self.mode & NUMA_BALANCING_MEMORY_TIERING != 0)
            && src < MAX_NODES as u64
            && !self.toptier(src)
            && self.toptier(dst)
    }

    /// Whether a migration into `dst` would count as a promotion if its source were slow:
    /// where one from an unknown source is a promotion that could not be classed.
    pub fn may_promote_into(&self, dst: u64) -> bool {
        self.known != 0
            && self.has_slow != 0
            && (self.mode_gated == 0 || self.mode & NUMA_BALANCING_MEMORY_TIERING != 0)
            && self.toptier(dst)
    }

    /// Whether a slow-tier hint fault reads the faulting node's hot threshold: in tiering mode
    /// (the only mode the kernel adjusts it in), where its address and offset are known.
    pub fn reads_threshold(&self) -> bool {
        self.node_data != 0
            && self.threshold_off != 0
            && self.mode & NUMA_BALANCING_MEMORY_TIERING != 0
    }

    /// Whether should_numa_migrate_memory judges a page of `node` by its access time (the
    /// kernel's folio_use_access_time) under `mode`: tiering mode, the node outside the top
    /// tier.
    pub fn judges_by_access_time(&self, mode: u32, node: u64) -> bool {
        mode & NUMA_BALANCING_MEMORY_TIERING != 0 && self.slow(node)
    }

    /// Whether a page on `node` is in a slower tier than the top one.
    pub fn slow(&self, node: u64) -> bool {
        self.known != 0 && node < MAX_NODES as u64 && !self.toptier(node)
    }
}
