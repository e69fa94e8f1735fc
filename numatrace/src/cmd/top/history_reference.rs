//! [`Recent::window`] against the history as it was first written, kept here as the reference:
//! every counter of every refresh of a task kept for the whole horizon, and summed afresh for a
//! window. Over random histories (tasks active in bursts, idle with run time, appearing and
//! leaving, windows shorter than the one kept, the window whose running sums are kept changing
//! half-way), both list the same tasks, last active at the same time, with the same amounts
//! over the window.

use std::collections::HashMap;

use proptest::prelude::*;

use super::{Amounts, Recent, SPARK_S};
use crate::{
    engine::{Snapshot, tasks::tests::Rng},
    model::{Counts, Filter, TaskRecord},
};

type Key = (u32, u64);

/// The reference: each task's refreshes from its first activity within the horizon on, with
/// all its counts where it did something, its run time and samples where not.
#[derive(Default)]
struct Reference {
    horizon_ns: u64,
    now_ns: u64,
    tasks: HashMap<Key, Vec<(u64, Counts, bool)>>,
}

impl Reference {
    fn push(&mut self, delta: &Snapshot, oldest: u64) {
        self.now_ns = delta.mono_ns;
        for t in delta.traced(&Filter::default()) {
            let active = !t.counts.is_empty();
            let counts = if active {
                t.counts()
            } else {
                let mut c = Counts::default();
                c.scan.task_runtime_ns = t.counts().scan.task_runtime_ns;
                c.scan.samples = t.counts().scan.samples;
                c
            };
            match self.tasks.get_mut(&t.key()) {
                Some(v) => v.push((delta.mono_ns, counts, active)),
                None if active => {
                    self.tasks
                        .insert(t.key(), vec![(delta.mono_ns, counts, active)]);
                }
                None => {}
            }
        }
        self.tasks.retain(|_, v| {
            v.retain(|(end, _, _)| *end >= oldest);
            v.iter().any(|(_, _, a)| *a)
        });
    }

    /// (key, last active, counts over the window) of the tasks active within it.
    fn window(&self, window_s: u64) -> Vec<(Key, u64, Counts)> {
        let within = |end: u64| end + window_s * 1_000_000_000 > self.now_ns;
        let mut v: Vec<(Key, u64, Counts)> = self
            .tasks
            .iter()
            .filter_map(|(k, entries)| {
                let last = entries.iter().rev().find(|e| e.2)?.0;
                if !within(last) {
                    return None;
                }
                let mut c = Counts::default();
                for (_, x, _) in entries.iter().filter(|e| within(e.0)) {
                    c.add(x);
                }
                Some((*k, last, c.finished()))
            })
            .collect();
        v.sort_by_key(|e| e.0);
        v
    }
}

/// One refresh's counts of a task: mostly nothing (run time only), sometimes a burst.
pub(crate) fn counts(r: &mut Rng) -> Counts {
    let mut c = Counts::default();
    c.scan.task_runtime_ns = r.below(1_000_000);
    c.scan.samples = r.below(3);
    if r.chance(25) {
        c.hint_faults.faults = r.below(50);
        c.hint_faults.local = c.hint_faults.faults / 2;
        c.scan.pte_updates = r.below(512);
        c.scan.runtime_in_scan_ns = r.below(10_000);
        c.scan.calls = 1;
        c.scan.max_ns = r.below(10_000);
        c.scan.scan_samples = r.below(2);
        c.migrations.pages_ok = r.below(8);
        c.migrations.attempts = r.below(4);
        c.migrations.latency_ns_total = r.below(100_000);
        c.skipped_vmas_total = r.below(3);
        c.placement.moves = r.below(2);
    }
    if r.chance(5) {
        // Active through a counter no column shows.
        c.placement.swaps_out = 1;
    }
    c.finished()
}

/// The delta of refresh `s` (one a second) with `tasks`.
pub(crate) fn refresh(s: u64, tasks: Vec<TaskRecord>) -> Snapshot {
    Snapshot {
        mono_ns: s * 1_000_000_000,
        span_ns: 1_000_000_000,
        self_tgid: 1,
        tasks,
        ..Snapshot::default()
    }
}

/// `batch`: `top -b`'s history ([`Recent::batch`]), which keeps each task over the window alone.
fn check(seed: u64, refreshes: u64, batch: bool) {
    let mut r = Rng(seed | 1);
    let window = [1, 5, 10, 30][r.below(4) as usize];
    let mut recent = if batch {
        Recent::batch(window)
    } else {
        Recent::new(window)
    };
    let mut reference = Reference {
        horizon_ns: SPARK_S.max(window) * 1_000_000_000,
        ..Reference::default()
    };
    let pids: Vec<u32> = (1..=8).collect();
    for s in 1..=refreshes {
        if s == refreshes / 2 {
            // The window shown changes: the running sums follow the other one.
            recent.keep_window((window / 2).max(1));
        }
        let present: Vec<u32> = pids.iter().copied().filter(|_| r.chance(85)).collect();
        let tasks: Vec<TaskRecord> = present
            .into_iter()
            .map(|pid| TaskRecord {
                pid,
                tgid: 100 + pid % 3,
                comm: format!("t{pid}").into(),
                exited: false,
                cgroup_id: u64::from(pid % 2),
                cgroup: None,
                preferred_node: None,
                last_node: None,
                first_ns: 1,
                counts: crate::model::PackedCounts::pack(&counts(&mut r)),
            })
            .collect();
        let delta = refresh(s, tasks);
        recent.push(&delta, &Filter::default(), Default::default());
        let oldest = recent.samples.front().map_or(0, |x| x.end_ns);
        assert!(s * 1_000_000_000 - oldest < reference.horizon_ns);
        reference.push(&delta, oldest);
        for w in [window, (window / 2).max(1)] {
            let mut got = recent.window(w);
            let want = reference.window(w);
            let what = format!("seed {seed}, refresh {s}, window {w} of {window}");
            assert_eq!(got.tasks.len(), want.len(), "{what}");
            for ((t, last), (k, want_last, c)) in got.with_last().zip(&want) {
                assert_eq!((t.key(), last), (*k, *want_last), "{what}");
                let tc = t.counts();
                assert_eq!(Amounts::of(&tc), Amounts::of(c), "{what}");
                assert_eq!(tc.scan.share, c.scan.share, "{what}");
                assert_eq!(tc.scan.sampled_share, c.scan.sampled_share, "{what}");
                let lat = (tc.migrations.latency_ns_mean, c.migrations.latency_ns_mean);
                assert_eq!(lat.0, lat.1, "{what}");
            }
            // As `top` does: the next window writes over these records.
            recent.give_back(got.take_snapshot().tasks);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn windows_agree_with_the_reference(seed in any::<u64>()) {
        check(seed, 150, false);
    }

    #[test]
    fn batch_windows_agree_with_the_reference(seed in any::<u64>()) {
        check(seed, 150, true);
    }
}
