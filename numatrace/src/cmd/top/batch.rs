//! `top -b`: plain-text frames (no escape codes) and `--json` frames (JSON Lines).

use serde::Serialize;

use super::{
    graph,
    history::{LastActivity, SPARK_S, fmt_window},
    view::{self, Caps, FrameView, OwnCost, SystemRates, first_rows, shown_columns},
};
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
    /// The activity window (`--window`) and the seconds its refreshes cover so far.
    pub window_s: u64,
    pub window_span_s: f64,
    /// The last activity of a traced task since top started, `ago_s` seconds before this
    /// frame's end (null: none yet).
    pub last_activity: Option<JsonLast<'a>>,
    /// Counts whose hook did not attach left out, as in `stat --json`.
    #[serde(flatten)]
    pub report: StatJson<'a>,
}

#[derive(Serialize)]
pub struct JsonLast<'a> {
    pub ago_s: f64,
    #[serde(flatten)]
    pub what: &'a LastActivity,
}

impl<'a> JsonLast<'a> {
    pub fn of(view: &'a FrameView) -> Option<Self> {
        view.quiet.last.as_ref().map(|(ago, l)| Self {
            ago_s: *ago,
            what: l,
        })
    }
}

/// A plain-text frame: the header and the trend row, then the busiest tasks active within
/// the window (most scan time first, or where this kernel does not measure it, most hint
/// faults or skipped VMAs; ties by the same column over the window).
pub fn text_frame(
    header: &[String],
    view: &FrameView,
    rows: usize,
    sort: Option<usize>,
    balancing: Option<u32>,
) -> String {
    let mut out = header.join("\n");
    // The window, on the first line (the terminal view says it in the table's title).
    if view.window_s > 0 && !header.is_empty() {
        let first = header[0].len();
        out.insert_str(first, &format!(", window {}", fmt_window(view.window_s)));
    }
    if !view.trend.is_empty() {
        out.push('\n');
        out.push_str(&graph::trend_line(
            &format!("{SPARK_S}s: "),
            &view.trend,
            160,
        ));
    }
    out.push_str("\n\n");
    let col = sort.unwrap_or_else(|| view::busiest_column(&view.caps));
    let desc = view::sort_desc(col);
    let tasks = &view.tasks;
    let listed = tasks.len() + view.tasks_unlisted;
    if listed == 0 {
        out.push_str(&view.quiet_text(balancing));
        out.push('\n');
    } else {
        let shown = shown_columns(view, col);
        let mut t = vec![
            shown
                .iter()
                .map(|c| c.title(view.window_s))
                .collect::<Vec<_>>(),
        ];
        t.extend(
            first_rows(tasks, rows, col, desc)
                .into_iter()
                .map(|r| shown.iter().map(|c| c.cell(r)).collect()),
        );
        out.push_str(&table(&t));
        if listed > rows {
            out.push_str(&format!("... {} more tasks\n", listed - rows));
        }
    }
    // Pages counted by task_numa_fault: without it, left out (the frame has no room for why).
    if view.caps.hint && !view.flows.is_empty() {
        out.push_str(&format!(
            "migrations by node: {}\n",
            view::flows_text(&view.flows)
        ));
    }
    if !view.window_flows.is_empty() {
        for l in view::grid_lines(view) {
            out.push_str(&l);
            out.push('\n');
        }
    }
    if let Some(line) = view::tiers_line(view) {
        out.push_str(&line);
        out.push('\n');
    }
    out.push('\n');
    out
}
