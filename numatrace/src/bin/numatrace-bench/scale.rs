//! Userspace at scale (issue 37, item 4): the engine's snapshot, `serve`'s scrape and `top`'s
//! refresh with `tasks` entries in the kernel's task map over `cgroups` real cgroups. The
//! entries are written by the benchmark ([`synthetic`]); every record says so, and how many the
//! kernel side had created from real activity.

use std::{
    io::{BufRead as _, BufReader},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use aya::maps::IterableMap as _;
use numatrace::{
    bpf::loader::LoadOptions,
    engine::{Detail, Engine},
    model::TaskRecord,
    sources::{
        batch::Batch,
        task_iter::TaskIter,
        task_map::{Prefix, TASK_CHUNK},
    },
};
use numatrace_common::TaskEntry;

use crate::{
    cgroup_dirs::CgroupDirs,
    frontends::{Bins, scrape},
    overhead::median,
    procfs,
    record::ScaleCost,
    synthetic::{self, Synthetic},
};

/// The sizes measured.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    pub tasks: usize,
    pub cgroups: usize,
    /// The engine's snapshot only.
    pub engine_only: bool,
}

impl Scale {
    /// Room for the entries and the kernel side's own (the tasks that really run), so a quarter
    /// more, rounded up.
    fn max_tasks(self) -> u32 {
        let want = self.tasks + self.tasks / 4;
        u32::try_from(want.next_power_of_two()).unwrap_or(u32::MAX)
    }
}

/// serve's port for this measurement (the daemon phase's is 19474).
const PORT: u16 = 19475;
/// How long a command may take to attach.
const READY: Duration = Duration::from_secs(300);
/// Timed repetitions (medians).
const REPEAT: usize = 5;
/// The share of the entries that change between two snapshots in the second measurement of
/// the engine's snapshot (every entry changes in the first).
pub const CHANGED_PERCENT: usize = 10;
/// Between writing the entries and timing what reads them: 100 000 map updates in a burst
/// leave the kernel work to finish (freeing replaced elements), which real tasks, updating
/// their entries over a second, do not.
const SETTLE: Duration = Duration::from_millis(250);

/// The engine in this process, then serve, then top, with the same entries and cgroups.
pub fn measure(
    bins: &Bins,
    scale: Scale,
    window: Duration,
    emit: &mut impl FnMut(crate::Record),
) -> Result<()> {
    synthetic::check_pid_max(scale.tasks)?;
    eprintln!(
        "numatrace-bench: scale: creating {} cgroups, then {} task entries",
        scale.cgroups, scale.tasks
    );
    let dirs = CgroupDirs::create(scale.cgroups)?;
    let runs: [(&str, &dyn Fn() -> Result<ScaleCost>); 3] = [
        ("engine", &|| in_process(scale, &dirs.ids)),
        ("serve", &|| serve(bins, scale, &dirs.ids, window)),
        ("top", &|| top(bins, scale, &dirs.ids, window)),
    ];
    // The engine's task list as measured in this process: the commands' lists hold the same
    // entries.
    let mut list_mib = None;
    for (what, run) in runs {
        if scale.engine_only && what != "engine" {
            continue;
        }
        match run() {
            Ok(mut c) => {
                match list_mib {
                    None => list_mib = c.task_list_mib,
                    Some(_) => c.task_list_mib = list_mib,
                }
                emit(crate::Record::Scale(c))
            }
            Err(e) => emit(crate::note(format!(
                "scale ({} tasks, {} cgroups), {what}: {e:#}",
                scale.tasks, scale.cgroups
            ))),
        }
    }
    Ok(())
}

fn cost(command: &str, scale: Scale, real: usize) -> ScaleCost {
    ScaleCost {
        command: command.to_owned(),
        tasks: scale.tasks + real,
        written: scale.tasks,
        real,
        cgroups: scale.cgroups,
        max_tasks: scale.max_tasks(),
        first_snapshot_ms: None,
        summary_ms: None,
        full_ms: None,
        changed_share_ms: None,
        task_reader: String::new(),
        iter_whole_ms: None,
        iter_keys_ms: None,
        kept_records: None,
        unchanged_entries: None,
        map_read_ms: None,
        task_list_mib: None,
        scrape_ms: None,
        scrape_max_ms: None,
        peak_rss_mib: 0.0,
        cpu_pct: None,
        frames: 0,
        max_frame_gap_s: None,
        window_s: 0.0,
    }
}

/// A snapshot's task list in memory: its records, and the counts they pack on the heap.
fn list_mib(tasks: &[TaskRecord]) -> f64 {
    let bytes: usize = tasks
        .iter()
        .map(|t| size_of::<TaskRecord>() + t.counts.heap_bytes())
        .sum();
    bytes as f64 / MIB
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

const MIB: f64 = 1024.0 * 1024.0;

/// One batched read of the map's used slots, entries dropped (the kernel's part of a snapshot): ms.
fn batched_read_ms(syn: &Synthetic) -> Result<f64> {
    let mut batch = Batch::<u32, TaskEntry>::new(TASK_CHUNK);
    let fd = std::os::fd::AsFd::as_fd(syn.map().map().fd());
    let mut n = 0usize;
    let mut prefix = Prefix::default();
    let t = Instant::now();
    batch.read_while(fd, |_, e| prefix.take(e, &mut |_| n += 1))?;
    Ok(ms(t.elapsed()))
}

/// Reads of the task map through an iterator of the benchmark's own (the engine's keeps its
/// place): each entry whole, then each as its key (nothing stamped since): ms each, 5 times.
fn iterator_reads_ms(syn: &Synthetic) -> Result<(Vec<f64>, Vec<f64>)> {
    let btf = aya::Btf::from_sys_fs()?;
    // Its own task map unused: as small as the object allows.
    let mut ebpf = aya::EbpfLoader::new()
        .map_max_entries(numatrace_common::MAP_TASK_STATS, 1)
        .load(numatrace::bpf::OBJECT)?;
    let fd = std::os::fd::AsFd::as_fd(syn.map().map().fd());
    let mut iter = TaskIter::open(&mut ebpf, &btf, fd)?;
    let mut time = |full: bool| -> Result<f64> {
        let mut n = 0usize;
        let t = Instant::now();
        if full {
            iter.read_all(|_| n += 1)?;
        } else {
            iter.read_changed(|_| n += 1)?;
        }
        Ok(ms(t.elapsed()))
    };
    let whole = (0..REPEAT)
        .map(|_| time(true))
        .collect::<Result<Vec<_>>>()?;
    let keys = (0..REPEAT)
        .map(|_| time(false))
        .collect::<Result<Vec<_>>>()?;
    Ok((whole, keys))
}

/// The engine started in this process: snapshot times, and this process's peak RSS from the
/// engine's start to its last snapshot.
fn in_process(scale: Scale, cgroups: &[u64]) -> Result<ScaleCost> {
    // The peak so far belongs to earlier measurements: count from here (clear_refs 5, 4.0+).
    std::fs::write("/proc/self/clear_refs", "5").context("resetting VmHWM")?;
    let rt = crate::runtime()?;
    let _rt = rt.enter();
    let facts = numatrace::kernel::facts::KernelFacts::gather()?;
    let opts = LoadOptions {
        max_tasks: scale.max_tasks(),
        ..crate::load_options()
    };
    let mut engine = Engine::start(facts, &opts)?;
    let result = (|| {
        let mut syn = Synthetic::new(std::process::id(), cgroups, scale.tasks)?;
        let mut c = cost("engine (in-process)", scale, syn.count());
        c.task_reader = engine.task_reader().to_owned();
        let mut generation = 0;
        let mut list = None;
        // Each timed snapshot after `percent` of the entries changed (every one but where
        // said); the first also resolves the cgroups.
        let mut timed = |d: Detail, times: usize, percent: usize| -> Result<(Vec<f64>, usize)> {
            let mut v = Vec::new();
            let mut n = 0;
            for _ in 0..times {
                generation += 1;
                syn.write_share(generation, percent)?;
                std::thread::sleep(SETTLE);
                let t = Instant::now();
                let s = engine.snapshot(d)?;
                v.push(ms(t.elapsed()));
                n = s.tasks.len();
                list = Some(list_mib(&s.tasks));
                // As the frontends do with a snapshot they are done with.
                engine.recycle(s);
            }
            Ok((v, n))
        };
        let (first, _) = timed(Detail::Summary, 1, 100)?;
        let (summary, n) = timed(Detail::Summary, REPEAT, 100)?;
        let (full, _) = timed(Detail::Full, REPEAT, 100)?;
        // Busy tasks a tenth of the whole (a snapshot after a full one first: every entry
        // stamped before it is then older than the margin).
        timed(Detail::Summary, 1, CHANGED_PERCENT)?;
        let (tenth, _) = timed(Detail::Summary, REPEAT, CHANGED_PERCENT)?;
        c.changed_share_ms = median(&tenth);
        c.kept_records = Some(engine.kept_records());
        c.unchanged_entries = engine.unchanged_entries();
        if n < scale.tasks {
            bail!(
                "the snapshot held {n} tasks, fewer than the {} written",
                scale.tasks
            );
        }
        c.first_snapshot_ms = first.first().copied();
        c.summary_ms = median(&summary);
        c.full_ms = median(&full);
        // The engine's peak, before the benchmark's own reads below (the iterator's loads a
        // second copy of the object and parses the kernel's BTF again: no command holds those).
        c.peak_rss_mib = procfs::peak_rss_mib(std::process::id())?;
        let reads = (0..REPEAT)
            .map(|_| batched_read_ms(&syn))
            .collect::<Result<Vec<f64>>>()?;
        c.map_read_ms = median(&reads);
        if engine.task_reader() == "iterator" {
            // The iterator's part alone, on the same map: every entry whole, then none.
            let (whole, keys) = iterator_reads_ms(&syn)?;
            c.iter_whole_ms = median(&whole);
            c.iter_keys_ms = median(&keys);
        }
        c.task_list_mib = list;
        Ok(c)
    })();
    rt.block_on(engine.stop())?;
    result
}

/// A numatrace command of this measurement; killed if dropped before [`Cmd::stop`].
struct Cmd {
    child: Child,
    /// Lines of the watched stream with when each arrived.
    lines: mpsc::Receiver<(Instant, String)>,
}

impl Cmd {
    /// Starts `numatrace ARGS`, watching stdout (`top`) or stderr (`serve`).
    fn start(bins: &Bins, args: &[&str], watch_stdout: bool) -> Result<Self> {
        let mut cmd = Command::new(&bins.numatrace);
        cmd.args(args).stdin(Stdio::null());
        if watch_stdout {
            cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        } else {
            cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        }
        let mut child = cmd.spawn().with_context(|| format!("starting {args:?}"))?;
        let stream: Box<dyn std::io::Read + Send> = if watch_stdout {
            Box::new(child.stdout.take().context("stdout")?)
        } else {
            Box::new(child.stderr.take().context("stderr")?)
        };
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stream).lines() {
                let Ok(l) = l else { break };
                if tx.send((Instant::now(), l)).is_err() {
                    break;
                }
            }
        });
        Ok(Self { child, lines })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a line `pred` accepts.
    fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> Result<Instant> {
        let deadline = Instant::now() + READY;
        let mut seen = Vec::new();
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok((t, l)) if pred(&l) => return Ok(t),
                Ok((_, l)) => seen.push(l),
                Err(_) => bail!("{what} never became ready; it said: {}", seen.join(" | ")),
            }
        }
    }

    /// SIGINT, as Ctrl-C; killed (on drop) after a minute.
    fn stop(mut self) -> Result<()> {
        match crate::frontends::interrupt(&mut self.child)? {
            Some(s) if s.success() => Ok(()),
            Some(s) => bail!("exited with {s}"),
            None => bail!("did not stop within a minute of SIGINT: killed"),
        }
    }
}

impl Drop for Cmd {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sleeps until `period` after `since`.
fn pace(since: Instant, period: Duration) {
    std::thread::sleep(period.saturating_sub(since.elapsed()));
}

/// `serve` with its default cardinality limits, scraped once a second over `window` (5 scrapes
/// at least), every entry rewritten before each scrape.
fn serve(bins: &Bins, scale: Scale, cgroups: &[u64], window: Duration) -> Result<ScaleCost> {
    let listen = format!("127.0.0.1:{PORT}");
    let max = scale.max_tasks().to_string();
    let cmd = Cmd::start(
        bins,
        &["serve", "--listen", &listen, "--max-tasks", &max],
        false,
    )?;
    cmd.wait_for("serve", |l| l.starts_with("numatrace: serving"))?;
    let pid = cmd.pid();
    let mut syn = Synthetic::new(pid, cgroups, scale.tasks)?;
    let mut c = cost("serve", scale, syn.count());
    let (c0, w0) = (procfs::cpu_ticks(pid)?, Instant::now());
    let mut scrapes = Vec::new();
    let mut generation = 0;
    while scrapes.len() < REPEAT || w0.elapsed() < window {
        let tick = Instant::now();
        generation += 1;
        syn.write(generation)?;
        std::thread::sleep(SETTLE);
        let t = Instant::now();
        scrape(PORT).context("scraping serve")?;
        scrapes.push(ms(t.elapsed()));
        pace(tick, Duration::from_secs(1));
    }
    let secs = w0.elapsed().as_secs_f64();
    c.cpu_pct =
        Some((procfs::cpu_ticks(pid)? - c0) as f64 / procfs::clk_tck() as f64 / secs * 100.0);
    c.peak_rss_mib = procfs::peak_rss_mib(pid)?;
    c.scrape_ms = median(&scrapes);
    c.scrape_max_ms = scrapes.iter().copied().reduce(f64::max);
    c.window_s = secs;
    cmd.stop().context("serve")?;
    Ok(c)
}

/// How long `top` runs at least: it keeps a minute of each busy task's refreshes (its
/// sparklines' span), so its memory and frame time are at their steady state only after that.
const TOP_STEADY: Duration = Duration::from_secs(70);

/// `top -b -d 1` over `window` (at least [`TOP_STEADY`]), every entry rewritten once a second:
/// its frames and the longest time between two.
fn top(bins: &Bins, scale: Scale, cgroups: &[u64], window: Duration) -> Result<ScaleCost> {
    let window = window.max(TOP_STEADY);
    let max = scale.max_tasks().to_string();
    let cmd = Cmd::start(bins, &["top", "-b", "-d", "1", "--max-tasks", &max], true)?;
    let is_frame = |l: &str| l.starts_with("numatrace");
    cmd.wait_for("top -b", is_frame)?;
    let pid = cmd.pid();
    let mut syn = Synthetic::new(pid, cgroups, scale.tasks)?;
    let mut c = cost("top -b", scale, syn.count());
    syn.write(1)?;
    let (c0, w0) = (procfs::cpu_ticks(pid)?, Instant::now());
    let mut generation = 1;
    while w0.elapsed() < window {
        let tick = Instant::now();
        generation += 1;
        syn.write(generation)?;
        pace(tick, Duration::from_secs(1));
    }
    let secs = w0.elapsed().as_secs_f64();
    c.cpu_pct =
        Some((procfs::cpu_ticks(pid)? - c0) as f64 / procfs::clk_tck() as f64 / secs * 100.0);
    c.peak_rss_mib = procfs::peak_rss_mib(pid)?;
    let frames: Vec<Instant> = cmd
        .lines
        .try_iter()
        .filter(|(t, l)| *t >= w0 && is_frame(l))
        .map(|(t, _)| t)
        .collect();
    c.frames = frames.len() as u64;
    c.max_frame_gap_s = frames
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .reduce(f64::max);
    c.window_s = secs;
    cmd.stop().context("top -b")?;
    Ok(c)
}
