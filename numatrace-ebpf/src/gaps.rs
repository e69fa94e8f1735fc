//! Seed 002: on each pid_inactive skip of `sched_skip_vma_numa`, how many scan sequences ago
//! the VMA was last scanned (`mm->numa_scan_seq - vma->numab_state->prev_scan_seq`) against
//! the scanning task's thread count. A tp_btf program, because the classic tracepoint's
//! record has neither; offsets come from BTF via [`GAP_OFFSETS`].

use aya_ebpf::{
    EbpfContext, Global, helpers::bpf_ktime_get_ns, macros::btf_tracepoint, macros::map,
    maps::HashMap, programs::BtfTracePointContext,
};
use numatrace_common::{Counter, GapOffsets, MAX_VMAS, VmaGap, VmaKey};

use crate::{
    args::tracing_arg,
    tasks::{count, count_as, current, current_field, is_self, load_field, via_current, wanted},
};

#[unsafe(no_mangle)]
static GAP_OFFSETS: Global<GapOffsets> = Global::new(GapOffsets::ABSENT);

#[map]
static VMA_GAPS: HashMap<VmaKey, VmaGap> = HashMap::with_max_entries(MAX_VMAS, 0);

/// `sched_skip_vma_numa(mm, vma, reason)`, from inside task_numa_work: `current` scans.
#[btf_tracepoint(function = "sched_skip_vma_numa")]
pub fn btf_skip_vma_gap(ctx: BtfTracePointContext) -> i32 {
    let o = GAP_OFFSETS.load();
    // Typed pointers: their fields are plain loads (load_field), not helper calls.
    let (mm, vma, reason) = (
        tracing_arg::<0>(ctx.as_ptr()) as *const u8,
        tracing_arg::<1>(ctx.as_ptr()) as *const u8,
        tracing_arg::<2>(ctx.as_ptr()),
    );
    let cur = current();
    if !wanted(cur.tgid) {
        return 0;
    }
    count_as(Counter::SeenSkipVmaBtf, cur.tgid);
    // numatrace's own VMAs would only take room in the per-VMA map.
    if reason != u64::from(o.pid_inactive) || is_self(cur.tgid) {
        return 0;
    }
    count_as(Counter::SeenSkipGap, cur.tgid);
    // numab_state is null until the VMA's first scan; load_field says None for it.
    let numab = load_field::<u64>(vma, o.vma_numab_state).unwrap_or(0) as *const u8;
    let signal = current_field::<u64>(o.task_signal).unwrap_or(0) as *const u8;
    let (Some(prev), Some(seq), Some(threads), Some(start), Some(end)) = (
        load_field::<i32>(numab, o.prev_scan_seq),
        load_field::<i32>(mm, o.mm_numa_scan_seq),
        via_current::<i32>(signal, o.nr_threads),
        load_field::<u64>(vma, o.vm_start),
        load_field::<u64>(vma, o.vm_end),
    ) else {
        count(Counter::SkipGapLost);
        return 0;
    };
    // The kernel compares `seq > prev + threads` in int; a negative gap cannot occur.
    let gap = seq.wrapping_sub(prev).max(0) as u64;
    let threads = threads.max(0) as u64;
    let now = unsafe { bpf_ktime_get_ns() };
    let key = VmaKey {
        tgid: cur.tgid,
        _pad: 0,
        vm_start: start,
    };
    let g = match VMA_GAPS.get_ptr_mut(&key) {
        Some(g) => g,
        None => {
            let fresh = VmaGap {
                vm_end: end,
                ..VmaGap::default()
            };
            if VMA_GAPS.insert(&key, &fresh, 0).is_err() {
                count(Counter::SkipGapLost);
                return 0;
            }
            match VMA_GAPS.get_ptr_mut(&key) {
                Some(g) => g,
                None => return 0,
            }
        }
    };
    // One scanner per mm at a time (task_numa_work's cmpxchg on numa_next_scan): plain
    // updates of this VMA's entry do not race.
    unsafe {
        (*g).vm_end = end;
        (*g).skips += 1;
        if gap > threads {
            (*g).over_threads += 1;
            if (*g).first_over_ns == 0 {
                (*g).first_over_ns = now;
            }
        } else if gap == threads {
            (*g).at_threshold += 1;
        }
        if gap > (*g).max_gap {
            (*g).max_gap = gap;
            (*g).max_gap_threads = threads;
        }
        (*g).last_ns = now;
    }
    0
}
