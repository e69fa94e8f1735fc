//! The ring buffer's records, decoded (the engine reads them).

use std::mem::size_of;

use numatrace_common::{
    EventHeader, EventKind, MigratePagesEvent, PlacementEvent, SkipVmaEvent, SpanEvent,
    TaskExitEvent, VmaScanEvent,
};
use thiserror::Error;

/// One decoded ring buffer record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    SkipVma(SkipVmaEvent),
    Placement(EventKind, PlacementEvent),
    MigratePages(MigratePagesEvent),
    /// Boxed: a task snapshot is ten times the size of the other records.
    TaskExit(Box<TaskExitEvent>),
    VmaScan(VmaScanEvent),
    /// A timed task_numa_work call, migration or migration stall (`record` only).
    Span(EventKind, SpanEvent),
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than its header")]
    Short(usize),
    #[error("unknown event kind {0}")]
    UnknownKind(u32),
    #[error("{kind:?} record of {len} bytes, expected {want}")]
    Size {
        kind: EventKind,
        len: usize,
        want: usize,
    },
}

fn read<T: Copy>(b: &[u8], kind: EventKind) -> Result<T, DecodeError> {
    if b.len() < size_of::<T>() {
        return Err(DecodeError::Size {
            kind,
            len: b.len(),
            want: size_of::<T>(),
        });
    }
    // SAFETY: length checked; T is a #[repr(C)] plain-data type from numatrace-common, valid
    // for any bit pattern; the record may be unaligned.
    Ok(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
}

pub fn decode(b: &[u8]) -> Result<Event, DecodeError> {
    if b.len() < size_of::<EventHeader>() {
        return Err(DecodeError::Short(b.len()));
    }
    let raw = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
    let kind = EventKind::from_u32(raw).ok_or(DecodeError::UnknownKind(raw))?;
    Ok(match kind {
        EventKind::SkipVma => Event::SkipVma(read(b, kind)?),
        EventKind::NumaMove | EventKind::NumaSwap | EventKind::NumaStick => {
            Event::Placement(kind, read(b, kind)?)
        }
        EventKind::MigratePages => Event::MigratePages(read(b, kind)?),
        EventKind::TaskExit => Event::TaskExit(Box::new(read(b, kind)?)),
        EventKind::VmaScan => Event::VmaScan(read(b, kind)?),
        EventKind::ScanCall | EventKind::Migration | EventKind::Stall => {
            Event::Span(kind, read(b, kind)?)
        }
    })
}

#[cfg(test)]
mod tests {
    use numatrace_common::TaskStats;

    use super::*;

    fn bytes<T>(v: &T) -> Vec<u8> {
        // SAFETY: reading the bytes of a plain-data value.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }

    fn hdr(kind: EventKind) -> EventHeader {
        EventHeader {
            kind: kind as u32,
            pid: 42,
            tgid: 40,
            cpu: 1,
            ts_ns: 123,
        }
    }

    #[test]
    fn decodes_each_kind() {
        let skip = SkipVmaEvent {
            hdr: hdr(EventKind::SkipVma),
            numa_scan_offset: 1,
            vm_start: 0x1000,
            vm_end: 0x2000,
            reason: 4,
            _pad: 0,
        };
        assert_eq!(decode(&bytes(&skip)), Ok(Event::SkipVma(skip)));

        let mut exit = TaskExitEvent {
            hdr: hdr(EventKind::TaskExit),
            stats: TaskStats::new(42, 40),
        };
        exit.stats.skip_vma[1] = 9;
        assert_eq!(decode(&bytes(&exit)), Ok(Event::TaskExit(Box::new(exit))));

        let swap = PlacementEvent {
            hdr: hdr(EventKind::NumaSwap),
            src_cpu: 0,
            src_nid: 0,
            dst_pid: 7,
            dst_tgid: 7,
            dst_cpu: 1,
            dst_nid: 1,
        };
        assert_eq!(
            decode(&bytes(&swap)),
            Ok(Event::Placement(EventKind::NumaSwap, swap))
        );
    }

    #[test]
    fn rejects_bad_records() {
        assert_eq!(decode(&[1, 0, 0]), Err(DecodeError::Short(3)));
        let mut b = bytes(&hdr(EventKind::SkipVma));
        assert!(matches!(decode(&b), Err(DecodeError::Size { .. })));
        b[0] = 99;
        assert_eq!(decode(&b), Err(DecodeError::UnknownKind(99)));
    }
}
