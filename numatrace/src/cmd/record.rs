//! `numatrace record`: a window like `stat`'s, written to one capture file as it goes (see
//! [`crate::capture`]): machine facts and the hook report first, then every `--interval` the
//! ring records and a snapshot, and at the end the closing snapshot and the window. The
//! regression context (vmstat, sysctls, tunables, THP, config, the busiest tasks' procfs NUMA
//! state) is read at both ends of the window.

use std::{
    io::IsTerminal as _,
    path::PathBuf,
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
        state::{BUSIEST, State, TaskReads, busiest},
    },
    cli::RecordArgs,
    engine::{Detail, Engine, Snapshot},
    model::{Counts, Filter, TaskRecord, Window},
    session::{CollectOptions, Observer, Signals, collect_with},
};

/// Ring records kept between two ticks at most (the rest are counted as not kept).
const TAP_CAPACITY: usize = 1 << 19;
/// Records per events section (sections stay far below the format's size limit).
const EVENTS_PER_SECTION: usize = 50_000;
/// How often the busiest tasks' procfs state is read again during the window, so that one
/// that exits before the end keeps a recent state (each read walks the process's page tables
/// for `numa_maps`: seconds apart, a few processes).
const TASK_READ_EVERY: Duration = Duration::from_secs(5);

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
    sampled: HashMap<(u32, u64), Counts>,
    /// The first write that failed (a full disk): from then on everything is counted only.
    write_error: Option<String>,
    /// The busiest tasks' procfs state as last read, and when; a read in progress (off the
    /// loop that drains the ring: `numa_maps` of a big process takes long); the window's filter.
    reads: TaskReads,
    last_read: Option<Instant>,
    reading: Option<std::thread::JoinHandle<TaskReads>>,
    filter: Filter,
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
        // At the start nothing has run yet: the tasks followed from the start (a --pid process,
        // the command), whose state the window begins from.
        self.filter = planned.filter();
        let tasks = traced(first, &self.filter);
        let at_start: Vec<&TaskRecord> = tasks.iter().take(BUSIEST).collect();
        let note = if at_start.is_empty() {
            "none followed at the start: the busiest tasks are named at the end".to_owned()
        } else {
            "the tasks followed at the start".to_owned()
        };
        let st = self.reads.state("start", &at_start, note, unix_now());
        self.write_state(st)?;
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
        if self.write_error.is_none() {
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
        emit_spans: true,
    };
    let collected = collect_with(&opts, &mut signals, &mut rec).await;
    if let Some(p) = &rec.progress {
        p.finish_and_clear();
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
    let st = rec.reads.state("end", &top, note, unix_now());
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
