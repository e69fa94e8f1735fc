//! Drawing `top` with ratatui: header, the current view's table (or a row's detail), footer,
//! and the help and hooks overlays. Works on any backend (tests use `TestBackend`).

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Cell, Clear, Paragraph, Row as TRow, Table, TableState, Wrap},
};

use super::{
    app::{App, HELP, Mode, View},
    graph::{Series, trend_line},
    history::{SPARK_S, fmt_window},
    view::{FrameView, Row, Shown, shown_columns},
};
use crate::{bpf::loader::HookReport, text_escape::Escaped};

/// What the frame shows besides the view: the kernel line and, in detail, the row's lines.
pub struct Context<'a> {
    pub kernel: &'a str,
    pub balancing: Option<u32>,
    pub nodes: usize,
    pub hooks: &'a [HookReport],
    pub detail_lines: Vec<String>,
    /// The detail's sparklines (hint faults/s, pages migrated/s, scan share).
    pub detail_series: Vec<Series>,
}

pub fn draw(f: &mut Frame, app: &App, view: &FrameView, rows: &[&Row], ctx: &Context) {
    let [head, body, foot] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(f.area());
    draw_header(f, head, view, ctx);
    if app.detail.is_some() {
        draw_detail(f, body, app, ctx);
    } else if app.view == View::Nodes {
        // The node-to-node migrations under the per-node table.
        // and, with memory tiers, each tier's promotions and demotions.
        // and the node matrix over the activity window as a shaded grid.
        let mut lines = vec![Line::from(super::view::flows_line(view))];
        lines.extend(super::view::grid_lines(view).into_iter().map(Line::from));
        lines.extend(super::view::tiers_line(view).map(Line::from));
        let [table, flows] = Layout::vertical([
            Constraint::Min(3),
            Constraint::Length(lines.len() as u16 + 1),
        ])
        .areas(body);
        draw_table(f, table, app, view, rows, ctx);
        f.render_widget(Paragraph::new(lines), flows);
    } else {
        draw_table(f, body, app, view, rows, ctx);
    }
    draw_footer(f, foot, app, rows.len());
    match &app.mode {
        Mode::Help => draw_help(f, body),
        Mode::Hooks => draw_hooks(f, body, ctx.hooks),
        _ => {}
    }
}

fn draw_header(f: &mut Frame, area: Rect, view: &FrameView, ctx: &Context) {
    let lines = view.header(ctx.kernel, ctx.balancing, ctx.nodes);
    let mut out: Vec<Line> = lines[..2].iter().map(|l| Line::from(l.clone())).collect();
    // Losses in red: a report with drops is not exact.
    let style = if view.dropped > 0 {
        Style::default().fg(Color::Red).add_modifier(Modifier::BOLD)
    } else {
        Style::default()
    };
    out.push(Line::from(Span::styled(lines[2].clone(), style)));
    // The last minute as sparklines, readable without colour.
    if !view.trend.is_empty() {
        out.push(Line::from(trend_line(
            &format!("{SPARK_S}s: "),
            &view.trend,
            area.width as usize,
        )));
    }
    f.render_widget(Paragraph::new(out), area);
}

fn widths(app: &App, shown: &[Shown], window_s: u64) -> Vec<Constraint> {
    match app.view {
        View::Tasks | View::Processes => shown
            .iter()
            .map(|c| Constraint::Length(c.width(window_s)))
            .collect(),
        View::Cgroups => std::iter::once(Constraint::Length(28))
            .chain(std::iter::repeat_n(Constraint::Length(7), 7))
            .collect(),
        View::Nodes => vec![
            Constraint::Length(5),
            Constraint::Length(10),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(7),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(7),
            Constraint::Length(5),
        ],
    }
}

/// How many leading columns fit in `width` (one cell of spacing between columns): the rest are
/// left out rather than squeezed, so that every shown column stays readable.
fn fitting(widths: &[Constraint], width: u16) -> usize {
    let mut used = 0u16;
    let mut n = 0;
    for w in widths {
        let Constraint::Length(w) = w else { break };
        let need = if n == 0 { *w } else { w + 1 };
        if used + need > width {
            break;
        }
        used += need;
        n += 1;
    }
    n.max(1)
}

fn draw_table(
    f: &mut Frame,
    area: Rect,
    app: &App,
    view: &FrameView,
    rows: &[&Row],
    ctx: &Context,
) {
    // The task tables: PID, COMM, LAST and the window column, then the rest; the others as
    // they are.
    let task_table = matches!(app.view, View::Tasks | View::Processes);
    let shown = if task_table {
        shown_columns(view, app.sort_col)
    } else {
        Vec::new()
    };
    let all = widths(app, &shown, view.window_s);
    let n = fitting(&all, area.width);
    let cols: Vec<(String, bool)> = if task_table {
        shown
            .iter()
            .map(|c| (c.title(view.window_s), *c == Shown::Col(app.sort_col)))
            .collect()
    } else {
        app.view
            .columns()
            .into_iter()
            .enumerate()
            .map(|(i, c)| (c.to_owned(), i == app.sort_col))
            .collect()
    };
    let header = TRow::new(cols.into_iter().take(n).map(|(c, sorted)| {
        let mut s = c;
        if sorted {
            s.push(if app.sort_desc { '▼' } else { '▲' });
        }
        let style = if sorted && app.mode == Mode::Sort {
            Style::default().add_modifier(Modifier::REVERSED)
        } else {
            Style::default().add_modifier(Modifier::BOLD)
        };
        Cell::from(s).style(style)
    }));
    // Only the rows that fit are built (the top border with the title and the header take two
    // lines), scrolled as the table would scroll them itself: the selection on the last line
    // once it is past the first screen. At 100 000 tasks every row's cells would cost more than
    // the rest of the frame.
    let fit = usize::from(area.height.saturating_sub(2)).max(1);
    let selected = app.selected.min(rows.len().saturating_sub(1));
    let first = selected.saturating_sub(fit - 1);
    let body = rows.iter().skip(first).take(fit).map(|r| {
        if task_table {
            TRow::new(shown.iter().take(n).map(|c| Cell::from(c.cell(r))))
        } else {
            TRow::new((0..r.len().min(n)).map(|i| Cell::from(r.cell(i))))
        }
    });
    let title = if view.window_s > 0 && app.view != View::Nodes {
        format!(
            " {} ({}, active within {}) ",
            app.view.title(),
            rows.len(),
            fmt_window(view.window_s)
        )
    } else {
        format!(" {} ({}) ", app.view.title(), rows.len())
    };
    let table = Table::new(body, all.into_iter().take(n))
        .header(header)
        .block(Block::default().borders(Borders::TOP).title(title))
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    let mut state = TableState::default();
    if !rows.is_empty() {
        state.select(Some(selected - first));
    }
    f.render_stateful_widget(table, area, &mut state);
    if rows.is_empty() {
        let inner = Rect {
            y: area.y + 2,
            height: area.height.saturating_sub(2),
            ..area
        };
        let unfiltered = match app.view {
            View::Tasks => view.tasks.len(),
            View::Processes => view.processes.len(),
            View::Cgroups => view.cgroups.len(),
            View::Nodes => view.nodes.len(),
        };
        let text = if view.interval_s == 0.0 {
            "collecting the first interval...".to_owned()
        } else if unfiltered > 0 {
            format!(
                "no row matches the filter {} (Esc clears it)",
                Escaped(&app.filter)
            )
        } else {
            view.quiet_text(ctx.balancing)
        };
        f.render_widget(Paragraph::new(text), inner);
    }
}

fn draw_detail(f: &mut Frame, area: Rect, app: &App, ctx: &Context) {
    let [text, spark] = Layout::vertical([Constraint::Min(3), Constraint::Length(4)]).areas(area);
    let lines: Vec<Line> = ctx
        .detail_lines
        .iter()
        .map(|l| Line::from(l.clone()))
        .collect();
    f.render_widget(
        Paragraph::new(lines)
            // Long lines (a row's counts) wrap rather than run off the pane.
            .wrap(Wrap { trim: false })
            .block(Block::default().borders(Borders::TOP).title(format!(
                " {} {} (Esc: back) ",
                app.view.title(),
                app.detail.unwrap_or(0)
            ))),
        text,
    );
    // What this kernel does not measure says so, never a flat line of zeros never counted.
    let lines: Vec<Line> = ctx
        .detail_series
        .iter()
        .map(|s| Line::from(s.line(spark.width as usize)))
        .collect();
    f.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::TOP)
                .title(format!(" last {SPARK_S} s, a bar per refresh ")),
        ),
        spark,
    );
}

fn draw_footer(f: &mut Frame, area: Rect, app: &App, nrows: usize) {
    let status = match &app.mode {
        Mode::Filter(t) => format!("filter: {}_  (Enter apply, Esc cancel)", Escaped(t)),
        Mode::Sort => "sort: ← → column, ↑ ↓ direction, Enter done".to_owned(),
        _ => {
            let mut s = format!(
                "q quit  ? help  t/P/c/n views  s sort  / filter  p pause  i hooks  w window {}",
                fmt_window(app.window_s)
            );
            if !app.filter.is_empty() {
                s.push_str(&format!(
                    "  [filter: {}] {nrows} rows",
                    Escaped(&app.filter)
                ));
            }
            s
        }
    };
    let style = if app.paused {
        Style::default().fg(Color::Yellow)
    } else {
        Style::default()
    };
    let text = if app.paused {
        format!("PAUSED (p resumes)  {status}")
    } else {
        status
    };
    f.render_widget(Paragraph::new(Span::styled(text, style)), area);
}

fn popup(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

fn draw_help(f: &mut Frame, area: Rect) {
    let lines: Vec<Line> = HELP
        .iter()
        .map(|(k, what)| Line::from(format!("{k:<20} {what}")))
        .collect();
    let r = popup(area, 72, HELP.len() as u16 + 2);
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" keys ")),
        r,
    );
}

fn draw_hooks(f: &mut Frame, area: Rect, hooks: &[HookReport]) {
    let lines: Vec<Line> = hooks
        .iter()
        .map(|h| {
            let s = format!(
                "{:<32} {:<10} {}",
                Escaped(&h.name),
                if h.attached {
                    h.mechanism.to_string()
                } else {
                    "-".into()
                },
                Escaped(h.reasons.first().map(String::as_str).unwrap_or(""))
            );
            if h.attached {
                Line::from(s)
            } else {
                Line::from(Span::styled(s, Style::default().fg(Color::Yellow)))
            }
        })
        .collect();
    let r = popup(area, area.width.saturating_sub(2), hooks.len() as u16 + 2);
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" hooks (a column without its hook shows -) "),
        ),
        r,
    );
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use numatrace_common::{MAX_NODES, TaskStats};
    use ratatui::{Terminal, backend::TestBackend};

    use super::*;
    use crate::{
        cmd::top::{
            app::{Key, View},
            history::{Recent, Sample},
            view::OwnCost,
        },
        engine::Snapshot,
        kernel::nodes::NodeInfo,
        model::Filter,
        plan::Mechanism,
    };

    fn hook(name: &str, attached: bool) -> HookReport {
        HookReport {
            name: name.into(),
            kind: "function".into(),
            mechanism: if attached {
                Mechanism::Fentry
            } else {
                Mechanism::None
            },
            symbol: None,
            attached,
            reasons: if attached {
                vec![]
            } else {
                vec!["fentry refused: EPERM".into()]
            },
            what: String::new(),
        }
    }

    /// A full kernel, or one where only the tracepoints attach (this build machine's).
    fn hooks(full: bool) -> Vec<HookReport> {
        let mut h: Vec<HookReport> = [
            "sched:sched_skip_vma_numa",
            "sched:sched_move_numa",
            "migrate:mm_migrate_pages",
        ]
        .iter()
        .map(|n| hook(n, true))
        .collect();
        h.push(HookReport {
            reasons: vec![if full {
                "not needed: task_numa_work is hooked, scan time is measured exactly".into()
            } else {
                String::new()
            }],
            ..hook("sampling:cpu-clock", !full)
        });
        for f in [
            "task_numa_work",
            "change_prot_numa",
            "task_numa_fault",
            "mpol_misplaced",
            "migrate_misplaced_folio|_page",
            "migration_entry_wait",
        ] {
            h.push(hook(f, full));
        }
        h
    }

    /// Two snapshots one second apart with two busy tasks on two nodes.
    fn delta() -> Snapshot {
        let task = |pid: u32, comm: &[u8], k: u64| {
            let mut s = TaskStats::new(pid, 100);
            s.comm[..comm.len()].copy_from_slice(comm);
            s.first_ns = 1;
            s.scan.calls = 4 * k;
            s.scan.runtime_in_scan_ns = 2_000_000 * k;
            s.runtime_first_ns = 1;
            s.runtime_last_ns = 1 + 100_000_000 * k;
            s.scan.pte_updates = 4096 * k;
            s.hint_faults.faults = 1000 * k;
            s.hint_faults.local = 250 * k;
            s.hint_faults.faults_thp = 10 * k;
            s.migrations.pages_ok = 700 * k;
            s.migrations.attempts = 700 * k;
            s.migrations.succeeded = 700 * k;
            s.migrations.latency_ns_total = 700 * k * 40_000;
            s.skip_vma[1] = 5 * k;
            s.placement.moves = k;
            s.cgroup_id = 7;
            s.preferred_nid = 1;
            s.last_nid = 2;
            s
        };
        let n = MAX_NODES as usize;
        let snap = |mono_ns: u64, k: u64| {
            let mut node_faults = vec![0; n * 3];
            node_faults[0] = 2000 * k;
            node_faults[1] = 500 * k;
            let mut pages = vec![0; (n + 1) * n];
            pages[n] = 1400 * k; // 1 -> 0
            pages[1] = 300 * k; // 0 -> 1
            let mut s = Snapshot {
                mono_ns,
                consistent: true,
                self_tgid: 1,
                tasks: Snapshot::tasks_from(
                    &[task(101, b"worker-a", k), task(102, b"worker-b", 2 * k)],
                    &BTreeMap::new(),
                ),
                node_faults,
                migrated_pages: pages,
                migrate_matrix: vec![0; 2 * (n + 1) * n],
                migrate_latency: vec![0; 64],
                nodes: (0..2)
                    .map(|node| NodeInfo {
                        node,
                        cpus: node.to_string(),
                        distances: vec![10, 20],
                        mem_total_bytes: Some(1 << 30),
                        mem_free_bytes: Some(1 << 29),
                    })
                    .collect(),
                vmstat_hi: BTreeMap::from([
                    ("numa_pte_updates".to_owned(), 12288 * k),
                    ("numa_hint_faults".to_owned(), 3000 * k),
                    ("numa_hint_faults_local".to_owned(), 750 * k),
                    ("numa_pages_migrated".to_owned(), 2100 * k),
                ]),
                vmstat_lo: BTreeMap::from([
                    ("numa_pte_updates".to_owned(), 12288 * k),
                    ("numa_hint_faults".to_owned(), 3000 * k),
                    ("numa_hint_faults_local".to_owned(), 750 * k),
                    ("numa_pages_migrated".to_owned(), 2100 * k),
                ]),
                ..Snapshot::default()
            };
            for t in &mut s.tasks {
                t.cgroup = Some("/app.slice/db.service".into());
            }
            s.migrate_latency[16] = 700 * k;
            s
        };
        snap(2_000_000_000, 2).delta(&snap(1_000_000_000, 1))
    }

    /// What `top` remembers after three refreshes: a third task, worker-c, busy 3 s before
    /// and quiet since (it stays listed for the 10 s window), then `delta()` twice.
    fn recent(full: bool) -> Recent {
        let m = crate::report::measured::Measured::from_hooks(&hooks(full));
        let f = Filter::default();
        let mut r = Recent::new(10);
        let d = delta();
        let mut early = d.clone();
        early.mono_ns -= 2_000_000_000;
        early.tasks.retain(|t| t.pid == 101);
        early.tasks[0].pid = 103;
        early.tasks[0].comm = "worker-c".into();
        let mut before = d.clone();
        before.mono_ns -= 1_000_000_000;
        for x in [&early, &before, &d] {
            r.push(x, &f, Sample::of(x, &f, &m));
        }
        r
    }

    fn view(full: bool) -> (FrameView, Recent) {
        let r = recent(full);
        let v = FrameView::build(
            &delta(),
            &hooks(full),
            &Filter::default(),
            OwnCost {
                cpu_pct: Some(0.4),
                bpf_pct: Some(0.02),
                bpf_runs: Some(5000),
            },
        )
        .windowed(&r, 10);
        (v, r)
    }

    fn render(app: &App, full: bool, w: u16, h: u16) -> String {
        let hooks = hooks(full);
        let (view, recent) = view(full);
        let rows = app.rows(&view);
        let ctx = Context {
            kernel: "6.12.117+deb12-cloud-amd64",
            balancing: Some(1),
            nodes: 2,
            hooks: &hooks,
            detail_lines: vec!["task 101 (worker-a) of process 100".into()],
            detail_series: recent
                .task_series(
                    |pid, _| pid == 101,
                    crate::cmd::top::history::scan_sampled(&view.measured),
                )
                .series(&view.measured),
        };
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
        term.draw(|f| draw(f, app, &view, &rows, &ctx)).unwrap();
        let buf = term.backend().buffer().clone();
        (0..h)
            .map(|y| {
                (0..w)
                    .map(|x| buf[(x, y)].symbol().to_owned())
                    .collect::<String>()
                    .trim_end()
                    .to_owned()
            })
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    }

    #[test]
    fn a_long_table_draws_the_screen_around_the_selection() {
        let (mut view, _) = view(true);
        view.cgroups = (0..500u64)
            .map(|k| Row {
                key: k,
                cells: vec![format!("/cg{k:03}").into()],
                sort: vec![-(k as f64)],
                ..Row::default()
            })
            .collect();
        let mut app = App::default();
        app.switch(View::Cgroups);
        let (w, h) = (100, 20);
        let screen = |app: &App| {
            let rows = app.rows(&view);
            let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
            let hooks = hooks(true);
            let ctx = Context {
                kernel: "6.18",
                balancing: Some(1),
                nodes: 2,
                hooks: &hooks,
                detail_lines: vec![],
                detail_series: vec![],
            };
            term.draw(|f| draw(f, app, &view, &rows, &ctx)).unwrap();
            let buf = term.backend().buffer().clone();
            let lines: Vec<String> = (0..h)
                .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>())
                .collect();
            // The highlighted line: its first cell is drawn reversed.
            let selected = (0..h)
                .find(|&y| {
                    (0..w).any(|x| {
                        buf[(x, y)].modifier.contains(Modifier::REVERSED)
                            && buf[(x, y)].symbol() == "/"
                    })
                })
                .map(|y| lines[y as usize].clone());
            (lines.join("\n"), selected)
        };
        // The names in the table's order (its default sort).
        let names: Vec<String> = app
            .rows(&view)
            .iter()
            .map(|r| r.cell(0).to_string())
            .collect();
        let (first, selected) = screen(&app);
        assert!(
            first.contains(&names[0]) && !first.contains(&names[100]),
            "{first}"
        );
        assert!(selected.is_some_and(|l| l.contains(&names[0])));
        for _ in 0..300 {
            let rows = app.rows(&view);
            app.key(Key::Down, &rows);
        }
        let (scrolled, selected) = screen(&app);
        assert!(
            selected.is_some_and(|l| l.contains(&names[300])),
            "the selection is drawn:\n{scrolled}"
        );
        assert!(scrolled.contains(&names[299]) && !scrolled.contains(&names[0]));
        assert!(
            !scrolled.contains(&names[301]),
            "the selection is on the last line:\n{scrolled}"
        );
    }

    /// Compares with `src/cmd/top/golden/NAME.txt`; `NUMATRACE_UPDATE_GOLDEN=1` rewrites it.
    fn golden(name: &str, text: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/cmd/top/golden")
            .join(format!("{name}.txt"));
        if std::env::var("NUMATRACE_UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            return;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_else(|_| {
            panic!(
                "{} missing: run with NUMATRACE_UPDATE_GOLDEN=1",
                path.display()
            )
        });
        assert_eq!(text, want, "{name} differs from {}", path.display());
    }

    #[test]
    fn every_view_at_80x24_and_200x50_on_a_full_and_a_tracepoint_only_kernel() {
        for (view, key) in [
            (View::Tasks, 't'),
            (View::Processes, 'P'),
            (View::Cgroups, 'c'),
            (View::Nodes, 'n'),
        ] {
            let mut app = App::default();
            app.key(Key::Char(key), &[] as &[Row]);
            assert_eq!(app.view, view);
            for (w, h) in [(80, 24), (200, 50)] {
                for full in [true, false] {
                    let name = format!(
                        "{}-{w}x{h}-{}",
                        view.title(),
                        if full { "full" } else { "tracepoints" }
                    );
                    golden(&name, &render(&app, full, w, h));
                }
            }
        }
    }

    #[test]
    fn missing_hooks_show_dashes_never_zeros() {
        let app = App::default();
        let t = render(&app, false, 200, 50);
        let row = t.lines().find(|l| l.contains("worker-b")).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        // PID COMM LAST SCAN%@10s SCAN% PTE/s HINT/s LOCAL% MIGR/s SKIP/s NODE ...
        assert_eq!(cells[1], "worker-b", "{row}");
        assert_eq!(cells[2], "now", "{row}");
        assert_eq!(cells[3], "-", "no CPU samples in the window: {row}");
        assert_eq!(cells[4], "-", "{row}");
        assert_eq!(cells[5], "-", "{row}");
        assert_eq!(cells[6], "-", "{row}");
        let full = render(&app, true, 200, 50);
        let row = full.lines().find(|l| l.contains("worker-b")).unwrap();
        assert!(row.contains("2000"), "hint faults/s of worker-b: {row}");
        // The detail's sparklines: no flat line of hint faults never counted.
        let mut app = App::default();
        let selected = Row {
            key: 101,
            ..Row::default()
        };
        app.key(Key::Enter, &[selected]);
        let t = render(&app, false, 120, 30);
        assert!(
            t.contains("hint/s: not measured: task_numa_fault not attached"),
            "{t}"
        );
        // worker-a's first refresh had nothing of it.
        assert!(t.contains("migr/s [ ██] max 700"), "{t}");
        // The nodes view's migrations: pages task_numa_fault counts.
        let mut app = App::default();
        app.key(Key::Char('n'), &[] as &[Row]);
        let t = render(&app, false, 120, 30);
        assert!(
            t.contains("migrations by node: not measured: task_numa_fault not attached"),
            "{t}"
        );
    }

    #[test]
    fn detail_help_and_hooks_overlays() {
        let mut app = App::default();
        app.key(
            Key::Enter,
            &[Row {
                key: 101,
                ..Row::default()
            }],
        );
        let t = render(&app, true, 80, 24);
        assert!(t.contains("task 101 (worker-a)"), "{t}");
        assert!(t.contains("last 60 s, a bar per refresh"), "{t}");
        assert!(t.contains("hint/s [ ██] max 1000"), "{t}");
        let mut app = App::default();
        app.key(Key::Char('?'), &[] as &[Row]);
        assert!(render(&app, true, 80, 24).contains("q / Ctrl-C"));
        let mut app = App::default();
        app.key(Key::Char('i'), &[] as &[Row]);
        let t = render(&app, false, 120, 30);
        assert!(t.contains("fentry refused: EPERM"), "{t}");
    }

    /// `top -b` builds the task table alone: its frames read as those of a view with every
    /// table, whatever the column it sorts by, and the tables it skips are empty.
    #[test]
    fn batch_frames_of_the_task_table_alone_are_those_of_every_table() {
        use crate::cmd::top::{batch::text_frame, view::Tables};
        for full in [true, false] {
            let (every, recent) = view(full);
            let tasks = FrameView::build_for(
                &delta(),
                &hooks(full),
                &Filter::default(),
                every.own.clone(),
                Tables::Tasks,
            )
            .windowed(&recent, 10);
            assert!(!every.processes.is_empty() && !every.cgroups.is_empty());
            assert!(tasks.processes.is_empty() && tasks.cgroups.is_empty());
            assert_eq!(tasks.tasks, every.tasks, "full {full}");
            assert_eq!(tasks.nodes, every.nodes, "full {full}");
            let header = every.header("6.12", Some(1), 2);
            for sort in [None, Some(0), Some(1), Some(4), Some(16)] {
                for rows in [0, 1, 20] {
                    assert_eq!(
                        text_frame(&header, &tasks, rows, sort, Some(1)),
                        text_frame(&header, &every, rows, sort, Some(1)),
                        "full {full}, sort {sort:?}, rows {rows}"
                    );
                }
            }
        }
    }

    /// `top -b` by a number column makes rows only for the tasks it prints. Over random
    /// histories (a pid's two tasks, exited tasks, tasks quiet now and active earlier in the
    /// window, interval tasks the window has no record of), they are the first rows of the
    /// whole table, in its order, and the frames read the same.
    fn rows_made_for_the_shown_tasks_alone(seed: u64) {
        use crate::{
            cmd::top::{
                batch::text_frame,
                history::reference::{counts, refresh},
                view::{COLUMNS, Row, Tables, first_rows, sort_desc},
            },
            engine::tasks::tests::Rng,
            model::{PackedCounts, TaskRecord},
            report::measured::Measured,
        };
        let mut r = Rng(seed | 1);
        let hooks = hooks(r.chance(50));
        let f = Filter::default();
        let m = Measured::from_hooks(&hooks);
        let window = [1, 5, 10][r.below(3) as usize];
        let mut recent = Recent::new(window);
        let task = |r: &mut Rng, pid: u32, first_ns: u64| TaskRecord {
            pid,
            tgid: 100 + pid % 3,
            comm: format!("t{pid}").into(),
            exited: r.chance(10),
            cgroup_id: u64::from(pid % 2),
            cgroup: None,
            preferred_node: None,
            last_node: None,
            first_ns,
            counts: PackedCounts::pack(&counts(r)),
        };
        let refreshes = 1 + r.below(15);
        let mut last = Snapshot::default();
        for s in 1..=refreshes {
            let mut tasks = Vec::new();
            for pid in 1..=8 {
                if r.chance(80) {
                    tasks.push(task(&mut r, pid, 1));
                }
                if r.chance(10) {
                    tasks.push(task(&mut r, pid, 2));
                }
            }
            let delta = refresh(s, tasks);
            // The last refresh is not always remembered: its tasks then have no window record.
            if s < refreshes || r.chance(70) {
                recent.push(&delta, &f, Sample::of(&delta, &f, &m));
            }
            last = delta;
        }
        let what = format!("seed {seed}");
        let every = FrameView::build_for(&last, &hooks, &f, OwnCost::default(), Tables::Tasks)
            .windowed(&recent, window);
        let header = every.header("6.12", Some(1), 2);
        let all = every.tasks.len();
        for col in (0..COLUMNS.len()).filter(|&c| COLUMNS[c].numeric()) {
            for n in [0, 1, 3, all, all + 5] {
                let want: Vec<Row> = first_rows(&every.tasks, n, col, sort_desc(col))
                    .into_iter()
                    .cloned()
                    .collect();
                let got = FrameView::build_for(&last, &hooks, &f, OwnCost::default(), Tables::None)
                    .windowed_first(&last, &f, &recent, window, n, col);
                let what = format!("{what}, column {col}, rows {n}");
                assert_eq!(got.tasks, want, "{what}");
                assert_eq!(got.tasks.len() + got.tasks_unlisted, all, "{what}");
                assert_eq!(got.header("6.12", Some(1), 2), header, "{what}");
                assert_eq!(
                    text_frame(&header, &got, n, Some(col), Some(1)),
                    text_frame(&header, &every, n, Some(col), Some(1)),
                    "{what}"
                );
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 128,
            ..proptest::prelude::ProptestConfig::default()
        })]

        #[test]
        fn batch_rows_made_for_the_shown_tasks_alone_are_the_whole_tables_first(
            seed in proptest::prelude::any::<u64>(),
        ) {
            rows_made_for_the_shown_tasks_alone(seed);
        }
    }

    /// What a process named itself (comm), its cgroup and the kernel's strings reach the screen
    /// escaped: in every view, the overlays and `top -b`'s text.
    #[test]
    fn strings_from_the_system_are_escaped_on_screen_and_in_batch_text() {
        const EVIL: &str = "\x1b]0;pwn\x07\u{9b}2J\u{202e}";
        const SHOWN: &str = "\\x1b]0;pwn\\x07\\u{9b}2J\\u{202e}";
        let mut delta = delta();
        for t in &mut delta.tasks {
            t.comm = format!("w{EVIL}").into();
            t.cgroup = Some(format!("/app.slice/{EVIL}").into());
        }
        delta.nodes[0].cpus = format!("0{EVIL}");
        let mut hooks = hooks(false);
        hooks.push(HookReport {
            reasons: vec![format!("refused: {EVIL}")],
            ..hook(&format!("x{EVIL}"), false)
        });
        // The last activity names a task too: the quiet table's sentence.
        let mut recent = Recent::new(10);
        let f = Filter::default();
        let m = crate::report::measured::Measured::from_hooks(&hooks);
        recent.push(&delta, &f, Sample::of(&delta, &f, &m));
        let view = FrameView::build(&delta, &hooks, &f, OwnCost::default()).windowed(&recent, 10);
        let raw = |t: &str| {
            t.chars()
                .find(|&c| c != '\n' && c != '\\' && crate::text_escape::needs_escape(c))
        };
        let mut quiet = view.clone();
        quiet.tasks.clear();
        let text = crate::cmd::top::batch::text_frame(&[], &quiet, 20, None, Some(1));
        assert!(
            text.contains(&format!("(last: hint faults by 102 w{SHOWN})")),
            "{text}"
        );
        assert_eq!(raw(&text), None, "{text:?}");
        let header = view.header(&format!("6.18{EVIL}"), Some(1), 2);
        let batch = crate::cmd::top::batch::text_frame(&header, &view, 20, None, Some(1));
        assert_eq!(raw(&batch), None, "{batch:?}");
        assert!(batch.contains(&format!("kernel 6.18{SHOWN},")), "{batch}");
        assert!(batch.contains(&format!(" w{SHOWN} ")), "{batch}");
        assert!(
            batch.contains(&format!(" {SHOWN}\n")),
            "the CGROUP cell: {batch}"
        );
        let ctx = |hooks| Context {
            kernel: "6.18",
            balancing: Some(1),
            nodes: 2,
            hooks,
            detail_lines: vec![],
            detail_series: vec![],
        };
        let screen = |app: &App| {
            let rows = app.rows(&view);
            let mut term = Terminal::new(TestBackend::new(250, 40)).unwrap();
            term.draw(|f| draw(f, app, &view, &rows, &ctx(&hooks)))
                .unwrap();
            let buf = term.backend().buffer().clone();
            (0..40)
                .map(|y| (0..250).map(|x| buf[(x, y)].symbol()).collect::<String>())
                .collect::<Vec<_>>()
                .join("\n")
        };
        // Cells are cut at the column's width: the escaped text's start is enough.
        for (key, want) in [
            ('t', "w\\x1b]0;pwn\\x07".to_owned()),
            ('P', "w\\x1b]0;pwn\\x07".to_owned()),
            ('c', "/app.slice/\\x1b]0;pwn\\x07".to_owned()),
            ('n', "0\\x1b]0;pw".to_owned()),
            ('i', format!("refused: {SHOWN}")),
        ] {
            let mut app = App::default();
            app.key(Key::Char(key), &[] as &[Row]);
            let t = screen(&app);
            assert_eq!(raw(&t), None, "{t:?}");
            assert!(t.contains(&want), "{key}: {want} in\n{t}");
        }
    }
}
