//! Helpers for tests against the real kernel. Each guard restores the kernel state it changed.
#![allow(dead_code)]

pub mod serve;

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

/// The binaries under test; overridable because the QEMU guests keep them elsewhere.
pub fn numatrace_bin() -> String {
    std::env::var("NUMATRACE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_numatrace").into())
}

pub fn workload_bin() -> String {
    std::env::var("NUMATRACE_WORKLOAD_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_numatrace-workload").into())
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Says that a test is skipped and why, on stderr directly: libtest captures `eprintln!`, and
/// a skip must be seen.
pub fn skip(test: &str, why: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// Skips the calling test, loudly, when not root.
#[macro_export]
macro_rules! require_root {
    ($test:expr) => {
        if !common::is_root() {
            common::skip(
                $test,
                "needs root (CAP_BPF + CAP_PERFMON) to load BPF programs; CI runs it as root",
            );
            return;
        }
    };
}

/// A finished command's status, stdout and stderr, for an assertion's message.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn numatrace(args: &[&str]) -> Output {
    Command::new(numatrace_bin())
        .args(args)
        .output()
        .expect("running numatrace")
}

/// Runs numatrace-workload with `args` to its end; fails the test with its stderr if it fails.
pub fn workload_ok(args: &[&str]) -> String {
    let out = Command::new(workload_bin())
        .args(args)
        .output()
        .expect("running numatrace-workload");
    assert!(
        out.status.success(),
        "numatrace-workload {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `numatrace probes --json`: in the QEMU guests, the report /init saved once (every load of
/// the programs costs seconds under emulation; the report is the same for the same kernel).
pub fn probes() -> serde_json::Value {
    if let Ok(path) = std::env::var("NUMATRACE_PROBES_JSON") {
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        return serde_json::from_str(&text).expect("probes JSON");
    }
    serde_json::from_slice(&numatrace(&["probes", "--json"]).stdout).expect("probes JSON")
}

/// In the QEMU guests (`NUMATRACE_IN_GUEST`), skips a test the host run covers: one with no
/// path specific to a kernel line (so every guest runs the same set, in less time).
pub fn host_covers(test: &str) -> bool {
    let guest = std::env::var_os("NUMATRACE_IN_GUEST").is_some();
    if guest {
        skip(
            test,
            "covered by the host run (nothing in it depends on the kernel line)",
        );
    }
    guest
}

/// In the QEMU guests, skips a test that needs 2 nodes but nothing of a kernel line (ring
/// buffer overflow, pid reuse) on every line but the primary one (`NUMATRACE_PRIMARY_LINE`, set
/// by vm-test for 6.12): the lines share one boot each and the CI time.
pub fn other_line_covers(test: &str) -> bool {
    let other = std::env::var_os("NUMATRACE_IN_GUEST").is_some()
        && std::env::var_os("NUMATRACE_PRIMARY_LINE").is_none();
    if other {
        skip(
            test,
            "runs on the primary kernel line's guest only (nothing in it depends on the line)",
        );
    }
    other
}

/// The hook called `name` in a probes report.
pub fn hook<'a>(probes: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    probes["hooks"]
        .as_array()
        .expect("hooks")
        .iter()
        .find(|h| h["name"] == name)
        .unwrap_or_else(|| panic!("probes does not list {name}"))
}

/// The hook called `name` is attached on this kernel.
pub fn attached(probes: &serde_json::Value, name: &str) -> bool {
    hook(probes, name)["attached"] == true
}

/// Sets a sysctl under /proc/sys and puts the old value back on drop.
pub struct Sysctl {
    path: PathBuf,
    old: String,
}

impl Sysctl {
    pub fn set(name: &str, value: &str) -> std::io::Result<Self> {
        let path = Path::new("/proc/sys").join(name.replace('.', "/"));
        let old = fs::read_to_string(&path)?;
        fs::write(&path, value)?;
        Ok(Self { path, old })
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = fs::write(&self.path, self.old.trim());
    }
}

pub fn tracefs_root() -> PathBuf {
    for c in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if Path::new(c).join("events").is_dir() {
            return c.into();
        }
    }
    // numatrace mounts it when missing; do the same so the test does not depend on order.
    let _ = Command::new("mount")
        .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
        .status();
    "/sys/kernel/tracing".into()
}

/// A private tracefs instance (its own buffer and event switches), removed on drop.
pub struct TraceInstance {
    pub dir: PathBuf,
}

impl TraceInstance {
    pub fn new(tag: &str) -> std::io::Result<Self> {
        let dir = tracefs_root()
            .join("instances")
            .join(format!("numatrace-test-{tag}-{}", std::process::id()));
        fs::create_dir(&dir)?;
        Ok(Self { dir })
    }

    pub fn write(&self, rel: &str, value: &str) -> std::io::Result<()> {
        fs::write(self.dir.join(rel), value)
    }

    pub fn read(&self, rel: &str) -> std::io::Result<String> {
        fs::read_to_string(self.dir.join(rel))
    }
}

impl Drop for TraceInstance {
    fn drop(&mut self) {
        let _ = fs::write(self.dir.join("tracing_on"), "0");
        let _ = fs::write(self.dir.join("events/enable"), "0");
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Polls `f` every 50 ms until it is true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// How many of numatrace's tracepoint programs attach on this kernel (the tracepoints it has).
pub fn expected_tracepoint_programs() -> usize {
    let root = tracefs_root();
    [
        "sched/sched_skip_vma_numa",
        "sched/sched_move_numa",
        "sched/sched_swap_numa",
        "sched/sched_stick_numa",
        "migrate/mm_migrate_pages",
        "sched/sched_process_fork",
        "sched/sched_process_exit",
        "sched/sched_skip_cpuset_numa",
    ]
    .iter()
    .filter(|e| root.join("events").join(e).is_dir())
    .count()
}
/// Whether every numatrace program is gone within 10 s: the kernel frees an exited process's
/// programs after a grace period (a tp_btf program's trampoline link takes longest).
pub fn programs_released() -> bool {
    wait_until(Duration::from_secs(10), || {
        numatrace_programs_loaded().is_empty()
    })
}

/// Names (as the kernel keeps them: 15 characters) of loaded programs that are numatrace's
/// tracepoint programs: one per tracepoint (sched_skip_vma_numa's is the tp_btf program where
/// the kernel has BTF, the classic one otherwise).
pub fn numatrace_programs_loaded() -> Vec<String> {
    const OURS: [&str; 9] = [
        numatrace_common::PROG_SKIP_VMA,
        numatrace_common::PROG_BTF_SKIP_VMA,
        numatrace_common::PROG_SKIP_CPUSET,
        numatrace_common::PROG_MOVE,
        numatrace_common::PROG_SWAP,
        numatrace_common::PROG_STICK,
        numatrace_common::PROG_MIGRATE,
        numatrace_common::PROG_FORK,
        numatrace_common::PROG_EXIT,
    ];
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter_map(|p| p.name_as_str().map(str::to_owned))
        .filter(|n| {
            OURS.iter()
                .any(|o| o.starts_with(n.as_str()) && n.len() >= 8)
        })
        .collect()
}

/// Runs `numatrace [global...] stat [stat_args...] --json` system-wide around `during`: `during`
/// starts once numatrace says it is counting (every hook attached, the first snapshot taken),
/// and numatrace is stopped with SIGINT when it returns. Returns the report.
pub fn stat_window(
    global: &[&str],
    stat_args: &[&str],
    during: impl FnOnce(),
) -> serde_json::Value {
    stat_window_pid(global, stat_args, |_| during())
}

/// Waits until a numatrace started with `stderr(Stdio::piped())` says it is counting; its
/// stderr is echoed meanwhile and afterwards.
pub fn wait_until_counting(child: &mut std::process::Child) {
    use std::io::BufRead;
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
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
}

/// [`stat_window`], with numatrace's pid handed to `during`.
pub fn stat_window_pid(
    global: &[&str],
    stat_args: &[&str],
    during: impl FnOnce(u32),
) -> serde_json::Value {
    use std::process::Stdio;
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let report = std::env::temp_dir().join(format!(
        "numatrace-window-{}-{}.json",
        std::process::id(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let mut stat = Interrupted(Some(
        Command::new(numatrace_bin())
            .args(global)
            .args(["stat", "--json", "--output"])
            .arg(&report)
            .args(stat_args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    wait_until_counting(stat.child());
    during(stat.child().id());
    let done = stat.interrupt();
    assert!(done.is_some_and(|s| s.success()), "numatrace stat failed");
    let v = serde_json::from_slice(&fs::read(&report).unwrap()).unwrap();
    let _ = fs::remove_file(&report);
    v
}

/// A numatrace child that is interrupted (SIGINT, as a user's Ctrl-C) and waited for however
/// the test ends: one that panics midway leaves nothing attached in the kernel nor a
/// process running after it.
pub struct Interrupted(pub Option<std::process::Child>);

/// How long an interrupted numatrace has to detach and exit before it is killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(120);

impl Interrupted {
    pub fn child(&mut self) -> &mut std::process::Child {
        self.0.as_mut().expect("not interrupted yet")
    }

    /// SIGINT, then the exit status (`None`: it had to be killed, or could not be waited for).
    pub fn interrupt(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.0.take()?;
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        wait_or_kill(&mut c, INTERRUPT_GRACE)
    }
}

/// `child`'s exit status once it exits within `timeout`; else (or if it cannot be waited for)
/// it is killed and reaped, and `None`.
pub fn wait_or_kill(
    child: &mut std::process::Child,
    timeout: Duration,
) -> Option<std::process::ExitStatus> {
    let mut status = None;
    wait_until(timeout, || match child.try_wait() {
        Ok(s) => {
            status = s;
            s.is_some()
        }
        Err(_) => true,
    });
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    status
}

impl Drop for Interrupted {
    fn drop(&mut self) {
        self.interrupt();
    }
}

/// The number of NUMA nodes sysfs lists.
pub fn numa_nodes() -> usize {
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

/// The probes report when this is a 2+-node machine where task_numa_fault is hooked (the QEMU
/// guests of `cargo xtask vm-test`); otherwise says why `test` skips and returns None.
pub fn migrating_guest(test: &str) -> Option<serde_json::Value> {
    if numa_nodes() < 2 {
        skip(
            test,
            "needs 2+ NUMA nodes (runs in the QEMU guests of `cargo xtask vm-test`)",
        );
        return None;
    }
    let probes = probes();
    if !attached(&probes, "task_numa_fault") {
        skip(test, "task_numa_fault cannot be hooked here");
        return None;
    }
    Some(probes)
}

/// A `numatrace-workload threads` run (two threads over `mem_mib` MiB for `duration`) that a
/// test stops (SIGSTOP) to end its activity at a known moment; continued and killed on drop,
/// whatever the test's outcome.
pub struct Stoppable(std::process::Child);

impl Stoppable {
    pub fn threads(mem_mib: &str, duration: &str) -> Self {
        Self(
            Command::new(workload_bin())
                .args([
                    "threads",
                    "--threads",
                    "2",
                    "--mem-mib",
                    mem_mib,
                    "--duration",
                    duration,
                ])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    pub fn stop(&self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGSTOP) };
    }
}

impl Drop for Stoppable {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGCONT) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
