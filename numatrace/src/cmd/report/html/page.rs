//! The two pages: one capture (verdicts and findings in words, then the charts, the node
//! matrix, the histograms, the task table and the context), and an A/B of two captures (the
//! same charts overlaid, mmtests' rows and every metric with its change, verdict changes
//! marked).

use std::fmt::Write as _;

use super::{
    chart::{self, Line, PALETTE},
    document, esc,
    timeline::{Lines, Series, Timeline},
};
use crate::{
    capture::{Capture, CaptureError},
    cmd::report::Report,
    model::hist::Log2Bucket,
    report::{
        context::context_text,
        diff::Diff,
        measured::{Feed, Measured},
    },
};

/// One capture as a page shows it.
pub struct Input<'a> {
    /// What the page calls it (the file's stem).
    pub name: String,
    pub cap: &'a Capture,
    pub report: &'a Report,
}

/// The charts over time: id, title, y axis (with its unit), and which lines.
struct Spec {
    id: &'static str,
    title: &'static str,
    y: &'static str,
    lines: fn(&Timeline) -> &Lines,
    what: &'static str,
}

const CHARTS: [Spec; 5] = [
    Spec {
        id: "scan_share",
        title: "Scan share of the busiest tasks",
        y: "% of run time scanning",
        lines: |t| &t.scan_share,
        what: "The share of each task's CPU time spent in task_numa_work in each interval \
               (seed 003 caps it near 3 %), for the five tasks that spent the longest in it. \
               Run time is tick-granular, as the kernel's sum_exec_runtime: scans shorter than \
               a tick can read 0 %.",
    },
    Spec {
        id: "pte_updates",
        title: "PTE updates",
        y: "PTEs updated/s",
        lines: |t| &t.pte_updates,
        what: "Page-table entries change_prot_numa made inaccessible (the scanner's work), \
               per second.",
    },
    Spec {
        id: "hint_faults",
        title: "NUMA hint faults, local and remote",
        y: "hint faults/s",
        lines: |t| &t.hint_faults,
        what: "Hint faults per second, on memory of the faulting CPU's node (local) or another \
               node (remote).",
    },
    Spec {
        id: "pages_migrated",
        title: "Pages migrated and failed",
        y: "pages/s",
        lines: |t| &t.pages_migrated,
        what: "Pages NUMA-misplaced migrate_pages() calls moved, and pages they did not move, \
               per second.",
    },
    Spec {
        id: "tiering",
        title: "Promotions and demotions per node",
        y: "pages/s",
        lines: |t| &t.tiering,
        what: "Memory tiering: pages promoted to each node and demoted from it, per second \
               (the kernel's node vmstat).",
    },
];

fn heading(s: &mut String, p: &Input) {
    let c = &p.report.capture;
    let k = &p.report.stat.kernel;
    let _ = writeln!(
        s,
        "<p class=\"meta\">{} — recorded on {} by {}, kernel {}, {} nodes, {:.1} s window, {} \
         samples, {} events{}</p>",
        esc(&p.name),
        esc(&c.host),
        esc(&c.writer),
        esc(&k.release),
        k.numa_nodes,
        p.report.stat.window.duration_s,
        c.samples,
        c.events,
        if c.redacted { ", redacted" } else { "" }
    );
    if !c.complete {
        let _ = writeln!(
            s,
            "<p class=\"warn\">Incomplete: the capture was cut short; this page covers it up to \
             its last whole section.</p>"
        );
    }
}

fn verdicts_and_findings(s: &mut String, r: &Report) {
    s.push_str("<ul>\n");
    for v in &r.verdicts {
        let _ = writeln!(
            s,
            "<li><b>{}</b> {}: <span class=\"v {}\">{}</span> — {}</li>",
            esc(v.patch),
            esc(v.title),
            v.verdict,
            v.verdict,
            esc(&v.sentence)
        );
    }
    s.push_str("</ul>\n<h3>Findings</h3>\n<ul>\n");
    if r.findings.is_empty() {
        s.push_str("<li>nothing stands out.</li>\n");
    }
    for f in &r.findings {
        let _ = writeln!(s, "<li>{}</li>", esc(&f.sentence));
    }
    s.push_str("</ul>\n");
    let m = Measured::from_hooks(&r.stat.hooks);
    let missing: Vec<String> = m
        .missing()
        .map(|(f, why)| format!("{}: {}", f.name(), esc(why)))
        .collect();
    if !missing.is_empty() {
        let _ = writeln!(
            s,
            "<details><summary>{} kinds of count were not measured on this kernel</summary>\
             <ul><li>{}</li></ul></details>",
            missing.len(),
            missing.join("</li><li>")
        );
    }
}

/// The values a chart drew, folded: every interval's number, to check a curve against.
fn numbers(s: &mut String, name: &str, t_s: &[f64], series: &[Series]) {
    let _ = write!(
        s,
        "<details><summary>numbers{}</summary><table class=\"num\"><thead><tr><th>t (s)</th>",
        if name.is_empty() {
            String::new()
        } else {
            format!(" ({})", esc(name))
        }
    );
    for l in series {
        let _ = write!(s, "<th>{}</th>", esc(&l.label));
    }
    s.push_str("</tr></thead><tbody>\n");
    for (i, t) in t_s.iter().enumerate() {
        let _ = write!(s, "<tr><td>{t:.3}</td>");
        for l in series {
            match l.values.get(i).copied().flatten() {
                Some(v) => {
                    let _ = write!(s, "<td>{v:.3}</td>");
                }
                None => s.push_str("<td>-</td>"),
            }
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</tbody></table></details>\n");
}

fn to_lines(t: &Timeline, series: &[Series], prefix: &str, offset: usize) -> Vec<Line> {
    series
        .iter()
        .enumerate()
        .map(|(i, l)| Line {
            label: format!("{prefix}{}", crate::text_escape::Escaped(&l.label)),
            points: t.t_s.iter().zip(&l.values).map(|(x, y)| (*x, *y)).collect(),
            color: PALETTE[(i + offset) % PALETTE.len()],
        })
        .collect()
}

/// A chart over time, of one timeline or two overlaid (A's colours first, B's after).
fn time_chart(s: &mut String, spec: &Spec, sides: &[(&str, &Timeline)]) {
    let sampled = sides
        .iter()
        .any(|(_, t)| spec.id == "scan_share" && t.scan_sampled);
    let _ = writeln!(
        s,
        "<figure id=\"{}\" data-chart=\"{}\" data-intervals=\"{}\"><figcaption>{}{}</figcaption>\
         <p class=\"meta\">{}</p>",
        spec.id,
        spec.id,
        sides
            .iter()
            .map(|(_, t)| t.intervals().to_string())
            .collect::<Vec<_>>()
            .join(" "),
        spec.title,
        if sampled {
            " (sampled: an estimate from CPU-clock samples, not a measurement)"
        } else {
            ""
        },
        spec.what
    );
    let two = sides.len() > 1;
    let mut lines = vec![];
    let mut offset = 0;
    for (name, t) in sides {
        match (spec.lines)(t) {
            Lines::Drawn(series) if series.is_empty() => {
                let _ = writeln!(
                    s,
                    "<p class=\"nm\">{}nothing to draw: no task {} in this window.</p>",
                    if two {
                        format!("{}: ", esc(name))
                    } else {
                        String::new()
                    },
                    if spec.id == "scan_share" {
                        "scanned"
                    } else {
                        "moved"
                    }
                );
            }
            Lines::Drawn(series) => {
                let prefix = if two {
                    format!("{}: ", name)
                } else {
                    String::new()
                };
                lines.extend(to_lines(t, series, &prefix, offset));
                offset += series.len().max(4);
            }
            Lines::NotMeasured(why) => {
                let _ = writeln!(
                    s,
                    "<p class=\"nm\">{}not measured: {}</p>",
                    if two {
                        format!("{}: ", esc(name))
                    } else {
                        String::new()
                    },
                    esc(why)
                );
            }
        }
    }
    if !lines.is_empty() {
        s.push_str(&chart::lines(spec.y, &lines));
        s.push('\n');
        for (name, t) in sides {
            if let Lines::Drawn(series) = (spec.lines)(t)
                && !series.is_empty()
            {
                numbers(s, if two { name } else { "" }, &t.t_s, series);
            }
        }
    }
    s.push_str("</figure>\n");
}

/// The node → node matrix of a window: pages hint faults migrated where task_numa_fault
/// attached, else migrate_misplaced calls that migrated.
fn heatmap(s: &mut String, name: &str, r: &Report) {
    let m = Measured::from_hooks(&r.stat.hooks);
    let (unit, get): (&str, fn(&crate::sources::maps::NodeFlow) -> u64) = if m.is(Feed::HintFaults)
    {
        ("pages migrated by hint faults", |f| f.pages)
    } else if m.is(Feed::MigrateMisplaced) {
        ("migrate_misplaced calls that migrated", |f| f.migrated)
    } else {
        let _ = writeln!(
            s,
            "<p class=\"nm\">{name}not measured: {}</p>",
            esc(m.why(Feed::HintFaults).unwrap_or("no hook"))
        );
        return;
    };
    let flows = &r.stat.node_matrix;
    if flows.iter().all(|f| get(f) == 0) {
        let _ = writeln!(
            s,
            "<p class=\"meta\">{name}no page moved between nodes in this window.</p>"
        );
        return;
    }
    let mut nodes: Vec<u32> = flows
        .iter()
        .flat_map(|f| f.src.into_iter().chain([f.dst]))
        .collect();
    nodes.extend(r.stat.nodes.iter().map(|n| n.node));
    nodes.sort_unstable();
    nodes.dedup();
    let unknown_src = flows.iter().any(|f| f.src.is_none() && get(f) > 0);
    let mut from: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    if unknown_src {
        from.push("?".into());
    }
    let to: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    let mut cells = vec![vec![0u64; to.len()]; from.len()];
    for f in flows {
        let row = match f.src {
            Some(src) => nodes.iter().position(|n| *n == src),
            None => Some(nodes.len()),
        };
        let col = nodes.iter().position(|n| *n == f.dst);
        if let (Some(r), Some(c)) = (row, col)
            && let Some(cell) = cells.get_mut(r).and_then(|x| x.get_mut(c))
        {
            *cell = cell.saturating_add(get(f));
        }
    }
    let _ = writeln!(
        s,
        "<div><p class=\"meta\">{name}{unit}{}</p>{}",
        if unknown_src {
            " (row ?: the source node was not known)"
        } else {
            ""
        },
        chart::heatmap(&from, &to, &cells, unit)
    );
    s.push_str("<details><summary>numbers</summary><table class=\"num\"><tr><th>from \\ to</th>");
    for t in &to {
        let _ = write!(s, "<th>{t}</th>");
    }
    s.push_str("</tr>");
    for (f, row) in from.iter().zip(&cells) {
        let _ = write!(s, "<tr><th>{f}</th>");
        for v in row {
            let _ = write!(s, "<td>{v}</td>");
        }
        s.push_str("</tr>");
    }
    s.push_str("</table></details></div>\n");
}

fn bucket_label(lt: u64, unit: &str) -> String {
    if unit == "ns" {
        match lt {
            0..1_000 => format!("<{lt} ns"),
            1_000..1_000_000 => format!("<{} µs", lt / 1_000),
            _ => format!("<{} ms", lt / 1_000_000),
        }
    } else {
        format!("<{lt}")
    }
}

fn histogram(s: &mut String, name: &str, buckets: &[Log2Bucket], unit: &str, x: &str) {
    if buckets.is_empty() {
        let _ = writeln!(s, "<p class=\"meta\">{name}none in this window.</p>");
        return;
    }
    let labels: Vec<String> = buckets.iter().map(|b| bucket_label(b.lt, unit)).collect();
    let counts: Vec<u64> = buckets.iter().map(|b| b.count).collect();
    let _ = writeln!(
        s,
        "<div><p class=\"meta\">{name}</p>{}",
        chart::bars(x, &labels, &counts)
    );
    s.push_str("<details><summary>numbers</summary><table class=\"num\"><tr><th>bucket</th><th>count</th></tr>");
    for (l, c) in labels.iter().zip(&counts) {
        let _ = write!(s, "<tr><td>{}</td><td>{c}</td></tr>", esc(l));
    }
    s.push_str("</table></details></div>\n");
}

/// What comes before a side's part of a figure: `A: ` when there are two sides.
fn side_prefix(sides: &[(&str, &Report)], name: &str) -> String {
    if sides.len() > 1 {
        format!("{}: ", esc(name))
    } else {
        String::new()
    }
}

/// `draw` for each side that measured `feed`; for the others, why not.
fn each_measured(
    s: &mut String,
    sides: &[(&str, &Report)],
    feed: Feed,
    draw: impl Fn(&mut String, &str, &Report),
) {
    for (name, r) in sides {
        let prefix = side_prefix(sides, name);
        match Measured::from_hooks(&r.stat.hooks).why(feed) {
            Some(why) => {
                let _ = writeln!(s, "<p class=\"nm\">{prefix}not measured: {}</p>", esc(why));
            }
            None => draw(s, &prefix, r),
        }
    }
}

fn histograms(s: &mut String, sides: &[(&str, &Report)]) {
    let prefix = |name: &str| side_prefix(sides, name);
    s.push_str(
        "<figure id=\"migration_latency\" data-chart=\"migration_latency\"><figcaption>Migration \
         latency</figcaption><p class=\"meta\">Time in each migrate_misplaced_folio/_page call \
         (log2 buckets).</p>\n",
    );
    each_measured(s, sides, Feed::MigrateMisplaced, |s, prefix, r| {
        histogram(
            s,
            prefix,
            &r.stat.histograms.migrate_latency_ns,
            "ns",
            "time in migrate_misplaced (log2 buckets)",
        )
    });
    s.push_str("</figure>\n");
    s.push_str(
        "<figure id=\"pages_per_fault\" data-chart=\"pages_per_fault\"><figcaption>Pages per hint \
         fault</figcaption><p class=\"meta\">1 for a 4K page, 512 for a 2 MiB THP (seed 001's \
         batching shows here).</p>\n",
    );
    each_measured(s, sides, Feed::HintFaults, |s, prefix, r| {
        histogram(
            s,
            prefix,
            &r.stat.histograms.pages_per_hint_fault,
            "pages",
            "pages per hint fault (log2 buckets)",
        )
    });
    s.push_str("</figure>\n");
    s.push_str(
        "<figure id=\"slow_tier_latency\" data-chart=\"slow_tier_latency\"><figcaption>Slow-tier \
         hint-fault latency</figcaption>\n",
    );
    for (name, r) in sides {
        let t = &r.stat.tiering;
        let m = Measured::from_hooks(&r.stat.hooks);
        let text = match (m.why(Feed::PromoteDecisions), t.mode_end.or(t.mode_start)) {
            (Some(why), _) => format!("not measured: {}", esc(why)),
            (None, Some(mode)) if mode & 2 == 0 => {
                format!("not measured: memory tiering was off (kernel.numa_balancing={mode})")
            }
            _ => match t.hint_latency_ms_mean {
                Some(ms) => format!(
                    "not measured as a histogram: numatrace keeps the count and the mean of \
                     this latency — {} slow-tier hint faults, mean {ms:.0} ms from the scan \
                     to the fault",
                    t.hint_latency_faults
                ),
                None => "no slow-tier hint fault had its latency measured in this window".into(),
            },
        };
        let _ = writeln!(s, "<p class=\"nm\">{}{text}</p>", prefix(name));
    }
    s.push_str("</figure>\n");
}

/// Every task of the window, sortable by any column.
fn task_table(s: &mut String, r: &Report) {
    const MAX_ROWS: usize = 2000;
    let m = Measured::from_hooks(&r.stat.hooks);
    let num = |f: Feed, v: u64| match m.why(f) {
        Some(_) => "<td data-v=\"-1\">-</td>".to_owned(),
        None => format!("<td data-v=\"{v}\">{v}</td>"),
    };
    s.push_str(
        "<table class=\"sortable\" id=\"tasks\"><thead><tr><th>PID</th><th>TGID</th>\
         <th class=\"t\">COMM</th><th>scan %</th><th>PTE updates</th><th>hint faults</th>\
         <th>local %</th><th>pages migrated</th><th>migrate_pages ok</th><th>failed</th>\
         <th>skipped VMAs</th><th>preferred node</th></tr></thead><tbody>\n",
    );
    for t in r.stat.tasks.iter().take(MAX_ROWS) {
        let c = &t.counts();
        let share = if m.is(Feed::Scan) {
            c.scan.share
        } else {
            c.scan.sampled_share
        };
        let local = (c.hint_faults.faults > 0)
            .then(|| c.hint_faults.local as f64 / c.hint_faults.faults as f64 * 100.0);
        let _ = writeln!(
            s,
            "<tr><td data-v=\"{}\">{}</td><td data-v=\"{}\">{}</td><td class=\"t\">{}</td>{}{}{}{}{}{}{}{}<td>{}</td></tr>",
            t.pid,
            t.pid,
            t.tgid,
            t.tgid,
            esc(&t.comm),
            match share {
                Some(v) if m.is(Feed::ScanShare) =>
                    format!("<td data-v=\"{}\">{:.2}</td>", v * 100.0, v * 100.0),
                _ => "<td data-v=\"-1\">-</td>".to_owned(),
            },
            num(Feed::Pte, c.scan.pte_updates),
            num(Feed::HintFaults, c.hint_faults.faults),
            match local {
                Some(v) if m.is(Feed::HintFaults) => format!("<td data-v=\"{v}\">{v:.1}</td>"),
                _ => "<td data-v=\"-1\">-</td>".to_owned(),
            },
            num(Feed::HintFaults, c.hint_faults.migrated_pages),
            num(Feed::MigratePages, c.migrations.pages_ok),
            num(Feed::MigratePages, c.migrations.pages_failed),
            num(Feed::SkipVma, c.skipped_vmas_total),
            t.preferred_node
                .map_or_else(|| "-".to_owned(), |n| n.to_string()),
        );
    }
    s.push_str("</tbody></table>\n");
    if r.stat.tasks.len() > MAX_ROWS {
        let _ = writeln!(
            s,
            "<p class=\"meta\">{} more tasks are in the capture (`numatrace report --format json`).</p>",
            r.stat.tasks.len() - MAX_ROWS
        );
    }
}

fn mmtests_table(s: &mut String, r: &Report) {
    match &r.mmtests {
        None => s.push_str(
            "<p class=\"nm\">not in this capture: no /proc/vmstat of both ends of its window \
             (an older numatrace wrote it, or it was cut short)</p>\n",
        ),
        Some(rows) => {
            s.push_str("<table><tr><th class=\"t\">mmtests Ops</th><th>value</th></tr>\n");
            for row in rows {
                let _ = writeln!(
                    s,
                    "<tr><td class=\"t\">{}</td><td>{}</td></tr>",
                    esc(&row.label),
                    row.value.map_or_else(
                        || format!("- ({})", esc(row.absent.as_deref().unwrap_or("absent"))),
                        |v| format!("{v:.0}")
                    )
                );
            }
            s.push_str("</table>\n");
        }
    }
}

fn context(s: &mut String, name: &str, r: &Report) {
    let _ = writeln!(
        s,
        "<details><summary>Context{}: kernel, sysctls, tunables, THP, numa_maps</summary><pre>{}</pre></details>",
        if name.is_empty() {
            String::new()
        } else {
            format!(" of {}", esc(name))
        },
        esc(&context_text(r.state_start.as_ref(), r.state_end.as_ref()))
    );
}

/// The page of one capture.
pub fn capture_page(p: &Input) -> Result<String, CaptureError> {
    let t = Timeline::of(p.cap)?;
    let r = p.report;
    let mut s = String::new();
    let _ = writeln!(s, "<h1>NUMA balancing: {}</h1>", esc(&p.name));
    heading(&mut s, p);
    s.push_str("<h2 id=\"verdicts\">Verdicts and findings</h2>\n");
    verdicts_and_findings(&mut s, r);
    s.push_str("<h2 id=\"time\">Over time</h2>\n");
    for spec in &CHARTS {
        time_chart(&mut s, spec, &[(&p.name, &t)]);
    }
    s.push_str(
        "<h2 id=\"nodes\">Node to node</h2>\n<figure id=\"node_matrix\" data-chart=\"node_matrix\">\
         <figcaption>Migrations by source and destination node</figcaption>\n",
    );
    heatmap(&mut s, "", r);
    s.push_str("</figure>\n<h2 id=\"histograms\">Latencies and sizes</h2>\n");
    histograms(&mut s, &[(&p.name, r)]);
    s.push_str("<h2 id=\"tasks-h\">Tasks</h2>\n<p class=\"meta\">Click a column to sort.</p>\n");
    task_table(&mut s, r);
    s.push_str("<h2 id=\"context\">mmtests and context</h2>\n");
    mmtests_table(&mut s, r);
    context(&mut s, "", r);
    Ok(document(&format!("numatrace report: {}", p.name), &s))
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:+.1} %"))
}

/// The A/B page: A is the base, B the patched (or other) kernel.
pub fn ab_page(a: &Input, b: &Input, d: &Diff) -> Result<String, CaptureError> {
    let (ta, tb) = (Timeline::of(a.cap)?, Timeline::of(b.cap)?);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<h1>NUMA balancing: {} (A) against {} (B)</h1>",
        esc(&a.name),
        esc(&b.name)
    );
    heading(&mut s, a);
    heading(&mut s, b);
    s.push_str("<h2 id=\"verdicts\">Verdicts</h2>\n<table id=\"verdict-pairs\"><tr><th class=\"t\">patch</th><th class=\"t\">A</th><th class=\"t\">B</th></tr>\n");
    for v in &d.verdicts {
        let show = |x: &Option<crate::report::verdicts::Verdict>| {
            x.map_or_else(|| "-".to_owned(), |v| v.to_string())
        };
        let changed = v.before != v.after;
        let _ = writeln!(
            s,
            "<tr{}><td class=\"t\">{}{}</td><td class=\"t\">{}</td><td class=\"t\">{}</td></tr>",
            if changed { " class=\"changed\"" } else { "" },
            esc(&v.patch),
            if changed { " (changed)" } else { "" },
            show(&v.before),
            show(&v.after)
        );
    }
    s.push_str("</table>\n<div class=\"pair\"><div><h3>Findings in A</h3><ul>");
    for f in &d.findings_before {
        let _ = write!(s, "<li>{}</li>", esc(f));
    }
    s.push_str("</ul></div><div><h3>Findings in B</h3><ul>");
    for f in &d.findings_after {
        let _ = write!(s, "<li>{}</li>", esc(f));
    }
    s.push_str("</ul></div></div>\n<h2 id=\"time\">Over time (A and B overlaid)</h2>\n");
    for spec in &CHARTS {
        time_chart(&mut s, spec, &[("A", &ta), ("B", &tb)]);
    }
    s.push_str(
        "<h2 id=\"nodes\">Node to node</h2>\n<figure id=\"node_matrix\" data-chart=\"node_matrix\">\
         <figcaption>Migrations by source and destination node</figcaption><div class=\"pair\">\n",
    );
    heatmap(&mut s, "A: ", a.report);
    heatmap(&mut s, "B: ", b.report);
    s.push_str("</div></figure>\n<h2 id=\"histograms\">Latencies and sizes</h2>\n");
    histograms(&mut s, &[("A", a.report), ("B", b.report)]);
    s.push_str("<h2 id=\"mmtests\">mmtests Ops</h2>\n");
    match &d.mmtests_absent {
        Some(why) => {
            let _ = writeln!(s, "<p class=\"nm\">{}</p>", esc(why));
        }
        None => {
            s.push_str("<table id=\"mmtests-diff\"><tr><th class=\"t\">Ops</th><th>A</th><th>B</th><th>change</th></tr>\n");
            for r in &d.mmtests {
                let _ = writeln!(
                    s,
                    "<tr><td class=\"t\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&r.label),
                    opt(r.base),
                    opt(r.patched),
                    pct(r.change_pct)
                );
            }
            s.push_str("</table>\n");
        }
    }
    s.push_str("<h2 id=\"metrics\">Every metric</h2>\n<table id=\"metrics-diff\" class=\"sortable\"><thead><tr><th class=\"t\">metric</th><th>A</th><th>B</th><th>change</th><th>change %</th></tr></thead><tbody>\n");
    for r in &d.rows {
        let _ = writeln!(
            s,
            "<tr><td class=\"t\">{}</td><td>{}</td><td>{}</td><td>{}</td><td data-v=\"{}\">{}</td></tr>",
            esc(&r.metric),
            opt(r.before),
            opt(r.after),
            opt(r.change),
            r.change_pct.unwrap_or(0.0),
            pct(r.change_pct)
        );
    }
    s.push_str("</tbody></table>\n");
    if !d.settings.is_empty() {
        s.push_str("<h2 id=\"settings\">Settings that differ at the start</h2>\n<table><tr><th class=\"t\">setting</th><th class=\"t\">A</th><th class=\"t\">B</th></tr>\n");
        for x in &d.settings {
            let _ = writeln!(
                s,
                "<tr><td class=\"t\">{}</td><td class=\"t\">{}</td><td class=\"t\">{}</td></tr>",
                esc(&x.setting),
                esc(&x.before),
                esc(&x.after)
            );
        }
        s.push_str("</table>\n");
    }
    s.push_str("<h2 id=\"context\">Context</h2>\n");
    context(&mut s, &a.name, a.report);
    context(&mut s, &b.name, b.report);
    Ok(document(
        &format!("numatrace A/B: {} against {}", a.name, b.name),
        &s,
    ))
}
