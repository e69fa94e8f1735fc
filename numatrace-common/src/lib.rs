//! Types shared by numatrace's eBPF programs and its userspace.
//!
//! Everything here is `#[repr(C)]` and plain data: the kernel side writes it into maps and the
//! ring buffer, userspace reads the same bytes. Values of [`EventKind`] and [`Counter`] are
//! never reused once released, so captures stay readable across versions.
#![no_std]

mod events;
mod maps;
mod names;
mod offsets;
mod table;
mod task;

pub use events::*;
pub use maps::*;
pub use names::*;
pub use offsets::*;
pub use table::*;
pub use task::*;

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: all of these are #[repr(C)] plain data with explicit padding fields.
    unsafe impl aya::Pod for Config {}
    unsafe impl aya::Pod for SkipVmaOffsets {}
    unsafe impl aya::Pod for MoveOffsets {}
    unsafe impl aya::Pod for PairOffsets {}
    unsafe impl aya::Pod for MigrateOffsets {}
    unsafe impl aya::Pod for ForkOffsets {}
    unsafe impl aya::Pod for TaskStats {}
    unsafe impl aya::Pod for TaskEntry {}
    unsafe impl aya::Pod for SlotRef {}
    unsafe impl aya::Pod for LastTask {}
    unsafe impl aya::Pod for TaskIterControl {}
    unsafe impl aya::Pod for TaskOffsets {}
    unsafe impl aya::Pod for FuncConfig {}
    unsafe impl aya::Pod for ScanRanges {}
    unsafe impl aya::Pod for Inflight {}
    unsafe impl aya::Pod for PageOffsets {}
    unsafe impl aya::Pod for NodeMap {}
    unsafe impl aya::Pod for VmaKey {}
    unsafe impl aya::Pod for RegionKey {}
    unsafe impl aya::Pod for VmaStats {}
    unsafe impl aya::Pod for GapOffsets {}
    unsafe impl aya::Pod for VmaGap {}
    unsafe impl aya::Pod for TierConfig {}
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use core::mem::size_of;

    #[test]
    fn access_latency_is_the_kernels_masked_difference() {
        // Debian amd64: NR_CPUS 8192, a 21-bit field; the page held the time of the scan.
        let mask = (1 << 21) - 1;
        assert_eq!(
            access_latency_ms(5_000_700, 5_000_000 & mask, mask),
            Some(700)
        );
        // The stored time wrapped past the field's width: still the short latency.
        assert_eq!(access_latency_ms(1 << 21, mask, mask), Some(1));
        // An 8-bit field keeps 16 ms buckets (PAGE_ACCESS_TIME_BUCKETS 4).
        assert_eq!(access_latency_ms(10, 4, 0xff), Some(96));
        assert_eq!(access_latency_ms(1, 0, 0x1234), None, "not a mask");
        assert_eq!(
            access_latency_ms(1, 0, 0xf),
            None,
            "narrower than LAST__PID_SHIFT"
        );
    }

    #[test]
    fn layouts_have_no_implicit_padding() {
        // 4+4+16+4+4, skip_vma[8], then only u64s (bookkeeping, the kept counters, the cgroup
        // id), then two u32 nodes.
        assert_eq!(
            size_of::<TaskStats>(),
            32 + 64 + (TASK_STATS_U64S + 1) * 8 + 8
        );
        assert_eq!(size_of::<TierConfig>(), 8 + 4 * 4 + 8 + 8 + 8 + 8);
        assert_eq!(size_of::<EventHeader>(), 24);
        assert_eq!(size_of::<SkipVmaEvent>(), 24 + 32);
        assert_eq!(size_of::<PlacementEvent>(), 24 + 24);
        assert_eq!(size_of::<MigratePagesEvent>(), 24 + 40);
        assert_eq!(size_of::<TaskExitEvent>(), 24 + size_of::<TaskStats>());
        assert_eq!(size_of::<VmaScanEvent>(), 24 + 24);
        assert_eq!(size_of::<SpanEvent>(), 24 + 24);
        assert_eq!(size_of::<Config>(), 7 * 4);
        assert_eq!(size_of::<TaskIterHead>(), 8);
        assert_eq!(size_of::<TaskIterKey>(), 16);
        assert_eq!(size_of::<TaskIterControl>(), 16);
        // The iterator's records follow one another: each keeps the next one's u64s aligned.
        assert_eq!(size_of::<TaskEntry>() % 8, 0);
        assert_eq!(size_of::<SlotRef>(), 8);
        assert_eq!(size_of::<LastTask>(), 16);
        assert_eq!(size_of::<GapOffsets>(), 10 * 4);
        assert_eq!(size_of::<VmaGap>(), 6 * 8 + 8 * SKIP_REASON_SLOTS);
    }

    #[test]
    fn every_counter_is_listed_once_in_slot_order() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
        assert!(Counter::ALL.len() <= COUNTER_SLOTS as usize);
    }

    #[test]
    fn a_promotion_is_a_move_from_a_slow_tier_to_a_top_one() {
        // Nodes 0-1 top tier, node 2 slow.
        let mut t = TierConfig {
            toptier_mask: 0b011,
            known: 1,
            mode_gated: 1,
            mode: 2,
            threshold_off: 0,
            node_data: 0,
            has_slow: 1,
            threshold_is_sysctl: 0,
            hot_threshold_sym: 0,
            mode_sym: 0,
        };
        assert!(t.promotes(2, 0));
        assert!(t.judges_by_access_time(2, 2) && !t.judges_by_access_time(2, 0));
        assert!(
            !t.judges_by_access_time(1, 2),
            "NUMA mode: pages judged by cpupid"
        );
        assert!(t.may_promote_into(0) && !t.may_promote_into(2));
        assert!(!t.reads_threshold(), "no address: nothing read");
        t.threshold_off = 0x1a40;
        t.node_data = 0xffff_ffff_8300_0000;
        assert!(t.reads_threshold());
        assert!(!t.promotes(0, 1), "top to top is a NUMA migration");
        assert!(!t.promotes(0, 2), "top to slow is not a promotion");
        assert!(!t.promotes(MAX_NODES as u64, 0), "unknown source");
        assert!(t.slow(2) && !t.slow(0));
        t.mode = 1;
        assert!(!t.promotes(2, 0), "6.12+: only in tiering mode");
        assert!(!t.reads_threshold(), "adjusted in tiering mode only");
        t.mode_gated = 0;
        assert!(t.promotes(2, 0), "5.18-6.11: in any mode");
        t.known = 0;
        assert!(!t.promotes(2, 0) && !t.slow(2));
    }

    #[test]
    fn event_kinds_round_trip() {
        for k in 1..=10 {
            assert_eq!(EventKind::from_u32(k).map(|e| e as u32), Some(k));
        }
        assert_eq!(EventKind::from_u32(0), None);
        assert_eq!(EventKind::from_u32(11), None);
    }
}
