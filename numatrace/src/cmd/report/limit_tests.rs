//! Captures past each limit, and counters no real kernel writes: refused in one line naming
//! the limit, or summed without wrapping.

use std::path::Path;

use serde_json::{Value, json};

use std::collections::BTreeMap;

use crate::{
    capture::{format::FormatError, limits::Caps, *},
    engine::Snapshot,
    model::Counts,
};

fn section(out: &mut Vec<u8>, kind: u32, raw: &[u8]) {
    format::write_section(out, kind, raw).unwrap();
}

fn snapshot(tasks: Value) -> Value {
    let mut v = serde_json::to_value(Snapshot::default()).unwrap();
    v["tasks"] = tasks;
    v
}

fn task(pid: u32, extra: Value) -> Value {
    let mut t = json!({"pid": pid, "tgid": pid, "comm": "work", "exited": false, "first_ns": 1});
    for (k, x) in extra.as_object().unwrap() {
        t[k] = x.clone();
    }
    t
}

/// A capture of `machine`, `probes`, `first` (`first` with these tasks), then `more`.
fn capture(machine: Value, first: Value, more: &[(u32, Vec<u8>)]) -> Vec<u8> {
    capture_raw(machine.to_string().as_bytes(), first, more)
}

fn capture_raw(machine: &[u8], first: Value, more: &[(u32, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    format::write_header(&mut out, "numatrace test").unwrap();
    section(&mut out, SECTION_MACHINE, machine);
    section(&mut out, SECTION_PROBES, b"[]");
    section(
        &mut out,
        SECTION_FIRST,
        snapshot(first).to_string().as_bytes(),
    );
    for (k, raw) in more {
        section(&mut out, *k, raw);
    }
    out
}

fn machine() -> Value {
    serde_json::to_value(Machine::default()).unwrap()
}

fn read(b: &[u8], caps: &Caps) -> Result<Capture, CaptureError> {
    Capture::from_bytes_with(Path::new("capture.ntrace"), b, caps)
}

/// The one line a refusal prints.
fn refused(b: &[u8], caps: &Caps) -> String {
    let e = read(b, caps).expect_err("refused").to_string();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

#[test]
fn counters_at_u64_max_saturate_in_every_total() {
    let max = json!({"hint_faults": {"faults": u64::MAX, "local": 1},
        "skipped_vmas_total": u64::MAX, "skipped_vmas": {"shared_ro": u64::MAX,
        "pid_inactive": u64::MAX}, "migrations": {"latency_ns_total": u64::MAX, "attempts": 2}});
    // Two tasks of one process at u64::MAX each: their sum is no number a u64 holds.
    let mut thread = task(8, max.clone());
    thread["tgid"] = json!(7);
    let tasks = json!([task(7, max), thread]);
    let sample = snapshot(tasks.clone()).to_string().into_bytes();
    let mut last = snapshot(tasks);
    last["mono_ns"] = json!(2_000_000_000u64);
    let b = capture(
        machine(),
        json!([]),
        &[
            (SECTION_SAMPLE, sample),
            (SECTION_LAST, last.to_string().into_bytes()),
        ],
    );
    let c = read(&b, &limits::CAPS).unwrap();
    assert_eq!(c.samples[0].1.hint_faults.faults, u64::MAX);
    let r = super::report_of(&c);
    let t = &r.stat.totals;
    assert_eq!(t.hint_faults.faults, u64::MAX);
    assert_eq!(t.hint_faults.remote, u64::MAX - 2);
    assert_eq!(t.skipped_vmas.get("shared_ro"), u64::MAX);
    assert_eq!(t.skipped_vmas_total, u64::MAX);
    assert_eq!(t.migrations.latency_ns_total, u64::MAX);
    let p = &r.stat.processes[0];
    assert_eq!((p.threads, p.counts.hint_faults.faults), (2, u64::MAX));
    assert_eq!(r.stat.cgroups[0].counts.hint_faults.faults, u64::MAX);
    let text = r.to_text(25);
    assert!(text.contains("18446744073709551615"), "{text}");
    let d = crate::report::diff::diff(
        &super::side(&r, Path::new("a")),
        &super::side(&r, Path::new("b")),
    );
    let _ = d.to_text();
    let mut sink = Vec::new();
    let path = std::env::temp_dir().join(format!("numatrace-sat-{}.ntrace", std::process::id()));
    std::fs::write(&path, &b).unwrap();
    let c = Capture::open(&path).unwrap();
    crate::report::chrome::write_trace(&c, &mut sink).unwrap();
    let _ = std::fs::remove_file(&path);
}

#[test]
fn totals_kept_task_by_task_match_a_recount_of_a_real_capture() {
    const REAL: &[u8] = include_bytes!("../../../tests/fixtures/capture-6.12-migrate.ntrace");
    let c = Capture::from_bytes(Path::new("fixture"), REAL).unwrap();
    // The reader before it kept totals incrementally: every task recounted at every sample.
    let mut r = format::Reader::new(REAL).unwrap();
    let mut tasks = BTreeMap::new();
    let mut recount = Vec::new();
    while let Some(s) = r.next_section().unwrap() {
        if s.kind == SECTION_FIRST || s.kind == SECTION_SAMPLE {
            let snap: Snapshot = serde_json::from_slice(&s.data).unwrap();
            for t in &snap.tasks {
                tasks.insert(t.key(), t.clone());
            }
            if s.kind == SECTION_SAMPLE {
                let mut totals = Counts::default();
                for t in tasks.values().filter(|t| t.tgid != snap.self_tgid) {
                    t.counts.add_to(&mut totals);
                }
                recount.push((snap.mono_ns, totals.finished()));
            }
        }
    }
    assert_eq!(c.samples.len(), 16);
    assert_eq!(c.samples, recount);
}

#[test]
fn each_count_past_its_limit_is_refused_naming_it() {
    let small = Caps {
        tasks: 3,
        distinct_tasks: 3,
        records: 5,
        vmas: 2,
        samples: 2,
        section_events: 4,
        events: 6,
        sections: 8,
        ..limits::CAPS
    };
    let tasks = |n: u32| Value::Array((1..=n).map(|p| task(p, json!({}))).collect());
    let b = capture(machine(), tasks(3), &[]);
    assert!(read(&b, &small).is_ok());
    let b = capture(machine(), tasks(4), &[]);
    assert_eq!(
        refused(&b, &small),
        format!(
            "capture.ntrace: section 3 (first) at byte {}: tasks past the limit of 3 per section",
            read_offset(&b, 3)
        )
    );
    // Identical records repeated: one task, but as many records to build.
    let same = Value::Array(vec![task(1, json!({})); 4]);
    assert!(refused(&capture(machine(), same, &[]), &small).contains("tasks past the limit"));
    // Distinct tasks over the capture: 3 in `first`, 1 more in a sample.
    let sample = snapshot(json!([task(9, json!({}))]))
        .to_string()
        .into_bytes();
    let e = refused(
        &capture(machine(), tasks(3), &[(SECTION_SAMPLE, sample)]),
        &small,
    );
    assert!(
        e.ends_with("distinct tasks past the limit of 3 per capture"),
        "{e}"
    );
    // Task records in all snapshots: 3 in `first`, 3 in a sample (the same tasks again).
    let sample = snapshot(tasks(3)).to_string().into_bytes();
    let e = refused(
        &capture(machine(), tasks(3), &[(SECTION_SAMPLE, sample)]),
        &small,
    );
    assert!(
        e.ends_with("task and VMA records past the limit of 5 per capture"),
        "{e}"
    );
    let mut vmas = snapshot(json!([]));
    vmas["vmas"] = json!({"1": [{"start": "0x1"}, {"start": "0x2"}], "2": [{"start": "0x3"}]});
    let b = capture(
        machine(),
        json!([]),
        &[(SECTION_LAST, vmas.to_string().into())],
    );
    assert!(refused(&b, &small).ends_with("VMA records past the limit of 2 per section"));
    let empty = snapshot(json!([])).to_string().into_bytes();
    let b = capture(
        machine(),
        json!([]),
        &[
            (SECTION_SAMPLE, empty.clone()),
            (SECTION_SAMPLE, empty.clone()),
        ],
    );
    assert_eq!(read(&b, &small).unwrap().samples.len(), 2);
    let b = capture(machine(), json!([]), &vec![(SECTION_SAMPLE, empty); 3]);
    assert!(refused(&b, &small).ends_with("samples past the limit of 2 per capture"));
    let ev = |n: usize| {
        serde_json::to_vec(&vec![
            json!({"kind": "task_exit", "ts_ns": 1, "pid": 1, "tgid": 1,
            "cpu": 0});
            n
        ])
        .unwrap()
    };
    let b = capture(machine(), json!([]), &[(SECTION_EVENTS, ev(5))]);
    assert!(refused(&b, &small).ends_with("events past the limit of 4 per section"));
    let b = capture(
        machine(),
        json!([]),
        &[(SECTION_EVENTS, ev(4)), (SECTION_EVENTS, ev(3))],
    );
    assert!(refused(&b, &small).ends_with("events past the limit of 6 per capture"));
    let b = capture(machine(), json!([]), &vec![(SECTION_EVENTS, ev(0)); 6]);
    assert_eq!(
        refused(&b, &small),
        format!(
            "capture.ntrace: section 9 at byte {} is past the limit of 8 sections",
            read_offset(&b, 9)
        )
    );
    let values = Caps {
        values: 1000,
        ..limits::CAPS
    };
    let b = capture(machine(), json!([]), &[(SECTION_EVENTS, ev(200))]);
    assert!(refused(&b, &values).ends_with("JSON values past the limit of 1000 per section"));
}

/// The byte where section `n` (1-based) starts.
fn read_offset(b: &[u8], n: u64) -> u64 {
    let mut r = format::Reader::with_limits(b, limits::CAPS.format(0)).unwrap();
    loop {
        let s = r.next_section().unwrap().unwrap();
        if s.index == n {
            return s.offset;
        }
    }
}

#[test]
fn strings_past_their_limit_are_refused_naming_them() {
    let long = |n: usize| "x".repeat(n);
    let caps = &limits::CAPS;
    let ok = capture(machine(), json!([task(1, json!({"comm": long(64)}))]), &[]);
    assert!(read(&ok, caps).is_ok());
    for (machine, first, key, bytes, limit) in [
        (
            machine(),
            json!([task(1, json!({"comm": long(65)}))]),
            "comm",
            65,
            "64 bytes",
        ),
        (
            json!({"hostname": long(257)}),
            json!([]),
            "hostname",
            257,
            "256 bytes",
        ),
        (
            machine(),
            json!([task(1, json!({"cgroup": long(65537)}))]),
            "cgroup",
            65537,
            "64 KiB",
        ),
        (
            json!({"command_line": ["numatrace", long((1 << 20) + 1)]}),
            json!([]),
            "command_line",
            (1 << 20) + 1,
            "1 MiB",
        ),
        (
            json!({"kernel_build": long((1 << 20) + 1)}),
            json!([]),
            "string",
            (1 << 20) + 1,
            "1 MiB",
        ),
    ] {
        let e = refused(&capture(machine, first, &[]), caps);
        assert!(
            e.ends_with(&format!(
                "a `{key}` string of {bytes} bytes, past the limit of {limit}"
            )),
            "{e}"
        );
    }
    let mut vmas = snapshot(json!([]));
    vmas["vmas"] = json!({"1": [{"start": "0x1", "mapping": long(65537)}]});
    let b = capture(
        machine(),
        json!([]),
        &[(SECTION_LAST, vmas.to_string().into())],
    );
    assert!(
        refused(&b, caps).ends_with("a `mapping` string of 65537 bytes, past the limit of 64 KiB")
    );
}

#[test]
fn json_nested_past_128_levels_is_an_error_not_a_crash() {
    for depth in [129usize, 100_000] {
        let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let m = format!("{{\"hostname\":\"h\",\"command_line\":{deep}}}");
        let e = refused(&capture_raw(m.as_bytes(), json!([]), &[]), &limits::CAPS);
        assert!(
            e.contains("section machine") && e.contains("recursion limit exceeded"),
            "{e}"
        );
        let b = capture(machine(), json!([]), &[(SECTION_EVENTS, deep.into_bytes())]);
        let e = refused(&b, &limits::CAPS);
        assert!(
            e.contains("section events") && e.contains("recursion limit"),
            "{e}"
        );
    }
    // 127 levels are fine (where the format allows any JSON: an unknown event kind's fields).
    let ok = format!(
        "[{{\"kind\":\"from_the_future\",\"x\":{}{}}}]",
        "[".repeat(125),
        "]".repeat(125)
    );
    let b = capture(machine(), json!([]), &[(SECTION_EVENTS, ok.into_bytes())]);
    assert_eq!(read(&b, &limits::CAPS).unwrap().events, 1);
}

#[test]
fn sizes_past_the_section_and_total_limits_are_refused() {
    // Whitespace is valid JSON and compresses to almost nothing: 1 KiB of stored bytes per
    // 4 MiB here.
    let mut spaces = vec![b' '; 4 << 20];
    spaces[0] = b'[';
    *spaces.last_mut().unwrap() = b']';
    let caps = Caps {
        section_bytes: 4 << 20,
        total_bytes: 10 << 20,
        ..limits::CAPS
    };
    let b = capture(
        machine(),
        json!([]),
        &vec![(SECTION_EVENTS, spaces.clone()); 2],
    );
    assert!(b.len() < 10_000, "{}", b.len());
    assert_eq!(read(&b, &caps).unwrap().event_sections, 2);
    let b = capture(
        machine(),
        json!([]),
        &vec![(SECTION_EVENTS, spaces.clone()); 3],
    );
    assert_eq!(
        refused(&b, &caps),
        format!(
            "capture.ntrace: section 6 at byte {} decompresses past the limit of 10 MiB for all \
             sections together",
            read_offset(&b, 6)
        )
    );
    spaces.insert(1, b' ');
    let b = capture(machine(), json!([]), &[(SECTION_EVENTS, spaces)]);
    let e = refused(&b, &caps);
    assert!(
        e.starts_with("capture.ntrace: section 4 at byte ")
            && e.ends_with("decompresses past the limit of 4 MiB per section"),
        "{e}"
    );
    // The total scales with the file: 16 times its size when that is more.
    assert_eq!(caps.format(1 << 20).total_bytes, 16 << 20);
}

#[test]
fn a_zstd_window_past_the_limit_is_refused() {
    // A frame whose window is 2^27 (streamed, so zstd does not shrink it to the input), as a
    // crafted file may ask for: the decoder would allocate 128 MiB for it.
    let raw = vec![7u8; 1 << 20];
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    enc.window_log(27).unwrap();
    enc.long_distance_matching(true).unwrap();
    std::io::Write::write_all(&mut enc, &raw).unwrap();
    let stored = enc.finish().unwrap();
    let mut b = Vec::new();
    format::write_header(&mut b, "numatrace test").unwrap();
    b.extend_from_slice(format::SECTION_MAGIC);
    b.extend_from_slice(&99u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&(stored.len() as u32).to_le_bytes());
    b.extend_from_slice(&(raw.len() as u32).to_le_bytes());
    b.extend_from_slice(&crc32fast::hash(&stored).to_le_bytes());
    b.extend_from_slice(&stored);
    let mut r = format::Reader::new(&b[..]).unwrap();
    match r.next_section() {
        Err(FormatError::Corrupted { what, .. }) => assert!(what.contains("zstd"), "{what}"),
        other => panic!("{other:?}"),
    }
}
