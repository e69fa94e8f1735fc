//! Reading the task map through the kernel side's iterator program (`iter_tasks`, 5.9+ with
//! kernel BTF): each entry a program took since the previous read comes in full, every other
//! one as its key, so that a read of 100 000 mostly idle tasks copies a few entries and 16 bytes
//! for each of the others instead of 70 MiB.
//!
//! Programs stamp an entry when they take it, before they count in it; a read sends in full
//! what was stamped at or after the previous read's start less a margin ([`super::stamps`]).
//!
//! The kernel walks the map's buckets under RCU alone, resuming each read(2) at a position in
//! a bucket: an entry deleted or reused meanwhile can make the walk miss or repeat another one
//! (a batched lookup copies each bucket under its lock). So the caller checks what a read did
//! not meet, and reads the map whole in batches where it must be exact: the first read, every
//! [`super::stamps::FULL_EVERY`], after a read that did not complete, and for a report's final
//! counts. Before such a read, [`TaskIter::start_whole`] takes the jiffies the next
//! changed-only read starts from.

use std::{
    fs::File,
    io::{self, Read as _},
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
};

use aya::{
    Btf, Ebpf,
    maps::{Array, MapData, MapError},
    programs::{Iter, ProgramError},
};
use numatrace_common::{
    MAP_TASK_ITER, PROG_ITER_TASKS, TASK_ITER_ALL, TASK_ITER_CHANGED, TASK_ITER_CLOCK,
    TASK_ITER_KEY, TASK_ITER_VALUE, TaskEntry, TaskIterControl, TaskIterHead, TaskIterKey,
};

use super::stamps::Stamps;

/// `enum bpf_cmd` and `enum bpf_attach_type` (include/uapi/linux/bpf.h).
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
const BPF_TRACE_ITER: u32 = 28;

/// One record of a read.
#[derive(Clone, Copy, Debug)]
pub enum TaskRec<'a> {
    /// A whole entry.
    Entry(&'a TaskEntry),
    /// An entry no program took since the previous read sent it: (pid, first_ns).
    Unchanged(u32, u64),
}

#[derive(Debug, thiserror::Error)]
pub enum IterError {
    #[error("loading the task iterator: {0}")]
    Load(#[from] ProgramError),
    #[error("the task iterator's control map: {0}")]
    Map(#[from] MapError),
    #[error("{call}: {source}")]
    Syscall {
        call: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("the task iterator sent a malformed record (tag {tag:#x} at byte {at})")]
    Malformed { tag: u32, at: usize },
    /// The walk that only reads the kernel's clock sent entries: the program is not the one
    /// this reader was built with.
    #[error("the task iterator's clock walk sent {0} records (it sends none)")]
    ClockWalkSentRecords(usize),
}

impl IterError {
    /// Whether the next read may well succeed: a system call or the control map failing (memory
    /// short), not a program that sends what this reader does not expect, nor `EAGAIN`: the
    /// kernel's answer to a read(2) that walked a million entries sending nothing, which a
    /// map that large gives every clock walk.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Syscall { source, .. } => source.raw_os_error() != Some(libc::EAGAIN),
            Self::Map(_) => true,
            _ => false,
        }
    }
}

/// How many failed reads in a row the iterator is given before it is dropped for good.
pub const ITER_TRIES: u32 = 3;

/// Whether to keep the iterator after its walks fail: a transient failure is tried again at
/// the next read, up to [`ITER_TRIES`] in a row (until a changed-only read succeeds); any other
/// is final. Meanwhile the map is read in batches, which is exact, only slower.
#[derive(Debug, Default)]
pub struct IterRetry {
    failed_in_a_row: u32,
}

/// What to do with the iterator after a failed read.
#[derive(Debug, PartialEq, Eq)]
pub enum AfterFailure {
    /// Keep it: read in batches this time, through it next time (the failures in a row).
    TryAgain(u32),
    /// Drop it (its program detached): batched reads from now on.
    Drop,
}

impl IterRetry {
    pub fn succeeded(&mut self) {
        self.failed_in_a_row = 0;
    }

    pub fn failed(&mut self, e: &IterError) -> AfterFailure {
        self.failed_in_a_row += 1;
        if e.is_transient() && self.failed_in_a_row < ITER_TRIES {
            AfterFailure::TryAgain(self.failed_in_a_row)
        } else {
            AfterFailure::Drop
        }
    }
}

/// `union bpf_attr`'s `link_create` with `iter_info` (the map to walk).
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    iter_info: u64,
    iter_info_len: u32,
    _pad: u32,
}

/// `union bpf_attr`'s `iter_create`.
#[repr(C)]
#[derive(Default)]
struct IterCreateAttr {
    link_fd: u32,
    flags: u32,
}

fn bpf<A>(cmd: libc::c_long, attr: &A, call: &'static str) -> Result<OwnedFd, IterError> {
    // SAFETY: `attr` is a `union bpf_attr` prefix of its size; the kernel zero-extends it and
    // returns a new descriptor on success.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            (attr as *const A).cast::<libc::c_void>(),
            size_of::<A>() as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(IterError::Syscall {
            call,
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: a descriptor the kernel has just handed to this process alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The iterator over one task map: its program's link (closed, and so detached, when dropped).
pub struct TaskIter {
    link: OwnedFd,
    control: Array<MapData, TaskIterControl>,
    /// Read buffer, kept between reads; u64s so that each record starts 8-byte aligned.
    buf: Vec<u64>,
    /// `since` of the next read, and when the latest [`TaskIter::read_all`] or
    /// [`TaskIter::start_whole`] completed.
    stamps: Stamps,
}

impl TaskIter {
    /// Loads the iterator program and binds it to `tasks` (the task map's descriptor).
    pub fn open(ebpf: &mut Ebpf, btf: &Btf, tasks: BorrowedFd<'_>) -> Result<Self, IterError> {
        let prog: &mut Iter = ebpf
            .program_mut(PROG_ITER_TASKS)
            .ok_or(ProgramError::NotLoaded)?
            .try_into()?;
        prog.load("bpf_map_elem", btf)?;
        let prog_fd = prog.fd()?.as_fd().as_raw_fd() as u32;
        let map_fd: u32 = tasks.as_raw_fd() as u32;
        // `union bpf_iter_link_info`'s `map` member: the kernel zero-extends a shorter one.
        let attr = LinkCreateAttr {
            prog_fd,
            attach_type: BPF_TRACE_ITER,
            iter_info: (&raw const map_fd) as u64,
            iter_info_len: size_of::<u32>() as u32,
            ..LinkCreateAttr::default()
        };
        let link = bpf(BPF_LINK_CREATE, &attr, "bpf_link_create (task iterator)")?;
        let control = ebpf
            .take_map(MAP_TASK_ITER)
            .ok_or(MapError::InvalidName {
                name: MAP_TASK_ITER.into(),
            })
            .and_then(Array::try_from)?;
        Ok(Self {
            link,
            control,
            buf: vec![0; 64 * 1024 / 8],
            stamps: Stamps::default(),
        })
    }

    /// The low bits of jiffies from which the next read sends an entry whole (the previous
    /// read's start less the margin); `None`: the next read must be whole.
    pub fn since(&self) -> Option<u32> {
        self.stamps.since()
    }

    /// Jiffies before the previous read's start from which the next read sends a stamp whole.
    pub fn margin(&self) -> u32 {
        self.stamps.margin()
    }

    /// The kernel's HZ, known (see [`super::stamps::Jiffies`]): the margin follows it from the
    /// first read, not from reads a second apart.
    pub fn set_hz(&mut self, hz: u64) {
        self.stamps.set_hz(hz);
    }

    /// Whether the next read may send only what changed (see [`Stamps::changed_only`]).
    pub fn changed_only(&self) -> bool {
        self.stamps.changed_only()
    }

    /// The next read must be whole (a read whose records were not all taken in).
    pub fn invalidate(&mut self) {
        self.stamps.invalidate();
    }

    /// Before the caller reads the map whole another way (batched): a walk that sends nothing
    /// and takes its start, from which the next changed-only read sends entries whole.
    pub fn start_whole(&mut self) -> Result<(), IterError> {
        self.run(TASK_ITER_CLOCK, true, |_| {})
    }

    /// Every entry whole.
    pub fn read_all(&mut self, each: impl FnMut(TaskRec<'_>)) -> Result<(), IterError> {
        self.run(TASK_ITER_ALL, true, each)
    }

    /// Whole the entries stamped since the previous read began (less the margin), every other
    /// one as its key (every entry whole when no read has completed since the last
    /// [`TaskIter::invalidate`]; such a walk does not count as a whole read). The walk may miss
    /// an entry, or meet one twice (see the module's comment).
    pub fn read_changed(&mut self, each: impl FnMut(TaskRec<'_>)) -> Result<(), IterError> {
        let mode = if self.stamps.since().is_some() {
            TASK_ITER_CHANGED
        } else {
            TASK_ITER_ALL
        };
        self.run(mode, false, each)
    }

    /// One walk; `whole`: it counts as a whole read once completed.
    fn run(
        &mut self,
        mode: u32,
        whole: bool,
        mut each: impl FnMut(TaskRec<'_>),
    ) -> Result<(), IterError> {
        let mut records = 0usize;
        let mut each = |r: TaskRec<'_>| {
            records += 1;
            each(r)
        };
        let control = TaskIterControl {
            since: self.stamps.since().unwrap_or(0),
            mode,
            started: 0,
        };
        // Until this read has completed, the next is whole.
        self.stamps.invalidate();
        self.control.set(0, &control, 0)?;
        let attr = IterCreateAttr {
            link_fd: self.link.as_raw_fd() as u32,
            flags: 0,
        };
        let mut file = File::from(bpf(
            BPF_ITER_CREATE,
            &attr,
            "bpf_iter_create (task iterator)",
        )?);
        let mut have = 0;
        loop {
            if have == self.buf.len() * 8 {
                // A record longer than the buffer: never with these sizes, but not a loop.
                self.buf.resize(self.buf.len() * 2, 0);
            }
            let bytes = bytes_mut(&mut self.buf);
            let n = match file.read(&mut bytes[have..]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(IterError::Syscall {
                        call: "read (task iterator)",
                        source,
                    });
                }
            };
            if n == 0 {
                break;
            }
            have += n;
            let used = parse(&self.buf, have, &mut each)?;
            bytes_mut(&mut self.buf).copy_within(used..have, 0);
            have -= used;
        }
        if have != 0 {
            return Err(IterError::Malformed { tag: 0, at: have });
        }
        if mode == TASK_ITER_CLOCK && records > 0 {
            return Err(IterError::ClockWalkSentRecords(records));
        }
        let started = self.control.get(&0, 0)?.started as u32;
        self.stamps.completed(started, whole);
        Ok(())
    }
}

fn bytes_mut(buf: &mut [u64]) -> &mut [u8] {
    // SAFETY: any bytes are valid u64s and u8s; the length is the slice's in bytes.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), buf.len() * 8) }
}

const VALUE_LEN: usize = size_of::<TaskIterHead>() + size_of::<TaskEntry>();
const KEY_LEN: usize = size_of::<TaskIterKey>();

/// Hands the whole records of the first `have` bytes of `buf` to `each`: how many bytes they
/// took (a record cut at the end waits for the next read).
fn parse(buf: &[u64], have: usize, each: &mut impl FnMut(TaskRec<'_>)) -> Result<usize, IterError> {
    let base = buf.as_ptr().cast::<u8>();
    let mut at = 0;
    while have - at >= 4 {
        // Records are multiples of 8 bytes and the buffer is u64-aligned: every record, and the
        // entry after its head, is aligned for its type.
        debug_assert!(at % 8 == 0);
        // SAFETY: 4 bytes within the `have` bytes read, aligned.
        let tag = unsafe { base.add(at).cast::<u32>().read() };
        let len = match tag {
            TASK_ITER_VALUE => VALUE_LEN,
            TASK_ITER_KEY => KEY_LEN,
            tag => return Err(IterError::Malformed { tag, at }),
        };
        if have - at < len {
            break;
        }
        // SAFETY: `len` bytes within those read, aligned (above); both types are plain data
        // for which any bytes are a value.
        unsafe {
            if tag == TASK_ITER_VALUE {
                let e = &*base.add(at + size_of::<TaskIterHead>()).cast::<TaskEntry>();
                each(TaskRec::Entry(e));
            } else {
                let k = base.add(at).cast::<TaskIterKey>().read();
                each(TaskRec::Unchanged(k.pid, k.first_ns));
            }
        }
        at += len;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push<T: Copy>(out: &mut Vec<u8>, v: &T) {
        // SAFETY: a plain-data value read as its bytes.
        let b = unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) };
        out.extend_from_slice(b);
    }

    fn syscall_error() -> IterError {
        IterError::Syscall {
            call: "read (task iterator)",
            source: io::Error::from_raw_os_error(libc::ENOMEM),
        }
    }

    /// A transient failure is tried again, up to ITER_TRIES in a row; a success starts the
    /// count again; a malformed record drops the iterator at once.
    #[test]
    fn transient_failures_are_tried_again_a_few_times_in_a_row() {
        let mut r = IterRetry::default();
        assert_eq!(r.failed(&syscall_error()), AfterFailure::TryAgain(1));
        assert_eq!(r.failed(&syscall_error()), AfterFailure::TryAgain(2));
        r.succeeded();
        for n in 1..ITER_TRIES {
            assert_eq!(r.failed(&syscall_error()), AfterFailure::TryAgain(n));
        }
        assert_eq!(r.failed(&syscall_error()), AfterFailure::Drop);

        let mut r = IterRetry::default();
        assert_eq!(
            r.failed(&IterError::Malformed { tag: 7, at: 0 }),
            AfterFailure::Drop
        );
        let mut r = IterRetry::default();
        assert_eq!(
            r.failed(&IterError::ClockWalkSentRecords(2)),
            AfterFailure::Drop
        );
        // A million entries walked with nothing sent: the map's size, not a passing state.
        let mut r = IterRetry::default();
        let eagain = IterError::Syscall {
            call: "read (task iterator)",
            source: io::Error::from_raw_os_error(libc::EAGAIN),
        };
        assert_eq!(r.failed(&eagain), AfterFailure::Drop);
    }

    /// Records cut anywhere between reads come out whole, once each, in order; an unknown tag
    /// is an error, not a skip.
    #[test]
    fn records_cut_between_reads_come_out_whole() {
        let mut stream = Vec::new();
        let mut want = Vec::new();
        for i in 0..40u32 {
            if i % 3 == 0 {
                let mut e = TaskEntry::default();
                e.stats.pid = i;
                e.stats.first_ns = u64::from(i) * 10;
                push(
                    &mut stream,
                    &TaskIterHead {
                        tag: TASK_ITER_VALUE,
                        _pad: 0,
                    },
                );
                push(&mut stream, &e);
                want.push((true, i, u64::from(i) * 10));
            } else {
                push(
                    &mut stream,
                    &TaskIterKey {
                        tag: TASK_ITER_KEY,
                        pid: i,
                        first_ns: 7,
                    },
                );
                want.push((false, i, 7));
            }
        }
        for cut in [1, 4, 9, 16, 100, 729, 4096] {
            let mut buf = vec![0u64; 1024];
            let mut have = 0;
            let mut got = Vec::new();
            for piece in stream.chunks(cut) {
                bytes_mut(&mut buf)[have..have + piece.len()].copy_from_slice(piece);
                have += piece.len();
                let used = parse(&buf, have, &mut |r| {
                    got.push(match r {
                        TaskRec::Entry(e) => (true, e.stats.pid, e.stats.first_ns),
                        TaskRec::Unchanged(p, f) => (false, p, f),
                    })
                })
                .unwrap();
                bytes_mut(&mut buf).copy_within(used..have, 0);
                have -= used;
            }
            assert_eq!(have, 0, "cut {cut}");
            assert_eq!(got, want, "cut {cut}");
        }
        let mut bad = vec![0u64; 4];
        bytes_mut(&mut bad)[..4].copy_from_slice(&0xdead_u32.to_ne_bytes());
        assert!(matches!(
            parse(&bad, 32, &mut |_| {}),
            Err(IterError::Malformed { tag: 0xdead, at: 0 })
        ));
    }
}
