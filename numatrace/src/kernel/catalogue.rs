//! The catalogue: every hook of the product, what it needs from the kernel and which programs
//! implement it. Plain constants, read by the kernel facts (what to look for) and by the plan
//! (how to attach).

use numatrace_common::*;

use crate::kernel::version::KernelVersion;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    Tracepoint {
        category: &'static str,
        name: &'static str,
        /// First mainline version that has it, when that is recent enough to matter.
        since: Option<KernelVersion>,
    },
    Function {
        /// Candidate symbols in order of preference (renames across versions).
        symbols: &'static [&'static str],
        /// The arguments the programs read, by parameter name (`a|b`: either name): the
        /// kprobe programs are told their positions, found in the running kernel's BTF.
        args: &'static [&'static str],
    },
    /// A BTF-typed tracepoint (tp_btf): the tracepoint's raw arguments, which its tracefs
    /// record does not carry. Needs the classic tracepoint too (its presence is the test).
    BtfTracepoint {
        /// `category:name` of the classic tracepoint.
        tracepoint: &'static str,
        /// The kernel struct fields (BTF `struct.field`) the program reads.
        fields: &'static [&'static str],
    },
    /// CPU-clock sampling of kernel stacks: the scan-share fallback.
    Sampling,
}

/// The eBPF programs that implement a hook, per mechanism.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Programs {
    None,
    Tracepoint(&'static str),
    /// `fentry_*`/`fexit_*` programs, one set per signature they are written for, and
    /// `kprobe_*`/`kretprobe_*` programs; the prefix says the type.
    Function {
        fentry: &'static [FentryVariant],
        kprobe: &'static [&'static str],
    },
    PerfEvent(&'static str),
    TpBtf(&'static str),
}

/// fentry programs and the signature they read: the verifier checks each argument read
/// against the function's BTF, so a signature needs programs of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FentryVariant {
    /// Parameter names in order (`a|b`: either); empty: the programs read no argument, any
    /// signature will do.
    pub params: &'static [&'static str],
    pub programs: &'static [&'static str],
}

impl FentryVariant {
    /// The parameter names of `sig` are the ones these programs read, in order.
    pub fn matches(&self, sig: &[&str]) -> bool {
        self.params.is_empty()
            || (self.params.len() == sig.len()
                && self
                    .params
                    .iter()
                    .zip(sig)
                    .all(|(want, got)| want.split('|').any(|w| w == *got)))
    }
}

#[derive(Clone, Copy, Debug)]
pub struct HookSpec {
    /// `category:name` for tracepoints, the function name (or `a|b`) for functions.
    pub name: &'static str,
    pub kind: HookKind,
    /// The eBPF programs implementing it.
    pub programs: Programs,
    /// What it contributes, for `probes`.
    pub what: &'static str,
}

const fn tp(
    category: &'static str,
    name: &'static str,
    full: &'static str,
    since: Option<KernelVersion>,
    program: &'static str,
    what: &'static str,
) -> HookSpec {
    HookSpec {
        name: full,
        kind: HookKind::Tracepoint {
            category,
            name,
            since,
        },
        programs: Programs::Tracepoint(program),
        what,
    }
}

const fn func(
    name: &'static str,
    symbols: &'static [&'static str],
    args: &'static [&'static str],
    fentry: &'static [FentryVariant],
    kprobe: &'static [&'static str],
    what: &'static str,
) -> HookSpec {
    HookSpec {
        name,
        kind: HookKind::Function { symbols, args },
        programs: Programs::Function { fentry, kprobe },
        what,
    }
}

/// The classic `sched_skip_vma_numa` hook and its tp_btf twin (seed 002's gaps; where it
/// attaches, the one program on the tracepoint: see `plan`).
pub const SKIP_VMA_HOOK: &str = "sched:sched_skip_vma_numa";
pub const SKIP_VMA_BTF_HOOK: &str = "tp_btf:sched_skip_vma_numa";

/// Every hook of the product, in the order `probes` lists them.
pub const HOOKS: &[HookSpec] = &[
    tp(
        "sched",
        "sched_skip_vma_numa",
        SKIP_VMA_HOOK,
        Some(KernelVersion::new(6, 7, 0)),
        PROG_SKIP_VMA,
        "VMAs the NUMA scanner skipped, by reason",
    ),
    tp(
        "sched",
        "sched_move_numa",
        "sched:sched_move_numa",
        None,
        PROG_MOVE,
        "task moved to its preferred node",
    ),
    tp(
        "sched",
        "sched_swap_numa",
        "sched:sched_swap_numa",
        None,
        PROG_SWAP,
        "two tasks swapped across nodes",
    ),
    tp(
        "sched",
        "sched_stick_numa",
        "sched:sched_stick_numa",
        None,
        PROG_STICK,
        "placement attempt that left the task where it was",
    ),
    tp(
        "migrate",
        "mm_migrate_pages",
        "migrate:mm_migrate_pages",
        None,
        PROG_MIGRATE,
        "page migrations: NUMA (numa_misplaced, incl. promotions) and demotions",
    ),
    tp(
        "sched",
        "sched_skip_cpuset_numa",
        "sched:sched_skip_cpuset_numa",
        Some(KernelVersion::new(6, 16, 0)),
        PROG_SKIP_CPUSET,
        "scans skipped because the task's cpuset allows one node",
    ),
    tp(
        "sched",
        "sched_process_fork",
        "sched:sched_process_fork",
        None,
        PROG_FORK,
        "follows children of a traced command",
    ),
    tp(
        "sched",
        "sched_process_exit",
        "sched:sched_process_exit",
        None,
        PROG_EXIT,
        "hands over a task's final counts and frees its entry",
    ),
    HookSpec {
        name: SKIP_VMA_BTF_HOOK,
        kind: HookKind::BtfTracepoint {
            tracepoint: SKIP_VMA_HOOK,
            fields: GAP_FIELDS,
        },
        programs: Programs::TpBtf(PROG_BTF_SKIP_VMA),
        what: "scan-sequence gap of pid_inactive skips (seed 002)",
    },
    func(
        "task_numa_work",
        &["task_numa_work"],
        &[],
        &[FentryVariant {
            params: &[],
            programs: &[PROG_FENTRY_TASK_NUMA_WORK, PROG_FEXIT_TASK_NUMA_WORK],
        }],
        &[PROG_KPROBE_TASK_NUMA_WORK, PROG_KRETPROBE_TASK_NUMA_WORK],
        "PTE scan calls, time and runtime share",
    ),
    func(
        "change_prot_numa",
        &["change_prot_numa"],
        // The kprobe keeps the vma for the kretprobe (per-VMA split).
        &["vma"],
        &[FentryVariant {
            params: &["vma", "addr", "end"],
            programs: &[PROG_FEXIT_CHANGE_PROT_NUMA],
        }],
        &[
            PROG_KPROBE_CHANGE_PROT_NUMA,
            PROG_KRETPROBE_CHANGE_PROT_NUMA,
        ],
        "PTEs made PROT_NONE per scan",
    ),
    func(
        "task_numa_fault",
        &["task_numa_fault"],
        // last_cpupid: always first (read at a fixed position; its name is checked).
        &["last_cpupid", "mem_node", "pages", "flags"],
        &[FentryVariant {
            params: &["last_cpupid", "mem_node", "pages", "flags"],
            programs: &[PROG_FENTRY_TASK_NUMA_FAULT],
        }],
        &[PROG_KPROBE_TASK_NUMA_FAULT],
        "every hint fault: node, pages, local/remote, migrated",
    ),
    func(
        "do_numa_page",
        &["do_numa_page"],
        &[],
        &[FentryVariant {
            params: &[],
            programs: &[PROG_FENTRY_DO_NUMA_PAGE],
        }],
        &[PROG_KPROBE_DO_NUMA_PAGE],
        "4K/mTHP hint fault entry",
    ),
    func(
        "do_huge_pmd_numa_page",
        &["do_huge_pmd_numa_page"],
        &[],
        &[FentryVariant {
            params: &[],
            programs: &[PROG_FENTRY_DO_HUGE_PMD_NUMA_PAGE],
        }],
        &[PROG_KPROBE_DO_HUGE_PMD_NUMA_PAGE],
        "THP hint fault entry",
    ),
    func(
        "mpol_misplaced",
        &["mpol_misplaced"],
        // (page, vma, addr) up to 6.6, (folio, vma, addr) 6.8, (folio, vmf, addr) from 6.11.
        &["page|folio", "vma|vmf", "addr"],
        &[FentryVariant {
            params: &["page|folio", "vma|vmf", "addr"],
            programs: &[PROG_FENTRY_MPOL_MISPLACED],
        }],
        &[PROG_KPROBE_MPOL_MISPLACED],
        "faulted page and VMA: COW-shared pages",
    ),
    func(
        "should_numa_migrate_memory",
        &["should_numa_migrate_memory"],
        // (p, page, src_nid, dst_cpu) up to 6.6, (p, folio, src_nid, dst_cpu) from 6.7: the
        // same positions since 3.x, read fixed by the kprobe; the name is checked.
        &["src_nid"],
        &[FentryVariant {
            params: &["p", "page|folio", "src_nid", "dst_cpu"],
            programs: &[PROG_FENTRY_SHOULD_MIGRATE, PROG_FEXIT_SHOULD_MIGRATE],
        }],
        &[PROG_KPROBE_SHOULD_MIGRATE, PROG_KRETPROBE_SHOULD_MIGRATE],
        "promotion decisions: hot, rate-limited, not hot, free room",
    ),
    func(
        "folio_xchg_last_cpupid|page_cpupid_xchg_last",
        // Out of line where last_cpupid lives in page flags (Debian's kernels: NR_CPUS 8192).
        &["folio_xchg_last_cpupid", "page_cpupid_xchg_last"],
        // (page|folio, cpupid) in every version: read at fixed positions, the name checked.
        &["cpupid"],
        &[FentryVariant {
            params: &["page|folio", "cpupid"],
            programs: &[PROG_FEXIT_XCHG_LAST_CPUPID],
        }],
        &[
            PROG_KPROBE_XCHG_LAST_CPUPID,
            PROG_KRETPROBE_XCHG_LAST_CPUPID,
        ],
        "slow-tier hint-fault latency (access time exchanged in a decision)",
    ),
    func(
        "migrate_misplaced_folio|_page",
        &["migrate_misplaced_folio", "migrate_misplaced_page"],
        &["page|folio", "node"],
        &[
            // (page, vma, node) up to 6.6, (folio, vma, node) 6.8 to 6.13.
            FentryVariant {
                params: &["page|folio", "vma", "node"],
                programs: &[PROG_FENTRY_MIGRATE_MISPLACED, PROG_FEXIT_MIGRATE_MISPLACED],
            },
            // (folio, node) from 6.14.
            FentryVariant {
                params: &["folio", "node"],
                programs: &[
                    PROG_FENTRY_MIGRATE_MISPLACED_NO_VMA,
                    PROG_FEXIT_MIGRATE_MISPLACED_NO_VMA,
                ],
            },
        ],
        &[
            PROG_KPROBE_MIGRATE_MISPLACED,
            PROG_KRETPROBE_MIGRATE_MISPLACED,
        ],
        "migration attempts, outcome, latency",
    ),
    func(
        "migrate_misplaced_folio_prepare",
        // 6.11+ (before, migrate_misplaced_* refuses inside itself): only its result is read.
        &["migrate_misplaced_folio_prepare"],
        &[],
        &[FentryVariant {
            params: &["folio", "vma", "node"],
            programs: &[PROG_FEXIT_MIGRATE_PREPARE],
        }],
        &[PROG_KRETPROBE_MIGRATE_PREPARE],
        "hint-fault migrations refused before they start (target node nearly full, ...)",
    ),
    func(
        "migration_entry_wait",
        &["migration_entry_wait"],
        &[],
        &[FentryVariant {
            params: &[],
            programs: &[
                PROG_FENTRY_MIGRATION_ENTRY_WAIT,
                PROG_FEXIT_MIGRATION_ENTRY_WAIT,
            ],
        }],
        &[
            PROG_KPROBE_MIGRATION_ENTRY_WAIT,
            PROG_KRETPROBE_MIGRATION_ENTRY_WAIT,
        ],
        "tasks stalled on a page under migration",
    ),
    HookSpec {
        name: "sampling:cpu-clock",
        kind: HookKind::Sampling,
        programs: Programs::PerfEvent(PROG_SAMPLE),
        what: "sampled scan share where task_numa_work cannot be hooked",
    },
];

/// What the seed 002 gap program reads (`vma_numab_state.prev_scan_seq` exists from 6.8).
pub const GAP_FIELDS: &[&str] = &[
    "vm_area_struct.numab_state",
    "vma_numab_state.prev_scan_seq",
    "mm_struct.numa_scan_seq",
    "task_struct.signal",
    "signal_struct.nr_threads",
    "vm_area_struct.vm_start",
    "vm_area_struct.vm_end",
];
