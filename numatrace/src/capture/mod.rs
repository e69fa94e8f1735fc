//! The capture file `numatrace record` writes and `numatrace report` reads: everything a kernel
//! developer needs from the reporter's machine, readable anywhere without root or BPF.
//!
//! Sections (each a JSON document in the container of [`format`]), in the order written:
//! `machine` (kernel, nodes, sysctls, tunables, THP, config), `probes` (the hook report),
//! `first` (the detailed snapshot at the start), then every `--interval`: `events` (the ring
//! records since the previous one) and `sample` (a snapshot, for rates over time); at the end
//! `last` (the detailed snapshot at the end) and `end` (the window and what was not written).
//! A `state` section follows `first` and precedes `last`: vmstat, sysctls, tunables, nodes, THP,
//! kernel config and the busiest tasks' procfs NUMA state at each end of the window.
//! A capture without `end` was cut short; the report then stops at its last `sample`.
//!
//! Captures travel between strangers, so the reader trusts nothing a file says: whatever the
//! input, `report` stays within bounded memory and time (a file of 100 MiB is read or refused
//! in seconds and well under 512 MiB), and a capture past any limit of [`limits::CAPS`] is
//! refused with one line naming it. The limits, against what `record` writes (`--max-size`
//! 512M by default, a sample every `--interval` of 1 s, at most `--max-tasks` 16384 live tasks
//! in the kernel, events compressing about 13:1):
//! - 64 MiB decompressed per section (a sample of 16384 busy tasks is about 25 MiB; a second
//!   of heavy migration about 0.5 MiB of events), the zstd window at most 16 MiB;
//! - 2 GiB decompressed for the whole file, or 16 times the file's size when larger (so a
//!   `--max-size` capture of 512 MiB still reads, and a small file cannot expand past what
//!   `report` parses in a few seconds);
//! - 2 Mi sections, 256 Ki samples (three days at 1 s), 64 Ki tasks per snapshot (4 times
//!   `--max-tasks`; a task is 104 bytes in memory and its packed counts at most ~620 more, and
//!   a report holds a few copies) and 128 Ki distinct tasks over the samples (exited ones
//!   included), 256 Ki VMA records per snapshot,
//!   8 Mi task and VMA records in all snapshots together (parsing one costs about a
//!   microsecond; real ones are about 1 KiB of JSON, so the byte limit comes first), 1 Mi
//!   events per section and 4 Gi in all, 8 Mi JSON values per section (a number is 8 bytes in
//!   memory) and JSON nested at most 127 deep (serde_json's own limit of 128, kept);
//! - strings: a comm 64 bytes (the kernel keeps 15), a host name 256, a cgroup or mapping path
//!   64 KiB (PATH_MAX, then redacted or escaped), a command-line argument or any other string
//!   1 MiB.
//!
//! Counters from a capture are summed with saturating arithmetic: a crafted u64::MAX stays
//! u64::MAX in a total instead of wrapping.

pub mod events;
pub mod format;
pub mod limits;
pub mod machine;
pub mod redact;
pub mod state;

use std::{
    fs::File,
    io::{BufReader, Write as _},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use thiserror::Error;

use std::collections::BTreeMap;

use crate::{
    bpf::loader::HookReport,
    engine::Snapshot,
    model::{Counts, Filter, TaskRecord, Window},
};
pub use events::EventRecord;
use format::{FormatError, Reader};
use limits::{CAPS, Caps, Refusal};
pub use machine::Machine;

pub const SECTION_MACHINE: u32 = 1;
pub const SECTION_PROBES: u32 = 2;
pub const SECTION_FIRST: u32 = 3;
pub const SECTION_EVENTS: u32 = 4;
pub const SECTION_SAMPLE: u32 = 5;
pub const SECTION_LAST: u32 = 6;
pub const SECTION_END: u32 = 7;
/// The regression context ([`state::State`]): once after `first` (phase `start`), once before
/// `last` (phase `end`). A reader older than it skips it as an unknown section.
pub const SECTION_STATE: u32 = 8;

/// The closing section: the window as `stat` reports it, and what did not fit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct End {
    pub window: Window,
    pub exit_code: Option<i32>,
    pub events_written: u64,
    /// Ring records past `--max-size`: counted here, not written.
    pub events_over_max_size: u64,
    /// Samples not written past `--max-size`.
    pub samples_over_max_size: u64,
    /// Ring records the recorder could not keep up with (its tap was full).
    pub events_not_kept: u64,
    pub bytes: u64,
    pub ended_unix_s: f64,
}

#[derive(Debug, Error)]
pub enum CaptureError {
    #[error("{path}: {source}")]
    Format {
        path: PathBuf,
        #[source]
        source: FormatError,
    },
    #[error("{path}: section {what} at byte {offset} is not valid: {why}")]
    Section {
        path: PathBuf,
        what: &'static str,
        offset: u64,
        why: String,
    },
    /// A section goes past a limit of [`limits::CAPS`].
    #[error("{path}: section {index} ({what}) at byte {offset}: {refusal}")]
    Refused {
        path: PathBuf,
        what: &'static str,
        index: u64,
        offset: u64,
        refusal: Refusal,
    },
    #[error("{path}: {what}")]
    Missing { path: PathBuf, what: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Writes sections as they come; each reaches the file in one write, so a capture killed at
/// any moment holds whole sections up to the last one written.
pub struct CaptureWriter {
    file: File,
    pub path: PathBuf,
    pub bytes: u64,
    /// Events and samples stop being written past this size (the closing sections still are).
    pub max_size: u64,
}

impl CaptureWriter {
    /// Creates `path` exclusively (see [`crate::safe_fs::create_new`]).
    pub fn create(path: &Path, max_size: u64) -> std::io::Result<Self> {
        let file = crate::safe_fs::create_new(path, false).map_err(std::io::Error::other)?;
        Self::from_file(file, path, max_size)
    }

    /// Writes the capture to `file`, already created (safely) at `path`.
    pub fn from_file(mut file: File, path: &Path, max_size: u64) -> std::io::Result<Self> {
        let mut head = Vec::new();
        format::write_header(
            &mut head,
            &format!("numatrace {}", env!("CARGO_PKG_VERSION")),
        )?;
        file.write_all(&head)?;
        Ok(Self {
            file,
            path: path.to_owned(),
            bytes: head.len() as u64,
            max_size,
        })
    }

    pub fn section<T: Serialize>(&mut self, kind: u32, value: &T) -> std::io::Result<()> {
        let raw = serde_json::to_vec(value).map_err(std::io::Error::other)?;
        let mut buf = Vec::new();
        self.bytes += format::write_section(&mut buf, kind, &raw)?;
        self.file.write_all(&buf)
    }

    /// Whether another section of optional data (events, samples) still fits.
    pub fn has_room(&self) -> bool {
        self.bytes < self.max_size
    }

    pub fn finish(self) -> std::io::Result<u64> {
        self.file.sync_all()?;
        Ok(self.bytes)
    }
}

/// A capture as read, without its events (see [`for_each_event`]).
#[derive(Debug)]
pub struct Capture {
    pub path: PathBuf,
    pub writer: String,
    pub machine: Machine,
    pub hooks: Vec<HookReport>,
    pub first: Snapshot,
    /// Each sample's time and the traced tasks' totals then (rates over time).
    pub samples: Vec<(u64, Counts)>,
    /// The latest sample with every task as last written (samples carry only the tasks that
    /// changed since the previous one).
    pub latest: Option<Snapshot>,
    pub last: Option<Snapshot>,
    pub end: Option<End>,
    /// The regression context at the start and the end of the window (the first `start` and
    /// the last `end` state section; none in captures before they existed).
    pub state_start: Option<state::State>,
    pub state_end: Option<state::State>,
    pub event_sections: usize,
    pub events: u64,
    pub unknown_sections: usize,
    /// Where the file was cut short, if it was.
    pub truncated_at: Option<u64>,
}

/// Checks a section against the limits without building anything (see [`limits::scan`]).
fn scan(
    path: &Path,
    what: &'static str,
    s: &format::Section,
    caps: &Caps,
) -> Result<limits::Tally, CaptureError> {
    match limits::scan(&s.data, caps) {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(refusal)) => Err(CaptureError::Refused {
            path: path.to_owned(),
            what,
            index: s.index,
            offset: s.offset,
            refusal,
        }),
        Err(e) => Err(CaptureError::Section {
            path: path.to_owned(),
            what,
            offset: s.offset,
            why: e.to_string(),
        }),
    }
}

/// A snapshot section, once it is known to be within the limits; `records` counts the task
/// and VMA records of all snapshots so far.
fn parse_snapshot(
    path: &Path,
    what: &'static str,
    s: &format::Section,
    caps: &Caps,
    records: &mut u64,
) -> Result<Snapshot, CaptureError> {
    let t = scan(path, what, s, caps)?;
    *records = records.saturating_add(t.tasks).saturating_add(t.vmas);
    if *records > caps.records {
        return Err(CaptureError::Refused {
            path: path.to_owned(),
            what,
            index: s.index,
            offset: s.offset,
            refusal: Refusal::Total {
                what: "task and VMA records",
                limit: caps.records,
            },
        });
    }
    serde_json::from_slice(&s.data).map_err(|e| CaptureError::Section {
        path: path.to_owned(),
        what,
        offset: s.offset,
        why: e.to_string(),
    })
}

/// A section's JSON, once it is known to be within the limits.
fn parse<T: DeserializeOwned>(
    path: &Path,
    what: &'static str,
    s: &format::Section,
    caps: &Caps,
) -> Result<T, CaptureError> {
    scan(path, what, s, caps)?;
    serde_json::from_slice(&s.data).map_err(|e| CaptureError::Section {
        path: path.to_owned(),
        what,
        offset: s.offset,
        why: e.to_string(),
    })
}

fn format_error(path: &Path) -> impl Fn(FormatError) -> CaptureError + '_ {
    |source| CaptureError::Format {
        path: path.to_owned(),
        source,
    }
}

fn open_reader(path: &Path) -> Result<Reader<BufReader<File>>, CaptureError> {
    let io = |source| CaptureError::Io {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    // What the file holds on disk, not its length: a sparse hole must not buy a crafted file
    // 16 x its length in decompression budget.
    let meta = file.metadata().map_err(io)?;
    let bytes = meta
        .len()
        .min(std::os::unix::fs::MetadataExt::blocks(&meta).saturating_mul(512));
    Reader::with_limits(BufReader::new(file), CAPS.format(bytes)).map_err(format_error(path))
}

impl Capture {
    /// Reads every section but the events (which only the timeline needs, streamed).
    pub fn open(path: &Path) -> Result<Self, CaptureError> {
        Self::read(path, open_reader(path)?, &CAPS)
    }

    /// Reads a capture from any reader (`path` names it in errors).
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Self, CaptureError> {
        Self::from_bytes_with(path, bytes, &CAPS)
    }

    /// [`Capture::from_bytes`] with other limits than [`CAPS`].
    pub fn from_bytes_with(path: &Path, bytes: &[u8], caps: &Caps) -> Result<Self, CaptureError> {
        let r = Reader::with_limits(bytes, caps.format(bytes.len() as u64))
            .map_err(format_error(path))?;
        Self::read(path, r, caps)
    }

    fn read<R: std::io::Read>(
        path: &Path,
        mut r: Reader<R>,
        caps: &Caps,
    ) -> Result<Self, CaptureError> {
        let writer = r.header.writer.clone();
        let (mut machine, mut hooks, mut first, mut last, mut end) = (None, None, None, None, None);
        let (mut state_start, mut state_end): (Option<state::State>, Option<state::State>) =
            (None, None);
        let mut samples = Vec::new();
        let mut latest: Option<Snapshot> = None;
        // Every task as last written, by key: samples are deltas of the task list.
        let mut tasks: BTreeMap<(u32, u64), TaskRecord> = BTreeMap::new();
        // The traced tasks' totals, kept up to date task by task (recounting every task at
        // every sample would take samples x tasks).
        let mut totals = Counts::default();
        let (mut event_sections, mut events, mut unknown_sections) = (0, 0u64, 0);
        let mut records = 0u64;
        let refused = |s: &format::Section, what, refusal| CaptureError::Refused {
            path: path.to_owned(),
            what,
            index: s.index,
            offset: s.offset,
            refusal,
        };
        while let Some(s) = r.next_section().map_err(format_error(path))? {
            match s.kind {
                SECTION_MACHINE => machine = Some(parse(path, "machine", &s, caps)?),
                SECTION_PROBES => hooks = Some(parse(path, "probes", &s, caps)?),
                SECTION_FIRST => {
                    let f = parse_snapshot(path, "first", &s, caps, &mut records)?;
                    tasks = f.tasks.iter().map(|t| (t.key(), t.clone())).collect();
                    totals = Counts::default();
                    for t in tasks.values().filter(|t| t.tgid != f.self_tgid) {
                        t.counts.add_to(&mut totals);
                    }
                    first = Some(f);
                }
                SECTION_SAMPLE => {
                    if samples.len() as u64 >= caps.samples {
                        return Err(refused(
                            &s,
                            "sample",
                            Refusal::Total {
                                what: "samples",
                                limit: caps.samples,
                            },
                        ));
                    }
                    let mut sample = parse_snapshot(path, "sample", &s, caps, &mut records)?;
                    for t in std::mem::take(&mut sample.tasks) {
                        let traced = t.tgid != sample.self_tgid;
                        match tasks.get(&t.key()) {
                            // Counters only grow: what the task added since it was last
                            // written (max fields: its latest value).
                            Some(old) if traced => totals.add(&t.counts().delta(&old.counts())),
                            None if traced => t.counts.add_to(&mut totals),
                            _ => {}
                        }
                        tasks.insert(t.key(), t);
                    }
                    if tasks.len() as u64 > caps.distinct_tasks {
                        return Err(refused(
                            &s,
                            "sample",
                            Refusal::Total {
                                what: "distinct tasks",
                                limit: caps.distinct_tasks,
                            },
                        ));
                    }
                    samples.push((sample.mono_ns, totals.clone().finished()));
                    latest = Some(sample);
                }
                SECTION_LAST => {
                    last = Some(parse_snapshot(path, "last", &s, caps, &mut records)?);
                }
                SECTION_END => end = Some(parse(path, "end", &s, caps)?),
                SECTION_STATE => {
                    let st: state::State = parse(path, "state", &s, caps)?;
                    match st.phase.as_str() {
                        "start" if state_start.is_none() => state_start = Some(st),
                        "end" => state_end = Some(st),
                        _ => unknown_sections += 1,
                    }
                }
                SECTION_EVENTS => {
                    let Some(n) = scan(path, "events", &s, caps)?.top_len else {
                        return Err(CaptureError::Section {
                            path: path.to_owned(),
                            what: "events",
                            offset: s.offset,
                            why: "not a list of events".into(),
                        });
                    };
                    event_sections += 1;
                    events += n;
                    if events > caps.events {
                        return Err(refused(
                            &s,
                            "events",
                            Refusal::Total {
                                what: "events",
                                limit: caps.events,
                            },
                        ));
                    }
                }
                _ => unknown_sections += 1,
            }
        }
        if let Some(l) = &mut latest {
            l.tasks = tasks.into_values().collect();
        }
        let missing = |what: &str| CaptureError::Missing {
            path: path.to_owned(),
            what: format!("no {what} section: the capture was cut short before recording began"),
        };
        Ok(Self {
            path: path.to_owned(),
            writer,
            machine: machine.ok_or_else(|| missing("machine"))?,
            hooks: hooks.ok_or_else(|| missing("probes"))?,
            first: first.ok_or_else(|| missing("first snapshot"))?,
            samples,
            latest,
            last,
            end,
            state_start,
            state_end,
            event_sections,
            events,
            unknown_sections,
            truncated_at: r.truncated_at,
        })
    }

    /// Whether the recording ended as it should (its closing sections are there).
    pub fn complete(&self) -> bool {
        self.end.is_some() && self.last.is_some()
    }

    /// The snapshot the window ends at: the last one, or for a capture cut short its latest
    /// sample (or nothing after the first).
    pub fn closing(&self) -> &Snapshot {
        self.last
            .as_ref()
            .or(self.latest.as_ref())
            .unwrap_or(&self.first)
    }

    /// (time, traced totals) at the first snapshot, every sample and the last snapshot.
    pub fn points(&self) -> impl Iterator<Item = (u64, Counts)> + '_ {
        let totals = |s: &Snapshot| s.totals(&Filter::default());
        std::iter::once((self.first.mono_ns, totals(&self.first)))
            .chain(self.samples.iter().cloned())
            .chain(self.last.iter().map(move |l| (l.mono_ns, totals(l))))
    }
}

/// Calls `f` with each event section's records, in file order (bounded memory: one section at
/// a time).
pub fn for_each_event(
    path: &Path,
    mut f: impl FnMut(Vec<EventRecord>) -> Result<(), CaptureError>,
) -> Result<(), CaptureError> {
    let mut r = open_reader(path)?;
    while let Some(s) = r.next_section().map_err(format_error(path))? {
        if s.kind == SECTION_EVENTS {
            f(parse(path, "events", &s, &CAPS)?)?;
        }
    }
    Ok(())
}

/// Calls `f` with each `sample` snapshot, in file order (bounded memory: one section at a time;
/// a sample holds only the tasks that changed since the previous one). The limits are those
/// [`Capture::open`] checked when it read the same file.
pub fn for_each_sample(
    path: &Path,
    mut f: impl FnMut(Snapshot) -> Result<(), CaptureError>,
) -> Result<(), CaptureError> {
    let mut r = open_reader(path)?;
    let mut records = 0u64;
    while let Some(s) = r.next_section().map_err(format_error(path))? {
        if s.kind == SECTION_SAMPLE {
            f(parse_snapshot(path, "sample", &s, &CAPS, &mut records)?)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A whole small capture in memory, as `record` writes it.
    fn sample_capture() -> Vec<u8> {
        static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        BYTES.get_or_init(write_sample).clone()
    }

    fn write_sample() -> Vec<u8> {
        let path = std::env::temp_dir().join(format!("numatrace-cap-{}", std::process::id()));
        let mut w = CaptureWriter::create(&path, 1 << 30).unwrap();
        w.section(SECTION_MACHINE, &Machine::default()).unwrap();
        w.section(SECTION_PROBES, &Vec::<HookReport>::new())
            .unwrap();
        let mut s = Snapshot::default();
        w.section(SECTION_FIRST, &s).unwrap();
        let ev = vec![EventRecord::ScanCall {
            ts_ns: 5,
            dur_ns: 7,
            pid: 1,
            tgid: 1,
            cpu: 0,
        }];
        w.section(SECTION_EVENTS, &ev).unwrap();
        s.mono_ns = 1_000_000_000;
        w.section(SECTION_SAMPLE, &s).unwrap();
        w.section(SECTION_LAST, &s).unwrap();
        w.finish().unwrap();
        let b = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        b
    }

    #[test]
    fn a_whole_capture_reads_back() {
        let b = sample_capture();
        let c = Capture::from_bytes(Path::new("x"), &b).unwrap();
        assert_eq!(c.samples.len(), 1);
        assert_eq!(c.events, 1);
        assert!(c.last.is_some() && c.end.is_none() && !c.complete());
        assert_eq!(c.closing().mono_ns, 1_000_000_000);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        /// Arbitrary bytes: an error or a capture, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let _ = Capture::from_bytes(Path::new("fuzz"), &b);
        }

        /// A real capture with bytes changed and its tail cut: an error or a capture.
        #[test]
        fn mutated_captures_never_panic(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut b = sample_capture();
            for (at, x) in flips {
                let i = at.index(b.len());
                b[i] ^= x;
            }
            let end = cut.index(b.len() + 1);
            let _ = Capture::from_bytes(Path::new("fuzz"), &b[..end]);
        }
    }
}
