//! Ring records as a capture stores them: plain JSON with names, independent of the kernel
//! side's binary layout (which may change between versions).

use numatrace_common::{EventKind, MIGRATED_BIT, NODE_UNKNOWN};
use serde::{Deserialize, Serialize};

use crate::{model::skip_reason_name, sources::ringbuf::Event};

/// One record; `ts_ns` is CLOCK_MONOTONIC (the snapshots' `mono_ns` clock), for spans the start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventRecord {
    SkipVma {
        ts_ns: u64,
        pid: u32,
        tgid: u32,
        cpu: u32,
        vm_start: u64,
        vm_end: u64,
        reason: String,
    },
    Placement {
        ts_ns: u64,
        pid: u32,
        tgid: u32,
        cpu: u32,
        /// `move`, `swap` or `stick`.
        what: String,
        src_nid: i32,
        dst_nid: i32,
        dst_pid: u32,
    },
    MigratePages {
        ts_ns: u64,
        pid: u32,
        tgid: u32,
        cpu: u32,
        succeeded: u64,
        failed: u64,
        thp_succeeded: u64,
        thp_failed: u64,
    },
    TaskExit {
        ts_ns: u64,
        pid: u32,
        tgid: u32,
        cpu: u32,
    },
    VmaScan {
        ts_ns: u64,
        pid: u32,
        tgid: u32,
        cpu: u32,
        vm_start: u64,
        vm_end: u64,
        pte_updates: u64,
    },
    ScanCall {
        ts_ns: u64,
        dur_ns: u64,
        pid: u32,
        tgid: u32,
        cpu: u32,
    },
    Migration {
        ts_ns: u64,
        dur_ns: u64,
        pid: u32,
        tgid: u32,
        cpu: u32,
        /// None: the source node could not be resolved.
        src: Option<u32>,
        dst: u32,
        migrated: bool,
    },
    Stall {
        ts_ns: u64,
        dur_ns: u64,
        pid: u32,
        tgid: u32,
        cpu: u32,
    },
    /// A kind written by a newer numatrace: read, and skipped.
    #[serde(other)]
    Unknown,
}

impl EventRecord {
    pub fn from_event(ev: &Event) -> Self {
        match ev {
            Event::SkipVma(e) => Self::SkipVma {
                ts_ns: e.hdr.ts_ns,
                pid: e.hdr.pid,
                tgid: e.hdr.tgid,
                cpu: e.hdr.cpu,
                vm_start: e.vm_start,
                vm_end: e.vm_end,
                reason: skip_reason_name(e.reason as usize).to_owned(),
            },
            Event::Placement(kind, e) => Self::Placement {
                ts_ns: e.hdr.ts_ns,
                pid: e.hdr.pid,
                tgid: e.hdr.tgid,
                cpu: e.hdr.cpu,
                what: match kind {
                    EventKind::NumaMove => "move",
                    EventKind::NumaSwap => "swap",
                    _ => "stick",
                }
                .to_owned(),
                src_nid: e.src_nid,
                dst_nid: e.dst_nid,
                dst_pid: e.dst_pid,
            },
            Event::MigratePages(e) => Self::MigratePages {
                ts_ns: e.hdr.ts_ns,
                pid: e.hdr.pid,
                tgid: e.hdr.tgid,
                cpu: e.hdr.cpu,
                succeeded: e.succeeded,
                failed: e.failed,
                thp_succeeded: e.thp_succeeded,
                thp_failed: e.thp_failed,
            },
            Event::TaskExit(e) => Self::TaskExit {
                ts_ns: e.hdr.ts_ns,
                pid: e.hdr.pid,
                tgid: e.hdr.tgid,
                cpu: e.hdr.cpu,
            },
            Event::VmaScan(e) => Self::VmaScan {
                ts_ns: e.hdr.ts_ns,
                pid: e.hdr.pid,
                tgid: e.hdr.tgid,
                cpu: e.hdr.cpu,
                vm_start: e.vm_start,
                vm_end: e.vm_end,
                pte_updates: e.pte_updates,
            },
            Event::Span(kind, e) => {
                let (ts_ns, dur_ns, pid, tgid, cpu) =
                    (e.hdr.ts_ns, e.dur_ns, e.hdr.pid, e.hdr.tgid, e.hdr.cpu);
                match kind {
                    EventKind::Migration => Self::Migration {
                        ts_ns,
                        dur_ns,
                        pid,
                        tgid,
                        cpu,
                        src: (e.a != NODE_UNKNOWN).then_some(e.a as u32),
                        dst: (e.b & 0xffff_ffff) as u32,
                        migrated: e.b & MIGRATED_BIT != 0,
                    },
                    EventKind::Stall => Self::Stall {
                        ts_ns,
                        dur_ns,
                        pid,
                        tgid,
                        cpu,
                    },
                    _ => Self::ScanCall {
                        ts_ns,
                        dur_ns,
                        pid,
                        tgid,
                        cpu,
                    },
                }
            }
        }
    }

    pub fn ts_ns(&self) -> u64 {
        match self {
            Self::SkipVma { ts_ns, .. }
            | Self::Placement { ts_ns, .. }
            | Self::MigratePages { ts_ns, .. }
            | Self::TaskExit { ts_ns, .. }
            | Self::VmaScan { ts_ns, .. }
            | Self::ScanCall { ts_ns, .. }
            | Self::Migration { ts_ns, .. }
            | Self::Stall { ts_ns, .. } => *ts_ns,
            Self::Unknown => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_from_a_newer_numatrace_is_skipped_not_an_error() {
        let v: Vec<EventRecord> = serde_json::from_str(
            r#"[{"kind":"stall","ts_ns":1,"dur_ns":2,"pid":3,"tgid":3,"cpu":0},
                {"kind":"from_the_future","ts_ns":5,"whatever":[1,2]}]"#,
        )
        .unwrap();
        assert_eq!(v[1], EventRecord::Unknown);
    }
}
