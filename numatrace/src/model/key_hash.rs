//! The hasher of the tables keyed by the kernel's own numbers (task keys, cgroup ids), which
//! are looked up once per task and snapshot.

use std::hash::Hasher;

/// A multiply-rotate hash (as rustc's FxHasher) of keys that are the kernel's own pids, clocks
/// and ids (nothing a user picks), where SipHash would cost more than the rest of a lookup.
#[derive(Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0xf135_7aea_2e62_a9c5);
    }
    fn finish(&self) -> u64 {
        // The table picks buckets by the low bits and tags by the high ones: fold the full
        // product so that both depend on every input bit.
        let m = u128::from(self.0) * 0x9e37_79b9_7f4a_7c15;
        (m as u64) ^ ((m >> 64) as u64)
    }
}
