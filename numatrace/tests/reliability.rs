//! The reliability suite: whatever way a long-running command ends — SIGINT, SIGTERM, SIGHUP,
//! SIGKILL or a panic — nothing of it stays in the kernel (checked in the kernel's own BPF
//! object lists with bpftool) and no sysctl or NUMA-balancing tunable is left changed; hostile
//! environments (tracefs not mounted, no BTF, a hook refused, debugfs locked, a read-only
//! cgroupfs, two instances at once) give one clear message while the rest keeps working.

mod common;

use std::{
    collections::BTreeSet,
    fs,
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use common::{numatrace_bin, skip, wait_until};

/// `bpftool -j KIND show`, or `None` when bpftool is missing.
fn bpftool(kind: &str) -> Option<Vec<serde_json::Value>> {
    let mut tries = 0;
    let out = loop {
        let out = Command::new("bpftool")
            .args(["-j", kind, "show"])
            .output()
            .ok()?;
        tries += 1;
        // bpftool lists ids, then opens each: one released in between (a command ending right
        // then) fails the whole listing. Another listing sees a settled state.
        if out.status.success() || tries == 5 {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        out.status.success(),
        "bpftool {kind} show (5 tries): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool JSON");
    Some(v.as_array().cloned().unwrap_or_default())
}

/// One of numatrace's program or map names as the kernel keeps it (cut to 15 characters).
fn ours(name: &str) -> bool {
    numatrace_common::PROGRAMS
        .iter()
        .chain(numatrace_common::MAPS)
        .any(|n| *n == name || (name.len() == 15 && n.starts_with(name)))
}

/// The kernel's BPF objects: programs and maps by id with their names, links by id with the
/// program they hold.
#[derive(Clone, Debug, Default)]
struct Objects {
    progs: Vec<(u64, String)>,
    maps: Vec<(u64, String)>,
    links: Vec<(u64, u64)>,
}

impl Objects {
    fn read() -> Option<Self> {
        let id = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0);
        let named = |v: &serde_json::Value| {
            (
                id(v, "id"),
                v["name"].as_str().unwrap_or_default().to_owned(),
            )
        };
        Some(Self {
            progs: bpftool("prog")?.iter().map(named).collect(),
            maps: bpftool("map")?.iter().map(named).collect(),
            links: bpftool("link")?
                .iter()
                .map(|l| (id(l, "id"), id(l, "prog_id")))
                .collect(),
        })
    }

    /// numatrace's objects in `self` that `before` did not have: its programs and maps by
    /// name, and links holding one of its programs.
    fn new_of_ours(&self, before: &Self) -> Vec<String> {
        let old_p: BTreeSet<u64> = before.progs.iter().map(|p| p.0).collect();
        let old_m: BTreeSet<u64> = before.maps.iter().map(|m| m.0).collect();
        let old_l: BTreeSet<u64> = before.links.iter().map(|l| l.0).collect();
        let progs: Vec<&(u64, String)> = self
            .progs
            .iter()
            .filter(|(id, n)| !old_p.contains(id) && ours(n))
            .collect();
        let prog_ids: BTreeSet<u64> = progs.iter().map(|p| p.0).collect();
        let mut out: Vec<String> = progs
            .iter()
            .map(|(id, n)| format!("prog {id} {n}"))
            .collect();
        out.extend(
            self.maps
                .iter()
                .filter(|(id, n)| !old_m.contains(id) && ours(n))
                .map(|(id, n)| format!("map {id} {n}")),
        );
        out.extend(
            self.links
                .iter()
                .filter(|(id, prog)| !old_l.contains(id) && prog_ids.contains(prog))
                .map(|(id, prog)| format!("link {id} -> prog {prog}")),
        );
        out
    }

    fn new_programs_of_ours(&self, before: &Self) -> usize {
        self.new_of_ours(before)
            .iter()
            .filter(|s| s.starts_with("prog "))
            .count()
    }
}

/// bpftool, or a loud skip (CI installs Debian's bpftool as root).
fn objects_or_skip(test: &str) -> Option<Objects> {
    let o = Objects::read();
    if o.is_none() {
        skip(
            test,
            "needs bpftool (Debian's bpftool; `cargo xtask test` installs it as root)",
        );
    }
    o
}

/// kernel.numa_balancing and every NUMA-balancing tunable (debugfs or the older sysctls).
fn tunables() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut read_dir = |dir: &str, prefix: &str| {
        if let Ok(d) = fs::read_dir(dir) {
            for e in d.filter_map(Result::ok) {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with(prefix)
                    && let Ok(v) = fs::read_to_string(e.path())
                {
                    out.push((e.path().display().to_string(), v.trim().to_owned()));
                }
            }
        }
    };
    read_dir("/proc/sys/kernel", "numa_balancing");
    read_dir("/sys/kernel/debug/sched/numa_balancing", "");
    out.sort();
    out
}

/// How a run ends.
#[derive(Clone, Copy, Debug)]
enum End {
    Signal(i32),
    Panic,
}

/// A command line of each long-running command; `record` writes into `dir`.
fn command_line(cmd: &str, dir: &std::path::Path) -> Vec<String> {
    let v: Vec<&str> = match cmd {
        "stat" => vec!["stat"],
        "top" => vec!["top", "-b", "-d", "1"],
        "serve" => vec!["serve", "--listen", "127.0.0.1:0"],
        "record" => vec!["record", "-o"],
        _ => unreachable!(),
    };
    let mut v: Vec<String> = v.into_iter().map(str::to_owned).collect();
    if cmd == "record" {
        v.push(dir.join("reliability.ntrace").display().to_string());
    }
    v
}

fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `cmd`, waits until its programs are attached (seen in the kernel's list), ends it by
/// `end`, and checks that it stopped on its own (or died as asked), that nothing of it is left
/// in the kernel and that no tunable changed. Returns a line for the table.
fn end_one(cmd: &str, end: End, before: &Objects) -> String {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempdir(cmd);
    let tun_before = tunables();
    let mut c = Command::new(numatrace_bin());
    c.args(command_line(cmd, &dir))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let End::Panic = end {
        c.env("NUMATRACE_TEST_PANIC", "attach");
    }
    let mut child = c.spawn().expect("numatrace");
    let stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let status = match end {
        End::Signal(sig) => {
            // Attached: our programs are in the kernel's list and their number has settled.
            let mut last = 0;
            let attached = wait_until(Duration::from_secs(60), || {
                let n = Objects::read().unwrap().new_programs_of_ours(before);
                let settled = n > 0 && n == last;
                last = n;
                settled
            });
            assert!(attached, "{cmd}: its programs never showed in bpftool");
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(child.id() as i32, sig) };
            wait_exit(&mut child, Duration::from_secs(20))
        }
        End::Panic => wait_exit(&mut child, Duration::from_secs(60)),
    };
    let err = err.join().unwrap();
    let status = status.unwrap_or_else(|| panic!("{cmd} {end:?}: still running; stderr:\n{err}"));
    match end {
        End::Signal(libc::SIGKILL) => {
            assert_eq!(status.signal(), Some(libc::SIGKILL), "{cmd}: {status}")
        }
        End::Signal(sig) => assert!(
            status.code() == Some(0),
            "{cmd} after signal {sig}: {status}; stderr:\n{err}"
        ),
        End::Panic => {
            assert_eq!(status.code(), Some(101), "{cmd} panic: {status}\n{err}");
            assert!(err.contains("forced panic"), "{cmd}: {err}");
        }
    }
    assert_nothing_left(before, &format!("{cmd} {end:?}"));
    assert_eq!(
        tunables(),
        tun_before,
        "{cmd} {end:?} changed a NUMA-balancing setting"
    );
    let _ = fs::remove_dir_all(&dir);
    format!("{cmd:<7} {end:<12} {status}: nothing left, tunables unchanged")
}

/// None of numatrace's objects created since `before` is in the kernel any more (it frees
/// programs and maps once the last reference goes, after RCU: allowed a few seconds).
fn assert_nothing_left(before: &Objects, what: &str) {
    let mut left = Vec::new();
    let gone = wait_until(Duration::from_secs(10), || {
        left = Objects::read().unwrap().new_of_ours(before);
        left.is_empty()
    });
    assert!(gone, "{what} left in the kernel: {left:?}");
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("numatrace-rel-{}-{tag}", std::process::id()));
    fs::create_dir_all(&d).unwrap();
    d
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            End::Signal(libc::SIGINT) => "SIGINT",
            End::Signal(libc::SIGTERM) => "SIGTERM",
            End::Signal(libc::SIGHUP) => "SIGHUP",
            End::Signal(libc::SIGKILL) => "SIGKILL",
            End::Signal(_) => "signal",
            End::Panic => "panic",
        };
        f.pad(s)
    }
}

#[test]
fn nothing_is_left_in_the_kernel_however_a_command_ends() {
    const TEST: &str = "nothing_is_left_in_the_kernel_however_a_command_ends";
    require_root!(TEST);
    let Some(before) = objects_or_skip(TEST) else {
        return;
    };
    let mut table = Vec::new();
    for cmd in ["stat", "top", "serve", "record"] {
        for end in [
            End::Signal(libc::SIGINT),
            End::Signal(libc::SIGTERM),
            End::Signal(libc::SIGHUP),
            End::Signal(libc::SIGKILL),
            End::Panic,
        ] {
            table.push(end_one(cmd, end, &before));
        }
    }
    println!("{}", table.join("\n"));
}

/// `unshare --mount` runs `script` in a private mount namespace (what it mounts or hides is
/// gone when it exits), with `$NT` the numatrace binary.
fn in_mount_ns(script: &str) -> std::process::Output {
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .env("NT", numatrace_bin())
        .output()
        .expect("unshare (util-linux)")
}

fn probes_json(out: &std::process::Output, what: &str) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{what}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn tracepoints_attached(p: &serde_json::Value) -> usize {
    p["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["kind"] == "tracepoint" && h["attached"] == true)
        .count()
}

/// Without tracefs mounted, numatrace mounts it (where it cannot, each tracepoint says why).
#[test]
fn tracefs_not_mounted_is_mounted() {
    const TEST: &str = "tracefs_not_mounted_is_mounted";
    require_root!(TEST);
    let out = in_mount_ns(
        "umount -l /sys/kernel/tracing 2>/dev/null; umount -l /sys/kernel/debug/tracing \
         2>/dev/null; grep -q ' tracefs ' /proc/self/mounts && exit 3; exec \"$NT\" probes --json",
    );
    let p = probes_json(&out, "probes without tracefs mounted");
    assert!(tracepoints_attached(&p) >= 5, "{p}");
}

/// Without readable kernel BTF: the tracepoints still attach; what needs BTF says so.
#[test]
fn no_btf_keeps_the_tracepoints() {
    const TEST: &str = "no_btf_keeps_the_tracepoints";
    require_root!(TEST);
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        skip(TEST, "this kernel has no BTF to hide");
        return;
    }
    let out =
        in_mount_ns("mount --bind /dev/null /sys/kernel/btf/vmlinux && exec \"$NT\" probes --json");
    let p = probes_json(&out, "probes without BTF");
    assert_eq!(p["kernel"]["btf_vmlinux"], true, "the file exists, empty");
    assert!(tracepoints_attached(&p) >= 5, "{p}");
    // Without BTF the classic skip program counts the hook (elsewhere the tp_btf one does):
    // the only run of the fallback on a kernel that has the tracepoint.
    let classic = common::hook(&p, "sched:sched_skip_vma_numa");
    if common::tracefs_root()
        .join("events/sched/sched_skip_vma_numa")
        .is_dir()
    {
        assert_eq!(classic["attached"], true, "{classic}");
        assert_eq!(classic["mechanism"], "tracepoint", "{classic}");
    }
    let gap = common::hook(&p, "tp_btf:sched_skip_vma_numa");
    if !gap["mechanism"].is_null() && gap["attached"] == false {
        assert!(!gap["reasons"].as_array().unwrap().is_empty(), "{gap}");
    }
    for h in p["hooks"].as_array().unwrap() {
        if h["attached"] == false {
            assert!(
                !h["reasons"].as_array().unwrap().is_empty(),
                "{} not attached without a reason",
                h["name"]
            );
        }
    }
}

/// One tracepoint whose format lacks a field it needs: that hook is refused with its reason,
/// every other attaches, and `stat` counts with the rest.
#[test]
fn one_refused_hook_leaves_the_rest_working() {
    const TEST: &str = "one_refused_hook_leaves_the_rest_working";
    require_root!(TEST);
    let fake = std::env::temp_dir().join(format!("numatrace-format-{}", std::process::id()));
    fs::write(
        &fake,
        "name: sched_move_numa\nID: 1\nformat:\n\tfield:int nothing;\toffset:8;\tsize:4;\tsigned:1;\n",
    )
    .unwrap();
    let out = in_mount_ns(&format!(
        "t=/sys/kernel/tracing; [ -d $t/events ] || mount -t tracefs nodev $t; \
         mount --bind {} $t/events/sched/sched_move_numa/format && \
         \"$NT\" probes --json > {}.probes && exec \"$NT\" stat -d 1s --json",
        fake.display(),
        fake.display()
    ));
    let p: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(format!("{}.probes", fake.display())).unwrap())
            .unwrap();
    let _ = fs::remove_file(&fake);
    let _ = fs::remove_file(format!("{}.probes", fake.display()));
    let mv = common::hook(&p, "sched:sched_move_numa");
    assert_eq!(mv["attached"], false, "{mv}");
    assert!(mv["reasons"].to_string().contains("lacks field"), "{mv}");
    assert!(tracepoints_attached(&p) >= 4, "{p}");
    let v = probes_json(&out, "stat with one hook refused");
    assert_eq!(v["schema"], "numatrace.stat/2");
}

/// debugfs locked (an empty read-only filesystem over it) and cgroupfs read-only: stat counts
/// as usual (it needs neither to write).
#[test]
fn locked_debugfs_and_read_only_cgroupfs_are_tolerated() {
    const TEST: &str = "locked_debugfs_and_read_only_cgroupfs_are_tolerated";
    require_root!(TEST);
    let out = in_mount_ns(
        "t=/sys/kernel/tracing; [ -d $t/events ] || mount -t tracefs nodev $t; \
         mount -t tmpfs -o ro,size=4k none /sys/kernel/debug && \
         mount -o remount,bind,ro /sys/fs/cgroup && exec \"$NT\" stat -d 1s --json",
    );
    let v = probes_json(&out, "stat with debugfs locked and cgroupfs read-only");
    assert_eq!(v["schema"], "numatrace.stat/2");
    assert!(
        String::from_utf8_lossy(&out.stderr).lines().count() <= 3,
        "more than a few lines of complaint: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two instances at once: each attaches its own programs, counts, and leaves nothing.
#[test]
fn two_instances_at_once() {
    const TEST: &str = "two_instances_at_once";
    require_root!(TEST);
    let Some(before) = objects_or_skip(TEST) else {
        return;
    };
    let spawn = || {
        Command::new(numatrace_bin())
            .args(["stat", "-d", "3s", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    for c in [a, b] {
        let out = c.wait_with_output().unwrap();
        let v = probes_json(&out, "one of two stats");
        assert_eq!(v["schema"], "numatrace.stat/2");
    }
    assert_nothing_left(&before, "two stats");
}
