//! One collection window, as `stat`, `record` and `check` count: attach, take the first snapshot, let the
//! window run (a duration, a process's life, a command's, or until a signal) while an
//! [`Observer`] watches, take the last snapshot, detach.

use std::{path::Path, process::ExitStatus, time::Duration};

use anyhow::{Context as _, Result, anyhow, bail};

use super::{Signals, filter::cgroup_filter};
use crate::{
    bpf::{
        loader::{HookReport, LoadOptions},
        needs::Needs,
    },
    engine::{Detail, Engine, Snapshot},
    identity::Identity,
    kernel::facts::KernelFacts,
    model::{Filter, Scope, Window},
    sources::procfs::process_alive,
    spawn::{GatedChild, resolve},
    text_escape,
};
use numatrace_common::{DEFAULT_MAX_TASKS, DEFAULT_RINGBUF_BYTES, MAX_VMAS};

/// Whether `prog` is found as execvp would find it, looked for with the rights of the user it
/// will run as: root's would tell that user what exists where they cannot look.
fn found_as(prog: &Path, run_as: Option<&Identity>) -> Result<bool> {
    Ok(match run_as {
        Some(id) => crate::invoker::with_rights(&id.creds(), || resolve(prog).is_some())
            .context("looking for the command with its user's rights")?,
        None => resolve(prog).is_some(),
    })
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
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

/// Starts the traced command, followed by the kernel filter from its first instruction.
fn start_command(
    opts: &CollectOptions,
    engine: &mut Engine,
) -> Result<(tokio::process::Child, u32)> {
    let gated = GatedChild::spawn(&opts.command, opts.quiet_command, opts.run_as.as_ref())
        .context("starting the command")?;
    let pid = gated
        .pid()
        .ok_or_else(|| anyhow!("the command exited before it started"))?;
    engine
        .follow(pid)
        .context("registering the command with the kernel filter")?;
    let child = gated.release().context("releasing the command")?;
    Ok((child, pid))
}

/// Runs `observer.tick` every `observer.interval()` until `window` ends.
async fn tick_until<O: Observer + ?Sized>(
    window: impl std::future::Future<Output = Result<Option<i32>>>,
    engine: &mut Engine,
    observer: &mut O,
) -> Result<Option<i32>> {
    let period = observer.interval();
    let mut ticker = tokio::time::interval(period.unwrap_or(Duration::from_secs(3600)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate: the window has only just opened.
    ticker.tick().await;
    tokio::pin!(window);
    loop {
        tokio::select! {
            r = &mut window => return r,
            _ = ticker.tick(), if period.is_some() => observer.tick(engine)?,
        }
    }
}

/// What a frontend does while a window is open (`record` writes samples and events).
pub trait Observer {
    /// Called with the first snapshot and the window as planned (scope, command, filters), once
    /// every hook is attached and before the window opens.
    fn started(
        &mut self,
        _engine: &mut Engine,
        _first: &Snapshot,
        _planned: &Window,
    ) -> Result<()> {
        Ok(())
    }
    /// How often [`Observer::tick`] runs while the window is open (None: never).
    fn interval(&self) -> Option<Duration> {
        None
    }
    fn tick(&mut self, _engine: &mut Engine) -> Result<()> {
        Ok(())
    }
    /// Called once the window has closed (its last snapshot taken), before detaching.
    fn finished(&mut self, _engine: &mut Engine) -> Result<()> {
        Ok(())
    }
}

/// An observer that does nothing: only the two ends of the window count.
pub struct NoObserver;

impl Observer for NoObserver {}

/// What one collection window is: its scope, its end, the view and the kernel side's sizes.
/// `stat` fills it from its arguments, `check` for each reproducer it runs.
#[derive(Clone, Debug)]
pub struct CollectOptions {
    pub duration: Option<Duration>,
    pub pid: Option<u32>,
    pub command: Vec<std::ffi::OsString>,
    /// Keep the command's stdout and stderr to itself (check's reproducers are quiet).
    pub quiet_command: bool,
    /// Who the command runs as (None: as numatrace).
    pub run_as: Option<Identity>,
    pub comm: Option<String>,
    pub cgroup: Option<String>,
    pub max_tasks: u32,
    pub max_vmas: u32,
    pub ringbuf_size: u32,
    pub sample_hz: u64,
    pub bpf_log: bool,
    pub no_fentry: bool,
    /// What the command reads from the kernel side (`record`'s or a report's, see
    /// `bpf::needs`).
    pub needs: Needs,
}

impl CollectOptions {
    /// Defaults around one quiet command (check's reproducers).
    pub fn for_command(command: Vec<std::ffi::OsString>, no_fentry: bool) -> Self {
        Self {
            duration: None,
            pid: None,
            command,
            quiet_command: true,
            run_as: None,
            comm: None,
            cgroup: None,
            max_tasks: DEFAULT_MAX_TASKS,
            max_vmas: MAX_VMAS,
            ringbuf_size: DEFAULT_RINGBUF_BYTES,
            sample_hz: 99,
            bpf_log: false,
            no_fentry,
            needs: crate::bpf::needs::STAT_JSON,
        }
    }
}

/// Attaches, takes a snapshot, counts over the window `opts` describes, takes another and
/// detaches: the two ends of the window (`stat` and `check` need nothing in between).
pub async fn collect(opts: &CollectOptions, signals: &mut Signals) -> Result<Collected> {
    collect_with(opts, signals, &mut NoObserver).await
}

/// One collected window: its two snapshots and what a report of it needs.
pub struct Collected {
    pub facts: KernelFacts,
    pub hooks: Vec<HookReport>,
    pub first: Snapshot,
    pub last: Snapshot,
    pub window: Window,
    pub filter: Filter,
    pub exit: Option<i32>,
}

/// [`collect`] with an observer of the open window.
pub async fn collect_with<O: Observer + ?Sized>(
    opts: &CollectOptions,
    signals: &mut Signals,
    observer: &mut O,
) -> Result<Collected> {
    // A run of several windows (check) that was told to stop starts no further one.
    if let Some(sig) = signals.received() {
        bail!("interrupted by signal {sig}: no further window started");
    }
    if let Some(prog) = opts.command.first()
        && !found_as(Path::new(prog), opts.run_as.as_ref())?
    {
        bail!(
            "command not found: {}",
            text_escape::EscapedBytes(prog.as_encoded_bytes())
        );
    }
    if let Some(pid) = opts.pid
        && !process_alive(pid)
    {
        bail!("no process with pid {pid}");
    }
    let scope = if !opts.command.is_empty() {
        Scope::Command
    } else if opts.pid.is_some() {
        Scope::Pid
    } else {
        Scope::System
    };

    let facts = KernelFacts::gather().context("reading kernel facts")?;
    let load = LoadOptions {
        max_tasks: opts.max_tasks,
        max_vmas: opts.max_vmas,
        ringbuf_bytes: opts.ringbuf_size,
        filter_tgids: scope != Scope::System,
        bpf_log: opts.bpf_log,
        sample_hz: opts.sample_hz,
        no_fentry: opts.no_fentry,
        ..LoadOptions::reading(opts.needs)
    };
    let mut engine = Engine::start(facts, &load)?;
    let cgroup_filter = cgroup_filter(&engine, opts.cgroup.as_deref())?;
    if let Some(pid) = opts.pid {
        engine.follow(pid).context("following --pid")?;
    }

    let planned = Window {
        duration_s: 0.0,
        scope,
        pid: opts.pid,
        command: (!opts.command.is_empty()).then(|| {
            opts.command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        }),
        exit_code: None,
        comm_filter: opts.comm.clone(),
        cgroup_filter,
        consistent: false,
    };
    // The window's edges read the kernel's counters exact (node counters lag per CPU).
    crate::kernel::vmstat::Vmstat::fold_per_cpu();
    let first = engine.snapshot(Detail::Full)?;
    observer.started(&mut engine, &first, &planned)?;
    let exit = match scope {
        Scope::Command => {
            let (mut child, pid) = start_command(opts, &mut engine)?;
            let sig_ref = &mut *signals;
            let window = async move {
                loop {
                    tokio::select! {
                        status = child.wait() => return Ok(Some(exit_code(status?))),
                        sig = sig_ref.any() => {
                            // SAFETY: plain kill(2) on our own child's pid, not yet reaped.
                            unsafe { libc::kill(pid as i32, sig) };
                        }
                    }
                }
            };
            tick_until(window, &mut engine, observer).await?
        }
        Scope::Pid | Scope::System => {
            // Every hook is attached and the first snapshot (with its vmstat bracket) taken:
            // from here on both count. Said on stderr whatever the output format, so that a
            // caller can start its workload.
            match opts.duration {
                None => {
                    eprintln!("numatrace: counting; press Ctrl-C to stop and print the summary")
                }
                Some(d) => eprintln!("numatrace: counting for {}", humantime::format_duration(d)),
            }
            let window = async {
                wait_window(opts.duration, opts.pid, signals).await;
                Ok(None)
            };
            tick_until(window, &mut engine, observer).await?
        }
    };
    // The window closes at this snapshot, before detaching (which is slow and busy).
    crate::kernel::vmstat::Vmstat::fold_per_cpu();
    // The report's counts: every entry read whole, none taken as unchanged.
    engine.read_whole_next();
    let last = engine.snapshot(Detail::Full)?;
    observer.finished(&mut engine)?;
    let (facts, hooks) = (engine.facts.clone(), engine.hooks.clone());
    engine.stop().await?;
    let span_ns = last.mono_ns.saturating_sub(first.mono_ns);
    let consistent = first.consistent && last.consistent;
    let filter = planned.filter();
    let window = Window {
        duration_s: span_ns as f64 / 1e9,
        exit_code: exit,
        consistent,
        ..planned
    };
    Ok(Collected {
        facts,
        hooks,
        first,
        last,
        window,
        filter,
        exit,
    })
}
