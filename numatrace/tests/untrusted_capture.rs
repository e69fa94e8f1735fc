//! `numatrace report` on captures crafted to expand: small files whose sections decompress to
//! far more, refused with the limit's line by the real binary, in bounded time and memory (its
//! peak RSS as the kernel measured it; an address-space limit keeps a failing run from taking
//! the machine down).
//!
//! A child's peak RSS starts from what its parent held when it forked (Linux keeps the high
//! water mark across exec), so these tests run one at a time and build their files with
//! buffers freed before the child starts.

mod common;

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use numatrace::{
    capture::{Machine, format},
    capture::{SECTION_EVENTS, SECTION_FIRST, SECTION_MACHINE, SECTION_PROBES, SECTION_SAMPLE},
    engine::Snapshot,
};
use serde_json::json;

const TIME: Duration = Duration::from_secs(30);
const RSS_BYTES: u64 = 512 << 20;
/// Address space granted to the child: far above 512 MiB of RSS (a tokio runtime reserves
/// arenas and stacks), far below what would hurt the machine.
const AS_BYTES: u64 = 4 << 30;

struct Run {
    status: i32,
    stderr: String,
    elapsed: Duration,
    max_rss: u64,
}

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `numatrace report FILE` with its address space limited; killed at twice the time target.
fn report(file: &Path) -> Run {
    let err = file.with_extension("err");
    let mut c = Command::new(common::numatrace_bin());
    c.arg("report")
        .arg(file)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: AS_BYTES,
                rlim_max: AS_BYTES,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let start = Instant::now();
    // Reaped by wait4 below (std's wait has no rusage).
    let pid = c.spawn().expect("numatrace report").id() as libc::pid_t;
    let (mut status, mut ru) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    loop {
        // SAFETY: waits for our own child; `status` and `ru` are valid for writes.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        assert!(r >= 0, "wait4: {}", std::io::Error::last_os_error());
        if r == pid {
            break;
        }
        if start.elapsed() > 2 * TIME {
            // SAFETY: our child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = start.elapsed();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let _ = std::fs::remove_file(&err);
    Run {
        status: if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128 + libc::WTERMSIG(status)
        },
        stderr,
        elapsed,
        max_rss: ru.ru_maxrss as u64 * 1024,
    }
}

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("numatrace-{name}-{}.ntrace", std::process::id()))
}

/// The sections every capture starts with, then `more` (already written sections) `times`.
fn write_capture(path: &Path, more: &[u8], times: usize) -> u64 {
    let mut out = Vec::new();
    format::write_header(&mut out, "numatrace test").unwrap();
    let json = |v: serde_json::Value| v.to_string().into_bytes();
    format::write_section(
        &mut out,
        SECTION_MACHINE,
        &json(serde_json::to_value(Machine::default()).unwrap()),
    )
    .unwrap();
    format::write_section(&mut out, SECTION_PROBES, b"[]").unwrap();
    format::write_section(
        &mut out,
        SECTION_FIRST,
        &json(serde_json::to_value(Snapshot::default()).unwrap()),
    )
    .unwrap();
    for _ in 0..times {
        out.extend_from_slice(more);
    }
    std::fs::write(path, &out).unwrap();
    out.len() as u64
}

fn check(test: &str, run: &Run, limit_line: &str) {
    println!(
        "{test}: exit {}, {:.1} s, peak RSS {} MiB: {}",
        run.status,
        run.elapsed.as_secs_f64(),
        run.max_rss >> 20,
        run.stderr.trim()
    );
    assert!(
        run.stderr.contains(limit_line),
        "refused with the limit's line: {}",
        run.stderr
    );
    assert_ne!(run.status, 0);
    assert!(run.status < 128, "exited, not killed: {}", run.status);
    assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
    assert!(run.elapsed < TIME, "{:?}", run.elapsed);
    assert!(
        run.max_rss < RSS_BYTES,
        "peak RSS {} MiB",
        run.max_rss >> 20
    );
}

/// Samples of identical tiny task records: ~45 bytes of JSON each, hundreds in memory.
#[test]
fn a_capture_of_tiny_task_records_is_refused_in_bounded_memory_and_time() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let path = scratch("tiny-tasks");
    // Built as text: a million JSON values would stay in this process's heap.
    let empty = serde_json::to_string(&Snapshot::default()).unwrap();
    let task = json!({"pid": 1, "tgid": 1, "comm": "", "exited": false}).to_string();
    let tasks = format!("\"tasks\":[{task}{}]", format!(",{task}").repeat(999_999));
    let raw = empty.replace("\"tasks\":[]", &tasks).into_bytes();
    drop(tasks);
    assert!(
        raw.len() > 40 << 20 && raw.len() < 64 << 20,
        "{}",
        raw.len()
    );
    let mut section = Vec::new();
    format::write_section(&mut section, SECTION_SAMPLE, &raw).unwrap();
    drop(raw);
    let bytes = write_capture(&path, &section, 8);
    assert!(bytes < 2 << 20, "a small file: {bytes}");
    let run = report(&path);
    let _ = std::fs::remove_file(&path);
    check("tiny task records", &run, "section 4 (sample) at byte ");
    assert!(
        run.stderr
            .contains("tasks past the limit of 65536 per section"),
        "{}",
        run.stderr
    );
}

/// The same within the per-section limits: samples of 65536 identical tiny task records each,
/// 160 of them (10 Mi records, 450 MiB of JSON from a file of about 100 KiB).
#[test]
fn samples_of_tiny_task_records_within_the_section_limit_are_refused_in_time() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let path = scratch("tiny-samples");
    let empty = serde_json::to_string(&Snapshot::default()).unwrap();
    let task = json!({"pid": 1, "tgid": 1, "comm": "", "exited": false}).to_string();
    let tasks = format!("\"tasks\":[{task}{}]", format!(",{task}").repeat(65_535));
    let raw = empty.replace("\"tasks\":[]", &tasks).into_bytes();
    drop(tasks);
    let mut section = Vec::new();
    format::write_section(&mut section, SECTION_SAMPLE, &raw).unwrap();
    drop(raw);
    let bytes = write_capture(&path, &section, 160);
    assert!(bytes < 1 << 20, "a small file: {bytes}");
    let run = report(&path);
    let _ = std::fs::remove_file(&path);
    check(
        "tiny samples",
        &run,
        "task and VMA records past the limit of 8388608 per capture",
    );
}

/// Events sections of whitespace (valid JSON, compressing about 4000:1): 100 of them are 6 GiB.
#[test]
fn a_capture_that_decompresses_to_gigabytes_is_refused_in_bounded_memory_and_time() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let path = scratch("spaces");
    let mut raw = vec![b' '; 60 << 20];
    raw[0] = b'[';
    *raw.last_mut().unwrap() = b']';
    let mut section = Vec::new();
    format::write_section(&mut section, SECTION_EVENTS, &raw).unwrap();
    drop(raw);
    let bytes = write_capture(&path, &section, 100);
    assert!(bytes < 5 << 20, "a small file: {bytes}");
    let run = report(&path);
    let _ = std::fs::remove_file(&path);
    check(
        "whitespace",
        &run,
        "decompresses past the limit of 2 GiB for all sections together",
    );
}

/// One section claiming and holding 200 MiB (the format's old bound was 256 MiB).
#[test]
fn a_section_past_the_per_section_limit_is_refused() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let path = scratch("big-section");
    let mut raw = vec![b' '; 200 << 20];
    raw[0] = b'[';
    *raw.last_mut().unwrap() = b']';
    let mut section = Vec::new();
    format::write_section(&mut section, SECTION_EVENTS, &raw).unwrap();
    drop(raw);
    write_capture(&path, &section, 1);
    let run = report(&path);
    let _ = std::fs::remove_file(&path);
    check("big section", &run, "section 4 at byte ");
    assert!(
        run.stderr
            .contains("decompresses past the limit of 64 MiB per section"),
        "{}",
        run.stderr
    );
}
