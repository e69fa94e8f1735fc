//! Seed 003's reproducer: its workload and control under the collector, then its verdict.

use super::*;
use crate::report::verdicts::seed003::*;

/// Aggressive scan tunables for seed 003's reproducer: scan early, often and a lot.
const TUNABLES_003: [(&str, &str); 3] = [
    ("scan_delay_ms", "100"),
    ("scan_period_min_ms", "100"),
    ("scan_size_mb", "1024"),
];

pub async fn run(args: &CheckArgs, no_fentry: bool, signals: &mut Signals) -> Result<CheckResult> {
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
    let (r, _) = collect(&window_for(command, args, no_fentry), signals).await?;
    let mut facts = match require(&r, &["task_numa_work"]) {
        Ok(f) => f,
        Err(why) => return Ok(SEED.unsupported(why)),
    };
    if let Some(h) = hook(&r, "task_numa_work")
        && let Some(lack) = h.reasons.iter().find(|x| x.starts_with("BTF lacks"))
    {
        return Ok(SEED.unsupported(lack.clone()));
    }
    if !applied.is_empty() {
        facts.insert("tunables".into(), applied.join(", "));
    }
    let tasks = task_scans(&r);
    let (verdict, mut sentence, evidence) = verdict_003(&r.totals, &tasks);
    if let Some(off) = balancing_off(verdict, &r) {
        sentence = off;
    }
    Ok(SEED.result(verdict, sentence, evidence, facts))
}
