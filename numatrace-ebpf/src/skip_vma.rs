//! `sched_skip_vma_numa` as a tp_btf program, which sees the tracepoint's raw arguments (mm,
//! vma, reason) where the classic record has copies of a few of their fields.
//!
//! Where the kernel has it, it is the hook's only program ([`GapOffsets::whole_hook`]): it
//! counts each skip system-wide and per task, per VMA by reason (for the frontends that read
//! per-VMA skips: `READ_VMA_SKIPS`), and sends `record` its record; the classic program is the fallback. Everywhere
//! it runs it gives seed 002's evidence: on each pid_inactive skip, how many scan sequences
//! ago the VMA was last scanned (`mm->numa_scan_seq - vma->numab_state->prev_scan_seq`)
//! against the scanning task's thread count. Offsets come from BTF via [`GAP_OFFSETS`].

use aya_ebpf::{
    EbpfContext, Global, macros::btf_tracepoint, macros::map, maps::HashMap,
    programs::BtfTracePointContext,
};
use numatrace_common::{
    Counter, EMIT_SKIP_VMA, EventKind, GapOffsets, MAX_VMAS, READ_VMA_SKIPS, SkipVmaEvent, VmaGap,
    VmaKey,
};

use crate::{
    args::tracing_arg,
    global,
    tasks::{
        count, count_as, current, current_field, emit, header, is_self, load_field, reads, send,
        via_current, wanted,
    },
    tracepoints::{count_skip, reason_slot},
};

#[unsafe(no_mangle)]
static GAP_OFFSETS: Global<GapOffsets> = Global::new(GapOffsets::ABSENT);

#[map]
static VMA_GAPS: HashMap<VmaKey, VmaGap> = HashMap::with_max_entries(MAX_VMAS, 0);

/// `sched_skip_vma_numa(mm, vma, reason)`, from inside task_numa_work: `current` scans.
#[btf_tracepoint(function = "sched_skip_vma_numa")]
pub fn btf_skip_vma(ctx: BtfTracePointContext) -> i32 {
    // Typed pointers: their fields are plain loads (load_field), not helper calls.
    let (mm, vma, reason) = (
        tracing_arg::<0>(ctx.as_ptr()) as *const u8,
        tracing_arg::<1>(ctx.as_ptr()) as *const u8,
        tracing_arg::<2>(ctx.as_ptr()) as u32,
    );
    let cur = current();
    if !wanted(cur.tgid) {
        return 0;
    }
    let whole = global!(GAP_OFFSETS, whole_hook) != 0;
    if whole {
        count_skip(cur.pid, cur.tgid, reason);
    } else {
        count_as(Counter::SeenSkipVmaBtf, cur.tgid);
    }
    // numatrace's own skips are counted in its entry; its records and VMAs would only be noise.
    if is_self(cur.tgid) {
        return 0;
    }
    let pid_inactive = reason == global!(GAP_OFFSETS, pid_inactive);
    let record = whole && emit(EMIT_SKIP_VMA);
    // Where the records go out, userspace counts each VMA's skips from them (as from the
    // classic program's): the map would only repeat them at a lookup per skip.
    let by_reason = whole && reads(READ_VMA_SKIPS) && !record;
    if !(pid_inactive || by_reason || record) {
        return 0;
    }
    if pid_inactive {
        count_as(Counter::SeenSkipGap, cur.tgid);
    }
    let (Some(start), Some(end)) = (
        load_field::<u64>(vma, global!(GAP_OFFSETS, vm_start)),
        load_field::<u64>(vma, global!(GAP_OFFSETS, vm_end)),
    ) else {
        // A typed load that faulted: the VMA's bounds read as nothing.
        count(if pid_inactive {
            Counter::SkipGapLost
        } else {
            Counter::ReadFailed
        });
        return 0;
    };
    if record {
        send(SkipVmaEvent {
            hdr: header(EventKind::SkipVma as u32, cur.pid, cur.tgid),
            numa_scan_offset: load_field::<u64>(mm, global!(GAP_OFFSETS, mm_numa_scan_offset))
                .unwrap_or(0),
            vm_start: start,
            vm_end: end,
            reason,
            _pad: 0,
        });
    }
    if !(pid_inactive || by_reason) {
        return 0;
    }
    let Some(g) = vma_entry(cur.tgid, start, end, pid_inactive, by_reason) else {
        return 0;
    };
    // One scanner per mm at a time (task_numa_work's cmpxchg on numa_next_scan): plain
    // updates of this VMA's entry do not race.
    unsafe { (*g).vm_end = end };
    if by_reason && let Some(c) = reason_slot(unsafe { &raw mut (*g).reasons }, reason) {
        unsafe { *c += 1 };
    }
    if pid_inactive {
        note_gap(g, mm, vma);
    }
    0
}

/// The VMA's entry, created if new; `None` (counted: each loss it makes) when the map is full.
#[inline(always)]
fn vma_entry(
    tgid: u32,
    start: u64,
    end: u64,
    pid_inactive: bool,
    by_reason: bool,
) -> Option<*mut VmaGap> {
    let key = VmaKey {
        tgid,
        _pad: 0,
        vm_start: start,
    };
    if let Some(g) = VMA_GAPS.get_ptr_mut(&key) {
        return Some(g);
    }
    let fresh = VmaGap {
        vm_end: end,
        ..VmaGap::default()
    };
    if VMA_GAPS.insert(&key, &fresh, 0).is_err() {
        if pid_inactive {
            count(Counter::SkipGapLost);
        }
        if by_reason {
            count(Counter::VmaMapFull);
        }
        return None;
    }
    VMA_GAPS.get_ptr_mut(&key)
}

/// A pid_inactive skip of the VMA whose entry is `g`: its scan-sequence gap against the
/// scanning task's thread count.
#[inline(always)]
fn note_gap(g: *mut VmaGap, mm: *const u8, vma: *const u8) {
    // numab_state is null until the VMA's first scan; load_field says None for it.
    let numab =
        load_field::<u64>(vma, global!(GAP_OFFSETS, vma_numab_state)).unwrap_or(0) as *const u8;
    let signal = current_field::<u64>(global!(GAP_OFFSETS, task_signal)).unwrap_or(0) as *const u8;
    let (Some(prev), Some(seq), Some(threads)) = (
        load_field::<i32>(numab, global!(GAP_OFFSETS, prev_scan_seq)),
        load_field::<i32>(mm, global!(GAP_OFFSETS, mm_numa_scan_seq)),
        via_current::<i32>(signal, global!(GAP_OFFSETS, nr_threads)),
    ) else {
        count(Counter::SkipGapLost);
        return;
    };
    // The kernel compares `seq > prev + threads` in int; a negative gap cannot occur.
    let gap = seq.wrapping_sub(prev).max(0) as u64;
    let threads = threads.max(0) as u64;
    unsafe {
        (*g).skips += 1;
        if gap > threads {
            (*g).over_threads += 1;
        } else if gap == threads {
            (*g).at_threshold += 1;
        }
        if gap > (*g).max_gap {
            (*g).max_gap = gap;
            (*g).max_gap_threads = threads;
        }
    }
}
