//! The workloads benchmarks run: numatrace-workload's reproducers and its fault-heavy `remote`,
//! each for a fixed time, with its throughput read from what it prints.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};

/// One workload: a name for the tables and numatrace-workload's arguments (`--duration` added).
#[derive(Clone, Copy)]
pub struct Workload {
    pub name: &'static str,
    pub args: &'static [&'static str],
}

/// Throughput workloads: the seeds' reproducers that run for a set time, and `remote`.
pub const THROUGHPUT: &[Workload] = &[
    Workload {
        name: "remote (16 threads, 4K, fault-heavy)",
        args: &["remote", "--threads", "16", "--mem-mib", "2"],
    },
    Workload {
        name: "migrate 32 MiB 4K",
        args: &["migrate", "--mem-mib", "32"],
    },
    Workload {
        name: "scan-heavy (seed 003)",
        args: &["scan-heavy", "--threads", "4", "--mem-mib", "128"],
    },
    Workload {
        name: "cow shared (seed 000)",
        args: &["cow", "--children", "2", "--mem-mib", "16"],
    },
];

/// Σ of every `N passes` the workload printed, per second of `duration`.
pub fn passes_per_s(out: &str, duration: Duration) -> Option<f64> {
    let mut total = 0u64;
    let mut any = false;
    for (i, _) in out.match_indices(" passes") {
        let digits: String = out[..i]
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if let Ok(n) = digits.parse::<u64>() {
            total += n;
            any = true;
        }
    }
    any.then(|| total as f64 / duration.as_secs_f64())
}

fn command(bin: &Path, w: &Workload, duration: Duration) -> Command {
    let mut c = Command::new(bin);
    c.args(w.args)
        .arg("--duration")
        .arg(format!("{}ms", duration.as_millis()))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    c
}

/// Runs `w` for `duration`; its passes per second.
pub fn throughput(bin: &Path, w: &Workload, duration: Duration) -> Result<f64> {
    let out = command(bin, w, duration)
        .output()
        .with_context(|| format!("running {}", w.name))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("{} failed ({}): {text}", w.name, out.status);
    }
    passes_per_s(&text, duration).with_context(|| format!("{}: no passes in {text:?}", w.name))
}

/// Workloads run at once, for the per-program costs: every hook gets events.
pub struct Mix {
    pub bin: std::path::PathBuf,
    /// Only what runs on one node.
    pub host: bool,
}

impl Mix {
    pub fn run(&self, duration: Duration) -> Result<()> {
        let specs: &[&[&str]] = if self.host {
            &[&["threads", "--threads", "2", "--mem-mib", "16"]]
        } else {
            &[
                &["remote", "--threads", "8", "--mem-mib", "2"],
                &["migrate", "--mem-mib", "32"],
                &["migrate", "--mem-mib", "64", "--thp"],
                &["cow", "--children", "2", "--mem-mib", "16"],
            ]
        };
        let mut children = Vec::new();
        for &args in specs {
            let w = Workload { name: "mix", args };
            children.push(
                command(&self.bin, &w, duration)
                    .stdout(Stdio::null())
                    .spawn()
                    .with_context(|| format!("starting {args:?}"))?,
            );
        }
        // Short-lived processes for the fork and exit tracepoints.
        let churn = Command::new(&self.bin)
            .args([
                "churn",
                "--tasks",
                "200",
                "--parallel",
                "4",
                "--spin-ms",
                "5",
            ])
            .stdout(Stdio::null())
            .status()?;
        let mut ok = churn.success();
        for mut c in children {
            ok &= c.wait()?.success();
        }
        if !ok {
            bail!("a workload of the mix failed");
        }
        Ok(())
    }

    /// Only short-lived tasks, `tasks` of them: a fork and an exit each, nothing else.
    pub fn churn(&self, tasks: usize) -> Result<()> {
        let st = Command::new(&self.bin)
            .args(["churn", "--tasks", &tasks.to_string(), "--parallel", "4"])
            .args(["--spin-ms", "1"])
            .stdout(Stdio::null())
            .status()?;
        if !st.success() {
            bail!("churn failed ({st})");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_are_summed_over_lines() {
        let out = "cow child 0 on node 1: 120 passes\ncow child 1 on node 0: 80 passes\n";
        assert_eq!(passes_per_s(out, Duration::from_secs(2)), Some(100.0));
        assert_eq!(passes_per_s("nothing here", Duration::from_secs(1)), None);
    }
}
