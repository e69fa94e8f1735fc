//! Types shared by numatrace's eBPF programs and its userspace.
//!
//! Everything here is `#[repr(C)]` and plain data: the kernel side writes it into maps and the
//! ring buffer, userspace reads the same bytes. Values of [`EventKind`] and [`Counter`] are
//! never reused once released, so captures stay readable across versions.
#![no_std]

/// Name of the per-task aggregate map (`LRU_HASH`, key: kernel pid a.k.a. thread id).
pub const MAP_TASK_STATS: &str = "TASK_STATS";
/// Name of the ring buffer that carries discrete events to userspace.
pub const MAP_EVENTS: &str = "EVENTS";
/// Name of the per-CPU array of [`Counter`]s.
pub const MAP_COUNTERS: &str = "COUNTERS";
/// Name of the set of followed thread-group ids (`HASH`, key: tgid, value: 1).
pub const MAP_TRACKED_TGIDS: &str = "TRACKED_TGIDS";

/// Default capacity of [`MAP_TASK_STATS`]; the loader overrides it from `--max-tasks`.
pub const DEFAULT_MAX_TASKS: u32 = 16384;
/// Capacity of [`MAP_TRACKED_TGIDS`].
pub const MAX_TRACKED_TGIDS: u32 = 8192;
/// Default ring buffer size in bytes (a power of two, a multiple of the page size).
pub const DEFAULT_RINGBUF_BYTES: u32 = 4 << 20;

/// Global holding [`Config`].
pub const GLOBAL_CONFIG: &str = "CONFIG";
/// Globals holding the tracepoint field offsets read from tracefs `format` files.
pub const GLOBAL_SKIP_VMA_OFFSETS: &str = "SKIP_VMA_OFFSETS";
pub const GLOBAL_MOVE_OFFSETS: &str = "MOVE_OFFSETS";
pub const GLOBAL_SWAP_OFFSETS: &str = "SWAP_OFFSETS";
pub const GLOBAL_STICK_OFFSETS: &str = "STICK_OFFSETS";
pub const GLOBAL_MIGRATE_OFFSETS: &str = "MIGRATE_OFFSETS";
pub const GLOBAL_FORK_OFFSETS: &str = "FORK_OFFSETS";

/// Program names; each is also the ELF section symbol in the object.
pub const PROG_SKIP_VMA: &str = "tp_sched_skip_vma_numa";
pub const PROG_MOVE: &str = "tp_sched_move_numa";
pub const PROG_SWAP: &str = "tp_sched_swap_numa";
pub const PROG_STICK: &str = "tp_sched_stick_numa";
pub const PROG_MIGRATE: &str = "tp_mm_migrate_pages";
pub const PROG_FORK: &str = "tp_sched_process_fork";
pub const PROG_EXIT: &str = "tp_sched_process_exit";
/// Function-hook programs, by mechanism (see `numatrace::plan`).
pub const PROG_FENTRY_TASK_NUMA_WORK: &str = "fentry_task_numa_work";
pub const PROG_FEXIT_TASK_NUMA_WORK: &str = "fexit_task_numa_work";
pub const PROG_KPROBE_TASK_NUMA_WORK: &str = "kprobe_task_numa_work";
pub const PROG_KRETPROBE_TASK_NUMA_WORK: &str = "kretprobe_task_numa_work";
pub const PROG_FEXIT_CHANGE_PROT_NUMA: &str = "fexit_change_prot_numa";
pub const PROG_KRETPROBE_CHANGE_PROT_NUMA: &str = "kretprobe_change_prot_numa";
pub const PROG_FENTRY_TASK_NUMA_FAULT: &str = "fentry_task_numa_fault";
pub const PROG_KPROBE_TASK_NUMA_FAULT: &str = "kprobe_task_numa_fault";
pub const PROG_FENTRY_DO_NUMA_PAGE: &str = "fentry_do_numa_page";
pub const PROG_KPROBE_DO_NUMA_PAGE: &str = "kprobe_do_numa_page";
pub const PROG_FENTRY_DO_HUGE_PMD_NUMA_PAGE: &str = "fentry_do_huge_pmd_numa_page";
pub const PROG_KPROBE_DO_HUGE_PMD_NUMA_PAGE: &str = "kprobe_do_huge_pmd_numa_page";
pub const PROG_FENTRY_MIGRATE_MISPLACED: &str = "fentry_migrate_misplaced";
pub const PROG_FEXIT_MIGRATE_MISPLACED: &str = "fexit_migrate_misplaced";
pub const PROG_KPROBE_MIGRATE_MISPLACED: &str = "kprobe_migrate_misplaced";
pub const PROG_KRETPROBE_MIGRATE_MISPLACED: &str = "kretprobe_migrate_misplaced";
pub const PROG_FENTRY_MIGRATION_ENTRY_WAIT: &str = "fentry_migration_entry_wait";
pub const PROG_FEXIT_MIGRATION_ENTRY_WAIT: &str = "fexit_migration_entry_wait";
pub const PROG_KPROBE_MIGRATION_ENTRY_WAIT: &str = "kprobe_migration_entry_wait";
pub const PROG_KRETPROBE_MIGRATION_ENTRY_WAIT: &str = "kretprobe_migration_entry_wait";
pub const PROG_FENTRY_MPOL_MISPLACED: &str = "fentry_mpol_misplaced";
pub const PROG_KPROBE_MPOL_MISPLACED: &str = "kprobe_mpol_misplaced";
/// CPU-clock sampling (the scan-share fallback where no function hook attaches).
pub const PROG_SAMPLE: &str = "perf_sample_scan";

/// Entry state of an in-flight function call, keyed by (kind << 32 | pid).
pub const MAP_INFLIGHT: &str = "INFLIGHT";
/// Per-CPU histogram of migrate_misplaced_* latency, log2 nanosecond buckets.
pub const MAP_MIGRATE_LATENCY: &str = "MIGRATE_LATENCY";
pub const LATENCY_BUCKETS: u32 = 64;
/// Per-CPU histogram of pages per hint fault (task_numa_fault `pages`), log2 buckets.
pub const MAP_FAULT_PAGES: &str = "FAULT_PAGES";
pub const FAULT_PAGE_BUCKETS: u32 = 16;
/// Zeroed template for new [`TaskStats`] entries (kept off the 512-byte BPF stack).
pub const MAP_ZERO_STATS: &str = "ZERO_STATS";

/// Globals for the function hooks.
pub const GLOBAL_TASK_OFFSETS: &str = "TASK_OFFSETS";
pub const GLOBAL_FUNC_CONFIG: &str = "FUNC_CONFIG";
pub const GLOBAL_SCAN_RANGES: &str = "SCAN_RANGES";
pub const GLOBAL_PAGE_OFFSETS: &str = "PAGE_OFFSETS";

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

/// Hint faults per 2 MiB region per scan pass (seed 001), key [`RegionKey`], value: faults.
pub const MAP_REGION_FAULTS: &str = "REGION_FAULTS";
pub const MAX_REGIONS: u32 = 65536;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionKey {
    pub tgid: u32,
    /// mm->numa_scan_seq when the fault was taken: one scan pass.
    pub scan_seq: u32,
    /// Fault address >> 21.
    pub region: u64,
}

/// Tolerance of the seed-003 cap check: the programs read sum_exec_runtime just outside the
/// kernel's own reads in task_numa_work, so a tick landing in between (at each end) makes the
/// measured runtime up to two ticks longer than the kernel's (10 ms each at HZ=100).
pub const CAP_TOLERANCE_NS: u64 = 20_000_000;

/// Global holding [`NodeMap`].
pub const GLOBAL_NODE_MAP: &str = "NODE_MAP";
/// Node ranges [`NodeMap`] can hold.
pub const NODE_RANGES: usize = 32;
/// Nodes the migration matrix distinguishes; row `MAX_NODES` is "source unknown".
pub const MAX_NODES: u32 = 16;
/// Per-CPU migration matrix: `[migrated | not migrated][src 0..=MAX_NODES][dst 0..MAX_NODES]`.
pub const MAP_MIGRATE_MATRIX: &str = "MIGRATE_MATRIX";
pub const MATRIX_SLOTS: u32 = 2 * (MAX_NODES + 1) * MAX_NODES;
/// Per-CPU hint faults by the NUMA node of the CPU that took them:
/// `[node 0..MAX_NODES][faults | local faults | pages]`. numatrace's own faults are left out,
/// so that the nodes add up to the totals of the traced tasks.
pub const MAP_NODE_FAULTS: &str = "NODE_FAULTS";
pub const NODE_FAULT_FIELDS: u32 = 3;
pub const NODE_FAULT_SLOTS: u32 = MAX_NODES * NODE_FAULT_FIELDS;
/// Per-CPU pages migrated by hint faults (task_numa_fault with TNF_MIGRATED):
/// `[src 0..=MAX_NODES][dst 0..MAX_NODES]`, row `MAX_NODES`: source unknown. Pages, where
/// [`MAP_MIGRATE_MATRIX`] counts migrate_misplaced calls (folios).
pub const MAP_MIGRATED_PAGES: &str = "MIGRATED_PAGES";
pub const MIGRATED_PAGES_SLOTS: u32 = (MAX_NODES + 1) * MAX_NODES;
/// Per-VMA PTE updates of change_prot_numa, key [`VmaKey`], value [`VmaStats`].
pub const MAP_VMA_STATS: &str = "VMA_STATS";
pub const MAX_VMAS: u32 = 16384;

/// How to find the NUMA node of a `struct page` (the source of a migration): its PFN is
/// `(page - vmemmap) / page_size` (x86-64 SPARSEMEM_VMEMMAP), and sysfs says which node owns
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
}

/// Per-kernel conventions of the function hooks.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuncConfig {
    /// Index of migrate_misplaced_*'s `node` argument (2 before 6.14's `(folio, node)`).
    pub migrate_node_arg: u32,
    /// Parameter count of migrate_misplaced_*: fexit finds the return value after them.
    pub migrate_params: u32,
    /// Non-zero: 0 means migrated (6.10+); zero: 1 means migrated (older).
    pub migrate_ok_is_zero: u32,
    pub _pad: u32,
}

/// Kernel text ranges whose presence on a sampled kernel stack means "NUMA scanning".
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanRanges {
    pub task_numa_work: [u64; 2],
    pub change_prot_numa: [u64; 2],
}

/// Kinds of in-flight calls (high half of the [`MAP_INFLIGHT`] key).
pub const INFLIGHT_TASK_NUMA_WORK: u64 = 1;
pub const INFLIGHT_MIGRATE: u64 = 2;
pub const INFLIGHT_MIGRATION_WAIT: u64 = 3;
/// The current hint fault is on a COW-shared page (set by mpol_misplaced, read when the
/// fault's migration ends, cleared by task_numa_fault).
pub const INFLIGHT_COW_SHARED: u64 = 4;
/// The source node of the current hint fault's successful migration (set when
/// migrate_misplaced_* returns, read by task_numa_fault for the pages matrix).
pub const INFLIGHT_MIGRATE_SRC: u64 = 5;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inflight {
    pub ts_ns: u64,
    pub runtime_ns: u64,
    pub node_stamp: u64,
    pub arg: u64,
    pub arg2: u64,
}

/// task_numa_fault flags.
pub const TNF_MIGRATED: u32 = 0x01;
pub const TNF_SHARED: u32 = 0x04;
pub const TNF_FAULT_LOCAL: u32 = 0x08;
pub const TNF_MIGRATE_FAIL: u32 = 0x10;

/// A do-nothing fentry program, loaded against a function only to learn whether the kernel
/// accepts fentry there (and with which errno it refuses).
pub const PROG_FENTRY_PROBE: &str = "fentry_probe";

/// tp_btf program on `sched_skip_vma_numa`: the scan-sequence gap of pid_inactive skips.
pub const PROG_BTF_SKIP_VMA_GAP: &str = "btf_skip_vma_gap";
pub const GLOBAL_GAP_OFFSETS: &str = "GAP_OFFSETS";
/// Per-VMA pid_inactive skips and their scan-sequence gaps, key [`VmaKey`], value [`VmaGap`].
pub const MAP_VMA_GAPS: &str = "VMA_GAPS";

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
    /// task_struct.signal (a pointer)
    pub task_signal: u32,
    /// signal_struct.nr_threads (int)
    pub nr_threads: u32,
    pub vm_start: u32,
    pub vm_end: u32,
    /// NUMAB_SKIP_PID_INACTIVE's value in this kernel's `enum numa_vmaskip_reason`.
    pub pid_inactive: u32,
}

/// One VMA's pid_inactive skips. `gap` = `mm->numa_scan_seq - prev_scan_seq` at the skip;
/// the seed 002 patch scans a VMA once the gap exceeds the thread count instead of skipping it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmaGap {
    pub vm_end: u64,
    pub skips: u64,
    /// Skips with gap > nr_threads: impossible on a patched kernel.
    pub over_threads: u64,
    /// Skips with gap == nr_threads: the VMA reached the patch's threshold.
    pub at_threshold: u64,
    pub max_gap: u64,
    /// nr_threads at the skip with the largest gap.
    pub max_gap_threads: u64,
    pub first_over_ns: u64,
    pub last_ns: u64,
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
    };
}

/// Runtime switches, set by the loader.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Non-zero: only tasks whose tgid is in [`MAP_TRACKED_TGIDS`] are counted; forks of a
    /// followed process are followed too.
    pub filter_tgids: u32,
    /// Non-zero: emit discrete events on the ring buffer (task exit snapshots are always sent).
    pub emit_events: u32,
    /// Non-zero: send aya-log debug messages from cold paths (fork following, exit snapshots).
    pub debug_log: u32,
    /// numatrace's own tgid: always counted per task (userspace reports it apart, as `self`,
    /// so that traced totals + self add up to the kernel's counters), never in the
    /// system-wide histograms, matrices and per-node arrays.
    pub self_tgid: u32,
}

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
    },
    GapOffsets {
        vma_numab_state,
        prev_scan_seq,
        mm_numa_scan_seq,
        task_signal,
        nr_threads,
        vm_start,
        vm_end,
        pid_inactive
    }
);

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
    /// [`TaskExitEvent`] (ring buffer full); userspace then takes it from the map.
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
    /// cgroup v2 id (`bpf_get_current_cgroup_id`) when the entry was created, refreshed at
    /// each scan and hint fault; 0: never seen running.
    pub cgroup_id: u64,
    /// `task_struct.numa_preferred_nid + 1` at the last scan or hint fault (0: no preferred
    /// node, or never read).
    pub preferred_nid: u32,
    /// NUMA node + 1 of the CPU the task last ran a counted event on (0: unknown).
    pub last_nid: u32,
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

/// Kinds of ring buffer records. Values are never reused.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    SkipVma = 1,
    NumaMove = 2,
    NumaSwap = 3,
    NumaStick = 4,
    MigratePages = 5,
    TaskExit = 6,
    VmaScan = 7,
}

impl EventKind {
    pub const fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::SkipVma,
            2 => Self::NumaMove,
            3 => Self::NumaSwap,
            4 => Self::NumaStick,
            5 => Self::MigratePages,
            6 => Self::TaskExit,
            7 => Self::VmaScan,
            _ => return None,
        })
    }
}

/// First field of every ring buffer record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventHeader {
    /// An [`EventKind`] value.
    pub kind: u32,
    /// The task the event is about (for placement events: the source task).
    pub pid: u32,
    pub tgid: u32,
    pub cpu: u32,
    /// `bpf_ktime_get_ns` (CLOCK_MONOTONIC).
    pub ts_ns: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkipVmaEvent {
    pub hdr: EventHeader,
    pub numa_scan_offset: u64,
    pub vm_start: u64,
    pub vm_end: u64,
    pub reason: u32,
    pub _pad: u32,
}

/// One change_prot_numa call (fexit only: it needs the VMA): when a VMA was scanned.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmaScanEvent {
    pub hdr: EventHeader,
    pub vm_start: u64,
    pub vm_end: u64,
    pub pte_updates: u64,
}

/// `sched_{move,swap,stick}_numa`; for a move, `dst_pid`/`dst_tgid` equal the source.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlacementEvent {
    pub hdr: EventHeader,
    pub src_cpu: i32,
    pub src_nid: i32,
    pub dst_pid: u32,
    pub dst_tgid: u32,
    pub dst_cpu: i32,
    pub dst_nid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigratePagesEvent {
    pub hdr: EventHeader,
    pub succeeded: u64,
    pub failed: u64,
    pub thp_succeeded: u64,
    pub thp_failed: u64,
    pub mode: u32,
    pub reason: u32,
}

/// The final aggregates of a task, sent when it exits so that the map entry can be freed.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskExitEvent {
    pub hdr: EventHeader,
    pub stats: TaskStats,
}

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
    /// An entry/exit pair could not be matched (in-flight map full or entry missed).
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
}

impl Counter {
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
        )
    }
}

/// Length of [`MAP_COUNTERS`].
pub const COUNTER_SLOTS: u32 = 32;

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: all of these are #[repr(C)] plain data with explicit padding fields.
    unsafe impl aya::Pod for Config {}
    unsafe impl aya::Pod for SkipVmaOffsets {}
    unsafe impl aya::Pod for MoveOffsets {}
    unsafe impl aya::Pod for PairOffsets {}
    unsafe impl aya::Pod for MigrateOffsets {}
    unsafe impl aya::Pod for ForkOffsets {}
    unsafe impl aya::Pod for TaskStats {}
    unsafe impl aya::Pod for TaskOffsets {}
    unsafe impl aya::Pod for FuncConfig {}
    unsafe impl aya::Pod for ScanRanges {}
    unsafe impl aya::Pod for Inflight {}
    unsafe impl aya::Pod for PageOffsets {}
    unsafe impl aya::Pod for NodeMap {}
    unsafe impl aya::Pod for VmaKey {}
    unsafe impl aya::Pod for RegionKey {}
    unsafe impl aya::Pod for VmaStats {}
    unsafe impl aya::Pod for GapOffsets {}
    unsafe impl aya::Pod for VmaGap {}
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use core::mem::size_of;

    #[test]
    fn layouts_have_no_implicit_padding() {
        // 4+4+16+4+4, skip_vma[8], then only u64 counters
        assert_eq!(size_of::<TaskStats>(), 32 + 64 + 49 * 8 + 8);
        assert_eq!(size_of::<EventHeader>(), 24);
        assert_eq!(size_of::<SkipVmaEvent>(), 24 + 32);
        assert_eq!(size_of::<PlacementEvent>(), 24 + 24);
        assert_eq!(size_of::<MigratePagesEvent>(), 24 + 40);
        assert_eq!(size_of::<TaskExitEvent>(), 24 + size_of::<TaskStats>());
        assert_eq!(size_of::<VmaScanEvent>(), 24 + 24);
        assert_eq!(size_of::<GapOffsets>(), 8 * 4);
        assert_eq!(size_of::<VmaGap>(), 8 * 8);
    }

    #[test]
    fn event_kinds_round_trip() {
        for k in 1..=7 {
            assert_eq!(EventKind::from_u32(k).map(|e| e as u32), Some(k));
        }
        assert_eq!(EventKind::from_u32(0), None);
        assert_eq!(EventKind::from_u32(8), None);
    }
}
