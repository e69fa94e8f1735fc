//! Classic tracepoint programs. Field offsets come from the running kernel's tracefs `format`
//! files, through globals set by the loader: nothing about the layout is baked in here.

use aya_ebpf::{
    EbpfContext, Global,
    macros::{fentry, map, tracepoint},
    maps::PerCpuArray,
    programs::{FEntryContext, TracePointContext},
};
use numatrace_common::{
    CTX_MIGRATE, CTX_MOVE, CTX_SKIP_VMA, CTX_STICK, CTX_SWAP, Counter, EMIT_MIGRATE_PAGES,
    EMIT_PLACEMENT, EMIT_SKIP_VMA, EventKind, ForkOffsets, MR_DEMOTION, MR_NUMA_MISPLACED,
    MigrateOffsets, MigratePagesEvent, MoveOffsets, PF_KSWAPD, PairOffsets, PlacementEvent,
    READ_VMA_SKIPS, SKIP_REASON_OTHER, SKIP_REASON_SLOTS, SkipVmaEvent, SkipVmaOffsets,
    TP_RECORD_BYTES, TaskExitEvent,
};

use crate::tasks::{
    Hit, add, count, count_as, count_n, current, emit, follow_child, header, is_self, reads, send,
    slot_at, task_entry, touch_noting, wanted,
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
/// instead of one per field, where the record cannot be read in place.
#[map]
static RECORD: PerCpuArray<[u64; TP_RECORD_BYTES as usize / 8]> =
    PerCpuArray::with_max_entries(1, 0);

/// Tracepoints whose format has the layout compiled in (`CTX_*` bits): read in place.
#[unsafe(no_mangle)]
static TP_CTX_READS: Global<u32> = Global::new(0);

/// Whether tracepoint `bit`'s record is read in place. A read-only global: the verifier keeps
/// one of the two readings of [`read_record!`].
#[inline(always)]
fn in_place(bit: u32) -> bool {
    TP_CTX_READS.load() & bit != 0
}

/// A tracepoint's fields, read by `$read` (a struct expression of [`field`]s of `$r` at the
/// offsets `$o`): in place at the known layout's constant offsets where the running kernel's
/// format has that layout (`$bit`), else from a copy at the format's offsets. Only the reading
/// is expanded twice; the program's body, written once against the values, follows.
macro_rules! read_record {
    ($ctx:expr, $bit:expr, $known:expr, $from_format:expr, |$r:ident, $o:ident| $read:expr) => {
        if in_place($bit) {
            let $r = Rec::<true>::read($ctx);
            let $o = $known;
            $read
        } else {
            let $r = Rec::<false>::read($ctx);
            let $o = $from_format.load();
            $read
        }
    };
}

/// A tracepoint's record: its context (`IN_PLACE`), or this CPU's copy of its first
/// [`TP_RECORD_BYTES`] (null: the copy failed, counted once).
struct Rec<const IN_PLACE: bool> {
    base: *const u8,
}

impl<const IN_PLACE: bool> Rec<IN_PLACE> {
    #[inline(always)]
    fn read(ctx: &TracePointContext) -> Self {
        if IN_PLACE {
            return Self {
                base: ctx.as_ptr().cast_const().cast(),
            };
        }
        let base = match RECORD.get_ptr_mut(0) {
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
        Self { base }
    }
}

/// A field at `off` of the record; an absent field (or one past the copy: the loader marks
/// those absent) reads as `default`, as does every field of a record whose copy failed.
#[inline(always)]
fn field<const IN_PLACE: bool, T: Copy>(r: &Rec<IN_PLACE>, off: u32, default: T) -> T {
    if IN_PLACE {
        // `off` is a constant of the known layout (every field present, 8 or more: the
        // common header's bytes are not readable), so this is one load from the context at
        // a fixed offset, the only kind the verifier admits there. Volatile: never merged
        // with the copy's load into one at a computed address.
        // SAFETY: inside the record, which the loader found to have this layout.
        return unsafe { core::ptr::read_volatile(r.base.add(off as usize).cast::<T>()) };
    }
    let size = core::mem::size_of::<T>() as u64;
    // Through memory, so that the verifier sees this bound on the offset it adds (5.10 does not
    // carry LLVM's folded compares over to the pointer arithmetic).
    let o: u64 = unsafe { core::ptr::read_volatile(&u64::from(off)) };
    if r.base.is_null() || o > u64::from(TP_RECORD_BYTES) - size || !o.is_multiple_of(size) {
        return default;
    }
    // SAFETY: within this CPU's copy of the record, aligned for T.
    unsafe { core::ptr::read(r.base.add(o as usize).cast::<T>()) }
}

struct SkipVma {
    numa_scan_offset: u64,
    vm_start: u64,
    vm_end: u64,
    reason: u32,
}

/// `reason`'s counter in a by-reason array (the last: reasons this numatrace does not know),
/// bounded where the verifier sees it ([`slot_at`]).
#[inline(always)]
pub(crate) fn reason_slot(slots: *mut [u64; SKIP_REASON_SLOTS], reason: u32) -> Option<*mut u64> {
    slot_at::<SKIP_REASON_SLOTS>(slots.cast(), reason.min(SKIP_REASON_OTHER as u32))
}

/// A skip of the running (scanning) task: system-wide and in its entry, by reason.
#[inline(always)]
pub(crate) fn count_skip(pid: u32, tgid: u32, reason: u32) {
    count_as(Counter::SeenSkipVma, tgid);
    if let Some(t) = task_entry(pid, tgid, true) {
        if let Some(c) = reason_slot(unsafe { &raw mut (*t).skip_vma }, reason) {
            add(c, 1);
        }
        touch_noting(t);
    }
}

/// Whether the skip records go out: for `record`, or, from this program, for the per-VMA
/// reasons the frontend reads (the tp_btf program keeps those in its map instead).
#[inline(always)]
fn send_skips() -> bool {
    emit(EMIT_SKIP_VMA) || reads(READ_VMA_SKIPS)
}

/// The classic program: where the tp_btf one cannot be the hook's only program (no BTF).
#[tracepoint]
pub fn tp_sched_skip_vma_numa(ctx: TracePointContext) -> u32 {
    // Fires inside task_numa_work, so the scanning task is `current`.
    let cur = current();
    if !wanted(cur.tgid) {
        return 0;
    }
    let v = read_record!(
        &ctx,
        CTX_SKIP_VMA,
        SkipVmaOffsets::KNOWN,
        SKIP_VMA_OFFSETS,
        |r, o| {
            SkipVma {
                numa_scan_offset: field(&r, o.numa_scan_offset, 0u64),
                vm_start: field(&r, o.vm_start, 0u64),
                vm_end: field(&r, o.vm_end, 0u64),
                reason: field(&r, o.reason, u32::MAX),
            }
        }
    );
    count_skip(cur.pid, cur.tgid, v.reason);
    // numatrace's own skips are counted in its entry; their records would only be noise.
    if send_skips() && !is_self(cur.tgid) {
        send(SkipVmaEvent {
            hdr: header(EventKind::SkipVma as u32, cur.pid, cur.tgid),
            numa_scan_offset: v.numa_scan_offset,
            vm_start: v.vm_start,
            vm_end: v.vm_end,
            reason: v.reason,
            _pad: 0,
        });
    }
    0
}

/// A placement record's fields (`sched_move_numa` has one task: its pid and tgid are `src_*`
/// and `dst_*` alike).
struct Pair {
    src_pid: u32,
    src_tgid: u32,
    src_cpu: i32,
    src_nid: i32,
    dst_pid: u32,
    dst_tgid: u32,
    dst_cpu: i32,
    dst_nid: i32,
}

/// `sched_swap_numa` / `sched_stick_numa`'s fields.
#[inline(always)]
fn read_pair(ctx: &TracePointContext, bit: u32, from_format: &Global<PairOffsets>) -> Pair {
    read_record!(ctx, bit, PairOffsets::KNOWN, from_format, |r, o| Pair {
        src_pid: field(&r, o.src_pid, 0),
        src_tgid: field(&r, o.src_tgid, 0),
        src_cpu: field(&r, o.src_cpu, -1),
        src_nid: field(&r, o.src_nid, -1),
        dst_pid: field(&r, o.dst_pid, 0),
        dst_tgid: field(&r, o.dst_tgid, 0),
        dst_cpu: field(&r, o.dst_cpu, -1),
        dst_nid: field(&r, o.dst_nid, -1),
    })
}

#[inline(always)]
fn placement_event(kind: EventKind, p: &Pair) {
    if emit(EMIT_PLACEMENT) {
        send(PlacementEvent {
            hdr: header(kind as u32, p.src_pid, p.src_tgid),
            src_cpu: p.src_cpu,
            src_nid: p.src_nid,
            dst_pid: p.dst_pid,
            dst_tgid: p.dst_tgid,
            dst_cpu: p.dst_cpu,
            dst_nid: p.dst_nid,
        });
    }
}

#[tracepoint]
pub fn tp_sched_move_numa(ctx: TracePointContext) -> u32 {
    let p = read_record!(&ctx, CTX_MOVE, MoveOffsets::KNOWN, MOVE_OFFSETS, |r, o| {
        let (pid, tgid) = (field(&r, o.pid, 0), field(&r, o.tgid, 0));
        Pair {
            src_pid: pid,
            src_tgid: tgid,
            src_cpu: field(&r, o.src_cpu, -1),
            src_nid: field(&r, o.src_nid, -1),
            dst_pid: pid,
            dst_tgid: tgid,
            dst_cpu: field(&r, o.dst_cpu, -1),
            dst_nid: field(&r, o.dst_nid, -1),
        }
    });
    let (pid, tgid) = (p.src_pid, p.src_tgid);
    if !wanted(tgid) {
        return 0;
    }
    let cur = current();
    count_as(Counter::SeenMove, cur.tgid);
    if let Some(t) = task_entry(pid, tgid, pid == cur.pid) {
        crate::bump!(Hit::new(t, pid, tgid, cur.tgid), placement.moves, 1);
    }
    placement_event(EventKind::NumaMove, &p);
    0
}

#[tracepoint]
pub fn tp_sched_swap_numa(ctx: TracePointContext) -> u32 {
    let p = read_pair(&ctx, CTX_SWAP, &SWAP_OFFSETS);
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
    }
    if dst && let Some(t) = task_entry(p.dst_pid, p.dst_tgid, p.dst_pid == cur.pid) {
        crate::bump!(
            Hit::new(t, p.dst_pid, p.dst_tgid, cur.tgid),
            placement.swaps_in,
            1
        );
    }
    placement_event(EventKind::NumaSwap, &p);
    0
}

#[tracepoint]
pub fn tp_sched_stick_numa(ctx: TracePointContext) -> u32 {
    let p = read_pair(&ctx, CTX_STICK, &STICK_OFFSETS);
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
    }
    placement_event(EventKind::NumaStick, &p);
    0
}

struct Migrate {
    succeeded: u64,
    failed: u64,
    thp_succeeded: u64,
    thp_failed: u64,
    mode: u32,
    reason: i32,
}

#[tracepoint]
pub fn tp_mm_migrate_pages(ctx: TracePointContext) -> u32 {
    let m = read_record!(
        &ctx,
        CTX_MIGRATE,
        MigrateOffsets::KNOWN,
        MIGRATE_OFFSETS,
        |r, o| {
            Migrate {
                succeeded: field(&r, o.succeeded, 0u64),
                failed: field(&r, o.failed, 0u64),
                thp_succeeded: field(&r, o.thp_succeeded, 0u64),
                thp_failed: field(&r, o.thp_failed, 0u64),
                mode: field(&r, o.mode, 0u32),
                reason: field(&r, o.reason, -1),
            }
        }
    );
    if m.reason as u32 == MR_DEMOTION {
        demotion(&m);
        return 0;
    }
    if m.reason as u32 != MR_NUMA_MISPLACED {
        return 0;
    }
    // NUMA-misplaced migrations run in the context of the task taking the hinting fault.
    let cur = current();
    if !wanted(cur.tgid) {
        return 0;
    }
    count_as(Counter::SeenMigrateNuma, cur.tgid);
    if let Some(t) = task_entry(cur.pid, cur.tgid, true) {
        let h = Hit::new(t, cur.pid, cur.tgid, cur.tgid);
        crate::bump!(h, migrations.calls, 1);
        crate::bump!(h, migrations.pages_ok, m.succeeded);
        crate::bump!(h, migrations.pages_failed, m.failed);
        crate::bump!(h, migrations.thp_ok, m.thp_succeeded);
        crate::bump!(h, migrations.thp_failed, m.thp_failed);
        touch_noting(t);
    }
    // The header's helper calls only where the record is read.
    if emit(EMIT_MIGRATE_PAGES) {
        send(MigratePagesEvent {
            hdr: header(EventKind::MigratePages as u32, cur.pid, cur.tgid),
            succeeded: m.succeeded,
            failed: m.failed,
            thp_succeeded: m.thp_succeeded,
            thp_failed: m.thp_failed,
            mode: m.mode,
            reason: m.reason as u32,
        });
    }
    0
}

/// A reclaim pass demoting pages to a slower tier: counted system-wide (kswapd and the
/// reclaiming tasks are not followed), split by who reclaimed as the kernel splits
/// `pgdemote_*`: kswapd (PF_KSWAPD), khugepaged (its comm), the rest direct or proactive.
#[inline(always)]
fn demotion(m: &Migrate) {
    let ok = m.succeeded;
    count(Counter::DemoteCalls);
    count_n(Counter::DemotePages, ok);
    count_n(Counter::DemoteFailed, m.failed);
    let flags =
        crate::tasks::current_field::<u32>(crate::global!(crate::tasks::TASK_OFFSETS, flags))
            .unwrap_or(0);
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
    let r = Rec::<false>::read(&ctx);
    let child: u32 = field(&r, o.child_pid, 0);
    if child != 0 && follow_child(current().tgid, child) {
        debug!(&ctx, "following child pid={}", child);
    }
    0
}

#[tracepoint]
pub fn tp_sched_process_exit(_ctx: TracePointContext) -> u32 {
    // Fires once per exiting thread, in its own context. Hand the final aggregates over and free
    // the slot; if the ring buffer is full, keep the entry (marked) for userspace's final read,
    // which frees it. A task numatrace never counted has no entry (its calls in progress, if
    // any, live in the entry and go with it).
    let cur = current();
    let Some((e, at)) = crate::tasks::exiting_entry(cur.pid) else {
        return 0;
    };
    let t = e.cast::<numatrace_common::TaskStats>();
    crate::functions::note_runtime(t);
    match crate::tasks::EVENTS.reserve::<TaskExitEvent>(0) {
        Some(mut slot) => {
            let ev = slot.as_mut_ptr();
            // SAFETY: `ev` is an exclusive reservation and `t` a live map value, both 8-byte
            // aligned. A constant-size copy between them is expanded into plain loads and
            // stores (not through the 512-byte BPF stack): several times cheaper than the
            // probe-read helper, whose fault-safe loop costs ~10 instructions a word.
            unsafe {
                (*ev).hdr = header(EventKind::TaskExit as u32, cur.pid, cur.tgid);
                core::ptr::copy_nonoverlapping(t.cast_const(), &raw mut (*ev).stats, 1);
            }
            slot.submit(crate::tasks::wake_flags());
            count(Counter::ExitSnapshots);
            crate::tasks::free_slot(e, at);
        }
        None => {
            count(Counter::RingbufFull);
            unsafe { (*t).exited = 1 };
            crate::tasks::mark(at);
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
