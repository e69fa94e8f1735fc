//! However numatrace ends, nothing of it stays attached in the kernel; commands are run to the
//! end and their exit status passed on.

mod common;

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use common::{numatrace, numatrace_bin, numatrace_programs_loaded, wait_until};

fn assert_none_loaded_before() {
    // An earlier test's process may have exited a moment ago.
    common::programs_released();
    let before = numatrace_programs_loaded();
    assert!(
        before.is_empty(),
        "numatrace programs already loaded (another numatrace running?): {before:?}"
    );
}

/// A running `numatrace stat`, killed if the test fails before it ends it.
struct Running {
    child: Option<std::process::Child>,
    stderr: std::path::PathBuf,
}

impl Running {
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn signal(&self, sig: i32) {
        let pid = self.child.as_ref().unwrap().id();
        // SAFETY: kill(2) on our own, not yet reaped, child.
        unsafe { libc::kill(pid as i32, sig) };
    }

    fn wait(mut self) -> std::process::Output {
        let out = self.child.take().unwrap().wait_with_output().unwrap();
        std::process::Output {
            stderr: self.stderr().into_bytes(),
            ..out
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.stderr);
    }
}

fn start_stat(extra: &[&str]) -> Running {
    // stderr goes to a file: an unread pipe could stall numatrace.
    let stderr =
        std::env::temp_dir().join(format!("numatrace-lifecycle-{}.err", std::process::id()));
    let child = Command::new(numatrace_bin())
        .arg("stat")
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("spawn numatrace");
    let running = Running {
        child: Some(child),
        stderr,
    };
    let want = common::expected_tracepoint_programs();
    assert!(
        wait_until(Duration::from_secs(90), || numatrace_programs_loaded()
            .len()
            >= want),
        "numatrace's {want} tracepoint programs never showed up as loaded (loaded: {:?}); its stderr: {}",
        numatrace_programs_loaded(),
        running.stderr()
    );
    running
}

fn assert_all_released() {
    assert!(
        common::programs_released(),
        "still loaded after numatrace ended: {:?}",
        numatrace_programs_loaded()
    );
}

#[test]
fn sigkill_leaves_nothing_attached() {
    require_root!("sigkill_leaves_nothing_attached");
    assert_none_loaded_before();
    let running = start_stat(&[]);
    running.signal(libc::SIGKILL);
    let out = running.wait();
    assert!(!out.status.success());
    assert_all_released();
}

#[test]
fn sigint_prints_the_summary_and_detaches() {
    require_root!("sigint_prints_the_summary_and_detaches");
    assert_none_loaded_before();
    let running = start_stat(&["--json"]);
    running.signal(libc::SIGINT);
    let out = running.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "numatrace.stat/2");
    assert_eq!(v["window"]["scope"], "system");
    assert_all_released();
}

#[test]
fn sigterm_also_detaches() {
    require_root!("sigterm_also_detaches");
    assert_none_loaded_before();
    let running = start_stat(&[]);
    running.signal(libc::SIGTERM);
    let out = running.wait();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("numatrace stat:"));
    assert_all_released();
}

#[test]
fn duration_window_ends_by_itself() {
    require_root!("duration_window_ends_by_itself");
    let out = numatrace(&["stat", "--duration", "1s", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["window"]["duration_s"].as_f64().unwrap() >= 1.0);
    assert_all_released();
}

#[test]
fn command_exit_status_is_passed_on() {
    require_root!("command_exit_status_is_passed_on");
    let out = numatrace(&["stat", "--json", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["window"]["exit_code"], 3);
    assert_eq!(v["window"]["command"][0], "sh");

    let out = numatrace(&["stat", "--", "/nonexistent/command"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("command not found"));
    assert_all_released();
}

#[test]
fn pid_scope_ends_when_the_process_exits() {
    require_root!("pid_scope_ends_when_the_process_exits");
    let mut sleeper = Command::new("sleep").arg("2").spawn().unwrap();
    let out = numatrace(&["stat", "--json", "--pid", &sleeper.id().to_string()]);
    sleeper.wait().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["window"]["scope"], "pid");
    assert!(v["window"]["duration_s"].as_f64().unwrap() < 30.0);
}

#[test]
fn bpf_log_forwards_the_kernel_programs_messages() {
    require_root!("bpf_log_forwards_the_kernel_programs_messages");
    let out = numatrace(&[
        "--log-level",
        "debug",
        "stat",
        "--bpf-log",
        "--",
        "sh",
        "-c",
        "sleep 0.2 & wait",
    ]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The fork of `sleep` by the traced shell is logged by tp_sched_process_fork.
    assert!(stderr.contains("following child pid="), "{stderr}");
}
