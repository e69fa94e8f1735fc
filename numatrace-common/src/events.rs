//! Ring buffer records.

#[allow(unused_imports)]
use crate::*;

/// Kinds of ring buffer records. Values are never reused.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    SkipVma = 1,
    NumaMove = 2,
    NumaSwap = 3,
    NumaStick = 4,
    MigratePages = 5,
    TaskExit = 6,
    VmaScan = 7,
    /// [`SpanEvent`]s, sent only when the loader asks for a timeline (`record`).
    ScanCall = 8,
    Migration = 9,
    Stall = 10,
}

impl EventKind {
    pub const fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::SkipVma,
            2 => Self::NumaMove,
            3 => Self::NumaSwap,
            4 => Self::NumaStick,
            5 => Self::MigratePages,
            6 => Self::TaskExit,
            7 => Self::VmaScan,
            8 => Self::ScanCall,
            9 => Self::Migration,
            10 => Self::Stall,
            _ => return None,
        })
    }
}

/// First field of every ring buffer record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventHeader {
    /// An [`EventKind`] value.
    pub kind: u32,
    /// The task the event is about (for placement events: the source task).
    pub pid: u32,
    pub tgid: u32,
    pub cpu: u32,
    /// `bpf_ktime_get_ns` (CLOCK_MONOTONIC).
    pub ts_ns: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkipVmaEvent {
    pub hdr: EventHeader,
    pub numa_scan_offset: u64,
    pub vm_start: u64,
    pub vm_end: u64,
    pub reason: u32,
    pub _pad: u32,
}

/// One change_prot_numa call (fexit only: it needs the VMA): when a VMA was scanned.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmaScanEvent {
    pub hdr: EventHeader,
    pub vm_start: u64,
    pub vm_end: u64,
    pub pte_updates: u64,
}

/// `sched_{move,swap,stick}_numa`; for a move, `dst_pid`/`dst_tgid` equal the source.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlacementEvent {
    pub hdr: EventHeader,
    pub src_cpu: i32,
    pub src_nid: i32,
    pub dst_pid: u32,
    pub dst_tgid: u32,
    pub dst_cpu: i32,
    pub dst_nid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigratePagesEvent {
    pub hdr: EventHeader,
    pub succeeded: u64,
    pub failed: u64,
    pub thp_succeeded: u64,
    pub thp_failed: u64,
    pub mode: u32,
    pub reason: u32,
}

/// A timed call of one task, for the timeline: `hdr.ts_ns` is when it started. ScanCall: one
/// task_numa_work call. Migration: one migrate_misplaced_folio/_page call (`a` = source node,
/// [`NODE_UNKNOWN`] when unresolved; `b` = destination node (at most `MAX_NODES`) | 1 << 32
/// when it migrated). Stall: one migration_entry_wait. Unused fields are 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanEvent {
    pub hdr: EventHeader,
    pub dur_ns: u64,
    pub a: u64,
    pub b: u64,
}

/// A source node that could not be resolved (in [`SpanEvent::a`]).
pub const NODE_UNKNOWN: u64 = u64::MAX;
/// Bit of [`SpanEvent::b`] set when a migration succeeded.
pub const MIGRATED_BIT: u64 = 1 << 32;

/// The final aggregates of a task, sent when it exits so that the map entry can be freed.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskExitEvent {
    pub hdr: EventHeader,
    pub stats: TaskStats,
}
