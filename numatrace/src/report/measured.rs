//! Which counts a report measured. A count is fed by one kernel hook (or needs two, or has two
//! alternative sources); where that hook did not attach, the count is not measured, and every
//! frontend says so — `-` in a table, "not measured: HOOK not attached" in a sentence, the key
//! left out of JSON (with `not_measured` saying why), the series left out of a scrape — instead
//! of printing a 0 that the kernel never counted.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::bpf::loader::HookReport;

const MISPLACED: &str = "migrate_misplaced_folio|_page";
const SHOULD: &str = "should_numa_migrate_memory";
const XCHG: &str = "folio_xchg_last_cpupid|page_cpupid_xchg_last";

/// A family of counts, named after what it counts; [`Feed::hooks`] says what feeds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Feed {
    /// Skipped VMAs by reason (`skipped_vmas*`, a VMA's `skips`).
    SkipVma,
    /// pid_inactive scan-sequence gaps (seed 002: a VMA's `pid_inactive`).
    SkipGap,
    /// `placement.moves`.
    Moves,
    /// `placement.swaps_out`, `swaps_in`.
    Swaps,
    /// `placement.sticks`, `stick_no_target`.
    Sticks,
    /// `migrations.calls`, `pages_ok`, `pages_failed`, `thp_*` (NUMA-misplaced migrate_pages).
    MigratePages,
    /// Exit snapshots (`kernel_seen.exit_snapshots`).
    Exits,
    /// task_numa_work: `scan.calls` to `cap_violations`, run time, `share`, `wall_share`.
    Scan,
    /// CPU samples: `scan.samples`, `scan_samples`, `sampled_share`.
    Samples,
    /// The scan share, exact (task_numa_work) or sampled (SCAN%).
    ScanShare,
    /// change_prot_numa: `scan.pte_updates`, `prot_numa_calls`, a VMA's PTE updates and calls.
    Pte,
    /// task_numa_fault: hint faults, their pages and locality, pages they migrated (also per
    /// node and node pair).
    HintFaults,
    /// Pages migrated, from migrate_pages or from hint faults (top's MIGR/s).
    PagesMigrated,
    /// `hint_faults.numa_page_entries`.
    NumaPage,
    /// `hint_faults.huge_pmd_numa_entries`.
    HugePmdNumaPage,
    /// mpol_misplaced: hint faults on COW-shared pages, faults per region pass (seed 001).
    Cow,
    /// COW-shared faults that migrated: mpol_misplaced marks them, migrate_misplaced counts.
    CowMigrated,
    /// migrate_misplaced calls: attempts, outcome, latency, per node and node pair.
    MigrateMisplaced,
    /// Pages migrated out of a node: the source node is known from migrate_misplaced.
    MigratedFrom,
    /// migration_entry_wait: `migrations.stalls`, `stall_ns`.
    Stalls,
    /// Promotions: task_numa_fault counts the pages, migrate_misplaced tells where they came
    /// from (and counts the failed attempts).
    Promotions,
    /// `sched_skip_cpuset_numa` (6.16+): `scan.cpuset_skips`.
    SkipCpuset,
    /// The kernel's promotion decisions (should_numa_migrate_memory), counted in pages at the
    /// fault's task_numa_fault, and their hint-fault latency (the access-time exchange inside
    /// a decision, without which no refusal can be classed): hot, rate-limited, not hot, free
    /// room.
    PromoteDecisions,
    /// migrate_misplaced_folio_prepare (6.11+): `migrations.refused`.
    MigrateRefused,
}

impl Feed {
    pub const ALL: [Feed; 24] = [
        Self::SkipVma,
        Self::SkipGap,
        Self::Moves,
        Self::Swaps,
        Self::Sticks,
        Self::MigratePages,
        Self::Exits,
        Self::Scan,
        Self::Samples,
        Self::ScanShare,
        Self::Pte,
        Self::HintFaults,
        Self::PagesMigrated,
        Self::NumaPage,
        Self::HugePmdNumaPage,
        Self::Cow,
        Self::CowMigrated,
        Self::MigrateMisplaced,
        Self::MigratedFrom,
        Self::Stalls,
        Self::Promotions,
        Self::SkipCpuset,
        Self::PromoteDecisions,
        Self::MigrateRefused,
    ];

    /// The hooks (names of `kernel::catalogue::HOOKS`) it needs: one attached hook of every
    /// group (the hooks of a group are alternatives).
    pub const fn hooks(self) -> &'static [&'static [&'static str]] {
        match self {
            Self::SkipVma => &[&["sched:sched_skip_vma_numa"]],
            Self::SkipGap => &[&["tp_btf:sched_skip_vma_numa"]],
            Self::Moves => &[&["sched:sched_move_numa"]],
            Self::Swaps => &[&["sched:sched_swap_numa"]],
            Self::Sticks => &[&["sched:sched_stick_numa"]],
            Self::MigratePages => &[&["migrate:mm_migrate_pages"]],
            Self::Exits => &[&["sched:sched_process_exit"]],
            Self::Scan => &[&["task_numa_work"]],
            Self::Samples => &[&["sampling:cpu-clock"]],
            Self::ScanShare => &[&["task_numa_work", "sampling:cpu-clock"]],
            Self::Pte => &[&["change_prot_numa"]],
            Self::HintFaults => &[&["task_numa_fault"]],
            Self::PagesMigrated => &[&["migrate:mm_migrate_pages", "task_numa_fault"]],
            Self::NumaPage => &[&["do_numa_page"]],
            Self::HugePmdNumaPage => &[&["do_huge_pmd_numa_page"]],
            Self::Cow => &[&["mpol_misplaced"]],
            Self::CowMigrated => &[&["mpol_misplaced"], &[MISPLACED]],
            Self::MigrateMisplaced => &[&[MISPLACED]],
            Self::MigratedFrom => &[&["task_numa_fault"], &[MISPLACED]],
            Self::Stalls => &[&["migration_entry_wait"]],
            Self::Promotions => &[&["task_numa_fault"], &[MISPLACED]],
            Self::SkipCpuset => &[&["sched:sched_skip_cpuset_numa"]],
            Self::PromoteDecisions => &[&[SHOULD], &["task_numa_fault"], &[XCHG]],
            Self::MigrateRefused => &[&["migrate_misplaced_folio_prepare"]],
        }
    }
}

/// The feeds a report did not measure, each with why ("task_numa_fault not attached").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Measured(BTreeMap<Feed, String>);

impl Measured {
    /// From a report's hooks. No hooks at all (a report made by hand) says nothing: everything
    /// counts as measured. Otherwise a hook counts only when listed and attached, so a hook the
    /// numatrace that wrote a capture did not have is not measured either.
    pub fn from_hooks(hooks: &[HookReport]) -> Self {
        if hooks.is_empty() {
            return Self::default();
        }
        let on = |name: &str| hooks.iter().any(|h| h.name == name && h.attached);
        Self(
            Feed::ALL
                .into_iter()
                .filter_map(|f| {
                    let missing = f.hooks().iter().find(|g| !g.iter().any(|n| on(n)))?;
                    Some((f, format!("{} not attached", missing.join(" or "))))
                })
                .collect(),
        )
    }

    /// From a window's hooks and the memory tiering its snapshots hold: a capture written
    /// before numatrace counted promotions reads its tiering back empty (a live read always
    /// names where the tiers come from), and its promotions and cpuset skips are then not
    /// measured rather than 0.
    pub fn of_window(hooks: &[HookReport], tiering_source: &str) -> Self {
        let mut m = Self::from_hooks(hooks);
        if !hooks.is_empty() && tiering_source.is_empty() {
            for f in [Feed::Promotions, Feed::SkipCpuset] {
                m.0.entry(f).or_insert_with(|| {
                    "the capture predates numatrace's memory-tiering counts".to_owned()
                });
            }
        }
        // A capture whose hooks do not even list the decision hook was written before
        // numatrace counted decisions (not on a kernel that refused it).
        if !hooks.is_empty() && !hooks.iter().any(|h| h.name == SHOULD) {
            m.0.insert(
                Feed::PromoteDecisions,
                "the capture predates numatrace's promotion decisions".to_owned(),
            );
        }
        m
    }

    pub fn is(&self, f: Feed) -> bool {
        !self.0.contains_key(&f)
    }

    /// Every feed is measured.
    pub fn complete(&self) -> bool {
        self.0.is_empty()
    }

    /// Why `f` is not measured ("task_numa_fault not attached"); `None`: it is.
    pub fn why(&self, f: Feed) -> Option<&str> {
        self.0.get(&f).map(String::as_str)
    }

    /// The feeds not measured, and why.
    pub fn missing(&self) -> impl Iterator<Item = (Feed, &str)> {
        self.0.iter().map(|(f, w)| (*f, w.as_str()))
    }

    /// `v` where `f` is measured.
    pub fn value<T>(&self, f: Feed, v: T) -> Option<T> {
        self.is(f).then_some(v)
    }

    /// A table cell: `v`, or `-` where `f` is not measured.
    pub fn cell(&self, f: Feed, v: impl std::fmt::Display) -> String {
        if self.is(f) {
            v.to_string()
        } else {
            "-".into()
        }
    }

    /// A clause of a sentence: `text()`, or "not measured: HOOK not attached".
    pub fn says(&self, f: Feed, text: impl FnOnce() -> String) -> String {
        match self.why(f) {
            None => text(),
            Some(why) => format!("not measured: {why}"),
        }
    }

    /// "LABEL: " and [`Self::says`].
    pub fn clause(&self, f: Feed, label: &str, text: impl FnOnce() -> String) -> String {
        format!("{label}: {}", self.says(f, text))
    }

    /// Leaves every field an unmeasured feed would fill out of a serialized `numatrace.stat/1`
    /// (absent, not null: an absent count reads back as 0, a null one would not read at all)
    /// and adds `not_measured`: {feed: why}.
    pub fn prune_stat_json(&self, v: &mut Value) {
        for (key, table) in [
            ("tasks", COUNTS),
            ("processes", COUNTS),
            ("cgroups", COUNTS),
            ("totals", COUNTS),
            ("self", COUNTS),
            ("nodes", NODE),
            ("node_matrix", FLOW),
            ("kernel_seen", KERNEL_SEEN),
            ("histograms", HISTOGRAMS),
            ("tiering", TIERING),
        ] {
            if let Some(x) = v.get_mut(key) {
                self.prune_each(x, table);
            }
        }
        if let Some(Value::Array(procs)) = v.get_mut("processes") {
            for p in procs {
                if let Some(vmas) = p.get_mut("vmas") {
                    self.prune_each(vmas, VMA);
                }
            }
        }
        if let Some(o) = v.as_object_mut() {
            o.insert(
                "not_measured".into(),
                serde_json::to_value(self).unwrap_or_default(),
            );
        }
    }

    /// Prunes `v`, or each element where it is an array.
    fn prune_each(&self, v: &mut Value, table: Table) {
        match v {
            Value::Array(a) => a.iter_mut().for_each(|x| self.prune(x, table)),
            x => self.prune(x, table),
        }
    }

    fn prune(&self, v: &mut Value, table: Table) {
        for (f, paths) in table {
            if !self.is(*f) {
                paths.iter().for_each(|p| remove(v, p));
            }
        }
    }
}

/// Feeds and the fields they fill (`group.field` within the object).
type Table = &'static [(Feed, &'static [&'static str])];

/// A `Counts` (flattened into tasks, processes and cgroups).
const COUNTS: Table = &[
    (Feed::SkipVma, &["skipped_vmas", "skipped_vmas_total"]),
    (Feed::Moves, &["placement.moves"]),
    (Feed::Swaps, &["placement.swaps_out", "placement.swaps_in"]),
    (
        Feed::Sticks,
        &["placement.sticks", "placement.stick_no_target"],
    ),
    (
        Feed::MigratePages,
        &[
            "migrations.calls",
            "migrations.pages_ok",
            "migrations.pages_failed",
            "migrations.thp_ok",
            "migrations.thp_failed",
        ],
    ),
    (
        Feed::MigrateMisplaced,
        &[
            "migrations.attempts",
            "migrations.succeeded",
            "migrations.not_migrated",
            "migrations.latency_ns_total",
            "migrations.latency_ns_mean",
        ],
    ),
    (Feed::Stalls, &["migrations.stalls", "migrations.stall_ns"]),
    (
        Feed::Scan,
        &[
            "scan.calls",
            "scan.time_ns",
            "scan.max_ns",
            "scan.runtime_in_scan_ns",
            "scan.node_stamp_advance_ns",
            "scan.stamp_violations",
            "scan.requeued_calls",
            "scan.cap_calls",
            "scan.cap_violations",
            "scan.task_runtime_ns",
            "scan.scan_seq",
            "scan.share",
            "scan.wall_share",
            "scan.share_between_calls",
        ],
    ),
    (Feed::Pte, &["scan.pte_updates", "scan.prot_numa_calls"]),
    (
        Feed::Samples,
        &["scan.samples", "scan.scan_samples", "scan.sampled_share"],
    ),
    (
        Feed::HintFaults,
        &[
            "hint_faults.faults",
            "hint_faults.local",
            "hint_faults.remote",
            "hint_faults.pages",
            "hint_faults.faults_4k",
            "hint_faults.faults_thp",
            "hint_faults.faults_large",
            "hint_faults.migrated_pages",
            "hint_faults.migrate_failed",
        ],
    ),
    (Feed::NumaPage, &["hint_faults.numa_page_entries"]),
    (
        Feed::HugePmdNumaPage,
        &["hint_faults.huge_pmd_numa_entries"],
    ),
    (
        Feed::Cow,
        &["hint_faults.cow_shared", "hint_faults.cow_shared_large"],
    ),
    (Feed::CowMigrated, &["hint_faults.cow_shared_migrated"]),
    (Feed::MigrateRefused, &["migrations.refused"]),
    (Feed::SkipCpuset, &["scan.cpuset_skips"]),
    (Feed::Promotions, &["tiering.promoted_pages"]),
    (
        Feed::HintFaults,
        &["tiering.slow_tier_faults", "tiering.promote_failed"],
    ),
    (
        Feed::PromoteDecisions,
        &[
            "tiering.promote_hot",
            "tiering.promote_rate_limited",
            "tiering.promote_not_hot",
            "tiering.promote_free_room",
            "tiering.promote_candidates",
            "tiering.hint_latency_faults",
            "tiering.hint_latency_ms_total",
            "tiering.hint_latency_ms_mean",
        ],
    ),
];

const NODE: Table = &[
    (
        Feed::HintFaults,
        &[
            "hint_faults",
            "hint_faults_local",
            "hint_faults_remote",
            "hint_pages",
            "pages_migrated_in",
        ],
    ),
    (Feed::MigratedFrom, &["pages_migrated_out"]),
    (Feed::MigrateMisplaced, &["migrations_in", "migrations_out"]),
];

const FLOW: Table = &[
    (Feed::MigrateMisplaced, &["migrated", "not_migrated"]),
    (Feed::HintFaults, &["pages"]),
];

const KERNEL_SEEN: Table = &[
    (Feed::SkipVma, &["skip_vma"]),
    (Feed::SkipGap, &["skip_vma_tp_btf", "skip_gap"]),
    (Feed::Moves, &["numa_move"]),
    (Feed::Swaps, &["numa_swap"]),
    (Feed::Sticks, &["numa_stick"]),
    (Feed::MigratePages, &["migrate_numa"]),
    (Feed::Exits, &["exit_snapshots"]),
    (
        Feed::HintFaults,
        &[
            "hint_faults",
            "hint_faults_local",
            "hint_pages",
            "hint_migrated_pages",
        ],
    ),
    (Feed::Pte, &["pte_updates"]),
    (Feed::Scan, &["scan_calls"]),
    (
        Feed::MigrateMisplaced,
        &["migrate_attempts", "migrate_succeeded"],
    ),
    (Feed::Stalls, &["migration_waits"]),
    (Feed::MigrateRefused, &["migrate_refused"]),
    (Feed::Cow, &["cow_shared_faults"]),
    (Feed::CowMigrated, &["cow_shared_migrations"]),
    (Feed::Samples, &["samples", "scan_samples"]),
    (
        Feed::MigratePages,
        &[
            "demote_calls",
            "demoted_pages",
            "demote_failed",
            "demoted_kswapd",
            "demoted_khugepaged",
        ],
    ),
    (Feed::SkipCpuset, &["skip_cpuset"]),
    (Feed::Promotions, &["promoted_pages"]),
    (Feed::HintFaults, &["slow_tier_faults"]),
    (
        Feed::PromoteDecisions,
        &[
            "promote_hot",
            "promote_rate_limited",
            "promote_not_hot",
            "promote_free_room",
            "hint_latency_faults",
            "hint_latency_ms",
        ],
    ),
];

const TIERING: Table = &[
    (Feed::Promotions, &["promoted_pages"]),
    (Feed::HintFaults, &["slow_tier_faults", "promote_failed"]),
    (
        Feed::PromoteDecisions,
        &[
            "promote_hot",
            "promote_rate_limited",
            "promote_not_hot",
            "promote_free_room",
            "promote_candidates",
            "hint_latency_faults",
            "hint_latency_ms_mean",
        ],
    ),
    (Feed::MigratePages, &["demotions"]),
];

const HISTOGRAMS: Table = &[
    (Feed::MigrateMisplaced, &["migrate_latency_ns"]),
    (Feed::HintFaults, &["pages_per_hint_fault"]),
    (
        Feed::Cow,
        &[
            "hint_faults_per_region_pass",
            "region_passes",
            "mean_hint_faults_per_region_pass",
        ],
    ),
];

const VMA: Table = &[
    (Feed::Pte, &["pte_updates", "calls", "scan_times_ns"]),
    (Feed::SkipVma, &["skips"]),
    (Feed::SkipGap, &["pid_inactive"]),
];

/// Removes `path` (`a.b`) from `v`, keeping the order of what stays.
fn remove(v: &mut Value, path: &str) {
    match path.split_once('.') {
        Some((head, rest)) => {
            if let Some(inner) = v.get_mut(head) {
                remove(inner, rest);
            }
        }
        None => {
            if let Some(o) = v.as_object_mut() {
                o.shift_remove(path);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::plan::Mechanism;

    pub(crate) fn hook(name: &str, attached: bool) -> HookReport {
        HookReport {
            name: name.into(),
            kind: "function".into(),
            mechanism: if attached {
                Mechanism::Fentry
            } else {
                Mechanism::None
            },
            symbol: None,
            attached,
            reasons: vec![],
            what: String::new(),
        }
    }

    /// Every hook of the catalogue, attached except `missing`.
    pub(crate) fn all_but(missing: &[&str]) -> Vec<HookReport> {
        crate::plan::HOOKS
            .iter()
            .map(|s| hook(s.name, !missing.contains(&s.name)))
            .collect()
    }

    #[test]
    fn every_feed_names_hooks_of_the_catalogue() {
        for f in Feed::ALL {
            for n in f.hooks().iter().flat_map(|g| g.iter()) {
                assert!(
                    crate::plan::HOOKS.iter().any(|s| s.name == *n),
                    "{f:?}: {n}"
                );
            }
        }
    }

    #[test]
    fn no_hooks_means_unknown_hence_measured() {
        assert!(Measured::from_hooks(&[]).complete());
        assert!(Measured::from_hooks(&all_but(&[])).complete());
    }

    #[test]
    fn a_hook_not_attached_or_not_listed_is_not_measured() {
        let m = Measured::from_hooks(&all_but(&["task_numa_fault"]));
        assert!(!m.is(Feed::HintFaults));
        assert_eq!(
            m.why(Feed::HintFaults),
            Some("task_numa_fault not attached")
        );
        assert!(!m.is(Feed::MigratedFrom));
        assert!(
            m.is(Feed::PagesMigrated),
            "mm_migrate_pages still counts pages"
        );
        assert!(m.is(Feed::Scan));
        assert_eq!(m.cell(Feed::HintFaults, 0), "-");
        assert_eq!(m.cell(Feed::Scan, 4), "4");
        assert_eq!(
            m.says(Feed::HintFaults, || "0".into()),
            "not measured: task_numa_fault not attached"
        );
        assert_eq!(m.value(Feed::HintFaults, 3), None);
        assert_eq!(m.value(Feed::Pte, 3), Some(3));
        // A listed subset: what is not listed was not hooked.
        let m = Measured::from_hooks(&[hook("task_numa_fault", true)]);
        assert!(m.is(Feed::HintFaults));
        assert!(!m.is(Feed::Scan));
    }

    #[test]
    fn alternatives_need_one_and_pairs_need_both() {
        let m = Measured::from_hooks(&all_but(&["task_numa_work"]));
        assert!(!m.is(Feed::Scan));
        assert!(m.is(Feed::ScanShare), "sampled");
        let m = Measured::from_hooks(&all_but(&["task_numa_work", "sampling:cpu-clock"]));
        assert_eq!(
            m.why(Feed::ScanShare),
            Some("task_numa_work or sampling:cpu-clock not attached")
        );
        let m = Measured::from_hooks(&all_but(&[MISPLACED]));
        assert!(m.is(Feed::Cow));
        assert_eq!(
            m.why(Feed::CowMigrated),
            Some("migrate_misplaced_folio|_page not attached")
        );
    }

    #[test]
    fn pruning_keeps_the_order_and_what_is_measured() {
        let m = Measured::from_hooks(&all_but(&["task_numa_fault"]));
        let mut v = serde_json::json!({
            "totals": {"scan": {"calls": 1, "pte_updates": 2},
                       "hint_faults": {"faults": 3, "cow_shared": 4}},
            "nodes": [{"node": 0, "hint_faults": 5, "migrations_in": 6}],
            "dropped": {"total": 0}
        });
        m.prune_stat_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({
                "totals": {"scan": {"calls": 1, "pte_updates": 2},
                           "hint_faults": {"cow_shared": 4}},
                "nodes": [{"node": 0, "migrations_in": 6}],
                "dropped": {"total": 0},
                "not_measured": {"hint_faults": "task_numa_fault not attached",
                                 "migrated_from": "task_numa_fault not attached",
                                 "promotions": "task_numa_fault not attached",
                                 "promote_decisions": "task_numa_fault not attached"}
            })
        );
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["totals", "nodes", "dropped", "not_measured"]);
    }
}
