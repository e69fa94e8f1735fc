//! Keys and values of the per-VMA, per-region and in-flight maps.

#[allow(unused_imports)]
use crate::*;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionKey {
    pub tgid: u32,
    /// mm->numa_scan_seq when the fault was taken: one scan pass.
    pub scan_seq: u32,
    /// Fault address >> 21.
    pub region: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmaKey {
    pub tgid: u32,
    pub _pad: u32,
    pub vm_start: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmaStats {
    pub vm_end: u64,
    pub pte_updates: u64,
    pub calls: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inflight {
    pub ts_ns: u64,
    pub runtime_ns: u64,
    pub node_stamp: u64,
    pub arg: u64,
    pub arg2: u64,
}

/// One VMA's pid_inactive skips. `gap` = `mm->numa_scan_seq - prev_scan_seq` at the skip;
/// the seed 002 patch scans a VMA once the gap exceeds the thread count instead of skipping it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmaGap {
    pub vm_end: u64,
    pub skips: u64,
    /// Skips with gap > nr_threads: impossible on a patched kernel.
    pub over_threads: u64,
    /// Skips with gap == nr_threads: the VMA reached the patch's threshold.
    pub at_threshold: u64,
    pub max_gap: u64,
    /// nr_threads at the skip with the largest gap.
    pub max_gap_threads: u64,
    pub first_over_ns: u64,
    pub last_ns: u64,
}
