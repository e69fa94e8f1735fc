//! Seed 001's reproducer: its workload and control under the collector, then its verdict.

use super::*;
use crate::report::verdicts::seed001::*;

pub async fn run(args: &CheckArgs, no_fentry: bool, signals: &mut Signals) -> Result<CheckResult> {
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
        let (r, _) = collect(&window_for(command, args, no_fentry), signals).await?;
        runs.push(r);
    }
    let facts = match require(&runs[0], &["mpol_misplaced", "task_numa_fault"]) {
        Ok(f) => f,
        Err(why) => return Ok(SEED.unsupported(why)),
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
    Ok(SEED.result(verdict, sentence, evidence, facts))
}
