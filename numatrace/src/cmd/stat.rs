//! `numatrace stat`: count for a window, then print per-task and total aggregates.

use std::{
    collections::BTreeMap,
    path::Path,
    process::ExitStatus,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow, bail};
use aya::{
    Ebpf,
    maps::{HashMap, MapData, PerCpuArray, RingBuf},
};
use tokio::{
    signal::unix::{Signal, SignalKind, signal},
    sync::{mpsc, watch},
};

use crate::{
    bpf::loader::{LoadOptions, Session},
    cli::StatArgs,
    kernel::{facts::KernelFacts, vmstat::Vmstat},
    model::{GapRecord, Model, VmaRow},
    report::stat::{Dropped, Histograms, KernelSummary, Scope, StatReport, Window},
    sources::{maps::Maps, ringbuf},
    spawn::{GatedChild, resolve},
};
use numatrace_common::{
    MAP_COUNTERS, MAP_EVENTS, MAP_FAULT_PAGES, MAP_MIGRATE_LATENCY, MAP_TASK_STATS,
    MAP_TRACKED_TGIDS,
};

fn take<T>(ebpf: &mut Ebpf, name: &str) -> Result<T>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = ebpf
        .take_map(name)
        .ok_or_else(|| anyhow!("map {name} missing from the eBPF object"))?;
    T::try_from(map).with_context(|| format!("map {name}"))
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// The process exists and has not exited (a zombie waiting for its parent counts as exited).
fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// SIGINT/SIGTERM, caught from numatrace's start so that neither kills it half-way.
pub struct Signals {
    int: Signal,
    term: Signal,
}

impl Signals {
    pub fn new() -> Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt()).context("SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("SIGTERM handler")?,
        })
    }

    async fn any(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
        }
    }
}

/// Waits for the window to end: the duration, a signal, or (with `pid`) that process exiting.
async fn wait_window(duration: Option<Duration>, pid: Option<u32>, signals: &mut Signals) {
    let sleep = async {
        match duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let gone = async {
        match pid {
            Some(pid) => {
                while process_alive(pid) {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = sleep => {}
        _ = gone => {}
        _ = signals.any() => {}
    }
}

/// Runs the traced command to completion, forwarding SIGINT/SIGTERM to it.
async fn run_command(
    command: &[std::ffi::OsString],
    quiet: bool,
    tracked: &mut HashMap<MapData, u32, u8>,
    signals: &mut Signals,
) -> Result<i32> {
    let gated = GatedChild::spawn(command, quiet).context("starting the command")?;
    let pid = gated
        .pid()
        .ok_or_else(|| anyhow!("the command exited before it started"))?;
    tracked
        .insert(&pid, &1u8, 0)
        .context("registering the command with the kernel filter")?;
    let mut child = gated.release().context("releasing the command")?;
    loop {
        tokio::select! {
            status = child.wait() => return Ok(exit_code(status?)),
            sig = signals.any() => {
                // SAFETY: plain kill(2) on our own child's pid, which is not yet reaped.
                unsafe { libc::kill(pid as i32, sig) };
            }
        }
    }
}

/// Prints `stat`'s report; returns the exit code (the command's, with a command).
pub async fn run(args: StatArgs, no_fentry: bool) -> Result<i32> {
    // Handlers first: a Ctrl-C while the hooks are still attaching then ends the window as soon
    // as it opens (with a summary) instead of killing numatrace half-way.
    let mut signals = Signals::new()?;
    let (report, exit) = collect(&args, no_fentry, &mut signals).await?;
    let text = if args.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        report.to_text(args.rows)
    };
    match &args.output {
        Some(path) => std::fs::write(path, text)
            .with_context(|| format!("writing the report to {}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(exit.unwrap_or(0))
}

/// Attaches, counts over the window `args` describes, detaches, and returns the report with
/// the command's exit code (if a command ran). Shared by `stat` and `check`.
pub async fn collect(
    args: &StatArgs,
    no_fentry: bool,
    signals: &mut Signals,
) -> Result<(StatReport, Option<i32>)> {
    if let Some(prog) = args.command.first()
        && resolve(Path::new(prog)).is_none()
    {
        bail!("command not found: {}", prog.to_string_lossy());
    }
    if let Some(pid) = args.pid
        && !process_alive(pid)
    {
        bail!("no process with pid {pid}");
    }
    let scope = if !args.command.is_empty() {
        Scope::Command
    } else if args.pid.is_some() {
        Scope::Pid
    } else {
        Scope::System
    };

    let facts = KernelFacts::gather().context("reading kernel facts")?;
    let opts = LoadOptions {
        max_tasks: args.max_tasks,
        ringbuf_bytes: args.ringbuf_size,
        filter_tgids: scope != Scope::System,
        emit_events: true,
        bpf_log: args.bpf_log,
        sample_hz: args.sample_hz,
        no_fentry,
    };
    let Session {
        mut ebpf,
        facts,
        hooks,
        ..
    } = Session::start(facts, &opts)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let bpf_logger = if args.bpf_log {
        Some(spawn_bpf_logger(&mut ebpf, stop_rx.clone())?)
    } else {
        None
    };
    let ring: RingBuf<MapData> = take(&mut ebpf, MAP_EVENTS)?;
    let maps = Maps {
        tasks: take(&mut ebpf, MAP_TASK_STATS)?,
        counters: take::<PerCpuArray<MapData, u64>>(&mut ebpf, MAP_COUNTERS)?,
        migrate_latency: take(&mut ebpf, MAP_MIGRATE_LATENCY)?,
        fault_pages: take(&mut ebpf, MAP_FAULT_PAGES)?,
        migrate_matrix: take(&mut ebpf, numatrace_common::MAP_MIGRATE_MATRIX)?,
        vmas: take(&mut ebpf, numatrace_common::MAP_VMA_STATS)?,
        gaps: take(&mut ebpf, numatrace_common::MAP_VMA_GAPS)?,
        region_faults: take(&mut ebpf, numatrace_common::MAP_REGION_FAULTS)?,
    };
    let mut tracked: HashMap<MapData, u32, u8> = take(&mut ebpf, MAP_TRACKED_TGIDS)?;
    if let Some(pid) = args.pid {
        tracked.insert(&pid, &1u8, 0).context("registering --pid")?;
    }

    let (tx, mut rx) = mpsc::unbounded_channel();
    let reader = tokio::spawn(ringbuf::run(ring, tx, stop_rx));
    let aggregator = tokio::spawn(async move {
        let mut model = Model::default();
        while let Some(ev) = rx.recv().await {
            model.apply(&ev);
        }
        model
    });

    let vm_before = Vmstat::read().unwrap_or_default();
    let started = Instant::now();
    let exit = match scope {
        Scope::Command => {
            Some(run_command(&args.command, args.quiet_command, &mut tracked, signals).await?)
        }
        Scope::Pid | Scope::System => {
            // Every hook is attached and the vmstat baseline read: from here on both count.
            // Said on stderr whatever the output format, so a caller can start its workload.
            match args.duration {
                None => {
                    eprintln!("numatrace: counting; press Ctrl-C to stop and print the summary")
                }
                Some(d) => eprintln!("numatrace: counting for {}", humantime::format_duration(d)),
            }
            wait_window(args.duration, args.pid, signals).await;
            None
        }
    };
    let elapsed = started.elapsed();
    // Before detaching, which is slow and busy: numatrace does not count itself, but the
    // kernel's counters would.
    let vm_after = Vmstat::read().unwrap_or_default();

    // Detach first, so that the drained ring buffer and the map read afterwards are one
    // consistent final state (a task exiting in between would otherwise be in neither).
    drop(ebpf);
    let _ = stop_tx.send(true);
    let undecodable = reader.await.context("ring buffer reader")??;
    if let Some(logger) = bpf_logger {
        // Its last messages are flushed when it sees the stop.
        let _ = logger.await;
    }
    let mut model = aggregator.await.context("aggregator")?;
    let live = maps.tasks().context("reading the task map")?;
    let counters = maps.counters().context("reading counters")?;
    let (latency, pages) = maps.histograms().context("reading histograms")?;
    let node_matrix = maps.node_flows().context("reading the migration matrix")?;
    let mut names = BTreeMap::new();
    let mut rows: BTreeMap<(u32, u64), VmaRow> = BTreeMap::new();
    for (tgid, start, v) in maps.vmas().context("reading per-VMA counts")? {
        let r = rows.entry((tgid, start)).or_default();
        (r.end, r.pte_updates, r.calls) = (v.vm_end, v.pte_updates, v.calls);
    }
    for (tgid, start, g) in maps.gaps().context("reading per-VMA scan gaps")? {
        let r = rows.entry((tgid, start)).or_default();
        r.end = r.end.max(g.vm_end);
        r.gap = Some(GapRecord {
            skips: g.skips,
            over_threads: g.over_threads,
            at_threshold: g.at_threshold,
            max_gap: g.max_gap,
            max_gap_threads: g.max_gap_threads,
        });
    }
    model.merge_vmas(rows.into_iter().map(|((tgid, start), mut r)| {
        r.mapping = names
            .entry(tgid)
            .or_insert_with(|| crate::sources::procfs::process_mapping_names(tgid))
            .get(&start)
            .cloned();
        (r.tgid, r.start) = (tgid, start);
        r
    }));
    model.merge_live(&live);
    let dropped = Dropped::compute(
        &counters,
        live.len() as u64,
        model.events.task_exit,
        undecodable,
    );
    if let Some(c) = &args.comm {
        model.retain_comm(c);
    }

    let mut report = StatReport::new(
        KernelSummary::from(&facts),
        Window {
            duration_s: elapsed.as_secs_f64(),
            scope,
            pid: args.pid,
            command: (!args.command.is_empty()).then(|| {
                args.command
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect()
            }),
            exit_code: exit,
            comm_filter: args.comm.clone(),
        },
        hooks,
        &model,
        vm_after.delta(&vm_before),
        &counters,
        dropped,
    );
    report.node_matrix = node_matrix;
    report.histograms = Histograms {
        migrate_latency_ns: latency,
        pages_per_hint_fault: pages,
        ..Histograms::default()
    };
    report
        .histograms
        .set_region_faults(&maps.region_faults().context("reading per-region faults")?);
    Ok((report, exit))
}

/// Forwards aya-log records until `stop`, then flushes what is left.
fn spawn_bpf_logger(
    ebpf: &mut Ebpf,
    mut stop: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>> {
    let logger = aya_log::EbpfLogger::init(ebpf).context("initialising aya-log")?;
    // SAFETY: the logger owns its map descriptor; flushing neither closes nor replaces it.
    let mut logger = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(logger, tokio::io::Interest::READABLE)
    }
    .context("polling aya-log")?;
    Ok(tokio::spawn(async move {
        loop {
            tokio::select! {
                guard = logger.readable_mut() => {
                    let Ok(mut guard) = guard else { break };
                    guard.get_inner_mut().flush();
                    guard.clear_ready();
                }
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        logger.get_mut().flush();
                        break;
                    }
                }
            }
        }
    }))
}
