//! Nothing is lost silently: starving a bounded kernel map shows up under `dropped`.

mod common;

use std::process::Command;

use common::{Sysctl, workload_bin};

fn run(args: &[&str]) {
    let out = Command::new(workload_bin()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_full_task_map_is_reported() {
    const TEST: &str = "a_full_task_map_is_reported";
    require_root!(TEST);
    if common::host_covers(TEST) {
        return;
    }
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    // 64 entries (the smallest allowed) for 150 busy threads: the map must refuse some.
    let v = common::stat_window(&[], &["--max-tasks", "64"], || {
        run(&[
            "threads",
            "--threads",
            "150",
            "--mem-mib",
            "1",
            "--duration",
            "6s",
        ]);
    });
    let d = &v["dropped"];
    let created = v["kernel_seen"]["task_entries_created"].as_u64().unwrap();
    println!("created {created} entries; dropped {d}");
    let lost = d["task_entries_evicted"].as_u64().unwrap() + d["task_map_full"].as_u64().unwrap();
    if created < 64 && lost == 0 {
        common::skip(
            TEST,
            format!("only {created} task entries were created: the map never filled"),
        );
        return;
    }
    assert!(
        lost > 0,
        "{created} entries in a 64-entry map, yet nothing dropped: {d}"
    );
    assert!(d["total"].as_u64().unwrap() >= lost);
}

#[test]
fn a_full_vma_map_is_reported() {
    const TEST: &str = "a_full_vma_map_is_reported";
    require_root!(TEST);
    let probes = common::probes();
    let h = common::hook(&probes, "change_prot_numa");
    if h["attached"] != true {
        common::skip(
            TEST,
            "per-VMA counts need change_prot_numa hooked (see numatrace probes)",
        );
        return;
    }
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let workload: &[&str] = if common::numa_nodes() >= 2 {
        &["migrate", "--mem-mib", "16", "--duration", "6s"]
    } else {
        &[
            "threads",
            "--threads",
            "4",
            "--mem-mib",
            "16",
            "--duration",
            "6s",
        ]
    };
    let v = common::stat_window(&[], &["--max-vmas", "1"], || run(workload));
    let d = &v["dropped"];
    println!(
        "PTE updates {}; dropped {d}",
        v["totals"]["scan"]["pte_updates"]
    );
    if v["totals"]["scan"]["prot_numa_calls"].as_u64().unwrap() < 2 {
        common::skip(
            TEST,
            "fewer than two change_prot_numa calls: the map never filled",
        );
        return;
    }
    assert!(d["vma_map_full"].as_u64().unwrap() > 0, "{d}");
    assert!(d["total"].as_u64().unwrap() > 0, "{d}");
}

/// `numatrace record` into a fresh file with `record_args`, `during(pid)` once it counts, then
/// Ctrl-C; the capture's report as JSON (`report --format json`: its `stat` object).
fn record_window_pid(record_args: &[&str], during: impl FnOnce(u32)) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("window.ntrace");
    let mut record = Command::new(common::numatrace_bin())
        .arg("record")
        .arg("--output")
        .arg(&capture)
        .args(record_args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_until_counting(&mut record);
    during(record.id());
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(record.id() as i32, libc::SIGINT) };
    assert!(record.wait().unwrap().success(), "numatrace record failed");
    let out = common::numatrace(&["report", "--format", "json", capture.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "report: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["stat"].clone()
}

/// A reader that cannot keep up: numatrace is stopped (SIGSTOP) while a workload migrates
/// thousands of pages, each a ring buffer record, into a 64 KiB ring. `record`, because it is
/// the frontend that keeps migration records (stat and top count migrations per task without
/// one). Records that find the
/// ring full are counted as dropped, none vanishes: every migration record was either read
/// or is among the drops; and the counts kept in kernel maps stay exact against /proc/vmstat.
#[test]
fn an_overflowing_ring_buffer_counts_its_drops_and_the_maps_stay_exact() {
    const TEST: &str = "an_overflowing_ring_buffer_counts_its_drops_and_the_maps_stay_exact";
    require_root!(TEST);
    if common::other_line_covers(TEST) {
        return;
    }
    let Some(_probes) = common::migrating_guest(TEST) else {
        return;
    };
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let v = record_window_pid(&["--ringbuf-size", "65536"], |pid| {
        // SAFETY: kill(2) on the numatrace the window started.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        run(&["migrate", "--mem-mib", "32", "--duration", "8s"]);
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    });
    let (d, seen, t) = (&v["dropped"], &v["kernel_seen"], &v["totals"]);
    let n = |x: &serde_json::Value| x.as_u64().unwrap_or(0);
    let produced = n(&seen["migrations"]["calls"]);
    println!(
        "dropped {d}; migrate_pages records produced {produced}; received {}",
        v["events_received"]
    );
    if produced < 2048 {
        common::skip(
            TEST,
            format!("only {produced} migrate_pages records: too few to fill a 64 KiB ring"),
        );
        return;
    }
    let full = n(&d["ringbuf_full"]);
    assert!(
        full > 0,
        "{produced} records into a 64 KiB ring while stopped, none dropped: {d}"
    );
    assert!(n(&d["total"]) >= full, "{d}");
    // Every record produced was read or counted as dropped.
    let read = n(&v["events_received"]["migrate_pages"]);
    assert!(
        read + full >= produced,
        "{produced} migrate_pages records: {read} read, {full} dropped in all"
    );
    assert!(read < produced, "all {produced} read, yet {full} dropped");
    // The maps do not go through the ring: exact, as without the flood.
    for (path, vm) in [
        (&["hint_faults", "faults"][..], "numa_hint_faults"),
        (&["hint_faults", "local"][..], "numa_hint_faults_local"),
        (
            &["hint_faults", "migrated_pages"][..],
            "numa_pages_migrated",
        ),
        (&["scan", "pte_updates"][..], "numa_pte_updates"),
    ] {
        let traced = n(path.iter().fold(t, |x, k| &x[*k]));
        assert_eq!(
            traced,
            n(path.iter().fold(seen, |x, k| &x[*k])),
            "{path:?} in totals and kernel_seen"
        );
        let ours = traced + n(path.iter().fold(&v["self"], |x, k| &x[*k]));
        let (lo, hi) = (n(&v["vmstat_delta_min"][&vm]), n(&v["vmstat_delta"][&vm]));
        assert!(
            (lo..=hi).contains(&ours),
            "{path:?}: numatrace {ours}, /proc/vmstat {vm} in [{lo}, {hi}]"
        );
    }
}
