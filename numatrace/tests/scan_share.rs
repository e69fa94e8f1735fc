//! Where task_numa_work cannot be hooked (this machine's kernel), the sampled fallback still
//! sees the scanning of a workload that scans, and `serve` exports it per scope as samples (an
//! estimate, said so), never as scan seconds.

mod common;

use std::{fs, process::Command, time::Duration};

use common::{Sysctl, numatrace_bin, workload_bin};

/// The workload's arguments: 4 threads touching 64 MiB, which NUMA balancing scans.
fn scanning(duration: &str) -> [&str; 7] {
    [
        "threads",
        "--threads",
        "4",
        "--mem-mib",
        "64",
        "--duration",
        duration,
    ]
}

/// Whether this machine scans by sampling only (says why not, loudly).
fn sampled_here(test: &str) -> bool {
    if !std::path::Path::new("/proc/sys/kernel/numa_balancing").exists() {
        common::skip(test, "this kernel has no NUMA balancing");
        return false;
    }
    let probes = common::probes();
    if common::attached(&probes, "task_numa_work") {
        common::skip(
            test,
            "task_numa_work is hooked here; scan time is measured, not sampled",
        );
        return false;
    }
    let sampling = common::hook(&probes, "sampling:cpu-clock");
    assert_eq!(
        sampling["attached"], true,
        "neither task_numa_work nor its sampling fallback attached: {sampling}"
    );
    true
}

#[test]
fn sampled_scan_share_is_nonzero_for_a_scanning_workload() {
    require_root!("sampled_scan_share_is_nonzero_for_a_scanning_workload");
    if !sampled_here("sampled_scan_share_is_nonzero_for_a_scanning_workload") {
        return;
    }

    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let report = std::env::temp_dir().join(format!("numatrace-scan-{}.json", std::process::id()));
    let out = Command::new(numatrace_bin())
        .args(["stat", "--json", "--sample-hz", "999", "--output"])
        .arg(&report)
        .arg("--")
        .arg(workload_bin())
        .args(scanning("8s"))
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

/// Σ of a family's samples in a text exposition whose labels contain `with`.
fn sum(body: &str, family: &str, with: &str) -> Option<f64> {
    let mut found = None;
    for l in body.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = l.rsplit_once(' ')?;
        let name = series.split('{').next().unwrap_or(series);
        if name == family && series.contains(with) {
            *found.get_or_insert(0.0) += value.parse::<f64>().ok()?;
        }
    }
    found
}

#[test]
fn serve_exports_the_sampled_scan_share_per_scope_and_says_it_is_sampled() {
    const TEST: &str = "serve_exports_the_sampled_scan_share_per_scope_and_says_it_is_sampled";
    require_root!(TEST);
    if !sampled_here(TEST) {
        return;
    }
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let serve = common::serve::Serve::start(&["--sample-hz", "999"]);
    let mut workload = Command::new(workload_bin())
        .args(scanning("10s"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Scraped while it runs: serve's top N are live tasks.
    std::thread::sleep(Duration::from_secs(7));
    let scrape = Command::new("curl")
        .args(["-sf", &format!("http://{}/metrics", serve.addr)])
        .output()
        .expect("curl (`cargo xtask test` installs it)");
    assert!(scrape.status.success(), "{}", common::text(&scrape));
    let body = String::from_utf8(scrape.stdout).unwrap();
    assert!(workload.wait().unwrap().success());
    drop(serve);
    // Exact scan time is not measured here: those families are absent, not 0.
    for absent in [
        "numatrace_scan_cpu_seconds_total",
        "numatrace_task_scan_seconds_total",
    ] {
        assert!(!body.contains(&format!("\n{absent}")), "{absent} exported");
    }
    for family in [
        "numatrace_scan_scan_samples_total",
        "numatrace_cgroup_scan_scan_samples_total",
        "numatrace_task_scan_scan_samples_total",
        "numatrace_task_scan_samples_total",
    ] {
        let help = body
            .lines()
            .find(|l| l.starts_with(&format!("# HELP {family} ")))
            .unwrap_or_else(|| panic!("no {family}"));
        assert!(help.contains("estimate"), "{help}");
    }
    let all = sum(&body, "numatrace_scan_samples_total", "").unwrap();
    let in_scan = sum(&body, "numatrace_scan_scan_samples_total", "").unwrap();
    let task = sum(
        &body,
        "numatrace_task_scan_scan_samples_total",
        "comm=\"ntw-thread",
    )
    .unwrap_or(0.0);
    println!("samples {all}, in task_numa_work {in_scan}, the workload's threads {task}");
    assert!(
        all > 0.0 && in_scan > 0.0 && in_scan < all,
        "{all} {in_scan}"
    );
    // The threads that scanned are among serve's top tasks, ranked by their samples in
    // task_numa_work where scan time is not measured.
    assert!(
        task > 0.0,
        "the workload's threads have no sampled scan series"
    );
    // Per cgroup, the parts add up to the total.
    let by_cgroup = sum(&body, "numatrace_cgroup_scan_scan_samples_total", "").unwrap();
    assert_eq!(by_cgroup, in_scan);
}
