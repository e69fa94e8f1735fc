//! The task-map iterator: what `TASK_STATS` holds, each entry in full only if a program took it
//! since the reader's previous read (`touched`, see `tasks::task_entry`), else as its key. A
//! reader of 100 000 entries of which a few changed then copies a few, not 70 MiB.
//!
//! Reads only: nothing in the map changes, so an aborted read or a second reader costs a copy,
//! never a count.

use aya_ebpf::{
    bindings::seq_file,
    helpers::{generated::bpf_jiffies64, generated::bpf_seq_write},
    macros::map,
    maps::Array,
};
use numatrace_common::{
    TASK_ITER_CLOCK, TASK_ITER_KEY, TASK_ITER_VALUE, TaskEntry, TaskIterControl, TaskIterHead,
    TaskIterKey,
};

#[map]
pub static TASK_ITER: Array<TaskIterControl> = Array::with_max_entries(1, 0);

/// `struct bpf_iter_meta` (include/linux/bpf.h), the fields read.
#[repr(C)]
pub struct IterMeta {
    seq: *mut seq_file,
    session_id: u64,
    seq_num: u64,
}

/// `struct bpf_iter__bpf_map_elem`: the context, four pointers.
#[repr(C)]
pub struct MapElemCtx {
    meta: *const IterMeta,
    map: *const u8,
    key: *const u32,
    value: *const TaskEntry,
}

#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/bpf_map_elem")]
pub extern "C" fn iter_tasks(ctx: *const MapElemCtx) -> i32 {
    let Some(control) = TASK_ITER.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: the kernel's context for this attach type; `meta` is never NULL.
    let (meta, value) = unsafe { ((*ctx).meta, (*ctx).value) };
    let (seq, seq_num) = unsafe { ((*meta).seq, (*meta).seq_num) };
    if seq_num == 0 {
        // The first element's call (or the final call with no element, of an empty map's read
        // or after the first element of a one-entry map: a moment later, the same read).
        unsafe { (*control).started = bpf_jiffies64() };
    }
    if value.is_null() || unsafe { (*control).mode } == TASK_ITER_CLOCK {
        return 0;
    }
    // SAFETY: a live element's value (the map's value size, checked when the link was made).
    let (touched, pid, first_ns) = unsafe {
        let s = &raw const (*value).stats;
        ((*s).touched, (*s).pid, (*s).first_ns)
    };
    // A free slot (pid 0), or one being made an entry (no first_ns yet: its task has counted
    // nothing in it), is no task's.
    if pid == 0 || first_ns == 0 {
        return 0;
    }
    if unsafe { (*control).sends(touched) } {
        let head = TaskIterHead {
            tag: TASK_ITER_VALUE,
            _pad: 0,
        };
        // A record that does not fit is taken back whole and this element shown again in the
        // next read(2): nothing is lost, nothing changes here.
        unsafe {
            bpf_seq_write(
                seq,
                (&raw const head).cast(),
                size_of::<TaskIterHead>() as u32,
            );
            bpf_seq_write(seq, value.cast(), size_of::<TaskEntry>() as u32);
        }
    } else {
        let key = TaskIterKey {
            tag: TASK_ITER_KEY,
            pid,
            first_ns,
        };
        unsafe {
            bpf_seq_write(
                seq,
                (&raw const key).cast(),
                size_of::<TaskIterKey>() as u32,
            )
        };
    }
    0
}
