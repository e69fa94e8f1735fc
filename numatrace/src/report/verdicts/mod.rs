//! Verdicts on the seed patches: one module per seed, each of one shape — its id and title, the
//! hooks it needs, and pure functions from measured evidence to a verdict, unit-tested on
//! recorded evidence. `check` runs the reproducers that gather the evidence; `report` judges a
//! capture with the verdicts that need none.

pub mod seed000;
pub mod seed001;
pub mod seed002;
pub mod seed003;
pub mod seed004;

/// The verdicts one window's evidence supports on its own (a capture, a user's workload): 002
/// and 003 judge any run; 000, 001 and 004 compare a reproducer with its control.
pub fn offline_verdicts(r: &crate::report::stat::StatReport) -> Vec<CheckResult> {
    vec![seed002::judge(r), seed003::judge(r)]
}

/// Seeds whose verdict needs `numatrace check` on the machine itself.
pub const NEED_REPRODUCER: [&str; 3] = ["000", "001", "004"];

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::json;

use crate::{
    model::{Counts, GapRecord},
    report::{measured::Feed, stat::StatReport},
};

/// A seed patch numatrace can judge.
#[derive(Clone, Copy, Debug)]
pub struct Seed {
    pub id: &'static str,
    pub title: &'static str,
    /// Hooks the verdict rests on (the reproducer is not run without them).
    pub needs: &'static [&'static str],
}

/// Every seed, in order.
pub const SEEDS: [Seed; 5] = [
    seed000::SEED,
    seed001::SEED,
    seed002::SEED,
    seed003::SEED,
    seed004::SEED,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    BehavesAsPatched,
    BehavesAsUnpatched,
    /// The workload never produced the situation the patch is about.
    NotExercised,
    /// A hook or field the check needs is missing on this kernel.
    Unsupported,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::BehavesAsPatched => "behaves-as-patched",
            Self::BehavesAsUnpatched => "behaves-as-unpatched",
            Self::NotExercised => "not-exercised",
            Self::Unsupported => "unsupported",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckResult {
    pub patch: &'static str,
    pub title: &'static str,
    pub verdict: Verdict,
    /// One plain sentence.
    pub sentence: String,
    /// The numbers the verdict rests on.
    pub evidence: BTreeMap<String, serde_json::Value>,
    /// What the check relied on about this kernel (hooks and how they were attached, nodes).
    pub kernel_facts: BTreeMap<String, String>,
}

pub fn hook<'a>(r: &'a StatReport, name: &str) -> Option<&'a crate::bpf::loader::HookReport> {
    r.hooks.iter().find(|h| h.name == name)
}

/// Hooks a check needs: `Err` names the first one missing and why.
pub fn require(r: &StatReport, names: &[&str]) -> Result<BTreeMap<String, String>, String> {
    let mut facts = BTreeMap::new();
    for n in names {
        match hook(r, n) {
            Some(h) if h.attached => {
                facts.insert(n.to_string(), format!("attached via {}", h.mechanism));
            }
            Some(h) => {
                return Err(format!(
                    "{n} is not attached here: {}",
                    h.reasons.join("; ")
                ));
            }
            None => return Err(format!("{n} is not a hook of this numatrace")),
        }
    }
    facts.insert("kernel".into(), r.kernel.release.clone());
    facts.insert("numa_nodes".into(), r.kernel.numa_nodes.to_string());
    facts.insert(
        "numa_balancing".into(),
        r.kernel
            .numa_balancing
            .map_or("?".into(), |v| v.to_string()),
    );
    Ok(facts)
}

impl Seed {
    /// This seed's result, with the evidence and what it relied on.
    pub fn result(
        &self,
        verdict: Verdict,
        sentence: String,
        evidence: BTreeMap<String, serde_json::Value>,
        kernel_facts: BTreeMap<String, String>,
    ) -> CheckResult {
        CheckResult {
            patch: self.id,
            title: self.title,
            verdict,
            sentence,
            evidence,
            kernel_facts,
        }
    }

    /// This seed cannot be judged here, and why.
    pub fn unsupported(&self, why: String) -> CheckResult {
        self.result(Verdict::Unsupported, why, BTreeMap::new(), BTreeMap::new())
    }
}

/// The sentence for a `not-exercised` verdict when NUMA balancing was simply off: that, not the
/// workload, is then the reason.
pub fn balancing_off(verdict: Verdict, r: &StatReport) -> Option<String> {
    (verdict == Verdict::NotExercised && r.kernel.numa_balancing == Some(0)).then(|| {
        "kernel.numa_balancing is 0: NUMA balancing is off (sysctl kernel.numa_balancing=1).".into()
    })
}

/// Seed 000's evidence: hint faults, COW-shared ones, PTE updates and migration stalls. A key
/// whose hook did not attach is left out (a 0 there was never counted).
pub fn hint_evidence(prefix: &str, r: &StatReport, ev: &mut BTreeMap<String, serde_json::Value>) {
    let m = r.measured();
    let t = &r.totals;
    let h = &t.hint_faults;
    for (feed, k, v) in [
        (Feed::HintFaults, "hint_faults", h.faults),
        (Feed::Cow, "cow_shared_faults", h.cow_shared),
        (Feed::Cow, "cow_shared_faults_thp", h.cow_shared_large),
        (
            Feed::CowMigrated,
            "cow_shared_migrated",
            h.cow_shared_migrated,
        ),
        (Feed::HintFaults, "migrated_pages", h.migrated_pages),
        (Feed::Pte, "pte_updates", t.scan.pte_updates),
        (Feed::Stalls, "migration_stalls", t.migrations.stalls),
        (Feed::Stalls, "migration_stall_ns", t.migrations.stall_ns),
    ] {
        if m.is(feed) {
            ev.insert(format!("{prefix}{k}"), json!(v));
        }
    }
    if !m.is(Feed::Stalls) {
        return;
    }
    // Seed 000's symptom: tasks waiting on pages under migration, per task.
    let stalls: BTreeMap<String, u64> = r
        .tasks
        .iter()
        .map(|t| (t, t.counts().migrations.stalls))
        .filter(|(_, stalls)| *stalls > 0)
        .map(|(t, stalls)| (format!("{} {}", t.pid, t.comm), stalls))
        .collect();
    ev.insert(format!("{prefix}migration_stalls_per_task"), json!(stalls));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_serialize_kebab_case() {
        assert_eq!(
            serde_json::to_value(Verdict::BehavesAsPatched).unwrap(),
            "behaves-as-patched"
        );
        assert_eq!(Verdict::NotExercised.to_string(), "not-exercised");
    }

    #[test]
    fn evidence_leaves_out_what_was_not_measured() {
        let mut r = crate::report::stat::tests::sample();
        let mut ev = BTreeMap::new();
        hint_evidence("", &r, &mut ev);
        assert_eq!(ev["pte_updates"], 0, "no hooks listed: all measured");
        r.hooks =
            crate::report::measured::tests::all_but(&["change_prot_numa", "migration_entry_wait"]);
        let mut ev = BTreeMap::new();
        hint_evidence("x.", &r, &mut ev);
        for gone in [
            "x.pte_updates",
            "x.migration_stalls",
            "x.migration_stall_ns",
            "x.migration_stalls_per_task",
        ] {
            assert!(!ev.contains_key(gone), "{gone}: {ev:?}");
        }
        assert!(ev.contains_key("x.hint_faults"), "{ev:?}");
    }

    #[test]
    fn seeds_are_in_order_and_need_hooks() {
        let ids: Vec<_> = SEEDS.iter().map(|s| s.id).collect();
        assert_eq!(ids, ["000", "001", "002", "003", "004"]);
        assert!(
            SEEDS
                .iter()
                .all(|s| !s.needs.is_empty() && !s.title.is_empty())
        );
    }
}
