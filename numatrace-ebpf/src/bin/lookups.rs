//! The benchmark's measure of one design choice: how a program finds the running task's entry.
//! Each program does only that, and one count in the entry, on a hook where numatrace's own
//! programs run (the benchmark attaches the three beside them, as it does the empty floors):
//! - `*_lookup_hash`: as numatrace did until its slot table, the pid helper and a lookup in an
//!   LRU hash keyed by pid (an insert for a task seen first), the entry stamped with jiffies;
//! - `*_lookup_ts`: BPF task storage (tracing programs: 5.12+), the entry found from `current`
//!   without hashing (created at a task's first event), stamped the same way;
//! - `*_lookup_cpu`: entries in an array by slot, each CPU remembering the last task it counted
//!   for and its slot, the pid hash (pid → slot) asked only when another task comes (a design
//!   that needs no task storage, 5.10 included; numatrace's own, see `tasks::task_entry`).
//!
//! An object of its own, never loaded by numatrace: a task-storage map in numatrace's object
//! would keep it from loading on 5.10, which has no such map type.
#![no_std]
#![no_main]
#![feature(core_intrinsics)]
#![allow(internal_features)]

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{
    bindings::{BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE, bpf_map_type},
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task_btf,
        generated::{bpf_jiffies64, bpf_task_storage_get},
    },
    macros::{btf_map, btf_tracepoint, fentry, fexit, kprobe, kretprobe, map, tracepoint},
    maps::{Array, HashMap, LruHashMap, PerCpuArray},
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, ProbeContext, RetProbeContext,
        TracePointContext,
    },
};
use numatrace_common::{DEFAULT_MAX_TASKS, TaskEntry};

/// numatrace's task map as its programs used it before the slot table.
#[map]
static LOOKUP_TASKS: LruHashMap<u32, TaskEntry> =
    LruHashMap::with_max_entries(DEFAULT_MAX_TASKS, 0);

/// Never written: the zeroed value an entry is created from.
#[map]
static LOOKUP_ZERO: PerCpuArray<TaskEntry> = PerCpuArray::with_max_entries(1, 0);

/// A task-storage map's BTF definition (aya-ebpf 0.3 has none): the loader reads its type,
/// key, value and flags from these fields' types, as for aya-ebpf's own `#[btf_map]`s.
#[repr(C)]
struct TaskStorage<T> {
    r#type: *const [i32; bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: placeholders the loader replaces with the map; never dereferenced.
unsafe impl<T> Sync for TaskStorage<T> {}

#[btf_map]
static LOOKUP_TASK_STORAGE: TaskStorage<TaskEntry> = TaskStorage {
    r#type: core::ptr::null(),
    key: core::ptr::null(),
    value: core::ptr::null(),
    max_entries: core::ptr::null(),
    map_flags: core::ptr::null(),
};

/// The slot array's entries, and which slot each pid has.
#[map]
static LOOKUP_SLOTS: Array<TaskEntry> = Array::with_max_entries(SLOTS, 0);
#[map]
static LOOKUP_SLOT_OF: HashMap<u32, u32> = HashMap::with_max_entries(SLOTS, 0);
/// Per CPU, the last task counted for: (pid, slot).
#[map]
static LOOKUP_LAST: PerCpuArray<[u32; 2]> = PerCpuArray::with_max_entries(1, 0);

const SLOTS: u32 = DEFAULT_MAX_TASKS;
const BPF_NOEXIST: u64 = 1;

/// The stamp and the count every event makes in its task's entry.
#[inline(always)]
fn count(e: *mut TaskEntry) {
    // SAFETY: `e` is a live map value, 8-byte aligned.
    unsafe {
        (*e).stats.touched = bpf_jiffies64() as u32;
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(
            &raw mut (*e).stats.hint_faults.faults,
            1,
        );
    }
}

#[inline(always)]
fn by_pid() -> u32 {
    let pid = bpf_get_current_pid_tgid() as u32;
    let e = match LOOKUP_TASKS.get_ptr_mut(&pid) {
        Some(e) => e,
        None => {
            let Some(zero) = LOOKUP_ZERO.get_ptr(0) else {
                return 0;
            };
            let _ = LOOKUP_TASKS.insert(&pid, unsafe { &*zero }, BPF_NOEXIST);
            let Some(e) = LOOKUP_TASKS.get_ptr_mut(&pid) else {
                return 0;
            };
            e
        }
    };
    count(e);
    0
}

#[inline(always)]
fn by_task_storage() -> u32 {
    // SAFETY: the helper takes the map and a BTF-typed task; a null value creates it zeroed.
    let e = unsafe {
        bpf_task_storage_get(
            (&raw const LOOKUP_TASK_STORAGE).cast_mut().cast(),
            bpf_get_current_task_btf().cast(),
            core::ptr::null_mut(),
            u64::from(BPF_LOCAL_STORAGE_GET_F_CREATE),
        )
    };
    if !e.is_null() {
        count(e.cast());
    }
    0
}

/// The slot of `pid`, from the pid hash, given one at its first event. (A real allocator would
/// pop a free slot, taken back at exit; here the pid modulo the slots: distinct for the guest's
/// pids, and an atomic fetch-and-add needs a newer BPF instruction set than the objects are
/// built for. The miss path is therefore a little cheaper than a real one.)
#[inline(always)]
fn slot_of(pid: u32) -> u32 {
    if let Some(s) = unsafe { LOOKUP_SLOT_OF.get(&pid) } {
        return *s;
    }
    let slot = pid % SLOTS;
    let _ = LOOKUP_SLOT_OF.insert(&pid, &slot, BPF_NOEXIST);
    if let Some(e) = LOOKUP_SLOTS.get_ptr_mut(slot) {
        unsafe { (*e).stats.pid = pid };
    }
    slot
}

#[inline(always)]
fn by_cpu_cache() -> u32 {
    let pid = bpf_get_current_pid_tgid() as u32;
    let Some(last) = LOOKUP_LAST.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: this CPU's value; programs on one CPU do not run at once here (no nesting on
    // these hooks' program types but a kprobe in a tracepoint, which re-reads it).
    let slot = unsafe {
        if (*last)[0] == pid && pid != 0 {
            (*last)[1]
        } else {
            let slot = slot_of(pid);
            *last = [pid, slot];
            slot
        }
    };
    let Some(e) = LOOKUP_SLOTS.get_ptr_mut(slot) else {
        return 0;
    };
    // Whether the slot holds this task's entry (a real one is freed at exit and given again);
    // if not, the slow path a real design would take: the pid hash again. (Here two pids a
    // multiple of the slots apart share one: counted all the same, the cost is the point.)
    if unsafe { (*e).stats.pid } != pid {
        let _ = slot_of(pid);
    }
    count(e);
    0
}

/// Three programs of one type (the loader attaches by name prefix; fentry/fexit targets are
/// set at load, the function named here is a placeholder).
macro_rules! trio {
    ($attr:meta, $ctx:ty, $ret:ty, $hash:ident, $ts:ident, $cpu:ident) => {
        #[$attr]
        pub fn $hash(_ctx: $ctx) -> $ret {
            by_pid() as $ret
        }

        #[$attr]
        pub fn $ts(_ctx: $ctx) -> $ret {
            by_task_storage() as $ret
        }

        #[$attr]
        pub fn $cpu(_ctx: $ctx) -> $ret {
            by_cpu_cache() as $ret
        }
    };
}

trio!(
    tracepoint,
    TracePointContext,
    u32,
    tp_lookup_hash,
    tp_lookup_ts,
    tp_lookup_cpu
);
trio!(
    kprobe,
    ProbeContext,
    u32,
    kprobe_lookup_hash,
    kprobe_lookup_ts,
    kprobe_lookup_cpu
);
trio!(
    kretprobe,
    RetProbeContext,
    u32,
    kretprobe_lookup_hash,
    kretprobe_lookup_ts,
    kretprobe_lookup_cpu
);
trio!(
    fentry(function = "task_numa_fault"),
    FEntryContext,
    u32,
    fentry_lookup_hash,
    fentry_lookup_ts,
    fentry_lookup_cpu
);
trio!(
    fexit(function = "task_numa_fault"),
    FExitContext,
    u32,
    fexit_lookup_hash,
    fexit_lookup_ts,
    fexit_lookup_cpu
);
trio!(
    btf_tracepoint(function = "sched_skip_vma_numa"),
    BtfTracePointContext,
    i32,
    btf_lookup_hash,
    btf_lookup_ts,
    btf_lookup_cpu
);

#[path = "../object.rs"]
mod object;
