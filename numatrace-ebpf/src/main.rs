//! numatrace's kernel side: decode tracepoints, filter by followed process, count per task,
//! and hand discrete events to userspace. No policy lives here.
#![no_std]
#![no_main]
// The pinned nightly builds this crate; see tasks::add.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod args;
mod floor;
mod functions;
mod gaps;
mod sampling;
mod tasks;
mod tiering;

/// aya-log debug message, emitted only when userspace asked for them (`--bpf-log`).
/// Used on cold paths only: formatting and the log ring buffer cost more than the event itself.
#[macro_export]
macro_rules! debug {
    ($ctx:expr, $($arg:tt)+) => {
        if $crate::tasks::debug_log() {
            aya_log_ebpf::debug!($ctx, $($arg)+);
        }
    };
}

mod tracepoints;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

// GPL: the tracing helpers (bpf_probe_read_kernel, ring buffer) require a GPL-compatible licence.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
