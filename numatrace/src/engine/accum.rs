//! What the ring buffer delivers, accumulated: exited tasks' final entries, per-VMA skip
//! events and scan times, and a tally of records. Only ever grows while attached, so that any
//! two snapshots can be differenced.

use std::collections::BTreeMap;

use numatrace_common::{EventKind, SKIP_REASON_OTHER, SKIP_REASON_SLOTS, TaskStats};

use crate::{
    model::{EventTally, MAX_SCAN_TIMES},
    sources::ringbuf::Event,
};

#[derive(Clone, Debug, Default)]
pub struct Accum {
    /// Final entries of exited tasks, by (pid, entry creation time).
    pub exited: BTreeMap<(u32, u64), TaskStats>,
    pub events: EventTally,
    /// Ring buffer records that could not be decoded.
    pub undecodable: u64,
    /// (tgid, vm_start) -> vm_end at the latest skip, skip events by reason slot.
    pub vma_skips: BTreeMap<(u32, u64), (u64, [u64; SKIP_REASON_SLOTS])>,
    /// (tgid, vm_start) -> CLOCK_MONOTONIC times of change_prot_numa calls.
    pub scan_times: BTreeMap<(u32, u64), Vec<u64>>,
    /// Exited tasks a frontend had the engine forget (`Engine::forget_exited`): seen, not lost.
    pub forgotten: u64,
}

impl Accum {
    pub fn apply(&mut self, ev: &Event) {
        let t = &mut self.events;
        match ev {
            Event::SkipVma(e) => {
                t.skip_vma += 1;
                let slot = (e.reason as usize).min(SKIP_REASON_OTHER);
                let v = self
                    .vma_skips
                    .entry((e.hdr.tgid, e.vm_start))
                    .or_insert((e.vm_end, [0; SKIP_REASON_SLOTS]));
                v.0 = e.vm_end;
                v.1[slot] += 1;
            }
            Event::Placement(EventKind::NumaMove, _) => t.numa_move += 1,
            Event::Placement(EventKind::NumaSwap, _) => t.numa_swap += 1,
            Event::Placement(_, _) => t.numa_stick += 1,
            Event::MigratePages(_) => t.migrate_pages += 1,
            Event::TaskExit(e) => {
                t.task_exit += 1;
                self.exited.insert((e.stats.pid, e.stats.first_ns), e.stats);
            }
            Event::Span(..) => t.spans += 1,
            Event::VmaScan(e) => {
                t.vma_scan += 1;
                let v = self.scan_times.entry((e.hdr.tgid, e.vm_start)).or_default();
                if v.len() < MAX_SCAN_TIMES {
                    v.push(e.hdr.ts_ns);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use numatrace_common::{EventHeader, SkipVmaEvent, TaskExitEvent};

    use super::*;

    fn hdr(kind: EventKind, pid: u32) -> EventHeader {
        EventHeader {
            kind: kind as u32,
            pid,
            tgid: pid,
            cpu: 0,
            ts_ns: 5,
        }
    }

    #[test]
    fn exits_are_kept_by_pid_and_creation_time() {
        let mut a = Accum::default();
        for first in [100, 200] {
            let mut stats = TaskStats::new(7, 7);
            stats.first_ns = first;
            a.apply(&Event::TaskExit(Box::new(TaskExitEvent {
                hdr: hdr(EventKind::TaskExit, 7),
                stats,
            })));
        }
        assert_eq!(a.exited.len(), 2, "a reused pid is another task");
        a.apply(&Event::SkipVma(SkipVmaEvent {
            hdr: hdr(EventKind::SkipVma, 7),
            numa_scan_offset: 0,
            vm_start: 0x1000,
            vm_end: 0x2000,
            reason: 42,
            _pad: 0,
        }));
        assert_eq!(
            a.vma_skips[&(7, 0x1000)],
            (0x2000, {
                let mut slots = [0; SKIP_REASON_SLOTS];
                slots[SKIP_REASON_OTHER] = 1;
                slots
            })
        );
        assert_eq!(a.events.task_exit, 2);
        assert_eq!(a.events.skip_vma, 1);
    }
}
