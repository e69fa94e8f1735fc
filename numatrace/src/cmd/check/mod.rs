//! `numatrace check`: runs the chosen seeds' reproducers (one module per seed: its workload
//! and control under the collector), judges them with [`crate::report::verdicts`] and prints
//! the verdicts as text or JSON (`numatrace.check/1`).

mod seed000;
mod seed001;
mod seed002;
mod seed003;
mod seed004;

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
    report::{
        stat::StatReport,
        verdicts::{CheckResult, SEEDS, Verdict, balancing_off, hint_evidence, hook, require},
    },
    session::{CollectOptions, Signals},
    spawn::resolve,
    text_escape::Escaped,
};

pub const SCHEMA: &str = "numatrace.check/1";

/// Exit status of a `check --repeat` whose runs of one check gave different verdicts.
pub const EXIT_DISAGREE: i32 = 3;

#[derive(Serialize)]
struct CheckReport<'a> {
    schema: &'static str,
    numatrace_version: &'static str,
    kernel_release: String,
    /// Every run, in order (with `--repeat N`, a seed's N runs one after the other).
    checks: &'a [CheckResult],
    /// With `--repeat`: one entry per seed, its verdicts in run order and whether they agree.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    agreement: Vec<Agreement>,
}

/// One seed's verdicts across `--repeat` runs.
#[derive(Serialize, Debug, PartialEq)]
pub struct Agreement {
    pub patch: &'static str,
    pub verdicts: Vec<Verdict>,
    pub agree: bool,
}

/// The seeds' verdicts across runs, in the order the seeds first appear.
fn agreement(results: &[CheckResult]) -> Vec<Agreement> {
    let mut out: Vec<Agreement> = Vec::new();
    for r in results {
        match out.iter_mut().find(|a| a.patch == r.patch) {
            Some(a) => a.verdicts.push(r.verdict),
            None => out.push(Agreement {
                patch: r.patch,
                verdicts: vec![r.verdict],
                agree: true,
            }),
        }
    }
    for a in &mut out {
        a.agree = a.verdicts.windows(2).all(|w| w[0] == w[1]);
    }
    out
}

fn agreement_text(agreement: &[Agreement]) -> String {
    let mut out = String::from("agreement across runs:\n");
    for a in agreement {
        let verdicts: Vec<String> = a.verdicts.iter().map(ToString::to_string).collect();
        out.push_str(&format!(
            "  seed {}: {} ({})\n",
            a.patch,
            if a.agree {
                format!("{} of {} agree", a.verdicts.len(), a.verdicts.len())
            } else {
                "DISAGREE".to_owned()
            },
            verdicts.join(", ")
        ));
    }
    out
}

fn to_text(results: &[CheckResult]) -> String {
    let mut out = String::new();
    for r in results {
        out.push_str(&format!(
            "seed {} — {}\n  verdict: {}\n  {}\n",
            r.patch,
            r.title,
            r.verdict,
            Escaped(&r.sentence)
        ));
        if !r.evidence.is_empty() {
            out.push_str("  evidence:\n");
            for (k, v) in &r.evidence {
                out.push_str(&format!("    {} = {}\n", Escaped(k), value_text(v)));
            }
        }
        if !r.kernel_facts.is_empty() {
            let facts: Vec<String> = r
                .kernel_facts
                .iter()
                .map(|(k, v)| format!("{}: {}", Escaped(k), Escaped(v)))
                .collect();
            out.push_str(&format!("  relied on: {}\n", facts.join(", ")));
        }
    }
    out
}

/// A JSON value as JSON, but with its strings (a task's comm, a mapping) escaped for a terminal
/// rather than for JSON: serde_json leaves C1 controls and bidi overrides as they are.
fn value_text(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::String(s) => format!("\"{}\"", Escaped(s).to_string().replace('"', "\\\"")),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(value_text).collect::<Vec<_>>().join(",")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!(
                    "{}:{}",
                    value_text(&Value::String(k.clone())),
                    value_text(v)
                ))
                .collect::<Vec<_>>()
                .join(",")
        ),
        other => other.to_string(),
    }
}

pub async fn run(args: CheckArgs, no_fentry: bool) -> Result<i32> {
    use crate::kernel::tunables;
    if args.restore_tunables {
        let r = tunables::restore_saved()?;
        if r.notes.is_empty() {
            println!("nothing to restore: no numatrace check left tunables changed");
        }
        for n in &r.notes {
            println!("{}", Escaped(n));
        }
        return Ok(i32::from(r.kept > 0));
    }
    if let Some(w) = tunables::pending_warning() {
        eprintln!("numatrace: warning: {w}");
    }
    let mut signals = Signals::new()?;
    let mut args = args;
    args.run_as = crate::identity::for_traced_command(args.user.as_deref(), &args.command)?;
    // One numatrace at a time changes the tunables: held for the whole run by a check whose
    // reproducers change them (002, 003, 004). Where no lock can be had (no writable /run), the
    // reproducers run with the tunables as they are, saying so.
    let changes_tunables =
        args.command.is_empty() && ["all", "002", "003", "004"].contains(&args.patch.as_str());
    let _lock = if changes_tunables {
        match tunables::Lock::acquire() {
            Ok(l) => Some(l),
            Err(e @ tunables::LockError::Busy(_)) => return Err(e.into()),
            Err(e) => {
                eprintln!("numatrace: warning: {}", Escaped(&e.to_string()));
                None
            }
        }
    } else {
        None
    };
    let mut results = Vec::new();
    let mut interrupted = None;
    let runs = SEEDS
        .iter()
        .filter(|s| args.patch == "all" || args.patch == s.id)
        .flat_map(|s| std::iter::repeat_n(s, args.repeat as usize));
    for seed in runs {
        // Ctrl-C ends the window it arrives in (its tunables restored on the way out) and the
        // whole run: no later window or seed starts (a seed's second window refuses to).
        let result = run_seed(seed.id, &args, no_fentry, &mut signals).await;
        if let Some(sig) = signals.received() {
            interrupted = Some(sig);
            if let Ok(r) = result {
                results.push(r);
            }
            break;
        }
        results.push(result?);
    }
    if let Some(sig) = interrupted {
        eprintln!(
            "numatrace: check stopped by signal {sig} after seed {}; tunables restored",
            results.last().map_or("-", |r| r.patch)
        );
    } else if results.is_empty() {
        anyhow::bail!("unknown patch {}", args.patch);
    }
    let agreement = if args.repeat > 1 {
        agreement(&results)
    } else {
        Vec::new()
    };
    let disagree = agreement.iter().any(|a| !a.agree);
    if args.json {
        let report = CheckReport {
            schema: SCHEMA,
            numatrace_version: env!("CARGO_PKG_VERSION"),
            kernel_release: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_owned(),
            checks: &results,
            agreement,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", to_text(&results));
        if !agreement.is_empty() {
            print!("{}", agreement_text(&agreement));
        }
    }
    Ok(match interrupted {
        Some(sig) => 128 + sig,
        None if disagree => EXIT_DISAGREE,
        None => 0,
    })
}

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

/// One window of a reproducer (or the user's command): its report and the command's exit code.
async fn collect(
    opts: &CollectOptions,
    signals: &mut Signals,
) -> Result<(StatReport, Option<i32>)> {
    let c = crate::session::collect(opts, signals).await?;
    Ok((StatReport::of(&c), c.exit))
}

/// The window of one command of a check: a reproducer runs as root, the user's `-- COMMAND` as
/// `--user` or the user who ran sudo (resolved once by `cmd::check` into `args.run_as`).
fn window_for(command: Vec<OsString>, args: &CheckArgs, no_fentry: bool) -> CollectOptions {
    let mut opts = CollectOptions::for_command(command, no_fentry);
    if !args.command.is_empty() {
        opts.run_as = args.run_as.clone();
    }
    opts
}

/// numatrace-workload, which the reproducers run as root: next to this binary, else (not under
/// sudo, where PATH may be the invoking user's) on PATH; either way only a file root or
/// numatrace's user owns that neither group nor others can write.
fn workload_binary() -> Result<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("numatrace-workload")))
        .filter(|p| p.is_file());
    let found = beside
        .or_else(|| {
            crate::invoker::invoker()
                .is_none()
                .then(|| resolve(Path::new("numatrace-workload")))
                .flatten()
        })
        .context(
            "numatrace-workload (the reproducers) is not next to numatrace (nor, without sudo, \
             on PATH): `cargo xtask build` builds it beside numatrace",
        )?;
    crate::safe_fs::check_trusted_path(&found)?;
    Ok(found)
}

fn duration_arg(d: std::time::Duration) -> String {
    humantime::format_duration(d).to_string().replace(' ', "")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::report::verdicts::Verdict;

    #[test]
    fn repeated_runs_agree_only_when_every_verdict_is_the_same() {
        let r = |patch, verdict| CheckResult {
            patch,
            title: "t",
            verdict,
            sentence: String::new(),
            evidence: BTreeMap::new(),
            kernel_facts: BTreeMap::new(),
        };
        let a = agreement(&[
            r("003", Verdict::BehavesAsPatched),
            r("003", Verdict::BehavesAsPatched),
            r("004", Verdict::BehavesAsPatched),
            r("004", Verdict::NotExercised),
            r("004", Verdict::BehavesAsPatched),
        ]);
        assert_eq!(
            a,
            [
                Agreement {
                    patch: "003",
                    verdicts: vec![Verdict::BehavesAsPatched; 2],
                    agree: true
                },
                Agreement {
                    patch: "004",
                    verdicts: vec![
                        Verdict::BehavesAsPatched,
                        Verdict::NotExercised,
                        Verdict::BehavesAsPatched
                    ],
                    agree: false
                },
            ]
        );
        let t = agreement_text(&a);
        assert!(
            t.contains("seed 003: 2 of 2 agree (behaves-as-patched, behaves-as-patched)"),
            "{t}"
        );
        assert!(
            t.contains(
                "seed 004: DISAGREE (behaves-as-patched, not-exercised, behaves-as-patched)"
            ),
            "{t}"
        );
    }

    #[test]
    fn text_escapes_what_the_traced_tasks_named_themselves() {
        let evil = "\x1b]0;pwn\x07x\u{9b}2J\u{202e}";
        let r = CheckResult {
            patch: "000",
            title: "t",
            verdict: Verdict::NotExercised,
            sentence: format!("task 7 {evil} waited"),
            evidence: BTreeMap::from([
                ("stalls".to_owned(), json!({ format!("7 {evil}"): 3 })),
                ("task".to_owned(), json!(format!("7 \"{evil}\"\\"))),
            ]),
            kernel_facts: BTreeMap::from([("kernel".to_owned(), evil.to_owned())]),
        };
        let t = to_text(&[r]);
        assert!(
            !t.chars()
                .any(|c| c != '\n' && crate::text_escape::needs_escape(c) && c != '\\'),
            "{t:?}"
        );
        assert!(
            t.contains("task 7 \\x1b]0;pwn\\x07x\\u{9b}2J\\u{202e} waited"),
            "{t}"
        );
        assert!(t.contains(r#"{"7 \x1b]0;pwn"#), "{t}");
        assert!(
            t.contains(r#"task = "7 \"\x1b]0;pwn\x07x\u{9b}2J\u{202e}\"\\""#),
            "{t}"
        );
        assert!(t.contains("kernel: \\x1b]0;pwn"), "{t}");
    }
}
