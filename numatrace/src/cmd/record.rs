//! `numatrace record`: a window like `stat`'s, written to one capture file as it goes (see
//! [`crate::capture`]): machine facts and the hook report first, then every `--interval` the
//! ring records and a snapshot, and at the end the closing snapshot and the window. The
//! regression context (vmstat, sysctls, tunables, THP, config, the busiest tasks' procfs NUMA
//! state) is read at both ends of the window; the recorded command's (or the `--pid`
//! process's) procfs NUMA state always, whatever the hooks could count of it.

use std::{
    io::IsTerminal as _,
    path::PathBuf,
    sync::{Arc, Mutex, mpsc},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use std::collections::HashMap;

use crate::{
    capture::{
        CaptureWriter, End, EventRecord, Machine, SECTION_END, SECTION_EVENTS, SECTION_FIRST,
        SECTION_LAST, SECTION_MACHINE, SECTION_PROBES, SECTION_SAMPLE, SECTION_STATE,
        machine::{hostname, unix_now},
        redact::Redactor,
        state::{
            BUSIEST, CHOSEN_BUSIEST, CHOSEN_COMMAND, CHOSEN_FOLLOWED, CHOSEN_PID, State,
            SubjectRead, SubjectReads, TaskReads, busiest, start_time,
        },
    },
    cli::RecordArgs,
    engine::{Detail, Engine, Snapshot},
    model::{Filter, PackedCounts, Scope, TaskRecord, Window},
    session::{CollectOptions, Observer, Signals, collect_with},
    sources::procfs::process_alive,
};

/// Ring records kept between two ticks at most (the rest are counted as not kept).
const TAP_CAPACITY: usize = 1 << 19;
/// Records per events section (sections stay far below the format's size limit).
const EVENTS_PER_SECTION: usize = 50_000;
/// How often the busiest tasks' procfs state is read again during the window, so that one
/// that exits before the end keeps a recent state (each read walks the process's page tables
/// for `numa_maps`: seconds apart, a few processes).
const TASK_READ_EVERY: Duration = Duration::from_secs(5);
/// The recorded command is read right after it execs, then after 50 ms, doubling up to every
/// `--interval`, so that one that runs for a moment still has a read from late in its life
/// (its numa_maps are empty once it is a zombie, so only a read while it lived shows them).
const SUBJECT_FIRST_GAP: Duration = Duration::from_millis(50);
/// …but never more often than this many times the last read took: `numa_maps` walks the
/// process's page tables under its mmap lock (for a process of tens of GiB, tens of ms), so
/// the reads take at most 1/20 of the time, and the process's lock as much.
const SUBJECT_COST_FACTOR: u32 = 20;
/// How often numatrace looks for the command it is about to start, and whether it has exec'd.
const SUBJECT_POLL: Duration = Duration::from_millis(1);
/// How long after the command's argv changes (its exec has replaced numatrace's memory) the
/// first read waits: the kernel maps the program and its interpreter after that, and a read in
/// between finds only the new stack; the dynamic loader's work is done within this too.
const SUBJECT_EXEC_SETTLE: Duration = Duration::from_millis(10);
/// How long the start `state` waits for the command's first read (it is normally there within
/// milliseconds of the command's exec) before it is written without it.
const START_STATE_WAIT: Duration = Duration::from_secs(5);

/// numatrace's children (the command's trampoline is the only one), from
/// `/proc/self/task/*/children` (CONFIG_PROC_CHILDREN), else from every process's parent.
fn children_of_self() -> Vec<u32> {
    let mut out = Vec::new();
    let mut listed = false;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
                listed = true;
                out.extend(c.split_whitespace().filter_map(|w| w.parse::<u32>().ok()));
            }
        }
    }
    if listed {
        return out;
    }
    let me = std::process::id();
    let parent = |pid: &str| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid: u32 = name.parse().ok()?;
            (parent(&name) == Some(me)).then_some(pid)
        })
        .collect()
}

/// Whether `pid` is still numatrace's trampoline ([`crate::spawn::GATE_ARG`]), not yet the
/// command it execs.
fn is_trampoline(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|b| *b == 0).nth(1) == Some(crate::spawn::GATE_ARG.as_bytes()))
}

/// The reads of the window's subject — the recorded command, or the `--pid` process — taken
/// in a thread of their own, off the loop that drains the ring.
struct SubjectWatch {
    chosen: &'static str,
    reads: Arc<Mutex<SubjectReads>>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SubjectWatch {
    /// Starts watching `pid` (None: the command about to be started: numatrace's child once it
    /// has exec'd), taking in `first` if it was read already.
    fn start(
        pid: Option<u32>,
        chosen: &'static str,
        interval: Duration,
        first: Option<SubjectRead>,
    ) -> Self {
        let reads = Arc::new(Mutex::new(SubjectReads::default()));
        if let Some(pid) = pid {
            let mut r = reads.lock().unwrap_or_else(|e| e.into_inner());
            r.pid = Some(pid);
            r.born = start_time(pid);
            if let Some(f) = first {
                r.take(f);
            }
        }
        let (stop, stopped) = mpsc::channel();
        let shared = Arc::clone(&reads);
        let thread = std::thread::Builder::new()
            .name("numatrace-subject".into())
            .spawn(move || watch(pid, chosen, interval, &shared, &stopped))
            .ok();
        Self {
            chosen,
            reads,
            stop: Some(stop),
            thread,
        }
    }

    /// The reads so far.
    fn reads(&self) -> SubjectReads {
        self.reads.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops the reads and returns them.
    fn stop(mut self) -> SubjectReads {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.reads()
    }
}

/// The subject's reads (see [`SUBJECT_FIRST_GAP`]), until it is gone or `stop` says so.
fn watch(
    pid: Option<u32>,
    chosen: &'static str,
    interval: Duration,
    reads: &Mutex<SubjectReads>,
    stop: &mpsc::Receiver<()>,
) {
    let lock = || reads.lock().unwrap_or_else(|e| e.into_inner());
    // Sleeps `d`; false: told to stop.
    let sleep = |d: Duration| matches!(stop.recv_timeout(d), Err(mpsc::RecvTimeoutError::Timeout));
    let mut delay = SUBJECT_FIRST_GAP;
    let pid = match pid {
        Some(pid) => pid,
        None => {
            // The command's trampoline, started right after this thread; looked for at most
            // a tenth of the time (a scan of all of /proc where children are not listed).
            let pid = loop {
                let t = Instant::now();
                if let Some(p) = children_of_self().into_iter().min() {
                    break p;
                }
                if !sleep(SUBJECT_POLL.max(t.elapsed() * 10)) {
                    return;
                }
            };
            let born = start_time(pid);
            {
                let mut r = lock();
                r.pid = Some(pid);
                r.born = born;
            }
            // Read right after it execs the command (before, it is numatrace itself).
            while is_trampoline(pid) && start_time(pid) == born {
                if !sleep(SUBJECT_POLL) {
                    return;
                }
            }
            // The first read right after its exec is done.
            delay = SUBJECT_EXEC_SETTLE;
            pid
        }
    };
    let born = lock().born;
    loop {
        if !sleep(delay) {
            return;
        }
        let t = Instant::now();
        let r = SubjectRead::read(pid, chosen, unix_now());
        let cost = t.elapsed();
        // Read from the same process (not one given its pid since): kept when it found
        // its memory.
        let same = born.is_some() && start_time(pid) == born;
        if same {
            lock().take(r);
        }
        if !same || !process_alive(pid) {
            lock().gone_unix_s = Some(unix_now());
            return;
        }
        delay = if delay < SUBJECT_FIRST_GAP {
            SUBJECT_FIRST_GAP
        } else {
            (delay * 2).min(interval.max(SUBJECT_FIRST_GAP))
        }
        .max(cost * SUBJECT_COST_FACTOR);
    }
}

/// `numatrace-HOST-YYYYMMDD-HHMMSS.ntrace` in the current directory ([`crate::safe_fs::
/// create_unique`] takes the first free name from it).
pub fn default_path(redact: bool) -> PathBuf {
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let stamp: String = stamp
        .trim_end_matches('Z')
        .replace('T', "-")
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    // 2026-11-30-185500 -> 20261130-185500
    let (date, time) = stamp.split_at(stamp.len().min(10));
    // A redacted capture's name does not give the host away either.
    // The host name is the kernel's, set by anyone with CAP_SYS_ADMIN: only characters that
    // cannot make the name a path or an option.
    let host = if redact {
        String::new()
    } else {
        let safe: String = hostname()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        format!("{}-", safe.trim_start_matches(['.', '-']))
    };
    PathBuf::from(format!(
        "numatrace-{host}{}{time}.ntrace",
        date.replace('-', "")
    ))
}

struct Recorder {
    out: CaptureWriter,
    redact: Option<Redactor>,
    interval: Duration,
    events_written: u64,
    events_over: u64,
    samples_over: u64,
    not_kept: u64,
    progress: Option<ProgressBar>,
    started: Instant,
    /// Each task's counts at the previous sample: a sample carries only the tasks that changed.
    sampled: HashMap<(u32, u64), PackedCounts>,
    /// The first write that failed (a full disk): from then on everything is counted only.
    write_error: Option<String>,
    /// The busiest tasks' procfs state as last read, and when; a read in progress (off the
    /// loop that drains the ring: `numa_maps` of a big process takes long); the window's filter.
    reads: TaskReads,
    last_read: Option<Instant>,
    reading: Option<std::thread::JoinHandle<TaskReads>>,
    filter: Filter,
    /// The recorded command's or the `--pid` process's reads.
    subject: Option<SubjectWatch>,
    /// The start `state`, for a command: written once the command's first read is in (at a
    /// tick, or at the end for one that ran less than an interval).
    pending_start: Option<(State, Instant)>,
    /// When the window closed (for a command, right after it exited).
    closed_unix_s: Option<f64>,
}

/// The tasks of `s` the window's filter keeps (never numatrace's own).
fn traced(s: &Snapshot, f: &Filter) -> Vec<TaskRecord> {
    s.traced(f).cloned().collect()
}

impl Recorder {
    /// Writes a `state` section (redacted as the rest).
    fn write_state(&mut self, mut st: State) -> Result<()> {
        if let Some(r) = &self.redact {
            st.redact(r);
        }
        self.out.section(SECTION_STATE, &st)?;
        Ok(())
    }

    /// Writes the start `state` held back for the command's first read, once that is in (or
    /// with `force`, or after [`START_STATE_WAIT`], without it, saying why).
    fn flush_start(&mut self, force: bool) -> Result<()> {
        let Some((_, since)) = &self.pending_start else {
            return Ok(());
        };
        let subject = self.subject.as_ref().map(|w| (w.chosen, w.reads()));
        let ready = subject
            .as_ref()
            .is_none_or(|(_, r)| r.first.is_some() || r.gone_unix_s.is_some());
        if !(force || ready || since.elapsed() > START_STATE_WAIT) {
            return Ok(());
        }
        let Some((mut st, _)) = self.pending_start.take() else {
            return Ok(());
        };
        if let Some((chosen, r)) = subject {
            let read = r.first.unwrap_or_else(|| {
                let why = if r.pid.is_none() {
                    "the command had not started when the start was written"
                } else if r.gone_unix_s.is_some() || r.reads > 0 {
                    "the command exited before numatrace could read it"
                } else {
                    "the command had not exec'd yet when the start was written"
                };
                SubjectRead::missing(r.pid.unwrap_or(0), chosen, why, unix_now())
            });
            st.put_subject(read, None);
        }
        self.write_state(st)
    }

    /// Takes in a finished background read (or, with `wait`, waits for it).
    fn collect_reads(&mut self, wait: bool) {
        if self
            .reading
            .as_ref()
            .is_some_and(|h| wait || h.is_finished())
            && let Some(Ok(r)) = self.reading.take().map(std::thread::JoinHandle::join)
        {
            self.reads.merge(r);
        }
    }

    /// Reads the busiest tasks of `s` again, in a thread, when the last read is
    /// [`TASK_READ_EVERY`] old and done.
    fn refresh_reads(&mut self, s: &Snapshot) {
        self.collect_reads(false);
        if self.reading.is_some()
            || self
                .last_read
                .is_some_and(|t| t.elapsed() < TASK_READ_EVERY)
        {
            return;
        }
        let tasks: Vec<TaskRecord> = busiest(&traced(s, &self.filter), BUSIEST)
            .into_iter()
            .cloned()
            .collect();
        self.last_read = Some(Instant::now());
        self.reading = std::thread::Builder::new()
            .name("numatrace-procfs".into())
            .spawn(move || {
                let mut r = TaskReads::default();
                r.refresh(&tasks.iter().collect::<Vec<_>>(), unix_now());
                r
            })
            .ok();
    }

    fn snapshot(&self, mut s: Snapshot) -> Snapshot {
        if let Some(r) = &self.redact {
            r.snapshot(&mut s);
        }
        s
    }

    fn write_events(&mut self, engine: &mut Engine) -> Result<()> {
        let (events, not_kept) = engine.take_events();
        self.not_kept = not_kept;
        for chunk in events.chunks(EVENTS_PER_SECTION) {
            if !self.out.has_room() {
                self.events_over += chunk.len() as u64;
                continue;
            }
            let records: Vec<EventRecord> = chunk.iter().map(EventRecord::from_event).collect();
            self.out
                .section(SECTION_EVENTS, &records)
                .context("writing events")?;
            self.events_written += chunk.len() as u64;
        }
        Ok(())
    }

    fn write_sample(&mut self, engine: &mut Engine) -> Result<()> {
        if self.write_error.is_none() {
            self.flush_start(false)?;
        }
        if self.write_error.is_some() {
            let (events, _) = engine.take_events();
            self.events_over += events.len() as u64;
            self.samples_over += 1;
            return Ok(());
        }
        self.write_events(engine)?;
        if !self.out.has_room() {
            self.samples_over += 1;
            return Ok(());
        }
        let mut s = engine.snapshot(Detail::Summary)?;
        self.refresh_reads(&s);
        let sampled = &mut self.sampled;
        s.tasks.retain(|t| {
            let changed = sampled.get(&t.key()) != Some(&t.counts);
            if changed {
                sampled.insert(t.key(), t.counts.clone());
            }
            changed
        });
        let s = self.snapshot(s);
        self.out.section(SECTION_SAMPLE, &s)?;
        Ok(())
    }

    fn show(&self) {
        if let Some(p) = &self.progress {
            p.set_message(format!(
                "{:.0} s, {} events, {:.1} MiB{}",
                self.started.elapsed().as_secs_f64(),
                self.events_written,
                self.out.bytes as f64 / (1 << 20) as f64,
                match self.events_over + self.not_kept {
                    0 => String::new(),
                    n => format!(", {n} events not written"),
                }
            ));
        }
    }
}

impl Observer for Recorder {
    fn started(&mut self, engine: &mut Engine, first: &Snapshot, planned: &Window) -> Result<()> {
        engine.tap_events(TAP_CAPACITY);
        let mut machine = Machine::gather(
            &engine.facts,
            engine.cgroup_mount(),
            planned.cgroup_filter.as_deref(),
        );
        // For a capture cut short before `end`: its scope and filters.
        machine.window = Some(planned.clone());
        // At the start nothing has run yet: the tasks followed from the start (a --pid
        // process's), whose state the window begins from; the machine read now (its vmstat is
        // the mmtests rows' start), the tunables with it (debugfs mounted privately for the
        // read where it is not mounted).
        self.filter = planned.filter();
        let tasks = traced(first, &self.filter);
        let at_start: Vec<&TaskRecord> = tasks.iter().take(BUSIEST).collect();
        let subject = match planned.scope {
            Scope::Command => Some((None, CHOSEN_COMMAND)),
            Scope::Pid => planned.pid.map(|p| (Some(p), CHOSEN_PID)),
            Scope::System => None,
        };
        let note = match (subject, at_start.is_empty()) {
            (Some((_, chosen)), true) => {
                format!("{chosen}; the busiest tasks are named at the end")
            }
            (Some((_, chosen)), false) => format!("{chosen}, then the tasks followed at the start"),
            (None, true) => {
                "none followed at the start: the busiest tasks are named at the end".to_owned()
            }
            (None, false) => "the tasks followed at the start".to_owned(),
        };
        let mut st = self
            .reads
            .state("start", &at_start, CHOSEN_FOLLOWED, note, unix_now());
        // The scan tunables as the state found them, where the machine's own read found none
        // (debugfs not mounted).
        if machine.tunables.is_empty()
            && let Some(t) = st.system.tunables.value()
        {
            machine.tunables = t.clone();
        }
        if let Some(r) = &self.redact {
            machine.hostname = r.name(&machine.hostname);
            machine.command_line = machine.command_line.iter().map(|a| r.path(a)).collect();
            machine.redacted = true;
            if let Some(w) = &mut machine.window {
                r.window(w);
            }
        }
        self.sampled = first
            .tasks
            .iter()
            .map(|t| (t.key(), t.counts.clone()))
            .collect();
        self.out.section(SECTION_MACHINE, &machine)?;
        self.out.section(SECTION_PROBES, &engine.hooks)?;
        self.out
            .section(SECTION_FIRST, &self.snapshot(first.clone()))?;
        match subject {
            // The --pid process: read now, then as the command is.
            Some((Some(pid), chosen)) => {
                let r = SubjectRead::read(pid, chosen, unix_now());
                st.put_subject(r.clone(), None);
                self.subject = Some(SubjectWatch::start(
                    Some(pid),
                    chosen,
                    self.interval,
                    Some(r),
                ));
                self.write_state(st)?;
            }
            // The command starts once this returns: its first read is taken right after it
            // execs, and the start state waits for it.
            Some((None, chosen)) => {
                self.subject = Some(SubjectWatch::start(None, chosen, self.interval, None));
                self.pending_start = Some((st, Instant::now()));
            }
            None => self.write_state(st)?,
        }
        self.show();
        Ok(())
    }

    fn interval(&self) -> Option<Duration> {
        Some(self.interval)
    }

    fn tick(&mut self, engine: &mut Engine) -> Result<()> {
        // A failed write must not end the window (the command runs on, the kernel side stays
        // attached until the normal end): say it once, and count from then on.
        if let Err(e) = self.write_sample(engine) {
            let e = format!("{e:#}");
            if self.write_error.is_none() {
                tracing::error!(
                    "writing {}: {e}; recording goes on, counting only",
                    self.out.path.display()
                );
                self.write_error = Some(e);
            }
        }
        self.show();
        Ok(())
    }

    fn finished(&mut self, engine: &mut Engine) -> Result<()> {
        self.closed_unix_s = Some(unix_now());
        if self.write_error.is_none() {
            self.flush_start(true)?;
            self.write_events(engine)?;
        }
        Ok(())
    }
}

pub async fn run(args: RecordArgs, no_fentry: bool) -> Result<i32> {
    let mut signals = Signals::new()?;
    let run_as =
        crate::identity::for_traced_command(args.traced.user.as_deref(), &args.traced.command)?;
    // Created before anything is attached: an unwritable or taken place fails at once.
    let (path, file) = match &args.output {
        Some(p) => (p.clone(), crate::safe_fs::create_new(p, args.force)?),
        None => crate::safe_fs::create_unique(&default_path(args.redact))?,
    };
    let out = CaptureWriter::from_file(file, &path, args.max_size)
        .with_context(|| format!("writing {}", path.display()))?;

    let progress = std::io::stderr().is_terminal().then(|| {
        let p = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        p.set_style(
            ProgressStyle::with_template("{spinner} recording {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        p.enable_steady_tick(Duration::from_millis(200));
        p
    });
    let mut rec = Recorder {
        out,
        redact: args.redact.then(Redactor::new),
        interval: args.interval,
        events_written: 0,
        events_over: 0,
        samples_over: 0,
        not_kept: 0,
        progress,
        started: Instant::now(),
        sampled: HashMap::new(),
        write_error: None,
        reads: TaskReads::default(),
        last_read: None,
        reading: None,
        filter: Filter::default(),
        subject: None,
        pending_start: None,
        closed_unix_s: None,
    };
    let opts = CollectOptions {
        duration: args.duration,
        pid: args.pid,
        command: args.traced.command.clone(),
        quiet_command: false,
        run_as,
        comm: args.view.comm.clone(),
        cgroup: args.view.cgroup.clone(),
        max_tasks: args.kernel.max_tasks,
        max_vmas: numatrace_common::MAX_VMAS,
        ringbuf_size: args.ringbuf_size,
        sample_hz: args.kernel.sample_hz,
        bpf_log: false,
        no_fentry,
        needs: crate::bpf::needs::RECORD,
    };
    let collected = collect_with(&opts, &mut signals, &mut rec).await;
    if let Some(p) = &rec.progress {
        p.finish_and_clear();
    }
    // The command's or --pid process's reads end with the window.
    let subject = rec.subject.take().map(|w| (w.chosen, w.stop()));
    if collected.is_err() {
        // Whatever failed, the start state held back for the command's first read is not
        // lost.
        let _ = rec.flush_start(true);
    }
    let c = collected?;
    let mut window = c.window.clone();
    if let Some(r) = &rec.redact {
        r.window(&mut window);
    }
    rec.collect_reads(true);
    let tasks = traced(&c.last, &c.window.filter());
    let top = busiest(&tasks, BUSIEST);
    let note = if top.is_empty() {
        format!(
            "none of the {} traced tasks updated a PTE, took a hint fault or migrated a page \
             that numatrace could count",
            tasks.len()
        )
    } else {
        format!(
            "the {} busiest of {} traced tasks, by PTE updates + hint faults + pages migrated",
            top.len(),
            tasks.len()
        )
    };
    let note = match &subject {
        Some((chosen, _)) => format!("{chosen} first; then {note}"),
        None => note,
    };
    let now = unix_now();
    let mut st = rec.reads.state("end", &top, CHOSEN_BUSIEST, note, now);
    if let Some((chosen, r)) = subject {
        if r.alive() {
            // Still running (a --pid process at the end of -d): read it now.
            let pid = r.pid.unwrap_or(0);
            st.put_subject(SubjectRead::read(pid, chosen, unix_now()), None);
        } else {
            // Gone: its last read that found its memory; it exited by the time it was seen
            // gone or the window closed on its exit, whichever came first.
            let gone = [r.gone_unix_s, rec.closed_unix_s]
                .into_iter()
                .flatten()
                .reduce(f64::min)
                .unwrap_or(now);
            let read = r.last.unwrap_or_else(|| {
                SubjectRead::missing(
                    r.pid.unwrap_or(0),
                    chosen,
                    "it exited before numatrace could read it",
                    now,
                )
            });
            st.put_subject(read, Some(gone));
        }
    }
    rec.write_state(st)?;
    rec.out
        .section(SECTION_LAST, &rec.snapshot(c.last.clone()))?;
    let end = End {
        window,
        exit_code: c.exit,
        events_written: rec.events_written,
        events_over_max_size: rec.events_over,
        samples_over_max_size: rec.samples_over,
        events_not_kept: rec.not_kept,
        bytes: rec.out.bytes,
        ended_unix_s: unix_now(),
    };
    rec.out.section(SECTION_END, &end)?;
    let bytes = rec.out.finish()?;
    // The default name holds the hostname.
    let shown = crate::text_escape::EscapedBytes(path.as_os_str().as_encoded_bytes());
    if let Some(e) = &rec.write_error {
        eprintln!(
            "numatrace: {} is incomplete: a write failed mid-way ({e}); what followed was counted, \
             not written",
            shown
        );
    }
    eprintln!(
        "numatrace: wrote {} ({:.1} MiB, {} events{}); read it with `numatrace report {}`",
        shown,
        bytes as f64 / (1 << 20) as f64,
        rec.events_written,
        match rec.events_over + rec.not_kept {
            0 => String::new(),
            n => format!(", {n} more counted but not written"),
        },
        shown
    );
    Ok(c.exit.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_name_has_host_and_time() {
        assert!(
            !default_path(true)
                .display()
                .to_string()
                .contains(&hostname())
        );
        let p = default_path(false).display().to_string();
        assert!(p.starts_with(&format!("numatrace-{}-", hostname())), "{p}");
        assert!(p.ends_with(".ntrace"));
        let stamp = p
            .trim_end_matches(".ntrace")
            .rsplitn(3, '-')
            .take(2)
            .collect::<Vec<_>>();
        assert_eq!(stamp[0].len(), 6, "{p}");
        assert_eq!(stamp[1].len(), 8, "{p}");
    }
}
