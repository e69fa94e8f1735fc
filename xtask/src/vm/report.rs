//! What a guest printed: the test binaries' results on its console, the captures and facts it
//! printed (base64), read back and judged on the host; the results table.

use std::{collections::BTreeMap, fs, path::Path, process::Command};

use anyhow::{Context as _, Result, bail};

use crate::{process::output, setup::workspace_root};

/// What one guest run printed about each test binary.
#[derive(Default)]
pub struct GuestResult {
    /// Test binary -> (exit code, passed, failed, skipped).
    pub binaries: BTreeMap<String, (i32, u32, u32, u32)>,
    /// Test binary -> seconds it ran (guest uptime): where the CI time goes.
    pub secs: BTreeMap<String, u64>,
    pub done: bool,
    pub nodes: Option<String>,
    /// Test binary -> its panic messages, so that a failure reads in the results' tail (CI
    /// shows only the end of what a run printed).
    pub panics: BTreeMap<String, Vec<String>>,
}

/// Lines of one panic message kept, of all of a binary's, and characters of each (a message
/// may hold a JSON dump).
const PANIC_LINES: usize = 12;
const PANIC_LINES_PER_BINARY: usize = 48;
const PANIC_LINE_CHARS: usize = 600;

pub fn parse_console(log: &str) -> GuestResult {
    let mut r = GuestResult::default();
    let mut current: Option<String> = None;
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    // Lines still to keep of the panic message being read.
    let mut panic_left = 0;
    for line in log.lines() {
        // Markers may follow terminal escapes on the same console line.
        let line = line.trim_end_matches('\r');
        let line = line.find("vm-test: ").map_or(line, |i| &line[i..]);
        if let Some(rest) = line.strip_prefix("vm-test: kernel ") {
            r.nodes = rest.split("nodes: ").nth(1).map(str::to_owned);
        } else if let Some(name) = line.strip_prefix("vm-test: BEGIN ") {
            current = Some(name.to_owned());
            (passed, failed, skipped) = (0, 0, 0);
            // A binary that died inside a message leaves nothing of it to the next one.
            panic_left = 0;
        } else if let Some(rest) = line.strip_prefix("vm-test: END ") {
            let (name, rc) = rest.split_once(" rc=").unwrap_or((rest, "-1"));
            let (rc, secs) = rc.split_once(" secs=").unwrap_or((rc, ""));
            r.binaries.insert(
                name.to_owned(),
                (rc.trim().parse().unwrap_or(-1), passed, failed, skipped),
            );
            if let Ok(secs) = secs.trim().parse() {
                r.secs.insert(name.to_owned(), secs);
            }
            current = None;
        } else if line == "vm-test: DONE" {
            r.done = true;
        } else if let Some(name) = &current {
            // The guests set RUST_BACKTRACE=1: the backtrace follows the message.
            let ends_message = line.starts_with("note: run with")
                || line.starts_with("stack backtrace:")
                || line.starts_with("---- ")
                || line.starts_with("failures:")
                || line.starts_with("test result:");
            if line.contains("panicked at") {
                panic_left = PANIC_LINES;
            } else if ends_message {
                panic_left = 0;
            }
            if panic_left > 0 {
                panic_left -= 1;
                let kept: String = line.chars().take(PANIC_LINE_CHARS).collect();
                let lines = r.panics.entry(name.clone()).or_default();
                if lines.len() < PANIC_LINES_PER_BINARY {
                    lines.push(kept);
                }
            }
            if let Some((p, f)) = harness_totals(line) {
                // The harness's own count: a child's output can split a `test x ... ok` line.
                // A skipped test returns early, so the harness counts it as passed.
                (passed, failed) = (p.saturating_sub(skipped), f);
            } else if line.starts_with("test ") && line.ends_with(" ... ok") {
                passed += 1;
            } else if line.starts_with("test ") && line.ends_with(" ... FAILED") {
                failed += 1;
            } else if line.contains("SKIPPED") {
                skipped += 1;
            }
        }
    }
    r
}

/// `test result: ok. 3 passed; 1 failed; ...` -> (3, 1).
fn harness_totals(line: &str) -> Option<(u32, u32)> {
    let rest = line.strip_prefix("test result: ")?;
    let count = |what: &str| -> Option<u32> {
        rest.split(';').find_map(|part| {
            part.trim()
                .strip_suffix(what)?
                .rsplit(' ')
                .next()?
                .parse()
                .ok()
        })
    };
    Some((count(" passed")?, count(" failed")?))
}

/// Captures a guest printed between `NUMATRACE-CAPTURE-BEGIN NAME` and `NUMATRACE-CAPTURE-END`
/// (the record test's, base64), by name.
pub fn guest_captures(log: &str) -> Vec<(String, Vec<u8>)> {
    use base64::Engine as _;
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in log.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(name) = line.strip_prefix("NUMATRACE-CAPTURE-BEGIN ") {
            current = Some((name.trim().to_owned(), String::new()));
        } else if line == "NUMATRACE-CAPTURE-END" {
            if let Some((name, text)) = current.take() {
                // Undecodable (kernel messages interleaved on the console): empty, which the
                // host's report then names as the failure.
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .unwrap_or_else(|e| {
                        eprintln!("xtask: capture {name} on the console is not base64: {e}");
                        Vec::new()
                    });
                out.push((name, bytes));
            }
        } else if let Some((_, text)) = &mut current {
            text.push_str(line.trim());
        }
    }
    out
}

/// The committed fixture of a kernel line's facts (`probes --facts`), which `plan()`'s unit
/// tests read: a guest whose kernel no longer matches it in what the plan reads (a newer
/// package changed a signature or a field) is reported, with the command that refreshes it.
pub fn compare_facts(label: &str, fresh: &Path) -> String {
    let fixture = workspace_root()
        .join("numatrace/tests/fixtures/kernels")
        .join(format!("{label}.json"));
    let read = |p: &Path| -> Option<serde_json::Value> {
        serde_json::from_str(&fs::read_to_string(p).ok()?).ok()
    };
    let Some(new) = read(fresh) else {
        return format!("unreadable ({})", fresh.display());
    };
    // Addresses move with every boot (KASLR); the rest is the kernel build's.
    let key = |v: &serde_json::Value| {
        [
            "release",
            "btf_signatures",
            "btf_fields",
            "kallsyms",
            "fentry",
            "tracepoints",
            "preemption",
        ]
        .map(|k| v[k].clone())
    };
    match read(&fixture) {
        Some(old) if key(&old) == key(&new) => "same as the committed fixture".into(),
        Some(_) => format!(
            "DIFFERS from the committed fixture (new kernel package?): cp {} {}",
            fresh.display(),
            fixture.display()
        ),
        None => format!(
            "no fixture yet: cp {} {}",
            fresh.display(),
            fixture.display()
        ),
    }
}

/// Reads a guest's capture on the host with the host's numatrace, as a developer receiving a
/// bug report would: the summary must show migrations, node flows and the verdicts.
pub fn host_report(numatrace: &Path, capture: &Path) -> Result<String> {
    let out = output(
        Command::new(numatrace)
            .arg("report")
            .arg(capture)
            .arg("--json"),
    )?;
    let v: serde_json::Value = serde_json::from_str(&out).context("report JSON")?;
    let pages = v["stat"]["totals"]["hint_faults"]["migrated_pages"]
        .as_u64()
        .unwrap_or(0);
    let flows = v["stat"]["node_matrix"].as_array().map_or(0, Vec::len);
    let verdicts: Vec<String> = v["verdicts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    format!(
                        "{} {}",
                        x["patch"].as_str().unwrap_or("?"),
                        x["verdict"].as_str().unwrap_or("?")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if pages == 0 || flows == 0 || verdicts.len() != 2 {
        bail!("{pages} pages migrated, {flows} node flows, verdicts {verdicts:?}");
    }
    // Its page: the charts that a migrating window has are drawn, and the matrix holds its
    // pages (written beside the capture, replaced on the next run).
    let page = capture.with_extension("html");
    let _ = fs::remove_file(&page);
    output(
        Command::new(numatrace)
            .arg("report")
            .arg(capture)
            .arg("--html")
            .arg(&page),
    )?;
    let html = fs::read_to_string(&page).context("report --html")?;
    for id in [
        "hint_faults",
        "pages_migrated",
        "node_matrix",
        "migration_latency",
    ] {
        let at = html
            .find(&format!("<figure id=\"{id}\""))
            .with_context(|| format!("report --html: no {id} chart"))?;
        let fig = html[at..].split("</figure>").next().unwrap_or_default();
        // Migration latency needs migrate_misplaced's hook; the others are what a migrating
        // window is.
        let said_why = id == "migration_latency" && fig.contains("not measured: ");
        if !fig.contains("<svg") && !said_why {
            bail!("report --html: {id} not drawn ({})", page.display());
        }
    }
    Ok(format!(
        "pass (host report: {pages} pages migrated, {flows} node flows; {}; its page drawn)",
        verdicts.join(", ")
    ))
}

/// The results, one row per (kernel line, test or guest), as `vm-test` prints them at the end,
/// then the panic messages of the binaries that failed.
pub fn print_table(rows: &[(&str, String, String)], panics: &[(&str, String, Vec<String>)]) {
    println!("\nvm-test results:");
    println!("{:<7} {:<16} result", "kernel", "test");
    for (k, t, v) in rows {
        println!("{k:<7} {t:<16} {v}");
    }
    for (k, t, lines) in panics {
        println!("\n{k} {t} failed; it printed:");
        for l in lines {
            // The console's bytes: escape what a terminal would act on.
            let shown: String = l
                .chars()
                .map(|c| {
                    if c.is_control() {
                        c.escape_debug().to_string()
                    } else {
                        c.to_string()
                    }
                })
                .collect();
            println!("  | {shown}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_are_read_off_the_console() {
        let log = "x\nNUMATRACE-CAPTURE-BEGIN migrate\r\naGVs\nbG8=\r\nNUMATRACE-CAPTURE-END\ny\n";
        assert_eq!(
            guest_captures(log),
            vec![("migrate".to_owned(), b"hello".to_vec())]
        );
    }

    #[test]
    fn console_parsing() {
        let log = "noise\n\x1b[2Jvm-test: kernel 6.1.0, nodes: 2\r\nvm-test: BEGIN probes\n\
                   test a ... ok\nSKIPPED x: needs root\ntest b ... ok\ntest c ... FAILED\n\
                   failures:\n\n---- c stdout ----\nlots of output\n\
                   thread 'c' panicked at numatrace/tests/probes.rs:9:5:\n\
                   assertion `left == right` failed: counts\n  left: 1\n right: 2\n\
                   stack backtrace:\n   0: __rustc::rust_begin_unwind\n\
                   note: Some details are omitted, run with `RUST_BACKTRACE=full`\n\n\
                   failures:\n    c\n\ntest result: FAILED. 2 passed; 1 failed\n\
                   vm-test: END probes rc=101\nvm-test: BEGIN tiering\n\
                   test d ... child output\nSKIPPED e: no tiers\ntest e ... ok\n\
                   test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n\
                   vm-test: END tiering rc=0\nvm-test: BEGIN reliability\n\
                   thread 'r' panicked at a.rs:1:1:\nboom\nvm-test: END reliability rc=134\n\
                   vm-test: BEGIN lifecycle\nrunning 1 test\ntest z ... ok\n\
                   vm-test: END lifecycle rc=0 secs=12\n\
                   vm-test: DONE\n";
        let r = parse_console(log);
        assert!(r.done);
        assert_eq!(r.nodes.as_deref(), Some("2"));
        assert_eq!(r.binaries["probes"], (101, 1, 1, 1));
        // The harness's totals, not the split `test d ... ` line: 2 ok, 1 skipped.
        assert_eq!(r.binaries["tiering"], (0, 2, 0, 1));
        assert_eq!(r.secs.get("lifecycle"), Some(&12));
        assert_eq!(r.secs.get("probes"), None);
        assert_eq!(
            r.panics["probes"],
            [
                "thread 'c' panicked at numatrace/tests/probes.rs:9:5:",
                "assertion `left == right` failed: counts",
                "  left: 1",
                " right: 2",
            ]
        );
        // A binary that died inside its message: the next one's lines are not part of it.
        assert_eq!(
            r.panics["reliability"],
            ["thread 'r' panicked at a.rs:1:1:", "boom"]
        );
        assert_eq!(r.binaries["lifecycle"], (0, 1, 0, 0));
        assert!(!r.panics.contains_key("lifecycle"));
    }
}
