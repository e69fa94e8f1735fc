//! A capture's intervals as series to draw: one value per interval between consecutive
//! snapshots (the first, every sample, the last), as rates per second so that a short last
//! interval does not look like a drop. Pure arithmetic on what the capture holds; what a
//! hook did not measure is `None` with the reason, never a row of zeros.

use std::collections::{BTreeMap, HashMap};

use crate::{
    capture::{Capture, CaptureError, for_each_sample},
    engine::Snapshot,
    model::{Counts, TaskRecord},
    report::measured::{Feed, Measured},
};

/// Tasks drawn in the scan-share chart (the busiest by scan time over the window).
pub const BUSIEST: usize = 5;

/// One named line of a chart (the label as the capture has it: escape it where shown).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub label: String,
    pub values: Vec<Option<f64>>,
}

/// A chart's lines, or why it has none.
#[derive(Clone, Debug, PartialEq)]
pub enum Lines {
    Drawn(Vec<Series>),
    NotMeasured(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// Seconds from the first snapshot to each interval's end.
    pub t_s: Vec<f64>,
    /// Scan share (percent of run time) of the busiest tasks; `sampled` when only the CPU
    /// sampler measured it (an estimate, said so wherever it is drawn).
    pub scan_share: Lines,
    pub scan_sampled: bool,
    pub pte_updates: Lines,
    pub hint_faults: Lines,
    pub pages_migrated: Lines,
    /// Promotions and demotions per node (pages/s), where memory tiering was on.
    pub tiering: Lines,
}

/// What changes per interval, read off one snapshot.
struct Frame {
    /// Tasks written in this snapshot (a sample holds only those that changed).
    tasks: Vec<TaskRecord>,
    node_counters: BTreeMap<u32, BTreeMap<String, u64>>,
}

impl Frame {
    fn of(s: Snapshot) -> Self {
        Self {
            tasks: s.tasks,
            node_counters: s.tiering.node_counters,
        }
    }
}

fn rate(v: u64, secs: f64) -> Option<f64> {
    (secs > 0.0).then(|| v as f64 / secs)
}

/// The busiest tasks by time scanning over the window (by scan samples when only sampled).
fn busiest(cap: &Capture, sampled: bool) -> Vec<((u32, u64), String)> {
    let window = cap.closing().delta(&cap.first);
    // Wall-clock time in task_numa_work, then calls: the run time a share divides is
    // tick-granular, so a task with short scans can show 0 % and still be the busiest.
    let weight = |t: &TaskRecord| {
        let scan = t.counts().scan;
        if sampled {
            (scan.scan_samples, 0)
        } else {
            (scan.time_ns, scan.calls)
        }
    };
    let mut tasks: Vec<&TaskRecord> = window
        .tasks
        .iter()
        .filter(|t| t.tgid != window.self_tgid && weight(t) > (0, 0))
        .collect();
    tasks.sort_by(|a, b| weight(b).cmp(&weight(a)).then(a.pid.cmp(&b.pid)));
    tasks
        .into_iter()
        .take(BUSIEST)
        .map(|t| (t.key(), format!("{} {}", t.pid, t.comm)))
        .collect()
}

/// Demotions a node's vmstat counts (by who reclaimed, as the kernel splits them).
fn demoted(c: &BTreeMap<String, u64>) -> u64 {
    c.iter()
        .filter(|(k, _)| k.starts_with("pgdemote_"))
        .fold(0u64, |a, (_, v)| a.saturating_add(*v))
}

impl Timeline {
    /// Reads the capture's samples again (one at a time) for what its totals do not keep.
    pub fn of(cap: &Capture) -> Result<Self, CaptureError> {
        let m = Measured::from_hooks(&cap.hooks);
        let mut frames = vec![Frame::of(cap.first.clone())];
        for_each_sample(&cap.path, |s| {
            frames.push(Frame::of(s));
            Ok(())
        })?;
        if let Some(l) = &cap.last {
            frames.push(Frame::of(l.clone()));
        }
        let totals: Vec<(u64, Counts)> = cap.points().collect();
        Ok(Self::from_frames(cap, &m, &frames, &totals))
    }

    fn from_frames(
        cap: &Capture,
        m: &Measured,
        frames: &[Frame],
        totals: &[(u64, Counts)],
    ) -> Self {
        let t0 = cap.first.mono_ns;
        let n = totals.len().saturating_sub(1);
        let secs: Vec<f64> = totals
            .windows(2)
            .map(|w| w[1].0.saturating_sub(w[0].0) as f64 / 1e9)
            .collect();
        let t_s: Vec<f64> = totals[1..]
            .iter()
            .map(|(t, _)| t.saturating_sub(t0) as f64 / 1e9)
            .collect();
        let deltas: Vec<Counts> = totals
            .windows(2)
            .map(|w| w[1].1.delta(&w[0].1).finished())
            .collect();
        let per_s = |f: &dyn Fn(&Counts) -> u64| -> Vec<Option<f64>> {
            deltas
                .iter()
                .zip(&secs)
                .map(|(d, s)| rate(f(d), *s))
                .collect()
        };
        let lines = |feed: Feed, series: Vec<(&str, Vec<Option<f64>>)>| match m.why(feed) {
            Some(why) => Lines::NotMeasured(why.to_owned()),
            None => Lines::Drawn(
                series
                    .into_iter()
                    .map(|(label, values)| Series {
                        label: label.to_owned(),
                        values,
                    })
                    .collect(),
            ),
        };
        let pte_updates = lines(
            Feed::Pte,
            vec![("PTE updates", per_s(&|d| d.scan.pte_updates))],
        );
        let hint_faults = lines(
            Feed::HintFaults,
            vec![
                ("local", per_s(&|d| d.hint_faults.local)),
                ("remote", per_s(&|d| d.hint_faults.remote)),
            ],
        );
        let pages_migrated = lines(
            Feed::MigratePages,
            vec![
                ("migrated", per_s(&|d| d.migrations.pages_ok)),
                ("failed", per_s(&|d| d.migrations.pages_failed)),
            ],
        );

        let scan_sampled = !m.is(Feed::Scan) && m.is(Feed::Samples);
        let scan_share = if !m.is(Feed::Scan) && !scan_sampled {
            Lines::NotMeasured(m.why(Feed::ScanShare).unwrap_or("not measured").to_owned())
        } else {
            Lines::Drawn(scan_series(cap, frames, scan_sampled, n))
        };

        let tiering_on = cap.first.tiering.mode.is_some_and(|v| v & 2 != 0)
            || cap.closing().tiering.mode.is_some_and(|v| v & 2 != 0);
        let tiering = if !tiering_on {
            Lines::NotMeasured(match cap.first.tiering.mode {
                Some(v) => format!("memory tiering was off (kernel.numa_balancing={v})"),
                None => "the capture does not say whether memory tiering was on".to_owned(),
            })
        } else if frames.iter().all(|f| f.node_counters.is_empty()) {
            Lines::NotMeasured("the kernel keeps no per-node promotion counters here".to_owned())
        } else {
            Lines::Drawn(tier_series(frames, &secs))
        };
        Self {
            t_s,
            scan_share,
            scan_sampled,
            pte_updates,
            hint_faults,
            pages_migrated,
            tiering,
        }
    }

    pub fn intervals(&self) -> usize {
        self.t_s.len()
    }
}

/// Each busiest task's scan share per interval, from its counts as each snapshot wrote them
/// (`None` where it did not run in that interval).
fn scan_series(cap: &Capture, frames: &[Frame], sampled: bool, n: usize) -> Vec<Series> {
    let busy = busiest(cap, sampled);
    let mut last: HashMap<(u32, u64), Counts> = HashMap::new();
    let mut out: Vec<Series> = busy
        .iter()
        .map(|(_, label)| Series {
            label: label.clone(),
            values: Vec::with_capacity(n),
        })
        .collect();
    for (i, f) in frames.iter().enumerate() {
        let written: HashMap<(u32, u64), &TaskRecord> =
            f.tasks.iter().map(|t| (t.key(), t)).collect();
        for (j, (key, _)) in busy.iter().enumerate() {
            let now = written.get(key).map(|t| t.counts());
            if i > 0 {
                let share = now.as_ref().and_then(|c| {
                    let d = match last.get(key) {
                        Some(prev) => c.delta(prev),
                        None => c.clone(),
                    };
                    if sampled {
                        (d.scan.samples > 0)
                            .then(|| d.scan.scan_samples as f64 / d.scan.samples as f64 * 100.0)
                    } else {
                        // Run time between the two snapshots' last seen runtimes.
                        let run = c
                            .scan
                            .task_runtime_ns
                            .saturating_sub(last.get(key).map_or(0, |p| p.scan.task_runtime_ns));
                        (run > 0).then(|| d.scan.runtime_in_scan_ns as f64 / run as f64 * 100.0)
                    }
                });
                out[j].values.push(share);
            }
            if let Some(c) = now {
                last.insert(*key, c);
            }
        }
    }
    out
}

/// Promoted and demoted pages per second on each node (node vmstat: promotions where they
/// arrive, demotions where they leave).
fn tier_series(frames: &[Frame], secs: &[f64]) -> Vec<Series> {
    let nodes: std::collections::BTreeSet<u32> = frames
        .iter()
        .flat_map(|f| f.node_counters.keys().copied())
        .collect();
    let mut out = Vec::new();
    for node in nodes {
        let get = |f: &Frame, g: &dyn Fn(&BTreeMap<String, u64>) -> u64| {
            f.node_counters.get(&node).map(g)
        };
        for (what, g) in [
            (
                "promoted",
                &(|c: &BTreeMap<String, u64>| c.get("pgpromote_success").copied().unwrap_or(0))
                    as &dyn Fn(&BTreeMap<String, u64>) -> u64,
            ),
            ("demoted", &demoted),
        ] {
            let values: Vec<Option<f64>> = frames
                .windows(2)
                .zip(secs)
                .map(|(w, s)| {
                    let (a, b) = (get(&w[0], g)?, get(&w[1], g)?);
                    rate(b.saturating_sub(a), *s)
                })
                .collect();
            if values.iter().any(|v| v.is_some_and(|v| v > 0.0)) {
                out.push(Series {
                    label: format!("node {node} {what}"),
                    values,
                });
            }
        }
    }
    out
}
