//! `numatrace check`: one module per seed patch, each of one shape — its id and title, the
//! hooks it needs, its reproducer (`run`: the workload and its control under the collector) and
//! a pure function from the measured evidence to a verdict, unit-tested on recorded evidence.
//! This module holds what they share; `cmd::check` only dispatches and prints.

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

use std::{
    collections::BTreeMap,
    ffi::OsString,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use serde::Serialize;
use serde_json::json;

use crate::{
    cli::CheckArgs,
    kernel::tunables::Tunables,
    model::{Counts, GapRecord},
    report::stat::StatReport,
    session::{CollectOptions, Signals},
    spawn::resolve,
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

/// Runs seed `id`'s check (its reproducer, or the user's command).
pub async fn run_seed(
    id: &str,
    args: &CheckArgs,
    no_fentry: bool,
    signals: &mut Signals,
) -> Result<CheckResult> {
    match id {
        "000" => seed000::run(args, no_fentry, signals).await,
        "001" => seed001::run(args, no_fentry, signals).await,
        "002" => seed002::run(args, no_fentry, signals).await,
        "003" => seed003::run(args, no_fentry, signals).await,
        "004" => seed004::run(args, no_fentry, signals).await,
        other => anyhow::bail!("unknown patch {other}"),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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

/// The window of one command of a check: a reproducer runs as root, the user's `-- COMMAND` as
/// `--user` or the user who ran sudo (resolved once by `cmd::check` into `args.run_as`).
/// One window of a reproducer (or the user's command): its report and the command's exit code.
async fn collect(
    opts: &CollectOptions,
    signals: &mut Signals,
) -> Result<(StatReport, Option<i32>)> {
    let c = crate::session::collect(opts, signals).await?;
    Ok((StatReport::of(&c), c.exit))
}

fn window_for(command: Vec<OsString>, args: &CheckArgs, no_fentry: bool) -> CollectOptions {
    let mut opts = CollectOptions::for_command(command, no_fentry);
    if !args.command.is_empty() {
        opts.run_as = args.run_as.clone();
    }
    opts
}

/// numatrace-workload: next to this binary, else on PATH.
fn workload_binary() -> Result<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("numatrace-workload")))
        .filter(|p| p.is_file());
    beside
        .or_else(|| resolve(Path::new("numatrace-workload")))
        .context(
            "numatrace-workload (the reproducers) is neither next to numatrace nor on PATH: \
             `cargo xtask build` builds it beside numatrace",
        )
}

fn hook<'a>(r: &'a StatReport, name: &str) -> Option<&'a crate::bpf::loader::HookReport> {
    r.hooks.iter().find(|h| h.name == name)
}

/// Hooks a check needs: `Err` names the first one missing and why.
fn require(r: &StatReport, names: &[&str]) -> Result<BTreeMap<String, String>, String> {
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
    fn result(
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
    fn unsupported(&self, why: String) -> CheckResult {
        self.result(Verdict::Unsupported, why, BTreeMap::new(), BTreeMap::new())
    }
}

/// The sentence for a `not-exercised` verdict when NUMA balancing was simply off: that, not the
/// workload, is then the reason.
fn balancing_off(verdict: Verdict, r: &StatReport) -> Option<String> {
    (verdict == Verdict::NotExercised && r.kernel.numa_balancing == Some(0)).then(|| {
        "kernel.numa_balancing is 0: NUMA balancing is off (sysctl kernel.numa_balancing=1).".into()
    })
}

fn hint_evidence(prefix: &str, r: &StatReport, ev: &mut BTreeMap<String, serde_json::Value>) {
    let t = &r.totals;
    let h = &t.hint_faults;
    for (k, v) in [
        ("hint_faults", h.faults),
        ("cow_shared_faults", h.cow_shared),
        ("cow_shared_faults_thp", h.cow_shared_large),
        ("cow_shared_migrated", h.cow_shared_migrated),
        ("migrated_pages", h.migrated_pages),
        ("pte_updates", t.scan.pte_updates),
        ("migration_stalls", t.migrations.stalls),
        ("migration_stall_ns", t.migrations.stall_ns),
    ] {
        ev.insert(format!("{prefix}{k}"), json!(v));
    }
    // Seed 000's symptom: tasks waiting on pages under migration, per task.
    let stalls: BTreeMap<String, u64> = r
        .tasks
        .iter()
        .filter(|t| t.counts.migrations.stalls > 0)
        .map(|t| (format!("{} {}", t.pid, t.comm), t.counts.migrations.stalls))
        .collect();
    ev.insert(format!("{prefix}migration_stalls_per_task"), json!(stalls));
}

fn duration_arg(d: std::time::Duration) -> String {
    humantime::format_duration(d).to_string().replace(' ', "")
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
