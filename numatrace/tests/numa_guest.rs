//! On a kernel with 2+ NUMA nodes and hookable functions (the QEMU guests of `xtask vm-test`):
//! numatrace's counts from the function hooks agree with the kernel's own /proc/vmstat counters
//! over the same window, and a misplaced workload shows migrations with latencies.

mod common;

use std::{
    fs,
    process::{Command, Stdio},
    time::Duration,
};

use common::{Sysctl, numatrace, numatrace_bin, workload_bin};

fn nodes() -> usize {
    fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.starts_with("node") && n[4..].bytes().all(|b| b.is_ascii_digit())
                })
                .count()
        })
        .unwrap_or(0)
}

/// Skips (loudly) unless this machine has the 2+ NUMA nodes the test needs.
fn has_numa_nodes(test: &str) -> bool {
    let ok = nodes() >= 2;
    if !ok {
        common::skip(
            test,
            "needs 2+ NUMA nodes (runs in the QEMU guests of `cargo xtask vm-test`)",
        );
    }
    ok
}

/// Runs `numatrace [global...] stat` system-wide around the workload, so both count the same
/// window: the workload starts once numatrace says it is counting (every hook attached, the
/// vmstat baseline read), not merely once some of its programs are loaded.
fn stat_around(global: &[&str], workload: &[&str]) -> serde_json::Value {
    let report = std::env::temp_dir().join(format!("numatrace-guest-{}.json", std::process::id()));
    let mut stat = Command::new(numatrace_bin())
        .args(global)
        .args(["stat", "--json", "--output"])
        .arg(&report)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = stat.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.starts_with("numatrace: counting") {
                let _ = tx.send(());
            }
            eprintln!("{line}");
        }
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(120)).is_ok(),
        "numatrace never said it was counting"
    );
    let out = Command::new(workload_bin())
        .args(workload)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{}", String::from_utf8_lossy(&out.stdout).trim());
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(stat.id() as i32, libc::SIGINT) };
    assert!(stat.wait().unwrap().success());
    let v = serde_json::from_slice(&fs::read(&report).unwrap()).unwrap();
    let _ = fs::remove_file(&report);
    v
}

fn n(x: &serde_json::Value) -> u64 {
    x.as_u64().unwrap_or(0)
}

/// numatrace's totals against the kernel's counters over the same window.
fn agrees_with_vmstat(how: &str, v: &serde_json::Value) {
    let (t, vm) = (&v["totals"], &v["vmstat_delta"]);
    assert_eq!(v["dropped"]["total"], 0, "{}", v["dropped"]);
    // change_prot_numa's return value is exactly what it adds to numa_pte_updates.
    close(
        &format!("PTE updates ({how})"),
        n(&t["scan"]["pte_updates"]),
        n(&vm["numa_pte_updates"]),
    );
    // Hint faults: do_numa_page counts numa_hint_faults before it may return without calling
    // task_numa_fault, hence the tolerance.
    close(
        &format!("hint faults ({how})"),
        n(&t["hint_faults"]["faults"]),
        n(&vm["numa_hint_faults"]),
    );
    close(
        &format!("local hint faults ({how})"),
        n(&t["hint_faults"]["local"]),
        n(&vm["numa_hint_faults_local"]),
    );
    close(
        &format!("pages migrated ({how})"),
        n(&t["hint_faults"]["migrated_pages"]),
        n(&vm["numa_pages_migrated"]),
    );
    assert!(
        n(&t["scan"]["calls"]) > 0,
        "task_numa_work never ran ({how})"
    );
    assert!(
        n(&t["migrations"]["attempts"]) > 0,
        "migrate_misplaced never called ({how})"
    );
}

/// numatrace leaves out its own scans and faults (a few, while it handles the workload's
/// events); the kernel's system-wide counters include them.
const OWN_EVENTS: u64 = 32;

/// `ours` equals `kernel`, or is within 2% where the kernel counts at a different point, or
/// falls short by at most numatrace's own events. Never above the kernel's count.
fn close(what: &str, ours: u64, kernel: u64) {
    let diff = ours.abs_diff(kernel);
    println!("{what}: numatrace {ours}, /proc/vmstat {kernel}");
    assert!(
        diff == 0 || (diff as f64) <= 0.02 * kernel as f64 || (ours < kernel && diff <= OWN_EVENTS),
        "{what}: numatrace {ours} vs /proc/vmstat {kernel}"
    );
}

#[test]
fn function_hooks_agree_with_vmstat_and_see_migrations() {
    require_root!("function_hooks_agree_with_vmstat_and_see_migrations");
    if !has_numa_nodes("function_hooks_agree_with_vmstat_and_see_migrations") {
        return;
    }
    let probes = common::probes();
    for f in ["task_numa_work", "change_prot_numa", "task_numa_fault"] {
        if !common::attached(&probes, f) {
            common::skip(
                "function_hooks_agree_with_vmstat_and_see_migrations",
                format!("{f} cannot be hooked on this kernel (see numatrace probes)"),
            );
            return;
        }
    }
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let v = stat_around(&[], &["migrate", "--mem-mib", "64", "--duration", "12s"]);
    let (t, vm) = (&v["totals"], &v["vmstat_delta"]);
    agrees_with_vmstat("fentry", &v);
    assert!(n(&t["scan"]["calls"]) > 0, "task_numa_work never ran");
    assert!(n(&t["scan"]["time_ns"]) > 0);
    assert!(
        n(&t["hint_faults"]["remote"]) > 0,
        "a misplaced workload must fault remotely"
    );
    assert!(
        n(&vm["numa_pages_migrated"]) > 0,
        "the kernel migrated nothing: cannot check"
    );
    assert!(
        n(&t["migrations"]["attempts"]) > 0,
        "migrate_misplaced never called"
    );
    assert!(
        n(&t["migrations"]["succeeded"]) > 0,
        "no migration succeeded"
    );
    assert!(
        !v["histograms"]["migrate_latency_ns"]
            .as_array()
            .unwrap()
            .is_empty(),
        "migrations without a latency histogram"
    );
    assert!(
        n(&t["migrations"]["pages_ok"]) > 0,
        "mm_migrate_pages saw nothing"
    );
    // The workload first-touched on node 1 and read from node 0: its pages moved 1 -> 0.
    let flows = v["node_matrix"].as_array().unwrap();
    assert!(
        flows
            .iter()
            .any(|f| f["src"] == 1 && f["dst"] == 0 && n(&f["migrated"]) > 0),
        "no 1->0 migrations in the node matrix: {flows:?}"
    );
    // Per-VMA PTE updates add up to the process's total.
    let proc = v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["comm"] == "numatrace-workl")
        .expect("the workload's process is listed");
    let vma_sum: u64 = proc["vmas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| n(&v["pte_updates"]))
        .sum();
    assert_eq!(vma_sum, n(&proc["scan"]["pte_updates"]), "{}", proc["vmas"]);
    assert!(vma_sum > 0);
    // The workload's task shows its own share of run time spent scanning.
    let task = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["comm"] == "numatrace-workl")
        .expect("the workload's task is listed");
    // CPU share: tick-granular, so it may be 0 for a short run; it must be measured.
    let share = task["scan"]["share"].as_f64().expect("measured scan share");
    assert!((0.0..0.5).contains(&share), "scan share {share}");
    assert!(task["scan"]["wall_share"].as_f64().expect("wall share") > 0.0);
}

fn stat_command(args: &[&str]) -> serde_json::Value {
    let report = std::env::temp_dir().join(format!("numatrace-cow-{}.json", std::process::id()));
    let out = Command::new(numatrace_bin())
        .args(["stat", "--json", "--output"])
        .arg(&report)
        .arg("--")
        .arg(workload_bin())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{}", String::from_utf8_lossy(&out.stdout).trim());
    let v = serde_json::from_slice(&fs::read(&report).unwrap()).unwrap();
    let _ = fs::remove_file(&report);
    v
}

/// Seed 000: hint faults on COW-shared pages are avoided (the control, whose children own their
/// pages, is faulted), and the detector itself sees COW-shared THPs, which the skip never checks.
#[test]
fn cow_shared_pages_are_not_faulted_but_the_control_is() {
    const TEST: &str = "cow_shared_pages_are_not_faulted_but_the_control_is";
    require_root!(TEST);
    if !has_numa_nodes(TEST) {
        return;
    }
    let probes = common::probes();
    for f in ["mpol_misplaced", "task_numa_fault"] {
        if !common::attached(&probes, f) {
            common::skip(TEST, format!("{f} cannot be hooked on this kernel"));
            return;
        }
    }
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let run = |mode: &str, thp: bool| {
        let mut a = vec![
            "cow",
            "--children",
            "2",
            "--mem-mib",
            "32",
            "--duration",
            "10s",
            "--mode",
            mode,
        ];
        if thp {
            a.push("--thp");
        }
        let v = stat_command(&a);
        let h = v["totals"]["hint_faults"].clone();
        println!("cow {mode} thp={thp}: {h}\n  scan: {}", v["totals"]["scan"]);
        h
    };
    let shared = run("shared", false);
    let control = run("private", false);
    let array_pages = 32 * 256;
    // 4K COW-shared pages are skipped by change_pte_range: (almost) no hint fault lands on them.
    assert!(
        n(&shared["cow_shared"]) * 100 <= array_pages,
        "hint faults on COW-shared 4K pages: {shared}"
    );
    assert_eq!(n(&shared["cow_shared_migrated"]), 0, "{shared}");
    // The control's children own their pages, which are scanned and faulted.
    assert!(
        n(&control["faults"]) >= 1000 && n(&control["faults"]) > 5 * n(&shared["faults"]),
        "control {control} vs shared {shared}"
    );

    let thp_enabled = fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|s| !s.contains("[never]"));
    if thp_enabled {
        let thp = run("shared", true);
        if n(&thp["faults_thp"]) > 0 {
            // PMD-mapped COW-shared THPs are not skipped: the detector must flag them.
            assert!(
                n(&thp["cow_shared"]) > 0,
                "THP faults not seen as COW-shared: {thp}"
            );
        }
    }
}

/// The kprobe fallback counts the same as fentry: forced with --no-fentry.
#[test]
fn kprobe_fallback_agrees_with_vmstat() {
    const TEST: &str = "kprobe_fallback_agrees_with_vmstat";
    require_root!(TEST);
    if !has_numa_nodes(TEST) {
        return;
    }
    let out = numatrace(&["--no-fentry", "probes", "--json"]);
    let probes: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let hooks = probes["hooks"].as_array().unwrap();
    let kprobe = |name: &str| {
        hooks
            .iter()
            .any(|h| h["name"] == name && h["attached"] == true && h["mechanism"] == "kprobe")
    };
    if !kprobe("task_numa_fault") || !kprobe("change_prot_numa") {
        common::skip(TEST, "this kernel has no kprobes for the hooks");
        return;
    }
    for h in hooks
        .iter()
        .filter(|h| h["kind"] == "function" && h["attached"] == true)
    {
        assert_eq!(
            h["mechanism"], "kprobe",
            "--no-fentry still used fentry: {h}"
        );
    }
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let v = stat_around(
        &["--no-fentry"],
        &["migrate", "--mem-mib", "32", "--duration", "8s"],
    );
    agrees_with_vmstat("kprobe", &v);
}
