//! Reading a hooked function's arguments: from a kprobe's registers or a tracing program's
//! argument array.

use aya_ebpf::{EbpfContext, programs::ProbeContext};

/// The six argument registers of a kprobe, each read at a constant offset (a read at a
/// variable offset of the context is refused by the verifier). The layout is the target's
/// `struct pt_regs` (build.rs sets `bpf_target_arch` to the architecture numatrace is built for).
#[cfg(bpf_target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn kprobe_args(ctx: &ProbeContext) -> [u64; 6] {
    let regs = ctx.as_ptr().cast::<aya_ebpf::bindings::pt_regs>();
    let rd = |p: *const u64| unsafe { core::ptr::read_volatile(p) };
    unsafe {
        [
            rd(&raw const (*regs).rdi),
            rd(&raw const (*regs).rsi),
            rd(&raw const (*regs).rdx),
            rd(&raw const (*regs).rcx),
            rd(&raw const (*regs).r8),
            rd(&raw const (*regs).r9),
        ]
    }
}

/// arm64: `struct pt_regs` begins with `user_pt_regs`, whose `regs[0..8]` (x0–x7) carry the
/// arguments.
#[cfg(bpf_target_arch = "aarch64")]
#[inline(always)]
pub(crate) fn kprobe_args(ctx: &ProbeContext) -> [u64; 6] {
    let regs = ctx.as_ptr().cast::<aya_ebpf::bindings::user_pt_regs>();
    let rd = |p: *const u64| unsafe { core::ptr::read_volatile(p) };
    unsafe {
        [
            rd(&raw const (*regs).regs[0]),
            rd(&raw const (*regs).regs[1]),
            rd(&raw const (*regs).regs[2]),
            rd(&raw const (*regs).regs[3]),
            rd(&raw const (*regs).regs[4]),
            rd(&raw const (*regs).regs[5]),
        ]
    }
}

/// Argument `i` (a position the loader found by name in BTF) among plain numbers.
#[inline(always)]
pub(crate) fn pick(args: &[u64; 6], i: u32) -> u64 {
    let mut v = 0;
    for (k, a) in args.iter().enumerate() {
        if k as u32 == i {
            v = *a;
        }
    }
    v
}

/// Reads slot `N` of a tracing program's argument array. Volatile and at a constant offset:
/// choosing between two slots must not become one variable-offset context access, which the
/// verifier rejects.
#[inline(always)]
pub(crate) fn tracing_arg<const N: usize>(ctx: *mut core::ffi::c_void) -> u64 {
    unsafe { core::ptr::read_volatile(ctx.cast::<u64>().add(N)) }
}

/// Slot `N` as a plain number: fentry arguments are typed kernel pointers, on which the
/// verifier forbids arithmetic with unknown values (the page -> PFN computation needs it).
/// Copying through bpf_probe_read_kernel yields an untyped scalar.
#[inline(always)]
pub(crate) fn tracing_arg_scalar<const N: usize>(ctx: *mut core::ffi::c_void) -> u64 {
    unsafe { aya_ebpf::helpers::bpf_probe_read_kernel(ctx.cast::<u64>().add(N)) }.unwrap_or(0)
}
