//! Where task_numa_work cannot be hooked (this machine's kernel), the sampled fallback still
//! sees the scanning of a workload that scans.

mod common;

use std::{fs, process::Command};

use common::{Sysctl, numatrace_bin, workload_bin};

#[test]
fn sampled_scan_share_is_nonzero_for_a_scanning_workload() {
    require_root!("sampled_scan_share_is_nonzero_for_a_scanning_workload");
    if !std::path::Path::new("/proc/sys/kernel/numa_balancing").exists() {
        common::skip(
            "sampled_scan_share_is_nonzero_for_a_scanning_workload",
            "this kernel has no NUMA balancing",
        );
        return;
    }
    let probes = common::probes();
    if common::attached(&probes, "task_numa_work") {
        common::skip(
            "sampled_scan_share_is_nonzero_for_a_scanning_workload",
            "task_numa_work is hooked here; scan time is measured, not sampled",
        );
        return;
    }
    let sampling = common::hook(&probes, "sampling:cpu-clock");
    assert_eq!(
        sampling["attached"], true,
        "neither task_numa_work nor its sampling fallback attached: {sampling}"
    );

    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let report = std::env::temp_dir().join(format!("numatrace-scan-{}.json", std::process::id()));
    let out = Command::new(numatrace_bin())
        .args(["stat", "--json", "--sample-hz", "999", "--output"])
        .arg(&report)
        .arg("--")
        .arg(workload_bin())
        .args([
            "threads",
            "--threads",
            "4",
            "--mem-mib",
            "64",
            "--duration",
            "8s",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&report).unwrap()).unwrap();
    let _ = fs::remove_file(&report);
    let scan = &v["totals"]["scan"];
    assert!(scan["samples"].as_u64().unwrap() > 0, "no samples: {scan}");
    assert!(
        scan["scan_samples"].as_u64().unwrap() > 0,
        "no sample landed in task_numa_work although the kernel updated {} PTEs: {scan}",
        v["vmstat_delta"]["numa_pte_updates"]
    );
    let share = scan["sampled_share"].as_f64().unwrap();
    assert!(share > 0.0 && share < 1.0, "sampled share {share}");
    assert_eq!(scan["share"], serde_json::Value::Null, "not measured here");
}
