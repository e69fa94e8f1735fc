//! Cross-check: `numatrace stat -- <workload>` counts `sched_skip_vma_numa` per reason exactly
//! as an independent tracefs instance, filtered to the same workload, counts it.

mod common;

use std::{
    collections::BTreeMap,
    ffi::CString,
    fs,
    io::Write,
    os::unix::ffi::OsStrExt,
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use common::{Sysctl, TraceInstance, numatrace_bin, tracefs_root, wait_until, workload_bin};

/// Skips by reason in a tracefs trace recorded with `options/record-tgid`, for thread group
/// `tgid` only: set_event_pid's filtering lets a few events of other tasks through on some
/// kernels (seen on 6.8: numatrace's own, right after the workload's), so the tgid column
/// decides.
fn tracefs_counts(trace: &str, tgid: u32) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in trace.lines().filter(|l| !l.starts_with('#')) {
        let line_tgid = line
            .split_once('(')
            .and_then(|(_, r)| r.split_once(')'))
            .and_then(|(t, _)| t.trim().parse::<u32>().ok());
        if line_tgid != Some(tgid) {
            continue;
        }
        if let Some(reason) = line.rsplit_once("reason=").map(|(_, r)| r.trim()) {
            *m.entry(reason.to_owned()).or_insert(0) += 1;
        }
    }
    m
}

#[test]
fn tracefs_counter_parses_reasons() {
    let t = "# tracer: nop\n  mt-1 (      1) [001] ..... 1.0: sched_skip_vma_numa: numa_scan_offset=0 vm_start=1 vm_end=2 reason=shared_ro\n  mt-2 (      1) [001] ..... 1.1: sched_skip_vma_numa: numa_scan_offset=0 vm_start=1 vm_end=2 reason=shared_ro\n  mt-3 (      1) [000] ..... 1.2: sched_skip_vma_numa: numa_scan_offset=0 vm_start=3 vm_end=4 reason=inaccessible\n  numatrace-9 (      9) [000] ..... 1.3: sched_skip_vma_numa: numa_scan_offset=0 vm_start=3 vm_end=4 reason=inaccessible\n";
    let m = tracefs_counts(t, 1);
    assert_eq!(m["shared_ro"], 2);
    assert_eq!(m["inaccessible"], 1);
    assert_eq!(m.len(), 2);
    assert_eq!(tracefs_counts(t, 9)["inaccessible"], 1);
}

#[test]
fn skip_vma_counts_equal_an_independent_tracefs_count() {
    require_root!("skip_vma_counts_equal_an_independent_tracefs_count");
    if !Path::new("/proc/sys/kernel/numa_balancing").exists() {
        common::skip(
            "skip_vma_counts_equal_an_independent_tracefs_count",
            "this kernel has no NUMA balancing (CONFIG_NUMA_BALANCING)",
        );
        return;
    }
    if !tracefs_root()
        .join("events/sched/sched_skip_vma_numa")
        .is_dir()
    {
        common::skip(
            "skip_vma_counts_equal_an_independent_tracefs_count",
            "this kernel has no sched:sched_skip_vma_numa (added in 6.7)",
        );
        return;
    }

    let _balancing = Sysctl::set("kernel.numa_balancing", "1").expect("enable NUMA balancing");
    let inst = TraceInstance::new("skipvma").expect("tracefs instance");
    inst.write("buffer_size_kb", "8192").unwrap();
    inst.write("options/event-fork", "1").unwrap();
    inst.write("options/record-tgid", "1").unwrap();
    inst.write("events/sched/sched_skip_vma_numa/enable", "1")
        .unwrap();

    let dir = std::env::temp_dir().join(format!("numatrace-test-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("pid");
    let gate = dir.join("gate");
    let _ = fs::remove_file(&gate);
    let c = CString::new(gate.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");

    let report = dir.join("report.json");
    let child = Command::new(numatrace_bin())
        .args(["stat", "--json", "--output"])
        .arg(&report)
        .arg("--")
        .arg(workload_bin())
        .arg("--pid-file")
        .arg(&pid_file)
        .arg("--gate")
        .arg(&gate)
        .args([
            "threads",
            "--threads",
            "4",
            "--mem-mib",
            "64",
            "--duration",
            "10s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn numatrace");

    assert!(
        wait_until(Duration::from_secs(30), || fs::read_to_string(&pid_file)
            .is_ok_and(|s| !s.trim().is_empty())),
        "the workload never wrote its pid"
    );
    let pid: u32 = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The independent count follows the same process and every thread it creates.
    inst.write("set_event_pid", &pid.to_string()).unwrap();
    fs::OpenOptions::new()
        .write(true)
        .open(&gate)
        .and_then(|mut f| f.write_all(b"g"))
        .expect("open the gate");

    let out = child.wait_with_output().unwrap();
    inst.write("tracing_on", "0").unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "numatrace stat failed: {stderr}");
    let v: serde_json::Value =
        serde_json::from_slice(&fs::read(&report).expect("report written")).expect("JSON");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("threads: 4 x 64 MiB"),
        "the workload's own output reaches stdout"
    );

    for cpu in fs::read_dir(inst.dir.join("per_cpu")).unwrap() {
        let stats = fs::read_to_string(cpu.unwrap().path().join("stats")).unwrap();
        assert!(
            stats.contains("overrun: 0"),
            "the reference tracefs buffer lost events: {stats}"
        );
    }
    let trace = inst.read("trace").unwrap();
    // Who (comm-pid) the reference saw, shown with a failure.
    let mut who: BTreeMap<&str, u64> = BTreeMap::new();
    for l in trace.lines().filter(|l| !l.starts_with('#')) {
        if let Some(task) = l.split_whitespace().next() {
            *who.entry(task).or_insert(0) += 1;
        }
    }
    println!("tracefs events by task: {who:?}");
    let reference = tracefs_counts(&trace, pid);
    let total: u64 = reference.values().sum();
    assert!(
        total > 0,
        "the kernel reported no skipped VMA for the workload: nothing to compare"
    );

    // Shown with the failure (and by `--show-output`): which tasks counted what.
    for t in v["tasks"].as_array().unwrap() {
        println!(
            "task {} {} exited={} skipped={}",
            t["pid"], t["comm"], t["exited"], t["skipped_vmas"]
        );
    }
    println!("kernel_seen={} dropped={}", v["kernel_seen"], v["dropped"]);
    let ours: BTreeMap<String, u64> =
        serde_json::from_value(v["totals"]["skipped_vmas"].clone()).unwrap();
    assert_eq!(ours, reference, "numatrace vs tracefs, per reason");
    assert_eq!(v["totals"]["skipped_vmas_total"], total);
    // Skipped program runs (a preemptible kernel: 7.x) are counted system-wide and may be of
    // any program; none of the skip_vma programs may have one, and nothing else may be lost.
    let d = &v["dropped"];
    println!("skipped program runs: {}", v["program_misses"]);
    assert_eq!(
        d["total"].as_u64().unwrap() - d["program_misses"].as_u64().unwrap(),
        0,
        "dropped: {d}"
    );
    for (prog, n) in v["program_misses"].as_object().unwrap() {
        assert!(!prog.contains("skip_vma"), "{prog} skipped {n} runs");
    }
    assert_eq!(v["kernel_seen"]["skip_vma"], total);
    // Each skip per VMA, by reason: from the tp_btf program's map where it is the hook's only
    // program (stat then asks for no skip records), else from the classic program's records.
    let mut by_vma: BTreeMap<String, u64> = BTreeMap::new();
    for p in v["processes"].as_array().unwrap() {
        for vma in p["vmas"].as_array().unwrap() {
            let skips = vma["skips"].as_object().cloned().unwrap_or_default();
            for (reason, n) in skips {
                *by_vma.entry(reason).or_insert(0) += n.as_u64().unwrap();
            }
        }
    }
    assert_eq!(
        by_vma, reference,
        "the VMA rows' skips vs tracefs, per reason"
    );
    let skip_hook = common::hook(&v, "sched:sched_skip_vma_numa");
    let records = if skip_hook["mechanism"] == "tp_btf" {
        0
    } else {
        total
    };
    assert_eq!(v["events_received"]["skip_vma"], records, "{skip_hook}");
    // Every counted task belongs to the workload.
    for t in v["tasks"].as_array().unwrap() {
        assert_eq!(t["tgid"], pid, "task outside the workload: {t}");
    }
    let _ = fs::remove_dir_all(&dir);
}

/// `sched_skip_cpuset_numa` lines of thread group `tgid` in a tracefs trace (the event's own
/// `tgid=` field).
fn cpuset_skips_in(trace: &str, tgid: u32) -> u64 {
    let want = format!(" tgid={tgid} ");
    trace
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("sched_skip_cpuset_numa:"))
        .filter(|l| l.contains(&want))
        .count() as u64
}

#[test]
fn cpuset_skip_counter_reads_the_workloads_lines() {
    let t = "# tracer: nop\n ntw-thread-0-8 (      7) [000] ..... 1.0: sched_skip_cpuset_numa: comm=ntw-thread-0 pid=8 tgid=7 ngid=0 mem_nodes_allowed=0\n sh-3 (      3) [000] ..... 1.1: sched_skip_cpuset_numa: comm=sh pid=3 tgid=3 ngid=0 mem_nodes_allowed=0\n ntw-thread-0-8 (      7) [001] ..... 1.2: sched_skip_vma_numa: numa_scan_offset=0 vm_start=1 vm_end=2 reason=shared_ro\n";
    assert_eq!(cpuset_skips_in(t, 7), 1);
    assert_eq!(cpuset_skips_in(t, 3), 1);
    assert_eq!(cpuset_skips_in(t, 70), 0);
}

/// 6.16+: a task whose cpuset allows one memory node is not scanned at all
/// (`task_numa_work` returns after `sched_skip_cpuset_numa`); numatrace's count of those skips
/// for a cgroup equals the tracepoint's own lines in an independent tracefs instance.
#[test]
fn cpuset_skips_equal_the_tracepoints_lines() {
    const TEST: &str = "cpuset_skips_equal_the_tracepoints_lines";
    if !common::is_root() {
        common::skip(TEST, "needs root; CI runs it as root");
        return;
    }
    if !tracefs_root()
        .join("events/sched/sched_skip_cpuset_numa")
        .is_dir()
    {
        common::skip(
            TEST,
            "no sched:sched_skip_cpuset_numa on this kernel (6.16+; the 7.x guest and newer \
             hosts have it)",
        );
        return;
    }
    let Some(mount) = fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|m| numatrace::sources::cgroups::cgroup2_mount(&m))
    else {
        common::skip(TEST, "no cgroup v2 mount");
        return;
    };
    let control = mount.join("cgroup.subtree_control");
    let had = fs::read_to_string(&control)
        .unwrap_or_default()
        .split_whitespace()
        .any(|c| c == "cpuset");
    if !had && fs::write(&control, "+cpuset").is_err() {
        common::skip(TEST, "the cpuset controller cannot be enabled here");
        return;
    }
    struct Cg {
        dir: std::path::PathBuf,
        control: std::path::PathBuf,
        had: bool,
    }
    impl Drop for Cg {
        fn drop(&mut self) {
            let _ = fs::remove_dir(&self.dir);
            if !self.had {
                let _ = fs::write(&self.control, "-cpuset");
            }
        }
    }
    let name = format!("numatrace-cpuset-{}", std::process::id());
    let cg = Cg {
        dir: mount.join(&name),
        control,
        had,
    };
    fs::create_dir_all(&cg.dir).unwrap();
    // One memory node: the first with memory.
    let node = fs::read_to_string("/sys/devices/system/node/has_memory")
        .ok()
        .and_then(|s| numatrace::kernel::tiering::parse_list(&s).first().copied())
        .unwrap_or(0);
    fs::write(cg.dir.join("cpuset.mems"), node.to_string()).unwrap();
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let (_tunables, notes) = numatrace::kernel::tunables::Tunables::set(&[
        ("scan_delay_ms", "100"),
        ("scan_period_min_ms", "100"),
    ]);
    println!("tunables: {notes:?}");

    let inst = TraceInstance::new("cpuset").expect("tracefs instance");
    inst.write("buffer_size_kb", "4096").unwrap();
    inst.write("options/record-tgid", "1").unwrap();
    inst.write("events/sched/sched_skip_cpuset_numa/enable", "1")
        .unwrap();
    let mut tgid = 0;
    let v = common::stat_window(&[], &["--cgroup", &format!("/{name}")], || {
        let mut w = Command::new("sh")
            .args([
                "-c",
                &format!(
                    "echo $$ > {} && exec {} threads --threads 1 --mem-mib 16 --duration 3s",
                    cg.dir.join("cgroup.procs").display(),
                    workload_bin()
                ),
            ])
            .spawn()
            .unwrap();
        // sh execs the workload: the same process.
        tgid = w.id();
        assert!(w.wait().unwrap().success());
    });
    inst.write("tracing_on", "0").unwrap();
    let trace = inst.read("trace").unwrap();
    let reference = cpuset_skips_in(&trace, tgid);
    let ours = v["totals"]["scan"]["cpuset_skips"].as_u64();
    println!(
        "cpuset.mems={node}: numatrace {ours:?} cpuset skips, tracefs {reference}; task_numa_work \
         calls {}",
        v["totals"]["scan"]["calls"]
    );
    assert!(
        reference > 0,
        "the workload in a one-node cpuset never reached task_numa_work"
    );
    assert_eq!(
        ours,
        Some(reference),
        "numatrace's cpuset skips against the tracepoint's lines"
    );
}
