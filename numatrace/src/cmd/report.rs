//! `numatrace report`: a capture read offline, as any user: the `stat` summary of its window,
//! the verdicts its evidence supports, findings; `--diff` of two captures; the Perfetto trace.

use std::{fmt::Write as _, io::Write as _, path::Path};

use anyhow::{Result, bail};
use serde::Serialize;

use crate::{
    capture::{Capture, state::State},
    cli::{ReportArgs, ReportFormat},
    kernel::facts::KernelSummary,
    model::Window,
    report::verdicts::{CheckResult, NEED_REPRODUCER, offline_verdicts},
    report::{
        chrome::write_trace,
        context::context_text,
        diff::{Side, diff},
        findings::{Finding, findings},
        mmtests::{OpsRow, ops, ops_text},
        stat::StatReport,
    },
    text_escape::Escaped,
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
    /// The `numatrace.stat/2` report of the captured window, as `stat` prints it (what a hook
    /// that did not attach feeds is left out).
    #[serde(serialize_with = "crate::report::stat::serialize_measured")]
    pub stat: StatReport,
    pub verdicts: Vec<CheckResult>,
    pub findings: Vec<Finding>,
    /// mmtests' NUMA rows over the window, from /proc/vmstat at its start and end (`None`: the
    /// capture has no state at one end: an older numatrace wrote it, or it was cut short).
    pub mmtests: Option<Vec<OpsRow>>,
    /// The regression context at the start and the end of the window.
    pub state_start: Option<State>,
    pub state_end: Option<State>,
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
    let filter = window.filter();
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
        mmtests: mmtests_of(cap),
        state_start: cap.state_start.clone(),
        state_end: cap.state_end.clone(),
    }
}

/// mmtests' rows of a capture's window, when it has the vmstat of both ends.
pub fn mmtests_of(cap: &Capture) -> Option<Vec<OpsRow>> {
    Some(ops(cap.state_start.as_ref()?, cap.state_end.as_ref()?))
}

/// A capture's column in a diff, named after its file (`base.ntrace` → `base`).
pub fn side<'a>(r: &'a Report, path: &Path) -> Side<'a> {
    Side {
        name: path.file_stem().map_or_else(
            || r.capture.file.clone(),
            |s| s.to_string_lossy().into_owned(),
        ),
        stat: &r.stat,
        mmtests: r.mmtests.as_deref(),
        start: r.state_start.as_ref(),
    }
}

/// Why a capture has no mmtests rows.
const NO_OPS: &str = "not in this capture: it has no /proc/vmstat of both ends of its window \
                      (written by an older numatrace, or cut short)";

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
            Escaped(&c.file),
            Escaped(&c.writer),
            Escaped(&c.host),
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
        let _ = writeln!(
            s,
            "\nmmtests \"Ops\" over the window (/proc/vmstat at its start and end):"
        );
        match &self.mmtests {
            Some(rows) => s.push_str(&ops_text(rows)),
            None => {
                let _ = writeln!(s, "  {NO_OPS}");
            }
        }
        let _ = writeln!(s, "\nRegression context:");
        s.push_str(&context_text(
            self.state_start.as_ref(),
            self.state_end.as_ref(),
        ));
        let _ = writeln!(s, "\nVerdicts this capture's evidence supports:");
        for v in &self.verdicts {
            let _ = writeln!(s, "  {} {}: {}", v.patch, v.verdict, Escaped(&v.sentence));
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
            let _ = writeln!(s, "  - {}", Escaped(&f.sentence));
        }
        s
    }
}

fn open(path: &Path) -> Result<Capture> {
    // One line naming the file and the problem (the error says both); serde's messages quote
    // the file's strings (`unknown variant ...`) as they are.
    Capture::open(path).map_err(|e| anyhow::anyhow!("{}", Escaped(&e.to_string())))
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
        let (cb, ca) = (open(before)?, open(after)?);
        let (b, a) = (report_of(&cb), report_of(&ca));
        let d = diff(&side(&b, before), &side(&a, after));
        if let Some(dest) = &args.html {
            let page = html::ab_page(
                &html::Input {
                    name: side(&b, before).name,
                    cap: &cb,
                    report: &b,
                },
                &html::Input {
                    name: side(&a, after).name,
                    cap: &ca,
                    report: &a,
                },
                &d,
            )
            .map_err(|e| anyhow::anyhow!("{}", Escaped(&e.to_string())))?;
            return write_html(dest, args.force, &page);
        }
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
    if let Some(dest) = &args.html {
        let r = report_of(&cap);
        let page = html::capture_page(&html::Input {
            name: side(&r, file).name,
            cap: &cap,
            report: &r,
        })
        .map_err(|e| anyhow::anyhow!("{}", Escaped(&e.to_string())))?;
        return write_html(dest, args.force, &page);
    }
    let mut out = Output::new(args.output.as_deref(), args.force)?;
    match format {
        ReportFormat::Text => write!(out.writer(), "{}", report_of(&cap).to_text(args.rows))?,
        ReportFormat::Json => writeln!(
            out.writer(),
            "{}",
            serde_json::to_string_pretty(&report_of(&cap))?
        )?,
        ReportFormat::ChromeTrace => {
            write_trace(&cap, out.writer())
                .map_err(|e| anyhow::anyhow!("{}", Escaped(&e.to_string())))?;
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

/// Writes a page whole or not at all (the rules of -o) and says where it is.
fn write_html(dest: &Path, force: bool, page: &str) -> Result<i32> {
    let mut out = Output::new(Some(dest), force)?;
    out.writer().write_all(page.as_bytes())?;
    out.commit()?;
    eprintln!(
        "numatrace: wrote {} ({} KiB); open it in any browser (it loads nothing from the network)",
        Escaped(&dest.display().to_string()),
        page.len().div_ceil(1024)
    );
    Ok(0)
}

pub mod html;

#[cfg(test)]
mod capture_tests;
#[cfg(test)]
mod limit_tests;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use numatrace_common::TaskStats;

    use super::*;
    use crate::{
        bpf::loader::HookReport,
        capture::{
            CaptureWriter, End, Machine, SECTION_END, SECTION_FIRST, SECTION_LAST, SECTION_MACHINE,
            SECTION_PROBES,
        },
        engine::Snapshot,
        kernel::nodes::NodeInfo,
        model::Scope,
        model::{GapRecord, TaskRecord, VmaRecord},
        plan::Mechanism,
        text_escape::needs_escape,
    };

    /// Sets the terminal's title, clears the screen (ESC and the C1 CSI) and reverses the text.
    const EVIL: &str = "\x1b]0;pwn\x07\x1b[2J\u{9b}1m\u{202e}";
    const SHOWN: &str = "\\x1b]0;pwn\\x07\\x1b[2J\\u{9b}1m\\u{202e}";

    fn raw_control(text: &str) -> Option<char> {
        text.chars()
            .find(|&c| c != '\n' && c != '\\' && needs_escape(c))
    }

    fn temp(tag: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "numatrace-escape-{tag}-{}.ntrace",
            std::process::id()
        ))
    }

    fn hook(name: &str, attached: bool, reasons: Vec<String>) -> HookReport {
        HookReport {
            name: name.into(),
            kind: "function".into(),
            mechanism: if attached {
                Mechanism::Tracepoint
            } else {
                Mechanism::None
            },
            symbol: None,
            attached,
            reasons,
            what: String::new(),
        }
    }

    /// A stranger's capture with control characters in every string it holds.
    fn evil_capture(path: &Path) {
        let window = Window {
            duration_s: 1.0,
            scope: Scope::Command,
            pid: None,
            command: Some(vec!["sh".into(), EVIL.into()]),
            exit_code: Some(0),
            comm_filter: None,
            cgroup_filter: Some(format!("/x{EVIL}.slice")),
            consistent: true,
        };
        let machine = Machine {
            hostname: format!("host{EVIL}"),
            kernel: Some(KernelSummary {
                release: format!("6.18{EVIL}"),
                numa_nodes: 1,
                numa_balancing: Some(1),
            }),
            window: Some(window.clone()),
            ..Machine::default()
        };
        let task = |pte: u64| {
            let mut s = TaskStats::new(7, 7);
            s.first_ns = 1;
            s.runtime_first_ns = 1;
            s.runtime_last_ns = 1 + pte * 200_000;
            s.scan.runtime_in_scan_ns = pte * 10_000;
            s.scan.pte_updates = pte;
            s.hint_faults.faults = pte / 10;
            let mut t = TaskRecord::from_stats(&s, false);
            t.comm = EVIL.into();
            t.cgroup = Some(format!("/x{EVIL}.slice/app").into());
            t
        };
        let mut vma = VmaRecord::new(0x1000, 0x2000);
        vma.start = format!("0x1000{EVIL}");
        vma.mapping = Some(format!("/tmp/{EVIL}.so"));
        vma.pte_updates = 10;
        vma.pid_inactive = Some(GapRecord {
            skips: 3,
            over_threads: 2,
            at_threshold: 0,
            max_gap: 9,
            max_gap_threads: 1,
        });
        let snap = |mono_ns: u64, pte: u64| Snapshot {
            mono_ns,
            consistent: true,
            self_tgid: 1,
            tasks: vec![task(pte)],
            vmas: BTreeMap::from([(7, vec![vma.clone()])]),
            vmstat_hi: BTreeMap::from([(format!("numa_{EVIL}"), pte)]),
            vmstat_lo: BTreeMap::from([(format!("numa_{EVIL}"), pte)]),
            nodes: vec![NodeInfo {
                node: 0,
                cpus: format!("0-3{EVIL}"),
                distances: vec![10],
                mem_total_bytes: Some(1 << 30),
                mem_free_bytes: None,
            }],
            ..Snapshot::default()
        };
        let mut w = CaptureWriter::create(path, 1 << 30).unwrap();
        w.section(SECTION_MACHINE, &machine).unwrap();
        let hooks = vec![
            hook(&format!("sched:{EVIL}"), true, vec![]),
            hook("task_numa_work", false, vec![format!("refused: {EVIL}")]),
        ];
        w.section(SECTION_PROBES, &hooks).unwrap();
        w.section(SECTION_FIRST, &snap(0, 0)).unwrap();
        w.section(SECTION_LAST, &snap(1_000_000_000, 5000)).unwrap();
        let end = End {
            window,
            exit_code: Some(0),
            events_written: 0,
            events_over_max_size: 0,
            samples_over_max_size: 0,
            events_not_kept: 0,
            bytes: 0,
            ended_unix_s: 0.0,
        };
        w.section(SECTION_END, &end).unwrap();
        w.finish().unwrap();
    }

    #[test]
    fn report_text_escapes_every_string_of_a_capture() {
        let path = temp("report");
        evil_capture(&path);
        let cap = open(&path);
        let _ = std::fs::remove_file(&path);
        let r = report_of(&cap.unwrap());
        // JSON keeps the exact strings.
        assert_eq!(r.capture.host, format!("host{EVIL}"));
        assert_eq!(r.stat.tasks[0].comm, EVIL);
        let t = r.to_text(20);
        assert_eq!(raw_control(&t), None, "{t:?}");
        for want in [
            format!("recorded on host{SHOWN} at"),
            format!("kernel 6.18{SHOWN} ("),
            format!("command `sh {SHOWN}`"),
            format!(", cgroup /x{SHOWN}.slice,"),
            format!("attached (sched:{SHOWN})"),
            format!("\n7    7     {SHOWN}  5.00"),
            format!("7 0x1000{SHOWN}-0x2000 /tmp/{SHOWN}.so (10 PTEs)"),
            format!("by cgroup: /x{SHOWN}.slice/app (1 task"),
            format!("0-3{SHOWN}"),
            format!("numa_{SHOWN} +5000"),
            // Sentences quoting the capture: a verdict (a hook's reason) and findings (comm).
            format!("task_numa_work is not attached here: refused: {SHOWN}"),
            format!("the most, 7 {SHOWN}, "),
            format!("of 7 {SHOWN}, went 9 sequences"),
        ] {
            assert!(t.contains(&want), "{want:?} in\n{t}");
        }

        let named = Path::new(&format!("base{EVIL}.ntrace")).to_owned();
        let d = diff(&side(&r, &named), &side(&r, Path::new("patched"))).to_text();
        assert_eq!(raw_control(&d), None, "{d:?}");
        assert!(
            d.contains(&format!("base:    base{SHOWN} (kernel\n")),
            "{d}"
        );
        assert!(d.contains(&format!("6.18{SHOWN}, 1.0 s)")), "{d}");
    }

    #[test]
    fn an_error_quoting_the_capture_is_escaped() {
        let path = temp("error");
        let mut w = CaptureWriter::create(&path, 1 << 30).unwrap();
        w.section(SECTION_MACHINE, &Machine::default()).unwrap();
        w.section(SECTION_PROBES, &serde_json::json!([{ "mechanism": EVIL }]))
            .unwrap();
        w.finish().unwrap();
        let e = open(&path).unwrap_err().to_string();
        let _ = std::fs::remove_file(&path);
        assert_eq!(raw_control(&e), None, "{e:?}");
        assert!(e.contains(SHOWN), "{e}");
    }
}
