//! `numatrace check`: runs the chosen seeds' checks ([`crate::check`]) and prints their
//! verdicts as text or JSON (`numatrace.check/1`).

use anyhow::Result;
use serde::Serialize;

use crate::{
    check::{CheckResult, SEEDS, run_seed},
    cli::CheckArgs,
    cmd::stat::Signals,
};

pub const SCHEMA: &str = "numatrace.check/1";

#[derive(Serialize)]
struct CheckReport<'a> {
    schema: &'static str,
    numatrace_version: &'static str,
    kernel_release: String,
    checks: &'a [CheckResult],
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
    use crate::kernel::tunables;
    if args.restore_tunables {
        let r = tunables::restore_saved()?;
        if r.notes.is_empty() {
            println!("nothing to restore: no numatrace check left tunables changed");
        }
        for n in &r.notes {
            println!("{n}");
        }
        return Ok(i32::from(r.kept > 0));
    }
    if let Some(w) = tunables::pending_warning() {
        eprintln!("numatrace: warning: {w}");
    }
    let mut signals = Signals::new()?;
    let mut args = args;
    args.run_as = crate::identity::for_traced_command(args.user.as_deref(), &args.command)?;
    // One numatrace at a time changes the tunables; held for the whole run.
    let _lock = if args.command.is_empty() {
        Some(tunables::Lock::acquire()?)
    } else {
        None
    };
    let mut results = Vec::new();
    let mut interrupted = None;
    for seed in SEEDS
        .iter()
        .filter(|s| args.patch == "all" || args.patch == s.id)
    {
        results.push(run_seed(seed.id, &args, no_fentry, &mut signals).await?);
        // Ctrl-C ends the window it arrives in (its tunables restored on the way out) and the
        // whole run: the seeds not yet run are not started.
        if let Some(sig) = signals.received() {
            interrupted = Some(sig);
            break;
        }
    }
    if results.is_empty() {
        anyhow::bail!("unknown patch {}", args.patch);
    }
    if let Some(sig) = interrupted {
        eprintln!(
            "numatrace: check stopped by signal {sig} after seed {}; tunables restored",
            results.last().map_or("-", |r| r.patch)
        );
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
    Ok(interrupted.map_or(0, |sig| 128 + sig))
}
