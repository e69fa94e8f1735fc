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
mod sampling;
mod skip_vma;
mod task_iter;
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

/// Field `$f` of load-time global `$g` (`global!(CONFIG, filter_tgids)`).
#[macro_export]
macro_rules! global {
    ($g:path, $f:ident) => {{
        // SAFETY: `Global<T>` is `repr(transparent)` over an always-initialized `T`. Volatile,
        // as `Global::load` is (the loader overrides the value the compiler sees), but of this
        // one field: `load` reads every word of the struct, and each read is an instruction
        // every event pays.
        #[allow(unused_unsafe)]
        let v = unsafe { core::ptr::read_volatile(&raw const (*$crate::global_ptr(&$g)).$f) };
        v
    }};
}

/// The value inside a load-time global, for [`global!`].
#[inline(always)]
pub(crate) fn global_ptr<T>(g: &aya_ebpf::Global<T>) -> *const T {
    (g as *const aya_ebpf::Global<T>).cast()
}

/// Adds `n` to a task's counter (`bump!(h, migrations.refused, n)`, `h` a
/// [`tasks::Hit`]: the counter's one name, as numatrace-common's table declares it) and, where
/// the table keeps a system-wide twin for it, to that [`numatrace_common::Counter`] slot too:
/// one line per counted thing. (The tracepoints' `Seen*` slots count every event, entry or
/// not, and are counted apart.)
#[macro_export]
macro_rules! bump {
    ($h:expr, $group:ident . $f:ident, $n:expr) => {{
        let n: u64 = $n;
        let h: &$crate::tasks::Hit = &$h;
        // SAFETY: `h.t` points into a live task map value (the caller's lookup).
        $crate::tasks::add(unsafe { &raw mut (*h.t).$group.$f }, n);
        if let Some(c) = numatrace_common::stats::slot::$group::$f {
            h.count_n(c, n);
        }
    }};
}

mod object;
mod tracepoints;
