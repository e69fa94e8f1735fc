//! Reading a whole BPF hash map in a few system calls: `BPF_MAP_LOOKUP_BATCH` (5.6+ for hash
//! and LRU hash maps), a chunk of elements per call into buffers that are reused, where
//! iterating costs two calls per element (next key, then lookup) — 200 000 calls for a
//! 100 000-task map.
//!
//! The kernel walks its buckets in order; `out_batch` says where the next call resumes. The
//! last call answers ENOENT with the count it filled; ENOSPC when one bucket holds more
//! elements than the chunk (the chunk then grows). A kernel without the command, or a map type
//! without it, answers EINVAL or ENOTSUPP: the caller falls back to iterating.

use std::{
    io,
    mem::MaybeUninit,
    os::fd::{AsRawFd as _, BorrowedFd},
};

use aya::Pod;

/// `BPF_MAP_LOOKUP_BATCH` (include/uapi/linux/bpf.h, `enum bpf_cmd`).
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
/// The kernel's internal "operation not supported" (not in libc: it never reaches userspace
/// but through bpf(2) and a few others).
const ENOTSUPP: i32 = 524;
/// The largest chunk an ENOSPC may grow to (a bucket with more elements than this is a broken
/// hash, not a map to read).
const MAX_CHUNK: usize = 1 << 16;

/// `union bpf_attr`'s `batch` member, all of it the command reads (the kernel zero-extends a
/// shorter attribute).
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// This kernel or this map type has no batched lookup: iterate instead (nothing was
    /// delivered).
    #[error("batched lookup not supported: {0}")]
    Unsupported(io::Error),
    #[error("batched lookup: {0}")]
    Failed(io::Error),
}

/// What one call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Filled `n` elements; more follow from the returned position.
    More(usize, u32),
    /// Filled `n` elements, the last of the map (ENOENT).
    Done(usize),
    /// The next bucket does not fit in the chunk (ENOSPC).
    TooSmall,
}

impl BatchError {
    /// As aya's error for a failed map system call.
    pub fn into_map_error(self) -> aya::maps::MapError {
        let io_error = match self {
            Self::Unsupported(e) | Self::Failed(e) => e,
        };
        aya::maps::MapError::SyscallError(aya::sys::SyscallError {
            call: "bpf_map_lookup_batch",
            io_error,
        })
    }
}

/// Key and value buffers of one chunk, kept between reads.
pub struct Batch<K, V> {
    keys: Vec<MaybeUninit<K>>,
    values: Vec<MaybeUninit<V>>,
}

impl<K: Pod, V: Pod> Batch<K, V> {
    /// Buffers for `chunk` elements per call.
    pub fn new(chunk: usize) -> Self {
        let mut b = Self {
            keys: Vec::new(),
            values: Vec::new(),
        };
        b.resize(chunk.max(1));
        b
    }

    fn resize(&mut self, n: usize) {
        self.keys.resize_with(n, MaybeUninit::uninit);
        self.values.resize_with(n, MaybeUninit::uninit);
    }

    /// Calls `each` with every element of the hash map behind `fd`, chunk by chunk.
    pub fn read(
        &mut self,
        fd: BorrowedFd<'_>,
        mut each: impl FnMut(&K, &V),
    ) -> Result<(), BatchError> {
        self.read_while(fd, |k, v| {
            each(k, v);
            true
        })
    }

    /// [`Batch::read`], stopped after the chunk in which `each` last returned false (the
    /// elements of that chunk are all given to it).
    pub fn read_while(
        &mut self,
        fd: BorrowedFd<'_>,
        each: impl FnMut(&K, &V) -> bool,
    ) -> Result<(), BatchError> {
        let fd = fd.as_raw_fd() as u32;
        self.drive(
            |from, keys, values| lookup_batch(fd, from, keys, values),
            each,
        )
    }

    /// The walk over calls, apart from the system call (`call(from, keys, values)`) so that it
    /// can be tested.
    fn drive(
        &mut self,
        mut call: impl FnMut(
            Option<u32>,
            &mut [MaybeUninit<K>],
            &mut [MaybeUninit<V>],
        ) -> Result<Answer, BatchError>,
        mut each: impl FnMut(&K, &V) -> bool,
    ) -> Result<(), BatchError> {
        let mut from = None;
        loop {
            let answer = match call(from, &mut self.keys, &mut self.values) {
                // Elements were delivered already: falling back would deliver them twice.
                Err(BatchError::Unsupported(e)) if from.is_some() => {
                    return Err(BatchError::Failed(e));
                }
                r => r?,
            };
            let n = match answer {
                Answer::More(n, _) | Answer::Done(n) => n.min(self.keys.len()),
                Answer::TooSmall => {
                    let grown = self.keys.len() * 2;
                    if grown > MAX_CHUNK {
                        return Err(BatchError::Failed(io::Error::from_raw_os_error(
                            libc::ENOSPC,
                        )));
                    }
                    self.resize(grown);
                    continue;
                }
            };
            // SAFETY: the kernel wrote the first `n` keys and values (`count` on return), and
            // any bit pattern is a valid `Pod`.
            let (keys, values) = unsafe {
                (
                    std::slice::from_raw_parts(self.keys.as_ptr().cast::<K>(), n),
                    std::slice::from_raw_parts(self.values.as_ptr().cast::<V>(), n),
                )
            };
            let mut more = true;
            for (k, v) in keys.iter().zip(values) {
                more &= each(k, v);
            }
            match answer {
                Answer::More(_, next) if more => from = Some(next),
                _ => return Ok(()),
            }
        }
    }
}

/// One `BPF_MAP_LOOKUP_BATCH` from position `from` (None: the start) into `keys`/`values`.
fn lookup_batch<K, V>(
    fd: u32,
    from: Option<u32>,
    keys: &mut [MaybeUninit<K>],
    values: &mut [MaybeUninit<V>],
) -> Result<Answer, BatchError> {
    let in_batch = from.unwrap_or(0);
    let mut out_batch = 0u32;
    let mut attr = BatchAttr {
        in_batch: from.map_or(0, |_| &raw const in_batch as u64),
        out_batch: &raw mut out_batch as u64,
        keys: keys.as_mut_ptr() as u64,
        values: values.as_mut_ptr() as u64,
        count: keys.len().min(values.len()) as u32,
        map_fd: fd,
        ..BatchAttr::default()
    };
    // SAFETY: bpf(2) reads the attribute and writes at most `count` keys and values into the
    // buffers and the u32 position (a hash map's batch token) into `out_batch`, all of which
    // outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_LOOKUP_BATCH,
            &raw mut attr,
            size_of::<BatchAttr>() as u32,
        )
    };
    if r == 0 {
        return Ok(Answer::More(attr.count as usize, out_batch));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOENT) => Ok(Answer::Done(attr.count as usize)),
        Some(libc::ENOSPC) => Ok(Answer::TooSmall),
        Some(libc::EINVAL | ENOTSUPP | libc::EOPNOTSUPP | libc::ENOSYS) => {
            Err(BatchError::Unsupported(e))
        }
        _ => Err(BatchError::Failed(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a batched call does to the buffers, as the walk sees it.
    type Call<'a> = Box<
        dyn FnMut(
                Option<u32>,
                &mut [MaybeUninit<u32>],
                &mut [MaybeUninit<u64>],
            ) -> Result<Answer, BatchError>
            + 'a,
    >;

    /// A fake kernel over `map`, in buckets of `bucket` elements: what bpf(2) answers.
    fn fake(map: &[(u32, u64)], bucket: usize) -> Call<'_> {
        Box::new(move |from, keys, values| {
            let start = from.unwrap_or(0) as usize * bucket;
            if start >= map.len() {
                return Ok(Answer::Done(0));
            }
            // Whole buckets only, as the kernel copies them.
            let fit = keys.len() / bucket * bucket;
            if fit == 0 {
                return Ok(Answer::TooSmall);
            }
            let end = (start + fit).min(map.len());
            for (i, (k, v)) in map[start..end].iter().enumerate() {
                keys[i].write(*k);
                values[i].write(*v);
            }
            if end == map.len() {
                Ok(Answer::Done(end - start))
            } else {
                Ok(Answer::More(end - start, (end / bucket) as u32))
            }
        })
    }

    fn read_with(map: &[(u32, u64)], bucket: usize, chunk: usize) -> (Vec<(u32, u64)>, usize) {
        let mut b = Batch::<u32, u64>::new(chunk);
        let mut got = Vec::new();
        b.drive(fake(map, bucket), |k, v| {
            got.push((*k, *v));
            true
        })
        .unwrap();
        (got, b.keys.len())
    }

    #[test]
    fn every_element_once_across_chunks_and_a_partial_last_one() {
        let map: Vec<(u32, u64)> = (0..1000).map(|i| (i, u64::from(i) * 3)).collect();
        for chunk in [1, 7, 64, 999, 1000, 4096] {
            let (got, _) = read_with(&map, 1, chunk);
            assert_eq!(got, map, "chunk {chunk}");
        }
        assert_eq!(read_with(&[], 1, 16).0, vec![]);
    }

    #[test]
    fn a_read_while_stops_after_the_chunk_that_said_so() {
        let map: Vec<(u32, u64)> = (0..100).map(|i| (i, 1)).collect();
        let mut b = Batch::<u32, u64>::new(8);
        let mut got = Vec::new();
        b.drive(fake(&map, 1), |k, _| {
            got.push(*k);
            *k != 19
        })
        .unwrap();
        assert_eq!(
            got,
            (0..24).collect::<Vec<_>>(),
            "the chunk of 16..24 whole, no more"
        );
    }

    #[test]
    fn a_bucket_larger_than_the_chunk_grows_it() {
        let map: Vec<(u32, u64)> = (0..100).map(|i| (i, 1)).collect();
        let (got, chunk) = read_with(&map, 10, 3);
        assert_eq!(got, map);
        assert_eq!(
            chunk, 12,
            "3 → 6 → 12: the first size a 10-element bucket fits"
        );
    }

    #[test]
    fn unsupported_and_failures_are_told_apart() {
        let mut b = Batch::<u32, u64>::new(4);
        let r = b.drive(
            |_, _, _| {
                Err(BatchError::Unsupported(io::Error::from_raw_os_error(
                    libc::EINVAL,
                )))
            },
            |_, _| true,
        );
        assert!(matches!(r, Err(BatchError::Unsupported(_))));
        let r = b.drive(|_, _, _| Ok(Answer::TooSmall), |_, _| true);
        assert!(
            matches!(r, Err(BatchError::Failed(_))),
            "never grows forever"
        );
    }
}
