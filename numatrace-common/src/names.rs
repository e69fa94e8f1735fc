//! Names of the programs, maps and globals in the eBPF object, and the sizes of the maps:
//! what the loader looks up (the object must define every one).

#[allow(unused_imports)]
use crate::*;

/// Name of the per-task aggregate map (`ARRAY` of [`TaskEntry`] by slot; [`MAP_TASK_SLOT`]
/// says which slot a pid has).
pub const MAP_TASK_STATS: &str = "TASK_STATS";
/// Which slot of [`MAP_TASK_STATS`] a live task has (`HASH`, key: kernel pid a.k.a. thread id,
/// value: [`SlotRef`]). Inserted at the task's first event (or a swap's, for its other task),
/// never while it exits; removed by its exit alone.
pub const MAP_TASK_SLOT: &str = "TASK_SLOT";
/// The free slots of [`MAP_TASK_STATS`] (`STACK` of [`SlotRef`]): filled by the loader, popped
/// by a task's first event, pushed back by its exit (or by userspace, for an entry whose exit
/// record was lost).
pub const MAP_FREE_SLOTS: &str = "FREE_SLOTS";
/// Per CPU, the last task counted for ([`LastTask`]).
pub const MAP_TASK_LAST: &str = "TASK_LAST";
/// Entries marked exited, for userspace to free once their task is gone (`QUEUE` of
/// [`SlotRef`]).
pub const MAP_MARKED: &str = "MARKED";
/// Name of the ring buffer that carries discrete events to userspace.
pub const MAP_EVENTS: &str = "EVENTS";
/// Name of the per-CPU array of [`Counter`]s.
pub const MAP_COUNTERS: &str = "COUNTERS";
/// Name of the set of followed thread-group ids (`HASH`, key: tgid, value: 1).
pub const MAP_TRACKED_TGIDS: &str = "TRACKED_TGIDS";

/// Default capacity of [`MAP_TASK_STATS`] (and of [`MAP_TASK_SLOT`], [`MAP_FREE_SLOTS`]); the
/// loader overrides it from `--max-tasks`.
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
pub const PROG_KPROBE_CHANGE_PROT_NUMA: &str = "kprobe_change_prot_numa";
pub const PROG_KRETPROBE_CHANGE_PROT_NUMA: &str = "kretprobe_change_prot_numa";
pub const PROG_FENTRY_TASK_NUMA_FAULT: &str = "fentry_task_numa_fault";
pub const PROG_KPROBE_TASK_NUMA_FAULT: &str = "kprobe_task_numa_fault";
pub const PROG_FENTRY_DO_NUMA_PAGE: &str = "fentry_do_numa_page";
pub const PROG_KPROBE_DO_NUMA_PAGE: &str = "kprobe_do_numa_page";
pub const PROG_FENTRY_DO_HUGE_PMD_NUMA_PAGE: &str = "fentry_do_huge_pmd_numa_page";
pub const PROG_KPROBE_DO_HUGE_PMD_NUMA_PAGE: &str = "kprobe_do_huge_pmd_numa_page";
pub const PROG_FENTRY_MIGRATE_MISPLACED: &str = "fentry_migrate_misplaced";
pub const PROG_FEXIT_MIGRATE_MISPLACED: &str = "fexit_migrate_misplaced";
/// The same for `migrate_misplaced_folio(folio, node)` (no vma): fentry programs are checked
/// against the function's BTF parameter count, so each signature has its own pair.
pub const PROG_FENTRY_MIGRATE_MISPLACED_NO_VMA: &str = "fentry_migrate_misplaced_no_vma";
pub const PROG_FEXIT_MIGRATE_MISPLACED_NO_VMA: &str = "fexit_migrate_misplaced_no_vma";
pub const PROG_KPROBE_MIGRATE_MISPLACED: &str = "kprobe_migrate_misplaced";
pub const PROG_KRETPROBE_MIGRATE_MISPLACED: &str = "kretprobe_migrate_misplaced";
pub const PROG_FENTRY_MIGRATION_ENTRY_WAIT: &str = "fentry_migration_entry_wait";
pub const PROG_FEXIT_MIGRATION_ENTRY_WAIT: &str = "fexit_migration_entry_wait";
pub const PROG_KPROBE_MIGRATION_ENTRY_WAIT: &str = "kprobe_migration_entry_wait";
pub const PROG_KRETPROBE_MIGRATION_ENTRY_WAIT: &str = "kretprobe_migration_entry_wait";
pub const PROG_FENTRY_MPOL_MISPLACED: &str = "fentry_mpol_misplaced";
pub const PROG_KPROBE_MPOL_MISPLACED: &str = "kprobe_mpol_misplaced";
/// Per-CPU: the promotion decision in progress (kernel side only; named so that the loader's
/// check covers it).
pub const MAP_PROMOTE_DECISION: &str = "PROMOTE_DECISION";
/// The kernel's promotion decision on a slow-tier hint fault (should_numa_migrate_memory),
/// and the access-time exchange inside it that gives the fault's latency
/// (folio_xchg_last_cpupid, page_cpupid_xchg_last before 6.7).
pub const PROG_FENTRY_SHOULD_MIGRATE: &str = "fentry_should_numa_migrate";
pub const PROG_FEXIT_SHOULD_MIGRATE: &str = "fexit_should_numa_migrate";
pub const PROG_KPROBE_SHOULD_MIGRATE: &str = "kprobe_should_numa_migrate";
pub const PROG_KRETPROBE_SHOULD_MIGRATE: &str = "kretprobe_should_numa_migrate";
pub const PROG_FEXIT_XCHG_LAST_CPUPID: &str = "fexit_xchg_last_cpupid";
pub const PROG_KPROBE_XCHG_LAST_CPUPID: &str = "kprobe_xchg_last_cpupid";
pub const PROG_KRETPROBE_XCHG_LAST_CPUPID: &str = "kretprobe_xchg_last_cpupid";
/// migrate_misplaced_folio_prepare's return (6.11+): a refusal before the migration.
pub const PROG_FEXIT_MIGRATE_PREPARE: &str = "fexit_migrate_prepare";
pub const PROG_KRETPROBE_MIGRATE_PREPARE: &str = "kretprobe_migrate_prepare";
/// CPU-clock sampling (the scan-share fallback where no function hook attaches).
pub const PROG_SAMPLE: &str = "perf_sample_scan";

/// Per-CPU histogram of migrate_misplaced_* latency, log2 nanosecond buckets.
pub const MAP_MIGRATE_LATENCY: &str = "MIGRATE_LATENCY";
pub const LATENCY_BUCKETS: u32 = 64;
/// Per-CPU histogram of pages per hint fault (task_numa_fault `pages`), log2 buckets.
pub const MAP_FAULT_PAGES: &str = "FAULT_PAGES";
pub const FAULT_PAGE_BUCKETS: u32 = 16;
/// Zeroed template for new [`TaskEntry`] values (kept off the 512-byte BPF stack).
pub const MAP_ZERO_STATS: &str = "ZERO_STATS";

/// The task-map iterator (`iter/bpf_map_elem` over [`MAP_TASK_STATS`]; 5.9+, kernel BTF) and
/// its control value ([`TaskIterControl`]).
pub const PROG_ITER_TASKS: &str = "iter_tasks";
pub const MAP_TASK_ITER: &str = "TASK_ITER";

/// Globals for the function hooks.
pub const GLOBAL_TASK_OFFSETS: &str = "TASK_OFFSETS";
pub const GLOBAL_FUNC_CONFIG: &str = "FUNC_CONFIG";
pub const GLOBAL_SCAN_RANGES: &str = "SCAN_RANGES";
/// Non-zero (`u32`): the kernel has bpf_get_current_task_btf (5.11+), so the programs read
/// `current`'s fields, and those of the structs it points to, with plain loads instead of a
/// helper call each. Its own global: each test of it is then one load.
pub const GLOBAL_TYPED_CURRENT: &str = "TYPED_CURRENT";
/// Tracepoints read in place (`CTX_*` bits).
pub const GLOBAL_TP_CTX_READS: &str = "TP_CTX_READS";
pub const GLOBAL_PAGE_OFFSETS: &str = "PAGE_OFFSETS";

/// Hint faults per 2 MiB region per scan pass (seed 001), key [`RegionKey`], value: faults.
pub const MAP_REGION_FAULTS: &str = "REGION_FAULTS";
pub const MAX_REGIONS: u32 = 65536;

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

/// A do-nothing fentry program, loaded against a function only to learn whether the kernel
/// accepts fentry there (and with which errno it refuses).
pub const PROG_FENTRY_PROBE: &str = "fentry_probe";

/// Do-nothing programs of each type (`fentry_probe` is the fentry one), for the benchmark's
/// floor: the cost of any program of that type on the same hook.
pub const PROG_FLOOR_TRACEPOINT: &str = "tp_floor";
pub const PROG_FLOOR_KPROBE: &str = "kprobe_floor";
pub const PROG_FLOOR_KRETPROBE: &str = "kretprobe_floor";
pub const PROG_FLOOR_FEXIT: &str = "fexit_floor";
pub const PROG_FLOOR_BTF_TRACEPOINT: &str = "btf_floor";

/// The benchmark's per-task lookup programs (numatrace-ebpf's `numatrace-lookups` object, never
/// loaded by numatrace), by the prefix of the program type they stand beside: (prefix, [the pid
/// hash's, task storage's, the per-CPU cache's]).
pub const LOOKUP_PROGRAMS: &[(&str, [&str; 3])] = &[
    ("tp_", ["tp_lookup_hash", "tp_lookup_ts", "tp_lookup_cpu"]),
    (
        "kprobe_",
        [
            "kprobe_lookup_hash",
            "kprobe_lookup_ts",
            "kprobe_lookup_cpu",
        ],
    ),
    (
        "kretprobe_",
        [
            "kretprobe_lookup_hash",
            "kretprobe_lookup_ts",
            "kretprobe_lookup_cpu",
        ],
    ),
    (
        "fentry_",
        [
            "fentry_lookup_hash",
            "fentry_lookup_ts",
            "fentry_lookup_cpu",
        ],
    ),
    (
        "fexit_",
        ["fexit_lookup_hash", "fexit_lookup_ts", "fexit_lookup_cpu"],
    ),
    (
        "btf_",
        ["btf_lookup_hash", "btf_lookup_ts", "btf_lookup_cpu"],
    ),
];
/// The maps every copy of the lookup object shares (pinned while the copies load).
pub const LOOKUP_SHARED_MAPS: &[&str] = &[
    "LOOKUP_TASKS",
    "LOOKUP_TASK_STORAGE",
    "LOOKUP_SLOTS",
    "LOOKUP_SLOT_OF",
    "LOOKUP_LAST",
];

/// tp_btf program on `sched_skip_vma_numa`: the scan-sequence gap of pid_inactive skips, and,
/// where it is the hook's only program, everything the classic program does.
pub const PROG_BTF_SKIP_VMA: &str = "btf_skip_vma";
pub const GLOBAL_GAP_OFFSETS: &str = "GAP_OFFSETS";
/// Per-VMA skips by reason, pid_inactive skips and their scan-sequence gaps, key [`VmaKey`],
/// value [`VmaGap`].
pub const MAP_VMA_GAPS: &str = "VMA_GAPS";

/// The one-value array holding [`TierConfig`].
pub const MAP_TIERING: &str = "TIERING";
/// Per node (index), the hot threshold of memory-tiering promotions as last read
/// ([`HOT_THRESHOLD_SEEN`] | ms; 0: never read).
pub const MAP_HOT_THRESHOLD: &str = "HOT_THRESHOLD";
/// Program on `sched:sched_skip_cpuset_numa` (6.16+).
pub const PROG_SKIP_CPUSET: &str = "tp_sched_skip_cpuset_numa";

/// Every program name above: the object must define each.
pub const PROGRAMS: &[&str] = &[
    PROG_SKIP_VMA,
    PROG_ITER_TASKS,
    PROG_MOVE,
    PROG_SWAP,
    PROG_STICK,
    PROG_MIGRATE,
    PROG_FORK,
    PROG_EXIT,
    PROG_FENTRY_TASK_NUMA_WORK,
    PROG_FEXIT_TASK_NUMA_WORK,
    PROG_KPROBE_TASK_NUMA_WORK,
    PROG_KRETPROBE_TASK_NUMA_WORK,
    PROG_FEXIT_CHANGE_PROT_NUMA,
    PROG_KPROBE_CHANGE_PROT_NUMA,
    PROG_KRETPROBE_CHANGE_PROT_NUMA,
    PROG_FENTRY_TASK_NUMA_FAULT,
    PROG_KPROBE_TASK_NUMA_FAULT,
    PROG_FENTRY_DO_NUMA_PAGE,
    PROG_KPROBE_DO_NUMA_PAGE,
    PROG_FENTRY_DO_HUGE_PMD_NUMA_PAGE,
    PROG_KPROBE_DO_HUGE_PMD_NUMA_PAGE,
    PROG_FENTRY_MIGRATE_MISPLACED,
    PROG_FEXIT_MIGRATE_MISPLACED,
    PROG_FENTRY_MIGRATE_MISPLACED_NO_VMA,
    PROG_FEXIT_MIGRATE_MISPLACED_NO_VMA,
    PROG_KPROBE_MIGRATE_MISPLACED,
    PROG_KRETPROBE_MIGRATE_MISPLACED,
    PROG_FENTRY_MIGRATION_ENTRY_WAIT,
    PROG_FEXIT_MIGRATION_ENTRY_WAIT,
    PROG_KPROBE_MIGRATION_ENTRY_WAIT,
    PROG_KRETPROBE_MIGRATION_ENTRY_WAIT,
    PROG_FENTRY_MPOL_MISPLACED,
    PROG_KPROBE_MPOL_MISPLACED,
    PROG_SAMPLE,
    PROG_FENTRY_PROBE,
    PROG_BTF_SKIP_VMA,
    PROG_FLOOR_TRACEPOINT,
    PROG_FLOOR_KPROBE,
    PROG_FLOOR_KRETPROBE,
    PROG_FLOOR_FEXIT,
    PROG_FLOOR_BTF_TRACEPOINT,
    PROG_SKIP_CPUSET,
    PROG_FENTRY_SHOULD_MIGRATE,
    PROG_FEXIT_SHOULD_MIGRATE,
    PROG_KPROBE_SHOULD_MIGRATE,
    PROG_KRETPROBE_SHOULD_MIGRATE,
    PROG_FEXIT_XCHG_LAST_CPUPID,
    PROG_KPROBE_XCHG_LAST_CPUPID,
    PROG_KRETPROBE_XCHG_LAST_CPUPID,
    PROG_FEXIT_MIGRATE_PREPARE,
    PROG_KRETPROBE_MIGRATE_PREPARE,
];

/// Every map name above.
pub const MAPS: &[&str] = &[
    MAP_TASK_STATS,
    MAP_TASK_SLOT,
    MAP_FREE_SLOTS,
    MAP_TASK_LAST,
    MAP_MARKED,
    MAP_EVENTS,
    MAP_COUNTERS,
    MAP_TRACKED_TGIDS,
    MAP_MIGRATE_LATENCY,
    MAP_FAULT_PAGES,
    MAP_ZERO_STATS,
    MAP_TASK_ITER,
    MAP_REGION_FAULTS,
    MAP_MIGRATE_MATRIX,
    MAP_NODE_FAULTS,
    MAP_MIGRATED_PAGES,
    MAP_VMA_STATS,
    MAP_VMA_GAPS,
    MAP_TIERING,
    MAP_HOT_THRESHOLD,
    MAP_PROMOTE_DECISION,
];

/// Every global name above.
pub const GLOBALS: &[&str] = &[
    GLOBAL_CONFIG,
    GLOBAL_SKIP_VMA_OFFSETS,
    GLOBAL_MOVE_OFFSETS,
    GLOBAL_SWAP_OFFSETS,
    GLOBAL_STICK_OFFSETS,
    GLOBAL_MIGRATE_OFFSETS,
    GLOBAL_FORK_OFFSETS,
    GLOBAL_TASK_OFFSETS,
    GLOBAL_FUNC_CONFIG,
    GLOBAL_SCAN_RANGES,
    GLOBAL_TYPED_CURRENT,
    GLOBAL_TP_CTX_READS,
    GLOBAL_PAGE_OFFSETS,
    GLOBAL_NODE_MAP,
    GLOBAL_GAP_OFFSETS,
];
