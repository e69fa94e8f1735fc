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
    // 64 entries (the smallest allowed) for 150 busy threads: the LRU map must evict.
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
    if created <= 64 {
        common::skip(
            TEST,
            format!("only {created} task entries were created: the map never filled"),
        );
        return;
    }
    let lost = d["task_entries_evicted"].as_u64().unwrap() + d["task_map_full"].as_u64().unwrap();
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
    if h["attached"] != true || h["mechanism"] != "fentry" {
        common::skip(
            TEST,
            "per-VMA counts need fexit on change_prot_numa (see numatrace probes)",
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
