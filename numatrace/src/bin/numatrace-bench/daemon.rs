//! The daemon's own cost with many live tasks: CPU share and peak memory of each long-running
//! command, its time from start to first frame / scrape, and the engine's snapshot time; then,
//! where asked, the same at scale ([`crate::scale`]).

use std::{
    io::{BufRead as _, BufReader},
    os::unix::process::CommandExt as _,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::record::{DaemonCost, SnapshotCost};
use anyhow::{Context as _, Result, bail};
use numatrace::engine::{Detail, Engine};

use crate::{
    frontends::{self, Bins, Kind},
    overhead::median,
    procfs,
};

/// `tasks` sleeping threads that NUMA balancing sees; killed (with their processes) on drop.
struct Sleepers(Child);

impl Sleepers {
    fn start(bins: &Bins, tasks: usize) -> Result<Self> {
        let mut child = Command::new(&bins.workload)
            .args([
                "sleepers",
                "--tasks",
                &tasks.to_string(),
                "--duration",
                "2h",
            ])
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .context("starting sleepers")?;
        let out = child.stdout.take().context("stdout")?;
        let me = Self(child);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        // Thousands of threads take a while under emulation; never forever.
        match rx.recv_timeout(Duration::from_secs(600)) {
            Ok(line) if line.starts_with("sleepers: ready") => Ok(me),
            Ok(line) => bail!("sleepers did not start {tasks} tasks: {line:?}"),
            Err(_) => bail!("sleepers did not start {tasks} tasks within 10 minutes"),
        }
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        // SAFETY: signals the process group we created.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

fn frontend_cost(kind: Kind, bins: &Bins, tasks: usize, window: Duration) -> Result<DaemonCost> {
    let t = frontends::start(kind, bins, "", 19474)?;
    let pid = t.pid();
    let c0 = procfs::cpu_ticks(pid)?;
    let w0 = Instant::now();
    std::thread::sleep(window);
    let c1 = procfs::cpu_ticks(pid)?;
    let secs = w0.elapsed().as_secs_f64();
    let peak = procfs::peak_rss_mib(pid)?;
    let scrapes: Vec<f64> = t
        .scrapes
        .lock()
        .unwrap()
        .iter()
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    let ready_ms = t.ready_after.as_secs_f64() * 1e3;
    let scrape_errors = *t.scrape_errors.lock().unwrap();
    let frames = *t.frames.lock().unwrap();
    t.stop()?;
    Ok(DaemonCost {
        frontend: kind.name().to_owned(),
        tasks,
        cpu_pct: (c1 - c0) as f64 / procfs::clk_tck() as f64 / secs * 100.0,
        peak_rss_mib: peak,
        ready_ms,
        scrape_ms: median(&scrapes),
        scrape_errors,
        frames,
        window_s: secs,
    })
}

fn snapshot_cost(tasks: usize) -> Result<SnapshotCost> {
    let rt = crate::runtime()?;
    let _rt = rt.enter();
    let facts = numatrace::kernel::facts::KernelFacts::gather()?;
    let mut engine = Engine::start(facts, &crate::load_options())?;
    // Two wake-ups of every sleeper, and scans of their processes.
    std::thread::sleep(Duration::from_secs(3));
    let mut time = |d: Detail| -> Result<(f64, usize)> {
        let mut v = Vec::new();
        let mut n = 0;
        for _ in 0..5 {
            let t = Instant::now();
            let s = engine.snapshot(d)?;
            v.push(t.elapsed().as_secs_f64() * 1e3);
            n = s.tasks.iter().filter(|t| !t.exited).count();
        }
        Ok((median(&v).unwrap_or(f64::NAN), n))
    };
    let (summary_ms, tracked) = time(Detail::Summary)?;
    let (full_ms, _) = time(Detail::Full)?;
    rt.block_on(engine.stop())?;
    Ok(SnapshotCost {
        tasks,
        tracked,
        summary_ms,
        full_ms,
    })
}

pub const FRONTENDS: [Kind; 4] = [Kind::Stat, Kind::Top, Kind::Serve, Kind::Record];

/// For each task count: every frontend's cost, then the snapshot time; then the scale run.
pub fn measure(
    bins: &Bins,
    task_counts: &[usize],
    window: Duration,
    scale: Option<crate::scale::Scale>,
    mut emit: impl FnMut(crate::Record),
) -> Result<()> {
    for &n in task_counts {
        eprintln!("numatrace-bench: {n} live tasks");
        let sleepers = match Sleepers::start(bins, n) {
            Ok(s) => s,
            Err(e) => {
                emit(crate::note(format!("{n} tasks: not measured: {e:#}")));
                continue;
            }
        };
        for kind in FRONTENDS {
            match frontend_cost(kind, bins, n, window) {
                Ok(c) => emit(crate::Record::Daemon(c)),
                Err(e) => emit(crate::note(format!("{} at {n} tasks: {e:#}", kind.name()))),
            }
        }
        match snapshot_cost(n) {
            Ok(c) => emit(crate::Record::Snapshot(c)),
            Err(e) => emit(crate::note(format!("snapshot at {n} tasks: {e:#}"))),
        }
        drop(sleepers);
    }
    if let Some(scale) = scale
        && let Err(e) = crate::scale::measure(bins, scale, window, &mut emit)
    {
        emit(crate::note(format!(
            "scale ({} tasks, {} cgroups): not measured: {e:#}",
            scale.tasks, scale.cgroups
        )));
    }
    Ok(())
}
