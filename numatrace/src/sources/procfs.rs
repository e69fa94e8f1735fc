//! procfs: /proc/PID/maps names of mappings (to say which VMA the scanner worked on), whether a
//! process is alive, and numatrace's own CPU time.

use std::{collections::BTreeMap, fs};

/// Mapping name by start address, from /proc/PID/maps text (anonymous mappings: `[anon]`).
pub fn mapping_names(maps: &str) -> BTreeMap<u64, String> {
    maps.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let range = it.next()?;
            let start = u64::from_str_radix(range.split('-').next()?, 16).ok()?;
            let name = it.nth(4).map_or("[anon]".to_owned(), str::to_owned);
            Some((start, name))
        })
        .collect()
}

/// Names for a live process; empty if it has exited. Read in large pieces: each read(2) of
/// /proc/PID/maps takes the process's mmap lock again and finds its place among the VMAs.
pub fn process_mapping_names(tgid: u32) -> BTreeMap<u64, String> {
    crate::kernel::read_text(format!("/proc/{tgid}/maps"))
        .map(|t| mapping_names(&t))
        .unwrap_or_default()
}

/// Whether a process or thread with this id exists now.
pub fn pid_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether the task with this id has finished exiting: gone, or a zombie waiting to be reaped
/// (it never runs again). A task still in do_exit, or a new task that took the id, is not.
pub fn task_done(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat_state(&stat).is_some_and(|s| matches!(s, 'Z' | 'X')),
        // Gone; any other error (no memory, no descriptor left) says nothing about the task.
        Err(e) => matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)),
    }
}

/// The fields of a /proc/PID/stat line after the parenthesised comm (which may itself hold
/// spaces and parentheses), from the state on.
fn stat_fields(stat: &str) -> Option<std::str::SplitWhitespace<'_>> {
    Some(stat.rsplit_once(')')?.1.split_whitespace())
}

/// The state letter of a /proc/PID/stat line.
fn stat_state(stat: &str) -> Option<char> {
    stat_fields(stat)?.next()?.chars().next()
}

/// numatrace's own CPU time so far, in nanoseconds (utime + stime of the whole process).
pub fn own_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let f: Vec<&str> = stat_fields(&stat)?.collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no side effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(ticks * 1_000_000_000 / hz)
}

/// The process exists and has not exited (a zombie waiting for its parent counts as exited).
pub fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_follows_the_last_parenthesis_of_the_comm() {
        assert_eq!(stat_state("42 (a) b) (c) Z 1 42 42 0"), Some('Z'));
        assert_eq!(stat_state("7 (sleep) S 1 7"), Some('S'));
        assert_eq!(stat_state("garbage"), None);
    }

    #[test]
    fn a_running_task_is_not_done_and_a_missing_one_is() {
        assert!(!task_done(std::process::id()));
        // Beyond the kernel's pid_max limit (2^22): never a task.
        assert!(task_done(1 << 23));
    }

    #[test]
    fn parses_maps() {
        let t = "55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0          [heap]\n\
                 7f0000000000-7f0004000000 rw-p 00000000 00:00 0 \n\
                 7f1000000000-7f1000001000 r-xp 00000000 08:01 1234       /usr/lib/libc.so.6\n";
        let m = mapping_names(t);
        assert_eq!(m[&0x55d0c0a00000], "[heap]");
        assert_eq!(m[&0x7f0000000000], "[anon]");
        assert_eq!(m[&0x7f1000000000], "/usr/lib/libc.so.6");
    }
}
