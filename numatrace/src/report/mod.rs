//! What the frontends print, as text for people and JSON for tools: the `probes` and `stat`
//! reports, the verdicts on the seed patches, a window's findings, the diff of two windows, the
//! memory-tiering block and the Chrome trace of a capture, and which counts a window measured at all (`measured`). Pure
//! functions of their input: nothing here reads the kernel.
pub mod chrome;
pub mod context;
pub mod diff;
pub mod findings;
pub mod measured;
pub mod metrics;
pub mod mmtests;
pub mod probes;
pub mod stat;
pub mod tiering;
pub mod verdicts;
pub mod words;

/// Left-aligned table cells, widths from the content.
pub(crate) fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                if i + 1 == r.len() {
                    cell.clone()
                } else {
                    format!("{cell:<w$}", w = widths[i])
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}
