//! `numatrace check`: runs a seed patch's reproducer (and its control) or the user's command
//! under the collector, then judges the evidence with [`crate::check`].

use std::{
    collections::BTreeMap,
    ffi::OsString,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;
use serde_json::json;

use crate::{
    check::{
        CheckResult, MIN_CONTROL_FAULTS, TITLE_000, TITLE_001, TITLE_002, TITLE_003, TITLE_004,
        TaskScan, Verdict, VmaGaps, first_after_ms, parse_idle_vma_state, parse_thp_states,
        verdict_000, verdict_001, verdict_002, verdict_003, verdict_004,
    },
    cli::CheckArgs,
    cmd::stat::{CollectOptions, Signals, collect},
    kernel::tunables::Tunables,
    report::stat::StatReport,
    spawn::resolve,
};

pub const SCHEMA: &str = "numatrace.check/1";

#[derive(Serialize)]
struct CheckReport<'a> {
    schema: &'static str,
    numatrace_version: &'static str,
    kernel_release: String,
    checks: &'a [CheckResult],
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

fn unsupported(patch: &'static str, title: &'static str, why: String) -> CheckResult {
    CheckResult {
        patch,
        title,
        verdict: Verdict::Unsupported,
        sentence: why,
        evidence: BTreeMap::new(),
        kernel_facts: BTreeMap::new(),
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

async fn check_000(
    args: &CheckArgs,
    no_fentry: bool,
    signals: &mut Signals,
) -> Result<CheckResult> {
    const NEEDS: [&str; 2] = ["mpol_misplaced", "task_numa_fault"];
    if !args.command.is_empty() {
        let (r, _) = collect(
            &CollectOptions::for_command(args.command.clone(), no_fentry),
            signals,
        )
        .await?;
        let facts = match require(&r, &NEEDS) {
            Ok(f) => f,
            Err(why) => return Ok(unsupported("000", TITLE_000, why)),
        };
        let mut evidence = BTreeMap::new();
        hint_evidence("", &r, &mut evidence);
        let h = &r.totals.hint_faults;
        let small = h.cow_shared.saturating_sub(h.cow_shared_large);
        let (verdict, sentence) = if small >= 10 && small * 100 > h.faults {
            (
                Verdict::BehavesAsUnpatched,
                format!(
                    "{small} of {} hint faults hit COW-shared 4K pages.",
                    h.faults
                ),
            )
        } else {
            (
                Verdict::NotExercised,
                format!(
                    "{small} of {} hint faults hit COW-shared 4K pages; without a control this \
                     cannot tell a patched kernel from a workload without shared pages \
                     (run `numatrace check --patch 000 --reproduce`).",
                    h.faults
                ),
            )
        };
        return Ok(CheckResult {
            patch: "000",
            title: TITLE_000,
            verdict,
            sentence,
            evidence,
            kernel_facts: facts,
        });
    }

    let workload = workload_binary()?;
    let run = |mode: &str| -> Vec<OsString> {
        let d = duration_arg(args.duration);
        [
            workload.as_os_str(),
            "cow".as_ref(),
            "--mode".as_ref(),
            mode.as_ref(),
            "--children".as_ref(),
            "2".as_ref(),
            "--mem-mib".as_ref(),
            args.mem_mib.to_string().as_ref(),
            "--duration".as_ref(),
            d.as_ref(),
        ]
        .into_iter()
        .map(OsString::from)
        .collect()
    };
    let (shared, _) = collect(
        &CollectOptions::for_command(run("shared"), no_fentry),
        signals,
    )
    .await?;
    let facts = match require(&shared, &NEEDS) {
        Ok(f) => f,
        Err(why) => return Ok(unsupported("000", TITLE_000, why)),
    };
    let (control, _) = collect(
        &CollectOptions::for_command(run("private"), no_fentry),
        signals,
    )
    .await?;
    let array_pages = (args.mem_mib as u64) << 8;
    let (verdict, mut sentence) = verdict_000(&shared.totals, &control.totals, array_pages);
    if let Some(off) = balancing_off(verdict, &shared) {
        sentence = off;
    } else if verdict == Verdict::NotExercised && shared.kernel.numa_nodes < 2 {
        sentence = format!(
            "{sentence} With one NUMA node every page is already local, and the kernel does not \
             scan those of single-threaded tasks."
        );
    }
    let mut evidence = BTreeMap::new();
    evidence.insert("array_pages".into(), json!(array_pages));
    evidence.insert("min_control_faults".into(), json!(MIN_CONTROL_FAULTS));
    hint_evidence("shared.", &shared, &mut evidence);
    hint_evidence("control.", &control, &mut evidence);
    Ok(CheckResult {
        patch: "000",
        title: TITLE_000,
        verdict,
        sentence,
        evidence,
        kernel_facts: facts,
    })
}

/// Aggressive scan tunables for seed 003's reproducer: scan early, often and a lot.
const TUNABLES_003: [(&str, &str); 3] = [
    ("scan_delay_ms", "100"),
    ("scan_period_min_ms", "100"),
    ("scan_size_mb", "1024"),
];

/// Seed 002's reproducer: fast scan sequences (short delay and period) and a scan size below
/// VMA B's 256 MiB, so that scanning B uses up each call's budget: the kernel then never
/// reaches the end of the address space in a call that skipped A, where it would force-scan A
/// whatever its history.
const TUNABLES_002: [(&str, &str); 4] = [
    ("scan_delay_ms", "100"),
    ("scan_period_min_ms", "100"),
    ("scan_period_max_ms", "200"),
    ("scan_size_mb", "16"),
];

const GAP_HOOK: &str = "tp_btf:sched_skip_vma_numa";
const REPRODUCER_THREADS_002: u32 = 4;

async fn check_002(
    args: &CheckArgs,
    no_fentry: bool,
    signals: &mut Signals,
) -> Result<CheckResult> {
    let reproduce = args.command.is_empty();
    let state = std::env::temp_dir().join(format!("numatrace-check-002-{}", std::process::id()));
    let command: Vec<OsString> = if reproduce {
        // Four threads (one touching, three asleep): on a patched kernel the gap climbs to
        // exactly 4 and stops, which nothing but the patch's rule would do.
        let mut c = vec![workload_binary()?.into_os_string(), "idle-vma".into()];
        c.extend([
            "--threads".into(),
            REPRODUCER_THREADS_002.to_string().into(),
        ]);
        c.extend(["--duration".into(), duration_arg(args.duration).into()]);
        c.extend(["--state-file".into(), state.clone().into_os_string()]);
        c
    } else {
        args.command.clone()
    };
    // Restored when the guard drops, whatever happens in between.
    let (_tunables, applied) = Tunables::set_if(reproduce, &TUNABLES_002);
    let collected = collect(&CollectOptions::for_command(command, no_fentry), signals).await;
    let state_text = std::fs::read_to_string(&state).unwrap_or_default();
    let _ = std::fs::remove_file(&state);
    let (r, _) = collected?;
    let mut facts = match require(&r, &[GAP_HOOK]) {
        Ok(f) => f,
        Err(why) => return Ok(unsupported("002", TITLE_002, why)),
    };
    if !applied.is_empty() {
        facts.insert("tunables".into(), applied.join(", "));
    }
    let label = |v: &crate::model::VmaRecord| match &v.mapping {
        Some(m) => format!("{}-{} {m}", v.start, v.end),
        None => format!("{}-{}", v.start, v.end),
    };
    let all: Vec<&crate::model::VmaRecord> =
        r.processes.iter().flat_map(|p| p.vmas.iter()).collect();
    let gaps: Vec<VmaGaps> = all
        .iter()
        .filter_map(|v| {
            v.pid_inactive.map(|g| VmaGaps {
                vma: label(v),
                gaps: g,
            })
        })
        .collect();
    let (mut verdict, mut sentence, mut evidence) = verdict_002(&gaps);
    if reproduce {
        let st = parse_idle_vma_state(&state_text);
        let a = st.a.and_then(|(a0, _)| {
            all.iter().copied().find(|v| {
                let end = u64::from_str_radix(v.end.trim_start_matches("0x"), 16).unwrap_or(0);
                v.start_addr <= a0 && a0 < end
            })
        });
        let scan_times = match hook(&r, "change_prot_numa") {
            Some(h) if h.attached && h.mechanism == crate::plan::Mechanism::Fentry => true,
            _ => {
                facts.insert(
                    "scan_times".into(),
                    "unknown: change_prot_numa is not hooked with fexit (it needs the VMA)".into(),
                );
                false
            }
        };
        let phase = |n: &str| st.phases.get(n).copied();
        let times = a.map(|v| v.scan_times_ns.as_slice()).unwrap_or_default();
        let between = |from: Option<u64>, to: Option<u64>| match (from, to) {
            (Some(f), Some(t)) => times.iter().filter(|&&x| x >= f && x < t).count() as u64,
            _ => 0,
        };
        evidence.insert(
            "reproducer.a_vma".into(),
            json!(a.map(label).or(st.a.map(|(s, e)| format!("{s:#x}-{e:#x}")))),
        );
        let a_gaps = a.and_then(|v| v.pid_inactive).unwrap_or_default();
        evidence.insert(
            "reproducer.a_pid_inactive_skips".into(),
            json!(a_gaps.skips),
        );
        evidence.insert("reproducer.a_max_gap".into(), json!(a_gaps.max_gap));
        evidence.insert(
            "reproducer.a_skips_by_reason".into(),
            json!(a.map(|v| v.skips).unwrap_or_default()),
        );
        if scan_times {
            evidence.insert(
                "reproducer.a_scans_while_idle".into(),
                json!(between(phase("b-only"), phase("a-only"))),
            );
            evidence.insert(
                "reproducer.a_scans_after_renewed_access".into(),
                json!(between(phase("a-only"), phase("end"))),
            );
            evidence.insert(
                "reproducer.a_first_scan_after_renewed_access_ms".into(),
                json!(phase("a-only").and_then(|t| first_after_ms(times, t))),
            );
        }
        if verdict != Verdict::BehavesAsUnpatched && a_gaps.at_threshold == 0 {
            verdict = Verdict::NotExercised;
            sentence = format!(
                "The reproducer's idle VMA A was skipped {} time(s) as pid_inactive but never \
                 reached the patch's threshold (gap = thread count): scan sequences were too \
                 slow for its run; try a longer --duration.",
                a_gaps.skips
            );
        }
    }
    if let Some(off) = balancing_off(verdict, &r) {
        sentence = off;
    }
    Ok(CheckResult {
        patch: "002",
        title: TITLE_002,
        verdict,
        sentence,
        evidence,
        kernel_facts: facts,
    })
}

fn duration_arg(d: std::time::Duration) -> String {
    humantime::format_duration(d).to_string().replace(' ', "")
}

async fn check_003(
    args: &CheckArgs,
    no_fentry: bool,
    signals: &mut Signals,
) -> Result<CheckResult> {
    let reproduce = args.command.is_empty();
    let command: Vec<OsString> = if reproduce {
        let w = workload_binary()?;
        let mut c = vec![w.into_os_string()];
        c.extend(
            [
                "scan-heavy",
                "--threads",
                "8",
                "--mem-mib",
                "512",
                "--duration",
            ]
            .iter()
            .map(OsString::from),
        );
        c.push(duration_arg(args.duration).into());
        c
    } else {
        args.command.clone()
    };
    let (_tunables, applied) = Tunables::set_if(reproduce, &TUNABLES_003);
    let (r, _) = collect(&CollectOptions::for_command(command, no_fentry), signals).await?;
    let mut facts = match require(&r, &["task_numa_work"]) {
        Ok(f) => f,
        Err(why) => return Ok(unsupported("003", TITLE_003, why)),
    };
    if let Some(h) = hook(&r, "task_numa_work")
        && let Some(lack) = h.reasons.iter().find(|x| x.starts_with("BTF lacks"))
    {
        return Ok(unsupported("003", TITLE_003, lack.clone()));
    }
    if !applied.is_empty() {
        facts.insert("tunables".into(), applied.join(", "));
    }
    let tasks: Vec<TaskScan> = r
        .tasks
        .iter()
        .map(|t| TaskScan {
            task: format!("{} {}", t.pid, t.comm),
            calls: t.counts.scan.calls,
            runtime_ns: t.counts.scan.task_runtime_ns,
            share: t.counts.scan.share_between_calls,
        })
        .collect();
    let (verdict, mut sentence, evidence) = verdict_003(&r.totals, &tasks);
    if let Some(off) = balancing_off(verdict, &r) {
        sentence = off;
    }
    Ok(CheckResult {
        patch: "003",
        title: TITLE_003,
        verdict,
        sentence,
        evidence,
        kernel_facts: facts,
    })
}

async fn check_001(
    args: &CheckArgs,
    no_fentry: bool,
    signals: &mut Signals,
) -> Result<CheckResult> {
    let mut runs = Vec::new();
    let configs: &[bool] = if args.command.is_empty() {
        &[false, true]
    } else {
        &[false]
    };
    for &thp in configs {
        let command = if args.command.is_empty() {
            let mut c = vec![workload_binary()?.into_os_string(), "migrate".into()];
            c.extend(["--mem-mib".into(), "64".into(), "--duration".into()]);
            c.push(duration_arg(args.duration).into());
            if thp {
                c.push("--thp".into());
            }
            c
        } else {
            args.command.clone()
        };
        let (r, _) = collect(&CollectOptions::for_command(command, no_fentry), signals).await?;
        runs.push(r);
    }
    let facts = match require(&runs[0], &["mpol_misplaced", "task_numa_fault"]) {
        Ok(f) => f,
        Err(why) => return Ok(unsupported("001", TITLE_001, why)),
    };
    let four_k = &runs[0];
    let thp_mean = runs
        .get(1)
        .and_then(|r| r.histograms.mean_hint_faults_per_region_pass);
    let (verdict, sentence) = verdict_001(
        four_k.totals.hint_faults.faults_4k,
        four_k.histograms.mean_hint_faults_per_region_pass,
        thp_mean,
    );
    let mut evidence = BTreeMap::new();
    for (r, name) in runs.iter().zip(["4k", "thp"]) {
        let h = &r.histograms;
        evidence.insert(
            format!("{name}.hint_faults"),
            json!(r.totals.hint_faults.faults),
        );
        evidence.insert(
            format!("{name}.faults_4k"),
            json!(r.totals.hint_faults.faults_4k),
        );
        evidence.insert(
            format!("{name}.faults_thp"),
            json!(r.totals.hint_faults.faults_thp),
        );
        evidence.insert(format!("{name}.region_passes"), json!(h.region_passes));
        evidence.insert(
            format!("{name}.mean_hint_faults_per_region_pass"),
            json!(h.mean_hint_faults_per_region_pass),
        );
        evidence.insert(
            format!("{name}.hint_faults_per_region_pass"),
            json!(h.hint_faults_per_region_pass),
        );
        evidence.insert(
            format!("{name}.pages_per_hint_fault"),
            json!(h.pages_per_hint_fault),
        );
    }
    Ok(CheckResult {
        patch: "001",
        title: TITLE_001,
        verdict,
        sentence,
        evidence,
        kernel_facts: facts,
    })
}

async fn check_004(
    args: &CheckArgs,
    no_fentry: bool,
    signals: &mut Signals,
) -> Result<CheckResult> {
    if !args.command.is_empty() {
        return Ok(unsupported(
            "004",
            TITLE_004,
            "004 needs its reproducer (it compares a THP-disabled process with a control): run it \
             without -- COMMAND"
                .into(),
        ));
    }
    let workload = workload_binary()?;
    let dir = std::env::temp_dir().join(format!("numatrace-check-004-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut runs = Vec::new();
    for control in [false, true] {
        let state = dir.join(if control { "control" } else { "disabled" });
        let _ = std::fs::remove_file(&state);
        let mut c = vec![workload.clone().into_os_string(), "thp-disable".into()];
        if control {
            c.push("--control".into());
        }
        c.extend(["--mem-mib".into(), "64".into(), "--duration".into()]);
        c.push(duration_arg(args.duration).into());
        c.push("--state-file".into());
        c.push(state.clone().into_os_string());
        let (r, _) = collect(&CollectOptions::for_command(c, no_fentry), signals).await?;
        let states = parse_thp_states(&std::fs::read_to_string(&state).unwrap_or_default());
        runs.push((r, states));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let facts = match require(&runs[0].0, &["task_numa_fault"]) {
        Ok(f) => f,
        Err(why) => return Ok(unsupported("004", TITLE_004, why)),
    };
    let thp = |r: &StatReport| r.totals.hint_faults.faults_thp;
    let child = runs[0].1.iter().find(|s| s.role == "child");
    let (verdict, sentence) = verdict_004(thp(&runs[0].0), thp(&runs[1].0), child);
    let mut evidence = BTreeMap::new();
    for ((r, states), name) in runs.iter().zip(["disabled", "control"]) {
        evidence.insert(format!("{name}.thp_hint_faults"), json!(thp(r)));
        evidence.insert(
            format!("{name}.hint_faults"),
            json!(r.totals.hint_faults.faults),
        );
        for s in states {
            evidence.insert(
                format!("{name}.{}", s.role),
                json!({"pid": s.pid, "prctl_thp_disable": s.prctl, "thp_enabled": s.thp_enabled}),
            );
        }
    }
    Ok(CheckResult {
        patch: "004",
        title: TITLE_004,
        verdict,
        sentence,
        evidence,
        kernel_facts: facts,
    })
}

fn to_text(results: &[CheckResult]) -> String {
    let mut out = String::new();
    for r in results {
        out.push_str(&format!(
            "seed {} — {}\n  verdict: {}\n  {}\n",
            r.patch, r.title, r.verdict, r.sentence
        ));
        if !r.evidence.is_empty() {
            out.push_str("  evidence:\n");
            for (k, v) in &r.evidence {
                out.push_str(&format!("    {k} = {v}\n"));
            }
        }
        if !r.kernel_facts.is_empty() {
            let facts: Vec<String> = r
                .kernel_facts
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            out.push_str(&format!("  relied on: {}\n", facts.join(", ")));
        }
    }
    out
}

pub async fn run(args: CheckArgs, no_fentry: bool) -> Result<i32> {
    let mut signals = Signals::new()?;
    let mut results = Vec::new();
    match args.patch.as_str() {
        "000" => results.push(check_000(&args, no_fentry, &mut signals).await?),
        "001" => results.push(check_001(&args, no_fentry, &mut signals).await?),
        "002" => results.push(check_002(&args, no_fentry, &mut signals).await?),
        "003" => results.push(check_003(&args, no_fentry, &mut signals).await?),
        "004" => results.push(check_004(&args, no_fentry, &mut signals).await?),
        "all" => {
            results.push(check_000(&args, no_fentry, &mut signals).await?);
            results.push(check_001(&args, no_fentry, &mut signals).await?);
            results.push(check_002(&args, no_fentry, &mut signals).await?);
            results.push(check_003(&args, no_fentry, &mut signals).await?);
            results.push(check_004(&args, no_fentry, &mut signals).await?);
        }
        other => bail!("unknown patch {other}"),
    }
    if args.json {
        let report = CheckReport {
            schema: SCHEMA,
            numatrace_version: env!("CARGO_PKG_VERSION"),
            kernel_release: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_owned(),
            checks: &results,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", to_text(&results));
    }
    Ok(0)
}
