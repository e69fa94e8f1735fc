//! `numatrace top`: the live view. Takes a snapshot every `--delay`, shows the difference to
//! the previous one as rates, in a terminal UI or (`-b`) as plain frames. It reads the engine
//! and nothing else of it.

pub mod app;
pub mod batch;
pub mod graph;
pub mod history;
mod packed;
pub mod ui;
pub mod view;

use std::{io::Write as _, time::Instant};

use anyhow::{Context as _, Result, bail};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use tokio::sync::mpsc;

use crate::{
    bpf::loader::LoadOptions,
    cli::{SortColumn, TopArgs},
    engine::{Detail, Engine, Snapshot},
    kernel::facts::KernelFacts,
    kernel::facts::KernelSummary,
    model::{Filter, Scope, TaskRecord, Window},
    report::{
        measured::{Feed, Measured},
        stat::{StatJson, StatReport},
    },
    session::{Signals, cgroup_filter},
    sources::procfs::own_cpu_ns,
    sources::procfs::process_alive,
    text_escape::Escaped,
};
use app::{App, Key, View};
use history::{Recent, Sample};
use view::{FrameView, OwnCost, Tables};

/// Cost meters between two refreshes.
struct Meter {
    at: Instant,
    cpu_ns: Option<u64>,
    bpf: Option<(u64, u64)>,
}

impl Meter {
    fn now(engine: &Engine, stats: bool) -> Self {
        Self {
            at: Instant::now(),
            cpu_ns: own_cpu_ns(),
            bpf: stats.then(|| engine.bpf_run_time()),
        }
    }

    fn since(&self, earlier: &Meter) -> OwnCost {
        let wall = self.at.duration_since(earlier.at).as_nanos().max(1) as f64;
        OwnCost {
            cpu_pct: self
                .cpu_ns
                .zip(earlier.cpu_ns)
                .map(|(a, b)| 100.0 * a.saturating_sub(b) as f64 / wall),
            bpf_pct: self
                .bpf
                .zip(earlier.bpf)
                .map(|(a, b)| 100.0 * a.0.saturating_sub(b.0) as f64 / wall),
            bpf_runs: self
                .bpf
                .zip(earlier.bpf)
                .map(|(a, b)| a.1.saturating_sub(b.1)),
        }
    }
}

/// One refresh: the interval's view and the delta it was built from.
struct Refresh {
    view: FrameView,
    delta: Snapshot,
}

/// The refresh from `prev` to `cur` with `tables`, remembered in `recent` (the sparklines and
/// the activity window).
#[allow(clippy::too_many_arguments)]
fn refresh(
    engine: &Engine,
    prev: &Snapshot,
    cur: &Snapshot,
    filter: &Filter,
    own: OwnCost,
    recent: &mut Recent,
    spare: Vec<TaskRecord>,
    tables: Tables,
) -> Refresh {
    let delta = cur.delta_into(prev, spare);
    let view = FrameView::build_for(&delta, &engine.hooks, filter, own, tables);
    recent.push(&delta, filter, Sample::of(&delta, filter, &view.measured));
    Refresh { view, delta }
}

pub async fn run(args: TopArgs, no_fentry: bool) -> Result<i32> {
    let mut signals = Signals::new()?;
    if let Some(pid) = args.pid
        && !process_alive(pid)
    {
        bail!("no process with pid {pid}");
    }
    let facts = KernelFacts::gather().context("reading kernel facts")?;
    let load = LoadOptions {
        max_tasks: args.kernel.max_tasks,
        filter_tgids: args.pid.is_some(),
        sample_hz: args.kernel.sample_hz,
        no_fentry,
        // `--json` requires `-b`; `-b`'s text shows no VMA.
        ..LoadOptions::reading(if args.json {
            crate::bpf::needs::TOP_JSON
        } else if args.batch {
            crate::bpf::needs::TOP_BATCH
        } else {
            crate::bpf::needs::TOP
        })
    };
    let mut engine = Engine::start(facts, &load)?;
    if let Some(pid) = args.pid {
        engine.follow(pid).context("following --pid")?;
    }
    let filter = Filter {
        comm: args.view.comm.clone(),
        cgroup: cgroup_filter(&engine, args.view.cgroup.as_deref())?,
    };
    let stats = match engine.enable_bpf_stats() {
        Ok(()) => true,
        Err(e) => {
            tracing::info!("no BPF run-time statistics: {e:#}");
            false
        }
    };
    let result = if args.batch {
        run_batch(&mut engine, &args, &filter, stats, &mut signals).await
    } else {
        run_tui(&mut engine, &args, &filter, stats, &mut signals).await
    };
    engine.stop().await?;
    result.map(|()| 0)
}

fn window(args: &TopArgs, filter: &Filter, secs: f64, consistent: bool) -> Window {
    Window {
        duration_s: secs,
        scope: if args.pid.is_some() {
            Scope::Pid
        } else {
            Scope::System
        },
        pid: args.pid,
        command: None,
        exit_code: None,
        comm_filter: filter.comm.clone(),
        cgroup_filter: filter.cgroup.clone(),
        consistent,
    }
}

/// At most this long from attach to `top -b`'s first frame.
const FIRST_BATCH_FRAME: std::time::Duration = std::time::Duration::from_millis(500);

async fn run_batch(
    engine: &mut Engine,
    args: &TopArgs,
    filter: &Filter,
    stats: bool,
    signals: &mut Signals,
) -> Result<()> {
    // JSON frames carry the per-VMA detail of `stat --json`; text frames do not need it.
    let detail = if args.json {
        Detail::Full
    } else {
        Detail::Summary
    };
    let mut prev = engine.snapshot(detail)?;
    let mut meter = Meter::now(engine, stats);
    let nodes = engine.facts.numa_nodes as usize;
    let mut recent = Recent::batch(args.window);
    // The previous frame's delta list, reused for the next (see `Snapshot::delta_into`).
    let mut delta_list = Vec::new();
    let mut out = std::io::stdout().lock();
    // The first frame comes soon after attach (its rates over that shorter interval, which it
    // states), the rest every --delay from it, however long a frame took to make (a frame
    // late by more than that is followed by the next a --delay later); a single frame (-n 1)
    // covers a whole --delay.
    let first = if args.iterations == Some(1) {
        args.delay
    } else {
        args.delay.min(FIRST_BATCH_FRAME)
    };
    // The column the text sorts by. By a number (the default), a frame makes rows only for the
    // tasks it prints; by a text column, its whole table. The JSON's tables are the report's.
    let caps = view::Caps::from(&Measured::from_hooks(&engine.hooks));
    let col = args
        .sort
        .map(SortColumn::index)
        .unwrap_or_else(|| view::busiest_column(&caps));
    let first_only = !args.json && view::COLUMNS.get(col).is_some_and(|c| c.numeric());
    let tables = if args.json || first_only {
        Tables::None
    } else {
        Tables::Tasks
    };
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + first, args.delay);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for frame in 1..=args.iterations.unwrap_or(u64::MAX) {
        tokio::select! {
            _ = tick.tick() => {}
            _ = signals.any() => break,
        }
        let cur = engine.snapshot(detail)?;
        let m = Meter::now(engine, stats);
        let spare = std::mem::take(&mut delta_list);
        let r = refresh(
            engine,
            &prev,
            &cur,
            filter,
            m.since(&meter),
            &mut recent,
            spare,
            tables,
        );
        let v = if first_only {
            r.view
                .windowed_first(&r.delta, filter, &recent, args.window, args.rows, col)
        } else {
            r.view.windowed(&recent, args.window)
        };
        let written = if args.json {
            let mut report = StatReport::new(
                KernelSummary::from(&engine.facts),
                window(args, filter, v.interval_s, r.delta.consistent),
                engine.hooks.clone(),
                &r.delta,
                filter,
            );
            report.not_counted = crate::bpf::needs::TOP_JSON.not_counted();
            let f = batch::JsonFrame {
                frame,
                interval_s: v.interval_s,
                rates: &v.system,
                own: &v.own,
                caps: &v.caps,
                window_s: v.window_s,
                window_span_s: v.window_span_s,
                last_activity: batch::JsonLast::of(&v),
                report: StatJson(&report),
            };
            writeln!(out, "{}", serde_json::to_string(&f)?)
        } else {
            let header = v.header(&engine.facts.release, engine.facts.numa_balancing, nodes);
            write!(
                out,
                "{}",
                batch::text_frame(
                    &header,
                    &v,
                    args.rows,
                    Some(col),
                    engine.facts.numa_balancing
                )
            )
        };
        // A closed pipe (`top -b | head`) ends the run quietly.
        if written.and_then(|()| out.flush()).is_err() {
            break;
        }
        engine.recycle(std::mem::replace(&mut prev, cur));
        delta_list = r.delta.tasks;
        meter = m;
    }
    Ok(())
}

/// A terminal event as a key of `top` (`None`: not one).
fn key_of(ev: &Event) -> Option<Key> {
    let ev = match ev {
        Event::Key(k) => k,
        Event::Resize(..) => return Some(Key::Redraw),
        _ => return None,
    };
    if ev.kind == KeyEventKind::Release {
        return None;
    }
    let ctrl = ev.modifiers.contains(KeyModifiers::CONTROL);
    if ctrl && ev.code == KeyCode::Char('c') {
        return Some(Key::CtrlC);
    }
    // Ctrl-S is not `s`: other chords are not keys of top.
    if ctrl || ev.modifiers.contains(KeyModifiers::ALT) {
        return None;
    }
    Some(match ev.code {
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::Left => Key::Left,
        KeyCode::Right => Key::Right,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        _ => return None,
    })
}

/// The detail of task or process `key`: what the latest full snapshot knows of it.
fn detail_lines(
    app: &App,
    key: u64,
    delta: &Snapshot,
    full: &Snapshot,
    filter: &Filter,
    m: &Measured,
) -> Vec<String> {
    let mut out = Vec::new();
    let tgid = match app.view {
        View::Tasks => {
            let Some(t) = delta
                .tasks
                .iter()
                .find(|t| u64::from(t.pid) == key && !t.exited)
            else {
                return vec![format!("task {key} is gone")];
            };
            out.push(format!(
                "task {} ({}) of process {}, cgroup {}, preferred node {}, last ran on node {}",
                t.pid,
                Escaped(&t.comm),
                t.tgid,
                Escaped(t.cgroup.as_deref().unwrap_or("?")),
                t.preferred_node.map_or("-".into(), |n| n.to_string()),
                t.last_node.map_or("-".into(), |n| n.to_string()),
            ));
            counts_lines(&t.counts(), m, &mut out);
            t.tgid
        }
        _ => {
            // Its threads, active in this interval or not.
            let threads: Vec<_> = delta
                .traced(filter)
                .filter(|t| u64::from(t.tgid) == key && !t.exited)
                .collect();
            let Some(first) = threads.first() else {
                return vec![format!("process {key} is gone")];
            };
            let mut c = crate::model::Counts::default();
            for t in &threads {
                t.counts.add_to(&mut c);
            }
            let comm = threads
                .iter()
                .find(|t| t.pid == t.tgid)
                .map_or(first.comm.as_str(), |t| t.comm.as_str());
            out.push(format!(
                "process {key} ({}), {} threads seen",
                Escaped(comm),
                threads.len()
            ));
            counts_lines(&c.finished(), m, &mut out);
            first.tgid
        }
    };
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{tgid}/status"))
        && let Some(l) = status.lines().find(|l| l.starts_with("THP_enabled:"))
    {
        out.push(format!(
            "THP: {} (0: PR_SET_THP_DISABLE in force, seed 004)",
            Escaped(l.trim())
        ));
    }
    let mut vmas = full.vmas.get(&tgid).cloned().unwrap_or_default();
    // Seed 002's view first: the VMAs the scanner left alone longest (pid_inactive skips).
    let mut idle: Vec<_> = vmas
        .iter()
        .filter_map(|v| v.pid_inactive.map(|g| (v, g)))
        .collect();
    idle.sort_by_key(|(_, g)| std::cmp::Reverse(g.max_gap));
    if !idle.is_empty() {
        out.push("longest unscanned VMAs (scan sequences since last scan / threads):".into());
        for (v, g) in idle.iter().take(4) {
            out.push(format!(
                "  {} {}/{}{}",
                vma_label(v),
                g.max_gap,
                g.max_gap_threads,
                if g.over_threads > 0 {
                    format!(", {} skips beyond the thread count", g.over_threads)
                } else {
                    String::new()
                }
            ));
        }
    }
    vmas.sort_by_key(|v| std::cmp::Reverse(v.pte_updates));
    if !vmas.is_empty() {
        out.push(
            "VMAs since numatrace started (PTE updates, calls, skips, longest unscanned):".into(),
        );
        for v in vmas.iter().take(8) {
            let gap = v.pid_inactive.map_or(String::new(), |g| {
                format!(", gap {}/{} threads", g.max_gap, g.max_gap_threads)
            });
            let skips: Vec<String> = v.skips.iter().map(|(r, n)| format!("{r}={n}")).collect();
            out.push(format!(
                "  {} {} PTEs, {} calls{}{}",
                vma_label(v),
                m.cell(Feed::Pte, v.pte_updates),
                m.cell(Feed::Pte, v.calls),
                if skips.is_empty() {
                    String::new()
                } else {
                    format!(", {}", skips.join(" "))
                },
                gap
            ));
        }
    }
    let lat = crate::model::log2_buckets(&delta.migrate_latency);
    if !lat.is_empty() {
        out.push(format!(
            "migration latency, all traced tasks (< bound: count): {}",
            lat.iter()
                .map(|b| format!("<{}us: {}", b.lt / 1000, b.count))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let flows = delta.node_flows();
    // Pages counted by task_numa_fault.
    if m.is(Feed::HintFaults) && !flows.is_empty() {
        out.push(format!(
            "migrations by node (system-wide, all traced tasks): {}",
            view::flows_text(&flows)
        ));
    }
    out
}

/// A VMA as the detail view names it: its range and mapping, the mapping padded to a column.
fn vma_label(v: &crate::model::VmaRecord) -> String {
    format!(
        "{}-{} {:<24}",
        Escaped(&v.start),
        Escaped(&v.end),
        Escaped(v.mapping.as_deref().unwrap_or("?"))
    )
}

/// The counts of a task or process, a line per subject, in the words `stat` uses
/// ([`crate::report::words`]); what this kernel does not measure says so. Tiering counts only
/// where the row faulted on a slow tier (a line of zeros otherwise).
fn counts_lines(c: &crate::model::Counts, m: &Measured, out: &mut Vec<String>) {
    let tiering: Vec<&str> = numatrace_common::COUNTERS
        .iter()
        .filter(|d| d.group == "tiering" && c.tiering.slow_tier_faults == 0)
        .map(|d| d.path)
        .collect();
    out.extend(
        crate::report::words::lines(c, m, &tiering)
            .into_iter()
            // The row's own counts: "totals" is the stat report's word for the whole window.
            .map(|l| {
                if l.subject == "totals" {
                    l.text
                } else {
                    l.joined()
                }
            }),
    );
}

async fn run_tui(
    engine: &mut Engine,
    args: &TopArgs,
    filter: &Filter,
    stats: bool,
    signals: &mut Signals,
) -> Result<()> {
    let mut prev = engine.snapshot(Detail::Full)?;
    let mut meter = Meter::now(engine, stats);
    // The last minute (or --window), for the sparklines and the activity window.
    let mut recent = Recent::new(args.window);
    let first = FrameView::build(
        &prev.delta(&prev),
        &engine.hooks,
        filter,
        OwnCost::default(),
    );
    let mut app = App {
        window_s: args.window,
        ..App::default()
    };
    // The interval's view (`base`) and what is shown: it over the activity window.
    let mut shown = first.clone().windowed(&recent, app.window_s);
    let (mut base, mut delta, mut full) = (first, prev.delta(&prev), prev.clone());
    // The delta list of the frame before the one shown, reused (see `Snapshot::delta_into`).
    let mut delta_list = Vec::new();
    match args.sort {
        Some(col) => app.sort_busiest(col.index()),
        None => app.sort_busiest(view::busiest_column(&shown.caps)),
    }
    // Restores the terminal on panic too (ratatui installs the hook).
    let mut terminal = match ratatui::try_init() {
        Ok(t) => t,
        Err(e) => {
            // Whatever step failed, leave the terminal as it was.
            ratatui::restore();
            bail!("setting up the terminal: {e} (no terminal? `top -b` prints plain frames)");
        }
    };
    let (tx, mut keys) = mpsc::unbounded_channel();
    // crossterm's read blocks: a thread of its own; it ends with the process.
    std::thread::spawn(move || {
        while let Ok(ev) = event::read() {
            if let Some(k) = key_of(&ev)
                && tx.send(k).is_err()
            {
                break;
            }
        }
    });
    let nodes = engine.facts.numa_nodes as usize;
    let mut tick = tokio::time::interval(args.delay);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut hangup = false;
    let result: Result<()> = loop {
        let rows = app.rows(&shown);
        app.reselect(&rows);
        let (detail_lines, detail_series) = match app.detail {
            Some(k) => {
                let sampled = history::scan_sampled(&shown.measured);
                let series = match app.view {
                    View::Processes => recent.task_series(|_, tgid| u64::from(tgid) == k, sampled),
                    _ => recent.task_series(|pid, _| u64::from(pid) == k, sampled),
                };
                (
                    detail_lines(&app, k, &delta, &full, filter, &shown.measured),
                    series.series(&shown.measured),
                )
            }
            None => (Vec::new(), Vec::new()),
        };
        let ctx = ui::Context {
            kernel: &engine.facts.release,
            balancing: engine.facts.numa_balancing,
            nodes,
            hooks: &engine.hooks,
            detail_lines,
            detail_series,
        };
        if let Err(e) = terminal.draw(|f| ui::draw(f, &app, &shown, &rows, &ctx)) {
            break Err(e.into());
        }
        // The reliability suite's forced panic with the terminal in raw mode.
        crate::test_panic("frame");
        tokio::select! {
            _ = tick.tick() => {
                let detail = if app.detail.is_some() { Detail::Full } else { Detail::Summary };
                let cur = match engine.snapshot(detail) {
                    Ok(c) => c,
                    Err(e) => break Err(e),
                };
                let m = Meter::now(engine, stats);
                let spare = std::mem::take(&mut delta_list);
                let r = refresh(
                    engine,
                    &prev,
                    &cur,
                    filter,
                    m.since(&meter),
                    &mut recent,
                    spare,
                    Tables::All,
                );
                // Paused: counting and snapshots go on; the screen keeps the last frame.
                if app.paused {
                    delta_list = r.delta.tasks;
                } else {
                    base = r.view;
                    shown = base.clone().windowed(&recent, app.window_s);
                    delta_list = std::mem::replace(&mut delta, r.delta).tasks;
                    if cur.detail {
                        full = cur.clone();
                    }
                }
                engine.recycle(std::mem::replace(&mut prev, cur));
                meter = m;
            }
            k = keys.recv() => {
                match k {
                    Some(k) => {
                        let window = app.window_s;
                        app.key(k, &rows);
                        // `w`: the rows of the new window at once (paused: at resume).
                        if app.window_s != window {
                            recent.keep_window(app.window_s);
                            if !app.paused {
                                shown = base.clone().windowed(&recent, app.window_s);
                            }
                        }
                    }
                    None => app.quit = true,
                }
            }
            sig = signals.any() => {
                hangup = sig == libc::SIGHUP;
                app.quit = true;
            }
        }
        if app.quit {
            break Ok(());
        }
    };
    // After SIGHUP the terminal is gone: restoring it can only fail.
    if let Err(e) = ratatui::try_restore()
        && !hangup
    {
        return Err(e).context("restoring the terminal");
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::measured::tests::all_but;

    fn lines(m: &Measured) -> String {
        let mut c = crate::model::Counts::default();
        c.scan.pte_updates = 4096;
        c.skipped_vmas_total = 0;
        let mut out = Vec::new();
        counts_lines(&c.finished(), m, &mut out);
        out.join("\n")
    }

    #[test]
    fn the_detail_pane_says_what_is_not_measured() {
        let t = lines(&Measured::from_hooks(&all_but(&[
            "task_numa_work",
            "task_numa_fault",
        ])));
        // The same words as stat's lines: one module says them.
        assert!(
            t.contains(
                "scan: task_numa_work: not measured: task_numa_work not attached; share: -; \
                 change_prot_numa: 4096 PTEs updated in 0 calls"
            ),
            "{t}"
        );
        assert!(
            t.contains("hint faults: not measured: task_numa_fault not attached; COW-shared: 0"),
            "{t}"
        );
        assert!(
            t.contains("NUMA migrations: 0 pages ok, 0 failed"),
            "mm_migrate_pages: {t}"
        );
        // Every counter reaches the pane: those without a sentence in the table's words.
        assert!(t.contains("refused before starting 0"), "{t}");
        for zero in ["task_numa_work: 0", "hint faults: 0", "scan: 0 calls"] {
            assert!(!t.contains(zero), "{zero} in {t}");
        }
        let t = lines(&Measured::default());
        assert!(t.contains("task_numa_work: 0 calls"), "{t}");
    }
}
