//! What `lab` prints: each kernel's result (check's verdicts from its JSON; other subcommands'
//! own output), the table side by side, and the `--json` document (`numatrace.lab/1`).

use serde_json::{Value, json};

use crate::text_escape::Escaped;

pub const SCHEMA: &str = "numatrace.lab/1";

/// One kernel's run, as the lab saw it.
pub struct ImageResult {
    /// What the user wrote after --kernel.
    pub kernel: String,
    /// `uname -r` in the guest (or from the image's header if the guest never said).
    pub release: String,
    /// Config options numatrace needs that are off, and where the config came from.
    pub missing: Vec<&'static str>,
    pub config_from: String,
    /// The subcommand's exit status in the guest, None if it never finished.
    pub rc: Option<String>,
    /// Why there is no result (a refused config, a panic, a timeout), in words.
    pub failure: Option<String>,
    pub stdout: String,
    pub stderr: String,
    /// Files brought back, as written on the host.
    pub files: Vec<String>,
    pub elapsed_secs: u64,
}

impl ImageResult {
    pub fn ok(&self) -> bool {
        self.failure.is_none() && self.rc.as_deref() == Some("0")
    }

    fn json_result(&self) -> Option<Value> {
        serde_json::from_str(&self.stdout).ok()
    }
}

/// check's verdicts out of its JSON: (patch, verdict, title, sentence) per run.
fn verdicts(result: &Value) -> Vec<(String, String, String, String)> {
    let s = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_owned();
    result["checks"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        s(c, "patch"),
                        s(c, "verdict"),
                        s(c, "title"),
                        s(c, "sentence"),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One kernel's result in text. For check (which ran with --json in the guest), its verdicts
/// and sentences; otherwise what the subcommand printed, escaped (a guest is not trusted to
/// print control characters on this terminal).
pub fn image_text(r: &ImageResult, subcommand: &str, user_json: bool) -> String {
    let mut out = format!(
        "== {} — {} ({} s) ==\n",
        Escaped(&r.kernel),
        Escaped(&r.release),
        r.elapsed_secs
    );
    if let Some(why) = &r.failure {
        for (i, line) in why.lines().enumerate() {
            let lead = if i == 0 { "FAILED: " } else { "  " };
            out.push_str(&format!("{lead}{}\n", Escaped(line)));
        }
    }
    match r
        .json_result()
        .filter(|_| subcommand == "check" && !user_json)
    {
        Some(result) => {
            for (patch, verdict, title, sentence) in verdicts(&result) {
                out.push_str(&format!(
                    "seed {} — {}\n  verdict: {}\n  {}\n",
                    Escaped(&patch),
                    Escaped(&title),
                    Escaped(&verdict),
                    Escaped(&sentence)
                ));
            }
            out.push_str("  (evidence: numatrace lab --json)\n");
        }
        None => {
            for line in r.stdout.lines() {
                out.push_str(&format!("{}\n", Escaped(line)));
            }
        }
    }
    if !r.ok() && !r.stderr.trim().is_empty() {
        out.push_str("stderr:\n");
        for line in r
            .stderr
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            out.push_str(&format!("  {}\n", Escaped(line)));
        }
    }
    for f in &r.files {
        out.push_str(&format!("kept: {}\n", Escaped(f)));
    }
    out
}

/// The table side by side: kernel, release, exit status, then a column per seed (check).
pub fn table(results: &[ImageResult], subcommand: &str) -> String {
    let mut seeds: Vec<String> = Vec::new();
    let per: Vec<Vec<(String, String)>> = results
        .iter()
        .map(|r| {
            let v: Vec<(String, String)> = r
                .json_result()
                .filter(|_| subcommand == "check")
                .map(|j| {
                    verdicts(&j)
                        .into_iter()
                        .map(|(p, v, _, _)| (p, v))
                        .collect()
                })
                .unwrap_or_default();
            for (p, _) in &v {
                if !seeds.contains(p) {
                    seeds.push(p.clone());
                }
            }
            v
        })
        .collect();
    let mut header = vec!["KERNEL".to_owned(), "RELEASE".into(), "RC".into()];
    header.extend(seeds.iter().map(|s| format!("SEED {}", Escaped(s))));
    let mut rows = vec![header];
    for (r, v) in results.iter().zip(&per) {
        let mut row = vec![
            Escaped(&r.kernel).to_string(),
            Escaped(&r.release).to_string(),
            Escaped(r.rc.as_deref().unwrap_or("-")).to_string(),
        ];
        for s in &seeds {
            let all: Vec<&str> = v
                .iter()
                .filter(|(p, _)| p == s)
                .map(|(_, v)| v.as_str())
                .collect();
            row.push(if all.is_empty() {
                "-".into()
            } else {
                Escaped(&all.join("/")).to_string()
            });
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The `--json` document.
pub fn document(results: &[ImageResult]) -> Value {
    json!({
        "schema": SCHEMA,
        "numatrace_version": env!("CARGO_PKG_VERSION"),
        "images": results.iter().map(|r| json!({
            "kernel": r.kernel,
            "release": r.release,
            "config": { "from": r.config_from, "missing": r.missing },
            "rc": r.rc,
            "failure": r.failure,
            "seconds": r.elapsed_secs,
            "files": r.files,
            "result": r.json_result(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(kernel: &str, stdout: &str) -> ImageResult {
        ImageResult {
            kernel: kernel.into(),
            release: "6.12.0".into(),
            missing: vec![],
            config_from: "file".into(),
            rc: Some("0".into()),
            failure: None,
            stdout: stdout.into(),
            stderr: String::new(),
            files: vec![],
            elapsed_secs: 30,
        }
    }

    #[test]
    fn check_results_side_by_side() {
        let a = result(
            "debian:6.1",
            r#"{"checks":[{"patch":"002","verdict":"unsupported","title":"t","sentence":"s\u001b[2J"}]}"#,
        );
        let b = result(
            "debian:6.12",
            r#"{"checks":[{"patch":"002","verdict":"behaves-as-patched","title":"t","sentence":"s"}]}"#,
        );
        let t = table(&[a, b], "check");
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].starts_with("KERNEL") && lines[0].ends_with("SEED 002"),
            "{t}"
        );
        assert!(
            lines[1].contains("debian:6.1") && lines[1].ends_with("unsupported"),
            "{t}"
        );
        assert!(lines[2].ends_with("behaves-as-patched"), "{t}");
        let a = result(
            "x",
            r#"{"checks":[{"patch":"002","verdict":"unsupported","title":"t","sentence":"s\u001b[2J"}]}"#,
        );
        let text = image_text(&a, "check", false);
        assert!(text.contains("verdict: unsupported"), "{text}");
        assert!(!text.contains('\u{1b}'), "escaped");
        let doc = document(&[a]);
        assert_eq!(doc["images"][0]["result"]["checks"][0]["patch"], "002");
    }
}
