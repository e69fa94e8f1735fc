//! What userspace tells the programs at load time: switches, kernel field offsets (from BTF
//! and tracefs), per-version conventions, and the in-flight call state they keep.

#[allow(unused_imports)]
use crate::*;

/// Where mpol_misplaced finds what makes a page "COW-shared" (seed 000): mapped by more than
/// one process in a copy-on-write mapping. Offsets from BTF; [`FIELD_ABSENT`] when missing.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageOffsets {
    /// page.flags, and the PG_head bit in it (a large folio's head page).
    pub flags: u32,
    pub head_bit: u32,
    /// page._mapcount (atomic_t; mapcount - 1) of a small page.
    pub mapcount: u32,
    /// From a head page: the large folio's mapcount - 1 (folio._large_mapcount on 6.11+,
    /// else the entire/compound mapcount: PMD mappings).
    pub large_mapcount: u32,
    /// vm_fault.vma when mpol_misplaced's second argument is a vm_fault (6.11+); absent when it
    /// is the vma itself.
    pub vmf_vma: u32,
    /// vm_area_struct.vm_flags, vm_start, vm_end
    pub vm_flags: u32,
    pub vm_start: u32,
    pub vm_end: u32,
    pub _pad: u32,
}

impl PageOffsets {
    pub const ABSENT: Self = Self {
        flags: FIELD_ABSENT,
        head_bit: FIELD_ABSENT,
        mapcount: FIELD_ABSENT,
        large_mapcount: FIELD_ABSENT,
        vmf_vma: FIELD_ABSENT,
        vm_flags: FIELD_ABSENT,
        vm_start: FIELD_ABSENT,
        vm_end: FIELD_ABSENT,
        _pad: 0,
    };
}

/// Tolerance of the seed-003 cap check: the programs read sum_exec_runtime just outside the
/// kernel's own reads in task_numa_work, so a tick landing in between (at each end) makes the
/// measured runtime up to two ticks longer than the kernel's (10 ms each at HZ=100).
pub const CAP_TOLERANCE_NS: u64 = 20_000_000;

/// How to find the NUMA node of a `struct page` (the source of a migration): its PFN is
/// `(page - vmemmap) / page_size` (SPARSEMEM_VMEMMAP, x86-64 and arm64), and sysfs says which node owns
/// which PFNs.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeMap {
    /// Address of the kernel variable `vmemmap_base` (randomized layouts), or 0.
    pub vmemmap_base_sym: u64,
    /// vmemmap start when there is no such variable; 0 when unknown.
    pub vmemmap_const: u64,
    /// sizeof(struct page); 0: source nodes are not resolved.
    pub page_size: u64,
    pub nranges: u64,
    /// [start_pfn, end_pfn, node], end exclusive.
    pub ranges: [[u64; 3]; NODE_RANGES],
}

impl NodeMap {
    pub const EMPTY: Self = Self {
        vmemmap_base_sym: 0,
        vmemmap_const: 0,
        page_size: 0,
        nranges: 0,
        ranges: [[0; 3]; NODE_RANGES],
    };
}

/// vm_flags bits of `is_cow_mapping`.
pub const VM_SHARED: u64 = 0x8;
pub const VM_MAYWRITE: u64 = 0x20;

/// Byte offsets of the kernel fields the function hooks read, from the running kernel's BTF.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskOffsets {
    /// task_struct.se.sum_exec_runtime
    pub sum_exec_runtime: u32,
    /// task_struct.node_stamp
    pub node_stamp: u32,
    /// task_struct.mm
    pub mm: u32,
    /// mm_struct.numa_scan_seq
    pub mm_numa_scan_seq: u32,
    /// task_struct.numa_preferred_nid (int)
    pub numa_preferred_nid: u32,
    /// task_struct.flags (PF_EXITING)
    pub flags: u32,
    /// task_struct.start_time (CLOCK_MONOTONIC ns, bpf_ktime_get_ns's clock)
    pub start_time: u32,
}

/// Per-kernel conventions of the function hooks. The `*_arg` fields are argument positions
/// (0 = first), found by parameter name in the running kernel's BTF; the kprobe programs read
/// the argument register at that position. (fentry programs have one variant per signature:
/// the verifier checks every context read against the function's BTF.)
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuncConfig {
    /// migrate_misplaced_*: the page/folio and the target node.
    pub migrate_page_arg: u32,
    pub migrate_node_arg: u32,
    /// Non-zero: 0 means migrated (6.10+); zero: 1 means migrated (older).
    pub migrate_ok_is_zero: u32,
    /// mpol_misplaced: the page/folio, the vma (or vm_fault from 6.11) and the address.
    pub mpol_page_arg: u32,
    pub mpol_vma_arg: u32,
    pub mpol_addr_arg: u32,
    /// task_numa_fault: the memory node, the pages and the flags.
    pub fault_node_arg: u32,
    pub fault_pages_arg: u32,
    pub fault_flags_arg: u32,
    /// change_prot_numa: the vma.
    pub prot_vma_arg: u32,
}

impl FuncConfig {
    /// The signatures every kernel from 4.x to 6.13 has.
    pub const DEFAULT: Self = Self {
        migrate_page_arg: 0,
        migrate_node_arg: 2,
        migrate_ok_is_zero: 0,
        mpol_page_arg: 0,
        mpol_vma_arg: 1,
        mpol_addr_arg: 2,
        fault_node_arg: 1,
        fault_pages_arg: 2,
        fault_flags_arg: 3,
        prot_vma_arg: 0,
    };
}

/// Kernel text ranges whose presence on a sampled kernel stack means "NUMA scanning".
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanRanges {
    pub task_numa_work: [u64; 2],
    pub change_prot_numa: [u64; 2],
}

/// What the tp_btf `sched_skip_vma_numa` program reads, from the running kernel's BTF (seed 002:
/// `vma->numab_state->prev_scan_seq` against `mm->numa_scan_seq` and the thread count).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GapOffsets {
    /// vm_area_struct.numab_state (a pointer)
    pub vma_numab_state: u32,
    /// vma_numab_state.prev_scan_seq (int, 6.8+)
    pub prev_scan_seq: u32,
    /// mm_struct.numa_scan_seq (int)
    pub mm_numa_scan_seq: u32,
    /// mm_struct.numa_scan_offset (unsigned long): the record's `numa_scan_offset`
    pub mm_numa_scan_offset: u32,
    /// task_struct.signal (a pointer)
    pub task_signal: u32,
    /// signal_struct.nr_threads (int)
    pub nr_threads: u32,
    pub vm_start: u32,
    pub vm_end: u32,
    /// NUMAB_SKIP_PID_INACTIVE's value in this kernel's `enum numa_vmaskip_reason`.
    pub pid_inactive: u32,
    /// Non-zero: the tp_btf program is the hook's only one (the classic tracepoint program
    /// is not attached), so it does that program's work too: the system-wide and per-task
    /// counts, each skip per VMA by reason, and the records.
    pub whole_hook: u32,
}

/// A field offset that the running kernel's tracepoint does not have.
pub const FIELD_ABSENT: u32 = u32::MAX;

impl TaskOffsets {
    pub const ABSENT: Self = Self {
        sum_exec_runtime: FIELD_ABSENT,
        node_stamp: FIELD_ABSENT,
        mm: FIELD_ABSENT,
        mm_numa_scan_seq: FIELD_ABSENT,
        numa_preferred_nid: FIELD_ABSENT,
        flags: FIELD_ABSENT,
        start_time: FIELD_ABSENT,
    };
}

/// Runtime switches, set by the loader.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Non-zero: only tasks whose tgid is in [`MAP_TRACKED_TGIDS`] are counted; forks of a
    /// followed process are followed too.
    pub filter_tgids: u32,
    /// Which discrete records go on the ring buffer ([`EMIT_SKIP_VMA`] | …): only those the
    /// running frontend reads (task exit snapshots are always sent).
    pub emit_events: u32,
    /// Non-zero: send aya-log debug messages from cold paths (fork following).
    pub debug_log: u32,
    /// numatrace's own tgid: always counted per task (userspace reports it apart, as `self`,
    /// so that traced totals + self add up to the kernel's counters), never in the
    /// system-wide histograms, matrices and per-node arrays.
    pub self_tgid: u32,
    /// Non-zero: also send a [`SpanEvent`](crate::SpanEvent) per task_numa_work call,
    /// migration and migration stall (`record`'s timeline; costs a ring record on those paths).
    pub emit_spans: u32,
    /// Ring-buffer bytes waiting to be read past which a record wakes the reader. Below it
    /// records are submitted without a wake-up (no irq_work, no reader wake-up per record):
    /// userspace reads on a timer and at every snapshot.
    pub wake_bytes: u32,
    /// Which optional aggregates the running frontend reads ([`READ_REGIONS`] | …): the
    /// programs keep only those. A read-only global, so the verifier removes the code of the
    /// others.
    pub reads: u32,
}

/// Hint faults per 2 MiB region and scan pass (seed 001's batching check: `stat --json`,
/// `record`, `check`).
pub const READ_REGIONS: u32 = 1 << 0;
/// PTE updates and calls per VMA (change_prot_numa): the per-process VMA tables of `stat`,
/// `record`, `check` and `top`'s detail.
pub const READ_VMAS: u32 = 1 << 1;
/// Skips per VMA by reason (sched_skip_vma_numa): a VMA row's `skips`, in `top`'s detail and
/// the JSON's VMA rows (`stat`'s text shows none; pid_inactive gaps are kept either way).
pub const READ_VMA_SKIPS: u32 = 1 << 2;
/// Every optional aggregate.
pub const READ_ALL: u32 = READ_REGIONS | READ_VMAS | READ_VMA_SKIPS;

/// `sched_skip_vma_numa` records (per-VMA skips with their reason).
pub const EMIT_SKIP_VMA: u32 = 1 << 0;
/// A record per change_prot_numa call (when each VMA was scanned).
pub const EMIT_VMA_SCAN: u32 = 1 << 1;
/// `sched_{move,swap,stick}_numa` records (their counts are kept per task regardless).
pub const EMIT_PLACEMENT: u32 = 1 << 2;
/// `mm_migrate_pages` records (their counts are kept per task regardless).
pub const EMIT_MIGRATE_PAGES: u32 = 1 << 3;
/// Every discrete record (`record`).
pub const EMIT_ALL: u32 = EMIT_SKIP_VMA | EMIT_VMA_SCAN | EMIT_PLACEMENT | EMIT_MIGRATE_PAGES;

/// Bytes of a tracepoint's record the programs copy at once (one helper call per event): a
/// field past them is treated as absent. Every field numatrace reads lies below 64 on every
/// kernel line (the tracefs formats: an 8-byte common header, then a few words).
pub const TP_RECORD_BYTES: u32 = 128;

/// Bits of the `TP_CTX_READS` global: tracepoints whose running format has the [`KNOWN`
/// layout](SkipVmaOffsets::KNOWN), so that their program reads the record in place (a load
/// at an offset fixed at compile time: the verifier admits no other on a tracepoint's
/// context) instead of copying it with a helper call (~800 guest ns per event).
pub const CTX_SKIP_VMA: u32 = 1 << 0;
pub const CTX_MOVE: u32 = 1 << 1;
pub const CTX_SWAP: u32 = 1 << 2;
pub const CTX_STICK: u32 = 1 << 3;
pub const CTX_MIGRATE: u32 = 1 << 4;

/// `sched:sched_skip_vma_numa` (6.7+) field offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkipVmaOffsets {
    pub numa_scan_offset: u32,
    pub vm_start: u32,
    pub vm_end: u32,
    pub reason: u32,
}

/// `sched:sched_move_numa` field offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoveOffsets {
    pub pid: u32,
    pub tgid: u32,
    pub src_cpu: u32,
    pub src_nid: u32,
    pub dst_cpu: u32,
    pub dst_nid: u32,
}

/// `sched:sched_swap_numa` / `sched:sched_stick_numa` field offsets (src_*/dst_* since 5.10;
/// on older kernels stick has no dst task and those offsets are [`FIELD_ABSENT`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairOffsets {
    pub src_pid: u32,
    pub src_tgid: u32,
    pub src_cpu: u32,
    pub src_nid: u32,
    pub dst_pid: u32,
    pub dst_tgid: u32,
    pub dst_cpu: u32,
    pub dst_nid: u32,
}

/// `migrate:mm_migrate_pages` field offsets; `thp_*` are absent before 5.16.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigrateOffsets {
    pub succeeded: u32,
    pub failed: u32,
    pub thp_succeeded: u32,
    pub thp_failed: u32,
    pub mode: u32,
    pub reason: u32,
}

/// `sched:sched_process_fork` field offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForkOffsets {
    pub parent_pid: u32,
    pub child_pid: u32,
}

// The layouts of 6.8 and later (tracefs formats of 6.18; the BTF `trace_event_raw_*` structs of
// 6.8, 6.12 and 7.3): the loader compares the running kernel's format with them field by
// field, and a kernel that differs (5.10, 6.1 for mm_migrate_pages) keeps the copy.
impl SkipVmaOffsets {
    pub const KNOWN: Self = Self {
        numa_scan_offset: 8,
        vm_start: 16,
        vm_end: 24,
        reason: 32,
    };
}

impl MoveOffsets {
    pub const KNOWN: Self = Self {
        pid: 8,
        tgid: 12,
        src_cpu: 20,
        src_nid: 24,
        dst_cpu: 28,
        dst_nid: 32,
    };
}

impl PairOffsets {
    pub const KNOWN: Self = Self {
        src_pid: 8,
        src_tgid: 12,
        src_cpu: 20,
        src_nid: 24,
        dst_pid: 28,
        dst_tgid: 32,
        dst_cpu: 40,
        dst_nid: 44,
    };
}

impl MigrateOffsets {
    pub const KNOWN: Self = Self {
        succeeded: 8,
        failed: 16,
        thp_succeeded: 24,
        thp_failed: 32,
        mode: 56,
        reason: 60,
    };
}

macro_rules! all_absent {
    ($($t:ident { $($f:ident),* }),*) => {$(
        impl $t {
            /// Every field absent: the program then reads nothing.
            pub const ABSENT: Self = Self { $($f: FIELD_ABSENT),* };
        }
    )*};
}
all_absent!(
    SkipVmaOffsets {
        numa_scan_offset,
        vm_start,
        vm_end,
        reason
    },
    MoveOffsets {
        pid,
        tgid,
        src_cpu,
        src_nid,
        dst_cpu,
        dst_nid
    },
    PairOffsets {
        src_pid,
        src_tgid,
        src_cpu,
        src_nid,
        dst_pid,
        dst_tgid,
        dst_cpu,
        dst_nid
    },
    MigrateOffsets {
        succeeded,
        failed,
        thp_succeeded,
        thp_failed,
        mode,
        reason
    },
    ForkOffsets {
        parent_pid,
        child_pid
    }
);

impl GapOffsets {
    /// Every field absent, and the classic program counting the hook.
    pub const ABSENT: Self = Self {
        vma_numab_state: FIELD_ABSENT,
        prev_scan_seq: FIELD_ABSENT,
        mm_numa_scan_seq: FIELD_ABSENT,
        mm_numa_scan_offset: FIELD_ABSENT,
        task_signal: FIELD_ABSENT,
        nr_threads: FIELD_ABSENT,
        vm_start: FIELD_ABSENT,
        vm_end: FIELD_ABSENT,
        pid_inactive: FIELD_ABSENT,
        whole_hook: 0,
    };
}
