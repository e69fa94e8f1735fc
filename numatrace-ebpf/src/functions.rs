//! Function hooks. Each hook's work lives in one `on_*` function; the fentry/fexit and
//! kprobe/kretprobe programs are thin wrappers that only extract arguments, so both
//! mechanisms count exactly the same thing. Field offsets come from BTF via globals.

use aya_ebpf::{
    EbpfContext, Global,
    helpers::bpf_ktime_get_ns,
    macros::{fentry, fexit, kprobe, kretprobe, map},
    maps::{HashMap, LruHashMap, PerCpuArray},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use numatrace_common::{
    Counter, EMIT_VMA_SCAN, EventKind, FAULT_PAGE_BUCKETS, FIELD_ABSENT, FuncConfig,
    LATENCY_BUCKETS, MATRIX_SLOTS, MAX_NODES, MIGRATED_BIT, MIGRATED_PAGES_SLOTS,
    NODE_FAULT_FIELDS, NODE_FAULT_SLOTS, NODE_RANGES, NODE_UNKNOWN, NodeMap, PageOffsets,
    READ_REGIONS, READ_VMAS, RegionKey, TNF_FAULT_LOCAL, TNF_MIGRATE_FAIL, TNF_MIGRATED, TaskStats,
    VM_MAYWRITE, VM_SHARED, VmaKey, VmaScanEvent, VmaStats,
};

use crate::{
    args::{kprobe_args, pick, tracing_arg, tracing_arg_scalar},
    tasks::{
        Hit, Slots, TASK_OFFSETS, add, count, current, current_field, current_ptr, emit, field_of,
        followed_current, header, inflight_of, is_self, read_field, reads, send, send_span, slot,
        task_entry, touch_noting, via_current, wanted,
    },
    tiering::{note_node_threshold, take_decision, tiers},
};

#[unsafe(no_mangle)]
static FUNC_CONFIG: Global<FuncConfig> = Global::new(FuncConfig::DEFAULT);

#[unsafe(no_mangle)]
static PAGE_OFFSETS: Global<PageOffsets> = Global::new(PageOffsets::ABSENT);

/// Read field by field (volatile): the whole struct would not fit on the BPF stack.
#[unsafe(no_mangle)]
static NODE_MAP: NodeMap = NodeMap::EMPTY;

#[map]
static MIGRATE_MATRIX: Slots<{ MATRIX_SLOTS as usize }> = PerCpuArray::with_max_entries(1, 0);
#[map]
static MIGRATED_PAGES: Slots<{ MIGRATED_PAGES_SLOTS as usize }> =
    PerCpuArray::with_max_entries(1, 0);
#[map]
static NODE_FAULTS: Slots<{ NODE_FAULT_SLOTS as usize }> = PerCpuArray::with_max_entries(1, 0);
/// LRU: the oldest regions go first when a long run fills it.
#[map]
static REGION_FAULTS: LruHashMap<RegionKey, u64> =
    LruHashMap::with_max_entries(numatrace_common::MAX_REGIONS, 0);

#[map]
static VMA_STATS: HashMap<VmaKey, VmaStats> =
    HashMap::with_max_entries(numatrace_common::MAX_VMAS, 0);

#[map]
static MIGRATE_LATENCY: Slots<{ LATENCY_BUCKETS as usize }> = PerCpuArray::with_max_entries(1, 0);
#[map]
static FAULT_PAGES: Slots<{ FAULT_PAGE_BUCKETS as usize }> = PerCpuArray::with_max_entries(1, 0);

/// floor(log2(v)) + 1, 0 for 0: histogram bucket without a clz instruction.
#[inline(always)]
fn log2_bucket(mut v: u64) -> u32 {
    let mut b = 0;
    for shift in [32u32, 16, 8, 4, 2, 1] {
        if v >= 1u64 << shift {
            v >>= shift;
            b += shift;
        }
    }
    if v > 0 { b + 1 } else { 0 }
}

#[inline(always)]
fn hist_add<const N: usize>(map: &Slots<N>, bucket: u32) {
    let b = if (bucket as usize) < N {
        bucket
    } else {
        N as u32 - 1
    };
    if let Some(p) = slot(map, b) {
        add(p, 1);
    }
}

/// Records `se.sum_exec_runtime` as first/last seen: the denominator of the scan share.
#[inline(always)]
pub fn note_runtime(t: *mut TaskStats) {
    note_runtime_as(
        t,
        current_field::<u64>(crate::global!(TASK_OFFSETS, sum_exec_runtime)),
    );
}

/// [`note_runtime`] with the runtime the program has just read.
#[inline(always)]
fn note_runtime_as(t: *mut TaskStats, runtime: Option<u64>) {
    if let Some(rt) = runtime {
        unsafe {
            if (*t).runtime_first_ns == 0 {
                (*t).runtime_first_ns = rt;
            }
            (*t).runtime_last_ns = rt;
        }
    }
}

/// Starts a call in the slot whose first field is `ts`. Under a kretprobe a slot still in use
/// is a call whose return the kernel did not report (a kretprobe has a fixed number of
/// instances; a task holds one while the call sleeps): that pair is counted lost.
#[inline(always)]
fn slot_start(ts: *mut u64, kretprobe: bool) {
    unsafe {
        if kretprobe && *ts != 0 {
            count(Counter::InflightLost);
        }
        *ts = bpf_ktime_get_ns();
    }
}

/// Empties the slot whose first field is `ts`: its previous value (0: no call in progress).
#[inline(always)]
fn slot_take(ts: *mut u64) -> u64 {
    unsafe { core::mem::replace(&mut *ts, 0) }
}

// ---- task_numa_work ------------------------------------------------------------------------

#[inline(always)]
fn on_task_numa_work_enter(kretprobe: bool) {
    let Some(h) = followed_current() else {
        return;
    };
    let t = h.t;
    let task = current_ptr();
    let stamp_off = crate::global!(TASK_OFFSETS, node_stamp);
    let read_runtime = via_current::<u64>(task, crate::global!(TASK_OFFSETS, sum_exec_runtime));
    let runtime = read_runtime.unwrap_or(0);
    let node_stamp = via_current::<u64>(task, stamp_off).unwrap_or(0);
    let r = inflight_of(t);
    // Seed 003, invariant 1: node_stamp must never run ahead of the runtime at entry — unless
    // the work was queued while the previous call ran (a tick inside a call longer than the
    // scan period): it then enters with node_stamp exactly as that call left it. On a patched
    // kernel that tick found the runtime past node_stamp + period, so the call ended with its
    // runtime past the node_stamp it ran under (`scan_exit_passed`); the underflow queues the
    // work from ticks that find node_stamp ahead, and each of them pushes node_stamp a period
    // further, faster than the runtime grows.
    // Taken: a call whose return is never seen leaves the next entry unjudged, not misjudged.
    let exit_stamp = core::mem::replace(unsafe { &mut (*r).scan_exit_stamp }, 0);
    let requeue = exit_stamp == node_stamp && unsafe { (*r).scan_exit_passed } != 0;
    unsafe { (*r).scan_requeue = 0 };
    if stamp_off != numatrace_common::FIELD_ABSENT && node_stamp > runtime && exit_stamp != 0 {
        if requeue {
            crate::bump!(h, scan.requeued_calls, 1);
            unsafe { (*r).scan_requeue = 1 };
        } else {
            crate::bump!(h, scan.stamp_violations, 1);
        }
    }
    note_runtime_as(t, read_runtime);
    unsafe {
        (*r).scan_runtime_ns = runtime;
        (*r).scan_node_stamp = node_stamp;
        slot_start(&raw mut (*r).scan_ts_ns, kretprobe);
    }
}

#[inline(always)]
fn on_task_numa_work_exit() {
    let Some(h) = followed_current() else {
        return;
    };
    let t = h.t;
    let r = inflight_of(t);
    let start_ts = slot_take(unsafe { &raw mut (*r).scan_ts_ns });
    if start_ts == 0 {
        return;
    }
    let (start_runtime, start_stamp, requeue) = unsafe {
        (
            (*r).scan_runtime_ns,
            (*r).scan_node_stamp,
            (*r).scan_requeue != 0,
        )
    };
    let now = unsafe { bpf_ktime_get_ns() };
    let ns = now.saturating_sub(start_ts);
    send_span(EventKind::ScanCall, start_ts, ns, 0, 0);
    let task = current_ptr();
    let runtime = via_current::<u64>(task, crate::global!(TASK_OFFSETS, sum_exec_runtime));
    let node_stamp = via_current::<u64>(task, crate::global!(TASK_OFFSETS, node_stamp));
    crate::bump!(h, scan.calls, 1);
    crate::bump!(h, scan.time_ns, ns);
    unsafe {
        if ns > (*t).scan.max_ns {
            (*t).scan.max_ns = ns;
        }
        if let Some(mm) = via_current::<u64>(task, crate::global!(TASK_OFFSETS, mm))
            && let Some(seq) = via_current::<i32>(
                mm as *const u8,
                crate::global!(TASK_OFFSETS, mm_numa_scan_seq),
            )
        {
            (*t).scan.scan_seq = seq.max(0) as u64;
        }
    }
    if let Some(rt) = runtime {
        let d_rt = rt.saturating_sub(start_runtime);
        crate::bump!(h, scan.runtime_in_scan_ns, d_rt);
        // A re-queued call continues the one before it: the share the cap bounds is measured
        // up to the start of that first call.
        unsafe {
            if requeue {
                (*t).scan_last_call_rt += d_rt;
            } else {
                (*t).scan_last_call_rt = d_rt;
                (*t).scan_last_entry_runtime = start_runtime;
            }
        }
        if let Some(stamp) = node_stamp {
            // node_stamp before the kernel's 32x push at the end of the call. Our Δruntime is
            // never smaller than the kernel's (we read before it at entry and after it at
            // exit), so this errs towards "passed" by at most 32x a tick.
            let before_push = stamp.saturating_sub(d_rt.saturating_mul(32));
            unsafe {
                (*r).scan_exit_stamp = stamp;
                (*r).scan_exit_passed = u64::from(rt > before_push);
            }
            let d_stamp = stamp.saturating_sub(start_stamp);
            crate::bump!(h, scan.node_stamp_advance_ns, d_stamp);
            // Seed 003: when the call consumed runtime, node_stamp must move on by at least
            // 32x that runtime, so the task runs 32x longer before it scans again (within the
            // tick granularity of our reads, see CAP_TOLERANCE_NS).
            if d_rt > 0 {
                crate::bump!(h, scan.cap_calls, 1);
                let measured = d_rt.saturating_sub(numatrace_common::CAP_TOLERANCE_NS);
                if d_stamp < measured.saturating_mul(32) {
                    crate::bump!(h, scan.cap_violations, 1);
                }
            }
        }
    }
    note_runtime_as(t, runtime);
    touch_noting(t);
}

#[fentry(function = "task_numa_work")]
pub fn fentry_task_numa_work(_ctx: FEntryContext) -> u32 {
    on_task_numa_work_enter(false);
    0
}

#[fexit(function = "task_numa_work")]
pub fn fexit_task_numa_work(_ctx: FExitContext) -> u32 {
    on_task_numa_work_exit();
    0
}

#[kprobe]
pub fn kprobe_task_numa_work(_ctx: ProbeContext) -> u32 {
    on_task_numa_work_enter(true);
    0
}

#[kretprobe]
pub fn kretprobe_task_numa_work(_ctx: RetProbeContext) -> u32 {
    on_task_numa_work_exit();
    0
}

// ---- change_prot_numa ----------------------------------------------------------------------

/// Adds one change_prot_numa call to its VMA's entry. `TYPED`: `vma` is fexit's BTF-typed
/// argument (plain loads), not a kretprobe's number.
#[inline(always)]
fn vma_add<const TYPED: bool>(pid: u32, tgid: u32, vma: *const u8, updated: u64) {
    // Its bounds are read only where a record or the per-VMA counts need them.
    if !(reads(READ_VMAS) || emit(EMIT_VMA_SCAN)) {
        return;
    }
    let (Some(start), Some(end)) = (
        field_of::<TYPED, u64>(vma, crate::global!(PAGE_OFFSETS, vm_start)),
        field_of::<TYPED, u64>(vma, crate::global!(PAGE_OFFSETS, vm_end)),
    ) else {
        return;
    };
    if emit(EMIT_VMA_SCAN) {
        // When each VMA was scanned: seed 002's time from renewed access to the first scan.
        send(VmaScanEvent {
            hdr: header(EventKind::VmaScan as u32, pid, tgid),
            vm_start: start,
            vm_end: end,
            pte_updates: updated,
        });
    }
    if !reads(READ_VMAS) {
        return;
    }
    let key = VmaKey {
        tgid,
        _pad: 0,
        vm_start: start,
    };
    if let Some(v) = VMA_STATS.get_ptr_mut(&key) {
        unsafe {
            add(&raw mut (*v).pte_updates, updated);
            add(&raw mut (*v).calls, 1);
        }
        return;
    }
    let v = VmaStats {
        vm_end: end,
        pte_updates: updated,
        calls: 1,
    };
    if VMA_STATS.insert(&key, &v, 0).is_err() {
        count(Counter::VmaMapFull);
    }
}

#[inline(always)]
fn on_change_prot_numa_ret<const TYPED: bool>(h: &Hit, vma: u64, updated: u64) {
    if !h.me {
        vma_add::<TYPED>(h.pid, h.tgid, vma as *const u8, updated);
    }
    crate::bump!(h, scan.pte_updates, updated);
    crate::bump!(h, scan.prot_numa_calls, 1);
}

#[fexit(function = "change_prot_numa")]
pub fn fexit_change_prot_numa(ctx: FExitContext) -> u32 {
    // (vma, addr, end) -> unsigned long: the return value follows the three arguments.
    if let Some(h) = followed_current() {
        on_change_prot_numa_ret::<true>(
            &h,
            tracing_arg::<0>(ctx.as_ptr()),
            tracing_arg::<3>(ctx.as_ptr()),
        );
    }
    0
}

/// A kretprobe no longer sees the arguments: the kprobe keeps the vma for it.
#[kprobe]
pub fn kprobe_change_prot_numa(ctx: ProbeContext) -> u32 {
    if let Some(h) = followed_current() {
        let t = h.t;
        let r = inflight_of(t);
        let args = kprobe_args(&ctx);
        unsafe {
            if (*r).prot_vma != 0 {
                count(Counter::InflightLost);
            }
            (*r).prot_vma = pick(&args, crate::global!(FUNC_CONFIG, prot_vma_arg));
        }
    }
    0
}

#[kretprobe]
pub fn kretprobe_change_prot_numa(ctx: RetProbeContext) -> u32 {
    let Some(h) = followed_current() else {
        return 0;
    };
    let t = h.t;
    let vma = slot_take(unsafe { &raw mut (*inflight_of(t)).prot_vma });
    on_change_prot_numa_ret::<false>(&h, vma, ctx.ret::<u64>());
    0
}

// ---- task_numa_fault -----------------------------------------------------------------------

#[inline(always)]
fn on_task_numa_fault(last_cpupid: i32, mem_node: i32, pages: i32, flags: i32) {
    let Some(h) = followed_current().and_then(Hit::counting) else {
        return;
    };
    let t = h.t;
    // The fault is over: forget whether it was on a COW-shared page, and take where its
    // migrated page came from.
    let r = inflight_of(t);
    let fault_src = slot_take(unsafe { &raw mut (*r).fault_src });
    let src = match fault_src {
        0 => u64::from(MAX_NODES),
        n => n - 1,
    };
    // The migration's record is there but its page's node could not be told (not a record
    // that was missed: that is counted where it is lost).
    let src_unresolved = fault_src == u64::from(MAX_NODES) + 1;
    unsafe { (*r).cow_shared = 0 };
    let pages = pages.max(0) as u64;
    let flags = flags as u32;
    let local = flags & TNF_FAULT_LOCAL != 0;
    let migrated = flags & TNF_MIGRATED != 0;
    // Where the page was when the fault was taken: a migrated one came from `src`.
    let tier = tiers();
    let from = if migrated {
        src
    } else {
        mem_node.max(0) as u64
    };
    take_decision(&h, pages, last_cpupid as u32, from);
    if tier.slow(from) {
        crate::bump!(h, tiering.slow_tier_faults, 1);
        // A slow-tier page the fault meant to move to the faulting CPU's (top-tier) node and
        // could not: refused before the migration (6.12+ migrate_misplaced_folio_prepare: the
        // top node short of free pages wakes kswapd to demote) or failed in it.
        if flags & TNF_MIGRATE_FAIL != 0 {
            crate::bump!(h, tiering.promote_failed, 1);
        }
        if tier.reads_threshold() {
            // The node the kernel judged the fault by: the faulting CPU's when it decided
            // (mpol_misplaced's thisnid), which a migrated page went to; otherwise the CPU's
            // now (the task may have moved since, rarely).
            let nid = if migrated {
                i64::from(mem_node)
            } else {
                unsafe { aya_ebpf::helpers::bpf_get_numa_node_id() }
            };
            // (Where the decision hook is attached, it records the exact node too.)
            note_node_threshold(&tier, nid);
        }
    }
    // As the kernel counts pgpromote_success: the pages of a successful migration from a
    // node outside the top tier into it.
    if migrated && tier.promotes(src, mem_node.max(0) as u64) {
        crate::bump!(h, tiering.promoted_pages, pages);
    } else if migrated && src_unresolved && tier.may_promote_into(mem_node.max(0) as u64) {
        // Nothing lost silently: a possible promotion whose source could not be told.
        h.count_n(Counter::PromoteSourceUnknown, pages);
    }
    crate::bump!(h, hint_faults.faults, 1);
    crate::bump!(h, hint_faults.pages, pages);
    if local {
        crate::bump!(h, hint_faults.local, 1);
    }
    match pages {
        1 => crate::bump!(h, hint_faults.faults_4k, 1),
        512 => crate::bump!(h, hint_faults.faults_thp, 1),
        _ => crate::bump!(h, hint_faults.faults_large, 1),
    }
    if flags & TNF_MIGRATED != 0 {
        crate::bump!(h, hint_faults.migrated_pages, pages);
    }
    if flags & TNF_MIGRATE_FAIL != 0 {
        crate::bump!(h, hint_faults.migrate_failed, 1);
    }
    touch_noting(t);
    if h.me {
        return;
    }
    hist_add(&FAULT_PAGES, log2_bucket(pages));
    node_fault_add(local, pages);
    if flags & TNF_MIGRATED != 0 {
        migrated_pages_add(src, mem_node, pages);
    }
}

/// Counts a hint fault under the NUMA node of the CPU that takes it.
#[inline(always)]
fn node_fault_add(local: bool, pages: u64) {
    let node = unsafe { aya_ebpf::helpers::bpf_get_numa_node_id() };
    if node < 0 || node as u32 >= MAX_NODES {
        count(Counter::NodeOutOfRange);
        return;
    }
    let Some(counters) = crate::tasks::slots_of(&NODE_FAULTS) else {
        return;
    };
    let base = node as u32 * NODE_FAULT_FIELDS;
    for (i, n) in [(0, 1), (1, u64::from(local)), (2, pages)] {
        if n > 0
            && let Some(p) =
                crate::tasks::slot_at::<{ NODE_FAULT_SLOTS as usize }>(counters, base + i)
        {
            add(p, n);
        }
    }
}

/// Adds a hint fault's migrated pages to the `[src][dst]` pages matrix.
#[inline(always)]
fn migrated_pages_add(src: u64, dst: i32, pages: u64) {
    let nodes = u64::from(MAX_NODES);
    if dst < 0 || dst as u64 >= nodes || src > nodes {
        count(Counter::NodeOutOfRange);
        return;
    }
    let idx = src * nodes + dst as u64;
    if idx < u64::from(MIGRATED_PAGES_SLOTS)
        && let Some(p) = slot(&MIGRATED_PAGES, idx as u32)
    {
        add(p, pages);
    }
}

#[fentry(function = "task_numa_fault")]
pub fn fentry_task_numa_fault(ctx: FEntryContext) -> u32 {
    // (int last_cpupid, int mem_node, int pages, int flags)
    on_task_numa_fault(
        ctx.arg::<i32>(0),
        ctx.arg::<i32>(1),
        ctx.arg::<i32>(2),
        ctx.arg::<i32>(3),
    );
    0
}

#[kprobe]
pub fn kprobe_task_numa_fault(ctx: ProbeContext) -> u32 {
    let args = kprobe_args(&ctx);
    on_task_numa_fault(
        // last_cpupid comes first in every version.
        args[0] as i32,
        pick(&args, crate::global!(FUNC_CONFIG, fault_node_arg)) as i32,
        pick(&args, crate::global!(FUNC_CONFIG, fault_pages_arg)) as i32,
        pick(&args, crate::global!(FUNC_CONFIG, fault_flags_arg)) as i32,
    );
    0
}

// ---- do_numa_page / do_huge_pmd_numa_page --------------------------------------------------

#[inline(always)]
fn on_numa_page(huge: bool) {
    let Some(h) = followed_current() else {
        return;
    };
    if huge {
        crate::bump!(h, hint_faults.huge_pmd_numa_entries, 1);
    } else {
        crate::bump!(h, hint_faults.numa_page_entries, 1);
    }
}

#[fentry(function = "do_numa_page")]
pub fn fentry_do_numa_page(_ctx: FEntryContext) -> u32 {
    on_numa_page(false);
    0
}

#[kprobe]
pub fn kprobe_do_numa_page(_ctx: ProbeContext) -> u32 {
    on_numa_page(false);
    0
}

#[fentry(function = "do_huge_pmd_numa_page")]
pub fn fentry_do_huge_pmd_numa_page(_ctx: FEntryContext) -> u32 {
    on_numa_page(true);
    0
}

#[kprobe]
pub fn kprobe_do_huge_pmd_numa_page(_ctx: ProbeContext) -> u32 {
    on_numa_page(true);
    0
}

// ---- migrate_misplaced_folio / migrate_misplaced_page --------------------------------------

/// NUMA node of a `struct page` / folio, or `MAX_NODES` when it cannot be told.
#[inline(always)]
fn page_node(page: u64) -> u64 {
    let m = &raw const NODE_MAP;
    let rd = |p: *const u64| unsafe { core::ptr::read_volatile(p) };
    let size = rd(unsafe { &raw const (*m).page_size });
    let sym = rd(unsafe { &raw const (*m).vmemmap_base_sym });
    let vmemmap = if sym != 0 {
        read_field::<u64>(sym as *const u8, 0).unwrap_or(0)
    } else {
        rd(unsafe { &raw const (*m).vmemmap_const })
    };
    if size == 0 || vmemmap == 0 || page < vmemmap {
        return u64::from(MAX_NODES);
    }
    let pfn = (page - vmemmap) / size;
    let n = rd(unsafe { &raw const (*m).nranges });
    for i in 0..NODE_RANGES {
        if i as u64 >= n {
            break;
        }
        let r = unsafe { &raw const (*m).ranges[i] };
        let (start, end) = (
            rd(unsafe { &raw const (*r)[0] }),
            rd(unsafe { &raw const (*r)[1] }),
        );
        if pfn >= start && pfn < end {
            return rd(unsafe { &raw const (*r)[2] });
        }
    }
    u64::from(MAX_NODES)
}

/// The node argument is an `int` in a 64-bit slot whose upper half the ABI leaves undefined:
/// only the low half is the node (a negative one becomes `MAX_NODES`, out of range).
#[inline(always)]
fn node_arg(raw: u64) -> u64 {
    let n = raw as u32 as i32;
    if n < 0 {
        u64::from(MAX_NODES)
    } else {
        n as u64
    }
}

#[inline(always)]
fn on_migrate_enter(page: u64, node: u64, kretprobe: bool) {
    let node = node_arg(node);
    let Some(h) = followed_current() else {
        return;
    };
    let t = h.t;
    let r = inflight_of(t);
    unsafe {
        (*r).migrate_node = node;
        (*r).migrate_src = page_node(page);
        slot_start(&raw mut (*r).migrate_ts_ns, kretprobe);
    }
}

/// Counts one migration call in the `[ok][src][dst]` matrix; one it cannot place is counted
/// as out of range (shown as dropped), never left out silently. An unknown source is row
/// `MAX_NODES`.
#[inline(always)]
fn matrix_add(ok: bool, src: u64, dst: u64) {
    let nodes = u64::from(MAX_NODES);
    if dst >= nodes || src > nodes {
        count(Counter::NodeOutOfRange);
        return;
    }
    let idx = (if ok { 0 } else { nodes + 1 } + src) * nodes + dst;
    if idx < u64::from(MATRIX_SLOTS)
        && let Some(p) = slot(&MIGRATE_MATRIX, idx as u32)
    {
        add(p, 1);
    }
}

#[inline(always)]
fn on_migrate_exit(ret: i64) {
    let Some(h) = followed_current() else {
        return;
    };
    let t = h.t;
    let r = inflight_of(t);
    let start_ts = slot_take(unsafe { &raw mut (*r).migrate_ts_ns });
    if start_ts == 0 {
        return;
    }
    let (dst, src_node) = unsafe { ((*r).migrate_node, (*r).migrate_src) };
    let ns = unsafe { bpf_ktime_get_ns() }.saturating_sub(start_ts);
    // The return convention changed: 1 = migrated up to 6.9, 0 = migrated from 6.10.
    let ok = if crate::global!(FUNC_CONFIG, migrate_ok_is_zero) != 0 {
        ret == 0
    } else {
        ret == 1
    };
    let me = h.me;
    let src = if src_node < u64::from(MAX_NODES) {
        src_node
    } else {
        NODE_UNKNOWN
    };
    send_span(
        EventKind::Migration,
        start_ts,
        ns,
        src,
        dst.min(u64::from(MAX_NODES)) | if ok { MIGRATED_BIT } else { 0 },
    );
    if !me {
        hist_add(&MIGRATE_LATENCY, log2_bucket(ns));
        matrix_add(ok, src_node, dst);
    }
    let cow_shared = unsafe {
        if ok {
            // The hint fault that follows (task_numa_fault) adds its pages under this source.
            (*r).fault_src = src_node + 1;
        }
        core::mem::replace(&mut (*r).cow_shared, 0) != 0
    };
    if ok && cow_shared {
        crate::bump!(h, hint_faults.cow_shared_migrated, 1);
    }
    crate::bump!(h, migrations.attempts, 1);
    crate::bump!(h, migrations.latency_ns_total, ns);
    if ok {
        crate::bump!(h, migrations.succeeded, 1);
    } else {
        crate::bump!(h, migrations.not_migrated, 1);
    }
}

// One fentry/fexit pair per signature (the verifier refuses a read past the last argument,
// even on a path never taken); the loader picks the pair whose parameter names match the
// running kernel's BTF. kprobes read any position.

/// `(page|folio, vma, node)`: up to 6.13.
#[fentry(function = "migrate_misplaced_folio")]
pub fn fentry_migrate_misplaced(ctx: FEntryContext) -> u32 {
    on_migrate_enter(
        tracing_arg_scalar::<0>(ctx.as_ptr()),
        tracing_arg::<2>(ctx.as_ptr()),
        false,
    );
    0
}

#[fexit(function = "migrate_misplaced_folio")]
pub fn fexit_migrate_misplaced(ctx: FExitContext) -> u32 {
    // The return value follows the three arguments; it is an int: its low 32 bits.
    on_migrate_exit(i64::from(tracing_arg::<3>(ctx.as_ptr()) as i32));
    0
}

/// `(folio, node)`: from 6.14.
#[fentry(function = "migrate_misplaced_folio")]
pub fn fentry_migrate_misplaced_no_vma(ctx: FEntryContext) -> u32 {
    on_migrate_enter(
        tracing_arg_scalar::<0>(ctx.as_ptr()),
        tracing_arg::<1>(ctx.as_ptr()),
        false,
    );
    0
}

#[fexit(function = "migrate_misplaced_folio")]
pub fn fexit_migrate_misplaced_no_vma(ctx: FExitContext) -> u32 {
    on_migrate_exit(i64::from(tracing_arg::<2>(ctx.as_ptr()) as i32));
    0
}

#[kprobe]
pub fn kprobe_migrate_misplaced(ctx: ProbeContext) -> u32 {
    let args = kprobe_args(&ctx);
    on_migrate_enter(
        pick(&args, crate::global!(FUNC_CONFIG, migrate_page_arg)),
        pick(&args, crate::global!(FUNC_CONFIG, migrate_node_arg)),
        true,
    );
    0
}

#[kretprobe]
pub fn kretprobe_migrate_misplaced(ctx: RetProbeContext) -> u32 {
    on_migrate_exit(i64::from(ctx.ret::<i64>() as i32));
    0
}

// ---- migrate_misplaced_folio_prepare (6.11+) --------------------------------------------------

/// A hint-fault migration refused before it started (a non-zero return).
#[inline(always)]
fn on_migrate_prepare_exit(ret: i32) {
    if ret == 0 {
        return;
    }
    if let Some(h) = followed_current() {
        crate::bump!(h, migrations.refused, 1);
    }
}

/// `(folio, vma, node)`: the int result follows the three arguments.
#[fexit(function = "migrate_misplaced_folio_prepare")]
pub fn fexit_migrate_prepare(ctx: FExitContext) -> u32 {
    on_migrate_prepare_exit(tracing_arg::<3>(ctx.as_ptr()) as i32);
    0
}

#[kretprobe]
pub fn kretprobe_migrate_prepare(ctx: RetProbeContext) -> u32 {
    on_migrate_prepare_exit(ctx.ret::<i64>() as i32);
    0
}

// ---- migration_entry_wait ------------------------------------------------------------------

#[inline(always)]
fn on_migration_wait_enter(kretprobe: bool) {
    if let Some(h) = followed_current() {
        let t = h.t;
        slot_start(unsafe { &raw mut (*inflight_of(t)).wait_ts_ns }, kretprobe);
    }
}

#[inline(always)]
fn on_migration_wait_exit() {
    let Some(h) = followed_current() else {
        return;
    };
    let t = h.t;
    let start_ts = slot_take(unsafe { &raw mut (*inflight_of(t)).wait_ts_ns });
    if start_ts == 0 {
        return;
    }
    let ns = unsafe { bpf_ktime_get_ns() }.saturating_sub(start_ts);
    send_span(EventKind::Stall, start_ts, ns, 0, 0);
    crate::bump!(h, migrations.stalls, 1);
    crate::bump!(h, migrations.stall_ns, ns);
}

#[fentry(function = "migration_entry_wait")]
pub fn fentry_migration_entry_wait(_ctx: FEntryContext) -> u32 {
    on_migration_wait_enter(false);
    0
}

#[fexit(function = "migration_entry_wait")]
pub fn fexit_migration_entry_wait(_ctx: FExitContext) -> u32 {
    on_migration_wait_exit();
    0
}

#[kprobe]
pub fn kprobe_migration_entry_wait(_ctx: ProbeContext) -> u32 {
    on_migration_wait_enter(true);
    0
}

#[kretprobe]
pub fn kretprobe_migration_entry_wait(_ctx: RetProbeContext) -> u32 {
    on_migration_wait_exit();
    0
}

// ---- mpol_misplaced: COW-shared pages (seed 000) -------------------------------------------

/// Whether the page being hint-faulted is COW-shared — in a copy-on-write mapping
/// (`is_cow_mapping`) and mapped by more than one process — and whether it is a large folio.
/// `TYPED`: the pointers are fentry's BTF-typed arguments (plain loads), not a kprobe's numbers.
#[inline(always)]
fn cow_shared<const TYPED: bool>(page: *const u8, vma_or_vmf: *const u8) -> Option<(bool, bool)> {
    let vma = if crate::global!(PAGE_OFFSETS, vmf_vma) == FIELD_ABSENT {
        vma_or_vmf
    } else {
        field_of::<TYPED, u64>(vma_or_vmf, crate::global!(PAGE_OFFSETS, vmf_vma))? as *const u8
    };
    let vm_flags = field_of::<TYPED, u64>(vma, crate::global!(PAGE_OFFSETS, vm_flags))?;
    let page_flags = field_of::<TYPED, u64>(page, crate::global!(PAGE_OFFSETS, flags)).unwrap_or(0);
    let large = crate::global!(PAGE_OFFSETS, head_bit) < 64
        && page_flags & (1u64 << crate::global!(PAGE_OFFSETS, head_bit)) != 0;
    if vm_flags & (VM_SHARED | VM_MAYWRITE) != VM_MAYWRITE {
        return Some((false, large));
    }
    let mapcount_minus_one =
        if large && crate::global!(PAGE_OFFSETS, large_mapcount) != FIELD_ABSENT {
            // Through the helper always: before 6.7 the argument is a `struct page` and this field
            // lies in the next page of the folio, past the type a plain load may read.
            read_field::<i32>(page, crate::global!(PAGE_OFFSETS, large_mapcount))?
        } else {
            field_of::<TYPED, i32>(page, crate::global!(PAGE_OFFSETS, mapcount))?
        };
    Some((mapcount_minus_one >= 1, large))
}

#[inline(always)]
fn on_mpol_misplaced<const TYPED: bool>(page: u64, vma_or_vmf: u64, addr: u64) {
    let cur = current();
    if !wanted(cur.tgid) {
        return;
    }
    if !is_self(cur.tgid) && reads(READ_REGIONS) {
        region_fault(cur.tgid, addr);
    }
    // The task's entry only for a COW-shared page, which few hint faults are: the test reads
    // a few fields of the page and VMA, the lookup hashes (the fault's task_numa_fault makes
    // the entry of a task seen first here).
    if let Some((true, large)) = cow_shared::<TYPED>(page as *const u8, vma_or_vmf as *const u8) {
        let Some(t) = task_entry(cur.pid, cur.tgid, true) else {
            return;
        };
        let h = Hit::new(t, cur.pid, cur.tgid, cur.tgid);
        crate::bump!(h, hint_faults.cow_shared, 1);
        if large {
            crate::bump!(h, hint_faults.cow_shared_large, 1);
        }
        unsafe { (*inflight_of(t)).cow_shared = 1 };
    }
}

/// Counts the hint fault in its 2 MiB region for the mm's current scan pass (seed 001: without
/// fault batching each 4K fault restores one PTE, so a region takes many faults per pass).
#[inline(always)]
fn region_fault(tgid: u32, addr: u64) {
    let Some(mm) = current_field::<u64>(crate::global!(TASK_OFFSETS, mm)) else {
        return;
    };
    let Some(seq) = via_current::<i32>(
        mm as *const u8,
        crate::global!(TASK_OFFSETS, mm_numa_scan_seq),
    ) else {
        return;
    };
    let key = RegionKey {
        tgid,
        scan_seq: seq as u32,
        region: addr >> 21,
    };
    match REGION_FAULTS.get_ptr_mut(&key) {
        Some(p) => add(p, 1),
        None => {
            let _ = REGION_FAULTS.insert(&key, &1, 0);
        }
    }
}

#[fentry(function = "mpol_misplaced")]
pub fn fentry_mpol_misplaced(ctx: FEntryContext) -> u32 {
    on_mpol_misplaced::<true>(
        tracing_arg::<0>(ctx.as_ptr()),
        tracing_arg::<1>(ctx.as_ptr()),
        tracing_arg::<2>(ctx.as_ptr()),
    );
    0
}

#[kprobe]
pub fn kprobe_mpol_misplaced(ctx: ProbeContext) -> u32 {
    let args = kprobe_args(&ctx);
    on_mpol_misplaced::<false>(
        pick(&args, crate::global!(FUNC_CONFIG, mpol_page_arg)),
        pick(&args, crate::global!(FUNC_CONFIG, mpol_vma_arg)),
        pick(&args, crate::global!(FUNC_CONFIG, mpol_addr_arg)),
    );
    0
}
