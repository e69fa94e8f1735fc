//! CPU-clock sampling: where no function hook attaches, the share of a task's samples whose
//! kernel stack passes through task_numa_work estimates its scan share ("sampled").

use aya_ebpf::{
    EbpfContext, Global,
    helpers::generated::bpf_get_stack,
    macros::{map, perf_event},
    maps::PerCpuArray,
    programs::PerfEventContext,
};
use numatrace_common::ScanRanges;

use crate::tasks::{Hit, TASK_OFFSETS, current, current_field, task_entry, touch_noting, wanted};

#[unsafe(no_mangle)]
static SCAN_RANGES: Global<ScanRanges> = Global::new(ScanRanges {
    task_numa_work: [0, 0],
    change_prot_numa: [0, 0],
});

/// Frames unwound: task_numa_work is within about eight frames of a sample taken while it scans
/// (change_pte_range … change_protection, change_prot_numa, task_numa_work, a lock's slow path
/// or a page-table helper above them), and unwinding, the program's main cost, stops at the
/// buffer's end, so a deeper walk would only cost time.
const MAX_FRAMES: usize = 12;

/// PF_KTHREAD (include/linux/sched.h, the same on every line): a kernel thread has no mm, so
/// task_numa_work never runs in one.
const PF_KTHREAD: u32 = 0x0020_0000;

/// Per-CPU stack buffer: 256 bytes would take half of the BPF stack.
#[map]
static STACK_BUF: PerCpuArray<[u64; MAX_FRAMES]> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn within(ip: u64, r: &[u64; 2]) -> bool {
    r[0] != 0 && ip >= r[0] && ip < r[1]
}

/// x86-64: the interrupted code segment's privilege level (CS & 3) is 3 in user mode.
#[cfg(bpf_target_arch = "x86_64")]
#[inline(always)]
fn in_user_mode(ctx: &PerfEventContext) -> bool {
    let d = ctx
        .as_ptr()
        .cast::<aya_ebpf::bindings::bpf_perf_event_data>();
    unsafe { (*d).regs.cs & 3 != 0 }
}

/// arm64: PSTATE's mode field (M[3:0]) is EL0t, 0, in user mode.
#[cfg(bpf_target_arch = "aarch64")]
#[inline(always)]
fn in_user_mode(ctx: &PerfEventContext) -> bool {
    let d = ctx
        .as_ptr()
        .cast::<aya_ebpf::bindings::bpf_perf_event_data>();
    unsafe { (*d).regs.pstate & 0xf == 0 }
}

#[perf_event]
pub fn perf_sample_scan(ctx: PerfEventContext) -> u32 {
    let cur = current();
    if cur.pid == 0 || !wanted(cur.tgid) {
        return 0;
    }
    let Some(t) = task_entry(cur.pid, cur.tgid, true) else {
        return 0;
    };
    let h = Hit::new(t, cur.pid, cur.tgid, cur.tgid);
    crate::bump!(h, scan.samples, 1);
    touch_noting(t);
    // A sample in user mode has no kernel stack to walk (task_numa_work runs in the kernel).
    if in_user_mode(&ctx) {
        return 0;
    }
    let flags = current_field::<u32>(crate::global!(TASK_OFFSETS, flags));
    if flags.is_some_and(|f| f & PF_KTHREAD != 0) {
        return 0;
    }
    let Some(buf) = STACK_BUF.get_ptr_mut(0) else {
        return 0;
    };
    // Kernel stack of the interrupted task (flags 0 = kernel stack).
    let n = unsafe { bpf_get_stack(ctx.as_ptr(), buf.cast(), (MAX_FRAMES * 8) as u32, 0) };
    if n <= 0 {
        return 0;
    }
    let frames = (n as usize / 8).min(MAX_FRAMES);
    let r = SCAN_RANGES.load();
    for i in 0..MAX_FRAMES {
        if i >= frames {
            break;
        }
        let ip = unsafe { (*buf)[i] };
        if within(ip, &r.task_numa_work) || within(ip, &r.change_prot_numa) {
            crate::bump!(h, scan.scan_samples, 1);
            break;
        }
    }
    0
}
