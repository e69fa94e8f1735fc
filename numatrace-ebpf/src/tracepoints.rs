//! Classic tracepoint programs. Field offsets come from the running kernel's tracefs `format`
//! files, through globals set by the loader: nothing about the layout is baked in here.

use aya_ebpf::{
    EbpfContext, Global,
    macros::{fentry, map, tracepoint},
    maps::PerCpuArray,
    programs::{FEntryContext, TracePointContext},
};
use numatrace_common::{
    Counter, EMIT_MIGRATE_PAGES, EMIT_PLACEMENT, EMIT_SKIP_VMA, EventKind, ForkOffsets,
    MR_DEMOTION, MR_NUMA_MISPLACED, MigrateOffsets, MigratePagesEvent, MoveOffsets, PF_KSWAPD,
    PairOffsets, PlacementEvent, SKIP_REASON_OTHER, SKIP_REASON_SLOTS, SkipVmaEvent,
    SkipVmaOffsets, TP_RECORD_BYTES, TaskExitEvent,
};

use crate::tasks::{
    Hit, TASK_STATS, add, count, count_as, count_n, current, emit, follow_child, header, is_self,
    send, task_entry, task_stats, touch, touch_noting, wanted,
};

#[unsafe(no_mangle)]
static SKIP_VMA_OFFSETS: Global<SkipVmaOffsets> = Global::new(SkipVmaOffsets::ABSENT);
#[unsafe(no_mangle)]
static MOVE_OFFSETS: Global<MoveOffsets> = Global::new(MoveOffsets::ABSENT);
#[unsafe(no_mangle)]
static SWAP_OFFSETS: Global<PairOffsets> = Global::new(PairOffsets::ABSENT);
#[unsafe(no_mangle)]
static STICK_OFFSETS: Global<PairOffsets> = Global::new(PairOffsets::ABSENT);
#[unsafe(no_mangle)]
static MIGRATE_OFFSETS: Global<MigrateOffsets> = Global::new(MigrateOffsets::ABSENT);
#[unsafe(no_mangle)]
static FORK_OFFSETS: Global<ForkOffsets> = Global::new(ForkOffsets::ABSENT);

/// This CPU's copy of the running tracepoint's record: one helper call for the whole record
/// instead of one per field.
#[map]
static RECORD: PerCpuArray<[u64; TP_RECORD_BYTES as usize / 8]> =
    PerCpuArray::with_max_entries(1, 0);

/// A tracepoint's record: this CPU's copy of its first [`TP_RECORD_BYTES`] (null: the copy
/// failed, counted once).
struct Rec {
    copy: *const u8,
}

impl Rec {
    #[inline(always)]
    fn read(ctx: &TracePointContext) -> Self {
        let copy = match RECORD.get_ptr_mut(0) {
            // SAFETY: the destination is this CPU's value of TP_RECORD_BYTES bytes; the source
            // is the record in the per-CPU trace buffer, which the helper reads without
            // faulting (past a short record: that buffer's own bytes, never read as a field).
            Some(p)
                if unsafe {
                    aya_ebpf::helpers::generated::bpf_probe_read_kernel(
                        p.cast(),
                        TP_RECORD_BYTES,
                        ctx.as_ptr().cast_const(),
                    )
                } == 0 =>
            {
                p.cast::<u8>().cast_const()
            }
            _ => {
                count(Counter::ReadFailed);
                core::ptr::null()
            }
        };
        Self { copy }
    }
}

/// A field at `off` of the record; an absent field (or one past the copy: the loader marks
/// those absent) reads as `default`, as does every field of a record whose copy failed.
#[inline(always)]
fn field<T: Copy>(r: &Rec, off: u32, default: T) -> T {
    let size = core::mem::size_of::<T>() as u64;
    // Through memory, so that the verifier sees this bound on the offset it adds (5.10 does not
    // carry LLVM's folded compares over to the pointer arithmetic).
    let o: u64 = unsafe { core::ptr::read_volatile(&u64::from(off)) };
    if r.copy.is_null() || o > u64::from(TP_RECORD_BYTES) - size || !o.is_multiple_of(size) {
        return default;
    }
    // SAFETY: within this CPU's copy of the record, aligned for T.
    unsafe { core::ptr::read(r.copy.add(o as usize).cast::<T>()) }
}

#[tracepoint]
pub fn tp_sched_skip_vma_numa(ctx: TracePointContext) -> u32 {
    // Fires inside task_numa_work, so the scanning task is `current`.
    let cur = current();
    if !wanted(cur.tgid) {
        return 0;
    }
    count_as(Counter::SeenSkipVma, cur.tgid);
    let r = Rec::read(&ctx);
    let o = SKIP_VMA_OFFSETS.load();
    let reason: u32 = field(&r, o.reason, u32::MAX);
    if let Some(t) = task_entry(cur.pid, cur.tgid, true) {
        let slot = if (reason as usize) < SKIP_REASON_OTHER {
            reason as usize
        } else {
            SKIP_REASON_OTHER
        };
        // Bounds are explicit for the verifier.
        if slot < SKIP_REASON_SLOTS {
            add(unsafe { &raw mut (*t).skip_vma[slot] }, 1);
        }
        touch_noting(t);
    }
    // numatrace's own skips are counted in its entry; their records would only be noise.
    if emit(EMIT_SKIP_VMA) && !is_self(cur.tgid) {
        send(SkipVmaEvent {
            hdr: header(EventKind::SkipVma as u32, cur.pid, cur.tgid),
            numa_scan_offset: field(&r, o.numa_scan_offset, 0u64),
            vm_start: field(&r, o.vm_start, 0u64),
            vm_end: field(&r, o.vm_end, 0u64),
            reason,
            _pad: 0,
        });
    }
    0
}

#[tracepoint]
pub fn tp_sched_move_numa(ctx: TracePointContext) -> u32 {
    let o = MOVE_OFFSETS.load();
    let r = Rec::read(&ctx);
    let pid: u32 = field(&r, o.pid, 0);
    let tgid: u32 = field(&r, o.tgid, 0);
    if !wanted(tgid) {
        return 0;
    }
    let cur = current();
    count_as(Counter::SeenMove, cur.tgid);
    if let Some(t) = task_entry(pid, tgid, pid == cur.pid) {
        crate::bump!(Hit::new(t, pid, tgid, cur.tgid), placement.moves, 1);
        touch(t);
    }
    if emit(EMIT_PLACEMENT) {
        send(PlacementEvent {
            hdr: header(EventKind::NumaMove as u32, pid, tgid),
            src_cpu: field(&r, o.src_cpu, -1),
            src_nid: field(&r, o.src_nid, -1),
            dst_pid: pid,
            dst_tgid: tgid,
            dst_cpu: field(&r, o.dst_cpu, -1),
            dst_nid: field(&r, o.dst_nid, -1),
        });
    }
    0
}

struct Pair {
    src_pid: u32,
    src_tgid: u32,
    dst_pid: u32,
    dst_tgid: u32,
    dst_cpu: i32,
}

#[inline(always)]
fn read_pair(r: &Rec, o: &PairOffsets) -> Pair {
    Pair {
        src_pid: field(r, o.src_pid, 0),
        src_tgid: field(r, o.src_tgid, 0),
        dst_pid: field(r, o.dst_pid, 0),
        dst_tgid: field(r, o.dst_tgid, 0),
        dst_cpu: field(r, o.dst_cpu, -1),
    }
}

#[inline(always)]
fn placement_event(r: &Rec, kind: EventKind, o: &PairOffsets, p: &Pair) {
    if emit(EMIT_PLACEMENT) {
        send(PlacementEvent {
            hdr: header(kind as u32, p.src_pid, p.src_tgid),
            src_cpu: field(r, o.src_cpu, -1),
            src_nid: field(r, o.src_nid, -1),
            dst_pid: p.dst_pid,
            dst_tgid: p.dst_tgid,
            dst_cpu: p.dst_cpu,
            dst_nid: field(r, o.dst_nid, -1),
        });
    }
}

#[tracepoint]
pub fn tp_sched_swap_numa(ctx: TracePointContext) -> u32 {
    let o = SWAP_OFFSETS.load();
    let r = Rec::read(&ctx);
    let p = read_pair(&r, &o);
    let (src, dst) = (wanted(p.src_tgid), wanted(p.dst_tgid));
    if !src && !dst {
        return 0;
    }
    let cur = current();
    count_as(Counter::SeenSwap, cur.tgid);
    if src && let Some(t) = task_entry(p.src_pid, p.src_tgid, p.src_pid == cur.pid) {
        crate::bump!(
            Hit::new(t, p.src_pid, p.src_tgid, cur.tgid),
            placement.swaps_out,
            1
        );
        touch(t);
    }
    if dst && let Some(t) = task_entry(p.dst_pid, p.dst_tgid, p.dst_pid == cur.pid) {
        crate::bump!(
            Hit::new(t, p.dst_pid, p.dst_tgid, cur.tgid),
            placement.swaps_in,
            1
        );
        touch(t);
    }
    placement_event(&r, EventKind::NumaSwap, &o, &p);
    0
}

#[tracepoint]
pub fn tp_sched_stick_numa(ctx: TracePointContext) -> u32 {
    let o = STICK_OFFSETS.load();
    let r = Rec::read(&ctx);
    let p = read_pair(&r, &o);
    if !wanted(p.src_tgid) {
        return 0;
    }
    let cur = current();
    count_as(Counter::SeenStick, cur.tgid);
    if let Some(t) = task_entry(p.src_pid, p.src_tgid, p.src_pid == cur.pid) {
        let h = Hit::new(t, p.src_pid, p.src_tgid, cur.tgid);
        crate::bump!(h, placement.sticks, 1);
        if p.dst_cpu < 0 {
            crate::bump!(h, placement.stick_no_target, 1);
        }
        touch(t);
    }
    placement_event(&r, EventKind::NumaStick, &o, &p);
    0
}

#[tracepoint]
pub fn tp_mm_migrate_pages(ctx: TracePointContext) -> u32 {
    let o = MIGRATE_OFFSETS.load();
    let r = Rec::read(&ctx);
    let reason: i32 = field(&r, o.reason, -1);
    if reason as u32 == MR_DEMOTION {
        demotion(&r, &o);
        return 0;
    }
    if reason as u32 != MR_NUMA_MISPLACED {
        return 0;
    }
    // NUMA-misplaced migrations run in the context of the task taking the hinting fault.
    let cur = current();
    if !wanted(cur.tgid) {
        return 0;
    }
    count_as(Counter::SeenMigrateNuma, cur.tgid);
    let (succeeded, failed, thp_succeeded, thp_failed) = (
        field(&r, o.succeeded, 0u64),
        field(&r, o.failed, 0u64),
        field(&r, o.thp_succeeded, 0u64),
        field(&r, o.thp_failed, 0u64),
    );
    if let Some(t) = task_entry(cur.pid, cur.tgid, true) {
        let h = Hit::new(t, cur.pid, cur.tgid, cur.tgid);
        crate::bump!(h, migrations.calls, 1);
        crate::bump!(h, migrations.pages_ok, succeeded);
        crate::bump!(h, migrations.pages_failed, failed);
        crate::bump!(h, migrations.thp_ok, thp_succeeded);
        crate::bump!(h, migrations.thp_failed, thp_failed);
        touch_noting(t);
    }
    // The header's helper calls only where the record is read.
    if emit(EMIT_MIGRATE_PAGES) {
        send(MigratePagesEvent {
            hdr: header(EventKind::MigratePages as u32, cur.pid, cur.tgid),
            succeeded,
            failed,
            thp_succeeded,
            thp_failed,
            mode: field(&r, o.mode, 0u32),
            reason: reason as u32,
        });
    }
    0
}

/// A reclaim pass demoting pages to a slower tier: counted system-wide (kswapd and the
/// reclaiming tasks are not followed), split by who reclaimed as the kernel splits
/// `pgdemote_*`: kswapd (PF_KSWAPD), khugepaged (its comm), the rest direct or proactive.
#[inline(always)]
fn demotion(r: &Rec, o: &MigrateOffsets) {
    let ok: u64 = field(r, o.succeeded, 0u64);
    count(Counter::DemoteCalls);
    count_n(Counter::DemotePages, ok);
    count_n(Counter::DemoteFailed, field(r, o.failed, 0u64));
    let flags =
        crate::tasks::current_field::<u32>(crate::tasks::TASK_OFFSETS.load().flags).unwrap_or(0);
    if flags & PF_KSWAPD != 0 {
        count_n(Counter::DemoteKswapd, ok);
    } else if aya_ebpf::helpers::bpf_get_current_comm()
        .is_ok_and(|c| c.starts_with(b"khugepaged\0"))
    {
        count_n(Counter::DemoteKhugepaged, ok);
    }
}

/// 6.16+: task_numa_work skipped a scan because the task's cpuset allows one node (fires in
/// task_numa_work, so the scanning task is `current`).
#[tracepoint]
pub fn tp_sched_skip_cpuset_numa(_ctx: TracePointContext) -> u32 {
    let cur = current();
    if !wanted(cur.tgid) {
        return 0;
    }
    count_as(Counter::SeenSkipCpuset, cur.tgid);
    if let Some(t) = task_entry(cur.pid, cur.tgid, true) {
        crate::bump!(
            Hit::new(t, cur.pid, cur.tgid, cur.tgid),
            scan.cpuset_skips,
            1
        );
        touch_noting(t);
    }
    0
}

#[tracepoint]
pub fn tp_sched_process_fork(ctx: TracePointContext) -> u32 {
    // `current` is the parent.
    // Only a followed process's children are followed: system-wide this returns at once, and
    // with the filter a read-only constant the verifier removes the rest.
    if !crate::tasks::filtering() {
        return 0;
    }
    let o = FORK_OFFSETS.load();
    let r = Rec::read(&ctx);
    let child: u32 = field(&r, o.child_pid, 0);
    if child != 0 && follow_child(current().tgid, child) {
        debug!(&ctx, "following child pid={}", child);
    }
    0
}

#[tracepoint]
pub fn tp_sched_process_exit(_ctx: TracePointContext) -> u32 {
    // Fires once per exiting thread, in its own context. Hand the final aggregates over and free
    // the entry; if the ring buffer is full, keep the entry (marked) for userspace's final read.
    // One lookup: a task numatrace never counted has no entry (its calls in progress, if any,
    // live in the entry and go with it).
    let cur = current();
    let Some(t) = task_stats(cur.pid) else {
        return 0;
    };
    // An earlier task's entry, marked at its own exit and still held for userspace: not this
    // task's to hand over (userspace may have folded and forgotten it already).
    if unsafe { (*t).exited } != 0 && !crate::tasks::owned_by_current(t) {
        return 0;
    }
    crate::functions::note_runtime(t);
    match crate::tasks::EVENTS.reserve::<TaskExitEvent>(0) {
        Some(mut slot) => {
            let ev = slot.as_mut_ptr();
            // SAFETY: `ev` is an exclusive reservation and `t` a live map value; the helper
            // copies the snapshot without passing it through the 512-byte BPF stack.
            unsafe {
                (*ev).hdr = header(EventKind::TaskExit as u32, cur.pid, cur.tgid);
                aya_ebpf::helpers::generated::bpf_probe_read_kernel(
                    (&raw mut (*ev).stats).cast(),
                    core::mem::size_of::<numatrace_common::TaskStats>() as u32,
                    t.cast_const().cast(),
                );
            }
            slot.submit(crate::tasks::wake_flags());
            count(Counter::ExitSnapshots);
            let _ = TASK_STATS.remove(&cur.pid);
        }
        None => {
            count(Counter::RingbufFull);
            unsafe { (*t).exited = 1 };
        }
    }
    0
}

/// Never attached: userspace loads it against a kernel function to learn whether fentry is
/// accepted there, and with which errno it is refused.
#[fentry(function = "task_numa_fault")]
pub fn fentry_probe(_ctx: FEntryContext) -> u32 {
    0
}
