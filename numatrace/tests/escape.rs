//! A traced process that names itself with escape sequences (issue 19): `stat`, `top -b` and
//! `record` + `report` print its name escaped, never the raw bytes; JSON keeps the exact name.

mod common;

use std::{
    ffi::CString,
    fs,
    io::{BufRead as _, BufReader, Write as _},
    os::unix::ffi::OsStrExt as _,
    path::Path,
    process::{Child, Command, Stdio},
    sync::MutexGuard,
    time::Duration,
};

use common::{Sysctl, numatrace, numatrace_bin, wait_until};

/// What the traced shell writes to /proc/self/comm: sets the terminal's title, rings its bell.
const NAME: &str = "\x1b]0;pwn\x07x";
/// How numatrace's text shows it.
const SHOWN: &str = "\\x1b]0;pwn\\x07x";

/// A shell that renames itself, then spins (builtins only: an exec would take the name back)
/// until the NUMA scanner has passed over it once (`mm->numa_scan_seq` in /proc/self/sched; at
/// most 20 s where that is missing), which skips some of its VMAs: that is what makes it a
/// task with something counted. Then it spins `linger` seconds more (for `top`, which shows
/// live tasks only). Run with `go`, it first waits for a line on that FIFO.
fn renamed_shell(linger: u32, go: Option<&Path>) -> Vec<String> {
    let wait = go.map_or(String::new(), |g| format!("read _ < '{}'; ", g.display()));
    let script = format!(
        "printf '\\033]0;pwn\\007x' > /proc/self/comm; {wait}\
         read u _ < /proc/uptime; end=$(( ${{u%.*}} + 20 )); seq=0; \
         while [ \"$seq\" -lt 1 ] && [ ${{u%.*}} -lt $end ]; do \
           while read -r k _ v; do [ \"$k\" = 'mm->numa_scan_seq' ] && seq=$v; done < /proc/self/sched; \
           read u _ < /proc/uptime; \
         done; \
         end=$(( ${{u%.*}} + {linger} )); \
         while [ ${{u%.*}} -lt $end ]; do read u _ < /proc/uptime; done"
    );
    vec!["sh".into(), "-c".into(), script]
}

/// The kernel.numa_balancing guards of parallel tests would undo each other: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn has_raw_controls(text: &[u8]) -> bool {
    text.iter().any(|&b| b == 0x1b || b == 0x07)
}

/// Root, NUMA balancing in this kernel, and the skip tracepoint (what a spinning shell shows
/// up through on a machine with one node); else a loud skip.
fn ready(test: &str) -> Option<(MutexGuard<'static, ()>, Sysctl)> {
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !common::is_root() {
        common::skip(
            test,
            "needs root (CAP_BPF + CAP_PERFMON) to load BPF programs; CI runs it as root",
        );
        return None;
    }
    if !Path::new("/proc/sys/kernel/numa_balancing").exists() {
        common::skip(
            test,
            "this kernel has no NUMA balancing (CONFIG_NUMA_BALANCING)",
        );
        return None;
    }
    if !common::tracefs_root()
        .join("events/sched/sched_skip_vma_numa")
        .is_dir()
    {
        common::skip(
            test,
            "this kernel has no sched:sched_skip_vma_numa (added in 6.7)",
        );
        return None;
    }
    let balancing = Sysctl::set("kernel.numa_balancing", "1").expect("enable NUMA balancing");
    Some((serial, balancing))
}

fn assert_escaped(what: &str, text: &[u8]) {
    let s = String::from_utf8_lossy(text);
    assert!(!has_raw_controls(text), "{what} has raw ESC/BEL: {s:?}");
    assert!(s.contains(SHOWN), "{what} lacks {SHOWN}:\n{s}");
}

#[test]
fn stat_prints_a_self_given_name_escaped() {
    let test = "stat_prints_a_self_given_name_escaped";
    let Some(_guards) = ready(test) else {
        return;
    };
    let mut args = vec!["stat".to_owned(), "--".into()];
    args.extend(renamed_shell(0, None));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = numatrace(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_escaped("stat's text", &out.stdout);
    assert!(!has_raw_controls(&out.stderr), "stat's stderr");
}

/// Kills a child this test started when the test ends, passed or not.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn top_batch_prints_a_self_given_name_escaped() {
    let test = "top_batch_prints_a_self_given_name_escaped";
    let Some(_guards) = ready(test) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("numatrace-escape-top-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let go = dir.join("go");
    let c = CString::new(go.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    // Renamed, then held at the FIFO: not scanned before top is attached.
    let cmd = renamed_shell(3, Some(&go));
    let shell = Reaped(
        Command::new(&cmd[0])
            .args(&cmd[1..])
            .stdout(Stdio::null())
            .spawn()
            .expect("sh"),
    );
    let pid = shell.0.id();
    assert!(
        wait_until(Duration::from_secs(5), || {
            fs::read(format!("/proc/{pid}/comm")).is_ok_and(|c| c.starts_with(NAME.as_bytes()))
        }),
        "the shell never renamed itself"
    );
    let mut top = Reaped(
        Command::new(numatrace_bin())
            .args([
                "top",
                "-b",
                "-d",
                "1s",
                "-n",
                "20",
                "--pid",
                &pid.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("numatrace top"),
    );
    let mut lines = BufReader::new(top.0.stdout.take().unwrap()).split(b'\n');
    let mut out = Vec::new();
    let mut released = false;
    for line in lines.by_ref() {
        let line = line.expect("top's output");
        out.extend_from_slice(&line);
        out.push(b'\n');
        // The first frame: attached. The shell goes on.
        if !released && line.starts_with(b"numatrace top - kernel") {
            fs::OpenOptions::new()
                .write(true)
                .open(&go)
                .and_then(|mut f| f.write_all(b"go\n"))
                .expect("release the shell");
            released = true;
        }
        if has_raw_controls(&line) || String::from_utf8_lossy(&line).contains(SHOWN) {
            break;
        }
    }
    // SAFETY: signals the child this test started.
    unsafe { libc::kill(top.0.id() as i32, libc::SIGTERM) };
    for line in lines {
        out.extend_from_slice(&line.expect("top's output"));
        out.push(b'\n');
    }
    let status = top.0.wait().unwrap();
    let mut stderr = String::new();
    let _ = std::io::Read::read_to_string(top.0.stderr.as_mut().unwrap(), &mut stderr);
    assert!(released, "top never drew a frame: {status}, {stderr}");
    assert_escaped("top -b", &out);
    drop(shell);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn record_and_report_print_a_self_given_name_escaped() {
    let test = "record_and_report_print_a_self_given_name_escaped";
    let Some(_guards) = ready(test) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("numatrace-escape-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let capture = dir.join("c.ntrace");
    let mut args = vec![
        "record".to_owned(),
        "-o".into(),
        capture.display().to_string(),
        "--".into(),
    ];
    args.extend(renamed_shell(0, None));
    let out = Command::new(numatrace_bin())
        .args(&args)
        .output()
        .expect("record");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = numatrace(&["report", capture.to_str().unwrap()]);
    assert!(
        text.status.success(),
        "{}",
        String::from_utf8_lossy(&text.stderr)
    );
    assert_escaped("report's text", &text.stdout);
    // JSON keeps the exact name (serde escapes it as JSON).
    let json = numatrace(&["report", "--format", "json", capture.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("report JSON");
    let tasks = v["stat"]["tasks"].as_array().expect("tasks");
    assert!(
        tasks.iter().any(|t| t["comm"] == NAME),
        "no task named {NAME:?} in {tasks:?}"
    );
    let _ = fs::remove_dir_all(&dir);
}
