//! `top -b`: plain-text frames (no escape codes) and `--json` frames (JSON Lines).

use serde::Serialize;

use super::view::{self, COLUMNS, Caps, FrameView, OwnCost, SystemRates, sort_rows};
use crate::report::{stat::StatJson, table};

/// One frame of `top -b --json`: the `stat --json` fields of the interval, plus rates.
#[derive(Serialize)]
pub struct JsonFrame<'a> {
    pub frame: u64,
    pub interval_s: f64,
    pub rates: &'a SystemRates,
    pub own: &'a OwnCost,
    /// Which columns this kernel can supply.
    pub caps: &'a Caps,
    /// Counts whose hook did not attach left out, as in `stat --json`.
    #[serde(flatten)]
    pub report: StatJson<'a>,
}

/// A plain-text frame: the header, then the busiest tasks (most scan time first, or where this
/// kernel does not measure it, most hint faults or skipped VMAs).
pub fn text_frame(header: &[String], view: &FrameView, rows: usize, sort: Option<usize>) -> String {
    let mut out = header.join("\n");
    out.push_str("\n\n");
    let mut tasks = view.tasks.clone();
    let col = sort.unwrap_or_else(|| view::busiest_column(&view.caps));
    let desc = COLUMNS
        .get(col)
        .is_some_and(|c| c.numeric() && *c != super::view::Column::Pid);
    sort_rows(&mut tasks, col, desc);
    if tasks.is_empty() {
        out.push_str("no NUMA balancing activity in this interval\n");
    } else {
        let mut t = vec![
            COLUMNS
                .iter()
                .map(|c| c.title().to_owned())
                .collect::<Vec<_>>(),
        ];
        t.extend(tasks.iter().take(rows).map(|r| r.cells.clone()));
        out.push_str(&table(&t));
        if tasks.len() > rows {
            out.push_str(&format!("... {} more tasks\n", tasks.len() - rows));
        }
    }
    // Pages counted by task_numa_fault: without it, left out (the frame has no room for why).
    if view.caps.hint && !view.flows.is_empty() {
        out.push_str(&format!(
            "migrations by node: {}\n",
            view::flows_text(&view.flows)
        ));
    }
    if let Some(line) = view::tiers_line(view) {
        out.push_str(&line);
        out.push('\n');
    }
    out.push('\n');
    out
}
