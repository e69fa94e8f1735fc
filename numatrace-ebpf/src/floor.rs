//! Do-nothing programs, one per program type numatrace attaches: `cargo xtask bench` attaches
//! each beside a real program on the same hook, so the kernel's run-time statistics give the
//! floor any program of that type costs there. Never attached by numatrace itself. Named with
//! the real programs' type prefixes (the loader attaches by prefix); the fentry floor is
//! `fentry_probe` (tracepoints.rs), which is equally empty.

use aya_ebpf::{
    macros::{btf_tracepoint, fexit, kprobe, kretprobe, tracepoint},
    programs::{
        BtfTracePointContext, FExitContext, ProbeContext, RetProbeContext, TracePointContext,
    },
};

#[tracepoint]
pub fn tp_floor(_ctx: TracePointContext) -> u32 {
    0
}

#[kprobe]
pub fn kprobe_floor(_ctx: ProbeContext) -> u32 {
    0
}

#[kretprobe]
pub fn kretprobe_floor(_ctx: RetProbeContext) -> u32 {
    0
}

#[fexit(function = "task_numa_fault")]
pub fn fexit_floor(_ctx: FExitContext) -> u32 {
    0
}

#[btf_tracepoint(function = "sched_skip_vma_numa")]
pub fn btf_floor(_ctx: BtfTracePointContext) -> i32 {
    0
}
