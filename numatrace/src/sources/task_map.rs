//! The kernel's per-task entries (numatrace-ebpf's `tasks.rs`): an array by slot
//! ([`MAP_TASK_STATS`]), the slot of each live pid ([`MAP_TASK_SLOT`]) and the free slots
//! ([`MAP_FREE_SLOTS`]).
//!
//! Slots are handed out from a stack the loader fills in increasing order, and a freed one is
//! pushed back on top: the slots ever used are a prefix of the array, and a read stops past it.

use std::os::fd::{AsFd as _, BorrowedFd};

use aya::maps::{Array, HashMap, IterableMap as _, MapData, MapError, Queue, Stack};
use numatrace_common::{
    MAP_FREE_SLOTS, MAP_MARKED, MAP_TASK_SLOT, MAP_TASK_STATS, SlotRef, TaskEntry, TaskStats,
};

use super::batch::{Batch, BatchError};

/// Task entries per batched call: ~1.4 MiB of buffer (an entry is ~730 bytes), and 50 calls
/// for 100 000 tasks. Measured at 100 000 entries of the hash map this array replaced (2-CPU
/// host): the kernel's read alone 27–32 ms, the whole snapshot within its noise (±3 ms in
/// side-by-side runs) with larger chunks alike. Overlapping the calls with the caller's taking
/// of the previous chunk (a second buffer filled on a thread of its own) made the read itself
/// ~5 ms shorter but the snapshot 6–15 ms longer: not done.
pub const TASK_CHUNK: usize = 2048;

/// Never-used slots in a row past which a read stops. Slots are popped in order but filled
/// concurrently: a slot popped later may be filled before one popped earlier, by as many
/// programs as can be making an entry at once (one per CPU, and one interrupting it). 64
/// covers 32 CPUs doing so at the same instant; a bigger machine's reads stop a little early
/// only in that instant, and the next read finds the entry.
const UNUSED_RUN: u32 = 64;

/// Whether `e` holds a task: a free slot has pid 0, and one being made an entry no first_ns yet
/// (nothing is counted in it before it has one).
pub fn holds_task(e: &TaskEntry) -> bool {
    e.stats.pid != 0 && e.stats.first_ns != 0
}

pub struct TaskMap {
    entries: Array<MapData, TaskEntry>,
    slots: HashMap<MapData, u32, SlotRef>,
    /// The chunk buffers, kept from one read to the next.
    buf: Batch<u32, TaskEntry>,
    /// False once the kernel said it has no batched lookup: element by element from then on.
    batched: bool,
}

impl TaskMap {
    /// The maps, taken from the loaded object: the reader, and what frees marked entries (a
    /// second handle on the entries), kept apart so that the ring's reader can free them too.
    pub fn take(ebpf: &mut aya::Ebpf) -> Result<(Self, MarkedSlots), MapError> {
        let mut one = |name: &str| {
            ebpf.take_map(name).ok_or_else(|| MapError::InvalidName {
                name: name.to_string(),
            })
        };
        let entries: Array<MapData, TaskEntry> = Array::try_from(one(MAP_TASK_STATS)?)?;
        let again = entries
            .map()
            .fd()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| {
                MapError::SyscallError(aya::sys::SyscallError {
                    call: "dup",
                    io_error: e,
                })
            })?;
        let marked = MarkedSlots {
            queue: Queue::try_from(one(MAP_MARKED)?)?,
            entries: Array::try_from(aya::maps::Map::Array(MapData::from_fd(again)?))?,
            free: Stack::try_from(one(MAP_FREE_SLOTS)?)?,
            pending: Vec::new(),
        };
        let map = Self {
            entries,
            slots: HashMap::try_from(one(MAP_TASK_SLOT)?)?,
            buf: Batch::new(TASK_CHUNK),
            batched: true,
        };
        Ok((map, marked))
    }

    /// The entries' array, for the iterator's link.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.entries.map().fd().as_fd()
    }

    /// Calls `each` with every entry that holds a task, in slot order. Entries may change while
    /// being read: each value is copied as it is at that moment.
    pub fn each(&mut self, mut each: impl FnMut(&TaskEntry)) -> Result<(), MapError> {
        let mut prefix = Prefix::default();
        if self.batched {
            let fd = self.entries.map().fd().as_fd();
            match self.buf.read_while(fd, |_, e| prefix.take(e, &mut each)) {
                Ok(()) => return Ok(()),
                Err(BatchError::Unsupported(e)) => {
                    tracing::debug!("reading the task array element by element: {e}");
                    self.batched = false;
                }
                Err(e) => return Err(e.into_map_error()),
            }
        }
        for i in 0..self.entries.len() {
            if !prefix.take(&self.entries.get(&i, 0)?, &mut each) {
                break;
            }
        }
        Ok(())
    }

    /// The entry of live task `pid`, if it has one.
    pub fn of_pid(&self, pid: u32) -> Result<Option<TaskEntry>, MapError> {
        let r = match self.slots.get(&pid, 0) {
            Ok(r) => r,
            Err(MapError::KeyNotFound) => return Ok(None),
            Err(e) => return Err(e),
        };
        let e = self.entries.get(&r.slot, 0)?;
        Ok((e.generation == r.generation && e.stats.pid == pid && holds_task(&e)).then_some(e))
    }
}

/// What frees the slots of marked entries: those whose exit record was lost to a full ring, or
/// made in do_exit (numatrace-ebpf's `tasks::mark`). No program writes such an entry once its
/// task is gone, so userspace zeroes it and gives the slot back.
pub struct MarkedSlots {
    queue: Queue<MapData, SlotRef>,
    entries: Array<MapData, TaskEntry>,
    free: Stack<MapData, SlotRef>,
    /// Marked entries whose task was still running when last looked at.
    pending: Vec<SlotRef>,
}

impl MarkedSlots {
    /// Frees every marked entry the programs handed over whose task `done` says is gone,
    /// giving `fold` its key and final counts (as its exit record would have); the others are
    /// looked at again next time.
    pub fn settle(
        &mut self,
        done: impl Fn(u32) -> bool,
        mut fold: impl FnMut((u32, u64), TaskStats),
    ) -> Result<(), MapError> {
        loop {
            match self.queue.pop(0) {
                Ok(r) => self.pending.push(r),
                Err(MapError::ElementNotFound) => break,
                Err(e) => return Err(e),
            }
        }
        let mut still = Vec::new();
        let mut left = std::mem::take(&mut self.pending).into_iter();
        while let Some(r) = left.next() {
            let freed = self.entries.get(&r.slot, 0).and_then(|e| {
                // Handed over by its own exit since, or freed by a snapshot's settling.
                if e.generation != r.generation || e.stats.exited == 0 || !holds_task(&e) {
                    return Ok(None);
                }
                if !done(e.stats.pid) {
                    still.push(r);
                    return Ok(None);
                }
                self.release(r.slot, &e).map(Some)
            });
            match freed {
                Ok(Some(stats)) => fold((stats.pid, stats.first_ns), stats),
                Ok(None) => {}
                Err(e) => {
                    // Kept, with those not looked at yet, for the next try.
                    still.push(r);
                    still.extend(left);
                    self.pending = still;
                    return Err(e);
                }
            }
        }
        self.pending = still;
        Ok(())
    }

    /// Frees slot `slot` if it still holds the marked entry `key`: its final counts.
    pub fn free(&mut self, slot: u32, key: (u32, u64)) -> Result<Option<TaskStats>, MapError> {
        let e = self.entries.get(&slot, 0)?;
        if (e.stats.pid, e.stats.first_ns) != key || e.stats.exited == 0 {
            return Ok(None);
        }
        self.release(slot, &e).map(Some)
    }

    /// Zeroes marked entry `e`, as just read from `slot`, with the next generation, and gives
    /// the slot back: its final counts.
    fn release(&mut self, slot: u32, e: &TaskEntry) -> Result<TaskStats, MapError> {
        let next = SlotRef {
            slot,
            generation: e.generation.wrapping_add(1),
        };
        let zeroed = TaskEntry {
            slot,
            generation: next.generation,
            ..TaskEntry::default()
        };
        self.entries.set(slot, &zeroed, 0)?;
        self.free.push(&next, 0)?;
        Ok(e.stats)
    }
}

/// Where a read of the array in slot order stops: past [`UNUSED_RUN`] never-used slots in a
/// row.
#[derive(Default)]
pub struct Prefix {
    unused: u32,
}

impl Prefix {
    /// Gives `e` to `each` if it holds a task; whether the read goes on. Past the stop it
    /// gives nothing (the rest of a batched chunk), so both ways of reading agree.
    pub fn take(&mut self, e: &TaskEntry, each: &mut impl FnMut(&TaskEntry)) -> bool {
        if self.unused >= UNUSED_RUN {
            return false;
        }
        if e.generation == 0 {
            self.unused += 1;
        } else {
            self.unused = 0;
            if holds_task(e) {
                each(e);
            }
        }
        self.unused < UNUSED_RUN
    }
}
