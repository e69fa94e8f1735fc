//! Maps, the followed-process filter, per-task entries and the kernel side's own counters.

use core::intrinsics::{AtomicOrdering, atomic_xadd};

use aya_ebpf::{
    Global,
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_get_numa_node_id, bpf_ktime_get_ns,
    },
    macros::map,
    maps::{Array, HashMap, PerCpuArray, Queue, RingBuf, Stack},
};
use numatrace_common::{
    COUNTER_SLOTS, Config, Counter, DEFAULT_MAX_TASKS, DEFAULT_RINGBUF_BYTES, EventHeader,
    EventKind, Inflight, LastTask, MAX_TRACKED_TGIDS, SlotRef, SpanEvent, TaskEntry, TaskOffsets,
    TaskStats,
};

/// Offsets of `task_struct` fields, set by the loader from the kernel's BTF.
#[unsafe(no_mangle)]
pub(crate) static TASK_OFFSETS: Global<TaskOffsets> = Global::new(TaskOffsets::ABSENT);

/// Per-task entries by slot (see `numatrace_common::MAP_TASK_STATS`): an array, so that a
/// CPU that remembers its last task's slot (`TASK_LAST`) finds the entry without hashing.
#[map]
pub static TASK_STATS: Array<TaskEntry> = Array::with_max_entries(DEFAULT_MAX_TASKS, 0);

/// pid -> its slot, for a task's first event on a CPU and for another task's entry (a swap's).
#[map]
pub static TASK_SLOT: HashMap<u32, SlotRef> = HashMap::with_max_entries(DEFAULT_MAX_TASKS, 0);

/// Free slots, filled by the loader in increasing order, so that the used ones stay a prefix
/// that userspace reads alone.
#[map]
pub static FREE_SLOTS: Stack<SlotRef> = Stack::with_max_entries(DEFAULT_MAX_TASKS, 0);

#[map]
pub static TASK_LAST: PerCpuArray<LastTask> = PerCpuArray::with_max_entries(1, 0);

/// Entries marked exited (their exit record lost to a full ring, or made in do_exit): userspace
/// frees each once its task is gone, whenever it reads the ring, not only at snapshots.
#[map]
pub static MARKED: Queue<SlotRef> = Queue::with_max_entries(DEFAULT_MAX_TASKS, 0);

/// Hands marked entry `r` to userspace (see [`MARKED`]). Should the push fail, the next snapshot
/// finds the entry and frees it all the same.
#[inline(always)]
pub fn mark(r: SlotRef) {
    let _ = MARKED.push(&r, 0);
}

#[map]
pub static TRACKED_TGIDS: HashMap<u32, u8> = HashMap::with_max_entries(MAX_TRACKED_TGIDS, 0);

#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(DEFAULT_RINGBUF_BYTES, 0);

#[map]
pub static COUNTERS: Slots<{ COUNTER_SLOTS as usize }> = PerCpuArray::with_max_entries(1, 0);

/// A per-CPU array of counters held as one value (`[u64; N]` at index 0): userspace reads all
/// of it, for every CPU, with one lookup instead of one per slot.
pub type Slots<const N: usize> = PerCpuArray<[u64; N]>;

/// Slot `i` of `map` on this CPU; `None` past its end.
#[inline(always)]
pub fn slot<const N: usize>(map: &Slots<N>, i: u32) -> Option<*mut u64> {
    slot_at::<N>(slots_of(map)?, i)
}

/// This CPU's counters of `map`, for several [`slot_at`]s after one lookup.
#[inline(always)]
pub fn slots_of<const N: usize>(map: &Slots<N>) -> Option<*mut u64> {
    map.get_ptr_mut(0).map(|a| a.cast::<u64>())
}

/// Slot `i` of this CPU's `N` counters at `base` ([`slots_of`]); `None` past their end.
#[inline(always)]
pub fn slot_at<const N: usize>(base: *mut u64, i: u32) -> Option<*mut u64> {
    // Through memory, so that LLVM cannot drop the bound below as implied by the caller's own
    // checks (e.g. a signed 32-bit node compare): older verifiers (5.10) do not carry those
    // over to the pointer arithmetic, and this compare is what they see.
    let i: u64 = unsafe { core::ptr::read_volatile(&u64::from(i)) };
    if i >= N as u64 {
        return None;
    }
    // SAFETY: `base` is this CPU's live value of N counters and i < N.
    Some(unsafe { base.add(i as usize) })
}

/// Never written: a zeroed value to create entries from.
#[map]
pub static ZERO_STATS: PerCpuArray<TaskEntry> = PerCpuArray::with_max_entries(1, 0);

#[unsafe(no_mangle)]
pub static CONFIG: Global<Config> = Global::new(Config {
    filter_tgids: 0,
    emit_events: numatrace_common::EMIT_ALL,
    debug_log: 0,
    self_tgid: 0,
    emit_spans: 0,
    wake_bytes: DEFAULT_RINGBUF_BYTES / 4,
    reads: numatrace_common::READ_ALL,
});

/// Whether the running frontend reads the optional aggregate `what` (a `READ_*` bit).
#[inline(always)]
pub fn reads(what: u32) -> bool {
    crate::global!(CONFIG, reads) & what != 0
}

/// Whether aya-log debug messages are wanted (cold paths only).
#[inline(always)]
pub fn debug_log() -> bool {
    crate::global!(CONFIG, debug_log) != 0
}

pub(crate) const BPF_NOEXIST: u64 = 1;
const EEXIST: i32 = 17;

/// Adds to a per-CPU counter: no contention, summed by userspace.
#[inline(always)]
pub fn count(c: Counter) {
    count_n(c, 1);
}

#[inline(always)]
pub fn count_n(c: Counter, n: u64) {
    if c.is_tally() && is_self(current().tgid) {
        return;
    }
    count_raw(c, n);
}

/// [`count`] where the program already knows the running task's tgid (one helper call less).
#[inline(always)]
pub fn count_as(c: Counter, current_tgid: u32) {
    if c.is_tally() && is_self(current_tgid) {
        return;
    }
    count_raw(c, 1);
}

#[inline(always)]
fn count_raw(c: Counter, n: u64) {
    if let Some(p) = slot(&COUNTERS, c as u32) {
        // A per-CPU slot, but a kprobe can interrupt a tracepoint program on the same CPU:
        // the atomic add keeps both increments.
        add(p, n);
    }
}

/// Adds to a field of a shared map value: other CPUs may update the same task at once
/// (e.g. the destination of a swap), so the add is atomic.
#[inline(always)]
pub fn add(field: *mut u64, v: u64) {
    // core's AtomicU64 has no read-modify-write on the BPF target; the intrinsic lowers to the
    // BPF atomic add (with the result unused, the v1 `lock xadd` every kernel accepts).
    // SAFETY: `field` points into a live map value, which is 8-byte aligned.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(field, v) };
}

pub struct Current {
    pub pid: u32,
    pub tgid: u32,
}

#[inline(always)]
pub fn current() -> Current {
    let v = bpf_get_current_pid_tgid();
    Current {
        pid: v as u32,
        tgid: (v >> 32) as u32,
    }
}

/// Whether events about thread group `tgid` are counted. numatrace's own are, always: the
/// kernel's counters include them, and userspace reports them apart.
#[inline(always)]
pub fn wanted(tgid: u32) -> bool {
    !filtering() || is_self(tgid) || unsafe { TRACKED_TGIDS.get(&tgid) }.is_some()
}

/// Whether only followed processes are counted.
#[inline(always)]
pub fn filtering() -> bool {
    crate::global!(CONFIG, filter_tgids) != 0
}

/// Whether `tgid` is numatrace itself: left out of the system-wide histograms and arrays.
#[inline(always)]
pub fn is_self(tgid: u32) -> bool {
    tgid == crate::global!(CONFIG, self_tgid)
}

/// Records the running task's comm (it changes at exec), cgroup v2 id (it changes when the
/// task is moved) and the node of its CPU in its entry.
#[inline(always)]
pub fn note_current(t: *mut TaskStats) {
    unsafe {
        // Straight into the entry: through a stack copy, two byte-by-byte copies of 16 bytes
        // (~65 instructions in every program that notes). A failed call leaves it zeroed.
        aya_ebpf::helpers::generated::bpf_get_current_comm(
            (&raw mut (*t).comm).cast(),
            size_of::<[u8; 16]>() as u32,
        );
        (*t).cgroup_id = bpf_get_current_cgroup_id();
        (*t).last_nid = bpf_get_numa_node_id() as u32 + 1;
    }
}

/// Whether the running frontend reads records of `kind` (an `EMIT_*` bit).
#[inline(always)]
pub fn emit(kind: u32) -> bool {
    crate::global!(CONFIG, emit_events) & kind != 0
}

/// Sends a timed call of the current task for the timeline, when the loader asked for them
/// (never for numatrace's own tasks).
#[inline(always)]
pub fn send_span(kind: EventKind, start_ns: u64, dur_ns: u64, a: u64, b: u64) {
    if crate::global!(CONFIG, emit_spans) == 0 {
        return;
    }
    let cur = current();
    if is_self(cur.tgid) {
        return;
    }
    let mut hdr = header(kind as u32, cur.pid, cur.tgid);
    hdr.ts_ns = start_ns;
    send(SpanEvent { hdr, dur_ns, a, b });
}

/// Follows a forked child of a followed process (also called for new threads, which are
/// already followed through their tgid; the extra key is harmless).
#[inline(always)]
/// Returns whether the child is now followed.
pub fn follow_child(parent_tgid: u32, child_pid: u32) -> bool {
    if crate::global!(CONFIG, filter_tgids) == 0
        || unsafe { TRACKED_TGIDS.get(&parent_tgid) }.is_none()
    {
        return false;
    }
    if TRACKED_TGIDS.insert(&child_pid, &1, 0).is_err() {
        count(Counter::TrackedMapFull);
        return false;
    }
    true
}

/// PF_EXITING in task_struct.flags (include/linux/sched.h; the same value on every line).
const PF_EXITING: u32 = 0x4;

/// Whether the running task is in do_exit (exit_signals() set PF_EXITING). Its exit record may
/// already be sent: sched_process_exit fires in the middle of do_exit, and a CPU-clock sample,
/// task_numa_work from exit_task_work, or (6.16+, where the tracepoint precedes exit_mm) a
/// hinting fault in mm_release can follow it.
#[inline(always)]
pub fn current_exiting() -> bool {
    // Through the helper: a cold path (a new or marked entry), where a typed read would only
    // add its second variant to every program that creates entries.
    let off = crate::global!(TASK_OFFSETS, flags);
    read_field::<u32>(current_task(), off).is_some_and(|f| f & PF_EXITING != 0)
}

/// Whether entry `t` was made for the running task, not for an earlier task with its pid: an
/// entry is stamped at creation (`first_ns`, bpf_ktime_get_ns) and task_struct.start_time is
/// the same clock. Unknown (no BTF offset): assumed so.
#[inline(always)]
pub fn owned_by_current(t: *const TaskStats) -> bool {
    let off = crate::global!(TASK_OFFSETS, start_time);
    read_field::<u64>(current_task(), off).is_none_or(|start| unsafe { (*t).first_ns } >= start)
}

/// The task's aggregate entry, created on first use. `is_current` says whether `pid` is the
/// running task, whose comm can then be recorded.
///
/// Only a task's own exit removes its `TASK_SLOT` key. Another task's entry (a swap's other
/// task) is made too where it has none: the kernel never picks an exiting task for a swap, and
/// should it exit in between, its entry waits for the pid's next task to take it over, as one
/// whose exit program did not run. An entry created for a task already in do_exit is marked
/// exited at once and given no key: no exit record may follow (the tracepoint may have
/// passed), and userspace must not wait for one to know the task is gone; it frees the slot
/// once the task is. Its counts are kept, so the totals stay exact.
#[inline(always)]
pub fn task_entry(pid: u32, tgid: u32, is_current: bool) -> Option<*mut TaskStats> {
    if pid == 0 {
        return None;
    }
    // The running task's entry where this CPU counted for it last: two array lookups the
    // verifier inlines, no hashing.
    let last = if is_current {
        TASK_LAST.get_ptr_mut(0)
    } else {
        None
    };
    if let Some(l) = last
        && unsafe { (*l).pid } == pid
        && let Some(e) = entry_at(unsafe { (*l).at }, pid)
        && unsafe { (*e).stats.exited } == 0
    {
        return Some(stamped(e));
    }
    // The slot, not the entry: a subprogram's result is a plain number to the verifier.
    let slot = task_slot_slow(pid, tgid, is_current);
    TASK_STATS.get_ptr_mut(slot).map(stamped)
}

/// No slot ([`task_slot_slow`]): past the array's end.
const NO_SLOT: u32 = u32::MAX;

/// [`task_entry`]'s slot for a task this CPU did not count for last, or whose entry is marked;
/// [`NO_SLOT`] if it has none and cannot be given one. A subprogram of its own: the rare path
/// is not copied into every program that finds an entry.
#[inline(never)]
fn task_slot_slow(pid: u32, tgid: u32, is_current: bool) -> u32 {
    let last = if is_current {
        TASK_LAST.get_ptr_mut(0)
    } else {
        None
    };
    if let Some(r) = unsafe { TASK_SLOT.get(&pid) }.copied() {
        // An entry a key leads to is never marked (the exit that marks it removes the key);
        // one whose exit did not run at all is taken over by the pid's next task.
        if entry_at(r, pid).is_some_and(|e| unsafe { (*e).stats.exited } == 0) {
            remember(last, pid, r);
            return r.slot;
        }
        let _ = TASK_SLOT.remove(&pid);
    }
    let exiting = is_current && current_exiting();
    if exiting
        && let Some(l) = last
        && unsafe { (*l).pid } == pid
        && let Some(e) = entry_at(unsafe { (*l).at }, pid)
        && owned_by_current(e.cast())
    {
        // Marked, and the running task's own: it is in do_exit, and its events after its exit
        // record (or the record's loss) share one entry.
        return unsafe { (*l).at.slot };
    }
    new_entry(pid, tgid, last, is_current, exiting)
}

/// The entry `r` names, if it is still that one and `pid`'s.
#[inline(always)]
fn entry_at(r: SlotRef, pid: u32) -> Option<*mut TaskEntry> {
    let e = TASK_STATS.get_ptr_mut(r.slot)?;
    // SAFETY: a live array value.
    unsafe { ((*e).generation == r.generation && (*e).stats.pid == pid).then_some(e) }
}

/// Makes `last` say that `pid`'s entry is at `r`.
#[inline(always)]
fn remember(last: Option<*mut LastTask>, pid: u32, r: SlotRef) {
    if let Some(l) = last {
        // SAFETY: this CPU's value. A sample interrupting these stores writes the running
        // task's own pid and slot too, so a mix of the two still names that task's entry.
        unsafe {
            (*l).pid = pid;
            (*l).at = r;
        }
    }
}

/// A free slot made `pid`'s entry (`last`: this CPU's cache, for the running task; `exiting`:
/// the running task is `pid`, in do_exit): the slot, or [`NO_SLOT`].
#[inline(always)]
fn new_entry(
    pid: u32,
    tgid: u32,
    last: Option<*mut LastTask>,
    is_current: bool,
    exiting: bool,
) -> u32 {
    let Ok(Some(r)) = FREE_SLOTS.pop() else {
        count(Counter::TaskMapFull);
        return NO_SLOT;
    };
    let zero = ZERO_STATS.get_ptr(0);
    let e = TASK_STATS.get_ptr_mut(r.slot);
    let (Some(zero), Some(e)) = (zero, e) else {
        // Cannot happen: index 0 of a per-CPU array, and a slot below the array's size.
        return NO_SLOT;
    };
    // TaskEntry is too big for the 512-byte stack: the zeroed value is copied by the helper
    // (which cannot fail: an index below the array's size, no flag).
    let _ = TASK_STATS.set(r.slot, unsafe { &*zero }, 0);
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: the slot is this program's alone until a key or the cache leads to it.
    unsafe {
        (*e).slot = r.slot;
        (*e).generation = r.generation;
        let t = &raw mut (*e).stats;
        (*t).pid = pid;
        (*t).tgid = tgid;
        (*t).last_ns = now;
        if is_current {
            note_current(t);
        }
        (*t).exited = u32::from(exiting);
    }
    if !exiting && let Err(err) = TASK_SLOT.insert(&pid, &r, BPF_NOEXIST) {
        // Never published: readers take an entry without first_ns as not yet made.
        free_slot(e, r);
        if err != -EEXIST {
            count(Counter::TaskMapFull);
            return NO_SLOT;
        }
        // A sample that interrupted this program made the task's entry first.
        let Some(r) = unsafe { TASK_SLOT.get(&pid) }.copied() else {
            return NO_SLOT;
        };
        if entry_at(r, pid).is_none() {
            return NO_SLOT;
        }
        remember(last, pid, r);
        return r.slot;
    }
    // Last, once its key is in: readers take an entry without it as not yet made.
    unsafe { core::ptr::write_volatile(&raw mut (*e).stats.first_ns, now) };
    if exiting {
        mark(r);
    }
    count(Counter::TasksCreated);
    remember(last, pid, r);
    r.slot
}

/// Gives slot `r` (entry `e`) back: readers skip it from now on (pid 0), and whatever still
/// names it no longer matches its generation.
#[inline(always)]
pub fn free_slot(e: *mut TaskEntry, r: SlotRef) {
    let next = SlotRef {
        slot: r.slot,
        generation: r.generation.wrapping_add(1),
    };
    // SAFETY: a live array value, no longer named by any key.
    unsafe {
        (*e).stats.pid = 0;
        (*e).generation = next.generation;
    }
    let _ = FREE_SLOTS.push(&next, 0);
}

/// The running task's entry at its exit, if it has one, with its slot; its `TASK_SLOT` key is
/// removed whatever follows (only its own exit removes it: see [`task_entry`]).
#[inline(always)]
pub fn exiting_entry(pid: u32) -> Option<(*mut TaskEntry, SlotRef)> {
    if pid == 0 {
        return None;
    }
    let last = TASK_LAST.get_ptr_mut(0)?;
    let at = unsafe { (*last).at };
    // A marked entry of an earlier task with this pid, still held for userspace, is not this
    // task's to hand over.
    if unsafe { (*last).pid } == pid
        && let Some(e) = entry_at(at, pid)
        && (unsafe { (*e).stats.exited } == 0 || owned_by_current(e.cast()))
    {
        let _ = TASK_SLOT.remove(&pid);
        stamped(e);
        return Some((e, at));
    }
    let r = unsafe { TASK_SLOT.get(&pid) }.copied()?;
    let _ = TASK_SLOT.remove(&pid);
    let e = entry_at(r, pid)?;
    // The task's events after this one (in do_exit) find the entry here, marked or freed.
    remember(Some(last), pid, r);
    stamped(e);
    Some((e, r))
}

/// Stamps entry `e` as taken now, before anything is counted in it, so that the iterator's
/// next read sends it in full (task_iter.rs): one load (the verifier inlines the helper) and a
/// store. Its counts (the first field).
#[inline(always)]
fn stamped(e: *mut TaskEntry) -> *mut TaskStats {
    let now = unsafe { aya_ebpf::helpers::generated::bpf_jiffies64() };
    // SAFETY: a live array value.
    unsafe { (*e).stats.touched = now as u32 };
    e.cast()
}

/// The calls in progress kept in the same entry as the counts `t`.
#[inline(always)]
pub fn inflight_of(t: *mut TaskStats) -> *mut Inflight {
    // SAFETY: `t` is the first field of a live TaskEntry map value (task_entry).
    unsafe { &raw mut (*t.cast::<TaskEntry>()).inflight }
}

/// Jiffies between two re-reads of a busy task's comm, cgroup and CPU node (12 ms at HZ=250, 3 ms
/// at 1000, 30 ms at 100): they change rarely (exec, a move between cgroups, another CPU), and
/// reading them costs more than counting the event.
const NOTE_EVERY_JIFFIES: u64 = 3;

/// If NOTE_EVERY_JIFFIES have passed since it last did, re-reads the running task's comm,
/// cgroup and node ([`note_current`]) and its preferred node, and stamps the entry's `last_ns`:
/// whether it did. Every hook that counts an event of the running task calls it, so none of
/// these goes stale while the task has events. The test is on the jiffies counter, one load
/// (the verifier inlines the helper), where a clock read costs ~50 instructions an event.
#[inline(always)]
pub fn touch_noting(t: *mut TaskStats) -> bool {
    let now = unsafe { aya_ebpf::helpers::generated::bpf_jiffies64() };
    // SAFETY: `t` is the first field of a live TaskEntry map value (task_entry).
    unsafe {
        let e = t.cast::<TaskEntry>();
        if now.wrapping_sub((*e).noted_jiffies) < NOTE_EVERY_JIFFIES {
            return false;
        }
        (*e).noted_jiffies = now;
        (*t).last_ns = bpf_ktime_get_ns();
    }
    note_current(t);
    let off = crate::global!(TASK_OFFSETS, numa_preferred_nid);
    if let Some(nid) = read_field::<i32>(current_task(), off) {
        // NUMA_NO_NODE (-1) becomes 0: no preferred node.
        unsafe { (*t).preferred_nid = (nid.max(-1) + 1) as u32 };
    }
    true
}

#[inline(always)]
pub fn header(kind: u32, pid: u32, tgid: u32) -> EventHeader {
    EventHeader {
        kind,
        pid,
        tgid,
        cpu: unsafe { aya_ebpf::helpers::bpf_get_smp_processor_id() },
        ts_ns: unsafe { bpf_ktime_get_ns() },
    }
}

const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;
const BPF_RB_AVAIL_DATA: u64 = 0;

/// Submit flags: no wake-up per record (an irq_work and a reader wake-up cost more than the
/// record), except once the unread bytes pass the mark, so that a burst is read before the
/// ring fills. Userspace also reads on a timer and at every snapshot.
#[inline(always)]
pub fn wake_flags() -> u64 {
    if EVENTS.query(BPF_RB_AVAIL_DATA) >= u64::from(crate::global!(CONFIG, wake_bytes)) {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    }
}

/// Sends one record on the ring buffer, counting it when there is no room.
#[inline(always)]
pub fn send<T: 'static>(ev: T) {
    match EVENTS.reserve::<T>(0) {
        Some(mut slot) => {
            slot.write(ev);
            slot.submit(wake_flags());
        }
        None => count(Counter::RingbufFull),
    }
}

/// The current task as a plain number, for [`read_field`]: cold paths (see [`current_field`]).
#[inline(always)]
pub fn current_task() -> *const u8 {
    unsafe { aya_ebpf::helpers::bpf_get_current_task() as *const u8 }
}

/// Non-zero: `current` is read through its BTF type (5.11+). A read-only global: the verifier
/// keeps one branch of each test, so 5.10 never sees the helper it lacks.
#[unsafe(no_mangle)]
static TYPED_CURRENT: Global<u32> = Global::new(0);

#[inline(always)]
fn typed_current() -> bool {
    TYPED_CURRENT.load() != 0
}

/// The running task, for [`via_current`]: typed where the kernel can type it. A program that
/// reads several of its fields fetches it once.
#[inline(always)]
pub fn current_ptr() -> *const u8 {
    if typed_current() {
        (unsafe { aya_ebpf::helpers::bpf_get_current_task_btf() }) as *const u8
    } else {
        current_task()
    }
}

/// A field of the running task at a BTF-derived offset: a plain load where the kernel gives the
/// task a type ([`load_field`]), a helper call where it does not.
#[inline(always)]
pub fn current_field<T: Copy>(off: u32) -> Option<T> {
    via_current(current_ptr(), off)
}

/// A field of the running task ([`current_ptr`]) or of a struct a pointer read from it leads to
/// (its mm, its signal): typed where `current` is.
#[inline(always)]
pub fn via_current<T: Copy>(base: *const u8, off: u32) -> Option<T> {
    field_by(typed_current(), base, off)
}

/// Reads a `T` at `base + off`; `None` for an absent field or a failed read.
#[inline(always)]
pub fn read_field<T: Copy>(base: *const u8, off: u32) -> Option<T> {
    if off == numatrace_common::FIELD_ABSENT || base.is_null() {
        return None;
    }
    let mut v = core::mem::MaybeUninit::<T>::uninit();
    // SAFETY: the helper fills `v` (zeroes on failure) without faulting.
    let r = unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_kernel(
            v.as_mut_ptr().cast(),
            core::mem::size_of::<T>() as u32,
            base.add(off as usize).cast(),
        )
    };
    // A volatile read of the filled slot, only where it was filled: a plain one LLVM may hoist
    // above the tests, onto the paths where no helper wrote the slot, and 5.10's verifier
    // refuses any read of stack never written.
    (r == 0).then(|| unsafe { core::ptr::read_volatile(v.as_ptr()) })
}

/// Reads a `T` at `base + off` with a plain load, for a `base` the verifier knows by its BTF
/// type (a tracing program's argument, or a pointer field loaded from one): it makes the load
/// fault-safe (BPF_PROBE_MEM: a fault reads 0) and checks `off` against the type at load time,
/// so no helper call is made. `off` must be a load-time constant (a read-only global) inside
/// `base`'s type, or the program is refused; a kprobe's plain-number pointers use
/// [`read_field`].
#[inline(always)]
pub fn load_field<T: Copy>(base: *const u8, off: u32) -> Option<T> {
    if off == numatrace_common::FIELD_ABSENT || base.is_null() {
        return None;
    }
    // SAFETY: the verifier rewrites the load into an exception-table-guarded one.
    Some(unsafe { core::ptr::read_volatile(base.add(off as usize).cast::<T>()) })
}

/// [`load_field`] where `TYPED` (a tracing program's BTF-typed pointer), [`read_field`] where
/// not (a kprobe's register): one body for both mechanisms' programs.
#[inline(always)]
pub fn field_of<const TYPED: bool, T: Copy>(base: *const u8, off: u32) -> Option<T> {
    field_by(TYPED, base, off)
}

/// [`load_field`] where the verifier knows `base`'s BTF type (`typed`: a constant or a read-only
/// global, so one branch is kept), [`read_field`] where it does not.
#[inline(always)]
fn field_by<T: Copy>(typed: bool, base: *const u8, off: u32) -> Option<T> {
    if typed {
        load_field(base, off)
    } else {
        read_field(base, off)
    }
}

/// A counted event's task entry and what each of its counts needs, found once per event: one
/// pid/tgid helper call and at most one per-CPU lookup of the system-wide counters (at the
/// first count that has a system-wide twin; none where no count has), not one of each per
/// counter.
#[derive(Clone)]
pub struct Hit {
    pub t: *mut TaskStats,
    pub pid: u32,
    pub tgid: u32,
    /// The running task is numatrace's own: its counts stay out of the system-wide tallies.
    pub me: bool,
    /// This CPU's system-wide counters, once looked up (null: not yet).
    sys: core::cell::Cell<*mut u64>,
}

impl Hit {
    /// `t` is the entry of `pid`/`tgid`; `current_tgid` the running task's.
    #[inline(always)]
    pub fn new(t: *mut TaskStats, pid: u32, tgid: u32, current_tgid: u32) -> Self {
        Self {
            t,
            pid,
            tgid,
            me: is_self(current_tgid),
            sys: core::cell::Cell::new(core::ptr::null_mut()),
        }
    }

    /// Adds to a system-wide counter ([`count_n`] without its helper call and lookup).
    #[inline(always)]
    pub fn count_n(&self, c: Counter, n: u64) {
        if c.is_tally() && self.me {
            return;
        }
        let mut sys = self.sys.get();
        if sys.is_null() {
            // Index 0 of a per-CPU array: the lookup cannot fail.
            let Some(a) = COUNTERS.get_ptr_mut(0) else {
                return;
            };
            sys = a.cast::<u64>();
            self.sys.set(sys);
        }
        // `c` is a constant below COUNTER_SLOTS at every call: a fixed offset in the value.
        if (c as u32) < COUNTER_SLOTS {
            add(unsafe { sys.add(c as usize) }, n);
        }
    }

    #[inline(always)]
    pub fn count(&self, c: Counter) {
        self.count_n(c, 1);
    }

    /// Looks the system-wide counters up now: for a program that counts several on many
    /// branches, where one lookup up front is fewer instructions than one test per count.
    /// `None` where the lookup fails (it cannot).
    #[inline(always)]
    pub fn counting(self) -> Option<Self> {
        let a = COUNTERS.get_ptr_mut(0)?;
        self.sys.set(a.cast::<u64>());
        Some(self)
    }
}

/// `current`'s followed entry, if it is followed.
#[inline(always)]
pub fn followed_current() -> Option<Hit> {
    let cur = current();
    if !wanted(cur.tgid) {
        return None;
    }
    task_entry(cur.pid, cur.tgid, true).map(|t| Hit::new(t, cur.pid, cur.tgid, cur.tgid))
}
