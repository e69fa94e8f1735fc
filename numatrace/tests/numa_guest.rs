//! On a kernel with 2+ NUMA nodes and hookable functions (the QEMU guests of `xtask vm-test`):
//! numatrace's counts from the function hooks agree with the kernel's own /proc/vmstat counters
//! over the same window, and a misplaced workload shows migrations with latencies.

mod common;

use std::{fs, process::Command};

use common::{Sysctl, numatrace, numatrace_bin, workload_bin};

/// Skips (loudly) unless this machine has the 2+ NUMA nodes the test needs.
fn has_numa_nodes(test: &str) -> bool {
    let ok = common::numa_nodes() >= 2;
    if !ok {
        common::skip(
            test,
            "needs 2+ NUMA nodes (runs in the QEMU guests of `cargo xtask vm-test`)",
        );
    }
    ok
}

/// Runs `numatrace [global...] stat` system-wide around the workloads (run at once), so both
/// count the same window: the workloads start once numatrace says it is counting.
fn stat_around(global: &[&str], workloads: &[&[&str]]) -> serde_json::Value {
    common::stat_window(global, &[], || {
        let children: Vec<_> = workloads
            .iter()
            .map(|w| {
                Command::new(workload_bin())
                    .args(*w)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            println!("{}", String::from_utf8_lossy(&out.stdout).trim());
        }
    })
}

/// Every thread of this test process (the test's, the harness's own), and so every process
/// they start, confined to node `node`'s CPUs; their earlier affinities come back when dropped.
struct OnNode(Vec<(libc::pid_t, libc::cpu_set_t)>);

impl OnNode {
    fn confine(node: u32) -> Self {
        let list = fs::read_to_string(format!("/sys/devices/system/node/node{node}/cpulist"))
            .unwrap_or_else(|e| panic!("node {node}'s CPUs: {e}"));
        let cpus = numatrace::kernel::tiering::parse_list(&list);
        assert!(!cpus.is_empty(), "node {node} has no CPU ({})", list.trim());
        // SAFETY: cpu_set_t is plain data; CPU_SET indexes its array (a CPU past it panics).
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for cpu in cpus {
            // SAFETY: as above.
            unsafe { libc::CPU_SET(cpu as usize, &mut set) };
        }
        let mut guard = Self(Vec::new());
        for task in fs::read_dir("/proc/self/task").unwrap() {
            let tid: libc::pid_t = task.unwrap().file_name().to_str().unwrap().parse().unwrap();
            // SAFETY: the calls only read and write the sets given.
            unsafe {
                let mut before: libc::cpu_set_t = std::mem::zeroed();
                assert_eq!(
                    libc::sched_getaffinity(tid, size_of::<libc::cpu_set_t>(), &mut before),
                    0
                );
                assert_eq!(
                    libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), &set),
                    0,
                    "confining thread {tid} to node {node}'s CPUs ({})",
                    list.trim()
                );
                guard.0.push((tid, before));
            }
        }
        guard
    }
}

impl Drop for OnNode {
    fn drop(&mut self) {
        for (tid, before) in &self.0 {
            // SAFETY: as above.
            unsafe { libc::sched_setaffinity(*tid, size_of::<libc::cpu_set_t>(), before) };
        }
    }
}

fn n(x: &serde_json::Value) -> u64 {
    x.as_u64().unwrap_or(0)
}

/// A counter of numatrace's traced totals plus its own (`self`) activity.
fn ours(v: &serde_json::Value, path: &[&str]) -> u64 {
    let get =
        |root: &serde_json::Value| path.iter().fold(root, |x, k| &x[*k]).as_u64().unwrap_or(0);
    get(&v["totals"]) + get(&v["self"])
}

/// numatrace's totals plus its own activity against the kernel's counters over the same window.
fn agrees_with_vmstat(how: &str, v: &serde_json::Value) {
    let (t, seen, dropped) = (&v["totals"], &v["kernel_seen"], &v["dropped"]);
    // A program run the kernel skipped (already running on the CPU: on a preemptible kernel,
    // preempted mid-run while another task called the hooked function there) is reported by
    // program; what it would have counted is missing everywhere. Nothing else may be lost.
    let misses = &v["program_misses"];
    println!("programs' skipped runs ({how}): {misses}");
    let missed = |progs: &[&str]| progs.iter().map(|p| n(&misses[*p])).sum::<u64>();
    // A skipped kretprobe run leaves its call's entry in flight, which the task's next call
    // counts as `inflight_lost`: the same loss, seen twice. Any other unmatched pair is a
    // return the kernel did not report, and fails.
    let kretprobe_misses = misses.as_object().map_or(0, |m| {
        m.iter()
            .filter(|(p, _)| p.starts_with("kretprobe_"))
            .map(|(_, c)| n(c))
            .sum::<u64>()
    });
    let inflight_lost = n(&dropped["inflight_lost"]);
    assert!(
        inflight_lost <= kretprobe_misses,
        "{how}: {inflight_lost} calls without their return, {kretprobe_misses} skipped kretprobe runs: {dropped}"
    );
    assert_eq!(
        n(&dropped["total"]) - n(&dropped["program_misses"]) - inflight_lost,
        0,
        "{dropped}"
    );
    let fault_misses = missed(&["fentry_task_numa_fault", "kprobe_task_numa_fault"]);
    let prot_misses = missed(&["fexit_change_prot_numa", "kretprobe_change_prot_numa"]);
    // Per task (map) and per CPU (kernel counters) are two independent tallies of the same
    // calls (both without numatrace itself): with nothing dropped they are equal.
    let traced = |path: &[&str]| n(path.iter().fold(t, |x, k| &x[*k]));
    // The same name in both: totals.X.Y against kernel_seen.X.Y.
    for path in [
        &["scan", "pte_updates"][..],
        &["hint_faults", "faults"],
        &["hint_faults", "local"],
        &["hint_faults", "migrated_pages"],
        &["migrations", "attempts"],
    ] {
        assert_eq!(
            traced(path),
            n(path.iter().fold(seen, |x, k| &x[*k])),
            "{how}: {path:?} in totals and kernel_seen"
        );
    }
    // change_prot_numa's return value is exactly what it adds to numa_pte_updates; a skipped
    // run loses a whole VMA's worth, so only the upper bound holds then.
    let pte = ours(v, &["scan", "pte_updates"]);
    if prot_misses == 0 {
        bracketed(&format!("PTE updates ({how})"), pte, v, "numa_pte_updates");
    } else {
        bracketed_with(
            &format!("PTE updates ({how}, {prot_misses} change_prot_numa runs skipped)"),
            pte,
            u64::MAX - pte,
            (0, 0),
            v,
            "numa_pte_updates",
        );
    }
    // A hint fault whose migration failed and whose PTE/PMD then changed returns without
    // task_numa_fault (mm/memory.c do_numa_page, mm/huge_memory.c do_huge_pmd_numa_page:
    // `if (!pte_same(...)) return 0;` after the failed migrate_misplaced_folio), though the
    // kernel counted it in numa_hint_faults: at most one per failed migration, which
    // numatrace counts from migrate_misplaced's return. And one per skipped run of the
    // task_numa_fault program (seen on 7.3: 19 skipped runs, exactly the kernel's 8 240 - 8 221).
    let failed =
        ours(v, &["migrations", "attempts"]) - ours(v, &["migrations", "succeeded"]) + fault_misses;
    // The kernel counts a hint fault before migrating its page, numatrace at task_numa_fault
    // after: one whose migration spans a window edge is in flight there (reported).
    let flight = &v["faults_in_flight"];
    bracketed_with(
        &format!("hint faults ({how})"),
        ours(v, &["hint_faults", "faults"]),
        failed,
        (n(&flight["start"]), n(&flight["end"])),
        v,
        "numa_hint_faults",
    );
    // A local fault migrates nothing (default policy), so it is never in flight.
    bracketed_with(
        &format!("local hint faults ({how})"),
        ours(v, &["hint_faults", "local"]),
        failed,
        (0, 0),
        v,
        "numa_hint_faults_local",
    );
    // A skipped task_numa_fault run hides its pages: at most a PMD's worth (512 on x86-64).
    // The kernel counts them inside migrate_misplaced, numatrace at task_numa_fault after: a
    // fault in flight at an edge holds at most as many.
    bracketed_with(
        &format!("pages migrated ({how})"),
        ours(v, &["hint_faults", "migrated_pages"]),
        fault_misses * 512,
        (n(&flight["start"]) * 512, n(&flight["end"]) * 512),
        v,
        "numa_pages_migrated",
    );
    assert!(
        n(&t["scan"]["calls"]) > 0,
        "task_numa_work never ran ({how})"
    );
    assert!(
        n(&t["migrations"]["attempts"]) > 0,
        "migrate_misplaced never called ({how})"
    );
    // Per node: the hint faults of the traced tasks, and the pages they migrated.
    let nodes = v["nodes"].as_array().unwrap();
    assert!(nodes.len() >= 2, "{how}: nodes {nodes:?}");
    let sum = |k: &str| nodes.iter().map(|x| n(&x[k])).sum::<u64>();
    assert_eq!(
        sum("hint_faults"),
        n(&t["hint_faults"]["faults"]),
        "{how}: per-node hint faults"
    );
    assert_eq!(
        sum("hint_faults_local"),
        n(&t["hint_faults"]["local"]),
        "{how}: per-node local"
    );
    let migrated = n(&t["hint_faults"]["migrated_pages"]);
    assert_eq!(
        sum("pages_migrated_in"),
        migrated,
        "{how}: pages migrated into nodes"
    );
    let matrix_pages: u64 = v["node_matrix"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| n(&f["pages"]))
        .sum();
    assert_eq!(matrix_pages, migrated, "{how}: node matrix pages");
    // Every successful migration call is in the node matrix (an unknown source under
    // `src: null`), none left out.
    let matrix_migrated: u64 = v["node_matrix"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| n(&f["migrated"]))
        .sum();
    assert_eq!(
        matrix_migrated,
        n(&t["migrations"]["succeeded"]),
        "{how}: node matrix migrations"
    );
}

/// Every function hook whose symbol the kernel has is attached (by `mechanism`, if given).
fn all_function_hooks_attached(probes: &serde_json::Value, mechanism: Option<&str>) {
    for h in probes["hooks"].as_array().unwrap() {
        if h["kind"] == "function" && !h["symbol"].is_null() {
            assert!(
                h["attached"] == true && mechanism.is_none_or(|m| h["mechanism"] == m),
                "{} not attached (by {mechanism:?}): {h}",
                h["name"]
            );
        }
    }
}

/// The kernel's own count over the window lies in [vmstat_delta_min, vmstat_delta] (each end
/// of the window reads /proc/vmstat just before and just after the kernel maps), and so must
/// numatrace's, numatrace itself included: exact, no tolerance.
fn bracketed(what: &str, ours: u64, v: &serde_json::Value, counter: &str) {
    bracketed_with(what, ours, 0, (0, 0), v, counter);
}

/// [`bracketed`], where the kernel may count up to `unreported` events numatrace cannot see
/// (`ours` ≤ the kernel's count ≤ `ours + unreported`), and `(start, end)` events were in
/// flight at the window's edges: counted by the kernel before numatrace counts them.
fn bracketed_with(
    what: &str,
    ours: u64,
    unreported: u64,
    (start, end): (u64, u64),
    v: &serde_json::Value,
    counter: &str,
) {
    let (lo, hi) = (
        n(&v["vmstat_delta_min"][counter]),
        n(&v["vmstat_delta"][counter]),
    );
    println!(
        "{what}: numatrace {ours} (self {}, at most {unreported} unreported, in flight {start} \
         at the start and {end} at the end), /proc/vmstat in [{lo}, {hi}]",
        v["self"]["hint_faults"]["faults"]
    );
    assert!(
        ours <= hi + start && ours + unreported + end >= lo,
        "{what}: numatrace {ours} (+ at most {unreported} unreported, {start} and {end} in \
         flight) outside the kernel's [{lo}, {hi}]"
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
    // fentry where the kernel takes it, else the kprobe (5.10 refuses fentry on
    // do_huge_pmd_numa_page): every function the kernel has is hooked.
    all_function_hooks_attached(&probes, None);
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    // numatrace, this test process and the workloads run on node 0's CPUs (the workloads
    // leave only to first-touch their buffers on node 1, bound there): a task of theirs on
    // node 1's CPU would pull pages from node 0 (0 -> 1) and the node matrix could not be
    // judged exactly. (The guest runs nothing else with memory: its init waits.)
    let on_node0 = OnNode::confine(0);
    // 4K pages and THPs at once (before 5.14 a THP migrates by another path).
    let v = stat_around(
        &[],
        &[
            &["migrate", "--mem-mib", "32", "--duration", "10s"],
            &["migrate", "--mem-mib", "32", "--duration", "10s", "--thp"],
        ],
    );
    drop(on_node0);
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
            .any(|f| f["src"] == 1 && f["dst"] == 0 && n(&f["migrated"]) > 0 && n(&f["pages"]) > 0),
        "no 1->0 migrations (calls and pages) in the node matrix: {flows:?}"
    );
    // And nothing else: each source node is computed from the page pointer and the kernel's
    // vmemmap (x86-64: vmemmap_base; arm64: VMCOREINFO's VMEMMAP_START and PHYS_OFFSET, 48- or
    // 52-bit VA), and every page the workload placed was on node 1 after its first touch (the
    // workload checks that with move_pages(2) and fails otherwise). A wrong vmemmap gives an
    // unknown (null) or wrong source here. No other move can happen: nothing but the workloads
    // runs on node 1 (see `OnNode` above), and while they do they are bound to node 1, where
    // the scanner leaves a task alone.
    for f in flows
        .iter()
        .filter(|f| n(&f["migrated"]) + n(&f["not_migrated"]) > 0)
    {
        assert!(
            f["src"] == 1 && f["dst"] == 0,
            "a migration that is not the buffer's 1 -> 0 (it placed its pages on node 1): \
             {flows:?}"
        );
    }
    let nodes = v["nodes"].as_array().unwrap();
    assert!(
        n(&nodes[0]["pages_migrated_in"]) > 0 && n(&nodes[1]["pages_migrated_out"]) > 0,
        "{nodes:?}"
    );
    // The workload's thread ran on node 0 last and was followed there.
    let task = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["comm"] == "numatrace-workl")
        .expect("the workload's task is listed");
    assert_eq!(task["last_node"], 0, "{task}");
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
    // On a kernel that preempts kernel code the default plan is already kprobes: the window of
    // function_hooks_agree_with_vmstat was this one.
    let default = common::probes();
    let functions: Vec<&serde_json::Value> = default["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["kind"] == "function" && h["attached"] == true)
        .collect();
    if !functions.is_empty() && functions.iter().all(|h| h["mechanism"] == "kprobe") {
        common::skip(
            TEST,
            "the default plan hooks every function by kprobe on this kernel (preemptible): \
             function_hooks_agree_with_vmstat ran this window",
        );
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
    all_function_hooks_attached(&probes, Some("kprobe"));
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let v = stat_around(
        &["--no-fentry"],
        &[
            &["migrate", "--mem-mib", "16", "--duration", "8s"],
            &["migrate", "--mem-mib", "16", "--duration", "8s", "--thp"],
        ],
    );
    agrees_with_vmstat("kprobe", &v);
}

/// Runs `true` to its end; its pid (one step of the pid allocator).
fn spawn_true() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let p = c.id();
    c.wait().unwrap();
    p
}

/// Runs a small migrating process to its end; its pid.
fn migrate_once() -> u32 {
    let mut c = Command::new(workload_bin())
        .args(["migrate", "--mem-mib", "16", "--duration", "4s"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = c.id();
    assert!(c.wait().unwrap().success());
    pid
}

/// Pid reuse: with a small pid_max the allocator wraps, and a second migrating process gets the
/// pid of a first one that has exited. numatrace must show two tasks (told apart by when their
/// kernel entries were created), each with its own hint faults — never one merged task.
#[test]
fn a_reused_pid_is_two_tasks_never_one() {
    const TEST: &str = "a_reused_pid_is_two_tasks_never_one";
    require_root!(TEST);
    if common::other_line_covers(TEST) {
        return;
    }
    if !has_numa_nodes(TEST) {
        return;
    }
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    // Scan soon and often, so that each 4-second process takes hint faults.
    let (_tunables, notes) = ::numatrace::kernel::tunables::Tunables::set(&[
        ("scan_delay_ms", "100"),
        ("scan_period_min_ms", "100"),
    ]);
    println!("tunables: {notes:?}");
    let _pid_max = Sysctl::set("kernel.pid_max", "4096").unwrap();
    let mut reused = None;
    let mut tried = Vec::new();
    let v = common::stat_window(&[], &[], || {
        // Pids below 300 (RESERVED_PIDS) are never handed out again after a wrap: move the
        // allocator past them first (a quiet guest's pids are still low).
        for _ in 0..1_000 {
            if spawn_true() >= 400 {
                break;
            }
        }
        let first = migrate_once();
        for _ in 0..3 {
            let mut last = 0;
            // Walk the allocator round to just before `first` (it hands out pids in order).
            for _ in 0..10_000 {
                let p = spawn_true();
                last = p;
                if p + 1 == first {
                    break;
                }
            }
            let second = migrate_once();
            tried.push((first, last, second));
            if second == first {
                reused = Some(first);
                break;
            }
        }
    });
    let Some(pid) = reused else {
        common::skip(
            TEST,
            format!(
                "the second process never got the first one's pid: (first, last spawned before, second) {tried:?}"
            ),
        );
        return;
    };
    let tasks: Vec<&serde_json::Value> = v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["pid"] == pid)
        .collect();
    println!("pid {pid}: {tasks:#?}");
    assert_eq!(tasks.len(), 2, "pid {pid} reused: not two tasks");
    assert_ne!(tasks[0]["first_ns"], tasks[1]["first_ns"]);
    for t in &tasks {
        assert!(
            n(&t["hint_faults"]["faults"]) > 0,
            "a task of pid {pid} without its own hint faults: {t}"
        );
    }
}
