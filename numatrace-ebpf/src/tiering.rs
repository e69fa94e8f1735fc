//! Memory tiering: the tiers as userspace wrote them, each node's hot threshold, and the
//! kernel's promotion decision on a slow-tier hint fault (should_numa_migrate_memory in
//! tiering mode): its hint-fault latency, taken from the access-time exchange inside it
//! (folio_xchg_last_cpupid), and its outcome — hot and let through, hot and held back by the
//! rate limit, not hot, or let through past both because the node had free room (a decision
//! to promote, which the migration can still refuse or fail).
//!
//! should_numa_migrate_memory runs under the page-table lock (mpol_misplaced, called from
//! the fault with the PTE or PMD lock held): nothing sleeps or is preempted between its
//! entry, the exchange and its return, so one per-CPU slot carries the decision between the
//! three programs. The outcome is handed to task_numa_fault through the task's in-flight
//! record: only it knows the fault's pages (the kernel counts candidates in pages). Not so on
//! PREEMPT_RT, where the page-table lock sleeps: another task's decision on the same CPU can
//! then reset the slot (counted nowhere: such kernels are not supported for this view). The
//! threshold is read just after the decision: another CPU deciding for the same node in
//! between (it adjusts the threshold once per scan period, or resets it for free room) can
//! move a page between rate-limited and not hot.

use aya_ebpf::{
    EbpfContext,
    macros::{fentry, fexit, kprobe, kretprobe, map},
    maps::{Array, PerCpuArray},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use numatrace_common::{
    Counter, HOT_THRESHOLD_SEEN, MAX_NODES, PROMOTE_DECIDED, PROMOTE_EXCHANGED, PROMOTE_NODE_MASK,
    PROMOTE_NODE_SHIFT, PROMOTE_THRESHOLD_KNOWN, PROMOTE_YES, TierConfig, access_latency_ms,
};

use crate::{
    args::{kprobe_args, tracing_arg},
    tasks::{Hit, count_n, followed_current, inflight_of, read_field},
};

/// Written by userspace whenever the tiering mode or the memory tiers change.
#[map]
static TIERING: Array<TierConfig> = Array::with_max_entries(1, 0);

/// Per node, its promotion hot threshold as the latest decision (or slow-tier hint fault)
/// found it: [`HOT_THRESHOLD_SEEN`] | ms.
#[map]
static HOT_THRESHOLD: Array<u64> = Array::with_max_entries(MAX_NODES, 0);

/// The tiers as userspace last wrote them (all unknown until it has).
#[inline(always)]
pub(crate) fn tiers() -> TierConfig {
    TIERING.get(0).copied().unwrap_or_default()
}

/// Slot 0: [`PROMOTE_DECIDED`] (a decision of a followed task judged by access time is in
/// progress on this CPU) | [`PROMOTE_EXCHANGED`] | the page's node + 1 at
/// [`PROMOTE_NODE_SHIFT`]; slot 1: the exchange's new | old << 32; slot 2: the exchange's new
/// value between its kprobe and kretprobe, | [`PENDING`].
#[map]
static PROMOTE_DECISION: PerCpuArray<u64> = PerCpuArray::with_max_entries(3, 0);

const PENDING: u64 = 1 << 32;

#[inline(always)]
fn cell(i: u32) -> Option<*mut u64> {
    PROMOTE_DECISION.get_ptr_mut(i)
}

/// `NODE_DATA(nid)->nbp_threshold` (ms; 0: not adjusted, the reference applies), where its
/// address and offset are known. The kernel exports it nowhere else.
#[inline(always)]
fn node_threshold(tier: &TierConfig, nid: i64) -> Option<u32> {
    if tier.node_data == 0 || tier.threshold_off == 0 || nid < 0 || nid as u32 >= MAX_NODES {
        return None;
    }
    let pgdat = read_field::<u64>(tier.node_data as *const u8, nid as u32 * 8)?;
    read_field::<u32>(pgdat as *const u8, tier.threshold_off)
}

/// Keeps node `nid`'s threshold for userspace (`Tiering::node_hot_threshold_ms`).
#[inline(always)]
pub fn note_node_threshold(tier: &TierConfig, nid: i64) -> Option<u32> {
    let th = node_threshold(tier, nid)?;
    if let Some(v) = HOT_THRESHOLD.get_ptr_mut(nid as u32) {
        unsafe { *v = HOT_THRESHOLD_SEEN | u64::from(th) };
    }
    Some(th)
}

/// Entry: a decision judged by access time (tiering mode, a page outside the top tier) of a
/// followed task opens the slot.
#[inline(always)]
fn on_should_migrate_enter(src_nid: i64) {
    let Some(p) = cell(0) else {
        return;
    };
    // Whatever a previous decision left (its return not seen) is dropped here.
    unsafe { *p = 0 };
    let tier = tiers();
    // The mode as the kernel has it now: userspace's copy lags a switch by up to a snapshot,
    // and outside tiering mode the same exchange stores a cpupid, not a time.
    let mode = match tier.mode_sym {
        0 => Some(tier.mode),
        sym => read_field::<u32>(sym as *const u8, 0),
    };
    let Some(mode) = mode else {
        return;
    };
    if src_nid < 0 || !tier.judges_by_access_time(mode, src_nid as u64) {
        return;
    }
    if followed_current().is_some() {
        let node = ((src_nid as u64 + 1) & PROMOTE_NODE_MASK) << PROMOTE_NODE_SHIFT;
        unsafe { *p = PROMOTE_DECIDED | node };
    }
}

/// The access-time exchange: `new` is the time written, `old` the time the page held.
#[inline(always)]
fn on_exchanged(new: u64, old: u64) {
    let (Some(p), Some(times)) = (cell(0), cell(1)) else {
        return;
    };
    // Only the exchange inside a decision (the scanner stamps slow-tier pages through the
    // same function), and only its first.
    if unsafe { *p } & (PROMOTE_DECIDED | PROMOTE_EXCHANGED) != PROMOTE_DECIDED {
        return;
    }
    unsafe {
        *times = (new & 0xffff_ffff) | (old << 32);
        *p |= PROMOTE_EXCHANGED;
    }
}

/// The hot threshold the decision was judged by (read just after it, on the deciding CPU,
/// whose node is the kernel's dst_nid): the node's `nbp_threshold`, or the reference
/// `sysctl_numa_balancing_hot_threshold` while that is 0 or where the kernel keeps no
/// per-node threshold. `None` where neither can be read.
#[inline(always)]
fn threshold_now(tier: &TierConfig) -> Option<u32> {
    let nid = unsafe { aya_ebpf::helpers::bpf_get_numa_node_id() };
    let node = note_node_threshold(tier, nid);
    if let Some(th) = node.filter(|th| *th != 0) {
        return Some(th);
    }
    if (node.is_none() && tier.threshold_is_sysctl == 0) || tier.hot_threshold_sym == 0 {
        return None;
    }
    read_field::<u32>(tier.hot_threshold_sym as *const u8, 0)
}

/// Return: hands the decision to the fault's task_numa_fault, with the threshold a refusal
/// was judged by (the latency needs the mask task_numa_fault is given).
#[inline(always)]
fn on_should_migrate_exit(promote: bool) {
    let (Some(p), Some(times)) = (cell(0), cell(1)) else {
        return;
    };
    let s = unsafe { core::mem::replace(&mut *p, 0) };
    if s & PROMOTE_DECIDED == 0 {
        return;
    }
    let mut d = s;
    if promote {
        d |= PROMOTE_YES;
    } else if s & PROMOTE_EXCHANGED != 0
        && let Some(th) = threshold_now(&tiers())
    {
        d |= PROMOTE_THRESHOLD_KNOWN | (u64::from(th) << 32);
    }
    let Some(h) = followed_current() else {
        return;
    };
    let t = h.t;
    let r = inflight_of(t);
    unsafe {
        // A decision no task_numa_fault took (the fault returned without counting itself).
        if (*r).promote_decision != 0 {
            count_n(Counter::PromoteUnjudged, 1);
        }
        (*r).promote_decision = d;
        (*r).promote_times = *times;
    }
}

/// task_numa_fault: counts the fault's decision, now that its pages are known; `mask`: its
/// `last_cpupid`, which on a slow-tier fault in tiering mode is LAST_CPUPID_MASK; `from`: the
/// node the faulting page was on (`MAX_NODES`: unknown).
#[inline(always)]
pub fn take_decision(h: &Hit, pages: u64, mask: u32, from: u64) {
    let r = inflight_of(h.t);
    let d = unsafe { core::mem::replace(&mut (*r).promote_decision, 0) };
    if d & PROMOTE_DECIDED == 0 {
        return;
    }
    // A decision left over from a fault that did not count itself is not this fault's.
    let node = ((d >> PROMOTE_NODE_SHIFT) & PROMOTE_NODE_MASK).wrapping_sub(1);
    if from < u64::from(MAX_NODES) && node != from {
        h.count(Counter::PromoteUnjudged);
        return;
    }
    let times = unsafe { (*r).promote_times };
    let exchanged = d & PROMOTE_EXCHANGED != 0;
    let latency = if exchanged {
        access_latency_ms(times as u32, (times >> 32) as u32, mask)
    } else {
        None
    };
    if d & PROMOTE_YES != 0 {
        if exchanged {
            crate::bump!(h, tiering.promote_hot, pages);
        } else {
            // pgdat_free_space_enough let it through without its latency being taken.
            crate::bump!(h, tiering.promote_free_room, pages);
        }
    } else if !exchanged {
        // Refused before anything was judged (a node without memory).
        return;
    } else if let (Some(ms), true) = (latency, d & PROMOTE_THRESHOLD_KNOWN != 0) {
        if u64::from(ms) < d >> 32 {
            // Under the threshold: a candidate the rate limit refused.
            crate::bump!(h, tiering.promote_rate_limited, pages);
        } else {
            crate::bump!(h, tiering.promote_not_hot, pages);
        }
    } else {
        h.count(Counter::PromoteUnjudged);
        return;
    }
    if let Some(ms) = latency {
        crate::bump!(h, tiering.hint_latency_faults, 1);
        crate::bump!(h, tiering.hint_latency_ms_total, u64::from(ms));
    }
}

// should_numa_migrate_memory(struct task_struct *p, struct folio *folio (struct page * before
// 6.7), int src_nid, int dst_cpu) -> bool: the same positions on every kernel since 3.x.

#[fentry(function = "should_numa_migrate_memory")]
pub fn fentry_should_numa_migrate(ctx: FEntryContext) -> u32 {
    on_should_migrate_enter(i64::from(tracing_arg::<2>(ctx.as_ptr()) as i32));
    0
}

#[fexit(function = "should_numa_migrate_memory")]
pub fn fexit_should_numa_migrate(ctx: FExitContext) -> u32 {
    // A bool after the four arguments: its low byte.
    on_should_migrate_exit(tracing_arg::<4>(ctx.as_ptr()) & 0xff != 0);
    0
}

#[kprobe]
pub fn kprobe_should_numa_migrate(ctx: ProbeContext) -> u32 {
    on_should_migrate_enter(i64::from(kprobe_args(&ctx)[2] as i32));
    0
}

#[kretprobe]
pub fn kretprobe_should_numa_migrate(ctx: RetProbeContext) -> u32 {
    on_should_migrate_exit(ctx.ret::<u64>() & 0xff != 0);
    0
}

// folio_xchg_last_cpupid(struct folio *folio, int cpupid) -> int (page_cpupid_xchg_last(struct
// page *, int) before 6.7): out of line where the field is in page flags.

#[fexit(function = "folio_xchg_last_cpupid")]
pub fn fexit_xchg_last_cpupid(ctx: FExitContext) -> u32 {
    on_exchanged(
        tracing_arg::<1>(ctx.as_ptr()),
        tracing_arg::<2>(ctx.as_ptr()),
    );
    0
}

/// The kprobe keeps the new value for the kretprobe, only inside a decision.
#[kprobe]
pub fn kprobe_xchg_last_cpupid(ctx: ProbeContext) -> u32 {
    let (Some(p), Some(pending)) = (cell(0), cell(2)) else {
        return 0;
    };
    if unsafe { *p } & (PROMOTE_DECIDED | PROMOTE_EXCHANGED) == PROMOTE_DECIDED {
        unsafe { *pending = PENDING | (kprobe_args(&ctx)[1] & 0xffff_ffff) };
    }
    0
}

#[kretprobe]
pub fn kretprobe_xchg_last_cpupid(ctx: RetProbeContext) -> u32 {
    let Some(pending) = cell(2) else {
        return 0;
    };
    let new = unsafe { core::mem::replace(&mut *pending, 0) };
    if new & PENDING != 0 {
        on_exchanged(new & 0xffff_ffff, ctx.ret::<u64>());
    }
    0
}
