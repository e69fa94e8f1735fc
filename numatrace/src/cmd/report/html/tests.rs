//! The pages read as a person checks a chart: every curve has a point per interval of the
//! capture, the numbers under it are the capture's own, axes name their units, what was not
//! measured says why instead of drawing zeros, nothing can load from the network, and no
//! string from the capture reaches the page unescaped.

use std::path::Path;

use numatrace_common::TaskStats;

use super::{Input, ab_page, capture_page};
use crate::{
    bpf::loader::HookReport,
    capture::{
        Capture, CaptureWriter, End, Machine, SECTION_END, SECTION_FIRST, SECTION_LAST,
        SECTION_MACHINE, SECTION_PROBES, SECTION_SAMPLE,
    },
    cmd::report::{report_of, side},
    engine::Snapshot,
    model::{Counts, Scope, TaskRecord, Window},
    plan::Mechanism,
    report::diff,
};

const REAL: &[u8] = include_bytes!("../../../../tests/fixtures/capture-6.12-migrate.ntrace");

/// The block of the page between `<figure id="ID"` and its `</figure>`.
fn figure<'a>(page: &'a str, id: &str) -> &'a str {
    let start = page
        .find(&format!("<figure id=\"{id}\""))
        .unwrap_or_else(|| panic!("no figure {id}"));
    let end = page[start..].find("</figure>").unwrap() + start;
    &page[start..end]
}

/// Point counts of every polyline in `svg` (plotters draws a line series as one polyline,
/// a legend entry as a two-point one).
fn polylines(svg: &str) -> Vec<usize> {
    svg.match_indices("<polyline")
        .map(|(i, _)| {
            let rest = &svg[i..];
            let p = rest.find("points=\"").unwrap() + 8;
            let end = rest[p..].find('"').unwrap();
            rest[p..p + end].split_whitespace().count()
        })
        .collect()
}

/// The text of every `<text>` element (plotters writes it on a line of its own).
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .map(|t| {
            let body = &t[t.find('>').unwrap() + 1..];
            body[..body.find("</text>").unwrap()].trim().to_owned()
        })
        .collect()
}

fn has_text(svg: &str, want: &str) -> bool {
    texts(svg).iter().any(|t| t == want)
}

/// The numbers table of a figure: one row per interval, cells by column.
fn numbers(fig: &str) -> Vec<Vec<String>> {
    let t = &fig[fig.find("<table class=\"num\">").unwrap()..];
    let t = &t[..t.find("</table>").unwrap()];
    let body = &t[t.find("<tbody>").unwrap()..];
    body.split("<tr>")
        .skip(1)
        .map(|r| {
            r.split("<td>")
                .skip(1)
                .map(|c| c[..c.find("</td>").unwrap()].to_owned())
                .collect()
        })
        .collect()
}

fn page_of(path: &Path) -> (Capture, String) {
    let cap = Capture::open(path).unwrap();
    let r = report_of(&cap);
    let page = capture_page(&Input {
        name: "t".into(),
        cap: &cap,
        report: &r,
    })
    .unwrap();
    (cap, page)
}

fn real_file(tag: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!(
        "numatrace-html-real-{tag}-{}.ntrace",
        std::process::id()
    ));
    std::fs::write(&p, REAL).unwrap();
    p
}

#[test]
fn a_real_capture_draws_a_point_per_interval_with_the_captures_numbers() {
    let path = real_file("r1");
    let (cap, page) = page_of(&path);
    let _ = std::fs::remove_file(&path);
    let intervals = cap.points().count() - 1;
    assert_eq!(
        intervals, 17,
        "16 samples between the first and the last snapshot"
    );
    // The capture's own per-interval totals, computed here apart from the page's code.
    let pts: Vec<(u64, Counts)> = cap.points().collect();
    let want: Vec<(f64, f64)> = pts
        .windows(2)
        .map(|w| {
            let s = (w[1].0 - w[0].0) as f64 / 1e9;
            let d = w[1].1.delta(&w[0].1).finished();
            (
                d.hint_faults.local as f64 / s,
                d.hint_faults.remote as f64 / s,
            )
        })
        .collect();
    let fig = figure(&page, "hint_faults");
    assert!(fig.contains("data-intervals=\"17\""), "{fig}");
    let lines = polylines(fig);
    assert_eq!(
        lines.iter().filter(|n| **n == intervals).count(),
        2,
        "local and remote, a point per interval: {lines:?}"
    );
    assert!(
        has_text(fig, "hint faults/s"),
        "y axis unit: {:?}",
        texts(fig)
    );
    assert!(has_text(fig, "time since the recording started (s)"));
    let rows = numbers(fig);
    assert_eq!(rows.len(), intervals);
    for (row, (local, remote)) in rows.iter().zip(&want) {
        assert_eq!(row[1], format!("{local:.3}"));
        assert_eq!(row[2], format!("{remote:.3}"));
    }
    let remote_total: f64 = want
        .iter()
        .zip(pts.windows(2))
        .map(|((_, r), w)| r * (w[1].0 - w[0].0) as f64 / 1e9)
        .sum();
    assert!((remote_total - 8192.0).abs() < 1e-6, "{remote_total}");
    // Every time chart of the issue, drawn or saying why not.
    for id in ["scan_share", "pte_updates", "pages_migrated", "tiering"] {
        let f = figure(&page, id);
        assert!(
            f.contains("<svg") || f.contains("not measured: "),
            "{id}: {f}"
        );
    }
    // Every drawn series of every time chart: a point per interval.
    for (id, series) in [("pte_updates", 1), ("pages_migrated", 2)] {
        let lines = polylines(figure(&page, id));
        assert_eq!(
            lines.iter().filter(|n| **n == intervals).count(),
            series,
            "{id}: {lines:?}"
        );
        assert_eq!(numbers(figure(&page, id)).len(), intervals, "{id}");
    }
    assert!(has_text(figure(&page, "pte_updates"), "PTEs updated/s"));
    assert!(has_text(figure(&page, "pages_migrated"), "pages/s"));
    // Recorded before numatrace read the tiering mode: said so, not drawn as zeros.
    assert!(
        figure(&page, "tiering")
            .contains("not measured: the capture does not say whether memory tiering was on")
    );
    assert!(!figure(&page, "tiering").contains("<svg"), "no zero line");
    // The node matrix: 8192 pages from node 1 to node 0, as `stat` has it.
    let m = figure(&page, "node_matrix");
    assert!(has_text(m, "8192"), "{m}");
    assert!(has_text(m, "to node") && has_text(m, "from node"));
    assert!(
        m.contains("<tr><th>1</th><td>8192</td><td>0</td></tr>"),
        "{m}"
    );
    assert_eq!(m.matches("<td>8192</td>").count(), 1, "one cell: {m}");
    // The migration latency histogram holds every migrate_misplaced call.
    let h = figure(&page, "migration_latency");
    let calls: u64 = h
        .split("<tr><td>")
        .skip(1)
        .map(|r| {
            let c = r.split("<td>").nth(1).unwrap();
            c[..c.find("</td>").unwrap()].parse::<u64>().unwrap()
        })
        .sum();
    assert_eq!(calls, 8192);
    assert!(page.contains("<table class=\"sortable\" id=\"tasks\">"));
    assert!(page.contains("<details><summary>Context"));
}

#[test]
fn the_page_loads_nothing_and_allows_only_its_own_script() {
    let path = real_file("r2");
    let (_, page) = page_of(&path);
    let _ = std::fs::remove_file(&path);
    assert!(
        page.contains(
            "content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-"
        )
    );
    for bad in [
        " src=", "href=", "@import", "url(", "<link", "<iframe", "<img",
    ] {
        assert!(!page.contains(bad), "{bad}");
    }
    // The only address is SVG's namespace name, which nothing fetches.
    let addresses: Vec<&str> = page
        .match_indices("http")
        .map(|(i, _)| &page[i..(i + 26).min(page.len())])
        .collect();
    assert!(
        addresses
            .iter()
            .all(|a| a.starts_with("http://www.w3.org/2000/svg") || a.starts_with("http-equiv")),
        "{addresses:?}"
    );
    assert_eq!(page.matches("<script>").count(), 1);
}

fn hook(name: &str, attached: bool) -> HookReport {
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
        reasons: if attached {
            vec![]
        } else {
            vec!["fentry refused".into()]
        },
        what: String::new(),
    }
}

const EVIL: &str = "<script>alert(1)</script>\x1b[2J&\"'";

/// A recording of `samples` one-second intervals: one task that takes `i` local and 2`i`
/// remote hint faults in interval `i`.
fn synthetic(path: &Path, samples: u64, hint_hook: bool) {
    let window = Window {
        duration_s: samples as f64 + 1.0,
        scope: Scope::Command,
        pid: None,
        command: Some(vec![EVIL.into()]),
        exit_code: Some(0),
        comm_filter: None,
        cgroup_filter: None,
        consistent: true,
    };
    let machine = Machine {
        hostname: format!("host{EVIL}"),
        window: Some(window.clone()),
        ..Machine::default()
    };
    let mut faults = (0u64, 0u64);
    // It also scans: 1 ms of every second of run time, tick for tick.
    let task = |local: u64, remote: u64| {
        let mut s = TaskStats::new(7, 7);
        s.first_ns = 1;
        s.hint_faults.faults = local + remote;
        s.hint_faults.local = local;
        let secs = local.isqrt().max(1);
        s.runtime_first_ns = 1;
        s.runtime_last_ns = 1 + secs * 1_000_000_000;
        s.scan.calls = secs;
        s.scan.time_ns = secs * 1_000_000;
        s.scan.runtime_in_scan_ns = secs * 1_000_000;
        let mut t = TaskRecord::from_stats(&s, false);
        t.comm = EVIL.into();
        t
    };
    let snap = |i: u64, t: TaskRecord| Snapshot {
        mono_ns: 1_000 + i * 1_000_000_000,
        consistent: true,
        self_tgid: 1,
        tasks: vec![t],
        ..Snapshot::default()
    };
    let mut w = CaptureWriter::create(path, 1 << 30).unwrap();
    w.section(SECTION_MACHINE, &machine).unwrap();
    let hooks = vec![
        hook("task_numa_fault", hint_hook),
        hook("task_numa_work", true),
        hook("sched:sched_skip_vma_numa", true),
    ];
    w.section(SECTION_PROBES, &hooks).unwrap();
    w.section(SECTION_FIRST, &snap(0, task(0, 0))).unwrap();
    for i in 1..=samples {
        faults = (faults.0 + i, faults.1 + 2 * i);
        w.section(SECTION_SAMPLE, &snap(i, task(faults.0, faults.1)))
            .unwrap();
    }
    let i = samples + 1;
    faults = (faults.0 + i, faults.1 + 2 * i);
    w.section(SECTION_LAST, &snap(i, task(faults.0, faults.1)))
        .unwrap();
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

fn temp(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "numatrace-html-{tag}-{}.ntrace",
        std::process::id()
    ))
}

#[test]
fn ten_minutes_fit_in_two_megabytes_with_every_interval_drawn() {
    let path = temp("long");
    synthetic(&path, 599, true);
    let (cap, page) = page_of(&path);
    let _ = std::fs::remove_file(&path);
    assert_eq!(cap.points().count() - 1, 600);
    assert!(page.len() <= 2 << 20, "{} bytes", page.len());
    let fig = figure(&page, "hint_faults");
    let lines = polylines(fig);
    assert_eq!(lines.iter().filter(|n| **n == 600).count(), 2, "{lines:?}");
    let rows = numbers(fig);
    assert_eq!(rows.len(), 600);
    // Interval i took i local and 2i remote faults, in one second.
    for (i, row) in rows.iter().enumerate() {
        let i = i as f64 + 1.0;
        assert_eq!(row[1], format!("{i:.3}"));
        assert_eq!(row[2], format!("{:.3}", 2.0 * i));
    }
}

#[test]
fn what_was_not_measured_says_why_and_draws_no_line() {
    let path = temp("unmeasured");
    synthetic(&path, 5, false);
    let (_, page) = page_of(&path);
    let _ = std::fs::remove_file(&path);
    let fig = figure(&page, "hint_faults");
    assert!(
        fig.contains("not measured: task_numa_fault not attached"),
        "{fig}"
    );
    assert!(!fig.contains("<svg"), "{fig}");
    assert!(figure(&page, "node_matrix").contains("not measured"));
    assert!(figure(&page, "pages_per_fault").contains("not measured"));
}

#[test]
fn no_string_from_a_capture_reaches_the_page_unescaped() {
    let path = temp("evil");
    synthetic(&path, 3, true);
    let (cap, page) = page_of(&path);
    let r = report_of(&cap);
    let d = diff::diff(&side(&r, &path), &side(&r, &path));
    let ab = ab_page(
        &Input {
            name: EVIL.into(),
            cap: &cap,
            report: &r,
        },
        &Input {
            name: "b".into(),
            cap: &cap,
            report: &r,
        },
        &d,
    )
    .unwrap();
    let _ = std::fs::remove_file(&path);
    for p in [&page, &ab] {
        assert!(!p.contains("<script>alert"), "markup from the capture");
        assert!(!p.contains('\x1b'), "a raw control character");
        assert_eq!(p.matches("<script>").count(), 1);
        assert!(p.contains("&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[2J&amp;&quot;&#39;"));
    }
    // The legend (plotters' own XML escaping of the terminal-escaped label).
    let legend = texts(figure(&page, "scan_share"));
    assert!(
        legend
            .iter()
            .any(|t| t == "7 &lt;script&gt;alert(1)&lt;/script&gt;\\x1b[2J&amp;&quot;&apos;"),
        "{legend:?}"
    );
}

#[test]
fn the_ab_page_overlays_both_and_marks_changed_verdicts() {
    let a = real_file("r3");
    let b = temp("ab-b");
    synthetic(&b, 5, true);
    let (ca, cb) = (Capture::open(&a).unwrap(), Capture::open(&b).unwrap());
    let (ra, rb) = (report_of(&ca), report_of(&cb));
    let d = diff::diff(&side(&ra, &a), &side(&rb, &b));
    let page = ab_page(
        &Input {
            name: "base".into(),
            cap: &ca,
            report: &ra,
        },
        &Input {
            name: "patched".into(),
            cap: &cb,
            report: &rb,
        },
        &d,
    )
    .unwrap();
    let _ = std::fs::remove_file(&a);
    let _ = std::fs::remove_file(&b);
    let fig = figure(&page, "hint_faults");
    assert!(fig.contains("data-intervals=\"17 6\""), "{fig}");
    let lines = polylines(fig);
    assert_eq!(lines.iter().filter(|n| **n == 17).count(), 2, "{lines:?}");
    assert_eq!(lines.iter().filter(|n| **n == 6).count(), 2, "{lines:?}");
    assert!(
        has_text(fig, "A: local") && has_text(fig, "B: remote"),
        "{:?}",
        texts(fig)
    );
    let changed = d.verdicts.iter().filter(|v| v.before != v.after).count();
    assert_eq!(page.matches("<tr class=\"changed\">").count(), changed);
    assert!(page.contains("<table id=\"metrics-diff\""));
}

#[test]
fn promotions_and_demotions_are_drawn_per_node_where_tiering_is_on() {
    let path = temp("tiering");
    let machine = Machine::default();
    let snap = |i: u64| {
        let mut s = Snapshot {
            mono_ns: i * 2_000_000_000,
            consistent: true,
            ..Snapshot::default()
        };
        s.tiering.mode = Some(3);
        // Node 0 receives 100 pages per interval, node 2 gives up 40 to kswapd.
        s.tiering.node_counters = [
            (0, [("pgpromote_success".to_owned(), 100 * i)].into()),
            (2, [("pgdemote_kswapd".to_owned(), 40 * i)].into()),
        ]
        .into();
        s
    };
    let mut w = CaptureWriter::create(&path, 1 << 30).unwrap();
    w.section(SECTION_MACHINE, &machine).unwrap();
    w.section(SECTION_PROBES, &vec![hook("task_numa_fault", true)])
        .unwrap();
    w.section(SECTION_FIRST, &snap(0)).unwrap();
    for i in 1..=3 {
        w.section(SECTION_SAMPLE, &snap(i)).unwrap();
    }
    w.section(SECTION_LAST, &snap(4)).unwrap();
    w.finish().unwrap();
    let (_, page) = page_of(&path);
    let _ = std::fs::remove_file(&path);
    let fig = figure(&page, "tiering");
    assert!(fig.contains("<svg"), "{fig}");
    assert!(has_text(fig, "node 0 promoted") && has_text(fig, "node 2 demoted"));
    // Nothing moved the other way: no line for it.
    assert!(!has_text(fig, "node 0 demoted") && !has_text(fig, "node 2 promoted"));
    let rows = numbers(fig);
    assert_eq!(rows.len(), 4);
    for r in &rows {
        // Per second over intervals of 2 s.
        assert_eq!(r[1..], ["50.000".to_owned(), "20.000".to_owned()]);
    }
    assert_eq!(polylines(fig).iter().filter(|n| **n == 4).count(), 2);
}
