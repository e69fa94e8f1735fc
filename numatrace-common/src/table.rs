//! The one table of numatrace's counters, and the feeds (hooks) that fill them.
//!
//! Every count the kernel programs keep per task is declared here once, by its one name
//! (`group.name`, e.g. `migrations.refused`): the kernel side's field (`(*t).migrations.refused`),
//! the model's field and JSON path (`migrations.refused` in every task, process, cgroup and total),
//! its `kernel_seen` key where the kernel side also keeps a system-wide total, the hooks that feed
//! it, its unit, the words a report gives it (`WORDS N`) and its doc line. What derives from it:
//! - here: [`TaskStats`]'s counter groups ([`stats`]), the [`Counter`] slots (the enum, its
//!   length, [`Counter::ALL`], [`COUNTER_SLOTS`], [`Counter::is_tally`]), [`Feed`] and its hooks,
//!   and [`COUNTERS`] / [`SYSTEM`], the table as data for userspace;
//! - in numatrace: the model's counter structs and `Counts::from_stats`, the JSON fields left out
//!   when a feed is not measured, `kernel_seen`, the Prometheus families of counters without a
//!   family of their own, the words `stat` and `top` print for counters without a sentence of
//!   their own, and the generated parts of docs/json-schema.md.
//!
//! A row: `KIND name [Feed, unit, "words"; TWIN SLOT Variant]`, the part after `;` only where the
//! kernel side also counts it system-wide in [`MAP_COUNTERS`] (slot numbers are never reused:
//! captures keep the counters by slot): TWIN `sum` where the slot is the sum of the per-task
//! counter (the kernel side's `bump!` adds to both), `seen` where its tracepoint counts every
//! event in the slot before looking the task up (an independent count: events whose task found
//! no entry are in it too). KIND says where the value lives and how it combines:
//! - `sum`: a count the kernel side keeps; added (tasks into a process) and differenced (two
//!   snapshots);
//! - `max`: a level the kernel side keeps (longest call, scan sequence): the larger when adding,
//!   the later value in a difference;
//! - `computed`: a count userspace computes from the task's other kernel values (run time): added
//!   and differenced like `sum`;
//! - `derived`: a count computed from other counts (remote = faults - local), recomputed after
//!   adding or differencing;
//! - `ratio`: an `Option<f64>` computed from sums, likewise;
//! - `level`: an `Option<f64>` measured on one task, the later value in a difference.
//!
//! Only `sum` and `max` have a kernel field that holds a value (the others are zero-sized there).
//!
//! A system row: `KIND name [Feed; SLOT Variant]`: a counter the kernel side keeps only
//! system-wide.
//! KIND: `tally` (what the traced tasks did: numatrace's own activity is left out), `own`
//! (numatrace's bookkeeping), `loss` (something not counted or delivered: in `dropped`),
//! `reclaim` (reclaim's work, on behalf of no task).

/// Calls the macro `$cb` with the whole table (the X-macro pattern): each user of the table
/// declares a macro that takes this grammar and expands it into what it needs.
#[macro_export]
macro_rules! counter_table {
    ($cb:ident) => {
        $cb! {
        feeds {
            /// What every program keeps (bookkeeping, losses): needs no particular hook.
            Always always [];
            /// Skipped VMAs by reason (`skipped_vmas*`, a VMA's `skips`).
            SkipVma skip_vma [["sched:sched_skip_vma_numa"]];
            /// pid_inactive scan-sequence gaps (seed 002: a VMA's `pid_inactive`).
            SkipGap skip_gap [["tp_btf:sched_skip_vma_numa"]];
            /// `placement.moves`.
            Moves moves [["sched:sched_move_numa"]];
            /// `placement.swaps_out`, `swaps_in`.
            Swaps swaps [["sched:sched_swap_numa"]];
            /// `placement.sticks`, `stick_no_target`.
            Sticks sticks [["sched:sched_stick_numa"]];
            /// `migrations.calls`, `pages_ok`, `pages_failed`, `thp_*` (NUMA-misplaced
            /// migrate_pages).
            MigratePages migrate_pages [["migrate:mm_migrate_pages"]];
            /// Exit snapshots (`kernel_seen.exit_snapshots`).
            Exits exits [["sched:sched_process_exit"]];
            /// task_numa_work: `scan.calls` to `cap_violations`, run time, `share`,
            /// `wall_share`.
            Scan scan [["task_numa_work"]];
            /// CPU samples: `scan.samples`, `scan_samples`, `sampled_share`.
            Samples samples [["sampling:cpu-clock"]];
            /// The scan share, exact (task_numa_work) or sampled (SCAN%).
            ScanShare scan_share [["task_numa_work", "sampling:cpu-clock"]];
            /// change_prot_numa: `scan.pte_updates`, `prot_numa_calls`, a VMA's PTE updates and
            /// calls.
            Pte pte [["change_prot_numa"]];
            /// task_numa_fault: hint faults, their pages and locality, pages they migrated
            /// (also per node and node pair).
            HintFaults hint_faults [["task_numa_fault"]];
            /// Pages migrated, from migrate_pages or from hint faults (top's MIGR/s).
            PagesMigrated pages_migrated [["migrate:mm_migrate_pages", "task_numa_fault"]];
            /// `hint_faults.numa_page_entries`.
            NumaPage numa_page [["do_numa_page"]];
            /// `hint_faults.huge_pmd_numa_entries`.
            HugePmdNumaPage huge_pmd_numa_page [["do_huge_pmd_numa_page"]];
            /// mpol_misplaced: hint faults on COW-shared pages.
            Cow cow [["mpol_misplaced"]];
            /// mpol_misplaced: hint faults per 2 MiB region and scan pass (seed 001), counted
            /// for the commands that report them (`stat --json`, `check`, `record`).
            Regions regions [["mpol_misplaced"]];
            /// COW-shared faults that migrated: mpol_misplaced marks them, migrate_misplaced
            /// counts.
            CowMigrated cow_migrated [["mpol_misplaced"], ["migrate_misplaced_folio|_page"]];
            /// migrate_misplaced calls: attempts, outcome, latency, per node and node pair.
            MigrateMisplaced migrate_misplaced [["migrate_misplaced_folio|_page"]];
            /// Pages migrated out of a node: the source node is known from migrate_misplaced.
            MigratedFrom migrated_from [["task_numa_fault"], ["migrate_misplaced_folio|_page"]];
            /// migration_entry_wait: `migrations.stalls`, `stall_ns`.
            Stalls stalls [["migration_entry_wait"]];
            /// Promotions: task_numa_fault counts the pages, migrate_misplaced tells where they
            /// came from (and counts the failed attempts).
            Promotions promotions [["task_numa_fault"], ["migrate_misplaced_folio|_page"]];
            /// `sched_skip_cpuset_numa` (6.16+): `scan.cpuset_skips`.
            SkipCpuset skip_cpuset [["sched:sched_skip_cpuset_numa"]];
            /// The kernel's promotion decisions (should_numa_migrate_memory), counted in pages
            /// at the fault's task_numa_fault, and their hint-fault latency (the access-time
            /// exchange inside a decision, without which no refusal can be classed): hot,
            /// rate-limited, not hot, free room.
            PromoteDecisions promote_decisions [
                ["should_numa_migrate_memory"],
                ["task_numa_fault"],
                ["folio_xchg_last_cpupid|page_cpupid_xchg_last"]
            ];
            /// migrate_misplaced_folio_prepare (6.11+): `migrations.refused`.
            MigrateRefused migrate_refused [["migrate_misplaced_folio_prepare"]];
        }
        groups {
            placement Placement {
                /// Moved to its preferred node (sched_move_numa).
                sum moves [Moves, events, "moves to the preferred node"; seen 6 SeenMove];
                /// Swapped with a task on another node, as the initiator (sched_swap_numa).
                sum swaps_out [Swaps, events, "swaps started"; seen 7 SeenSwap];
                /// Swapped with a task on another node, as the other task.
                sum swaps_in [Swaps, events, "swaps by another task"];
                /// Placement attempts that changed nothing (sched_stick_numa).
                sum sticks [Sticks, events, "sticks"; seen 8 SeenStick];
                /// Of those, attempts with no target CPU at all.
                sum stick_no_target [Sticks, events, "sticks without a target CPU"];
            }
            migrations Migrations {
                /// migrate_pages() calls with reason numa_misplaced (mm_migrate_pages).
                sum calls [MigratePages, calls, "migrate_pages calls"; seen 9 SeenMigrateNuma];
                /// Pages (any size) migrated by those calls.
                sum pages_ok [MigratePages, pages, "pages migrated"];
                /// Pages (any size) those calls did not migrate.
                sum pages_failed [MigratePages, pages, "pages not migrated"];
                /// Of the pages migrated, THPs.
                sum thp_ok [MigratePages, pages, "THPs migrated"];
                /// Of the pages not migrated, THPs.
                sum thp_failed [MigratePages, pages, "THPs not migrated"];
                /// migrate_misplaced_folio/_page calls (function hook).
                sum attempts [MigrateMisplaced, calls, "migrate_misplaced calls"; sum 18 MigrateAttempts];
                /// Of those, calls that migrated.
                sum succeeded [MigrateMisplaced, calls, "migrate_misplaced calls that migrated"; sum 19 MigrateSucceeded];
                /// Of those, calls that did not migrate.
                sum not_migrated [MigrateMisplaced, calls, "not migrated"];
                /// Hint-fault migrations refused before they started
                /// (migrate_misplaced_folio_prepare, 6.11+: the target node nearly full — in
                /// tiering mode kswapd is woken to demote — a dirty or shared executable file
                /// folio, or the folio could not be isolated); with `not_migrated`, the hint
                /// faults whose migration failed (TNF_MIGRATE_FAIL).
                sum refused [MigrateRefused, calls, "refused before starting"; sum 46 MigrateRefused];
                /// Σ time in migrate_misplaced_folio/_page.
                sum latency_ns_total [MigrateMisplaced, ns, "time in migrate_misplaced"];
                /// Mean time in migrate_misplaced_folio/_page per call.
                ratio latency_ns_mean [MigrateMisplaced, ns, "mean time in migrate_misplaced"];
                /// migration_entry_wait: stalls on a page under migration.
                sum stalls [Stalls, events, "stalls on pages under migration"; sum 20 MigrationWaits];
                /// Σ time stalled on pages under migration.
                sum stall_ns [Stalls, ns, "time stalled"];
            }
            scan Scan {
                /// task_numa_work calls.
                sum calls [Scan, calls, "task_numa_work calls"; sum 17 ScanCalls];
                /// Σ time inside task_numa_work.
                sum time_ns [Scan, ns, "time in task_numa_work"];
                /// The longest task_numa_work call (since first seen).
                max max_ns [Scan, ns, "longest task_numa_work call"];
                /// Σ Δse.sum_exec_runtime across the calls (seed 003: node_stamp should advance
                /// 32× the runtime spent scanning).
                sum runtime_in_scan_ns [Scan, ns, "run time in task_numa_work"];
                /// Σ Δnode_stamp across the calls.
                sum node_stamp_advance_ns [Scan, ns, "node_stamp advance"];
                /// Calls entered with node_stamp > sum_exec_runtime (seed 003 invariant 1;
                /// expected 0), from a task's second seen call on, other than `requeued_calls`.
                sum stamp_violations [Scan, calls, "node_stamp>runtime violations"];
                /// Calls queued while the task's previous call ran (longer than the scan
                /// period) and entered with node_stamp as it left it, after a call whose
                /// runtime had passed the node_stamp it ran under: the kernel's course, not the
                /// underflow.
                sum requeued_calls [Scan, calls, "re-queued calls"];
                /// Calls during which runtime advanced (the 3% cap applies).
                sum cap_calls [Scan, calls, "calls under the cap"];
                /// Of those, calls after which node_stamp had advanced less than 32x that
                /// runtime (seed 003's cap; expected 0).
                sum cap_violations [Scan, calls, "cap violations"];
                /// The task's run time over the window, from its sum_exec_runtime (first to last
                /// seen).
                computed task_runtime_ns [Scan, ns, "run time"];
                /// runtime_in_scan_ns / task_runtime_ns: the share of the task's CPU time spent
                /// in task_numa_work (what seed 003 caps near 3%; tick-granular, like
                /// sum_exec_runtime).
                ratio share [Scan, ratio, "scan share"];
                /// time_ns / task_runtime_ns: wall-clock time inside task_numa_work per CPU
                /// time; larger than `share` when the task is preempted while scanning.
                ratio wall_share [Scan, ratio, "wall-clock scan share"];
                /// The CPU share up to the start of the latest call, since the task was first
                /// seen: what seed 003's cap bounds (the latest call has not been followed by
                /// its 32x yet). Per task only.
                level share_between_calls [Scan, ratio, "scan share between calls"];
                /// mm->numa_scan_seq after the last scan: full passes over the address space
                /// (the highest across tasks when summed).
                max scan_seq [Scan, events, "scan passes"];
                /// PTEs made PROT_NONE (change_prot_numa; a huge PMD counts 512).
                sum pte_updates [Pte, pages, "PTEs made PROT_NONE"; sum 15 PteUpdates];
                /// change_prot_numa calls.
                sum prot_numa_calls [Pte, calls, "change_prot_numa calls"];
                /// Scans skipped because the task's cpuset allows one node
                /// (`sched_skip_cpuset_numa`, 6.16+).
                sum cpuset_skips [SkipCpuset, events, "scans skipped for a one-node cpuset"; seen 35 SeenSkipCpuset];
                /// CPU-clock samples of the task.
                sum samples [Samples, events, "CPU samples"; sum 21 Samples];
                /// Of those, samples inside task_numa_work.
                sum scan_samples [Samples, events, "CPU samples in task_numa_work"; sum 22 ScanSamples];
                /// scan_samples / samples.
                ratio sampled_share [Samples, ratio, "sampled scan share"];
            }
            hint_faults HintFaults {
                /// NUMA hint faults (task_numa_fault).
                sum faults [HintFaults, faults, "hint faults"; sum 11 HintFaults];
                /// Of those, faults on pages of the faulting CPU's node.
                sum local [HintFaults, faults, "local"; sum 12 HintFaultsLocal];
                /// faults - local.
                derived remote [HintFaults, faults, "remote"];
                /// Pages those faults covered.
                sum pages [HintFaults, pages, "pages"; sum 13 HintPages];
                /// Faults on one page (4K).
                sum faults_4k [HintFaults, faults, "4K"];
                /// Faults on 512 pages (PMD THP).
                sum faults_thp [HintFaults, faults, "THP"];
                /// Faults on another number of pages (mTHP / large folio).
                sum faults_large [HintFaults, faults, "large folio"];
                /// Pages whose fault migrated them (TNF_MIGRATED).
                sum migrated_pages [HintFaults, pages, "pages migrated"; sum 14 HintMigratedPages];
                /// Faults whose migration failed (TNF_MIGRATE_FAIL).
                sum migrate_failed [HintFaults, faults, "faults that failed to migrate"];
                /// do_numa_page entries.
                sum numa_page_entries [NumaPage, calls, "do_numa_page entries"];
                /// do_huge_pmd_numa_page entries.
                sum huge_pmd_numa_entries [HugePmdNumaPage, calls, "do_huge_pmd_numa_page entries"];
                /// Hint faults on COW-shared pages (mpol_misplaced: copy-on-write mapping,
                /// mapcount > 1). Seed 000 expects ~0 (4K pages).
                sum cow_shared [Cow, faults, "faults on COW-shared pages"; sum 23 CowSharedFaults];
                /// How many of those pages were migrated.
                sum cow_shared_migrated [CowMigrated, pages, "COW-shared pages migrated"; sum 24 CowSharedMigrations];
                /// Of `cow_shared`, faults on large folios (THP), which the kernel's skip does
                /// not cover.
                sum cow_shared_large [Cow, faults, "faults on COW-shared large folios"];
            }
            tiering TierCounts {
                /// Pages the hint faults promoted: migrated from a node outside the top tier
                /// into it, counted where the kernel counts `pgpromote_success` (6.12+: only
                /// while the mode has the tiering bit).
                sum promoted_pages [Promotions, pages, "pages promoted"; sum 36 PromotedPages];
                /// Hint faults on slow-tier pages whose migration was refused (6.12+:
                /// migrate_misplaced_folio_prepare, e.g. the top node short of free pages) or
                /// failed (TNF_MIGRATE_FAIL).
                sum promote_failed [HintFaults, faults, "promotions refused or failed"];
                /// Hint faults on pages of a node outside the top tier.
                sum slow_tier_faults [HintFaults, faults, "slow-tier hint faults"; sum 37 SlowTierFaults];
                /// Pages of slow-tier faults the kernel judged hot (hint-fault latency under the
                /// node's hot threshold) and let through to migrate
                /// (should_numa_migrate_memory, in tiering mode).
                sum promote_hot [PromoteDecisions, pages, "hot pages let through"; sum 39 PromoteHot];
                /// Hot, and held back by the promotion rate limit.
                sum promote_rate_limited [PromoteDecisions, pages, "hot pages held back by the rate limit"; sum 40 PromoteRateLimited];
                /// Not hot (latency at or over the threshold).
                sum promote_not_hot [PromoteDecisions, pages, "pages not hot"; sum 41 PromoteNotHot];
                /// Let through past both because the node had free room (as the kernel counts
                /// `pgpromote_candidate_nrl`, 6.18+).
                sum promote_free_room [PromoteDecisions, pages, "pages let through for free room"; sum 42 PromoteFreeRoom];
                /// Hot pages, let through or held back: as the kernel counts
                /// `pgpromote_candidate`.
                derived promote_candidates [PromoteDecisions, pages, "promotion candidates"];
                /// Slow-tier hint faults whose latency was measured (ms from the scanner's stamp
                /// of the page to the fault).
                sum hint_latency_faults [PromoteDecisions, faults, "faults with a measured latency"; sum 43 HintLatencyFaults];
                /// Σ their latency.
                sum hint_latency_ms_total [PromoteDecisions, ms, "hint-fault latency"; sum 44 HintLatencyMs];
                /// Their mean latency.
                ratio hint_latency_ms_mean [PromoteDecisions, ms, "mean hint-fault latency"];
            }
        }
        system {
            /// A ring buffer reservation failed: a discrete event was not delivered.
            loss ringbuf_full [Always; 0 RingbufFull];
            /// A task entry could not be created (every slot of the task table held a task, or
            /// the kernel refused a slot or the pid's key): that event was not counted per task.
            loss task_map_full [Always; 1 TaskMapFull];
            /// Task entries created (userspace checks against it that none went missing).
            own task_entries_created [Always; 2 TasksCreated];
            /// A forked child of a followed process could not be followed.
            loss tracked_map_full [Always; 3 TrackedMapFull];
            /// A tracepoint's record could not be copied (its fields read as absent), or the
            /// tp_btf skip program could not read its VMA's bounds.
            loss read_failed [Always; 4 ReadFailed];
            /// sched_skip_vma_numa events (any reason): Σ `skipped_vmas`.
            tally skip_vma [SkipVma; 5 SeenSkipVma];
            /// Task exit snapshots handed to userspace.
            own exit_snapshots [Exits; 10 ExitSnapshots];
            /// An entry/exit pair could not be matched: a kretprobe return the kernel did not
            /// report (the next call found its slot still in use).
            loss inflight_lost [Always; 16 InflightLost];
            /// A VMA's PTE updates, or a skip of it by reason, could not be recorded (a
            /// per-VMA map full).
            loss vma_map_full [Always; 25 VmaMapFull];
            /// pid_inactive skips the gap program saw.
            tally skip_gap [SkipGap; 26 SeenSkipGap];
            /// pid_inactive skips the gap program could not read or record.
            loss skip_gap_lost [SkipGap; 27 SkipGapLost];
            /// sched_skip_vma_numa events (any reason) the tp_btf program saw without counting
            /// the hook itself (it does wherever the classic program could attach too, and
            /// then this stays 0): where the classic tracepoint's format lacks a field, the
            /// only count of skips.
            tally skip_vma_tp_btf [SkipGap; 28 SeenSkipVmaBtf];
            /// A CPU or page on a NUMA node beyond `MAX_NODES`: left out of the per-node
            /// arrays.
            loss node_out_of_range [Always; 29 NodeOutOfRange];
            /// `mm_migrate_pages` with reason MR_DEMOTION, system-wide (reclaim demotes on
            /// behalf of no followed task): calls.
            reclaim demote_calls [MigratePages; 30 DemoteCalls];
            /// Pages demoted.
            reclaim demoted_pages [MigratePages; 31 DemotePages];
            /// Pages not demoted.
            reclaim demote_failed [MigratePages; 32 DemoteFailed];
            /// Pages demoted by kswapd.
            reclaim demoted_kswapd [MigratePages; 33 DemoteKswapd];
            /// Pages demoted by khugepaged (the rest: direct or proactive reclaim).
            reclaim demoted_khugepaged [MigratePages; 34 DemoteKhugepaged];
            /// Pages hint faults migrated into a top-tier node, where a slower tier exists,
            /// from a node that could not be told (memory onlined after start, e.g. dax/kmem,
            /// or no node ranges): possibly promotions, not counted as such.
            loss promote_source_unknown [Promotions; 38 PromoteSourceUnknown];
            /// Pages of promotion decisions numatrace could not class: a refusal whose latency
            /// or threshold could not be read, or a decision its fault never counted
            /// (task_numa_fault not reached, or reached for another page).
            loss promote_unjudged [PromoteDecisions; 45 PromoteUnjudged];
        }
        }
    };
}

/// What a table row's KIND is (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountKind {
    Sum,
    Max,
    Computed,
    Derived,
    Ratio,
    Level,
}

/// What a table row counts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Events,
    Calls,
    Pages,
    Faults,
    Ns,
    Ms,
    Ratio,
}

/// A per-task counter, as data (one row of the table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterDef {
    /// The group (`migrations`), the name in it (`refused`) and the two joined with a dot: the
    /// counter's one name.
    pub group: &'static str,
    pub name: &'static str,
    pub path: &'static str,
    pub kind: CountKind,
    pub unit: Unit,
    /// What feeds it: where that hook did not attach, it is not measured.
    pub feed: Feed,
    /// Its system-wide twin in [`MAP_COUNTERS`], if the kernel side keeps one.
    pub slot: Option<Counter>,
    /// Words for it in a sentence ("refused before starting").
    pub words: &'static str,
    pub doc: &'static str,
}

/// What a system row's KIND is (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SystemKind {
    Tally,
    Own,
    Loss,
    Reclaim,
}

/// A counter the kernel side keeps only system-wide, as data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SystemDef {
    pub name: &'static str,
    pub kind: SystemKind,
    pub counter: Counter,
    /// The hook whose program counts it.
    pub feed: Feed,
    pub doc: &'static str,
}

#[doc(hidden)]
#[macro_export]
macro_rules! __kernel_ty {
    (sum) => {
        u64
    };
    (max) => {
        u64
    };
    (computed) => {
        ()
    };
    (derived) => {
        ()
    };
    (ratio) => {
        ()
    };
    (level) => {
        ()
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __count_kind {
    (sum) => {
        $crate::CountKind::Sum
    };
    (max) => {
        $crate::CountKind::Max
    };
    (computed) => {
        $crate::CountKind::Computed
    };
    (derived) => {
        $crate::CountKind::Derived
    };
    (ratio) => {
        $crate::CountKind::Ratio
    };
    (level) => {
        $crate::CountKind::Level
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __unit {
    (events) => {
        $crate::Unit::Events
    };
    (calls) => {
        $crate::Unit::Calls
    };
    (pages) => {
        $crate::Unit::Pages
    };
    (faults) => {
        $crate::Unit::Faults
    };
    (ns) => {
        $crate::Unit::Ns
    };
    (ms) => {
        $crate::Unit::Ms
    };
    (ratio) => {
        $crate::Unit::Ratio
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __system_kind {
    (tally) => {
        $crate::SystemKind::Tally
    };
    (own) => {
        $crate::SystemKind::Own
    };
    (loss) => {
        $crate::SystemKind::Loss
    };
    (reclaim) => {
        $crate::SystemKind::Reclaim
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __opt_counter {
    () => {
        None
    };
    ($v:ident) => {
        Some($crate::Counter::$v)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __bump_slot {
    () => {
        None
    };
    (sum $v:ident) => {
        Some($crate::Counter::$v)
    };
    (seen $v:ident) => {
        None
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __one {
    ($x:tt) => {
        1
    };
}

/// Expands the table into this crate's declarations.
macro_rules! declare {
    (
        feeds { $( $(#[doc = $fdoc:literal])* $feed:ident $fname:ident [ $( [ $($hook:literal),* ] ),* ]; )* }
        groups { $( $group:ident $Group:ident {
            $( $(#[doc = $doc:literal])* $kind:ident $f:ident [ $rfeed:ident, $unit:ident, $words:literal $(; $twin:ident $slot:literal $var:ident)? ]; )*
        } )* }
        system { $( $(#[doc = $sdoc:literal])* $skind:ident $sname:ident [ $sfeed:ident; $sslot:literal $svar:ident ]; )* }
    ) => {
        /// A family of counts, named after what it counts; [`Feed::hooks`] says what feeds it.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Feed { $( $(#[doc = $fdoc])* $feed, )* }

        impl Feed {
            pub const ALL: [Feed; 0 $( + $crate::__one!($feed) )*] = [ $( Feed::$feed, )* ];

            /// Its name in JSON (`not_measured`) and docs.
            pub const fn name(self) -> &'static str {
                match self { $( Feed::$feed => stringify!($fname), )* }
            }

            /// The hooks (names of numatrace's hook catalogue) it needs: one attached hook of
            /// every group (the hooks of a group are alternatives).
            pub const fn hooks(self) -> &'static [&'static [&'static str]] {
                match self { $( Feed::$feed => &[ $( &[ $($hook),* ] ),* ], )* }
            }

            pub const fn doc(self) -> &'static str {
                match self { $( Feed::$feed => concat!($($fdoc),*), )* }
            }
        }

        /// The per-task counters as the kernel side keeps them, one struct per group of the
        /// table (fields of the kinds it does not keep are zero-sized).
        pub mod stats {
            $(
                #[repr(C)]
                #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
                pub struct $Group { $( $(#[doc = $doc])* pub $f: $crate::__kernel_ty!($kind), )* }
            )*

            /// The [`crate::Counter`] slot the kernel side adds to with each counter (`None`: no
            /// system-wide twin, or a `seen` one, which its tracepoint counts at the event,
            /// whether or not the task has an entry).
            #[allow(non_upper_case_globals)]
            pub mod slot {
                $( pub mod $group {
                    $( pub const $f: Option<$crate::Counter> = $crate::__bump_slot!($($twin $var)?); )*
                } )*
            }
        }

        /// Per-task aggregates kept in [`MAP_TASK_STATS`]. Counters only grow.
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct TaskStats {
            /// Kernel pid (thread id).
            pub pid: u32,
            /// Thread-group id (the userspace "pid").
            pub tgid: u32,
            /// `comm` when the entry was created, or when the task was last seen running an
            /// event.
            pub comm: [u8; 16],
            /// Non-zero once the task has exited and this entry could not be handed over as a
            /// [`TaskExitEvent`] (ring buffer full), or when the entry was created while the task
            /// was already in do_exit (no exit record need follow); userspace then takes it from
            /// the map.
            pub exited: u32,
            /// Low 32 bits of `jiffies` when a program last took the entry (every count goes
            /// through that lookup): the task-map iterator sends in full only the entries taken
            /// since the reader's previous read, the others as their key.
            pub touched: u32,
            /// `sched_skip_vma_numa` events by reason (index = reason, last slot: unknown
            /// reasons).
            pub skip_vma: [u64; SKIP_REASON_SLOTS],
            /// `bpf_ktime_get_ns` of the first counted event (with `pid`, the entry's identity)
            /// and of the latest re-read of the task's comm, cgroup and nodes (every few jiffies
            /// while the task has events: not stamped per event, which would cost a clock read
            /// each).
            pub first_ns: u64,
            pub last_ns: u64,
            /// `se.sum_exec_runtime` first and last seen (task_numa_work entry/exit, task exit).
            pub runtime_first_ns: u64,
            pub runtime_last_ns: u64,
            /// Runtime consumed by the latest task_numa_work call, and sum_exec_runtime at its
            /// entry: the share the cap bounds is measured up to the start of the latest call.
            pub scan_last_call_rt: u64,
            pub scan_last_entry_runtime: u64,
            $( pub $group: stats::$Group, )*
            /// cgroup v2 id (`bpf_get_current_cgroup_id`) when the entry was created, refreshed
            /// at each scan and hint fault; 0: never seen running.
            pub cgroup_id: u64,
            /// `task_struct.numa_preferred_nid + 1` at the last scan or hint fault (0: no
            /// preferred node, or never read).
            pub preferred_nid: u32,
            /// NUMA node + 1 of the CPU the task last ran a counted event on (0: unknown).
            pub last_nid: u32,
        }

        /// u64 fields of [`TaskStats`] after `skip_vma` and before `cgroup_id`: the six
        /// bookkeeping ones and the kept counters (for the layout assert).
        pub const TASK_STATS_U64S: usize =
            6 $( $( + $crate::__kept!($kind) )* )*;

        /// Indices into [`MAP_COUNTERS`]: the kernel side's own accounting, system-wide. Values
        /// are never reused.
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Counter {
            $( $( $(
                #[doc = concat!("Σ `", stringify!($group), ".", stringify!($f), "` over the followed tasks.")]
                $var = $slot,
            )? )* )*
            $( $(#[doc = $sdoc])* $svar = $sslot, )*
        }

        /// How many [`Counter`]s there are.
        pub const COUNTER_COUNT: usize =
            0 $( $( $( + $crate::__one!($var) )? )* )* $( + $crate::__one!($svar) )*;

        impl Counter {
            /// Every counter, in slot order (the slots are 0..COUNTER_COUNT: a gap or a
            /// duplicate leaves a wrong entry here, which a test catches).
            pub const ALL: [Counter; COUNTER_COUNT] = {
                let mut all = [Counter::RingbufFull; COUNTER_COUNT];
                $( $( $( all[$slot] = Counter::$var; )? )* )*
                $( all[$sslot] = Counter::$svar; )*
                all
            };

            /// Tallies of what the traced tasks did (not losses, bookkeeping or reclaim):
            /// numatrace's own activity is left out of them, so that they equal the traced
            /// tasks' totals.
            pub const fn is_tally(self) -> bool {
                match self {
                    $( $( $( Counter::$var => true, )? )* )*
                    $( Counter::$svar => matches!($crate::__system_kind!($skind), $crate::SystemKind::Tally), )*
                }
            }
        }

        /// Length of [`MAP_COUNTERS`] (one slot spare).
        pub const COUNTER_SLOTS: u32 = COUNTER_COUNT as u32 + 1;

        /// Every per-task counter, in the table's order.
        pub const COUNTERS: &[CounterDef] = &[ $( $( CounterDef {
            group: stringify!($group),
            name: stringify!($f),
            path: concat!(stringify!($group), ".", stringify!($f)),
            kind: $crate::__count_kind!($kind),
            unit: $crate::__unit!($unit),
            feed: Feed::$rfeed,
            slot: $crate::__opt_counter!($($var)?),
            words: $words,
            doc: concat!($($doc),*),
        }, )* )* ];

        /// Every system-wide-only counter, in the table's order.
        pub const SYSTEM: &[SystemDef] = &[ $( SystemDef {
            name: stringify!($sname),
            kind: $crate::__system_kind!($skind),
            counter: Counter::$svar,
            feed: Feed::$sfeed,
            doc: concat!($($sdoc),*),
        }, )* ];
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __kept {
    (sum) => {
        1
    };
    (max) => {
        1
    };
    ($other:ident) => {
        0
    };
}

#[allow(unused_imports)]
use crate::*;

counter_table!(declare);
