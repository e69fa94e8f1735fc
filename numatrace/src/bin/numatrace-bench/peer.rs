//! bpftrace one-liners beside numatrace on the same tracepoints, in the same run: the peer's
//! per-event cost read from the kernel's BPF statistics exactly as numatrace's own.

use std::{
    collections::HashSet,
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

/// A one-liner and the numatrace program it is the yardstick for.
pub struct Probe {
    /// numatrace's program on the tracepoint: the first of these that is loaded.
    pub programs: &'static [&'static str],
    pub peer: &'static str,
    pub script: &'static str,
}

/// The yardsticks: a global count on the exit tracepoint, a per-task count on the
/// skip-VMA one.
pub const PROBES: &[Probe] = &[
    Probe {
        programs: &["tp_sched_process_exit"],
        peer: "bpftrace @ = count()",
        script: "tracepoint:sched:sched_process_exit { @ = count(); }",
    },
    Probe {
        // The tp_btf program where it is the hook's only one.
        programs: &["btf_skip_vma", "tp_sched_skip_vma_numa"],
        peer: "bpftrace @[tid] = count()",
        script: "tracepoint:sched:sched_skip_vma_numa { @[tid] = count(); }",
    },
];

/// A running bpftrace and the programs it loaded.
pub struct Peer {
    child: Child,
    ids: Vec<u32>,
}

fn program_ids() -> HashSet<u32> {
    aya::programs::loaded_programs()
        .filter_map(|p| p.ok().map(|i| i.id()))
        .collect()
}

impl Peer {
    /// Starts `script` and waits until its programs are loaded (those that appeared since):
    /// until it prints `ready` when given (a script with many probes loads them one by one,
    /// seconds apart under emulation), else until "Attaching" and a settling pause.
    pub fn start(bpftrace: &Path, script: &str, ready: Option<&str>) -> Result<Self> {
        let before = program_ids();
        let mut child = Command::new(bpftrace)
            .args(["-e", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", bpftrace.display()))?;
        // bpftrace prints "Attaching N probe(s)..." once it has loaded and is attaching.
        let stdout = child.stdout.take().context("bpftrace's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let wanted = |l: &str| match ready {
            Some(r) => l.trim() == r,
            None => l.starts_with("Attaching"),
        };
        loop {
            match lines.next() {
                Some(Ok(l)) if wanted(&l) => break,
                Some(Ok(_)) => {}
                other => {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("bpftrace did not attach: {other:?}");
                }
            }
        }
        // Keep its stdout drained: the map print at exit must not block on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            std::thread::sleep(Duration::from_millis(200));
            let ids: Vec<u32> = program_ids().difference(&before).copied().collect();
            if !ids.is_empty() {
                // Feature probes bpftrace loads at start are gone by now; its probe stays.
                std::thread::sleep(Duration::from_millis(300));
                let ids: Vec<u32> = program_ids().difference(&before).copied().collect();
                return Ok(Self { child, ids });
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("bpftrace attached, yet no new BPF program appeared");
            }
        }
    }

    /// (program name, run time ns, runs) of each of its programs. bpftrace names a program
    /// after its probe's last part (`task_numa_fault`, `sched_skip_vma`), cut to 15 bytes.
    pub fn named_stats(&self) -> Vec<(String, u64, u64)> {
        aya::programs::loaded_programs()
            .filter_map(Result::ok)
            .filter(|i| self.ids.contains(&i.id()))
            .map(|i| {
                (
                    i.name_as_str().unwrap_or_default().to_owned(),
                    i.run_time().as_nanos() as u64,
                    i.run_count(),
                )
            })
            .collect()
    }

    /// (run time ns, runs) summed over its programs.
    pub fn stats(&self) -> (u64, u64) {
        aya::programs::loaded_programs()
            .filter_map(Result::ok)
            .filter(|i| self.ids.contains(&i.id()))
            .fold((0, 0), |(t, n), i| {
                (t + i.run_time().as_nanos() as u64, n + i.run_count())
            })
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // SIGINT: bpftrace detaches and prints its maps. Debian's bpftrace has been seen to
        // sit in epoll_wait after the first one (both peers of a host run, 12 minutes, until
        // a second SIGINT by hand): it is asked again, then killed.
        for signal in [libc::SIGINT, libc::SIGINT, libc::SIGKILL] {
            // SAFETY: kill(2) on our own child, not yet reaped.
            unsafe { libc::kill(self.child.id() as i32, signal) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if !matches!(self.child.try_wait(), Ok(None)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.child.wait();
    }
}
