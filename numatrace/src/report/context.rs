//! The regression context of a capture as text: the machine's settings at the start of the
//! window (and what had changed by its end), then the recorded command's and the busiest tasks'
//! procfs NUMA state, each with when it was read — what a maintainer asks a reporter for before
//! reading any number. 80 columns; every string from the capture escaped.

use std::{collections::BTreeMap, fmt::Write as _};

use crate::{
    capture::state::{BusyProcess, BusyTask, State, SystemState},
    model::Item,
    text_escape::escape,
};

pub const WIDTH: usize = 80;

/// `text` (already escaped) broken at spaces into lines of at most [`WIDTH`] columns, the first
/// after `first`, the others after `rest` (a word longer than a line stays whole).
pub fn wrap_words(first: &str, rest: &str, text: &str) -> String {
    let mut out = String::new();
    let mut line = first.to_owned();
    let mut fresh = true;
    for word in text.split(' ') {
        let len = line.chars().count();
        if !fresh && len + 1 + word.chars().count() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = format!("{rest}{word}");
        } else {
            if !fresh {
                line.push(' ');
            }
            line.push_str(word);
        }
        fresh = false;
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// `head` then `items` joined by ", ", wrapped at 80 columns under a 4-space indent (a long
/// head too).
fn wrapped(out: &mut String, head: &str, items: &[String]) {
    let head = wrap_words("  ", "    ", &format!("{head}:"));
    let mut lines: Vec<&str> = head.lines().collect();
    let mut line = lines.pop().unwrap_or_default().to_owned();
    for l in lines {
        let _ = writeln!(out, "{l}");
    }
    if items.is_empty() {
        line.push_str(" none");
    }
    for (i, it) in items.iter().enumerate() {
        let sep = if i + 1 < items.len() { "," } else { "" };
        let piece = format!("{it}{sep}");
        if line.chars().count() + 1 + piece.chars().count() > WIDTH {
            let _ = writeln!(out, "{line}");
            line = format!("    {piece}");
        } else {
            line.push(' ');
            line.push_str(&piece);
        }
    }
    let _ = writeln!(out, "{line}");
}

/// `name=value` of a present item, `name: absent (why)` otherwise; with the end's value after
/// an arrow when it differs.
fn setting(name: &str, start: &Item<String>, end: Option<&Item<String>>) -> String {
    let show = |i: &Item<String>| match i {
        Item::Present(v) => escape(v).into_owned(),
        Item::Absent { absent } => format!("absent ({})", escape(absent)),
    };
    let mut s = match start {
        Item::Present(_) => format!("{}={}", escape(name), show(start)),
        Item::Absent { .. } => format!("{}: {}", escape(name), show(start)),
    };
    if let Some(e) = end
        && e != start
    {
        let _ = write!(s, " → {}", show(e));
    }
    s
}

fn map_settings(
    start: &BTreeMap<String, String>,
    end: Option<&BTreeMap<String, String>>,
) -> Vec<String> {
    start
        .iter()
        .map(|(k, v)| {
            setting(
                k,
                &Item::Present(v.clone()),
                end.map(|e| {
                    e.get(k).map_or_else(
                        || Item::absent("gone by the end"),
                        |v| Item::Present(v.clone()),
                    )
                })
                .as_ref(),
            )
        })
        .collect()
}

fn absent_line(out: &mut String, head: &str, why: &str) {
    out.push_str(&wrap_words(
        "  ",
        "    ",
        &format!("{head}: absent ({})", escape(why)),
    ));
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "?".to_owned(), |b| format!("{} MiB", b >> 20))
}

/// The machine's state: `start`, and where the end's differs, `start → end`; the tunables
/// with where they were read (`tunables_source`, empty for older captures).
pub fn system_text(
    start: &SystemState,
    end: Option<&SystemState>,
    tunables_source: &str,
) -> String {
    let mut s = String::new();
    match &start.cmdline {
        Item::Present(c) => s.push_str(&wrap_words("  kernel command line: ", "    ", &escape(c))),
        Item::Absent { absent } => absent_line(&mut s, "kernel command line", absent),
    }
    let sysctls: Vec<String> = start
        .sysctls
        .iter()
        .map(|(k, v)| setting(k, v, end.and_then(|e| e.sysctls.get(k))))
        .collect();
    wrapped(&mut s, "sysctls", &sysctls);
    let from = if tunables_source.is_empty() {
        "debugfs".to_owned()
    } else {
        escape(tunables_source).into_owned()
    };
    match &start.tunables {
        Item::Present(t) => wrapped(
            &mut s,
            &format!("tunables sched/numa_balancing (from {from})"),
            &map_settings(t, end.and_then(|e| e.tunables.value())),
        ),
        Item::Absent { absent } => absent_line(&mut s, &format!("tunables ({from})"), absent),
    }
    let tiering: Vec<String> = start
        .tiering
        .iter()
        .map(|(k, v)| setting(k, v, end.and_then(|e| e.tiering.get(k))))
        .collect();
    wrapped(&mut s, "tiering", &tiering);
    match &start.nodes {
        Item::Present(nodes) => {
            let end_nodes = end.and_then(|e| e.nodes.value());
            let items: Vec<String> = nodes
                .iter()
                .map(|n| {
                    let free_end = end_nodes
                        .and_then(|e| e.iter().find(|m| m.node == n.node))
                        .and_then(|m| m.mem_free_bytes);
                    format!(
                        "node{} cpus {} {} ({} free{}) distances {}",
                        n.node,
                        escape(if n.cpus.is_empty() { "none" } else { &n.cpus }),
                        mib(n.mem_total_bytes),
                        mib(n.mem_free_bytes),
                        free_end.map_or_else(String::new, |f| format!(" → {}", mib(Some(f)))),
                        n.distances
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(" ")
                    )
                })
                .collect();
            wrapped(&mut s, "nodes", &items);
        }
        Item::Absent { absent } => absent_line(&mut s, "nodes", absent),
    }
    match &start.numastat {
        Item::Present(per_node) => {
            for (node, counters) in per_node {
                let items: Vec<String> = counters
                    .iter()
                    .map(|(k, v)| {
                        let e = end
                            .and_then(|e| e.numastat.value())
                            .and_then(|m| m.get(node))
                            .and_then(|m| m.get(k));
                        match e {
                            Some(e) if e > v => format!("{}={v} (+{})", escape(k), e - v),
                            Some(e) if e < v => format!("{}={v} → {e}", escape(k)),
                            _ => format!("{}={v}", escape(k)),
                        }
                    })
                    .collect();
                wrapped(&mut s, &format!("numastat {}", escape(node)), &items);
            }
        }
        Item::Absent { absent } => absent_line(&mut s, "numastat", absent),
    }
    match &start.thp {
        Item::Present(t) => wrapped(
            &mut s,
            "THP (/sys/kernel/mm/transparent_hugepage)",
            &map_settings(t, end.and_then(|e| e.thp.value())),
        ),
        Item::Absent { absent } => absent_line(&mut s, "THP", absent),
    }
    match &start.config {
        Item::Present(c) => {
            let items: Vec<String> = c
                .options
                .iter()
                .map(|(k, v)| format!("{}={}", escape(k), escape(v)))
                .collect();
            wrapped(
                &mut s,
                &format!("kernel config ({})", escape(&c.source)),
                &items,
            );
        }
        Item::Absent { absent } => absent_line(&mut s, "kernel config", absent),
    }
    if let Some(why) = start.vmstat.why_absent() {
        absent_line(&mut s, "/proc/vmstat", why);
    }
    s
}

/// Seconds since the start of the window (`t0`), as ` at 12.0 s` (a no-break space before
/// the unit, so that wrapping keeps them together); nothing without a start.
fn at(t0: Option<f64>, t: f64) -> String {
    match t0 {
        Some(t0) if t > 0.0 && t0 > 0.0 => format!(" at {:.1}\u{a0}s", t - t0),
        _ => String::new(),
    }
}

/// Why it was read (`chosen`), when, and whether it had exited, for a head line.
fn why_and_when(
    chosen: &str,
    read: f64,
    exited: bool,
    exited_at: Option<f64>,
    t0: Option<f64>,
) -> String {
    let mut s = String::new();
    if !chosen.is_empty() {
        let _ = write!(s, " — {}", escape(chosen));
    }
    let when = at(t0, read);
    match (exited, exited_at) {
        (true, Some(x)) => {
            let _ = write!(s, ", read{when} (it exited{}: its last read)", by(t0, x));
        }
        (true, None) if !chosen.is_empty() && !when.is_empty() => {
            let _ = write!(s, ", read{when} (it exited since: its last read)");
        }
        (true, None) => s.push_str(", exited: its last read"),
        (false, _) if !chosen.is_empty() && !when.is_empty() => {
            let _ = write!(s, ", read{when}");
        }
        _ => {}
    }
    s
}

/// ` by 12.4 s` (or nothing without a start).
fn by(t0: Option<f64>, t: f64) -> String {
    at(t0, t).replacen(" at ", " by ", 1)
}

fn task_text(out: &mut String, t: &BusyTask, t0: Option<f64>) {
    let head = format!(
        "task {} {} (process {}){}",
        t.task.pid,
        escape(&t.comm),
        t.task.tgid,
        why_and_when(&t.chosen, t.read_unix_s, t.exited, None, t0)
    );
    match &t.task.sched {
        Item::Present(m) => {
            let items: Vec<String> = m
                .iter()
                .map(|(k, v)| {
                    if k.starts_with("numa_faults ") {
                        format!("{} {}", escape(k), escape(v))
                    } else {
                        format!("{}={}", escape(k), escape(v))
                    }
                })
                .collect();
            wrapped(out, &head, &items);
        }
        Item::Absent { absent } => absent_line(out, &head, absent),
    }
}

fn process_text(out: &mut String, p: &BusyProcess, t0: Option<f64>) {
    let head = format!(
        "process {} {}{}",
        p.process.tgid,
        escape(&p.comm),
        why_and_when(&p.chosen, p.read_unix_s, p.exited, p.exited_unix_s, t0)
    );
    let mut items = Vec::new();
    match &p.process.numa_maps {
        Item::Present(m) => {
            items.push(format!(
                "{} VMAs{}",
                m.vmas,
                if m.truncated {
                    " (the first 16 MiB of numa_maps only)"
                } else {
                    ""
                }
            ));
            for (node, kib) in &m.kib_by_node {
                items.push(format!(
                    "{} {} KiB (anon {} KiB)",
                    escape(node),
                    kib,
                    m.anon_kib_by_node.get(node).copied().unwrap_or(0)
                ));
            }
            let pol: Vec<String> = m
                .policies
                .iter()
                .map(|(k, n)| format!("{}×{n}", escape(k)))
                .collect();
            items.push(format!("policies {}", pol.join(" ")));
        }
        Item::Absent { absent } => items.push(format!("numa_maps absent ({})", escape(absent))),
    }
    for (name, i) in [
        ("Mems_allowed", &p.process.mems_allowed),
        ("Cpus_allowed", &p.process.cpus_allowed),
        ("cpuset", &p.process.cpuset),
    ] {
        items.push(match i {
            Item::Present(v) => format!("{name} {}", escape(v)),
            Item::Absent { absent } => format!("{name} absent ({})", escape(absent)),
        });
    }
    wrapped(out, &head, &items);
}

/// The whole context: machine (start → end), then each end's busiest tasks.
pub fn context_text(start: Option<&State>, end: Option<&State>) -> String {
    let mut s = String::new();
    let Some(first) = start.or(end) else {
        let _ = writeln!(
            s,
            "  not in this capture (written by an older numatrace, or cut short at once)"
        );
        return s;
    };
    let _ = writeln!(
        s,
        "Machine at the {} of the window{}:",
        if start.is_some() { "start" } else { "end" },
        if start.is_some() && end.is_some() {
            " (start → end where it changed)"
        } else {
            ""
        }
    );
    s.push_str(&system_text(
        &first.system,
        end.filter(|_| start.is_some()).map(|e| &e.system),
        &first.tunables_source,
    ));
    // Times are counted from the start state's read (right after the first snapshot).
    let t0 = start.map(|s| s.unix_s);
    for st in [start, end].into_iter().flatten() {
        s.push_str(&wrap_words(
            "",
            "  ",
            &format!(
                "Tasks at the {} ({}):",
                escape(&st.phase),
                escape(&st.busiest_note)
            ),
        ));
        if st.busiest.is_empty() {
            let _ = writeln!(s, "  none");
        }
        for t in &st.busiest {
            task_text(&mut s, t, t0);
        }
        for p in &st.processes {
            process_text(&mut s, p, t0);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::state::{NumaMaps, ProcessNuma, TaskNuma};

    #[test]
    fn words_wrap_at_80_columns() {
        let t = wrap_words("  - ", "    ", &"word ".repeat(40));
        assert!(t.lines().all(|l| l.chars().count() <= WIDTH), "{t}");
        assert!(t.starts_with("  - word"));
        assert!(t.lines().nth(1).unwrap().starts_with("    word"));
        assert_eq!(wrap_words("a: ", "   ", "b"), "a: b\n");
    }

    /// The recorded command at both ends, each read with when it was read; the tunables with
    /// where they were read.
    #[test]
    fn shows_the_command_with_when_it_was_read() {
        use crate::capture::state::{CHOSEN_COMMAND, SubjectRead};
        let maps = |kib: u64| NumaMaps {
            vmas: 40,
            kib_by_node: [("node0".to_owned(), kib)].into(),
            anon_kib_by_node: [("node0".to_owned(), kib / 2)].into(),
            policies: [("default".to_owned(), 40)].into(),
            truncated: false,
        };
        let read = |t: f64, kib: u64| {
            let mut r = SubjectRead::missing(4242, CHOSEN_COMMAND, "x", t);
            r.process.comm = "workload".into();
            r.task.comm = "workload".into();
            r.process.process.numa_maps = Item::Present(maps(kib));
            r
        };
        let mut a = State {
            phase: "start".into(),
            unix_s: 1000.0,
            busiest_note: "the recorded command".into(),
            tunables_source: crate::kernel::tunables::FROM_PRIVATE_DEBUGFS.into(),
            ..State::default()
        };
        a.system.tunables = Item::Present([("scan_delay_ms".to_owned(), "1000".to_owned())].into());
        a.put_subject(read(1000.01, 2760), None);
        let mut b = State {
            phase: "end".into(),
            unix_s: 1012.5,
            ..a.clone()
        };
        b.busiest.clear();
        b.processes.clear();
        b.put_subject(read(1012.0, 35_888), Some(1012.4));
        let text = context_text(Some(&a), Some(&b));
        assert!(text.lines().all(|l| l.chars().count() <= WIDTH), "{text}");
        // Wrapped lines joined again.
        let t = text.lines().map(str::trim).collect::<Vec<_>>().join(" ");
        assert!(
            t.contains("tunables sched/numa_balancing (from debugfs, mounted privately"),
            "{t}"
        );
        assert!(t.contains("scan_delay_ms=1000"), "{t}");
        assert!(
            t.contains("process 4242 workload — the recorded command, read at 0.0\u{a0}s:"),
            "{t}"
        );
        assert!(t.contains("node0 2760 KiB (anon 1380 KiB)"), "{t}");
        assert!(
            t.contains("read at 12.0\u{a0}s (it exited by 12.4\u{a0}s: its last read)"),
            "{t}"
        );
        assert!(t.contains("node0 35888 KiB"), "{t}");
        // Without a start state there is no time to count from: no times.
        let t = context_text(None, Some(&b));
        assert!(!t.contains(" s:"), "{t}");
    }

    #[test]
    fn shows_changes_absences_and_escapes_within_80_columns() {
        let mut a = State {
            phase: "start".into(),
            busiest_note: "the followed tasks".into(),
            ..State::default()
        };
        a.system
            .sysctls
            .insert("kernel.numa_balancing".into(), Item::Present("1".into()));
        a.system.sysctls.insert(
            "vm.numa_zonelist_order".into(),
            Item::absent("no /proc/sys/vm/x on this kernel"),
        );
        a.system.tunables = Item::absent("debugfs is not mounted at /sys/kernel/debug");
        a.system.cmdline = Item::Present("numa_balancing=enable \x1b[2J".into());
        let mut b = a.clone();
        b.phase = "end".into();
        b.system
            .sysctls
            .insert("kernel.numa_balancing".into(), Item::Present("2".into()));
        b.busiest = vec![BusyTask {
            comm: "evil\x1b]0;x\x07".into(),
            exited: true,
            task: TaskNuma {
                pid: 7,
                tgid: 7,
                sched: Item::Present([("numa_preferred_nid".to_owned(), "1".to_owned())].into()),
            },
            ..BusyTask::default()
        }];
        b.processes = vec![BusyProcess {
            comm: "evil".into(),
            process: ProcessNuma {
                tgid: 7,
                numa_maps: Item::Present(NumaMaps {
                    vmas: 2,
                    kib_by_node: [("node1".to_owned(), 2048)].into(),
                    anon_kib_by_node: [("node1".to_owned(), 2048)].into(),
                    policies: [("bind:1".to_owned(), 2)].into(),
                    truncated: false,
                }),
                ..ProcessNuma::default()
            },
            ..BusyProcess::default()
        }];
        let t = context_text(Some(&a), Some(&b));
        assert!(t.contains("kernel.numa_balancing=1 → 2"), "{t}");
        assert!(
            t.contains("vm.numa_zonelist_order: absent (no /proc/sys/vm/x"),
            "{t}"
        );
        assert!(
            t.contains("tunables (debugfs): absent (debugfs is not mounted"),
            "{t}"
        );
        assert!(t.lines().all(|l| l.chars().count() <= WIDTH), "{t}");
        assert!(
            t.contains("task 7 evil\\x1b]0;x\\x07 (process 7), exited"),
            "{t}"
        );
        assert!(t.contains("numa_preferred_nid=1"), "{t}");
        assert!(t.contains("node1 2048 KiB (anon 2048 KiB)"), "{t}");
        assert!(t.contains("policies bind:1×2"), "{t}");
        assert!(!t.contains('\x1b'), "{t}");
        assert!(
            t.lines()
                .all(|l| l.chars().count() <= WIDTH || !l.contains(", ")),
            "{t}"
        );
    }
}
