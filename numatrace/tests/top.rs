//! `numatrace top` as a person uses it: in a real terminal (tmux), in a pipe (`-b`), and as
//! JSON lines while a migrating workload runs (in the 2-node guests).

mod common;

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::{Stoppable, Sysctl, numatrace_bin, workload_bin};

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux").args(args).output().expect("tmux");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A detached tmux session with a plain shell, killed on drop.
struct Session(String);

impl Session {
    fn new() -> Self {
        let name = format!("numatrace-top-{}", std::process::id());
        let ok = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-s",
                &name,
                "-x",
                "160",
                "-y",
                "40",
                "sh",
            ])
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux new-session failed");
        let s = Self(name);
        // A prompt the test can recognise.
        s.send(&["PS1='ready$ '", "Enter"]);
        s
    }

    fn send(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", &self.0];
        a.extend_from_slice(keys);
        tmux(&a);
    }

    fn screen(&self) -> String {
        tmux(&["capture-pane", "-p", "-t", &self.0])
    }

    fn wait_for(&self, what: &str, timeout: Duration, f: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if f(&s) {
                println!("{what} after {:.1} s", start.elapsed().as_secs_f64());
                return s;
            }
            assert!(
                start.elapsed() < timeout,
                "{what}: not within {timeout:?}; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `stty -a` of the pane's terminal, through a file (the screen wraps long lines).
    fn stty(&self, tag: &str) -> String {
        let file = std::env::temp_dir().join(format!("{}-{tag}.stty", self.0));
        let _ = std::fs::remove_file(&file);
        self.send(&[&format!("stty -a > {}", file.display()), "Enter"]);
        assert!(
            common::wait_until(Duration::from_secs(10), || std::fs::metadata(&file)
                .is_ok_and(|m| m.len() > 0)),
            "stty -a did not run: {}",
            self.screen()
        );
        std::thread::sleep(Duration::from_millis(200));
        let s = std::fs::read_to_string(&file).unwrap();
        let _ = std::fs::remove_file(&file);
        s
    }

    /// The numatrace process running in the pane (a child of its shell).
    fn numatrace_pid(&self) -> Option<u32> {
        let shell = tmux(&["display-message", "-p", "-t", &self.0, "#{pane_pid}"]);
        let out = Command::new("pgrep")
            .args(["-P", shell.trim(), "-f", "numatrace"])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        tmux(&["kill-session", "-t", &self.0]);
    }
}

fn threads_workload() -> Child {
    Command::new(workload_bin())
        .args([
            "threads",
            "--threads",
            "4",
            "--mem-mib",
            "32",
            "--duration",
            "30s",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Whether tmux is here; says so loudly when not.
fn has_tmux(test: &str) -> bool {
    let here = Command::new("tmux").arg("-V").output().is_ok();
    if !here {
        common::skip(
            test,
            "tmux is not installed (`cargo xtask test` installs it as root)",
        );
    }
    here
}

#[test]
fn top_in_a_real_terminal_shows_the_workload_and_restores_the_terminal() {
    const TEST: &str = "top_in_a_real_terminal_shows_the_workload_and_restores_the_terminal";
    require_root!(TEST);
    if !has_tmux(TEST) {
        return;
    }
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let s = Session::new();
    s.wait_for("the shell", Duration::from_secs(10), |t| {
        t.contains("ready$")
    });
    let before = s.stty("before");
    let mut w = threads_workload();
    s.send(&[&format!("{} top -d 1", numatrace_bin()), "Enter"]);
    let shown = s.wait_for("the header", Duration::from_secs(30), |t| {
        t.contains("numatrace top - kernel")
    });
    assert!(shown.contains("PID") && shown.contains("SCAN%"), "{shown}");
    // The workload's threads are scanned and skip VMAs (host) or fault (guests): a row.
    let shown = s.wait_for("a row of the workload", Duration::from_secs(30), |t| {
        t.contains("ntw-thread") || t.contains("numatrace-workl")
    });
    println!("{shown}");
    // Keys: the help overlay, the nodes view, back to tasks.
    s.send(&["?"]);
    s.wait_for("the help", Duration::from_secs(5), |t| {
        t.contains("q / Ctrl-C")
    });
    s.send(&["x"]);
    s.send(&["n"]);
    s.wait_for("the nodes view", Duration::from_secs(5), |t| {
        t.contains(" nodes (")
    });
    s.send(&["t"]);
    s.send(&["q"]);
    assert!(
        common::wait_until(Duration::from_secs(10), || s.numatrace_pid().is_none()),
        "numatrace still runs after q"
    );
    s.wait_for("the shell prompt after q", Duration::from_secs(10), |t| {
        t.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .is_some_and(|l| l.trim_end() == "ready$")
    });
    assert_eq!(
        s.stty("after-q"),
        before,
        "q left the terminal modes changed"
    );

    // SIGTERM restores it too.
    s.send(&[&format!("{} top -d 1", numatrace_bin()), "Enter"]);
    s.wait_for("the header again", Duration::from_secs(30), |t| {
        t.contains("numatrace top - kernel")
    });
    let pid = s.numatrace_pid().expect("numatrace's pid in the pane");
    // SAFETY: kill(2) on a process we started.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    assert!(
        common::wait_until(Duration::from_secs(10), || s.numatrace_pid().is_none()),
        "numatrace still runs after SIGTERM"
    );
    s.wait_for(
        "the shell prompt after SIGTERM",
        Duration::from_secs(10),
        |t| {
            t.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .is_some_and(|l| l.trim_end() == "ready$")
        },
    );
    assert_eq!(
        s.stty("after-term"),
        before,
        "SIGTERM left the terminal modes changed"
    );
    let _ = w.kill();
    let _ = w.wait();
}

/// A panic while the TUI owns the terminal (raw mode, alternate screen): the panic message is
/// readable in the shell afterwards, the terminal modes are as before, the exit code is 101.
#[test]
fn a_panic_in_the_terminal_ui_restores_the_terminal() {
    const TEST: &str = "a_panic_in_the_terminal_ui_restores_the_terminal";
    require_root!(TEST);
    if !has_tmux(TEST) {
        return;
    }
    let s = Session::new();
    s.wait_for("the shell", Duration::from_secs(10), |t| {
        t.contains("ready$")
    });
    let before = s.stty("before");
    s.send(&["clear", "Enter"]);
    s.send(&[
        &format!(
            "NUMATRACE_TEST_PANIC=frame {} top -d 1; echo exit=$?",
            numatrace_bin()
        ),
        "Enter",
    ]);
    // The command line itself holds `exit=$?`: wait for the echoed line.
    let shown = s.wait_for("the shell after the panic", Duration::from_secs(60), |t| {
        t.lines().any(|l| l.trim_start().starts_with("exit="))
    });
    assert!(
        shown.contains("exit=101"),
        "not a panic's exit code:\n{shown}"
    );
    assert!(
        shown.contains("NUMATRACE_TEST_PANIC=frame: forced panic"),
        "the panic message is not readable on the restored screen:\n{shown}"
    );
    assert!(
        !shown.contains("SCAN%"),
        "the TUI's frame is still on the screen (alternate screen not left):\n{shown}"
    );
    assert_eq!(
        s.stty("after-panic"),
        before,
        "the panic left the terminal modes changed"
    );
}

#[test]
fn batch_frames_work_in_a_pipe() {
    const TEST: &str = "batch_frames_work_in_a_pipe";
    require_root!(TEST);
    if common::host_covers(TEST) {
        return;
    }
    let out = Command::new(numatrace_bin())
        .args(["top", "-b", "-n", "2", "-d", "0.5"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        !text.contains('\x1b'),
        "escape codes in batch mode:\n{text}"
    );
    assert_eq!(text.matches("numatrace top - kernel").count(), 2, "{text}");
    assert!(
        text.contains("system:") && text.contains("dropped"),
        "{text}"
    );
    // `| head -1`: a closed pipe ends it quietly.
    let mut child = Command::new(numatrace_bin())
        .args(["top", "-b", "-d", "0.2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    std::io::Read::read_exact(&mut stdout, &mut first).unwrap();
    drop(stdout);
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "top -b after its reader went away: {status:?}"
    );
}

#[test]
fn json_frames_show_migrations_in_a_two_node_guest() {
    const TEST: &str = "json_frames_show_migrations_in_a_two_node_guest";
    require_root!(TEST);
    // A frontend of the engine, whose counts numa_guest checks on every line.
    if common::other_line_covers(TEST) || common::migrating_guest(TEST).is_none() {
        return;
    }
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    // top first: the workload starts once the first frame is out, so that its migrations fall
    // in the frames (they are over within seconds; numatrace takes a few to attach in TCG).
    let mut top = Command::new(numatrace_bin())
        .args(["top", "-b", "-n", "10", "-d", "2", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(top.stdout.take().unwrap()));
    let first = lines.next().expect("a first frame").unwrap();
    let mut w = Command::new(workload_bin())
        .args(["migrate", "--mem-mib", "64", "--duration", "30s"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut text = vec![first];
    text.extend(lines.map_while(Result::ok));
    let status = top.wait().unwrap();
    let _ = w.kill();
    let _ = w.wait();
    assert!(status.success(), "top -b --json: {status:?}");
    let frames: Vec<serde_json::Value> = text
        .iter()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(frames.len(), 10);
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(f["frame"], i as u64 + 1);
        assert_eq!(f["schema"], "numatrace.stat/2");
        // The first frame half a second after attach, the others every --delay (2 s).
        let least = if i == 0 { 0.5 } else { 1.0 };
        assert!(
            f["interval_s"].as_f64().unwrap() >= least,
            "frame {}: {}",
            i + 1,
            f["interval_s"]
        );
    }
    // numatrace's own counts (not only the kernel's rates in the header) show the migrations.
    let migrating = frames
        .iter()
        .filter(|f| {
            f["rates"]["pages_migrated_per_s"].as_f64().unwrap() > 0.0
                && f["totals"]["hint_faults"]["migrated_pages"]
                    .as_u64()
                    .unwrap()
                    > 0
        })
        .count();
    println!(
        "pages migrated/s per frame: {:?}",
        frames
            .iter()
            .map(|f| f["rates"]["pages_migrated_per_s"].clone())
            .collect::<Vec<_>>()
    );
    assert!(migrating > 0, "no frame saw migrations");
    assert!(
        frames
            .iter()
            .any(|f| !f["node_matrix"].as_array().unwrap().is_empty()),
        "no frame has a node matrix"
    );
}

/// The LAST cell of each workload thread's row (`ntw-thread-N`) in a task table whose columns
/// start PID COMM LAST.
fn thread_rows(screen: &str) -> Vec<String> {
    screen
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            (cells.len() > 3 && cells[1].starts_with("ntw-thread")).then(|| cells[2].to_owned())
        })
        .collect()
}

/// NUMA balancing works in bursts: a task stays listed for the activity window after its last
/// activity (here its last for sure: the workload is stopped), LAST counts the seconds since,
/// then the empty table says when the last activity was; `w` widens the window and the task is
/// back. The header draws the last minute as sparklines.
#[test]
fn top_keeps_a_bursty_task_listed_for_the_window_and_draws_sparklines() {
    const TEST: &str = "top_keeps_a_bursty_task_listed_for_the_window_and_draws_sparklines";
    require_root!(TEST);
    if !has_tmux(TEST) {
        return;
    }
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let w = Stoppable::threads("32", "180s");
    let s = Session::new();
    s.wait_for("the shell", Duration::from_secs(10), |t| {
        t.contains("ready$")
    });
    s.send(&[
        &format!("{} top -d 1 --window 10s -p {}", numatrace_bin(), w.pid()),
        "Enter",
    ]);
    s.wait_for("the sparkline row", Duration::from_secs(30), |t| {
        t.lines().any(|l| {
            l.starts_with("60s: hint/s [") && l.contains("migr/s [") && l.contains("scan%")
        })
    });
    // A burst: a workload thread active in this interval.
    let start = Instant::now();
    let active = loop {
        let t = s.screen();
        if thread_rows(&t).iter().any(|last| last == "now") {
            break Some(t);
        }
        if start.elapsed() > Duration::from_secs(60) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let Some(active) = active else {
        common::skip(
            TEST,
            format!(
                "the workload showed no NUMA balancing activity within 60 s (no scan, skip or \
                 fault reached numatrace on this kernel); screen:\n{}",
                s.screen()
            ),
        );
        return;
    };
    println!("{active}");
    assert!(
        active.contains("tasks (") && active.contains("active within 10s"),
        "{active}"
    );
    assert!(active.contains("@10s"), "the window column: {active}");
    // From here on the workload does nothing: its last activity was at most 2 refreshes ago.
    w.stop();
    let stopped = Instant::now();
    let mut lasts = Vec::new();
    while stopped.elapsed() < Duration::from_secs(7) {
        let t = s.screen();
        let rows = thread_rows(&t);
        assert!(
            !rows.is_empty(),
            "the stopped workload left the table {:.1} s after its last activity, within the \
             10 s window:\n{t}",
            stopped.elapsed().as_secs_f64()
        );
        lasts.extend(rows);
        std::thread::sleep(Duration::from_millis(500));
    }
    println!("LAST cells while stopped: {lasts:?}");
    // LAST counts the seconds since the last activity.
    assert!(
        lasts
            .iter()
            .filter_map(|l| l.strip_suffix('s')?.parse::<u64>().ok())
            .any(|s| s >= 4),
        "{lasts:?}"
    );
    // Out of the window: gone, and the table says when the last activity was.
    let quiet = s.wait_for(
        "the table empty after the window",
        Duration::from_secs(15),
        |t| thread_rows(t).is_empty() && t.contains("no NUMA balancing activity for"),
    );
    println!("{quiet}");
    assert!(
        stopped.elapsed() >= Duration::from_secs(8),
        "left the table after {:.1} s",
        stopped.elapsed().as_secs_f64()
    );
    assert!(quiet.contains("(last: "), "{quiet}");
    assert!(!quiet.contains("is kernel.numa_balancing on?"), "{quiet}");
    // `w`: 10 -> 30 s, and the task is back (its last activity ~10-15 s ago).
    s.send(&["w"]);
    let wide = s.wait_for("the 30 s window", Duration::from_secs(5), |t| {
        t.contains("active within 30s") && t.contains("w window 30s")
    });
    assert!(wide.contains("@30s"), "{wide}");
    s.wait_for(
        "the workload back in the 30 s window",
        Duration::from_secs(5),
        |t| !thread_rows(t).is_empty(),
    );
    s.send(&["q"]);
    assert!(
        common::wait_until(Duration::from_secs(10), || s.numatrace_pid().is_none()),
        "numatrace still runs after q"
    );
}

/// `top -b` does the same: frames list a task active within the window and say the window;
/// the frames after it say when the last activity was.
#[test]
fn batch_frames_keep_a_task_for_the_window() {
    const TEST: &str = "batch_frames_keep_a_task_for_the_window";
    require_root!(TEST);
    if common::host_covers(TEST) {
        return;
    }
    let _balancing = Sysctl::set("kernel.numa_balancing", "1").unwrap();
    let w = Stoppable::threads("32", "180s");
    let mut top = Command::new(numatrace_bin())
        .args(["top", "-b", "-d", "1", "-n", "80", "--window", "5s"])
        .args(["-p", &w.pid().to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = std::io::BufRead::lines(std::io::BufReader::new(top.stdout.take().unwrap()));
    // Frames, each complete when the next one's header arrives.
    let mut frames: Vec<String> = Vec::new();
    let mut stopped_at: Option<usize> = None;
    let mut quiet_at: Option<usize> = None;
    for line in lines.map_while(Result::ok) {
        if line.starts_with("numatrace top - kernel") {
            if let Some(f) = frames.last() {
                let i = frames.len() - 1;
                if stopped_at.is_none() && thread_rows(f).iter().any(|l| l == "now") {
                    w.stop();
                    stopped_at = Some(i);
                } else if stopped_at.is_some() && f.contains("no NUMA balancing activity for") {
                    quiet_at = Some(i);
                    break;
                }
            }
            frames.push(String::new());
        }
        if let Some(f) = frames.last_mut() {
            f.push_str(&line);
            f.push('\n');
        }
    }
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(top.id() as i32, libc::SIGINT) };
    let _ = top.wait();
    let Some(stopped_at) = stopped_at else {
        common::skip(
            TEST,
            format!(
                "the workload showed no NUMA balancing activity in {} frames; last:\n{}",
                frames.len(),
                frames.last().map_or("", String::as_str)
            ),
        );
        return;
    };
    let quiet_at = quiet_at.unwrap_or_else(|| {
        panic!(
            "no frame said when the last activity was; last:\n{}",
            frames.last().unwrap()
        )
    });
    println!("{}\n{}", frames[stopped_at], frames[quiet_at]);
    for f in &frames {
        assert!(
            f.lines().next().unwrap().ends_with(", window 5s"),
            "the window on the first line:\n{f}"
        );
        assert!(!f.contains("is kernel.numa_balancing on?"), "{f}");
    }
    // Its last activity was in the frame before it stopped: listed in the next 3 frames (the
    // 5 s window, less the refresh it may have been late by).
    for f in &frames[stopped_at + 1..=stopped_at + 3] {
        assert!(!thread_rows(f).is_empty(), "left within the window:\n{f}");
        assert!(f.contains("@5s"), "the window column:\n{f}");
    }
    assert!(
        quiet_at - stopped_at >= 5,
        "quiet after {} frames",
        quiet_at - stopped_at
    );
    assert!(frames[quiet_at].contains("(last: "), "{}", frames[quiet_at]);
}
