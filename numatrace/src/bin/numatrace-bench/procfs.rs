//! CPU time and memory of a process, from /proc.

use std::fs;

use anyhow::{Context as _, Result};

/// Clock ticks per second of /proc/PID/stat's times.
pub fn clk_tck() -> u64 {
    // SAFETY: sysconf only reads a constant.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100)
}

/// utime + stime of all threads of process `pid`, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the command, which is in parentheses and may hold spaces: state is field 3,
    // utime 14 and stime 15.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Result<u64> {
        f.get(n - 3)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("stat field {n}"))
    };
    Ok(field(14)? + field(15)?)
}

/// A `Name:  N kB` line of /proc/PID/status, in KiB.
pub fn status_kib(pid: u32, name: &str) -> Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("{name} in /proc/{pid}/status"))
}

/// Peak resident set (VmHWM), MiB.
pub fn peak_rss_mib(pid: u32) -> Result<f64> {
    Ok(status_kib(pid, "VmHWM")? as f64 / 1024.0)
}
