//! `numatrace report`: a capture read offline, as any user: the `stat` summary of its window,
//! the verdicts its evidence supports, findings; `--diff` of two captures; the Perfetto trace.

use std::{fmt::Write as _, io::Write as _, path::Path};

use anyhow::{Result, bail};
use serde::Serialize;

use crate::{
    capture::Capture,
    check::{CheckResult, NEED_REPRODUCER, offline_verdicts},
    cli::{ReportArgs, ReportFormat},
    engine::Filter,
    report::{
        chrome::write_trace,
        diff::diff,
        findings::{Finding, findings},
        stat::{KernelSummary, StatReport, Window},
    },
};

pub const REPORT_SCHEMA: &str = "numatrace.report/1";

/// What a capture says about itself.
#[derive(Clone, Debug, Serialize)]
pub struct CaptureInfo {
    pub file: String,
    pub writer: String,
    pub host: String,
    pub recorded_unix_s: f64,
    pub complete: bool,
    /// Where the file was cut short (a capture killed or out of disk).
    pub truncated_at: Option<u64>,
    pub samples: usize,
    pub events: u64,
    pub events_over_max_size: u64,
    pub events_not_kept: u64,
    pub unknown_sections: usize,
    pub redacted: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub capture: CaptureInfo,
    /// The `numatrace.stat/1` report of the captured window, as `stat` prints it.
    pub stat: StatReport,
    pub verdicts: Vec<CheckResult>,
    pub findings: Vec<Finding>,
}

/// The `stat` report of a capture's window (to its last sample when it was cut short).
pub fn stat_of(cap: &Capture) -> StatReport {
    let closing = cap.closing();
    let delta = closing.delta(&cap.first);
    let window = match &cap.end {
        Some(end) => end.window.clone(),
        // Cut short before its end: the window as planned, as long as it lasted.
        None => Window {
            duration_s: delta.span_ns as f64 / 1e9,
            consistent: delta.consistent,
            ..cap
                .machine
                .window
                .clone()
                .unwrap_or_else(|| Window::system_wide(0.0, false))
        },
    };
    let filter = Filter {
        comm: window.comm_filter.clone(),
        tgid: None,
        cgroup: window.cgroup_filter.clone(),
    };
    let kernel = cap.machine.kernel.clone().unwrap_or(KernelSummary {
        release: "unknown".into(),
        numa_nodes: cap.machine.nodes.len() as u32,
        numa_balancing: None,
    });
    StatReport::new(kernel, window, cap.hooks.clone(), &delta, &filter)
}

pub fn report_of(cap: &Capture) -> Report {
    let stat = stat_of(cap);
    Report {
        schema: REPORT_SCHEMA,
        capture: CaptureInfo {
            file: cap.path.display().to_string(),
            writer: cap.writer.clone(),
            host: cap.machine.hostname.clone(),
            recorded_unix_s: cap.machine.started_unix_s,
            complete: cap.complete(),
            truncated_at: cap.truncated_at,
            samples: cap.samples.len(),
            events: cap.events,
            events_over_max_size: cap.end.as_ref().map_or(0, |e| e.events_over_max_size),
            events_not_kept: cap.end.as_ref().map_or(0, |e| e.events_not_kept),
            unknown_sections: cap.unknown_sections,
            redacted: cap.machine.redacted,
        },
        verdicts: offline_verdicts(&stat),
        findings: findings(&stat),
        stat,
    }
}

impl Report {
    pub fn to_text(&self, rows: usize) -> String {
        let c = &self.capture;
        let mut s = String::new();
        // From the file: any number, so nothing here may panic on it.
        // humantime's RFC 3339 Display fails (an error, so a panic in `to_string`) from year 10000.
        const YEAR_10000_S: u64 = 253_402_300_800;
        let when = std::time::Duration::try_from_secs_f64(c.recorded_unix_s)
            .ok()
            .filter(|d| d.as_secs() < YEAR_10000_S)
            .and_then(|d| std::time::UNIX_EPOCH.checked_add(d))
            .map_or_else(
                || "an unknown time".to_owned(),
                |t| humantime::format_rfc3339_seconds(t).to_string(),
            );
        let _ = writeln!(
            s,
            "Capture {} — {}, recorded on {} at {when}, {} samples, {} events{}",
            c.file,
            c.writer,
            c.host,
            c.samples,
            c.events,
            if c.redacted { ", redacted" } else { "" }
        );
        if !c.complete {
            let _ = writeln!(
                s,
                "INCOMPLETE: the capture was cut short{}; this report covers it up to its last \
                 whole section ({:.1} s).",
                c.truncated_at
                    .map(|b| format!(" at byte {b}"))
                    .unwrap_or_default(),
                self.stat.window.duration_s
            );
        }
        let not_written = c.events_over_max_size.saturating_add(c.events_not_kept);
        if not_written > 0 {
            let _ = writeln!(
                s,
                "{} events were counted but not written ({} past --max-size, {} the recorder \
                 could not keep up with); the counts below include them.",
                not_written, c.events_over_max_size, c.events_not_kept
            );
        }
        s.push('\n');
        s.push_str(&self.stat.to_text(rows));
        let _ = writeln!(s, "\nVerdicts this capture's evidence supports:");
        for v in &self.verdicts {
            let _ = writeln!(s, "  {} {}: {}", v.patch, v.verdict, v.sentence);
        }
        let _ = writeln!(
            s,
            "  {}: need their reproducer and a control; run `sudo numatrace check` on the machine.",
            NEED_REPRODUCER.join(", ")
        );
        let _ = writeln!(s, "\nFindings:");
        if self.findings.is_empty() {
            let _ = writeln!(s, "  nothing stands out.");
        }
        for f in &self.findings {
            let _ = writeln!(s, "  - {}", f.sentence);
        }
        s
    }
}

fn open(path: &Path) -> Result<Capture> {
    // One line naming the file and the problem (the error says both).
    Capture::open(path).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Where the output goes: stdout, or a file written whole or not at all (see
/// [`crate::safe_fs::AtomicFile`]: a bad input never leaves a half-written file, an existing
/// one — even the capture itself — is replaced only with --force).
enum Output {
    Stdout(std::io::StdoutLock<'static>),
    File(Box<std::io::BufWriter<crate::safe_fs::AtomicFile>>),
}

impl Output {
    fn new(dest: Option<&Path>, force: bool) -> Result<Self> {
        Ok(match dest {
            None => Self::Stdout(std::io::stdout().lock()),
            Some(dest) => Self::File(Box::new(std::io::BufWriter::new(
                crate::safe_fs::AtomicFile::create(dest, force)?,
            ))),
        })
    }

    fn writer(&mut self) -> &mut dyn std::io::Write {
        match self {
            Self::Stdout(s) => s,
            Self::File(w) => w.as_mut(),
        }
    }

    fn commit(self) -> Result<()> {
        match self {
            Self::Stdout(mut s) => Ok(s.flush()?),
            Self::File(w) => {
                let f = w.into_inner().map_err(|e| e.into_error())?;
                Ok(f.commit()?)
            }
        }
    }
}

pub fn run(args: &ReportArgs) -> Result<i32> {
    let format = if args.json {
        ReportFormat::Json
    } else {
        args.format
    };
    if let Some(pair) = &args.diff {
        let [before, after] = pair.as_slice() else {
            bail!("--diff takes two captures: BEFORE AFTER");
        };
        let d = diff(&stat_of(&open(before)?), &stat_of(&open(after)?));
        let text = match format {
            ReportFormat::Json => serde_json::to_string_pretty(&d)? + "\n",
            ReportFormat::Text => d.to_text(),
            ReportFormat::ChromeTrace => bail!("--diff prints text or JSON"),
        };
        let mut out = Output::new(args.output.as_deref(), args.force)?;
        out.writer().write_all(text.as_bytes())?;
        out.commit()?;
        return Ok(0);
    }
    let Some(file) = &args.file else {
        bail!("which capture? `numatrace report FILE` (or --diff BEFORE AFTER)");
    };
    // The capture is read before anything is created.
    let cap = open(file)?;
    let mut out = Output::new(args.output.as_deref(), args.force)?;
    match format {
        ReportFormat::Text => write!(out.writer(), "{}", report_of(&cap).to_text(args.rows))?,
        ReportFormat::Json => writeln!(
            out.writer(),
            "{}",
            serde_json::to_string_pretty(&report_of(&cap))?
        )?,
        ReportFormat::ChromeTrace => {
            write_trace(&cap, out.writer()).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    out.commit()?;
    if format == ReportFormat::ChromeTrace
        && let Some(p) = &args.output
    {
        eprintln!(
            "numatrace: wrote {}; open it in https://ui.perfetto.dev or chrome://tracing",
            p.display()
        );
    }
    Ok(0)
}
