//! Which counts a report measured. A count is fed by one kernel hook (or needs two, or has two
//! alternative sources); where that hook did not attach, the count is not measured, and every
//! frontend says so — `-` in a table, "not measured: HOOK not attached" in a sentence, the key
//! left out of JSON (with `not_measured` saying why), the series left out of a scrape — instead
//! of printing a 0 that the kernel never counted.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::bpf::loader::HookReport;
pub use numatrace_common::Feed;
use numatrace_common::{COUNTERS, Counter, SYSTEM, SystemKind};

const SHOULD: &str = "should_numa_migrate_memory";

/// The feeds a report did not measure, each with why ("task_numa_fault not attached"). In
/// JSON: {feed name: why}.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Measured(BTreeMap<Feed, String>);

impl Serialize for Measured {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(f, why)| (f.name(), why)))
    }
}

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

    /// `f` is not measured, because of `why`, though its hooks attached (the command does not
    /// count it: see `bpf::needs`). A reason already given stays.
    pub fn not_counted(&mut self, f: Feed, why: &str) {
        self.0.entry(f).or_insert_with(|| why.to_owned());
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

    /// Leaves every field an unmeasured feed would fill out of a serialized `numatrace.stat/2`
    /// (absent, not null: an absent count reads back as 0, a null one would not read at all)
    /// and adds `not_measured`: {feed: why}.
    pub fn prune_stat_json(&self, v: &mut Value) {
        let counts = counts_fields();
        let seen = kernel_seen_fields();
        for (key, table) in [
            ("tasks", &counts[..]),
            ("processes", &counts),
            ("cgroups", &counts),
            ("totals", &counts),
            ("self", &counts),
            ("nodes", NODE),
            ("node_matrix", FLOW),
            ("kernel_seen", &seen),
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
    fn prune_each(&self, v: &mut Value, table: &[(Feed, &str)]) {
        match v {
            Value::Array(a) => a.iter_mut().for_each(|x| self.prune(x, table)),
            x => self.prune(x, table),
        }
    }

    fn prune(&self, v: &mut Value, table: &[(Feed, &str)]) {
        for (f, path) in table {
            if !self.is(*f) {
                remove(v, path);
            }
        }
    }
}

/// The fields of a `Counts` (flattened into tasks, processes and cgroups) and the feed of each:
/// the skipped VMAs, then every counter of the table.
fn counts_fields() -> Vec<(Feed, &'static str)> {
    [
        (Feed::SkipVma, "skipped_vmas"),
        (Feed::SkipVma, "skipped_vmas_total"),
    ]
    .into_iter()
    .chain(COUNTERS.iter().map(|d| (d.feed, d.path)))
    .collect()
}

/// `kernel_seen`'s fields: each name, its feed and its slot (a twin's feed is its counter's).
/// Lives here, not in `stat`, because `measured` sits below `stat`.
pub fn kernel_seen_slots() -> impl Iterator<Item = (Feed, &'static str, Counter)> {
    COUNTERS
        .iter()
        .filter_map(|d| Some((d.feed, d.path, d.slot?)))
        .chain(
            SYSTEM
                .iter()
                .filter(|d| d.kind != SystemKind::Loss)
                .map(|d| (d.feed, d.name, d.counter)),
        )
}

fn kernel_seen_fields() -> Vec<(Feed, &'static str)> {
    kernel_seen_slots()
        .map(|(feed, name, _)| (feed, name))
        .collect()
}

/// Feeds and the fields they fill (`group.field` within the object).
type Table = &'static [(Feed, &'static str)];

const NODE: Table = &[
    (Feed::HintFaults, "hint_faults"),
    (Feed::HintFaults, "hint_faults_local"),
    (Feed::HintFaults, "hint_faults_remote"),
    (Feed::HintFaults, "hint_pages"),
    (Feed::HintFaults, "pages_migrated_in"),
    (Feed::MigratedFrom, "pages_migrated_out"),
    (Feed::MigrateMisplaced, "migrations_in"),
    (Feed::MigrateMisplaced, "migrations_out"),
];

const FLOW: Table = &[
    (Feed::MigrateMisplaced, "migrated"),
    (Feed::MigrateMisplaced, "not_migrated"),
    (Feed::HintFaults, "pages"),
];

const TIERING: Table = &[
    (Feed::Promotions, "promoted_pages"),
    (Feed::HintFaults, "slow_tier_faults"),
    (Feed::HintFaults, "promote_failed"),
    (Feed::PromoteDecisions, "promote_hot"),
    (Feed::PromoteDecisions, "promote_rate_limited"),
    (Feed::PromoteDecisions, "promote_not_hot"),
    (Feed::PromoteDecisions, "promote_free_room"),
    (Feed::PromoteDecisions, "promote_candidates"),
    (Feed::PromoteDecisions, "hint_latency_faults"),
    (Feed::PromoteDecisions, "hint_latency_ms_mean"),
    (Feed::MigratePages, "demotions"),
];

const HISTOGRAMS: Table = &[
    (Feed::MigrateMisplaced, "migrate_latency_ns"),
    (Feed::HintFaults, "pages_per_hint_fault"),
    (Feed::Regions, "hint_faults_per_region_pass"),
    (Feed::Regions, "region_passes"),
    (Feed::Regions, "mean_hint_faults_per_region_pass"),
];

const VMA: Table = &[
    (Feed::Pte, "pte_updates"),
    (Feed::Pte, "calls"),
    (Feed::Pte, "scan_times_ns"),
    (Feed::SkipVma, "skips"),
    (Feed::SkipGap, "pid_inactive"),
];

/// The feeds, their hooks and every JSON field each fills, as a Markdown table: the generated
/// part of docs/json-schema.md (the pruning tables above are what it lists).
pub fn feed_table_markdown() -> String {
    let counts = counts_fields();
    let seen = kernel_seen_fields();
    let places: [(&str, &[(Feed, &str)]); 7] = [
        ("", &counts),
        ("`kernel_seen.`", &seen),
        ("a node's ", NODE),
        ("`node_matrix[].`", FLOW),
        ("`histograms.`", HISTOGRAMS),
        ("the `tiering` block's ", TIERING),
        ("a VMA's ", VMA),
    ];
    let mut s = String::from("| feed | hook(s) | fields |\n|---|---|---|\n");
    for f in Feed::ALL {
        let hooks = if f.hooks().is_empty() {
            "(none: always measured)".to_owned()
        } else {
            f.hooks()
                .iter()
                .map(|g| g.join(" or ").replace('|', "\\|"))
                .collect::<Vec<_>>()
                .join(", and ")
        };
        let fields: Vec<String> = places
            .iter()
            .flat_map(|(at, table)| {
                table
                    .iter()
                    .filter(move |(g, _)| *g == f)
                    .map(move |(_, p)| format!("{at}`{p}`").replace("``", ""))
            })
            .collect();
        let fields = if fields.is_empty() {
            "— (says whether a text column is measured)".to_owned()
        } else {
            fields.join(", ")
        };
        s.push_str(&format!("| `{}` | {hooks} | {fields} |\n", f.name()));
    }
    s
}

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
        let m = Measured::from_hooks(&all_but(&["migrate_misplaced_folio|_page"]));
        assert!(m.is(Feed::Cow));
        assert_eq!(
            m.why(Feed::CowMigrated),
            Some("migrate_misplaced_folio|_page not attached")
        );
    }

    /// docs/json-schema.md's feed table is generated from the counter table and the pruning
    /// tables: regenerated with `NUMATRACE_UPDATE_DOCS=1 cargo test -p numatrace --lib
    /// measured`, checked otherwise.
    #[test]
    fn the_docs_feed_table_is_the_pruning() {
        const START: &str = "<!-- generated from the counter table by `NUMATRACE_UPDATE_DOCS=1 \
                             cargo test -p numatrace --lib measured`; do not edit -->\n";
        const END: &str = "<!-- end of generated part -->\n";
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/json-schema.md");
        let doc = std::fs::read_to_string(&path).unwrap();
        let a = doc
            .find(START)
            .expect("docs/json-schema.md lacks the start marker")
            + START.len();
        let b = doc[a..]
            .find(END)
            .expect("docs/json-schema.md lacks the end marker")
            + a;
        let want = format!("{}{}{}", &doc[..a], feed_table_markdown(), &doc[b..]);
        if std::env::var("NUMATRACE_UPDATE_DOCS").is_ok_and(|v| v == "1") {
            std::fs::write(&path, &want).unwrap();
        }
        assert!(
            doc == want,
            "docs/json-schema.md's feed table differs from the counter table: run with \
             NUMATRACE_UPDATE_DOCS=1"
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
