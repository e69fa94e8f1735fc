//! Seed 004's reproducer: its workload and control under the collector, then its verdict.

use super::*;
use crate::report::verdicts::seed004::*;

/// Seed 004's windows: scan early and often (the child's 64 MiB are well under a call's
/// default 256 MB budget).
const TUNABLES_004: [(&str, &str); 2] = [("scan_delay_ms", "100"), ("scan_period_min_ms", "100")];

pub async fn run(args: &CheckArgs, no_fentry: bool, signals: &mut Signals) -> Result<CheckResult> {
    if !args.command.is_empty() {
        return Ok(SEED.unsupported(
            "004 needs its reproducer (it compares a THP-disabled process with a control): run it \
             without -- COMMAND"
                .into(),
        ));
    }
    let workload = workload_binary()?;
    // Fresh and private (mkdtemp, 0700): a directory someone made first is never used.
    let scratch = crate::safe_fs::scratch_dir("numatrace-check-004-")?;
    let dir = scratch.path();
    // Scans from early on and often, so that even a slow (emulated) machine's window holds
    // several scan passes over the child's memory; restored when the guard drops.
    let (_tunables, applied) = Tunables::set(&TUNABLES_004);
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
        let (r, _) = collect(&window_for(c, args, no_fentry), signals).await?;
        let states = parse_thp_states(&std::fs::read_to_string(&state).unwrap_or_default());
        runs.push((r, states));
    }
    drop(scratch);
    let mut facts = match require(&runs[0].0, &["task_numa_fault"]) {
        Ok(f) => f,
        Err(why) => return Ok(SEED.unsupported(why)),
    };
    if !applied.is_empty() {
        facts.insert("tunables".into(), applied.join(", "));
    }
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
    Ok(SEED.result(verdict, sentence, evidence, facts))
}
