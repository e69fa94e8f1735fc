//! Seed 000's reproducer: its workload and control under the collector, then its verdict.

use super::*;
use crate::report::verdicts::seed000::*;

pub async fn run(args: &CheckArgs, no_fentry: bool, signals: &mut Signals) -> Result<CheckResult> {
    const NEEDS: [&str; 2] = ["mpol_misplaced", "task_numa_fault"];
    if !args.command.is_empty() {
        let (r, _) = collect(&window_for(args.command.clone(), args, no_fentry), signals).await?;
        let facts = match require(&r, &NEEDS) {
            Ok(f) => f,
            Err(why) => return Ok(SEED.unsupported(why)),
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
        return Ok(SEED.result(verdict, sentence, evidence, facts));
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
    let (shared, _) = collect(&window_for(run("shared"), args, no_fentry), signals).await?;
    let facts = match require(&shared, &NEEDS) {
        Ok(f) => f,
        Err(why) => return Ok(SEED.unsupported(why)),
    };
    let (control, _) = collect(&window_for(run("private"), args, no_fentry), signals).await?;
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
    Ok(SEED.result(verdict, sentence, evidence, facts))
}
