//! `report --format chrome-trace`: Chrome trace-event JSON that Perfetto (ui.perfetto.dev) and
//! chrome://tracing open. Per process (`pid` = tgid) each task has three tracks: its
//! task_numa_work calls (`tid` = pid), its migrations (`tid` = pid + 2^22) and its stalls on
//! pages under migration (`tid` = pid + 2^23), as complete events (`ph` "X", `dur`); placement
//! moves, VMA skips, change_prot_numa calls and mm_migrate_pages as instant events (`ph` "i") on
//! the task's first track; hint-fault and migration rates from the samples as counter tracks
//! (`ph` "C") of process 0, where task_numa_fault attached; names as metadata (`ph` "M"). `ts`
//! and `dur` are microseconds from the start of the recording.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::Write,
};

use serde_json::{Value, json};

use crate::{
    capture::{Capture, CaptureError, EventRecord, for_each_event},
    report::measured::{Feed, Measured},
};

/// pid_max is at most 2^22: a track id above it cannot be a task's.
pub const MIGRATION_TRACK: u64 = 1 << 22;
pub const STALL_TRACK: u64 = 1 << 23;

struct Writer<'a, W: Write + ?Sized> {
    out: &'a mut W,
    first: bool,
    t0_ns: u64,
}

impl<W: Write + ?Sized> Writer<'_, W> {
    fn event(&mut self, v: &Value) -> std::io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        serde_json::to_writer(&mut *self.out, v)?;
        Ok(())
    }

    fn us(&self, ns: u64) -> f64 {
        ns.saturating_sub(self.t0_ns) as f64 / 1e3
    }
}

/// Writes the whole trace; events are streamed from the file one section at a time.
pub fn write_trace<W: Write + ?Sized>(cap: &Capture, out: &mut W) -> Result<(), CaptureError> {
    let io = |source| CaptureError::Io {
        path: cap.path.clone(),
        source,
    };
    let mut names: BTreeMap<u32, (u32, String)> = BTreeMap::new();
    for s in std::iter::once(&cap.first)
        .chain(cap.latest.iter())
        .chain(cap.last.iter())
    {
        for t in &s.tasks {
            names.insert(t.pid, (t.tgid, t.comm.to_string()));
        }
    }
    let host = &cap.machine.hostname;
    let release = cap
        .machine
        .kernel
        .as_ref()
        .map(|k| k.release.clone())
        .unwrap_or_default();
    writeln!(
        out,
        "{{\"displayTimeUnit\":\"ms\",\"otherData\":{},\"traceEvents\":[",
        json!({"host": host, "kernel": release, "writer": cap.writer, "complete": cap.complete()})
    )
    .map_err(io)?;
    let mut w = Writer {
        out,
        first: true,
        t0_ns: cap.first.mono_ns,
    };
    w.event(
        &json!({"ph": "M", "name": "process_name", "pid": 0, "tid": 0,
        "args": {"name": format!("NUMA balancing on {host} ({release})")}}),
    )
    .map_err(io)?;
    // (pid, track) -> the tgid its events carried, so names land where the events are.
    let mut seen: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    let mut procs: BTreeSet<u32> = BTreeSet::new();
    for_each_event(&cap.path, |events| {
        for e in events {
            trace_event(&mut w, &e, &names, &mut seen, &mut procs).map_err(io)?;
        }
        Ok(())
    })?;
    for tgid in &procs {
        let comm = names
            .get(tgid)
            .map_or_else(|| "?".to_owned(), |n| n.1.clone());
        w.event(
            &json!({"ph": "M", "name": "process_name", "pid": tgid, "tid": tgid,
            "args": {"name": format!("{comm} ({tgid})")}}),
        )
        .map_err(io)?;
    }
    for ((pid, track), tgid) in &seen {
        let comm = names
            .get(pid)
            .map_or_else(|| "?".to_owned(), |n| n.1.clone());
        let what = match *track {
            0 => "",
            MIGRATION_TRACK => " migrations",
            _ => " stalls",
        };
        w.event(
            &json!({"ph": "M", "name": "thread_name", "pid": tgid, "tid": *pid as u64 + track,
            "args": {"name": format!("{comm} {pid}{what}")}}),
        )
        .map_err(io)?;
    }
    counters(&mut w, cap).map_err(io)?;
    w.out.write_all(b"\n]}\n").map_err(io)
}

fn trace_event<W: Write + ?Sized>(
    w: &mut Writer<W>,
    e: &EventRecord,
    names: &BTreeMap<u32, (u32, String)>,
    seen: &mut BTreeMap<(u32, u64), u32>,
    procs: &mut BTreeSet<u32>,
) -> std::io::Result<()> {
    let tgid_of = |pid: u32, tgid: u32| {
        if tgid != 0 {
            tgid
        } else {
            names.get(&pid).map_or(pid, |n| n.0)
        }
    };
    #[allow(clippy::too_many_arguments)]
    let mut span = |w: &mut Writer<W>,
                    track: u64,
                    name: &str,
                    cat: &str,
                    pid: u32,
                    tgid: u32,
                    ts: u64,
                    dur: u64,
                    args: Value| {
        let g = tgid_of(pid, tgid);
        // Names are bounded like the tasks a capture may hold: past the cap a thread's events
        // are still drawn, under its number alone (a crafted capture's distinct pids would
        // otherwise grow these maps without bound).
        let cap = crate::capture::limits::CAPS.distinct_tasks as usize;
        if seen.len() < cap || seen.contains_key(&(pid, track)) {
            seen.insert((pid, track), g);
        }
        if procs.len() < cap {
            procs.insert(g);
        }
        // A call that began before the recording did is cut at its start, not moved.
        let dur = dur.saturating_sub(w.t0_ns.saturating_sub(ts));
        let v = json!({"ph": "X", "name": name, "cat": cat, "pid": g,
            "tid": pid as u64 + track, "ts": w.us(ts), "dur": dur as f64 / 1e3, "args": args});
        w.event(&v)
    };
    match e {
        EventRecord::ScanCall {
            ts_ns,
            dur_ns,
            pid,
            tgid,
            ..
        } => span(
            w,
            0,
            "task_numa_work",
            "scan",
            *pid,
            *tgid,
            *ts_ns,
            *dur_ns,
            json!({}),
        ),
        EventRecord::Migration {
            ts_ns,
            dur_ns,
            pid,
            tgid,
            src,
            dst,
            migrated,
            ..
        } => {
            let from = src.map_or_else(|| "?".to_owned(), |s| s.to_string());
            span(
                w,
                MIGRATION_TRACK,
                &format!("migrate {from}→{dst}"),
                "migration",
                *pid,
                *tgid,
                *ts_ns,
                *dur_ns,
                json!({"src": src, "dst": dst, "migrated": migrated}),
            )
        }
        EventRecord::Stall {
            ts_ns,
            dur_ns,
            pid,
            tgid,
            ..
        } => span(
            w,
            STALL_TRACK,
            "migration stall",
            "stall",
            *pid,
            *tgid,
            *ts_ns,
            *dur_ns,
            json!({}),
        ),
        EventRecord::Unknown => Ok(()),
        other => {
            let (name, cat, pid, tgid, ts, args) = match other {
                EventRecord::Placement {
                    ts_ns,
                    pid,
                    tgid,
                    what,
                    src_nid,
                    dst_nid,
                    dst_pid,
                    ..
                } => (
                    format!("sched_{what}_numa"),
                    "placement",
                    *pid,
                    *tgid,
                    *ts_ns,
                    json!({"src_nid": src_nid, "dst_nid": dst_nid, "dst_pid": dst_pid}),
                ),
                EventRecord::SkipVma {
                    ts_ns,
                    pid,
                    tgid,
                    vm_start,
                    vm_end,
                    reason,
                    ..
                } => (
                    format!("skip VMA: {reason}"),
                    "skip",
                    *pid,
                    *tgid,
                    *ts_ns,
                    json!({"vma": format!("{vm_start:#x}-{vm_end:#x}"), "reason": reason}),
                ),
                EventRecord::VmaScan {
                    ts_ns,
                    pid,
                    tgid,
                    vm_start,
                    vm_end,
                    pte_updates,
                    ..
                } => (
                    "change_prot_numa".to_owned(),
                    "scan",
                    *pid,
                    *tgid,
                    *ts_ns,
                    json!({"vma": format!("{vm_start:#x}-{vm_end:#x}"), "pte_updates": pte_updates}),
                ),
                EventRecord::MigratePages {
                    ts_ns,
                    pid,
                    tgid,
                    succeeded,
                    failed,
                    ..
                } => (
                    "mm_migrate_pages".to_owned(),
                    "migration",
                    *pid,
                    *tgid,
                    *ts_ns,
                    json!({"succeeded": succeeded, "failed": failed}),
                ),
                EventRecord::TaskExit {
                    ts_ns, pid, tgid, ..
                } => ("exit".to_owned(), "task", *pid, *tgid, *ts_ns, json!({})),
                _ => unreachable!("spans are handled above"),
            };
            seen.insert((pid, 0), tgid_of(pid, tgid));
            procs.insert(tgid_of(pid, tgid));
            let v = json!({"ph": "i", "s": "t", "name": name, "cat": cat,
                "pid": tgid_of(pid, tgid), "tid": pid, "ts": w.us(ts), "args": args});
            w.event(&v)
        }
    }
}

/// Rates between consecutive samples as counter tracks of process 0: each value holds from the
/// start of its interval (a counter keeps its value until the next point), and a last point of
/// zero closes the final interval. Both count hint faults: without task_numa_fault, no track
/// (a flat 0 would claim what was never counted).
fn counters<W: Write + ?Sized>(w: &mut Writer<W>, cap: &Capture) -> std::io::Result<()> {
    if !Measured::from_hooks(&cap.hooks).is(Feed::HintFaults) {
        return Ok(());
    }
    let points: Vec<(u64, crate::model::Counts)> = cap.points().collect();
    for pair in points.windows(2) {
        let ((a_ns, a), (b_ns, b)) = (&pair[0], &pair[1]);
        let secs = b_ns.saturating_sub(*a_ns) as f64 / 1e9;
        if secs <= 0.0 {
            continue;
        }
        let d = b.delta(a).finished();
        let ts = w.us(*a_ns);
        w.event(
            &json!({"ph": "C", "name": "hint faults/s", "pid": 0, "tid": 0, "ts": ts,
            "args": {"local": d.hint_faults.local as f64 / secs,
                     "remote": d.hint_faults.remote as f64 / secs}}),
        )?;
        w.event(
            &json!({"ph": "C", "name": "pages migrated/s", "pid": 0, "tid": 0, "ts": ts,
            "args": {"pages": d.hint_faults.migrated_pages as f64 / secs}}),
        )?;
    }
    if let Some((end, _)) = points.last() {
        let ts = w.us(*end);
        w.event(
            &json!({"ph": "C", "name": "hint faults/s", "pid": 0, "tid": 0, "ts": ts,
            "args": {"local": 0.0, "remote": 0.0}}),
        )?;
        w.event(
            &json!({"ph": "C", "name": "pages migrated/s", "pid": 0, "tid": 0, "ts": ts,
            "args": {"pages": 0.0}}),
        )?;
    }
    Ok(())
}
